r"""Global learning-to-rank baselines of the LocalRank comparison: RankBoost, SVM-MAP and LambdaMART.

Banerjee et al. compare LocalRank against SVM-MAP and RankBoost, each one
global ranker over all training queries; LambdaMART is the modern
gradient-boosted baseline beside them. All three train on the host in
float64 (numpy/scipy; LambdaMART through LightGBM):

* :func:`fit_rankboost` / :func:`rankboost_scores`: RankBoost (Freund, Iyer,
  Schapire and Singer 2003) with threshold weak rankers ``h(x) = [x_f > theta]``
  over the general pairwise distribution (every preference pair of each
  query, ``label_a > label_b``), ``alpha`` in the paper's closed form.
* :func:`fit_svmmap`: SVM-MAP (Yue, Finley, Radlinski and Joachims 2007), a
  structural SVM over rankings with the loss ``1 - AP``, trained by the
  1-slack cutting-plane method with the paper's exact loss-augmented
  inference (:func:`svmmap_most_violated`); relevant = label ``>= 1``.
* :func:`fit_lambdamart` / :func:`lambdamart_scores`: LambdaMART, LightGBM's
  ``lambdarank`` objective with deterministic settings (the ``ltr`` extra:
  ``pip install 'hashjax[ltr]'``).

Documents are grouped by ``query_ids`` (a query's documents need not be
contiguous); scores rank higher first, as :func:`hashjax.ranking.query_metrics`
reads them.
"""

from __future__ import annotations

from typing import Any, List, NamedTuple, Optional, Tuple

import numpy as np
import scipy.optimize

from hashjax import _checks
from hashjax.data import letor
from hashjax.localrank import rankers

__all__ = ["RankBoostModel", "fit_rankboost", "rankboost_scores", "svmmap_most_violated", "fit_svmmap",
           "fit_lambdamart", "lambdamart_scores"]

#: ``|r|`` of a weak ranker is clipped to ``1 - R_CLIP`` so that a ranker ordering every weighted pair gets a
#: finite ``alpha`` (about 11.9).
R_CLIP = 1e-10


def _check_pairs(found: bool) -> None:
  """RankBoost and LambdaMART learn from preference pairs: ``found`` says whether a query holds two labels."""
  if not found:
    raise ValueError("labels: expected a query with two different labels (a preference pair to learn from), got none")


# --------------------------------------------------------------------------- RankBoost


class RankBoostModel(NamedTuple):
  """RankBoost's ranker ``H(x) = sum_t alpha_t [x_{f_t} > theta_t]``, one entry per round."""
  features: np.ndarray  #: ``int64[T]`` the feature ``f_t`` of each weak ranker
  thresholds: np.ndarray  #: ``float64[T]`` its threshold ``theta_t``
  alphas: np.ndarray  #: ``float64[T]`` its weight ``alpha_t``


def _candidate_thresholds(column: np.ndarray, num_thresholds: Optional[int]) -> np.ndarray:
  """Ascending distinct thresholds of one feature: its values below the largest (all, or at quantiles)."""
  values = np.unique(column)[:-1]  # x > max(x) holds for no document
  if num_thresholds is None or len(values) <= num_thresholds:
    return values
  quantiles = np.unique(np.quantile(column, np.arange(num_thresholds) / num_thresholds, method="lower"))
  return quantiles[quantiles < column.max()]


