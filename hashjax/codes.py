"""Binary codes: bits <-> packed words, Hamming distances and their histograms.

Names used across hashjax:

* ``bits[..., num_bits]``: a code as ``{0, 1}``, ``bool`` or ``±1`` values;
* ``words[..., ceil(num_bits / 32)]``: the same code packed into ``uint32``;
  bit ``j`` sits in word ``j // 32`` at position ``j % 32`` (least significant
  first) and padding bits are 0, so two codes of the same length compare
  exactly;
* ``distances[Q, N]``: ``int32`` Hamming distances in ``[0, num_bits]``;
* ``hist[Q, num_bits + 1, V]``: for each query, how many database items of
  each affinity level ``v < V`` sit at each distance (the counting sort of He
  et al. 2018, Sec. 3.2, and Nair et al. 2012, Sec. 3.5.1).

Packed words cannot tell 30 bits from 32, so every function that needs the
code length takes ``num_bits=`` explicitly.
"""

from __future__ import annotations

import functools
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks

Array = jax.Array

#: Database items per step when histograms stream over the database.
DEFAULT_CHUNK_SIZE = 32768


def binarize(x: Array) -> Array:
  """Real-valued hash outputs to ``{0, 1}`` bits: ``bit = 1`` iff ``x > 0``.

  .. math:: b_j = [x_j > 0]

  Zero maps to 0 (never to a third value), so ``binarize`` of a ``±1`` code
  is its ``{0, 1}`` form. NaN maps to 0 too; feature checks upstream reject
  NaN before it gets here.

  Args:
    x: real-valued ``[..., num_bits]`` outputs of a hash mapping.

  Returns:
    ``uint8[..., num_bits]`` bits in ``{0, 1}``.

  >>> import jax.numpy as jnp
  >>> binarize(jnp.array([-0.5, 0.0, 2.0])).tolist()
  [0, 0, 1]
  """
  return (jnp.asarray(x) > 0).astype(jnp.uint8)


def _check_bits(name: str, bits) -> None:
  if not hasattr(bits, "dtype"):
    raise ValueError(f"{name}: expected an array of bits, got {type(bits).__name__}")
  dt = np.dtype(bits.dtype)
  if not (dt == np.bool_ or np.issubdtype(dt, np.number)):
    raise ValueError(f"{name}: expected bits as bool, {{0,1}} or ±1 numbers, got dtype {dt.name}")
  if bits.ndim < 1 or bits.shape[-1] == 0:
    raise ValueError(f"{name}: expected shape [..., num_bits] with num_bits >= 1, got {tuple(bits.shape)}")
  if _checks.is_concrete(bits) and dt != np.bool_ and bits.size:
    values = np.unique(np.asarray(bits))
    if not (set(values.tolist()) <= {0, 1} or set(values.tolist()) <= {-1, 1}):
      shown = values[:6].tolist()
      raise ValueError(
          f"{name}: expected bits in {{0, 1}} or in {{-1, +1}} (not a mix), got values {shown}"
          + (" ..." if values.size > 6 else ""))


