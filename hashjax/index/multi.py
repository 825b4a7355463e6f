r"""Multi-index hashing (Norouzi, Punjani and Fleet): exact k-NN and radius search over long codes, sub-linearly.

The ``b``-bit code is cut into ``m`` disjoint substrings of ``s_j`` bits
(``b mod m`` of ``ceil(b/m)`` bits, the rest ``floor(b/m)``) and each
substring gets its own table: substring value -> the items holding it. By the
pigeonhole principle, a code at Hamming distance ``d`` from the query matches
the query in some substring ``j`` within ``floor(d / m)``; more precisely, an
item not found after probing tables ``0..j`` at substring radius ``r`` and
tables ``j+1..m-1`` at radius ``r - 1`` has

.. math:: d \ge (j + 1)(r + 1) + (m - j - 1)\, r = m r + j + 1,

so the probes so far hold **every** item within ``m r + j`` of the query.
The search probes the tables in the order ``(r, j) = (0, 0), (0, 1), ...,
(0, m-1), (1, 0), ...`` (each probe: the ``\binom{s_j}{r}`` substrings at
distance exactly ``r``), computes the full distance of every item it finds,
and stops a query when that certified bound covers its answer: the ``k``-th
best distance for :func:`multi_index_knn`, the radius for
:func:`multi_index_radius`. Results are therefore exactly the linear scan's,
ordered by (distance, index) like :func:`hashjax.search.knn` and
:func:`hashjax.search.radius_search`. An item is counted once, at its first
probe: found at ``(r, j)``, it is kept only if its substring distances are
``> r`` in the tables before ``j`` and ``>= r`` in those after.

Tables are CSR arrays on the host, built with a stable sort (items ascending
within a bucket): a *dense* table (``offsets[2^s + 1]``, for substrings of
at most 16 bits or ``2^s <= 2N``) is indexed by the substring itself; a
*sparse* one holds the sorted distinct substrings and is searched by binary
search. The index keeps a reference to the packed database codes, for the
linear scan it may hand a query to; full distances are computed on a copy of
the codes sorted by value (last substring most significant), kept when the
codes take from :data:`REORDER_MIN_BYTES` to :data:`REORDER_MAX_BYTES`: its
rows are grouped by cluster, so a query's candidates, read at random
otherwise, lie near each other in memory. The tables then hold rows of that
copy, and the last table's bucket ``u`` is its rows ``offsets[u] ..
offsets[u + 1] - 1``, whose entries hold each row's database index instead.

**Fingerprints.** A table's entry (:data:`ENTRY_BYTES` bytes) holds the item
(its database index, or its row in the sorted copy) in its low
``ceil(log2 N)`` bits and, above them, a *fingerprint*: the lowest bits of
the other substrings, ``56 - ceil(log2 N)`` of them shared out evenly (all
of them where they are fewer). The Hamming distance between two
fingerprints bounds the distance on their bits from below, and the items of
a probe at substring radius ``r`` differ from the query in exactly ``r``
bits of the table's substring, so a candidate with

.. math:: r + d_H(\mathrm{fp}_j(q), \mathrm{fp}_j(x)) > \text{the query's limit}

is dropped from its entry alone, read in order along the bucket, without the
random read of its code (at ``N = 10^8``: 27 bits of index, a fingerprint of
29).

The default ``m`` is Norouzi et al.'s ``round(b / log2 N)``
(substrings of about ``log2 N`` bits, so a bucket holds about one item of
uniformly random codes), raised where a substring would need a sparse table
(:func:`default_num_tables`).

**When probing costs more than a scan.** The probes of a step grow as
``\binom{s}{r}``: on uniformly random codes (MIH's worst case) or for a large
``k`` or radius, enumerating costs more than scanning. With ``method="auto"``
each query's remaining work is modelled before every step: the probes of the
steps up to the bound at which it will be done (radius search: ``r``; k-NN:
its ``k``-th distance as estimated from the items found so far, each weighted
by one over the probability that the steps so far find an item at its
distance, once ``k`` items are found and every table was probed), each step
costing its probes (in radius search each as much as
:data:`CANDIDATES_PER_PROBE` candidates) plus the items its buckets would
hold were the bits independent, each with its frequency of ones in a strided
sample of the codes (``\binom{s}{r} N / 2^s`` on uniform codes; where bits
are skewed, a query drawn like the codes lies where the near buckets are
fuller), or, at the radius last probed, the candidates per probe seen there
(buckets in a dense cluster hold far more); once a step's buckets are looked
up, their real sizes replace that step's model. A query whose remaining work
would exceed one linear scan (:data:`SCAN_WORDS_PER_CANDIDATE` words per
candidate, a code of ``W`` words costing the scan ``W + 1``) is finished by
:func:`hashjax.search.knn` / :func:`~hashjax.search.radius_search` over the
whole database (exact too), at once: on uniform codes a query costs
little more than the scan. A query whose work so far reaches one scan is
handed over too, so that a query costs at most about two scans whatever the
model misses (buckets near a query fuller than the mean). A scan of a few
queries costs as much as one of :data:`SCAN_MIN_QUERIES`: when fewer are
handed over and their modelled work adds up to less than that many scans,
they are probed again, each with its share of it as its budget, and those
still handed over once more (:data:`PROBE_AGAIN_ROUNDS`). Two rules
weigh the fixed cost of probing (per call and per query, which the model
does not price): a database of fewer than
:data:`SCAN_BELOW_WORDS` words is scanned outright, and the first
:data:`PILOT_QUERIES` queries of a call are probed first: when nearly all of
them (:data:`PILOT_HANDED`) are handed over, so are the others, unprobed.
``method="probe"`` never hands over, and refuses a step of more than
:data:`MAX_PROBES` substrings.

**Cost.** A query is searched by one compiled loop
(:func:`hashjax._kernels.probe.probe`, numba; a call's queries in up to four
chunks per CPU, of about :data:`_CHUNK_QUERIES` queries or more, on a thread
per CPU): per candidate the read of its entry (in order along the bucket)
and the fingerprints' XOR and popcount (the sorted copy's last table reads
its codes in order instead); for those the fingerprint keeps within the
query's limit (its ``k``-th distance so far, lowered as finds come, or the
radius), the read of its code (a random read), an XOR and a popcount; and
for those still within it, the masked popcounts of the first-probe rule (at
radius 0, those of the tables before ``j`` alone). The buckets of up to 64
probes, and then the codes of up to 64 kept candidates, are prefetched
before they are read, so that their reads from memory overlap. The loop is
compiled at the first search (about 5 s; numba caches it, and a later
process loads it in under a second).
Memory of the tables: ``7 m N`` bytes of entries plus the offsets (64-bit
codes at ``m = 3``: 2.6x the codes), and the sorted copy; ``python -m
experiments.benchmarks.multi_index`` measures it all against the scan.
"""

