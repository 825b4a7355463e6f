r"""Distance histograms ``hist[..., num_bits + 1, V]``: the one input of every ranking metric.

For each query, how many database items of each affinity level ``v < V`` sit at each distance ``0 ..
num_bits`` (the counting sort of He et al. 2018, Sec. 3.2, and Nair et al. 2012, Sec. 3.5.1). Every metric,
task score and swap delta of hashjax reads these cells; none re-sorts items.

Two entry points, one per input kind, and two kernels:

* :func:`distance_histogram` counts given distances (with optional affinity levels and a ``where`` mask) with
  one jitted scatter-add kernel, streamed over blocks of about ``2^16`` items so that no ``[..., N]``
  temporary exists; it runs on concrete values and traced, inside a caller's ``jit`` or ``vmap``. numpy
  inputs are counted on the host instead (``np.bincount`` over tiles of rows, the same keys), since copying
  them to a device costs more than counting them;
* :func:`hamming_histogram` starts from packed codes. Without an affinity matrix, at most 128 bits and
  enough pairs, concrete codes are counted by the bit-sliced kernel (:mod:`hashjax._kernels.bitsliced`),
  several times faster than any scatter; everything else (affinity matrices, longer codes, small or traced
  calls) computes the distances of a database chunk at a time and counts them with the scatter-add kernel.

Counts are exact ``int32``; inputs whose counts could overflow ``int32`` are refused.
"""

from __future__ import annotations

import functools
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks
from hashjax import codes
from hashjax._kernels import bitsliced
from hashjax._kernels import compare

Array = jax.Array

#: Database items per chunk of :func:`hamming_histogram`'s distances, at most.
DEFAULT_CHUNK_SIZE = 32768

#: Distances per block of the scatter-add kernel: a block's keys stay in the cache.
_BLOCK_ELEMENTS = 1 << 16

#: Distances per tile of rows of the host path (numpy inputs).
_HOST_TILE_ELEMENTS = 1 << 18

#: Distances per database chunk of the codes path, at most (``Q x chunk``): they stay in the cache.
_CHUNK_ELEMENTS = 1 << 18

#: Fewer (query, item) pairs than this are counted by the scatter-add: counting them takes milliseconds
#: either way, and the scatter-add compiles one program per shape where the bit-sliced kernel compiles two.
_BITSLICED_MIN_PAIRS = 1 << 22

_INT32_MAX = np.iinfo(np.int32).max

#: One count per key into a flat vector. lax's scatter, not ``.at[].add``: that would also wrap negative
#: indices, a select per item, and keys here are never negative.
_COUNT_DIMS = jax.lax.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
                                              scatter_dims_to_operand_dims=(0,))


def num_levels_of(affinity: Any, num_levels: Optional[int] = None, *, name: str = "affinity") -> int:
  r"""``V``: ``num_levels`` checked against ``affinity`` (ints in ``[0, V)``), or ``max + 1`` (at least 2).

  .. math:: V = \max(2, 1 + \max_{q,i} a_{q,i})

  Args:
    affinity: ``int[...]`` affinity levels (values checked when concrete).
    num_levels: ``V``, or None to infer it from a concrete ``affinity``.
    name: the argument's name in error messages.

  Returns:
    ``V`` as a Python int.

  >>> import numpy as np
  >>> num_levels_of(np.array([[0, 3, 1]])), num_levels_of(np.array([0, 0])), num_levels_of(np.array([1]), 4)
  (4, 2, 4)
  """
  if num_levels is not None:
    num_levels = _checks.check_int("num_levels", num_levels)
  elif not _checks.is_concrete(affinity):
    raise ValueError(f"num_levels: must be given when {name} is traced (under jit/vmap)")
  top = _INT32_MAX if num_levels is None else num_levels - 1
  _checks.check_int_range(name, affinity, 0, top, what=f"{name} levels")
  return num_levels or max(int(np.asarray(affinity).max(initial=0)) + 1, 2)


