"""hashjax.codes against brute-force references (python loops over bits/pairs)."""

import jax
import numpy as np
import pytest

from compile_events import compiled_programs
import hashjax
from hashjax import codes


def _ref_pack(bits):
  bits = np.asarray(bits) > 0
  num_words = (bits.shape[-1] + 31) // 32
  out = np.zeros(bits.shape[:-1] + (num_words,), np.uint64)
  for j in range(bits.shape[-1]):
    out[..., j // 32] |= bits[..., j].astype(np.uint64) << np.uint64(j % 32)
  return out.astype(np.uint32)


@pytest.mark.parametrize("num_bits", [1, 2, 31, 32, 33, 63, 64, 65, 100, 128, 255, 1000, 1024])
def test_pack_matches_loop_and_unpack_inverts(num_bits):
  rng = np.random.default_rng(num_bits)
  bits = rng.integers(0, 2, size=(3, 4, num_bits), dtype=np.uint8)
  words = codes.pack_bits(bits)
  assert words.dtype == np.uint32 and words.shape == (3, 4, (num_bits + 31) // 32)
  np.testing.assert_array_equal(np.asarray(words), _ref_pack(bits))
  np.testing.assert_array_equal(np.asarray(codes.unpack_bits(words, num_bits)), bits)


def test_pack_and_unpack_for_every_length_up_to_1024():
  # pack_bits is checked against the loop for every length. unpack_bits is
  # "unpack all 32 W bits, then keep the first num_bits": it is checked for every
  # length up to 64 and, beyond, for every word count W at the shortest and
  # longest lengths that W holds, since each new length costs one XLA compile.
  rng = np.random.default_rng(0)
  for num_bits in range(1, 1025):
    bits = rng.integers(0, 2, size=(2, num_bits), dtype=np.uint8)
    words = codes.pack_bits(bits)
    assert np.array_equal(np.asarray(words), _ref_pack(bits)), num_bits
    if num_bits <= 64 or num_bits % 32 in (0, 1):
      assert np.array_equal(np.asarray(codes.unpack_bits(words, num_bits)), bits), num_bits


def test_pack_accepts_bool_and_pm1_and_pads_with_zero():
  rng = np.random.default_rng(1)
  bits01 = rng.integers(0, 2, size=(5, 40))
  want = _ref_pack(bits01)
  np.testing.assert_array_equal(np.asarray(codes.pack_bits(bits01.astype(bool))), want)
  np.testing.assert_array_equal(np.asarray(codes.pack_bits(2 * bits01 - 1)), want)
  np.testing.assert_array_equal(np.asarray(codes.pack_bits((2 * bits01 - 1).astype(np.float32))), want)
  # Padding bits (40..63) are zero.
  assert (np.asarray(codes.pack_bits(np.ones((1, 40))))[0, 1] == (1 << 8) - 1)


def test_binarize_convention():
  x = np.array([-2.0, -0.0, 0.0, 1e-30, 3.0], np.float32)
  np.testing.assert_array_equal(np.asarray(codes.binarize(x)), [0, 0, 0, 1, 1])


@pytest.mark.parametrize("num_bits", [1, 7, 32, 33, 64, 100])
def test_hamming_distance_matches_pair_loop(num_bits):
  rng = np.random.default_rng(num_bits)
  q = rng.integers(0, 2, size=(6, num_bits))
  x = rng.integers(0, 2, size=(9, num_bits))
  got = np.asarray(codes.hamming_distance(codes.pack_bits(q), codes.pack_bits(x)))
  assert got.dtype == np.int32
  for i in range(6):
    for j in range(9):
      assert got[i, j] == sum(int(a != b) for a, b in zip(q[i], x[j]))


@pytest.mark.parametrize("num_bits,num_db,chunk", [(8, 50, 7), (32, 300, 64), (70, 129, 128), (3, 10, 100)])
def test_hamming_histogram_matches_loop(num_bits, num_db, chunk):
  rng = np.random.default_rng(num_db)
  q = rng.integers(0, 2, size=(4, num_bits))
  x = rng.integers(0, 2, size=(num_db, num_bits))
  aff = rng.integers(0, 3, size=(4, num_db))
  hist = np.asarray(codes.hamming_histogram(codes.pack_bits(q), codes.pack_bits(x), aff,
                                            num_bits=num_bits, num_levels=3, chunk_size=chunk))
  want = np.zeros((4, num_bits + 1, 3), np.int64)
  for i in range(4):
    for j in range(num_db):
      want[i, int((q[i] != x[j]).sum()), aff[i, j]] += 1
  np.testing.assert_array_equal(hist, want)
  no_aff = np.asarray(codes.hamming_histogram(codes.pack_bits(q), codes.pack_bits(x), num_bits=num_bits,
                                              chunk_size=chunk))
  np.testing.assert_array_equal(no_aff[..., 0], want.sum(-1))


@pytest.mark.parametrize("num_bits,num_q,num_db", [(1, 3, 5), (2, 4, 70), (3, 9, 64), (7, 5, 300), (8, 3, 65),
                                                   (17, 6, 200), (31, 10, 1000), (32, 11, 3001), (33, 5, 777),
                                                   (48, 3, 100), (65, 4, 129), (100, 3, 90), (128, 7, 500)])
def test_bit_sliced_histogram_matches_bincount(num_bits, num_q, num_db):
  # Every code length class (1 bit, < 32, 32, word boundaries, the 128-bit maximum), every shape
  # of the kernel's stages (no high distance planes below 8 bits, 2, 4 and 8 groups of planes,
  # groups of 9, 12 and 13 planes), N not a multiple of 64 (zero-code padding subtracted again),
  # labels absent from the queries.
  rng = np.random.default_rng(num_bits)
  q = rng.integers(0, 2, size=(num_q, num_bits))
  x = rng.integers(0, 2, size=(num_db, num_bits))
  x[:3] = q[0]  # distance 0 (and padding-like zero codes) occur
  x[3] = 0
  x[4] = 1 - q[0]  # and the largest distance, num_bits
  ql = rng.integers(0, 3, num_q) * 7 - 5
  xl = rng.integers(0, 4, num_db) * 7 - 5
  qw, xw = codes.pack_bits(q), codes.pack_bits(x)
  plain = np.asarray(codes._sliced_histogram(qw, xw, num_bits=num_bits))
  labelled = np.asarray(codes._sliced_histogram(qw, xw, num_bits=num_bits, query_labels=ql, db_labels=xl))
  assert plain.shape == (num_q, num_bits + 1, 1) and labelled.shape == (num_q, num_bits + 1, 2)
  d = (q[:, None, :] != x[None, :, :]).sum(-1)
  for i in range(num_q):
    np.testing.assert_array_equal(plain[i, :, 0], np.bincount(d[i], minlength=num_bits + 1))
    keys = d[i] * 2 + (xl == ql[i])
    np.testing.assert_array_equal(labelled[i].reshape(-1), np.bincount(keys, minlength=2 * (num_bits + 1)))


def test_bit_sliced_histogram_of_a_new_query_count_compiles_nothing(monkeypatch):
  # Chunks of 32 queries: after one call, any other count above 16 (jax or numpy queries, with or
  # without labels) compiles no program at all, not even a slice of its inputs.
  monkeypatch.setattr(codes, "_SLICED_MIN_PAIRS", 0)
  rng = np.random.default_rng(8)
  x = codes.pack_bits(rng.integers(0, 2, size=(700, 24)))
  xl = rng.integers(0, 3, 700)
  queries = [codes.pack_bits(rng.integers(0, 2, size=(count, 24))) for count in (40, 17, 33, 100)]
  labels = [rng.integers(0, 3, len(q)) for q in queries]
  codes.hamming_histogram(queries[0], x, num_bits=24)
  codes._label_histogram(queries[0], x, labels[0], xl, num_bits=24)
  xb = np.asarray(codes.unpack_bits(x, 24))
  dists = [(np.asarray(codes.unpack_bits(q, 24))[:, None] != xb[None]).sum(-1) for q in queries]
  got = []
  with compiled_programs() as compiled:
    for q, ql in zip(queries[1:], labels[1:]):
      for query in (q, np.asarray(q)):
        got.append((codes.hamming_histogram(query, x, num_bits=24), codes._label_histogram(query, x, ql, xl, num_bits=24)))
  for (plain, labelled), d, ql in zip(got, [d for d in dists[1:] for _ in range(2)], [l for l in labels[1:] for _ in range(2)]):
    for i in range(len(ql)):
      np.testing.assert_array_equal(np.asarray(plain)[i, :, 0], np.bincount(d[i], minlength=25))
      np.testing.assert_array_equal(np.asarray(labelled)[i].reshape(-1), np.bincount(d[i] * 2 + (xl == ql[i]), minlength=50))
  assert compiled == []


@pytest.mark.parametrize("block_words,plane_block_words", [(8, 16), (16, 32), (24, 1024)])
def test_bit_sliced_histogram_in_database_blocks_and_query_chunks(monkeypatch, block_words, plane_block_words):
  # Databases of more than _BLOCK_WORDS plane words are counted block by block (forced small
  # here: 8 to 24 words of 64 items, a remainder block, class segments of 8 words) and queries
  # in chunks of 32 with a padded last chunk. The layouts have 48 plane words (plain) and 80
  # (labels); their bit planes are computed in blocks of _PLANE_BLOCK_WORDS words: 16 (whole
  # multiples), 32 (a last block overlapping the one before) and 1024 (one padded block). The
  # sums match a brute-force bincount.
  monkeypatch.setattr(codes, "_BLOCK_WORDS", block_words)
  monkeypatch.setattr(codes, "_PLANE_BLOCK_WORDS", plane_block_words)
  rng = np.random.default_rng(block_words)
  num_bits, num_q, num_db = 33, 45, 3001
  q = rng.integers(0, 2, size=(num_q, num_bits))
  x = rng.integers(0, 2, size=(num_db, num_bits))
  ql, xl = rng.integers(0, 4, num_q), rng.integers(0, 5, num_db)
  qw, xw = codes.pack_bits(q), codes.pack_bits(x)
  plain = np.asarray(codes._sliced_histogram(qw, xw, num_bits=num_bits))
  labelled = np.asarray(codes._sliced_histogram(qw, xw, num_bits=num_bits, query_labels=ql, db_labels=xl))
  d = (q[:, None, :] != x[None, :, :]).sum(-1)
  for i in range(num_q):
    np.testing.assert_array_equal(plain[i, :, 0], np.bincount(d[i], minlength=num_bits + 1))
    keys = d[i] * 2 + (xl == ql[i])
    np.testing.assert_array_equal(labelled[i].reshape(-1), np.bincount(keys, minlength=2 * (num_bits + 1)))


def test_a_new_database_size_compiles_no_bit_planes(monkeypatch):
  # The bit planes are computed in blocks of one shape (here 32 words, the last block shifted
  # back to end at the last word): a database in a new size bucket compiles the kernel only.
  monkeypatch.setattr(codes, "_PLANE_BLOCK_WORDS", 32)
  rng = np.random.default_rng(29)
  num_bits = 27
  q = rng.integers(0, 2, size=(40, num_bits))
  qw = codes.pack_bits(q)
  for num_db in (3001, 5500):  # 48 and 88 plane words: blocks [0, 32), [16, 48); [0, 32), [32, 64), [56, 88)
    assert codes._sliced_num_words(num_db) == {3001: 48, 5500: 88}[num_db]
    x = rng.integers(0, 2, size=(num_db, num_bits))
    xw = np.asarray(codes.pack_bits(x))
    with compiled_programs() as names:
      hist = np.asarray(codes._sliced_histogram(qw, xw, num_bits=num_bits))
    d = (q[:, None, :] != x[None, :, :]).sum(-1)
    for i in range(len(q)):
      np.testing.assert_array_equal(hist[i, :, 0], np.bincount(d[i], minlength=num_bits + 1))
  assert names == ["jit(_sliced_counts)"], names  # the second size: its kernel, no planes


@pytest.mark.parametrize("query_labels,db_labels", [
    (np.array([-128, 127, 5], np.int8), np.array([127, 0, -128, 5, 4], np.int8)),  # int8 extremes
    (np.array([1, 2], np.uint8), np.array([0, 1, 2, 3, 2**40], np.uint64)),  # mixed widths
    (np.array([3, 2**30]), np.array([2**30, 3, 7])),  # a wide range: no lookup table
    (np.array(["a", "b"]), np.array(["b", "c", "a"])),
    (np.array([1.0, 2.5]), np.array([2.5, 1.5, 1.0])),
])
def test_query_classes_match_a_dictionary(query_labels, db_labels):
  index = {v: i for i, v in enumerate(sorted(set(query_labels.tolist())))}
  query_class, db_class = codes._query_classes(query_labels, db_labels)
  assert query_class.tolist() == [index[v] for v in query_labels.tolist()]
  assert db_class.tolist() == [index.get(v, -1) for v in db_labels.tolist()]


def test_bit_sliced_class_segments_split_a_dominant_class():
  # One class holds most of the database, so it spans several segments; one query class has no
  # database items; some items belong to no query class.
  rng = np.random.default_rng(11)
  num_bits = 24
  xl = np.concatenate([np.zeros(3000, int), np.full(200, 1), np.full(50, 9)])
  rng.shuffle(xl)
  ql = np.array([0, 1, 2, 0, 1, 2, 0])
  q = rng.integers(0, 2, size=(len(ql), num_bits))
  x = rng.integers(0, 2, size=(len(xl), num_bits))
  db_class = codes._query_classes(ql, xl)[1]
  layout = codes._class_layout(db_class)
  segment = layout.slot // (64 * layout.words)
  assert len(np.unique(layout.slot)) == len(xl) and layout.slot.max() < 64 * layout.words * layout.segments
  np.testing.assert_array_equal(layout.segment_class[segment], db_class)  # each item in its class's run
  assert np.sum(layout.segment_class == 0) > 1 and -1 in layout.segment_class
  np.testing.assert_array_equal(layout.segment_pad, 64 * layout.words - np.bincount(segment))
  got = np.asarray(codes._sliced_histogram(codes.pack_bits(q), codes.pack_bits(x), num_bits=num_bits,
                                           query_labels=ql, db_labels=xl))
  d = (q[:, None, :] != x[None, :, :]).sum(-1)
  for i in range(len(ql)):
    keys = d[i] * 2 + (xl == ql[i])
    np.testing.assert_array_equal(got[i].reshape(-1), np.bincount(keys, minlength=2 * (num_bits + 1)))


def test_public_histograms_use_the_bit_sliced_kernel_when_large(monkeypatch):
  rng = np.random.default_rng(5)
  q = codes.pack_bits(rng.integers(0, 2, size=(6, 20)))
  x = codes.pack_bits(rng.integers(0, 2, size=(1000, 20)))
  ql, xl = rng.integers(0, 3, 6), rng.integers(0, 3, 1000)
  small = np.asarray(codes.hamming_histogram(q, x, num_bits=20))
  small_labels = np.asarray(codes._label_histogram(q, x, ql, xl, num_bits=20))
  assert codes._sliced_layout(q, x, 20) is None
  monkeypatch.setattr(codes, "_SLICED_MIN_PAIRS", 0)
  assert codes._sliced_layout(q, x, 20) and codes._sliced_layout(q, x, 20, (ql, xl))
  np.testing.assert_array_equal(np.asarray(codes.hamming_histogram(q, x, num_bits=20)), small)
  np.testing.assert_array_equal(np.asarray(codes._label_histogram(q, x, ql, xl, num_bits=20)), small_labels)
  before = codes._sliced_counts._cache_size()
  # A new N in the same bucket (words rounded up to 16 sizes per octave) compiles nothing.
  assert codes._sliced_num_words(1000) == codes._sliced_num_words(1010)
  x2 = codes.pack_bits(rng.integers(0, 2, size=(1010, 20)))
  want = np.asarray(codes._stream_hamming_bucketed(q, x2, num_bits=20, num_levels=1))
  np.testing.assert_array_equal(np.asarray(codes.hamming_histogram(q, x2, num_bits=20)), want)
  assert codes._sliced_counts._cache_size() == before
  # With labels the shape is the number of class segments (512 items each): 3 here, as before.
  xl2 = np.concatenate([xl, [0] * 10])
  before = codes._sliced_counts._cache_size()
  want = np.asarray(codes._stream_hamming_bucketed(q, x2, num_bits=20, num_levels=2, query_labels=ql, db_labels=xl2))
  np.testing.assert_array_equal(np.asarray(codes._label_histogram(q, x2, ql, xl2, num_bits=20)), want)
  assert codes._sliced_counts._cache_size() == before
  # So does a new number of queries of the same chunk (chunks of 32, or the next power of two).
  assert codes._QUERY_CHUNK == 32
  before = codes._sliced_counts._cache_size()
  want = np.asarray(codes._stream_hamming_bucketed(q[:5], x2, num_bits=20, num_levels=2, query_labels=ql[:5],
                                                   db_labels=xl2))
  np.testing.assert_array_equal(np.asarray(codes._label_histogram(q[:5], x2, ql[:5], xl2, num_bits=20)), want)
  assert codes._sliced_counts._cache_size() == before
  many = codes.pack_bits(rng.integers(0, 2, size=(75, 20)))
  many_labels = rng.integers(0, 3, 75)
  for count in (40, 75):  # 2 and 3 chunks of 32
    want = np.asarray(codes._stream_hamming_bucketed(many[:count], x2, num_bits=20, num_levels=2,
                                                     query_labels=many_labels[:count], db_labels=xl2))
    np.testing.assert_array_equal(
        np.asarray(codes._label_histogram(many[:count], x2, many_labels[:count], xl2, num_bits=20)), want)
    if count == 40:
      before = codes._sliced_counts._cache_size()
  assert codes._sliced_counts._cache_size() == before
  # Longer codes, affinity matrices, traced labels and too many classes stay on the scatter-add.
  assert codes._sliced_layout(codes.pack_bits(np.ones((6, 129))), codes.pack_bits(np.ones((9, 129))), 129) is None
  monkeypatch.setattr(codes, "_SEGMENT_MAX_GROWTH", 0)
  assert codes._sliced_layout(q, x, 20, (ql, xl)) is None
  np.testing.assert_array_equal(np.asarray(codes._label_histogram(q, x, ql, xl, num_bits=20)), small_labels)


def test_distance_histogram_matches_loop():
  rng = np.random.default_rng(3)
  d = rng.integers(0, 6, size=(2, 3, 40))
  a = rng.integers(0, 4, size=(2, 3, 40))
  h = np.asarray(codes.distance_histogram(d, a, num_bits=5, num_levels=4))
  assert h.shape == (2, 3, 6, 4)
  for idx in np.ndindex(2, 3):
    want = np.zeros((6, 4), int)
    for dist, lev in zip(d[idx], a[idx]):
      want[dist, lev] += 1
    np.testing.assert_array_equal(h[idx], want)


@pytest.mark.parametrize("shared", [True, False])
def test_weighted_hamming_matches_loop(shared):
  rng = np.random.default_rng(4)
  q = rng.integers(0, 2, size=(3, 12))
  x = rng.integers(0, 2, size=(5, 12))
  w = rng.random(12) if shared else rng.random((3, 12))
  got = np.asarray(codes.weighted_hamming_distance(q, 2 * x - 1, w))
  for i in range(3):
    wi = w if shared else w[i]
    for j in range(5):
      np.testing.assert_allclose(got[i, j], sum(wi[k] for k in range(12) if q[i, k] != x[j, k]), rtol=1e-5)


# -- bad input ---------------------------------------------------------------

def _words(n, w=1):
  return np.zeros((n, w), np.uint32)


@pytest.mark.parametrize("call,match", [
    (lambda: codes.pack_bits(np.array([0, 1, 2])), "bits"),
    (lambda: codes.pack_bits(np.array([-1, 0, 1])), "bits"),
    (lambda: codes.pack_bits(np.array(["a"])), "bits"),
    (lambda: codes.pack_bits(np.zeros((3, 0))), "bits"),
    (lambda: codes.unpack_bits(np.zeros(2, np.int64), 40), "words"),
    (lambda: codes.unpack_bits(np.zeros(2, np.uint32), 30), "num_bits"),
    (lambda: codes.unpack_bits(np.zeros(2, np.uint32), 0), "num_bits"),
    (lambda: codes.unpack_bits(np.zeros(2, np.uint32), 40.0), "num_bits"),
    (lambda: codes.hamming_distance(np.zeros((2, 1), np.int32), _words(3)), "query_words"),
    (lambda: codes.hamming_distance(_words(2), _words(3, 2)), "db_words"),
    (lambda: codes.hamming_distance(_words(0), _words(3)), "query_words"),
    (lambda: codes.hamming_distance(_words(2), _words(0)), "db_words"),
    (lambda: codes.hamming_histogram(_words(2), _words(3), num_bits=33), "num_bits"),
    (lambda: codes.hamming_histogram(np.full((2, 1), 1 << 20, np.uint32), _words(3), num_bits=20),
     r"query_words: expected codes of 20 bits, whose last word's top 12 bit\(s\) are 0"),
    (lambda: codes.hamming_histogram(_words(2), np.full((3, 2), 1 << 31, np.uint32), num_bits=63), "db_words"),
    (lambda: codes.hamming_histogram(_words(2), _words(3), np.zeros((2, 4), int), num_bits=8), "affinity"),
    (lambda: codes.hamming_histogram(_words(2), _words(3), -np.ones((2, 3), int), num_bits=8), "affinity"),
    (lambda: codes.hamming_histogram(_words(2), _words(3), np.full((2, 3), 3), num_bits=8, num_levels=2),
     "affinity"),
    (lambda: codes.distance_histogram(np.array([0, 9]), num_bits=8), "distances"),
    (lambda: codes.distance_histogram(np.array([0.5, 1.0]), num_bits=8), "distances"),
    (lambda: codes.weighted_hamming_distance(np.ones((2, 4)), np.ones((3, 5)), np.ones(4)), "db_bits"),
    (lambda: codes.weighted_hamming_distance(np.ones((2, 4)), np.ones((3, 4)), np.array([1, np.nan, 1, 1])),
     "weights"),
    (lambda: codes.weighted_hamming_distance(np.ones((2, 4)), np.ones((3, 4)), np.ones(5)), "weights"),
])
def test_bad_input_names_the_argument(call, match):
  with pytest.raises(ValueError, match=match):
    call()


def test_jit_compatible():
  bits = np.random.default_rng(0).integers(0, 2, size=(4, 40))
  words = jax.jit(codes.pack_bits)(bits)
  np.testing.assert_array_equal(np.asarray(words), _ref_pack(bits))
  np.testing.assert_array_equal(np.asarray(jax.jit(lambda w: codes.unpack_bits(w, 40))(words)), bits)


def test_public_reexports():
  assert hashjax.pack_bits is codes.pack_bits and hashjax.hamming_distance is codes.hamming_distance