from __future__ import annotations

import concurrent.futures
import functools
import math
import os
import sys
from typing import NamedTuple, Optional, Tuple, Union

import jax
import numba
import numpy as np

from hashjax import _checks, search
from hashjax._kernels import probe
from hashjax.search import RaggedNeighbors

Array = jax.Array

#: Longest substring (bits) a table may key on.
MAX_SUBSTRING_BITS = 32
#: Substrings of at most this many bits always get a dense table.
DENSE_MAX_BITS = 16
#: ``method="auto"`` hands a query to the linear scan once its (modelled) work, candidates plus
#: :data:`CANDIDATES_PER_PROBE` per probe, times this, exceeds the scan's cost of the database in words,
#: ``N (W + 1)``: the scan of a code costs about its ``W`` words plus one word's worth of work per code (10^7 uniform
#: codes: 0.54, 0.74-0.79, 1.01, 1.22 ms per 10-NN query for ``W`` = 1 to 4), and a candidate of the compiled
#: search 7-10 ns at 10^7 codes, as long as 230-360 such words of a scan of the same queries
#: (``docs/performance.md``). 384 keeps the budget of 64-bit codes, in candidates, where it was.
SCAN_WORDS_PER_CANDIDATE = 384
#: A probe of a radius search costs ``method="auto"``'s model as much as this many candidates: the bucket's
#: offsets, its first item and that item's code are read one after another, each a cache miss in tables of millions
#: of buckets (uniform 64-bit codes at 10^7: about 82 ns per probe against 10 per candidate). k-NN prices a probe
#: as one candidate: its steps to come are priced up to a bound estimated before the k-th distance settles, often
#: far above it, and with probes at 8 LSH-clustered 10-NN fell from 20.4x to 6.6x the scan
#: (``docs/performance.md``).
CANDIDATES_PER_PROBE = 8
#: A scan of fewer queries costs as much as one of this many (:func:`hashjax.search.knn` scans at least 32 query
#: lanes at once), so ``method="auto"`` probes a few handed-over queries further when their modelled work adds
#: up to less than this many scans.
SCAN_MIN_QUERIES = 32
#: ... in up to this many rounds, each probing the queries still handed over with their share of that many scans.
#: The second round ends the few 100-NN queries the first leaves at 10^8 codes, where a scan of 1 to 32 queries
#: costs about 100 queries' share of a large one (10^8 in memory, 100-NN: 1.194 -> 0.151 ms per query; 10^7
#: distributions unchanged within the noise, ``docs/performance.md``). It spends at most the same again.
PROBE_AGAIN_ROUNDS = 2
#: ``method="auto"`` scans a database of fewer words (``N * W``; 2^20: 2^19 codes of 64 bits) outright: there a
#: scan takes tens of microseconds per query, and probing, with its fixed costs per call and per query, lost to it
#: (2 x 10^5 codes: LSH clusters 0.80x, uniform 0.85x the scan without it; 10^6: 0.95x and above, dense clusters 3x).
SCAN_BELOW_WORDS = 1 << 20
#: ``method="auto"`` probes the first this many queries of a call first (the pilot); when at least a fraction
#: :data:`PILOT_HANDED` of them are handed to the scan, the codes are far from the queries (uniform-like), and the
#: other queries go to the scan unprobed instead of each paying its first probes (measured with the earlier numpy
#: search, without it, at 10^6 codes: 0.57-0.83x the scan on uniform, skewed and LSH-clustered codes). The pilot
#: stands for the rest: when the first queries are outliers, the others go to the scan (still exact, at about the
#: cost of a scan).
PILOT_QUERIES = 64
PILOT_HANDED = 0.875
#: ``method="probe"`` refuses a step of more probes than this per query and table.
MAX_PROBES = 1 << 20
_METHODS = ("auto", "probe")
_CHUNK_QUERIES = 64  # about the fewest queries per call of the compiled kernel (at most 4 calls per CPU's thread)
_SAMPLE_ROWS = 4096  # codes whose bits' frequencies of ones price the steps to come (_expected_candidates)
#: Bytes of a table's entry: the item and its fingerprint (module docstring), little-endian. A saved index depends
#: on this layout and on the fingerprint's bits (:func:`_fingerprint_ranges`): changing either changes
#: :data:`hashjax.index.storage.MULTI_FORMAT_VERSION`. Read byte by byte, 7-byte entries searched 10^8 codes faster
#: than the same bits packed in uint64 words, each entry read with two word reads and shifts (0.090 against 0.132
#: ms per 10-NN query, docs/performance.md).
ENTRY_BYTES = 7
#: :func:`build_multi_index` keeps a copy of the codes sorted by value (module docstring) when they take at least
#: this many bytes. Dense bit-flip clusters (1,000 centres, 5% flips), 1,000 queries, a query's time without the
#: copy over its time with it, in one process on a loaded 2-core machine: 10^5 codes of 64 bits 1.05 / 1.08
#: (10-NN / 100-NN), 3 x 10^5 1.12 / 1.08, 10^6 1.28 / 1.53, 10^7 1.10-1.37 / 1.27-1.53 (docs/performance.md;
#: measured with the earlier numpy search).
REORDER_MIN_BYTES = 1 << 22
#: ... and at most this many (2^28: 3.4 x 10^7 codes of 64 bits). The copy costs as much memory as the codes, and
#: with fingerprints it gains less where the clusters are larger and looser: the benchmark's dense clusters at 10^7
#: (1,000 centres, 5% flips) 17.1x / 8.2x the scan without it, 26.7x / 16.4x with it (10-NN / 100-NN); at 10^8
#: (10^4 centres, 10% flips) 1.12x / 1.07x less time with it, for an index of 3.67x the codes instead of 2.67x
#: (docs/performance.md).
REORDER_MAX_BYTES = 1 << 28


