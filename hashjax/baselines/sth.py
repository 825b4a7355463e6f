r"""Self-taught hashing (STH; Zhang, Wang, Cai & Lu, SIGIR 2010).

Two stages, an unsupervised one that finds the training items' codes and a supervised one that learns to
predict them for any item:

1. the graph: each training item is linked to its ``k`` nearest other training items (``metric``: by cosine
   similarity of the features as given, or by Euclidean distance), symmetrised (an edge when ``j`` is among
   ``i``'s ``k`` nearest *or* ``i`` among ``j``'s), every edge of weight 1;
2. the Laplacian eigenmap: with the degrees :math:`D = \mathrm{diag}(W \mathbf{1})` and :math:`L = D - W`, the
   ``num_bits`` generalised eigenvectors :math:`L y = \lambda D y` of the smallest eigenvalues once the trivial
   :math:`y = \mathbf{1}` (:math:`\lambda = 0`) is left out, normalised to :math:`y^\top D y = 1` and signed so
   that each one's largest-magnitude entry is positive; they are the relaxed solution of

   .. math:: \min_{Y} \sum_{i,j} W_{ij} \|Y_i - Y_j\|^2 \quad \text{s.t.}\ Y^\top D Y = I,\ Y^\top D \mathbf{1} = 0

3. training bit ``j`` of item ``i`` is 1 iff :math:`Y_{ij}` is above the median of column ``j`` (so each bit
   splits the training set in half);
4. one linear SVM per bit (scikit-learn's ``LinearSVC``, hinge loss, ``C = svm_c``) learns bit ``j`` from the
   centred training features, divided by their root-mean-square norm :math:`s` (so that ``C`` does not depend on
   the features' scale): the hash function is :math:`b_j(x) = [w_j^\top (x - \mu) + c_j > 0]`.

Departures from the paper: the edges weigh 1 (the paper weighs them by their cosine similarity, which is no
affinity for features of either sign); a graph of several connected components is joined before the eigenmap,
each component to its nearest item outside it (the closest pair, as the metric measures it) by an edge of
weight 1, repeated until one component remains: the eigenvectors of eigenvalue 0 of a disconnected graph are
any basis of its component indicators, so its codes would be the solver's choice. The eigenproblem is solved as
the top eigenvectors of :math:`D^{-1/2} W D^{-1/2}` with the trivial one deflated to eigenvalue -2: by ARPACK
(``scipy.sparse.linalg.eigsh``, a fixed start vector, to machine precision) above :data:`DENSE_MAX_ROWS`
training items, a dense ``scipy.linalg.eigh`` up to it (and for ``num_bits >= N / 2``). A complete graph (each
item linked to every other) is refused: every non-trivial eigenvector shares one eigenvalue. Other graphs whose
kept eigenvalues repeat (nearly complete ones, on a few items) leave the basis of that eigenspace, and so those
bits, to the solver, as the paper's method does. The SVMs' intercepts
are regularised like their weights (liblinear's); a bit constant on the training set (possible only when more than
half of an eigenvector's entries equal its largest) gets :math:`w_j = 0, c_j = -1`. STH is deterministic and
ignores ``key``.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
import scipy.sparse
import scipy.sparse.csgraph
import scipy.sparse.linalg
from sklearn.neighbors import NearestNeighbors
from sklearn.svm import LinearSVC

from hashjax import _checks
from hashjax.baselines import _common

Array = jax.Array

#: Neighbours per training item in the graph (chosen on a validation split of MNIST-10k's training set at 32 bits:
#: AP_T 0.397; 5, 10, 15, 35, 50 neighbours 0.384, 0.384, 0.383, 0.369, 0.371).
DEFAULT_NUM_NEIGHBORS = 25
#: The SVMs' ``C`` on features of root-mean-square norm 1 (the same split, 25 neighbours: 0.005 and 0.02 gave
#: 0.401 and 0.378 at 32 bits; 0.005 and 0.01 tie over 16, 32 and 64 bits; a larger ``C`` also costs more time).
DEFAULT_SVM_C = 0.01
#: How the graph's neighbours are found: ``"cosine"`` similarity (the paper's) or ``"euclidean"`` distance.
METRICS = ("cosine", "euclidean")
#: Up to this many training items the eigenproblem is solved densely, above it by ARPACK.
DENSE_MAX_ROWS = 1000
#: liblinear's coordinate-descent passes per SVM at most, and its stopping tolerance.
_SVM_MAX_ITER = 1000
_SVM_TOL = 1e-4
#: Rows per block when the nearest item outside each component is searched.
_BLOCK = 256


class STHParams(NamedTuple):
  """``mean[dim]`` (training mean), the SVMs' weights ``projection[dim, num_bits]`` and ``bias[num_bits]``."""
  mean: Array
  projection: Array
  bias: Array


