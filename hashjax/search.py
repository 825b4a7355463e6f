r"""Exact Hamming search over packed codes: k nearest neighbours and radius search.

Both searches return exactly what a brute-force scan returns, under one
deterministic order: **ascending distance, then ascending database index**.
So ``knn(q, x, k)`` is the first ``k`` entries of every query's row of
``radius_search(q, x, r)`` whenever the k-th distance is at most ``r``.

:func:`knn` scans the database once per batch of up to 256 queries, keeping
the minimum distance of each block of 32 and each superblock of 256 items,
and selects the top ``k`` from those minima in three exact steps (the
algorithm and its lemma are in :mod:`hashjax._kernels.scan`); it never holds
the ``[Q, N]`` distances. Where that does not apply (a database too small to
prune, a very large ``k``), it takes one ``top_k`` over every item of a small
database, or a streaming two-key sort; all are exact. Databases larger than
``float32``'s exact integer keys allow are searched in segments whose results
merge by (distance, index).

:func:`radius_search` runs the same scan and examines item by item only the
superblocks whose minimum is within the radius, so its cost is one scan plus
work proportional to the output.

**Weighted search** (``weights=w``, one non-negative weight per bit): the distance is
``d_w(q, x) = sum_j w_j [q_j != x_j]``, a ``float32`` sum of per-byte table lookups in a fixed order, so every
backend and every path gives the same bits as :func:`hashjax.codes.weighted_hamming_distance` (the order is
in :mod:`hashjax._kernels.weighted`). The order of results is the same: ascending distance, then ascending
index. For concrete inputs over a large database, :func:`knn` and :func:`radius_search` first scan a lower
bound of the weighted distance (the popcount scan with one multiplier per half-byte of the code, its bits reordered
by weight) and evaluate exactly only the blocks of 32 items that the bound cannot rule out; otherwise (under
``jit``, small databases, a GPU) :func:`knn` scans the exact distances with the three selections above. Both
are exact. :func:`rerank` orders a shortlist (such as Hamming neighbours) by weighted distance, and
:func:`knn_tie_break` ranks by Hamming distance with the weighted distance breaking its ties.

:func:`knn_with_ties` returns the ``k`` nearest neighbours with the rest of the ``k``-th distance's tie group.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple, Union

import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks
from hashjax._kernels import scan
from hashjax._kernels import weighted as wkernels

Array = jax.Array

#: Database items per streamed step (rounded up to a multiple of 256).
DEFAULT_CHUNK_SIZE = 65536

_SB = scan.SUPERBLOCK
_MAX_LANES = 256  # queries per scan
_STAGE_ELEMS = 1 << 23  # budget for the [queries, 32 k, W] words of the last selection
_SORT_ELEMS = 1 << 22  # budget for the [queries, items] arrays of the fallbacks
_EXACT_CHUNK = 4096  # items per step of the exact weighted scan (its [queries, items, bytes] lookups)
#: Weighted knn prunes with its bound scan from this many database items on (concrete inputs, CPU backend):
#: on one CPU core the exact scan is faster below about 2^17 items.
PRUNE_MIN_ITEMS = 1 << 17


class RaggedNeighbors(NamedTuple):
  """Variable-length search results of ``Q`` queries, in CSR form.

  Query ``q``'s results are ``distances[offsets[q]:offsets[q + 1]]`` and
  ``indices[offsets[q]:offsets[q + 1]]``, ordered by ascending distance, then
  ascending database index.

  Attributes:
    distances: ``int32[T]`` Hamming distances, ``T = offsets[-1]`` (``float32[T]`` weighted distances from a
      weighted search).
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

  @classmethod
  def from_arrays(cls, distances, indices, offsets) -> "RaggedNeighbors":
    r"""The result held by host arrays, as jax arrays: ``int32`` indices and offsets, ``float32`` distances
    when they are floats (a weighted search), else ``int32``.

    .. math:: T = \mathrm{offsets}[Q] \le 2^{31} - 1

    Args:
      distances: ``[T]`` distances.
      indices: ``int[T]`` database indices.
      offsets: ``int[Q + 1]`` row starts (any integer dtype); ``ValueError`` naming ``r`` when ``T`` exceeds
        the ``int32`` offsets.

    >>> import numpy as np
    >>> res = RaggedNeighbors.from_arrays(np.array([0, 2]), np.array([4, 1]), np.array([0, 1, 2], np.int64))
    >>> res.offsets.dtype.name, res.counts.tolist()
    ('int32', [1, 1])
    """
    _checks.check_result_count(offsets[-1])
    distances = np.asarray(distances)
    return cls(jax.device_put(distances.astype(np.float32 if distances.dtype.kind == "f" else np.int32)),
               jax.device_put(np.asarray(indices, np.int32)), jax.device_put(np.asarray(offsets, np.int32)))


