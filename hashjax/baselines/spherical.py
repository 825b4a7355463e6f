r"""Spherical hashing (SpH; Heo, Lee, He, Chang & Yoon, CVPR 2012).

Bit ``k`` of ``x`` says whether ``x`` lies inside the hypersphere of pivot ``p_k`` and radius ``r_k``,
:math:`b_k(x) = [\|x - p_k\| < r_k]`. The spheres are learned so that every bit splits the training set in
half and every pair of bits overlaps on a quarter of it:

.. math:: o_k = |\{x_i : \|x_i - p_k\| < r_k\}| = \tfrac{n}{2}, \qquad
   o_{kl} = |\{x_i : \|x_i - p_k\| < r_k,\ \|x_i - p_l\| < r_l\}| = \tfrac{n}{4}

The paper's iteration, on the ``n`` training points:

1. each pivot starts at the mean of 5 training points drawn at random from the key (of ``n // 2`` when
   ``n < 10``, so that the pivots differ);
2. each radius is set so that half of the training points lie inside its sphere;
3. pairs pull or push each other: the force on pivot ``k`` from pivot ``l`` is
   :math:`f_{k \leftarrow l} = \tfrac{1}{2} \frac{o_{kl} - n/4}{n/4} (p_k - p_l)`, and every pivot moves by the
   mean force, :math:`p_k \mathrel{+}= \tfrac{1}{b} \sum_{l \ne k} f_{k \leftarrow l}`;
4. repeat 2-3 until, over the pairs, the mean of :math:`|o_{kl} - n/4|` falls within ``epsilon_mean * n/4``
   and the standard deviation of :math:`o_{kl}` within ``epsilon_stddev * n/4`` (the paper's 10% and 15%, as
   the authors' code computes them), or ``num_iters`` updates ran.

Departures from the paper:

* codes are ranked by the plain Hamming distance, like every hashjax code, not by the paper's spherical
  Hamming distance :math:`d_{SH}(a, b) = |a \oplus b| / |a \wedge b|` (which rewards shared 1s);
* the radius is the midpoint between the :math:`\lceil n/2 \rceil`-th and the next smallest training distance
  (not the :math:`\lceil n/2 \rceil`-th itself), so that, when the distances are distinct, exactly
  :math:`\lceil n/2 \rceil` training points lie strictly inside and the bit of a training point does not hang
  on a rounding of its distance.

Pivots are stored relative to the training mean (the sphere of bit ``k`` is centred on
``mean + pivots[k]``), which keeps the float32 distances of :func:`encode` accurate.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks
from hashjax import _encode
from hashjax.baselines import _common

Array = jax.Array

#: Force updates run by :func:`fit` at most (the iteration usually stops earlier, at the thresholds).
DEFAULT_NUM_ITERS = 100
#: The paper's thresholds on the mean of ``|o_kl - n/4|`` and the standard deviation of ``o_kl``, as fractions of
#: ``n/4``.
DEFAULT_EPSILON_MEAN = 0.10
DEFAULT_EPSILON_STDDEV = 0.15
#: Training points averaged into each starting pivot.
_START_POINTS = 5


class SphericalParams(NamedTuple):
  """``mean[dim]``, ``pivots[num_bits, dim]`` relative to the mean, and ``radii[num_bits]``."""
  mean: Array
  pivots: Array
  radii: Array


def _distances(x: np.ndarray, pivots: np.ndarray) -> np.ndarray:
  """``[n, b]`` Euclidean distances of float64 points to pivots."""
  sq = np.sum(x * x, 1)[:, None] - 2.0 * x @ pivots.T + np.sum(pivots * pivots, 1)
  return np.sqrt(np.maximum(sq, 0.0))


def _radii(dist: np.ndarray) -> np.ndarray:
  """``[b]`` radii halfway between the ``ceil(n/2)``-th and the next smallest distance of each column."""
  half = -(-dist.shape[0] // 2)
  part = np.partition(dist, (half - 1, half), axis=0)
  return 0.5 * (part[half - 1] + part[half])


def fit(features: Array, *, num_bits: int, key: Optional[Any] = None, num_iters: int = DEFAULT_NUM_ITERS,
        epsilon_mean: float = DEFAULT_EPSILON_MEAN,
        epsilon_stddev: float = DEFAULT_EPSILON_STDDEV) -> SphericalParams:
  r"""Learns ``num_bits`` hyperspheres by the paper's force-based iteration.

  .. math:: p_k \leftarrow p_k + \frac{1}{b} \sum_{l \ne k} \frac{1}{2} \frac{o_{kl} - n/4}{n/4} (p_k - p_l),
     \qquad r_k = \mathrm{median}_i \|x_i - p_k\|

  Args:
    features: ``[N, dim]`` finite training features, ``N >= 2``.
    num_bits: code length ``b >= 1`` (may exceed ``dim``).
    key: a ``jax.random`` key for the starting pivots; None: ``jax.random.key(0)``.
    num_iters: force updates at most (``0`` keeps the starting pivots).
    epsilon_mean: stop when the mean of :math:`|o_{kl} - n/4|` is at most this fraction of ``n/4`` ...
    epsilon_stddev: ... and the standard deviation of :math:`o_{kl}` at most this fraction of ``n/4``.

  Returns:
    :class:`SphericalParams` with ``mean[dim]``, ``pivots[num_bits, dim]`` and ``radii[num_bits]``.

  >>> import jax, numpy as np
  >>> x = np.random.default_rng(0).normal(size=(100, 8)).astype(np.float32)
  >>> params = fit(x, num_bits=6, key=jax.random.key(0))
  >>> params.pivots.shape, params.radii.shape
  ((6, 8), (6,))
  >>> np.asarray(encode(params, x)).sum(axis=0).tolist()  # each sphere holds half of the training points
  [50, 50, 50, 50, 50, 50]
  """
  _common.check_fit_features(features, min_rows=2)
  num_bits = _checks.check_num_bits(num_bits)
  key = jax.random.key(0) if key is None else key
  _checks.check_host_key(key)
  num_iters = _checks.check_int("num_iters", num_iters, low=0)
  epsilon_mean = _checks.check_number("epsilon_mean", epsilon_mean, low=0)
  epsilon_stddev = _checks.check_number("epsilon_stddev", epsilon_stddev, low=0)
  x, dtype = _common.host_features(features)
  n = x.shape[0]
  mean = x.mean(axis=0)
  x = x - mean
  _common.check_float32_distances(x, dtype)
  # Each pivot: the mean of _START_POINTS distinct training points (a random order's first ones), or of n // 2;
  # the order drawn in float32 whatever jax_enable_x64 says, so that one key gives one start.
  draws = np.asarray(jax.random.uniform(key, (num_bits, n), jnp.float32))
  order = np.argsort(draws, axis=1)[:, :min(_START_POINTS, n // 2)]
  pivots = x[order].mean(axis=1)
  quarter = n / 4.0
  pairs = np.triu_indices(num_bits, 1)
  for _ in range(num_iters):
    dist = _distances(x, pivots)
    inside = (dist < _radii(dist)).astype(np.float64)
    excess = (inside.T @ inside - quarter) / quarter  # [b, b]: (o_kl - n/4) / (n/4)
    over = excess[pairs]
    if num_bits < 2 or (np.abs(over).mean() <= epsilon_mean and over.std() <= epsilon_stddev):
      break
    np.fill_diagonal(excess, 0.0)
    # sum_l 0.5 excess_kl (p_k - p_l) / b
    pivots = pivots + 0.5 * (excess.sum(1)[:, None] * pivots - excess @ pivots) / num_bits
  radii = _radii(_distances(x, pivots))
  return SphericalParams(*(jnp.asarray(a, dtype) for a in (mean, pivots, radii)))


def _margins(params: SphericalParams, features: Array) -> Array:
  """``r_k - ||x - mean - pivots[k]||`` of ``features[..., dim]``."""
  x = features.astype(params.mean.dtype) - params.mean
  cross = _encode.matmul(x, params.pivots.T)
  sq = jnp.sum(x * x, axis=-1, keepdims=True) - 2.0 * cross + jnp.sum(params.pivots * params.pivots, axis=-1)
  return params.radii - jnp.sqrt(jnp.maximum(sq, 0.0))


def project(params: SphericalParams, features: Array) -> Array:
  r"""The margins whose signs are the bits of :func:`encode`: how far inside each sphere ``x`` lies.

  .. math:: v_k(x) = r_k - \|x - \mu - p_k\|

  Args:
    params: :class:`SphericalParams` from :func:`fit`.
    features: ``[..., dim]`` finite features, ``dim`` as in :func:`fit`.

  Returns:
    ``float[..., num_bits]``: bit ``k`` is 1 where value ``k`` is ``> 0``.

  >>> import jax, numpy as np
  >>> x = np.random.default_rng(0).normal(size=(40, 6)).astype(np.float32)
  >>> params = fit(x, num_bits=4, key=jax.random.key(0))
  >>> bool(np.array_equal(np.asarray(project(params, x)) > 0, np.asarray(encode(params, x)) == 1))
  True
  """
  return _common.encoded(params, features, _margins, cls=SphericalParams, module="spherical", binary=False)


def encode(params: SphericalParams, features: Array) -> Array:
  r"""Hashes ``features`` by the spheres they fall in.

  .. math:: b_k(x) = [\|x - \mu - p_k\| < r_k]

  Args:
    params: :class:`SphericalParams` from :func:`fit`.
    features: ``[..., dim]`` finite features, ``dim`` as in :func:`fit`.

  Returns:
    ``uint8[..., num_bits]`` bits in ``{0, 1}``.

  >>> import numpy as np
  >>> params = SphericalParams(np.zeros(2, np.float32), np.array([[1.0, 0.0]], np.float32),
  ...                          np.array([1.5], np.float32))
  >>> encode(params, np.array([[0.0, 0.0], [3.0, 0.0]], np.float32)).tolist()
  [[1], [0]]
  """
  return _common.encoded(params, features, _margins, cls=SphericalParams, module="spherical", binary=True)