class Eigenmap(NamedTuple):
  """Stage one on the training items: the eigenvalues ``values[num_bits]`` (ascending, each ``> 0``), the
  generalised eigenvectors ``vectors[N, num_bits]`` and their median-thresholded ``bits`` (``uint8[N, num_bits]``)."""
  values: np.ndarray
  vectors: np.ndarray
  bits: np.ndarray


def _check_graph(features: Any, num_neighbors: Any, metric: Any) -> tuple:
  """``(features as float64, params dtype, k, metric)``, the graph's options checked."""
  _common.check_fit_features(features, min_rows=2)
  n = features.shape[0]
  num_neighbors = _checks.check_int_at_most("num_neighbors", num_neighbors, n - 1, what=f"the {n - 1} other items")
  metric = _checks.check_option("metric", metric, METRICS)
  x, dtype = _common.host_features(features)
  if metric == "cosine":
    zero = np.flatnonzero(~np.any(x != 0, axis=1))
    if zero.size:
      raise ValueError(f"features: metric 'cosine' needs rows of non-zero norm, got {zero.size} all-zero row(s) "
                       f"(the first: row {zero[0]}); use metric='euclidean'")
  return x, dtype, num_neighbors, metric


def _normalised(x: np.ndarray, metric: str) -> np.ndarray:
  """The points whose Euclidean neighbours are the metric's: unit rows for cosine (``|a - b|^2 = 2 - 2 cos``)."""
  return x / np.linalg.norm(x, axis=1, keepdims=True) if metric == "cosine" else x


def _nearest_outside(points: np.ndarray, labels: np.ndarray) -> np.ndarray:
  """``[c, 2]`` pairs ``(i, j)``: for each component label, its point ``i`` and the point ``j`` of another
  component at the smallest Euclidean distance (ties: the lowest ``i``, then the lowest ``j``)."""
  n = points.shape[0]
  sq = np.sum(points * points, 1)
  best, partner = np.empty(n), np.empty(n, np.int64)
  for start in range(0, n, _BLOCK):
    rows = slice(start, min(start + _BLOCK, n))
    dist = sq[rows, None] - 2.0 * points[rows] @ points.T + sq[None, :]
    dist[labels[rows, None] == labels[None, :]] = np.inf
    partner[rows] = np.argmin(dist, axis=1)
    best[rows] = dist[np.arange(dist.shape[0]), partner[rows]]
  order = np.lexsort((np.arange(n), best, labels))  # by component, then distance, then row
  first = order[np.r_[True, labels[order][1:] != labels[order][:-1]]]
  return np.stack([first, partner[first]], axis=1)


def _graph(x: np.ndarray, num_neighbors: int, metric: str) -> scipy.sparse.csr_matrix:
  """The symmetric 0/1 ``k``-nearest-neighbour graph of ``x``, its components joined."""
  n = x.shape[0]
  points = _normalised(x, metric)
  # kneighbors() without X leaves each point out of its own neighbours (even among exact duplicates).
  neighbours = NearestNeighbors(n_neighbors=num_neighbors, algorithm="brute").fit(points).kneighbors(
      return_distance=False)
  rows, cols = np.repeat(np.arange(n), num_neighbors), neighbours.ravel()
  while True:
    edges = scipy.sparse.coo_matrix((np.ones(rows.size), (rows, cols)), shape=(n, n)).tocsr()
    edges = ((edges + edges.T) > 0).astype(np.float64)
    count, labels = scipy.sparse.csgraph.connected_components(edges, directed=False)
    if count == 1:
      return edges
    pairs = _nearest_outside(points, labels)
    rows, cols = np.concatenate([rows, pairs[:, 0]]), np.concatenate([cols, pairs[:, 1]])


