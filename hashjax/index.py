r"""Search structures of Nair et al. (2012): an inverted index over short codes
(Sec. 5.6) and the two-stage short-code / long-code cascade (Sec. 6).

**Inverted index.** :func:`build_inverted_index` groups the database by code
(a hash table from a code of at most 32 bits to the items holding it) and
:func:`lookup` answers radius queries by *enumerating* the codes within the
radius: with the ``P(b, r) = \sum_{j \le r} \binom{b}{j}`` XOR masks of weight at
most ``r`` (precomputed once per ``(b, r)``, ordered by weight), the codes
within distance ``r`` of a query ``q`` are exactly ``q ^ m``, at distance
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

Why this layout: a probe's cost is its random memory reads. Measured with
``python -m experiments.benchmark_index`` ("probe costs"; 2 cores of an AMD
EPYC, 1 MiB L2 per core, 32 MiB L3, numpy 2.4; other jobs shared the cores;
ranges over two full runs; ``U = 10^6`` random 32-bit codes,
``5.2 \cdot 10^5`` probes of radius 2): ``np.searchsorted`` over the sorted
codes 58-134 ns per probe (``\log_2 U`` dependent reads, mostly cache misses);
a random ``np.take`` from a 2 MiB table 1.5-2.4 ns, from an 8 MiB one 4.4-5.4
ns; the index's whole probe (both filters and the rank) 9.5-16 ns. Hence the
2 MiB first filter, and no binary search.

**Enumerate or scan.** Enumeration costs ``P(b, r)`` probes per query,
independent of ``N``; a scan costs ``U`` popcounts per query (4.7-8.2 ns per
distinct code in the same runs, including the output). At 32 bits
``P = 1, 33, 529, 5489, 41449`` for ``r = 0 .. 4``, so for ``U = 10^6``
enumeration wins by one to three orders of magnitude up to ``r = 3`` and still
at ``r = 4``; for short codes or large radii (``P`` approaching ``2^b``), or few
distinct codes, scanning the ``U <= 2^b`` distinct codes is cheaper.
``method="auto"`` picks by the cost model of :func:`choose_method`; both give
the same results.

The index lives on the host: lookups are data-dependent gathers with a
variable-length output, which neither ``jit`` (static shapes) nor per-shape
XLA compilation suits; numpy vectorises them over all ``Q * P`` probes.

**Cascade.** :func:`cascade_knn_classify` shortlists database items with a
short code (within a radius, or the nearest non-empty distance bins) and
classifies each query with :func:`hashjax.metrics.knn_classify` on the long
code's distances, with the items off the shortlist masked out (``where=``).
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional, Tuple

import jax
import numpy as np

from hashjax import _checks
from hashjax import codes
from hashjax import metrics
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
#: :func:`choose_method`). The ratio was about 2 in the benchmark's probe-cost
#: runs (32-bit codes, most probes miss) and larger when most probes hit and
#: pay for their items (16-bit codes); a rough constant is enough, as the two
#: costs differ by orders of magnitude except near the crossover.
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
  """``uint32[n, 1]`` concrete codes with no bit set at or above ``num_bits``."""
  _checks.check_words(name, words, min_ndim=2)
  if words.ndim != 2 or words.shape[1] != 1:
    raise ValueError(f"{name}: expected packed codes of shape [n, 1] (codes of at most 32 bits), "
                     f"got shape {tuple(words.shape)}")
  _checks.check_nonempty(name, words, what="code")
  if not _checks.is_concrete(words):
    raise ValueError(f"{name}: the inverted index needs concrete arrays (variable-length results "
                     "cannot run under jit)")
  arr = np.ascontiguousarray(np.asarray(words)[:, 0])
  if num_bits < 32 and arr.size:
    high = arr >> np.uint32(num_bits)
    if high.any():
      first = int(np.argmax(high != 0))
      raise ValueError(f"{name}: expected {num_bits}-bit codes (bits >= {num_bits} zero, as "
                       f"hashjax.codes.pack_bits leaves them), got {int(arr[first]):#x} at row {first}")
  return arr


def _check_index_bits(num_bits) -> int:
  num_bits = _checks.check_num_bits(num_bits)
  if num_bits > 32:
    raise ValueError(f"num_bits: the inverted index holds codes of at most 32 bits, got {num_bits} "
                     "(use hashjax.search for longer codes)")
  return num_bits


def _check_nonneg_int(name: str, value, *, low: int = 0) -> int:
  if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
    raise ValueError(f"{name}: expected a Python int >= {low}, got {value!r}")
  if value < low:
    raise ValueError(f"{name}: expected an int >= {low}, got {value}")
  return int(value)


def _check_index(index) -> None:
  if not isinstance(index, InvertedIndex):
    raise ValueError(f"index: expected an InvertedIndex from build_inverted_index, got {type(index).__name__}")


# ----------------------------------------------------------------------------
# Building.


_BYTE_POPCOUNT = np.array([bin(v).count("1") for v in range(256)], np.uint8)


def _popcount(x: np.ndarray) -> np.ndarray:
  """``uint8`` popcount of each entry of an unsigned numpy array (numpy < 2 has no ``bitwise_count``)."""
  if hasattr(np, "bitwise_count"):
    return np.bitwise_count(x)
  x = np.ascontiguousarray(x)
  return _BYTE_POPCOUNT[x.view(np.uint8)].reshape(x.shape + (x.dtype.itemsize,)).sum(-1, dtype=np.uint8)


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
  if values.shape[0] > np.iinfo(np.int32).max:
    raise ValueError(f"db_words: at most {np.iinfo(np.int32).max} items, got {values.shape[0]}")
  if filter_bits is not None:
    filter_bits = _check_nonneg_int("filter_bits", filter_bits, low=1)
    if filter_bits > min(num_bits, 30):
      raise ValueError(f"filter_bits: expected at most min(num_bits, 30) = {min(num_bits, 30)}, "
                       f"got {filter_bits}")
  order = np.argsort(values, kind="stable")
  sorted_values = values[order]
  starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
  distinct = sorted_values[starts]
  counts = np.diff(np.r_[starts, values.shape[0]])
  if filter_bits is None:
    filter_bits = _default_filter_bits(num_bits, int(distinct.shape[0]))
  hashed = filter_bits < num_bits
  keys = _keys(distinct, hashed)
  if hashed:
    # Reorder the distinct codes by key, carrying their groups of items along.
    perm = np.argsort(keys)
    keys, distinct, counts = keys[perm], distinct[perm], counts[perm]
    items = order[_expand(starts[perm].astype(np.int64), counts.astype(np.int64))]
  else:
    items = order
  code_offsets = np.zeros(distinct.shape[0] + 1, np.int64)
  np.cumsum(counts, out=code_offsets[1:])
  key_bits = 32 if hashed else num_bits
  prefix = _prefix(keys, key_bits, filter_bits)
  words = _bitmap_bytes(prefix, filter_bits, 8).view("<u8")
  filter_rank = np.zeros(words.shape, np.int64)
  np.cumsum(_popcount(words[:-1]), out=filter_rank[1:])
  prefix_starts = np.flatnonzero(np.r_[True, prefix[1:] != prefix[:-1], True]).astype(np.int64)
  if filter_bits > COARSE_FILTER_BITS:
    coarse = _bitmap_bytes(_prefix(keys, key_bits, COARSE_FILTER_BITS), COARSE_FILTER_BITS, 1)
  else:
    coarse = np.zeros((0,), np.uint8)
  return InvertedIndex(keys.astype(np.uint32), distinct.astype(np.uint32), code_offsets,
                       items.astype(np.int32), words.astype(np.uint64), filter_rank, prefix_starts,
                       coarse, num_bits, int(filter_bits))


def _expand(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
  """Concatenation of ``arange(s, s + l)`` over ``(s, l)`` pairs, vectorised."""
  total = int(lengths.sum())
  if total == 0:
    return np.zeros((0,), np.int64)
  ends = np.cumsum(lengths)
  shift = np.repeat(starts - (ends - lengths), lengths)
  return np.arange(total, dtype=np.int64) + shift


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
  radius = _check_nonneg_int("radius", radius)
  from math import comb  # pylint: disable=g-import-not-at-top
  return sum(comb(num_bits, j) for j in range(min(radius, num_bits) + 1))


@functools.lru_cache(maxsize=32)
def _masks(num_bits: int, radius: int) -> Tuple[np.ndarray, np.ndarray]:
  """``uint32[P]`` XOR masks of weight ``<= radius`` over ``num_bits`` bits,
  ordered by (weight, value), and their ``int64[P]`` weights (read-only)."""
  levels = [np.zeros((1,), np.uint32)]
  highest = [np.full((1,), -1, np.int64)]  # index of the highest set bit
  for _ in range(min(radius, num_bits)):
    prev, prev_hi = levels[-1], highest[-1]
    new, new_hi = [], []
    for bit in range(num_bits):
      sel = prev[prev_hi < bit]
      new.append(sel | np.uint32(1 << bit))
      new_hi.append(np.full(sel.shape, bit, np.int64))
    new, new_hi = np.concatenate(new), np.concatenate(new_hi)
    perm = np.argsort(new, kind="stable")
    levels.append(new[perm])
    highest.append(new_hi[perm])
  masks = np.concatenate(levels)
  weights = np.concatenate([np.full(lv.shape, j, np.int64) for j, lv in enumerate(levels)])
  masks.flags.writeable = False
  weights.flags.writeable = False
  return masks, weights


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
  rank = np.take(index.filter_rank, word_id) + _popcount(below)
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
  if offsets[-1] > np.iinfo(np.int32).max:
    raise ValueError(f"radius: {offsets[-1]} results exceed the int32 offsets of RaggedNeighbors")
  return RaggedNeighbors(jax.device_put(dist.astype(np.int32)), jax.device_put(item.astype(np.int32)),
                         jax.device_put(offsets.astype(np.int32)))


def _lookup_enumerate(index, queries, radius):
  masks, weights = _masks(index.num_bits, radius)
  num_p = masks.shape[0]
  rows = max(1, _BLOCK // num_p)
  width = np.int64(index.num_bits + 1)
  seg_parts, item_parts = [], []
  for s in range(0, queries.shape[0], rows):
    q = queries[s:s + rows]
    probes = (q[:, None] ^ masks[None, :]).reshape(-1)
    p, u = _probe(index, probes)
    if not p.size:
      continue
    lo = index.code_offsets[u]
    lengths = index.code_offsets[u + 1] - lo
    seg = (p // num_p + s) * width + weights[p % num_p]
    seg_parts.append(np.repeat(seg, lengths))
    item_parts.append(index.items[_expand(lo, lengths)].astype(np.int64))
  return seg_parts, item_parts


def _lookup_scan(index, queries, radius):
  num_u = index.codes.shape[0]
  rows = max(1, _BLOCK // num_u)
  width = np.int64(index.num_bits + 1)
  seg_parts, item_parts = [], []
  for s in range(0, queries.shape[0], rows):
    q = queries[s:s + rows]
    dist = _popcount(q[:, None] ^ index.codes[None, :])
    qi, u = np.nonzero(dist <= radius)
    if not qi.size:
      continue
    lo = index.code_offsets[u]
    lengths = index.code_offsets[u + 1] - lo
    seg = (qi.astype(np.int64) + s) * width + dist[qi, u]
    seg_parts.append(np.repeat(seg, lengths))
    item_parts.append(index.items[_expand(lo, lengths)].astype(np.int64))
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
  radius = _check_nonneg_int("radius", radius)
  return "enumerate" if num_masks(index.num_bits, radius) * PROBE_COST_PER_SCANNED_CODE \
      < index.codes.shape[0] else "scan"


def lookup(index: InvertedIndex, query_words: Array, *, radius: int,
           method: str = "auto") -> RaggedNeighbors:
  r"""Every database item within Hamming distance ``radius`` of each query.

  .. math:: \mathcal{R}_r(q) = \bigcup_{m : |m| \le r} \mathcal{I}(q \oplus m),
     \text{ ordered by } (d(q, i), i)

  The same results, in the same format and order, as
  :func:`hashjax.search.radius_search` on the indexed codes. ``"enumerate"``
  probes the ``P(b, r)`` codes ``q ^ m`` (cost independent of ``N``);
  ``"scan"`` computes the distance to each of the ``U`` distinct codes;
  ``"auto"`` picks by :func:`choose_method`. Runs on the host (numpy), not
  under ``jit``.

  Args:
    index: an :class:`InvertedIndex` from :func:`build_inverted_index`.
    query_words: ``uint32[Q, 1]`` packed query codes (bits ``>= num_bits`` zero).
    radius: int ``r >= 0`` (values above ``num_bits`` act as ``num_bits``).
    method: ``"auto"``, ``"enumerate"`` or ``"scan"``.

  Returns:
    :class:`hashjax.search.RaggedNeighbors` ``(distances, indices, offsets)``:
    query ``q``'s results are ``distances[offsets[q]:offsets[q+1]]`` and
    ``indices[offsets[q]:offsets[q+1]]``.

  >>> import numpy as np
  >>> from hashjax.codes import pack_bits
  >>> x = pack_bits(np.array([[1, 1, 0], [0, 0, 0], [1, 0, 0], [0, 1, 1]]))
  >>> q = pack_bits(np.array([[1, 0, 0], [1, 1, 1]]))
  >>> res = lookup(build_inverted_index(x, num_bits=3), q, radius=1)
  >>> res.distances.tolist(), res.indices.tolist(), res.offsets.tolist()
  ([0, 1, 1, 1, 1], [2, 0, 1, 0, 3], [0, 3, 5])
  """
  _check_index(index)
  queries = _check_short_words("query_words", query_words, index.num_bits)
  radius = min(_check_nonneg_int("radius", radius), index.num_bits)
  if method not in _METHODS:
    raise ValueError(f"method: expected one of {_METHODS}, got {method!r}")
  if method == "auto":
    method = choose_method(index, radius)
  if method == "enumerate":
    if num_masks(index.num_bits, radius) > MAX_MASKS:
      raise ValueError(f"radius: {num_masks(index.num_bits, radius)} codes within radius {radius} of a "
                       f"{index.num_bits}-bit code exceed MAX_MASKS = {MAX_MASKS}; use method='scan'")
    parts = _lookup_enumerate(index, queries, radius)
  else:
    parts = _lookup_scan(index, queries, radius)
  return _finish(queries.shape[0], index.num_db, index.num_bits, *parts)


# ----------------------------------------------------------------------------
# Cascade (Sec. 6).


class CascadeResult(NamedTuple):
  """Output of :func:`cascade_knn_classify`.

  Attributes:
    predictions: ``int32[Q]`` predicted labels (``-1`` for an empty shortlist).
    shortlist_sizes: ``int32[Q]`` items kept by the short code per query.
  """
  predictions: Array
  shortlist_sizes: Array


def _check_padding(name: str, words, num_bits: int, bits_name: str) -> None:
  """The bits of ``words`` at or above ``num_bits`` (in the last word) must be zero."""
  if num_bits % 32 == 0:
    return
  _checks.check_num_bits(num_bits, name=bits_name, words=words, words_name=name)
  high = np.asarray(words)[..., -1] >> np.uint32(num_bits % 32)
  if high.any():
    raise ValueError(f"{name}: expected {num_bits}-bit codes ({bits_name}), but "
                     f"{int(np.count_nonzero(high))} code(s) have bits set at or above bit {num_bits}")


def _shortlist_mask(short_dist: np.ndarray, *, short_bits: int, radius, bins) -> np.ndarray:
  """``bool[Q, N]``: within ``radius``, or in the ``bins`` nearest non-empty bins."""
  if radius is not None:
    return short_dist <= radius
  hist = np.asarray(codes.distance_histogram(short_dist, num_bits=short_bits))[..., 0]  # [Q, b+1]
  rank = np.cumsum(hist > 0, axis=-1)  # non-empty bins up to and including d
  return np.take_along_axis(rank, short_dist, axis=-1) <= bins


def cascade_knn_classify(short_query_words: Array, short_db_words: Array, long_query_words: Array,
                         long_db_words: Array, db_labels: Array, *, short_bits: int, long_bits: int,
                         k: int, num_classes: int, shortlist_radius: Optional[int] = None,
                         shortlist_bins: Optional[int] = None, threshold: str = "relative",
                         query_block: int = 256) -> CascadeResult:
  r"""Two-stage kNN classification: a short code shortlists, a long code classifies.

  Stage 1 keeps the items ``S(q)`` within Hamming distance ``shortlist_radius``
  of the query in the short code, or (``shortlist_bins``) the items in the
  ``shortlist_bins`` nearest non-empty short-code distance bins (Nair's
  relative threshold, so a shortlist is never empty). Stage 2 is
  :func:`hashjax.metrics.knn_classify` on the long code's distances with
  ``where`` = the shortlist.

  .. math:: \hat y_q = \arg\max_c |\{ i \in \mathrm{nbr}^{long}_k(q) \cap S(q) : y_i = c \}|

  The distances are computed densely per block of queries (this measures the
  cascade's accuracy and shortlist sizes; a fast stage 1 with codes of at most
  32 bits is :func:`lookup`).

  Args:
    short_query_words: ``uint32[Q, Ws]`` short query codes.
    short_db_words: ``uint32[N, Ws]`` short database codes.
    long_query_words: ``uint32[Q, Wl]`` long query codes.
    long_db_words: ``uint32[N, Wl]`` long database codes.
    db_labels: ``int[N]`` database labels in ``[0, num_classes)``.
    short_bits: short code length.
    long_bits: long code length.
    k: stage-2 bins (relative threshold) or radius (absolute).
    num_classes: number of classes.
    shortlist_radius: stage-1 radius ``>= 0`` (exactly one of this and
      ``shortlist_bins``).
    shortlist_bins: stage-1 number of nearest non-empty bins ``>= 1``.
    threshold: stage-2 threshold, ``"relative"`` or ``"absolute"`` (see
      :func:`hashjax.metrics.knn_classify`).
    query_block: queries per dense ``[block, N]`` distance block.

  Returns:
    :class:`CascadeResult` ``(predictions int32[Q], shortlist_sizes int32[Q])``.

  >>> import numpy as np
  >>> from hashjax.codes import pack_bits
  >>> sq, sx = pack_bits(np.array([[0, 0]])), pack_bits(np.array([[0, 0], [0, 1], [1, 1]]))
  >>> lq, lx = pack_bits(np.array([[0, 0, 0]])), pack_bits(np.array([[1, 1, 1], [0, 0, 1], [0, 0, 0]]))
  >>> out = cascade_knn_classify(sq, sx, lq, lx, np.array([0, 1, 2]), short_bits=2, long_bits=3,
  ...                            k=1, num_classes=3, shortlist_radius=1)
  >>> out.predictions.tolist(), out.shortlist_sizes.tolist()  # item 2 is nearest but not shortlisted
  ([1], [2])
  """
  for name, x in (("short_query_words", short_query_words), ("short_db_words", short_db_words),
                  ("long_query_words", long_query_words), ("long_db_words", long_db_words)):
    _checks.check_words(name, x, min_ndim=2)
    if x.ndim != 2:
      raise ValueError(f"{name}: expected a 2-D array [rows, num_words], got shape {tuple(x.shape)}")
    _checks.check_nonempty(name, x, what="code")
    if not _checks.is_concrete(x):
      raise ValueError(f"{name}: cascade_knn_classify needs concrete arrays, got a tracer")
  _checks.check_same_width("short_query_words", short_query_words, "short_db_words", short_db_words)
  _checks.check_same_width("long_query_words", long_query_words, "long_db_words", long_db_words)
  short_bits = _checks.check_num_bits(short_bits, name="short_bits", words=short_db_words,
                                      words_name="short_db_words")
  long_bits = _checks.check_num_bits(long_bits, name="long_bits", words=long_db_words,
                                     words_name="long_db_words")
  for name, x, bits, bits_name in (("short_query_words", short_query_words, short_bits, "short_bits"),
                                   ("short_db_words", short_db_words, short_bits, "short_bits"),
                                   ("long_query_words", long_query_words, long_bits, "long_bits"),
                                   ("long_db_words", long_db_words, long_bits, "long_bits")):
    _check_padding(name, x, bits, bits_name)
  num_q, num_db = short_query_words.shape[0], short_db_words.shape[0]
  _checks.check_shape("long_query_words", long_query_words, (num_q, long_query_words.shape[1]),
                      like="short_query_words rows")
  _checks.check_shape("long_db_words", long_db_words, (num_db, long_db_words.shape[1]),
                      like="short_db_words rows")
  if (shortlist_radius is None) == (shortlist_bins is None):
    raise ValueError("shortlist_radius, shortlist_bins: expected exactly one of them, got "
                     f"{shortlist_radius!r} and {shortlist_bins!r}")
  if shortlist_radius is not None:
    shortlist_radius = _check_nonneg_int("shortlist_radius", shortlist_radius)
  else:
    shortlist_bins = _check_nonneg_int("shortlist_bins", shortlist_bins, low=1)
  query_block = _check_nonneg_int("query_block", query_block, low=1)
  num_classes = _check_nonneg_int("num_classes", num_classes, low=1)
  relative = metrics._check_threshold(threshold)  # pylint: disable=protected-access
  k = metrics._check_cutoff(k, allow_none=False, low=1 if relative else 0)  # pylint: disable=protected-access
  _checks.check_int_range("db_labels", db_labels, 0, num_classes - 1, what="class labels")
  if db_labels.ndim != 1 or db_labels.shape[0] != num_db:
    raise ValueError(f"db_labels: expected shape ({num_db},) (one label per database item), "
                     f"got {tuple(db_labels.shape)}")
  sq, sx = np.asarray(short_query_words), np.asarray(short_db_words)
  lq, lx = np.asarray(long_query_words), np.asarray(long_db_words)
  preds, sizes = [], []
  for s in range(0, num_q, query_block):
    short_dist = np.asarray(codes.hamming_distance(sq[s:s + query_block], sx))
    mask = _shortlist_mask(short_dist, short_bits=short_bits, radius=shortlist_radius, bins=shortlist_bins)
    long_dist = codes.hamming_distance(lq[s:s + query_block], lx)
    preds.append(np.asarray(metrics.knn_classify(long_dist, db_labels, num_classes=num_classes,
                                                 num_bits=long_bits, k=k, threshold=threshold,
                                                 where=mask)))
    sizes.append(mask.sum(axis=-1))
  return CascadeResult(jax.device_put(np.concatenate(preds).astype(np.int32)),
                       jax.device_put(np.concatenate(sizes).astype(np.int32)))
