r"""One-call evaluation of packed codes or of a real-valued distance matrix: histograms, then every metric.

:func:`evaluate_codes` counts ``hist[Q, num_bits + 1, V]`` with
:func:`hashjax.histograms.hamming_histogram` (no ``[Q, N]`` distance matrix)
and reads the metrics of :mod:`hashjax.metrics` from it, averaged with
:func:`hashjax.metrics.mean_and_count`. :func:`evaluate_distances` does the
same for any real ``distances[Q, N]`` (weighted Hamming, Euclidean), its bins
the tie groups of each query (:mod:`hashjax._ties`). This module imports
:mod:`hashjax.metrics`, never the reverse.
"""

from __future__ import annotations

import functools
from typing import Any, Optional

import jax
import numpy as np

from hashjax import _checks
from hashjax import _ties
from hashjax import histograms
from hashjax import metrics
from hashjax import sharding

Array = jax.Array

__all__ = ["evaluate_codes", "evaluate_distances"]

#: Cells (query, item, level) per block of queries of :func:`evaluate_distances`: its group histograms and
#: the formulas' temporaries stay ~100 MB.
_BLOCK_CELLS = 1 << 21


def evaluate_codes(query_words: Array, db_words: Array, *, num_bits: int,
                   query_labels: Optional[Array] = None, db_labels: Optional[Array] = None,
                   relevance: Optional[Array] = None, affinity: Optional[Array] = None,
                   radius: int = 2, k: int = 100, ndcg_k: Optional[int] = None, num_db: Optional[int] = None,
                   chunk_size: int = histograms.DEFAULT_CHUNK_SIZE, dtype: Any = None) -> dict:
  r"""Evaluates packed codes in one pass: streamed histograms, then every metric.

  With labels no ``[Q, N]`` matrix exists: relevance is
  ``[query_labels[q] == db_labels[i]]``, counted inside the histogram kernel.
  Ties: AP and NDCG are tie-aware (the mean over tie orders), with the
  optimistic / pessimistic bounds beside them; precision@k counts a tie
  straddling ``k`` by its expectation; the radius metrics retrieve whole bins.

  .. math:: \mathrm{hist}_{q,d,v} \to (\overline{\mathrm{AP}_T}, \overline{\mathrm{NDCG}_T},
     \overline{\mathrm{AP}_{opt}}, \overline{\mathrm{AP}_{pes}}, \overline{P(r)}, \overline{P_T@k})

  Args:
    query_words: ``uint32[Q, W]`` packed query codes.
    db_words: ``uint32[N, W]`` packed database codes; when split by rows over several devices
      (:func:`hashjax.sharding.shard_rows`, :func:`hashjax.sharding.shard_process_rows`), counted shard by
      shard with :func:`hashjax.sharding.hamming_histogram`.
    num_bits: the code length.
    query_labels: ``int[Q]`` class labels (with ``db_labels``; relevance =
      label agreement).
    db_labels: ``int[num_db]`` class labels.
    relevance: alternatively ``{0, 1}[Q, num_db]``.
    affinity: alternatively ``int[Q, num_db]`` levels ``>= 0`` (NDCG uses the
      levels; AP and precision count levels ``>= 1`` as relevant).
    radius: Hamming radius for precision/recall (``d <= radius``).
    k: cutoff of the tie-aware precision@k.
    ndcg_k: cutoff of the tie-aware NDCG (``tie_aware_ndcg`` is then NDCG@ndcg_k); None: the whole ranking.
    num_db: the database's real rows, ``1 <= num_db <= N``: ``db_words[:num_db]``; the rows past it (the
      padding of ``shard_rows(..., pad=True)`` or ``shard_process_rows(..., pad=True)``) are never counted.
      None: every row.
    chunk_size: cap on database items per streamed step.
    dtype: float dtype of the computation (``None``: follow x64 mode).

  Returns:
    dict of Python numbers: ``tie_aware_ap``, ``tie_aware_ndcg``,
    ``optimistic_ap``, ``pessimistic_ap`` (means over queries with a
    relevant item), ``precision_at_radius`` (queries retrieving nothing count
    as 0), ``num_empty_at_radius``, ``recall_at_radius``,
    ``tie_aware_precision_at_k``, ``num_undefined_ap`` (queries without a
    relevant item), ``num_undefined_ndcg``, ``radius``, ``k``,
    ``num_queries``, ``num_db``.

  >>> import numpy as np
  >>> from hashjax.codes import pack_bits
  >>> q = pack_bits(np.array([[0, 0], [1, 1]]))
  >>> x = pack_bits(np.array([[0, 0], [0, 1], [1, 1]]))
  >>> out = evaluate_codes(q, x, num_bits=2, query_labels=np.array([0, 1]), db_labels=np.array([0, 0, 1]),
  ...                      radius=1)
  >>> out["tie_aware_ap"], out["num_undefined_ap"], out["precision_at_radius"]  # radius 1: 2/2 and 1/2
  (1.0, 0, 0.75)
  >>> evaluate_codes(q, x, num_bits=2, query_labels=np.array([0, 1]), db_labels=np.array([0, 0]),
  ...                num_db=2)["num_db"]  # the last row is padding
  2
  """
  num_bits = _checks.check_word_pair(query_words, db_words, num_bits)
  num_q, rows = query_words.shape[0], db_words.shape[0]
  num_db = rows if num_db is None else _checks.check_int_at_most("num_db", num_db, rows, what=f"len(db_words) = {rows}")
  db_like = "[len(db_words)]" if num_db == rows else "[num_db]"
  num_levels = _check_levels(query_labels, db_labels, relevance, affinity, num_q, num_db, db_like=db_like)
  radius = _checks.check_int("radius", radius, low=0)
  k, ndcg_k = _checks.check_cutoff(k, allow_none=False), _checks.check_cutoff(ndcg_k, "ndcg_k")
  dtype = _checks.check_float_dtype(dtype)  # the histograms check chunk_size
  # A database split by rows over several devices is counted shard by shard (the same counts), without its padding
  # rows; one on a single device is cut at num_db.
  if sharding.is_row_sharded(db_words):
    count = functools.partial(sharding.hamming_histogram, num_db=num_db)
  else:
    count = histograms.hamming_histogram
    db_words = db_words if num_db == rows else db_words[:num_db]
  if num_levels is None:
    hist = count(query_words, db_words, num_bits=num_bits, query_labels=query_labels, db_labels=db_labels,
                 chunk_size=chunk_size)
  else:
    hist = count(query_words, db_words, affinity if relevance is None else relevance, num_bits=num_bits,
                 num_levels=num_levels, chunk_size=chunk_size)
  hist = np.asarray(hist)
  values = {**_tie_aware(hist, k=k, ndcg_k=ndcg_k, dtype=dtype), **_at_radius(hist, radius=radius, dtype=dtype)}
  return _summary(values, radius=radius, k=k, dtype=dtype, num_queries=num_q, num_db=num_db)


