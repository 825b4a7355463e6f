r"""The two-stage short-code / long-code cascade of Nair et al. (2012, Sec. 6), as a study.

:func:`cascade_knn_classify` shortlists database items with a short code
(within a radius, or the nearest non-empty distance bins) and classifies each
query with :func:`hashjax.metrics.knn_classify` on the long code's distances,
with the items off the shortlist masked out (``where=``). It computes the
distances densely per block of queries: it measures the cascade's accuracy and
shortlist sizes, not its speed (a fast first stage for codes of at most 32
bits is :func:`hashjax.index.lookup`). ``python -m experiments.benchmarks.index``
runs it on MNIST-10k.

Built on hashjax's public API only.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import numpy as np

from hashjax import codes, histograms, metrics

Array = jax.Array


class CascadeResult(NamedTuple):
  """Output of :func:`cascade_knn_classify`.

  Attributes:
    predictions: ``int32[Q]`` predicted labels (``-1`` for an empty shortlist).
    shortlist_sizes: ``int32[Q]`` items kept by the short code per query.
  """
  predictions: Array
  shortlist_sizes: Array


def _check_int(name: str, value, low: int) -> int:
  if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < low:
    raise ValueError(f"{name}: expected an int >= {low}, got {value!r}")
  return int(value)


def _check_codes(name: str, words, bits_name: str, num_bits: int) -> np.ndarray:
  """Concrete ``uint32[n, ceil(num_bits / 32)]`` codes, ``n >= 1``, with no bit set at or above ``num_bits``."""
  if isinstance(words, jax.core.Tracer):
    raise ValueError(f"{name}: cascade_knn_classify needs concrete arrays, got a tracer")
  if not hasattr(words, "dtype") or words.dtype != np.uint32 or words.ndim != 2 or words.shape[0] == 0:
    got = f"dtype {words.dtype} and shape {tuple(words.shape)}" if hasattr(words, "dtype") else type(words).__name__
    raise ValueError(f"{name}: expected packed codes uint32[n, num_words] with n >= 1, got {got}")
  if words.shape[1] != -(-num_bits // 32):
    raise ValueError(f"{bits_name}: {num_bits} bits pack into {-(-num_bits // 32)} uint32 word(s), but {name} "
                     f"has {words.shape[1]}")
  words = np.asarray(words)
  if num_bits % 32 and (words[:, -1] >> np.uint32(num_bits % 32)).any():
    raise ValueError(f"{name}: expected {num_bits}-bit codes ({bits_name}), but some have bits set at or "
                     f"above bit {num_bits}")
  return words


def _shortlist(short_dist: np.ndarray, *, short_bits: int, radius: Optional[int], bins: Optional[int]):
  """``bool[Q, N]``: within ``radius``, or in the ``bins`` nearest non-empty distance bins."""
  if radius is not None:
    return short_dist <= radius
  hist = np.asarray(histograms.distance_histogram(short_dist, num_bits=short_bits))[..., 0]  # [Q, b + 1]
  rank = np.cumsum(hist > 0, axis=-1)  # non-empty bins up to and including each distance
  return np.take_along_axis(rank, short_dist, axis=-1) <= bins


def cascade_knn_classify(short_query_words: Array, short_db_words: Array, long_query_words: Array,
                         long_db_words: Array, db_labels: Array, *, short_bits: int, long_bits: int,
                         k: int, num_classes: int, shortlist_radius: Optional[int] = None,
                         shortlist_bins: Optional[int] = None, threshold: str = "relative",
                         query_block: int = 256) -> CascadeResult:
  r"""Two-stage kNN classification: a short code shortlists, a long code classifies.

  Stage 1 keeps the items ``S(q)`` within Hamming distance ``shortlist_radius``
  of the query in the short code, or (``shortlist_bins``) the items in the
  ``shortlist_bins`` nearest non-empty short-code distance bins (Nair's
  relative threshold, so a shortlist is never empty). Stage 2 is
  :func:`hashjax.metrics.knn_classify` on the long code's distances with
  ``where`` = the shortlist.

  .. math:: \hat y_q = \arg\max_c |\{ i \in \mathrm{nbr}^{long}_k(q) \cap S(q) : y_i = c \}|

  Args:
    short_query_words: ``uint32[Q, Ws]`` short query codes.
    short_db_words: ``uint32[N, Ws]`` short database codes.
    long_query_words: ``uint32[Q, Wl]`` long query codes.
    long_db_words: ``uint32[N, Wl]`` long database codes.
    db_labels: ``int[N]`` database labels in ``[0, num_classes)``.
    short_bits: short code length.
    long_bits: long code length.
    k: stage-2 bins (relative threshold) or radius (absolute).
    num_classes: number of classes.
    shortlist_radius: stage-1 radius ``>= 0`` (exactly one of this and ``shortlist_bins``).
    shortlist_bins: stage-1 number of nearest non-empty bins ``>= 1``.
    threshold: stage-2 threshold, ``"relative"`` or ``"absolute"`` (see
      :func:`hashjax.metrics.knn_classify`).
    query_block: queries per dense ``[block, N]`` distance block.

  Returns:
    :class:`CascadeResult` ``(predictions int32[Q], shortlist_sizes int32[Q])``.

  >>> import numpy as np
  >>> from hashjax.codes import pack_bits
  >>> sq, sx = pack_bits(np.array([[0, 0]])), pack_bits(np.array([[0, 0], [0, 1], [1, 1]]))
  >>> lq, lx = pack_bits(np.array([[0, 0, 0]])), pack_bits(np.array([[1, 1, 1], [0, 0, 1], [0, 0, 0]]))
  >>> out = cascade_knn_classify(sq, sx, lq, lx, np.array([0, 1, 2]), short_bits=2, long_bits=3,
  ...                            k=1, num_classes=3, shortlist_radius=1)
  >>> out.predictions.tolist(), out.shortlist_sizes.tolist()  # item 2 is nearest but not shortlisted
  ([1], [2])
  """
  short_bits = _check_int("short_bits", short_bits, 1)
  long_bits = _check_int("long_bits", long_bits, 1)
  sq = _check_codes("short_query_words", short_query_words, "short_bits", short_bits)
  sx = _check_codes("short_db_words", short_db_words, "short_bits", short_bits)
  lq = _check_codes("long_query_words", long_query_words, "long_bits", long_bits)
  lx = _check_codes("long_db_words", long_db_words, "long_bits", long_bits)
  num_q, num_db = sq.shape[0], sx.shape[0]
  if lq.shape[0] != num_q:
    raise ValueError(f"long_query_words: expected {num_q} rows like short_query_words, got {lq.shape[0]}")
  if lx.shape[0] != num_db:
    raise ValueError(f"long_db_words: expected {num_db} rows like short_db_words, got {lx.shape[0]}")
  if (shortlist_radius is None) == (shortlist_bins is None):
    raise ValueError("shortlist_radius, shortlist_bins: expected exactly one of them, got "
                     f"{shortlist_radius!r} and {shortlist_bins!r}")
  if shortlist_radius is not None:
    shortlist_radius = _check_int("shortlist_radius", shortlist_radius, 0)
  else:
    shortlist_bins = _check_int("shortlist_bins", shortlist_bins, 1)
  query_block = _check_int("query_block", query_block, 1)
  num_classes = _check_int("num_classes", num_classes, 1)
  if threshold not in ("relative", "absolute"):
    raise ValueError(f"threshold: expected 'relative' or 'absolute', got {threshold!r}")
  k = _check_int("k", k, 1 if threshold == "relative" else 0)
  if not hasattr(db_labels, "dtype") or not np.issubdtype(np.dtype(db_labels.dtype), np.integer) \
      or tuple(db_labels.shape) != (num_db,):
    raise ValueError(f"db_labels: expected int[{num_db}] (one label per database item), got "
                     + (f"dtype {db_labels.dtype} and shape {tuple(db_labels.shape)}"
                        if hasattr(db_labels, "dtype") else type(db_labels).__name__))
  labels = np.asarray(db_labels)
  if labels.min() < 0 or labels.max() >= num_classes:
    raise ValueError(f"db_labels: expected class labels in [0, {num_classes - 1}], got values in "
                     f"[{labels.min()}, {labels.max()}]")
  preds, sizes = [], []
  for s in range(0, num_q, query_block):
    short_dist = np.asarray(codes.hamming_distance(sq[s:s + query_block], sx))
    mask = _shortlist(short_dist, short_bits=short_bits, radius=shortlist_radius, bins=shortlist_bins)
    long_dist = codes.hamming_distance(lq[s:s + query_block], lx)
    preds.append(np.asarray(metrics.knn_classify(long_dist, labels, num_classes=num_classes, num_bits=long_bits,
                                                 k=k, threshold=threshold, where=mask)))
    sizes.append(mask.sum(axis=-1))
  return CascadeResult(jax.device_put(np.concatenate(preds).astype(np.int32)),
                       jax.device_put(np.concatenate(sizes).astype(np.int32)))
