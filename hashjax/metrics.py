r"""Tie-aware ranking metrics of Hamming rankings, each one formula over histograms.

For these metrics a ranking by Hamming distance is fully described by the
per-query histogram ``hist[..., num_bits + 1, V]`` (items of each affinity
level ``v`` at each distance ``d``; He et al. 2018, Sec. 3.2;
:mod:`hashjax.histograms`). Each metric is one formula over it
(``*_from_histogram``, ``O(num_bits * V)`` per query, nothing sorted); the
functions of ``distances[..., N]`` validate, count the histogram and apply it.

* Inputs: ``distances`` int in ``[0, num_bits]``; ``relevance`` in ``{0, 1}``;
  ``affinity`` int ``>= 0`` (0 = irrelevant; levels ``v >= 1`` are relevant for
  AP and precision).
* Real-valued ``distances`` (any int or float, ``num_bits`` left out): tie-aware
  AP, NDCG, precision@k and the AP bounds read each query's tie groups (equal
  values, by sorting) as the bins, by the same formulas (:mod:`hashjax._ties`).
* Ties: each docstring states its policy. Tie-aware = the expectation over all
  orders of tied items (He et al. eqs. 3-4) in closed form; optimistic /
  pessimistic = relevant items first / last; :func:`ap`: ascending index.
* Undefined values are NaN (AP and recall without a relevant item, NDCG without
  positive gain); :func:`mean_and_count` averages the others and counts them.
* Cutoffs: AP@k is normalised by ``min(N+, k)``, precision@k by ``min(k, N)``,
  NDCG@k by the ideal DCG@k. Radius ``r`` retrieves ``d <= r`` (Nair et al.'s
  "distance < 2" is ``radius=1``); retrieving nothing gives precision 0.
* Precision: float64 under ``jax.enable_x64(True)``, else float32, unless
  ``dtype=`` says otherwise; the range sums (:mod:`hashjax._special`) keep
  float32 within a few ulp of exact.
* Two paths, one formula written against an array namespace: numpy on the host
  for concrete histograms (nothing compiled at a new shape), jax.numpy when
  traced in a caller's ``jit``, ``vmap`` or ``grad``. Results are jax arrays.

:func:`hashjax.evaluate.evaluate_codes` (also ``hashjax.metrics.evaluate_codes``)
evaluates packed codes with all of them, :func:`hashjax.evaluate.evaluate_distances` a real ``distances[Q, N]``.
"""

from __future__ import annotations

import inspect
import re
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks
from hashjax import _special
from hashjax import _ties
from hashjax import histograms

Array = jax.Array

__all__ = [
    "MeanCount", "mean_and_count",
    "tie_aware_ap", "optimistic_ap", "pessimistic_ap", "ap", "tie_aware_ndcg",
    "tie_aware_precision_at_k", "precision_at_radius", "recall_at_radius", "retrieved_at_radius",
    "precision_recall_curve", "knn_classify", "error_rate",
    "tie_aware_ap_from_histogram", "optimistic_ap_from_histogram", "pessimistic_ap_from_histogram",
    "tie_aware_ndcg_from_histogram", "tie_aware_precision_at_k_from_histogram",
    "precision_at_radius_from_histogram", "recall_at_radius_from_histogram",
    "retrieved_at_radius_from_histogram", "precision_recall_curve_from_histogram",
    "knn_classify_from_histogram",
]

_INT32_MAX = np.iinfo(np.int32).max


def __getattr__(name: str):
  # hashjax.metrics.evaluate_codes (and evaluate_distances) for outside code; hashjax.evaluate imports this module.
  if name in ("evaluate_codes", "evaluate_distances"):
    from hashjax import evaluate  # pylint: disable=import-outside-toplevel
    return getattr(evaluate, name)
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class MeanCount(NamedTuple):
  """A mean over the defined (non-NaN) values and how many were undefined."""
  mean: Array
  num_undefined: Array


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


