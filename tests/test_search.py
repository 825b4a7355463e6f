"""hashjax.search against brute-force numpy references (full scans, lexicographic sorts)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from brute_force import assert_ragged_equal as _assert_ragged_equal
from brute_force import ref_distances as _ref_distances
from brute_force import ref_radius as _ref_radius
from hashjax import codes, search
from hashjax._kernels import scan


def _codes(rng, n, num_bits, *, pool=None, p_one=0.5):
  """Packed random codes; ``pool`` draws them from a few distinct codes (many ties)."""
  if pool is not None:
    base = (rng.random((pool, num_bits)) < p_one).astype(np.uint8)
    bits = base[rng.integers(0, pool, n)]
  else:
    bits = (rng.random((n, num_bits)) < p_one).astype(np.uint8)
  return np.asarray(codes.pack_bits(bits))


def _ref_knn(q, x, k):
  d = _ref_distances(q, x)
  idx = np.arange(x.shape[0])
  order = np.stack([np.lexsort((idx, row))[:k] for row in d])
  return np.take_along_axis(d, order, 1), order


def test_reference_distance_matches_bit_loop():
  rng = np.random.default_rng(0)
  for num_bits in (1, 33, 128):
    qb = rng.integers(0, 2, (3, num_bits))
    xb = rng.integers(0, 2, (5, num_bits))
    loop = np.array([[sum(int(a != b) for a, b in zip(qr, xr)) for xr in xb] for qr in qb])
    got = _ref_distances(np.asarray(codes.pack_bits(qb)), np.asarray(codes.pack_bits(xb)))
    np.testing.assert_array_equal(got, loop)


# Each case names the selection it must exercise (checked with search._plan), so
# that every code path is compared with the reference.
_KNN_CASES = [
    # num_bits, N, Q, k, chunk_size, pool, plan
    (1, 20000, 37, 24, 2048, None, "hierarchical"),  # two distances only: huge ties
    (31, 20000, 37, 5, 2048, 40, "hierarchical"),
    (32, 20000, 37, 24, 2048, None, "hierarchical"),
    (33, 20000, 37, 1, 2048, 300, "hierarchical"),
    (64, 20000, 37, 24, 2048, 50, "hierarchical"),
    (128, 20000, 37, 5, 2048, None, "hierarchical"),
    (128, 20000, 37, 24, 2048, 30, "hierarchical"),
    (160, 20000, 37, 10, 2048, 60, "hierarchical"),  # two items per scan output, uint8 minima
    (32, 20000, 37, 79, 2048, 90, "hierarchical"),  # k = number of superblocks
    (32, 3000, 37, 100, 65536, 60, "all"),
    (128, 2999, 37, 2999, 65536, None, "all"),  # k = N: a full ranking
    (64, 20000, 37, 200, 2048, 200, "sorted"),
    (1, 5000, 1, 3, 256, None, "hierarchical"),  # one query; 20 chunks padded to 24
]


@pytest.mark.parametrize("num_bits,num_db,num_q,k,chunk_size,pool,plan", _KNN_CASES)
def test_knn_matches_brute_force(num_bits, num_db, num_q, k, chunk_size, pool, plan):
  rng = np.random.default_rng(num_bits * 1000 + k)
  x = _codes(rng, num_db, num_bits, pool=pool)
  q = np.concatenate([_codes(rng, num_q - num_q // 2, num_bits, pool=pool), x[:num_q // 2]])
  assert search._plan(num_db, x.shape[1], k, search._check_chunk_size(chunk_size)) == plan
  dist, ids = search.knn(q, x, k, chunk_size=chunk_size)
  assert dist.shape == ids.shape == (num_q, k)
  assert dist.dtype == np.int32 and ids.dtype == np.int32
  ref_d, ref_i = _ref_knn(q, x, k)
  np.testing.assert_array_equal(np.asarray(dist), ref_d)
  np.testing.assert_array_equal(np.asarray(ids), ref_i)


def test_knn_tie_rule_prefers_lower_index_within_the_kth_distance():
  # Items 0..9 all at distance 1, item 10 at distance 0: k = 4 keeps 10, 0, 1, 2.
  x = np.asarray(codes.pack_bits(np.array([[1, 0]] * 10 + [[0, 0]])))
  q = np.asarray(codes.pack_bits(np.array([[0, 0]])))
  dist, ids = search.knn(q, x, 4)
  assert np.asarray(dist).tolist() == [[0, 1, 1, 1]]
  assert np.asarray(ids).tolist() == [[10, 0, 1, 2]]


def test_knn_over_database_segments_matches_brute_force(monkeypatch):
  # Databases beyond the float32-exact size are searched in segments and merged;
  # shrink the segment size to exercise that merge, incl. a short last segment.
  monkeypatch.setattr(search, "_segment_size", lambda num_words, chunk_size: 3000)
  rng = np.random.default_rng(7)
  x = _codes(rng, 9010, 64, pool=80)
  q = _codes(rng, 9, 64, pool=80)
  for k in (5, 20, 4000):  # 4000: more than a segment holds
    dist, ids = search.knn(q, x, k, chunk_size=1024)
    ref_d, ref_i = _ref_knn(q, x, k)
    np.testing.assert_array_equal(np.asarray(dist), ref_d)
    np.testing.assert_array_equal(np.asarray(ids), ref_i)


def test_knn_over_several_query_batches_matches_brute_force(monkeypatch):
  # A small budget for the last selection's words forces batches of 8 queries.
  monkeypatch.setattr(search, "_STAGE_ELEMS", 8 * 24 * 32 * 2)
  rng = np.random.default_rng(13)
  x = _codes(rng, 20000, 64, pool=60)
  q = _codes(rng, 37, 64, pool=60)
  dist, ids = search.knn(q, x, 24, chunk_size=2048)
  ref_d, ref_i = _ref_knn(q, x, 24)
  np.testing.assert_array_equal(np.asarray(dist), ref_d)
  np.testing.assert_array_equal(np.asarray(ids), ref_i)
  res = search.knn_with_ties(q, x, 24, chunk_size=2048)
  _assert_ragged_equal(res, _ref_radius(q, x, ref_d[:, -1]))


@pytest.mark.parametrize("num_db", [2047, 2048, 2049, 6145])
def test_knn_and_radius_search_at_chunk_boundaries(num_db):
  # Databases one item short of, at, and one past a chunk boundary (chunks of 2048 items), and a
  # last chunk holding a few items: the padding never shows in the results.
  rng = np.random.default_rng(num_db)
  x = _codes(rng, num_db, 64, pool=40)
  q = np.concatenate([_codes(rng, 20, 64, pool=40), x[-3:]])
  assert search._plan(num_db, 2, 7, 2048) == "hierarchical"
  dist, ids = search.knn(q, x, 7, chunk_size=2048)
  ref_d, ref_i = _ref_knn(q, x, 7)
  np.testing.assert_array_equal(np.asarray(dist), ref_d)
  np.testing.assert_array_equal(np.asarray(ids), ref_i)
  _assert_ragged_equal(search.radius_search(q, x, 3, chunk_size=2048), _ref_radius(q, x, 3))


@pytest.mark.parametrize("num_q", [1, 33, 65, 300])
def test_knn_and_radius_search_over_query_batch_sizes(num_q):
  # Queries go in batches of 32 to 256; the last batch is padded.
  rng = np.random.default_rng(num_q)
  x = _codes(rng, 6000, 96, pool=50)
  q = _codes(rng, num_q, 96, pool=50)
  dist, ids = search.knn(q, x, 13, chunk_size=2304)
  ref_d, ref_i = _ref_knn(q, x, 13)
  np.testing.assert_array_equal(np.asarray(dist), ref_d)
  np.testing.assert_array_equal(np.asarray(ids), ref_i)
  _assert_ragged_equal(search.radius_search(q, x, 4, chunk_size=2304), _ref_radius(q, x, 4))


def test_knn_of_jax_arrays_matches_numpy_inputs():
  rng = np.random.default_rng(21)
  x = _codes(rng, 5000, 64, pool=30)
  q = _codes(rng, 9, 64, pool=30)
  for k, plan in ((3, "hierarchical"), (20, "hierarchical"), (25, "all")):  # 20 superblocks
    assert search._plan(5000, 2, k, 1024) == plan
    got = search.knn(jnp.asarray(q), jnp.asarray(x), k, chunk_size=1024)
    ref_d, ref_i = _ref_knn(q, x, k)
    np.testing.assert_array_equal(np.asarray(got[0]), ref_d)
    np.testing.assert_array_equal(np.asarray(got[1]), ref_i)


def test_knn_wide_codes_use_uint16_minima():
  # 288 bits: distances above 255 need the uint16 kernel.
  rng = np.random.default_rng(3)
  x = _codes(rng, 6000, 288, pool=70)
  q = np.concatenate([_codes(rng, 3, 288), ~x[:2]])  # ~x: distance 288 to x
  assert search._plan(6000, 9, 4, 1024) == "hierarchical"
  dist, ids = search.knn(q, x, 4, chunk_size=1024)
  ref_d, ref_i = _ref_knn(q, x, 4)
  np.testing.assert_array_equal(np.asarray(dist), ref_d)
  np.testing.assert_array_equal(np.asarray(ids), ref_i)


@pytest.mark.parametrize("num_db,k,plan", [(2000, 6, "hierarchical"), (3000, 30, "all"),
                                           (20000, 100, "sorted")])
def test_knn_under_jit_matches_brute_force(num_db, k, plan):
  rng = np.random.default_rng(11)
  x = _codes(rng, num_db, 32, pool=50)
  q = _codes(rng, 5, 32, pool=50)
  assert search._plan(num_db, 1, k, 1024) == plan
  jitted = jax.jit(lambda a, b: search.knn(a, b, k, chunk_size=1024))
  dist, ids = jitted(q, x)
  ref_d, ref_i = _ref_knn(q, x, k)
  np.testing.assert_array_equal(np.asarray(dist), ref_d)
  np.testing.assert_array_equal(np.asarray(ids), ref_i)


# The ties come from radius_search with each query's k-th distance as its radius, whichever plan.
@pytest.mark.parametrize("num_bits,k,num_db,plan", [
    (32, 24, 20000, "hierarchical"), (128, 5, 20000, "hierarchical"), (1, 3, 20000, "hierarchical"),
    (64, 100, 3000, "all")])
def test_knn_with_ties_gives_whole_tie_groups(num_bits, k, num_db, plan):
  rng = np.random.default_rng(num_bits + k)
  x = _codes(rng, num_db, num_bits, pool=None if num_bits == 1 else 25)
  q = _codes(rng, 37, num_bits, pool=25)
  assert search._plan(num_db, x.shape[1], k, 2048) == plan
  res = search.knn_with_ties(q, x, k, chunk_size=2048)
  assert isinstance(res, search.RaggedNeighbors)
  ref_d, _ = _ref_knn(q, x, k)
  _assert_ragged_equal(res, _ref_radius(q, x, ref_d[:, -1]))
  # Each row starts with knn's k items.
  dist, ids = search.knn(q, x, k, chunk_size=2048)
  offsets = np.asarray(res.offsets)
  for j in range(q.shape[0]):
    np.testing.assert_array_equal(np.asarray(res.indices)[offsets[j]:offsets[j] + k], np.asarray(ids)[j])


@pytest.mark.parametrize("num_bits", [1, 31, 32, 33, 64, 128, 160])
@pytest.mark.parametrize("r", [0, 2, 6])
def test_radius_search_matches_brute_force(num_bits, r):
  rng = np.random.default_rng(num_bits + 100 * r)
  x = _codes(rng, 20000, num_bits, pool=400)
  q = np.concatenate([_codes(rng, 20, num_bits, pool=400), _codes(rng, 17, num_bits)])
  res = search.radius_search(q, x, r, chunk_size=2048)
  _assert_ragged_equal(res, _ref_radius(q, x, r))


def test_radius_search_per_query_radii_and_whole_database():
  rng = np.random.default_rng(5)
  x = _codes(rng, 3001, 64, pool=30)
  q = _codes(rng, 6, 64, pool=30)
  radii = np.array([0, 1, 3, 5, 64, 100])  # 64 and beyond: every item
  res = search.radius_search(q, x, radii, chunk_size=1024)
  _assert_ragged_equal(res, _ref_radius(q, x, radii))
  assert np.asarray(res.counts)[-2:].tolist() == [3001, 3001]


def test_radius_search_of_codes_sharing_their_first_word():
  # The first 32 bits are identical everywhere: only the later words separate the codes.
  rng = np.random.default_rng(9)
  bits = (rng.random((6000, 128)) < 0.02).astype(np.uint8)
  bits[:, :32] = 1
  x = np.asarray(codes.pack_bits(bits))
  q = x[rng.integers(0, 6000, 33)]
  for r in (1, 4):
    _assert_ragged_equal(search.radius_search(q, x, r, chunk_size=1024), _ref_radius(q, x, r))


def test_radius_search_with_no_results_and_jax_inputs():
  x = codes.pack_bits(np.zeros((300, 40), np.uint8))
  q = codes.pack_bits(np.ones((2, 40), np.uint8))
  res = search.radius_search(q, x, 39)
  assert np.asarray(res.offsets).tolist() == [0, 0, 0]
  assert res.distances.shape == res.indices.shape == (0,)


def test_host_popcount_fallback_matches(monkeypatch):
  rng = np.random.default_rng(2)
  words = rng.integers(0, 2**32, (4, 5, 3), dtype=np.uint32)
  expected = _ref_distances(np.zeros((1, 3), np.uint32), words.reshape(-1, 3))[0]
  monkeypatch.delattr(np, "bitwise_count", raising=False)
  got = scan.host_popcount(words).sum(-1).reshape(-1)
  np.testing.assert_array_equal(got, expected)


# Bad input: each raises ValueError naming the argument.

_Q = np.zeros((2, 1), np.uint32)
_X = np.zeros((5, 1), np.uint32)


@pytest.mark.parametrize("query_words,db_words,match", [
    (_Q.astype(np.int32), _X, "query_words"),
    (_Q, _X.astype(np.uint8), "db_words"),
    (_Q, np.zeros((5, 2), np.uint32), "db_words"),
    (np.zeros((0, 1), np.uint32), _X, "query_words"),
    (_Q, np.zeros((0, 1), np.uint32), "db_words"),
    (_Q[0], _X, "query_words"),
    ([[0]], _X, "query_words"),
])
def test_bad_codes_raise(query_words, db_words, match):
  with pytest.raises(ValueError, match=match):
    search.knn(query_words, db_words, 1)
  with pytest.raises(ValueError, match=match):
    search.radius_search(query_words, db_words, 1)


@pytest.mark.parametrize("k", [0, -1, 6, 2.0, True, None])
def test_bad_k_raises(k):
  with pytest.raises(ValueError, match="k"):
    search.knn(_Q, _X, k)


@pytest.mark.parametrize("r", [-1, 1.5, True, np.array([1.0, 2.0]), np.array([1, -2]),
                               np.array([1, 2, 3]), "2"])
def test_bad_radius_raises(r):
  with pytest.raises(ValueError, match="r"):
    search.radius_search(_Q, _X, r)


@pytest.mark.parametrize("chunk_size", [0, -5, 1.5, True])
def test_bad_chunk_size_raises(chunk_size):
  with pytest.raises(ValueError, match="chunk_size"):
    search.knn(_Q, _X, 1, chunk_size=chunk_size)
  with pytest.raises(ValueError, match="chunk_size"):
    search.radius_search(_Q, _X, 1, chunk_size=chunk_size)


def test_tracing_raises_where_results_vary_in_length():
  with pytest.raises(ValueError, match="query_words"):
    jax.jit(lambda a, b: search.knn_with_ties(a, b, 1).offsets)(_Q, _X)
  with pytest.raises(ValueError, match="db_words"):
    jax.jit(lambda a, b: search.radius_search(a, b, 1).offsets)(_Q, _X)


# -- weighted search -----------------------------------------------------------
# References: float64 sums of the weights of the differing bits (unpacked with numpy), and the documented
# float32 order written again in numpy (each byte's table entry the pairwise sum of its 8 bit terms, then the
# pairwise sum of the entries over the bytes), which must match bit for bit.


def _unpack(words, num_bits):
  return np.unpackbits(np.ascontiguousarray(words).view(np.uint8), axis=-1, bitorder="little")[..., :num_bits]


def _ref_weighted64(q, x, w):
  num_bits = w.shape[0]
  return (_unpack(q, num_bits)[:, None, :] != _unpack(x, num_bits)[None]).astype(np.float64) @ w.astype(np.float64)


def _pairwise32(terms):
  terms = list(terms)
  while len(terms) > 1:
    terms = [np.float32(terms[i] + terms[i + 1]) if i + 1 < len(terms) else terms[i]
             for i in range(0, len(terms), 2)]
  return terms[0]


def _ref_weighted32(q, x, w):
  num_words = q.shape[1]
  w = np.where(np.abs(w) < np.finfo(np.float32).tiny, 0, w).astype(np.float32)
  w = np.pad(w, (0, 32 * num_words - w.shape[0]))
  v = np.arange(256)
  tables = [_pairwise32([np.where((v >> b) & 1, w[8 * p + b], np.float32(0)).astype(np.float32) for b in range(8)])
            for p in range(4 * num_words)]
  xor = (q[:, None, :] ^ x[None]).astype("<u4").view(np.uint8)  # [Q, N, 4 W], byte p = bits 8p .. 8p+7
  return _pairwise32([tables[p][xor[..., p]] for p in range(4 * num_words)])


def _ref_wknn(q, x, w, k):
  d = _ref_weighted32(q, x, w)
  order = np.stack([np.lexsort((np.arange(x.shape[0]), row))[:k] for row in d])
  return np.take_along_axis(d, order, 1), order


def _weights(rng, num_bits, kind):
  if kind == "uniform":
    return rng.random(num_bits).astype(np.float32)
  if kind == "integer":  # many exact ties between different codes
    return rng.integers(0, 4, num_bits).astype(np.float32)
  return np.where(rng.random(num_bits) < 0.4, 0, rng.exponential(size=num_bits)).astype(np.float32)  # "zeros"


def test_weighted_reference_is_the_float64_sum_within_float32_rounding():
  rng = np.random.default_rng(0)
  for num_bits in (5, 64, 100):
    x = _codes(rng, 50, num_bits)
    q = _codes(rng, 4, num_bits)
    w = _weights(rng, num_bits, "uniform")
    d64 = _ref_weighted64(q, x, w)
    assert np.all(np.abs(_ref_weighted32(q, x, w) - d64) <= 2 * num_bits * 2.0**-24 * d64)


# num_bits, N, Q, k, chunk_size, pool, weights, prune (None: exact scan; else the bound scan's threshold)
_WKNN_CASES = [
    (64, 20000, 37, 24, 2048, None, "uniform", None),  # exact, three selections
    (64, 20000, 37, 24, 2048, 50, "integer", None),  # ties: repeated codes and equal sums
    (33, 3000, 37, 100, 65536, 60, "uniform", None),  # exact, one top_k over every item
    (31, 3001, 5, 3001, 65536, None, "zeros", None),  # k = N: a full ranking
    (64, 20000, 9, 200, 2048, 200, "integer", None),  # exact, running merge (k > superblocks)
    (64, 20000, 37, 24, 2048, None, "uniform", 1000),  # pruned
    (64, 20000, 37, 24, 2048, 50, "integer", 1000),
    (16, 6000, 20, 10, 2048, None, "integer", 1000),  # 2 bytes, massive ties
    (70, 6000, 20, 5, 2048, 300, "zeros", 1000),  # padding bits, zero weights
]


@pytest.mark.parametrize("num_bits,num_db,num_q,k,chunk_size,pool,kind,prune", _WKNN_CASES)
def test_weighted_knn_matches_brute_force(monkeypatch, num_bits, num_db, num_q, k, chunk_size, pool, kind, prune):
  monkeypatch.setattr(search, "PRUNE_MIN_ITEMS", prune or 1 << 40)
  rng = np.random.default_rng(num_bits * 1000 + k)
  x = _codes(rng, num_db, num_bits, pool=pool)
  q = np.concatenate([_codes(rng, num_q - num_q // 2, num_bits, pool=pool), x[:num_q // 2]])
  w = _weights(rng, num_bits, kind)
  dist, ids = search.knn(q, x, k, weights=w, chunk_size=chunk_size)
  assert dist.shape == ids.shape == (num_q, k) and dist.dtype == np.float32 and ids.dtype == np.int32
  ref_d, ref_i = _ref_wknn(q, x, w, k)
  np.testing.assert_array_equal(np.asarray(ids), ref_i)
  np.testing.assert_array_equal(np.asarray(dist), ref_d)
  d64 = np.take_along_axis(_ref_weighted64(q, x, w), ref_i, 1)
  assert np.all(np.abs(np.asarray(dist) - d64) <= 2 * num_bits * 2.0**-24 * d64)


def test_weighted_knn_tie_rule_on_a_hand_computed_example():
  # Weights 1, 1, 2: items 0 and 1 differ from the query by one unit-weight bit each, item 2 by the weight-2
  # bit alone, item 3 by both unit bits: distances 1, 1, 2, 2, and item 4 equals the query.
  x = np.asarray(codes.pack_bits(np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0], [0, 0, 0]])))
  q = np.asarray(codes.pack_bits(np.array([[0, 0, 0]])))
  dist, ids = search.knn(q, x, 4, weights=np.array([1, 1, 2], np.float32))
  assert np.asarray(dist).tolist() == [[0.0, 1.0, 1.0, 2.0]] and np.asarray(ids).tolist() == [[4, 0, 1, 2]]


def test_weighted_knn_does_not_depend_on_the_blocking(monkeypatch):
  # Every path and chunk size gives the same bits: the exact scan at several chunk sizes and the pruned scan.
  rng = np.random.default_rng(17)
  x = _codes(rng, 6000, 64, pool=400)
  q = np.concatenate([_codes(rng, 20, 64), x[:5]])
  w = _weights(rng, 64, "uniform")
  results = []
  for prune, chunk_size in ((None, 256), (None, 65536), (1000, 512)):
    monkeypatch.setattr(search, "PRUNE_MIN_ITEMS", prune or 1 << 40)
    results.append(tuple(np.asarray(a) for a in search.knn(q, x, 30, weights=w, chunk_size=chunk_size)))
  for d, i in results[1:]:
    np.testing.assert_array_equal(d, results[0][0])
    np.testing.assert_array_equal(i, results[0][1])
  ref_d, ref_i = _ref_wknn(q, x, w, 30)
  np.testing.assert_array_equal(results[0][1], ref_i)
  np.testing.assert_array_equal(results[0][0], ref_d)


def test_weighted_knn_under_jit_and_with_traced_weights():
  rng = np.random.default_rng(23)
  x = _codes(rng, 3000, 40, pool=30)
  q = _codes(rng, 6, 40, pool=30)
  w = _weights(rng, 40, "integer")
  jitted = jax.jit(lambda a, b, c: search.knn(a, b, 12, weights=c, chunk_size=1024))
  dist, ids = jitted(q, x, w)
  ref_d, ref_i = _ref_wknn(q, x, w, 12)
  np.testing.assert_array_equal(np.asarray(ids), ref_i)
  np.testing.assert_array_equal(np.asarray(dist), ref_d)


def test_weighted_distances_equal_weighted_hamming_distance_bit_for_bit(monkeypatch):
  rng = np.random.default_rng(29)
  x = _codes(rng, 5000, 64)
  q = _codes(rng, 7, 64)
  w = _weights(rng, 64, "uniform")
  whd = np.asarray(codes.weighted_hamming_distance(q, x, w))
  for prune in (None, 1000):
    monkeypatch.setattr(search, "PRUNE_MIN_ITEMS", prune or 1 << 40)
    dist, ids = search.knn(q, x, 50, weights=w)
    np.testing.assert_array_equal(np.asarray(dist), np.take_along_axis(whd, np.asarray(ids), 1))


def _ref_wradius(q, x, w, r):
  d = _ref_weighted32(q, x, w)
  r = np.broadcast_to(np.asarray(r, np.float64), (q.shape[0],))
  rows = []
  for j in range(q.shape[0]):
    hit = np.nonzero(d[j] <= r[j])[0]
    hit = hit[np.lexsort((hit, d[j, hit]))]
    rows.append((d[j, hit], hit))
  return rows


def _assert_weighted_ragged_equal(res, rows):
  offsets = np.asarray(res.offsets)
  assert res.distances.dtype == np.float32 and res.indices.dtype == np.int32 and res.offsets.dtype == np.int32
  assert offsets.shape == (len(rows) + 1,) and offsets[0] == 0 and offsets[-1] == res.indices.shape[0]
  for j, (ref_d, ref_i) in enumerate(rows):
    np.testing.assert_array_equal(np.asarray(res.distances)[offsets[j]:offsets[j + 1]], ref_d, err_msg=f"query {j}")
    np.testing.assert_array_equal(np.asarray(res.indices)[offsets[j]:offsets[j + 1]], ref_i, err_msg=f"query {j}")


def test_weighted_radius_search_and_knn_with_ties_match_brute_force():
  rng = np.random.default_rng(31)
  x = _codes(rng, 6000, 64, pool=300)
  q = np.concatenate([_codes(rng, 10, 64, pool=300), _codes(rng, 3, 64)])
  w = _weights(rng, 64, "integer")
  for r in (0.0, 3, 9.5):
    _assert_weighted_ragged_equal(search.radius_search(q, x, r, weights=w, chunk_size=2048),
                                  _ref_wradius(q, x, w, r))
  radii = rng.uniform(0, 40, q.shape[0]).round(1)
  radii[-1] = 1e6  # every item
  _assert_weighted_ragged_equal(search.radius_search(q, x, radii, weights=w), _ref_wradius(q, x, w, radii))
  w = _weights(rng, 64, "uniform")
  res = search.knn_with_ties(q, x, 20, weights=w)
  _assert_weighted_ragged_equal(res, _ref_wradius(q, x, w, _ref_wknn(q, x, w, 20)[0][:, -1]))


def _ref_tie_break(q, x, w, k):
  ham = _ref_distances(q, x)
  d = _ref_weighted32(q, x, w)
  order = np.stack([np.lexsort((np.arange(x.shape[0]), d[j], ham[j]))[:k] for j in range(q.shape[0])])
  return np.take_along_axis(ham, order, 1), np.take_along_axis(d, order, 1), order


@pytest.mark.parametrize("num_bits,pool,k", [(16, None, 40), (64, 60, 7)])
def test_tie_break_matches_brute_force(num_bits, pool, k):
  rng = np.random.default_rng(num_bits + k)
  x = _codes(rng, 3000, num_bits, pool=pool)
  q = np.concatenate([_codes(rng, 8, num_bits, pool=pool), x[:3]])
  w = _weights(rng, num_bits, "uniform")
  res = search.knn_tie_break(q, x, k, weights=w, chunk_size=1024)
  assert isinstance(res, search.TieBreakNeighbors)
  assert res.hamming.dtype == np.int32 and res.weighted.dtype == np.float32 and res.indices.dtype == np.int32
  for got, want in zip(res, _ref_tie_break(q, x, w, k)):
    np.testing.assert_array_equal(np.asarray(got), want)


def test_tie_break_under_jit():
  rng = np.random.default_rng(37)
  x = _codes(rng, 3000, 16)
  q = _codes(rng, 5, 16)
  w = _weights(rng, 16, "integer")
  res = jax.jit(lambda a, b, c: search.knn_tie_break(a, b, 25, weights=c))(q, x, w)
  for got, want in zip(res, _ref_tie_break(q, x, w, 25)):
    np.testing.assert_array_equal(np.asarray(got), want)


def test_rerank_of_a_hamming_shortlist_matches_brute_force():
  rng = np.random.default_rng(41)
  x = _codes(rng, 8000, 64, pool=500)
  q = _codes(rng, 9, 64, pool=500)
  w = _weights(rng, 64, "integer")
  _, shortlist = search.knn(q, x, 60)
  shortlist = np.asarray(shortlist)[:, ::-1]  # any order
  dist, ids = search.rerank(q, x, shortlist, 15, weights=w)
  d = _ref_weighted32(q, x, w)
  for j in range(q.shape[0]):
    cand = shortlist[j]
    want = cand[np.lexsort((cand, d[j, cand]))][:15]
    np.testing.assert_array_equal(np.asarray(ids)[j], want)
    np.testing.assert_array_equal(np.asarray(dist)[j], d[j, want])
  got = jax.jit(lambda a, b, c: search.rerank(a, b, c, 15, weights=w))(q, x, shortlist)
  np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(ids))


_W3 = np.ones(3, np.float32)


@pytest.mark.parametrize("call,match", [
    (lambda: search.knn(_Q, _X, 1, weights=np.array([1.0, -0.5, 1.0])), "weights"),
    (lambda: search.knn(_Q, _X, 1, weights=np.array([1.0, np.nan, 1.0])), "weights"),
    (lambda: search.knn(_Q, _X, 1, weights=np.array([1.0, np.inf, 1.0])), "weights"),
    (lambda: search.knn(_Q, _X, 1, weights=np.ones(33)), "weights"),  # 33 bits need 2 words
    (lambda: search.knn(_Q, _X, 1, weights=np.ones((1, 3))), "weights"),
    (lambda: search.knn(_Q, _X, 1, weights=np.ones(0)), "weights"),
    (lambda: search.knn(_Q, _X, 1, weights=np.ones(3, bool)), "weights"),
    (lambda: search.knn(_Q, _X, 1, weights=[1.0, 1.0, 1.0]), "weights"),
    (lambda: search.knn(_Q, _X, 1, weights=np.full(3, 3e38, np.float32)), "weights"),
    (lambda: search.knn(_Q + 8, _X, 1, weights=_W3), "query_words"),  # bit 3 set in 3-bit codes
    (lambda: search.knn(_Q, _X + 8, 1, weights=_W3), "db_words"),
    (lambda: search.knn(_Q, np.zeros((5, 2), np.uint32), 1, weights=_W3), "db_words"),
    (lambda: search.knn(_Q, _X, 6, weights=_W3), "k"),
    (lambda: search.knn_tie_break(_Q, _X, 1, weights=None), "weights"),
    (lambda: search.knn_tie_break(_Q, _X, 6, weights=_W3), "k"),
    (lambda: search.knn_with_ties(_Q, _X, 1, weights=-_W3), "weights"),
    (lambda: search.radius_search(_Q, _X, -0.5, weights=_W3), "r"),
    (lambda: search.radius_search(_Q, _X, np.array([1.0, np.nan]), weights=_W3), "r"),
    (lambda: search.radius_search(_Q, _X, np.array([1.0, 2.0, 3.0]), weights=_W3), "r"),
    (lambda: search.radius_search(_Q, _X, 1.0, weights=np.ones(40)), "weights"),
    (lambda: search.rerank(_Q, _X, np.array([[0, 1], [2, 3]]), 1, weights=np.ones(40)), "weights"),
    (lambda: search.rerank(_Q, _X, np.array([[0, 1], [2, 5]]), 1, weights=_W3), "candidates"),
    (lambda: search.rerank(_Q, _X, np.array([[0, 0], [2, 3]]), 1, weights=_W3), "candidates"),
    (lambda: search.rerank(_Q, _X, np.array([[0, 1]]), 1, weights=_W3), "candidates"),
    (lambda: search.rerank(_Q, _X, np.array([[0.0, 1.0], [2.0, 3.0]]), 1, weights=_W3), "candidates"),
    (lambda: search.rerank(_Q, _X, np.array([[0, 1], [2, 3]]), 3, weights=_W3), "k"),
])
def test_bad_weighted_input_names_the_argument(call, match):
  with pytest.raises(ValueError, match=match):
    call()


def test_rerank_needs_weights():
  words = codes.pack_bits(np.eye(4, dtype=np.uint8))
  with pytest.raises(ValueError, match="weights"):
    search.rerank(words, words, np.zeros((4, 2), np.int32), 1, weights=None)