def distance_histogram(distances: Array, affinity: Optional[Array] = None, *, num_bits: int,
                       num_levels: Optional[int] = None, where: Optional[Array] = None) -> Array:
  r"""Counting sort of integer distances, per affinity level: ``hist[..., num_bits + 1, V]``.

  .. math:: n_{d,v} = |\{ i : d_i = d,\ a_i = v,\ \mathrm{where}_i \}|

  One jitted scatter-add, streamed over blocks of the last axis (cost ``O(N)`` per row, no ``[..., N]``
  temporary); numpy inputs are counted on the host by ``np.bincount``. Works on concrete arrays and traced
  (inside a caller's ``jit`` or ``vmap``; ``num_levels`` is then required with ``affinity``). Traced values
  are not checked: out-of-range distances or levels are not counted.

  Args:
    distances: ``int[..., N]`` distances in ``[0, num_bits]``.
    affinity: optional ``int[..., N]`` levels in ``[0, num_levels)``; None counts every item at level 0.
    num_bits: the code length ``b``.
    num_levels: ``V``; inferred from a concrete ``affinity`` when None (:func:`num_levels_of`).
    where: optional ``bool[..., N]``: only the ``True`` items are counted.

  Returns:
    ``int32[..., num_bits + 1, V]`` counts (``V = 1`` when ``affinity`` is None).

  >>> import numpy as np
  >>> distance_histogram(np.array([0, 2, 2]), np.array([1, 0, 1]), num_bits=2).tolist()
  [[0, 1], [0, 0], [1, 1]]
  >>> distance_histogram(np.array([[0, 2, 2]]), num_bits=2, where=np.array([[True, True, False]])).tolist()
  [[[1], [0], [1]]]
  """
  num_bits = _checks.check_num_bits(num_bits)
  _checks.check_int_range("distances", distances, 0, num_bits, what="distances")
  if distances.ndim < 1:
    raise ValueError("distances: expected shape [..., N], got a scalar")
  if affinity is None:
    num_levels = 1
  else:
    _checks.check_shape("affinity", affinity, distances.shape, like="distances")
    num_levels = num_levels_of(affinity, num_levels)
  _checks.check_mask("where", where, distances.shape, like="distances")
  _check_size("distances", distances.shape, num_bits, num_levels)
  if isinstance(distances, np.ndarray) and all(_checks.is_concrete(x) for x in (affinity, where)):
    return _checks.as_jax(_count_on_host(distances, affinity, where, num_bits=num_bits, num_levels=num_levels))
  as_jax = _checks.as_jax
  return _count_distances(as_jax(distances), as_jax(affinity), as_jax(where), num_bits=num_bits,
                          num_levels=num_levels)


