r"""Saved models: a trained mapping, a fitted baseline or a column-generation hash that encodes new data.

A :class:`Model` holds everything needed to turn features into packed codes
the way training did: the kind of hash function and its settings, its
parameters, the input preprocessing (a mapping's training ``mean`` and
``scale``; a baseline's own ``mean`` lives in its params), the code length,
the feature width and value range seen in training, and the run's config.
The features it encodes are those it was trained on, as they were given to it:
a loader's scaling (``hashjax.data`` gives pixels in ``[0, 1]``) happens
before, and ``encode`` warns when features fall far outside the training
range::

  model = models.from_mapping(mapping, params, train_features=x_train, config=config)
  model.save("runs/my_run/model")
  words = hashjax.load_model("runs/my_run").encode(new_features)   # uint32[n, ceil(b / 32)]

On disk a model is a directory saved by the protocol of :mod:`hashjax.io`
(atomic, safe under concurrent saves and loads, checksummed)::

  model/
    model.json       the manifest: format ("hashjax-model") and version, kind, num_bits, dim, settings,
                     feature_range, config; the data folder and each array's file, dtype, shape and sha256;
                     its own checksum
    data-<token>/    one .npy file per array
    .lock            the writers' lock

The arrays are the params flattened by tree path (``params/kernel``,
``params/hidden_0/bias``, ``params/rotation``, ...), the mapping's
preprocessing constants (``preprocess/mean``, ``preprocess/scale``) and, for a
model with learned bit weights (kind ``"colgen"``, or a baseline saved with
the weights learned for its codes), ``bit_weights``.

Format versions: 3 is the layout above, written for every kind; 4 is the
same layout for a baseline saved with bit weights, so that a hashjax that
reads only version 3 refuses such a model rather than load it without its
weights. Versions 1 (the mappings and baselines) and 2 (adding the
``"colgen"`` kind and its ``bit_weights``) held ``model.json`` (listing each
array's name, dtype and shape, no checksums) and ``arrays.npz`` directly in
the directory; this module reads them too. A file that does not match its
checksum, an array this module does not read, and parameters that hold NaN or
inf (in any version), are refused with an error naming the file.

All of it is plain data (JSON and NumPy arrays, read with ``allow_pickle=False``),
so a saved model runs no code when loaded.
"""

from __future__ import annotations

import functools
import json
import os
import warnings
import zipfile
import zlib
from typing import Any, Dict, List, Optional, Tuple

import jax
import numpy as np

from hashjax import _checks, baselines, codes, io, mappings
from hashjax.colgen import features as colgen_features

__all__ = ["Model", "FeatureRangeWarning", "from_mapping", "from_baseline", "from_colgen", "save_model",
           "load_model", "list_models", "model_dir", "FORMAT", "VERSION", "KINDS", "MODEL_FILE", "ARRAYS_FILE"]

#: The ``format`` field of ``model.json``.
FORMAT = "hashjax-model"
#: The newest ``version`` of the format, written for a baseline with bit weights (4; every other model: 3, the
#: save protocol of :mod:`hashjax.io`; 2: the ``"colgen"`` kind and ``bit_weights``; 1 and 2 store ``arrays.npz``).
VERSION = 4
#: ``Model.kind``: the mappings of :mod:`hashjax.mappings`, the baselines of :mod:`hashjax.baselines`, then the
#: column-generation hashes of :mod:`hashjax.colgen` (CGHash, StructHash).
KINDS = ("linear", "mlp", "cnn", *baselines.BASELINES, "colgen")
#: The first format version that can hold each kind (the others: 1).
_KIND_VERSION = {"colgen": 2, **{k: 3 for k in ("cnn", "sph", "agh", "sth", "mdsh", *baselines.SUPERVISED)}}
#: The manifest of a saved model directory, and the arrays file of format versions 1 and 2.
MODEL_FILE = "model.json"
ARRAYS_FILE = "arrays.npz"

_MAPPING_KINDS = ("linear", "mlp", "cnn")
_BASELINE_PARAMS = baselines.PARAMS
#: The integer fields of the baselines' params (every other field is floating point).
_BASELINE_INT_FIELDS = {"agh": ("num_nearest",), "mdsh": ("modes",), "sh": ("direction", "mode")}


class FeatureRangeWarning(UserWarning):
  """:meth:`Model.encode` got features far outside the value range the model was trained on.

  >>> issubclass(FeatureRangeWarning, UserWarning)
  True
  """


# ----------------------------------------------------------------------------
# Conversions and checks.


def _json_plain(name: str, value: Any) -> Any:
  """``value`` (a dict or ``ml_collections.ConfigDict``) as the plain JSON types it reads back as."""
  if hasattr(value, "to_dict"):
    value = value.to_dict()
  _checks.check_type(name, value, dict, what="a dict or ml_collections.ConfigDict")
  try:
    return json.loads(json.dumps(value, allow_nan=False))
  except (TypeError, ValueError) as e:
    raise ValueError(f"{name}: expected JSON-serialisable values (numbers, strings, lists, dicts), got {e}") from None


