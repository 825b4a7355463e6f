"""hashjax.histograms and the bit-sliced kernel against brute-force references (loops and np.bincount)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hashjax
from hashjax import codes
from hashjax import histograms
from hashjax._kernels import bitsliced


def _loop_histogram(distances, levels, where, num_bits, num_levels):
  """Counts by a loop over the items of each row."""
  out = np.zeros(distances.shape[:-1] + (num_bits + 1, num_levels), np.int64)
  for idx in np.ndindex(distances.shape[:-1]):
    for j in range(distances.shape[-1]):
      if where is None or where[idx][j]:
        out[idx][distances[idx][j], 0 if levels is None else levels[idx][j]] += 1
  return out


def _bincount_histogram(distances, levels, num_bits, num_levels):
  """``[Q, num_bits + 1, V]`` counts by one np.bincount per row."""
  levels = np.zeros_like(distances) if levels is None else levels
  return np.stack([np.bincount(d * num_levels + a, minlength=(num_bits + 1) * num_levels)
                   for d, a in zip(distances, levels)]).reshape(len(distances), num_bits + 1, num_levels)


def _pair_distances(q, x):
  """``int[Q, N]`` Hamming distances of bit arrays, by XOR and popcount of numpy words."""
  qw, xw = np.asarray(codes.pack_bits(q)), np.asarray(codes.pack_bits(x))
  return np.bitwise_count(qw[:, None, :] ^ xw[None, :, :]).sum(-1).astype(np.int64)


def _codes(rng, num_q, num_db, num_bits):
  """Random codes with distance 0, num_bits and all-zero codes present."""
  q = rng.integers(0, 2, size=(num_q, num_bits))
  x = rng.integers(0, 2, size=(num_db, num_bits))
  x[:min(2, num_db)] = q[0]
  if num_db > 3:
    x[2] = 1 - q[0]
    x[3] = 0
  return q, x


# -- distance_histogram ---------------------------------------------------------

@pytest.mark.parametrize("shape", [(1,), (5,), (3, 7), (2, 3, 40), (1000, 70), (3, 70001), (140000,)])
@pytest.mark.parametrize("backend", ["numpy", "jax", "jit"])
def test_distance_histogram_matches_loop(shape, backend):
  # Short rows several at a time, long rows in pieces (with a shifted last piece), ragged tiles of rows.
  rng = np.random.default_rng(sum(shape))
  num_bits, num_levels = 9, 3
  d = rng.integers(0, num_bits + 1, shape).astype(np.uint8 if len(shape) == 2 else np.int32)
  a = rng.integers(0, num_levels, shape)
  w = rng.random(shape) < 0.7
  convert = np.asarray if backend == "numpy" else jnp.asarray
  fn = histograms.distance_histogram
  if backend == "jit":
    fn = jax.jit(fn, static_argnames=("num_bits", "num_levels"))
  with_levels = np.asarray(fn(convert(d), convert(a), num_bits=num_bits, num_levels=num_levels, where=convert(w)))
  plain = np.asarray(fn(convert(d), num_bits=num_bits))
  assert with_levels.dtype == np.int32 and with_levels.shape == shape[:-1] + (num_bits + 1, num_levels)
  assert plain.shape == shape[:-1] + (num_bits + 1, 1)
  if np.prod(shape) <= 100_000:
    np.testing.assert_array_equal(with_levels, _loop_histogram(d, a, w, num_bits, num_levels))
    np.testing.assert_array_equal(plain, _loop_histogram(d, None, None, num_bits, 1))
  else:  # the same by np.bincount (no loop over 10^5 items)
    rows = lambda x: x.reshape(-1, shape[-1]).astype(np.int64)
    want = _bincount_histogram(np.where(rows(w), rows(d), num_bits + 1), rows(a), num_bits + 1, num_levels)
    np.testing.assert_array_equal(with_levels.reshape(-1, num_bits + 1, num_levels), want[:, :-1])
    want = _bincount_histogram(rows(d), None, num_bits, 1)
    np.testing.assert_array_equal(plain.reshape(-1, num_bits + 1, 1), want)


def test_distance_histogram_infers_levels_and_takes_bool_affinity():
  d = np.array([[0, 1, 1, 3]])
  got = histograms.distance_histogram(d, np.array([[2, 0, 1, 2]]), num_bits=3)
  np.testing.assert_array_equal(np.asarray(got), _loop_histogram(d, np.array([[2, 0, 1, 2]]), None, 3, 3))
  got = histograms.distance_histogram(d, np.array([[True, False, True, True]]), num_bits=3)
  assert got.shape == (1, 4, 2)  # at least 2 levels
  np.testing.assert_array_equal(np.asarray(got)[0, :, 1], [1, 1, 0, 1])


def test_distance_histogram_under_vmap_and_jit_with_where():
  rng = np.random.default_rng(7)
  d = rng.integers(0, 5, (4, 6, 30))
  a = rng.integers(0, 2, (4, 6, 30))
  w = rng.random((4, 6, 30)) < 0.5
  fn = lambda d, a, w: histograms.distance_histogram(d, a, num_bits=4, num_levels=2, where=w)
  want = _loop_histogram(d, a, w, 4, 2)
  np.testing.assert_array_equal(np.asarray(jax.vmap(fn)(d, a, w)), want)
  np.testing.assert_array_equal(np.asarray(jax.jit(jax.vmap(fn))(d, a, w)), want)
  np.testing.assert_array_equal(np.asarray(jax.vmap(jax.vmap(fn))(d, a, w)), want)


def test_distance_histogram_leaves_out_traced_values_out_of_range():
  # Traced values cannot be checked; those out of range are not counted (and write nowhere else).
  d = jnp.array([[0, 5, -1, 2, 3, 9]])
  a = jnp.array([[0, 1, 0, 4, -2, 1]])
  got = jax.jit(lambda d, a: histograms.distance_histogram(d, a, num_bits=3, num_levels=2))(d, a)
  np.testing.assert_array_equal(np.asarray(got), [[[1, 0], [0, 0], [0, 0], [0, 0]]])


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 5), (2, 0, 4)])
def test_distance_histogram_of_empty_inputs_is_zero(shape):
  for convert in (np.asarray, jnp.asarray):
    d = convert(np.zeros(shape, np.int32))
    got = histograms.distance_histogram(d, d, num_bits=4, num_levels=2, where=convert(np.ones(shape, bool)))
    assert got.shape == shape[:-1] + (5, 2) and got.dtype == np.int32 and not np.asarray(got).any()
  if len(shape) == 2:  # the bit-sliced kernel: no queries or no database items
    words = np.zeros(shape[:1] + (1,), np.uint32), np.zeros(shape[1:] + (1,), np.uint32)
    got = bitsliced.counts(*words, num_bits=4, query_labels=np.zeros(shape[0]), db_labels=np.zeros(shape[1]))
    assert got.shape == (shape[0], 5, 2) and got.dtype == np.int32 and not got.any()


# -- hamming_histogram -----------------------------------------------------------

@pytest.mark.parametrize("num_bits,num_q,num_db", [(1, 3, 5), (3, 4, 70), (8, 5, 64), (20, 6, 300), (32, 7, 1000),
                                                   (33, 3, 129), (64, 4, 200), (100, 3, 90), (128, 5, 257),
                                                   (129, 3, 50), (200, 4, 333)])
def test_hamming_histogram_matches_bincount(num_bits, num_q, num_db):
  rng = np.random.default_rng(num_bits)
  q, x = _codes(rng, num_q, num_db, num_bits)
  qw, xw = codes.pack_bits(q), codes.pack_bits(x)
  d = _pair_distances(q, x)
  aff = rng.integers(0, 3, (num_q, num_db))
  ql, xl = rng.integers(0, 3, num_q) * 7 - 5, rng.integers(0, 4, num_db) * 7 - 5  # a class absent from queries
  rel = (ql[:, None] == xl[None, :]).astype(np.int64)
  for chunk_size in (7, histograms.DEFAULT_CHUNK_SIZE):  # several chunks with a shifted last one, or one
    got = histograms.hamming_histogram(qw, xw, aff, num_bits=num_bits, num_levels=3, chunk_size=chunk_size)
    np.testing.assert_array_equal(np.asarray(got), _bincount_histogram(d, aff, num_bits, 3))
    got = histograms.hamming_histogram(qw, xw, num_bits=num_bits, chunk_size=chunk_size)
    np.testing.assert_array_equal(np.asarray(got), _bincount_histogram(d, None, num_bits, 1))
    got = histograms.hamming_histogram(qw, xw, num_bits=num_bits, query_labels=ql, db_labels=xl,
                                       chunk_size=chunk_size)
    np.testing.assert_array_equal(np.asarray(got), _bincount_histogram(d, rel, num_bits, 2))
    assert got.dtype == np.int32


def test_hamming_histogram_traced_under_jit_and_vmap():
  rng = np.random.default_rng(11)
  num_bits = 40
  q, x = _codes(rng, 6, 150, num_bits)
  qw, xw = codes.pack_bits(q), codes.pack_bits(x)
  d = _pair_distances(q, x)
  aff = rng.integers(0, 2, (6, 150))
  ql, xl = rng.integers(0, 3, 6), rng.integers(0, 3, 150)
  rel = (ql[:, None] == xl[None, :]).astype(np.int64)
  got = jax.jit(lambda q, x, a: histograms.hamming_histogram(q, x, a, num_bits=num_bits, num_levels=2,
                                                             chunk_size=64))(qw, xw, aff)
  np.testing.assert_array_equal(np.asarray(got), _bincount_histogram(d, aff, num_bits, 2))
  got = jax.jit(lambda q, x, a, b: histograms.hamming_histogram(q, x, num_bits=num_bits, query_labels=a,
                                                                db_labels=b))(qw, xw, ql, xl)
  np.testing.assert_array_equal(np.asarray(got), _bincount_histogram(d, rel, num_bits, 2))
  # A batch of query sets: queries 0-2 and 3-5.
  batched = jax.vmap(lambda q: histograms.hamming_histogram(q, xw, num_bits=num_bits))(qw.reshape(2, 3, -1))
  np.testing.assert_array_equal(np.asarray(batched).reshape(6, num_bits + 1, 1),
                                _bincount_histogram(d, None, num_bits, 1))


@pytest.mark.parametrize("num_bits", [20, 128])
def test_hamming_histogram_of_a_large_call_matches_bincount(num_bits):
  # 64 x 65536 pairs: concrete codes of <= 128 bits without affinity take the bit-sliced kernel here.
  rng = np.random.default_rng(num_bits)
  q, x = _codes(rng, 64, 65536, num_bits)
  ql, xl = rng.integers(0, 10, 64), rng.integers(0, 10, 65536)
  d = _pair_distances(q, x)
  qw, xw = codes.pack_bits(q), codes.pack_bits(x)
  got = histograms.hamming_histogram(qw, xw, num_bits=num_bits)
  np.testing.assert_array_equal(np.asarray(got), _bincount_histogram(d, None, num_bits, 1))
  got = histograms.hamming_histogram(np.asarray(qw), np.asarray(xw), num_bits=num_bits, query_labels=ql,
                                     db_labels=xl)
  np.testing.assert_array_equal(np.asarray(got),
                                _bincount_histogram(d, (ql[:, None] == xl[None, :]).astype(int), num_bits, 2))


# -- the bit-sliced kernel itself ---------------------------------------------------

@pytest.mark.parametrize("num_bits,num_q,num_db", [(1, 3, 5), (2, 4, 70), (3, 9, 64), (7, 5, 300), (8, 3, 65),
                                                   (17, 6, 200), (31, 40, 1000), (32, 11, 3001), (33, 5, 777),
                                                   (48, 3, 100), (65, 4, 129), (100, 3, 90), (113, 2, 64),
                                                   (128, 7, 500)])
def test_bit_sliced_counts_match_bincount(num_bits, num_q, num_db):
  # Every code length class (1 bit, < 32, 32, word boundaries, the 128-bit maximum), every shape of the
  # kernel's stages (no high distance planes below 8 bits; 2, 4 and 8 groups of 9 to 16 planes), N not a
  # multiple of 64, several query chunks (40 queries), labels absent from the queries.
  rng = np.random.default_rng(num_bits)
  q, x = _codes(rng, num_q, num_db, num_bits)
  ql, xl = rng.integers(0, 3, num_q) * 7 - 5, rng.integers(0, 4, num_db) * 7 - 5
  qw, xw = np.asarray(codes.pack_bits(q)), np.asarray(codes.pack_bits(x))
  d = _pair_distances(q, x)
  plain = bitsliced.counts(qw, xw, num_bits=num_bits)
  labelled = bitsliced.counts(qw, xw, num_bits=num_bits, query_labels=ql, db_labels=xl)
  assert plain.dtype == np.int32 and labelled.dtype == np.int32
  np.testing.assert_array_equal(plain, _bincount_histogram(d, None, num_bits, 1))
  np.testing.assert_array_equal(labelled, _bincount_histogram(d, (ql[:, None] == xl[None, :]).astype(int),
                                                              num_bits, 2))


@pytest.mark.parametrize("block_words,query_chunk", [(8, 32), (16, 7), (24, 1)])
def test_bit_sliced_counts_in_database_blocks_and_query_chunks(monkeypatch, block_words, query_chunk):
  # Databases of more plane words than a block are counted block by block (forced small here: equal blocks of
  # 8 to 32 words, free slots at the end), queries in chunks with a padded last chunk.
  monkeypatch.setattr(bitsliced, "_BLOCK_WORDS", block_words)
  monkeypatch.setattr(bitsliced, "_QUERY_CHUNK", query_chunk)
  rng = np.random.default_rng(block_words)
  num_bits, num_q, num_db = 33, 45, 3001
  q, x = _codes(rng, num_q, num_db, num_bits)
  ql, xl = rng.integers(0, 4, num_q), rng.integers(0, 5, num_db)
  qw, xw = np.asarray(codes.pack_bits(q)), np.asarray(codes.pack_bits(x))
  d = _pair_distances(q, x)
  np.testing.assert_array_equal(bitsliced.counts(qw, xw, num_bits=num_bits), _bincount_histogram(d, None, num_bits, 1))
  np.testing.assert_array_equal(bitsliced.counts(qw, xw, num_bits=num_bits, query_labels=ql, db_labels=xl),
                                _bincount_histogram(d, (ql[:, None] == xl[None, :]).astype(int), num_bits, 2))


@pytest.mark.parametrize("query_labels,db_labels", [
    (np.array([-128, 127, 5], np.int8), np.array([127, 0, -128, 5, 4] * 30, np.int8)),  # int8 extremes
    (np.array([1, 2], np.uint8), np.array([0, 1, 2, 3, 2**40] * 30, np.uint64)),  # mixed widths
    (np.array([3, 2**30]), np.array([2**30, 3, 7] * 50)),  # a wide range of values
    (np.array(["a", "b"]), np.array(["b", "c", "a"] * 50)),
    (np.array([1.0, 2.5]), np.array([2.5, 1.5, 1.0] * 50)),
])
def test_bit_sliced_labels_compare_by_value(query_labels, db_labels):
  rng = np.random.default_rng(len(db_labels))
  q, x = _codes(rng, len(query_labels), len(db_labels), 12)
  got = bitsliced.counts(np.asarray(codes.pack_bits(q)), np.asarray(codes.pack_bits(x)), num_bits=12,
                         query_labels=query_labels, db_labels=db_labels)
  rel = np.array([[a == b for b in db_labels.tolist()] for a in query_labels.tolist()]).astype(int)
  np.testing.assert_array_equal(got, _bincount_histogram(_pair_distances(q, x), rel, 12, 2))


def test_bit_sliced_classes_of_many_words_and_of_none():
  # One class holds most of the database (many plane words), one query class has no database items, some
  # items belong to no query class, one class has a single item.
  rng = np.random.default_rng(11)
  xl = np.concatenate([np.zeros(3000, int), np.full(200, 1), np.full(50, 9), [4]])
  rng.shuffle(xl)
  ql = np.array([0, 1, 2, 0, 1, 2, 0, 4])
  q, x = _codes(rng, len(ql), len(xl), 24)
  got = bitsliced.counts(np.asarray(codes.pack_bits(q)), np.asarray(codes.pack_bits(x)), num_bits=24,
                         query_labels=ql, db_labels=xl)
  rel = (ql[:, None] == xl[None, :]).astype(int)
  np.testing.assert_array_equal(got, _bincount_histogram(_pair_distances(q, x), rel, 24, 2))


# -- num_levels_of and bad input ----------------------------------------------------

def test_num_levels_of():
  assert histograms.num_levels_of(np.array([[0, 3], [1, 0]])) == 4
  assert histograms.num_levels_of(np.zeros((2, 2), int)) == 2
  assert histograms.num_levels_of(np.array([1, 0]), 5) == 5
  assert histograms.num_levels_of(np.array([True, False])) == 2
  with pytest.raises(ValueError, match="relevance"):
    histograms.num_levels_of(np.array([0, 3]), 2, name="relevance")
  with pytest.raises(ValueError, match="num_levels"):
    jax.jit(lambda a: histograms.num_levels_of(a))(jnp.zeros(3, jnp.int32))
  assert jax.jit(lambda a: jnp.int32(histograms.num_levels_of(a, 3)))(jnp.zeros(3, jnp.int32)) == 3


def _words(n, w=1):
  return np.zeros((n, w), np.uint32)


@pytest.mark.parametrize("call,match", [
    (lambda: histograms.distance_histogram(np.array([0, 9]), num_bits=8), "distances"),
    (lambda: histograms.distance_histogram(np.array([0, -1]), num_bits=8), "distances"),
    (lambda: histograms.distance_histogram(np.array([0.5, 1.0]), num_bits=8), "distances"),
    (lambda: histograms.distance_histogram(np.array(3), num_bits=8), "distances"),
    (lambda: histograms.distance_histogram(np.array([0, 1]), num_bits=0), "num_bits"),
    (lambda: histograms.distance_histogram(np.array([0, 1]), np.array([0]), num_bits=2), "affinity"),
    (lambda: histograms.distance_histogram(np.array([0, 1]), np.array([0, 3]), num_bits=2, num_levels=3),
     "affinity"),
    (lambda: histograms.distance_histogram(np.array([0, 1]), np.array([0, 1]), num_bits=2, num_levels=0),
     "num_levels"),
    (lambda: histograms.distance_histogram(np.array([0, 1]), num_bits=2, where=np.array([1, 0])), "where"),
    (lambda: histograms.distance_histogram(np.array([0, 1]), num_bits=2, where=np.array([True])), "where"),
    (lambda: histograms.hamming_histogram(_words(2), _words(3), num_bits=33), "num_bits"),
    (lambda: histograms.hamming_histogram(np.full((2, 1), 1 << 20, np.uint32), _words(3), num_bits=20),
     r"query_words: expected codes of 20 bits, whose last word's top 12 bit\(s\) are 0"),
    (lambda: histograms.hamming_histogram(_words(2), np.full((3, 2), 1 << 31, np.uint32), num_bits=63), "db_words"),
    (lambda: histograms.hamming_histogram(_words(0), _words(3), num_bits=8), "query_words"),
    (lambda: histograms.hamming_histogram(_words(2), _words(0), num_bits=8), "db_words"),
    (lambda: histograms.hamming_histogram(_words(2), _words(3), np.zeros((2, 4), int), num_bits=8), "affinity"),
    (lambda: histograms.hamming_histogram(_words(2), _words(3), -np.ones((2, 3), int), num_bits=8), "affinity"),
    (lambda: histograms.hamming_histogram(_words(2), _words(3), np.full((2, 3), 3), num_bits=8, num_levels=2),
     "affinity"),
    (lambda: histograms.hamming_histogram(_words(2), _words(3), num_bits=8, query_labels=np.zeros(2, int)),
     "db_labels"),
    (lambda: histograms.hamming_histogram(_words(2), _words(3), num_bits=8, db_labels=np.zeros(3, int)),
     "query_labels"),
    (lambda: histograms.hamming_histogram(_words(2), _words(3), num_bits=8, query_labels=np.zeros(3, int),
                                          db_labels=np.zeros(3, int)), "query_labels"),
    (lambda: histograms.hamming_histogram(_words(2), _words(3), num_bits=8, query_labels=np.zeros(2),
                                          db_labels=np.zeros(3)), "query_labels"),
    (lambda: histograms.hamming_histogram(_words(2), _words(3), np.zeros((2, 3), int), num_bits=8,
                                          query_labels=np.zeros(2, int), db_labels=np.zeros(3, int)), "affinity"),
    (lambda: histograms.hamming_histogram(_words(2), _words(3), num_bits=8, chunk_size=0), "chunk_size"),
    (lambda: histograms.hamming_histogram(_words(2), _words(3), num_bits=8, chunk_size=True), "chunk_size"),
    (lambda: bitsliced.counts(_words(2, 5), _words(3, 5), num_bits=129), "num_bits"),
])
def test_bad_input_names_the_argument(call, match):
  with pytest.raises(ValueError, match=match):
    call()


def test_counts_that_could_pass_int32_are_refused():
  # Shapes only (jax.eval_shape): no memory of that size is taken.
  spec = jax.ShapeDtypeStruct
  with pytest.raises(ValueError, match="distances: expected fewer than 2"):
    jax.eval_shape(lambda d: histograms.distance_histogram(d, num_bits=8), spec((2, 2**31), jnp.uint8))
  with pytest.raises(ValueError, match="distances: expected fewer than 2"):
    jax.eval_shape(lambda d: histograms.distance_histogram(d, num_bits=32), spec((2**26, 4), jnp.uint8))
  with pytest.raises(ValueError, match="query_words, db_words: expected fewer than 2"):
    jax.eval_shape(lambda q, x: histograms.hamming_histogram(q, x, num_bits=32),
                   spec((2**26, 1), jnp.uint32), spec((5, 1), jnp.uint32))
  # Just below the limit on the rows: fine (shapes only).
  out = jax.eval_shape(lambda d: histograms.distance_histogram(d, num_bits=32), spec((2**31 // 35, 4), jnp.uint8))
  assert out.shape == (2**31 // 35, 33, 1)


def test_public_reexports():
  assert hashjax.distance_histogram is histograms.distance_histogram
  assert hashjax.hamming_histogram is histograms.hamming_histogram
