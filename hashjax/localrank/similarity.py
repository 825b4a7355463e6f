r"""Similarity of queries represented as point clouds of their documents (Banerjee et al., Sec. 2).

A query ``q`` is the cloud ``D_q`` of its documents' feature vectors. Its
summary (:func:`cloud_summaries`) is what each similarity reads:

* ``"pca"`` (eq. 5): the principal directions ``u_1, u_2, ...`` of ``D_q`` in
  order of decreasing eigenvalue of its covariance, and
  ``sim(D_q, D_q') = (1/P) sum_{p <= P} |u_p . u'_p|``. ``P`` is fixed
  (``num_components``) or the paper's rule: the fewest components whose
  eigenvalues reach ``variance_fraction`` (80%) of the total, per cloud;
  a pair uses the larger of its two clouds' ``P`` so that both are covered.
  Small clouds: a cloud of ``n`` documents has at most ``n - 1`` directions
  with non-zero variance (many MQ2008 queries have under 10 documents in 46
  dimensions); directions past that rank are undefined and stored as zero
  vectors, which add 0 to the sum (still divided by ``P``). A cloud without
  variance (one document, or identical ones) has no direction and is at
  similarity 0 to every cloud, itself included. Directions come from the
  ``n x n`` Gram matrix when ``n <= d`` (the same eigenvectors, cheaper).
* ``"mean"``, ``"variance"``, ``"skew"`` (Sec. 2.1): Euclidean distance of
  the per-feature mean, variance ``(1/n) sum (x - mu)^2`` or skew
  ``m_3 / sigma^3`` (0 for a constant feature) vectors.
* ``"kl"`` (eqs. 1-2): symmetric KL divergence of Gaussians fitted to the
  clouds, and ``"bhattacharyya"`` (eqs. 3-4): ``-log`` of the Bhattacharyya
  kernel. Both need an invertible covariance, which small clouds lack: each
  covariance gets ``ridge * I`` added (a documented departure; the paper does
  not say how it handled singular covariances).

:func:`cloud_distances` returns a distance for every similarity (smaller is
more similar): ``1 - sim`` for ``"pca"``, the divergences and Euclidean
distances as they are.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np
import scipy.spatial.distance

from hashjax import _checks
from hashjax.data import letor

__all__ = ["SIMILARITIES", "CloudSummary", "cloud_summaries", "principal_components", "pca_similarity",
           "cloud_distances"]

#: ``similarity=`` names, in the paper's order.
SIMILARITIES = ("pca", "mean", "variance", "skew", "kl", "bhattacharyya")

#: Relative eigenvalue below which a direction counts as having no variance.
_RANK_TOL = 1e-10


class CloudSummary(NamedTuple):
  """What a similarity reads of each query's cloud (``G`` queries, ``d`` features)."""
  similarity: str  #: one of :data:`SIMILARITIES`
  query_ids: np.ndarray  #: ``int64[G]`` in order of first appearance
  vectors: np.ndarray  #: ``"pca"``: directions ``float64[G, R, d]`` (zero past each rank); else ``[G, d]``
  num_components: np.ndarray  #: ``int64[G]`` ``P`` of each cloud (``"pca"``; else zeros)
  covariance: Optional[np.ndarray] = None  #: ``float64[G, d, d]`` with the ridge (kl/bhattacharyya)
  precision: Optional[np.ndarray] = None  #: ``float64[G, d, d]`` its inverse (kl)
  logdet: Optional[np.ndarray] = None  #: ``float64[G]`` its log-determinant (kl/bhattacharyya)


def principal_components(cloud: np.ndarray, *, num_components: Optional[int] = None,
                         variance_fraction: float = 0.8) -> np.ndarray:
  r"""The leading principal directions of one cloud, zero rows past its rank.

  ``P`` is ``num_components``, or the fewest components whose eigenvalues
  reach ``variance_fraction`` of the total (the paper's 80% rule). Signs:
  each direction's largest-magnitude entry is positive.

  .. math:: \frac{1}{n} \sum_i (x_i - \mu)(x_i - \mu)^\top = \sum_p \lambda_p u_p u_p^\top, \quad
     P = \min\{P : \textstyle\sum_{p \le P} \lambda_p \ge f \sum_p \lambda_p\}

  Args:
    cloud: real ``[n, d]`` documents of one query.
    num_components: a fixed ``P``; None applies the rule.
    variance_fraction: ``f`` of the rule, in ``(0, 1]``.

  Returns:
    ``float64[P, d]``, zero rows past the rank (``P = 0`` by the rule for a cloud without variance).

  >>> import numpy as np
  >>> u = principal_components(np.array([[0.0, 0.0], [2.0, 0.1], [4.0, -0.1]]))
  >>> u.shape, np.round(np.abs(u[0]), 3).tolist()
  ((1, 2), [1.0, 0.0])
  """
  _checks.check_real("cloud", cloud, shape_doc="[n, d]", ndim=2)
  _check_components(num_components, variance_fraction, cloud.shape[1])
  return _components(np.asarray(cloud, np.float64), num_components, variance_fraction)


