r"""Linear rankers trained with RankNet over graded labels, one small problem per model (Newton or L-BFGS-B).

A linear ranker scores a document ``s = w . x`` (higher ranks first). Its loss
is hashjax's RankNet (:func:`hashjax.objectives.ranknet.ranknet_loss`, Nair
eqs. 3-4) on the scores: every pair ``(a, b)`` of one query's documents with
``label_a > label_b`` costs ``log(1 + exp(s_b - s_a))``; each query's pairs
are averaged, then the queries (those with a pair), plus an L2 penalty:

  L(w) = (1/|Q|) sum_q (1/|P_q|) sum_{(a,b) in P_q} log(1 + exp(-w . (x_a - x_b))) + (l2/2) |w|^2

The pairs are built once as document indices (:func:`ranknet_pairs`);
a model over any subset of the queries (a cluster, a test query's
neighbours) is the same objective on that subset's pairs: convex and in ``d``
dimensions (46 for LETOR 4.0), so each model is its own small problem, solved
from ``w = 0`` by Newton's method with the exact Hessian (the default) or by
scipy's L-BFGS-B; ``docs/results/localrank.md`` has the timings that chose
Newton (L-BFGS-B needs hundreds of passes over the pairs at small ``l2``).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np
import scipy.optimize
import scipy.sparse

from hashjax import _checks
from hashjax.data import letor

__all__ = ["SOLVERS", "RankNetPairs", "ranknet_pairs", "ranknet_objective", "fit_ranknet", "fit_ranknet_pairs"]


class RankNetPairs(NamedTuple):
  """The preference pairs of a training set, grouped by query, as document indices."""
  features: np.ndarray  #: ``float64[n, d]`` the documents
  first: np.ndarray  #: ``int64[M]`` the preferred document of each pair
  second: np.ndarray  #: ``int64[M]`` the other document
  query: np.ndarray  #: ``int64[M]`` the pair's query, an index into ``query_ids``
  query_ids: np.ndarray  #: ``int64[G]`` the queries, in order of first appearance
  counts: np.ndarray  #: ``int64[G]`` pairs of each query (0: no two labels differ)


def ranknet_pairs(features: np.ndarray, labels: np.ndarray, query_ids: np.ndarray) -> RankNetPairs:
  r"""Every preference pair of each query: ``(a, b)`` of one query with ``label_a > label_b``.

  .. math:: \mathcal P_q = \{(a, b) : q_a = q_b = q,\ l_a > l_b\}

  Args:
    features: real ``[n, d]``.
    labels: ``int[n]`` graded relevance.
    query_ids: ``int[n]`` query of each document.

  Returns:
    :class:`RankNetPairs`.

  >>> import numpy as np
  >>> p = ranknet_pairs(np.array([[1.0], [0.0], [2.0]]), np.array([2, 0, 1]), np.array([5, 5, 5]))
  >>> p.first.tolist(), p.second.tolist(), p.counts.tolist()
  ([0, 0, 2], [1, 2, 1], [3])
  """
  _checks.check_ranking_data("features", features, labels, query_ids, ndim=2, shape_doc="[n, d]")
  y = np.asarray(labels)
  groups = letor.group_by_query(np.asarray(query_ids))
  first, second, owner, counts = [], [], [], []
  for g, rows in enumerate(groups.indices):
    a, b = np.nonzero(y[rows][:, None] > y[rows][None, :])
    first.append(rows[a])
    second.append(rows[b])
    owner.append(np.full(len(a), g, np.int64))
    counts.append(len(a))
  cat = lambda parts: np.concatenate(parts).astype(np.int64)
  return RankNetPairs(np.asarray(features, np.float64), cat(first), cat(second), cat(owner), groups.query_ids,
                      np.array(counts, np.int64))


def _pair_weights(pairs: RankNetPairs, queries: np.ndarray) -> np.ndarray:
  """``float64[M]`` per-query averaging over the selected queries (``bool[G]``): ``1 / (|P_q| |Q'|)``."""
  used = queries & (pairs.counts > 0)
  num = int(used.sum())
  per_query = np.where(used, 1.0 / (np.maximum(pairs.counts, 1) * max(num, 1)), 0.0)
  return per_query[pairs.query]


def ranknet_objective(w: np.ndarray, features: np.ndarray, first: np.ndarray, second: np.ndarray,
                      weights: np.ndarray, l2: float):
  r"""RankNet loss of linear scores over weighted pairs of documents, and its gradient.

  .. math:: L(w) = \sum_k \omega_k \log(1 + e^{-(s_{a_k} - s_{b_k})}) + \frac{\lambda}{2} \|w\|^2, \quad
     s = X w, \quad \nabla L = X^\top c + \lambda w, \ c_i = -\sum_{k : a_k = i} \omega_k \sigma_k
     + \sum_{k : b_k = i} \omega_k \sigma_k, \ \sigma_k = \sigma(-(s_{a_k} - s_{b_k}))

  Args:
    w: ``float64[d]``.
    features: ``float64[n, d]`` documents ``X``.
    first: ``int[M]`` preferred document of each pair.
    second: ``int[M]`` the other.
    weights: ``float64[M]`` pair weights ``omega``.
    l2: ``lambda``.

  Returns:
    ``(loss, grad float64[d])``.

  >>> import numpy as np
  >>> loss, grad = ranknet_objective(np.zeros(1), np.array([[1.0], [0.0]]), np.array([0]), np.array([1]),
  ...                                np.array([1.0]), 0.0)
  >>> round(loss, 4), grad.tolist()  # log 2, -sigmoid(0) (x_a - x_b)
  (0.6931, [-0.5])
  """
  s = features @ w
  margin = s[first] - s[second]
  loss = float(weights @ np.logaddexp(0.0, -margin)) + 0.5 * l2 * float(w @ w)
  coef = weights * np.exp(-np.logaddexp(0.0, margin))  # omega * sigmoid(-margin)
  n = features.shape[0]
  per_doc = np.bincount(second, coef, minlength=n) - np.bincount(first, coef, minlength=n)
  return loss, features.T @ per_doc + l2 * w


#: ``solver=`` of :func:`fit_ranknet_pairs`.
SOLVERS = ("newton", "lbfgs")


def fit_ranknet_pairs(pairs: RankNetPairs, *, queries: Optional[np.ndarray] = None, l2: float = 1e-3,
                      solver: str = "newton", max_iterations: int = 100, tolerance: float = 1e-12) -> np.ndarray:
  r"""A linear ranker on the pairs of some queries (all by default), from ``w = 0``.

  ``"newton"``: Newton's method with the exact ``d x d`` Hessian and a
  backtracking line search, until the Newton decrement
  ``g^T H^{-1} g / 2`` falls below ``tolerance`` (a handful of passes over
  the pairs: the default, measured fastest). ``"lbfgs"``: scipy's L-BFGS-B
  with the exact gradient, until its projected gradient falls below
  ``tolerance``.

  .. math:: w^* = \arg\min_w L(w), \quad
     H = \sum_k \omega_k \sigma_k (1 - \sigma_k) (x_{a_k} - x_{b_k})(x_{a_k} - x_{b_k})^\top + \lambda I

  Args:
    pairs: :class:`RankNetPairs` of the training set.
    queries: optional ``bool[G]`` of the queries to train on.
    l2: the L2 penalty ``lambda > 0``.
    solver: one of :data:`SOLVERS`.
    max_iterations: iterations of the solver.
    tolerance: its stopping tolerance.

  Returns:
    ``float64[d]`` (zeros when the queries have no pair).

  >>> import numpy as np
  >>> p = ranknet_pairs(np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([1, 0]), np.array([3, 3]))
  >>> w = fit_ranknet_pairs(p, l2=0.1)
  >>> bool(w[0] > 0 > w[1])
  True
  """
  _checks.check_type("pairs", pairs, RankNetPairs, what="RankNetPairs (ranknet_pairs)")
  _checks.check_mask("queries", queries, pairs.query_ids.shape, like="pairs.query_ids")
  queries = np.ones(len(pairs.query_ids), bool) if queries is None else np.asarray(queries)
  l2 = _checks.check_number("l2", l2, low=0, low_open=True)
  solver = _checks.check_option("solver", solver, SOLVERS)
  max_iterations = _checks.check_int("max_iterations", max_iterations)
  tolerance = _checks.check_number("tolerance", tolerance, low=0, low_open=True)
  return _fit(pairs, queries, l2, solver, max_iterations, tolerance)


def _newton(x: np.ndarray, first: np.ndarray, second: np.ndarray, weights: np.ndarray, l2: float,
            max_iterations: int, tolerance: float) -> np.ndarray:
  """Damped Newton on the convex RankNet objective (Armijo backtracking).

  The Hessian is ``X^T L X + l2 I`` with ``L`` the Laplacian of the pair graph weighted by
  ``omega_k sigma_k (1 - sigma_k)``: ``X^T (deg X) - T - T^T`` with ``T = X^T (S X)``, ``S`` the sparse matrix
  of the pairs (its pattern built once), so an iteration costs ``O(M d + n d^2)``.
  """
  n, d = x.shape
  order = scipy.sparse.csr_matrix((np.arange(1, len(first) + 1, dtype=np.float64), (first, second)), shape=(n, n))
  perm = order.data.astype(np.int64) - 1  # csr storage order of the pairs
  pattern = order.copy()
  w = np.zeros(d)
  loss, grad = ranknet_objective(w, x, first, second, weights, l2)
  for _ in range(max_iterations):
    s = x @ w
    sig = np.exp(-np.logaddexp(0.0, s[first] - s[second]))  # sigmoid(-margin)
    h = weights * sig * (1.0 - sig)
    pattern.data = h[perm]
    deg = np.bincount(first, h, minlength=n) + np.bincount(second, h, minlength=n)
    t = x.T @ (pattern @ x)
    hessian = x.T @ (x * deg[:, None]) - t - t.T + l2 * np.eye(d)
    step = np.linalg.solve(hessian, grad)
    decrement = float(grad @ step)
    if decrement / 2 <= tolerance:
      break
    rate = 1.0
    while True:
      trial = w - rate * step
      trial_loss, trial_grad = ranknet_objective(trial, x, first, second, weights, l2)
      if trial_loss <= loss - 1e-4 * rate * decrement or rate < 1e-8:
        break
      rate *= 0.5
    w, loss, grad = trial, trial_loss, trial_grad
  return w


def _fit(pairs: RankNetPairs, queries: np.ndarray, l2: float, solver: str, max_iterations: int,
         tolerance: float) -> np.ndarray:
  keep = queries[pairs.query]
  d = pairs.features.shape[1]
  if not keep.any():
    return np.zeros(d)
  weights = _pair_weights(pairs, queries)[keep]
  a, b = pairs.first[keep], pairs.second[keep]
  docs, inverse = np.unique(np.concatenate([a, b]), return_inverse=True)  # only the documents of these pairs
  x, a, b = pairs.features[docs], inverse[:len(a)], inverse[len(a):]
  if solver == "newton":
    return _newton(x, a, b, weights, l2, max_iterations, tolerance)
  result = scipy.optimize.minimize(ranknet_objective, np.zeros(d), args=(x, a, b, weights, l2), jac=True,
                                   method="L-BFGS-B", options={"maxiter": max_iterations, "gtol": tolerance})
  return result.x


def fit_ranknet(features: np.ndarray, labels: np.ndarray, query_ids: np.ndarray, *, l2: float = 1e-3,
                solver: str = "newton") -> np.ndarray:
  r"""One linear RankNet ranker on all queries (the global model of LocalRank with ``C = 1``).

  .. math:: w^* = \arg\min_w \frac{1}{|Q|} \sum_q \frac{1}{|\mathcal P_q|} \sum_{(a,b) \in \mathcal P_q}
     \log(1 + e^{-w^\top (x_a - x_b)}) + \frac{\lambda}{2} \|w\|^2

  Args:
    features: real ``[n, d]``.
    labels: ``int[n]`` graded relevance.
    query_ids: ``int[n]``.
    l2: the L2 penalty.
    solver: one of :data:`SOLVERS` (see :func:`fit_ranknet_pairs`).

  Returns:
    ``float64[d]``; scores are ``features @ w``.

  >>> import numpy as np
  >>> w = fit_ranknet(np.array([[1.0, 0.0], [0.0, 1.0], [0.9, 0.2]]), np.array([1, 0, 1]), np.array([0, 0, 0]))
  >>> bool(w[0] > w[1])
  True
  """
  return fit_ranknet_pairs(ranknet_pairs(features, labels, query_ids), l2=l2, solver=solver)