def evaluate_distances(distances: Array, *, query_labels: Optional[Array] = None, db_labels: Optional[Array] = None,
                       relevance: Optional[Array] = None, affinity: Optional[Array] = None, k: int = 100,
                       ndcg_k: Optional[int] = None, radius: Optional[float] = None, dtype: Any = None) -> dict:
  r"""Evaluates a real-valued distance matrix (smaller is closer) with the metrics of :func:`evaluate_codes`.

  Ties are exactly equal distances: the tie-aware metrics average over every
  order of each query's tie groups (found by sorting, ``O(N log N)`` per
  query), AP's bounds put relevant items first / last in each group,
  precision@k counts a group straddling ``k`` by its expectation; ``radius``
  retrieves ``d <= radius``. ``+inf`` ranks last and ``-inf`` first, equal
  infinities tie; NaN is refused. Concrete inputs only (the results are
  Python numbers); queries are processed in blocks on the host.

  .. math:: \mathrm{hist}_{q,g,v} = |\{i : d_{q,i} = u_{q,g},\ a_{q,i} = v\}| \to
     (\overline{\mathrm{AP}_T}, \overline{\mathrm{NDCG}_T}, \overline{\mathrm{AP}_{opt}},
     \overline{\mathrm{AP}_{pes}}, \overline{P_T@k})

  Args:
    distances: real ``[Q, N]`` (int or float), e.g. weighted Hamming distances.
    query_labels: ``int[Q]`` class labels (with ``db_labels``; relevance = label agreement).
    db_labels: ``int[N]`` class labels.
    relevance: alternatively ``{0, 1}[Q, N]``.
    affinity: alternatively ``int[Q, N]`` levels ``>= 0`` (NDCG uses the levels; AP and precision count
      levels ``>= 1`` as relevant).
    k: cutoff of the tie-aware precision@k.
    ndcg_k: cutoff of the tie-aware NDCG; None: the whole ranking.
    radius: optional finite distance threshold; when given the radius metrics of :func:`evaluate_codes`
      are added.
    dtype: float dtype of the computation (``None``: follow x64 mode).

  Returns:
    dict of Python numbers: ``tie_aware_ap``, ``tie_aware_ndcg``,
    ``optimistic_ap``, ``pessimistic_ap``, ``tie_aware_precision_at_k``,
    ``num_undefined_ap``, ``num_undefined_ndcg``, ``k``, ``num_queries``,
    ``num_db``; with ``radius`` also ``precision_at_radius`` (queries
    retrieving nothing count as 0), ``num_empty_at_radius``,
    ``recall_at_radius`` and ``radius``.

  >>> import numpy as np
  >>> d = np.array([[0.5, 0.5, 2.0], [1.0, 0.25, 0.25]])
  >>> out = evaluate_distances(d, query_labels=np.array([0, 1]), db_labels=np.array([0, 1, 1]), radius=0.5)
  >>> out["tie_aware_ap"], out["optimistic_ap"], out["precision_at_radius"]  # AP: query 0 (1 + 1/2) / 2, query 1 1
  (0.875, 1.0, 0.75)
  """
  _checks.check_real_distances(distances)
  _checks.check_array("distances", distances, ndim=2, shape_doc="[Q, N]", kinds="iuf", what="real array")
  num_q, num_db = distances.shape
  num_levels = _check_levels(query_labels, db_labels, relevance, affinity, num_q, num_db, levels_like="distances",
                             query_like="[len(distances)]", db_like="[distances.shape[1]]")
  _checks.check_concrete("distances", distances, query_labels, db_labels, relevance, affinity,
                         why="evaluate_distances returns Python numbers; under jit use hashjax.metrics.tie_aware_ap")
  k, ndcg_k = _checks.check_cutoff(k, allow_none=False), _checks.check_cutoff(ndcg_k, "ndcg_k")
  radius = None if radius is None else _checks.check_number("radius", radius)
  dtype = _checks.check_float_dtype(dtype)
  if num_levels is None:
    ql, xl, num_levels = np.asarray(query_labels), np.asarray(db_labels), 2
    levels = lambda rows: (ql[rows, None] == xl[None, :]).astype(np.int8)
  else:
    given = np.asarray(affinity if relevance is None else relevance)
    levels = lambda rows: given[rows]
  d = np.asarray(distances)
  step = max(1, _BLOCK_CELLS // (num_db * num_levels))
  blocks = []
  for start in range(0, num_q, step):
    rows = slice(start, start + step)
    lev = levels(rows)
    values = _tie_aware(np.asarray(_ties.group_histogram(d[rows], lev, num_levels=num_levels)), k=k, ndcg_k=ndcg_k,
                        dtype=dtype)
    if radius is not None:  # two bins, within and beyond the radius: the radius metrics' formulas at radius 0
      inside = d[rows] <= radius
      counts = [np.sum(lev == v, axis=-1) for v in range(num_levels)]
      within = [np.sum((lev == v) & inside, axis=-1) for v in range(num_levels)]
      two = np.stack([np.stack(within, -1), np.stack(counts, -1) - np.stack(within, -1)], axis=-2)
      values.update(_at_radius(two, radius=0, dtype=dtype))
    blocks.append(values)
  values = {name: np.concatenate([b[name] for b in blocks]) for name in blocks[0]}
  return _summary(values, radius=radius, k=k, dtype=dtype, num_queries=num_q, num_db=num_db)


def _check_levels(query_labels, db_labels, relevance, affinity, num_q: int, num_db: int, *,
                  levels_like: str = "[len(query_words), num_db]", **like) -> Optional[int]:
  """Exactly one of labels (both), ``relevance`` (``{0, 1}``) or ``affinity`` (levels ``>= 0``), checked:
  labels as :func:`hashjax._checks.check_label_pair` (``like`` naming their shapes), ``relevance`` or
  ``affinity`` of shape ``[num_q, num_db]`` (which ``levels_like`` names). Returns None for labels, else the
  number of levels."""
  given = [name for name, used in (("query_labels/db_labels", query_labels is not None or db_labels is not None),
                                   ("relevance", relevance is not None), ("affinity", affinity is not None)) if used]
  if len(given) != 1:
    raise ValueError("query_labels, db_labels, relevance, affinity: expected exactly one of labels (both), relevance "
                     f"or affinity, got {given or 'none'}")
  if _checks.check_label_pair(query_labels, db_labels, num_q, num_db, **like):
    return None
  name, levels = given[0], relevance if relevance is not None else affinity
  num_levels = histograms.num_levels_of(levels, 2 if relevance is not None else None, name=name)
  _checks.check_shape(name, levels, (num_q, num_db), like=levels_like)
  return num_levels


def _tie_aware(hist: np.ndarray, *, k: int, ndcg_k: int, dtype) -> dict:
  """Per-query tie-aware AP, NDCG@ndcg_k, AP bounds and precision@k (numpy ``[Q]``) of a concrete
  ``hist[Q, B, V]``."""
  return {name: np.asarray(values) for name, values in (
      ("tie_aware_ap", metrics.tie_aware_ap_from_histogram(hist, dtype=dtype)),
      ("tie_aware_ndcg", metrics.tie_aware_ndcg_from_histogram(hist, k=ndcg_k, dtype=dtype)),
      ("optimistic_ap", metrics.optimistic_ap_from_histogram(hist, dtype=dtype)),
      ("pessimistic_ap", metrics.pessimistic_ap_from_histogram(hist, dtype=dtype)),
      ("tie_aware_precision_at_k", metrics.tie_aware_precision_at_k_from_histogram(hist, k=k, dtype=dtype)))}


def _at_radius(hist: np.ndarray, *, radius: int, dtype) -> dict:
  """Per-query precision, recall and retrieved count at bin ``radius`` (numpy ``[Q]``) of ``hist[Q, B, V]``."""
  return {"precision_at_radius": np.asarray(metrics.precision_at_radius_from_histogram(hist, radius=radius,
                                                                                       dtype=dtype)),
          "recall_at_radius": np.asarray(metrics.recall_at_radius_from_histogram(hist, radius=radius, dtype=dtype)),
          "retrieved_at_radius": np.asarray(metrics.retrieved_at_radius_from_histogram(hist, radius=radius))}


def _summary(values: dict, *, radius: Any, k: int, dtype, num_queries: int, num_db: int) -> dict:
  """Every number of :func:`evaluate_codes` from the per-query values of :func:`_tie_aware` and
  :func:`_at_radius` (without the latter, no radius entries)."""
  means = {name: metrics.mean_and_count(v) for name, v in values.items() if name != "retrieved_at_radius"}
  mean = lambda name: float(means[name].mean) if name in means else None
  radial = "precision_at_radius" in values
  out = {
      "tie_aware_ap": mean("tie_aware_ap"),
      "tie_aware_ndcg": mean("tie_aware_ndcg"),
      "optimistic_ap": mean("optimistic_ap"),
      "pessimistic_ap": mean("pessimistic_ap"),
      "precision_at_radius": float(np.mean(values["precision_at_radius"], dtype=dtype)) if radial else None,
      "num_empty_at_radius": int(np.sum(values["retrieved_at_radius"] == 0)) if radial else None,
      "recall_at_radius": mean("recall_at_radius"),
      "tie_aware_precision_at_k": mean("tie_aware_precision_at_k"),
      "num_undefined_ap": int(means["tie_aware_ap"].num_undefined),
      "num_undefined_ndcg": int(means["tie_aware_ndcg"].num_undefined),
      "radius": radius, "k": k, "num_queries": num_queries, "num_db": int(num_db),
  }
  radius_keys = ("precision_at_radius", "num_empty_at_radius", "recall_at_radius", "radius")
  return out if radial else {key: v for key, v in out.items() if key not in radius_keys}