def _check_components(num_components, variance_fraction, dim: int) -> None:
  if num_components is not None:
    _checks.check_int_at_most("num_components", num_components, dim, what=f"the {dim} features")
  _checks.check_number("variance_fraction", variance_fraction, low=0, high=1, low_open=True)


def _components(x: np.ndarray, num_components: Optional[int], fraction: float) -> np.ndarray:
  """``[P, d]`` directions of ``x[n, d]`` (see :func:`principal_components`), inputs checked."""
  vectors, counts = _batched_components([x], num_components, fraction)
  out = np.zeros((counts[0], x.shape[1]))
  r = min(counts[0], vectors.shape[1])
  out[:r] = vectors[0, :r]
  return out


def _batched_components(clouds, num_components: Optional[int], fraction: float):
  """``(float64[G, R, d], int64[G])``: directions and ``P`` of each cloud, zero rows past its rank.

  With the rule, every direction with variance is kept (``R`` the largest rank): a pair compares
  ``max(P_a, P_b)`` directions; with a fixed ``P``, the first ``P``.

  Clouds are bucketed by size and each bucket decomposed by one batched ``eigh``: of the ``m x m`` Gram matrices
  (``n <= m <= d``, zero rows pad a centred cloud and add only zero eigenvalues) or of the ``d x d`` scatter
  matrices (``n > d``); the Gram eigenvectors ``v`` give the directions ``X^T v / sqrt(lambda)``.
  """
  g, d = len(clouds), clouds[0].shape[1]
  sizes = np.array([c.shape[0] for c in clouds])
  width = np.where(sizes > d, d + 1, np.minimum(2 ** np.ceil(np.log2(np.maximum(sizes, 1))).astype(int), d))
  found = np.zeros((g, d, d))  # [G, rank slot, d]
  values = np.zeros((g, d))
  for m in np.unique(width):
    rows = np.flatnonzero(width == m)
    centred = [clouds[i] - clouds[i].mean(axis=0) for i in rows]
    if m > d:
      ev, vec = np.linalg.eigh(np.stack([c.T @ c for c in centred]))
      ev, dirs = ev[:, ::-1], np.swapaxes(vec[:, :, ::-1], 1, 2)  # [B, d], [B, d, d]
    else:
      padded = np.zeros((len(rows), m, d))
      for j, c in enumerate(centred):
        padded[j, :len(c)] = c
      ev, vec = np.linalg.eigh(padded @ np.swapaxes(padded, 1, 2))
      ev, vec = ev[:, ::-1], vec[:, :, ::-1]
      dirs = np.swapaxes(np.swapaxes(padded, 1, 2) @ vec, 1, 2) / np.sqrt(np.maximum(ev, 1e-300))[:, :, None]
    k = min(d, ev.shape[1])
    values[rows, :k] = ev[:, :k]
    found[rows, :k] = dirs[:, :k]
  top = values[:, :1]
  keep = (values > _RANK_TOL * top) & (top > 0)  # eigenvalues descend, so the kept ones lead
  values = np.where(keep, values, 0.0)
  total = values.sum(axis=1)
  if num_components is None:
    share = np.cumsum(values, axis=1) / np.where(total > 0, total, 1.0)[:, None]
    counts = np.where(total > 0, np.sum(share < fraction * (1 - 1e-12), axis=1) + 1, 0)
  else:
    counts = np.full(g, num_components)
  # the rule keeps every direction with variance: a pair compares max(P_a, P_b) directions of both clouds
  stored = keep if num_components is None else keep & (np.arange(d) < num_components)
  p = max(int(np.max(np.sum(stored, axis=1), initial=0)), 1)
  out = np.where(stored[:, :p, None], found[:, :p], 0.0)
  lead = np.take_along_axis(out, np.argmax(np.abs(out), axis=2)[:, :, None], axis=2)
  return out * np.where(lead < 0, -1.0, 1.0), counts.astype(np.int64)


