"""The metrics of :mod:`hashjax.metrics` as formulas over histograms ``hist[..., B, V]``, and their per-bin pieces.

Each formula is written once against an array namespace ``xp`` (numpy on the
host for concrete histograms, jax.numpy when traced); the public
``*_from_histogram`` functions apply it through :func:`hashjax.metrics._inputs.evaluate`, which checks the
histogram and the options (``k``, ``dtype``, ``radius``) by one rule each. The pieces
other modules share: the relative threshold (:func:`nearest_bins_mask`), the
vote rule (:func:`vote_winners`), AP's and NDCG's per-bin pieces
(:func:`ap_bin_pieces`, :func:`dcg_weights`).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks
from hashjax import _special
from hashjax.metrics import _inputs

Array = jax.Array


# --------------------------------------------------------------------------
# Formulas on histograms ``hist[..., B, V]``, each written once against ``xp``.


def _cumsum(x, xp):
  """Cumulative sums of int32 ``x[..., m]`` along the last axis. Traced, an exact int32 product with a
  triangle of ones: XLA:CPU compiles ``jnp.cumsum`` as a chain of kernels that costs several times as long;
  past 1024 bins (tie groups of real distances) the triangle's ``m^2`` cost is the larger."""
  if xp is np:
    return np.cumsum(x, axis=-1, dtype=np.int32)
  m = x.shape[-1]
  if m > 1024:
    return jnp.cumsum(x, axis=-1, dtype=jnp.int32)
  return x @ jnp.asarray(np.triu(np.ones((m, m), np.int32)))


def _bins(hist, xp):
  """Per bin ``d`` (``int32[..., B]``): items ``n``, relevant items ``p`` (levels ``>= 1``), and the
  items / relevant items ranked before the bin."""
  h = hist.astype(xp.int32)
  n = xp.sum(h, axis=-1, dtype=xp.int32)
  p = n - h[..., 0]
  return n, p, _cumsum(n, xp) - n, _cumsum(p, xp) - p


class APBins(NamedTuple):
  """Per-bin pieces of the tie-aware AP, each ``[..., B]``: items ``n``, relevant items ``p``, the items and
  relevant items ranked before the bin (``before``, ``p_before``), and the harmonic sums ``dh``
  (``sum 1/t``) and ``s1`` (``sum (t - a - 1)/t``) over the bin's ranks ``a+1 .. b``."""
  n: Array
  p: Array
  before: Array
  p_before: Array
  dh: Array
  s1: Array


def _ap_bins(hist, k, dtype, xp, ties="expected"):
  """:class:`APBins` of ``hist`` with each bin's ranks cut at ``k`` (``ties="expected"``), or only its
  relevant items' ranks when they come first (``"relevant_first"``) or last (``"relevant_last"``)."""
  n, p, before, p_before = _bins(hist, xp)
  through = before + n
  if ties == "expected":
    a, b = before, xp.maximum(before, xp.minimum(k, through))
  elif ties == "relevant_first":
    a, b = before, before + p
  else:
    a, b = through - p, through
  dh, s1 = _special.harmonic_range(a, b, dtype, xp)
  return APBins(n, p, before, p_before, dh, s1)


def _average_precision(hist, k, dtype, ties, xp):
  """AP(@k) when the ties are ``"expected"`` (eq. 3: the mean over tie orders), ``"relevant_first"``
  or ``"relevant_last"``.

  Every form sums ``(N^+_{d-1} + j) / t`` over the ranks ``t`` of a tie's
  relevant items; over ranks ``a+1 .. b`` that is ``(N^+_{d-1} + 1) dH(a, b) +
  r S1(a, b)``, with ``r`` the rate at which the relevant count grows along the
  ranks: ``(n^+ - 1) / (n - 1)`` in expectation (each rank relevant with
  chance ``n^+ / n``), 1 for the bounds.
  """
  n, p, _, p_before, dh, s1 = _ap_bins(hist, k, dtype, xp, ties)
  nf, pf, pb1 = n.astype(dtype), p.astype(dtype), (p_before + 1).astype(dtype)
  if ties == "expected":
    r = xp.where(n > 1, (pf - 1.0) / xp.maximum(nf - 1.0, 1.0), 0.0)
    terms = pf / xp.maximum(nf, 1.0) * (pb1 * dh + r * s1)
  else:
    terms = pb1 * dh + s1
  total = xp.sum(xp.where(p > 0, terms, 0.0), axis=-1)
  npos = xp.sum(p, axis=-1)
  return xp.where(npos > 0, total / xp.maximum(xp.minimum(npos, k), 1).astype(dtype), xp.nan)


