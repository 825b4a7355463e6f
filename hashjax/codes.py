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


def _bin_counts(keys: Array, length: int) -> Array:
  """Counts of each key in ``[0, length)`` along the last axis; others dropped."""
  flat = keys.reshape(-1, keys.shape[-1])
  counts = jax.vmap(lambda k: jnp.zeros((length + 1,), jnp.int32).at[
      jnp.where((k >= 0) & (k < length), k, length)].add(1))(flat)
  return counts[:, :length].reshape(keys.shape[:-1] + (length,))


@functools.partial(jax.jit, static_argnames=("num_bits", "num_levels"))
def _distance_histogram(distances, affinity, num_bits, num_levels):
  keys = distances.astype(jnp.int32) * num_levels + affinity.astype(jnp.int32)
  hist = _bin_counts(keys, (num_bits + 1) * num_levels)
  return hist.reshape(distances.shape[:-1] + (num_bits + 1, num_levels))


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
  if affinity is None:
    affinity = jnp.zeros(distances.shape, jnp.int32)
    num_levels = 1
  else:
    _checks.check_shape("affinity", affinity, distances.shape, like="distances")
    num_levels = _levels(affinity, num_levels)
  return _distance_histogram(jnp.asarray(distances), jnp.asarray(affinity), num_bits, num_levels)


@functools.partial(jax.jit, static_argnames=("num_bits", "num_levels", "chunk_size"))
def _hamming_histogram(query_words, db_words, affinity, num_bits, num_levels, chunk_size):
  num_db = db_words.shape[0]
  num_chunks = -(-num_db // chunk_size)
  pad = num_chunks * chunk_size - num_db
  db = jnp.pad(db_words, ((0, pad), (0, 0)))
  # Padded items get key -1 (dropped by _bin_counts).
  aff = jnp.pad(affinity.astype(jnp.int32), ((0, 0), (0, pad)), constant_values=-1)
  db = db.reshape(num_chunks, chunk_size, -1)
  aff = jnp.moveaxis(aff.reshape(aff.shape[0], num_chunks, chunk_size), 1, 0)
  length = (num_bits + 1) * num_levels

  def step(total, xs):
    db_chunk, aff_chunk = xs
    d = _hamming(query_words, db_chunk)
    keys = jnp.where(aff_chunk >= 0, d * num_levels + aff_chunk, -1)
    return total + _bin_counts(keys, length), None

  init = jnp.zeros((query_words.shape[0], length), jnp.int32)
  total, _ = jax.lax.scan(step, init, (db, aff))
  return total.reshape(query_words.shape[0], num_bits + 1, num_levels)


def hamming_histogram(query_words: Array, db_words: Array, affinity: Optional[Array] = None, *,
                      num_bits: int, num_levels: Optional[int] = None,
                      chunk_size: int = DEFAULT_CHUNK_SIZE) -> Array:
  """Per-query histogram of Hamming distances, streamed over database chunks.

  Never materialises the ``[Q, N]`` distance matrix: memory is
  ``O(Q * chunk_size)`` beside the inputs, so ``N = 10^7`` fits.

  .. math:: n_{q,d,v} = |\\{ i : d(q, i) = d, a_{q,i} = v \\}|

  Args:
    query_words: ``uint32[Q, W]`` packed queries.
    db_words: ``uint32[N, W]`` packed database codes.
    affinity: optional ``int[Q, N]`` levels in ``[0, num_levels)``.
    num_bits: the code length; must match ``W``.
    num_levels: ``V`` (see :func:`distance_histogram`).
    chunk_size: database items per streamed step.

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
    affinity = jnp.zeros((query_words.shape[0], db_words.shape[0]), jnp.int32)
    num_levels = 1
  else:
    _checks.check_shape("affinity", affinity, (query_words.shape[0], db_words.shape[0]),
                        like="[len(query_words), len(db_words)]")
    num_levels = _levels(affinity, num_levels)
  if not isinstance(chunk_size, int) or chunk_size < 1:
    raise ValueError(f"chunk_size: expected a positive int, got {chunk_size!r}")
  chunk_size = min(chunk_size, db_words.shape[0])
  return _hamming_histogram(jnp.asarray(query_words), jnp.asarray(db_words), jnp.asarray(affinity),
                            num_bits, num_levels, chunk_size)


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