def cloud_summaries(features: np.ndarray, query_ids: np.ndarray, *, similarity: str = "pca",
                    num_components: Optional[int] = None, variance_fraction: float = 0.8,
                    ridge: float = 1e-3) -> CloudSummary:
  r"""Summarises each query's cloud for ``similarity`` (see the module docstring).

  .. math:: D_q = \{x_i : q_i = q\} \mapsto (u_{q,1..P_q}) \text{ or } \mu_q, \sigma^2_q, \varphi_q
     \text{ or } (\mu_q, \Sigma_q + \epsilon I)

  Args:
    features: real ``[n, d]`` documents.
    query_ids: ``int[n]`` query of each document.
    similarity: one of :data:`SIMILARITIES`.
    num_components: ``"pca"``: a fixed ``P`` (None: the ``variance_fraction`` rule).
    variance_fraction: ``"pca"``: the rule's fraction (the paper's 0.8).
    ridge: ``"kl"``/``"bhattacharyya"``: ``epsilon`` added to each covariance's diagonal.

  Returns:
    :class:`CloudSummary` of the ``G`` queries in order of first appearance.

  >>> import numpy as np
  >>> x = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [0.0, 3.0]])
  >>> s = cloud_summaries(x, np.array([1, 1, 2, 2]))
  >>> s.query_ids.tolist(), s.num_components.tolist(), s.vectors.shape
  ([1, 2], [1, 1], (2, 1, 2))
  """
  _checks.check_ranking_data("features", features, None, query_ids, ndim=2, shape_doc="[n, d]")
  similarity = _checks.check_option("similarity", similarity, SIMILARITIES)
  _check_components(num_components, variance_fraction, features.shape[1])
  ridge = _checks.check_number("ridge", ridge, low=0, low_open=True)
  groups = letor.group_by_query(np.asarray(query_ids))
  x = np.asarray(features, np.float64)
  clouds = [x[rows] for rows in groups.indices]
  g, d = len(clouds), x.shape[1]
  if similarity == "pca":
    vectors, counts = _batched_components(clouds, num_components, variance_fraction)
    return CloudSummary(similarity, groups.query_ids, vectors, counts)
  mean = np.stack([c.mean(axis=0) for c in clouds])
  zeros = np.zeros(g, np.int64)
  if similarity in ("mean", "variance", "skew"):
    var = np.stack([c.var(axis=0) for c in clouds])
    if similarity == "mean":
      return CloudSummary(similarity, groups.query_ids, mean, zeros)
    if similarity == "variance":
      return CloudSummary(similarity, groups.query_ids, var, zeros)
    third = np.stack([((c - c.mean(axis=0)) ** 3).mean(axis=0) for c in clouds])
    sd = np.sqrt(var)
    skew = np.where(sd > 0, third / np.where(sd > 0, sd, 1.0) ** 3, 0.0)
    return CloudSummary(similarity, groups.query_ids, skew, zeros)
  cov = np.stack([np.cov(c, rowvar=False, bias=True).reshape(d, d) for c in clouds]) + ridge * np.eye(d)
  _, logdet = np.linalg.slogdet(cov)
  precision = np.linalg.inv(cov) if similarity == "kl" else None
  return CloudSummary(similarity, groups.query_ids, mean, zeros, cov, precision, logdet)


def check_summaries(names, summaries, *, similarity: Optional[str] = None) -> None:
  """Each of ``summaries`` (named by ``names``) must be a :class:`CloudSummary` of ``similarity`` (None: that of
  the first) over the first one's features."""
  for name, s in zip(names, summaries):
    _checks.check_type(name, s, CloudSummary, what="a CloudSummary (cloud_summaries)")
  similarity, dim = similarity or summaries[0].similarity, summaries[0].vectors.shape[-1]
  for name, s in zip(names, summaries):
    if s.similarity != similarity or s.vectors.shape[-1] != dim:
      raise ValueError(f"{name}: expected a {similarity!r} summary over {dim} features, got {s.similarity!r} over "
                       f"{s.vectors.shape[-1]}")


def pca_similarity(a: CloudSummary, b: CloudSummary) -> np.ndarray:
  r"""Eq. 5 between every cloud of ``a`` and every cloud of ``b``.

  A pair uses ``P = max(P_a, P_b)`` (each cloud's ``P`` is fixed or by the
  80% rule); undefined directions are zero and add 0; ``P = 0`` gives 0.

  .. math:: \mathrm{sim}(D_q, D_{q'}) = \frac{1}{P} \sum_{p=1}^{P} |u_p^\top u'_p|

  Args:
    a: ``"pca"`` :class:`CloudSummary` of ``G_a`` queries.
    b: ``"pca"`` :class:`CloudSummary` of ``G_b`` queries.

  Returns:
    ``float64[G_a, G_b]`` in ``[0, 1]``.

  >>> import numpy as np
  >>> x = np.array([[0.0, 0.0], [1.0, 0.1], [0.0, 0.0], [0.1, 1.0]])
  >>> s = cloud_summaries(x, np.array([1, 1, 2, 2]))
  >>> np.round(pca_similarity(s, s), 3).tolist()
  [[1.0, 0.198], [0.198, 1.0]]
  """
  check_summaries(("a", "b"), (a, b), similarity="pca")
  return _pca_similarity(a, b)