def fit_rankboost(features: np.ndarray, labels: np.ndarray, query_ids: np.ndarray, *, num_rounds: int = 100,
                  num_thresholds: Optional[int] = 64) -> RankBoostModel:
  r"""RankBoost (Freund et al. 2003, Figure 1) with threshold weak rankers on single features.

  The distribution ``D`` starts uniform over every preference pair
  ``(x_1 \succ x_0)`` of each query (``label_1 > label_0``, the general
  pairwise RankBoost, not RankBoost.B). Each round takes the weak ranker
  ``h(x) = [x_f > \theta]`` of the largest ``|r|`` over every feature and
  candidate threshold (ties: the first feature, then the smallest
  threshold), sets ``alpha`` by the paper's closed form (its Section 3.2,
  the minimiser of the bound ``Z <= sqrt(1 - r^2)``) and reweights the pairs.
  ``r`` is computed from the documents' potentials ``pi(x)`` (Section 4.2),
  so a round costs ``O(M + n d)`` for ``M`` pairs.

  .. math:: r = \sum_{(x_0, x_1)} D(x_0, x_1) (h(x_1) - h(x_0)), \quad
     \alpha = \tfrac12 \ln\frac{1 + r}{1 - r}, \quad
     D'(x_0, x_1) \propto D(x_0, x_1) e^{\alpha (h(x_0) - h(x_1))}

  ``|r|`` is clipped to ``1 - 1e-10`` (:data:`R_CLIP`) so that a weak ranker
  that orders every weighted pair gets a finite ``alpha``; training stops
  early when every weak ranker has ``r = 0`` (no round can lower the loss).
  Features hold no missing values, so the paper's default output
  ``q_def`` for them is not used.

  Args:
    features: real ``[n, d]`` training documents.
    labels: ``int[n]`` graded relevance ``>= 0``.
    query_ids: ``int[n]`` query of each document.
    num_rounds: ``T``, boosting rounds (at most).
    num_thresholds: candidate thresholds per feature: its distinct values
      (all but the largest) when there are at most this many, else its
      values at that many evenly spaced quantiles; None: every distinct value.

  Returns:
    :class:`RankBoostModel` of ``T`` rounds (fewer when stopped early); the
    model of its first ``t`` rounds is the one ``num_rounds=t`` trains.

  >>> import numpy as np
  >>> x = np.array([[0.1, 5.0], [0.9, 1.0], [0.5, 3.0], [0.2, 2.0]])
  >>> model = fit_rankboost(x, np.array([0, 2, 1, 0]), np.array([7, 7, 7, 7]), num_rounds=1)
  >>> model.features.tolist(), model.thresholds.tolist(), model.alphas.round(3).tolist()  # 4 of 5 pairs
  ([0], [0.2], [1.099])
  """
  num_rounds = _checks.check_int("num_rounds", num_rounds)
  num_thresholds = _checks.check_int("num_thresholds", num_thresholds, allow_none=True)
  pairs = rankers.ranknet_pairs(features, labels, query_ids)  # checks the documents
  _check_pairs(len(pairs.first) > 0)
  x = pairs.features
  n, d = x.shape
  thresholds = [_candidate_thresholds(x[:, f], num_thresholds) for f in range(d)]
  sizes = np.array([len(t) + 1 for t in thresholds])  # bins of each feature: b(x) = #{thresholds < x}
  offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
  bins = np.stack([np.searchsorted(thresholds[f], x[:, f], side="left") + offsets[f] for f in range(d)], axis=1)
  # Candidate k of feature f is (f, thresholds[f][k]); h(x) = [x_f > thresholds[f][k]] = [b_f(x) > k].
  cand_feature = np.concatenate([np.full(len(t), f) for f, t in enumerate(thresholds)]).astype(np.int64)
  cand_bin = np.concatenate([offsets[f] + np.arange(len(t)) for f, t in enumerate(thresholds)]).astype(np.int64)
  cand_end = (offsets + sizes)[cand_feature]
  if not len(cand_feature):
    raise ValueError("features: expected a feature with two different values to threshold, got none")
  first, second = pairs.first, pairs.second
  dist = np.full(len(first), 1.0 / len(first))
  chosen_f, chosen_t, alphas = [], [], []
  for _ in range(num_rounds):
    potential = np.bincount(first, dist, minlength=n) - np.bincount(second, dist, minlength=n)  # pi(x)
    per_bin = np.bincount(bins.ravel(), np.repeat(potential, d), minlength=int(sizes.sum()))
    suffix = np.concatenate([np.cumsum(per_bin[::-1])[::-1], [0.0]])  # suffix[j] = sum of bins >= j
    r_all = suffix[cand_bin + 1] - suffix[cand_end]  # sum of pi over bins k+1 .. end of the feature
    best = int(np.argmax(np.abs(r_all)))
    r = float(r_all[best])
    if r == 0.0:
      break
    r = float(np.clip(r, -1.0 + R_CLIP, 1.0 - R_CLIP))
    alpha = 0.5 * np.log((1.0 + r) / (1.0 - r))
    f = int(cand_feature[best])
    theta = float(thresholds[f][cand_bin[best] - offsets[f]])
    h = (x[:, f] > theta).astype(np.float64)
    dist = dist * np.exp(alpha * (h[second] - h[first]))
    dist /= dist.sum()
    chosen_f.append(f)
    chosen_t.append(theta)
    alphas.append(alpha)
  return RankBoostModel(np.array(chosen_f, np.int64), np.array(chosen_t, np.float64), np.array(alphas, np.float64))


