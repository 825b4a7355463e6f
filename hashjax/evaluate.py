r"""One-call evaluation of packed codes: streamed Hamming histograms, then every metric.

:func:`evaluate_codes` counts ``hist[Q, num_bits + 1, V]`` with
:func:`hashjax.histograms.hamming_histogram` (no ``[Q, N]`` distance matrix)
and reads the metrics of :mod:`hashjax.metrics` from it, averaged with
:func:`hashjax.metrics.mean_and_count`. This module imports
:mod:`hashjax.metrics`, never the reverse (``hashjax.metrics.evaluate_codes``
reaches this function lazily).
"""

from __future__ import annotations

from typing import Any, Optional

import jax
import numpy as np

from hashjax import _checks
from hashjax import histograms
from hashjax import metrics

Array = jax.Array

__all__ = ["evaluate_codes"]


def evaluate_codes(query_words: Array, db_words: Array, *, num_bits: int,
                   query_labels: Optional[Array] = None, db_labels: Optional[Array] = None,
                   relevance: Optional[Array] = None, affinity: Optional[Array] = None,
                   radius: int = 2, k: int = 100, chunk_size: int = histograms.DEFAULT_CHUNK_SIZE,
                   dtype: Any = None) -> dict:
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
    db_words: ``uint32[N, W]`` packed database codes.
    num_bits: the code length.
    query_labels: ``int[Q]`` class labels (with ``db_labels``; relevance =
      label agreement).
    db_labels: ``int[N]`` class labels.
    relevance: alternatively ``{0, 1}[Q, N]``.
    affinity: alternatively ``int[Q, N]`` levels ``>= 0`` (NDCG uses the
      levels; AP and precision count levels ``>= 1`` as relevant).
    radius: Hamming radius for precision/recall (``d <= radius``).
    k: cutoff of the tie-aware precision@k.
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
  """
  num_bits = _checks.check_word_pair(query_words, db_words, num_bits)
  num_q, num_db = query_words.shape[0], db_words.shape[0]
  labels_given = query_labels is not None or db_labels is not None
  given = [name for name, used in (("query_labels/db_labels", labels_given), ("relevance", relevance is not None),
                                   ("affinity", affinity is not None)) if used]
  if len(given) != 1:
    raise ValueError("query_labels, db_labels, relevance, affinity: expected exactly one of labels "
                     f"(both query_labels and db_labels), relevance or affinity, got {given or 'none'}")
  radius = _checks.check_int("radius", radius, low=0)
  k = _checks.check_cutoff(k, allow_none=False)
  dtype = _checks.check_float_dtype(dtype)
  chunk_size = _checks.check_positive_int("chunk_size", chunk_size)
  int32 = np.iinfo(np.int32)
  if labels_given:
    for name, lab, n in (("query_labels", query_labels, num_q), ("db_labels", db_labels, num_db)):
      if lab is None:
        raise ValueError(f"{name}: expected int labels of shape ({n},) together with the other labels, got None")
      _checks.check_int_range(name, lab, int32.min, int32.max, what="class labels")
      if lab.ndim != 1 or lab.shape[0] != n:
        raise ValueError(f"{name}: expected shape ({n},), got {tuple(lab.shape)}")
    hist = histograms.hamming_histogram(query_words, db_words, num_bits=num_bits, query_labels=query_labels,
                                        db_labels=db_labels, chunk_size=chunk_size)
  elif relevance is not None:
    _checks.check_int_range("relevance", relevance, 0, 1, what="relevance labels")
    hist = histograms.hamming_histogram(query_words, db_words, relevance, num_bits=num_bits, num_levels=2,
                                        chunk_size=chunk_size)
  else:
    _checks.check_int_range("affinity", affinity, 0, int32.max, what="affinity levels")
    hist = histograms.hamming_histogram(query_words, db_words, affinity, num_bits=num_bits, chunk_size=chunk_size)
  return _summary(np.asarray(hist), radius=radius, k=k, dtype=dtype, num_db=num_db)


def _summary(hist: np.ndarray, *, radius: int, k: int, dtype, num_db: int) -> dict:
  """Every number of :func:`evaluate_codes` from a concrete ``hist[Q, B, V]`` (the formulas run on the host)."""
  means = {name: metrics.mean_and_count(values) for name, values in (
      ("tie_aware_ap", metrics.tie_aware_ap_from_histogram(hist, dtype=dtype)),
      ("tie_aware_ndcg", metrics.tie_aware_ndcg_from_histogram(hist, dtype=dtype)),
      ("optimistic_ap", metrics.optimistic_ap_from_histogram(hist, dtype=dtype)),
      ("pessimistic_ap", metrics.pessimistic_ap_from_histogram(hist, dtype=dtype)),
      ("recall_at_radius", metrics.recall_at_radius_from_histogram(hist, radius=radius, dtype=dtype)),
      ("tie_aware_precision_at_k", metrics.tie_aware_precision_at_k_from_histogram(hist, k=k, dtype=dtype)))}
  precision = np.asarray(metrics.precision_at_radius_from_histogram(hist, radius=radius, dtype=dtype))
  retrieved = np.asarray(metrics.retrieved_at_radius_from_histogram(hist, radius=radius))
  mean = lambda name: float(means[name].mean)
  return {
      "tie_aware_ap": mean("tie_aware_ap"),
      "tie_aware_ndcg": mean("tie_aware_ndcg"),
      "optimistic_ap": mean("optimistic_ap"),
      "pessimistic_ap": mean("pessimistic_ap"),
      "precision_at_radius": float(np.mean(precision, dtype=dtype)),
      "num_empty_at_radius": int(np.sum(retrieved == 0)),
      "recall_at_radius": mean("recall_at_radius"),
      "tie_aware_precision_at_k": mean("tie_aware_precision_at_k"),
      "num_undefined_ap": int(means["tie_aware_ap"].num_undefined),
      "num_undefined_ndcg": int(means["tie_aware_ndcg"].num_undefined),
      "radius": radius, "k": k, "num_queries": hist.shape[0], "num_db": int(num_db),
  }
