"""Binary codes: bits <-> packed words, and the Hamming distances between them.

Names used across hashjax:

* ``bits[..., num_bits]``: a code as ``{0, 1}``, ``bool`` or ``±1`` values;
* ``words[..., ceil(num_bits / 32)]``: the same code packed into ``uint32``;
  bit ``j`` sits in word ``j // 32`` at position ``j % 32`` (least significant
  first) and padding bits are 0, so two codes of the same length compare
  exactly;
* ``distances[Q, N]``: ``int32`` Hamming distances in ``[0, num_bits]``.

Packed words cannot tell 30 bits from 32, so every function that needs the
code length takes ``num_bits=`` explicitly. Histograms of distances are in
:mod:`hashjax.histograms`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks
from hashjax._kernels import weighted

Array = jax.Array


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


@jax.jit
def _pack(bits: Array) -> Array:
  # bits[..., 32 W] (already padded): one fused pass, no [..., W, 32] temporaries.
  on = (bits > 0).astype(jnp.uint32)
  on = on.reshape(on.shape[:-1] + (on.shape[-1] // 32, 32))
  shifts = jnp.arange(32, dtype=jnp.uint32)
  return jnp.sum(on << shifts, axis=-1, dtype=jnp.uint32)


def pack_bits(bits: Array) -> Array:
  r"""Packs ``bits[..., num_bits]`` into ``uint32`` words, least significant first.

  .. math:: w_i = \sum_{j=0}^{31} b_{32 i + j} \, 2^{j}

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
  _checks.check_bits("bits", bits)
  pad = _checks.num_words_for(bits.shape[-1]) * 32 - bits.shape[-1]
  if pad:
    xnp = np if isinstance(bits, np.ndarray) else jnp
    bits = xnp.pad(bits, [(0, 0)] * (bits.ndim - 1) + [(0, pad)])
  return _pack(bits)


@jax.jit
def _unpack(words: Array) -> Array:
  # All 32 W bits in one fused pass; callers slice to num_bits.
  shifts = jnp.arange(32, dtype=jnp.uint32)
  bits = (words[..., None] >> shifts) & jnp.uint32(1)
  return bits.reshape(words.shape[:-1] + (words.shape[-1] * 32,)).astype(jnp.uint8)


def unpack_bits(words: Array, num_bits: int) -> Array:
  r"""Inverse of :func:`pack_bits`: ``uint32[..., W]`` words to ``uint8`` bits.

  .. math:: b_j = \lfloor w_{\lfloor j/32 \rfloor} / 2^{j \bmod 32} \rfloor \bmod 2

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


@jax.jit
def _hamming(query_words: Array, db_words: Array) -> Array:
  # One fused pass over [Q, N, W]: no temporary of that size.
  x = jnp.bitwise_xor(query_words[:, None, :], db_words[None, :, :])
  return jnp.sum(jax.lax.population_count(x).astype(jnp.int32), axis=-1)


def hamming_distance(query_words: Array, db_words: Array) -> Array:
  r"""All-pairs Hamming distance between packed codes (XOR + popcount).

  .. math:: d(q, i) = \sum_w \mathrm{popcount}(q_w \oplus x_{i,w})

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
  _checks.check_word_pair(query_words, db_words)
  return _hamming(_checks.as_jax(query_words), _checks.as_jax(db_words))


def weighted_hamming_distance(query_words: Array, db_words: Array, weights: Array) -> Array:
  r"""All-pairs weighted Hamming distance between packed codes: the weights of the bits where two codes differ.

  .. math:: d_w(q, i) = \sum_k w_k \, [q_k \ne x_{i,k}]

  Computed as a sum of per-byte table lookups, in ``float32`` and in one fixed order (each byte's table entry
  the pairwise sum of its 8 bit terms, then the pairwise sum of the entries over the bytes:
  :mod:`hashjax._kernels.weighted`), so every backend gives the same bits, and the same bits as the
  distances of ``hashjax.search.knn(..., weights=w)``. No matmul, so no reduced-precision default on a GPU.
  Weights below ``2^-126`` (subnormal) count as 0.

  Args:
    query_words: ``uint32[Q, W]`` packed query codes (:func:`pack_bits`), ``W = ceil(num_bits / 32)``,
      padding bits 0.
    db_words: ``uint32[N, W]`` packed database codes of the same width.
    weights: ``float[num_bits]`` non-negative finite weights, used as ``float32`` (the weights
      :func:`hashjax.search.knn` takes).

  Returns:
    ``float32[Q, N]`` distances.

  >>> import numpy as np
  >>> weighted_hamming_distance(pack_bits(np.array([[1, 0, 1]])), pack_bits(np.array([[0, 0, 0]])),
  ...                           np.array([0.5, 2.0, 1.0])).tolist()
  [[1.5]]
  """
  _checks.check_weighted_pair(query_words, db_words, weights)
  (num_q, num_words), num_db = query_words.shape, db_words.shape[0]
  if _checks.is_concrete(weights):
    w = _checks.as_jax(weighted.flush_weights(np.asarray(weights), num_words))
  else:
    w = weighted.flush_weights_traced(weights, num_words)
  # Queries in groups whose [rows, N, 4 W] lookups stay within a few MB.
  rows = max(1, min(num_q, (1 << 21) // max(1, num_db * 4 * num_words)))
  padded = -(-num_q // rows) * rows
  q = _checks.as_jax(query_words)
  if padded > num_q:
    q = jnp.concatenate([q, jnp.zeros((padded - num_q, num_words), jnp.uint32)])
  out = weighted.pair_distances(q, _checks.as_jax(db_words), weighted.byte_tables(w), rows=rows)
  return out[:num_q]
