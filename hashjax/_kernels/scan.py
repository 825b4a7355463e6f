r"""Kernels of exact Hamming search (:mod:`hashjax.search`): the block-minimum scan, the k-NN selections and
the exact hits of a radius search.

**The scan.** Codes are read as bytes (each ``uint32`` word bitcast to four ``uint8``: the same Hamming
distance) with up to 256 queries in the minor, vectorised axis, so each distance costs a broadcast, an XOR and
a byte popcount per code byte, for every query at once. :func:`scan_minima` streams the database chunk by chunk
and keeps, per query, the minimum distance over each **block** of :data:`BLOCK` consecutive items and each
**superblock** of :data:`SUPERBLOCK` items: ``N / 32`` and ``N / 256`` bytes per query, never the ``[Q, N]``
distances.

**The selection** (:func:`knn_batch`), exact. *Lemma:* split the items into consecutive groups; the top ``k``
items under the order (distance, index) all lie in the top ``k`` groups under the order (group minimum, group
index). (If a group holding a selected item were outside, each of the ``k`` groups ranked before it would hold
an item ranked before that item.) So: the top ``k`` superblocks; among their ``8 k`` blocks, the top ``k``;
within those ``32 k`` items, the top ``k``. Each selection is one ``lax.top_k`` over exact integer keys packed
into ``float32`` (``key = value * length + position``, exact below ``2^24``), so ties break by index, and XLA
takes its fast float top-k (an integer top-k or a two-key sort takes its much slower sort path on the CPU).

The fallbacks, for databases too small to prune or keys too large for ``float32``: :func:`select_all`, one
float ``top_k`` over every item of a small database, and :func:`merge_chunk`, a running top ``k`` updated chunk
by chunk with a two-key ``lax.sort``. :func:`exact_hits` turns candidate groups of items into the sorted
results of a radius search, on the host.
"""

from __future__ import annotations

import functools
from typing import Tuple

import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

#: Items per superblock, the first level of the selection.
SUPERBLOCK = 256
#: Items per block, the second level.
BLOCK = 32
#: Code bytes the scan reads per output: ``B`` items of ``F`` bytes with ``B * F = 32`` (see :func:`kernel_block`).
#: Longer loop bodies spill registers; much longer ones are no longer vectorised by LLVM.
KERNEL_BYTES = 32
#: Integers below this are exact in ``float32``.
F32_EXACT = 1 << 24


def kernel_block(num_bytes: int) -> int:
  """Items per scan output: the largest power of two ``B`` with ``B * num_bytes <= 32``, and at least 2 while
  distances fit ``uint8`` (up to 31 bytes): with one item per output, XLA:CPU takes the sum of ``uint8``
  popcounts out of the loop into a library reduction, one pass over memory per byte."""
  block = 1
  while 2 * block * num_bytes <= KERNEL_BYTES:
    block *= 2
  return 2 if block == 1 and 8 * num_bytes <= 254 else block


def _block_minima(query_bytes_t, chunk_bytes):
  """``[S / B, L]`` minima of the distances over each ``B`` items.

  ``query_bytes_t`` is ``uint8[F, L]``, ``chunk_bytes`` is ``uint8[S / B, B, F]``. XLA fuses this into one
  loop over ``[S / B, L]`` whose body holds ``B * F`` byte popcounts, vectorised over the queries. Distances
  are ``uint8`` (``uint16`` when ``8 F > 254``: more bytes per distance, half the lanes).
  """
  num_bytes = query_bytes_t.shape[0]
  dtype = jnp.uint16 if 8 * num_bytes > 254 else jnp.uint8
  dist = sum(lax.population_count(chunk_bytes[:, :, w, None] ^ query_bytes_t[w]).astype(dtype)
             for w in range(num_bytes))  # [S / B, B, L]
  minimum = dist[:, 0]
  for i in range(1, chunk_bytes.shape[1]):
    # A chain of selects, not a reduction: XLA:CPU does not fuse a reduction with the popcounts, and would
    # write the [S / B, B, L] distances to memory.
    minimum = jnp.where(dist[:, i] < minimum, dist[:, i], minimum)
  return minimum


