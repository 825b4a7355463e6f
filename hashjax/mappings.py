r"""Hash mappings: learnable functions from features to per-bit logits.

A mapping computes logits ``f(x)[..., num_bits]``; the code is its sign
(He et al. 2018, eq. 6) and training uses a smooth stand-in::

  features --mapping(params)--> logits --hashjax.codes.binarize--> bits --pack_bits--> words
                                       \--hashjax.relaxations.relax--> 2 sigma(alpha f) - 1

Three flax (``flax.linen``) modules are provided:

* :class:`Linear`: ``f(x) = W^T x + b`` with ``W[dim, num_bits]``, the
  parameterisation of Nair et al. 2012 (eq. 1, before the sigmoid) and the
  shallow model of He et al. 2018;
* :class:`MLP`: hidden layers of configurable widths and activation, then a
  linear output layer of ``num_bits`` logits;
* :class:`CNN`: the flattened features read as an image, convolution and
  max-pooling blocks, dense hidden layers, then ``num_bits`` logits.

``flax.linen`` (rather than ``flax.nnx``) because its parameters are a plain
pytree of arrays, which is what ``optax`` updates and ``orbax`` checkpoints
without any splitting/merging, and its modules are hashable, immutable
descriptions, so a module can be a static argument of ``jax.jit``.

Every module can centre or standardise its inputs with statistics of the
training set, ``x -> (x - mean) / scale``. These are constants of the module
(passed in, see :func:`feature_stats`), never parameters: the optimizer
cannot move them and they are not part of ``params``.

Every module computes its matrix products and convolutions in full float32
(``jax.lax.Precision.HIGHEST``) on every backend, so their logits are
float32-accurate on a GPU too (whose default for float32 products is TF32),
and :func:`encode` gives the same codes for the same features in any batch.

The functional façade (:func:`make_mapping`, :func:`init`, :func:`apply`,
:func:`encode`) is what training code and experiments use, so they do not
depend on which module is behind a name.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Optional, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from hashjax import _checks
from hashjax import _encode
from hashjax import codes

Array = jax.Array

__all__ = [
    "Linear", "MLP", "CNN", "Constant", "MAPPINGS", "ACTIVATIONS", "INITS", "NAIR_VARIANCE",
    "DEFAULT_HIDDEN", "DEFAULT_IMAGE_SHAPE", "DEFAULT_CHANNELS", "DEFAULT_CNN_HIDDEN", "ENCODE_BLOCK_ROWS",
    "make_mapping", "init", "apply", "encode", "feature_stats", "alpha_schedule",
]

#: Names accepted by :func:`make_mapping`.
MAPPINGS = ("linear", "mlp", "cnn")
#: Hidden-layer activations of :class:`MLP` and :class:`CNN`, by name (names keep modules hashable and configs plain).
ACTIVATIONS = {
    "relu": jax.nn.relu,
    "tanh": jnp.tanh,
    "sigmoid": jax.nn.sigmoid,
    "gelu": jax.nn.gelu,
    "elu": jax.nn.elu,
    "silu": jax.nn.silu,
    "softplus": jax.nn.softplus,
}
#: Weight initialisations: ``"lecun"`` (flax's default, truncated normal of
#: variance ``1 / fan_in``) and ``"nair"`` (Nair et al. 2012, Sec. 4: zero-mean
#: Gaussian of variance :data:`NAIR_VARIANCE`). Biases always start at zero.
INITS = ("lecun", "nair")
#: Variance of the ``"nair"`` weight initialisation.
NAIR_VARIANCE = 1e-3
#: Hidden widths of ``make_mapping("mlp", ...)`` when ``hidden`` is not given.
DEFAULT_HIDDEN = (256,)
#: ``image_shape`` ``(height, width, channels)`` of ``make_mapping("cnn", ...)`` when not given: an MNIST digit.
DEFAULT_IMAGE_SHAPE = (28, 28, 1)
#: Convolution channels of ``make_mapping("cnn", ...)`` when ``channels`` is not given (one block each).
DEFAULT_CHANNELS = (16, 32)
#: Hidden widths of ``make_mapping("cnn", ...)`` when ``hidden`` is not given.
DEFAULT_CNN_HIDDEN = (128,)
#: Rows of each jit call of :func:`encode` (a fixed block; the last one is padded).
ENCODE_BLOCK_ROWS = _encode.BLOCK_ROWS


# ----------------------------------------------------------------------------
# Module constants and checks.


class Constant:
  """A read-only array held by a module, hashed and compared by value.

  flax modules are hashable dataclasses (so they can be static under
  ``jax.jit``); a raw array attribute would make them unhashable. ``Constant``
  copies the array, freezes it, and hashes its dtype, shape and bytes.

  >>> Constant(np.array([1.0, 2.0])) == Constant(np.array([1.0, 2.0]))
  True
  """

  __slots__ = ("value", "_hash")

  def __init__(self, value: Any):
    v = np.array(value, copy=True)
    v.setflags(write=False)
    self.value = v
    self._hash = hash((v.dtype.str, v.shape, v.tobytes()))

  def __hash__(self) -> int:
    return self._hash

  def __eq__(self, other: Any) -> bool:
    return (isinstance(other, Constant) and self.value.dtype == other.value.dtype
            and self.value.shape == other.value.shape
            and bool(np.array_equal(self.value, other.value)))

  def __repr__(self) -> str:
    return f"Constant(dtype={self.value.dtype.name}, shape={self.value.shape})"


def _as_float(x: Any) -> Array:
  # Integer features (e.g. uint8 pixels) become float32; float dtypes are kept.
  x = jnp.asarray(x)
  return x if jnp.issubdtype(x.dtype, jnp.floating) else x.astype(jnp.float32)


def check_mapping(mapping: Any) -> None:
  """``mapping`` must be a module of :func:`make_mapping` (the rule of every function that takes one)."""
  _checks.check_type("mapping", mapping, (Linear, MLP, CNN), what="a hashjax.mappings module from make_mapping")


def _check_features(name: str, features: Any, mapping: Any, params: Any = None) -> None:
  """``mapping`` a module of :func:`make_mapping` and ``features[..., dim]`` finite reals, ``dim`` its input width
  (a CNN's: the product of its ``image_shape``; else that of ``params`` when given, else that of its ``mean`` /
  ``scale`` when set)."""
  check_mapping(mapping)
  dim = _stat_dim(mapping) if params is None else _param_dim(mapping, params)
  _checks.check_real(name, features, shape_doc="[..., dim]", min_ndim=1, nonempty="feature column")
  if dim is not None:
    what = (f"the product of the mapping's image_shape {mapping.image_shape}" if isinstance(mapping, CNN)
            else "the input width of the mapping")
    _checks.check_columns(name, features, dim, what=what)


def _kernel_init(init_name: str) -> Callable:
  if init_name == "nair":
    return nn.initializers.normal(stddev=math.sqrt(NAIR_VARIANCE))
  return nn.initializers.lecun_normal()


def _standardize(module: Any, x: Array) -> Array:
  x = _as_float(x)
  if module.mean is not None:
    x = x - jnp.asarray(module.mean.value, x.dtype)
  if module.scale is not None:
    x = x / jnp.asarray(module.scale.value, x.dtype)
  return x


# ----------------------------------------------------------------------------
# Modules.


class Linear(nn.Module):
  r"""Linear hash mapping: per-bit logits ``f(x) = W^T x + b``.

  .. math:: f_j(x) = \sum_i W_{ij} \, \tilde x_i + b_j, \qquad \tilde x = (x - \mu) / s

  Parameters are ``{"kernel": W[dim, num_bits], "bias": b[num_bits]}``.
  Prefer :func:`make_mapping`, which validates the options.

  Attributes:
    num_bits: code length ``b``.
    weight_init: ``"lecun"`` or ``"nair"`` (weights ``~ N(0, 1e-3)``), see :data:`INITS`
      (``make_mapping``'s ``init=``; ``init`` itself is the flax method).
    mean: optional :class:`Constant` ``[dim]`` subtracted from the inputs.
    scale: optional :class:`Constant` ``[dim]`` (positive) dividing the centred inputs.
    param_dtype: dtype of the parameters.

  >>> import jax, jax.numpy as jnp
  >>> m = Linear(num_bits=4)
  >>> m.apply(m.init(jax.random.key(0), jnp.ones((1, 3))), jnp.ones((2, 3))).shape
  (2, 4)
  """
  num_bits: int
  weight_init: str = "lecun"
  mean: Optional[Constant] = None
  scale: Optional[Constant] = None
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, features: Array) -> Array:
    x = _standardize(self, features)
    kernel = self.param("kernel", _kernel_init(self.weight_init), (x.shape[-1], self.num_bits),
                        self.param_dtype)
    bias = self.param("bias", nn.initializers.zeros_init(), (self.num_bits,), self.param_dtype)
    x, kernel, bias = nn.dtypes.promote_dtype(x, kernel, bias)
    return _encode.matmul(x, kernel) + bias


class MLP(nn.Module):
  r"""Multi-layer perceptron hash mapping: hidden layers, then ``num_bits`` logits.

  .. math:: h_0 = \tilde x, \quad h_{l} = \sigma(W_l^T h_{l-1} + b_l), \quad f(x) = W_o^T h_L + b_o

  Parameters are ``{"hidden_0": {"kernel", "bias"}, ..., "output": {"kernel", "bias"}}``.
  Prefer :func:`make_mapping`, which validates the options.

  Attributes:
    num_bits: code length ``b``.
    hidden: widths of the hidden layers, at least one.
    activation: a name in :data:`ACTIVATIONS`.
    weight_init: ``"lecun"`` or ``"nair"``; applies to every layer's weights.
    mean, scale: optional :class:`Constant` input statistics, as in :class:`Linear`.
    param_dtype: dtype of the parameters.

  >>> import jax, jax.numpy as jnp
  >>> m = MLP(num_bits=4, hidden=(8, 8))
  >>> m.apply(m.init(jax.random.key(0), jnp.ones((1, 3))), jnp.ones((2, 3))).shape
  (2, 4)
  """
  num_bits: int
  hidden: tuple = DEFAULT_HIDDEN
  activation: str = "relu"
  weight_init: str = "lecun"
  mean: Optional[Constant] = None
  scale: Optional[Constant] = None
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, features: Array) -> Array:
    x = _standardize(self, features)
    act = ACTIVATIONS[self.activation]
    return _dense_head(self, x, act)


def _dense_head(module: Any, x: Array, act: Callable) -> Array:
  """The dense layers ``hidden_i`` (with ``act``) and the ``output`` logits of an MLP or a CNN, built inside its
  compact ``__call__`` at full precision."""
  dense = lambda width, name: nn.Dense(width, kernel_init=_kernel_init(module.weight_init),
                                       param_dtype=module.param_dtype, precision=jax.lax.Precision.HIGHEST, name=name)
  for i, width in enumerate(module.hidden):
    x = act(dense(width, f"hidden_{i}")(x))
  return dense(module.num_bits, "output")(x)


def _max_pool_2x2(x: Array) -> Array:
  """``x[N, H, W, C]`` max-pooled over 2x2 windows of stride 2 (an odd side's last row / column dropped).

  The values of ``flax.linen.max_pool(x, (2, 2), strides=(2, 2))``, as a max over a reshape: its gradient is a
  few times faster on a CPU than the select-and-scatter of ``max_pool``'s.
  """
  n, h, w, c = x.shape
  x = x[:, :h - h % 2, :w - w % 2, :]
  return x.reshape(n, h // 2, 2, w // 2, 2, c).max(axis=(2, 4))


class CNN(nn.Module):
  r"""Convolutional hash mapping: the features read as an image, conv blocks, dense layers, ``num_bits`` logits.

  .. math:: h_0 = \mathrm{image}(\tilde x), \quad h_l = \mathrm{maxpool}_{2 \times 2}(\sigma(K_l * h_{l-1} + c_l)),
            \quad g_0 = \mathrm{flat}(h_L), \quad g_k = \sigma(W_k^T g_{k-1} + b_k), \quad f(x) = W_o^T g_K + b_o

  The features ``x[..., H * W * C]`` (standardised as in :class:`Linear`) are
  reshaped to ``[N, H, W, C]`` images (row-major: ``x[(i * W + j) * C + c]``
  is pixel ``(i, j)``, channel ``c``). Each entry of ``channels`` is a block:
  a 3x3 convolution (stride 1, ``"SAME"`` zero padding) with that many output
  channels, the activation, and a 2x2 max pool of stride 2 (an odd side
  drops its last row or column). 3x3 rather than 5x5 kernels: a third of the
  multiply-adds per output (9 against 25 taps), and two blocks with pooling
  between them already see a 10x10 pixel window of the input (more than a
  third of a 28x28 digit); a larger field comes from more blocks. The last
  block's maps are flattened (``(i, j, c)`` row-major), then go through the
  dense ``hidden`` layers with the activation, then a dense layer of
  ``num_bits`` logits. No batch normalisation, so the logits of a row depend
  on that row and the parameters alone (no running statistics to carry).

  Parameters are ``{"conv_0": {"kernel": [3, 3, C, c_0], "bias": [c_0]}, ...,
  "hidden_0": {"kernel", "bias"}, ..., "output": {"kernel", "bias"}}``.
  Prefer :func:`make_mapping`, which validates the options.

  Attributes:
    num_bits: code length ``b``.
    image_shape: ``(H, W, C)``, whose product is the feature width.
    channels: output channels of the convolution blocks, at least one.
    hidden: widths of the dense hidden layers (may be empty).
    activation: a name in :data:`ACTIVATIONS`, after every convolution and hidden layer.
    weight_init: ``"lecun"`` or ``"nair"``; applies to every kernel.
    mean, scale: optional :class:`Constant` ``[H * W * C]`` input statistics, as in :class:`Linear`.
    param_dtype: dtype of the parameters.

  >>> import jax, jax.numpy as jnp
  >>> m = CNN(num_bits=4, image_shape=(6, 6, 1), channels=(2,), hidden=(8,))
  >>> m.apply(m.init(jax.random.key(0), jnp.ones((1, 36))), jnp.ones((2, 36))).shape
  (2, 4)
  """
  num_bits: int
  image_shape: tuple = DEFAULT_IMAGE_SHAPE
  channels: tuple = DEFAULT_CHANNELS
  hidden: tuple = DEFAULT_CNN_HIDDEN
  activation: str = "relu"
  weight_init: str = "lecun"
  mean: Optional[Constant] = None
  scale: Optional[Constant] = None
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, features: Array) -> Array:
    x = _standardize(self, features)
    lead = x.shape[:-1]
    x = x.reshape((-1,) + tuple(self.image_shape))
    act = ACTIVATIONS[self.activation]
    for i, width in enumerate(self.channels):
      x = act(nn.Conv(width, (3, 3), padding="SAME", kernel_init=_kernel_init(self.weight_init),
                      param_dtype=self.param_dtype, precision=jax.lax.Precision.HIGHEST, name=f"conv_{i}")(x))
      x = _max_pool_2x2(x)
    x = x.reshape(x.shape[0], -1)
    return _dense_head(self, x, act).reshape(lead + (self.num_bits,))


# ----------------------------------------------------------------------------
# Functional façade.


def _check_stat(name: str, value: Any, *, positive: bool) -> Constant:
  _checks.check_real(name, value, shape_doc="[dim] of per-feature statistics", ndim=1)
  if positive:
    _checks.check_numbers(name, value, low=0, low_open=True)
  return Constant(np.asarray(value))


def make_mapping(name: str, *, num_bits: int, hidden: Optional[Sequence[int]] = None,
                 activation: Optional[str] = None, init: str = "lecun", mean: Any = None,
                 scale: Any = None, param_dtype: Any = jnp.float32, image_shape: Optional[Sequence[int]] = None,
                 channels: Optional[Sequence[int]] = None) -> nn.Module:
  r"""Builds a hash mapping module by name, validating every option.

  .. math:: f : \mathbb{R}^{dim} \to \mathbb{R}^{b}, \qquad \phi(x) = \mathrm{sgn}(f(x))

  Args:
    name: ``"linear"``, ``"mlp"`` or ``"cnn"`` (see :data:`MAPPINGS`).
    num_bits: code length ``b >= 1``.
    hidden: hidden widths (positive ints): the MLP's, at least one, default
      :data:`DEFAULT_HIDDEN`; the CNN's dense layers after the convolutions,
      possibly none (``()``), default :data:`DEFAULT_CNN_HIDDEN`. Must be
      ``None`` or empty for ``"linear"``.
    activation: MLP / CNN hidden activation, a name in :data:`ACTIVATIONS`;
      default ``"relu"``. Must be ``None`` for ``"linear"``.
    init: ``"lecun"`` (flax default) or ``"nair"``: weights ``~ N(0, 1e-3)``
      (Nair et al. 2012, Sec. 4); biases start at zero either way.
    mean: optional ``[dim]`` training mean subtracted from inputs (not learned).
    scale: optional positive ``[dim]`` scale dividing the centred inputs (not
      learned); see :func:`feature_stats`.
    param_dtype: parameter dtype (``jnp.float64`` needs ``jax.enable_x64``).
    image_shape: ``"cnn"`` only: ``(height, width, channels)``, three positive
      ints whose product is the feature width (that of ``mean`` / ``scale``
      when given), height and width at least ``2 ** len(channels)``; default
      :data:`DEFAULT_IMAGE_SHAPE`.
    channels: ``"cnn"`` only: output channels of its 3x3 convolution blocks,
      one or more positive ints; default :data:`DEFAULT_CHANNELS`.

  Returns:
    A :class:`Linear`, :class:`MLP` or :class:`CNN` module (hashable, usable as a jit static argument).

  >>> make_mapping("mlp", num_bits=16, hidden=(32,), activation="tanh").hidden
  (32,)
  >>> make_mapping("cnn", num_bits=16, image_shape=(8, 8, 1), channels=(4,), hidden=()).channels
  (4,)
  """
  for option, value, options in (("name", name, MAPPINGS), ("init", init, INITS),
                                 ("activation", "relu" if activation is None else activation, ACTIVATIONS)):
    _checks.check_option(option, value, options)
  num_bits = _checks.check_num_bits(num_bits)
  try:
    param_dtype = np.dtype(param_dtype)
  except TypeError:
    pass  # not a dtype: refused below
  if not (isinstance(param_dtype, np.dtype) and np.issubdtype(param_dtype, np.floating)):
    raise ValueError(f"param_dtype: expected a floating dtype, got {param_dtype!r}")
  mean_c = None if mean is None else _check_stat("mean", mean, positive=False)
  scale_c = None if scale is None else _check_stat("scale", scale, positive=True)
  if mean_c is not None and scale_c is not None:
    _checks.check_shape("scale", scale_c.value, mean_c.value.shape, like="mean")
  no_hidden = None if isinstance(hidden, (tuple, list)) and not hidden else hidden  # () or [] mean none
  cnn_only = (("image_shape", image_shape, "cnn"), ("channels", channels, "cnn"))
  mlp_only = (("hidden", no_hidden, "mlp"), ("activation", activation, "mlp"))
  for option, value, owner in {"linear": cnn_only + mlp_only, "mlp": cnn_only, "cnn": ()}[name]:
    if value is not None:
      raise ValueError(f"{option}: expected None for name={name!r} (use name={owner!r}), got {value!r}")
  if name == "linear":
    return Linear(num_bits=num_bits, weight_init=init, mean=mean_c, scale=scale_c,
                  param_dtype=param_dtype.type)
  activation = "relu" if activation is None else activation
  if name == "mlp":
    hidden = _check_widths("hidden", DEFAULT_HIDDEN if hidden is None else hidden, allow_empty=False)
    return MLP(num_bits=num_bits, hidden=hidden, activation=activation,
               weight_init=init, mean=mean_c, scale=scale_c, param_dtype=param_dtype.type)
  hidden = _check_widths("hidden", DEFAULT_CNN_HIDDEN if hidden is None else hidden, allow_empty=True)
  channels = _check_widths("channels", DEFAULT_CHANNELS if channels is None else channels, allow_empty=False)
  image_shape = _check_widths("image_shape", DEFAULT_IMAGE_SHAPE if image_shape is None else image_shape, image=True)
  side = 2 ** len(channels)
  if min(image_shape[:2]) < side:
    raise ValueError(f"image_shape: expected height and width of at least {side} for {len(channels)} blocks of "
                     f"2x2 max pooling (channels={channels}), got {image_shape}")
  stat = mean_c if mean_c is not None else scale_c
  if stat is not None and stat.value.shape[0] != math.prod(image_shape):
    raise ValueError(f"image_shape: expected a shape whose product is the feature width {stat.value.shape[0]} "
                     f"(of {'mean' if mean_c is not None else 'scale'}), got {image_shape} "
                     f"(product {math.prod(image_shape)})")
  return CNN(num_bits=num_bits, image_shape=image_shape, channels=channels, hidden=hidden, activation=activation,
             weight_init=init, mean=mean_c, scale=scale_c, param_dtype=param_dtype.type)


def _check_widths(name: str, widths: Any, *, allow_empty: bool = False, image: bool = False) -> tuple:
  """``widths`` a sequence of positive ints (non-empty unless ``allow_empty``; three, ``(height, width, channels)``,
  for an ``image`` shape), as a tuple of ints."""
  if not (isinstance(widths, (tuple, list)) and (widths or allow_empty) and (len(widths) == 3 or not image)
          and all(_checks.is_int(w) and w >= 1 for w in widths)):
    what = "a sequence of positive ints" if allow_empty else "a non-empty sequence of positive ints"
    what = "(height, width, channels), three positive ints" if image else what
    raise ValueError(f"{name}: expected {what}, got {widths!r}")
  return tuple(int(w) for w in widths)


def _stat_dim(mapping: Any) -> Optional[int]:
  if isinstance(mapping, CNN):
    return math.prod(mapping.image_shape)
  for c in (mapping.mean, mapping.scale):
    if c is not None:
      return int(c.value.shape[0])
  return None


def _param_dim(mapping: Any, params: Any) -> int:
  try:
    if isinstance(mapping, CNN):
      _ = params["conv_0"]["kernel"].shape  # a CNN's tree; its width is its image_shape's product
      return math.prod(mapping.image_shape)
    kernel = params["kernel"] if isinstance(mapping, Linear) else params["hidden_0"]["kernel"]
    return int(kernel.shape[0])
  except (KeyError, TypeError, AttributeError, IndexError):
    raise ValueError(f"params: expected the parameters of a {type(mapping).__name__} mapping (mappings.init), got "
                     f"{type(params).__name__}") from None


def init(key: Any, mapping: nn.Module, example_features: Any) -> Any:
  r"""Initialises the parameters of ``mapping`` for inputs like ``example_features``.

  .. math:: \theta_0 \sim \mathrm{init}(key)

  Args:
    key: a ``jax.random`` key; the same key gives the same parameters.
    mapping: a module from :func:`make_mapping`.
    example_features: ``[..., dim]`` features fixing the input width (values are not used,
      except that they must be finite); a CNN's ``dim`` must be the product of its ``image_shape``.

  Returns:
    ``params``: a pytree (nested ``dict``) of arrays, ready for ``optax``.

  >>> import jax, jax.numpy as jnp
  >>> m = make_mapping("linear", num_bits=8, init="nair")
  >>> params = init(jax.random.key(0), m, jnp.zeros((1, 5)))
  >>> jax.tree.map(jnp.shape, params)
  {'bias': (8,), 'kernel': (5, 8)}
  """
  _checks.check_key(key)
  _check_features("example_features", example_features, mapping)
  # Eager, not jitted: a jitted init would compile the random number generation
  # anew for every module, while eager calls reuse per-shape compilations.
  example = example_features[..., :1, :] if example_features.ndim > 1 else example_features
  return mapping.init(key, _as_float(example))["params"]


def apply(mapping: nn.Module, params: Any, features: Any) -> Array:
  r"""Per-bit logits of ``mapping`` on ``features``: jit/vmap/grad-able.

  .. math:: \mathrm{logits} = f(x; \theta) \in \mathbb{R}^{[..., b]}

  The matrix products run in full float32 (``Precision.HIGHEST``) on every
  backend, as in :func:`encode`.

  Args:
    mapping: a module from :func:`make_mapping`.
    params: its parameters (from :func:`init`).
    features: ``[..., dim]`` real features (integers become float32); finite.

  Returns:
    ``logits[..., num_bits]``; feed them to :func:`hashjax.codes.binarize` (codes) or
    :func:`hashjax.relaxations.relax` (training).

  >>> import jax, jax.numpy as jnp
  >>> m = make_mapping("linear", num_bits=3)
  >>> params = {"kernel": jnp.eye(2, 3), "bias": jnp.array([0.0, 0.0, 1.0])}
  >>> apply(m, params, jnp.array([[2.0, -1.0]])).tolist()
  [[2.0, -1.0, 1.0]]
  """
  _check_features("features", features, mapping, params)
  return mapping.apply({"params": params}, features)


@functools.partial(jax.jit, static_argnums=0)
def _encode_rows(mapping: Any, params: Any, features: Array) -> Array:
  """The block :func:`encode` computes: ``words[BLOCK_ROWS, ceil(b/32)]`` of ``features[BLOCK_ROWS, dim]``."""
  return codes.pack_bits(codes.binarize(mapping.apply({"params": params}, features)))


def encode(mapping: nn.Module, params: Any, features: Any) -> Array:
  r"""Hashes ``features`` to packed codes, in fixed blocks of rows.

  .. math:: w = \mathrm{pack}([f(x; \theta) > 0])

  Equal to ``pack_bits(binarize(apply(mapping, params, features)))``, computed
  :data:`ENCODE_BLOCK_ROWS` rows per jit call (the last block padded), so one
  compilation serves every call and the logits of only one block exist at a
  time. The codes of a row never depend on the other rows: every call runs the
  same program on the same shapes in full float32, so the same features give
  the same words in any batch, one row at a time or all at once, on a CPU or a
  GPU (for concrete inputs; under an outer ``jax.jit`` XLA compiles the
  caller's program as a whole).

  Args:
    mapping: a module from :func:`make_mapping`.
    params: its parameters.
    features: ``[..., dim]`` real, finite features.

  Returns:
    ``uint32[..., ceil(num_bits / 32)]`` words.

  >>> import jax.numpy as jnp
  >>> m = make_mapping("linear", num_bits=3)
  >>> params = {"kernel": jnp.eye(2, 3), "bias": jnp.array([0.0, 0.0, 1.0])}
  >>> encode(m, params, jnp.array([[2.0, -1.0], [-1.0, 2.0]])).tolist()  # bits 101, 011
  [[5], [6]]
  """
  _check_features("features", features, mapping, params)
  words = _encode.blockwise(lambda block: _encode_rows(mapping, params, block), features)
  return _checks.as_jax(words)


def feature_stats(features: Any, *, min_scale: float = 1e-6) -> tuple:
  r"""Per-feature training mean and scale for ``make_mapping(mean=, scale=)``.

  .. math:: \mu_i = \tfrac1N \sum_n x_{ni}, \qquad
            s_i = \begin{cases} \mathrm{std}_i & \mathrm{std}_i \ge \epsilon \\ 1 & \text{otherwise} \end{cases}

  Features whose standard deviation is below ``min_scale`` (e.g. constant
  border pixels) get scale 1, so they are only centred.

  Args:
    features: ``[N, dim]`` finite training features (``N >= 1``).
    min_scale: the ``epsilon`` above (non-negative).

  Returns:
    ``(mean[dim], scale[dim])`` numpy arrays in the features' float dtype
    (float32 for integer features), computed in float64.

  >>> mean, scale = feature_stats(np.array([[0.0, 1.0], [2.0, 1.0]]))
  >>> mean.tolist(), scale.tolist()
  ([1.0, 1.0], [1.0, 1.0])
  """
  _checks.check_real("features", features, shape_doc="[num_items, dim]", ndim=2)
  min_scale = _checks.check_number("min_scale", min_scale, low=0)
  x = np.asarray(features)
  out = x.dtype if np.issubdtype(x.dtype, np.floating) else np.dtype(np.float32)
  x = x.astype(np.float64)
  mean = x.mean(axis=0)
  std = x.std(axis=0)
  scale = np.where(std < min_scale, 1.0, std)
  return mean.astype(out), scale.astype(out)


def alpha_schedule(step: Any, *, init: float, final: float, steps: int) -> Array:
  r"""Sigmoid slope ``alpha`` annealed linearly from ``init`` to ``final`` (He et al. eq. 6).

  .. math:: \alpha(t) = \alpha_0 + (\alpha_1 - \alpha_0) \min(\max(t, 0) / T, 1)

  A thin validated wrapper of ``optax.linear_schedule``; jit-able in ``step``,
  so a ``loss_fn(params, batch, step)`` can call it on the traced step.

  Args:
    step: training step ``t`` (int scalar, may be traced).
    init: ``alpha_0 > 0``.
    final: ``alpha_1 > 0``.
    steps: ``T >= 1``, the step at which ``final`` is reached and kept.

  Returns:
    float32 scalar ``alpha``.

  >>> [float(alpha_schedule(t, init=1.0, final=5.0, steps=4)) for t in (0, 2, 4, 9)]
  [1.0, 3.0, 5.0, 5.0]
  """
  init, final = (_checks.check_number(name, v, low=0, low_open=True) for name, v in (("init", init), ("final", final)))
  steps = _checks.check_int("steps", steps)
  _checks.check_step(step)
  schedule = optax.linear_schedule(init, final, steps)
  return jnp.asarray(schedule(step), jnp.float32)