def _average_precision(hist, k, dtype, ties, xp):
  """AP(@k) when the ties are ``"expected"`` (eq. 3: the mean over tie orders), ``"relevant_first"``
  or ``"relevant_last"``.

  Every form sums ``(N^+_{d-1} + j) / t`` over the ranks ``t`` of a tie's
  relevant items; over ranks ``a+1 .. b`` that is ``(N^+_{d-1} + 1) dH(a, b) +
  r S1(a, b)``, with ``r`` the rate at which the relevant count grows along the
  ranks: ``(n^+ - 1) / (n - 1)`` in expectation (each rank relevant with
  chance ``n^+ / n``), 1 for the bounds.
  """
  n, p, before, p_before = _bins(hist, xp)
  through = before + n
  if ties == "expected":
    a, b = before, xp.maximum(before, xp.minimum(k, through))
  elif ties == "relevant_first":
    a, b = before, before + p
  else:
    a, b = through - p, through
  dh, s1 = _special.harmonic_range(a, b, dtype, xp)
  nf, pf, pb1 = n.astype(dtype), p.astype(dtype), (p_before + 1).astype(dtype)
  if ties == "expected":
    r = xp.where(n > 1, (pf - 1.0) / xp.maximum(nf - 1.0, 1.0), 0.0)
    terms = pf / xp.maximum(nf, 1.0) * (pb1 * dh + r * s1)
  else:
    terms = pb1 * dh + s1
  total = xp.sum(xp.where(p > 0, terms, 0.0), axis=-1)
  npos = xp.sum(p, axis=-1)
  return xp.where(npos > 0, total / xp.maximum(xp.minimum(npos, k), 1).astype(dtype), xp.nan)


def _dcg_weights(hist, k, dtype, xp):
  """``(gains[V], w[..., B], ideal[...])`` with ``DCG_T = sum_d w_d sum_v gains_v n_{d,v}``: ``w_d`` is the
  expected discount of an item of bin ``d`` over the tie orders (its ranks' discount sum, cut at ``k``, over
  ``n_d``), ``ideal`` the ideal DCG."""
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
  return xp.asarray(gains), w, xp.sum(gains[::-1] * disc[..., bins:], axis=-1)


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


def _at_radius(hist, radius, which, dtype, xp):
  """``which`` (precision / recall / retrieved) of the items with ``d <= radius``."""
  at = min(radius, hist.shape[-2] - 1)
  if which == "retrieved":
    return _cumulative(hist, xp)[0][..., at]
  precision, recall = _precision_recall(hist, dtype, xp)
  return (precision if which == "precision" else recall)[..., at]


def _knn_votes(class_hist, k, relative, xp):
  h = class_hist.astype(xp.int32)
  n = xp.sum(h, axis=-1)
  if relative:
    nonempty = n > 0
    selected = nonempty & (_cumsum(nonempty.astype(xp.int32), xp) <= k)
  else:
    selected = xp.arange(n.shape[-1]) <= k
  votes = xp.sum(xp.where(selected[..., None], h, 0), axis=-2)
  # argmax returns the first maximum: ties in the vote go to the smallest label.
  return xp.where(xp.max(votes, axis=-1) > 0, xp.argmax(votes, axis=-1).astype(xp.int32), -1)


# --------------------------------------------------------------------------
# Histogram-level public API.


class _Counting(NamedTuple):
  """Validated inputs of a distance-level metric, counted into ``hist`` once its options are checked."""
  distances: Any
  levels: Any
  num_bits: Optional[int]
  num_levels: Optional[int]
  where: Any