def hamming_histogram(query_words: Array, db_words: Array, affinity: Optional[Array] = None, *,
                      num_bits: int, num_levels: Optional[int] = None, query_labels: Optional[Array] = None,
                      db_labels: Optional[Array] = None, chunk_size: int = DEFAULT_CHUNK_SIZE) -> Array:
  r"""Per-query histogram of Hamming distances from packed codes, without a ``[Q, N]`` distance matrix.

  .. math:: n_{q,d,v} = |\{ i : d(q, i) = d,\ a_{q,i} = v \}|

  The level ``a[q, i]`` is ``affinity[q, i]``; or, with ``query_labels`` and ``db_labels``,
  ``[query_labels[q] == db_labels[i]]`` (``V = 2``: irrelevant, relevant); or 0 (``V = 1``). On a GPU or
  TPU, everything is counted by compare-and-count (:mod:`hashjax._kernels.compare`). On a CPU, concrete codes
  of at most 128 bits without ``affinity`` (at least ``2^22`` pairs) are counted by the bit-sliced kernel;
  the rest streams the database in chunks whose distances :func:`distance_histogram`'s kernel counts. All
  give the same counts; the function works traced too (then on the last path, or compare-and-count).

  Args:
    query_words: ``uint32[Q, W]`` packed queries.
    db_words: ``uint32[N, W]`` packed database codes.
    affinity: optional ``int[Q, N]`` levels in ``[0, num_levels)``.
    num_bits: the code length; must match ``W``.
    num_levels: ``V`` with ``affinity`` (inferred when None and concrete).
    query_labels: optional ``int[Q]`` class labels (with ``db_labels``, instead of ``affinity``).
    db_labels: optional ``int[N]`` class labels.
    chunk_size: at most this many database items per chunk of the streamed path (which also keeps a
      chunk's ``Q x chunk`` distances within ``2^18``).

  Returns:
    ``int32[Q, num_bits + 1, V]`` counts.

  >>> import numpy as np
  >>> q = codes.pack_bits(np.array([[1, 1]]))
  >>> x = codes.pack_bits(np.array([[1, 1], [0, 1], [0, 0]]))
  >>> hamming_histogram(q, x, np.array([[1, 1, 0]]), num_bits=2).tolist()
  [[[0, 1], [0, 1], [1, 0]]]
  >>> hamming_histogram(q, x, num_bits=2, query_labels=np.array([7]), db_labels=np.array([7, 3, 3])).tolist()
  [[[0, 1], [1, 0], [1, 0]]]
  """
  num_bits = _checks.check_word_pair(query_words, db_words, num_bits)
  num_q, n = query_words.shape[0], db_words.shape[0]
  if _checks.check_label_pair(query_labels, db_labels, num_q, n, affinity=affinity):
    num_levels = 2
  elif affinity is None:
    num_levels = 1
  else:
    _checks.check_shape("affinity", affinity, (num_q, n), like="[len(query_words), len(db_words)]")
    num_levels = num_levels_of(affinity, num_levels)
  chunk_size = _checks.check_int("chunk_size", chunk_size)
  _check_size("query_words, db_words", (num_q, n), num_bits, num_levels)
  as_jax = _checks.as_jax
  if compare.on_accelerator(query_words, db_words):
    return compare.counts(as_jax(query_words), as_jax(db_words), as_jax(affinity), as_jax(query_labels),
                          as_jax(db_labels), num_bits=num_bits, num_levels=num_levels,
                          chunk=compare.chunk_items(num_q, n))
  if affinity is None and _bitsliced_counts_it(query_words, db_words, num_bits, query_labels, db_labels):
    return as_jax(bitsliced.counts(query_words, db_words, num_bits=num_bits, query_labels=query_labels,
                                   db_labels=db_labels))
  chunk = max(1, min(chunk_size, _CHUNK_ELEMENTS // num_q))
  chunk = -(-n // -(-n // chunk))  # equal chunks
  return _count_codes(as_jax(query_words), as_jax(db_words), as_jax(affinity), as_jax(query_labels),
                      as_jax(db_labels), num_bits=num_bits, num_levels=num_levels, chunk=chunk)


def _bitsliced_counts_it(query_words, db_words, num_bits: int, query_labels, db_labels) -> bool:
  """Whether the bit-sliced kernel counts these codes: concrete, at most 128 bits, enough pairs, and with
  labels not too many classes (each class of the queries may add a plane word of padding: at most twice the
  work with one class per 64 items)."""
  inputs = (query_words, db_words, query_labels, db_labels)
  n = db_words.shape[0]
  if (num_bits > bitsliced.MAX_BITS or query_words.shape[0] * n < _BITSLICED_MIN_PAIRS
      or not all(_checks.is_concrete(x) for x in inputs)):
    return False
  return query_labels is None or len(np.unique(np.asarray(query_labels))) <= -(-n // 64)


def _check_size(name: str, shape: tuple, num_bits: int, num_levels: int) -> None:
  """Refuses shapes whose counts or flat keys could pass ``int32``: ``N``, and ``rows x ((num_bits + 1) V + 1)``."""
  rows, n = int(np.prod(shape[:-1], dtype=np.int64)), int(shape[-1])
  cells = (num_bits + 1) * num_levels + 1
  if n > _INT32_MAX or rows * cells > _INT32_MAX:
    raise ValueError(f"{name}: expected fewer than 2^31 items per row and rows x (num_bits + 1) x levels, got "
                     f"{n} items and {rows} x {cells} cells; split the rows or the items into several calls")


def _keys(xp, distances, affinity, keep, *, num_bits: int, num_levels: int, checked: bool):
  """``int32`` cells ``distance * V + level`` of the items to count, in the array namespace ``xp``; the spare
  cell ``(num_bits + 1) V`` for the others: ``keep`` False, and unless ``checked``, values out of range."""
  key = xp.asarray(distances, xp.int32) * num_levels
  if affinity is not None:
    key += xp.asarray(affinity, xp.int32)
  if not checked:  # (negative values wrap around as uint32, past the range)
    in_range = distances.astype(xp.uint32) <= num_bits
    if affinity is not None and not (affinity.dtype == bool and num_levels >= 2):
      in_range &= affinity.astype(xp.uint32) < num_levels
    keep = in_range if keep is None else keep & in_range
  return key if keep is None else xp.where(keep, key, (num_bits + 1) * num_levels)


def _count_on_host(distances, affinity, where, *, num_bits: int, num_levels: int) -> np.ndarray:
  """:func:`_count_distances` of validated numpy arrays, on the host: ``np.bincount`` over tiles of rows (no
  copy of the inputs to a device, which on the CPU costs more than the counting)."""
  shape = distances.shape
  rows, n = int(np.prod(shape[:-1], dtype=np.int64)), shape[-1]
  cells = (num_bits + 1) * num_levels + 1
  as_rows = lambda x: None if x is None else np.asarray(x).reshape(rows, n)
  distances, affinity, where = as_rows(distances), as_rows(affinity), as_rows(where)
  counts = np.zeros((rows, cells), np.int32)
  tile = max(1, _HOST_TILE_ELEMENTS // max(n, 1))
  for r0 in range(0, rows if n else 0, tile):
    part = lambda x: None if x is None else x[r0:r0 + tile]
    key = _keys(np, part(distances), part(affinity), part(where), num_bits=num_bits, num_levels=num_levels,
                checked=True)
    key += np.arange(len(key), dtype=np.int32)[:, None] * cells
    counts[r0:r0 + tile] = np.bincount(key.reshape(-1), minlength=len(key) * cells).reshape(-1, cells)
  return counts[:, :-1].reshape(shape[:-1] + (num_bits + 1, num_levels))


@functools.partial(jax.jit, static_argnames=("num_bits", "num_levels"))
def _count_distances(distances, affinity, where, *, num_bits: int, num_levels: int):
  """The scatter-add kernel: ``int32[..., num_bits + 1, V]`` counts of ``distances[..., N]``.

  ``affinity`` (levels) and ``where`` are None or of the shape of ``distances``. One loop over blocks of
  ``[tile, step]`` distances (several short rows, or a piece of a long one) adds each block's keys
  ``row * cells + distance * V + level`` into the flat counts by one scatter. The last blocks are shifted
  back to end at the last row and item, so no input is padded; the items they repeat, those not in
  ``where`` and out-of-range values go to a spare cell per row.
  """
  shape = distances.shape
  rows, n = int(np.prod(shape[:-1], dtype=np.int64)), shape[-1]
  bins = num_bits + 1
  if rows == 0 or n == 0:
    return jnp.zeros(shape[:-1] + (bins, num_levels), jnp.int32)
  as_rows = lambda x: None if x is None else x.reshape(rows, n)
  distances, affinity, where = as_rows(distances), as_rows(affinity), as_rows(where)
  cells = bins * num_levels + 1  # the last: the spare cell
  step = -(-n // -(-n // _BLOCK_ELEMENTS))  # equal pieces of at most _BLOCK_ELEMENTS
  tile = min(rows, max(1, _BLOCK_ELEMENTS // step))
  tile = -(-rows // -(-rows // tile))  # equal tiles
  row_blocks, item_blocks = -(-rows // tile), -(-n // step)
  row = jnp.arange(tile, dtype=jnp.int32)[:, None]
  col = jnp.arange(step, dtype=jnp.int32)[None, :]

  def body(i, counts):
    r_start, c_start = (i // item_blocks) * tile, (i % item_blocks) * step
    r0, c0 = jnp.minimum(r_start, rows - tile), jnp.minimum(c_start, n - step)
    block = lambda x: None if x is None else jax.lax.dynamic_slice(x, (r0, c0), (tile, step))
    keep = [] if where is None else [block(where)]
    if rows % tile:  # rows the shifted last tile repeats
      keep.append(jnp.broadcast_to(row >= r_start - r0, (tile, step)))
    if n % step:  # items the shifted last piece repeats
      keep.append(jnp.broadcast_to(col >= c_start - c0, (tile, step)))
    keep = functools.reduce(jnp.logical_and, keep) if keep else None
    key = _keys(jnp, block(distances), block(affinity), keep, num_bits=num_bits, num_levels=num_levels,
                checked=False)
    key = (key + (r0 + row) * cells).reshape(-1, 1)
    return jax.lax.scatter_add(counts, key, jnp.ones(key.shape[:1], jnp.int32), _COUNT_DIMS,
                               mode=jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS)

  counts = jax.lax.fori_loop(0, row_blocks * item_blocks, body, jnp.zeros(rows * cells, jnp.int32))
  return counts.reshape(rows, cells)[:, :-1].reshape(shape[:-1] + (bins, num_levels))


@functools.partial(jax.jit, static_argnames=("num_bits", "num_levels", "chunk"))
def _count_codes(query_words, db_words, affinity, query_labels, db_labels, *, num_bits: int, num_levels: int,
                 chunk: int):
  """``int32[Q, num_bits + 1, V]``: the distances of ``chunk`` database items at a time, counted by
  :func:`_count_distances` (levels from ``affinity``, from the labels, or 0).

  The last chunk is shifted back to end at the last item; the items it repeats are left out.
  """
  num_q, n = query_words.shape[0], db_words.shape[0]
  take = lambda x, start, axis=0: jax.lax.dynamic_slice_in_dim(x, start, chunk, axis)

  def body(i, hist):
    start = i * chunk
    c0 = jnp.minimum(start, n - chunk)
    d = codes.hamming_distance(query_words, take(db_words, c0))
    level = None
    if affinity is not None:
      level = take(affinity, c0, 1)
    elif query_labels is not None:
      level = query_labels[:, None] == take(db_labels, c0)
    fresh = None
    if n % chunk:
      fresh = jnp.broadcast_to(jnp.arange(chunk) >= start - c0, d.shape)
    return hist + _count_distances(d, level, fresh, num_bits=num_bits, num_levels=num_levels)

  hist = jnp.zeros((num_q, num_bits + 1, num_levels), jnp.int32)
  return jax.lax.fori_loop(0, -(-n // chunk), body, hist)
