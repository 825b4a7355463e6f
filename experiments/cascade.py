r"""The two-stage short-code / long-code cascade of Nair et al. (2012, Sec. 6), as a study.

:func:`cascade_knn_classify` shortlists database items with a short code
(within a radius, or the nearest non-empty distance bins) and classifies each
query with :func:`hashjax.metrics.knn_classify` on the long code's distances,
with the items off the shortlist masked out (``where=``). It computes the
distances densely per block of queries: it measures the cascade's accuracy and
shortlist sizes, not its speed (a fast first stage for codes of at most 32
bits is :func:`hashjax.index.lookup`). ``python -m experiments.benchmarks.index``
runs it on MNIST-10k.

Built on hashjax's public API and its shared argument checks (:mod:`hashjax._checks`).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import numpy as np

from hashjax import _checks, codes, metrics

Array = jax.Array


class CascadeResult(NamedTuple):
  """Output of :func:`cascade_knn_classify`.

  Attributes:
    predictions: ``int32[Q]`` predicted labels (``-1`` for an empty shortlist).
    shortlist_sizes: ``int32[Q]`` items kept by the short code per query.
  """
  predictions: Array
  shortlist_sizes: Array


def _codes(name: str, words, bits_name: str, num_bits: int, rows: Optional[int] = None) -> np.ndarray:
  """Concrete packed codes ``uint32[rows, ceil(num_bits / 32)]`` (``rows >= 1``), no bit set past ``num_bits``."""
  _checks.check_words(name, words, min_ndim=2)
  if words.ndim != 2 or not _checks.is_concrete(words) or not words.shape[0] or rows not in (None, words.shape[0]):
    raise ValueError(f"{name}: expected concrete packed codes uint32[{rows or 'n >= 1'}, num_words], got "
                     f"{_checks.desc(words)}")
  _checks.check_num_bits(num_bits, words=words, name=bits_name, words_name=name)
  _checks.check_padding_bits(f"{name} ({bits_name}={num_bits})", words, num_bits)
  return np.asarray(words)


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
  # metrics.knn_classify checks db_labels, num_classes, k and threshold.
  sq = _codes("short_query_words", short_query_words, "short_bits", short_bits)
  sx = _codes("short_db_words", short_db_words, "short_bits", short_bits)
  lq = _codes("long_query_words", long_query_words, "long_bits", long_bits, rows=sq.shape[0])
  lx = _codes("long_db_words", long_db_words, "long_bits", long_bits, rows=sx.shape[0])
  if (shortlist_radius is None) == (shortlist_bins is None):
    raise ValueError("shortlist_radius, shortlist_bins: expected exactly one of them, got "
                     f"{shortlist_radius!r} and {shortlist_bins!r}")
  if shortlist_radius is not None:
    _checks.check_int("shortlist_radius", shortlist_radius, low=0)
  else:
    _checks.check_int("shortlist_bins", shortlist_bins)
  query_block = _checks.check_int("query_block", query_block)
  preds, sizes = [], []
  for s in range(0, sq.shape[0], query_block):
    short_dist = np.asarray(codes.hamming_distance(sq[s:s + query_block], sx))
    mask = (short_dist <= shortlist_radius if shortlist_radius is not None
            else np.asarray(metrics.nearest_bins_mask(short_dist, k=shortlist_bins)))
    long_dist = codes.hamming_distance(lq[s:s + query_block], lx)
    preds.append(np.asarray(metrics.knn_classify(long_dist, db_labels, num_classes=num_classes, num_bits=long_bits,
                                                 k=k, threshold=threshold, where=mask)))
    sizes.append(mask.sum(axis=-1))
  return CascadeResult(jax.device_put(np.concatenate(preds).astype(np.int32)),
                       jax.device_put(np.concatenate(sizes).astype(np.int32)))
