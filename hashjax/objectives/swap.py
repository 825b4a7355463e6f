r"""Swap-delta matrices: how a score changes when two documents exchange places.

For a query's Hamming ranking, "exchanging the positions" of documents ``a``
and ``b`` means exchanging their distances (their bins). LambdaRank (Nair et
al. 2012, eq. 5 and Figure 3) weights each pair's RankNet gradient by
``|Delta S[a, b]|``::

  Delta S[a, b] = S(distances with entries a and b exchanged) - S(distances)

Three kinds of function compute the same ``[N, N]`` matrix for one query
(symmetric, zero diagonal); the caller picks one and passes it on (to
:func:`hashjax.objectives.lambdarank_loss` as ``deltas_fn``):

* :func:`swap_deltas` (generic): any pure ``score_fn(distances, affinity)``,
  evaluated on every swapped ranking with ``vmap`` (``N (N - 1) / 2`` calls);
* the closed forms, one per score of :mod:`hashjax.objectives.scores`, with
  that score's options: :func:`knn_count_deltas`, :func:`retrieval_deltas`,
  :func:`hierarchical_deltas`, :func:`knn_majority_deltas`,
  :func:`regression_deltas`, :func:`ndcg_deltas`,
  :func:`average_precision_deltas`. A swap keeps every bin's total, so the
  relative threshold's neighbour set, the radius set and the tie-aware
  discount of each bin stay put. The kNN, hierarchical, retrieval and
  regression scores and the tie-aware NDCG are ``F(sum_i w(d_i) x_i)`` with
  ``w`` read from the bin totals, and exchanging ``a`` and ``b`` moves the sum
  by ``(w(d_b) - w(d_a)) (x_a - x_b)``: ``O(N^2)`` work, no score evaluation
  per pair. Tie-aware AP is not of that form, but its bins' harmonic sums read
  only the bin totals too: moving one relevant item from bin ``i`` to bin
  ``j`` changes it by a closed form in the bins between, a ``(b+1)^2`` table
  from one pass of prefix sums;
* :func:`histogram_swap_deltas`: for scores that read only the histogram
  ``hist[num_bits + 1, V]``. A swap moves one item of level ``v_a`` from bin
  ``d_a`` to ``d_b`` and one of level ``v_b`` back, so ``Delta S`` depends
  only on the cells ``(d_a, v_a)`` and ``(d_b, v_b)``: the score is evaluated
  once per pair of cells (a ``(b+1) V x (b+1) V`` table) and the table is
  gathered per pair of documents.

All are pure and traceable: ``jax.vmap`` them over queries and ``jax.jit``
the caller (the score function closed over). Each closed form equals
:func:`swap_deltas` of its score (``tests/test_swap.py`` checks both against
a loop over pairs).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks
from hashjax import histograms
from hashjax import metrics
from hashjax.objectives import scores

Array = jax.Array

__all__ = [
    "swap_deltas", "histogram_swap_deltas", "knn_count_deltas", "retrieval_deltas", "hierarchical_deltas",
    "knn_majority_deltas", "regression_deltas", "ndcg_deltas", "average_precision_deltas",
    "SWAP_METHODS",
]

#: Options of :func:`histogram_swap_deltas`'s ``method=``.
SWAP_METHODS = ("auto", "table", "pairs", "linear")


def _float():
  return jnp.result_type(float)


def _check_scalar_score(name: str, value: Any) -> Array:
  """The output of a score function: a real (int or float) scalar."""
  value = jnp.asarray(value)
  _checks.check_array(name, value, ndim=0, shape_doc="of one query", kinds="iuf", what="real score", nonempty=False)
  return value


def _check_one_query(distances: Any, affinity: Any = None, *, num_bits: Optional[int] = None,
                     what: str = "relevance levels", nonnegative: bool = False,
                     high: Optional[int] = None) -> Optional[int]:
  """One query's Hamming ``distances[N]`` and, given, its ``affinity[N]`` (:func:`scores.check_affinity`); returns
  ``num_bits`` as int (or None)."""
  num_bits = _checks.check_hamming_distances(distances, num_bits)
  _checks.check_array("distances", distances, ndim=1, shape_doc="[N] of one query (vmap for many)", kinds="iu")
  if affinity is not None:
    scores.check_affinity(affinity, distances, what=what, nonnegative=nonnegative, high=high)
  return num_bits


# --------------------------------------------------------------------------- the generic path


def _swapped_pairs(n: int):
  """Static upper-triangle index pairs (a < b)."""
  ia, ib = np.triu_indices(n, 1)
  return jnp.asarray(ia, jnp.int32), jnp.asarray(ib, jnp.int32)


def _symmetric(n, ia, ib, upper):
  out = jnp.zeros((n, n), upper.dtype).at[ia, ib].set(upper)
  return out.at[ib, ia].set(upper)


def swap_deltas(score_fn: Callable[[Array, Array], Array], distances: Array, affinity: Any) -> Array:
  r"""The LambdaRank swap matrix of any score function, for one query.

  .. math:: \Delta S_{ab} = S(d^{(a \leftrightarrow b)}, a) - S(d, a)

  where ``d^(a<->b)`` is ``distances`` with entries ``a`` and ``b``
  exchanged. The result is symmetric with a zero diagonal. ``score_fn`` is
  evaluated on all ``N (N - 1) / 2`` swapped rankings at once with ``vmap``:
  any pure score function, however it is wrapped. For many queries,
  ``jax.vmap(lambda d, a: swap_deltas(score_fn, d, a))``; for speed,
  ``jax.jit`` that (the score function is traced, not a jit argument).

  The shipped scores also have exact closed forms in ``O(N^2)``, passed
  explicitly where a swap matrix is wanted: :func:`knn_count_deltas`,
  :func:`retrieval_deltas`, :func:`hierarchical_deltas`,
  :func:`knn_majority_deltas`, :func:`regression_deltas`,
  :func:`ndcg_deltas`, :func:`average_precision_deltas` (same options as the
  score, same matrix).

  Args:
    score_fn: pure, traceable ``score_fn(distances[N], affinity) -> scalar``,
      e.g. a score of :mod:`hashjax.objectives.scores` with its options bound
      by ``functools.partial``.
    distances: int ``[N]`` Hamming distances of the query's documents.
    affinity: ``[N, ...]`` per-document array the score reads (relevance
      levels, label pairs, target offsets...); passed through unchanged, so
      the score checks it: the shipped scores that read relevance reject a
      negative entry (on the first, concrete evaluation; a traced
      ``affinity`` cannot be checked), while :func:`regression_deltas`'s
      target offsets are signed.

  Returns:
    ``[N, N]`` array in the score's dtype.

  >>> import functools
  >>> import numpy as np
  >>> from hashjax.objectives.scores import retrieval_score
  >>> s = functools.partial(retrieval_score, radius=0)
  >>> swap_deltas(s, np.array([0, 3, 1]), np.array([0, 1, 1])).tolist()
  [[0.0, 1.0, 1.0], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
  """
  _checks.check_callable("score_fn", score_fn, what="score function")
  _check_one_query(distances)
  if not hasattr(affinity, "shape") or affinity.ndim < 1 or affinity.shape[0] != distances.shape[0]:
    raise ValueError(f"affinity: expected [{distances.shape[0]}, ...] (one per document), got {_checks.desc(affinity)}")
  distances, affinity = jnp.asarray(distances), jnp.asarray(affinity)
  n = distances.shape[0]
  base = _check_scalar_score("score_fn", score_fn(distances, affinity))
  if n == 1:
    return jnp.zeros((1, 1), base.dtype)
  ia, ib = _swapped_pairs(n)
  pos = jnp.arange(n)

  def swapped(a, b):
    d = jnp.where(pos == a, distances[b], jnp.where(pos == b, distances[a], distances))
    return score_fn(d, affinity)

  return _symmetric(n, ia, ib, jax.vmap(swapped)(ia, ib) - base)


# --------------------------------------------------------------------------- closed forms: sums over neighbours


def _exchange(w, x):
  """``[N, N, ...]``: ``(w_b - w_a)(x_a - x_b)``, how ``sum_i w_i x_i`` moves when ``a`` and ``b`` swap places.

  After the swap ``a`` sits where ``b`` was (weight ``w_b``) and ``b`` where
  ``a`` was: ``w_b x_a + w_a x_b - w_a x_a - w_b x_b``.
  """
  dw = w[None, :] - w[:, None]
  dx = x[:, None] - x[None, :]
  return dw.reshape(dw.shape + (1,) * (x.ndim - 1)) * dx


def _neighbour_sum(inside, x):
  """Swap deltas of ``sum_i [i inside] x_i`` (the set ``inside`` is fixed by the bin totals)."""
  dt = jnp.promote_types(x.dtype, _float())
  return _exchange(inside.astype(dt), x.astype(dt))


def knn_count_deltas(distances: Array, affinity: Array, *, k: int = 3) -> Array:
  r"""Exact swap matrix of :func:`~hashjax.objectives.knn_count_score` (Nair eq. 7), for one query.

  .. math:: \Delta S_{ab} = (m_b - m_a)(a_a - a_b), \quad m_i = [d_i \text{ in the } k
            \text{ nearest non-empty bins}]

  A swap keeps every bin's total, so the neighbour set ``m`` of the relative
  threshold stays put: only which documents sit in it changes.

  Args:
    distances: int ``[N]`` Hamming distances.
    affinity: ``[N]`` non-negative relevance (int levels or real weights; a
      negative entry is an error when concrete, unchecked when traced).
    k: the relative threshold (``>= 1``).

  Returns:
    float ``[N, N]``, equal to ``swap_deltas(partial(knn_count_score, k=k), distances, affinity)``.

  >>> import numpy as np
  >>> knn_count_deltas(np.array([0, 1, 2]), np.array([0, 1, 1]), k=1).tolist()
  [[0.0, 1.0, 1.0], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
  """
  _check_one_query(distances, affinity, nonnegative=True)
  return _neighbour_sum(metrics.nearest_bins_mask(distances, k=k), jnp.asarray(affinity))


def retrieval_deltas(distances: Array, affinity: Array, *, radius: int) -> Array:
  r"""Exact swap matrix of :func:`~hashjax.objectives.retrieval_score` (Nair eq. 8), for one query.

  .. math:: \Delta S_{ab} = ([d_b \le r] - [d_a \le r])(a_a - a_b)

  Args:
    distances: int ``[N]`` Hamming distances.
    affinity: ``[N]`` non-negative relevance (int levels or real weights; a
      negative entry is an error when concrete, unchecked when traced).
    radius: the absolute threshold ``r >= 0``.

  Returns:
    float ``[N, N]``, equal to ``swap_deltas(partial(retrieval_score, radius=radius), distances, affinity)``.

  >>> import numpy as np
  >>> retrieval_deltas(np.array([0, 3, 1]), np.array([0, 1, 1]), radius=0).tolist()
  [[0.0, 1.0, 1.0], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
  """
  _check_one_query(distances, affinity, nonnegative=True)
  radius = _checks.check_int("radius", radius, low=0)
  return _neighbour_sum(jnp.asarray(distances) <= radius, jnp.asarray(affinity))


def hierarchical_deltas(distances: Array, affinity: Array, *, similarity: Array, k: int = 3) -> Array:
  r"""Exact swap matrix of :func:`~hashjax.objectives.hierarchical_score` (Nair eq. 10), for one query.

  .. math:: \Delta S_{ab} = (m_b - m_a)\big(F(l_q, l_a) - F(l_q, l_b)\big)

  with ``m`` the neighbour set of the ``k`` nearest non-empty bins, which a
  swap keeps.

  Args:
    distances: int ``[N]`` Hamming distances.
    affinity: int ``[N]`` label pairs ``l_q * C + l_i``
      (:func:`~hashjax.objectives.label_pairs`).
    similarity: real non-negative ``[C, C]`` table of ``F`` (the graded relevance
      of class ``l_i`` to a query of class ``l_q``).
    k: the relative threshold (``>= 1``).

  Returns:
    float ``[N, N]``, equal to :func:`swap_deltas` of the score with these options.

  >>> import numpy as np
  >>> F = np.array([[1.0, 0.5], [0.5, 1.0]])
  >>> hierarchical_deltas(np.array([0, 2]), np.array([0, 1]), similarity=F, k=1).tolist()
  [[0.0, -0.5], [-0.5, 0.0]]
  """
  num_classes = scores.check_similarity(similarity)
  _check_one_query(distances)
  scores.check_label_pairs(affinity, distances, num_classes)
  f = jnp.asarray(similarity).reshape(-1)[jnp.asarray(affinity)]
  return _neighbour_sum(metrics.nearest_bins_mask(distances, k=k), f)


def knn_majority_deltas(distances: Array, affinity: Array, *, num_classes: int, k: int = 3,
                        ties: str = "expected") -> Array:
  r"""Exact swap matrix of :func:`~hashjax.objectives.knn_majority_score` (Nair eq. 6), for one query.

  .. math:: \Delta S_{ab} = \mathrm{maj}\big(v + (m_b - m_a)(e_{l_a} - e_{l_b})\big) - \mathrm{maj}(v)

  where ``v`` are the neighbours' class votes, ``e_c`` the unit vote for
  class ``c``, and ``maj`` is :func:`~hashjax.objectives.majority_from_votes`:
  a swap moves at most one vote between two classes.

  Args:
    distances: int ``[N]`` Hamming distances.
    affinity: int ``[N]`` label pairs ``l_q * C + l_i``
      (:func:`~hashjax.objectives.label_pairs`).
    num_classes: ``C``.
    k: the relative threshold (``>= 1``).
    ties: ``"expected"`` or ``"strict"`` (see the score).

  Returns:
    float ``[N, N]``, equal to :func:`swap_deltas` of the score with these options.

  >>> import numpy as np
  >>> knn_majority_deltas(np.array([0, 1, 2]), np.array([1, 0, 1]), num_classes=2, k=1).tolist()
  [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
  """
  _check_one_query(distances)
  num_classes = scores.check_label_pairs(affinity, distances, num_classes)  # majority_from_votes checks ties
  inside = metrics.nearest_bins_mask(distances, k=k).astype(jnp.int32)
  pairs = jnp.asarray(affinity)
  lq, ld = pairs // num_classes, pairs % num_classes
  onehot = jax.nn.one_hot(ld, num_classes, dtype=jnp.int32)
  own = (lq == ld).astype(jnp.int32)  # votes for the query's class, as eq. 6 reads them
  votes, same = jnp.sum(inside[:, None] * onehot, axis=0), jnp.sum(inside * own)
  swapped = scores.majority_from_votes(votes + _exchange(inside, onehot), same + _exchange(inside, own), ties=ties)
  return swapped - scores.majority_from_votes(votes, same, ties=ties)


def regression_deltas(distances: Array, affinity: Array, *, k: int = 3, mode: str = "pairs") -> Array:
  r"""Exact swap matrix of :func:`~hashjax.objectives.regression_score` (Nair eq. 11), for one query.

  .. math:: \Delta S_{ab} = \frac{(m_b - m_a)(o_a^2 - o_b^2)}{L} \quad (\text{"pairs"}), \qquad
            \Big(\bar o + \frac{(m_b - m_a)(o_a - o_b)}{L}\Big)^2 - \bar o^2 \quad (\text{"prediction"})

  with ``m`` the neighbour set (``L`` documents, fixed by the bin totals),
  ``o`` the target offsets and ``\bar o`` their mean over the neighbours.

  Args:
    distances: int ``[N]`` Hamming distances.
    affinity: real ``[N]`` target offsets ``t_i - t_q``
      (:func:`~hashjax.objectives.target_offsets`); signed, so negative values are valid.
    k: the relative threshold (``>= 1``).
    mode: ``"pairs"`` or ``"prediction"``.

  Returns:
    float ``[N, N]``, equal to :func:`swap_deltas` of the score with these options.

  >>> import numpy as np
  >>> regression_deltas(np.array([0, 1]), np.array([1.0, 3.0]), k=1).tolist()
  [[0.0, 8.0], [8.0, 0.0]]
  """
  _check_one_query(distances, affinity, what="target offsets")
  mode = _checks.check_option("mode", mode, scores.REGRESSION_MODES)
  offsets = jnp.asarray(affinity)
  dt = jnp.promote_types(offsets.dtype, _float())
  inside = metrics.nearest_bins_mask(distances, k=k).astype(dt)
  w, o = inside / jnp.sum(inside), offsets.astype(dt)  # the neighbour count is fixed by the bin totals
  if mode == "pairs":
    return _exchange(w, o * o)
  mean = jnp.sum(w * o)
  moved = mean + _exchange(w, o)
  return moved * moved - mean * mean


# --------------------------------------------------------------------------- closed forms: tie-aware NDCG and AP


def ndcg_deltas(distances: Array, affinity: Array, *, num_bits: int, num_levels: Optional[int] = None,
                k: Optional[int] = None) -> Array:
  r"""Exact swap matrix of :func:`~hashjax.objectives.ndcg_score` (tie-aware NDCG@k), for one query.

  .. math:: \Delta S_{ab} = \frac{(w_{d_b} - w_{d_a})(G(a_a) - G(a_b))}{Z}, \quad
            w_d = \frac{1}{n_d} \sum_{t=N_{d-1}+1}^{\min(N_d, k)} \frac{1}{\log_2(t + 1)}

  ``w_d`` is the mean discount of bin ``d``'s positions over its tie orders,
  ``G(a) = 2^a - 1`` and ``Z`` the ideal DCG@k: both read only the bin and
  level totals, which a swap keeps. 0 when no document has a positive gain
  (the score is 0 for every ranking then).

  Args:
    distances: int ``[N]`` Hamming distances in ``[0, num_bits]``.
    affinity: int ``[N]`` relevance levels ``>= 0``.
    num_bits: the code length ``b``.
    num_levels: number of levels ``V``; inferred from a concrete ``affinity``,
      required under ``jit``/``vmap``.
    k: optional cutoff position (``>= 1``).

  Returns:
    float ``[N, N]``, equal to :func:`swap_deltas` of the score with these options.

  >>> import numpy as np
  >>> np.round(ndcg_deltas(np.array([0, 1]), np.array([0, 1]), num_bits=1), 4).tolist()
  [[0.0, 0.3691], [0.3691, 0.0]]
  """
  num_bits = _check_one_query(distances, affinity, num_bits=num_bits, high=_checks.INT32_MAX)
  num_levels = _checks.check_gain_levels(histograms.num_levels_of(affinity, num_levels), name="num_levels")
  d, a = jnp.asarray(distances).astype(jnp.int32), jnp.asarray(affinity).astype(jnp.int32)
  hist = histograms.distance_histogram(d, a, num_bits=num_bits, num_levels=num_levels)
  gains, w, ideal = metrics.dcg_weights(hist, k=k, dtype=_float())
  w = jnp.where(ideal > 0, w / jnp.where(ideal > 0, ideal, 1.0), 0.0)
  return _exchange(w[d], gains[a])


def average_precision_deltas(distances: Array, affinity: Array, *, num_bits: int,
                             k: Optional[int] = None) -> Array:
  r"""Exact swap matrix of :func:`~hashjax.objectives.average_precision_score` (tie-aware AP@k), for one query.

  .. math:: \min(N^+, k)\, AP_T = \sum_d \alpha_d\, p_d (P_d + 1) + \beta_d\, p_d (p_d - 1), \quad
            \alpha_d = \frac{\Delta H_d}{n_d}, \; \beta_d = \frac{S_{1,d}}{n_d (n_d - 1)}

  (He et al. eq. 3 per bin ``d``: ``p_d`` relevant of ``n_d`` documents,
  ``P_d`` relevant before it, ``Delta H_d`` and ``S_{1,d}`` the harmonic
  sums over its ranks cut at ``k``.) ``alpha`` and ``beta`` read only the bin
  totals, which a swap keeps; a swap that matters moves one relevant document
  from bin ``i`` to bin ``j`` (and an irrelevant one back): ``p_i - 1``,
  ``p_j + 1``, and ``P_d -+ 1`` for the bins between. Those changes form a
  ``(b+1) x (b+1)`` table over pairs of bins, gathered per pair of documents.
  0 when no document is relevant.

  Args:
    distances: int ``[N]`` Hamming distances in ``[0, num_bits]``.
    affinity: int ``[N]`` levels (``> 0`` = relevant).
    num_bits: the code length ``b``.
    k: optional rank cutoff.

  Returns:
    float ``[N, N]``, equal to :func:`swap_deltas` of the score with these options.

  >>> import numpy as np
  >>> average_precision_deltas(np.array([0, 1]), np.array([0, 1]), num_bits=1).tolist()
  [[0.0, 0.5], [0.5, 0.0]]
  """
  num_bits = _check_one_query(distances, affinity, num_bits=num_bits, high=_checks.INT32_MAX)
  dt = _float()
  d = jnp.asarray(distances).astype(jnp.int32)
  relevance = (jnp.asarray(affinity) > 0).astype(jnp.int32)
  hist = histograms.distance_histogram(d, relevance, num_bits=num_bits, num_levels=2)
  n, p, _, pb, dh, s1 = metrics.ap_bin_pieces(hist, k=k, dtype=dt)
  n, p, pb = n.astype(dt), p.astype(dt), pb.astype(dt)
  alpha = dh / jnp.maximum(n, 1.0)
  beta = jnp.where(n > 1, s1 / jnp.maximum(n * (n - 1.0), 1.0), 0.0)
  upto = jnp.cumsum(alpha * p)  # sum_{e <= d} alpha_e p_e
  below = upto - alpha * p  # sum_{e < d}
  arrive = 2.0 * beta * p  # the pair term of a bin of p relevant items gaining one
  leave = 2.0 * beta * (1.0 - p)  # ... and losing one
  # A relevant item leaves bin i for a farther bin j (rows i, columns j), or for a nearer one.
  farther = ((leave - alpha * (pb + 1.0))[:, None] + (alpha * (pb - p) + arrive)[None, :]
             - (below[None, :] - upto[:, None]))
  nearer = ((leave + alpha * (p - pb - 2.0))[:, None] + (alpha * (pb + 1.0) + arrive)[None, :]
            + (below[:, None] - upto[None, :]))
  bins = jnp.arange(n.shape[0])
  table = jnp.where(bins[:, None] < bins[None, :], farther, jnp.where(bins[:, None] > bins[None, :], nearer, 0.0))
  npos = jnp.sum(relevance)
  norm = npos if k is None else jnp.minimum(npos, k)  # min(N+, k), k checked by ap_bin_pieces
  table = jnp.where(npos > 0, table / jnp.maximum(norm, 1).astype(dt), 0.0)
  # A relevant a and an irrelevant b: a goes to b's bin, table[d_a, d_b]; the other way round, table[d_b, d_a].
  # One gather from both orientations (a gather and its transpose cost several times more under vmap).
  moved = jnp.stack([table.T, table])[relevance[:, None], d[:, None], d[None, :]]
  return jnp.where(relevance[:, None] != relevance[None, :], moved, 0.0)


# --------------------------------------------------------------------------- histogram scores


def _moves(d1, v1, d2, v2, num_bits, num_levels):
  """Histogram change when one item of level v1 goes d1 -> d2 and one of level v2 goes d2 -> d1."""
  cells = (num_bits + 1) * num_levels
  e = lambda d, v: jax.nn.one_hot(d * num_levels + v, cells, dtype=jnp.int32)
  delta = e(d2, v1) + e(d1, v2) - e(d1, v1) - e(d2, v2)
  return delta.reshape(d1.shape + (num_bits + 1, num_levels))


@functools.lru_cache(maxsize=32)
def _table_np(num_bits: int, num_levels: int):
  """The cell pairs whose swap changes the histogram, and the change, as constants.

  Cells ``c = d * V + v``. Exchanging the distances of two items leaves the
  histogram unchanged when they share the bin (``d1 = d2``) or the level
  (``v1 = v2``: one item of that level leaves each bin and one arrives), so
  only pairs with ``d1 < d2`` and ``v1 != v2`` are evaluated:
  ``(b+1) b / 2 * V (V - 1)`` of them.
  """
  cells = (num_bits + 1) * num_levels
  c1, c2 = np.triu_indices(cells, 1)
  d1, v1, d2, v2 = c1 // num_levels, c1 % num_levels, c2 // num_levels, c2 % num_levels
  keep = (d1 != d2) & (v1 != v2)
  c1, c2, d1, v1, d2, v2 = (x[keep] for x in (c1, c2, d1, v1, d2, v2))
  delta = np.zeros((c1.size, cells), np.int32)
  rows = np.arange(c1.size)
  np.add.at(delta, (rows, d2 * num_levels + v1), 1)
  np.add.at(delta, (rows, d1 * num_levels + v2), 1)
  np.add.at(delta, (rows, c1), -1)
  np.add.at(delta, (rows, c2), -1)
  return c1.astype(np.int32), c2.astype(np.int32), delta.reshape(c1.size, num_bits + 1, num_levels)


def histogram_swap_deltas(hist_score_fn: Callable[[Array], Array], distances: Array, affinity: Array, *,
                          num_bits: int, num_levels: int, method: str = "auto") -> Array:
  r""":func:`swap_deltas` for scores of the histogram, one evaluation per pair of cells.

  .. math:: \Delta S_{ab} = g(n + e_{d_b v_a} + e_{d_a v_b} - e_{d_a v_a} - e_{d_b v_b}) - g(n)

  where ``n`` is the ``[num_bits + 1, V]`` histogram of the query and ``g``
  the score. ``method="table"`` evaluates ``g`` once per pair of cells
  (independent of ``N``) and gathers;
  ``"pairs"`` evaluates it once per pair of documents; ``"auto"`` picks the
  fewer evaluations. Pairs of cells in the same bin or of the same level
  leave the histogram unchanged and are not evaluated, so the table costs
  ``(b+1) b V (V - 1) / 2`` calls. Same result as :func:`swap_deltas` with
  ``score_fn = lambda d, a: g(histogram(d, a))``.

  ``method="linear"`` (never chosen by ``"auto"``) differentiates ``g`` once,
  ``Delta S_ab = psi[d_b, v_a] + psi[d_a, v_b] - psi[d_a, v_a] - psi[d_b, v_b]``
  with ``psi = grad g(n)``, in ``O(N^2)``. A swap keeps every bin's total and
  every level's total, so this is exact if and only if ``g`` is affine in
  ``n`` among histograms sharing those totals (and differentiable in it):
  true for the sums over neighbours
  (:func:`~hashjax.objectives.knn_count_from_histogram`,
  :func:`~hashjax.objectives.retrieval_from_histogram`,
  :func:`~hashjax.objectives.hierarchical_from_histogram`, since the relative
  threshold only reads bin totals), false for AP and the majority vote. ``g``
  then receives a float histogram (the AP/NDCG of :mod:`hashjax.metrics`
  reject it).

  Args:
    hist_score_fn: pure ``g(hist[num_bits + 1, V] int32) -> scalar``, e.g.
      ``functools.partial(knn_count_from_histogram, k=3)``.
    distances: int ``[N]`` in ``[0, num_bits]``.
    affinity: int ``[N]`` levels in ``[0, num_levels)``.
    num_bits: the code length ``b``.
    num_levels: ``V``.
    method: ``"auto"``, ``"table"``, ``"pairs"`` or ``"linear"``.

  Returns:
    ``[N, N]`` array in the score's dtype.

  >>> import functools
  >>> import numpy as np
  >>> from hashjax.objectives.scores import retrieval_from_histogram
  >>> g = functools.partial(retrieval_from_histogram, radius=0)
  >>> histogram_swap_deltas(g, np.array([0, 3, 1]), np.array([0, 1, 1]), num_bits=3, num_levels=2).tolist()
  [[0.0, 1.0, 1.0], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
  """
  _checks.check_callable("hist_score_fn", hist_score_fn, what="histogram score function")
  num_levels = _checks.check_int("num_levels", num_levels)
  method = _checks.check_option("method", method, SWAP_METHODS)
  num_bits = _check_one_query(distances, affinity, num_bits=num_bits, what="affinity levels", high=num_levels - 1)
  n = distances.shape[0]
  distances = jnp.asarray(distances).astype(jnp.int32)
  affinity = jnp.asarray(affinity).astype(jnp.int32)
  hist = histograms.distance_histogram(distances, affinity, num_bits=num_bits, num_levels=num_levels)
  base = _check_scalar_score("hist_score_fn", hist_score_fn(hist))
  if n == 1:
    return jnp.zeros((1, 1), base.dtype)
  cells = (num_bits + 1) * num_levels
  if method == "linear":
    # Delta S = <grad g, Delta n>: exact when g is affine in the histogram on the set of
    # histograms with the same bin totals and level totals (which every swap preserves).
    dt = jnp.promote_types(base.dtype, jnp.float32)
    psi = jax.grad(lambda h: hist_score_fn(h).astype(dt))(hist.astype(dt))
    p = psi[distances[None, :], affinity[:, None]]  # p[i, j] = psi[d_j, v_i]
    own = jnp.diagonal(p)
    return (p + p.T - own[:, None] - own[None, :]).astype(dt)
  if method == "auto":
    method = "table" if num_bits * (num_bits + 1) * num_levels * (num_levels - 1) < n * (n - 1) else "pairs"
  if method == "pairs":
    ia, ib = _swapped_pairs(n)
    moved = hist + _moves(distances[ia], affinity[ia], distances[ib], affinity[ib], num_bits, num_levels)
    return _symmetric(n, ia, ib, jax.vmap(hist_score_fn)(moved) - base)
  # Table over the cell pairs whose swap changes the histogram (constants of num_bits, V);
  # every other entry is 0. Cells with no item give impossible (negative) histograms;
  # those entries are never gathered.
  c1, c2, moves = _table_np(num_bits, num_levels)
  if c1.size == 0:  # one level: no swap changes anything
    return jnp.zeros((n, n), base.dtype)
  moved = hist + jnp.asarray(moves)
  table = _symmetric(cells, jnp.asarray(c1), jnp.asarray(c2), jax.vmap(hist_score_fn)(moved) - base)
  cell = distances * num_levels + affinity
  return table[cell[:, None], cell[None, :]]