def _pca_similarity(a: CloudSummary, b: CloudSummary) -> np.ndarray:
  pa, pb = a.num_components, b.num_components
  pair = np.maximum(pa[:, None], pb[None, :])
  total = np.zeros(pair.shape)
  for p in range(int(pair.max(initial=0))):
    ua = a.vectors[:, p] if p < a.vectors.shape[1] else np.zeros((len(pa), a.vectors.shape[-1]))
    ub = b.vectors[:, p] if p < b.vectors.shape[1] else np.zeros((len(pb), b.vectors.shape[-1]))
    total += np.where(p < pair, np.abs(ua @ ub.T), 0.0)
  return np.where(pair > 0, total / np.maximum(pair, 1), 0.0)


def _kl_matrix(a: CloudSummary, b: CloudSummary) -> np.ndarray:
  """``KL(a_i || b_j)`` of eq. 1 for all pairs, by matrix products over vectorised matrices."""
  d = a.vectors.shape[-1]
  g_a, g_b = len(a.query_ids), len(b.query_ids)
  prec_b = b.precision.reshape(g_b, d * d)
  trace = a.covariance.reshape(g_a, d * d) @ prec_b.T
  pm_b = np.einsum("jkl,jl->jk", b.precision, b.vectors)  # A_j mu_j
  outer_a = np.einsum("ik,il->ikl", a.vectors, a.vectors).reshape(g_a, d * d)
  quad = (np.einsum("jk,jk->j", b.vectors, pm_b)[None, :] - 2 * a.vectors @ pm_b.T + outer_a @ prec_b.T)
  return 0.5 * (b.logdet[None, :] - a.logdet[:, None] + trace + quad - d)


#: Pairs per block of the Bhattacharyya distances (their ``[B, d, d]`` temporaries).
_PAIR_BLOCK = 4096


def _bhattacharyya_matrix(a: CloudSummary, b: CloudSummary) -> np.ndarray:
  """``-log`` Bhattacharyya kernel of all pairs: ``(1/8) dmu^T S^-1 dmu + (1/2) log(|S| / sqrt(|S_a| |S_b|))``,
  ``S = (S_a + S_b) / 2`` (the closed form equal to eq. 4)."""
  g_a, g_b = len(a.query_ids), len(b.query_ids)
  ii, jj = np.divmod(np.arange(g_a * g_b), g_b)
  out = np.empty(g_a * g_b)
  for start in range(0, len(ii), _PAIR_BLOCK):
    i, j = ii[start:start + _PAIR_BLOCK], jj[start:start + _PAIR_BLOCK]
    s = 0.5 * (a.covariance[i] + b.covariance[j])
    chol = np.linalg.cholesky(s)
    dmu = b.vectors[j] - a.vectors[i]
    z = np.linalg.solve(chol, dmu[..., None])[..., 0]
    logdet = 2 * np.sum(np.log(np.diagonal(chol, axis1=-2, axis2=-1)), axis=-1)
    out[start:start + len(i)] = (np.sum(z * z, axis=-1) / 8 + 0.5 * logdet
                                 - 0.25 * (a.logdet[i] + b.logdet[j]))
  return out.reshape(g_a, g_b)


def cloud_distances(a: CloudSummary, b: CloudSummary) -> np.ndarray:
  r"""Distance between every cloud of ``a`` and every cloud of ``b`` (smaller is more similar).

  .. math:: \delta = 1 - \mathrm{sim}_{\text{eq. 5}}, \ \|\mu - \mu'\|, \ \|\sigma^2 - \sigma'^2\|, \
     \|\varphi - \varphi'\|, \ \mathrm{JS} = \tfrac12 (\mathrm{KL}(D\|D') + \mathrm{KL}(D'\|D)), \ -\log K

  Args:
    a: :class:`CloudSummary` of ``G_a`` queries.
    b: :class:`CloudSummary` of ``G_b`` queries, the same similarity.

  Returns:
    ``float64[G_a, G_b]``.

  >>> import numpy as np
  >>> s = cloud_summaries(np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 0.0], [0.0, 4.0]]), np.array([1, 1, 2, 2]),
  ...                     similarity="mean")
  >>> cloud_distances(s, s).round(4).tolist()
  [[0.0, 2.2361], [2.2361, 0.0]]
  """
  check_summaries(("a", "b"), (a, b))
  if a.similarity == "pca":
    return 1.0 - _pca_similarity(a, b)
  if a.similarity in ("mean", "variance", "skew"):
    return scipy.spatial.distance.cdist(a.vectors, b.vectors)
  if a.similarity == "kl":
    return 0.5 * (_kl_matrix(a, b) + _kl_matrix(b, a).T)
  return _bhattacharyya_matrix(a, b)