class DCGWeights(NamedTuple):
  """``DCG_T = sum_d weights_d sum_v gains_v n_{d,v}``: ``gains[V]`` (``2^v - 1``), ``weights[..., B]`` (the
  expected discount of an item of bin ``d`` over the tie orders) and ``ideal[...]`` (the ideal DCG)."""
  gains: Array
  weights: Array
  ideal: Array


def _dcg_weights(hist, k, dtype, xp):
  """:class:`DCGWeights` of ``hist``: ``w_d`` is the discount sum of bin ``d``'s ranks, cut at ``k``, over
  ``n_d``."""
  h = hist.astype(xp.int32)
  n = xp.sum(h, axis=-1, dtype=xp.int32)
  per_level = xp.sum(h, axis=-2, dtype=xp.int32)[..., ::-1]  # the ideal ranking: one tie per level, highest first
  sizes = xp.concatenate([n, per_level], axis=-1)
  end = xp.concatenate([_cumsum(n, xp), _cumsum(per_level, xp)], axis=-1)
  # One discount sum per range, cut at k: the ranking's bins, then the ideal ranking's level blocks.
  disc = _special.discount_range(xp.minimum(end - sizes, k), xp.minimum(end, k), dtype, xp)
  bins = n.shape[-1]
  w = xp.where(n > 0, disc[..., :bins] / xp.maximum(n, 1).astype(dtype), 0.0)
  gains = np.exp2(np.arange(hist.shape[-1])).astype(dtype) - 1  # exact up to v = 24 in float32
  return DCGWeights(xp.asarray(gains), w, xp.sum(gains[::-1] * disc[..., bins:], axis=-1))


def _tie_aware_ndcg(hist, k, dtype, xp):
  gains, w, ideal = _dcg_weights(hist, k, dtype, xp)
  dcg = xp.sum(w * xp.sum(hist.astype(dtype) * gains, axis=-1), axis=-1)
  return xp.where(ideal > 0, dcg / xp.where(ideal > 0, ideal, 1.0), xp.nan)


def _precision_at_k(hist, k, dtype, xp):
  n, p, before, _ = _bins(hist, xp)
  inside = (xp.maximum(before, xp.minimum(k, before + n)) - before).astype(dtype)
  expected = xp.sum(xp.where(n > 0, p.astype(dtype) * inside / xp.maximum(n, 1).astype(dtype), 0.0), axis=-1)
  total = xp.minimum(xp.sum(n, axis=-1), k)
  return xp.where(total > 0, expected / xp.maximum(total, 1).astype(dtype), xp.nan)


def _cumulative(hist, xp):
  """Items and relevant items retrieved at every radius ``[..., B]``, and all relevant items ``[...]``."""
  n, p, _, _ = _bins(hist, xp)
  relevant = _cumsum(p, xp)
  return _cumsum(n, xp), relevant, relevant[..., -1]


def _precision_recall(hist, dtype, xp):
  retrieved, relevant, npos = _cumulative(hist, xp)
  precision = xp.where(retrieved > 0, relevant.astype(dtype) / xp.maximum(retrieved, 1).astype(dtype), 0.0)
  recall = xp.where(npos[..., None] > 0, relevant.astype(dtype) / xp.maximum(npos, 1)[..., None].astype(dtype),
                    xp.nan)
  return precision, recall


def _eleven_point_ap(hist, dtype, xp):
  """The mean over recall levels ``0, 0.1, .., 1`` of the best precision at that recall or more (0 if none)."""
  precision, recall = _precision_recall(hist, dtype, xp)
  levels = xp.asarray(np.linspace(0.0, 1.0, 11), dtype)
  reached = recall[..., None, :] >= levels[:, None] - 1e-6  # [..., 11, B]; a float tolerance on the levels
  best = xp.max(xp.where(reached, precision[..., None, :], 0.0), axis=-1)
  return xp.where(xp.isnan(recall[..., -1]), xp.nan, xp.mean(best, axis=-1))


