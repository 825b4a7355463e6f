r"""Saved models: a trained mapping, a fitted baseline or a column-generation hash that encodes new data.

A :class:`Model` holds everything needed to turn features into packed codes
the way training did: the kind of hash function and its settings, its
parameters, the input preprocessing (a mapping's training ``mean`` and
``scale``; a baseline's own ``mean`` lives in its params), the code length,
the feature width and value range seen in training, and the run's config::

  model = models.from_mapping(mapping, params, train_features=x_train, config=config)
  model.save("runs/my_run/model")
  words = hashjax.load_model("runs/my_run").encode(new_features)   # uint32[n, ceil(b / 32)]

On disk a model is a directory of two files:

* ``model.json``: ``format`` (``"hashjax-model"``) and ``version``, ``kind``,
  ``num_bits``, ``dim``, ``settings``, ``feature_range``, ``config`` and
  ``arrays``, the name, dtype and shape of every array;
* ``arrays.npz``: the params flattened by tree path (``params/kernel``,
  ``params/hidden_0/bias``, ``params/rotation``, ...), the mapping's
  preprocessing constants (``preprocess/mean``, ``preprocess/scale``) and, for a
  model with learned bit weights (kind ``"colgen"``), ``bit_weights``.

Format versions: 1 holds the mappings and baselines; 2 adds the ``"colgen"`` kind
and its ``bit_weights`` array. A model is written with the lowest version that
describes it (a mapping or a baseline still as version 1, so older readers load
it), and this module reads both.

Both are plain data (JSON and NumPy arrays, read with ``allow_pickle=False``),
so a saved model runs no code when loaded.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import tempfile
import warnings
import zipfile
import zlib
from typing import Any, Dict, List, Optional, Tuple

import jax
import numpy as np

from hashjax import _checks, baselines, codes, mappings
from hashjax.colgen import features as colgen_features

__all__ = ["Model", "FeatureRangeWarning", "from_mapping", "from_baseline", "from_colgen", "save_model",
           "load_model", "FORMAT", "VERSION", "KINDS", "MODEL_FILE", "ARRAYS_FILE"]

#: The ``format`` field of ``model.json``.
FORMAT = "hashjax-model"
#: The newest ``version`` of the format this module writes and reads (2: the ``"colgen"`` kind and ``bit_weights``).
VERSION = 2
#: ``Model.kind``: the mappings of :mod:`hashjax.mappings`, the baselines of :mod:`hashjax.baselines`, then the
#: column-generation hashes of :mod:`hashjax.colgen` (CGHash, StructHash).
KINDS = ("linear", "mlp", "lsh", "pca", "itq", "sh", "iso", "colgen")
#: The first format version that can hold each kind (the others: 1).
_KIND_VERSION = {"colgen": 2}
#: The two files of a saved model directory.
MODEL_FILE = "model.json"
ARRAYS_FILE = "arrays.npz"

_MAPPING_KINDS = ("linear", "mlp")
_BASELINE_PARAMS = {"lsh": baselines.LSHParams, "pca": baselines.PCAParams, "itq": baselines.ITQParams,
                    "sh": baselines.SpectralParams, "iso": baselines.IsoHashParams}


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
  if not isinstance(value, dict):
    raise ValueError(f"{name}: expected a dict or ml_collections.ConfigDict, got {type(value).__name__}")
  try:
    return json.loads(json.dumps(value, allow_nan=False))
  except (TypeError, ValueError) as e:
    raise ValueError(f"{name}: expected JSON-serialisable values (numbers, strings, lists, dicts), got {e}") from None


def _train_stats(train_features: Any) -> Tuple[int, Tuple[float, float]]:
  """``(dim, (min, max))`` of ``train_features[N, dim]``."""
  _checks.check_real("train_features", train_features, shape_doc="[num_items, dim]")
  if train_features.ndim != 2 or 0 in train_features.shape:
    raise ValueError(f"train_features: expected a non-empty 2-D array [num_items, dim], "
                     f"got {_checks.desc(train_features)}")
  if not _checks.is_concrete(train_features):
    raise ValueError("train_features: expected a concrete array (its value range is recorded), got a traced one")
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


def _mapping_settings(mapping: Any) -> Dict[str, Any]:
  settings = {"init": mapping.weight_init, "param_dtype": np.dtype(mapping.param_dtype).name}
  if isinstance(mapping, mappings.MLP):
    settings.update(hidden=list(mapping.hidden), activation=mapping.activation)
  return settings


def _build_mapping(kind: str, num_bits: int, settings: Dict[str, Any], mean: Any, scale: Any) -> Any:
  known = {"init", "param_dtype"} | ({"hidden", "activation"} if kind == "mlp" else set())
  unknown = sorted(set(settings) - known)
  if unknown:
    raise ValueError(f"settings: unknown keys {unknown} for a {kind!r} mapping (expected {sorted(known)})")
  hidden = settings.get("hidden")
  return mappings.make_mapping(kind, num_bits=num_bits, hidden=None if hidden is None else tuple(hidden),
                               activation=settings.get("activation"), init=settings.get("init", "lecun"),
                               mean=mean, scale=scale, param_dtype=settings.get("param_dtype", "float32"))


@jax.jit
def _colgen_words(params: Any, features: jax.Array) -> jax.Array:
  """Packed codes of a column-generation hash (:func:`hashjax.colgen.features.hash_bits`), compiled whole."""
  return codes.pack_bits(colgen_features.hash_bits(params, features))


@functools.partial(jax.jit, static_argnums=0)
def _baseline_words(method: str, params: Any, features: jax.Array) -> jax.Array:
  """Packed codes of a baseline, compiled whole (op by op, spectral hashing alone compiles dozens of programs)."""
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
    kind: ``"linear"`` or ``"mlp"`` (:mod:`hashjax.mappings`), ``"lsh"``, ``"pca"``, ``"itq"``, ``"sh"`` or
      ``"iso"`` (:mod:`hashjax.baselines`), or ``"colgen"`` (:mod:`hashjax.colgen`).
    num_bits: code length ``b``.
    dim: feature width the model encodes.
    settings: JSON-friendly dict of the hash function's options (a mapping's ``init`` and
      ``param_dtype``; an MLP's ``hidden`` widths and ``activation``; a colgen hash's ``features`` and
      ``method``; empty for a baseline).
    params: the parameters: a mapping's nested dict of arrays, a baseline's params NamedTuple, or a colgen
      hash's :class:`hashjax.colgen.features.HashParams`.
    feature_range: ``(lo, hi)``, the smallest and largest training feature value.
    config: the resolved run config as a plain dict, or None.
    mapping: the :mod:`hashjax.mappings` module with its preprocessing constants (None for the other kinds).
    bit_weights: ``float32[num_bits]``, non-negative learned bit weights for a weighted Hamming ranking
      (:func:`hashjax.search.knn` with ``weights=``), or None for kinds that learn none.

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
    raise AttributeError(f"Model is immutable: cannot set {name!r} (build a new one with from_mapping / "
                         "from_baseline)")

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
    (``pack_bits`` of :func:`hashjax.baselines.encode`, compiled whole). The
    experiments evaluate the codes of this method, so a saved model
    reproduces them exactly.

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
    _checks.check_real("features", features, shape_doc=f"[..., {self.dim}]", min_ndim=1)
    if features.shape[-1] != self.dim:
      raise ValueError(f"features: expected {self.dim} feature columns (the width the model was trained on), "
                       f"got shape {tuple(features.shape)}")
    self._check_range(features)
    if self.mapping is not None:
      return mappings.encode(self.mapping, self.params, features)
    if self.kind == "colgen":
      return _colgen_words(self.params, _checks.as_jax(features))
    return _baseline_words(self.kind, self.params, _checks.as_jax(features))

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
    >>> sorted(os.listdir(model.save(os.path.join(tempfile.mkdtemp(), "model"))))
    ['arrays.npz', 'model.json']
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
    mapping: a module from :func:`hashjax.mappings.make_mapping` (``Linear`` or ``MLP``).
    params: its trained parameters (the tree :func:`hashjax.mappings.init` gives).
    train_features: ``[N, dim]`` the features it was trained on.
    config: the run's config (a ``ml_collections.ConfigDict`` or a JSON-serialisable dict), or None.

  Returns:
    A :class:`Model` of kind ``"linear"`` or ``"mlp"``.

  >>> import jax, numpy as np
  >>> x = np.random.default_rng(0).random((20, 5), dtype=np.float32)
  >>> mapping = mappings.make_mapping("mlp", num_bits=8, hidden=(16,), mean=x.mean(0))
  >>> params = mappings.init(jax.random.key(0), mapping, x)
  >>> model = from_mapping(mapping, params, train_features=x, config={"seed": 0})
  >>> bool((model.encode(x) == mappings.encode(mapping, params, x)).all())
  True
  """
  if not isinstance(mapping, (mappings.Linear, mappings.MLP)):
    raise ValueError(f"mapping: expected a hashjax.mappings module from make_mapping (Linear or MLP), "
                     f"got {type(mapping).__name__}")
  dim, feature_range = _train_stats(train_features)
  for name in ("mean", "scale"):
    constant = getattr(mapping, name)
    if constant is not None and constant.value.shape != (dim,):
      raise ValueError(f"train_features: expected {dim} columns to match the mapping's {name} of shape "
                       f"{constant.value.shape}, got shape {tuple(train_features.shape)}")
  _check_mapping_params(mapping, params, dim)
  config = None if config is None else _json_plain("config", config)
  params = jax.tree.map(_checks.as_jax, params)
  kind = "linear" if isinstance(mapping, mappings.Linear) else "mlp"
  return Model(kind=kind, num_bits=mapping.num_bits, dim=dim, settings=_mapping_settings(mapping), params=params,
               feature_range=feature_range, config=config, mapping=mapping)


