r"""RBF responses to anchor points: the kernel feature map of KSH, SDH, COSDISH, AGH and column generation.

``A`` anchors are training points drawn without replacement; the width is the mean distance from the
training points to the anchors,

.. math:: \phi(x)_a = \exp\!\big(-\|x - u_a\|^2 / (2 \sigma^2)\big), \qquad
   \sigma = \mathrm{mean}_{i, a} \|x_i - u_a\|.

:func:`fit` runs on the host in float64; :func:`rbf` is written once against an array namespace ``xp`` (numpy on
the host for training, jax.numpy for encoding, its product at full float32 precision).
"""

from __future__ import annotations

from typing import Any, Tuple

import jax.numpy as jnp
import numpy as np

from hashjax import _checks
from hashjax import _encode
from hashjax.baselines import _common


def rbf(anchors: Any, scale: Any, x: Any, xp: Any = np) -> Any:
  r"""``float[..., A]`` RBF responses of ``x[..., d]`` to ``anchors[A, d]`` of width ``scale``.

  .. math:: \phi(x)_a = \exp(-\|x - u_a\|^2 / (2 \sigma^2))

  >>> rbf(np.array([[0.0, 0.0]]), 1.0, np.array([[0.0, 0.0], [0.0, 2.0]])).round(4).tolist()
  [[1.0], [0.1353]]
  """
  cross = _encode.matmul(x, anchors.T) if xp is jnp else x @ anchors.T
  sq = xp.sum(x * x, axis=-1, keepdims=True) - 2.0 * cross + xp.sum(anchors * anchors, axis=-1)
  return xp.exp(-xp.maximum(sq, 0.0) / (2.0 * scale * scale))


def fit(x: np.ndarray, num_anchors: Any, seed: Any, *, dtype: Any = np.float32) -> Tuple[np.ndarray, float]:
  r"""``(anchors[A, d], sigma)`` for float64 training points ``x[n, d]``: ``A`` of them drawn without
  replacement (sorted by index), and the mean distance from the points to the anchors; ``dtype``: that of the
  encoding, whose squared distances must fit it (:func:`hashjax.baselines._common.check_float32_distances`).

  .. math:: \sigma = \frac{1}{n A} \sum_{i, a} \|x_i - u_a\|

  Three points on a line, each an anchor: the nine distances sum to 2 (3 + 4 + 1) = 16, so sigma = 16 / 9.

  >>> anchors, sigma = fit(np.array([[0.0], [3.0], [4.0]]), 3, 0)
  >>> anchors.ravel().tolist(), sigma == 16 / 9
  ([0.0, 3.0, 4.0], True)
  """
  a = _checks.check_int_at_most("num_anchors", num_anchors, x.shape[0], what=f"the {x.shape[0]} training points")
  rng = _checks.check_rng(seed)
  anchors = x[np.sort(rng.choice(x.shape[0], a, replace=False))]
  sq = np.sum(x * x, 1)[:, None] - 2.0 * x @ anchors.T + np.sum(anchors * anchors, 1)
  scale = float(np.mean(np.sqrt(np.maximum(sq, 0.0))))
  if not scale > 0:
    raise ValueError("features: expected training points that differ from the anchors, got all distances 0")
  _common.check_float32_distances(x, dtype, scale=scale)
  return anchors, scale


def kernel_values(features: Any, mean: Any, anchors: Any, scale: Any, weights: Any, bias: Any) -> Any:
  r"""``float[..., b]``: the kernel hash functions' values :math:`W^\top \phi(x - \mu) + c` of ``features[..., d]``
  (jax, full float32 products); with no anchors (``anchors[0, d]``), a linear map of the centred features.

  .. math:: v(x) = W^\top \phi(x - \mu) + c

  >>> float(kernel_values(np.zeros((1, 1)), np.zeros(1), np.zeros((1, 1)), 1.0, np.ones((1, 1)), -0.5)[0, 0])
  0.5
  """
  x = features.astype(mean.dtype) - mean
  if anchors.shape[0]:
    x = rbf(anchors, scale, x, jnp)
  return _encode.matmul(x, weights) + bias