def _train_stats(train_features: Any) -> Tuple[int, Tuple[float, float]]:
  """``(dim, (min, max))`` of ``train_features[N, dim]``."""
  _checks.check_real("train_features", train_features, shape_doc="[N, dim]", ndim=2)
  _checks.check_concrete("train_features", train_features, why="its value range is recorded")
  x = np.asarray(train_features)
  return int(x.shape[1]), (float(x.min()), float(x.max()))


def _leaves(tree: Any, prefix: str) -> Dict[str, Any]:
  """``{"prefix/a/b": leaf}`` for nested dicts and NamedTuples."""
  if hasattr(tree, "_fields"):
    items = [(f, getattr(tree, f)) for f in tree._fields]
  elif hasattr(tree, "items"):
    items = sorted(tree.items())
  else:
    return {prefix: tree}
  out = {}
  for key, value in items:
    out.update(_leaves(value, f"{prefix}/{key}"))
  return out


def _unflatten(flat: Dict[str, np.ndarray], prefix: str) -> Dict[str, Any]:
  """The nested dict of the ``prefix/...`` entries of ``flat``."""
  tree: Dict[str, Any] = {}
  for name, value in flat.items():
    if not name.startswith(prefix + "/"):
      continue
    node = tree
    *parents, leaf = name[len(prefix) + 1:].split("/")
    for part in parents:
      node = node.setdefault(part, {})
    node[leaf] = value
  return tree


def _shapes(tree: Any) -> Dict[str, tuple]:
  return {k: tuple(v.shape) for k, v in _leaves(tree, "params").items()}


def _check_mapping_params(mapping: Any, params: Any, dim: int) -> None:
  """``params`` must have the tree and the shapes of ``mapping``'s parameters on ``dim`` features."""
  expected = jax.eval_shape(mapping.init, jax.random.key(0), jax.ShapeDtypeStruct((1, dim), np.float32))["params"]
  want = _shapes(expected)
  try:
    got = _shapes(params)
  except (AttributeError, TypeError):
    got = None
  if got != want:
    raise ValueError(f"params: expected the parameters of a {type(mapping).__name__} mapping on {dim} features "
                     f"with shapes {want}, got {got if got is not None else type(params).__name__}")
  for name, leaf in _leaves(params, "params").items():
    if not np.issubdtype(leaf.dtype, np.floating):
      raise ValueError(f"params: expected floating-point parameters, got {_checks.desc(leaf)} at {name!r}")


#: The settings each mapping kind saves beyond ``init`` and ``param_dtype``.
_MAPPING_SETTINGS = {"linear": (), "mlp": ("hidden", "activation"),
                     "cnn": ("image_shape", "channels", "hidden", "activation")}


def _mapping_kind(mapping: Any) -> str:
  return {mappings.Linear: "linear", mappings.MLP: "mlp", mappings.CNN: "cnn"}[type(mapping)]


def _mapping_settings(mapping: Any) -> Dict[str, Any]:
  settings = {"init": mapping.weight_init, "param_dtype": np.dtype(mapping.param_dtype).name}
  for key in _MAPPING_SETTINGS[_mapping_kind(mapping)]:
    value = getattr(mapping, key)
    settings[key] = list(value) if isinstance(value, tuple) else value
  return settings


def _build_mapping(kind: str, num_bits: int, settings: Dict[str, Any], mean: Any, scale: Any) -> Any:
  known = {"init", "param_dtype", *_MAPPING_SETTINGS[kind]}
  unknown = sorted(set(settings) - known)
  if unknown:
    raise ValueError(f"settings: unknown keys {unknown} for a {kind!r} mapping (expected {sorted(known)})")

  def sizes(key):  # JSON lists back to tuples
    value = settings.get(key)
    return tuple(value) if isinstance(value, list) else value

  return mappings.make_mapping(kind, num_bits=num_bits, hidden=sizes("hidden"), image_shape=sizes("image_shape"),
                               channels=sizes("channels"), activation=settings.get("activation"),
                               init=settings.get("init", "lecun"), mean=mean, scale=scale,
                               param_dtype=settings.get("param_dtype", "float32"))


def _colgen_words(params: Any, features: jax.Array) -> jax.Array:
  """Packed codes of a column-generation hash (:func:`hashjax.colgen.features.hash_bits`: fixed row blocks, so
  the same features give the same words in any batch)."""
  return codes.pack_bits(colgen_features.hash_bits(params, features))


def _baseline_words(method: str, params: Any, features: Any) -> jax.Array:
  """Packed codes of a baseline (:func:`hashjax.baselines.encode`: fixed row blocks, so the same features give
  the same words in any batch)."""
  return codes.pack_bits(baselines.encode(method, params, features))


# ----------------------------------------------------------------------------
# The model.


