r"""Kernels of weighted Hamming search (:mod:`hashjax.search` with ``weights=``) and of
:func:`hashjax.codes.weighted_hamming_distance`.

**The distance.** ``d_w(q, x) = sum_j w_j [q_j != x_j]`` over packed codes, with no bit unpacking: each code
byte ``p`` (byte ``p % 4`` of word ``p // 4``, little-endian, so bits ``8 p .. 8 p + 7``) has a 256-entry
``float32`` table ``T_p[v]``, the sum of the weights of the bits set in ``v``, and ``d_w = sum_p T_p[byte_p(q
XOR x)]``. The summation order is fixed, so that every backend gives the same bits (no matmul, no reduction
whose order a compiler picks):

* ``T_p[v]`` is the pairwise sum of the byte's eight terms ``t_b = (w_{8p+b} if bit b of v else 0)``:
  ``((t_0 + t_1) + (t_2 + t_3)) + ((t_4 + t_5) + (t_6 + t_7))``;
* the distance is the pairwise sum of the ``P = 4 W`` looked-up entries ``e_0 .. e_{P-1}``: adjacent pairs
  ``(e_0 + e_1), (e_2 + e_3), ...`` (an odd last entry carried as it is), repeated until one value is left.

Weights below ``2^-126`` in magnitude (subnormal) count as 0, so no backend's flush-to-zero mode can change a
sum of non-negative weights. :func:`table_distances` is the one implementation of this order; every search
path and :func:`hashjax.codes.weighted_hamming_distance` call it. On a GPU or TPU it computes each entry
from the byte's bits instead of looking it up (:func:`bit_distances`: the same additions in the same order,
so the same bits), since a gather per byte and pair is what an accelerator does worst.

**Exact search, fixed shapes** (:func:`knn_exact`, any input, also under ``jit``). The scan computes the exact
distances chunk by chunk and keeps their minima over blocks of 32 and superblocks of 256 items; the three
selections of :mod:`hashjax._kernels.scan` follow (the same lemma), with the ``float32`` distances themselves
as keys: ``lax.top_k`` keeps the lower position first among equal values, and every selection runs over
candidates laid out in ascending index order, so ties break by index. About 4 ns per (query, item) on a CPU
core (the table lookups are gathers, 10 times the cost of the popcount scan); on a GPU with table lookups,
55,000 queries/s over 10^6 codes of 64 bits (H100).

**Pruned search** (:func:`knn_pruned` and :func:`radius_pruned`, concrete inputs). A lower bound first, from
the popcount scan of :mod:`hashjax._kernels.scan` with one multiplier per half-byte:

* the bits are reordered by ascending weight (once per call, :func:`permute_words`), so each nibble (4 bits)
  of the reordered code holds bits of similar weight, ``wmin_g`` the least;
* with one scale ``s`` and ``c_g = floor(s wmin_g)`` (``4 sum_g c_g <= 65535``), the bound ``L(x) = sum_g c_g
  popcount(nibble_g)`` is a ``uint16`` with ``L(x) <= s d_w(q, x)`` (as real numbers); the scan keeps its minima
  over blocks of 32 and superblocks of 256 items (:func:`bound_minima`);
* the k-th exact distance among the items of ``k`` blocks of small minima bounds the k-th distance from above
  (:func:`top_blocks`, :func:`smallest_distances`); a block whose minimum exceeds ``s`` times that bound cannot
  hold a neighbour, and the exact top ``k`` over the other blocks (:func:`select_blocks`, found on the host) is
  the result.

The margin ``(1 + 2 n 2^-24)`` on ``s d`` covers the rounding of the float32 sum of ``n = 32 W`` terms. On one
CPU core, at 64 bits, the bound scan costs about 3.5 times the popcount scan, and its candidates about as much
again (nibbles, not bytes: twice the multiplies, half the candidates; as fast with evenly spread weights, up
to twice as fast with skewed ones).
"""

from __future__ import annotations

import functools
from typing import Tuple

import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from hashjax._kernels import scan

SUPERBLOCK = scan.SUPERBLOCK
BLOCK = scan.BLOCK

#: Smallest normal float32; weights below it count as 0.
F32_TINY = float(np.finfo(np.float32).tiny)