def _at_radius(hist, radius, which, dtype, xp):
  """``which`` (precision / recall / retrieved) of the items with ``d <= radius``."""
  at = min(radius, hist.shape[-2] - 1)
  if which == "retrieved":
    return _cumulative(hist, xp)[0][..., at]
  precision, recall = _precision_recall(hist, dtype, xp)
  return (precision if which == "precision" else recall)[..., at]


#: The relative threshold unrolls up to this many passes of its masked minimum; a loop runs more.
_UNROLL_MAX_K = 16


def _nearest_bins(distances, k, xp):
  """``bool[..., N]``: ``d_i`` at most the ``k``-th smallest distinct value of its row (``k`` passes of a masked
  minimum; ``INT32_MAX`` marks an entry that is never selected)."""
  d = distances.astype(xp.int32)
  t = xp.full(d.shape[:-1] + (1,), -1, xp.int32)

  def step(_, t):
    nxt = xp.min(xp.where(d > t, d, _checks.INT32_MAX), axis=-1, keepdims=True)
    return xp.where(nxt == _checks.INT32_MAX, t, nxt)

  k = min(k, d.shape[-1])  # never more distinct values than entries
  if xp is jnp and k > _UNROLL_MAX_K:
    t = jax.lax.fori_loop(0, k, step, t)
  else:
    for _ in range(k):
      t = step(None, t)
  return d <= t


def _vote_winners(votes, xp):
  top = xp.max(votes, axis=-1, keepdims=True)
  return (votes == top) & (top > 0)


def _knn_votes(class_hist, reach, relative, xp):
  """The kNN prediction: the votes of the ``reach`` nearest non-empty bins (``relative``), else of the bins
  ``d <= reach``."""
  h = class_hist.astype(xp.int32)
  n = xp.sum(h, axis=-1)
  bins = xp.arange(n.shape[-1])
  selected = _nearest_bins(xp.where(n > 0, bins, _checks.INT32_MAX), reach, xp) if relative else bins <= reach
  winners = _vote_winners(xp.sum(xp.where(selected[..., None], h, 0), axis=-2), xp)
  # argmax returns the first winner: the smallest winning label.
  return xp.where(xp.any(winners, axis=-1), xp.argmax(winners, axis=-1).astype(xp.int32), -1)


# --------------------------------------------------------------------------
# Histogram-level public API.


def tie_aware_ap_from_histogram(hist: Array, *, k: Optional[int] = None, dtype: Any = None) -> Array:
  r"""Tie-aware average precision (He et al. 2018, eq. 3), optionally at cutoff ``k``.

  Ties: the mean of AP (AP@k) over all orders of tied items.

  For the tie at distance ``d`` (ranks ``N_{d-1}+1 .. N_d``, ``n_d`` items of
  which ``n_d^+`` relevant), with ``r_d = (n_d^+ - 1) / (n_d - 1)``:

  .. math:: \mathrm{AP}_T = \frac{1}{Z} \sum_d \frac{n_d^+}{n_d}
     \sum_{t=N_{d-1}+1}^{\min(N_d, k)} \frac{N^+_{d-1} + 1 + (t - N_{d-1} - 1) r_d}{t},
     \quad Z = \min(N^+, k)

  Args:
    hist: ``int[..., num_bits + 1, V]`` counts; levels ``v >= 1`` are relevant.
    k: rank cutoff (``None``: the whole ranking, ``Z = N^+``).
    dtype: result float dtype (``None``: float64 in x64 mode, else float32).

  Returns:
    ``float[...]`` values in ``[0, 1]``; NaN where no item is relevant.

  >>> import numpy as np
  >>> h = np.array([[[0, 1], [1, 1], [0, 0]]])  # d=0: one relevant; d=1: one of each
  >>> tie_aware_ap_from_histogram(h).tolist()   # (1 + (2/2 + 2/3) / 2) / 2
  [0.91667]
  """
  return _inputs.evaluate(_average_precision, hist, k=k, dtype=dtype, ties="expected")