def rankboost_scores(model: RankBoostModel, features: np.ndarray) -> np.ndarray:
  r"""RankBoost's scores ``H(x)`` of documents.

  .. math:: H(x) = \sum_t \alpha_t [x_{f_t} > \theta_t]

  Args:
    model: :class:`RankBoostModel` (of :func:`fit_rankboost`, or the first ``t`` entries of each of its arrays).
    features: real ``[n, d]`` documents, ``d`` above every feature the model uses.

  Returns:
    ``float64[n]`` (higher ranks first).

  >>> import numpy as np
  >>> model = RankBoostModel(np.array([1, 0]), np.array([0.5, 0.0]), np.array([2.0, 1.0]))
  >>> rankboost_scores(model, np.array([[1.0, 1.0], [-1.0, 0.7], [1.0, 0.2]])).tolist()
  [3.0, 2.0, 1.0]
  """
  _checks.check_type("model", model, RankBoostModel, what="a RankBoostModel (fit_rankboost)")
  _checks.check_int_range("model.features", model.features, 0, _checks.INT32_MAX, what="feature indices")
  if model.features.ndim != 1 or not (model.features.shape == np.shape(model.thresholds) == np.shape(model.alphas)):
    raise ValueError(f"model: expected features, thresholds and alphas of one shape [T], got "
                     f"{[tuple(np.shape(a)) for a in model]}")
  x = np.asarray(features)
  _checks.check_real("features", features, shape_doc="[n, d]", ndim=2)
  used = int(np.max(model.features, initial=-1)) + 1
  if x.shape[1] < used:
    raise ValueError(f"features: expected at least {used} columns (the model's features), got {x.shape[1]}")
  x = x.astype(np.float64)
  return (x[:, model.features] > model.thresholds).astype(np.float64) @ np.asarray(model.alphas, np.float64)


# --------------------------------------------------------------------------- SVM-MAP