class Model:
  r"""A hash function ready to encode new data: kind, settings, params, preprocessing, range and config.

  .. math:: w(x) = \mathrm{pack}([f_\theta(x) > 0]) \in \mathtt{uint32}^{\lceil b / 32 \rceil}

  Build one with :func:`from_mapping`, :func:`from_baseline` or
  :func:`load_model` (which validate what they are given; the constructor
  does not); it is immutable (its attributes cannot be set).

  Attributes:
    kind: ``"linear"``, ``"mlp"`` or ``"cnn"`` (:mod:`hashjax.mappings`), a baseline's name (a key of
      :data:`hashjax.baselines.BASELINES`), or ``"colgen"`` (:mod:`hashjax.colgen`).
    num_bits: code length ``b``.
    dim: feature width the model encodes.
    settings: JSON-friendly dict of the hash function's options (a mapping's ``init`` and
      ``param_dtype``; an MLP's ``hidden`` widths and ``activation``; a CNN's ``image_shape``,
      ``channels``, ``hidden`` and ``activation``; a colgen hash's ``features`` and
      ``method``; empty for a baseline).
    params: the parameters: a mapping's nested dict of arrays, a baseline's params NamedTuple, or a colgen
      hash's :class:`hashjax.colgen.features.HashParams`.
    feature_range: ``(lo, hi)``, the smallest and largest training feature value.
    config: the resolved run config as a plain dict, or None.
    mapping: the :mod:`hashjax.mappings` module with its preprocessing constants (None for the other kinds).
    bit_weights: ``float32[num_bits]``, non-negative learned bit weights for a weighted Hamming ranking
      (:func:`hashjax.search.knn` with ``weights=``): a colgen hash's, or those learned for a baseline's codes
      (:func:`from_baseline`); None otherwise.

  >>> import jax, numpy as np
  >>> x = np.random.default_rng(0).random((20, 5), dtype=np.float32)
  >>> mapping = mappings.make_mapping("linear", num_bits=8, mean=x.mean(0))
  >>> model = from_mapping(mapping, mappings.init(jax.random.key(0), mapping, x), train_features=x)
  >>> model
  Model(kind='linear', num_bits=8, dim=5, settings={'init': 'lecun', 'param_dtype': 'float32'})
  """

  __slots__ = ("kind", "num_bits", "dim", "settings", "params", "feature_range", "config", "mapping", "bit_weights")

  def __init__(self, *, kind: str, num_bits: int, dim: int, settings: Dict[str, Any], params: Any,
               feature_range: Tuple[float, float], config: Optional[Dict[str, Any]] = None,
               mapping: Any = None, bit_weights: Any = None):
    values = dict(kind=kind, num_bits=num_bits, dim=dim, settings=settings, params=params,
                  feature_range=feature_range, config=config, mapping=mapping, bit_weights=bit_weights)
    for name, value in values.items():
      object.__setattr__(self, name, value)

  def __setattr__(self, name: str, value: Any) -> None:
    raise AttributeError(f"Model is immutable: cannot set {name!r} (build a new one with from_mapping / from_baseline)")

  def __delattr__(self, name: str) -> None:
    raise AttributeError(f"Model is immutable: cannot delete {name!r}")

  def __repr__(self) -> str:
    return (f"Model(kind={self.kind!r}, num_bits={self.num_bits}, dim={self.dim}, "
            f"settings={self.settings!r})")

  @property
  def num_words(self) -> int:
    """``ceil(num_bits / 32)``, the ``uint32`` words of one code."""
    return _checks.num_words_for(self.num_bits)

  def encode(self, features: Any) -> jax.Array:
    r"""Packed codes of ``features``, preprocessed as in training.

    .. math:: w(x) = \mathrm{pack}([f_\theta((x - \mu) / s) > 0])

    A mapping subtracts its training mean (and divides by its scale when
    trained standardised) inside :func:`hashjax.mappings.encode`, whose
    words these are; a baseline centres by the mean in its params
    (``pack_bits`` of :func:`hashjax.baselines.encode`). Every path computes
    its rows in fixed blocks at full float32 precision, so the words do not
    depend on the batch. The experiments evaluate the codes of this method,
    so a saved model reproduces them exactly.

    Range check: with ``(lo, hi) = feature_range`` and ``w = hi - lo``
    (``w = max(|hi|, 1)`` when ``hi == lo``), concrete features with a value
    below ``lo - w`` or above ``hi + w`` raise a :class:`FeatureRangeWarning`
    (e.g. raw 0-255 pixels given to a model trained on pixels in [0, 1]);
    the codes are still returned.

    Args:
      features: ``[..., dim]`` real, finite features (integers are read as float32).

    Returns:
      ``uint32[..., ceil(num_bits / 32)]`` words, bit ``j`` in word ``j // 32`` at position ``j % 32``.

    >>> import jax, numpy as np
    >>> x = np.random.default_rng(0).random((20, 5), dtype=np.float32)
    >>> model = from_baseline("lsh", baselines.fit("lsh", x, num_bits=40, key=jax.random.key(0)),
    ...                       train_features=x)
    >>> model.encode(x[:3]).shape, model.encode(x[:3]).dtype
    ((3, 2), dtype('uint32'))
    """
    # mappings.encode and baselines.encode check the features; colgen's hash_bits trusts its caller.
    if self.mapping is not None:
      words = mappings.encode(self.mapping, self.params, features)
    elif self.kind == "colgen":
      _checks.check_real("features", features, shape_doc=f"[..., {self.dim}]", min_ndim=1)
      _checks.check_columns("features", features, self.dim, what="the width the model was trained on")
      words = _colgen_words(self.params, _checks.as_jax(features))
    else:
      words = _baseline_words(self.kind, self.params, features)
    self._check_range(features)
    return words

  def _check_range(self, features: Any) -> None:
    if not _checks.is_concrete(features) or features.size == 0:
      return
    lo, hi = self.feature_range
    width = hi - lo if hi > lo else max(abs(hi), 1.0)
    x = np.asarray(features)
    got_lo, got_hi = float(x.min()), float(x.max())
    if got_lo < lo - width or got_hi > hi + width:
      warnings.warn(FeatureRangeWarning(
          f"features: values span [{got_lo:g}, {got_hi:g}], far outside the training range [{lo:g}, {hi:g}] "
          f"(more than its width {width:g} beyond either end); the codes will not mean what training taught. "
          f"Preprocess new features as the training features were (e.g. divide 0-255 pixels by 255)"),
          stacklevel=3)

  def save(self, path: Any) -> str:
    """Writes the model to directory ``path`` (see :func:`save_model`); returns its absolute path.

    >>> import jax, os, tempfile, numpy as np
    >>> x = np.random.default_rng(0).random((20, 5), dtype=np.float32)
    >>> model = from_baseline("pca", baselines.fit("pca", x, num_bits=4), train_features=x)
    >>> sorted(n[:5] for n in os.listdir(model.save(os.path.join(tempfile.mkdtemp(), "model"))))
    ['.lock', 'data-', 'model']
    """
    return save_model(self, path)

  def _arrays(self) -> Dict[str, np.ndarray]:
    arrays = {k: np.asarray(v) for k, v in _leaves(self.params, "params").items()}
    if self.mapping is not None:
      for name in ("mean", "scale"):
        constant = getattr(self.mapping, name)
        if constant is not None:
          arrays[f"preprocess/{name}"] = np.asarray(constant.value)
    if self.bit_weights is not None:
      arrays["bit_weights"] = np.asarray(self.bit_weights)
    return arrays


