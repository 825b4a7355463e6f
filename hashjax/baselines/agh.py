r"""Anchor graph hashing (AGH; Liu, Wang, Kumar & Chang, ICML 2011).

Spectral hashing on an anchor graph: the ``n x n`` affinity of the training points is approximated through
``m`` anchors, :math:`A = Z \Lambda^{-1} Z^\top`, and the codes are thresholded eigenvectors of it. The steps:

1. anchors: ``kmeans_iters`` rounds of Lloyd's k-means on the training points, started from ``m`` distinct
   training points drawn from the key (an anchor whose cluster empties keeps its place);
2. the truncated similarity :math:`Z[n, m]`: each point's ``s`` nearest anchors get Gaussian weights
   :math:`\exp(-\|x - u_j\|^2 / t)`, normalised to sum to 1 over those ``s``, the rest 0; the bandwidth ``t``
   is :math:`\sigma^2`, :math:`\sigma` the mean distance from a training point to its ``s``-th nearest anchor;
3. with :math:`\Lambda = \mathrm{diag}(Z^\top \mathbf{1})`, the eigenvectors :math:`V` of
   :math:`M = \Lambda^{-1/2} Z^\top Z \Lambda^{-1/2}` with the ``r`` largest eigenvalues :math:`\Sigma`, once
   the trivial eigenvector :math:`\Lambda^{1/2} \mathbf{1}` (eigenvalue 1, constant codes) is deflated, each
   signed so that its largest-magnitude entry is positive, give the
   projection :math:`W = \sqrt{n}\, \Lambda^{-1/2} V \Sigma^{-1/2}` (so :math:`Y = Z W` has
   :math:`Y^\top Y = n I` and :math:`Y^\top \mathbf{1} = 0` on the training points);
4. a new point ``x`` is hashed through its own row :math:`z(x)` of step 2: :math:`y(x) = W^\top z(x)`.

The objective is the graph-Laplacian relaxation of balanced, uncorrelated codes that keep anchor-graph
neighbours close:

.. math:: \min_{Y} \tfrac{1}{2} \sum_{i,j} \|Y_i - Y_j\|^2 A_{ij}
   \quad \text{s.t.}\ Y^\top \mathbf{1} = 0,\ Y^\top Y = n I

One-layer AGH (``layers=1``) keeps ``r = num_bits`` eigenvectors, bit :math:`[y_k(x) > 0]`. Two-layer AGH
(``layers=2``) keeps ``r = num_bits / 2`` and gives each two bits, ``2k`` and ``2k + 1``: the sign, and whether
:math:`y_k(x)` lies between the thresholds :math:`b_k^- < b_k^+` (a second cut of each half): the paper's, which
keep the second-layer bits balanced on the training points and cut the fewest anchor-graph edges
(:func:`_thresholds`); with an odd ``num_bits`` the last of ``r = (num_bits + 1) / 2`` eigenvectors gives its
sign bit only. The paper's second-layer bit is 1 outside the thresholds, this one inside: the complement, which
changes no Hamming distance.

Departures from the paper: the ``s`` nearest anchors of a point are those at most as far as its ``s``-th
nearest (more than ``s`` only on an exact tie of distances); the two bits of an eigenvector are adjacent
(the paper lists all first-layer bits, then all second-layer ones), which changes no Hamming distance; when no
training point links some anchors to the others, the graph falls into ``c`` parts and eigenvalue 1 has ``c``
eigenvectors, any basis of their span as good as another: beyond the deflated trivial one, its ``c - 1``
eigenvectors are then the parts' indicators :math:`\Lambda^{1/2} \mathbf{1}_{part}`, in the order of each part's
first anchor, orthonormalised against the trivial one and each other (Gram-Schmidt, by QR), so that the codes do
not depend on the basis an eigensolver returns; on such a graph an eigenvector is often 0 on whole parts (an
orthonormalised indicator on the parts before its own, an eigenvector of another eigenvalue outside its part),
and it is set to exactly 0 there, so that those parts' bits are not decided by rounding; when no edge joins the
two halves of an eigenvector (each half whole parts), no second cut is better than another and its second-layer
bit is 1 for every point (:func:`_thresholds`).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse
import scipy.sparse.csgraph

from hashjax import _checks
from hashjax import _encode
from hashjax.baselines import _common

Array = jax.Array

#: The paper's MNIST settings: 300 anchors, each point linked to its 2 nearest.
DEFAULT_NUM_ANCHORS = 300
DEFAULT_NUM_NEAREST = 2
#: Lloyd iterations placing the anchors.
DEFAULT_KMEANS_ITERS = 5

#: The smallest eigenvalue (relative to the trivial 1) whose eigenvector still makes a hash function.
_MIN_EIGENVALUE = 1e-10
#: An eigenvector's largest magnitude on a part of the graph, relative to its largest, below which it is 0 there
#: but for rounding.
_ROUNDING = 1e-10


class AGHParams(NamedTuple):
  """Anchor graph hashing parameters.

  ``mean[dim]``, ``anchors[m, dim]`` relative to the mean, the kernel ``bandwidth`` ``t`` (``[]``), the number of
  nearest anchors ``num_nearest`` ``s`` (``int32[]``), the ``projection[m, r]`` from a point's anchor weights
  to its eigenfunction values, and the second-layer thresholds ``upper[r2]`` and ``lower[r2]`` of the first
  ``r2`` eigenvectors (``r2 = 0`` with one layer, ``num_bits - r`` with two); ``num_bits = r + r2``.
  """
  mean: Array
  anchors: Array
  bandwidth: Array
  num_nearest: Array
  projection: Array
  upper: Array
  lower: Array


def _sq_distances(x: np.ndarray, anchors: np.ndarray) -> np.ndarray:
  return np.maximum(np.sum(x * x, 1)[:, None] - 2.0 * x @ anchors.T + np.sum(anchors * anchors, 1), 0.0)


def _kmeans(x: np.ndarray, anchors: np.ndarray, num_iters: int) -> np.ndarray:
  """``num_iters`` Lloyd rounds from ``anchors``; an anchor whose cluster is empty stays put."""
  m = anchors.shape[0]
  for _ in range(num_iters):
    nearest = np.argmin(_sq_distances(x, anchors), axis=1)
    counts = np.bincount(nearest, minlength=m)
    sums = np.zeros_like(anchors)
    np.add.at(sums, nearest, x)
    anchors = np.where(counts[:, None] > 0, sums / np.maximum(counts, 1)[:, None], anchors)
  return anchors


def _weights(sq: Any, num_nearest: Any, bandwidth: Any, xp: Any) -> Any:
  """Rows of ``Z`` from squared distances ``sq[..., m]`` to the anchors (``xp``: numpy or jax.numpy)."""
  ordered = xp.sort(sq, axis=-1)
  kth = xp.take(ordered, num_nearest - 1, axis=-1)[..., None]
  # exp(-(d^2 - d_min^2) / t): the row's scale cancels in the normalisation, and nothing underflows to 0 / 0.
  w = xp.where(sq <= kth, xp.exp(-(sq - ordered[..., :1]) / bandwidth), 0.0)
  return w / xp.sum(w, axis=-1, keepdims=True)


def _parts(linked: np.ndarray, lam: np.ndarray) -> np.ndarray:
  """``{0, 1}[m, c]``: the anchors of each part of the anchor graph (anchors ``j, k`` linked where
  ``linked[j, k] > 0``), the parts in the order of their first anchor; an anchor no point links to is in none."""
  _, label = scipy.sparse.csgraph.connected_components(scipy.sparse.csr_matrix(linked > 0), directed=False)
  return (label[:, None] == np.unique(label[lam > 0])[None, :]).astype(np.float64)


def _thresholds(y: np.ndarray, z: np.ndarray, lam: np.ndarray, bound: np.ndarray) -> tuple:
  r"""``(upper[r2], lower[r2])``: the second-layer thresholds :math:`b^+, b^-` of training values ``y[n, r2]``.

  With :math:`A = Z \Lambda^{-1} Z^\top`, :math:`L = I - A`, the halves :math:`+ = \{y > 0\}` (``n_1`` points)
  and :math:`-` (``n_2``), the second-layer values :math:`\hat y = |y| - b^+ 1_+ + b^- 1_-` are balanced,
  :math:`1^\top \hat y = 0`, and the cut :math:`\hat y^\top L \hat y` is smallest at
  :math:`b^+ + b^- = c = 1_+^\top L |y| / 1_+^\top L 1_+`:

  .. math:: b^+ = (2 s + n_2 c) / n, \quad b^- = (n_1 c - 2 s) / n, \quad s = 1_+^\top y_+

  When no edge joins the halves, each is a union of the graph's parts and every pair of thresholds cuts alike
  (none cuts an edge), so none is chosen: the thresholds are :math:`\pm 2\,` ``bound`` (``bound[r2]``: the
  largest :math:`|y|` of any point, :math:`\max_j |W_{jk}|`), beyond every point's value, and the second-layer
  bit is 1 for every point, rather than decided by rounding or copying the sign bit.
  """
  n = y.shape[0]
  positive = y > 0
  n1 = positive.sum(0)
  inv = np.where(lam > 0, 1.0 / np.where(lam > 0, lam, 1.0), 0.0)
  linked = z.T @ positive  # [m, r2]: Z^T 1_+
  s = np.sum(np.where(positive, y, 0.0), 0)
  across = n1 - np.sum(linked * linked * inv[:, None], 0)  # 1_+^T L 1_+: the weight of edges joining the halves
  pull = s - np.sum(linked * inv[:, None] * (z.T @ np.abs(y)), 0)  # 1_+^T L |y|
  joined = across > _ROUNDING * n1
  c = np.where(joined, pull / np.where(joined, across, 1.0), 0.0)
  return (np.where(joined, (2.0 * s + (n - n1) * c) / n, 2.0 * bound),
          np.where(joined, (n1 * c - 2.0 * s) / n, -2.0 * bound))


def fit(features: Array, *, num_bits: int, key: Optional[Any] = None, layers: int = 2,
        num_anchors: int = DEFAULT_NUM_ANCHORS, num_nearest: int = DEFAULT_NUM_NEAREST,
        kmeans_iters: int = DEFAULT_KMEANS_ITERS) -> AGHParams:
  r"""Fits one- or two-layer anchor graph hashing.

  .. math:: (\Lambda^{-1/2} Z^\top Z \Lambda^{-1/2} - u u^\top) V = V \Sigma, \quad
     u = \frac{\Lambda^{1/2} \mathbf{1}}{\|\Lambda^{1/2} \mathbf{1}\|}, \quad
     W = \sqrt{n}\, \Lambda^{-1/2} V_{:, 1:r} \Sigma_{1:r}^{-1/2}

  Args:
    features: ``[N, dim]`` finite training features, ``N >= 2``.
    num_bits: code length, at most ``layers * (num_anchors - 1)``; with two layers and an odd ``num_bits``
      the last eigenvector gives its sign bit only.
    key: a ``jax.random`` key for the k-means start; None: ``jax.random.key(0)``.
    layers: 1 (a bit per eigenvector) or 2 (two bits per eigenvector; the default, chosen on a validation
      split of the MNIST-10k training set: AP_T 0.619 against 0.442 for one layer at 32 bits, the mean of
      three splits).
    num_anchors: ``m``, at most ``N``.
    num_nearest: ``s``, the anchors each point links to, at most ``num_anchors``.
    kmeans_iters: Lloyd iterations (``0`` keeps the random training points as anchors).

  Returns:
    :class:`AGHParams`.

  >>> import jax, numpy as np
  >>> x = np.random.default_rng(0).normal(size=(100, 8)).astype(np.float32)
  >>> params = fit(x, num_bits=6, num_anchors=20, layers=2)
  >>> params.anchors.shape, params.projection.shape, params.upper.shape
  ((20, 8), (20, 3), (3,))
  """
  _common.check_fit_features(features, min_rows=2)
  key = jax.random.key(0) if key is None else key
  _checks.check_host_key(key)
  layers = _checks.check_int_at_most("layers", layers, 2, what="2 (one or two layers)")
  n = features.shape[0]
  num_anchors = _checks.check_int_at_most("num_anchors", num_anchors, n, what=f"the {n} training points", low=2)
  num_nearest = _checks.check_int_at_most("num_nearest", num_nearest, num_anchors, what="num_anchors")
  kmeans_iters = _checks.check_int("kmeans_iters", kmeans_iters, low=0)
  most = layers * (num_anchors - 1)  # layers bits from each of the num_anchors - 1 non-trivial eigenvectors
  num_bits = _checks.check_int_at_most("num_bits", num_bits, most, what=f"layers * (num_anchors - 1) = {most}")
  r = -(-num_bits // layers)
  x, dtype = _common.host_features(features)
  mean = x.mean(axis=0)
  x = x - mean
  _common.check_float32_distances(x, dtype)
  start = np.sort(np.asarray(jax.random.choice(key, n, (num_anchors,), replace=False)))
  anchors = _kmeans(x, x[start], kmeans_iters)
  sq = _sq_distances(x, anchors)
  bandwidth = float(np.mean(np.sqrt(np.partition(sq, num_nearest - 1, axis=1)[:, num_nearest - 1]))) ** 2
  # 0 only when every point sits on s anchors; a tiny width then gives all weight to the nearest.
  bandwidth = max(bandwidth, float(np.finfo(np.float32).tiny))
  z = _weights(sq, num_nearest, bandwidth, np)
  lam = z.sum(axis=0)
  scale = np.where(lam > 0, 1.0 / np.sqrt(np.where(lam > 0, lam, 1.0)), 0.0)  # an anchor no point links to: 0
  # sqrt(lam) is always an eigenvector of eigenvalue 1 (Z's rows sum to 1); it is deflated rather than dropped
  # by rank, since a graph of several components has eigenvalue 1 several times.
  trivial = np.sqrt(lam) / np.linalg.norm(np.sqrt(lam))
  linked = z.T @ z  # [m, m]: anchors j, k linked through the points near both
  m_mat = scale[:, None] * linked * scale[None, :] - np.outer(trivial, trivial)
  vals, vecs = np.linalg.eigh(m_mat)  # ascending
  vals, vecs = vals[::-1][:r], vecs[:, ::-1][:, :r]
  parts = _parts(linked, lam)
  if parts.shape[1] > 2:  # eigenvalue 1 repeats: its eigenspace's basis is the parts', not the solver's
    q = np.linalg.qr(np.concatenate([trivial[:, None], np.sqrt(lam)[:, None] * parts[:, :-1]], axis=1))[0]
    k = min(parts.shape[1] - 1, r)
    vals[:k], vecs[:, :k] = 1.0, q[:, 1:k + 1]
  if parts.shape[1] > 1:  # on a part where an eigenvector is 0 but for rounding, exactly 0 (its bits: not noise)
    part_max = np.max(parts[:, :, None] * np.abs(vecs)[:, None, :], axis=0)  # [c, r]
    vanishing = part_max <= _ROUNDING * np.max(np.abs(vecs), axis=0)
    vecs = np.where(parts @ vanishing > 0, 0.0, vecs)
  informative = int(np.sum(vals > _MIN_EIGENVALUE))
  if informative < r:
    raise ValueError(f"num_bits: needs {r} eigenvectors, the anchor graph of these features has {informative}")
  vecs = _common.sign_fixed(vecs)
  projection = np.sqrt(n) * scale[:, None] * vecs / np.sqrt(vals)
  second = projection[:, :num_bits - r]  # the eigenvectors with a second-layer bit
  # y(x) = W^T z(x), z(x) >= 0 summing to 1: |y_k(x)| <= max_j |W_jk| for every point
  upper, lower = _thresholds(z @ second, z, lam, np.abs(second).max(0))
  arrays = (mean, anchors, bandwidth, num_nearest, projection, upper, lower)
  return AGHParams(*(jnp.asarray(a, jnp.int32 if i == 3 else dtype) for i, a in enumerate(arrays)))


def _values(params: AGHParams, features: Array) -> Array:
  """``[..., num_bits]`` values of ``features[..., dim]``: pairs (``y_k``, its second-layer margin), then the
  rest of ``y``."""
  x = features.astype(params.mean.dtype) - params.mean
  cross = _encode.matmul(x, params.anchors.T)
  sq = jnp.sum(x * x, axis=-1, keepdims=True) - 2.0 * cross + jnp.sum(params.anchors * params.anchors, axis=-1)
  y = _encode.matmul(_weights(jnp.maximum(sq, 0.0), params.num_nearest, params.bandwidth, jnp), params.projection)
  r2 = params.upper.shape[0]
  first = y[..., :r2]
  middle = jnp.where(first > 0, params.upper - first, first - params.lower)  # > 0 between the two thresholds
  paired = jnp.stack([first, middle], axis=-1).reshape(*y.shape[:-1], 2 * r2)
  return jnp.concatenate([paired, y[..., r2:]], axis=-1)


def project(params: AGHParams, features: Array) -> Array:
  r"""The real values whose signs are the bits of :func:`encode`.

  .. math:: y(x) = W^\top z(x); \quad \text{two layers: } (y_k, \ b_k^+ - y_k \ \text{if}\ y_k > 0
     \ \text{else}\ y_k - b_k^-)_k

  Args:
    params: :class:`AGHParams` from :func:`fit`.
    features: ``[..., dim]`` finite features, ``dim`` as in :func:`fit`.

  Returns:
    ``float[..., num_bits]``: bit ``j`` is 1 where value ``j`` is ``> 0``.

  >>> import numpy as np
  >>> x = np.random.default_rng(0).normal(size=(40, 6)).astype(np.float32)
  >>> params = fit(x, num_bits=4, num_anchors=10)
  >>> bool(np.array_equal(np.asarray(project(params, x)) > 0, np.asarray(encode(params, x)) == 1))
  True
  """
  return _common.encoded(params, features, _values, cls=AGHParams, module="agh", binary=False)


def encode(params: AGHParams, features: Array) -> Array:
  r"""Hashes ``features`` by the thresholded anchor-graph eigenfunctions.

  .. math:: b_k(x) = [y_k(x) > 0]; \quad \text{two layers: } b_{2k+1}(x) = [b_k^- < y_k(x) < b_k^+]

  Args:
    params: :class:`AGHParams` from :func:`fit`.
    features: ``[..., dim]`` finite features, ``dim`` as in :func:`fit`.

  Returns:
    ``uint8[..., num_bits]`` bits in ``{0, 1}``.

  >>> import numpy as np
  >>> x = np.random.default_rng(0).normal(size=(100, 8)).astype(np.float32)
  >>> bits = encode(fit(x, num_bits=8, num_anchors=20, layers=2), x)
  >>> bits.shape, bits.dtype
  ((100, 8), dtype('uint8'))
  """
  return _common.encoded(params, features, _values, cls=AGHParams, module="agh", binary=True)