class MultiIndex(NamedTuple):
  """Multi-index hashing tables over packed codes; see the module docstring.

  Attributes:
    db_words: ``uint32[N, W]`` the indexed database codes (a reference, not a copy, when given as a contiguous
      numpy array).
    bounds: ``int64[m + 1]``; table ``j`` keys on bits ``bounds[j] .. bounds[j + 1] - 1`` of the code.
    keys: ``m`` arrays; ``uint32[U_j]`` the sorted distinct substrings of a sparse table, ``uint32[0]`` for a
      dense table (keyed by the substring itself).
    offsets: ``m`` arrays ``int32[U_j + 1]`` (sparse) or ``int32[2^{s_j} + 1]`` (dense): bucket ``u`` holds
      table ``j``'s entries ``offsets[j][u] .. offsets[j][u + 1] - 1``.
    entries: ``uint8[m, N, ENTRY_BYTES]`` each table's entries, items ascending within each bucket: 56-bit
      little-endian integers, the item in the low :attr:`id_bits` bits and its fingerprint for table ``j``
      (module docstring) above them. An item is a database index; with ``sorted_words``, a row of it, except in
      table ``m - 1``, whose bucket ``u`` is its rows ``offsets[m - 1][u] .. offsets[m - 1][u + 1] - 1`` and whose
      entries hold the database index of each row.
    num_bits: the code length ``b``.
    sorted_words: None, or ``uint32[N, W]`` the codes sorted by value: the candidates' codes are read from it
      (module docstring).
  """
  db_words: np.ndarray
  bounds: np.ndarray
  keys: Tuple[np.ndarray, ...]
  offsets: Tuple[np.ndarray, ...]
  entries: np.ndarray
  num_bits: int
  sorted_words: Optional[np.ndarray] = None

  @property
  def num_tables(self) -> int:
    """Number of substrings ``m``."""
    return int(self.entries.shape[0])

  @property
  def num_db(self) -> int:
    """Number of indexed database items ``N``."""
    return int(self.entries.shape[1])

  @property
  def id_bits(self) -> int:
    """Bits of an entry's item, ``max(1, ceil(log2 N))``; its fingerprint has the other ``56 - id_bits``."""
    return _id_bits(self.num_db)

  @property
  def items(self) -> np.ndarray:
    """``int32[m, N]`` each table's items (database indices; with ``sorted_words``, rows of it, but for table
    ``m - 1``, which holds each row's database index), decoded from :attr:`entries` (a new array)."""
    return self.table_items(slice(None))

  def table_items(self, tables: Union[int, slice], rows: slice = slice(None)) -> np.ndarray:
    """``int32[..., n]`` the items (:attr:`items`) of entries ``rows`` of table(s) ``tables``, decoded (a new
    array): a slice of the items without decoding every table."""
    entries = self.entries[tables, rows]
    values = sum(entries[..., e].astype(np.uint64) << np.uint64(8 * e) for e in range(-(-self.id_bits // 8)))
    return (values & np.uint64((1 << self.id_bits) - 1)).astype(np.int32)

  @property
  def nbytes(self) -> int:
    """Bytes of the tables (keys, offsets, entries) and of ``sorted_words``, not counting the database codes they
    refer to."""
    copy = 0 if self.sorted_words is None else self.sorted_words.nbytes
    return int(self.entries.nbytes + sum(a.nbytes for a in self.keys) + sum(a.nbytes for a in self.offsets) + copy)


# ----------------------------------------------------------------------------
# Validation.


def _check_db(db_words, num_bits) -> Tuple[np.ndarray, int]:
  num_bits = _checks.check_codes("db_words", db_words, num_bits, why="the tables live on the host",
                                 max_rows=_checks.INT32_MAX)
  return np.ascontiguousarray(np.asarray(db_words)), num_bits


def _check_queries(index: MultiIndex, query_words) -> np.ndarray:
  """The arguments every search takes: the index, and queries of its width; the queries as contiguous numpy."""
  _checks.check_type("index", index, MultiIndex, what="a MultiIndex from build_multi_index")
  _checks.check_codes("query_words", query_words, index.num_bits, num_bits_name="index.num_bits",
                      why="the multi-index runs on the host")
  for name in ("db_words", "sorted_words"):  # the compiled search reads them as lanes of the queries' width
    words = getattr(index, name)
    if words is not None:
      _checks.check_words(f"index.{name}", words, min_ndim=2)
      _checks.check_same_width("query_words", query_words, f"index.{name}", words)
  return np.ascontiguousarray(np.asarray(query_words))


def default_num_tables(num_db: int, num_bits: int) -> int:
  r"""Norouzi et al.'s number of substrings, about ``b / log2 N``, or more where a substring would need a sparse
  table: substrings of at most ``max(16, floor(log2 2N))`` bits, so every table is dense (and of at most
  :data:`MAX_SUBSTRING_BITS`).

  .. math:: m = \max\Big(\mathrm{round}\big(b / \log_2 \max(N, 2)\big),\
     \Big\lceil \frac{b}{\min(32, \max(16, \lfloor \log_2 2N \rfloor))} \Big\rceil\Big), \text{ at most } b

  A probe of a dense table is one read of its offsets; of a sparse one, a binary search over up to ``N`` keys
  (about ``log2 N`` cache misses). On bit-flip clusters of ``N = 10^8`` 64-bit codes (10^4 centres, 10% flips),
  Norouzi's ``m = 2`` (two sparse 32-bit tables) answered 10-NN 9.2x faster than the scan, the dense ``m = 3``
  42.9x (``docs/results/search.md``).

  Args:
    num_db: database size ``N >= 1``.
    num_bits: code length ``b >= 1``.

  Returns:
    Python int ``m``.

  >>> default_num_tables(10**7, 64), default_num_tables(10**8, 64), default_num_tables(10**6, 64)
  (3, 3, 4)
  """
  num_db = _checks.check_int("num_db", num_db, low=1)
  num_bits = _checks.check_num_bits(num_bits)
  norouzi = int(round(num_bits / math.log2(max(num_db, 2))))
  longest = min(MAX_SUBSTRING_BITS, max(DENSE_MAX_BITS, (2 * num_db).bit_length() - 1))  # dense, and keyable
  dense = -(-num_bits // longest)
  return int(min(num_bits, max(norouzi, dense)))


# ----------------------------------------------------------------------------
# Building.


def _bounds(num_bits: int, num_tables: int) -> np.ndarray:
  """Substring boundaries: the first ``b mod m`` substrings have ``ceil(b/m)`` bits, the rest ``floor(b/m)``."""
  base, extra = divmod(num_bits, num_tables)
  sizes = np.full((num_tables,), base, np.int64)
  sizes[:extra] += 1
  return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def _substring(words: np.ndarray, lo: int, hi: int) -> np.ndarray:
  """``uint32[n]`` bits ``lo .. hi - 1`` (at most 32) of ``words[n, W]``, bit ``lo`` as the lowest."""
  size = hi - lo
  word, shift = divmod(int(lo), 32)
  value = words[:, word] >> np.uint32(shift)
  if shift + size > 32:
    value = value | (words[:, word + 1] << np.uint32(32 - shift))
  if size < 32:
    value = value & np.uint32((1 << size) - 1)
  return value


def _is_dense(size: int, num_db: int) -> bool:
  return size <= DENSE_MAX_BITS or (1 << size) <= 2 * num_db


def _table(values: np.ndarray, size: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
  """``(keys, offsets, items)`` of one table from the substrings ``values[N]`` of ``size`` bits."""
  num_db = values.shape[0]
  items = np.argsort(values, kind="stable").astype(np.int32)
  if _is_dense(size, num_db):
    offsets = np.zeros(((1 << size) + 1,), np.int32)
    np.cumsum(np.bincount(values, minlength=1 << size), out=offsets[1:])
    return np.zeros((0,), np.uint32), offsets, items
  ordered = values[items]
  starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
  offsets = np.append(starts, num_db).astype(np.int32)
  return ordered[starts].astype(np.uint32), offsets, items


def _id_bits(num_db: int) -> int:
  """Bits of an entry's item for ``num_db`` items (:attr:`MultiIndex.id_bits`)."""
  return max(1, (num_db - 1).bit_length())


def _fingerprint_ranges(bounds: np.ndarray, table: int, num_fp_bits: int) -> list:
  """``[(lo, n), ...]``: the fingerprint of table ``table`` is bits ``lo .. lo + n - 1`` of each other substring,
  ``num_fp_bits`` shared out evenly (the first ones one more), at most a substring's length each."""
  others = [i for i in range(bounds.shape[0] - 1) if i != table]
  ranges = []
  for n, i in enumerate(others):
    share = num_fp_bits // len(others) + (n < num_fp_bits % len(others))
    ranges.append((int(bounds[i]), min(share, int(bounds[i + 1] - bounds[i]))))
  return ranges


def _fingerprints(words: np.ndarray, bounds: np.ndarray, table: int, id_bits: int) -> np.ndarray:
  """``uint64[n]`` the fingerprints of ``words[n, W]`` for table ``table`` in entries of ``id_bits`` bits of item
  (module docstring)."""
  out = np.zeros((words.shape[0],), np.uint64)
  shift = 0
  for lo, n in _fingerprint_ranges(bounds, table, 8 * ENTRY_BYTES - id_bits):
    if n:
      out |= _substring(words, lo, lo + n).astype(np.uint64) << np.uint64(shift)
      shift += n
  return out


def build_multi_index(db_words: Array, *, num_bits: int, num_tables: Optional[int] = None,
                      reorder: Optional[bool] = None) -> MultiIndex:
  r"""Builds the multi-index hashing tables of packed codes (``m`` substring tables).

  .. math:: \mathcal{T}_j(v) = \{ i : x_i[\beta_j : \beta_{j+1}] = v \}, \quad i \text{ ascending}

  One stable sort per table: ``O(m N \log N)`` time, ``7 m N`` bytes of
  entries (each an item's index and fingerprint, module docstring) plus each
  table's offsets (``4 \cdot 2^{s_j}`` bytes dense, ``8 U_j`` sparse), and
  with ``reorder`` one more sort and a copy of the codes; see
  :attr:`MultiIndex.nbytes`.

  Args:
    db_words: ``uint32[N, W]`` packed database codes, ``W = ceil(num_bits / 32)``, padding bits 0.
    num_bits: the code length ``b``.
    num_tables: ``m``, with ``ceil(b / 32) <= m <= b``; None: :func:`default_num_tables` ``(N, b)``.
    reorder: keep a copy of the codes sorted by value and read the candidates from it
      (:attr:`MultiIndex.sorted_words`); None: when the codes take from :data:`REORDER_MIN_BYTES` to
      :data:`REORDER_MAX_BYTES`. Searches return the same either way.

  Returns:
    A :class:`MultiIndex` (numpy arrays).

  >>> import numpy as np
  >>> from hashjax.codes import pack_bits
  >>> x = pack_bits(np.array([[1, 0, 1, 1], [0, 0, 1, 1], [1, 0, 0, 0]]))
  >>> idx = build_multi_index(x, num_bits=4, num_tables=2)
  >>> idx.bounds.tolist(), idx.items.tolist(), idx.offsets[1].tolist()
  ([0, 2, 4], [[1, 0, 2], [2, 0, 1]], [0, 1, 1, 1, 3])
  """
  db, num_bits = _check_db(db_words, num_bits)
  low = -(-num_bits // MAX_SUBSTRING_BITS)
  if num_tables is None:
    num_tables = default_num_tables(db.shape[0], num_bits)
  else:  # substrings of 1 to MAX_SUBSTRING_BITS bits
    _checks.check_int_at_most("num_tables", num_tables, num_bits, low=low, what=f"num_bits = {num_bits} (or None)")
  if reorder is None:
    reorder = REORDER_MIN_BYTES <= db.nbytes <= REORDER_MAX_BYTES
  reorder = _checks.check_bool("reorder", reorder)
  bounds = _bounds(num_bits, int(num_tables))
  words = db
  if reorder:  # by value, the highest lane first: the last substring's buckets become runs of rows 0, 1, ...
    lanes = _lanes(db)
    order = np.argsort(lanes[:, 0], kind="stable") if lanes.shape[1] == 1 else np.lexsort(lanes.T)
    words = np.take(db, order, axis=0)
  id_bits = _id_bits(db.shape[0])
  keys, offsets = [], []
  entries = np.empty((int(num_tables), db.shape[0], ENTRY_BYTES), np.uint8)
  for j in range(int(num_tables)):
    k, o, items = _table(_substring(words, bounds[j], bounds[j + 1]), int(bounds[j + 1] - bounds[j]))
    keys.append(k)
    offsets.append(o)
    values = _fingerprints(words, bounds, j, id_bits)[items] << np.uint64(id_bits)
    if reorder and j == int(num_tables) - 1:  # its rows are 0 .. N - 1: each row's database index instead
      items = order
    values |= items.astype(np.uint64)
    entries[j] = values.astype("<u8").view(np.uint8).reshape(-1, 8)[:, :ENTRY_BYTES]
  return MultiIndex(db, bounds, tuple(keys), tuple(offsets), entries, num_bits, words if reorder else None)


# ----------------------------------------------------------------------------
# Searching.


def _lanes(words: np.ndarray) -> np.ndarray:
  """``words[n, W]`` as ``uint64[n, W / 2]`` lanes when ``W`` is even, else ``uint32[n, W]``."""
  words = np.ascontiguousarray(words)
  return words.view(np.uint64) if words.shape[1] % 2 == 0 and sys.byteorder == "little" else words


def _lane_masks(bounds: np.ndarray, lanes: np.ndarray) -> np.ndarray:
  """``[m, L]`` each substring's bits within the lanes ``[n, L]`` (bit ``t`` of a code: bit ``t % w`` of lane
  ``t // w``, ``w`` the lane width, as in a little-endian view of the words)."""
  width = lanes.dtype.itemsize * 8
  out = np.zeros((bounds.shape[0] - 1, lanes.shape[1]), lanes.dtype)
  for j, (lo, hi) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist())):
    for t in range(lo, hi):
      out[j, t // width] |= lanes.dtype.type(1 << (t % width))
  return out


def _readonly(arrays) -> numba.typed.List:
  """The arrays as a numba list of read-only contiguous views (one element type, whether loaded or built)."""
  out = numba.typed.List()
  for a in arrays:
    view = np.ascontiguousarray(np.asarray(a)).view()
    view.flags.writeable = False
    out.append(view)
  return out


@functools.lru_cache(maxsize=32)
def _rest_probes(sizes: Tuple[int, ...]) -> np.ndarray:
  r"""``float64[T + 1]``: the probes of steps ``t, t + 1, ..., T - 1`` (step ``t = m r + j`` probes table ``j`` at
  radius ``r``, :math:`\binom{s_j}{r}` substrings); entry ``T`` is 0."""
  probes = np.array([math.comb(s, r) for r in range(max(sizes) + 1) for s in sizes], np.float64)
  return np.append(np.cumsum(probes[::-1])[::-1], 0.0)


def _bits(words: np.ndarray, num_bits: int) -> np.ndarray:
  """``uint8[n, num_bits]`` the bits of packed ``words[n, W]`` (bit ``t`` of word ``w`` is bit ``32 w + t``)."""
  return np.unpackbits(words.astype("<u4").view(np.uint8), axis=1, bitorder="little")[:, :num_bits]


def _bit_ones(index: MultiIndex) -> np.ndarray:
  """``float64[b]``: each bit's frequency of ones in a strided sample of at most :data:`_SAMPLE_ROWS` codes."""
  return _bits(np.asarray(index.db_words[::-(-index.num_db // _SAMPLE_ROWS)]), index.num_bits).mean(axis=0)


def _expected_candidates(index: MultiIndex, queries: np.ndarray, ones: np.ndarray) -> np.ndarray:
  r"""``float64[Q, T]``: the items that step ``t = m r + j`` is expected to find for each query if the database's
  bits were independent, each with its frequency of ones ``ones[i]`` (:func:`_bit_ones`):

  .. math:: E_{q, j, r} = N \, [z^r] \prod_{i \in j} \big(a_i + (1 - a_i) z\big), \qquad
     a_i = f_i^{q_i} (1 - f_i)^{1 - q_i}

  (the probability that an item's substring ``j`` differs from the query's in exactly ``r`` bits). On uniform
  codes this is :math:`\binom{s_j}{r} N / 2^{s_j}`; on codes whose bits are skewed, a query drawn from the same
  distribution lies where buckets are fuller, and far ones hold less.
  """
  same = np.where(_bits(queries, index.num_bits) == 1, ones, 1.0 - ones).T  # [b, Q]: P(an item's bit = the query's)
  sizes = np.diff(index.bounds)
  width = int(sizes.max())
  poly = np.zeros((width + 1, sizes.shape[0], queries.shape[0]))  # coefficients of z^0 .. z^width per table
  poly[0] = 1.0
  for i in range(width):  # the i-th bit of every substring at once (past a substring's end: a factor 1)
    a = np.where((i < sizes)[:, None], same[np.minimum(index.bounds[:-1] + i, index.num_bits - 1)], 1.0)  # [m, Q]
    poly[1:i + 2] = poly[1:i + 2] * a + poly[:i + 1] * (1.0 - a)  # z^0 .. z^i are the nonzero ones so far
    poly[0] *= a
  return index.num_db * poly.transpose(2, 0, 1).reshape(queries.shape[0], -1)  # step t = m r + j


@functools.lru_cache(maxsize=32)
def _found_probability(sizes: Tuple[int, ...]) -> np.ndarray:
  r"""``p[t, d]``: the probability that steps ``0..t`` find an item at Hamming distance ``d`` whose ``d``
  differing bits are placed uniformly at random over the substrings of ``sizes`` (1 for ``d <= t``).

  After step ``t = m r + j``, tables ``0..j`` were probed to substring radius ``r`` and the others to ``r - 1``;
  an item is missed when every table holds more differing bits than its radius: the coefficient of ``z^d`` in
  :math:`\prod_i \sum_{x > r_i} \binom{s_i}{x} z^x`, over :math:`\binom{b}{d}`.
  """
  m, b = len(sizes), sum(sizes)
  total = np.array([math.comb(b, d) for d in range(b + 1)], np.float64)
  out = np.zeros((m * (max(sizes) + 1), b + 1))
  for t in range(out.shape[0]):
    r, j = divmod(t, m)
    missed = np.ones(1)
    for i, size in enumerate(sizes):
      radius = r if i <= j else r - 1
      missed = np.convolve(missed, [math.comb(size, x) if x > radius else 0 for x in range(size + 1)])
    out[t] = 1 - missed / total
  return out


def _threads() -> int:
  """The CPUs this process may run on."""
  return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _probe(index: MultiIndex, queries: np.ndarray, rows: np.ndarray, *, k: int, radius: Optional[np.ndarray],
           budget: Optional[int], ones: Optional[np.ndarray]):
  """Probes the queries ``queries[rows]`` (:func:`hashjax._kernels.probe.probe`; up to four chunks per CPU, of about
  :data:`_CHUNK_QUERIES` queries or more, on a thread per CPU).

  Args:
    k: k-NN: ``k``; radius search: 0, with ``radius[Q]`` each query's radius.
    budget: a query's work past which it is handed over (None: ``method="probe"``).
    ones: the bits' frequencies of ones that price the steps (with a budget).

  Returns:
    ``(row, dist, item)`` the answers of the queries answered, sorted by (row, distance, item) (k-NN: ``k`` per
    row); the rows handed over, ascending, and their modelled remaining work; each row's largest substring
    radius whose buckets it looked up (-1: none).
  """
  if not rows.size:
    empty = np.zeros((0,), np.int64)
    return empty, empty, empty, empty, np.zeros((0,)), empty
  m = index.num_tables
  sizes = np.diff(index.bounds)
  lanes = _lanes(index.sorted_words if index.sorted_words is not None else index.db_words)
  masks = _lane_masks(index.bounds, lanes)
  rest_probes = _rest_probes(tuple(sizes.tolist()))
  found = _found_probability(tuple(sizes.tolist()))
  radius = np.zeros((queries.shape[0],), np.int64) if radius is None else radius
  probe_cost = 1 if k > 0 else CANDIDATES_PER_PROBE
  keys, offsets = _readonly(index.keys), _readonly(index.offsets)  # read by every thread
  entries = np.ascontiguousarray(index.entries)  # the kernel prefetches by address (no copy: built or loaded so)

  def run(part):
    q = queries[part]
    subs = np.stack([_substring(q, index.bounds[j], index.bounds[j + 1]) for j in range(m)], axis=1)
    fps = np.stack([_fingerprints(q, index.bounds, j, index.id_bits) for j in range(m)], axis=1)
    rest = np.zeros((part.shape[0], 1))
    if budget is not None:  # per step t, the modelled work of steps t, t + 1, ...: expected items plus probes
      work = _expected_candidates(index, q, ones) + probe_cost * (rest_probes[:-1] - rest_probes[1:])
      rest = np.zeros((part.shape[0], work.shape[1] + 1))
      rest[:, :-1] = np.cumsum(work[:, ::-1], axis=1)[:, ::-1]
    return probe.probe(subs, fps, _lanes(q), k, radius[part], -1 if budget is None else budget, probe_cost,
                       MAX_PROBES, rest, rest_probes, found, keys, offsets, entries, index.id_bits, lanes,
                       index.sorted_words is not None, masks, sizes)

  threads = _threads()
  parts = np.array_split(rows, max(1, min(4 * threads, -(-rows.shape[0] // _CHUNK_QUERIES))))
  if len(parts) == 1:
    outs = [run(parts[0])]
  else:
    with concurrent.futures.ThreadPoolExecutor(min(threads, len(parts))) as pool:
      outs = list(pool.map(run, parts))
  for *_, status in outs:
    if status[0]:
      raise ValueError(f"method: {status[0]} substrings at distance {status[1]} of a {status[2]}-bit substring exceed "
                       f"MAX_PROBES = {MAX_PROBES} (a large k or radius); use method='auto' (it scans such queries "
                       "linearly)")
  row = np.concatenate([np.repeat(part, out[0]) for part, out in zip(parts, outs)])
  dist, item = (np.concatenate([out[i] for out in outs]) for i in (1, 2))
  handed = np.concatenate([part[out[3]] for part, out in zip(parts, outs)])
  need = np.concatenate([out[4][out[3]] for out in outs])
  reach = np.concatenate([out[5] for out in outs])
  return row, dist, item, handed, need, reach


def _budget(index: MultiIndex, method: str) -> Optional[int]:
  if _checks.check_option("method", method, _METHODS) == "probe":
    return None
  return max(1, index.db_words.shape[0] * (index.db_words.shape[1] + 1) // SCAN_WORDS_PER_CANDIDATE)


def _search(index: MultiIndex, queries: np.ndarray, budget: Optional[int], *, k: int = 0,
            radius: Optional[np.ndarray] = None):
  """The queries probed (:func:`_probe`): ``(row, dist, item)`` of the queries answered, sorted, and the sorted rows
  left to the linear scan (with a ``budget``: every query of a database below :data:`SCAN_BELOW_WORDS`, and the
  queries after the pilot, unprobed, when the pilot's went).

  Fewer than :data:`SCAN_MIN_QUERIES` handed queries whose modelled work adds up to less than that many scans are
  probed again, each with its share of that work as its budget: a scan of so few queries costs as much; and the
  fewer still handed then, once more (:data:`PROBE_AGAIN_ROUNDS`).
  """
  found = [(np.zeros((0,), np.int64),) * 3]
  num = queries.shape[0]
  if budget is None:  # method="probe": every query probed, none handed over
    pilot = num
  else:  # a small database is scanned outright; else the first queries (the pilot) decide for the rest
    pilot = 0 if index.db_words.size < SCAN_BELOW_WORDS else min(num, PILOT_QUERIES)
  ones = _bit_ones(index) if budget is not None and pilot else None

  def probe_rows(rows, row_budget):
    """Probes the queries ``rows``, adding their answers to ``found``; returns the rows handed over and their
    modelled work."""
    row, dist, item, handed, need, _ = _probe(index, queries, rows, k=k, radius=radius, budget=row_budget, ones=ones)
    found.append((row, dist, item))
    return handed, need

  handed, need = probe_rows(np.arange(pilot), budget)
  if pilot < num and handed.size >= PILOT_HANDED * pilot:  # the rest would go too: scanned unprobed
    handed, need = np.concatenate([handed, np.arange(pilot, num)]), np.append(need, np.full(num - pilot, np.inf))
  elif pilot < num:
    more, more_need = probe_rows(np.arange(pilot, num), budget)
    handed, need = np.concatenate([handed, more]), np.concatenate([need, more_need])
  again = False
  for _ in range(PROBE_AGAIN_ROUNDS):  # each round's fewer queries get a larger share
    if not (budget is not None and 0 < handed.size < SCAN_MIN_QUERIES and need.sum() < SCAN_MIN_QUERIES * budget):
      break
    handed, need = probe_rows(handed, SCAN_MIN_QUERIES * budget // handed.shape[0])
    again = True
  row, dist, item = (np.concatenate(a) for a in zip(*found))
  if again:  # the later passes' rows come last; each row's answers are sorted already
    order = np.argsort(row, kind="stable")
    row, dist, item = row[order], dist[order], item[order]
  return row, dist, item, np.sort(handed)


def multi_index_knn(index: MultiIndex, query_words: Array, k: int, *, method: str = "auto") -> Tuple[Array, Array]:
  r"""Exact k nearest neighbours by multi-index hashing; the result of :func:`hashjax.search.knn`.

  .. math:: \mathrm{knn}_k(q) = \text{the first } k \text{ items } i \text{ in the order } (d(q, i), i)

  Probes the substring tables at growing radius until the ``k``-th best
  distance found is within the certified bound ``m r + j`` (module docstring).

  Args:
    index: a :class:`MultiIndex` from :func:`build_multi_index`.
    query_words: ``uint32[Q, W]`` packed query codes of the index's width (padding bits 0).
    k: ``1 <= k <= N``.
    method: ``"auto"`` (hand a query to :func:`hashjax.search.knn` once probing it costs more than a scan) or
      ``"probe"`` (multi-index hashing only).

  Returns:
    ``(distances, indices)``, each ``int32[Q, k]``, sorted per row by (distance, index).

  >>> import numpy as np
  >>> from hashjax.codes import pack_bits
  >>> x = pack_bits(np.array([[1, 1, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0]]))
  >>> idx = build_multi_index(x, num_bits=4, num_tables=2)
  >>> distances, indices = multi_index_knn(idx, pack_bits(np.array([[1, 0, 0, 0]])), 3)
  >>> distances.tolist(), indices.tolist()
  ([[0, 1, 1]], [[2, 0, 1]])
  """
  queries = _check_queries(index, query_words)
  k = _checks.check_k(k, index.num_db, db_name="the index")
  row, dist, item, scan_rows = _search(index, queries, _budget(index, method), k=k)
  out_d = np.zeros((queries.shape[0], k), np.int32)
  out_i = np.zeros((queries.shape[0], k), np.int32)
  out_d[row[::k]], out_i[row[::k]] = dist.reshape(-1, k), item.reshape(-1, k)
  if scan_rows.size:
    d, i = search.knn(queries[scan_rows], index.db_words, k)
    out_d[scan_rows], out_i[scan_rows] = np.asarray(d), np.asarray(i)
  return jax.device_put(out_d), jax.device_put(out_i)


def multi_index_radius(index: MultiIndex, query_words: Array, r: Union[int, Array], *,
                       method: str = "auto") -> RaggedNeighbors:
  r"""Every database item within Hamming distance ``r`` by multi-index hashing; the result of
  :func:`hashjax.search.radius_search`.

  .. math:: \mathcal{R}_r(q) = \{ i : d(q, i) \le r \}, \text{ ordered by } (d(q, i), i)

  Probes tables ``0..c`` at substring radii up to ``a`` and the others up to
  ``a - 1``, where ``r = m a + c`` (``0 <= c < m``): the certified bound then
  reaches ``r``.

  Args:
    index: a :class:`MultiIndex` from :func:`build_multi_index`.
    query_words: ``uint32[Q, W]`` packed query codes of the index's width (padding bits 0).
    r: the radius, a non-negative int, or ``int[Q]`` one per query.
    method: ``"auto"`` (hand a query to :func:`hashjax.search.radius_search` once probing it costs more than a
      scan) or ``"probe"``.

  Returns:
    A :class:`hashjax.search.RaggedNeighbors` ``(distances, indices, offsets)``.

  >>> import numpy as np
  >>> from hashjax.codes import pack_bits
  >>> x = pack_bits(np.array([[1, 1, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0], [0, 1, 1, 0]]))
  >>> q = pack_bits(np.array([[1, 0, 0, 0], [1, 1, 1, 0]]))
  >>> res = multi_index_radius(build_multi_index(x, num_bits=4, num_tables=2), q, 1)
  >>> res.distances.tolist(), res.indices.tolist(), res.offsets.tolist()
  ([0, 1, 1, 1, 1], [2, 0, 1, 0, 3], [0, 3, 5])
  """
  queries = _check_queries(index, query_words)
  radius = np.minimum(_checks.check_radius(r, queries.shape[0]), index.num_bits).astype(np.int64)
  row, dist, item, scan_rows = _search(index, queries, _budget(index, method), radius=radius)
  if scan_rows.size == queries.shape[0]:  # every query handed over: the scan's result as it is
    return search.radius_search(queries, index.db_words, radius)
  parts = [(row, dist, item)]
  if scan_rows.size:
    res = search.radius_search(queries[scan_rows], index.db_words, radius[scan_rows])
    parts.append((np.repeat(scan_rows, np.diff(np.asarray(res.offsets))), np.asarray(res.distances).astype(np.int64),
                  np.asarray(res.indices).astype(np.int64)))
  row, dist, item = (np.concatenate(a) for a in zip(*parts))
  order = np.argsort(row, kind="stable")  # each part is sorted by (row, distance, index), and their rows differ
  offsets = np.zeros((queries.shape[0] + 1,), np.int64)
  np.cumsum(np.bincount(row, minlength=queries.shape[0]), out=offsets[1:])
  return RaggedNeighbors.from_arrays(dist[order], item[order], offsets)