def _evaluate(formula, hist, name="hist", **options):
  """``formula(hist, **options)`` of a checked histogram (or of the one a :class:`_Counting` counts)."""
  if isinstance(hist, _Counting) and hist.num_bits is None:
    return _ties.apply_to_groups(formula, hist.distances, hist.levels, hist.where, num_levels=hist.num_levels,
                                 **options)
  if isinstance(hist, _Counting):
    hist = histograms.distance_histogram(hist.distances, hist.levels, num_bits=hist.num_bits,
                                         num_levels=hist.num_levels, where=hist.where)
  else:
    if not hasattr(hist, "shape") or hist.ndim < 2 or hist.shape[-2] < 1 or hist.shape[-1] < 1:
      got = f"shape {tuple(hist.shape)}" if hasattr(hist, "shape") else type(hist).__name__
      raise ValueError(f"{name}: expected an int array [..., num_bits + 1, V], got {got}")
    _checks.check_int_range(name, hist, 0, _INT32_MAX, what="counts")
  return _special.apply_xp(formula, hist, **options)


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
  k, dtype = _checks.check_cutoff(k), _checks.check_float_dtype(dtype)
  return _evaluate(_average_precision, hist, k=k, dtype=dtype, ties="expected")


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
  dtype = _checks.check_float_dtype(dtype)
  return _evaluate(_average_precision, hist, k=_checks.NO_CUTOFF, dtype=dtype, ties="relevant_first")


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
  dtype = _checks.check_float_dtype(dtype)
  return _evaluate(_average_precision, hist, k=_checks.NO_CUTOFF, dtype=dtype, ties="relevant_last")


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
  k, dtype = _checks.check_cutoff(k), _checks.check_float_dtype(dtype)
  return _evaluate(_tie_aware_ndcg, hist, k=k, dtype=dtype)


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
  k, dtype = _checks.check_cutoff(k, allow_none=False), _checks.check_float_dtype(dtype)
  return _evaluate(_precision_at_k, hist, k=k, dtype=dtype)


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
  radius, dtype = _checks.check_int("radius", radius, low=0), _checks.check_float_dtype(dtype)
  return _evaluate(_at_radius, hist, radius=radius, which="precision", dtype=dtype)


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
  radius, dtype = _checks.check_int("radius", radius, low=0), _checks.check_float_dtype(dtype)
  return _evaluate(_at_radius, hist, radius=radius, which="recall", dtype=dtype)


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
  radius = _checks.check_int("radius", radius, low=0)
  return _evaluate(_at_radius, hist, radius=radius, which="retrieved", dtype=None)


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
  return _evaluate(_precision_recall, hist, dtype=_checks.check_float_dtype(dtype))


def knn_classify_from_histogram(class_hist: Array, *, k: int, threshold: str = "relative") -> Array:
  r"""Nair et al.'s Hamming kNN classifier: majority vote of every item in the selected bins.

  ``threshold="relative"`` selects the ``k`` nearest non-empty distance bins
  (never empty); ``"absolute"`` selects every bin ``d <= k``.

  Ties: not broken inside bins, all their items vote (Nair et al. Sec.
  3.5.1); a tie in the vote goes to the smallest label; with an absolute
  threshold and no item within ``k`` the prediction is ``-1`` (abstain; an
  error for :func:`error_rate`).

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
  return _evaluate(_knn_votes, class_hist, name="class_hist", k=k, relative=relative)


# --------------------------------------------------------------------------
# Distance-level public API: validate, count the histogram (O(N) per query), apply the formula.


def _check_distances(distances: Any, num_bits: Any) -> int:
  num_bits = _checks.check_num_bits(num_bits)
  _checks.check_int_range("distances", distances, 0, num_bits, what="distances")
  if distances.ndim < 1 or distances.shape[-1] == 0:
    raise ValueError(f"distances: expected shape [..., N] with N >= 1, got {tuple(distances.shape)}")
  return num_bits


def _check_where(where: Any, distances: Any) -> None:
  if where is None:
    return
  if not hasattr(where, "dtype") or np.dtype(where.dtype) != np.bool_:
    raise ValueError(f"where: expected a bool mask of valid items, got {_checks.desc(where)}")
  _checks.check_shape("where", where, distances.shape, like="distances")


def _counting(kind, distances, labels, *, num_bits, where, option=None, real=False) -> _Counting:
  """Validates a distance-level metric's inputs; ``kind`` names what ``labels`` hold (``real``: see below)."""
  if real and num_bits is None:
    _ties.check_distances(distances)
  else:
    num_bits = _check_distances(distances, num_bits)
  num_levels = None
  if kind == "relevance":
    _checks.check_int_range("relevance", labels, 0, 1, what="relevance labels")
    _checks.check_shape("relevance", labels, distances.shape, like="distances")
    num_levels = 2
  elif kind == "affinity":
    _checks.check_int_range("affinity", labels, 0, _INT32_MAX, what="affinity levels")
    _checks.check_shape("affinity", labels, distances.shape, like="distances")
    num_levels = histograms.num_levels_of(labels, option)
    if num_levels > 64:
      raise ValueError(f"affinity: expected at most 64 levels (gain 2^v - 1), got {num_levels}")
  elif kind == "db_labels":
    num_levels = _checks.check_positive_int("num_classes", option)
    _checks.check_int_range("db_labels", labels, 0, num_levels - 1, what="class labels")
    if labels.ndim != 1 or labels.shape[0] != distances.shape[-1]:
      raise ValueError(f"db_labels: expected shape ({distances.shape[-1]},) (the last axis of distances), "
                       f"got {tuple(labels.shape)}")
    xp = np if _checks.is_concrete(labels) and _checks.is_concrete(distances) else jnp
    labels = xp.broadcast_to(xp.asarray(labels, np.int32), distances.shape)  # every query's row
  _check_where(where, distances)
  return _Counting(distances, labels, num_bits, num_levels, where)