class TieBreakNeighbors(NamedTuple):
  """Neighbours ranked by Hamming distance, ties broken by weighted distance, then by index
  (:func:`knn_tie_break`).

  Attributes:
    hamming: ``int32[Q, k]`` Hamming distances, ascending per row.
    weighted: ``float32[Q, k]`` weighted distances, ascending within each run of equal Hamming distance.
    indices: ``int32[Q, k]`` database indices.
  """
  hamming: Array
  weighted: Array
  indices: Array


# ----------------------------------------------------------------------------
# Arguments.


def _check_chunk_size(chunk_size) -> int:
  """The chunk size rounded up to a multiple of 256."""
  return -(-_checks.check_int("chunk_size", chunk_size) // _SB) * _SB


def _weights(query_words, db_words, weights, *, required: bool = False):
  """Checks the codes (and the weights, for their width); returns None without weights, else ``float32[32 W]``
  weights with subnormals as 0 and padding bits 0 (numpy when concrete, else jax.numpy)."""
  _checks.check_local("db_words", db_words, use="hashjax.sharding.knn / radius_search (or gather the rows)")
  if weights is None and not required:
    _checks.check_word_pair(query_words, db_words)
    return None
  _checks.check_weighted_pair(query_words, db_words, weights)
  if _checks.is_concrete(weights):
    return wkernels.flush_weights(np.asarray(weights), query_words.shape[1])
  return wkernels.flush_weights_traced(weights, query_words.shape[1])


#: ``k`` of a search that takes none (:func:`radius_search`).
_NO_K = object()


def _check_search(query_words, db_words, weights, k, chunk_size, *, required: bool = False,
                  concrete: bool = False) -> tuple:
  """The arguments of a search, checked in order: ``(w, k, chunk_size)``, ``w`` as :func:`_weights` gives it
  (the inputs then concrete, when ``concrete``), ``1 <= k <= N`` (unless :data:`_NO_K`) and the chunk size
  rounded up to a multiple of 256."""
  w = _weights(query_words, db_words, weights, required=required)
  if concrete:
    _checks.check_concrete("query_words, db_words, weights", query_words, db_words, weights)
  k = k if k is _NO_K else _checks.check_k(k, db_words.shape[0])
  return w, k, _check_chunk_size(chunk_size)


# ----------------------------------------------------------------------------
# Layout: host numpy for concrete inputs, jax.numpy when traced.


def _xp(*arrays):
  return np if all(isinstance(a, np.ndarray) for a in arrays) else jnp


def _host_or_traced(*arrays):
  """numpy views of concrete arrays, so that padding and layout run on the host; traced arrays unchanged."""
  if all(_checks.is_concrete(a) for a in arrays):
    return tuple(np.asarray(a) for a in arrays)
  return tuple(jnp.asarray(a) for a in arrays)


def _layout(num_db: int, chunk_size: int):
  """``(items per chunk S, chunks C)``: one chunk of ``N`` rounded up to 256 items, or chunks of ``chunk_size``."""
  if num_db <= chunk_size:
    return -(-num_db // _SB) * _SB, 1
  return chunk_size, -(-num_db // chunk_size)


def _pad_rows(x, rows: int):
  """``x[n, ...]`` padded to ``rows`` rows with copies of its last row, which keep every group's minimum
  distance that of its real items."""
  xp = _xp(x)
  if rows <= x.shape[0]:
    return x
  return xp.concatenate([x, xp.broadcast_to(x[-1:], (rows - x.shape[0],) + x.shape[1:])])


def _pow2_at_least(n: int) -> int:
  return 1 << max(0, int(n) - 1).bit_length()


def _lanes(num_queries: int, stage_elems_per_query: int = 0) -> int:
  """Queries per scan: a power of two from 32 to 256, halved while the last selection would hold more
  than ``_STAGE_ELEMS`` elements."""
  lanes = min(_MAX_LANES, max(32, _pow2_at_least(num_queries)))
  while lanes > 1 and lanes * stage_elems_per_query > _STAGE_ELEMS:
    lanes //= 2
  return lanes


def _rows(parts, num_rows: int):
  """Per-batch ``[rows, k]`` results concatenated and cut to ``num_rows`` (on the host when concrete)."""
  parts = [np.asarray(p) for p in parts] if all(_checks.is_concrete(p) for p in parts) else parts
  return _xp(*parts).concatenate(parts)[:num_rows]


def _batches(query_words, rows: int):
  """``query_words`` padded to a multiple of ``rows`` and cut into batches of ``rows`` (jax arrays)."""
  padded = _pad_rows(query_words, -(-query_words.shape[0] // rows) * rows)
  return [_checks.as_jax(padded[b:b + rows]) for b in range(0, padded.shape[0], rows)]


# ----------------------------------------------------------------------------
# k nearest neighbours.


def _plan(num_db: int, num_words: int, k: int, chunk_size: int) -> str:
  """Which exact selection :func:`knn` uses for one database segment.

  ``"hierarchical"`` (block minima, the fast path) when the database holds at least
  ``k`` superblocks and its ``float32`` keys are exact; else ``"all"`` (one
  ``top_k`` over every item) for small databases; else ``"sorted"`` (a
  streaming two-key sort).
  """
  scale = 32 * num_words + 2  # distinct distance keys, the sentinel included
  size, num_chunks = _layout(num_db, chunk_size)
  if -(-num_db // _SB) >= k and scale * size * num_chunks // scan.BLOCK <= scan.F32_EXACT \
      and scale * k * scan.BLOCK <= scan.F32_EXACT:
    return "hierarchical"
  num_pad = -(-num_db // _SB) * _SB
  if scale * num_pad < scan.F32_EXACT and num_pad <= 4 * max(chunk_size, 4096):
    return "all"
  return "sorted"


def _segment_size(num_words: int, chunk_size: int) -> int:
  """Largest database segment, in whole chunks, whose block keys stay exact in ``float32``."""
  items = scan.F32_EXACT // (32 * num_words + 2) * scan.BLOCK
  return max(1, items // chunk_size) * chunk_size


def _query_rows(num_q: int, per_query_elems: int) -> int:
  """Queries per call of a fallback: a power of two, at most 256, holding at most ``_SORT_ELEMS`` elements."""
  rows = min(_SORT_ELEMS // max(per_query_elems, 1), _MAX_LANES, _pow2_at_least(num_q))
  return 1 << max(0, rows.bit_length() - 1)


def _knn_scan(query_words, db_words, k: int, chunk_size: int):
  num_q, num_words = query_words.shape
  num_db = db_words.shape[0]
  size, num_chunks = _layout(num_db, chunk_size)
  db_pad = _checks.as_jax(_pad_rows(db_words, size * num_chunks))
  out = [scan.knn_batch(q, db_pad, num_db, k=k, chunk_size=size)
         for q in _batches(query_words, _lanes(num_q, k * scan.BLOCK * num_words))]
  return _rows([d for d, _ in out], num_q), _rows([i for _, i in out], num_q)


def _knn_all(query_words, db_words, k: int):
  num_db = db_words.shape[0]
  db_pad = _checks.as_jax(_pad_rows(db_words, -(-num_db // _SB) * _SB))
  rows = _query_rows(query_words.shape[0], db_pad.shape[0])
  out = [scan.select_all(q, db_pad, num_db, k) for q in _batches(query_words, rows)]
  return _rows([d for d, _ in out], query_words.shape[0]), _rows([i for _, i in out], query_words.shape[0])


def _knn_sorted(query_words, db_words, k: int, chunk_size: int):
  num_q, num_words = query_words.shape
  num_db = db_words.shape[0]
  size, num_chunks = _layout(num_db, max(chunk_size, -(-k // _SB) * _SB))
  db_pad = _pad_rows(db_words, size * num_chunks)
  chunks = [_checks.as_jax(db_pad[c * size:(c + 1) * size]) for c in range(num_chunks)]
  rows = _query_rows(num_q, size + k)
  dists, ids = [], []
  for q in _batches(query_words, rows):
    d = _checks.as_jax(np.full((rows, k), 32 * num_words + 2, np.int32))
    i = _checks.as_jax(np.full((rows, k), np.iinfo(np.int32).max, np.int32))
    for c, chunk in enumerate(chunks):
      d, i = scan.merge_chunk(q, chunk, c * size, num_db, d, i, k)
    dists.append(d)
    ids.append(i)
  return _rows(dists, num_q), _rows(ids, num_q)


def _knn(query_words, db_words, k: int, chunk_size: int):
  """Hamming top ``k`` by (distance, index), in database segments whose block keys stay exact."""
  q, db = _host_or_traced(query_words, db_words)
  segment = _segment_size(q.shape[1], chunk_size)
  d = i = None
  for start in range(0, db.shape[0], segment):
    part = db[start:start + segment]
    part_k = min(k, part.shape[0])
    plan = _plan(part.shape[0], q.shape[1], part_k, chunk_size)
    if plan == "hierarchical":
      d2, i2 = _knn_scan(q, part, part_k, chunk_size)
    elif plan == "all":
      d2, i2 = _knn_all(q, part, part_k)
    else:
      d2, i2 = _knn_sorted(q, part, part_k, chunk_size)
    i2 = i2 + start if start else i2
    d, i = (d2, i2) if d is None else scan.merge_sorted(d, i, d2, i2, min(k, d.shape[1] + d2.shape[1]))
  return _checks.as_jax(d), _checks.as_jax(i)


def knn(query_words: Array, db_words: Array, k: int, *, weights: Optional[Array] = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE) -> Tuple[Array, Array]:
  r"""Exact k nearest neighbours in Hamming or weighted Hamming distance, ties broken by database index.

  The order is ascending distance, then ascending database index, so the
  result is deterministic and equals a stable sort of each query's distances.
  With ``weights=w`` the distance is the weighted Hamming distance
  :math:`d_w(q, i) = \sum_j w_j [q_j \ne x_{i,j}]` (see the module docstring).
  :func:`knn_with_ties` returns whole tie groups, :func:`knn_tie_break` the
  Hamming order with weighted tie-breaking.

  .. math:: \mathrm{knn}_k(q) = \text{the first } k \text{ items } i
     \text{ in the order } (d(q, i), i)

  The scan streams over database chunks and never holds the ``[Q, N]``
  distance matrix (see the module docstring). Memory beyond the inputs: a
  padded copy of the database, about ``N / 28`` bytes per query of the
  current batch (at most 256 queries) for the scan's block minima, and
  ``O(32 k W)`` words per query for the selection.

  Args:
    query_words: ``uint32[Q, W]`` packed query codes (:func:`hashjax.codes.pack_bits`).
    db_words: ``uint32[N, W]`` packed database codes of the same width.
    k: number of neighbours, ``1 <= k <= N``; ``k > N`` raises ``ValueError``
      (no padding policy).
    weights: None (Hamming distance), or ``float[num_bits]`` non-negative finite
      weights, one per bit, used as ``float32`` (``W = ceil(num_bits / 32)``; the
      codes' padding bits must be 0; values checked when concrete). Returns
      ``float32`` distances, the bits of
      :func:`hashjax.codes.weighted_hamming_distance`. On the CPU
      backend, concrete inputs over at least :data:`PRUNE_MIN_ITEMS` items take
      the pruned scan (see the module docstring); otherwise the exact scan, about
      4 ns per (query, item) on a CPU core.
    chunk_size: database items per streamed step (rounded up to a multiple of
      256). Memory per step is ``O(256 * chunk_size)`` bytes.

  Returns:
    ``(distances, indices)``, each ``int32[Q, k]`` (distances ``float32[Q, k]``
    with ``weights``), sorted per row by (distance, index).

  >>> import numpy as np
  >>> from hashjax.codes import pack_bits
  >>> x = pack_bits(np.array([[1, 1, 0], [0, 0, 0], [1, 0, 0], [0, 1, 0]]))
  >>> q = pack_bits(np.array([[1, 0, 0]]))
  >>> distances, indices = knn(q, x, 2)
  >>> distances.tolist(), indices.tolist()
  ([[0, 1]], [[2, 0]])
  >>> distances, indices = knn(q, x, 2, weights=np.array([0.5, 2.0, 1.0], np.float32))
  >>> distances.tolist(), indices.tolist()
  ([[0.0, 0.5]], [[2, 1]])
  """
  w, k, chunk_size = _check_search(query_words, db_words, weights, k, chunk_size)
  if w is None:
    return _knn(query_words, db_words, k, chunk_size)
  return _weighted_knn(query_words, db_words, w, k, chunk_size)


def knn_with_ties(query_words: Array, db_words: Array, k: int, *, weights: Optional[Array] = None,
                  chunk_size: int = DEFAULT_CHUNK_SIZE) -> RaggedNeighbors:
  r"""The ``k`` nearest neighbours with every item tied with the ``k``-th (whole tie groups, as Nair et al.
  2012 evaluate).

  Row ``q`` holds every item whose distance is at most the ``k``-th distance
  ``d_k(q)`` of :func:`knn`: it starts with :func:`knn`'s ``k`` items and goes
  on with the rest of ``d_k(q)``'s tie group, by index (:func:`radius_search`
  with radius ``d_k(q)``). Needs concrete inputs (the number of ties varies,
  so it cannot run under ``jit``).

  .. math:: \mathcal{T}_k(q) = \{ i : d(q, i) \le d_k(q) \}, \text{ ordered by } (d(q, i), i)

  Args:
    query_words: ``uint32[Q, W]`` packed query codes.
    db_words: ``uint32[N, W]`` packed database codes of the same width.
    k: ``1 <= k <= N``.
    weights: None (Hamming distance) or ``float[num_bits]`` weights, as for :func:`knn`.
    chunk_size: database items per streamed step, as for :func:`knn`.

  Returns:
    A :class:`RaggedNeighbors` ``(distances, indices, offsets)``.

  >>> import numpy as np
  >>> from hashjax.codes import pack_bits
  >>> x = pack_bits(np.array([[1, 1, 0], [0, 0, 0], [1, 0, 0], [0, 1, 0]]))
  >>> ties = knn_with_ties(pack_bits(np.array([[1, 0, 0]])), x, 2)
  >>> ties.distances.tolist(), ties.indices.tolist(), ties.offsets.tolist()
  ([0, 1, 1], [2, 0, 1], [0, 3])
  """
  w, k, chunk_size = _check_search(query_words, db_words, weights, k, chunk_size, concrete=True)
  q, db = np.asarray(query_words), np.asarray(db_words)
  if w is None:
    return _radius(q, db, np.asarray(_knn(q, db, k, chunk_size)[0][:, -1], np.int64), chunk_size)
  kth = np.asarray(_weighted_knn(q, db, w, k, chunk_size)[0][:, -1], np.float64)
  return _weighted_radius(q, db, w, kth, chunk_size)


def knn_tie_break(query_words: Array, db_words: Array, k: int, *, weights: Array,
                  chunk_size: int = DEFAULT_CHUNK_SIZE) -> TieBreakNeighbors:
  r"""The ``k`` nearest neighbours in Hamming distance, its ties broken by weighted distance, then by index.

  .. math:: \text{the first } k \text{ items } i \text{ in the order } (d(q, i), d_w(q, i), i)

  The items nearer than the ``k``-th Hamming distance ``h_k(q)``, then those
  at ``h_k(q)`` by (weighted distance, index): an exact weighted search
  restricted to the items at ``h_k(q)``. Runs under ``jit``.

  Args:
    query_words: ``uint32[Q, W]`` packed query codes.
    db_words: ``uint32[N, W]`` packed database codes of the same width.
    k: ``1 <= k <= N``.
    weights: ``float[num_bits]`` non-negative finite weights, as for :func:`knn`.
    chunk_size: database items per streamed step, as for :func:`knn`.

  Returns:
    A :class:`TieBreakNeighbors` ``(hamming int32[Q, k], weighted float32[Q, k], indices int32[Q, k])``.

  >>> import numpy as np
  >>> from hashjax.codes import pack_bits
  >>> x = pack_bits(np.array([[1, 1, 0], [0, 0, 0], [1, 0, 0], [0, 1, 0]]))
  >>> res = knn_tie_break(pack_bits(np.array([[1, 0, 0]])), x, 3, weights=np.array([0.5, 2.0, 1.0], np.float32))
  >>> res.hamming.tolist(), res.weighted.tolist(), res.indices.tolist()
  ([[0, 1, 1]], [[0.0, 0.5, 2.0]], [[2, 1, 0]])
  """
  w, k, chunk_size = _check_search(query_words, db_words, weights, k, chunk_size, required=True)
  return _knn_tie_break(query_words, db_words, w, k, chunk_size)


# ----------------------------------------------------------------------------
# Weighted k nearest neighbours.


def _weighted_knn(query_words, db_words, w, k: int, chunk_size: int, required=None):
  """Weighted top ``k`` by (distance, index): the pruned scan for concrete inputs over a large database, else
  the exact scan. ``required[Q]``: only items at that Hamming distance count (others at ``+inf``)."""
  concrete = all(_checks.is_concrete(a) for a in (query_words, db_words, w))
  # The pruned search passes its candidates through the host: on a GPU the exact scan is 17 times faster.
  if (concrete and required is None and jax.default_backend() == "cpu" and db_words.shape[0] >= PRUNE_MIN_ITEMS
      and -(-db_words.shape[0] // _SB) >= k):
    pruning = wkernels.Pruning(np.asarray(db_words), w, chunk_size=chunk_size)
    d, i = wkernels.knn_pruned(pruning, np.asarray(query_words), k)
    return _checks.as_jax(d), _checks.as_jax(i)
  tables = wkernels.byte_tables(_checks.as_jax(w))
  q, db = _host_or_traced(query_words, db_words)
  num_q, num_words = q.shape
  num_db = db.shape[0]
  if required is not None:
    required = jnp.asarray(required, jnp.int32)
  size, num_chunks = _layout(num_db, min(chunk_size, _EXACT_CHUNK))
  num_pad = -(-num_db // _SB) * _SB
  if -(-num_db // _SB) >= k:
    db_pad = _checks.as_jax(_pad_rows(db, size * num_chunks))
    rows = _lanes(num_q, k * scan.BLOCK * num_words)
    call = lambda qb, rb: wkernels.knn_exact(qb, db_pad, num_db, tables, rb, k=k, chunk_size=size)
  elif num_pad <= 4 * max(chunk_size, 4096):
    db_pad = _checks.as_jax(_pad_rows(db, num_pad))
    rows = _query_rows(num_q, num_pad * 4 * num_words)
    call = lambda qb, rb: wkernels.select_all_exact(qb, db_pad, num_db, tables, rb, k=k)
  else:
    size, num_chunks = _layout(num_db, max(min(chunk_size, _EXACT_CHUNK), -(-k // _SB) * _SB))
    db_pad = _pad_rows(db, size * num_chunks)
    chunks = [_checks.as_jax(db_pad[c * size:(c + 1) * size]) for c in range(num_chunks)]
    rows = _query_rows(num_q, (size + k) * 4 * num_words)

    def call(qb, rb):
      d = jnp.full((qb.shape[0], k), jnp.inf, jnp.float32)
      i = jnp.full((qb.shape[0], k), np.iinfo(np.int32).max, jnp.int32)
      for c, chunk in enumerate(chunks):
        d, i = wkernels.merge_chunk_exact(qb, chunk, c * size, num_db, tables, rb, d, i, k=k)
      return d, i

  req = None if required is None else _pad_rows(required, -(-num_q // rows) * rows)
  out = [call(qb, None if req is None else req[b * rows:(b + 1) * rows])
         for b, qb in enumerate(_batches(q, rows))]
  return _checks.as_jax(_rows([d for d, _ in out], num_q)), _checks.as_jax(_rows([i for _, i in out], num_q))


def _knn_tie_break(query_words, db_words, w, k: int, chunk_size: int) -> TieBreakNeighbors:
  """Rank by (Hamming, weighted, index): the items nearer than the k-th Hamming distance ``h_k``, then the
  items at ``h_k`` by (weighted distance, index)."""
  ham, ham_ids = _knn(query_words, db_words, k, chunk_size)
  h_k = ham[:, -1]
  wd, wi = _weighted_knn(query_words, db_words, w, k, chunk_size, required=h_k)
  tables = wkernels.byte_tables(_checks.as_jax(w))
  q, db = (_checks.as_jax(a) for a in (query_words, db_words))
  dw_ham = wkernels.distances_of(q, db, ham_ids, tables)
  # Items at h_k come from the restricted weighted search (its +inf entries: fewer than k items at h_k).
  valid = jnp.concatenate([ham < h_k[:, None], jnp.isfinite(wd)], axis=1)
  hamming = jnp.where(valid, jnp.concatenate([ham, jnp.broadcast_to(h_k[:, None], wd.shape)], 1),
                      np.iinfo(np.int32).max)
  order = lax.sort((hamming, jnp.concatenate([dw_ham, wd], 1), jnp.concatenate([ham_ids, wi], 1)),
                   dimension=1, num_keys=3)
  return TieBreakNeighbors(*(a[:, :k] for a in order))


def rerank(query_words: Array, db_words: Array, candidates: Array, k: int, *, weights: Array):
  r"""Re-ranks a shortlist by weighted Hamming distance: the top ``k`` of each query's candidates.

  A Hamming shortlist then an exact weighted order, e.g. ``rerank(q, x, knn(q, x, 1000)[1], 100,
  weights=w)``. The result is the exact weighted top ``k`` of the candidates, ordered by (weighted distance,
  index), with the distances of :func:`knn` (the same bits).

  .. math:: \mathrm{rerank}_k(q) = \text{the first } k \text{ of } C_q \text{ in the order } (d_w(q, i), i)

  Args:
    query_words: ``uint32[Q, W]`` packed query codes.
    db_words: ``uint32[N, W]`` packed database codes of the same width.
    candidates: ``int[Q, C]`` distinct database indices per query, ``k <= C`` (checked when concrete).
    k: number of results per query.
    weights: ``float[num_bits]`` non-negative finite weights, as for :func:`knn`.

  Returns:
    ``(distances float32[Q, k], indices int32[Q, k])`` sorted per row by (distance, index).

  >>> import numpy as np
  >>> from hashjax.codes import pack_bits
  >>> x = pack_bits(np.array([[1, 1, 0], [0, 0, 0], [1, 0, 0], [0, 1, 1]]))
  >>> q = pack_bits(np.array([[0, 0, 1]]))
  >>> d, i = rerank(q, x, np.array([[3, 0, 1]]), 2, weights=np.array([0.5, 2.0, 1.0], np.float32))
  >>> d.tolist(), i.tolist()
  ([[1.0, 2.0]], [[1, 3]])
  """
  w = _weights(query_words, db_words, weights, required=True)
  _checks.check_array("candidates", candidates, ndim=2, shape_doc="[Q, C]", kinds="iu", what="index array")
  _checks.check_shape("candidates", candidates, (query_words.shape[0], candidates.shape[1]), like="a row per query")
  k = _checks.check_k(k, candidates.shape[1], db_name="each row of candidates")
  if _checks.is_concrete(candidates):
    _checks.check_int_range("candidates", candidates, 0, db_words.shape[0] - 1, what="database indices")
    ids = np.sort(np.asarray(candidates), axis=1)
    if (ids[:, 1:] == ids[:, :-1]).any():
      raise ValueError("candidates: expected distinct indices in each row, got a repeated index")
  tables = wkernels.byte_tables(_checks.as_jax(w))
  return wkernels.rerank(*(_checks.as_jax(a) for a in (query_words, db_words, candidates)), tables, k=k)


# ----------------------------------------------------------------------------
# Radius search.


def radius_search(query_words: Array, db_words: Array, r: Union[int, float, Array], *,
                  weights: Optional[Array] = None, chunk_size: int = DEFAULT_CHUNK_SIZE) -> RaggedNeighbors:
  r"""Every database item within Hamming (or weighted Hamming) distance ``r`` of each query.

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
    r: the radius, a non-negative int, or ``int[Q]`` one radius per query; with
      ``weights``, a finite number ``>= 0`` or a real array ``[Q]``.
    weights: None, or ``float[num_bits]`` non-negative finite weights as for
      :func:`knn`: items with ``d_w(q, i) <= r``, found by the bound scan (the
      blocks of 32 items whose bound is within ``r``, evaluated exactly), with
      ``float32`` distances.
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
  >>> res = radius_search(q, x, 1.0, weights=np.array([0.5, 2.0, 1.0], np.float32))
  >>> res.distances.tolist(), res.indices.tolist(), res.offsets.tolist()
  ([0.0, 0.5, 0.5, 1.0], [2, 1, 3, 0], [0, 2, 4])
  """
  w, _, chunk_size = _check_search(query_words, db_words, weights, _NO_K, chunk_size, concrete=True)
  q, db = np.asarray(query_words), np.asarray(db_words)
  if w is None:
    return _radius(q, db, _checks.check_radius(r, q.shape[0]), chunk_size)
  return _weighted_radius(q, db, w, _checks.check_float_radius(r, q.shape[0]), chunk_size)


def _weighted_radius(q: np.ndarray, db: np.ndarray, w, radius: np.ndarray, chunk_size: int) -> RaggedNeighbors:
  """Weighted radius search by the bound scan; ``radius`` ``float64[Q]``."""
  return RaggedNeighbors.from_arrays(*wkernels.radius_pruned(wkernels.Pruning(db, w, chunk_size=chunk_size), q,
                                                             radius))


def _radius(q: np.ndarray, db: np.ndarray, radius: np.ndarray, chunk_size: int) -> RaggedNeighbors:
  """Hamming radius search: the superblocks within the radius, then their items; ``radius`` ``int64[Q]``."""
  num_q, num_words = q.shape
  radius = np.minimum(radius, 32 * num_words)
  num_db = db.shape[0]
  size, num_chunks = _layout(num_db, chunk_size)
  db_pad = _pad_rows(db, size * num_chunks)
  chunks = _checks.as_jax(db_pad.reshape(num_chunks, size, num_words))
  lanes = _lanes(num_q)
  q_pad = _pad_rows(q, -(-num_q // lanes) * lanes)
  radii = _pad_rows(radius, q_pad.shape[0])
  pairs_q, pairs_sb = [], []
  for b in range(0, q_pad.shape[0], lanes):
    sb_min = np.asarray(scan.scan_minima(_checks.as_jax(q_pad[b:b + lanes]), chunks)[1])
    sb, lane = np.nonzero(sb_min <= radii[b:b + lanes])  # superblocks holding a result
    keep = b + lane < num_q
    pairs_q.append(b + lane[keep])
    pairs_sb.append(sb[keep])
  return RaggedNeighbors.from_arrays(*scan.exact_hits(q, db_pad, np.concatenate(pairs_q),
                                                      np.concatenate(pairs_sb), radius, num_db, _SB))
