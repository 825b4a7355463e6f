"""Distance histograms ``hist[..., num_bits + 1, V]``: the one input of every ranking metric.

(Interface in place; the kernels move here from :mod:`hashjax.codes`.)
"""

from __future__ import annotations

from typing import Any, Optional

import jax
import numpy as np

from hashjax import _checks
from hashjax import codes

Array = jax.Array

DEFAULT_CHUNK_SIZE = codes.DEFAULT_CHUNK_SIZE


def num_levels_of(affinity: Any, num_levels: Optional[int] = None, *, name: str = "affinity") -> int:
  """``V``: ``num_levels`` checked against ``affinity`` (ints in ``[0, V)``), or ``max + 1`` (at least 2)."""
  return codes._levels(affinity, num_levels, name)


def distance_histogram(distances: Array, affinity: Optional[Array] = None, *, num_bits: int,
                       num_levels: Optional[int] = None, where: Optional[Array] = None) -> Array:
  """``int32[..., num_bits + 1, V]`` counts of ``distances`` per affinity level (``where``: items counted)."""
  if where is None:
    return codes.distance_histogram(distances, affinity, num_bits=num_bits, num_levels=num_levels)
  num_levels = 1 if affinity is None else num_levels_of(affinity, num_levels)
  return codes._bucketed_distance_histogram(distances, affinity, num_bits, num_levels, where)


def hamming_histogram(query_words: Array, db_words: Array, affinity: Optional[Array] = None, *,
                      num_bits: int, num_levels: Optional[int] = None, query_labels: Optional[Array] = None,
                      db_labels: Optional[Array] = None, chunk_size: int = DEFAULT_CHUNK_SIZE) -> Array:
  """``int32[Q, num_bits + 1, V]`` Hamming histograms from packed codes; with ``query_labels`` and
  ``db_labels`` (and no ``affinity``), ``V = 2`` levels ``[query_labels[q] == db_labels[i]]``."""
  if query_labels is not None:
    return codes._label_histogram(query_words, db_words, query_labels, db_labels, num_bits=num_bits,
                                  chunk_size=chunk_size)
  return codes.hamming_histogram(query_words, db_words, affinity, num_bits=num_bits, num_levels=num_levels,
                                 chunk_size=chunk_size)
