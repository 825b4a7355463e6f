r"""Exact Hamming search over packed codes: k nearest neighbours and radius search.

Both searches return exactly what a brute-force scan returns, under one
deterministic order: **ascending distance, then ascending database index**.
So ``knn(q, x, k)`` is the first ``k`` entries of every query's row of
``radius_search(q, x, r)`` whenever the k-th distance is at most ``r``.

How :func:`knn` scans ``N`` items per query (``N = 10^6``, ``k = 100``) without
sorting ``N`` keys, and without ever holding the ``[Q, N]`` distance matrix:

1. **Block minima** (the scan). The database is streamed in chunks of
   ``chunk_size`` items. One XLA kernel per chunk computes, for 32 to 256
   queries at once, the minimum distance over each block of ``B`` consecutive
   items (``B * bytes_per_code = 32``; ``B = 1`` beyond 256 bits). Codes are
   viewed as bytes and the queries sit in the vector lanes, so each distance
   costs a broadcast, an XOR and a byte popcount per code byte. The same
   kernel reduces them to the minima of **blocks** of 32 items and of
   **superblocks** of 256 items, written in place into two buffers: ``N / 32``
   and ``N / 256`` bytes per query.
2. **Selection** (exact), one compiled program per shape bucket. *Lemma:*
   split the items into consecutive groups; the top ``k`` items under the
   order (distance, index) all lie in the top ``k`` groups under the order
   (group minimum, group index). (If a group holding a selected item were
   outside, each of the ``k`` groups ranked before it holds an item ranked
   before that item.) So: top ``k`` superblocks by (minimum, index); among
   their ``8 k`` blocks, read from the scan's block minima, the top ``k`` by
   (minimum, index); within those ``32 k`` items, the top ``k``. Each
   selection is one ``lax.top_k`` over exact integer keys packed into
   ``float32`` (``key = value * length + position``, exact while at most
   ``2^24``), so ties break by index for free and XLA's fast float top-k
   applies (integer top-k takes XLA's much slower sort path on the CPU).

When that does not apply (the database is too small to prune, ``k`` is large,
or a key would not be exact in ``float32``), :func:`knn` falls back to a
``top_k`` over all items (small databases) or to a streaming ``lax.sort`` on
(distance, index) pairs; both are exact, only slower.

:func:`radius_search` runs the same block-minimum kernel, keeps the superblocks
whose minimum is within the radius (each holds at least one result), and
computes the exact distances of those superblocks' items only, so its cost is
one scan plus work proportional to the output. When codes are longer than 32
bits and the radius is at most 5, a first pass over the first 32 bits alone
(a lower bound of the distance, 1/W of the work) picks the candidate
superblocks instead; it is kept when it passes at most 1% of them and
replaced by the full-width pass otherwise.

Shapes are bucketed so that a new database size rarely compiles anything new:
the database is padded to a bucketed number of chunks (the padding items can
never be returned, and padding chunks are never scanned), and queries are
processed in batches of 32, 128 or 256 (fewer for very large ``k``). The
first call at a new shape compiles two programs for :func:`knn` (the chunk
kernel and the selection, both before the scan runs, so that compilation does
not share the CPU with it) and one for :func:`radius_search`.
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional, Tuple, Union

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks
from hashjax import _compile
from hashjax import codes

Array = jax.Array

#: Database items per streamed step (rounded up to a multiple of 256).
DEFAULT_CHUNK_SIZE = 65536

_SB = 256  # items per superblock
_BB = 32  # items per block in the second selection level
_KERNEL_BYTES = 32  # code bytes read per kernel output: B * bytes_per_code
_MAX_LANES = 256  # queries per kernel call
_F32_EXACT = 1 << 24  # integers below this are exact in float32
_STAGE_ELEMS = 1 << 23  # budget for the [queries, k * 32, W] words of the last selection
_SORT_ELEMS = 1 << 22  # budget for [queries, candidates] arrays of the fallbacks
_PREFIX_MAX_RADIUS = 5  # radius search: try the 32-bit prefix filter up to this radius
_PREFIX_MAX_FRACTION = 0.01  # ...and keep it when at most this share of superblocks pass
_IN_BOUNDS = jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS  # gathers in bounds by construction


class RaggedNeighbors(NamedTuple):
  """Variable-length search results of ``Q`` queries, in CSR form.

  Query ``q``'s results are ``distances[offsets[q]:offsets[q + 1]]`` and
  ``indices[offsets[q]:offsets[q + 1]]``, ordered by ascending distance, then
  ascending database index.

  Attributes:
    distances: ``int32[T]`` Hamming distances, ``T = offsets[-1]``.
    indices: ``int32[T]`` database indices.
    offsets: ``int32[Q + 1]`` row starts; ``offsets[0] = 0``.
  """
  distances: Array
  indices: Array
  offsets: Array

  @property
  def counts(self) -> Array:
    """``int32[Q]`` number of results of each query."""
    return jax.device_put(np.diff(np.asarray(self.offsets)))


# ----------------------------------------------------------------------------
# Validation.


def _check_k(k, num_db: int) -> int:
  if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
    raise ValueError(f"k: expected a Python int, got {k!r}")
  if k < 1:
    raise ValueError(f"k: expected k >= 1, got {k}")
  if k > num_db:
    raise ValueError(f"k: expected k <= len(db_words) = {num_db} (no padding policy: a "
                     f"query cannot have more neighbours than the database holds), got {k}")
  return int(k)


def _check_chunk_size(chunk_size) -> int:
  if isinstance(chunk_size, (bool, np.bool_)) or not isinstance(chunk_size, (int, np.integer)) \
      or chunk_size < 1:
    raise ValueError(f"chunk_size: expected a positive int, got {chunk_size!r}")
  return -(-int(chunk_size) // _SB) * _SB


def _check_radius(r, num_queries: int) -> np.ndarray:
  """``r`` as ``int64[Q]``: a non-negative int, or one per query."""
  if isinstance(r, (bool, np.bool_)):
    raise ValueError(f"r: expected a non-negative int or an int array [Q], got {r!r}")
  if isinstance(r, (int, np.integer)):
    if r < 0:
      raise ValueError(f"r: expected a radius >= 0, got {r}")
    return np.full((num_queries,), int(r), np.int64)
  if not hasattr(r, "dtype"):
    raise ValueError(f"r: expected a non-negative int or an int array [Q], got {type(r).__name__}")
  if not _checks.is_concrete(r):
    raise ValueError("r: radius_search needs concrete radii (it returns variable-length "
                     "results, so it cannot run under jit)")
  if not np.issubdtype(np.dtype(r.dtype), np.integer):
    raise ValueError(f"r: expected integer radii, got dtype {np.dtype(r.dtype).name}")
  if tuple(r.shape) != (num_queries,):
    raise ValueError(f"r: expected a scalar or shape ({num_queries},) (one radius per query), "
                     f"got shape {tuple(r.shape)}")
  arr = np.asarray(r).astype(np.int64)
  if arr.size and arr.min() < 0:
    raise ValueError(f"r: expected radii >= 0, got min {arr.min()}")
  return arr


# ----------------------------------------------------------------------------
# Shapes.


def _pow2_at_least(n: int) -> int:
  p = 1
  while p < n:
    p *= 2
  return p


def _bucket(n: int) -> int:
  """Smallest of ``{2^i, 3 * 2^(i-1)}`` at least ``n``: at most 1/3 waste."""
  p = _pow2_at_least(n)
  if p >= 4 and 3 * p // 4 >= n:
    return 3 * p // 4
  return p


def _lanes(num_queries: int) -> int:
  """Queries per kernel call: 32, 128 or 256.

  Not 64: the scan's chunk kernel for 64 queries, the same program as for 32
  or 128, took 1.5x their time to compile (0.12 to 0.18 s against 0.06 to 0.11
  s of XLA's backend, one core), and 33 to 64 queries ran as fast in two calls
  of 32 (knn, 10^6 items, 32 to 128 bits; development measurements).
  """
  n = _pow2_at_least(num_queries)
  return 32 if n <= 64 else min(_MAX_LANES, n)


def _kernel_block(num_bytes: int) -> int:
  """Items per kernel output: the largest power of two ``B`` with ``B * num_bytes <= 32``."""
  b = 1
  while 2 * b * num_bytes <= _KERNEL_BYTES and 2 * b <= _SB:
    b *= 2
  return b


def _database_layout(num_db: int, chunk_size: int) -> Tuple[int, int, int]:
  """``(chunk items S, real chunks C, padded chunks C_pad)`` for ``num_db`` items."""
  if num_db <= chunk_size:
    size = _SB * _bucket(-(-num_db // _SB))
    return size, 1, 1
  num_chunks = -(-num_db // chunk_size)
  return chunk_size, num_chunks, _bucket(num_chunks)


def _pad_rows(x, rows: int, fill_last: bool, fill_rows: Optional[int] = None):
  """Pads ``x[n, ...]`` to ``rows`` rows: rows ``n .. fill_rows - 1`` copy the
  last row if ``fill_last`` (``fill_rows`` defaults to ``rows``), the rest are 0.

  numpy in: a new 64-byte aligned numpy array (so that ``jax.device_put`` of it
  and of its 64-byte aligned slices is zero-copy on the CPU, and no XLA
  program is compiled per shape). jax in (traced): a jax array.
  """
  n = x.shape[0]
  fill_rows = rows if fill_rows is None else fill_rows
  fill_rows = fill_rows if fill_last else n
  if isinstance(x, np.ndarray):
    nbytes = rows * int(np.prod(x.shape[1:], dtype=np.int64)) * x.dtype.itemsize
    raw = np.empty(nbytes + 64, np.uint8)
    start = (-raw.ctypes.data) % 64
    out = raw[start:start + nbytes].view(x.dtype).reshape((rows,) + x.shape[1:])
    out[:n] = x
    out[n:fill_rows] = x[-1]
    out[fill_rows:] = 0
    return out
  if rows <= n:
    return x
  parts = [x]
  if fill_rows > n:
    parts.append(jnp.broadcast_to(x[-1:], (fill_rows - n,) + x.shape[1:]))
  if rows > fill_rows:
    parts.append(jnp.zeros((rows - fill_rows,) + x.shape[1:], x.dtype))
  return jnp.concatenate(parts, axis=0)


def _as_bytes(words):
  """``uint32[n, W]`` to ``uint8[n, 4 W]`` (little-endian: the same Hamming distance)."""
  if isinstance(words, np.ndarray):
    return np.ascontiguousarray(words, dtype="<u4").view(np.uint8).reshape(words.shape[0], -1)
  return jax.lax.bitcast_convert_type(words, jnp.uint8).reshape(words.shape[0], -1)


def _host_or_traced(*arrays):
  """numpy copies of concrete arrays (so that padding and layout changes run on
  the host without compiling anything per shape); traced arrays unchanged."""
  if all(_checks.is_concrete(a) for a in arrays):
    return tuple(np.ascontiguousarray(a) for a in arrays)
  return tuple(jnp.asarray(a) for a in arrays)


# ----------------------------------------------------------------------------
# Kernels.


def _block_minima(query_bytes_t: Array, chunk_bytes: Array) -> Array:
  """Block minima of Hamming distances over the first ``F`` code bytes.

  ``query_bytes_t`` is ``uint8[F, L]`` (queries in the minor, vectorised
  axis), ``chunk_bytes`` is ``uint8[NB, B, F]``. Returns ``[NB, L]`` minima
  over each block's ``B`` items, ``uint8`` (or ``uint16`` when ``8 F > 254``).
  XLA fuses this into one elementwise loop over ``[NB, L]`` whose body holds
  ``B * F`` byte popcounts, which LLVM vectorises over the queries.
  ``B * F = 32`` measured fastest (fewer register spills than 64 or 128); at
  about 256 LLVM stops vectorising the loop.
  """
  num_bytes, lanes = query_bytes_t.shape
  num_blocks, block = chunk_bytes.shape[:2]
  shape = (num_blocks, block, lanes)
  wide = 8 * num_bytes > 254
  # lax primitives: jax.numpy's indexing and operators would each trace a nested jit (this loop
  # body is unrolled B * F = 32 times, so tracing and lowering took twice as long).
  dist = None
  for w in range(num_bytes):
    q = jax.lax.broadcast_in_dim(jax.lax.index_in_dim(query_bytes_t, w, 0, False), shape, (2,))
    x = jax.lax.broadcast_in_dim(jax.lax.index_in_dim(chunk_bytes, w, 2, False), shape, (0, 1))
    x = jax.lax.population_count(jax.lax.bitwise_xor(q, x))
    if wide:
      x = jax.lax.convert_element_type(x, jnp.uint16)
    dist = x if dist is None else jax.lax.add(dist, x)  # [NB, B, L]
  minimum = jax.lax.index_in_dim(dist, 0, 1, False)
  for i in range(1, block):
    # A select, not a minimum: XLA hands elementwise minima next to a
    # reduction to its library fusion, which splits the kernel (4x slower).
    d = jax.lax.index_in_dim(dist, i, 1, False)
    minimum = jax.lax.select(jax.lax.lt(d, minimum), d, minimum)
  return minimum


def _min_over_groups(x: Array, group: int) -> Array:
  grouped = jax.lax.reshape(x, (x.shape[0] // group, group, x.shape[-1]))
  return jax.lax.reduce(grouped, np.array(np.iinfo(x.dtype).max, x.dtype), jax.lax.min, (1,))


@_compile.jit(donate_argnums=0)
def _chunk_minima(minima, query_bytes_t: Array, chunk_bytes: Array, c: Array):
  """The scan, one chunk: writes chunk ``c``'s minima into ``minima`` (donated,
  so updated in place), a pair of ``[C, S / 32, L]`` and ``[C, S / 256, L]``
  buffers: minima over blocks of 32 and superblocks of 256 items."""
  block_min = _min_over_groups(_block_minima(query_bytes_t, chunk_bytes), _BB // chunk_bytes.shape[1])
  sb_min = _min_over_groups(block_min, _SB // _BB)
  return tuple(jax.lax.dynamic_update_index_in_dim(buf, m, c, 0)
               for buf, m in zip(minima, (block_min, sb_min)))


@_compile.jit(static_argnames="group")
def _superblock_hits(query_bytes_t: Array, chunk_bytes: Array, radius: Array, group: int) -> Array:
  """``uint8[S / 256, L]``: 1 where a superblock's minimum distance over the
  first ``F`` code bytes is ``<= radius[L]`` (``group = 256 / B``)."""
  sb_min = _min_over_groups(_block_minima(query_bytes_t, chunk_bytes), group)
  return (sb_min <= radius[None, :].astype(sb_min.dtype)).astype(jnp.uint8)


def _popcount_sum(query_words: Array, items: Array) -> Array:
  """Distances of ``query_words[L, W]`` to ``items[L, ..., W]``: ``int32[L, ...]``."""
  q = jax.lax.broadcast_in_dim(query_words, items.shape, (0, items.ndim - 1))
  bits = jax.lax.convert_element_type(jax.lax.population_count(jax.lax.bitwise_xor(q, items)), jnp.int32)
  return jax.lax.reduce(bits, np.int32(0), jax.lax.add, (items.ndim - 1,))


def _neg_f32(key: Array) -> Array:
  return jax.lax.neg(jax.lax.convert_element_type(key, jnp.float32))


@_compile.jit(static_argnames="k", optimize=False)
def _select(query_words, db_words, block_min, sb_min, num_db, k):
  """Exact top ``k`` of ``L`` queries from the scan's minima, by three
  selections (see the module docstring).

  ``query_words[L, W]``; ``db_words[N_pad, W]`` the padded database, of which
  the first ``num_db`` items are real (minima of groups past them are
  ignored); ``block_min[N_pad / 32, L]`` and ``sb_min[N_pad / 256, L]`` the
  minima of blocks of 32 and superblocks of 256 items. Returns the last
  selection's ``float32[L, k]`` top values and the ``int32[L, k]`` blocks they
  index; :func:`_decode_select` turns them into distances and indices (on the
  host for concrete inputs: two fewer kernels to compile).
  """
  # lax primitives throughout: each jax.numpy operator or indexing would trace a nested jit,
  # which took more time than XLA's compilation of this program.
  lax, i32 = jax.lax, jnp.int32
  num_q, num_words = query_words.shape
  block_min, sb_min = block_min.reshape(-1, num_q), sb_min.reshape(-1, num_q)
  num_blk, num_sb = block_min.shape[0], sb_min.shape[0]
  sentinel = 32 * num_words + 1
  nb = _SB // _BB
  n = lax.convert_element_type(num_db, i32)
  full = lambda value, shape: lax.full(shape, value, i32)
  real = lambda ids, size: lax.lt(lax.mul(ids, full(size, ids.shape)), lax.broadcast_in_dim(n, ids.shape, ()))
  # (Groups starting past num_db, padding or garbage, get the sentinel: real minima are at most 32 W.)
  key = lambda values, ids, length: _neg_f32(lax.add(lax.mul(values, full(length, values.shape)), ids))
  # Level 1: top k superblocks by (minimum, index).
  sb_ids = lax.broadcasted_iota(i32, (num_q, num_sb), 1)
  sb_val = lax.select(real(sb_ids, _SB), lax.convert_element_type(lax.transpose(sb_min, (1, 0)), i32),
                      full(sentinel, sb_ids.shape))
  _, sb_sel = lax.top_k(key(sb_val, sb_ids, num_sb), k)  # [L, k]
  # Level 2: top k blocks of 32 among those superblocks, by (minimum, index),
  # read from the scan's block minima; then in index order.
  shape = (num_q, k, nb)
  blk = lax.add(lax.mul(lax.broadcast_in_dim(sb_sel, shape, (0, 1)), full(nb, shape)), lax.broadcasted_iota(i32, shape, 2))
  blk = lax.reshape(blk, (num_q, k * nb))
  lane = lax.broadcasted_iota(i32, blk.shape, 0)
  at = lax.concatenate([lax.expand_dims(blk, (2,)), lax.expand_dims(lane, (2,))], 2)  # block_min[blk, lane]
  blk_val = lax.gather(block_min, at, lax.GatherDimensionNumbers((), (0, 1), (0, 1)), (1, 1),
                       mode=_IN_BOUNDS)
  blk_val = lax.select(real(blk, _BB), lax.convert_element_type(blk_val, i32), full(sentinel, blk.shape))
  top_blk, _ = lax.top_k(key(blk_val, blk, num_blk), k)
  blocks = lax.sort(lax.rem(lax.convert_element_type(lax.neg(top_blk), i32), full(num_blk, top_blk.shape)), dimension=1)
  # Level 3: top k items among those blocks, by (distance, position).
  items = lax.gather(db_words.reshape(num_blk, _BB, num_words), lax.expand_dims(blocks, (2,)),
                     lax.GatherDimensionNumbers((2, 3), (0,), (0,)), (1, _BB, num_words),
                     mode=_IN_BOUNDS)  # [L, k, BB, W]
  shape = (num_q, k, _BB)
  item_ids = lax.add(lax.mul(lax.broadcast_in_dim(blocks, shape, (0, 1)), full(_BB, shape)),
                     lax.broadcasted_iota(i32, shape, 2))
  dist = lax.select(real(item_ids, 1), _popcount_sum(query_words, items), full(sentinel, shape))
  scale = k * _BB
  top, _ = lax.top_k(key(lax.reshape(dist, (num_q, scale)), lax.broadcasted_iota(i32, (num_q, scale), 1), scale), k)
  return top, blocks


def _decode_select(top, blocks):
  """``(distances, indices)``, ``int32[L, k]``, from :func:`_select`'s outputs: numpy if concrete, else jnp."""
  xp = np if _checks.is_concrete(top) and _checks.is_concrete(blocks) else jnp
  top, blocks = xp.asarray(top), xp.asarray(blocks)
  scale = top.shape[1] * _BB
  key = (-top).astype(xp.int32)  # exact: keys are integers below 2^24
  pos = key % scale
  ids = xp.take_along_axis(blocks, pos // _BB, axis=1) * _BB + (pos & (_BB - 1))
  return key // scale, ids



@functools.partial(jax.jit, static_argnames="k")
def _select_all(query_words, db_words, num_db, k):
  """Exact top ``k`` by one float ``top_k`` over every item (small databases)."""
  num_pad = db_words.shape[0]
  sentinel = 32 * query_words.shape[1] + 1
  ids = jnp.arange(num_pad, dtype=jnp.int32)
  dist = jnp.where(ids[None, :] < num_db, codes._hamming(query_words, db_words), sentinel)
  _, sel = jax.lax.top_k(_neg_f32(dist * num_pad + ids[None, :]), k)
  return jnp.take_along_axis(dist, sel, axis=1, mode=_IN_BOUNDS), sel


@functools.partial(jax.jit, static_argnames="k")
def _merge_chunk_sorted(query_words, chunk_words, offset, num_db, run_dist, run_ids, k):
  """Running top ``k`` updated with one chunk by a two-key ``lax.sort``."""
  sentinel = 32 * query_words.shape[1] + 1
  ids = offset + jnp.arange(chunk_words.shape[0], dtype=jnp.int32)
  dist = jnp.where(ids[None, :] < num_db, codes._hamming(query_words, chunk_words), sentinel)
  ids = jnp.broadcast_to(ids[None, :], dist.shape)
  dist, ids = jax.lax.sort((jnp.concatenate([run_dist, dist], 1), jnp.concatenate([run_ids, ids], 1)),
                           dimension=1, num_keys=2)
  return dist[:, :k], ids[:, :k]


@functools.partial(jax.jit, static_argnames="k")
def _merge_sorted(dist_a, ids_a, dist_b, ids_b, k):
  """Top ``k`` of two result lists by (distance, index)."""
  dist, ids = jax.lax.sort((jnp.concatenate([dist_a, dist_b], 1), jnp.concatenate([ids_a, ids_b], 1)),
                           dimension=1, num_keys=2)
  return dist[:, :k], ids[:, :k]


# ----------------------------------------------------------------------------
# k nearest neighbours.


def _gather_rows(parts, num_rows: int, offset: int):
  """Concatenates per-batch ``[rows, k]`` results, keeps ``num_rows``, adds ``offset``.

  On the host (numpy) for concrete inputs, so no XLA program is compiled per
  query count; with jnp when traced.
  """
  if all(_checks.is_concrete(p) for p in parts):
    out = np.concatenate([np.asarray(p) for p in parts])[:num_rows]
  else:
    out = jnp.concatenate(parts)[:num_rows]
  return out + offset if offset else out


def _knn_hierarchical(query_words, db_words, k, chunk_size, offset, ties=False):
  """The block-minimum search. With ``ties`` (concrete inputs), returns instead
  the :class:`RaggedNeighbors` of every item within each query's k-th
  distance, found from the same scan's minima of blocks of 32 items."""
  num_q, num_words = query_words.shape
  num_db = db_words.shape[0]
  num_bytes = 4 * num_words
  size, num_chunks, num_chunks_pad = _database_layout(num_db, chunk_size)
  block = _kernel_block(num_bytes)
  db_pad = _pad_rows(db_words, size * num_chunks_pad, fill_last=True, fill_rows=size * num_chunks)
  db_bytes = _as_bytes(db_pad).reshape(num_chunks_pad, size // block, block, num_bytes)
  chunks = [_checks.as_jax(db_bytes[c]) for c in range(num_chunks)]
  db_host, db_pad = db_pad, _checks.as_jax(db_pad)
  lanes = _lanes(num_q)
  while lanes > 1 and lanes * k * _BB * num_words > _STAGE_ELEMS:
    lanes = 32 if lanes == 128 else lanes // 2  # (not 64, see _lanes)
  q_pad = _pad_rows(query_words, -(-num_q // lanes) * lanes, fill_last=False)
  q_bytes_t = _as_bytes(q_pad).T
  # Minima buffers, updated in place chunk by chunk; past the real chunks they
  # hold garbage, which _select ignores.
  dtype = jnp.uint16 if 8 * num_bytes > 254 else jnp.uint8
  shapes = [(num_chunks_pad, size // group, lanes) for group in (_BB, _SB)]
  if _checks.is_concrete(db_pad) and _checks.is_concrete(q_pad):
    minima = tuple(jax.device_put(np.empty(shape, dtype)) for shape in shapes)
  else:
    minima = tuple(jnp.zeros(shape, dtype) for shape in shapes)
  n = np.int32(num_db)
  # The selection is compiled before the scan is dispatched: compiled while the scan's chunks
  # ran, its compilation took twice as long on one core, and the first call 25 to 35% longer.
  _select.precompile(_checks.as_jax(q_pad[:lanes]), db_pad, *minima, n, k)
  tops, block_lists, kept = [], [], []
  for b in range(0, q_pad.shape[0], lanes):
    q_t = _checks.as_jax(q_bytes_t[:, b:b + lanes])
    for c, chunk in enumerate(chunks):
      minima = _chunk_minima(minima, q_t, chunk, np.int32(c))
    top, blocks = _select(_checks.as_jax(q_pad[b:b + lanes]), db_pad, *minima, n, k)
    tops.append(top)
    block_lists.append(blocks)
    if ties:  # keep minima of blocks of 32 items to find the ties from
      kept.append(np.array(np.asarray(minima[0])[:num_chunks]).reshape(-1, lanes))
  dists, ids = _decode_select(_gather_rows(tops, num_q, 0), _gather_rows(block_lists, num_q, 0))
  if offset:
    ids = ids + offset
  if not ties:
    return dists, ids
  # Every item at distance <= t (the k-th distance) sits in a block of 32 whose
  # minimum is <= t; examine those blocks only.
  radius = np.asarray(dists[:, -1]).astype(np.int64)
  r_pad = np.zeros((q_pad.shape[0],), np.int64)
  r_pad[:num_q] = radius
  pairs_q, pairs_blk = [], []
  for b, block_min in zip(range(0, q_pad.shape[0], lanes), kept):
    blk, lane = np.nonzero(block_min <= r_pad[b:b + lanes])
    keep = b + lane < num_q
    pairs_q.append(b + lane[keep])
    pairs_blk.append(blk[keep])
  return _exact_hits(query_words, db_host, np.concatenate(pairs_q), np.concatenate(pairs_blk),
                     radius, num_db, group=_BB)


def _query_batches(num_q: int, per_query_elems: int, cap: int = _MAX_LANES) -> int:
  rows = max(1, _SORT_ELEMS // max(per_query_elems, 1))
  p = 1
  while 2 * p <= min(rows, cap, _pow2_at_least(num_q)):
    p *= 2
  return p


def _knn_all(query_words, db_words, k, offset):
  num_q = query_words.shape[0]
  num_db = db_words.shape[0]
  num_pad = _SB * _bucket(-(-num_db // _SB))
  db_pad = _checks.as_jax(_pad_rows(db_words, num_pad, fill_last=True))
  rows = _query_batches(num_q, num_pad)
  q_pad = _pad_rows(query_words, -(-num_q // rows) * rows, fill_last=False)
  n = np.int32(num_db)
  out = [_select_all(_checks.as_jax(q_pad[b:b + rows]), db_pad, n, k) for b in range(0, q_pad.shape[0], rows)]
  return _gather_rows([o[0] for o in out], num_q, 0), _gather_rows([o[1] for o in out], num_q, offset)


def _knn_sorted(query_words, db_words, k, chunk_size, offset):
  num_q, num_words = query_words.shape
  num_db = db_words.shape[0]
  size = max(chunk_size, -(-k // _SB) * _SB)
  size, num_chunks, _ = _database_layout(num_db, size)
  db_pad = _pad_rows(db_words, size * num_chunks, fill_last=True)
  chunks = [_checks.as_jax(db_pad[c * size:(c + 1) * size]) for c in range(num_chunks)]
  rows = _query_batches(num_q, size + k)
  q_pad = _pad_rows(query_words, -(-num_q // rows) * rows, fill_last=False)
  n = np.int32(num_db)
  init_d = _checks.as_jax(np.full((rows, k), 32 * num_words + 2, np.int32))
  init_i = _checks.as_jax(np.full((rows, k), np.iinfo(np.int32).max, np.int32))
  dists, ids = [], []
  for b in range(0, q_pad.shape[0], rows):
    q = _checks.as_jax(q_pad[b:b + rows])
    d, i = init_d, init_i
    for c, chunk in enumerate(chunks):
      d, i = _merge_chunk_sorted(q, chunk, np.int32(c * size), n, d, i, k)
    dists.append(d)
    ids.append(i)
  return _gather_rows(dists, num_q, 0), _gather_rows(ids, num_q, offset)


def _plan(num_db: int, num_words: int, k: int, chunk_size: int) -> str:
  """Which exact selection :func:`knn` uses for one database segment.

  ``"hierarchical"`` (block minima, the fast path) when the database holds at
  least ``k`` superblocks and its float32 keys are exact (it beats one
  ``top_k`` over every item even when the ``k`` superblocks cover most of the
  database); else ``"all"`` (that ``top_k``) for small databases; else
  ``"sorted"`` (a streaming two-key ``lax.sort``).
  """
  scale = 32 * num_words + 2  # distinct distance keys incl. the sentinel
  size, _, num_chunks_pad = _database_layout(num_db, chunk_size)
  num_blk = size * num_chunks_pad // _BB
  if -(-num_db // _SB) >= k and scale * num_blk <= _F32_EXACT and scale * k * _BB <= _F32_EXACT:
    return "hierarchical"
  num_pad = _SB * _bucket(-(-num_db // _SB))
  if scale * num_pad < _F32_EXACT and num_pad <= 4 * max(chunk_size, 4096):
    return "all"
  return "sorted"


def _knn_segment(query_words, db_words, k, chunk_size, offset=0):
  plan = _plan(db_words.shape[0], query_words.shape[1], k, chunk_size)
  if plan == "hierarchical":
    return _knn_hierarchical(query_words, db_words, k, chunk_size, offset)
  if plan == "all":
    return _knn_all(query_words, db_words, k, offset)
  return _knn_sorted(query_words, db_words, k, chunk_size, offset)


def _segment_size(num_words: int, chunk_size: int) -> int:
  """Largest database segment whose block keys stay exact in float32."""
  scale = 32 * num_words + 2
  num_blk = _F32_EXACT // scale
  # Padding rounds a segment up to a bucketed number of chunks (at most x4/3).
  chunks = max(1, (num_blk * _BB * 3 // 4) // chunk_size)
  return chunks * chunk_size


def knn(query_words: Array, db_words: Array, k: int, *, return_ties: bool = False,
        chunk_size: int = DEFAULT_CHUNK_SIZE):
  r"""Exact k nearest neighbours in Hamming distance, ties broken by database index.

  The order is ascending distance, then ascending database index, so the
  result is deterministic and equals a stable sort of each query's distances.

  .. math:: \mathrm{knn}_k(q) = \text{the first } k \text{ items } i
     \text{ in the order } (d(q, i), i)

  The scan streams over database chunks and never holds the ``[Q, N]``
  distance matrix (see the module docstring for the algorithm). Memory beyond
  the inputs: a padded copy of the database, about ``N / 28`` bytes per query
  of the current batch (at most 256 queries) for the scan's block minima, and
  ``O(32 k W)`` words per query for the selection.

  Args:
    query_words: ``uint32[Q, W]`` packed query codes (:func:`hashjax.codes.pack_bits`).
    db_words: ``uint32[N, W]`` packed database codes of the same width.
    k: number of neighbours, ``1 <= k <= N``; ``k > N`` raises ``ValueError``
      (no padding policy).
    return_ties: if True, return every item whose distance is at most the
      k-th distance (whole tie groups, as Nair et al. 2012 evaluate), as a
      :class:`RaggedNeighbors`: row ``q`` starts with the same ``k`` items as
      ``return_ties=False`` and continues with the rest of the k-th distance's
      tie group, by index. Needs concrete inputs (not under ``jit``). On the
      block-minimum path the ties come from the same scan's block minima (a
      copy of ``N / 32`` bytes per query); otherwise from
      :func:`radius_search` with each query's k-th distance as its radius.
    chunk_size: database items per streamed step (rounded up to a multiple of
      256). Larger chunks mean fewer dispatches; memory per step is
      ``O(256 * chunk_size)`` bytes.

  Returns:
    ``(distances, indices)``, each ``int32[Q, k]``, sorted per row by
    (distance, index); with ``return_ties=True``, a :class:`RaggedNeighbors`
    ``(distances, indices, offsets)``.

  >>> import numpy as np
  >>> from hashjax.codes import pack_bits
  >>> x = pack_bits(np.array([[1, 1, 0], [0, 0, 0], [1, 0, 0], [0, 1, 0]]))
  >>> q = pack_bits(np.array([[1, 0, 0]]))
  >>> distances, indices = knn(q, x, 2)
  >>> distances.tolist(), indices.tolist()
  ([[0, 1]], [[2, 0]])
  >>> ties = knn(q, x, 2, return_ties=True)
  >>> ties.distances.tolist(), ties.indices.tolist(), ties.offsets.tolist()
  ([0, 1, 1], [2, 0, 1], [0, 3])
  """
  codes._check_pair(query_words, db_words)
  k = _check_k(k, db_words.shape[0])
  chunk_size = _check_chunk_size(chunk_size)
  if not isinstance(return_ties, (bool, np.bool_)):
    raise ValueError(f"return_ties: expected a bool, got {return_ties!r}")
  if return_ties and not (_checks.is_concrete(query_words) and _checks.is_concrete(db_words)):
    raise ValueError("return_ties: True needs concrete inputs (the number of ties varies, so it "
                     "cannot run under jit); call knn outside jit")
  q, db = _host_or_traced(query_words, db_words)
  segment = _segment_size(q.shape[1], chunk_size)
  if return_ties and db.shape[0] <= segment and \
      _plan(db.shape[0], q.shape[1], k, chunk_size) == "hierarchical":
    return _knn_hierarchical(q, db, k, chunk_size, 0, ties=True)
  # Segments keep every float32 key exact; their results merge by (distance, index).
  d = i = None
  for start in range(0, db.shape[0], segment):
    part = db[start:start + segment]
    d2, i2 = _knn_segment(q, part, min(k, part.shape[0]), chunk_size, offset=start)
    if d is None:
      d, i = d2, i2
    else:
      d, i = _merge_sorted(d, i, d2, i2, min(k, d.shape[1] + d2.shape[1]))
  d, i = _checks.as_jax(d), _checks.as_jax(i)
  if not return_ties:
    return d, i
  return radius_search(query_words, db_words, np.asarray(d[:, -1]), chunk_size=chunk_size)


# ----------------------------------------------------------------------------
# Radius search.


def _host_popcount(x: np.ndarray) -> np.ndarray:
  """``uint8`` popcount of each ``uint32`` entry of a numpy array."""
  if hasattr(np, "bitwise_count"):  # numpy >= 2.0
    return np.bitwise_count(x)
  table = np.array([bin(v).count("1") for v in range(256)], np.uint8)
  return table[np.ascontiguousarray(x).view(np.uint8)].reshape(x.shape + (4,)).sum(-1, dtype=np.uint8)


def _exact_hits(query_words, db_pad, pairs_q, pairs_grp, radius, num_db, group=_SB) -> RaggedNeighbors:
  """Items within ``radius[q]`` among candidate groups of ``group`` items, on the host.

  ``query_words[Q, W]`` and ``db_pad[>= N, W]`` (rows past ``num_db`` are
  padding) are numpy; ``(pairs_q, pairs_grp)`` list the (query, group)
  pairs to examine. Returns the :class:`RaggedNeighbors` of every query.
  """
  num_q, num_words = query_words.shape
  db_grp = db_pad[:db_pad.shape[0] // group * group].reshape(-1, group, num_words)
  out_q, out_i, out_d = [], [], []
  step = max(1, (1 << 22) // (group * num_words))
  for s in range(0, pairs_q.shape[0], step):
    pq, pg = pairs_q[s:s + step], pairs_grp[s:s + step]
    items = db_grp[pg]  # [P, group, W]
    dist = np.zeros(items.shape[:2], np.uint16)
    for w in range(num_words):
      dist += _host_popcount(items[:, :, w] ^ query_words[pq, w][:, None])
    # Blocks of 32 first (results are sparse), then the items of those blocks.
    r_pairs = radius[pq]
    sub = min(group, _BB)
    dist = dist.reshape(-1, group // sub, sub)
    blk_p, blk_j = np.nonzero(dist.min(axis=-1) <= r_pairs[:, None])
    dist = dist[blk_p, blk_j]  # [P', sub]
    hit_b, hit_j = np.nonzero(dist <= r_pairs[blk_p][:, None])
    ids = pg[blk_p[hit_b]].astype(np.int64) * group + blk_j[hit_b] * sub + hit_j
    real = ids < num_db  # not a padding item
    out_q.append(pq[blk_p[hit_b[real]]])
    out_i.append(ids[real])
    out_d.append(dist[hit_b[real], hit_j[real]])
  res_q = np.concatenate(out_q) if out_q else np.zeros((0,), np.int64)
  res_i = np.concatenate(out_i) if out_i else np.zeros((0,), np.int64)
  res_d = np.concatenate(out_d) if out_d else np.zeros((0,), np.int32)
  order = np.lexsort((res_i, res_d, res_q))
  offsets = np.zeros((num_q + 1,), np.int64)
  np.cumsum(np.bincount(res_q, minlength=num_q), out=offsets[1:])
  if offsets[-1] > np.iinfo(np.int32).max:
    raise ValueError(f"r: {offsets[-1]} results exceed the int32 offsets of RaggedNeighbors")
  return RaggedNeighbors(jax.device_put(res_d[order].astype(np.int32)),
                         jax.device_put(res_i[order].astype(np.int32)),
                         jax.device_put(offsets.astype(np.int32)))


def radius_search(query_words: Array, db_words: Array, r: Union[int, Array], *,
                  chunk_size: int = DEFAULT_CHUNK_SIZE) -> RaggedNeighbors:
  r"""Every database item within Hamming distance ``r`` of each query.

  .. math:: \mathcal{R}_r(q) = \{ i : d(q, i) \le r \}, \text{ ordered by } (d(q, i), i)

  Results are ordered per query by ascending distance, then ascending index
  (the order of :func:`knn`). The database is streamed in chunks; only the
  superblocks (256 consecutive items) whose minimum distance is within the
  radius are examined item by item, so the cost is one scan plus work
  proportional to the output. Needs concrete inputs (the output length
  varies, so it cannot run under ``jit``).

  Args:
    query_words: ``uint32[Q, W]`` packed query codes.
    db_words: ``uint32[N, W]`` packed database codes of the same width.
    r: the radius, a non-negative int, or ``int[Q]`` one radius per query.
    chunk_size: database items per streamed step (rounded up to a multiple of 256).

  Returns:
    A :class:`RaggedNeighbors` ``(distances, indices, offsets)``: query ``q``'s
    results are ``distances[offsets[q]:offsets[q+1]]`` and
    ``indices[offsets[q]:offsets[q+1]]``.

  >>> import numpy as np
  >>> from hashjax.codes import pack_bits
  >>> x = pack_bits(np.array([[1, 1, 0], [0, 0, 0], [1, 0, 0], [0, 1, 1]]))
  >>> q = pack_bits(np.array([[1, 0, 0], [1, 1, 1]]))
  >>> res = radius_search(q, x, 1)
  >>> res.distances.tolist(), res.indices.tolist(), res.offsets.tolist()
  ([0, 1, 1, 1, 1], [2, 0, 1, 0, 3], [0, 3, 5])
  """
  codes._check_pair(query_words, db_words)
  if not (_checks.is_concrete(query_words) and _checks.is_concrete(db_words)):
    raise ValueError("query_words, db_words: radius_search needs concrete arrays (it returns "
                     "variable-length results, so it cannot run under jit)")
  num_q, num_words = query_words.shape
  radius = np.minimum(_check_radius(r, num_q), 32 * num_words)
  chunk_size = _check_chunk_size(chunk_size)
  query_words, db_words = _host_or_traced(query_words, db_words)
  num_db = db_words.shape[0]
  num_bytes = 4 * num_words
  size, num_chunks, _ = _database_layout(num_db, chunk_size)
  db_pad = _pad_rows(db_words, size * num_chunks, fill_last=True)
  db_bytes = _as_bytes(db_pad)

  def chunks_of(filter_bytes):
    """The database's first ``filter_bytes`` code bytes, chunked for the kernel."""
    block = _kernel_block(filter_bytes)
    view = db_bytes if filter_bytes == num_bytes else \
        _pad_rows(db_bytes[:, :filter_bytes], db_bytes.shape[0], fill_last=False)
    view = view.reshape(num_chunks, size // block, block, filter_bytes)
    return [_checks.as_jax(chunk) for chunk in view], _SB // block

  def candidates(first_bytes, chunks, radii):
    """``uint8[NSB, L]``: 1 where a superblock's minimum over ``first_bytes`` is within the radii."""
    first_bytes, radii = _checks.as_jax(first_bytes), _checks.as_jax(radii)
    return np.concatenate([np.asarray(_superblock_hits(first_bytes, chunk, radii, group=chunks[1]))
                           for chunk in chunks[0]])

  lanes = _lanes(num_q)
  q_pad = _pad_rows(query_words, -(-num_q // lanes) * lanes, fill_last=False)
  q_bytes_t = _as_bytes(q_pad).T
  r_pad = np.zeros((q_pad.shape[0],), np.int32)
  r_pad[:num_q] = radius
  use_prefix = num_bytes > 4 and radius.max() <= _PREFIX_MAX_RADIUS
  prefix = chunks_of(4) if use_prefix else None
  full = None
  pairs_q, pairs_sb = [], []
  for b in range(0, q_pad.shape[0], lanes):
    hits = None
    if prefix is not None:
      # d(q, i) >= the distance over the first 32 bits: a superblock whose prefix
      # minimum exceeds r holds no result.
      hits = candidates(q_bytes_t[:4, b:b + lanes], prefix, np.minimum(r_pad[b:b + lanes], 32))
      if hits.mean() > _PREFIX_MAX_FRACTION:
        hits = None
    if hits is None:
      if full is None:
        full = chunks_of(num_bytes)
      hits = candidates(q_bytes_t[:, b:b + lanes], full, r_pad[b:b + lanes])
    sb, lane = np.nonzero(hits)
    keep = b + lane < num_q
    pairs_q.append(b + lane[keep])
    pairs_sb.append(sb[keep])
  pairs_q = np.concatenate(pairs_q)
  pairs_sb = np.concatenate(pairs_sb)
  return _exact_hits(query_words, db_pad, pairs_q, pairs_sb, radius, num_db)