def _eigenmap(graph: scipy.sparse.csr_matrix, num_bits: int) -> Eigenmap:
  """:class:`Eigenmap` of a connected symmetric graph that is not complete."""
  n = graph.shape[0]
  if graph.nnz == n * (n - 1):
    raise ValueError(f"num_neighbors: expected a graph in which some items are not linked, got one that links each "
                     f"of the {n} items to every other (a complete graph: its non-trivial eigenvectors share one "
                     f"eigenvalue, so any basis of them is a solution and none says which items are near); use "
                     f"fewer neighbours")
  degree = np.asarray(graph.sum(axis=1)).ravel()
  root = np.sqrt(degree)
  scaled = scipy.sparse.diags(1.0 / root) @ graph @ scipy.sparse.diags(1.0 / root)
  trivial = root / np.linalg.norm(root)
  # D^-1/2 W D^-1/2 has eigenvalues in [-1, 1], the trivial one 1: moved to -2, it can never be among the top.
  if n <= DENSE_MAX_ROWS or 2 * num_bits >= n:
    dense = scaled.toarray() - 3.0 * np.outer(trivial, trivial)
    mu, v = scipy.linalg.eigh(dense, driver="evd")  # (all of them: robust where eigenvalues repeat)
    mu, v = mu[n - num_bits:], v[:, n - num_bits:]
  else:
    op = scipy.sparse.linalg.LinearOperator((n, n), dtype=np.float64,
                                            matvec=lambda u: scaled @ u - 3.0 * trivial * (trivial @ u))
    start = np.random.default_rng(0).standard_normal(n)  # fixed: ARPACK's own start varies from call to call
    mu, v = scipy.sparse.linalg.eigsh(op, k=num_bits, which="LA", v0=start, tol=0)
  order = np.argsort(-mu, kind="stable")
  mu, y = mu[order], v[:, order] / root[:, None]  # D^-1/2 v: y^T D y = 1
  y = _common.sign_fixed(y)
  bits = (y > np.median(y, axis=0)).astype(np.uint8)
  return Eigenmap(1.0 - mu, y, bits)


def _check_num_bits(num_bits: Any, n: int) -> int:
  num_bits = _checks.check_num_bits(num_bits)
  return _checks.check_int_at_most("num_bits", num_bits, n - 1, what=f"{n - 1}, the graph's non-trivial eigenvectors")


def knn_graph(features: Any, *, num_neighbors: int = DEFAULT_NUM_NEIGHBORS,
              metric: str = "cosine") -> scipy.sparse.csr_matrix:
  r"""STH's graph of the training items: symmetric ``k`` nearest neighbours, edges of weight 1, one component.

  .. math:: W_{ij} = [\, j \in N_k(i) \ \lor \ i \in N_k(j) \,], \qquad W_{ii} = 0

  A graph of several components gets, repeatedly, an edge from each component to its nearest item outside it
  until it is connected (module docstring).

  Args:
    features: ``[N, dim]`` finite training features, ``N >= 2`` (no all-zero row with ``metric="cosine"``).
    num_neighbors: ``k``, at most ``N - 1``.
    metric: ``"cosine"`` (similarity of the features as given) or ``"euclidean"``.

  Returns:
    ``scipy.sparse.csr_matrix`` ``float64[N, N]`` of 0 and 1.

  >>> import numpy as np
  >>> x = np.array([[0.0], [1.0], [3.0], [7.0]])
  >>> knn_graph(x, num_neighbors=1, metric="euclidean").toarray().astype(int).tolist()
  [[0, 1, 0, 0], [1, 0, 1, 0], [0, 1, 0, 1], [0, 0, 1, 0]]
  """
  x, _, num_neighbors, metric = _check_graph(features, num_neighbors, metric)
  return _graph(x, num_neighbors, metric)


def laplacian_eigenmap(features: Any, *, num_bits: int, num_neighbors: int = DEFAULT_NUM_NEIGHBORS,
                       metric: str = "cosine") -> Eigenmap:
  r"""STH's first stage: the Laplacian eigenmap of :func:`knn_graph` and the training items' bits.

  .. math:: (D - W)\, y_j = \lambda_j D\, y_j, \quad 0 < \lambda_1 \le \dots \le \lambda_b, \qquad
     B_{ij} = [\, y_{ij} > \mathrm{median}_i\, y_{ij} \,]

  Args:
    features: ``[N, dim]`` finite training features, ``N >= 2``.
    num_bits: ``b``, at most ``N - 1`` (the non-trivial eigenvectors).
    num_neighbors: ``k`` of :func:`knn_graph`.
    metric: ``"cosine"`` or ``"euclidean"`` (:func:`knn_graph`).

  Returns:
    :class:`Eigenmap`: ``values[b]``, ``vectors[N, b]`` (:math:`y^\top D y = 1`, largest-magnitude entry
    positive) and ``bits uint8[N, b]``, on the host in float64.

  >>> import numpy as np
  >>> x = np.concatenate([np.zeros((5, 2)), np.ones((5, 2))]) + np.arange(10.0)[:, None] * 0.01
  >>> laplacian_eigenmap(x, num_bits=1, num_neighbors=3, metric="euclidean").bits[:, 0].tolist()
  [1, 1, 1, 1, 1, 0, 0, 0, 0, 0]
  """
  x, _, num_neighbors, metric = _check_graph(features, num_neighbors, metric)
  return _eigenmap(_graph(x, num_neighbors, metric), _check_num_bits(num_bits, x.shape[0]))