@jax.jit
def _pack(bits: Array) -> Array:
  # bits[..., 32 W] (already padded): one compilation per word count, not per num_bits.
  on = (bits > 0).astype(jnp.uint32)
  on = on.reshape(on.shape[:-1] + (on.shape[-1] // 32, 32))
  shifts = jnp.arange(32, dtype=jnp.uint32)
  return jnp.sum(on << shifts, axis=-1, dtype=jnp.uint32)


def pack_bits(bits: Array) -> Array:
  """Packs ``bits[..., num_bits]`` into ``uint32`` words, least significant first.

  .. math:: w_i = \\sum_{j=0}^{31} b_{32 i + j} \\, 2^{j}

  Args:
    bits: ``[..., num_bits]`` codes as ``bool``, ``{0, 1}`` or ``±1`` (``+1`` is
      a set bit). A mix such as ``{-1, 0, 1}`` is rejected.

  Returns:
    ``uint32[..., ceil(num_bits / 32)]`` words; padding bits are 0.

  >>> import numpy as np
  >>> pack_bits(np.array([1, 0, 1, 1])).tolist()
  [13]
  >>> pack_bits(np.array([[1, -1, 1, 1]])).tolist()
  [[13]]
  """
  _check_bits("bits", bits)
  pad = _checks.num_words_for(bits.shape[-1]) * 32 - bits.shape[-1]
  if pad:
    xnp = np if isinstance(bits, np.ndarray) else jnp
    bits = xnp.pad(bits, [(0, 0)] * (bits.ndim - 1) + [(0, pad)])
  return _pack(bits)


@jax.jit
def _unpack(words: Array) -> Array:
  # All 32 W bits: one compilation per word count; callers slice to num_bits.
  shifts = jnp.arange(32, dtype=jnp.uint32)
  bits = (words[..., None] >> shifts) & jnp.uint32(1)
  return bits.reshape(words.shape[:-1] + (words.shape[-1] * 32,)).astype(jnp.uint8)


def unpack_bits(words: Array, num_bits: int) -> Array:
  """Inverse of :func:`pack_bits`: ``uint32[..., W]`` words to ``uint8`` bits.

  .. math:: b_j = \\lfloor w_{\\lfloor j/32 \\rfloor} / 2^{j \\bmod 32} \\rfloor \\bmod 2

  Args:
    words: ``uint32[..., ceil(num_bits / 32)]`` packed codes.
    num_bits: the code length; must match the number of words.

  Returns:
    ``uint8[..., num_bits]`` bits in ``{0, 1}``.

  >>> import numpy as np
  >>> unpack_bits(np.array([13], np.uint32), 4).tolist()
  [1, 0, 1, 1]
  """
  _checks.check_words("words", words)
  num_bits = _checks.check_num_bits(num_bits, words=words)
  return _unpack(words)[..., :num_bits]


def _check_pair(query_words, db_words):
  _checks.check_words("query_words", query_words, min_ndim=2)
  _checks.check_words("db_words", db_words, min_ndim=2)
  if query_words.ndim != 2 or db_words.ndim != 2:
    raise ValueError(
        "query_words, db_words: expected 2-D arrays [Q, W] and [N, W], got shapes "
        f"{tuple(query_words.shape)} and {tuple(db_words.shape)}")
  _checks.check_same_width("query_words", query_words, "db_words", db_words)
  _checks.check_nonempty("query_words", query_words, what="query")
  _checks.check_nonempty("db_words", db_words, what="database item")


@jax.jit
def _hamming(query_words: Array, db_words: Array) -> Array:
  x = jnp.bitwise_xor(query_words[:, None, :], db_words[None, :, :])
  return jnp.sum(jax.lax.population_count(x).astype(jnp.int32), axis=-1)


def hamming_distance(query_words: Array, db_words: Array) -> Array:
  """All-pairs Hamming distance between packed codes (XOR + popcount).

  .. math:: d(q, i) = \\sum_w \\mathrm{popcount}(q_w \\oplus x_{i,w})

  Args:
    query_words: ``uint32[Q, W]`` packed query codes.
    db_words: ``uint32[N, W]`` packed database codes of the same width.

  Returns:
    ``int32[Q, N]`` distances in ``[0, 32 W]``.

  >>> import numpy as np
  >>> q = pack_bits(np.array([[1, 0, 1, 1]]))
  >>> x = pack_bits(np.array([[1, 0, 1, 1], [0, 1, 0, 0]]))
  >>> hamming_distance(q, x).tolist()
  [[0, 4]]
  """
  _check_pair(query_words, db_words)
  return _hamming(jnp.asarray(query_words), jnp.asarray(db_words))


#: Elements of one ``[rows, step]`` block of keys in a streamed histogram. XLA:CPU
#: pays a page fault per fresh page of a large temporary, so the histograms
#: never build a ``[Q, N]`` intermediate: they stream blocks of about this size
#: (cache resident, reused every step) and scatter-add them into the counts.
_STEP_ELEMENTS = 1 << 16

#: Concrete inputs up to this many elements are padded to power-of-two shapes
#: before the jitted histogram, so many small calls of different sizes share a
#: handful of compilations (see _bucketed_distance_histogram for larger ones).
_BUCKET_ELEMENTS = 1 << 18


def _step_size(elements_per_item: int, n: int, cap: Optional[int] = None, *, fit: bool = True) -> int:
  """Items per streamed step: a power of two near ``_STEP_ELEMENTS / elements_per_item``.

  At most ``n`` when ``fit`` (the input is not padded), else at most the
  power of two above ``n`` (the input is padded to a multiple of the step).
  """
  step = max(8, _STEP_ELEMENTS // max(int(elements_per_item), 1))
  step = 1 << (step.bit_length() - 1)
  if cap is not None:
    step = min(step, int(cap))
  return max(1, min(step, int(n) if fit else _next_pow2(n)))


def _next_pow2(n: int) -> int:
  return 1 << max(int(n) - 1, 0).bit_length()


def _scatter_rows(total: Array, keys: Array, length: int) -> Array:
  """Adds one count per key: ``total[r, keys[r, j]] += 1`` for ``total[R, length + 1]``.

  Keys must lie in ``[0, length]``; callers send the items they drop to the
  spare last column ``length``. One flat scatter (row offsets folded into the
  index, no bounds checks) was the fastest variant measured on XLA:CPU (see
  experiments/benchmark_metrics.py).
  """
  rows = keys.shape[0]
  flat = keys + (jnp.arange(rows, dtype=jnp.int32) * (length + 1))[:, None]
  out = total.reshape(-1).at[flat.reshape(-1)].add(1, mode="promise_in_bounds")
  return out.reshape(rows, length + 1)


def _stream_blocks(num_valid, size: int, step: int, block_keys, total):
  """Scatter-adds ``block_keys(start, valid)`` over items ``[0, num_valid)`` in blocks of ``step``.

  ``block_keys(start, valid)`` returns the ``int32[R, step]`` keys of items
  ``start .. start + step - 1``; ``valid`` is ``None`` or a ``bool[step]``
  mask whose ``False`` items it must send to the spare column. Full blocks
  run unmasked in a loop; the last, partial block is shifted back to end
  inside ``size`` (the input length, ``>= step``) and masked, so no input
  needs padding.
  """
  length = total.shape[-1] - 1
  i32 = lambda x: jnp.asarray(x, jnp.int32)  # one index type, also under x64
  full = i32(num_valid) // step
  total = jax.lax.fori_loop(0, full, lambda i, t: _scatter_rows(t, block_keys(i32(i * step), None), length),
                            total)
  start = full * step
  s0 = jnp.minimum(start, size - step)
  idx = s0 + jnp.arange(step, dtype=jnp.int32)
  valid = (idx >= start) & (idx < num_valid)
  return _scatter_rows(total, block_keys(s0, valid), length)


#: Rows (queries) per tile of a streamed histogram: each tile streams long contiguous runs of
#: its rows into a few cache-resident histogram rows (2.3x faster than all rows at once).
_ROW_TILE = 8


def _row_tile(rows: int) -> int:
  return 1 << (min(int(rows), _ROW_TILE).bit_length() - 1)


def _over_row_tiles(rows: int, tile: int, tile_counts, width: int):
  """Stacks ``tile_counts(r0) -> int32[tile, width]`` for row tiles covering ``[0, rows)``.

  The last tile is shifted back to end at ``rows``; its overlap is recomputed
  to the same values, so nothing needs padding.
  """
  def body(t, out):
    r0 = jnp.minimum(jnp.asarray(t * tile, jnp.int32), rows - tile)
    return jax.lax.dynamic_update_slice(out, tile_counts(r0), (r0, jnp.int32(0)))

  return jax.lax.fori_loop(0, -(-rows // tile), body, jnp.zeros((rows, width), jnp.int32))


def _bin_counts(keys: Array, length: int) -> Array:
  """Counts of each key in ``[0, length)`` along the last axis; others dropped."""
  flat = keys.reshape(-1, keys.shape[-1])
  rows, n = flat.shape
  step = _step_size(rows, n)

  def block_keys(start, valid):
    k = jax.lax.dynamic_slice_in_dim(flat, start, step, 1).astype(jnp.int32)
    ok = (k >= 0) & (k < length)
    return jnp.where(ok if valid is None else ok & valid[None, :], k, length)

  counts = _stream_blocks(n, n, step, block_keys, jnp.zeros((rows, length + 1), jnp.int32))
  return counts[:, :length].reshape(keys.shape[:-1] + (length,))


@functools.partial(jax.jit, static_argnames=("num_bits", "num_levels"))
def _distance_histogram(distances, affinity, num_bits, num_levels, where=None):
  """Jitted core of :func:`distance_histogram`, streamed over the last axis.

  ``affinity`` (or ``None`` for level 0) and ``where`` (``None`` or a mask;
  ``False`` items are not counted) have the shape of ``distances`` or of its
  last axis only (``[N]``, shared by every row). Values must be in range.
  """
  n = distances.shape[-1]
  d = distances.reshape(-1, n)
  rows = d.shape[0]
  length = (num_bits + 1) * num_levels
  tile = _row_tile(rows)
  step = _step_size(tile, n)

  def tile_counts(r0):
    def piece(x, start):
      if x.ndim == 1:
        return jax.lax.dynamic_slice_in_dim(x, start, step, 0)[None, :]
      return jax.lax.dynamic_slice(x.reshape(-1, n), (r0, start), (tile, step))

    def block_keys(start, valid):
      key = piece(d, start).astype(jnp.int32) * num_levels
      if affinity is not None:
        key = key + piece(affinity, start).astype(jnp.int32)
      keep = None if valid is None else valid[None, :]
      if where is not None:
        keep = piece(where, start) if keep is None else keep & piece(where, start)
      return key if keep is None else jnp.where(keep, key, length)

    return _stream_blocks(n, n, step, block_keys, jnp.zeros((tile, length + 1), jnp.int32))

  counts = _over_row_tiles(rows, tile, tile_counts, length + 1)
  return counts[:, :length].reshape(distances.shape[:-1] + (num_bits + 1, num_levels))


#: Elements per host-to-device tile when a large numpy input is streamed.
_TILE_ELEMENTS = 1 << 20


def _bucketed_distance_histogram(distances, affinity, num_bits: int, num_levels: int, where=None):
  """:func:`_distance_histogram` of validated inputs, without needless copies or recompilations.

  * Small concrete inputs (``<= _BUCKET_ELEMENTS``) are padded to power-of-two
    shapes (padding columns masked out, padding rows dropped), so new sizes
    rarely recompile.
  * Large numpy inputs are sent to the device in row tiles of about ``2^20``
    elements (one compilation per ``N``): one giant host-to-device copy cost
    more than the histogram itself on XLA:CPU (page faults on a fresh buffer).
  * Large device arrays and traced values go to the jitted core unchanged
    (one compilation per shape, no copy).
  """
  shape = distances.shape
  n = shape[-1]
  rows = int(np.prod(shape[:-1], dtype=np.int64))
  inputs = [x for x in (distances, affinity, where) if x is not None]
  concrete = all(_checks.is_concrete(x) for x in inputs)
  on_host = concrete and any(isinstance(x, np.ndarray) for x in inputs)
  small = rows * n <= _BUCKET_ELEMENTS
  if not concrete or distances.ndim < 1 or not (small or on_host):
    return _distance_histogram(jnp.asarray(distances), None if affinity is None else jnp.asarray(affinity),
                               num_bits, num_levels, None if where is None else jnp.asarray(where))
  shared = lambda x: x is not None and x.ndim == 1 and len(shape) != 1  # one [N] row for all
  as_rows = lambda x: None if x is None or shared(x) else np.asarray(x).reshape(rows, n)
  d_rows, a_rows, w_rows = as_rows(distances), as_rows(affinity), as_rows(where)
  if small:
    tile, n_p = _next_pow2(max(rows, 1)), max(_next_pow2(n), 8)
  else:
    tile, n_p = 1 << max((_TILE_ELEMENTS // n).bit_length() - 1, 0), n
    tile = min(tile, _next_pow2(rows))
  shared_aff = jnp.asarray(np.pad(np.asarray(affinity), (0, n_p - n))) if shared(affinity) else None
  if where is None:
    shared_w = None if n_p == n else jnp.asarray(np.arange(n_p) < n)
  else:
    shared_w = jnp.asarray(np.pad(np.asarray(where), (0, n_p - n))) if shared(where) else None

  def block(x, r0, fill):
    part = x[r0:r0 + tile]
    if part.shape != (tile, n_p):  # fresh padded copy (never mutate what was sent)
      part = np.pad(part, ((0, tile - part.shape[0]), (0, n_p - n)), constant_values=fill)
    return jax.device_put(part)

  hists = []
  for r0 in range(0, rows, tile):
    aff = shared_aff if a_rows is None else block(a_rows, r0, 0)
    w = shared_w if w_rows is None else block(w_rows, r0, False)
    hists.append(_distance_histogram(block(d_rows, r0, 0), aff, num_bits, num_levels, w))
  hist = hists[0] if len(hists) == 1 else jnp.concatenate(hists)
  hist = jax.block_until_ready(hist[:rows])  # host buffers may be read until the copies finish
  return hist.reshape(shape[:-1] + (num_bits + 1, num_levels))


def _levels(affinity, num_levels, name="affinity"):
  if num_levels is None:
    if not _checks.is_concrete(affinity):
      raise ValueError(f"num_levels: must be given when {name} is traced (under jit/vmap)")
    num_levels = max(int(np.asarray(affinity).max(initial=0)) + 1, 2)
  if isinstance(num_levels, bool) or not isinstance(num_levels, (int, np.integer)) or num_levels < 1:
    raise ValueError(f"num_levels: expected a positive int, got {num_levels!r}")
  _checks.check_int_range(name, affinity, 0, int(num_levels) - 1, what="affinity levels")
  return int(num_levels)


def distance_histogram(distances: Array, affinity: Optional[Array] = None, *,
                       num_bits: int, num_levels: Optional[int] = None) -> Array:
  """Counting sort of integer distances, per affinity level.

  .. math:: n_{d,v} = |\\{ i : d_i = d, a_i = v \\}|

  Streams over the last axis in cache-sized blocks (scatter-add), so the cost
  is ``O(N)`` per row with no ``[..., N]`` temporary; small inputs are padded
  to power-of-two shapes so that new sizes rarely recompile.

  Args:
    distances: ``int[..., N]`` distances in ``[0, num_bits]``.
    affinity: optional ``int[..., N]`` levels in ``[0, num_levels)``; ``None``
      counts every item at level 0.
    num_bits: the code length ``b``.
    num_levels: ``V``; inferred as ``max(affinity) + 1`` (at least 2) when
      ``affinity`` is concrete and this is ``None``.

  Returns:
    ``int32[..., num_bits + 1, V]`` counts (``V = 1`` when ``affinity`` is None).

  >>> import numpy as np
  >>> h = distance_histogram(np.array([0, 2, 2]), np.array([1, 0, 1]), num_bits=2)
  >>> h.tolist()
  [[0, 1], [0, 0], [1, 1]]
  """
  num_bits = _checks.check_num_bits(num_bits)
  _checks.check_int_range("distances", distances, 0, num_bits, what="distances")
  if distances.ndim < 1:
    raise ValueError(f"distances: expected shape [..., N], got a scalar")
  if affinity is None:
    num_levels = 1
  else:
    _checks.check_shape("affinity", affinity, distances.shape, like="distances")
    num_levels = _levels(affinity, num_levels)
  return _bucketed_distance_histogram(distances, affinity, num_bits, num_levels)


@functools.partial(jax.jit, static_argnames=("num_bits", "num_levels", "step"))
def _stream_hamming(query_words, db_words, num_valid, affinity, query_labels, db_labels, *,
                    num_bits, num_levels, step):
  """Histogram of ``d(q, i) * num_levels + level(q, i)``, streamed over ``db_words``.

  Fuses XOR/popcount with the scatter-add: for a tile of a few queries, each
  step computes a ``[tile, step]`` block of distances in cache and counts it;
  the ``[Q, N]`` distance matrix never exists. Items at or after ``num_valid`` (a traced
  scalar, so padded databases of one capacity share a compilation) are
  dropped. The level is ``affinity[q, i]``, or ``[query_labels[q] ==
  db_labels[i]]`` (then ``num_levels = 2``), or 0.
  """
  q = query_words.shape[0]
  length = (num_bits + 1) * num_levels
  tile = _row_tile(q)

  def tile_counts(r0):
    qw = jax.lax.dynamic_slice_in_dim(query_words, r0, tile, 0)
    ql = None if query_labels is None else jax.lax.dynamic_slice_in_dim(query_labels, r0, tile, 0)

    def block_keys(start, valid):
      blk = jax.lax.dynamic_slice_in_dim(db_words, start, step, 0)
      # Words summed with explicit adds (a size-W reduce fused badly on XLA:CPU).
      d = sum(jax.lax.population_count(qw[:, w, None] ^ blk[None, :, w]).astype(jnp.int32)
              for w in range(qw.shape[-1]))
      key = d * num_levels
      if affinity is not None:
        key = key + jax.lax.dynamic_slice(affinity, (r0, start), (tile, step)).astype(jnp.int32)
      elif db_labels is not None:
        lab = jax.lax.dynamic_slice_in_dim(db_labels, start, step, 0)
        key = key + (ql[:, None] == lab[None, :]).astype(jnp.int32)
      return key if valid is None else jnp.where(valid[None, :], key, length)

    return _stream_blocks(num_valid, db_words.shape[0], step, block_keys,
                          jnp.zeros((tile, length + 1), jnp.int32))

  total = _over_row_tiles(q, tile, tile_counts, length + 1)
  return total[:, :length].reshape(q, num_bits + 1, num_levels)


def _stream_hamming_bucketed(query_words, db_words, *, num_bits: int, num_levels: int,
                             chunk_size: Optional[int] = None, affinity=None, query_labels=None,
                             db_labels=None):
  """Calls :func:`_stream_hamming` with the database padded to a power-of-two capacity.

  Without an ``affinity`` matrix only ``db_words`` (and ``db_labels``) are
  padded, which is cheap, so every ``N`` in ``(C/2, C]`` shares one
  compilation. An ``affinity[Q, N]`` matrix is not copied: that path compiles
  per ``N``.
  """
  n = db_words.shape[0]
  padded = affinity is None and _checks.is_concrete(db_words) and (db_labels is None or
                                                                   _checks.is_concrete(db_labels))
  step = _step_size(_row_tile(query_words.shape[0]) * query_words.shape[-1], n, chunk_size, fit=not padded)
  if padded:
    cap = step * _next_pow2(-(-n // step))
    if cap > n:
      db_words = np.pad(np.asarray(db_words), ((0, cap - n), (0, 0)))
      if db_labels is not None:
        db_labels = np.pad(np.asarray(db_labels), (0, cap - n))
  as_j = lambda x: None if x is None else jnp.asarray(x)
  return _stream_hamming(jnp.asarray(query_words), jnp.asarray(db_words), jnp.int32(n), as_j(affinity),
                         as_j(query_labels), as_j(db_labels), num_bits=num_bits, num_levels=num_levels,
                         step=step)


def _hamming_histogram(query_words, db_words, affinity, num_bits, num_levels, chunk_size):
  """Streamed Hamming histogram (see :func:`_stream_hamming`); ``affinity`` may be None."""
  return _stream_hamming_bucketed(query_words, db_words, num_bits=num_bits, num_levels=num_levels,
                                  chunk_size=chunk_size, affinity=affinity)


def hamming_histogram(query_words: Array, db_words: Array, affinity: Optional[Array] = None, *,
                      num_bits: int, num_levels: Optional[int] = None,
                      chunk_size: int = DEFAULT_CHUNK_SIZE) -> Array:
  """Per-query histogram of Hamming distances, streamed over database chunks.

  Never materialises the ``[Q, N]`` distance matrix: each step computes the
  distances of a cache-sized block of database items (XOR + popcount) and
  scatter-adds them into the counts, so memory is ``O(Q * step)`` beside the
  inputs and ``N = 10^7`` fits.

  .. math:: n_{q,d,v} = |\\{ i : d(q, i) = d, a_{q,i} = v \\}|

  Args:
    query_words: ``uint32[Q, W]`` packed queries.
    db_words: ``uint32[N, W]`` packed database codes.
    affinity: optional ``int[Q, N]`` levels in ``[0, num_levels)``.
    num_bits: the code length; must match ``W``.
    num_levels: ``V`` (see :func:`distance_histogram`).
    chunk_size: at most this many database items per streamed step (the
      step is also capped near ``2^16 / (Q W)`` items to stay in cache).

  Returns:
    ``int32[Q, num_bits + 1, V]`` counts.

  >>> import numpy as np
  >>> q = pack_bits(np.array([[1, 1]]))
  >>> x = pack_bits(np.array([[1, 1], [0, 1], [0, 0]]))
  >>> hamming_histogram(q, x, np.array([[1, 1, 0]]), num_bits=2).tolist()
  [[[0, 1], [0, 1], [1, 0]]]
  """
  _check_pair(query_words, db_words)
  num_bits = _checks.check_num_bits(num_bits, words=query_words, words_name="query_words")
  if affinity is None:
    num_levels = 1
  else:
    _checks.check_shape("affinity", affinity, (query_words.shape[0], db_words.shape[0]),
                        like="[len(query_words), len(db_words)]")
    num_levels = _levels(affinity, num_levels)
  if isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
    raise ValueError(f"chunk_size: expected a positive int, got {chunk_size!r}")
  return _hamming_histogram(query_words, db_words, affinity, num_bits, num_levels, int(chunk_size))


def weighted_hamming_distance(query_bits: Array, db_bits: Array, weights: Array) -> Array:
  """Weighted Hamming distance: the weights of the bits where two codes differ.

  .. math:: d_w(q, i) = \\sum_k w_k \\, [q_k \\ne x_{i,k}]

  Computed as a matrix product, ``sum(w q) + sum(w x) - 2 (w q) x^T`` over
  ``{0, 1}`` bits, so it costs one ``[Q, b] x [b, N]`` matmul.

  Args:
    query_bits: ``[Q, num_bits]`` bits (``{0,1}``, ``bool`` or ``±1``).
    db_bits: ``[N, num_bits]`` bits.
    weights: ``float[num_bits]`` shared weights, or ``float[Q, num_bits]``
      per-query weights (query-adaptive schemes such as WhRank).

  Returns:
    ``float32[Q, N]`` distances.

  >>> import numpy as np
  >>> weighted_hamming_distance(np.array([[1, 0, 1]]), np.array([[0, 0, 0]]),
  ...                           np.array([0.5, 2.0, 1.0])).tolist()
  [[1.5]]
  """
  _check_bits("query_bits", query_bits)
  _check_bits("db_bits", db_bits)
  if query_bits.ndim != 2 or db_bits.ndim != 2:
    raise ValueError("query_bits, db_bits: expected 2-D arrays [Q, num_bits] and [N, num_bits], got "
                     f"shapes {tuple(query_bits.shape)} and {tuple(db_bits.shape)}")
  num_bits = query_bits.shape[-1]
  if db_bits.shape[-1] != num_bits:
    raise ValueError(f"db_bits: expected {num_bits} bits per code like query_bits, got {db_bits.shape[-1]}")
  _checks.check_finite("weights", weights)
  if weights.shape not in ((num_bits,), (query_bits.shape[0], num_bits)):
    raise ValueError(f"weights: expected shape ({num_bits},) or ({query_bits.shape[0]}, {num_bits}), "
                     f"got {tuple(weights.shape)}")
  return _weighted_hamming(jnp.asarray(query_bits), jnp.asarray(db_bits), jnp.asarray(weights))


@jax.jit
def _weighted_hamming(query_bits, db_bits, weights):
  q = (query_bits > 0).astype(jnp.float32)
  x = (db_bits > 0).astype(jnp.float32)
  w = jnp.broadcast_to(weights.astype(jnp.float32), q.shape)
  wq = w * q
  return (jnp.sum(wq, -1, keepdims=True) + w @ x.T - 2.0 * wq @ x.T)