def _violated(s_rel: np.ndarray, s_non: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
  """Yue et al.'s Algorithm 2 on one query: relevant and non-relevant scores, each sorted descending.

  Returns ``(c int64[R], m int64[N])``: non-relevant documents above each relevant one, relevant documents
  above each non-relevant one, in the ranking that maximises ``1 - AP + w . Psi``.
  """
  num_rel, num_non = len(s_rel), len(s_non)
  i = np.arange(1, num_rel + 1, dtype=np.float64)[:, None]
  j = np.arange(1, num_non + 1, dtype=np.float64)[None, :]
  # delta[i, j]: the gain of ranking non-relevant j below relevant i rather than above it, given the
  # non-relevant documents 1..j-1 above relevant i and j+1.. below it (Yue et al.'s delta_j(i, i+1), negated).
  delta = i / ((i + j - 1.0) * (i + j)) / num_rel - 2.0 * (s_rel[:, None] - s_non[None, :]) / (num_rel * num_non)
  # value[m, j]: the objective's part of non-relevant j when m relevant documents rank above it.
  value = np.concatenate([np.cumsum(delta[::-1], axis=0)[::-1], np.zeros((1, num_non))], axis=0)
  m = num_rel - np.argmax(value[::-1], axis=0)  # the largest maximiser (the argmax is monotone in j)
  m = np.maximum.accumulate(m)  # (exact arithmetic needs no such guard; rounding might)
  c = np.searchsorted(m, np.arange(1, num_rel + 1), side="left")  # #{j : m_j < i}
  return c.astype(np.int64), m.astype(np.int64)


def svmmap_most_violated(scores: np.ndarray, relevant: np.ndarray) -> np.ndarray:
  r"""SVM-MAP's loss-augmented inference on one query (Yue et al. 2007, Algorithm 2): the ranking maximising
  ``1 - AP`` plus its linear score.

  The relevant documents keep their order by score, and so do the
  non-relevant ones; each non-relevant document ``j`` (in score order) takes,
  independently, the number ``m_j`` of relevant documents above it that
  maximises its share of the objective; the ``m_j`` come out non-decreasing,
  so they define an interleaving, and it is optimal. Ties of equal scores go
  to the document first in input order. Time ``O(n log n + R N)`` for ``R``
  relevant and ``N`` non-relevant documents (the sorts, then an ``R x N``
  table of the paper's ``delta_j(i, i+1)``).

  .. math:: \bar y = \arg\max_y \Big[1 - \mathrm{AP}(y) + \frac{1}{RN} \sum_{i \in \mathcal R}
     \sum_{j \in \mathcal N} y_{ij} (s_i - s_j)\Big], \quad y_{ij} = \pm 1
     \ (\text{+1 when } i \text{ ranks above } j)

  Args:
    scores: real ``[n]`` scores ``s = w . x`` of one query's documents.
    relevant: ``bool[n]`` (or ``{0, 1}``) relevance; at least one of each kind.

  Returns:
    ``int64[n]``, the documents in the ranking's order (first = top).

  >>> import numpy as np
  >>> svmmap_most_violated(np.array([0.0, 0.0, 0.0]), np.array([True, False, False])).tolist()  # AP 1/3
  [1, 2, 0]
  >>> svmmap_most_violated(np.array([3.0, 0.0, 0.0]), np.array([True, False, False])).tolist()  # a margin
  [0, 1, 2]
  """
  _checks.check_real("scores", scores, shape_doc="[n] (one query's documents)", ndim=1)
  _checks.check_int_range("relevant", relevant, 0, 1, what="relevance flags", ndim=1, shape_doc="[n]",
                          shape=np.shape(scores), like="scores")
  s, rel = np.asarray(scores, np.float64), np.asarray(relevant).astype(bool)
  if rel.all() or not rel.any():
    raise ValueError(f"relevant: expected both relevant and non-relevant, got {int(rel.sum())} of {len(rel)} relevant")
  rel_rows, non_rows = np.flatnonzero(rel), np.flatnonzero(~rel)
  rel_rows = rel_rows[np.argsort(-s[rel_rows], kind="stable")]
  non_rows = non_rows[np.argsort(-s[non_rows], kind="stable")]
  c, _ = _violated(s[rel_rows], s[non_rows])
  order = np.empty(len(s), np.int64)
  rel_pos = np.arange(len(rel_rows)) + c  # 0-based position of each relevant document
  order[rel_pos] = rel_rows
  rest = np.ones(len(s), bool)
  rest[rel_pos] = False
  order[rest] = non_rows
  return order


class _MapQueries(NamedTuple):
  rel: List[np.ndarray]  # rows of each query's relevant documents
  non: List[np.ndarray]  # and of its non-relevant ones


def _most_violated_all(x: np.ndarray, w: np.ndarray, queries: _MapQueries) -> Tuple[np.ndarray, float]:
  """Over all queries: per-document coefficients ``a`` with ``X^T a = sum_q (Psi_q(y_q) - Psi_q(ybar_q))`` and
  ``sum_q Delta_q(ybar_q)``."""
  s = x @ w
  coef = np.zeros(len(x))
  loss = 0.0
  for rel, non in zip(queries.rel, queries.non):
    rel = rel[np.argsort(-s[rel], kind="stable")]
    non = non[np.argsort(-s[non], kind="stable")]
    c, m = _violated(s[rel], s[non])
    num_rel, num_non = len(rel), len(non)
    # Psi* - Psi(ybar) = 2/(RN) [sum_i c_i x_i - sum_j (R - m_j) x_j]; 1 - AP = 1 - (1/R) sum_i i / (i + c_i).
    coef[rel] += 2.0 * c / (num_rel * num_non)
    coef[non] -= 2.0 * (num_rel - m) / (num_rel * num_non)
    i = np.arange(1, num_rel + 1)
    loss += 1.0 - float(np.mean(i / (i + c)))
  return coef, loss


def _solve_dual(gram: np.ndarray, b: np.ndarray, c: float, start: np.ndarray) -> np.ndarray:
  """``argmax_{alpha >= 0, sum alpha <= c} b . alpha - alpha^T gram alpha / 2`` (scipy SLSQP, warm start)."""
  k = len(b)
  result = scipy.optimize.minimize(
      lambda a: (0.5 * a @ gram @ a - b @ a, gram @ a - b), start, jac=True, method="SLSQP",
      bounds=[(0.0, None)] * k,
      constraints=[{"type": "ineq", "fun": lambda a: c - a.sum(), "jac": lambda a: -np.ones(k)}],
      options={"ftol": 1e-15, "maxiter": 1000})
  return np.clip(result.x, 0.0, None)


def fit_svmmap(features: np.ndarray, labels: np.ndarray, query_ids: np.ndarray, *, c: float = 1.0,
               epsilon: float = 1e-3, max_iterations: int = 1000) -> np.ndarray:
  r"""SVM-MAP (Yue et al. 2007): a linear structural SVM over rankings with the loss ``1 - AP``.

  Relevant = label ``>= 1``; queries with no relevant or no non-relevant
  document carry no constraint and are left out (``n`` counts the others).
  The joint feature map is Yue et al.'s
  ``Psi(x, y) = (1/(RN)) sum_{i in R, j in N} y_ij (x_i - x_j)``; the
  objective is the n-slack one below, trained in its equivalent 1-slack
  form (Joachims, Finley and Yu 2009): each iteration runs the exact
  loss-augmented inference on every query (:func:`svmmap_most_violated`),
  adds the summed constraint to the working set and re-solves the dual QP
  over the working set (``alpha >= 0``, ``sum alpha <= c``; scipy's SLSQP,
  warm-started), until the new constraint is violated by at most
  ``epsilon`` beyond the slack (then the objective is within ``c epsilon``
  of its minimum) or ``max_iterations`` constraints were added.

  .. math:: \min_w \tfrac12 \|w\|^2 + \frac{c}{n} \sum_q \max_y \big[1 - \mathrm{AP}_q(y)
     + w^\top \Psi(x_q, y) - w^\top \Psi(x_q, y_q)\big]

  Args:
    features: real ``[n_docs, d]`` training documents.
    labels: ``int[n_docs]`` graded relevance ``>= 0`` (relevant: ``>= 1``).
    query_ids: ``int[n_docs]`` query of each document.
    c: the trade-off ``c > 0`` (per query: the slacks are averaged).
    epsilon: the stopping tolerance ``> 0`` on the violation of the 1-slack constraint.
    max_iterations: cutting planes at most.

  Returns:
    ``float64[d]`` linear weights; scores are ``features @ w``.

  >>> import numpy as np
  >>> x = np.array([[1.0, 0.0], [0.0, 1.0], [0.9, 0.3], [0.2, 0.8]])
  >>> w = fit_svmmap(x, np.array([1, 0, 1, 0]), np.array([1, 1, 2, 2]), c=10.0)
  >>> bool(w[0] > w[1])
  True
  """
  _checks.check_ranking_data("features", features, labels, query_ids, ndim=2, shape_doc="[n, d]")
  x, y, q = np.asarray(features, np.float64), np.asarray(labels).astype(np.int64), np.asarray(query_ids)
  c = _checks.check_number("c", c, low=0, low_open=True)
  epsilon = _checks.check_number("epsilon", epsilon, low=0, low_open=True)
  max_iterations = _checks.check_int("max_iterations", max_iterations)
  queries = _MapQueries([], [])
  for rows in letor.group_by_query(q).indices:
    rel = y[rows] >= 1
    if rel.any() and not rel.all():
      queries.rel.append(rows[rel])
      queries.non.append(rows[~rel])
  if not queries.rel:
    raise ValueError("labels: no query has both a relevant (label >= 1) and a non-relevant (label 0) document")
  n = len(queries.rel)
  w = np.zeros(x.shape[1])
  planes = np.zeros((0, x.shape[1]))  # g_k = (1/n) sum_q (Psi_q(y_q) - Psi_q(ybar_q))
  offsets = np.zeros(0)  # b_k = (1/n) sum_q Delta_q(ybar_q)
  alpha = np.zeros(0)
  for _ in range(max_iterations):
    coef, loss = _most_violated_all(x, w, queries)
    g, b = x.T @ coef / n, loss / n
    slack = max(0.0, float(np.max(offsets - planes @ w, initial=0.0)))
    if b - g @ w <= slack + epsilon:
      break
    planes, offsets = np.vstack([planes, g]), np.append(offsets, b)
    alpha = _solve_dual(planes @ planes.T, offsets, c, np.append(alpha, 0.0))
    w = planes.T @ alpha
  return w


# --------------------------------------------------------------------------- LambdaMART


def _lightgbm():
  try:
    import lightgbm  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError("LambdaMART needs lightgbm (the ltr extra): pip install 'hashjax[ltr]'") from e
  return lightgbm


def _grouped(name: str, x: Any, y: Any, q: Any):
  """Rows sorted so that each query's documents are contiguous (LightGBM's groups), and the group sizes."""
  _checks.check_ranking_data(name, x, y, q, ndim=2, shape_doc="[n, d]")
  groups = letor.group_by_query(np.asarray(q))
  rows = np.concatenate(groups.indices)
  return (np.asarray(x, np.float64)[rows], np.asarray(y).astype(np.int64)[rows],
          np.array([len(g) for g in groups.indices], np.int64))


def fit_lambdamart(features: np.ndarray, labels: np.ndarray, query_ids: np.ndarray, *, num_trees: int = 100,
                   learning_rate: float = 0.1, num_leaves: int = 31, min_data_in_leaf: int = 20, seed: int = 0,
                   num_threads: int = 1, validation: Optional[Tuple[np.ndarray, np.ndarray, np.ndarray]] = None):
  r"""LambdaMART: gradient-boosted regression trees on LambdaRank's gradients (LightGBM ``lambdarank``).

  LightGBM's ``lambdarank`` objective with its defaults (NDCG's gain
  ``2^l - 1``, pairs truncated at rank 30), and deterministic settings:
  ``deterministic=True``, ``force_row_wise=True``, ``num_threads`` fixed,
  ``seed`` for every random choice (none is drawn with the defaults: no
  bagging, no feature sampling). Two fits with the same arguments give the
  same trees. With ``validation``, the booster also records NDCG@10 on it
  after every tree and its ``best_iteration`` is the first tree count of the
  highest (:func:`lambdamart_scores` then stops there).

  .. math:: \lambda_{ij} = \frac{-\sigma}{1 + e^{\sigma (s_i - s_j)}} |\Delta \mathrm{NDCG}_{ij}|, \quad
     F_m = F_{m-1} + \eta\, \mathrm{tree}_m(x)

  Needs lightgbm (``pip install 'hashjax[ltr]'``); an ImportError says so.

  Args:
    features: real ``[n, d]`` training documents.
    labels: ``int[n]`` graded relevance ``>= 0``.
    query_ids: ``int[n]`` query of each document.
    num_trees: boosting rounds.
    learning_rate: shrinkage ``eta > 0``.
    num_leaves: leaves per tree (``>= 2``).
    min_data_in_leaf: fewest documents in a leaf.
    seed: LightGBM's ``seed`` (an int ``>= 0``).
    num_threads: LightGBM's threads.
    validation: optional ``(features [m, d], labels int[m], query_ids int[m])`` for ``best_iteration``.

  Returns:
    the ``lightgbm.Booster``.

  >>> import numpy as np
  >>> rng = np.random.default_rng(0)
  >>> x, q = rng.random((200, 3)), np.repeat(np.arange(20), 10)
  >>> y = (x[:, 1] > 0.6).astype(int) + (x[:, 1] > 0.9)
  >>> booster = fit_lambdamart(x, y, q, num_trees=20, num_leaves=4, min_data_in_leaf=5)
  >>> s = lambdamart_scores(booster, x)
  >>> bool(s[y == 2].mean() > s[y == 1].mean() > s[y == 0].mean())
  True
  """
  xs, ys, sizes = _grouped("features", features, labels, query_ids)
  num_trees = _checks.check_int("num_trees", num_trees)
  learning_rate = _checks.check_number("learning_rate", learning_rate, low=0, low_open=True)
  # LightGBM's integer settings, under their LightGBM names, each an int >= its least value.
  settings = {name: _checks.check_int(name, value, low=low) for name, value, low in (
      ("num_leaves", num_leaves, 2), ("min_data_in_leaf", min_data_in_leaf, 0), ("seed", seed, 0),
      ("num_threads", num_threads, 1))}
  _check_pairs(any(len(np.unique(part)) > 1 for part in np.split(ys, np.cumsum(sizes)[:-1])))
  if validation is not None:
    if not isinstance(validation, (tuple, list)) or len(validation) != 3:
      raise ValueError(f"validation: expected None or (features, labels, query_ids), got {type(validation).__name__}"
                       + (f" of {len(validation)}" if isinstance(validation, (tuple, list)) else ""))
    vx, vy, vsizes = _grouped("validation[0]", *validation)
    _checks.check_columns("validation[0]", vx, xs.shape[1], what="the columns of features")
  lgb = _lightgbm()
  max_label = int(max(ys.max(), vy.max() if validation is not None else 0))
  params = {"objective": "lambdarank", "learning_rate": learning_rate, **settings, "deterministic": True,
            "force_row_wise": True, "verbosity": -1, "label_gain": [2.0 ** l - 1.0 for l in range(max_label + 1)]}
  train = lgb.Dataset(xs, ys, group=sizes, params={"verbosity": -1}, free_raw_data=False)
  if validation is None:
    return lgb.train(params, train, num_boost_round=num_trees)
  valid = lgb.Dataset(vx, vy, group=vsizes, reference=train, free_raw_data=False)
  record = {}
  booster = lgb.train({**params, "metric": "ndcg", "eval_at": [10]}, train, num_boost_round=num_trees,
                      valid_sets=[valid], valid_names=["validation"], callbacks=[lgb.record_evaluation(record)])
  booster.best_iteration = int(np.argmax(record["validation"]["ndcg@10"])) + 1
  return booster


def lambdamart_scores(booster: Any, features: np.ndarray, *, num_trees: Optional[int] = None) -> np.ndarray:
  r"""LambdaMART's scores of documents: the sum of the booster's trees.

  .. math:: F(x) = \sum_{m \le M} \eta\, \mathrm{tree}_m(x)

  Args:
    booster: a ``lightgbm.Booster`` (:func:`fit_lambdamart`).
    features: real ``[n, d]`` documents, ``d`` the booster's features.
    num_trees: the first ``M`` trees (None: the booster's ``best_iteration`` when set, else all).

  Returns:
    ``float64[n]`` (higher ranks first).

  >>> import numpy as np
  >>> x, y, q = np.arange(40.0).reshape(20, 2), np.tile([0, 1], 10), np.repeat(np.arange(5), 4)
  >>> booster = fit_lambdamart(x, y, q, num_trees=5, num_leaves=2, min_data_in_leaf=1)
  >>> lambdamart_scores(booster, x, num_trees=0).tolist()[:2]  # no tree: every score 0
  [0.0, 0.0]
  """
  lgb = _lightgbm()
  _checks.check_type("booster", booster, lgb.Booster, what="a lightgbm.Booster (fit_lambdamart)")
  _checks.check_real("features", features, shape_doc="[n, d]", ndim=2)
  _checks.check_columns("features", features, booster.num_feature(), what="the booster's features")
  x = np.asarray(features, np.float64)
  num_trees = _checks.check_int("num_trees", num_trees, low=0, allow_none=True)
  if num_trees == 0:
    return np.zeros(len(x))
  return np.asarray(booster.predict(x, num_iteration=num_trees), np.float64)