#: What the second argument of a distance-level metric holds: its Args entry, and the option
#: (name, default, Args entry) that says how many levels it has.
_KINDS = {
    "relevance": ("``{0, 1}`` (or bool) ``[..., N]``, same shape as ``distances``.", None),
    "affinity": ("``int[..., N]`` levels ``>= 0`` (0 = irrelevant), same shape as ``distances``.",
                 ("num_levels", None, "number of levels ``V`` (inferred from concrete ``affinity``; "
                                      "needed under jit).")),
    "db_labels": ("``int[N]`` database labels in ``[0, num_classes)``.",
                  ("num_classes", inspect.Parameter.empty, "number of classes ``C``.")),
    None: (None, None),
}

_REAL_DOC = """Without ``num_bits``, ``distances`` may be any real values: the bins ``d``
  are then each query's tie groups (equal values) in ascending order, found by
  sorting (:mod:`hashjax._ties`; ``O(N log N)`` per query, traced too)."""
_REAL = {"distances": "``[..., N]``, smaller is closer: Hamming distances (int in ``[0, num_bits]``) with\n"
                      "      ``num_bits``; else any int or float values, tied when equal (``+inf`` ranks last,\n"
                      "      ``-inf`` first, equal infinities tie; NaN is refused).",
         "num_bits": "the code length of Hamming ``distances``; None (default): real-valued ``distances``."}


def _distance_level(from_histogram, kind: Optional[str], *, example: str, real: bool = False):
  """The distance-level form of ``from_histogram``: ``f(distances, <kind>, *, num_bits, ..., where)``.

  It validates its inputs, then ``from_histogram`` checks its options and counts ``hist`` (:class:`_Counting`;
  with ``real``, ``num_bits=None``, the default, counts real-valued distances by tie group). Its docstring is
  ``from_histogram``'s summary, ``Ties:`` paragraph, formula, options and ``Returns``, with ``example``.
  """
  doc = inspect.cleandoc(from_histogram.__doc__)
  find = lambda pattern: re.search(pattern, doc, re.S | re.M).group(1)
  section = lambda pattern: find(pattern).replace("\n", "\n  ")  # indented one level deeper
  entries = {name: text.replace("\n", "\n  ")
             for name, text in re.findall(r"^  (\w+): (.*?)(?=\n  \w+: |\Z)", find(r"^Args:\n(.*?)\n\n"), re.S | re.M)}
  label_doc, level_option = _KINDS[kind]
  entries.update({"distances": "``int[..., N]`` Hamming distances in ``[0, num_bits]``.", kind: label_doc,
                  "num_bits": "the code length.",
                  "where": "optional bool ``[..., N]`` mask; ``False`` items are left out.", **(_REAL if real else {})})
  kw = inspect.Parameter.KEYWORD_ONLY
  options = [p for p in inspect.signature(from_histogram).parameters.values() if p.kind is kw]
  params = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in ("distances", kind) if name]
  num_bits = inspect.Parameter("num_bits", kw, **({"default": None} if real else {}))
  keyword = [num_bits] + [p for p in options if p.name != "dtype"]
  if level_option:  # num_classes leads (knn_classify(..., num_classes, num_bits, ...)), num_levels follows the options
    entries[level_option[0]] = level_option[2]
    option = inspect.Parameter(level_option[0], kw, default=level_option[1])
    keyword = [option] + keyword if level_option[1] is inspect.Parameter.empty else keyword + [option]
  keyword += [inspect.Parameter("where", kw, default=None)] + [p for p in options if p.name == "dtype"]
  signature = inspect.signature(from_histogram).replace(parameters=params + keyword)

  def metric(*args, **kwargs):
    given = signature.bind(*args, **kwargs)
    given.apply_defaults()
    a = dict(given.arguments)
    counting = _counting(kind, a.pop("distances"), a.pop(kind) if kind else None, num_bits=a.pop("num_bits"),
                         where=a.pop("where"), option=a.pop(level_option[0]) if level_option else None, real=real)
    return from_histogram(counting, **a)

  args = "\n".join(f"    {p.name}: {entries[p.name]}" for p in signature.parameters.values())
  ties, math, returns = (section(pattern) for pattern in (r"^(Ties: .*?)\n\n", r"^(\.\. math:: .*?)\n\n",
                                                          r"^Returns:\n(.*?)\n\n"))
  ties += "\n\n  " + _REAL_DOC if real else ""
  metric.__doc__ = (f"{doc.splitlines()[0]}\n\n  {ties}\n\n  The histogram form: :func:`{from_histogram.__name__}`."
                    f"\n\n  {math}\n\n  Args:\n{args}\n\n  Returns:\n  {returns}\n\n{example}\n  ")
  metric.__name__ = metric.__qualname__ = from_histogram.__name__.removesuffix("_from_histogram")
  metric.__signature__ = signature
  return metric