# ----------------------------------------------------------------------------
# The distance: byte tables summed in a fixed order.


def _pairwise(terms):
  """Pairwise sum of a list of arrays: adjacent pairs, an odd last one carried, until one is left."""
  terms = list(terms)
  while len(terms) > 1:
    terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
  return terms[0]


def flush_weights(weights: np.ndarray, num_words: int) -> np.ndarray:
  """``float32[..., num_bits]`` weights as ``float32[..., 32 W]``: subnormals as 0, padding bits 0."""
  w = np.asarray(weights, np.float32)
  w = np.where(np.abs(w) < F32_TINY, np.float32(0), w)
  pad = 32 * num_words - w.shape[-1]
  return np.pad(w, [(0, 0)] * (w.ndim - 1) + [(0, pad)]) if pad else w


def flush_weights_traced(weights, num_words: int):
  """:func:`flush_weights` for traced weights (jax.numpy)."""
  w = jnp.asarray(weights).astype(jnp.float32)
  w = jnp.where(jnp.abs(w) < F32_TINY, jnp.float32(0), w)
  pad = 32 * num_words - w.shape[-1]
  return jnp.pad(w, [(0, 0)] * (w.ndim - 1) + [(0, pad)]) if pad else w


@jax.jit
def byte_tables(weights):
  """``float32[..., 4 W, 256]`` tables ``T_p[v]`` of ``float32[..., 32 W]`` weights (flushed, padded)."""
  w = weights.reshape(weights.shape[:-1] + (weights.shape[-1] // 8, 1, 8))
  v = jnp.arange(256, dtype=jnp.uint32)[:, None] >> jnp.arange(8, dtype=jnp.uint32)
  terms = jnp.where((v & 1) == 1, w, jnp.float32(0))  # [..., P, 256, 8]
  return _pairwise([terms[..., b] for b in range(8)])


def as_bytes(words):
  """``uint32[..., W]`` as ``uint8[..., 4 W]``, little-endian: byte ``p`` holds bits ``8 p .. 8 p + 7``."""
  return lax.bitcast_convert_type(words, jnp.uint8).reshape(words.shape[:-1] + (4 * words.shape[-1],))


def table_distances(xor_words, tables):
  """``float32[...]`` weighted distances from ``uint32[..., W]`` XORed codes, by the fixed order above.

  ``tables`` is ``float32[4 W, 256]``, or ``float32[Q, 4 W, 256]`` per query with ``xor_words[Q, ..., W]``.
  On a GPU or TPU (jax's default backend when traced), :func:`bit_distances` of the tables' weights: the same
  bits without a gather per byte.
  """
  if jax.default_backend() != "cpu":
    return bit_distances(xor_words, table_weights(tables))
  xb = as_bytes(xor_words)
  num_bytes = xb.shape[-1]
  if tables.ndim == 2:
    entries = [jnp.take(tables[p], xb[..., p].astype(jnp.int32), mode="clip") for p in range(num_bytes)]
  else:
    flat = tables.reshape(-1)
    row = (jnp.arange(tables.shape[0], dtype=jnp.int32) * (num_bytes * 256)).reshape(
        (-1,) + (1,) * (xb.ndim - 2))
    entries = [jnp.take(flat, row + 256 * p + xb[..., p].astype(jnp.int32), mode="clip") for p in range(num_bytes)]
  return _pairwise(entries)


def table_weights(tables):
  """``float32[..., 32 W]``: the weights of :func:`byte_tables` ``float32[..., 4 W, 256]``, read back exactly.

  Entry ``T_p[2^b]`` sums ``w_{8p+b}`` and seven zeros, which is ``w_{8p+b}`` itself: the weights are
  flushed, so none is ``-0``.
  """
  single = tables[..., 1 << np.arange(8)]  # [..., 4 W, 8]
  return single.reshape(tables.shape[:-2] + (8 * tables.shape[-2],))


def bit_distances(xor_words, weights):
  """:func:`table_distances` without tables: each byte's entry summed from its bit terms, per pair.

  Every term is the ``where`` of :func:`byte_tables` and every sum the same ``float32`` addition in the same
  order (:func:`_pairwise` over the 8 bits of a byte, then over the bytes), so the results are the same bits:
  more arithmetic than a lookup, no gather (cheap on a GPU, dear on a CPU core).

  Args:
    xor_words: ``uint32[..., W]`` XORed codes (``[Q, ..., W]`` with per-query weights).
    weights: ``float32[32 W]`` flushed weights (:func:`flush_weights`), or ``float32[Q, 32 W]``.

  Returns:
    ``float32[...]`` weighted distances.
  """
  if weights.ndim == 2:
    weights = weights.reshape(weights.shape[:1] + (1,) * (xor_words.ndim - 2) + weights.shape[1:])
  entries = []
  for p in range(4 * xor_words.shape[-1]):
    word = xor_words[..., p // 4]
    terms = [jnp.where(((word >> (8 * (p % 4) + b)) & 1) == 1, weights[..., 8 * p + b], jnp.float32(0))
             for b in range(8)]
    entries.append(_pairwise(terms))
  return _pairwise(entries)


def _hamming(xor_words):
  return lax.population_count(xor_words).astype(jnp.int32).sum(axis=-1)


def _distances(query_words, items, tables, num_db, ids, required):
  """Distances of ``query_words[L, W]`` to ``items[L or 1, M, W]`` with ``ids[L or 1, M]``: ``+inf`` past
  ``num_db`` and, with ``required[L]``, wherever the Hamming distance differs from it."""
  xor = query_words[:, None, :] ^ items
  d = table_distances(xor, tables)
  keep = ids < num_db
  if required is not None:
    keep = keep & (_hamming(xor) == required[:, None])
  return jnp.where(keep, d, jnp.inf)


@functools.partial(jax.jit, static_argnames="rows")
def pair_distances(query_words, db_words, tables, *, rows: int):
  """``float32[Q, N]`` distances of every pair, ``rows`` queries at a time (``Q`` a multiple of ``rows``)."""
  num_q, num_words = query_words.shape
  per_query = tables.ndim == 3

  def step(args):
    q, t = args
    return table_distances(q[:, None, :] ^ db_words[None], t)

  qs = query_words.reshape(num_q // rows, rows, num_words)
  ts = tables.reshape((num_q // rows, rows) + tables.shape[1:]) if per_query else \
      jnp.broadcast_to(tables, (num_q // rows,) + tables.shape)
  return lax.map(step, (qs, ts)).reshape(num_q, db_words.shape[0])


# ----------------------------------------------------------------------------
# Exact search with fixed shapes.


def _exact_minima(query_words, chunks, tables, num_db, required):
  """``(block_min[L, C S / 32], sb_min[L, C S / 256])`` of the exact distances, chunk by chunk."""
  lanes = query_words.shape[0]
  size = chunks.shape[1]

  def chunk_minima(args):
    c, chunk = args
    ids = c * size + jnp.arange(size, dtype=jnp.int32)
    d = _distances(query_words, chunk[None], tables, num_db, ids[None], required)  # [L, S]
    block_min = d.reshape(lanes, size // BLOCK, BLOCK).min(axis=-1)
    return block_min, block_min.reshape(lanes, size // SUPERBLOCK, SUPERBLOCK // BLOCK).min(axis=-1)

  block_min, sb_min = lax.map(chunk_minima, (jnp.arange(chunks.shape[0], dtype=jnp.int32), chunks))
  return (jnp.moveaxis(block_min, 0, 1).reshape(lanes, -1), jnp.moveaxis(sb_min, 0, 1).reshape(lanes, -1))


def _smallest(values, k: int):
  """Positions of the ``k`` smallest values per row, by (value, position): ``lax.top_k`` keeps the lower
  position first among equal values."""
  return lax.top_k(-values, k)[1]


@functools.partial(jax.jit, static_argnames=("k", "chunk_size"))
def knn_exact(query_words, db_words, num_db, tables, required, *, k: int, chunk_size: int):
  """Exact weighted k nearest neighbours of ``L`` queries: the exact minima scan and three selections.

  Args:
    query_words: ``uint32[L, W]``.
    db_words: ``uint32[C S, W]``, of which the first ``num_db`` items are real.
    num_db: the number of real items.
    tables: ``float32[4 W, 256]`` byte tables.
    required: ``int32[L]`` Hamming distance an item must have (others are at ``+inf``), or None.
    k: neighbours, at most ``C S / 256``.
    chunk_size: ``S``, a multiple of 256.

  Returns:
    ``(distances float32[L, k], indices int32[L, k])`` by (distance, index).
  """
  lanes, num_words = query_words.shape
  chunks = db_words.reshape(-1, chunk_size, num_words)
  block_min, sb_min = _exact_minima(query_words, chunks, tables, num_db, required)
  per_sb = SUPERBLOCK // BLOCK
  top_sb = jnp.sort(_smallest(sb_min, k), axis=1)  # the top k superblocks, in index order
  blk = (top_sb[:, :, None] * per_sb + jnp.arange(per_sb, dtype=jnp.int32)).reshape(lanes, k * per_sb)
  blk_val = jnp.take_along_axis(block_min, blk, axis=1)
  blocks = jnp.sort(jnp.take_along_axis(blk, _smallest(blk_val, k), axis=1), axis=1)
  items = db_words.reshape(-1, BLOCK, num_words)[blocks].reshape(lanes, k * BLOCK, num_words)
  ids = (blocks[:, :, None] * BLOCK + jnp.arange(BLOCK, dtype=jnp.int32)).reshape(lanes, k * BLOCK)
  d = _distances(query_words, items, tables, num_db, ids, required)
  top = _smallest(d, k)
  return jnp.take_along_axis(d, top, axis=1), jnp.take_along_axis(ids, top, axis=1)


@functools.partial(jax.jit, static_argnames="k")
def select_all_exact(query_words, db_words, num_db, tables, required, *, k: int):
  """Exact top ``k`` by one ``top_k`` over every item of a small database ``db_words[N_pad, W]``."""
  ids = jnp.arange(db_words.shape[0], dtype=jnp.int32)[None]
  d = _distances(query_words, db_words[None], tables, num_db, ids, required)
  top = _smallest(d, k)
  return jnp.take_along_axis(d, top, axis=1), top


@functools.partial(jax.jit, static_argnames="k")
def merge_chunk_exact(query_words, chunk_words, offset, num_db, tables, required, run_dist, run_ids, *, k: int):
  """The running top ``k`` (``float32`` and ``int32[L, k]``, by (distance, index), all indices below
  ``offset``) updated with the chunk of items ``offset ..``: the running entries come first, so that equal
  distances keep the lower index."""
  ids = offset + jnp.arange(chunk_words.shape[0], dtype=jnp.int32)[None]
  d = jnp.concatenate([run_dist, _distances(query_words, chunk_words[None], tables, num_db, ids, required)], 1)
  all_ids = jnp.concatenate([run_ids, jnp.broadcast_to(ids, (run_ids.shape[0], ids.shape[1]))], 1)
  top = _smallest(d, k)
  return jnp.take_along_axis(d, top, axis=1), jnp.take_along_axis(all_ids, top, axis=1)


@functools.partial(jax.jit, static_argnames="k")
def rerank(query_words, db_words, candidates, tables, *, k: int):
  """Top ``k`` of ``candidates[Q, C]`` (distinct indices) by (weighted distance, index)."""
  ids = jnp.sort(candidates.astype(jnp.int32), axis=1)
  d = table_distances(query_words[:, None, :] ^ db_words[ids], tables)
  top = _smallest(d, k)
  return jnp.take_along_axis(d, top, axis=1), jnp.take_along_axis(ids, top, axis=1)


@jax.jit
def distances_of(query_words, db_words, ids, tables):
  """``float32[Q, M]`` distances of each query to the items ``ids[Q, M]``."""
  return table_distances(query_words[:, None, :] ^ db_words[ids], tables)


# ----------------------------------------------------------------------------
# Pruned search: the bound scan.


@jax.jit
def permute_words(words, source):
  """``words[n, W]`` with bit ``i`` of the result taken from bit ``source[i]`` (``int32[32 W]``).

  Up to 4 words, bit by bit with shifts by the (traced) source positions: 7 times faster than the gather of
  unpacked bits that longer codes take.
  """
  num_words = words.shape[1]
  if num_words > 4:
    shifts = jnp.arange(32, dtype=jnp.uint32)
    bits = ((words[:, :, None] >> shifts) & jnp.uint32(1)).reshape(words.shape[0], 32 * num_words)
    moved = jnp.take(bits, source, axis=1, mode="clip").reshape(words.shape[0], num_words, 32)
    return jnp.sum(moved << shifts, axis=-1, dtype=jnp.uint32)
  source_word, source_bit = source // 32, (source % 32).astype(jnp.uint32)
  columns = [words[:, w] for w in range(num_words)]
  out = []
  for w in range(num_words):
    acc = jnp.zeros(words.shape[:1], jnp.uint32)
    for b in range(32):
      column = columns[0]
      for v in range(1, num_words):
        column = jnp.where(source_word[32 * w + b] == v, columns[v], column)
      acc = acc | (((column >> source_bit[32 * w + b]) & jnp.uint32(1)) << b)
    out.append(acc)
  return jnp.stack(out, axis=1)


def bound_block(num_bytes: int) -> int:
  """Items per output of the bound scan: the largest power of two ``B`` with ``B * num_bytes <= 16``, at least 2
  (``uint16`` lanes: half the items of :func:`hashjax._kernels.scan.kernel_block` in the same registers)."""
  block = 2
  while 2 * block * num_bytes <= 16:
    block *= 2
  return block


@functools.partial(jax.jit, static_argnames="chunk_size")
def bound_minima(query_words, db_words, coef, *, chunk_size: int):
  """Minima of the bound ``L(x) = sum_g c_g popcount(nibble_g)`` over blocks of 32 and superblocks of 256 items.

  Args:
    query_words: ``uint32[L, W]`` queries with their bits reordered.
    db_words: ``uint32[C S, W]`` database, bits reordered the same way.
    coef: ``uint16[8 W]`` per-nibble multipliers (low nibble of byte ``p`` at ``2 p``, high at ``2 p + 1``)
      with ``4 sum_g c_g <= 65535`` (no overflow).
    chunk_size: ``S``, items per step (a multiple of 256).

  Returns:
    ``(block_min uint16[C S / 32, L], sb_min uint16[C S / 256, L])``. The loop body follows
    :func:`hashjax._kernels.scan.scan_minima` (queries in the vectorised minor axis, a few items per output),
    with two widening multiplies per byte.
  """
  lanes, num_words = query_words.shape
  num_bytes = 4 * num_words
  block = bound_block(num_bytes)
  query_bytes_t = as_bytes(query_words).T

  def chunk_minima(chunk):
    grouped = as_bytes(chunk).reshape(chunk_size // block, block, num_bytes)
    bound = None
    for p in range(num_bytes):
      x = grouped[:, :, p, None] ^ query_bytes_t[p]
      term = (lax.population_count(x & jnp.uint8(15)).astype(jnp.uint16) * coef[2 * p]
              + lax.population_count(x >> 4).astype(jnp.uint16) * coef[2 * p + 1])
      bound = term if bound is None else bound + term
    minimum = bound[:, 0]
    for i in range(1, block):
      minimum = jnp.where(bound[:, i] < minimum, bound[:, i], minimum)
    block_min = minimum.reshape(chunk_size // BLOCK, BLOCK // block, lanes).min(axis=1)
    return block_min, block_min.reshape(chunk_size // SUPERBLOCK, SUPERBLOCK // BLOCK, lanes).min(axis=1)

  block_min, sb_min = lax.map(chunk_minima, db_words.reshape(-1, chunk_size, num_words))
  return block_min.reshape(-1, lanes), sb_min.reshape(-1, lanes)


@jax.jit
def gather_blocks(db_words, blocks):
  """``uint32[..., 32, W]``: the items of ``blocks[...]`` (indices past the padded database clipped).

  A program of its own: fused into the distances that follow, XLA:CPU's gather was three times slower.
  """
  num_words = db_words.shape[1]
  rows = jnp.take(db_words.reshape(-1, BLOCK * num_words), blocks, axis=0, mode="clip")
  return rows.reshape(blocks.shape + (BLOCK, num_words))


@functools.partial(jax.jit, static_argnames="k")
def top_blocks(block_min, sb_min, num_db, *, k: int):
  """``int32[L, k]``: per query, ``k`` blocks of small bound minima (within the ``k`` superblocks of smallest
  minima, the ``k`` blocks of smallest minima)."""
  lanes = block_min.shape[1]
  per_sb = SUPERBLOCK // BLOCK
  # Groups past the database hold copies of its last item: out of the choice.
  sb_ids = jnp.arange(sb_min.shape[0], dtype=jnp.int32)
  sb_val = jnp.where(sb_ids * SUPERBLOCK < num_db, sb_min.T.astype(jnp.float32), jnp.inf)
  top_sb = lax.top_k(-sb_val, k)[1]
  blk = (top_sb[:, :, None] * per_sb + jnp.arange(per_sb, dtype=jnp.int32)).reshape(lanes, k * per_sb)
  blk_val = block_min.at[blk, jnp.arange(lanes)[:, None]].get(mode="promise_in_bounds").astype(jnp.float32)
  blk_val = jnp.where(blk * BLOCK < num_db, blk_val, jnp.inf)
  return jnp.take_along_axis(blk, lax.top_k(-blk_val, k)[1], axis=1)


def _block_item_distances(query_words, items, blocks, num_db, tables):
  """``float32[L, M, 32]`` distances of ``query_words[L, W]`` to ``items[L, M, 32, W]`` of ``blocks[L, M]``,
  and their ``int32`` indices; items past the database at ``+inf``."""
  ids = blocks[:, :, None] * BLOCK + jnp.arange(BLOCK, dtype=jnp.int32)
  d = table_distances(query_words[:, None, None, :] ^ items, tables)
  return jnp.where(ids < num_db, d, jnp.inf), ids


@functools.partial(jax.jit, static_argnames="k")
def smallest_distances(query_words, items, blocks, num_db, tables, *, k: int):
  """``float32[L, k]``: the ``k`` smallest exact distances among ``items[L, M, 32, W]`` (of ``blocks[L, M]``),
  ascending. Over the items of :func:`top_blocks`, the last bounds the k-th distance over the database from
  above. (All ``k``: a program that keeps only the last column of ``lax.top_k`` ran 14 times slower.)"""
  d, _ = _block_item_distances(query_words, items, blocks, num_db, tables)
  return -lax.top_k(-d.reshape(d.shape[0], -1), k)[0]


@functools.partial(jax.jit, static_argnames="k")
def select_blocks(query_words, items, blocks, num_db, tables, *, k: int):
  """Exact top ``k`` of ``L`` queries among the items ``items[L, M, 32, W]`` of their candidate blocks
  ``blocks[L, M]`` (ascending per row; blocks past the database hold items at ``+inf``), by the lemma of
  :mod:`hashjax._kernels.scan`: the ``min(k, M)`` blocks of smallest exact minima, then their items.
  Returns ``(float32[L, k], int32[L, k])`` by (distance, index)."""
  lanes, num_blocks = blocks.shape
  d, ids = _block_item_distances(query_words, items, blocks, num_db, tables)
  kb = min(k, num_blocks)
  chosen = jnp.sort(_smallest(d.min(axis=-1), kb), axis=1)[:, :, None]  # positions follow the block indices
  d = jnp.take_along_axis(d, chosen, axis=1).reshape(lanes, kb * BLOCK)
  ids = jnp.take_along_axis(ids, chosen, axis=1).reshape(lanes, kb * BLOCK)
  top = _smallest(d, k)
  return jnp.take_along_axis(d, top, axis=1), jnp.take_along_axis(ids, top, axis=1)


@jax.jit
def block_distances(query_words, items, lanes, tables):
  """``float32[P, 32]`` exact distances of query ``lanes[p]`` to the items ``items[P, 32, W]`` of a block."""
  return table_distances(query_words[lanes][:, None, :] ^ items, tables)


# ----------------------------------------------------------------------------
# Pruned search: the host side.

#: (lane, block) pairs per call of :func:`block_distances`: at most 64 MB of gathered items at 64 bits.
_PAIRS_PER_CALL = 1 << 16

#: Candidate items per call of :func:`select_blocks`.
_SELECT_ITEMS = 1 << 21


def _bucket(n: int, low: int = 128) -> int:
  """``n`` rounded up to a power of two or 1.5 times one, at least ``low``: a few shapes, so a few
  compilations, and at most a third of the work wasted on padding."""
  power = 1 << max(0, n - 1).bit_length()
  return max(low, 3 * power // 4 if 3 * power // 4 >= n else power)


class Pruning:
  """What the pruned searches share for one database and one weight vector (built once per call).

  Attributes:
    num_db, chunk_size: the real items, and items per scan step.
    db_pad: ``uint32[C S, W]`` the database padded with copies of its last item (device).
    db_perm: the same with its bits reordered by ascending weight (device).
    source: ``int32[32 W]`` the reordering: bit ``i`` of a reordered code is bit ``source[i]`` (device).
    tables: ``float32[4 W, 256]`` byte tables (device).
    scale, coef: the bound's scale ``s`` and multipliers ``c_g = floor(s wmin_g)``, ``uint16[8 W]``, with
      ``4 sum_g c_g <= 65535``.
    margin: ``1 + 2 n 2^-24``: a computed distance ``d``, a float32 sum of ``n = 32 W`` non-negative terms,
      has ``R <= d margin`` for the exact sum ``R``.
  """

  def __init__(self, db_words: np.ndarray, weights: np.ndarray, *, chunk_size: int):
    num_db, num_words = db_words.shape
    self.num_db = num_db
    self.chunk_size = min(chunk_size, -(-num_db // SUPERBLOCK) * SUPERBLOCK)
    size = -(-num_db // self.chunk_size) * self.chunk_size
    pad = np.broadcast_to(db_words[-1:], (size - num_db, num_words))
    self.db_pad = jax.device_put(np.concatenate([db_words, pad]) if size > num_db else db_words)
    self.tables = byte_tables(jax.device_put(weights))
    order = np.argsort(weights, kind="stable").astype(np.int32)
    self.source = jax.device_put(order)
    self.db_perm = permute_words(self.db_pad, self.source)
    wmin = weights[order].astype(np.float64).reshape(-1, 4).min(axis=1)
    total = 4.0 * wmin.sum()
    self.scale = 65535.0 * (1.0 - 2.0**-20) / total if total > 0 else 0.0
    self.coef = np.floor(self.scale * wmin * (1.0 - 2.0**-20)).astype(np.uint16)
    self.margin = 1.0 + 2.0 * (32 * num_words) * 2.0**-24

  def units(self, distances: np.ndarray) -> np.ndarray:
    """``uint16``: the bound a block's minimum must be within to hold an item at ``distances`` or nearer,
    ``min(floor(s d margin), 65535)`` (at least ``L(x)`` of any such item; 65535 takes every block)."""
    if self.scale == 0:
      return np.full(np.shape(distances), 65535, np.uint16)
    units = np.floor(self.scale * np.asarray(distances, np.float64) * self.margin)
    return np.minimum(units, 65535).astype(np.uint16)

  def minima(self, query_words):
    """Bound minima over blocks and superblocks (device), of ``query_words[L, W]`` (device)."""
    q = permute_words(query_words, self.source)
    return bound_minima(q, self.db_perm, jax.device_put(self.coef), chunk_size=self.chunk_size)

  def candidates(self, block_min, bound: np.ndarray):
    """``(lanes, blocks)`` with ``block_min[block, lane] <= bound[lane]``, by lane, then block (host)."""
    return np.nonzero(np.asarray(block_min)[:-(-self.num_db // BLOCK)].T <= bound[:, None])

  def evaluate(self, query_words, lanes: np.ndarray, blocks: np.ndarray):
    """Exact distances ``float32[P, 32]`` and indices ``int64[P, 32]`` of the (lane, block) pairs; the items
    past the database at ``+inf``."""
    out = []
    for s in range(0, lanes.shape[0], _PAIRS_PER_CALL):
      count = min(_PAIRS_PER_CALL, lanes.shape[0] - s)
      size = _bucket(count)
      lanes_pad = np.zeros(size, np.int32)
      blocks_pad = np.zeros(size, np.int32)
      lanes_pad[:count], blocks_pad[:count] = lanes[s:s + count], blocks[s:s + count]
      items = gather_blocks(self.db_pad, jax.device_put(blocks_pad))
      out.append(np.asarray(block_distances(query_words, items, jax.device_put(lanes_pad), self.tables))[:count])
    d = np.concatenate(out) if out else np.zeros((0, BLOCK), np.float32)
    ids = blocks.astype(np.int64)[:, None] * BLOCK + np.arange(BLOCK)
    return np.where(ids < self.num_db, d, np.float32(np.inf)), ids


def knn_pruned(pruning: Pruning, query_words: np.ndarray, k: int, *, lanes: int = SUPERBLOCK):
  """Exact weighted k nearest neighbours of concrete queries, ``(float32[Q, k], int32[Q, k])`` (numpy), by
  (distance, index): the bound scan, an upper bound ``f`` of the k-th distance from ``k`` blocks, then the exact
  top ``k`` among the blocks whose bound minimum is within ``s f margin`` (the only ones that can hold a
  neighbour)."""
  num_q = query_words.shape[0]
  dists, ids = [], []
  pad_block = -(-pruning.num_db // BLOCK)  # a block past the database: its items are at +inf
  for b in range(0, num_q, lanes):
    batch = query_words[b:b + lanes]
    num_rows = _bucket(batch.shape[0], 32)  # queries padded with copies of the last one
    q = jax.device_put(np.concatenate([batch, np.repeat(batch[-1:], num_rows - batch.shape[0], axis=0)]))
    block_min, sb_min = pruning.minima(q)
    first = top_blocks(block_min, sb_min, pruning.num_db, k=k)
    upper = smallest_distances(q, gather_blocks(pruning.db_pad, first), first, pruning.num_db, pruning.tables,
                               k=k)
    lane, blocks = pruning.candidates(block_min, pruning.units(np.asarray(upper)[:, -1]))
    counts = np.bincount(lane, minlength=num_rows)
    width = _bucket(int(counts.max()))
    table = np.full((num_rows, width), pad_block, np.int32)
    table[lane, np.arange(lane.shape[0]) - np.repeat(np.cumsum(counts) - counts, counts)] = blocks
    rows = min(num_rows, _bucket(max(1, _SELECT_ITEMS // (width * BLOCK)), 1))
    for r in range(0, batch.shape[0], rows):
      part = jax.device_put(table[r:r + rows])
      d, i = select_blocks(q[r:r + rows], gather_blocks(pruning.db_pad, part), part, pruning.num_db,
                           pruning.tables, k=k)
      dists.append(np.asarray(d)[:batch.shape[0] - r])
      ids.append(np.asarray(i)[:batch.shape[0] - r])
  return np.concatenate(dists), np.concatenate(ids)


def radius_pruned(pruning: Pruning, query_words: np.ndarray, radius: np.ndarray, *,
                  lanes: int = SUPERBLOCK) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Every item within ``radius[q]`` (``float64[Q]``, finite, non-negative) of each concrete query.

  Returns:
    ``(distances float32[T], indices int64[T], offsets int64[Q + 1])``, by (distance, index) per query.
  """
  num_q = query_words.shape[0]
  out_q, out_d, out_i = [], [], []
  for b in range(0, num_q, lanes):
    q = jax.device_put(query_words[b:b + lanes])
    block_min, _ = pruning.minima(q)
    lane, blocks = pruning.candidates(block_min, pruning.units(radius[b:b + lanes]))
    d, ids = pruning.evaluate(q, lane, blocks)
    hit = d <= radius[b + lane][:, None]
    out_q.append(b + np.broadcast_to(lane[:, None], hit.shape)[hit])
    out_d.append(d[hit])
    out_i.append(ids[hit])
  res_q, res_d, res_i = (np.concatenate(a) for a in (out_q, out_d, out_i))
  order = np.lexsort((res_i, res_d, res_q))
  offsets = np.zeros(num_q + 1, np.int64)
  np.cumsum(np.bincount(res_q, minlength=num_q), out=offsets[1:])
  return res_d[order].astype(np.float32), res_i[order], offsets