def fit(features: Array, *, num_bits: int, key: Optional[Any] = None, num_neighbors: int = DEFAULT_NUM_NEIGHBORS,
        metric: str = "cosine", svm_c: float = DEFAULT_SVM_C) -> STHParams:
  r"""Fits self-taught hashing: the training items' bits from the Laplacian eigenmap, then one linear SVM per bit.

  .. math:: \min_{v_j, c_j} \tfrac{1}{2} (\|v_j\|^2 + c_j^2)
     + C \sum_i \max\big(0,\ 1 - (2 B_{ij} - 1)(v_j^\top (x_i - \mu) / s + c_j)\big), \qquad w_j = v_j / s

  with :math:`s^2 = \tfrac{1}{N} \sum_i \|x_i - \mu\|^2`, so that ``svm_c`` means the same at any scale of
  the features.

  Args:
    features: ``[N, dim]`` finite training features, ``N >= 2``.
    num_bits: code length, at most ``N - 1`` (the non-trivial eigenvectors of the graph).
    key: unused (STH is deterministic); checked when given, so every baseline has the same signature.
    num_neighbors: ``k`` of the graph, at most ``N - 1``.
    metric: ``"cosine"`` (the paper's) or ``"euclidean"``: how the graph's neighbours are found.
    svm_c: the SVMs' ``C > 0``, on the features scaled to a root-mean-square norm of 1.

  Returns:
    :class:`STHParams`.

  >>> import numpy as np
  >>> x = np.random.default_rng(0).normal(size=(60, 5)).astype(np.float32)
  >>> params = fit(x, num_bits=4, num_neighbors=8)
  >>> params.projection.shape, params.bias.shape
  ((5, 4), (4,))
  """
  x, dtype, num_neighbors, metric = _check_graph(features, num_neighbors, metric)
  num_bits = _check_num_bits(num_bits, x.shape[0])
  if key is not None:
    _checks.check_host_key(key)
  svm_c = _checks.check_number("svm_c", svm_c, low=0, low_open=True)
  bits = _eigenmap(_graph(x, num_neighbors, metric), num_bits).bits
  mean = x.mean(axis=0)
  centred = x - mean
  rms = float(np.sqrt(np.mean(np.sum(centred * centred, axis=1))))
  rms = rms if rms > 0 else 1.0  # every training item the same: any scale
  unit = centred / rms
  projection, bias = np.zeros((x.shape[1], num_bits)), np.full(num_bits, -1.0)
  for j in range(num_bits):
    if bits[:, j].min() == bits[:, j].max():  # constant: w = 0, c = -1 (median thresholds never give all 1s)
      continue
    svm = LinearSVC(C=svm_c, loss="hinge", dual=True, tol=_SVM_TOL, max_iter=_SVM_MAX_ITER, random_state=0)
    svm.fit(unit, bits[:, j])
    projection[:, j], bias[j] = svm.coef_[0] / rms, svm.intercept_[0]
  return STHParams(*(jnp.asarray(a, dtype) for a in (mean, projection, bias)))


def _values(params: STHParams, features: Array) -> Array:
  """``(x - mean) W + c`` of ``features[..., dim]``."""
  return _common.project(features, params.mean, params.projection) + params.bias


def project(params: STHParams, features: Array) -> Array:
  r"""The SVMs' decision values, whose signs are the bits of :func:`encode`.

  .. math:: v_j(x) = w_j^\top (x - \mu) + c_j

  Args:
    params: :class:`STHParams` from :func:`fit`.
    features: ``[..., dim]`` finite features, ``dim`` as in :func:`fit`.

  Returns:
    ``float[..., num_bits]``: bit ``j`` is 1 where value ``j`` is ``> 0``.

  >>> import numpy as np
  >>> x = np.random.default_rng(0).normal(size=(40, 6)).astype(np.float32)
  >>> params = fit(x, num_bits=4, num_neighbors=6)
  >>> bool(np.array_equal(np.asarray(project(params, x)) > 0, np.asarray(encode(params, x)) == 1))
  True
  """
  return _common.encoded(params, features, _values, cls=STHParams, module="sth", binary=False)


def encode(params: STHParams, features: Array) -> Array:
  r"""Hashes ``features`` by the per-bit linear SVMs.

  .. math:: b_j(x) = [\, w_j^\top (x - \mu) + c_j > 0 \,]

  Args:
    params: :class:`STHParams` from :func:`fit`.
    features: ``[..., dim]`` finite features, ``dim`` as in :func:`fit`.

  Returns:
    ``uint8[..., num_bits]`` bits in ``{0, 1}``.

  >>> import numpy as np
  >>> params = STHParams(np.zeros(2, np.float32), np.array([[1.0], [-1.0]], np.float32), np.zeros(1, np.float32))
  >>> encode(params, np.array([[2.0, 1.0], [0.0, 3.0]], np.float32)).tolist()
  [[1], [0]]
  """
  return _common.encoded(params, features, _values, cls=STHParams, module="sth", binary=True)
