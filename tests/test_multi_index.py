"""hashjax.index multi-index hashing against brute-force numpy references (all-pairs popcounts, lexicographic sorts)."""

import itertools

import numpy as np
import pytest

from brute_force import assert_ragged_equal as _assert_ragged_equal
from brute_force import ref_distances as _ref_distances
from brute_force import ref_radius as _ref_radius
from hashjax import codes, index
from hashjax.index import multi


@pytest.fixture(autouse=True)
def _probe_small_databases(monkeypatch):
  """method="auto" scans a database below multi.SCAN_BELOW_WORDS outright; these tests' databases are that small,
  so they are probed here as a larger one would be (test_auto_scans_a_small_database_outright checks the rule)."""
  monkeypatch.setattr(multi, "SCAN_BELOW_WORDS", 0)


def _flip(words, bits):
  out = words.copy()
  for b in bits:
    out[b // 32] ^= np.uint32(1 << (b % 32))
  return out


def _data(rng, num_bits, n, num_q, pool):
  """Database codes drawn from ``pool`` distinct codes (many exact duplicates: ties), queries: database codes
  with 0-6 flipped bits, and a few uniformly random codes."""
  bits = rng.integers(0, 2, (pool, num_bits))
  base = np.asarray(codes.pack_bits(bits))
  x = base[rng.integers(0, pool, n)]
  q = np.stack([_flip(x[rng.integers(0, n)], rng.choice(num_bits, int(rng.integers(0, 7)), replace=False))
                for _ in range(num_q)])
  rand = np.asarray(codes.pack_bits(rng.integers(0, 2, (4, num_bits))))
  return x, np.concatenate([q, rand])


def _ref_knn(q, x, k):
  """First ``k`` items of each query in the order (distance, index), by a lexicographic sort of all items."""
  d = _ref_distances(q, x)
  order = np.stack([np.lexsort((np.arange(x.shape[0]), row))[:k] for row in d])
  return np.take_along_axis(d, order, axis=1), order


_ALL = ((1, 4, 37, None), (0, 1, 5, 11, 999))  # None: k = N; 999: past num_bits
# num_bits, num_tables (None: default), database size, pool of distinct codes, (ks, radii), random queries.
# Tables of more than 16 bits are sparse; there, large radii enumerate too many substrings for "probe".
_CASES = [
    (64, None, 3000, 300, _ALL, True),  # 6 tables of 11 or 10 bits
    (40, 2, 1500, 1500, ((1, 4, 37), (0, 1, 5, 9)), False),  # sparse 20-bit tables
    (64, 2, 1500, 50, ((1, 4, 11), (0, 1, 5, 9)), False),  # sparse 32-bit tables (masks of up to 32 bits)
    (70, 3, 1500, 30, ((1, 4, 37), (0, 1, 5, 11)), False),  # sparse, 24 + 23 + 23 bits across word boundaries
    (96, None, 1200, 40, _ALL, True),
    (128, 8, 1000, 400, _ALL, True),
    (256, None, 800, 100, _ALL, True),
    (33, 2, 900, 25, _ALL, True),  # 17 (sparse) + 16 (dense)
    (100, 7, 700, 700, _ALL, True),  # 15, 15, 14, ...
]


@pytest.mark.parametrize("num_bits,num_tables,n,pool,ks_radii,random_queries", _CASES)
def test_knn_and_radius_match_brute_force(num_bits, num_tables, n, pool, ks_radii, random_queries):
  rng = np.random.default_rng(num_bits * 10 + (num_tables or 0))
  x, q = _data(rng, num_bits, n, 24, pool)
  q = q if random_queries else q[:24]
  idx = index.build_multi_index(x, num_bits=num_bits, num_tables=num_tables)
  assert idx.num_db == n and idx.num_tables == (num_tables or index.default_num_tables(n, num_bits))
  d_all = _ref_distances(q, x)
  ks, radii = ks_radii
  for k in ks:
    k = k or n
    want_d, want_i = _ref_knn(q, x, k)
    got_d, got_i = index.multi_index_knn(idx, q, k, method="probe")
    assert got_d.dtype == np.int32 and got_i.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(got_d), want_d, err_msg=f"k={k}")
    np.testing.assert_array_equal(np.asarray(got_i), want_i, err_msg=f"k={k}")
  # Ties at the k-th distance, cut by index.
  assert any((d_all[j] == np.sort(d_all[j])[3]).sum() > 1 for j in range(q.shape[0]))
  for r in radii:
    _assert_ragged_equal(index.multi_index_radius(idx, q, r, method="probe"), _ref_radius(q, x, r))
  per_query = rng.integers(0, max(radii[:-1]) + 1, q.shape[0])
  _assert_ragged_equal(index.multi_index_radius(idx, q, per_query, method="probe"), _ref_radius(q, x, per_query))