tie_aware_ap = _distance_level(tie_aware_ap_from_histogram, "relevance", real=True, example="""\
  >>> import numpy as np
  >>> d, rel = np.array([[0, 1, 1, 2]]), np.array([[1, 0, 1, 0]])
  >>> tie_aware_ap(d, rel, num_bits=2).tolist()
  [0.91667]
  >>> tie_aware_ap(np.array([[0.1, 0.7, 0.7, 2.5]]), rel).tolist()  # the same tie groups, real-valued
  [0.91667]""")
optimistic_ap = _distance_level(optimistic_ap_from_histogram, "relevance", real=True, example="""\
  >>> import numpy as np
  >>> optimistic_ap(np.array([[0, 1, 1, 2]]), np.array([[1, 0, 1, 0]]), num_bits=2).tolist()
  [1.0]
  >>> optimistic_ap(np.array([[-1.5, 0.2, 0.2, np.inf]]), np.array([[1, 0, 1, 0]])).tolist()
  [1.0]""")
pessimistic_ap = _distance_level(pessimistic_ap_from_histogram, "relevance", real=True, example="""\
  >>> import numpy as np
  >>> pessimistic_ap(np.array([[0, 1, 1, 2]]), np.array([[1, 0, 1, 0]]), num_bits=2).tolist()
  [0.83333]
  >>> pessimistic_ap(np.array([[-1.5, 0.2, 0.2, np.inf]]), np.array([[1, 0, 1, 0]])).tolist()
  [0.83333]""")
tie_aware_ndcg = _distance_level(tie_aware_ndcg_from_histogram, "affinity", real=True, example="""\
  >>> import numpy as np
  >>> d, a = np.array([[0, 1, 1]]), np.array([[2, 0, 1]])
  >>> dcg, ideal = 3 + 0.5 * (1 / np.log2(3) + 1 / np.log2(4)), 3 + 1 / np.log2(3)
  >>> bool(np.isclose(tie_aware_ndcg(d, a, num_bits=1)[0], dcg / ideal))
  True
  >>> bool(np.isclose(tie_aware_ndcg(np.array([[0.5, 3.25, 3.25]]), a)[0], dcg / ideal))
  True""")
tie_aware_precision_at_k = _distance_level(tie_aware_precision_at_k_from_histogram, "relevance", real=True,
                                           example="""\
  >>> import numpy as np
  >>> tie_aware_precision_at_k(np.array([[0, 1, 1, 2]]), np.array([[1, 0, 1, 0]]), num_bits=2, k=2).tolist()
  [0.75]
  >>> tie_aware_precision_at_k(np.array([[0.0, 0.5, 0.5, 0.75]]), np.array([[1, 0, 1, 0]]), k=2).tolist()
  [0.75]""")
precision_at_radius = _distance_level(precision_at_radius_from_histogram, "relevance", example="""\
  >>> import numpy as np
  >>> precision_at_radius(np.array([[0, 1, 1, 2], [2, 2, 2, 2]]), np.array([[1, 0, 1, 0], [1, 0, 0, 0]]),
  ...                     num_bits=2, radius=1).tolist()
  [0.66667, 0.0]""")
