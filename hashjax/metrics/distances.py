"""The metrics of :mod:`hashjax.metrics` as functions of distances ``[..., N]``, :func:`ap`, :func:`error_rate`
and :func:`mean_and_count`.

Each tie-aware function checks its inputs once, counts the histogram (or the
tie groups of real-valued distances) and applies the formula of
:mod:`hashjax.metrics.histogram`; :func:`ap` ranks by a stable sort.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks
from hashjax import _special
from hashjax.metrics import _inputs
from hashjax.metrics.histogram import interpolated_ap_from_histogram, knn_classify_from_histogram
from hashjax.metrics.histogram import optimistic_ap_from_histogram
from hashjax.metrics.histogram import pessimistic_ap_from_histogram, precision_at_radius_from_histogram
from hashjax.metrics.histogram import precision_recall_curve_from_histogram, recall_at_radius_from_histogram
from hashjax.metrics.histogram import retrieved_at_radius_from_histogram, tie_aware_ap_from_histogram
from hashjax.metrics.histogram import tie_aware_ndcg_from_histogram, tie_aware_precision_at_k_from_histogram

Array = jax.Array


class MeanCount(NamedTuple):
  """A mean over the defined (non-NaN) values and how many were undefined."""
  mean: Array
  num_undefined: Array



def tie_aware_ap(distances: Array, relevance: Array, *, num_bits: Optional[int] = None, k: Optional[int] = None,
                 where: Optional[Array] = None, dtype: Any = None) -> Array:
  r"""Tie-aware average precision (He et al. 2018, eq. 3), optionally at cutoff ``k``.

  Ties: the mean of AP (AP@k) over all orders of tied items.

  Without ``num_bits``, ``distances`` may be any real values: the bins ``d``
  are then each query's tie groups (equal values) in ascending order, found by
  sorting (:mod:`hashjax._ties`; ``O(N log N)`` per query, traced too).

  The histogram form: :func:`tie_aware_ap_from_histogram`.

  .. math:: \mathrm{AP}_T = \frac{1}{Z} \sum_d \frac{n_d^+}{n_d}
     \sum_{t=N_{d-1}+1}^{\min(N_d, k)} \frac{N^+_{d-1} + 1 + (t - N_{d-1} - 1) r_d}{t},
     \quad Z = \min(N^+, k)

  Args:
    distances: ``[..., N]``, smaller is closer: Hamming distances (int in ``[0, num_bits]``) with
      ``num_bits``; else any int or float values, tied when equal (``+inf`` ranks last,
      ``-inf`` first, equal infinities tie; NaN is refused).
    relevance: ``{0, 1}`` (or bool) ``[..., N]``, same shape as ``distances``.
    num_bits: the code length of Hamming ``distances``; None (default): real-valued ``distances``.
    k: rank cutoff (``None``: the whole ranking, ``Z = N^+``).
    where: optional bool ``[..., N]`` mask; ``False`` items are left out.
    dtype: result float dtype (``None``: float64 in x64 mode, else float32).

  Returns:
    ``float[...]`` values in ``[0, 1]``; NaN where no item is relevant.

  >>> import numpy as np
  >>> d, rel = np.array([[0, 1, 1, 2]]), np.array([[1, 0, 1, 0]])
  >>> tie_aware_ap(d, rel, num_bits=2).tolist()
  [0.91667]
  >>> tie_aware_ap(np.array([[0.1, 0.7, 0.7, 2.5]]), rel).tolist()  # the same tie groups, real-valued
  [0.91667]
  """
  counting = _inputs.counting("relevance", distances, relevance, num_bits=num_bits, where=where, real=True)
  return tie_aware_ap_from_histogram(counting, k=k, dtype=dtype)


def optimistic_ap(distances: Array, relevance: Array, *, num_bits: Optional[int] = None,
                  where: Optional[Array] = None, dtype: Any = None) -> Array:
  r"""AP when every tie lists its relevant items first (the upper bound of AP over tie orders).

  Ties: relevant items first in each tie.

  Without ``num_bits``, ``distances`` may be any real values: the bins ``d``
  are then each query's tie groups (equal values) in ascending order, found by
  sorting (:mod:`hashjax._ties`; ``O(N log N)`` per query, traced too).

  The histogram form: :func:`optimistic_ap_from_histogram`.

  .. math:: \mathrm{AP}_{opt} = \frac{1}{N^+} \sum_d \sum_{j=1}^{n_d^+}
     \frac{N^+_{d-1} + j}{N_{d-1} + j}

  Args:
    distances: ``[..., N]``, smaller is closer: Hamming distances (int in ``[0, num_bits]``) with
      ``num_bits``; else any int or float values, tied when equal (``+inf`` ranks last,
      ``-inf`` first, equal infinities tie; NaN is refused).
    relevance: ``{0, 1}`` (or bool) ``[..., N]``, same shape as ``distances``.
    num_bits: the code length of Hamming ``distances``; None (default): real-valued ``distances``.
    where: optional bool ``[..., N]`` mask; ``False`` items are left out.
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``float[...]``; NaN where no item is relevant.

  >>> import numpy as np
  >>> optimistic_ap(np.array([[0, 1, 1, 2]]), np.array([[1, 0, 1, 0]]), num_bits=2).tolist()
  [1.0]
  >>> optimistic_ap(np.array([[-1.5, 0.2, 0.2, np.inf]]), np.array([[1, 0, 1, 0]])).tolist()
  [1.0]
  """
  counting = _inputs.counting("relevance", distances, relevance, num_bits=num_bits, where=where, real=True)
  return optimistic_ap_from_histogram(counting, dtype=dtype)


def pessimistic_ap(distances: Array, relevance: Array, *, num_bits: Optional[int] = None,
                   where: Optional[Array] = None, dtype: Any = None) -> Array:
  r"""AP when every tie lists its relevant items last (the lower bound of AP over tie orders).

  Ties: relevant items last in each tie.

  Without ``num_bits``, ``distances`` may be any real values: the bins ``d``
  are then each query's tie groups (equal values) in ascending order, found by
  sorting (:mod:`hashjax._ties`; ``O(N log N)`` per query, traced too).

  The histogram form: :func:`pessimistic_ap_from_histogram`.

  .. math:: \mathrm{AP}_{pes} = \frac{1}{N^+} \sum_d \sum_{j=1}^{n_d^+}
     \frac{N^+_{d-1} + j}{N_d - n_d^+ + j}

  Args:
    distances: ``[..., N]``, smaller is closer: Hamming distances (int in ``[0, num_bits]``) with
      ``num_bits``; else any int or float values, tied when equal (``+inf`` ranks last,
      ``-inf`` first, equal infinities tie; NaN is refused).
    relevance: ``{0, 1}`` (or bool) ``[..., N]``, same shape as ``distances``.
    num_bits: the code length of Hamming ``distances``; None (default): real-valued ``distances``.
    where: optional bool ``[..., N]`` mask; ``False`` items are left out.
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``float[...]``; NaN where no item is relevant.

  >>> import numpy as np
  >>> pessimistic_ap(np.array([[0, 1, 1, 2]]), np.array([[1, 0, 1, 0]]), num_bits=2).tolist()
  [0.83333]
  >>> pessimistic_ap(np.array([[-1.5, 0.2, 0.2, np.inf]]), np.array([[1, 0, 1, 0]])).tolist()
  [0.83333]
  """
  counting = _inputs.counting("relevance", distances, relevance, num_bits=num_bits, where=where, real=True)
  return pessimistic_ap_from_histogram(counting, dtype=dtype)


def tie_aware_ndcg(distances: Array, affinity: Array, *, num_bits: Optional[int] = None, k: Optional[int] = None,
                   num_levels: Optional[int] = None, where: Optional[Array] = None, dtype: Any = None) -> Array:
  r"""Tie-aware NDCG (He et al. 2018, eq. 4), optionally at cutoff ``k``.

  Ties: the mean of NDCG (NDCG@k) over all orders of tied items: each tie
  spreads its mean gain over its ranks (clipped at ``k``).

  Without ``num_bits``, ``distances`` may be any real values: the bins ``d``
  are then each query's tie groups (equal values) in ascending order, found by
  sorting (:mod:`hashjax._ties`; ``O(N log N)`` per query, traced too).

  The histogram form: :func:`tie_aware_ndcg_from_histogram`.

  .. math:: \mathrm{NDCG}_T = \frac{1}{\mathrm{IDCG}} \sum_d \sum_v
     \frac{G(v) n_{d,v}}{n_d} \sum_{t=N_{d-1}+1}^{\min(N_d, k)} D(t)

  Args:
    distances: ``[..., N]``, smaller is closer: Hamming distances (int in ``[0, num_bits]``) with
      ``num_bits``; else any int or float values, tied when equal (``+inf`` ranks last,
      ``-inf`` first, equal infinities tie; NaN is refused).
    affinity: ``int[..., N]`` levels ``>= 0`` (0 = irrelevant), same shape as ``distances``.
    num_bits: the code length of Hamming ``distances``; None (default): real-valued ``distances``.
    k: rank cutoff (``None``: the whole ranking).
    num_levels: number of levels ``V`` (inferred from concrete ``affinity``; needed under jit).
    where: optional bool ``[..., N]`` mask; ``False`` items are left out.
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``float[...]`` in ``[0, 1]``; NaN where no item has positive gain.

  >>> import numpy as np
  >>> d, a = np.array([[0, 1, 1]]), np.array([[2, 0, 1]])
  >>> dcg, ideal = 3 + 0.5 * (1 / np.log2(3) + 1 / np.log2(4)), 3 + 1 / np.log2(3)
  >>> bool(np.isclose(tie_aware_ndcg(d, a, num_bits=1)[0], dcg / ideal))
  True
  >>> bool(np.isclose(tie_aware_ndcg(np.array([[0.5, 3.25, 3.25]]), a)[0], dcg / ideal))
  True
  """
  counting = _inputs.counting("affinity", distances, affinity, num_bits=num_bits, where=where, option=num_levels, real=True)
  return tie_aware_ndcg_from_histogram(counting, k=k, dtype=dtype)


def tie_aware_precision_at_k(distances: Array, relevance: Array, *, num_bits: Optional[int] = None, k: int,
                             where: Optional[Array] = None, dtype: Any = None) -> Array:
  r"""Tie-aware precision at ``k``: expected relevant items in the top ``k`` over all tie orders.

  Ties: a tie straddling rank ``k`` contributes its expected relevant count.

  Without ``num_bits``, ``distances`` may be any real values: the bins ``d``
  are then each query's tie groups (equal values) in ascending order, found by
  sorting (:mod:`hashjax._ties`; ``O(N log N)`` per query, traced too).

  The histogram form: :func:`tie_aware_precision_at_k_from_histogram`.

  .. math:: P_T@k = \frac{1}{\min(k, N)} \sum_d n_d^+
     \frac{\min(\max(k, N_{d-1}), N_d) - N_{d-1}}{n_d}

  Args:
    distances: ``[..., N]``, smaller is closer: Hamming distances (int in ``[0, num_bits]``) with
      ``num_bits``; else any int or float values, tied when equal (``+inf`` ranks last,
      ``-inf`` first, equal infinities tie; NaN is refused).
    relevance: ``{0, 1}`` (or bool) ``[..., N]``, same shape as ``distances``.
    num_bits: the code length of Hamming ``distances``; None (default): real-valued ``distances``.
    k: the cutoff (int >= 1).
    where: optional bool ``[..., N]`` mask; ``False`` items are left out.
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``float[...]`` in ``[0, 1]``.

  >>> import numpy as np
  >>> tie_aware_precision_at_k(np.array([[0, 1, 1, 2]]), np.array([[1, 0, 1, 0]]), num_bits=2, k=2).tolist()
  [0.75]
  >>> tie_aware_precision_at_k(np.array([[0.0, 0.5, 0.5, 0.75]]), np.array([[1, 0, 1, 0]]), k=2).tolist()
  [0.75]
  """
  counting = _inputs.counting("relevance", distances, relevance, num_bits=num_bits, where=where, real=True)
  return tie_aware_precision_at_k_from_histogram(counting, k=k, dtype=dtype)


def precision_at_radius(distances: Array, relevance: Array, *, num_bits: int, radius: int,
                        where: Optional[Array] = None, dtype: Any = None) -> Array:
  r"""Precision of the items within Hamming radius ``radius`` (``d <= radius``); 0 if none.

  Ties: none to break (a whole distance bin is in or out).

  The histogram form: :func:`precision_at_radius_from_histogram`.

  .. math:: P(r) = \frac{\sum_{d \le r} n_d^+}{\sum_{d \le r} n_d}

  Args:
    distances: ``int[..., N]`` Hamming distances in ``[0, num_bits]``.
    relevance: ``{0, 1}`` (or bool) ``[..., N]``, same shape as ``distances``.
    num_bits: the code length.
    radius: int ``>= 0``; radii beyond ``num_bits`` retrieve everything.
    where: optional bool ``[..., N]`` mask; ``False`` items are left out.
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``float[...]``; 0 for a query that retrieves nothing (count those with
    :func:`retrieved_at_radius_from_histogram`).

  >>> import numpy as np
  >>> precision_at_radius(np.array([[0, 1, 1, 2], [2, 2, 2, 2]]), np.array([[1, 0, 1, 0], [1, 0, 0, 0]]),
  ...                     num_bits=2, radius=1).tolist()
  [0.66667, 0.0]
  """
  counting = _inputs.counting("relevance", distances, relevance, num_bits=num_bits, where=where)
  return precision_at_radius_from_histogram(counting, radius=radius, dtype=dtype)


def recall_at_radius(distances: Array, relevance: Array, *, num_bits: int, radius: int,
                     where: Optional[Array] = None, dtype: Any = None) -> Array:
  r"""Recall of the items within Hamming radius ``radius`` (``d <= radius``).

  Ties: none to break (a whole distance bin is in or out).

  The histogram form: :func:`recall_at_radius_from_histogram`.

  .. math:: R(r) = \frac{1}{N^+} \sum_{d \le r} n_d^+

  Args:
    distances: ``int[..., N]`` Hamming distances in ``[0, num_bits]``.
    relevance: ``{0, 1}`` (or bool) ``[..., N]``, same shape as ``distances``.
    num_bits: the code length.
    radius: int ``>= 0``.
    where: optional bool ``[..., N]`` mask; ``False`` items are left out.
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``float[...]``; NaN where no item is relevant.

  >>> import numpy as np
  >>> recall_at_radius(np.array([[0, 1, 1, 2]]), np.array([[1, 0, 1, 1]]), num_bits=2, radius=1).tolist()
  [0.66667]
  """
  counting = _inputs.counting("relevance", distances, relevance, num_bits=num_bits, where=where)
  return recall_at_radius_from_histogram(counting, radius=radius, dtype=dtype)


def retrieved_at_radius(distances: Array, *, num_bits: int, radius: int, where: Optional[Array] = None) -> Array:
  r"""Number of items within Hamming radius ``radius`` (``d <= radius``).

  Ties: none to break (a whole distance bin is in or out).

  The histogram form: :func:`retrieved_at_radius_from_histogram`.

  .. math:: |\{i : d_i \le r\}| = \sum_{d \le r} n_d

  Args:
    distances: ``int[..., N]`` Hamming distances in ``[0, num_bits]``.
    num_bits: the code length.
    radius: int ``>= 0``.
    where: optional bool ``[..., N]`` mask; ``False`` items are left out.

  Returns:
    ``int32[...]`` counts (0 marks a query whose precision at this radius is set to 0).

  >>> import numpy as np
  >>> retrieved_at_radius(np.array([[0, 1, 1, 2], [2, 2, 2, 2]]), num_bits=2, radius=1).tolist()
  [3, 0]
  """
  counting = _inputs.counting(None, distances, None, num_bits=num_bits, where=where)
  return retrieved_at_radius_from_histogram(counting, radius=radius)


def precision_recall_curve(distances: Array, relevance: Array, *, num_bits: int, where: Optional[Array] = None,
                           dtype: Any = None) -> tuple[Array, Array]:
  r"""Precision and recall at every Hamming radius ``0 .. num_bits``.

  Ties: none to break (a whole distance bin is in or out).

  The histogram form: :func:`precision_recall_curve_from_histogram`.

  .. math:: P(r) = \frac{N^+_r}{N_r}, \quad R(r) = \frac{N^+_r}{N^+}

  Args:
    distances: ``int[..., N]`` Hamming distances in ``[0, num_bits]``.
    relevance: ``{0, 1}`` (or bool) ``[..., N]``, same shape as ``distances``.
    num_bits: the code length.
    where: optional bool ``[..., N]`` mask; ``False`` items are left out.
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``(precision, recall)``, each ``float[..., num_bits + 1]``: precision 0
    where nothing is retrieved yet, recall NaN where no item is relevant.

  >>> import numpy as np
  >>> p, r = precision_recall_curve(np.array([0, 1, 1, 2]), np.array([1, 0, 1, 0]), num_bits=2)
  >>> p.tolist(), r.tolist()
  ([1.0, 0.66667, 0.5], [0.5, 1.0, 1.0])
  """
  counting = _inputs.counting("relevance", distances, relevance, num_bits=num_bits, where=where)
  return precision_recall_curve_from_histogram(counting, dtype=dtype)


def interpolated_ap(distances: Array, relevance: Array, *, num_bits: Optional[int] = None,
                    where: Optional[Array] = None, dtype: Any = None) -> Array:
  r"""Eleven-point interpolated average precision (PASCAL VOC 2007), the AP of Feng et al.'s tables.

  Ties: none broken; each distance (tie group) is one point of the precision-recall curve.

  Without ``num_bits``, ``distances`` may be any real values (e.g. weighted Hamming distances): each query's groups
  of equal values are its points, in ascending order.

  The histogram form: :func:`interpolated_ap_from_histogram`.

  .. math:: \mathrm{AP}_{11} = \frac{1}{11} \sum_{t \in \{0, 0.1, \ldots, 1\}} \max_{d : R(d) \ge t} P(d)

  Args:
    distances: ``[..., N]``, smaller is closer: Hamming distances with ``num_bits``, else any real values.
    relevance: ``{0, 1}`` (or bool) ``[..., N]``, same shape as ``distances``.
    num_bits: the code length of Hamming ``distances``; None (default): real-valued ``distances``.
    where: optional bool ``[..., N]`` mask; ``False`` items are left out.
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``float[...]``; NaN where no item is relevant.

  >>> import numpy as np
  >>> interpolated_ap(np.array([[0, 1, 1, 2]]), np.array([[1, 0, 1, 0]]), num_bits=2).tolist()
  [0.84848]
  """
  counting = _inputs.counting("relevance", distances, relevance, num_bits=num_bits, where=where, real=True)
  return interpolated_ap_from_histogram(counting, dtype=dtype)


def knn_classify(distances: Array, db_labels: Array, *, num_classes: int, num_bits: int, k: int,
                 threshold: str = "relative", where: Optional[Array] = None) -> Array:
  r"""Nair et al.'s Hamming kNN classifier: majority vote of every item in the selected bins.

  Ties: not broken inside bins, all their items vote (Nair et al. Sec.
  3.5.1). The vote rule is :func:`vote_winners`: a tie between classes goes
  to the smallest winning label; with an absolute threshold and no item
  within ``k`` none wins and the prediction is ``-1`` (abstain; an error for
  :func:`error_rate`).

  The histogram form: :func:`knn_classify_from_histogram`.

  .. math:: \hat y = \arg\max_c \sum_{d \in \mathrm{sel}(k)} n_{d,c}

  Args:
    distances: ``int[..., N]`` Hamming distances in ``[0, num_bits]``.
    db_labels: ``int[N]`` database labels in ``[0, num_classes)``.
    num_classes: number of classes ``C``.
    num_bits: the code length.
    k: number of non-empty bins (relative, ``>= 1``) or the radius (absolute, ``>= 0``).
    threshold: ``"relative"`` or ``"absolute"``.
    where: optional bool ``[..., N]`` mask; ``False`` items are left out.

  Returns:
    ``int32[...]`` predicted labels in ``[0, C)``, or ``-1``.

  >>> import numpy as np
  >>> knn_classify(np.array([[1, 3, 3], [0, 0, 2]]), np.array([1, 0, 0]), num_classes=2, num_bits=3, k=1).tolist()
  [1, 0]
  """
  counting = _inputs.counting("db_labels", distances, db_labels, num_bits=num_bits, where=where, option=num_classes)
  return knn_classify_from_histogram(counting, k=k, threshold=threshold)


def _index_order(distances, values, where, num_bits: int, xp):
  """``values[..., N]`` ranked by a stable sort of the distances (ties: ascending index; masked items last, as 0).

  numpy sorts small unsigned keys stably by a radix sort (``O(N)`` per row;
  codes of 65,535 bits or more sort int32 keys); traced, XLA's stable sort.
  """
  d = distances.astype(xp.int32)
  v = values.astype(xp.int32)
  if where is not None:  # masked items sort last and count as irrelevant
    d = xp.where(where, d, num_bits + 1)
    v = xp.where(where, v, 0)
  if xp is np:
    key = np.uint8 if num_bits < 255 else np.uint16 if num_bits < 65535 else None  # num_bits + 1 fits
    order = np.argsort(d if key is None else d.astype(key), axis=-1, kind="stable")
  else:
    order = jnp.argsort(d, axis=-1, stable=True)
  return xp.take_along_axis(v, order, axis=-1), v


def _index_order_ap(distances, relevance, where, k, num_bits: int, dtype, xp):
  """AP(@k) of ``[..., N]`` rows ranked in index order (:func:`_index_order`); on the host summed in float64
  (the result cast to ``dtype``), traced in ``dtype``."""
  ranked, r = _index_order(distances, relevance, where, num_bits, xp)
  rank = xp.arange(1, ranked.shape[-1] + 1)
  acc = np.float64 if xp is np else dtype
  terms = xp.where((ranked > 0) & (rank <= k), xp.cumsum(ranked, axis=-1).astype(acc) / rank.astype(acc), 0.0)
  npos = xp.sum(r, axis=-1)
  norm = xp.minimum(npos, k).astype(acc)
  return xp.where(npos > 0, xp.sum(terms, axis=-1) / xp.maximum(norm, 1.0), xp.nan).astype(dtype)


def _index_order_ndcg(distances, affinity, where, k, num_bits: int, dtype, xp):
  """NDCG(@k) of ``[..., N]`` rows ranked in index order (:func:`_index_order`): gains ``2^a - 1``, discounts
  ``1 / log2(1 + t)``; on the host in float64 (cast to ``dtype``), traced in ``dtype``."""
  ranked, a = _index_order(distances, affinity, where, num_bits, xp)
  acc = np.float64 if xp is np else dtype
  rank = xp.arange(1, ranked.shape[-1] + 1)
  discount = xp.where(rank <= k, 1.0 / xp.log2(1.0 + rank.astype(acc)), 0.0)
  gain = lambda levels: xp.exp2(levels.astype(acc)) - 1
  dcg = xp.sum(gain(ranked) * discount, axis=-1)
  ideal = xp.sum(gain(-xp.sort(-a, axis=-1)) * discount, axis=-1)
  return xp.where(ideal > 0, dcg / xp.where(ideal > 0, ideal, 1.0), xp.nan).astype(dtype)


#: Elements per block of rows of :func:`ap` and :func:`ndcg` on the host (their temporaries: about 100 MB).
_HOST_BLOCK_ELEMENTS = 1 << 21


def _index_order_rows(formula, distances, values, where, k, num_bits: int, dtype):
  """``formula`` over every row (its options ``k`` and ``dtype`` checked here, once for :func:`ap` and
  :func:`ndcg`): traced, one XLA program; concrete, on the host in blocks of rows."""
  k, dtype = _inputs.check_options(k=k, dtype=dtype).values()
  if not all(_checks.is_concrete(x) for x in (distances, values, where) if x is not None):
    return formula(distances, values, where, k, num_bits, dtype, jnp)
  n = distances.shape[-1]
  flat = lambda x: None if x is None else np.asarray(x).reshape(-1, n)
  d, v, w = flat(distances), flat(values), flat(where)
  step = max(1, _HOST_BLOCK_ELEMENTS // n)
  rows = [formula(d[i:i + step], v[i:i + step], None if w is None else w[i:i + step], k, num_bits, dtype, np)
          for i in range(0, len(d), step)]
  return _checks.as_jax(np.concatenate(rows or [np.zeros(0, dtype)]).reshape(distances.shape[:-1]))


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
  num_bits = _inputs.counting("relevance", distances, relevance, num_bits=num_bits, where=where).num_bits
  return _index_order_rows(_index_order_ap, distances, relevance, where, k, num_bits, dtype)


def ndcg(distances: Array, affinity: Array, *, num_bits: int, k: Optional[int] = None,
         num_levels: Optional[int] = None, where: Optional[Array] = None, dtype: Any = None) -> Array:
  r"""Ordinary NDCG(@k) with ties broken by ascending database index (a stable sort): NDCG as papers that
  ignore ties compute it (e.g. Lin et al.'s eq. 60), in one fixed tie order.

  Ties: ascending database index; prefer :func:`tie_aware_ndcg` (the mean over every tie order). Gains and
  discounts as there. Ranked as :func:`ap` ranks.

  .. math:: \mathrm{NDCG} = \frac{1}{\mathrm{IDCG}} \sum_{t \le k} \frac{2^{a(R_t)} - 1}{\log_2(1 + t)},
     \quad R = \mathrm{argsort_{stable}}(d)

  Args:
    distances: ``int[..., N]`` Hamming distances in ``[0, num_bits]``.
    affinity: ``int[..., N]`` levels ``>= 0`` (0 = irrelevant), same shape.
    num_bits: the code length.
    k: optional rank cutoff.
    num_levels: number of levels ``V`` (inferred from concrete ``affinity``; needed under jit).
    where: optional bool ``[..., N]`` mask of valid items (``False``: left out).
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``float[...]`` in ``[0, 1]``; NaN where no item has positive gain.

  >>> import numpy as np
  >>> d, a = np.array([[0, 1, 1]]), np.array([[2, 0, 1]])  # ranks 1, 2, 3 in index order
  >>> dcg, ideal = 3 + 1 / np.log2(4), 3 + 1 / np.log2(3)
  >>> bool(np.isclose(ndcg(d, a, num_bits=1)[0], dcg / ideal))
  True
  """
  num_bits = _inputs.counting("affinity", distances, affinity, num_bits=num_bits, where=where,
                              option=num_levels).num_bits
  return _index_order_rows(_index_order_ndcg, distances, affinity, where, k, num_bits, dtype)


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
    _checks.check_int_range(name, x, np.iinfo(np.int32).min, _checks.INT32_MAX, what="labels")
  _checks.check_shape("labels", labels, predictions.shape, like="predictions")
  _checks.check_nonempty("predictions", predictions.reshape(-1), what="prediction")
  dtype = jax.dtypes.canonicalize_dtype(np.float64)  # float64 in x64 mode, else float32
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
  _checks.check_mask("where", where, values.shape, like="values")
  return _special.apply_xp(_mean_and_count, values, where)