def optimistic_ap_from_histogram(hist: Array, *, dtype: Any = None) -> Array:
  r"""AP when every tie lists its relevant items first (the upper bound of AP over tie orders).

  Ties: relevant items first in each tie.

  .. math:: \mathrm{AP}_{opt} = \frac{1}{N^+} \sum_d \sum_{j=1}^{n_d^+}
     \frac{N^+_{d-1} + j}{N_{d-1} + j}

  Args:
    hist: ``int[..., num_bits + 1, V]`` counts; levels ``v >= 1`` are relevant.
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``float[...]``; NaN where no item is relevant.

  >>> import numpy as np
  >>> optimistic_ap_from_histogram(np.array([[0, 1], [1, 1], [0, 0]])).tolist()
  1.0
  """
  return _inputs.evaluate(_average_precision, hist, k=None, dtype=dtype, ties="relevant_first")


def pessimistic_ap_from_histogram(hist: Array, *, dtype: Any = None) -> Array:
  r"""AP when every tie lists its relevant items last (the lower bound of AP over tie orders).

  Ties: relevant items last in each tie.

  .. math:: \mathrm{AP}_{pes} = \frac{1}{N^+} \sum_d \sum_{j=1}^{n_d^+}
     \frac{N^+_{d-1} + j}{N_d - n_d^+ + j}

  Args:
    hist: ``int[..., num_bits + 1, V]`` counts; levels ``v >= 1`` are relevant.
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``float[...]``; NaN where no item is relevant.

  >>> import numpy as np
  >>> pessimistic_ap_from_histogram(np.array([[0, 1], [1, 1], [0, 0]])).tolist()  # (1 + 2/3) / 2
  0.83333
  """
  return _inputs.evaluate(_average_precision, hist, k=None, dtype=dtype, ties="relevant_last")


def tie_aware_ndcg_from_histogram(hist: Array, *, k: Optional[int] = None, dtype: Any = None) -> Array:
  r"""Tie-aware NDCG (He et al. 2018, eq. 4), optionally at cutoff ``k``.

  Ties: the mean of NDCG (NDCG@k) over all orders of tied items: each tie
  spreads its mean gain over its ranks (clipped at ``k``).

  Gain ``G(v) = 2^v - 1``, discount ``D(t) = 1 / log2(t + 1)``; the
  normaliser is the ideal DCG(@k), which ties do not affect:

  .. math:: \mathrm{NDCG}_T = \frac{1}{\mathrm{IDCG}} \sum_d \sum_v
     \frac{G(v) n_{d,v}}{n_d} \sum_{t=N_{d-1}+1}^{\min(N_d, k)} D(t)

  Args:
    hist: ``int[..., num_bits + 1, V]`` counts per affinity level.
    k: rank cutoff (``None``: the whole ranking).
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``float[...]`` in ``[0, 1]``; NaN where no item has positive gain.

  >>> import numpy as np
  >>> h = np.array([[0, 0, 1], [1, 1, 0]])  # d=0: level 2; d=1: levels 0 and 1
  >>> ideal = 3 + 1 / np.log2(3)
  >>> dcg = 3 + 0.5 * (1 / np.log2(3) + 1 / np.log2(4))
  >>> bool(np.isclose(tie_aware_ndcg_from_histogram(h), dcg / ideal))
  True
  """
  return _inputs.evaluate(_tie_aware_ndcg, hist, k=k, dtype=dtype)


def tie_aware_precision_at_k_from_histogram(hist: Array, *, k: int, dtype: Any = None) -> Array:
  r"""Tie-aware precision at ``k``: expected relevant items in the top ``k`` over all tie orders.

  Ties: a tie straddling rank ``k`` contributes its expected relevant count.

  .. math:: P_T@k = \frac{1}{\min(k, N)} \sum_d n_d^+
     \frac{\min(\max(k, N_{d-1}), N_d) - N_{d-1}}{n_d}

  Args:
    hist: ``int[..., num_bits + 1, V]`` counts; levels ``v >= 1`` are relevant.
    k: the cutoff (int >= 1).
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``float[...]`` in ``[0, 1]``.

  >>> import numpy as np
  >>> tie_aware_precision_at_k_from_histogram(np.array([[0, 1], [1, 1], [0, 0]]), k=2).tolist()
  0.75
  """
  return _inputs.evaluate(_precision_at_k, hist, k=_checks.check_cutoff(k, allow_none=False), dtype=dtype)


