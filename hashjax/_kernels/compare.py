r"""Hamming histograms by compare-and-count: the counting of :mod:`hashjax.histograms` on a GPU or TPU.

For a chunk of database items, the distances ``d[Q, S]`` (XOR and popcount) are compared with every distance
value and the matches summed along the items:

.. math:: n_{q,t} = \sum_i [d(q, i) = t], \qquad t = 0 .. b

one ``[Q, S, b + 1]`` comparison that XLA fuses with the popcounts into a single reduction, so neither the
comparisons nor (on a GPU) the distances reach memory. With levels, each level's count is the same sum masked
by the level (labels: the relevant items, the irrelevant ones being the rest). A ``lax.fori_loop`` streams the
database in chunks of ``S`` items (:func:`chunk_items`) and the last ``N mod S`` items are counted once after
it, so nothing is read out of bounds, padded or counted twice.

A scatter-add into ``[Q, b + 1]`` cells serialises the colliding updates of a row on a GPU; the comparisons
are ``b + 1`` times more arithmetic but no memory traffic, which an accelerator has to spare. A CPU has not:
there :mod:`hashjax._kernels.bitsliced` and the scatter-add count (:func:`on_accelerator` chooses). The
counts are the same exact ``int32`` on every backend; distances above ``b`` (non-zero padding bits of traced
codes) and levels outside ``[0, V)`` match no cell and are not counted, as in the scatter-add.
"""

from __future__ import annotations

import functools

import jax
from jax import lax
import jax.numpy as jnp

#: Database items per chunk, at most.
CHUNK_ITEMS = 200_000

#: (query, item) pairs per chunk, at most: a chunk's distances stay within 800 MB should XLA materialise them.
CHUNK_PAIRS = 200_000_000


def on_accelerator(*arrays) -> bool:
  """Whether the arrays are counted on a GPU or TPU: the platform of the first concrete ``jax.Array`` among
  them, else jax's default backend (numpy inputs, traced values)."""
  for x in arrays:
    if isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer):
      return next(iter(x.devices())).platform != "cpu"
  return jax.default_backend() != "cpu"


def chunk_items(num_queries: int, num_items: int) -> int:
  """Items per chunk: at most :data:`CHUNK_ITEMS` and :data:`CHUNK_PAIRS` pairs, in equal chunks.

  >>> chunk_items(1000, 10**6), chunk_items(1000, 300_001), chunk_items(10**6, 10**6)
  (200000, 150001, 200)
  """
  chunk = max(1, min(CHUNK_ITEMS, CHUNK_PAIRS // max(num_queries, 1), num_items))
  return -(-num_items // -(-num_items // chunk))


def _count(query_words, db_words, level_of, *, num_bits: int, num_levels: int, labelled: bool):
  """``int32[Q, num_bits + 1, V]`` counts of ``db_words[S, W]``; ``level_of`` gives the ``[Q, S]`` levels
  (bool with labels) or is None."""
  d = lax.population_count(query_words[:, None, :] ^ db_words[None]).astype(jnp.int32).sum(-1)  # [Q, S]
  hit = d[:, :, None] == jnp.arange(num_bits + 1, dtype=jnp.int32)  # [Q, S, b + 1]
  count = lambda mask: jnp.sum(mask, axis=1, dtype=jnp.int32)
  if level_of is None:
    return count(hit)[..., None]
  level = level_of[:, :, None]
  if labelled:
    total, relevant = count(hit), count(hit & level)
    return jnp.stack([total - relevant, relevant], -1)
  return jnp.stack([count(hit & (level == v)) for v in range(num_levels)], -1)


@functools.partial(jax.jit, static_argnames=("num_bits", "num_levels", "chunk"))
def counts(query_words, db_words, affinity, query_labels, db_labels, *, num_bits: int, num_levels: int,
           chunk: int):
  r"""``int32[Q, num_bits + 1, V]`` Hamming histograms of packed codes by compare-and-count.

  .. math:: n_{q,t,v} = \sum_i [d(q, i) = t]\,[a_{q,i} = v]

  Args:
    query_words: ``uint32[Q, W]`` packed queries.
    db_words: ``uint32[N, W]`` packed database codes.
    affinity: ``int[Q, N]`` levels in ``[0, num_levels)``, or None.
    query_labels, db_labels: ``[Q]`` and ``[N]`` labels (levels ``[q == i]``, ``V = 2``), or None.
    num_bits: the code length ``b``.
    num_levels: ``V``: 1 without levels, 2 with labels.
    chunk: database items per step of the loop (:func:`chunk_items`).

  Returns:
    ``int32[Q, num_bits + 1, V]`` counts.

  >>> import numpy as np
  >>> q = np.array([[0b11]], np.uint32)
  >>> x = np.array([[0b11], [0b10], [0b00]], np.uint32)
  >>> counts(q, x, None, np.array([5]), np.array([5, 5, 7]), num_bits=2, num_levels=2, chunk=2).tolist()
  [[[0, 1], [0, 1], [1, 0]]]
  """
  n = db_words.shape[0]
  labelled = query_labels is not None
  count = functools.partial(_count, num_bits=num_bits, num_levels=num_levels, labelled=labelled)

  def piece(start, size):
    items = lax.dynamic_slice_in_dim(db_words, start, size)
    if labelled:
      level = query_labels[:, None] == lax.dynamic_slice_in_dim(db_labels, start, size)
    elif affinity is not None:
      level = lax.dynamic_slice_in_dim(affinity, start, size, 1)
    else:
      level = None
    return count(query_words, items, level)

  hist = jnp.zeros((query_words.shape[0], num_bits + 1, num_levels), jnp.int32)
  if n >= chunk:
    hist = lax.fori_loop(0, n // chunk, lambda i, h: h + piece(i * chunk, chunk), hist)
  if n % chunk:
    hist += piece(n - n % chunk, n % chunk)
  return hist