recall_at_radius = _distance_level(recall_at_radius_from_histogram, "relevance", example="""\
  >>> import numpy as np
  >>> recall_at_radius(np.array([[0, 1, 1, 2]]), np.array([[1, 0, 1, 1]]), num_bits=2, radius=1).tolist()
  [0.66667]""")
retrieved_at_radius = _distance_level(retrieved_at_radius_from_histogram, None, example="""\
  >>> import numpy as np
  >>> retrieved_at_radius(np.array([[0, 1, 1, 2], [2, 2, 2, 2]]), num_bits=2, radius=1).tolist()
  [3, 0]""")
precision_recall_curve = _distance_level(precision_recall_curve_from_histogram, "relevance", example="""\
  >>> import numpy as np
  >>> p, r = precision_recall_curve(np.array([0, 1, 1, 2]), np.array([1, 0, 1, 0]), num_bits=2)
  >>> p.tolist(), r.tolist()
  ([1.0, 0.66667, 0.5], [0.5, 1.0, 1.0])""")
knn_classify = _distance_level(knn_classify_from_histogram, "db_labels", example="""\
  >>> import numpy as np
  >>> knn_classify(np.array([[1, 3, 3], [0, 0, 2]]), np.array([1, 0, 0]), num_classes=2, num_bits=3, k=1).tolist()
  [1, 0]""")


def _index_order_ap(distances, relevance, where, k, num_bits: int, dtype, xp):
  """AP(@k) of ``[..., N]`` rows ranked by a stable sort of the distances (ties: ascending index).

  numpy sorts small unsigned keys stably by a radix sort (``O(N)`` per row;
  codes of 65,535 bits or more sort int32 keys) and sums in float64 (the
  result is cast to ``dtype``); traced, XLA's stable sort, summing in ``dtype``.
  """
  d = distances.astype(xp.int32)
  r = relevance.astype(xp.int32)
  if where is not None:  # masked items sort last and count as irrelevant
    d = xp.where(where, d, num_bits + 1)
    r = xp.where(where, r, 0)
  if xp is np:
    key = np.uint8 if num_bits < 255 else np.uint16 if num_bits < 65535 else None  # num_bits + 1 fits
    order = np.argsort(d if key is None else d.astype(key), axis=-1, kind="stable")
  else:
    order = jnp.argsort(d, axis=-1, stable=True)
  ranked = xp.take_along_axis(r, order, axis=-1)
  rank = xp.arange(1, d.shape[-1] + 1)
  acc = np.float64 if xp is np else dtype
  terms = xp.where((ranked > 0) & (rank <= k), xp.cumsum(ranked, axis=-1).astype(acc) / rank.astype(acc), 0.0)
  npos = xp.sum(r, axis=-1)
  norm = xp.minimum(npos, k).astype(acc)
  return xp.where(npos > 0, xp.sum(terms, axis=-1) / xp.maximum(norm, 1.0), xp.nan).astype(dtype)


#: Elements per block of rows of :func:`ap` on the host (its temporaries: about 100 MB).
_HOST_BLOCK_ELEMENTS = 1 << 21