# ----------------------------------------------------------------------------
# Constructors.


def from_mapping(mapping: Any, params: Any, *, train_features: Any, config: Any = None) -> Model:
  r"""A :class:`Model` of a trained :mod:`hashjax.mappings` module and its params.

  .. math:: \mathrm{Model}(f_\theta, \mu, s), \qquad \mathrm{range} = [\min X, \max X]

  The mapping's own ``mean`` / ``scale`` constants are the preprocessing;
  ``train_features`` only supply the feature width and the value range.

  Args:
    mapping: a module from :func:`hashjax.mappings.make_mapping` (``Linear``, ``MLP`` or ``CNN``).
    params: its trained parameters (the tree :func:`hashjax.mappings.init` gives).
    train_features: ``[N, dim]`` the features it was trained on.
    config: the run's config (a ``ml_collections.ConfigDict`` or a JSON-serialisable dict), or None.

  Returns:
    A :class:`Model` of kind ``"linear"``, ``"mlp"`` or ``"cnn"``.

  >>> import jax, numpy as np
  >>> x = np.random.default_rng(0).random((20, 5), dtype=np.float32)
  >>> mapping = mappings.make_mapping("mlp", num_bits=8, hidden=(16,), mean=x.mean(0))
  >>> params = mappings.init(jax.random.key(0), mapping, x)
  >>> model = from_mapping(mapping, params, train_features=x, config={"seed": 0})
  >>> bool((model.encode(x) == mappings.encode(mapping, params, x)).all())
  True
  """
  mappings.check_mapping(mapping)
  dim, feature_range = _train_stats(train_features)
  for name in ("mean", "scale"):
    constant = getattr(mapping, name)
    if constant is not None:
      _checks.check_columns("train_features", train_features, constant.value.shape[0], what=f"the mapping's {name}")
  _check_mapping_params(mapping, params, dim)
  config = None if config is None else _json_plain("config", config)
  params = jax.tree.map(_checks.as_jax, params)
  return Model(kind=_mapping_kind(mapping), num_bits=mapping.num_bits, dim=dim, settings=_mapping_settings(mapping),
               params=params, feature_range=feature_range, config=config, mapping=mapping)


