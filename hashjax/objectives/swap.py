"""Swap-delta matrices: how a score changes when two documents exchange places.

For a query's Hamming ranking, "exchanging the positions" of documents ``a``
and ``b`` means exchanging their distances (their bins). LambdaRank (Nair et
al. 2012, eq. 5 and Figure 3) weights each pair's RankNet gradient by
``|Delta S[a, b]|``::

  Delta S[a, b] = S(distances with entries a and b exchanged) - S(distances)

Three paths compute the same ``[N, N]`` matrix:

* :func:`swap_deltas` (generic): any pure ``score_fn(distances, affinity)``,
  evaluated on every swapped ranking with ``vmap`` (``N (N - 1) / 2`` calls,
  the matrix is symmetric with a zero diagonal);
* :func:`swap_deltas` (exact closed forms, chosen automatically for the
  scores of :mod:`hashjax.objectives.scores`): a swap keeps every bin's total,
  so the relative threshold's neighbour set, the radius set and the tie-aware
  discount of each bin stay put. The kNN, hierarchical, retrieval and
  regression scores and the tie-aware NDCG are ``F(sum_i w(d_i) x_i)`` with
  ``w`` read from the bin totals, and exchanging ``a`` and ``b`` moves the sum
  by ``(w(d_b) - w(d_a)) (x_a - x_b)``: ``O(N^2)`` work, no score evaluation
  per pair. Tie-aware AP is not of that form, but its bins' harmonic sums
  read only the bin totals too: moving one relevant item from bin ``i`` to bin
  ``j`` changes it by a closed form in the bins between, a ``(b+1)^2`` table
  from one pass of prefix sums;
* :func:`histogram_swap_deltas` (fast): for scores that read only the
  histogram ``hist[num_bits + 1, V]``. A swap moves one item of level ``v_a``
  from bin ``d_a`` to ``d_b`` and one of level ``v_b`` back, so ``Delta S``
  depends only on the cells ``(d_a, v_a)`` and ``(d_b, v_b)``: the score is
  evaluated once per pair of cells (a ``(b+1) V x (b+1) V`` table) and the
  table is gathered per pair of documents.

Both are pure and traceable; wrap them in ``jax.jit`` (with the score function
closed over) and ``jax.vmap`` over queries.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks
from hashjax import _special
from hashjax import codes
from hashjax import metrics
from hashjax.objectives import scores
from hashjax.objectives.scores import check_distances

Array = jax.Array

__all__ = ["swap_deltas", "histogram_swap_deltas", "SWAP_METHODS", "SCORE_SWAP_METHODS"]

#: Options of :func:`histogram_swap_deltas`'s ``method=``.
SWAP_METHODS = ("auto", "table", "pairs", "linear")
#: Options of :func:`swap_deltas`'s ``method=``.
SCORE_SWAP_METHODS = ("auto", "generic")


def _check_callable(name: str, fn: Any) -> None:
  if not callable(fn):
    raise ValueError(f"{name}: expected a callable score function, got {type(fn).__name__}")


def _check_scalar_score(name: str, value: Any) -> Array:
  value = jnp.asarray(value)
  if value.shape != ():
    raise ValueError(f"{name}: expected a function returning a scalar score for one query, "
                     f"got output of shape {tuple(value.shape)}")
  if not (jnp.issubdtype(value.dtype, jnp.floating) or jnp.issubdtype(value.dtype, jnp.integer)):
    raise ValueError(f"{name}: expected a real scalar score, got dtype {value.dtype}")
  return value


def _check_one_query(distances: Any, affinity: Any) -> None:
  check_distances(distances)
  if distances.ndim != 1:
    raise ValueError(f"distances: expected one query's distances [N] (vmap for many), "
                     f"got shape {tuple(distances.shape)}")
  if not hasattr(affinity, "shape") or not hasattr(affinity, "dtype"):
    raise ValueError(f"affinity: expected a per-document array [N, ...], got {type(affinity).__name__}")
  if affinity.ndim < 1 or affinity.shape[0] != distances.shape[0]:
    raise ValueError(f"affinity: expected a per-document array [{distances.shape[0]}, ...] "
                     f"(one entry per document of distances), got shape {tuple(affinity.shape)}")


def _swapped_pairs(n: int):
  """Static upper-triangle index pairs (a < b)."""
  ia, ib = np.triu_indices(n, 1)
  return jnp.asarray(ia, jnp.int32), jnp.asarray(ib, jnp.int32)


def _symmetric(n, ia, ib, upper):
  out = jnp.zeros((n, n), upper.dtype).at[ia, ib].set(upper)
  return out.at[ib, ia].set(upper)


def _generic(score_fn, distances, affinity):
  n = distances.shape[0]
  base = _check_scalar_score("score_fn", score_fn(distances, affinity))
  if n == 1:
    return jnp.zeros((1, 1), base.dtype)
  ia, ib = _swapped_pairs(n)
  pos = jnp.arange(n)

  def swapped(a, b):
    d = jnp.where(pos == a, distances[b], jnp.where(pos == b, distances[a], distances))
    return score_fn(d, affinity)

  upper = jax.vmap(swapped)(ia, ib) - base
  return _symmetric(n, ia, ib, upper)


def swap_deltas(score_fn: Callable[[Array, Array], Array], distances: Array, affinity: Any, *,
                method: str = "auto") -> Array:
  """The LambdaRank swap matrix of any score function, for one query.

  .. math:: \\Delta S_{ab} = S(d^{(a \\leftrightarrow b)}, a) - S(d, a)

  where ``d^(a<->b)`` is ``distances`` with entries ``a`` and ``b``
  exchanged. The result is symmetric with a zero diagonal. For many queries,
  ``jax.vmap(lambda d, a: swap_deltas(score_fn, d, a))``; for speed,
  ``jax.jit`` that (the score function is traced, not a jit argument).

  ``method="generic"`` evaluates ``score_fn`` on all ``N (N - 1) / 2``
  swapped rankings at once with ``vmap``: any pure score function.
  ``method="auto"`` (default) does the same for a function of your own, and
  for a score of :mod:`hashjax.objectives.scores` (the function itself or a
  ``functools.partial`` of it with keyword options) uses its exact closed
  form instead: ``(w(d_b) - w(d_a)) (x_a - x_b)`` moved through the score
  for the neighbour-set and NDCG scores, a table over pairs of bins for
  tie-aware AP (module docstring). Both agree with a loop over pairs (``tests/test_swap.py``).

  Args:
    score_fn: pure, traceable ``score_fn(distances[N], affinity) -> scalar``,
      e.g. a score of :mod:`hashjax.objectives.scores` with its options bound
      by ``functools.partial``.
    distances: int ``[N]`` Hamming distances of the query's documents.
    affinity: ``[N, ...]`` per-document array the score reads (relevance
      levels, label pairs, target offsets...); passed through unchanged.
    method: ``"auto"`` or ``"generic"``.

  Returns:
    ``[N, N]`` array in the score's dtype.

  >>> import functools
  >>> import numpy as np
  >>> from hashjax.objectives.scores import retrieval_score
  >>> s = functools.partial(retrieval_score, radius=0)
  >>> swap_deltas(s, np.array([0, 3, 1]), np.array([0, 1, 1])).tolist()
  [[0.0, 1.0, 1.0], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
  >>> swap_deltas(s, np.array([0, 3, 1]), np.array([0, 1, 1]), method="generic").tolist()
  [[0.0, 1.0, 1.0], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
  """
  _check_callable("score_fn", score_fn)
  if not isinstance(method, str) or method not in SCORE_SWAP_METHODS:
    raise ValueError(f"method: expected one of {list(SCORE_SWAP_METHODS)}, got {method!r}")
  _check_one_query(distances, affinity)
  return _score_swaps(score_fn, jnp.asarray(distances), jnp.asarray(affinity), method)


def _score_swaps(score_fn, distances, affinity, method):
  """:func:`swap_deltas` without the checks (the path inside ``lambdarank_weights``)."""
  exact = _exact_form(score_fn) if method == "auto" else None
  if exact is None:
    return _generic(score_fn, distances, affinity)
  # The score itself checks its options and the affinity's range (and fixes the dtype).
  base = _check_scalar_score("score_fn", score_fn(distances, affinity))
  if distances.shape[0] == 1:
    return jnp.zeros((1, 1), base.dtype)
  return exact(distances, affinity).astype(base.dtype)


# --------------------------------------------------------------------------- exact closed forms


def _exchange(w, x):
  """``[N, N, ...]``: ``(w_b - w_a)(x_a - x_b)``, how ``sum_i w_i x_i`` moves when ``a`` and ``b`` swap places.

  After the swap ``a`` sits where ``b`` was (weight ``w_b``) and ``b`` where
  ``a`` was: ``w_b x_a + w_a x_b - w_a x_a - w_b x_b``.
  """
  dw = w[None, :] - w[:, None]
  dx = x[:, None] - x[None, :]
  return dw.reshape(dw.shape + (1,) * (x.ndim - 1)) * dx


def _float_like(x):
  return jnp.promote_types(x.dtype, scores._float())


def _neighbour_sum(inside, x):
  """Swap deltas of ``sum_i [i inside] x_i`` (the set ``inside`` is fixed by the bin totals)."""
  dt = _float_like(x)
  return _exchange(inside.astype(dt), x.astype(dt))


def _knn_count_exact(distances, affinity, *, k=3):
  return _neighbour_sum(scores._nearest_bins(distances, k), affinity)


def _retrieval_exact(distances, affinity, *, radius):
  return _neighbour_sum(distances <= radius, affinity)


def _hierarchical_exact(distances, affinity, *, similarity, k=3):
  return _neighbour_sum(scores._nearest_bins(distances, k), jnp.asarray(similarity).reshape(-1)[affinity])


def _knn_majority_exact(distances, affinity, *, num_classes, k=3, ties="expected"):
  inside = scores._nearest_bins(distances, k).astype(jnp.int32)
  lq, ld = affinity // num_classes, affinity % num_classes
  onehot = jax.nn.one_hot(ld, num_classes, dtype=jnp.int32)
  own = (lq == ld).astype(jnp.int32)  # votes for the query's class, as eq. 6 reads them
  votes, same = inside @ onehot, jnp.sum(inside * own)
  swapped = scores._majority(votes + _exchange(inside, onehot), same + _exchange(inside, own), ties)
  return swapped - scores._majority(votes, same, ties)


def _regression_exact(distances, affinity, *, k=3, mode="pairs"):
  dt = _float_like(affinity)
  inside = scores._nearest_bins(distances, k).astype(dt)
  w, o = inside / jnp.sum(inside), affinity.astype(dt)  # the neighbour count is fixed by the bin totals
  if mode == "pairs":
    return _exchange(w, o * o)
  mean = jnp.sum(w * o)
  moved = mean + _exchange(w, o)
  return moved * moved - mean * mean


def _ndcg_exact(distances, affinity, *, num_bits, num_levels=None, k=None):
  num_levels = codes._levels(affinity, num_levels)
  dt = scores._float()
  hist = _histogram(distances.astype(jnp.int32), affinity.astype(jnp.int32), num_bits, num_levels)
  gains, w, ideal = metrics._ndcg_parts(hist, jnp.int32(metrics._check_cutoff(k)), dt)
  # No positive gain: NDCG is undefined, scored 0 for every ranking (scores._zero_if_undefined).
  w = jnp.where(ideal > 0, w / jnp.where(ideal > 0, ideal, 1.0), 0.0)
  return _exchange(w[distances], gains[affinity])


def _ap_exact(distances, affinity, *, num_bits, k=None):
  # He et al.'s eq. 3 per bin d (metrics._ap_core): with P_d the relevant items before bin d,
  #   min(N+, k) AP_T = sum_d alpha_d p_d (P_d + 1) + beta_d p_d (p_d - 1),
  # alpha_d = dH_d / n_d, beta_d = S1_d / (n_d (n_d - 1)) read only the bin totals (and k), which a
  # swap keeps. A swap that matters moves one relevant item from bin i to bin j (and an irrelevant
  # one back): p_i - 1, p_j + 1, and P_d - 1 (i < j) or + 1 (i > j) for the bins in between.
  relevance = (affinity > 0).astype(jnp.int32)
  hist = _histogram(distances, relevance, num_bits, 2)
  dt = scores._float()
  n, p, before, p_before = metrics._counts(hist, ("n", "p", "before", "p_before"))
  cutoff = jnp.int32(metrics._check_cutoff(k))
  dh, s1 = _special.harmonic_range(before, jnp.clip(cutoff, before, before + n), dt)
  n, p, pb = n.astype(dt), p.astype(dt), p_before.astype(dt)
  alpha = dh / jnp.maximum(n, 1.0)
  beta = jnp.where(n > 1, s1 / jnp.maximum(n * (n - 1.0), 1.0), 0.0)
  upto = scores._cumsum(alpha * p)  # sum_{e <= d} alpha_e p_e
  below = upto - alpha * p  # sum_{e < d}
  arrive = 2.0 * beta * p  # the pair term of a bin of p relevant items gaining one
  leave = 2.0 * beta * (1.0 - p)  # ... and losing one
  # Relevant item leaves bin i for a farther bin j (rows i, columns j), or for a nearer one.
  farther = ((leave - alpha * (pb + 1.0))[:, None] + (alpha * (pb - p) + arrive)[None, :]
             - (below[None, :] - upto[:, None]))
  nearer = ((leave + alpha * (p - pb - 2.0))[:, None] + (alpha * (pb + 1.0) + arrive)[None, :]
            + (below[:, None] - upto[None, :]))
  bins = jnp.arange(n.shape[0])
  table = jnp.where(bins[:, None] < bins[None, :], farther, jnp.where(bins[:, None] > bins[None, :], nearer, 0.0))
  npos = jnp.sum(relevance)
  table = jnp.where(npos > 0, table / jnp.maximum(jnp.minimum(npos, cutoff), 1).astype(dt), 0.0)
  rel = relevance.astype(bool)
  moved = table[distances[:, None], distances[None, :]]  # a relevant, b irrelevant: a goes to b's bin
  return jnp.where(rel[:, None] & ~rel[None, :], moved, jnp.where(~rel[:, None] & rel[None, :], moved.T, 0.0))


#: The shipped scores' closed forms: ``exact(distances[N], affinity[N], **options) -> [N, N]``.
_EXACT = {
    scores.knn_count_score: _knn_count_exact,
    scores.retrieval_score: _retrieval_exact,
    scores.hierarchical_score: _hierarchical_exact,
    scores.knn_majority_score: _knn_majority_exact,
    scores.regression_score: _regression_exact,
    scores.ndcg_score: _ndcg_exact,
    scores.average_precision_score: _ap_exact,
}


def _exact_form(score_fn):
  """The closed form of a shipped score (or a keyword ``partial`` of one), options bound; else None."""
  fn, keywords = score_fn, {}
  if isinstance(score_fn, functools.partial) and not score_fn.args:
    fn, keywords = score_fn.func, score_fn.keywords
  try:
    exact = _EXACT.get(fn)
  except TypeError:  # an unhashable callable is not one of ours
    return None
  return None if exact is None else functools.partial(exact, **keywords)


def _histogram(distances, affinity, num_bits, num_levels):
  return jnp.zeros((num_bits + 1, num_levels), jnp.int32).at[distances, affinity].add(1)


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


def _hist_swaps(hist_score_fn, distances, affinity, num_bits, num_levels, method):
  n = distances.shape[0]
  distances = distances.astype(jnp.int32)
  affinity = affinity.astype(jnp.int32)
  hist = _histogram(distances, affinity, num_bits, num_levels)
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


def histogram_swap_deltas(hist_score_fn: Callable[[Array], Array], distances: Array, affinity: Array, *,
                          num_bits: int, num_levels: int, method: str = "auto") -> Array:
  """:func:`swap_deltas` for scores of the histogram, one evaluation per pair of cells.

  .. math:: \\Delta S_{ab} = g(n + e_{d_b v_a} + e_{d_a v_b} - e_{d_a v_a} - e_{d_b v_b}) - g(n)

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
  _check_callable("hist_score_fn", hist_score_fn)
  num_bits = _checks.check_num_bits(num_bits)
  if isinstance(num_levels, (bool, np.bool_)) or not isinstance(num_levels, (int, np.integer)) \
      or num_levels < 1:
    raise ValueError(f"num_levels: expected a positive int, got {num_levels!r}")
  if not isinstance(method, str) or method not in SWAP_METHODS:
    raise ValueError(f"method: expected one of {list(SWAP_METHODS)}, got {method!r}")
  _check_one_query(distances, affinity)
  check_distances(distances, num_bits=num_bits)
  if affinity.shape != distances.shape:
    raise ValueError(f"affinity: expected int levels of shape {tuple(distances.shape)} like distances, "
                     f"got {tuple(affinity.shape)}")
  _checks.check_int_range("affinity", affinity, 0, int(num_levels) - 1, what="affinity levels")
  return _hist_swaps(hist_score_fn, jnp.asarray(distances), jnp.asarray(affinity), num_bits,
                     int(num_levels), method)