# num_bits, num_tables (None: default), database size, pool of distinct codes: lanes of one uint32 (32 bits: a
# fingerprint holds the whole other substring), one uint64 (33, 64), three uint32 (70, sparse tables), two uint64
# (128: 7 other substrings share the fingerprint) and a database of 2^16 + 1 codes (17 bits of index).
_ENTRY_CASES = [(32, 2, 900, 60), (33, 2, 900, 25), (64, None, 3000, 300), (70, 3, 1500, 30), (128, 8, 1000, 400),
                (64, 3, 2**16 + 1, 5000)]


@pytest.mark.parametrize("reorder", [False, True])
@pytest.mark.parametrize("num_bits,num_tables,n,pool", _ENTRY_CASES)
def test_entries_hold_each_item_and_its_fingerprint(num_bits, num_tables, n, pool, reorder):
  # An entry is 7 bytes, a little-endian integer: the database index in the low ceil(log2 N) bits, then the
  # fingerprint of its table: the lowest bits of each other substring, 56 - ceil(log2 N) shared out evenly (the
  # first ones one more), all of a substring where it is shorter. Rebuilt here from the bits; answers exact.
  # reorder=True: the codes are copied sorted by value (equal ones by index); the tables hold rows of the copy,
  # and the last table's bucket u is its rows offsets[u] .. offsets[u + 1] - 1, whose entries hold each row's
  # database index; answers (indices, and ties by index) are the caller's rows'.
  rng = np.random.default_rng(num_bits + 7)
  x, q = _data(rng, num_bits, n, 24, pool)
  idx = index.build_multi_index(x, num_bits=num_bits, num_tables=num_tables, reorder=reorder)
  m, bounds = idx.num_tables, idx.bounds.tolist()
  id_bits = max(1, int(np.ceil(np.log2(n))))
  assert idx.id_bits == id_bits and idx.entries.shape == (m, n, 7) and idx.entries.dtype == np.uint8
  order = np.lexsort(x.T) if reorder else np.arange(n)  # by value, the last word most significant
  copy = x.nbytes if reorder else 0
  assert idx.nbytes == 7 * m * n + sum(o.nbytes + k.nbytes for o, k in zip(idx.offsets, idx.keys)) + copy
  if reorder:
    np.testing.assert_array_equal(idx.sorted_words, x[order])
  else:
    assert idx.sorted_words is None
  bits = np.asarray(codes.unpack_bits(x[order], num_bits))  # the codes the tables' items are rows of
  values = sum(idx.entries[..., e].astype(object) << (8 * e) for e in range(7))  # little-endian, Python ints
  for j in range(m):
    ids = np.array([v % 2**id_bits for v in values[j]], np.int64)
    sub = bits[:, bounds[j]:bounds[j + 1]] @ (1 << np.arange(bounds[j + 1] - bounds[j], dtype=object))
    bucket = np.repeat(np.arange(idx.offsets[j].shape[0] - 1), np.diff(idx.offsets[j]))
    keys = bucket if not idx.keys[j].size else idx.keys[j][bucket]
    want = np.lexsort((np.arange(n), sub.astype(np.int64)))  # by substring, then by row
    np.testing.assert_array_equal(ids, order if reorder and j == m - 1 else want)
    np.testing.assert_array_equal(keys, sub[want].astype(np.int64))
    np.testing.assert_array_equal(idx.items[j], ids)
    if reorder and j == m - 1:
      np.testing.assert_array_equal(want, np.arange(n))  # the copy's rows are the last table's buckets in order
    others = [i for i in range(m) if i != j]
    positions = []
    for t, i in enumerate(others):
      share = (56 - id_bits) // len(others) + (t < (56 - id_bits) % len(others))
      positions += list(range(bounds[i], bounds[i] + min(share, bounds[i + 1] - bounds[i])))
    fingerprint = bits[want][:, positions] @ (1 << np.arange(len(positions), dtype=object))
    np.testing.assert_array_equal([v >> id_bits for v in values[j]], fingerprint)
  near = q[:24]  # the last 4 queries are random codes: "probe" would refuse their steps on sparse tables
  for k, method, queries in ((1, "probe", near), (4, "probe", near), (11, "probe", near), (37, "auto", q),
                             (n, "auto", q)):
    want_d, want_i = _ref_knn(queries, x, k)
    got_d, got_i = index.multi_index_knn(idx, queries, k, method=method)
    np.testing.assert_array_equal(np.asarray(got_d), want_d, err_msg=f"k={k}")
    np.testing.assert_array_equal(np.asarray(got_i), want_i, err_msg=f"k={k}")
  for r in (0, 1, 5, 11):
    _assert_ragged_equal(index.multi_index_radius(idx, near, r, method="probe"), _ref_radius(near, x, r))