def precision_at_radius_from_histogram(hist: Array, *, radius: int, dtype: Any = None) -> Array:
  r"""Precision of the items within Hamming radius ``radius`` (``d <= radius``); 0 if none.

  Ties: none to break (a whole distance bin is in or out).

  .. math:: P(r) = \frac{\sum_{d \le r} n_d^+}{\sum_{d \le r} n_d}

  Args:
    hist: ``int[..., num_bits + 1, V]`` counts; levels ``v >= 1`` are relevant.
    radius: int ``>= 0``; radii beyond ``num_bits`` retrieve everything.
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``float[...]``; 0 for a query that retrieves nothing (count those with
    :func:`retrieved_at_radius_from_histogram`).

  >>> import numpy as np
  >>> precision_at_radius_from_histogram(np.array([[0, 1], [1, 1], [0, 0]]), radius=1).tolist()
  0.66667
  """
  return _inputs.evaluate(_at_radius, hist, radius=radius, which="precision", dtype=dtype)


def recall_at_radius_from_histogram(hist: Array, *, radius: int, dtype: Any = None) -> Array:
  r"""Recall of the items within Hamming radius ``radius`` (``d <= radius``).

  Ties: none to break (a whole distance bin is in or out).

  .. math:: R(r) = \frac{1}{N^+} \sum_{d \le r} n_d^+

  Args:
    hist: ``int[..., num_bits + 1, V]`` counts; levels ``v >= 1`` are relevant.
    radius: int ``>= 0``.
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``float[...]``; NaN where no item is relevant.

  >>> import numpy as np
  >>> recall_at_radius_from_histogram(np.array([[0, 1], [1, 1], [0, 2]]), radius=1).tolist()
  0.5
  """
  return _inputs.evaluate(_at_radius, hist, radius=radius, which="recall", dtype=dtype)


def retrieved_at_radius_from_histogram(hist: Array, *, radius: int) -> Array:
  r"""Number of items within Hamming radius ``radius`` (``d <= radius``).

  Ties: none to break (a whole distance bin is in or out).

  .. math:: |\{i : d_i \le r\}| = \sum_{d \le r} n_d

  Args:
    hist: ``int[..., num_bits + 1, V]`` counts.
    radius: int ``>= 0``.

  Returns:
    ``int32[...]`` counts (0 marks a query whose precision at this radius is set to 0).

  >>> import numpy as np
  >>> retrieved_at_radius_from_histogram(np.array([[0, 0], [1, 1], [0, 2]]), radius=0).tolist()
  0
  """
  return _inputs.evaluate(_at_radius, hist, radius=radius, which="retrieved", dtype=None)


def precision_recall_curve_from_histogram(hist: Array, *, dtype: Any = None) -> tuple[Array, Array]:
  r"""Precision and recall at every Hamming radius ``0 .. num_bits``.

  Ties: none to break (a whole distance bin is in or out).

  .. math:: P(r) = \frac{N^+_r}{N_r}, \quad R(r) = \frac{N^+_r}{N^+}

  Args:
    hist: ``int[..., num_bits + 1, V]`` counts; levels ``v >= 1`` are relevant.
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``(precision, recall)``, each ``float[..., num_bits + 1]``: precision 0
    where nothing is retrieved yet, recall NaN where no item is relevant.

  >>> import numpy as np
  >>> p, r = precision_recall_curve_from_histogram(np.array([[0, 1], [1, 1], [0, 0]]))
  >>> p.tolist(), r.tolist()
  ([1.0, 0.66667, 0.66667], [0.5, 1.0, 1.0])
  """
  return _inputs.evaluate(_precision_recall, hist, dtype=dtype)