def _group_min(x, group: int):
  """Minima of ``x[n, L]`` over consecutive groups of ``group`` rows: ``[n / group, L]``."""
  return x.reshape(x.shape[0] // group, group, x.shape[1]).min(axis=1)


def _as_bytes(words):
  """``uint32[..., W]`` as ``uint8[..., 4 W]``: the same Hamming distances, in the scan's narrowest lanes."""
  return lax.bitcast_convert_type(words, jnp.uint8).reshape(words.shape[:-1] + (4 * words.shape[-1],))


@jax.jit
def scan_minima(query_words, db_words):
  """Minima of the distances over blocks of 32 and superblocks of 256 items.

  Args:
    query_words: ``uint32[L, W]``.
    db_words: ``uint32[C, S, W]`` the database in ``C`` chunks of ``S`` items (a multiple of 256).

  Returns:
    ``(block_min[C S / 32, L], superblock_min[C S / 256, L])``, ``uint8`` (``uint16`` beyond 31 words).
  """
  lanes, num_words = query_words.shape
  size = db_words.shape[1]
  block = kernel_block(4 * num_words)
  query_bytes_t = _as_bytes(query_words).T

  def chunk_minima(chunk):
    grouped = _as_bytes(chunk).reshape(size // block, block, 4 * num_words)
    block_min = _group_min(_block_minima(query_bytes_t, grouped), BLOCK // block)
    return block_min, _group_min(block_min, SUPERBLOCK // BLOCK)

  block_min, sb_min = lax.map(chunk_minima, db_words)
  return block_min.reshape(-1, lanes), sb_min.reshape(-1, lanes)


def _distances(query_words, items):
  """``int32[L, ...]`` Hamming distances of ``query_words[L, W]`` to ``items[L, ..., W]``."""
  query_words = query_words.reshape(query_words.shape[:1] + (1,) * (items.ndim - 2) + query_words.shape[1:])
  return lax.population_count(query_words ^ items).astype(jnp.int32).sum(axis=-1)


def _top_k_smallest(values, ids, length: int, k: int):
  """Positions of the ``k`` smallest ``(values, ids)`` pairs per row, in that order.

  ``values * length + ids`` must be below ``2^24`` (exact in ``float32``).
  """
  _, positions = lax.top_k(-(values * length + ids).astype(jnp.float32), k)
  return positions


def _select(query_words, db_words, block_min, sb_min, num_db, k: int):
  """Exact top ``k`` of ``L`` queries from the scan's minima, by three selections (see the module docstring).

  ``block_min[N_pad / 32, L]`` and ``sb_min[N_pad / 256, L]`` are the minima of :func:`scan_minima`; the rest
  as in :func:`knn_batch`.
  """
  num_q, num_words = query_words.shape
  num_blk, num_sb = block_min.shape[0], sb_min.shape[0]
  sentinel = 32 * num_words + 1  # above every distance
  per_sb = SUPERBLOCK // BLOCK
  # Level 1: the top k superblocks by (minimum, index).
  sb_ids = jnp.arange(num_sb, dtype=jnp.int32)
  sb_val = jnp.where(sb_ids * SUPERBLOCK < num_db, sb_min.T.astype(jnp.int32), sentinel)
  top_sb = _top_k_smallest(sb_val, sb_ids, num_sb, k)  # [L, k]
  # Level 2: the top k of their blocks by (minimum, index), then in index order.
  blk = (top_sb[:, :, None] * per_sb + jnp.arange(per_sb, dtype=jnp.int32)).reshape(num_q, k * per_sb)
  blk_val = block_min.at[blk, jnp.arange(num_q)[:, None]].get(mode="promise_in_bounds")
  blk_val = jnp.where(blk * BLOCK < num_db, blk_val.astype(jnp.int32), sentinel)
  top_blk = _top_k_smallest(blk_val, blk, num_blk, k)
  blocks = jnp.sort(jnp.take_along_axis(blk, top_blk, axis=1), axis=1)  # [L, k]
  # Level 3: the top k of their items by (distance, position); positions follow the indices.
  items = db_words.reshape(num_blk, BLOCK, num_words).at[blocks].get(mode="promise_in_bounds")  # [L, k, 32, W]
  ids = (blocks[:, :, None] * BLOCK + jnp.arange(BLOCK, dtype=jnp.int32)).reshape(num_q, k * BLOCK)
  dist = jnp.where(ids < num_db, _distances(query_words, items).reshape(num_q, k * BLOCK), sentinel)
  top = _top_k_smallest(dist, jnp.arange(k * BLOCK, dtype=jnp.int32), k * BLOCK, k)
  return jnp.take_along_axis(dist, top, axis=1), jnp.take_along_axis(ids, top, axis=1)


@functools.partial(jax.jit, static_argnames=("k", "chunk_size"))
def knn_batch(query_words, db_words, num_db, *, k: int, chunk_size: int):
  """Exact k nearest neighbours of ``L`` queries: :func:`scan_minima`, then the three selections.

  One program, so that it compiles whole before any of it runs.

  Args:
    query_words: ``uint32[L, W]``.
    db_words: ``uint32[C S, W]``, of which the first ``num_db`` items are real.
    num_db: the number of real items (groups starting past it are ignored).
    k: neighbours, at most ``C S / 256``; ``(32 W + 2) C S / 32`` and ``(32 W + 2) 32 k`` must be below
      ``2^24``.
    chunk_size: ``S``, items per step of the scan (a multiple of 256).

  Returns:
    ``(distances, indices)``, ``int32[L, k]`` sorted by (distance, index).
  """
  chunks = db_words.reshape(-1, chunk_size, db_words.shape[1])
  return _select(query_words, db_words, *scan_minima(query_words, chunks), num_db, k)


@functools.partial(jax.jit, static_argnames="k")
def select_all(query_words, db_words, num_db, k: int):
  """Exact top ``k`` by one ``float32`` top-k over every item; ``(32 W + 2) N_pad`` must be below ``2^24``.

  ``query_words[L, W]``, ``db_words[N_pad, W]`` of which the first ``num_db`` are real. Returns
  ``(distances, indices)``, ``int32[L, k]``.
  """
  num_pad = db_words.shape[0]
  ids = jnp.arange(num_pad, dtype=jnp.int32)
  dist = _distances(query_words, jnp.broadcast_to(db_words, (query_words.shape[0],) + db_words.shape))
  dist = jnp.where(ids < num_db, dist, 32 * query_words.shape[1] + 1)
  top = _top_k_smallest(dist, ids, num_pad, k)
  return jnp.take_along_axis(dist, top, axis=1), top


@functools.partial(jax.jit, static_argnames="k")
def merge_sorted(dist_a, ids_a, dist_b, ids_b, k: int):
  """Top ``k`` of two ``int32[L, .]`` result lists by (distance, index)."""
  dist, ids = lax.sort((jnp.concatenate([dist_a, dist_b], 1), jnp.concatenate([ids_a, ids_b], 1)),
                       dimension=1, num_keys=2)
  return dist[:, :k], ids[:, :k]


@functools.partial(jax.jit, static_argnames="k")
def merge_chunk(query_words, chunk_words, offset, num_db, run_dist, run_ids, k: int):
  """The running top ``k`` ``(run_dist, run_ids)``, ``int32[L, k]``, updated with the chunk of items
  ``offset ..`` (``chunk_words[S, W]``; items from ``num_db`` on are ignored)."""
  ids = offset + jnp.arange(chunk_words.shape[0], dtype=jnp.int32)
  dist = _distances(query_words, jnp.broadcast_to(chunk_words, (query_words.shape[0],) + chunk_words.shape))
  dist = jnp.where(ids < num_db, dist, 32 * query_words.shape[1] + 1)
  return merge_sorted(run_dist, run_ids, dist, jnp.broadcast_to(ids, dist.shape), k)


# ----------------------------------------------------------------------------
# Radius search's exact hits, on the host.

_BYTE_POPCOUNT = np.array([bin(v).count("1") for v in range(256)], np.uint8)


def host_popcount(x: np.ndarray) -> np.ndarray:
  """``uint8`` popcount of each entry of an unsigned numpy array (numpy < 2 has no ``bitwise_count``)."""
  if hasattr(np, "bitwise_count"):
    return np.bitwise_count(x)
  x = np.ascontiguousarray(x)
  return _BYTE_POPCOUNT[x.view(np.uint8)].reshape(x.shape + (x.dtype.itemsize,)).sum(-1, dtype=np.uint8)


def exact_hits(query_words: np.ndarray, db_pad: np.ndarray, pairs_q: np.ndarray, pairs_group: np.ndarray,
               radius: np.ndarray, num_db: int, group: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Items within ``radius[q]`` among candidate groups of ``group`` consecutive items.

  Args:
    query_words: ``uint32[Q, W]``.
    db_pad: ``uint32[>= N, W]``; rows from ``num_db`` on are padding, never returned.
    pairs_q: ``int[P]`` queries and ``pairs_group``: ``int[P]`` groups, the (query, group) pairs to examine.
    radius: ``int[Q]``.
    num_db: the number of real items ``N``.
    group: items per group, a multiple of 32 or at most 32.

  Returns:
    ``(distances int32[T], indices int32[T], offsets int64[Q + 1])``, each query's results by (distance,
    index), as in :class:`hashjax.search.RaggedNeighbors`.
  """
  num_q, num_words = query_words.shape
  db_groups = db_pad[:db_pad.shape[0] // group * group].reshape(-1, group, num_words)
  sub = min(group, BLOCK)
  out_q, out_i, out_d = [], [], []
  step = max(1, (1 << 22) // (group * num_words))
  for s in range(0, pairs_q.shape[0], step):
    pq, pg = pairs_q[s:s + step], pairs_group[s:s + step]
    items = db_groups[pg]  # [P, group, W]
    dist = np.zeros(items.shape[:2], np.uint16)
    for w in range(num_words):
      dist += host_popcount(items[:, :, w] ^ query_words[pq, w][:, None])
    # Blocks of 32 first (results are sparse), then the items of those blocks.
    r_pairs = radius[pq]
    dist = dist.reshape(-1, group // sub, sub)
    blk_p, blk_j = np.nonzero(dist.min(axis=-1) <= r_pairs[:, None])
    dist = dist[blk_p, blk_j]  # [P', sub]
    hit_b, hit_j = np.nonzero(dist <= r_pairs[blk_p][:, None])
    ids = pg[blk_p[hit_b]].astype(np.int64) * group + blk_j[hit_b] * sub + hit_j
    real = ids < num_db
    out_q.append(pq[blk_p[hit_b[real]]])
    out_i.append(ids[real])
    out_d.append(dist[hit_b[real], hit_j[real]])
  res_q = np.concatenate(out_q) if out_q else np.zeros((0,), np.int64)
  res_i = np.concatenate(out_i) if out_i else np.zeros((0,), np.int64)
  res_d = np.concatenate(out_d) if out_d else np.zeros((0,), np.int32)
  order = np.lexsort((res_i, res_d, res_q))
  offsets = np.zeros((num_q + 1,), np.int64)
  np.cumsum(np.bincount(res_q, minlength=num_q), out=offsets[1:])
  return res_d[order].astype(np.int32), res_i[order].astype(np.int32), offsets