def from_baseline(method: str, params: Any, *, train_features: Any, config: Any = None,
                  bit_weights: Any = None) -> Model:
  r"""A :class:`Model` of baseline ``method``'s fitted params.

  .. math:: \mathrm{Model}(\mathrm{encode}_{method}, \theta), \qquad \mathrm{range} = [\min X, \max X]

  Args:
    method: a key of :data:`hashjax.baselines.BASELINES`.
    params: the params NamedTuple :func:`hashjax.baselines.fit` returned for ``method``.
    train_features: ``[N, dim]`` the features it was fitted on (for the width and value range).
    config: the run's config (a ``ml_collections.ConfigDict`` or a JSON-serialisable dict), or None.
    bit_weights: ``float[num_bits]`` non-negative weights learned for the codes (:func:`hashjax.weighting.fit`),
      or None.

  Returns:
    A :class:`Model` of kind ``method``; ``num_bits`` is read from the params.

  >>> import jax, numpy as np
  >>> x = np.random.default_rng(0).normal(size=(50, 6)).astype(np.float32)
  >>> params = baselines.fit("itq", x, num_bits=4, key=jax.random.key(0))
  >>> model = from_baseline("itq", params, train_features=x)
  >>> model.num_bits, model.dim, model.kind
  (4, 6, 'itq')
  """
  _checks.check_option("method", method, tuple(_BASELINE_PARAMS))
  cls = _BASELINE_PARAMS[method]
  _checks.check_type("params", params, cls, what=f"{cls.__name__} from hashjax.baselines.fit({method!r}, ...)")
  dim, feature_range = _train_stats(train_features)
  _checks.check_columns("train_features", train_features, params.mean.shape[0], what="the width the params were fit on")
  return _baseline_model(method, params, dim=dim, feature_range=feature_range,
                         config=None if config is None else _json_plain("config", config), bit_weights=bit_weights)


def _baseline_model(method: str, params: Any, *, dim: int, feature_range: Tuple[float, float],
                    config: Optional[Dict[str, Any]], bit_weights: Any = None) -> Model:
  cls = _BASELINE_PARAMS[method]
  params = cls(*(_checks.as_jax(a) for a in params))
  # The code length is what encode gives; tracing it computes nothing.
  bits = jax.eval_shape(lambda p, x: baselines.encode(method, p, x), params,
                        jax.ShapeDtypeStruct((1, dim), params.mean.dtype))
  num_bits = int(bits.shape[-1])
  return Model(kind=method, num_bits=num_bits, dim=dim, settings={}, params=params, feature_range=feature_range,
               config=config, bit_weights=None if bit_weights is None else _bit_weights(bit_weights, num_bits))


def _named_params(cls: Any, kind: str, arrays: Dict[str, np.ndarray]) -> Any:
  """The params NamedTuple ``cls`` of the arrays ``params/<field>`` of a saved model of ``kind``."""
  missing = [f"params/{f}" for f in cls._fields if f"params/{f}" not in arrays]
  if missing:
    raise ValueError(f"params: a {kind!r} model needs the arrays params/{cls._fields}, missing {missing}")
  for f in cls._fields:
    integer = f in _BASELINE_INT_FIELDS.get(kind, ())
    if not np.issubdtype(arrays[f"params/{f}"].dtype, np.integer if integer else np.floating):
      raise ValueError(f"params/{f}: expected {'integer' if integer else 'floating-point'} values, "
                       f"got {_checks.desc(arrays[f'params/{f}'])}")
  return cls(*(arrays[f"params/{f}"] for f in cls._fields))


def _colgen_model(params: Any, bit_weights: Any, *, settings: Dict[str, Any], dim: int,
                  feature_range: Tuple[float, float], config: Optional[Dict[str, Any]]) -> Model:
  """A checked colgen :class:`Model` (float32 arrays) of ``params`` (a ``HashParams``) and ``bit_weights``."""
  arrays = {name: np.asarray(value) for name, value in zip(colgen_features.PARAM_FIELDS, params)}
  for name, value in arrays.items():
    _checks.check_real(f"params.{name}", value)
  arrays = {name: value.astype(np.float32) for name, value in arrays.items()}
  anchors, scale, projection = arrays["anchors"], arrays["scale"], arrays["projection"]
  num_anchors = anchors.shape[0] if anchors.ndim == 2 else -1
  width, num_bits = dim if num_anchors == 0 else num_anchors, projection.shape[-1] if projection.ndim == 2 else 0
  shapes = {name: value.shape for name, value in arrays.items()}
  if shapes != {"anchors": (num_anchors, dim), "scale": (), "mean": (width,), "projection": (width, num_bits),
                "bias": (num_bits,)} or num_bits < 1 or not scale > 0:
    raise ValueError(f"params: expected anchors (A, {dim}), scale () > 0, mean (D,), projection (D, B), bias (B,) with "
                     f"B >= 1 and D = A, or {dim} if A = 0; got shapes {shapes} and scale {scale!r}")
  settings = {**settings, "features": "linear" if anchors.shape[0] == 0 else "rbf"}
  return Model(kind="colgen", num_bits=int(num_bits), dim=int(dim), settings=settings,
               params=colgen_features.HashParams(*(_checks.as_jax(arrays[f]) for f in colgen_features.PARAM_FIELDS)),
               feature_range=feature_range, config=config, bit_weights=_bit_weights(bit_weights, num_bits))


def _bit_weights(bit_weights: Any, num_bits: int) -> np.ndarray:
  """Checked ``float32[num_bits]`` non-negative bit weights."""
  bit_weights = np.asarray(bit_weights)
  _checks.check_real("bit_weights", bit_weights, shape_doc="[num_bits] of non-negative weights", shape=(num_bits,),
                     like="the model's bits", nonnegative="bit weights")
  return bit_weights.astype(np.float32)