def ap(distances: Array, relevance: Array, *, num_bits: int, k: Optional[int] = None,
       where: Optional[Array] = None, dtype: Any = None) -> Array:
  r"""Ordinary AP(@k) with ties broken by ascending database index (a stable sort).

  Ties: ascending database index. For comparison with results that use one
  fixed tie order; prefer :func:`tie_aware_ap`. Concrete inputs are ranked on
  the host by numpy's stable radix sort (``O(N)`` per query, sums in float64;
  device arrays are copied to the host), traced ones by XLA's stable sort
  (``O(N log N)``), which is slower on the CPU by an order of magnitude.

  .. math:: \mathrm{AP} = \frac{1}{\min(N^+, k)} \sum_{t \le k} \mathrm{rel}(R_t)
     \frac{1}{t} \sum_{j \le t} \mathrm{rel}(R_j), \quad R = \mathrm{argsort_{stable}}(d)

  Args:
    distances: ``int[..., N]`` Hamming distances in ``[0, num_bits]``.
    relevance: ``{0, 1}`` ``[..., N]``, same shape.
    num_bits: the code length.
    k: optional rank cutoff.
    where: optional bool ``[..., N]`` mask of valid items.
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``float[...]``; NaN for a query without a relevant item.

  >>> import numpy as np
  >>> ap(np.array([[0, 1, 1, 2]]), np.array([[1, 0, 1, 0]]), num_bits=2).tolist()  # ranks 1, 3
  [0.83333]
  """
  num_bits = _counting("relevance", distances, relevance, num_bits=num_bits, where=where).num_bits
  k, dtype = _checks.check_cutoff(k), _checks.check_float_dtype(dtype)
  if not all(_checks.is_concrete(x) for x in (distances, relevance, where) if x is not None):
    return _index_order_ap(distances, relevance, where, k, num_bits, dtype, jnp)
  n = distances.shape[-1]
  flat = lambda x: None if x is None else np.asarray(x).reshape(-1, n)
  d, r, w = flat(distances), flat(relevance), flat(where)
  step = max(1, _HOST_BLOCK_ELEMENTS // n)
  rows = [_index_order_ap(d[i:i + step], r[i:i + step], None if w is None else w[i:i + step], k,
                          num_bits, dtype, np) for i in range(0, len(d), step)]
  return _checks.as_jax(np.concatenate(rows or [np.zeros(0, dtype)]).reshape(distances.shape[:-1]))


def error_rate(predictions: Array, labels: Array) -> Array:
  r"""Fraction of wrong predictions (an abstention ``-1`` counts as wrong).

  .. math:: \mathrm{err} = \frac{1}{Q} \sum_q [\hat y_q \ne y_q]

  Args:
    predictions: ``int[...]`` predicted labels (``-1`` = no prediction).
    labels: ``int[...]`` true labels, same shape.

  Returns:
    float scalar in ``[0, 1]`` (float32 unless x64 mode).

  >>> import numpy as np
  >>> error_rate(np.array([1, 0, -1, 2]), np.array([1, 1, 0, 2])).tolist()
  0.5
  """
  for name, x in (("predictions", predictions), ("labels", labels)):
    _checks.check_int_range(name, x, np.iinfo(np.int32).min, _INT32_MAX, what="labels")
  _checks.check_shape("labels", labels, predictions.shape, like="predictions")
  _checks.check_nonempty("predictions", predictions.reshape(-1), what="prediction")
  dtype = _checks.check_float_dtype(None)
  return _special.apply_xp(lambda p, y, xp: xp.mean((p != y).astype(dtype)), predictions, labels)


def _mean_and_count(values, where, xp):
  nan = xp.isnan(values)
  counted = xp.ones_like(nan) if where is None else where
  defined = counted & ~nan
  num = xp.sum(defined)
  total = xp.sum(xp.where(defined, values, 0.0))
  mean = xp.where(num > 0, total / xp.maximum(num, 1).astype(values.dtype), xp.nan)
  return MeanCount(mean, xp.sum(counted & nan).astype(xp.int32))


def mean_and_count(values: Array, *, where: Optional[Array] = None) -> MeanCount:
  r"""Mean of the defined (non-NaN) values, and the number of undefined ones.

  The policy for queries whose metric is undefined (e.g. AP without a
  relevant item): they are left out of the mean and reported as a count.
  Traced ``values`` stay differentiable.

  .. math:: \bar m = \frac{\sum_{q : m_q \ne \mathrm{NaN}} m_q}{|\{q : m_q \ne \mathrm{NaN}\}|}

  Args:
    values: ``float[...]`` per-query values, NaN where undefined.
    where: optional bool mask of the same shape; ``False`` entries are ignored.

  Returns:
    :class:`MeanCount` ``(mean, num_undefined)``; ``mean`` is NaN when no
    value is defined.

  >>> import numpy as np
  >>> m = mean_and_count(np.array([0.5, np.nan, 1.0]))
  >>> float(m.mean), int(m.num_undefined)
  (0.75, 1)
  """
  if not hasattr(values, "dtype") or not np.issubdtype(np.dtype(values.dtype), np.floating):
    raise ValueError(f"values: expected a float array (NaN = undefined), got {_checks.desc(values)}")
  if where is not None:
    if not hasattr(where, "dtype") or np.dtype(where.dtype) != np.bool_:
      raise ValueError(f"where: expected a bool mask, got {_checks.desc(where)}")
    _checks.check_shape("where", where, values.shape, like="values")
  return _special.apply_xp(_mean_and_count, values, where)
