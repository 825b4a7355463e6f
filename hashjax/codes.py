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
from typing import NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks
from hashjax import _compile

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
  return _hamming(_checks.as_jax(query_words), _checks.as_jax(db_words))


#: Elements of one ``[tile, step]`` block of keys in a streamed histogram of
#: distances (:func:`_blocking`; the codes path has :data:`_STEP_WORDS`). XLA:CPU
#: pays a page fault per fresh page of a large temporary, so the histograms
#: never build a ``[Q, N]`` intermediate: they stream blocks of about this size
#: (cache resident, reused every step) and scatter-add them into the counts.
_STEP_ELEMENTS = 1 << 16

#: Concrete inputs up to this many elements are padded to power-of-two shapes
#: before the jitted histogram, so many small calls of different sizes share a
#: handful of compilations (see _bucketed_distance_histogram for larger ones).
_BUCKET_ELEMENTS = 1 << 18


#: Database words per streamed step of the codes scatter-add (one query against a block of this
#: many words at a time). One query per step ran 2 to 3x faster than 8 (1.0 to 1.4 against 2.8 to
#: 3.5 ns per pair, 32 bits), and blocks of 2^15 words ran fastest, ahead of 2^11, 2^13 and 2^17
#: (development measurements, one process).
_STEP_WORDS = 1 << 15


def _step_size(num_words: int, n: int, cap: Optional[int] = None, *, fit: bool = True) -> int:
  """Database items per streamed step: a power of two near ``_STEP_WORDS / num_words``, or ``cap``.

  At most ``cap`` (any size), and at most ``n`` when ``fit`` (the input is not
  padded), else at most the power of two above ``n`` (the input is padded to a
  multiple of the step).
  """
  step = max(8, _STEP_WORDS // max(int(num_words), 1))
  step = 1 << (step.bit_length() - 1)
  if cap is not None:
    step = min(step, int(cap))
  return max(1, min(step, int(n) if fit else _next_pow2(n)))


def _next_pow2(n: int) -> int:
  return 1 << max(int(n) - 1, 0).bit_length()


_COUNT_DIMS = jax.lax.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
                                              scatter_dims_to_operand_dims=(0,))