def from_colgen(params: Any, bit_weights: Any, *, train_features: Any, method: str = "colgen",
                config: Any = None) -> Model:
  r"""A :class:`Model` of a column-generation hash (:mod:`hashjax.colgen`: CGHash or StructHash).

  .. math:: h_r(x) = [\, v_r^\top (\phi(x) - \bar\phi) + b_r > 0 \,], \qquad
     d_w(x, y) = \sum_r w_r [h_r(x) \ne h_r(y)]

  Args:
    params: the :class:`hashjax.colgen.features.HashParams` of the trained hash (``result.params`` of
      :func:`hashjax.colgen.cghash.fit` or :func:`hashjax.colgen.structhash.fit`).
    bit_weights: ``float[num_bits]`` non-negative learned weights (``result.bit_weights``).
    train_features: ``[N, dim]`` the features it was trained on (for the width and value range).
    method: recorded in ``settings["method"]`` (e.g. ``"cghash"``, ``"structhash"``).
    config: the run's config (a ``ml_collections.ConfigDict`` or a JSON-serialisable dict), or None.

  Returns:
    A :class:`Model` of kind ``"colgen"`` with ``bit_weights`` (float32).

  >>> import numpy as np
  >>> from hashjax.colgen import features
  >>> x = np.random.default_rng(0).random((20, 5))
  >>> p = features.fit_feature_map(x)._replace(projection=np.ones((5, 3)), bias=np.array([-2.0, -2.5, -3.0]))
  >>> model = from_colgen(p, np.array([1.0, 0.5, 0.0]), train_features=x, method="cghash")
  >>> model.kind, model.num_bits, model.bit_weights.tolist(), model.encode(x[:2]).shape
  ('colgen', 3, [1.0, 0.5, 0.0], (2, 1))
  """
  _checks.check_type("params", params, colgen_features.HashParams, what="hashjax.colgen.features.HashParams")
  dim, feature_range = _train_stats(train_features)
  _checks.check_type("method", method, str, what="a string")
  return _colgen_model(params, bit_weights, settings={"method": method}, dim=dim, feature_range=feature_range,
                       config=None if config is None else _json_plain("config", config))


# ----------------------------------------------------------------------------
# Saving.


def save_model(model: Model, path: Any) -> str:
  r"""Writes ``model`` to the directory ``path`` by the save protocol of :mod:`hashjax.io`.

  .. math:: \mathrm{path} \leftarrow (\mathrm{model.json}, \mathrm{data}/\ast\mathrm{.npy})

  ``model.json`` (the manifest, module docstring) is replaced last in one
  rename, so ``path`` always loads as the previous model or the new one;
  saves to one directory from several processes wait for each other, the
  last wins; a load meanwhile returns one of them, complete. A ``path`` that
  exists and holds anything but a saved model (e.g. a run's workdir) is
  refused.

  Args:
    model: a :class:`Model`.
    path: the model's directory (created with its parents).

  Returns:
    The absolute path of the directory.

  >>> import jax, json, os, tempfile, numpy as np
  >>> x = np.random.default_rng(0).random((20, 5), dtype=np.float32)
  >>> model = from_baseline("sh", baselines.fit("sh", x, num_bits=6), train_features=x)
  >>> path = save_model(model, os.path.join(tempfile.mkdtemp(), "sh-6"))
  >>> with open(os.path.join(path, "model.json")) as f:
  ...   meta = json.load(f)
  >>> meta["format"], meta["version"], meta["kind"], meta["num_bits"], meta["dim"]
  ('hashjax-model', 3, 'sh', 6, 5)
  """
  _checks.check_type("model", model, Model, what="a hashjax.models.Model")
  # The oldest version that holds the model: an older hashjax reads what it can read whole, and refuses the rest.
  version = 4 if model.bit_weights is not None and model.kind != "colgen" else 3
  header = {"format": FORMAT, "version": version, "kind": model.kind, "num_bits": model.num_bits, "dim": model.dim,
            "settings": model.settings, "feature_range": list(model.feature_range), "config": model.config}
  return io.save_arrays(_checks.check_path("path", path), model._arrays(), header,  # pylint: disable=protected-access
                        manifest=MODEL_FILE, legacy=(ARRAYS_FILE,), what="model")


# ----------------------------------------------------------------------------
# Loading.


