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
``knn(..., tie_break=True)`` ranks by Hamming distance with the weighted distance breaking its ties.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Union

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


class TieBreakNeighbors(NamedTuple):
  """Neighbours ranked by Hamming distance, ties broken by weighted distance, then by index
  (``knn(..., weights=w, tie_break=True)``).

  Attributes:
    hamming: ``int32[Q, k]`` Hamming distances, ascending per row.
    weighted: ``float32[Q, k]`` weighted distances, ascending within each run of equal Hamming distance.
    indices: ``int32[Q, k]`` database indices.
  """
  hamming: Array
  weighted: Array
  indices: Array


# ----------------------------------------------------------------------------
# Validation.


def _check_k(k, num_db: int) -> int:
  k = _checks.check_positive_int("k", k)
  if k > num_db:
    raise ValueError(f"k: expected k <= len(db_words) = {num_db} (no padding policy: a "
                     f"query cannot have more neighbours than the database holds), got {k}")
  return k


def _check_chunk_size(chunk_size) -> int:
  """The chunk size rounded up to a multiple of 256."""
  return -(-_checks.check_positive_int("chunk_size", chunk_size) // _SB) * _SB


def _check_radius(r, num_queries: int) -> np.ndarray:
  """``r`` as ``int64[Q]``: a non-negative int, or one per query."""
  if _checks.is_int(r):
    return np.full((num_queries,), _checks.check_int("r", r, low=0), np.int64)
  if not hasattr(r, "dtype") or isinstance(r, (bool, np.bool_)):
    raise ValueError(f"r: expected a non-negative int or an int array [Q], got {r!r}")
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


def _check_weights(weights, query_words):
  """Weights ``[num_bits]`` for codes of ``W = ceil(num_bits / 32)`` words: real, finite, non-negative, with a
  finite ``float32`` sum (values checked when concrete). Returns ``float32[32 W]`` weights, subnormals as 0 and
  padding bits 0 (numpy when concrete, else jax.numpy), and ``num_bits``."""
  if not hasattr(weights, "dtype") or not hasattr(weights, "shape"):
    raise ValueError(f"weights: expected a float array [num_bits] of non-negative weights, got "
                     f"{type(weights).__name__}")
  if np.dtype(weights.dtype).kind not in "fiu":
    raise ValueError(f"weights: expected a real array [num_bits], got {_checks.desc(weights)}")
  if weights.ndim != 1 or weights.shape[0] == 0:
    raise ValueError(f"weights: expected shape [num_bits] with num_bits >= 1, got shape {tuple(weights.shape)}")
  num_bits, num_words = weights.shape[0], query_words.shape[1]
  if _checks.num_words_for(num_bits) != num_words:
    raise ValueError(f"weights: {num_bits} weights are codes of {num_bits} bits, which pack into "
                     f"{_checks.num_words_for(num_bits)} uint32 word(s), but query_words and db_words have "
                     f"{num_words}")
  if not _checks.is_concrete(weights):
    return wkernels.flush_weights_traced(weights, num_words), num_bits
  _checks.check_finite("weights", weights)
  _checks.check_nonnegative("weights", weights, what="weights")
  total = float(np.asarray(weights, np.float64).sum())
  if not total <= float(np.finfo(np.float32).max) / 2:
    raise ValueError(f"weights: expected a sum within float32's range, got a sum of {total!r}")
  return wkernels.flush_weights(np.asarray(weights), num_words), num_bits


def _check_weighted_pair(query_words, db_words, weights):
  """Checks of a weighted search's codes and weights; returns the flushed, padded weights."""
  _checks.check_word_pair(query_words, db_words)
  w, num_bits = _check_weights(weights, query_words)
  _checks.check_padding_bits("query_words", query_words, num_bits)
  _checks.check_padding_bits("db_words", db_words, num_bits)
  return w


def _check_float_radius(r, num_queries: int) -> np.ndarray:
  """A weighted radius as ``float64[Q]``: a finite number ``>= 0``, or one per query."""
  if hasattr(r, "shape") and getattr(r, "ndim", 0) > 0:
    if not _checks.is_concrete(r):
      raise ValueError("r: radius_search needs concrete radii (it returns variable-length results)")
    if np.dtype(r.dtype).kind not in "fiu" or tuple(r.shape) != (num_queries,):
      raise ValueError(f"r: expected a number or a real array of shape ({num_queries},), got {_checks.desc(r)}")
    arr = np.asarray(r, np.float64)
    if not (np.isfinite(arr).all() and (arr >= 0).all()):
      raise ValueError(f"r: expected finite radii >= 0, got values in [{arr.min()}, {arr.max()}]")
    return arr
  return np.full((num_queries,), _checks.check_number("r", r, low=0))


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


def _ragged(distances, indices, offsets) -> RaggedNeighbors:
  if offsets[-1] > np.iinfo(np.int32).max:
    raise ValueError(f"r: {offsets[-1]} results exceed the int32 offsets of RaggedNeighbors")
  return RaggedNeighbors(*(jax.device_put(np.asarray(a, np.int32)) for a in (distances, indices, offsets)))


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


def knn(query_words: Array, db_words: Array, k: int, *, weights: Optional[Array] = None, tie_break: bool = False,
        return_ties: bool = False, chunk_size: int = DEFAULT_CHUNK_SIZE):
  r"""Exact k nearest neighbours in Hamming or weighted Hamming distance, ties broken by database index.

  The order is ascending distance, then ascending database index, so the
  result is deterministic and equals a stable sort of each query's distances.
  With ``weights=w`` the distance is the weighted Hamming distance
  :math:`d_w(q, i) = \sum_j w_j [q_j \ne x_{i,j}]` (see the module docstring).

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
    tie_break: with ``weights``, rank by Hamming distance and break its ties by
      weighted distance, then by index; returns a :class:`TieBreakNeighbors`
      ``(hamming, weighted, indices)``. Its weighted search scans exact
      distances (restricted to each query's k-th Hamming distance).
    return_ties: if True, return every item whose distance is at most the
      k-th distance (whole tie groups, as Nair et al. 2012 evaluate), as a
      :class:`RaggedNeighbors`: row ``q`` starts with the same ``k`` items as
      ``return_ties=False`` and continues with the rest of the k-th distance's
      tie group, by index (:func:`radius_search` with each query's k-th
      distance as its radius). Needs concrete inputs (not under ``jit``).
    chunk_size: database items per streamed step (rounded up to a multiple of
      256). Memory per step is ``O(256 * chunk_size)`` bytes.

  Returns:
    ``(distances, indices)``, each ``int32[Q, k]`` (distances ``float32[Q, k]``
    with ``weights``), sorted per row by (distance, index); with
    ``return_ties=True``, a :class:`RaggedNeighbors` ``(distances, indices,
    offsets)``; with ``tie_break=True``, a :class:`TieBreakNeighbors`.

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
  >>> w = np.array([0.5, 2.0, 1.0], np.float32)
  >>> distances, indices = knn(q, x, 2, weights=w)
  >>> distances.tolist(), indices.tolist()
  ([[0.0, 0.5]], [[2, 1]])
  >>> knn(q, x, 2, weights=w, tie_break=True).indices.tolist()
  [[2, 1]]
  """
  _checks.check_word_pair(query_words, db_words)
  k = _check_k(k, db_words.shape[0])
  chunk_size = _check_chunk_size(chunk_size)
  return_ties = _checks.check_bool("return_ties", return_ties)
  tie_break = _checks.check_bool("tie_break", tie_break)
  if return_ties and not (_checks.is_concrete(query_words) and _checks.is_concrete(db_words)):
    raise ValueError("return_ties: True needs concrete inputs (the number of ties varies, so it "
                     "cannot run under jit); call knn outside jit")
  if tie_break and (weights is None or return_ties):
    raise ValueError("tie_break: True needs weights= and return_ties=False (it orders ties of the Hamming "
                     "distance by weighted distance)")
  if weights is not None:
    w = _check_weighted_pair(query_words, db_words, weights)
    if tie_break:
      return _knn_tie_break(query_words, db_words, w, k, chunk_size)
    d, i = _weighted_knn(query_words, db_words, w, k, chunk_size)
    if not return_ties:
      return d, i
    return radius_search(query_words, db_words, np.asarray(d[:, -1]), weights=weights, chunk_size=chunk_size)
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
  d, i = _checks.as_jax(d), _checks.as_jax(i)
  if not return_ties:
    return d, i
  return radius_search(query_words, db_words, np.asarray(d[:, -1]), chunk_size=chunk_size)


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
  ham, ham_ids = knn(query_words, db_words, k, chunk_size=chunk_size)
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
  w = _check_weighted_pair(query_words, db_words, weights)
  _checks.check_integer_dtype("candidates", candidates, what="database indices")
  if candidates.ndim != 2 or candidates.shape[0] != query_words.shape[0]:
    raise ValueError(f"candidates: expected shape ({query_words.shape[0]}, C) (a row per query), got "
                     f"{tuple(candidates.shape)}")
  k = _checks.check_positive_int("k", k)
  if k > candidates.shape[1]:
    raise ValueError(f"k: expected k <= C = {candidates.shape[1]} candidates per query, got {k}")
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
  _checks.check_word_pair(query_words, db_words)
  if not (_checks.is_concrete(query_words) and _checks.is_concrete(db_words)):
    raise ValueError("query_words, db_words: radius_search needs concrete arrays (it returns "
                     "variable-length results, so it cannot run under jit)")
  num_q, num_words = query_words.shape
  if weights is not None:
    w = _check_weighted_pair(query_words, db_words, weights)
    if not _checks.is_concrete(weights):
      raise ValueError("weights: radius_search needs concrete weights (it cannot run under jit)")
    radius = _check_float_radius(r, num_q)
    pruning = wkernels.Pruning(np.asarray(db_words), w, chunk_size=_check_chunk_size(chunk_size))
    d, i, offsets = wkernels.radius_pruned(pruning, np.asarray(query_words), radius)
    if offsets[-1] > np.iinfo(np.int32).max:
      raise ValueError(f"r: {offsets[-1]} results exceed the int32 offsets of RaggedNeighbors")
    return RaggedNeighbors(jax.device_put(d), *(jax.device_put(a.astype(np.int32)) for a in (i, offsets)))
  radius = np.minimum(_check_radius(r, num_q), 32 * num_words)
  chunk_size = _check_chunk_size(chunk_size)
  q, db = np.asarray(query_words), np.asarray(db_words)
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
  return _ragged(*scan.exact_hits(q, db_pad, np.concatenate(pairs_q), np.concatenate(pairs_sb), radius,
                                  num_db, _SB))
