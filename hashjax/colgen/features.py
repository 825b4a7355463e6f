r"""The hash-function family of column generation hashing: perceptrons on raw or on RBF kernel features.

Every bit is a perceptron (eqs. 19 and 57) on a fixed feature map :math:`\phi`,

.. math:: h_r(x) = [\, v_r^\top (\phi(x) - \bar\phi) + b_r > 0 \,],

with :math:`\phi(x) = x` (``"linear"``) or, as in the paper's kernel variant (after KSH), the RBF responses to
``A`` anchor points drawn from the training set (``"rbf"``),

.. math:: \phi(x)_a = \exp\!\big(-\|x - u_a\|^2 / (2 \sigma^2)\big), \qquad
   \sigma = \mathrm{mean}_{i, a} \|x_i - u_a\|,

centred on the training mean :math:`\bar\phi`. :class:`HashParams` holds the whole hash function; it is what a
saved colgen model stores (:mod:`hashjax.models`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks
from hashjax import _encode
from hashjax.baselines import _anchors

#: ``features=`` of :func:`fit_feature_map`.
FEATURE_KINDS = ("linear", "rbf")

__all__ = ["FEATURE_KINDS", "HashParams", "PARAM_FIELDS", "fit_feature_map", "feature_map", "hash_bits"]


class HashParams(NamedTuple):
  """A column-generation hash function: feature map and one perceptron per bit.

  ``anchors[A, d]`` (``A = 0`` for linear features), ``scale`` (``float[]``, the RBF width sigma; 1 for linear),
  ``mean[D]`` (training mean of the features, ``D = d`` or ``A``), ``projection[D, b]``, ``bias[b]``.
  """
  anchors: Any
  scale: Any
  mean: Any
  projection: Any
  bias: Any


#: The array names of :class:`HashParams`, in order (a saved model's ``params/<name>`` arrays).
PARAM_FIELDS = HashParams._fields


def _raw_features(anchors, scale, x, xp):
  return x if anchors.shape[0] == 0 else _anchors.rbf(anchors, scale, x, xp)


def fit_feature_map(features: Any, *, kind: str = "linear", num_anchors: int = 300, seed: _checks.Seed = 0) -> HashParams:
  r"""The feature map of ``kind`` fitted on training ``features[n, d]``, with no bits yet (``b = 0``).

  .. math:: \bar\phi = \frac{1}{n} \sum_i \phi(x_i)

  Args:
    features: ``float[n, d]`` training features.
    kind: ``"linear"`` (raw features) or ``"rbf"`` (kernel responses to ``num_anchors`` training points).
    num_anchors: anchors of ``"rbf"`` (at most ``n``), drawn without replacement.
    seed: int or ``numpy.random.Generator`` (the anchors).

  Returns:
    :class:`HashParams` (float64) with an empty ``projection[D, 0]`` and ``bias[0]``.

  >>> p = fit_feature_map(np.eye(4), kind="rbf", num_anchors=2)
  >>> p.anchors.shape, p.mean.shape, p.projection.shape
  ((2, 4), (2,), (2, 0))
  """
  _checks.check_option("kind", kind, FEATURE_KINDS)
  _checks.check_real("features", features, shape_doc="[num_items, dim]", ndim=2)
  x = np.asarray(features, np.float64)
  if kind == "linear":
    anchors, scale = np.zeros((0, x.shape[1])), 1.0
  else:
    anchors, scale = _anchors.fit(x, num_anchors, seed)
  phi = _raw_features(anchors, scale, x, np)
  return HashParams(anchors, np.float64(scale), phi.mean(0), np.zeros((phi.shape[1], 0)), np.zeros(0))


def feature_map(params: HashParams, features: Any) -> np.ndarray:
  r"""Centred features :math:`\phi(x) - \bar\phi`, ``float64[n, D]`` (on the host, for training).

  >>> p = fit_feature_map(np.array([[0.0, 1.0], [2.0, 3.0]]))
  >>> feature_map(p, np.array([[1.0, 1.0]])).tolist()
  [[0.0, -1.0]]
  """
  x = np.asarray(features, np.float64)
  return _raw_features(np.asarray(params.anchors), float(params.scale), x, np) - np.asarray(params.mean)


@jax.jit
def _device_bits(params: HashParams, x: jax.Array) -> jax.Array:
  x = x.astype(jnp.result_type(params.projection))
  phi = _raw_features(params.anchors, params.scale, x, jnp) - params.mean
  return (_encode.matmul(phi, params.projection) + params.bias > 0).astype(jnp.uint8)


def _host_bits(params: HashParams, x: np.ndarray) -> np.ndarray:
  return (feature_map(params, x) @ np.asarray(params.projection) + np.asarray(params.bias) > 0).astype(np.uint8)


def hash_bits(params: HashParams, features: Any) -> Any:
  r"""The bits of ``features[..., d]``: ``uint8[..., b]``, :math:`[v_r^\top(\phi(x) - \bar\phi) + b_r > 0]`.

  .. math:: h_r(x) = [\, v_r^\top (\phi(x) - \bar\phi) + b_r > 0 \,]

  numpy (float64) for numpy inputs, jax.numpy (the params' dtype, products in full float32 or better) for jax
  arrays and tracers. Either way the rows are computed in fixed blocks (:data:`hashjax._encode.BLOCK_ROWS` rows,
  the last padded), so the same features give the same bits in any batch, on a CPU or a GPU.

  >>> p = fit_feature_map(np.array([[0.0], [2.0]]))._replace(projection=np.array([[1.0, -1.0]]), bias=np.zeros(2))
  >>> hash_bits(p, np.array([[0.0], [2.0]])).tolist()
  [[0, 1], [1, 0]]
  """
  if isinstance(features, (jax.Array, jax.core.Tracer)):
    return _checks.as_jax(_encode.blockwise(lambda x: _device_bits(params, x), features))
  return _encode.blockwise(lambda x: _host_bits(params, x), np.asarray(features))