def list_models(folder: Any) -> List[str]:
  r"""The saved models directly under ``folder``: its subfolders that hold a ``model.json``, but for hidden
  ones (a name starting with ``.``), by name; none when ``folder`` is not a directory.

  .. math:: \{\, f/d : f/d/\mathrm{model.json} \text{ exists},\ d \ne .\ast \,\}

  ``experiments.evaluate`` writes a run's models to ``<workdir>/models/<method>-<bits>``, so
  ``list_models("<workdir>/models")`` lists them; :func:`load_model` reads the same list.

  >>> import jax, os, tempfile, numpy as np
  >>> x = np.random.default_rng(0).random((20, 5), dtype=np.float32)
  >>> model = from_baseline("pca", baselines.fit("pca", x, num_bits=4), train_features=x)
  >>> root = tempfile.mkdtemp()
  >>> for name in ("pca-4", ".old", "pca-8"):
  ...   _ = model.save(os.path.join(root, name))
  >>> [os.path.basename(p) for p in list_models(root)]
  ['pca-4', 'pca-8']
  """
  folder = os.fspath(folder)
  if not os.path.isdir(folder):
    return []
  return sorted(os.path.join(folder, d) for d in os.listdir(folder)
                if not d.startswith(".") and os.path.isfile(os.path.join(folder, d, MODEL_FILE)))


def model_dir(path: Any) -> str:
  r"""The directory of the model :func:`load_model` reads for ``path``: ``path`` itself when it holds a
  ``model.json``, else ``path/model`` (a training run's workdir), else the one model of ``path/models`` (a
  run's ``models/`` folder) or, that failing, directly under ``path``.

  .. math:: \mathrm{load\_model}(p) = \mathrm{load\_model}(\mathrm{model\_dir}(p))

  Raises:
    ValueError: ``path`` is not a directory, holds no saved model, or holds several (they are listed).

  >>> import jax, os, tempfile, numpy as np
  >>> x = np.random.default_rng(0).random((20, 5), dtype=np.float32)
  >>> workdir = tempfile.mkdtemp()
  >>> model = from_baseline("pca", baselines.fit("pca", x, num_bits=4), train_features=x)
  >>> _ = model.save(os.path.join(workdir, "model"))
  >>> model_dir(workdir) == os.path.join(workdir, "model")
  True
  """
  path = _checks.check_path("path", path)
  if not os.path.isdir(path):
    what = "does not exist" if not os.path.exists(path) else "is not a directory"
    raise ValueError(f"path: {path!r} {what}; expected a saved model's directory or a run's workdir")
  if os.path.isfile(os.path.join(path, MODEL_FILE)):
    return path
  if os.path.isdir(os.path.join(path, "model")):
    return os.path.join(path, "model")
  several = list_models(os.path.join(path, "models")) or list_models(path)  # a run's workdir, or its models/
  if len(several) == 1:
    return several[0]
  if several:
    raise ValueError(f"path: {path!r} holds {len(several)} models; pass one of them: " + ", ".join(several))
  raise ValueError(f"path: {path!r} holds no saved model (expected {MODEL_FILE} in it, model/ or models/<name>/)")


def _check_feature_range(name: str, span: Any) -> None:
  """``[lo, hi]``, two finite numbers, ``lo <= hi``."""
  lo, hi = span if isinstance(span, list) and len(span) == 2 else (None, None)
  _checks.check_number(f"{name}[0]", lo)
  _checks.check_number(f"{name}[1]", hi, low=lo)


#: The rule of each field of ``model.json`` besides its format, version, checksum and arrays (which
#: :mod:`hashjax.io` and :func:`_read_npz` check), each called with the field's name and value.
_META_FIELDS = {"kind": functools.partial(_checks.check_option, options=KINDS),
                "num_bits": _checks.check_int, "dim": _checks.check_int,
                "settings": functools.partial(_checks.check_type, types=dict, what="an object"),
                "config": functools.partial(_checks.check_type, types=(dict, type(None)), what="an object or null"),
                "feature_range": _check_feature_range}


def _check_meta(file: str, meta: Dict[str, Any]) -> None:
  """``meta`` (``model.json``) must be a model of a format version this module reads, its fields well-formed."""
  version = meta.get("version")
  if meta.get("format") != FORMAT or not (_checks.is_int(version) and 1 <= version <= VERSION):
    raise ValueError(f"{file}: expected format {FORMAT!r} version 1..{VERSION} (a newer version needs a newer "
                     f"hashjax), got format {meta.get('format')!r} version {version!r}")
  missing = [k for k in (*_META_FIELDS, "arrays") if k not in meta]
  if missing:
    raise ValueError(f"{file}: missing field(s) {missing}")
  for key, rule in _META_FIELDS.items():
    rule(f"{file}: {key}", meta[key])
  kind = meta["kind"]
  if _KIND_VERSION.get(kind, 1) > version:
    raise ValueError(f"{file}: kind {kind!r} needs format version {_KIND_VERSION[kind]} or newer, got {version}")
  if (version < 3) == ("checksum" in meta):
    raise ValueError(f"{file}: expected a checksum from format version 3 on and none before, got version {version}")


