r"""The inverted index of Nair et al. (2012, Sec. 5.6): radius search over codes of at most 32 bits.

:func:`build_inverted_index` groups the database by code (a hash table from a
code of at most 32 bits to the items holding it) and :func:`lookup` answers
radius queries by *enumerating* the codes within the radius: with the
``P(b, r) = \sum_{j \le r} \binom{b}{j}`` XOR masks of weight at most ``r``
(precomputed once per ``(b, r)``, ordered by weight), the codes within
distance ``r`` of a query ``q`` are exactly ``q ^ m``, at distance
``popcount(m)``. Its results equal :func:`hashjax.search.radius_search`'s
(the same :class:`~hashjax.search.RaggedNeighbors`, ordered by distance, then
database index).

Layout (host numpy arrays, CSR, built with two stable sorts):

* ``keys[U]``: the distinct codes' keys, sorted; the key is the code itself,
  or for codes of more than 24 bits a multiplicative hash
  ``(c \cdot 2654435761) \bmod 2^{32}`` (a bijection of ``uint32``, so distinct
  codes keep distinct keys, and clustered codes spread evenly over the key
  space);
* ``codes[U]``: the distinct codes, in key order;
* ``code_offsets[U + 1]`` and ``items[N]``: the items holding ``codes[u]`` are
  ``items[code_offsets[u] : code_offsets[u + 1]]``, in ascending index order;
* ``filter``: a bitmap over the top ``f`` bits of the keys (``uint64`` words;
  bit set = some key has that prefix), with ``filter_rank``, the number of set
  bits before each word, and ``prefix_starts``, where each prefix's keys
  start in ``keys`` (a rank/select dictionary);
* ``coarse_filter``: the same bitmap over the top 24 bits (2 MiB) when
  ``f > 24``, read first.

A probe reads one bit; a probe that passes finds its row ``u`` with no search:
the rank of its prefix among the set prefixes (a ``filter_rank`` read plus a
popcount) indexes ``prefix_starts``. Codes of at most 24 bits are their own
key and ``f = b``: the filter is exact, at most 2 MiB, and ``u`` is the rank.
Longer codes are hashed with ``f = min(27, log2(U) + 7)``: the coarse filter
lets through about ``U / 2^24`` of the misses and the fine one (at most 16 MiB)
under 1%, which are rejected by comparing keys.

Why this layout: a probe's cost is its random memory reads. A binary search
over the sorted codes makes ``\log_2 U`` dependent reads, mostly cache misses;
one read from a 2 MiB table mostly hits the cache. Hence the 2 MiB first
filter, and no binary search (``python -m experiments.benchmarks.index``
measures these probe costs).

**Enumerate or scan.** Enumeration costs ``P(b, r)`` probes per query,
independent of ``N``; a scan costs ``U`` popcounts per query. At 32 bits
``P = 1, 33, 529, 5489, 41449`` for ``r = 0 .. 4``, so for ``U = 10^6``
enumeration wins by orders of magnitude for small radii; for short codes or
large radii (``P`` approaching ``2^b``), or few distinct codes, scanning the
``U <= 2^b`` distinct codes is cheaper. ``method="auto"`` picks by the cost
model of :func:`choose_method`; both give the same results.

The index lives on the host: lookups are data-dependent gathers with a
variable-length output, which neither ``jit`` (static shapes) nor per-shape
XLA compilation suits; numpy vectorises them over all ``Q * P`` probes.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple, Union

import jax
import numpy as np

from hashjax import _checks
from hashjax.index import _common
from hashjax._kernels import scan
from hashjax.search import RaggedNeighbors

Array = jax.Array

#: Codes of at most this many bits are their own key, with an exact filter.
DIRECT_MAX_BITS = 24
#: Largest filter (``2^f`` bits) of hashed keys (16 MiB).
MAX_FILTER_BITS = 27
#: Bits of the coarse filter read first when ``f`` is larger (a 2 MiB bitmap).
COARSE_FILTER_BITS = 24
#: Cost of one enumerated probe relative to one scanned distinct code, for
#: ``method="auto"``: enumerate when ``P(b, r) * cost < U`` (see
#: :func:`choose_method`). Probes that hit pay for their items too; a rough
#: constant is enough, as the two costs differ by orders of magnitude except
#: near the crossover.
PROBE_COST_PER_SCANNED_CODE = 4
#: ``method="enumerate"`` refuses more masks than this per query.
MAX_MASKS = 1 << 23
#: Elements of the ``[queries, masks]`` probe block (or ``[queries, U]`` scan block).
_BLOCK = 1 << 19
_HASH_MULTIPLIER = np.uint32(2654435761)  # odd: a bijection of uint32
_METHODS = ("auto", "enumerate", "scan")


class InvertedIndex(NamedTuple):
  """Database items grouped by code (CSR); see the module docstring.

  Attributes:
    keys: ``uint32[U]`` sorted keys of the distinct codes (the code itself,
      or its multiplicative hash when ``filter_bits < num_bits``).
    codes: ``uint32[U]`` the distinct codes, in key order.
    code_offsets: ``int64[U + 1]``; ``codes[u]`` is held by
      ``items[code_offsets[u]:code_offsets[u + 1]]``.
    items: ``int32[N]`` database indices, ascending within each code.
    filter: ``uint64[ceil(2^f / 64)]`` bitmap of the keys' top ``f`` bits
      (bit ``p % 64`` of word ``p // 64`` for prefix ``p``).
    filter_rank: ``int64[ceil(2^f / 64)]`` set bits of ``filter`` before each word.
    prefix_starts: ``int64[F + 1]`` for the ``F`` distinct prefixes: the keys
      with the ``j``-th prefix are ``keys[prefix_starts[j]:prefix_starts[j + 1]]``.
    coarse_filter: ``uint8[2^21]`` bitmap of the keys' top 24 bits when
      ``f > 24`` (bit ``p % 8`` of byte ``p // 8``), else empty.
    num_bits: the code length ``b <= 32``.
    filter_bits: ``f``; ``f == num_bits`` means keys are the codes (an
      exact filter), ``f < num_bits`` that keys are hashed.
  """
  keys: np.ndarray
  codes: np.ndarray
  code_offsets: np.ndarray
  items: np.ndarray
  filter: np.ndarray
  filter_rank: np.ndarray
  prefix_starts: np.ndarray
  coarse_filter: np.ndarray
  num_bits: int
  filter_bits: int

  @property
  def hashed(self) -> bool:
    """Whether keys are hashed codes (``filter_bits < num_bits``)."""
    return self.filter_bits < self.num_bits

  @property
  def num_db(self) -> int:
    """Number of indexed database items ``N``."""
    return int(self.items.shape[0])


# ----------------------------------------------------------------------------
# Validation.


def _check_short_words(name: str, words, num_bits: int) -> np.ndarray:
  """``uint32[n, 1]`` concrete codes (``1 <= n <= INT32_MAX``) with no bit set at or above ``num_bits``."""
  _checks.check_codes(name, words, num_bits, num_bits_name="num_bits" if name == "db_words" else "index.num_bits",
                      why="the inverted index runs on the host", max_rows=_checks.INT32_MAX)
  return np.ascontiguousarray(np.asarray(words)[:, 0])


def _check_index_bits(num_bits) -> int:
  num_bits = _checks.check_num_bits(num_bits)
  if num_bits > 32:
    raise ValueError(f"num_bits: expected at most 32 bits for the inverted index (use hashjax.search), got {num_bits}")
  return num_bits


def _check_index(index) -> None:
  _checks.check_type("index", index, InvertedIndex, what="an InvertedIndex from build_inverted_index")


# ----------------------------------------------------------------------------
# Building.


def _keys(code_values: np.ndarray, hashed: bool) -> np.ndarray:
  if not hashed:
    return code_values
  with np.errstate(over="ignore"):
    return code_values * _HASH_MULTIPLIER


def _prefix(keys: np.ndarray, key_bits: int, bits: int) -> np.ndarray:
  """Top ``bits`` of ``key_bits``-bit keys."""
  return keys >> np.uint32(key_bits - bits)


def _default_filter_bits(num_bits: int, num_codes: int) -> int:
  if num_bits <= DIRECT_MAX_BITS:
    return num_bits
  return int(min(num_bits, MAX_FILTER_BITS, max(10, num_codes.bit_length() + 7)))


def _bitmap_bytes(prefix: np.ndarray, bits: int, multiple: int) -> np.ndarray:
  """``uint8`` bitmap (bit ``p % 8`` of byte ``p // 8``) of ``prefix``, padded to ``multiple`` bytes."""
  flags = np.zeros(-(-(1 << bits) // (8 * multiple)) * 8 * multiple, np.bool_)
  flags[prefix] = True
  return np.packbits(flags, bitorder="little")


def build_inverted_index(db_words: Array, *, num_bits: int,
                         filter_bits: Optional[int] = None) -> InvertedIndex:
  r"""Builds the inverted index (code -> items holding it) of codes of at most 32 bits.

  .. math:: \mathcal{I}(c) = \{ i : x_i = c \}, \quad i \text{ ascending}

  Sorts the items by code (stable: ascending index within a code), then the
  distinct codes by key; ``O(N \log N)`` time, about ``4 N + 24 U + 2^f / 4``
  bytes.

  Args:
    db_words: ``uint32[N, 1]`` packed database codes (bits ``>= num_bits`` zero).
    num_bits: the code length ``b``, ``1 <= b <= 32``.
    filter_bits: ``f``, the bits of the filter's prefix; ``f = b`` keys codes
      by themselves (an exact filter), ``f < b`` hashes them. Default: ``b``
      for ``b <= 24``, else ``min(b, 27, max(10, bit_length(U) + 7))``.

  Returns:
    An :class:`InvertedIndex` (numpy arrays).

  >>> import numpy as np
  >>> from hashjax.codes import pack_bits
  >>> x = pack_bits(np.array([[1, 0, 0], [0, 1, 0], [1, 0, 0]]))
  >>> idx = build_inverted_index(x, num_bits=3)
  >>> idx.codes.tolist(), idx.code_offsets.tolist(), idx.items.tolist(), idx.filter.tolist()
  ([1, 2], [0, 2, 3], [0, 2, 1], [6])
  """
  num_bits = _check_index_bits(num_bits)
  values = _check_short_words("db_words", db_words, num_bits)
  if filter_bits is not None:
    _checks.check_int_at_most("filter_bits", filter_bits, min(num_bits, 30), what="min(num_bits, 30) (or None)")
  order = np.argsort(values, kind="stable")
  sorted_values = values[order]
  starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
  distinct = sorted_values[starts]
  counts = np.diff(np.r_[starts, values.shape[0]])
  filter_bits = _default_filter_bits(num_bits, int(distinct.shape[0])) if filter_bits is None else int(filter_bits)
  hashed = filter_bits < num_bits
  keys = _keys(distinct, hashed)
  if hashed:
    # Reorder the distinct codes by key, carrying their groups of items along.
    perm = np.argsort(keys)
    keys, distinct, counts = keys[perm], distinct[perm], counts[perm]
    items = order[_common.expand(starts[perm].astype(np.int64), counts.astype(np.int64))]
  else:
    items = order
  code_offsets = np.zeros(distinct.shape[0] + 1, np.int64)
  np.cumsum(counts, out=code_offsets[1:])
  key_bits = 32 if hashed else num_bits
  prefix = _prefix(keys, key_bits, filter_bits)
  words = _bitmap_bytes(prefix, filter_bits, 8).view("<u8")
  filter_rank = np.zeros(words.shape, np.int64)
  np.cumsum(scan.host_popcount(words[:-1]), out=filter_rank[1:])
  prefix_starts = np.flatnonzero(np.r_[True, prefix[1:] != prefix[:-1], True]).astype(np.int64)
  if filter_bits > COARSE_FILTER_BITS:
    coarse = _bitmap_bytes(_prefix(keys, key_bits, COARSE_FILTER_BITS), COARSE_FILTER_BITS, 1)
  else:
    coarse = np.zeros((0,), np.uint8)
  return InvertedIndex(keys.astype(np.uint32), distinct.astype(np.uint32), code_offsets,
                       items.astype(np.int32), words.astype(np.uint64), filter_rank, prefix_starts,
                       coarse, num_bits, int(filter_bits))


# ----------------------------------------------------------------------------
# Masks.


def num_masks(num_bits: int, radius: int) -> int:
  r"""Number of codes within Hamming distance ``radius`` of a ``num_bits``-bit code.

  .. math:: P(b, r) = \sum_{j=0}^{\min(r, b)} \binom{b}{j}

  Args:
    num_bits: the code length ``b``.
    radius: ``r >= 0``.

  Returns:
    Python int.

  >>> [num_masks(32, r) for r in range(4)]
  [1, 33, 529, 5489]
  """
  num_bits = _checks.check_num_bits(num_bits)
  radius = _checks.check_int("radius", radius, low=0)
  from math import comb  # pylint: disable=g-import-not-at-top
  return sum(comb(num_bits, j) for j in range(min(radius, num_bits) + 1))


# ----------------------------------------------------------------------------
# Lookup.


def _passing(bitmap_bytes: np.ndarray, prefix: np.ndarray) -> np.ndarray:
  """Positions ``p`` whose bit ``prefix[p]`` is set in the bitmap (bit ``p % 8`` of byte ``p // 8``)."""
  byte = np.take(bitmap_bytes, prefix >> np.uint32(3))
  np.right_shift(byte, (prefix & np.uint32(7)).astype(np.uint8), out=byte)
  np.bitwise_and(byte, np.uint8(1), out=byte)
  return np.flatnonzero(byte.view(np.bool_))


def _probe(index: InvertedIndex, probe_codes: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
  """Positions ``p`` (ascending) of the probes whose code is in the index, and the code's row ``u``."""
  hashed = index.hashed
  keys = _keys(probe_codes, hashed)
  key_bits = 32 if hashed else index.num_bits
  if index.filter_bits > COARSE_FILTER_BITS:
    live = _passing(index.coarse_filter, _prefix(keys, key_bits, COARSE_FILTER_BITS))
    keys = keys[live]
  else:
    live = None
  pre = _prefix(keys, key_bits, index.filter_bits)
  passed = _passing(index.filter.view(np.uint8), pre)
  live = passed if live is None else live[passed]
  # Rank of the prefix among the set prefixes: set bits before its word, plus
  # the set bits below it in its word.
  pre = pre[passed]
  word_id = pre >> np.uint32(6)
  below = np.take(index.filter, word_id) & ((np.uint64(1) << (pre & np.uint32(63)).astype(np.uint64))
                                            - np.uint64(1))
  rank = np.take(index.filter_rank, word_id) + scan.host_popcount(below)
  if not hashed:
    return live, rank  # exact filter: the rank of the code among the distinct codes
  # Hashed: the keys sharing this prefix; all but rare ones are a single key.
  want = keys[passed]
  u = np.take(index.prefix_starts, rank)
  end = np.take(index.prefix_starts, rank + 1)
  found_p, found_u = [], []
  while live.size:
    hit = np.take(index.keys, u) == want
    found_p.append(live[hit])
    found_u.append(u[hit])
    more = ~hit & (u + 1 < end)
    live, u, end, want = live[more], u[more] + 1, end[more], want[more]
  if len(found_p) <= 1:
    return (found_p[0], found_u[0]) if found_p else (live, u)
  p, u = np.concatenate(found_p), np.concatenate(found_u)
  order = np.argsort(p, kind="stable")
  return p[order], u[order]


def _finish(num_q: int, num_db: int, num_bits: int, seg_parts, item_parts) -> RaggedNeighbors:
  """Sorts results by (query, distance, index) and packs them as RaggedNeighbors.

  ``seg = query * (b + 1) + distance`` per result; ``item`` its database index.
  """
  seg = np.concatenate(seg_parts) if seg_parts else np.zeros((0,), np.int64)
  item = np.concatenate(item_parts) if item_parts else np.zeros((0,), np.int64)
  key = seg * np.int64(num_db) + item
  if key.size > 1 and not np.all(key[1:] > key[:-1]):
    key = np.sort(key)
  seg, item = np.divmod(key, np.int64(num_db))
  query, dist = np.divmod(seg, np.int64(num_bits + 1))
  offsets = np.zeros((num_q + 1,), np.int64)
  np.cumsum(np.bincount(query, minlength=num_q), out=offsets[1:])
  return RaggedNeighbors.from_arrays(dist, item, offsets)


def _lookup_enumerate(index, queries, radius):
  """Probes ``q ^ m`` for the masks ``m`` of weight at most ``radius[q]`` (``int64[Q]``)."""
  masks, weights = _common.masks(index.num_bits, int(radius.max()))
  num_p = masks.shape[0]
  rows = max(1, _BLOCK // num_p)
  width = np.int64(index.num_bits + 1)
  seg_parts, item_parts = [], []
  for s in range(0, queries.shape[0], rows):
    q = queries[s:s + rows]
    probes = (q[:, None] ^ masks[None, :]).reshape(-1)
    if (radius[s:s + rows] < weights[-1]).any():  # per-query radii: only each query's own masks
      within = np.flatnonzero((weights[None, :] <= radius[s:s + rows, None]).reshape(-1))
      p, u = _probe(index, probes[within])
      p = within[p]
    else:
      p, u = _probe(index, probes)
    if not p.size:
      continue
    lo = index.code_offsets[u]
    lengths = index.code_offsets[u + 1] - lo
    seg = (p // num_p + s) * width + weights[p % num_p]
    seg_parts.append(np.repeat(seg, lengths))
    item_parts.append(index.items[_common.expand(lo, lengths)].astype(np.int64))
  return seg_parts, item_parts


def _lookup_scan(index, queries, radius):
  num_u = index.codes.shape[0]
  rows = max(1, _BLOCK // num_u)
  width = np.int64(index.num_bits + 1)
  seg_parts, item_parts = [], []
  for s in range(0, queries.shape[0], rows):
    q = queries[s:s + rows]
    dist = scan.host_popcount(q[:, None] ^ index.codes[None, :])
    qi, u = np.nonzero(dist <= radius[s:s + rows, None])
    if not qi.size:
      continue
    lo = index.code_offsets[u]
    lengths = index.code_offsets[u + 1] - lo
    seg = (qi.astype(np.int64) + s) * width + dist[qi, u]
    seg_parts.append(np.repeat(seg, lengths))
    item_parts.append(index.items[_common.expand(lo, lengths)].astype(np.int64))
  return seg_parts, item_parts


def choose_method(index: InvertedIndex, radius: int) -> str:
  r"""The cheaper lookup of ``"enumerate"`` and ``"scan"`` under the cost model.

  .. math:: \text{enumerate} \iff P(b, r) \cdot c < U

  with ``c`` = :data:`PROBE_COST_PER_SCANNED_CODE` and ``U`` the number of
  distinct codes.

  Args:
    index: an :class:`InvertedIndex`.
    radius: ``r >= 0``.

  Returns:
    ``"enumerate"`` or ``"scan"``.

  >>> import numpy as np
  >>> idx = build_inverted_index(np.arange(1000, dtype=np.uint32)[:, None], num_bits=32)
  >>> choose_method(idx, 1), choose_method(idx, 3)
  ('enumerate', 'scan')
  """
  _check_index(index)
  radius = _checks.check_int("radius", radius, low=0)
  return "enumerate" if num_masks(index.num_bits, radius) * PROBE_COST_PER_SCANNED_CODE \
      < index.codes.shape[0] else "scan"


def lookup(index: InvertedIndex, query_words: Array, r: Union[int, Array], *,
           method: str = "auto") -> RaggedNeighbors:
  r"""Every database item within Hamming distance ``r`` of each query.

  .. math:: \mathcal{R}_r(q) = \bigcup_{m : |m| \le r} \mathcal{I}(q \oplus m),
     \text{ ordered by } (d(q, i), i)

  The same results, in the same format and order, as
  :func:`hashjax.search.radius_search` on the indexed codes, which takes the
  radius the same way. ``"enumerate"``
  probes the ``P(b, r)`` codes ``q ^ m`` (cost independent of ``N``);
  ``"scan"`` computes the distance to each of the ``U`` distinct codes;
  ``"auto"`` picks by :func:`choose_method`. Runs on the host (numpy), not
  under ``jit``.

  Args:
    index: an :class:`InvertedIndex` from :func:`build_inverted_index`.
    query_words: ``uint32[Q, 1]`` packed query codes (bits ``>= num_bits`` zero).
    r: the radius, a non-negative int, or ``int[Q]`` one radius per query (values above ``num_bits`` act as
      ``num_bits``).
    method: ``"auto"``, ``"enumerate"`` or ``"scan"`` (``"auto"`` picks for the largest radius).

  Returns:
    :class:`hashjax.search.RaggedNeighbors` ``(distances, indices, offsets)``:
    query ``q``'s results are ``distances[offsets[q]:offsets[q+1]]`` and
    ``indices[offsets[q]:offsets[q+1]]``.

  >>> import numpy as np
  >>> from hashjax.codes import pack_bits
  >>> x = pack_bits(np.array([[1, 1, 0], [0, 0, 0], [1, 0, 0], [0, 1, 1]]))
  >>> q = pack_bits(np.array([[1, 0, 0], [1, 1, 1]]))
  >>> res = lookup(build_inverted_index(x, num_bits=3), q, 1)
  >>> res.distances.tolist(), res.indices.tolist(), res.offsets.tolist()
  ([0, 1, 1, 1, 1], [2, 0, 1, 0, 3], [0, 3, 5])
  """
  _check_index(index)
  queries = _check_short_words("query_words", query_words, index.num_bits)
  radius = np.minimum(_checks.check_radius(r, queries.shape[0]), index.num_bits)
  if _checks.check_option("method", method, _METHODS) == "auto":
    method = choose_method(index, int(radius.max()))
  if method == "enumerate":
    if num_masks(index.num_bits, int(radius.max())) > MAX_MASKS:
      raise ValueError(f"r: {num_masks(index.num_bits, int(radius.max()))} codes within radius {radius.max()} of "
                       f"a {index.num_bits}-bit code exceed MAX_MASKS = {MAX_MASKS}; use method='scan'")
    parts = _lookup_enumerate(index, queries, radius)
  else:
    parts = _lookup_scan(index, queries, radius)
  return _finish(queries.shape[0], index.num_db, index.num_bits, *parts)
