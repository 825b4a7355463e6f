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
"""

from __future__ import annotations

from typing import NamedTuple, Union

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks
from hashjax._kernels import scan

Array = jax.Array

#: Database items per streamed step (rounded up to a multiple of 256).
DEFAULT_CHUNK_SIZE = 65536

_SB = scan.SUPERBLOCK
_MAX_LANES = 256  # queries per scan
_STAGE_ELEMS = 1 << 23  # budget for the [queries, 32 k, W] words of the last selection
_SORT_ELEMS = 1 << 22  # budget for the [queries, items] arrays of the fallbacks


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


def knn(query_words: Array, db_words: Array, k: int, *, return_ties: bool = False,
        chunk_size: int = DEFAULT_CHUNK_SIZE):
  r"""Exact k nearest neighbours in Hamming distance, ties broken by database index.

  The order is ascending distance, then ascending database index, so the
  result is deterministic and equals a stable sort of each query's distances.

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
    return_ties: if True, return every item whose distance is at most the
      k-th distance (whole tie groups, as Nair et al. 2012 evaluate), as a
      :class:`RaggedNeighbors`: row ``q`` starts with the same ``k`` items as
      ``return_ties=False`` and continues with the rest of the k-th distance's
      tie group, by index (:func:`radius_search` with each query's k-th
      distance as its radius). Needs concrete inputs (not under ``jit``).
    chunk_size: database items per streamed step (rounded up to a multiple of
      256). Memory per step is ``O(256 * chunk_size)`` bytes.

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
  _checks.check_word_pair(query_words, db_words)
  k = _check_k(k, db_words.shape[0])
  chunk_size = _check_chunk_size(chunk_size)
  return_ties = _checks.check_bool("return_ties", return_ties)
  if return_ties and not (_checks.is_concrete(query_words) and _checks.is_concrete(db_words)):
    raise ValueError("return_ties: True needs concrete inputs (the number of ties varies, so it "
                     "cannot run under jit); call knn outside jit")
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
# Radius search.


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
  _checks.check_word_pair(query_words, db_words)
  if not (_checks.is_concrete(query_words) and _checks.is_concrete(db_words)):
    raise ValueError("query_words, db_words: radius_search needs concrete arrays (it returns "
                     "variable-length results, so it cannot run under jit)")
  num_q, num_words = query_words.shape
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