def interpolated_ap_from_histogram(hist: Array, *, dtype: Any = None) -> Array:
  r"""Eleven-point interpolated average precision (PASCAL VOC 2007), the AP of Feng et al.'s tables.

  Ties: none broken; each distance bin (tie group) is one point of the precision-recall curve.

  .. math:: \mathrm{AP}_{11} = \frac{1}{11} \sum_{t \in \{0, 0.1, \ldots, 1\}} \max_{d : R(d) \ge t} P(d)

  with ``P(d)``, ``R(d)`` the precision and recall of the items at distance ``<= d`` (0 where no point reaches
  ``t``). Recall levels are compared with a tolerance of ``1e-6``.

  Args:
    hist: ``int[..., num_bits + 1, V]`` counts; levels ``v >= 1`` are relevant.
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``float[...]``; NaN where no item is relevant.

  >>> import numpy as np
  >>> interpolated_ap_from_histogram(np.array([[0, 1], [1, 1], [0, 0]])).tolist()  # 6 levels at 1, 5 at 2/3
  0.84848
  """
  return _inputs.evaluate(_eleven_point_ap, hist, dtype=dtype)


def knn_classify_from_histogram(class_hist: Array, *, k: int, threshold: str = "relative") -> Array:
  r"""Nair et al.'s Hamming kNN classifier: majority vote of every item in the selected bins.

  ``threshold="relative"`` selects the ``k`` nearest non-empty distance bins
  (never empty); ``"absolute"`` selects every bin ``d <= k``.

  Ties: not broken inside bins, all their items vote (Nair et al. Sec.
  3.5.1). The vote rule is :func:`vote_winners`: a tie between classes goes
  to the smallest winning label; with an absolute threshold and no item
  within ``k`` none wins and the prediction is ``-1`` (abstain; an error for
  :func:`error_rate`).

  .. math:: \hat y = \arg\max_c \sum_{d \in \mathrm{sel}(k)} n_{d,c}

  Args:
    class_hist: ``int[..., num_bits + 1, C]``: counts of database items per
      distance and class label.
    k: number of non-empty bins (relative, ``>= 1``) or the radius (absolute, ``>= 0``).
    threshold: ``"relative"`` or ``"absolute"``.

  Returns:
    ``int32[...]`` predicted labels in ``[0, C)``, or ``-1``.

  >>> import numpy as np
  >>> h = np.array([[0, 0], [0, 1], [0, 0], [2, 0]])  # d=1: one of class 1; d=3: two of class 0
  >>> knn_classify_from_histogram(h, k=1).tolist(), knn_classify_from_histogram(h, k=2).tolist()
  (1, 0)
  """
  relative = _checks.check_option("threshold", threshold, ("relative", "absolute")) == "relative"
  k = _checks.check_cutoff(k, allow_none=False, low=1 if relative else 0)
  return _inputs.evaluate(_knn_votes, class_hist, name="class_hist", reach=k, relative=relative)


# --------------------------------------------------------------------------
# Building blocks that other modules share: the relative threshold, the vote rule, AP's and NDCG's bin pieces.


def nearest_bins_mask(distances: Array, *, k: int) -> Array:
  r"""The relative threshold (Nair et al. Sec. 3.5.1): the items in the ``k`` nearest non-empty distance bins.

  .. math:: m_i = [\, |\{ d_j : d_j < d_i \}| < k \,]

  (the number of *distinct* distances below ``d_i`` is under ``k``). Ties are
  never broken: a bin is taken whole. Fewer than ``k`` occupied bins select
  every item. ``k`` passes of a masked minimum, ``O(k N)`` per row. For a
  histogram, pass each bin's index where it holds items and ``2^31 - 1``
  where it is empty: the mask then selects the ``k`` nearest non-empty bins.

  Args:
    distances: ``int[..., N]`` distances ``>= 0``.
    k: number of non-empty bins (``>= 1``).

  Returns:
    ``bool[..., N]``.

  >>> import numpy as np
  >>> nearest_bins_mask(np.array([4, 7, 12, 17, 4, 20]), k=3).tolist()
  [True, True, True, False, True, False]
  """
  _checks.check_hamming_distances(distances)
  return _special.apply_xp(_nearest_bins, distances, k=_checks.check_int("k", k))