def test_the_fingerprint_drops_candidates_before_their_code_is_read():
  # Item 0 shares the query's first substring and lies 10 bits away; item 1 lies 1 bit away, that bit in the first
  # substring, where the fingerprints of tables 1 and 2 hold it. k = 1: step (0, 0) finds item 0 alone and sets the
  # limit to 10; step (0, 1) meets item 1 in table 1, and its fingerprint keeps it (0 + 1 <= 10). With every
  # fingerprint bit of the entries inverted, item 1's fingerprint puts it past the limit at each later step and it
  # is dropped unread: the answer turns wrong, which shows the search trusts the fingerprints.
  q = np.asarray(codes.pack_bits(np.random.default_rng(3).integers(0, 2, (1, 64))))
  x = np.stack([_flip(q[0], range(30, 40)), _flip(q[0], [0])])
  idx = index.build_multi_index(x, num_bits=64, num_tables=3, reorder=False)
  assert idx.bounds.tolist() == [0, 22, 43, 64]
  d, i = index.multi_index_knn(idx, q, 1, method="probe")
  assert (d.tolist(), i.tolist()) == ([[1]], [[1]])
  values = sum(idx.entries[..., e].astype(np.uint64) << np.uint64(8 * e) for e in range(7))
  values ^= np.uint64((1 << 56) - (1 << idx.id_bits))  # the fingerprints inverted, the items kept
  inverted = idx._replace(entries=values[..., None].astype("<u8").view(np.uint8)[..., :7].copy())
  d, i = index.multi_index_knn(inverted, q, 1, method="probe")
  assert (d.tolist(), i.tolist()) == ([[10]], [[0]])