def _read_npz(directory: str, meta: Dict[str, Any]) -> Dict[str, np.ndarray]:
  """The arrays of a model saved in the layout of format versions 1 and 2: ``model.json`` and ``arrays.npz``."""
  file, listed = os.path.join(directory, ARRAYS_FILE), meta["arrays"]  # a list of {name, dtype, shape} (io checks)
  out, problem = {}, None
  with open(file, "rb") as f:  # FileNotFoundError: io.load_arrays tells a missing file from a replaced one
    try:
      with np.load(f, allow_pickle=False) as archive:
        for entry in listed:
          name = entry["name"]
          if name not in archive.files:
            problem = f"missing array {name!r} (listed in {MODEL_FILE}); it holds {sorted(archive.files)}"
            break
          out[name] = archive[name]
          if out[name].dtype.name != entry["dtype"] or list(out[name].shape) != entry["shape"]:
            problem = (f"array {name!r}: expected dtype {entry['dtype']} and shape {tuple(entry['shape'])} "
                       f"(as {MODEL_FILE} lists), got {_checks.desc(out[name])}")
            break
    except (OSError, EOFError, KeyError, ValueError, AttributeError, zipfile.BadZipFile, zlib.error) as e:
      problem = f"truncated or not an .npz archive ({type(e).__name__}: {e})"
  if problem is not None:
    raise ValueError(f"{file}: {problem}")
  return out


def load_model(path: Any) -> Model:
  r"""Loads a saved :class:`Model` from its directory or from a run's workdir.

  .. math:: \mathrm{load}(\mathrm{save}(m)).\mathrm{encode}(x) = m.\mathrm{encode}(x)

  ``path`` is a model's own directory (holding ``model.json``), a workdir
  holding ``model/`` (what a training run writes), or a workdir whose
  ``models/`` holds exactly one model (``experiments.evaluate`` writes one per
  baseline and code length, ``models/<method>-<bits>``: with several, the
  error lists them; pass one), or a folder such as that ``models/`` itself
  whose subfolders hold exactly one model.

  Args:
    path: a directory (str or os.PathLike).

  Returns:
    The :class:`Model`; ``model.encode(features)`` gives the words training evaluated.

  Raises:
    ValueError: naming the file and what is wrong with it (missing, not JSON, another format or a newer
      version, a missing or mis-shaped array, an array the model's kind does not read, a truncated archive).

  >>> import jax, os, tempfile, numpy as np
  >>> x = np.random.default_rng(0).random((20, 5), dtype=np.float32)
  >>> model = from_baseline("itq", baselines.fit("itq", x, num_bits=4, key=jax.random.key(0)), train_features=x)
  >>> workdir = tempfile.mkdtemp()
  >>> _ = model.save(os.path.join(workdir, "model"))
  >>> bool((load_model(workdir).encode(x) == model.encode(x)).all())
  True
  """
  directory = model_dir(path)
  meta_file = os.path.join(directory, MODEL_FILE)
  meta, arrays = io.load_arrays(directory, manifest=MODEL_FILE, check=_check_meta,
                                read_legacy=functools.partial(_read_npz, directory))
  for entry in meta["arrays"]:
    file = os.path.join(directory, entry.get("file", ARRAYS_FILE))
    _checks.check_finite(f"{file}: array {entry['name']!r}", arrays[entry["name"]])
  kind, settings, dim = meta["kind"], meta["settings"], meta["dim"]
  feature_range, config = tuple(float(v) for v in meta["feature_range"]), meta["config"]
  # A mapping's params are checked as a tree below; a baseline's or colgen's are the fields of their NamedTuple.
  known = ({"preprocess/mean", "preprocess/scale"} if kind in _MAPPING_KINDS else
           {"bit_weights", *(f"params/{f}" for f in _BASELINE_PARAMS.get(kind, colgen_features.HashParams)._fields)})
  unread = sorted(n for n in arrays if n not in known and not (kind in _MAPPING_KINDS and n.startswith("params/")))
  if unread:
    raise ValueError(f"{meta_file}: array(s) {unread} are not part of a {kind!r} model (a newer hashjax may "
                     f"have written them)")
  try:
    if kind in _MAPPING_KINDS:
      mapping = _build_mapping(kind, meta["num_bits"], settings, arrays.get("preprocess/mean"),
                               arrays.get("preprocess/scale"))
      params = _unflatten(arrays, "params")
      _check_mapping_params(mapping, params, dim)
      model = Model(kind=kind, num_bits=mapping.num_bits, dim=dim, settings=_mapping_settings(mapping),
                    params=jax.tree.map(_checks.as_jax, params), feature_range=feature_range, config=config,
                    mapping=mapping)
    elif kind == "colgen":
      model = _colgen_model(_named_params(colgen_features.HashParams, kind, arrays), arrays.get("bit_weights"),
                            settings=settings, dim=dim, feature_range=feature_range, config=config)
    else:
      params = _named_params(_BASELINE_PARAMS[kind], kind, arrays)
      _checks.check_shape("params/mean", params.mean, (dim,), like="dim")
      model = _baseline_model(kind, params, dim=dim, feature_range=feature_range, config=config,
                              bit_weights=arrays.get("bit_weights"))
  except (ValueError, TypeError) as e:
    raise ValueError(f"{meta_file}: does not describe a usable model: {e}") from None
  if model.num_bits != meta["num_bits"]:  # (every kind's model has the dim of the file)
    raise ValueError(f"{meta_file}: num_bits: the arrays give {model.num_bits}, the file says {meta['num_bits']}")
  return model