def _count_blocks(block_keys, *, rows: int, items: int, tile: int, step: int, length: int,
                  num_valid=None, dropping: bool = False) -> Array:
  """``int32[rows, length]`` counts of the keys ``block_keys`` returns, over every row tile and item block.

  ``block_keys(r0, c0)`` returns ``(keys, keep)``: the ``int32[tile, step]``
  keys in ``[0, length)`` of rows ``r0 ..`` and items ``c0 ..``, and ``None``
  or a ``bool`` mask of the items to count (only if ``dropping``). One loop
  over (row tile, item block) pairs scatter-adds them straight into the
  counts (one flat scatter, row offsets folded into the keys, no bounds
  checks: the fastest variant measured on XLA:CPU). The last tile and block
  are shifted back to end at ``rows`` and ``items`` (``>= tile``, ``>=
  step``), so no input needs padding; the rows and items they repeat, items
  at or past ``num_valid`` (``None`` or a traced ``int32``) and dropped ones
  go to a spare column, which exists only when something can be dropped.
  This is few XLA kernels, and their number is what compilation costs (20 to
  30 ms each with XLA:CPU's fusion emitters): a loop over row tiles around a
  loop over blocks with a masked last block compiled a ``[1000, 10^5]``
  histogram in 0.47 to 0.69 s against 0.19 to 0.33 s (``lower().compile()``,
  both in one process), and ran no faster.
  """
  i32 = np.int32
  ragged_rows, ragged_items = rows % tile != 0, items % step != 0
  masked = ragged_rows or ragged_items or num_valid is not None or dropping
  width = length + masked
  if rows * width >= 1 << 31:  # the flat int32 keys would wrap
    raise ValueError(f"distances or query_words: expected fewer than 2^31 histogram counts per call "
                     f"(rows x (num_bits + 1) x levels), got {rows} x {width}; split the rows into several calls")
  lax = jax.lax
  if num_valid is None:
    blocks = i32(-(-items // step))
  else:
    blocks = lax.div(lax.add(_int32(num_valid), i32(step - 1)), i32(step))
  row = lax.broadcasted_iota(i32, (tile, 1), 0)
  col = lax.broadcasted_iota(i32, (1, step), 1)

  def body(i, total):
    r_start = lax.mul(lax.div(i, blocks), i32(tile))
    c_start = lax.mul(lax.rem(i, blocks), i32(step))
    r0, c0 = lax.min(r_start, i32(rows - tile)), lax.min(c_start, i32(items - step))
    key, keep = block_keys(r0, c0)
    assert keep is None or dropping, "block_keys returned a mask: pass dropping=True"
    conds = [] if keep is None else [keep]
    at_least = lambda x, lo: _spread(lax.ge(x, _spread(lo, x.shape)), key.shape)
    if ragged_rows:  # rows the last tile repeats
      conds.append(at_least(row, lax.sub(r_start, r0)))
    if ragged_items:  # items the last block repeats
      conds.append(at_least(col, lax.sub(c_start, c0)))
    if num_valid is not None:
      conds.append(lax.bitwise_not(at_least(col, lax.sub(_int32(num_valid), c0))))
    if conds:
      key = lax.select(functools.reduce(lax.bitwise_and, conds), key, _spread(i32(length), key.shape))
    key = lax.add(key, _spread(lax.mul(lax.add(row, _spread(r0, row.shape)), _spread(i32(width), row.shape)),
                               key.shape))
    return lax.scatter_add(total, lax.reshape(key, (key.size, 1)), _spread(i32(1), (key.size,)), _COUNT_DIMS,
                           indices_are_sorted=False, unique_indices=False,
                           mode=lax.GatherScatterMode.PROMISE_IN_BOUNDS)

  trips = lax.mul(i32(-(-rows // tile)), blocks)
  total = lax.reshape(lax.fori_loop(i32(0), trips, body, _spread(i32(0), (rows * width,))), (rows, width))
  return lax.slice(total, (0, 0), (rows, length)) if masked else total


def _spread(x, shape):
  """``x`` (a scalar, or an array whose axes are 1 or as in ``shape``) broadcast to ``shape``.

  In ``lax`` terms: each ``jax.numpy`` operator traces a nested jit, which
  made tracing and lowering a large part of a small program's compilation.
  """
  return jax.lax.broadcast_in_dim(x, shape, tuple(range(np.ndim(x))))


def _int32(x):
  """``x`` as ``int32`` (``lax``: no nested jit), the one index and key type, also under x64."""
  return jax.lax.convert_element_type(x, np.int32)


def _blocking(rows: int, n: int) -> Tuple[int, int]:
  """``(tile, step)`` of a streamed ``[rows, n]`` histogram: blocks of about ``_STEP_ELEMENTS`` elements.

  Long rows are cut into equal blocks of one row each (a long contiguous run
  into one cache-resident histogram row); short rows go whole, several at a
  time. Requires ``rows, n >= 1``.
  """
  if n >= _STEP_ELEMENTS // 2:
    return 1, -(-n // -(-n // _STEP_ELEMENTS))
  cap = max(1, _STEP_ELEMENTS // n)
  return -(-rows // -(-rows // cap)), n  # balanced: the shifted last tile repeats few rows


@functools.partial(jax.jit, static_argnames=("num_bits", "num_levels"))
def _distance_histogram(distances, affinity, num_bits, num_levels, where=None, num_valid=None):
  """Jitted core of :func:`distance_histogram`, streamed over the last axis.

  ``affinity`` (or ``None`` for level 0) and ``where`` (``None`` or a mask;
  ``False`` items are not counted) have the shape of ``distances`` or of its
  last axis only (``[N]``, shared by every row). Values must be in range.
  With ``num_valid`` (a traced ``int32``), only the first ``num_valid`` items
  of each row count: the rest is padding, and the blocks holding only padding
  are not visited.
  """
  n = distances.shape[-1]
  rows = int(np.prod(distances.shape[:-1], dtype=np.int64))
  if rows == 0 or n == 0:  # nothing to count
    return jax.lax.full(distances.shape[:-1] + (num_bits + 1, num_levels), 0, np.int32)
  tile, step = _blocking(rows, n)

  def piece(x, r0, c0):
    if x.ndim == 1:
      return jax.lax.broadcast_in_dim(jax.lax.dynamic_slice(x, (c0,), (step,)), (tile, step), (1,))
    return jax.lax.dynamic_slice(jax.lax.reshape(x, (rows, n)), (r0, c0), (tile, step))

  def block_keys(r0, c0):
    key = jax.lax.mul(_int32(piece(distances, r0, c0)), _spread(np.int32(num_levels), (tile, step)))
    if affinity is not None:
      key = jax.lax.add(key, _int32(piece(affinity, r0, c0)))
    return key, None if where is None else piece(where, r0, c0)

  counts = _count_blocks(block_keys, rows=rows, items=n, tile=tile, step=step,
                         length=(num_bits + 1) * num_levels, num_valid=num_valid, dropping=where is not None)
  return counts.reshape(distances.shape[:-1] + (num_bits + 1, num_levels))


#: Elements per host-to-device tile when a large numpy input is streamed.
_TILE_ELEMENTS = 1 << 20


def _bucketed_distance_histogram(distances, affinity, num_bits: int, num_levels: int, where=None):
  """:func:`_distance_histogram` of validated inputs, without needless copies or recompilations.

  * Small concrete inputs (``<= _BUCKET_ELEMENTS`` elements) are padded to
    power-of-two shapes, so new sizes rarely recompile.
  * Larger numpy inputs go to the device in row tiles of about ``2^20``
    elements (one compilation per ``N``): one giant host-to-device copy cost
    more than the histogram itself on XLA:CPU (page faults on a fresh
    buffer). Their rows are not padded to a bucket of ``N``: the padded
    copies made the histogram of ``1,000 x 10^5`` distances 1.3x (int32) to
    1.65x (uint8) slower, against 0.13 to 0.26 s of compilation per new ``N``.
  * Padding items are left out by the kernel (``num_valid``), padding rows
    dropped; the tiles' histograms are joined on the host (slicing or joining
    jax arrays compiled a small program per shape).
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
  if not concrete or distances.ndim < 1 or rows == 0 or n == 0 or not (small or on_host):
    return _distance_histogram(_checks.as_jax(distances), _checks.as_jax(affinity), num_bits, num_levels,
                               _checks.as_jax(where))
  shared = lambda x: x is not None and x.ndim == 1 and len(shape) != 1  # one [N] row for all
  as_rows = lambda x: None if x is None or shared(x) else np.asarray(x).reshape(rows, n)
  d_rows, a_rows, w_rows = as_rows(distances), as_rows(affinity), as_rows(where)
  if small:
    tile, n_p = _next_pow2(max(rows, 1)), max(_next_pow2(n), 8)
  else:
    n_p = n
    tile = min(1 << max((_TILE_ELEMENTS // n).bit_length() - 1, 0), _next_pow2(rows))
  pad_row = lambda x: _checks.as_jax(np.pad(np.asarray(x), (0, n_p - n)))
  shared_aff = pad_row(affinity) if shared(affinity) else None
  shared_w = pad_row(where) if shared(where) else None
  num_valid = None if n_p == n else np.int32(n)

  def block(x, r0):
    part = x[r0:r0 + tile]
    if part.shape != (tile, n_p):  # a fresh padded copy (never mutate what was sent)
      padded = np.zeros((tile, n_p), part.dtype)
      padded[:part.shape[0], :n] = part
      part = padded
    return jax.device_put(part)

  hists = []
  for r0 in range(0, rows, tile):
    aff = shared_aff if a_rows is None else block(a_rows, r0)
    w = shared_w if w_rows is None else block(w_rows, r0)
    hists.append(_distance_histogram(block(d_rows, r0), aff, num_bits, num_levels, w, num_valid))
  hist = np.concatenate([np.asarray(h) for h in hists])[:rows]  # waits for the copies from host buffers
  return _checks.as_jax(hist.reshape(shape[:-1] + (num_bits + 1, num_levels)))


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
    raise ValueError("distances: expected shape [..., N], got a scalar")
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

  Fuses XOR/popcount with the scatter-add: each step computes the distances
  of one query to a block of ``step`` items in cache and counts them; the
  ``[Q, N]`` distance matrix never exists. Items at or after ``num_valid`` (a traced
  scalar, so padded databases of one capacity share a compilation) are
  dropped. The level is ``affinity[q, i]``, or ``[query_labels[q] ==
  db_labels[i]]`` (then ``num_levels = 2``), or 0.
  """
  q, num_words = query_words.shape
  shape = (1, step)

  def block_keys(r0, c0):
    qw = jax.lax.dynamic_slice(query_words, (r0, np.int32(0)), (1, num_words))
    blk = jax.lax.dynamic_slice(db_words, (c0, np.int32(0)), (step, num_words))
    # Words summed with explicit adds (a size-W reduce fused badly on XLA:CPU).
    word = lambda x, w: jax.lax.index_in_dim(x, w, 1, False)
    d = functools.reduce(jax.lax.add, [
        _int32(jax.lax.population_count(jax.lax.bitwise_xor(
            jax.lax.broadcast_in_dim(word(qw, w), shape, (0,)), jax.lax.broadcast_in_dim(word(blk, w), shape, (1,)))))
        for w in range(num_words)])
    key = jax.lax.mul(d, _spread(np.int32(num_levels), shape))
    if affinity is not None:
      key = jax.lax.add(key, _int32(jax.lax.dynamic_slice(affinity, (r0, c0), shape)))
    elif db_labels is not None:
      # Labels may come in two integer dtypes (validated to int32's range): compared as int32.
      ql = _int32(jax.lax.dynamic_slice(query_labels, (r0,), (1,)))
      lab = _int32(jax.lax.dynamic_slice(db_labels, (c0,), (step,)))
      key = jax.lax.add(key, _int32(jax.lax.eq(jax.lax.broadcast_in_dim(ql, shape, (0,)),
                                               jax.lax.broadcast_in_dim(lab, shape, (1,)))))
    return key, None

  counts = _count_blocks(block_keys, rows=q, items=db_words.shape[0], tile=1, step=step,
                         length=(num_bits + 1) * num_levels, num_valid=num_valid)
  return counts.reshape(q, num_bits + 1, num_levels)


# ---------------------------------------------------------------------------
# Bit-sliced counting: the histogram as pure bitwise work, no scatter.

#: Codes up to this many bits can use the bit-sliced kernel (longer ones: the scatter-add). Its
#: earlier version, one unrolled program per code length, already beat the scatter-add at 128 bits
#: (5.2 against 8.2 ns per pair); the present one counted 1,000 queries x 100,000 labelled items
#: of 128 bits in 0.15 to 0.18 s, against 0.03 to 0.05 s at 32 bits (development measurements).
_SLICED_MAX_BITS = 128

#: Below this many (query, item) pairs the streamed scatter-add is used: at such sizes compilation,
#: not counting, is what a call costs, and its one program (shapes bucketed by powers of two) is
#: shared by more shapes than the bit-sliced path's (the kernel per block shape, the bit planes
#: per code length).
_SLICED_MIN_PAIRS = 1 << 22

#: With labels, the database is laid out in class segments (:func:`_class_layout`) of this many
#: plane words (512 items). The kernel counts along all words and attributes each word to the
#: class of its segment, so the length sets only the padding (less than a segment per class).
#: A fixed length makes the number of segments the only shape, bucketed like the words.
_SEGMENT_WORDS = 8

#: The labelled kernel is used while its class segments hold at most this many times the plane
#: words of the unlabelled layout (the work grows with them; the scatter-add costs about 3.5x the
#: bit-sliced kernel per pair); otherwise (many small classes) the streamed scatter-add counts.
_SEGMENT_MAX_GROWTH = 3

#: Items per bit-plane word: ``uint64`` words (the kernel runs with x64 enabled). Popcounts are
#: most of the kernel's work and AVX2 has no vector popcount instruction; with 64-bit words the
#: kernel measured 23% faster than with ``uint32`` words (0.093 s against 0.121 s, same run).
_PLANE_ITEMS = 64


def _round_words(m: int, min_step: int = 1) -> int:
  """``m`` plane words rounded up to one of 16 sizes per octave (steps of at least ``min_step``)."""
  m = int(m)
  step = max(min_step, 1 << max(m.bit_length() - 5, 0))
  return -(-m // step) * step


def _sliced_num_words(n: int) -> int:
  """Words per bit plane for ``n`` items: ``ceil(n / 64)`` rounded up to one of 16 sizes per octave.

  New database sizes mostly share a compilation, at most 1/16 of the work is padding.
  """
  return _off_power_of_two(_round_words(-(-int(n) // _PLANE_ITEMS), 8), 8)


def _off_power_of_two(words: int, step: int) -> int:
  """``words``, plus ``step`` if it is a multiple of 256: planes ``2 KB * 2^i`` apart map to the same
  cache sets, and the kernel, which reads 16 planes at once, ran 1.3x to 1.5x slower at 2,048
  words than at 1,600 or 2,040 (0.64 against 0.45 ns per pair at 32 bits, 1.73 against 1.30 at 64;
  256 queries x 1,310,720 items, development measurements)."""
  return words + step if words % 256 == 0 else words


# The adders below use lax's bitwise primitives on arrays of one shape: jax.numpy's operators
# would each trace a nested jit, which made tracing and lowering the kernel twice as slow.
_xor, _and, _or, _not = jax.lax.bitwise_xor, jax.lax.bitwise_and, jax.lax.bitwise_or, jax.lax.bitwise_not


def _bitsliced_sum(planes: list) -> list:
  """Bit-sliced sum of 1-bit planes by carry-save adders: the planes of the sum, LSB first.

  Each plane holds one bit of each item of a word (64 items per ``uint64``); the
  result has ``bit_length(len(planes))`` planes, plane ``k`` holding bit ``k`` of
  each item's count.
  """
  columns = [list(planes)]
  w = 0
  while w < len(columns):
    col = columns[w]
    while len(col) > 1:
      if len(col) >= 3:  # full adder: 3 bits of weight 2^w -> sum (2^w) + carry (2^(w+1))
        a, b, c = col[:3]
        del col[:3]
        t = _xor(a, b)
        col.append(_xor(t, c))
        carry = _or(_and(a, b), _and(t, c))
      else:  # half adder
        a, b = col
        del col[:2]
        col.append(_xor(a, b))
        carry = _and(a, b)
      if w + 1 == len(columns):
        columns.append([])
      columns[w + 1].append(carry)
    w += 1
  return [col[0] for col in columns]


def _ripple_add(a: list, b: list) -> list:
  """Bit-sliced sum of two numbers of ``len(a) == len(b)`` planes (LSB first), modulo ``2^len(a)``."""
  out, carry = [], None
  for x, y in zip(a, b):
    t = _xor(x, y)
    out.append(t if carry is None else _xor(t, carry))
    carry = _and(x, y) if carry is None else _or(_and(x, y), _and(t, carry))
  return out


def _value_masks(planes: list, count: int) -> list:
  """``masks[v]``: the items whose bit-sliced value (``planes``, LSB first) equals ``v``, ``v < count``.

  A decoding tree: each mask is one AND of a shared partial mask.
  """
  masks = {0: None}
  for j, p in enumerate(planes):
    grown, off = {}, _not(p)
    for v, m in masks.items():
      grown[v] = off if m is None else _and(m, off)
      if v | (1 << j) < count:
        grown[v | (1 << j)] = p if m is None else _and(m, p)
    masks = grown
  return [masks[v] for v in range(count)]


def _pack_planes(bits):
  """``bits[..., 64 M]`` to ``uint64[..., M]``: item ``64 m + k`` at bit ``k`` of word ``m`` (x64 mode)."""
  b = bits.reshape(bits.shape[:-1] + (-1, _PLANE_ITEMS)).astype(jnp.uint64)
  return jnp.sum(b << jnp.arange(_PLANE_ITEMS, dtype=jnp.uint64), axis=-1, dtype=jnp.uint64)


#: Plane words (64 items each) per call of :func:`_bit_planes`. One block shape per code length:
#: a new database size compiles no planes program (the planes took 0.08 to 0.13 s to compile
#: per shape), and the host assembles the blocks. At 10^6 items the blocks ran as fast as one
#: program per shape: 0.018 against 0.017 s at 32 bits, 0.068 against 0.074 s at 128. A
#: database of fewer words computes one block, padded: about 1 ms at 32 bits and 5 ms at 128
#: (blocks of 256 words took 0.5 and 1.6 ms for 200 words, but 27 to 47 ms against 17 to 23 ms
#: for 10^6 items at 32 bits; development measurements, one process).
_PLANE_BLOCK_WORDS = 1024

#: Plane words unpacked at a time inside :func:`_bit_planes`, at most: times ``P`` planes, 1,024.
_PLANE_UNPACK_WORDS = 1024


@_compile.jit(static_argnames=("num_bits",))
def _bit_planes(db_words, *, num_bits):
  """``uint64[P, M]``: word ``m`` of plane ``j`` holds bit ``j`` of items ``64 m .. 64 m + 63``.

  ``db_words`` is ``uint32[64 M, W]``, ``M`` a power of two; ``P = groups *
  planes per group`` (:func:`_group_shape`) is at least ``num_bits``, and
  planes past ``num_bits`` are zero. Run with x64 enabled. The items of ``B``
  words are unpacked at a time (a loop), ``B`` the largest power of two with
  ``B * P <= 1,024``, so that their bits (8 bytes each) stay within 512 KB, in
  the cache (10^6 items in blocks of 1,024 words: 32 words at a time at 32 bits
  took 0.018 s against 0.036 s for all 1,024 at once, 8 at a time at 128 bits
  0.068 s against 0.64 s; development measurements).
  """
  num_words = db_words.shape[0] // _PLANE_ITEMS
  groups, per_group = _group_shape(num_bits)
  j = np.minimum(np.arange(groups * per_group), num_bits - 1)
  keep = (np.arange(groups * per_group) < num_bits).astype(np.uint32)
  block = min(num_words, 1 << (max(1, _PLANE_UNPACK_WORDS // (groups * per_group)).bit_length() - 1))

  def planes_of(w):  # [64 block, W] -> [P, block]
    bits = (w[:, j // 32] >> jnp.asarray(j % 32, jnp.uint32)[None, :]) & jnp.asarray(keep)[None, :]
    return _pack_planes(bits.T)

  out = jax.lax.map(planes_of, db_words.reshape(num_words // block, _PLANE_ITEMS * block, db_words.shape[1]))
  return out.transpose(1, 0, 2).reshape(groups * per_group, num_words)


def _planes(placed: np.ndarray, *, num_bits: int) -> np.ndarray:
  """:func:`_bit_planes` of ``placed`` (``uint32[64 M, W]``, on the host) as ``uint64[P, M]`` on the host.

  Computed in blocks of :data:`_PLANE_BLOCK_WORDS` words; the last block ends
  at ``M`` and overlaps the one before it, and a database smaller than one
  block is padded with zero codes to a block.
  """
  num_words = placed.shape[0] // _PLANE_ITEMS
  block = _PLANE_BLOCK_WORDS
  if num_words < block:
    placed = np.pad(placed, ((0, _PLANE_ITEMS * (block - num_words)), (0, 0)))
  total = placed.shape[0] // _PLANE_ITEMS
  groups, per_group = _group_shape(num_bits)
  out = np.empty((groups * per_group, total), np.uint64)
  with jax.enable_x64(True):
    for end in range(block, total + block, block):
      end = min(end, total)  # the last block: shifted back to end at the last word
      out[:, end - block:end] = np.asarray(_bit_planes(placed[_PLANE_ITEMS * (end - block):_PLANE_ITEMS * end],
                                                       num_bits=num_bits))
  return out[:, :num_words]


class _Layout(NamedTuple):
  """Where the bit-sliced kernel puts the database items: ``segments`` runs of ``words`` plane words.

  ``slot[i]`` is item ``i``'s position among the ``64 * words * segments`` padded
  items; segment ``s`` holds items of one query class ``segment_class[s]`` (-1:
  of no query class) and ``segment_pad[s]`` zero-code padding items. With
  labels, ``query_class[q]`` is query ``q``'s class.
  """
  slot: np.ndarray
  segment_class: np.ndarray
  segment_pad: np.ndarray
  words: int
  query_class: Optional[np.ndarray] = None

  @property
  def segments(self) -> int:
    return len(self.segment_class)

  @property
  def num_words(self) -> int:
    """Plane words of the whole layout: ``segments * words``."""
    return self.segments * self.words

  def place(self, db_words) -> np.ndarray:
    """``uint32[64 * num_words, W]`` on the host: each item's code at its slot, zero codes elsewhere."""
    placed = np.zeros((_PLANE_ITEMS * self.num_words, db_words.shape[1]), np.uint32)
    placed[self.slot] = np.asarray(db_words)
    return placed


def _plain_layout(n: int) -> _Layout:
  """One segment of :func:`_sliced_num_words` words, items in order."""
  words = _sliced_num_words(n)
  return _Layout(np.arange(n), np.zeros(1, np.int32), np.array([_PLANE_ITEMS * words - n], np.int32), words)


def _class_layout(db_class: np.ndarray) -> _Layout:
  """Class segments: the items of each class (``db_class``, -1 for none) in runs of :data:`_SEGMENT_WORDS` words.

  A class takes as many consecutive segments as it fills, the last one padded
  with zero codes; the number of segments is rounded up like
  :func:`_sliced_num_words` with empty segments, so a new database of similar
  class sizes shares the compilation.

  >>> lay = _class_layout(np.array([1] * 1100 + [0] * 100 + [-1] * 5))
  >>> lay.segment_class.tolist(), lay.segment_pad.tolist()
  ([0, 1, 1, 1, -1], [412, 0, 0, 436, 507])
  """
  db_class = np.asarray(db_class)
  top = db_class.max(initial=-1)
  keys = np.where(db_class < 0, top + 1, db_class)  # "no class" sorts last
  sizes = np.bincount(keys)
  capacity = _PLANE_ITEMS * _SEGMENT_WORDS
  per_class = -(-sizes // capacity)  # segments per class (0 for classes without items)
  first = np.cumsum(per_class) - per_class
  num_segments = int(per_class.sum())
  order = np.argsort(keys.astype(np.int16 if len(sizes) < 1 << 15 else np.int32), kind="stable")  # radix
  slot = np.empty(len(keys), np.int64)  # a class's segments are consecutive: its items fill them in order
  slot[order] = np.repeat(first * capacity - (np.cumsum(sizes) - sizes), sizes) + np.arange(len(keys))
  class_of_key = np.where(np.arange(len(sizes)) > top, -1, np.arange(len(sizes)))
  segment_class = np.full(_off_power_of_two(_round_words(num_segments) * _SEGMENT_WORDS, _SEGMENT_WORDS)
                          // _SEGMENT_WORDS, -1, np.int32)
  segment_class[:num_segments] = np.repeat(class_of_key, per_class)
  segment_pad = np.full(len(segment_class), capacity, np.int32)
  segment_pad[:num_segments] -= np.bincount(slot // capacity, minlength=num_segments).astype(np.int32)
  return _Layout(slot, segment_class, segment_pad, _SEGMENT_WORDS)


#: The bit-sliced kernel adds the planes in groups of at most this many with an unrolled
#: carry-save tree, then sums the groups pairwise. Its program does not grow with the bits: only
#: the number of groups (a power of two, at least 2) and of pairwise levels do.
_GROUP_PLANES = 16

#: Queries per call of the bit-sliced kernel (fewer queries: the next power of two). Its program
#: has no loop, so every number of queries above 16 shares one compilation (fewer compile once
#: per power of two); a loop over tiles of queries inside the program cost 0.05 s more to compile
#: (XLA's while loop) and ran no faster.
_QUERY_CHUNK = 32

#: Plane words (64 items each) per call of the bit-sliced kernel, rounded down to whole class
#: segments, and not a multiple of 256 (see :func:`_off_power_of_two`). The distance planes the
#: kernel keeps between stages, [32 queries, groups / 2, words] x 5 to 7 planes of 8 bytes, stay
#: within a few MB at 32 bits and under 20 MB at 128 whatever ``N``. A database of more words
#: runs in full blocks and a last, smaller one: two shapes.
_BLOCK_WORDS = 1960

#: The distances are decoded as ``8 * high + low``: a fixed tree decodes the low 3 count planes
#: into 8 masks, and each of the ``ceil((num_bits + 1) / 8)`` high values is one row of a reduction.
_LOW_PLANES = 3


def _group_shape(num_bits: int) -> Tuple[int, int]:
  """``(groups, planes per group)``: a power of two (at least 2) of balanced groups of at most
  :data:`_GROUP_PLANES` planes, e.g. 32 bits: ``(2, 16)``, 48 bits: ``(4, 12)``."""
  groups = max(2, _next_pow2(-(-num_bits // _GROUP_PLANES)))
  return groups, -(-num_bits // groups)


def _query_masks(query_words: np.ndarray, num_bits: int) -> np.ndarray:
  """``uint64[Q, P]`` on the host: each query bit as a word of zeros or ones, zero past ``num_bits``
  (``P`` planes as in :func:`_bit_planes`)."""
  groups, per_group = _group_shape(num_bits)
  bits = np.unpackbits(np.ascontiguousarray(query_words, "<u4").view(np.uint8), axis=1, bitorder="little")
  masks = np.zeros((bits.shape[0], groups * per_group), np.uint64)
  masks[:, :num_bits] = bits[:, :num_bits]
  return np.negative(masks)  # 0 or 2^64 - 1


@_compile.jit(static_argnames=("num_bits",))
def _sliced_counts(query_masks, planes, segment_class=None, query_class=None, *, num_bits):
  """Bit-sliced Hamming histogram, as a tuple of ``L`` sums ``uint64[Q, H]`` that :func:`_decode_sums` unpacks.

  ``L = 8`` (fewer below 4 bits) and ``H = ceil((num_bits + 1) / L)``.

  ``planes`` is ``uint64[P, words]`` (:func:`_bit_planes`), 64 items per
  word; ``query_masks`` is ``uint64[Q, P]`` (:func:`_query_masks`); ``Q`` is
  a chunk of at most :data:`_QUERY_CHUNK` queries and ``words`` at most
  :data:`_BLOCK_WORDS` (:func:`_sliced_histogram` loops over them). With
  classes, ``segment_class[S]`` names the class of each of ``S`` equal
  segments of the words (:class:`_Layout`). Three stages, each a
  program whose size does not depend on ``num_bits``:

  1. every group of planes (:func:`_group_shape`), XORed with the query's bits
     broadcast to words, is added by carry-save adders into the bit-sliced
     distance of each item to the query over the group's bits;
  2. the groups are summed pairwise by ripple-carry adders, one level per
     halving, into the ``bit_length(num_bits)`` planes of each item's distance;
  3. the distances are decoded as ``8 * high + low`` (:data:`_LOW_PLANES`): per
     high value, a mask of its items is ANDed with each of the 8 low-value masks
     and popcounted, summed along the words.

  Each stage is a reduction (the first two over pairs of groups, the third along
  the words), so XLA keeps its adders in registers, vectorised over words, and
  materialises only the distance planes between stages. The previous kernel, the
  whole adder tree and ``num_bits + 1`` decoders unrolled in one loop, took
  0.9 s to compile at 64 bits and 3.1 s at 128, and ran 1.3x to 1.9x slower. With
  ``query_class``, a query's relevant counts are those in the segments of its
  class (``segment_class``), accumulated in the high 32 bits of the same sums,
  and the rest are the other level. The counts include the layout's padding
  items (zero codes, at distance ``popcount(q)``); :func:`_sliced_histogram`
  subtracts them on the host.
  """
  q = query_masks.shape[0]
  bins = num_bits + 1
  width = num_bits.bit_length()  # planes of a distance
  groups, per_group = _group_shape(num_bits)
  words = planes.shape[1]  # every stage runs along all the words; segments only name classes
  zero = jnp.zeros((), planes.dtype)

  def add_pairs(parts):  # one level: [Q, n, 2, (1,) words] -> [Q, n, (1,) words], one more plane
    parts = parts + [jnp.zeros_like(parts[0])] * (min(len(parts) + 1, width) - len(parts))
    return list(jax.lax.reduce(parts, [zero] * len(parts), _ripple_add, (2,)))

  # 1. Carry-save adders per group: lax's primitives throughout (jax.numpy's indexing and
  #    operators would each trace a nested jit: twice the tracing and lowering time).
  #    The planes are split in one operation, keeping a unit axis: sliced and squeezed one at a
  #    time (two operations each), tracing and lowering took 0.040 to 0.061 s against 0.031 to
  #    0.049 s, and the whole compilation 8 to 20% longer at 32 and 64 bits, 3% shorter to 10%
  #    longer at 128 (medians of 9 shapes, six development runs alternating the two).
  grouped = planes.reshape(groups // 2, 2, per_group, words)  # zero planes past num_bits add nothing
  qmask = query_masks.reshape(q, groups // 2, 2, per_group)
  shape = (q, groups // 2, 2, 1, words)
  differ = [_xor(jax.lax.broadcast_in_dim(g, shape, (1, 2, 3, 4)), jax.lax.broadcast_in_dim(m, shape, (0, 1, 2, 3)))
            for g, m in zip(jax.lax.split(grouped, [1] * per_group, 2), jax.lax.split(qmask, [1] * per_group, 3))]
  dist = add_pairs(_bitsliced_sum(differ))  # planes of [Q, groups / 2, 1, words]
  # 2. Pairwise sums of the groups.
  n = groups // 2
  while n > 1:
    n //= 2
    dist = add_pairs([p.reshape(q, n, 2, words) for p in dist])
  # 3. Decoding: [Q, num_high, words] masks of each high value, ANDed with the low-value masks.
  low = min(_LOW_PLANES, width)
  num_high = -(-bins // (1 << low))
  shape = (q, num_high, words)
  dist = [jax.lax.broadcast_in_dim(p.reshape(q, words), shape, (0, 2)) for p in dist]
  dist += [jnp.zeros(shape, planes.dtype)] * (width - len(dist))
  rows = None
  for k in range(width - low):  # XORed with all ones where bit k of the high value is 0
    select = np.where((np.arange(num_high) >> k) & 1, np.uint64(0), ~np.uint64(0))
    m = _xor(dist[low + k], jax.lax.broadcast_in_dim(select, shape, (1,)))
    rows = m if rows is None else _and(rows, m)
  cells = [m if rows is None else _and(rows, m) for m in _value_masks(dist[:low], 1 << low)]
  ops = [jax.lax.population_count(m) for m in cells]  # uint64: no narrowing in the loop
  if query_class is not None:  # the counts in the segments of the query's class, in the high half
    segments = segment_class.shape[0]
    mine = segment_class[None, :] == query_class[:, None]
    mine = jax.lax.broadcast_in_dim(mine, (q, num_high, segments, words // segments), (0, 2)).reshape(shape)
    high_half = jax.lax.select(mine, jnp.full(shape, 32, planes.dtype), jnp.full(shape, 64, planes.dtype))
    ops = [_or(op, jax.lax.shift_left(op, high_half)) for op in ops]  # a shift by 64 gives 0
  # One reduction along the words (long rows vectorise; one per segment would not). The sums
  # leave as they are: unpacking them on the host saved the program two kernels (0.14 against
  # 0.15 s to compile at 8 bits, 0.19 against 0.23 at 32 and 0.26 against 0.29 at 128, medians of
  # 6 shapes; 0.24 against 0.23 at 64; development measurement, one process).
  return tuple(jax.lax.reduce(ops, [zero] * len(ops), lambda a, b: list(map(jax.lax.add, a, b)), (2,)))


def _decode_sums(sums, *, num_bits: int, labelled: bool) -> np.ndarray:
  """``int64[Q, num_bits + 1, V]`` counts (on the host) from :func:`_sliced_counts`' sums.

  Sum ``l`` of the ``L`` (8, fewer below 4 bits) holds, at ``[q, h]``, the
  count at distance ``L h + l``; with classes, the relevant count in its high
  32 bits (``V = 2``: irrelevant, relevant), else ``V = 1``.
  """
  both = np.stack([np.asarray(s) for s in sums], -1)
  both = both.reshape(both.shape[0], -1)[:, :num_bits + 1]
  if not labelled:
    return both.astype(np.int64)[..., None]
  total = (both & np.uint64(0xFFFFFFFF)).astype(np.int64)
  relevant = (both >> np.uint64(32)).astype(np.int64)
  return np.stack([total - relevant, relevant], -1)


def _remove_padding(counts: np.ndarray, at: np.ndarray, layout: _Layout) -> np.ndarray:
  """Subtracts the layout's zero-code padding items from :func:`_sliced_counts`' ``counts`` (in place).

  They sit at distance ``at[q] = popcount(q)`` from query ``q``: with classes,
  the padding of the query's own class segments in the relevant level, the
  rest in the other.
  """
  rows = np.arange(len(at))
  pad = int(layout.segment_pad.sum(dtype=np.int64))
  if layout.query_class is None:
    counts[rows, at, 0] -= pad
    return counts
  own = layout.segment_class >= 0
  per_class = np.bincount(layout.segment_class[own], weights=layout.segment_pad[own],
                          minlength=int(layout.query_class.max(initial=-1)) + 1).astype(np.int64)
  relevant = per_class[layout.query_class]
  counts[rows, at, 1] -= relevant.astype(counts.dtype)
  counts[rows, at, 0] -= (pad - relevant).astype(counts.dtype)
  return counts


def _query_classes(query_labels, db_labels):
  """``(query_class int32[Q], db_class int[N])``: indices into the queries' sorted labels, -1 for none."""
  classes, query_class = np.unique(np.asarray(query_labels), return_inverse=True)
  query_class = query_class.reshape(-1).astype(np.int32)
  db_labels = np.asarray(db_labels)
  int64_exact = lambda dt: dt.kind == "i" or (dt.kind == "u" and dt.itemsize < 8)
  if int64_exact(db_labels.dtype) and int64_exact(classes.dtype) and int(classes[-1]) - int(classes[0]) < 1 << 20:
    lo = int(classes[0])  # small integer labels: a lookup table
    table = np.full(int(classes[-1]) - lo + 1, -1, np.int32)
    table[classes.astype(np.int64) - lo] = np.arange(len(classes))
    offset = db_labels.astype(np.int64) - lo
    inside = (offset >= 0) & (offset < len(table))
    return query_class, np.where(inside, table[np.where(inside, offset, 0)], -1)
  pos = np.minimum(np.searchsorted(classes, db_labels), len(classes) - 1)
  return query_class, np.where(classes[pos] == db_labels, pos, -1)


def _label_layout(query_labels, db_labels) -> _Layout:
  """:func:`_class_layout` of the database by the queries' classes, with ``query_class``."""
  query_class, db_class = _query_classes(query_labels, db_labels)
  return _class_layout(db_class)._replace(query_class=query_class)


def _sliced_histogram(query_words, db_words, *, num_bits: int, query_labels=None, db_labels=None,
                      layout: Optional[_Layout] = None):
  """:func:`_sliced_counts` of validated packed codes (and optional class labels).

  Labels are mapped to the classes of the queries (host side, so they must be
  concrete) and the database is laid out in class segments
  (:func:`_class_layout`, or ``layout`` if given); items of other classes are
  never relevant. The planes are ``uint64`` words, so this runs with x64
  enabled; the counts are ``int32``. Inputs are concrete (the layout and the
  padding correction are computed on the host).
  """
  n = db_words.shape[0]
  if layout is None:
    layout = _plain_layout(n) if query_labels is None else _label_layout(query_labels, db_labels)
  placed = layout.place(db_words)  # on the host: N of a bucket share compilations
  # Queries in chunks of a power of two (zero codes of no class pad the last one, cut off again).
  num_q = query_words.shape[0]
  chunk = min(_QUERY_CHUNK, _next_pow2(num_q))
  masks = _query_masks(np.asarray(query_words), num_bits)
  masks = np.concatenate([masks, np.zeros((-num_q % chunk, masks.shape[1]), np.uint64)])
  classes = None if layout.query_class is None else np.full(len(masks), -1, np.int32)
  if classes is not None:
    classes[:num_q] = layout.query_class
  segment = layout.words if classes is not None else 1  # words per class segment
  step = max(segment, _BLOCK_WORDS - _BLOCK_WORDS % segment)  # blocks of whole segments
  blocks = []
  all_planes = _planes(placed, num_bits=num_bits)
  # The query chunks go to the kernel as numpy slices: jit's dispatch copies each while the
  # previous chunk runs (a device_put of each beforehand took 8 ms of a 60 ms call).
  chunks = [(masks[c:c + chunk], None if classes is None else classes[c:c + chunk]) for c in range(0, len(masks), chunk)]
  with jax.enable_x64(True):
    for w0 in range(0, layout.num_words, step):  # database blocks (host slices: no compilation)
      w1 = min(w0 + step, layout.num_words)
      planes = _checks.as_jax(all_planes[:, w0:w1])
      block_class = None if classes is None else _checks.as_jax(layout.segment_class[w0 // segment:w1 // segment])
      blocks.append([_sliced_counts(m, planes, block_class, c, num_bits=num_bits) for m, c in chunks])
  # Gathered once every call is dispatched, the chunks' sums joined, then decoded and summed
  # over the blocks on the host.
  labelled = classes is not None
  counts = sum(_decode_sums([np.concatenate(sums) for sums in zip(*jax.device_get(parts))], num_bits=num_bits,
                            labelled=labelled) for parts in blocks)
  counts = counts[:num_q].astype(np.int32)
  # The zero-code padding items sit at distance popcount(q): the query's number of all-ones masks.
  return _checks.as_jax(_remove_padding(counts, np.count_nonzero(masks[:num_q], axis=1), layout))


def _sliced_layout(query_words, db_words, num_bits: int, labels=()) -> Optional[_Layout]:
  """The bit-sliced kernel's layout if it serves this call, else None (the streamed scatter-add)."""
  if num_bits > _SLICED_MAX_BITS or query_words.shape[0] * db_words.shape[0] < _SLICED_MIN_PAIRS:
    return None
  if not all(_checks.is_concrete(x) for x in (query_words, db_words, *labels)):
    return None  # under a trace: the kernel's x64 planes and host-side label classes need values
  if not labels:
    return _plain_layout(db_words.shape[0])
  layout = _label_layout(*labels)
  if layout.num_words > _SEGMENT_MAX_GROWTH * _sliced_num_words(db_words.shape[0]):
    return None
  return layout


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
  step = _step_size(query_words.shape[-1], n, chunk_size, fit=not padded)
  if padded:
    cap = step * _next_pow2(-(-n // step))
    if cap > n:
      db_words = np.pad(np.asarray(db_words), ((0, cap - n), (0, 0)))
      if db_labels is not None:
        db_labels = np.pad(np.asarray(db_labels), (0, cap - n))
  as_j = _checks.as_jax
  return _stream_hamming(as_j(query_words), as_j(db_words), np.int32(n), as_j(affinity),
                         as_j(query_labels), as_j(db_labels), num_bits=num_bits, num_levels=num_levels,
                         step=step)


def _hamming_histogram(query_words, db_words, affinity, num_bits, num_levels, chunk_size):
  """Hamming histogram of validated codes; ``affinity`` may be None.

  Without an affinity matrix, large calls of codes up to ``_SLICED_MAX_BITS``
  bits count bit-sliced (:func:`_sliced_counts`); the rest stream a scatter-add
  (:func:`_stream_hamming`).
  """
  layout = None if affinity is not None else _sliced_layout(query_words, db_words, num_bits)
  if layout is not None:
    return _sliced_histogram(query_words, db_words, num_bits=num_bits, layout=layout)
  return _stream_hamming_bucketed(query_words, db_words, num_bits=num_bits, num_levels=num_levels,
                                  chunk_size=chunk_size, affinity=affinity)


def _label_histogram(query_words, db_words, query_labels, db_labels, *, num_bits: int,
                     chunk_size: Optional[int] = None):
  """``hist[Q, num_bits + 1, 2]`` of validated codes, relevance ``[query_labels[q] == db_labels[i]]``.

  No ``[Q, N]`` relevance matrix on either path: the bit-sliced kernel counts
  the database laid out in runs of one class each (:func:`_class_layout`) and
  adds a query's counts in its class's runs into a second sum; the
  scatter-add forms relevance per streamed block.
  """
  layout = _sliced_layout(query_words, db_words, num_bits, (query_labels, db_labels))
  if layout is not None:
    return _sliced_histogram(query_words, db_words, num_bits=num_bits, query_labels=query_labels,
                             db_labels=db_labels, layout=layout)
  return _stream_hamming_bucketed(query_words, db_words, num_bits=num_bits, num_levels=2, chunk_size=chunk_size,
                                  query_labels=query_labels, db_labels=db_labels)


def hamming_histogram(query_words: Array, db_words: Array, affinity: Optional[Array] = None, *,
                      num_bits: int, num_levels: Optional[int] = None,
                      chunk_size: int = DEFAULT_CHUNK_SIZE) -> Array:
  """Per-query histogram of Hamming distances, without a ``[Q, N]`` distance matrix.

  Two kernels, same counts:

  * bit-sliced (no ``affinity``, at most 128 bits, concrete inputs with at
    least ``2^22`` query-item pairs): the database is transposed once into
    bit planes (one ``uint64`` word holds one bit of 64 items); per query the
    planes, XORed with the query's bits, are added by carry-save adders in
    groups of 16 and the groups summed pairwise into ``bit_length(num_bits)``
    distance planes, which are decoded with ANDs and counted with popcounts.
    Pure bitwise work, in programs whose size does not depend on the code
    length (a new code length or shape compiles in about 0.15 to 0.3 s on this
    project's machine): 0.3 to 1 ns per (query, item) pair at 32 bits (the
    kernel over 1,024 queries; a whole call of 200), against 1.5 to 3 ns for
    the scatter-add (``experiments/benchmark_metrics.py``). Queries run in
    chunks of 32 (so a new number of queries above 16 compiles nothing), the
    database in blocks of 125,440 items, so memory stays bounded;
  * streamed scatter-add (affinity matrices, longer codes, small calls, traced
    inputs): each step computes the distances of one query to a cache-sized
    block of database items (XOR + popcount) and scatter-adds them into the
    counts, so memory is ``O(step)`` beside the inputs and ``N = 10^7`` fits.

  .. math:: n_{q,d,v} = |\\{ i : d(q, i) = d, a_{q,i} = v \\}|

  Args:
    query_words: ``uint32[Q, W]`` packed queries.
    db_words: ``uint32[N, W]`` packed database codes.
    affinity: optional ``int[Q, N]`` levels in ``[0, num_levels)``.
    num_bits: the code length; must match ``W``.
    num_levels: ``V`` (see :func:`distance_histogram`).
    chunk_size: at most this many database items per streamed step of the
      scatter-add (the step is also capped near ``2^15 / W`` items to stay in
      cache); the bit-sliced kernel reads blocks of 125,440 items.

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
  _checks.check_padding_bits("query_words", query_words, num_bits)
  _checks.check_padding_bits("db_words", db_words, num_bits)
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
  return _weighted_hamming(_checks.as_jax(query_bits), _checks.as_jax(db_bits), _checks.as_jax(weights))


@jax.jit
def _weighted_hamming(query_bits, db_bits, weights):
  q = (query_bits > 0).astype(jnp.float32)
  x = (db_bits > 0).astype(jnp.float32)
  w = jnp.broadcast_to(weights.astype(jnp.float32), q.shape)
  wq = w * q
  return (jnp.sum(wq, -1, keepdims=True) + w @ x.T - 2.0 * wq @ x.T)