@pytest.mark.parametrize("num_bits,num_tables,n", [(64, 3, 1), (64, 3, 2), (16, 1, 50), (20, 1, 50), (32, 1, 9)])
def test_one_table_and_one_or_two_codes(num_bits, num_tables, n):
  # m = 1: no other substring, an empty fingerprint; N = 1 or 2: one bit of index. Exact against brute force.
  rng = np.random.default_rng(n + num_bits)
  x, q = _data(rng, num_bits, n, 6, max(1, n // 2))
  idx = index.build_multi_index(x, num_bits=num_bits, num_tables=num_tables)
  assert idx.num_tables == num_tables and idx.id_bits == max(1, (n - 1).bit_length())
  methods = ("auto",) if num_bits == 32 else ("probe", "auto")  # one 32-bit table: "probe" refuses far queries
  for k in sorted({1, n}):
    want_d, want_i = _ref_knn(q, x, k)
    for method in methods:
      got_d, got_i = index.multi_index_knn(idx, q, k, method=method)
      np.testing.assert_array_equal(np.asarray(got_d), want_d, err_msg=f"k={k} {method}")
      np.testing.assert_array_equal(np.asarray(got_i), want_i, err_msg=f"k={k} {method}")
  for r in (0, 3, num_bits):
    _assert_ragged_equal(index.multi_index_radius(idx, q, r), _ref_radius(q, x, r))


def test_sorted_codes_by_default_from_reorder_min_bytes_to_reorder_max_bytes(monkeypatch):
  rng = np.random.default_rng(4)
  x, _ = _data(rng, 64, 2000, 40, 2000)
  monkeypatch.setattr(multi, "REORDER_MIN_BYTES", x.nbytes + 1)
  assert index.build_multi_index(x, num_bits=64).sorted_words is None
  monkeypatch.setattr(multi, "REORDER_MIN_BYTES", x.nbytes)
  assert index.build_multi_index(x, num_bits=64, num_tables=2).sorted_words is not None
  monkeypatch.setattr(multi, "REORDER_MAX_BYTES", x.nbytes - 1)
  assert index.build_multi_index(x, num_bits=64).sorted_words is None
  with pytest.raises(ValueError, match="reorder"):
    index.build_multi_index(x, num_bits=64, reorder="yes")


@pytest.mark.parametrize("reorder", [False, True])
def test_auto_hands_expensive_queries_to_the_scan(monkeypatch, reorder):
  # 32-bit substrings of random codes: the neighbours sit far away, where "probe" would enumerate more than
  # MAX_PROBES substrings per step and refuses; "auto" (the default) hands those queries to search.knn /
  # search.radius_search, and keeps the cheap ones (near-duplicates). Both exact. With the sorted copy, the
  # scan searches the caller's codes, the probes the copy; both answer in the caller's indices.
  rng = np.random.default_rng(5)
  x, q = _data(rng, 64, 2000, 40, 2000)
  idx = index.build_multi_index(x, num_bits=64, num_tables=2, reorder=reorder)
  assert (idx.sorted_words is not None) == reorder
  with pytest.raises(ValueError, match="MAX_PROBES"):
    index.multi_index_knn(idx, q[-1:], 25, method="probe")  # a random query: its 25th neighbour is far
  want_d, want_i = _ref_knn(q, x, 25)
  got_d, got_i = index.multi_index_knn(idx, q, 25)
  np.testing.assert_array_equal(np.asarray(got_d), want_d)
  np.testing.assert_array_equal(np.asarray(got_i), want_i)
  radii = np.r_[np.zeros(q.shape[0] - 4, np.int64), [3, 20, 30, 64]]
  _assert_ragged_equal(index.multi_index_radius(idx, q, radii), _ref_radius(q, x, radii))
  radii = rng.permutation(radii)  # the rows handed over among those probed: the two parts merged by row
  monkeypatch.setattr(multi, "SCAN_BELOW_WORDS", 0)  # probed, not scanned outright, with a scan's budget
  monkeypatch.setattr(multi, "SCAN_WORDS_PER_CANDIDATE", 1)  # as of a large database (the default: 15 candidates)
  got, probed, handed = _probed_and_handed(monkeypatch, lambda: index.multi_index_radius(idx, q, radii))
  _assert_ragged_equal(got, _ref_radius(q, x, radii))
  assert probed == q.shape[0] and 0 < handed < q.shape[0], (probed, handed)


def _handed_rows(monkeypatch, idx, q, k):
  """``multi_index_knn(idx, q, k)``'s answers, the number of queries it handed to ``search.knn`` and the
  largest substring radius whose buckets it looked up."""
  from hashjax import search  # pylint: disable=g-import-not-at-top
  scan, probe, handed, radii = search.knn, multi._probe, [], [0]  # pylint: disable=protected-access

  def spy(query_words, db_words, k):
    handed.append(np.asarray(query_words).shape[0])
    return scan(query_words, db_words, k)

  def spy_probe(*args, **kwargs):
    out = probe(*args, **kwargs)
    radii.append(int(out[-1].max(initial=0)))
    return out

  monkeypatch.setattr(search, "knn", spy)
  monkeypatch.setattr(multi, "_probe", spy_probe)
  d, i = index.multi_index_knn(idx, q, k)
  return np.asarray(d), np.asarray(i), sum(handed), max(radii)


def test_auto_scans_uniform_codes_and_probes_dense_clusters(monkeypatch):
  # Uniform codes (2^16 of 64 bits, 4 tables of 16 bits): the 10th neighbour is about 16 bits away, so
  # certifying it means probing to substring radius 4 (1,820 probes per table, more than the whole scan
  # costs): every query goes to the scan, as soon as its 10th distance so far shows it (after radius 1, where
  # probing to the certified bound alone would reach radius 2 before its work passed a scan's). Dense
  # clusters (256 centres, 2% of the bits flipped): the neighbours share the query's buckets, so every query is
  # answered by probing. Both exact.
  rng = np.random.default_rng(0)
  n, num_bits = 1 << 16, 64
  uniform = np.asarray(codes.pack_bits(rng.integers(0, 2, (n + 40, num_bits))))
  centres = rng.integers(0, 2, (256, num_bits))
  dense = np.asarray(codes.pack_bits(centres[rng.integers(0, 256, n + 40)] ^ (rng.random((n + 40, num_bits)) < 0.02)))
  # One crowded cluster (a twentieth of the database, so its buckets alone hold more than a scan's worth of
  # candidates) and one query in it: handed over at first, but a scan of one query costs as much as one of 32,
  # so it is probed again with that budget, and answered by probing too.
  crowded = dense.copy()
  crowded[:n // 20] = np.asarray(codes.pack_bits(centres[0] ^ (rng.random((n // 20, num_bits)) < 0.02)))
  crowded[-1] = np.asarray(codes.pack_bits(centres[0] ^ (rng.random((1, num_bits)) < 0.02)))[0]
  for name, words, want_handed, want_radius in (("uniform", uniform, 40, 1), ("dense", dense, 0, 1),
                                                ("crowded", crowded, 0, 1)):
    x, q = words[:n], words[n:]
    idx = index.build_multi_index(x, num_bits=num_bits)
    got_d, got_i, handed, radius = _handed_rows(monkeypatch, idx, q, 10)
    want_d, want_i = _ref_knn(q, x, 10)
    np.testing.assert_array_equal(got_d, want_d, err_msg=name)
    np.testing.assert_array_equal(got_i, want_i, err_msg=name)
    assert (handed, radius) == (want_handed, want_radius), name


def _probed_and_handed(monkeypatch, run):
  """``run()``'s result, the queries it probed (summed over its calls of multi._probe) and the queries it handed to
  ``search.knn`` or ``search.radius_search``."""
  from hashjax import search  # pylint: disable=g-import-not-at-top
  counts = {"probed": 0, "handed": 0}

  def spy(fn, key, count):
    def wrapped(*args, **kwargs):
      counts[key] += count(*args)
      return fn(*args, **kwargs)
    return wrapped

  monkeypatch.setattr(multi, "_probe", spy(multi._probe, "probed", lambda idx, queries, rows, **_: rows.shape[0]))
  for name in ("knn", "radius_search"):
    monkeypatch.setattr(search, name, spy(getattr(search, name), "handed", lambda q, *_: np.asarray(q).shape[0]))
  out = run()
  monkeypatch.undo()
  return out, counts["probed"], counts["handed"]


def _uniform_and_dense(num_queries):
  """2^16 database codes of 64 bits and ``num_queries`` queries drawn alike: uniformly random, and dense clusters
  (256 centres, 2% of the bits flipped)."""
  rng = np.random.default_rng(0)
  n, num_bits = 1 << 16, 64
  uniform = np.asarray(codes.pack_bits(rng.integers(0, 2, (n + num_queries, num_bits))))
  centres = rng.integers(0, 2, (256, num_bits))
  draw = rng.integers(0, 256, n + num_queries)
  dense = np.asarray(codes.pack_bits(centres[draw] ^ (rng.random((n + num_queries, num_bits)) < 0.02)))
  return {"uniform": (uniform[:n], uniform[n:]), "dense": (dense[:n], dense[n:])}


def test_auto_scans_a_small_database_outright(monkeypatch):
  # Below SCAN_BELOW_WORDS words every query goes to the scan unprobed; from it on, dense clusters are probed.
  x, q = _uniform_and_dense(40)["dense"]
  idx = index.build_multi_index(x, num_bits=64)
  want_d, want_i = _ref_knn(q, x, 10)
  for floor, scanned in ((x.size + 1, True), (x.size, False)):
    monkeypatch.setattr(multi, "SCAN_BELOW_WORDS", floor)
    (got_d, got_i), probed, handed = _probed_and_handed(monkeypatch, lambda: index.multi_index_knn(idx, q, 10))
    np.testing.assert_array_equal(np.asarray(got_d), want_d)
    np.testing.assert_array_equal(np.asarray(got_i), want_i)
    # Probed, a query handed over may be probed again (a scan of a few queries costs as much as one of 32).
    assert (probed, handed) == (0, 40) if scanned else (probed >= 40 and handed == 0), (floor, probed, handed)


def test_a_pilot_handed_over_sends_the_rest_unprobed(monkeypatch):
  # 200 queries: the first PILOT_QUERIES (64) are probed first. Uniform codes: every pilot query goes to the scan,
  # so the other 136 go unprobed; dense clusters: the pilot is answered by probing, so the rest is probed too (a
  # few k-NN queries handed over at first are probed again: a scan of so few costs as much as one of 32). k-NN,
  # and radius search within 14 bits (uniform: far past what probing can afford) and 3 bits (dense). All exact.
  assert multi.PILOT_QUERIES == 64
  for name, radius in (("uniform", 14), ("dense", 3)):
    x, q = _uniform_and_dense(200)[name]
    idx = index.build_multi_index(x, num_bits=64)
    monkeypatch.setattr(multi, "SCAN_BELOW_WORDS", 0)
    (got_d, got_i), probed, handed = _probed_and_handed(monkeypatch, lambda: index.multi_index_knn(idx, q, 10))
    want_d, want_i = _ref_knn(q, x, 10)
    np.testing.assert_array_equal(np.asarray(got_d), want_d, err_msg=name)
    np.testing.assert_array_equal(np.asarray(got_i), want_i, err_msg=name)
    assert (probed, handed) == (64, 200) if name == "uniform" else (probed >= 200 and handed == 0), (name, probed)
    monkeypatch.setattr(multi, "SCAN_BELOW_WORDS", 0)
    got, probed, handed = _probed_and_handed(monkeypatch, lambda: index.multi_index_radius(idx, q, radius))
    _assert_ragged_equal(got, _ref_radius(q, x, radius))
    # Dense: a query whose buckets hold more than a scan's worth goes to the scan, but not 7/8 of the pilot.
    assert (probed, handed) == (64, 200) if name == "uniform" else probed >= 200, (name, probed, handed)


def test_radius_queries_handed_over_then_probed_again(monkeypatch):
  # A few radius queries over a small budget go first to the scan, then, being fewer than SCAN_MIN_QUERIES with
  # little modelled work, are probed again with a larger share; their answers merge by row with the others'. Exact.
  rng = np.random.default_rng(9)
  x, q = _data(rng, 64, 2000, 40, 2000)
  idx = index.build_multi_index(x, num_bits=64, num_tables=2)
  radii = np.zeros(q.shape[0], np.int64)
  radii[rng.choice(q.shape[0], 4, replace=False)] = 3  # 2 x 33 probes, 8 candidates each: past a budget of 200
  monkeypatch.setattr(multi, "SCAN_BELOW_WORDS", 0)
  monkeypatch.setattr(multi, "SCAN_WORDS_PER_CANDIDATE", 30)  # a budget of 2000 * 3 // 30 = 200 candidates
  got, probed, handed = _probed_and_handed(monkeypatch, lambda: index.multi_index_radius(idx, q, radii))
  _assert_ragged_equal(got, _ref_radius(q, x, radii))
  assert (probed, handed) == (q.shape[0] + 4, 0), (probed, handed)


@pytest.mark.parametrize("rounds", [1, 2])
def test_queries_still_handed_over_are_probed_once_more(monkeypatch, rounds):
  # 16 radius queries at r = 2 (34 probes, about 272 of work) and 2 at r = 3 (66 probes, about 528) go first to the
  # scan (a budget of 200). Probed again with a share of 32 * 200 / 18 = 355 each, the r = 2 ones are answered and
  # the r = 3 ones handed over again; a second round gives those two 3,200 each and answers them. Exact either way.
  rng = np.random.default_rng(9)
  x, q = _data(rng, 64, 2000, 40, 2000)
  idx = index.build_multi_index(x, num_bits=64, num_tables=2)
  radii = np.zeros(q.shape[0], np.int64)
  chosen = rng.choice(q.shape[0], 18, replace=False)
  radii[chosen[:16]], radii[chosen[16:]] = 2, 3
  monkeypatch.setattr(multi, "SCAN_BELOW_WORDS", 0)
  monkeypatch.setattr(multi, "SCAN_WORDS_PER_CANDIDATE", 30)  # a budget of 2000 * 3 // 30 = 200
  monkeypatch.setattr(multi, "PROBE_AGAIN_ROUNDS", rounds)
  got, probed, handed = _probed_and_handed(monkeypatch, lambda: index.multi_index_radius(idx, q, radii))
  _assert_ragged_equal(got, _ref_radius(q, x, radii))
  want = (q.shape[0] + 18, 2) if rounds == 1 else (q.shape[0] + 18 + 2, 0)
  assert (probed, handed) == want, (probed, handed)


def test_more_queries_than_a_kernel_call():
  rng = np.random.default_rng(8)
  x, q = _data(rng, 40, 500, 600, 50)
  idx = index.build_multi_index(x, num_bits=40)
  want_d, want_i = _ref_knn(q, x, 3)
  got_d, got_i = index.multi_index_knn(idx, q, 3, method="probe")
  np.testing.assert_array_equal(np.asarray(got_d), want_d)
  np.testing.assert_array_equal(np.asarray(got_i), want_i)


def test_tables_hold_the_substrings():
  rng = np.random.default_rng(2)
  for num_bits, m, n in ((70, 3, 400), (64, 2, 300), (40, 5, 300)):
    bits = rng.integers(0, 2, (n, num_bits))
    bits[n // 2:] = bits[:n - n // 2]  # duplicates
    idx = index.build_multi_index(np.asarray(codes.pack_bits(bits)), num_bits=num_bits, num_tables=m)
    sizes = np.diff(idx.bounds)
    assert sizes.sum() == num_bits and sizes.max() - sizes.min() <= 1 and np.all(np.diff(sizes) <= 0)
    for j in range(m):
      lo, hi = idx.bounds[j], idx.bounds[j + 1]
      values = bits[:, lo:hi] @ (1 << np.arange(hi - lo, dtype=np.int64))
      buckets = {}
      for i, v in enumerate(values.tolist()):
        buckets.setdefault(v, []).append(i)
      offsets, keys = idx.offsets[j], idx.keys[j]
      rows = keys.tolist() if keys.size else range(offsets.shape[0] - 1)
      held = {v: idx.items[j, offsets[u]:offsets[u + 1]].tolist() for u, v in enumerate(rows)}
      assert {v: b for v, b in held.items() if b} == buckets


def test_default_num_tables_and_memory():
  # Norouzi's round(b / log2 N), raised to ceil(b / s) for substrings of at most s = max(16, floor(log2 2N)) bits
  # (dense tables): 10^6 -> s = 20 -> 4 (not round(3.2) = 3), 10^8 -> s = 27 -> 3 (not 2), 10^9 -> s = 30 -> 3.
  cases = {(10**7, 64): 3, (10**7, 128): 6, (10**7, 256): 11, (1000, 64): 6, (2, 64): 64, (10**9, 64): 3,
           (50, 300): 53, (10**6, 64): 4, (10**8, 64): 3, (2 * 10**5, 64): 4, (1, 64): 64,
           (10**10, 68): 3}  # log2 2N = 34, but substrings of at most 32 bits
  for (n, b), want in cases.items():
    assert index.default_num_tables(n, b) == want, (n, b)
    if want < b:  # the default's substrings all get dense tables
      idx_sizes = np.diff(index.build_multi_index(np.zeros((1, -(-b // 32)), np.uint32), num_bits=b,
                                                  num_tables=want).bounds)
      assert all((s <= 16 or 2**s <= 2 * n) and s <= 32 for s in idx_sizes.tolist())
  x = np.asarray(codes.pack_bits(np.random.default_rng(0).integers(0, 2, (5000, 64))))
  idx = index.build_multi_index(x, num_bits=64, num_tables=4)  # 16-bit dense tables
  assert idx.nbytes == 4 * 7 * 5000 + 4 * 4 * (2**16 + 1)  # 7-byte entries, int32 offsets


def test_bad_inputs():
  x = np.asarray(codes.pack_bits(np.random.default_rng(0).integers(0, 2, (50, 64))))
  idx = index.build_multi_index(x, num_bits=64)
  q = x[:3]
  cases = [
      ("num_bits", lambda: index.build_multi_index(x, num_bits=96)),  # 64-bit words, 96 bits claimed
      ("num_bits", lambda: index.build_multi_index(x, num_bits=0)),
      ("db_words", lambda: index.build_multi_index(x, num_bits=40)),  # bits above num_bits set
      ("db_words", lambda: index.build_multi_index(x.astype(np.int64), num_bits=64)),
      ("db_words", lambda: index.build_multi_index(x[:0], num_bits=64)),
      ("db_words", lambda: index.build_multi_index(x[0], num_bits=64)),
      ("num_tables", lambda: index.build_multi_index(x, num_bits=64, num_tables=1)),  # 64-bit substrings
      ("num_tables", lambda: index.build_multi_index(x, num_bits=64, num_tables=65)),
      ("num_tables", lambda: index.build_multi_index(x, num_bits=64, num_tables=2.0)),
      ("index", lambda: index.multi_index_knn((x, 64), q, 1)),
      ("query_words", lambda: index.multi_index_knn(idx, np.zeros((2, 3), np.uint32), 1)),  # another width
      ("query_words", lambda: index.multi_index_knn(idx, q.astype(np.int32), 1)),
      ("query_words", lambda: index.multi_index_knn(idx, q[:0], 1)),
      ("k", lambda: index.multi_index_knn(idx, q, 51)),  # larger than the database
      ("k", lambda: index.multi_index_knn(idx, q, 0)),
      ("method", lambda: index.multi_index_knn(idx, q, 1, method="scan")),
      ("query_words", lambda: index.multi_index_radius(idx, np.zeros((2, 1), np.uint32), 1)),
      ("r", lambda: index.multi_index_radius(idx, q, -1)),
      ("r", lambda: index.multi_index_radius(idx, q, 1.5)),
      ("r", lambda: index.multi_index_radius(idx, q, np.array([1, 2]))),
      ("r", lambda: index.multi_index_radius(idx, q, np.array([1, -2, 0]))),
      # an index put together by hand whose codes the compiled search would read as lanes wider than the queries'
      ("index.db_words", lambda: index.multi_index_knn(idx._replace(db_words=x.astype(np.uint64)), q, 1)),
      ("index.sorted_words", lambda: index.multi_index_radius(idx._replace(sorted_words=x[:, :1]), q, 1)),
  ]
  for name, fn in cases:
    with pytest.raises(ValueError, match=name):
      fn()
  with pytest.raises(ValueError, match="36 bits"):  # a query of 40 bits against an index of 36
    idx36 = index.build_multi_index(x[:, :2] & np.array([0xFFFFFFFF, 0xF], np.uint32), num_bits=36)
    index.multi_index_knn(idx36, np.array([[0, 0xFF]], np.uint32), 1)


def test_expected_candidates_enumerate_the_buckets_under_independent_bits():
  # The work method="auto" expects of a step: N times the probability that an item's substring differs from the
  # query's in exactly r bits, the bits independent with the database's frequencies of ones (a strided sample of
  # the codes, here every code). Checked against all 2^s substrings of each table, weighted one by one.
  rng = np.random.default_rng(3)
  num_bits, n = 13, 500
  x = np.asarray(codes.pack_bits((rng.random((n, num_bits)) < rng.uniform(0.1, 0.9, num_bits)).astype(np.uint8)))
  q = np.asarray(codes.pack_bits(rng.integers(0, 2, (4, num_bits))))
  idx = index.build_multi_index(x, num_bits=num_bits, num_tables=2)
  ones = multi._bit_ones(idx)  # pylint: disable=protected-access
  np.testing.assert_allclose(ones, np.asarray(codes.unpack_bits(x, num_bits)).mean(axis=0))
  got = multi._expected_candidates(idx, q, ones)  # pylint: disable=protected-access
  q_bits = np.asarray(codes.unpack_bits(q, num_bits))
  m, width = 2, 7  # substrings of 7 and 6 bits
  assert got.shape == (4, m * (width + 1))
  for a in range(4):
    for j in range(m):
      lo, hi = int(idx.bounds[j]), int(idx.bounds[j + 1])
      want = np.zeros(width + 1)
      for v in itertools.product((0, 1), repeat=hi - lo):
        p = np.prod([ones[lo + i] if bit else 1.0 - ones[lo + i] for i, bit in enumerate(v)])
        want[int(np.sum(np.array(v) != q_bits[a, lo:hi]))] += n * p
      np.testing.assert_allclose(got[a, j::m], want, rtol=1e-12, atol=1e-12)