def from_baseline(method: str, params: Any, *, train_features: Any, config: Any = None) -> Model:
  r"""A :class:`Model` of baseline ``method``'s fitted params.

  .. math:: \mathrm{Model}(\mathrm{encode}_{method}, \theta), \qquad \mathrm{range} = [\min X, \max X]

  Args:
    method: ``"lsh"``, ``"pca"``, ``"itq"``, ``"sh"`` or ``"iso"`` (see :data:`hashjax.baselines.BASELINES`).
    params: the params NamedTuple :func:`hashjax.baselines.fit` returned for ``method``.
    train_features: ``[N, dim]`` the features it was fitted on (for the width and value range).
    config: the run's config (a ``ml_collections.ConfigDict`` or a JSON-serialisable dict), or None.

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
  if not isinstance(params, cls):
    raise ValueError(f"params: expected {cls.__name__} from hashjax.baselines.fit({method!r}, ...), "
                     f"got {type(params).__name__}")
  dim, feature_range = _train_stats(train_features)
  if tuple(params.mean.shape) != (dim,):
    raise ValueError(f"train_features: expected {params.mean.shape[0]} columns (the width the params were fit "
                     f"on), got shape {tuple(train_features.shape)}")
  return _baseline_model(method, params, dim=dim, feature_range=feature_range,
                         config=None if config is None else _json_plain("config", config))


def _baseline_model(method: str, params: Any, *, dim: int, feature_range: Tuple[float, float],
                    config: Optional[Dict[str, Any]]) -> Model:
  cls = _BASELINE_PARAMS[method]
  params = cls(*(_checks.as_jax(a) for a in params))
  # The code length is what encode gives; tracing it computes nothing.
  bits = jax.eval_shape(lambda p, x: baselines.encode(method, p, x), params,
                        jax.ShapeDtypeStruct((1, dim), params.mean.dtype))
  return Model(kind=method, num_bits=int(bits.shape[-1]), dim=dim, settings={}, params=params,
               feature_range=feature_range, config=config)


def _colgen_params(arrays: Dict[str, np.ndarray]) -> Any:
  fields = colgen_features.PARAM_FIELDS
  missing = [f"params/{f}" for f in fields if f"params/{f}" not in arrays]
  if missing:
    raise ValueError(f"params: a 'colgen' model needs arrays {[f'params/{f}' for f in fields]}, missing {missing}")
  return colgen_features.HashParams(*(arrays[f"params/{f}"] for f in fields))


def _colgen_model(params: Any, bit_weights: Any, *, settings: Dict[str, Any], dim: int,
                  feature_range: Tuple[float, float], config: Optional[Dict[str, Any]]) -> Model:
  """A checked colgen :class:`Model` (float32 arrays) of ``params`` and ``bit_weights``."""
  if not isinstance(params, colgen_features.HashParams):
    raise ValueError(f"params: expected hashjax.colgen.features.HashParams, got {type(params).__name__}")
  arrays = {}
  for name, value in zip(colgen_features.PARAM_FIELDS, params):
    value = np.asarray(value)
    _checks.check_real(f"params.{name}", value)
    arrays[name] = value.astype(np.float32)
  anchors, scale, mean, projection, bias = (arrays[f] for f in colgen_features.PARAM_FIELDS)
  width = dim if anchors.shape[0] == 0 else anchors.shape[0]
  if anchors.ndim != 2 or anchors.shape[1] != dim:
    raise ValueError(f"params.anchors: expected shape (A, {dim}) (A = 0 for raw features), got {anchors.shape}")
  if scale.shape != () or not scale > 0:
    raise ValueError(f"params.scale: expected a positive scalar, got {scale!r}")
  if mean.shape != (width,) or projection.ndim != 2 or projection.shape[0] != width or projection.shape[1] < 1:
    raise ValueError(f"params.mean / params.projection: expected shapes ({width},) and ({width}, num_bits >= 1), "
                     f"got {mean.shape} and {projection.shape}")
  num_bits = projection.shape[1]
  if bias.shape != (num_bits,):
    raise ValueError(f"params.bias: expected shape ({num_bits},), got {bias.shape}")
  if bit_weights is None:
    raise ValueError("bit_weights: expected float [num_bits] non-negative weights, got None")
  bit_weights = np.asarray(bit_weights)
  _checks.check_real("bit_weights", bit_weights)
  _checks.check_nonnegative("bit_weights", bit_weights, what="bit weights")
  if bit_weights.shape != (num_bits,):
    raise ValueError(f"bit_weights: expected shape ({num_bits},) (one per bit), got {bit_weights.shape}")
  settings = {**settings, "features": "linear" if anchors.shape[0] == 0 else "rbf"}
  return Model(kind="colgen", num_bits=int(num_bits), dim=int(dim), settings=settings,
               params=colgen_features.HashParams(*(_checks.as_jax(arrays[f]) for f in colgen_features.PARAM_FIELDS)),
               feature_range=feature_range, config=config, bit_weights=bit_weights.astype(np.float32))


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
  dim, feature_range = _train_stats(train_features)
  if not isinstance(method, str):
    raise ValueError(f"method: expected a string, got {type(method).__name__}")
  return _colgen_model(params, bit_weights, settings={"method": method}, dim=dim, feature_range=feature_range,
                       config=None if config is None else _json_plain("config", config))


# ----------------------------------------------------------------------------
# Saving.


def _write_file(path: str, write) -> None:
  with open(path, "wb") as f:
    write(f)
    f.flush()
    os.fsync(f.fileno())


def save_model(model: Model, path: Any) -> str:
  r"""Writes ``model`` to the directory ``path`` (``model.json`` and ``arrays.npz``), atomically.

  .. math:: \mathrm{path} \leftarrow (\mathrm{model.json}, \mathrm{arrays.npz})

  The directory is built under a temporary name beside ``path`` and renamed
  into place, so ``path`` never holds a half-written model; an existing saved
  model at ``path`` is replaced (moved aside, then removed). A ``path`` that
  exists and is neither a saved model nor an empty directory is refused.

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
  >>> meta["format"], meta["kind"], meta["num_bits"], meta["dim"]
  ('hashjax-model', 'sh', 6, 5)
  """
  if not isinstance(model, Model):
    raise ValueError(f"model: expected a hashjax.models.Model, got {type(model).__name__}")
  if not isinstance(path, (str, os.PathLike)):
    raise ValueError(f"path: expected a directory path (str or os.PathLike), got {type(path).__name__}")
  path = os.path.abspath(os.fspath(path))
  if os.path.exists(path):
    if not os.path.isdir(path):
      raise ValueError(f"path: {path!r} exists and is not a directory; refusing to replace it with a model")
    if os.listdir(path) and not os.path.isfile(os.path.join(path, MODEL_FILE)):
      raise ValueError(f"path: {path!r} is a non-empty directory without {MODEL_FILE}; refusing to replace it "
                       f"with a model (choose a new directory, e.g. {os.path.join(path, 'model')!r})")
  arrays = model._arrays()  # pylint: disable=protected-access
  meta = {
      "format": FORMAT, "version": _KIND_VERSION.get(model.kind, 1), "kind": model.kind, "num_bits": model.num_bits,
      "dim": model.dim,
      "settings": model.settings, "feature_range": list(model.feature_range), "config": model.config,
      "arrays": [{"name": k, "dtype": v.dtype.name, "shape": list(v.shape)} for k, v in arrays.items()],
  }
  text = (json.dumps(meta, indent=2, sort_keys=True, allow_nan=False) + "\n").encode("utf-8")
  parent = os.path.dirname(path)
  os.makedirs(parent, exist_ok=True)
  tmp = tempfile.mkdtemp(prefix=".tmp-model-", dir=parent)
  old = None
  try:
    _write_file(os.path.join(tmp, ARRAYS_FILE), lambda f: np.savez(f, **arrays))
    _write_file(os.path.join(tmp, MODEL_FILE), lambda f: f.write(text))
    if os.path.exists(path):
      old = tempfile.mkdtemp(prefix=".old-model-", dir=parent)
      os.replace(path, old)  # an empty directory is replaced by a rename
    os.replace(tmp, path)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    if old is not None and not os.path.exists(path) and os.path.isdir(old):
      os.replace(old, path)  # put the previous model back
    raise
  finally:
    if old is not None and os.path.isdir(old):
      shutil.rmtree(old, ignore_errors=True)
  return path


# ----------------------------------------------------------------------------
# Loading.


def _model_dirs(root: str) -> List[str]:
  if not os.path.isdir(root):
    return []
  # Names starting with "." are save_model's temporary directories.
  return sorted(os.path.join(root, d) for d in os.listdir(root)
                if not d.startswith(".") and os.path.isfile(os.path.join(root, d, MODEL_FILE)))


def _resolve(path: str) -> str:
  """The model directory of ``path``: itself, ``path/model``, or the one model under ``path/models``."""
  if not os.path.isdir(path):
    what = "does not exist" if not os.path.exists(path) else "is not a directory"
    raise ValueError(f"path: {path!r} {what}; expected a saved model's directory or a run's workdir")
  if os.path.isfile(os.path.join(path, MODEL_FILE)):
    return path
  if os.path.isdir(os.path.join(path, "model")):
    return os.path.join(path, "model")
  several = _model_dirs(os.path.join(path, "models"))
  if len(several) == 1:
    return several[0]
  if several:
    raise ValueError(f"path: {path!r} holds {len(several)} models; pass one of them: " + ", ".join(several))
  raise ValueError(f"path: {path!r} holds no saved model (expected {MODEL_FILE}, model/{MODEL_FILE} or "
                   f"models/<name>/{MODEL_FILE})")


def _read_meta(file: str) -> Dict[str, Any]:
  if not os.path.isfile(file):
    raise ValueError(f"{file}: missing (a saved model's directory holds {MODEL_FILE} and {ARRAYS_FILE})")
  try:
    with open(file, "rb") as f:
      meta = json.loads(f.read().decode("utf-8"))
  except (UnicodeDecodeError, json.JSONDecodeError) as e:
    raise ValueError(f"{file}: not valid JSON ({e})") from None
  if not isinstance(meta, dict):
    raise ValueError(f"{file}: expected a JSON object, got {type(meta).__name__}")
  if meta.get("format") != FORMAT:
    raise ValueError(f"{file}: expected format {FORMAT!r}, got {meta.get('format')!r}")
  version = meta.get("version")
  if not _checks.is_int(version) or not 1 <= version <= VERSION:
    raise ValueError(f"{file}: expected format version 1..{VERSION} (this hashjax reads up to {VERSION}; a newer "
                     f"one needs a newer hashjax), got {version!r}")
  fields = ("kind", "num_bits", "dim", "settings", "feature_range", "config", "arrays")
  missing = [k for k in fields if k not in meta]
  if missing:
    raise ValueError(f"{file}: missing field(s) {missing}")
  if meta["kind"] not in KINDS:
    raise ValueError(f"{file}: kind: expected one of {list(KINDS)}, got {meta['kind']!r}")
  if version < _KIND_VERSION.get(meta["kind"], 1):
    raise ValueError(f"{file}: kind {meta['kind']!r} needs format version {_KIND_VERSION[meta['kind']]} or newer, "
                     f"got {version}")
  for name in ("num_bits", "dim"):
    if not _checks.is_int(meta[name]) or meta[name] < 1:
      raise ValueError(f"{file}: {name}: expected a positive int, got {meta[name]!r}")
  feature_range = meta["feature_range"]
  if (not isinstance(feature_range, list) or len(feature_range) != 2
      or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in feature_range)
      or feature_range[0] > feature_range[1]):
    raise ValueError(f"{file}: feature_range: expected [lo, hi] with lo <= hi, got {feature_range!r}")
  if not isinstance(meta["settings"], dict) or not (meta["config"] is None or isinstance(meta["config"], dict)):
    raise ValueError(f"{file}: expected settings as an object and config as an object or null")
  arrays = meta["arrays"]
  if not isinstance(arrays, list) or not all(
      isinstance(a, dict) and isinstance(a.get("name"), str) and isinstance(a.get("dtype"), str)
      and isinstance(a.get("shape"), list) for a in arrays):
    raise ValueError(f"{file}: arrays: expected a list of {{name, dtype, shape}} objects, got {arrays!r}")
  return meta


def _read_arrays(file: str, listed: List[Dict[str, Any]]) -> Dict[str, np.ndarray]:
  if not os.path.isfile(file):
    raise ValueError(f"{file}: missing (a saved model's directory holds {MODEL_FILE} and {ARRAYS_FILE})")
  out, problem = {}, None
  try:
    with open(file, "rb") as f, np.load(f, allow_pickle=False) as archive:
      if not hasattr(archive, "files"):
        problem = "expected an .npz archive, got a single .npy array"
      for entry in listed if problem is None else ():
        name = entry["name"]
        if name not in archive.files:
          problem = f"missing array {name!r} (listed in {MODEL_FILE}); it holds {sorted(archive.files)}"
          break
        value = archive[name]
        if value.dtype.name != entry["dtype"] or list(value.shape) != entry["shape"]:
          problem = (f"array {name!r}: expected dtype {entry['dtype']} and shape {tuple(entry['shape'])} "
                     f"(as {MODEL_FILE} lists), got {_checks.desc(value)}")
          break
        out[name] = value
  except (OSError, EOFError, KeyError, ValueError, zipfile.BadZipFile, zlib.error) as e:
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
  error lists them; pass one).

  Args:
    path: a directory (str or os.PathLike).

  Returns:
    The :class:`Model`; ``model.encode(features)`` gives the words training evaluated.

  Raises:
    ValueError: naming the file and what is wrong with it (missing, not JSON, another format or a newer
      version, a missing or mis-shaped array, a truncated archive).

  >>> import jax, os, tempfile, numpy as np
  >>> x = np.random.default_rng(0).random((20, 5), dtype=np.float32)
  >>> model = from_baseline("itq", baselines.fit("itq", x, num_bits=4, key=jax.random.key(0)), train_features=x)
  >>> workdir = tempfile.mkdtemp()
  >>> _ = model.save(os.path.join(workdir, "model"))
  >>> bool((load_model(workdir).encode(x) == model.encode(x)).all())
  True
  """
  if not isinstance(path, (str, os.PathLike)):
    raise ValueError(f"path: expected a directory path (str or os.PathLike), got {type(path).__name__}")
  directory = _resolve(os.path.abspath(os.fspath(path)))
  meta_file = os.path.join(directory, MODEL_FILE)
  meta = _read_meta(meta_file)
  arrays = _read_arrays(os.path.join(directory, ARRAYS_FILE), meta["arrays"])
  kind, settings = meta["kind"], meta["settings"]
  lo, hi = (float(v) for v in meta["feature_range"])
  try:
    if kind in _MAPPING_KINDS:
      mapping = _build_mapping(kind, meta["num_bits"], settings, arrays.get("preprocess/mean"),
                               arrays.get("preprocess/scale"))
      params = _unflatten(arrays, "params")
      _check_mapping_params(mapping, params, meta["dim"])
      model = Model(kind=kind, num_bits=mapping.num_bits, dim=meta["dim"], settings=_mapping_settings(mapping),
                    params=jax.tree.map(_checks.as_jax, params), feature_range=(lo, hi), config=meta["config"],
                    mapping=mapping)
    elif kind == "colgen":
      model = _colgen_model(_colgen_params(arrays), arrays.get("bit_weights"), settings=settings, dim=meta["dim"],
                            feature_range=(lo, hi), config=meta["config"])
    else:
      cls = _BASELINE_PARAMS[kind]
      missing = [f for f in cls._fields if f"params/{f}" not in arrays]
      if missing:
        raise ValueError(f"params: a {kind!r} model needs arrays {[f'params/{f}' for f in cls._fields]}, "
                         f"missing {[f'params/{f}' for f in missing]}")
      params = cls(*(arrays[f"params/{f}"] for f in cls._fields))
      if tuple(params.mean.shape) != (meta["dim"],):
        raise ValueError(f"params/mean: expected shape ({meta['dim']},) (dim), got {tuple(params.mean.shape)}")
      model = _baseline_model(kind, params, dim=meta["dim"], feature_range=(lo, hi), config=meta["config"])
  except (ValueError, TypeError) as e:
    raise ValueError(f"{meta_file}: does not describe a usable model: {e}") from None
  if model.num_bits != meta["num_bits"] or model.dim != meta["dim"]:
    raise ValueError(f"{meta_file}: num_bits / dim: the arrays give {model.num_bits} / {model.dim}, the file says "
                     f"{meta['num_bits']} / {meta['dim']}")
  return model