def vote_winners(votes: Array) -> Array:
  r"""The kNN vote rule: the classes with the most votes win; none wins when no vote is cast.

  .. math:: W = \{ c : v_c = \max_{c'} v_{c'} > 0 \}

  Ties between classes are kept: every top class wins. :func:`knn_classify`
  predicts the smallest winning label (``-1`` when none wins);
  :func:`hashjax.objectives.majority_from_votes` scores ``1 / |W|`` when the
  query's class wins (``ties="expected"``, uniformly random tie-breaking) or
  ``[W = \{l_q\}]`` (``ties="strict"``).

  Args:
    votes: real ``[..., C]`` votes per class.

  Returns:
    ``bool[..., C]``.

  >>> import numpy as np
  >>> vote_winners(np.array([[2, 2, 1], [0, 0, 0]])).tolist()
  [[True, True, False], [False, False, False]]
  """
  _checks.check_real("votes", votes, shape_doc="[..., C] of votes per class", min_ndim=1)
  return _special.apply_xp(_vote_winners, votes)


def ap_bin_pieces(hist: Array, *, k: Optional[int] = None, dtype: Any = None) -> APBins:
  r"""The per-bin pieces of the tie-aware AP(@k) (He et al. eq. 3) of ``hist``, as :class:`APBins`.

  Ties: the mean over all orders of tied items. With ``n_d``, ``n_d^+`` the
  items and relevant items of bin ``d``, ``N_{d-1}``, ``N^+_{d-1}`` those
  before it, and the harmonic sums over its ranks ``a = N_{d-1} < t <= b =
  \min(N_d, \max(k, N_{d-1}))``:

  .. math:: \mathrm{AP}_T = \frac{1}{\min(N^+, k)} \sum_d \frac{n_d^+}{n_d} \Big( (N^+_{d-1} + 1)
     \sum_t \frac{1}{t} + \frac{n_d^+ - 1}{n_d - 1} \sum_t \frac{t - a - 1}{t} \Big)

  Args:
    hist: ``int[..., B, V]`` counts; levels ``v >= 1`` are relevant.
    k: rank cutoff (``None``: the whole ranking).
    dtype: float dtype of ``dh`` and ``s1`` (``None``: follow x64 mode).

  Returns:
    :class:`APBins` ``(n, p, before, p_before, dh, s1)``, each ``[..., B]``.

  >>> import numpy as np
  >>> pieces = ap_bin_pieces(np.array([[0, 1], [1, 1], [0, 0]]))
  >>> pieces.p.tolist(), pieces.before.tolist(), np.round(pieces.dh, 4).tolist()  # dh: 1/1, 1/2 + 1/3, 0
  ([1, 1, 0], [0, 1, 3], [1.0, 0.8333, 0.0])
  """
  return _inputs.evaluate(_ap_bins, hist, k=k, dtype=dtype)


def dcg_weights(hist: Array, *, k: Optional[int] = None, dtype: Any = None) -> DCGWeights:
  r"""The per-bin weights of the tie-aware DCG(@k) (He et al. eq. 4) and the ideal DCG, as :class:`DCGWeights`.

  Ties: each bin spreads its items' discounts evenly (the mean over its tie
  orders). With ``D(t) = 1 / log2(t + 1)`` and ``G(v) = 2^v - 1``:

  .. math:: w_d = \frac{1}{n_d} \sum_{t=N_{d-1}+1}^{\min(N_d, k)} D(t), \quad
     \mathrm{DCG}_T = \sum_d w_d \sum_v G(v) n_{d,v}

  Args:
    hist: ``int[..., B, V]`` counts per affinity level.
    k: rank cutoff (``None``: the whole ranking).
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    :class:`DCGWeights` ``(gains[V], weights[..., B], ideal[...])``.

  >>> import numpy as np
  >>> out = dcg_weights(np.array([[0, 1], [1, 0]]))  # a relevant item at rank 1, an irrelevant one at rank 2
  >>> out.gains.tolist(), np.round(out.weights, 4).tolist(), float(out.ideal)
  ([0.0, 1.0], [1.0, 0.6309], 1.0)
  """
  return _inputs.evaluate(_dcg_weights, hist, k=k, dtype=dtype)
