"""hashjax.codes against brute-force references (python loops over bits and pairs, float64 sums)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

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
  # longest lengths that W holds.
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
  np.testing.assert_array_equal(np.asarray(codes.pack_bits(jnp.asarray(bits01))), want)
  # Padding bits (40..63) are zero.
  assert (np.asarray(codes.pack_bits(np.ones((1, 40))))[0, 1] == (1 << 8) - 1)


def test_binarize_convention():
  x = np.array([-2.0, -0.0, 0.0, 1e-30, 3.0], np.float32)
  np.testing.assert_array_equal(np.asarray(codes.binarize(x)), [0, 0, 0, 1, 1])


@pytest.mark.parametrize("num_bits", [1, 7, 32, 33, 64, 100, 200])
def test_hamming_distance_matches_pair_loop(num_bits):
  rng = np.random.default_rng(num_bits)
  q = rng.integers(0, 2, size=(6, num_bits))
  x = rng.integers(0, 2, size=(9, num_bits))
  x[0] = q[0]  # distance 0
  x[1] = 1 - q[1]  # distance num_bits
  got = np.asarray(codes.hamming_distance(codes.pack_bits(q), codes.pack_bits(x)))
  assert got.dtype == np.int32
  for i in range(6):
    for j in range(9):
      assert got[i, j] == sum(int(a != b) for a, b in zip(q[i], x[j]))


def _weighted_loop(q, x, w):
  """float64 sum of the weights of the differing bits, pair by pair."""
  out = np.zeros((len(q), len(x)))
  for i in range(len(q)):
    wi = w if w.ndim == 1 else w[i]
    for j in range(len(x)):
      out[i, j] = sum(float(wi[k]) for k in range(q.shape[1]) if (q[i, k] > 0) != (x[j, k] > 0))
  return out


@pytest.mark.parametrize("num_bits", [12, 64, 200])
def test_weighted_hamming_matches_float64_loop(num_bits):
  # Tolerance: 1e-6 of the total weight, about 17 float32 ulps. A bfloat16 or TF32 matmul (8 or 11 significant
  # bits) errs by ~2^-9 to 2^-11 of each weight, far above it.
  rng = np.random.default_rng(num_bits)
  q = rng.integers(0, 2, size=(7, num_bits))
  x = rng.integers(0, 2, size=(9, num_bits))
  x[0] = q[0]  # distance 0
  w = rng.uniform(0.1, 3.0, size=num_bits)
  want = _weighted_loop(q, x, w)
  for query_words, db_words in ((_ref_pack(q), _ref_pack(x)), (jnp.asarray(_ref_pack(q)), _ref_pack(x))):
    got = np.asarray(codes.weighted_hamming_distance(query_words, db_words, w))
    assert got.dtype == np.float32 and got.shape == (7, 9)
    assert np.all(np.abs(got - want) <= 1e-6 * w.sum()), np.abs(got - want).max()
    assert np.all(got[0, 0] == 0.0)


def test_weighted_hamming_under_jit():
  rng = np.random.default_rng(3)
  q, x, w = rng.integers(0, 2, (4, 40)), rng.integers(0, 2, (5, 40)), rng.random(40)
  got = np.asarray(jax.jit(codes.weighted_hamming_distance)(_ref_pack(q), _ref_pack(x), w))
  assert np.all(np.abs(got - _weighted_loop(q, x, w)) <= 1e-6 * np.abs(w).sum())


# -- bad input ---------------------------------------------------------------

def _words(n, w=1):
  return np.zeros((n, w), np.uint32)


@pytest.mark.parametrize("call,match", [
    (lambda: codes.pack_bits(np.array([0, 1, 2])), "bits"),
    (lambda: codes.pack_bits(np.array([-1, 0, 1])), "bits"),
    (lambda: codes.pack_bits(np.array(["a"])), "bits"),
    (lambda: codes.pack_bits(np.zeros((3, 0))), "bits"),
    (lambda: codes.pack_bits([0, 1]), "bits"),
    (lambda: codes.unpack_bits(np.zeros(2, np.int64), 40), "words"),
    (lambda: codes.unpack_bits(np.zeros(2, np.uint32), 30), "num_bits"),
    (lambda: codes.unpack_bits(np.zeros(2, np.uint32), 0), "num_bits"),
    (lambda: codes.unpack_bits(np.zeros(2, np.uint32), 40.0), "num_bits"),
    (lambda: codes.hamming_distance(np.zeros((2, 1), np.int32), _words(3)), "query_words"),
    (lambda: codes.hamming_distance(_words(2), _words(3, 2)), "db_words"),
    (lambda: codes.hamming_distance(_words(0), _words(3)), "query_words"),
    (lambda: codes.hamming_distance(_words(2), _words(0)), "db_words"),
    (lambda: codes.hamming_distance(np.zeros(3, np.uint32), _words(3)), "query_words"),
    (lambda: codes.weighted_hamming_distance(_words(2), _words(3, 2), np.ones(4)), "db_words"),
    (lambda: codes.weighted_hamming_distance(np.ones((2, 4)), _words(3), np.ones(4)), "query_words"),
    (lambda: codes.weighted_hamming_distance(_words(2), _words(3), np.array([1, np.nan, 1, 1])), "weights"),
    (lambda: codes.weighted_hamming_distance(_words(2), _words(3), np.array([1, -0.5, 1, 1])), "weights"),
    (lambda: codes.weighted_hamming_distance(_words(2), _words(3), np.ones(33)), "weights"),
    (lambda: codes.weighted_hamming_distance(_words(2), _words(3), np.ones((2, 4))), "weights"),
    (lambda: codes.weighted_hamming_distance(_words(2) + 16, _words(3), np.ones(4)), "query_words"),
])
def test_bad_input_names_the_argument(call, match):
  with pytest.raises(ValueError, match=match):
    call()


def test_jit_compatible():
  bits = np.random.default_rng(0).integers(0, 2, size=(4, 40))
  words = jax.jit(codes.pack_bits)(bits)
  np.testing.assert_array_equal(np.asarray(words), _ref_pack(bits))
  np.testing.assert_array_equal(np.asarray(jax.jit(lambda w: codes.unpack_bits(w, 40))(words)), bits)
  dist = jax.jit(codes.hamming_distance)(words, words[::-1])
  want = (bits[:, None, :] != bits[None, ::-1, :]).sum(-1)
  np.testing.assert_array_equal(np.asarray(dist), want)


def test_public_reexports():
  assert hashjax.pack_bits is codes.pack_bits and hashjax.hamming_distance is codes.hamming_distance


# -- weighted distance: one fixed float32 order --------------------------------


def _pairwise32(terms):
  terms = list(terms)
  while len(terms) > 1:
    terms = [np.float32(terms[i] + terms[i + 1]) if i + 1 < len(terms) else terms[i]
             for i in range(0, len(terms), 2)]
  return terms[0]


def _documented_order(q, x, w):
  """The documented float32 order in numpy: per code byte p (bits 8p .. 8p+7), the table entry of the byte of
  q XOR x is the pairwise sum of its 8 terms (the weight where the bit differs, else 0), and the distance the
  pairwise sum of the entries over the bytes (adjacent pairs, an odd last one carried)."""
  q, x = np.asarray(q) > 0, np.asarray(x) > 0
  num_bits = q.shape[1]
  pad = -num_bits % 32
  w = np.where(np.abs(w) < np.finfo(np.float32).tiny, 0, w).astype(np.float32)
  w = np.pad(w, [(0, 0)] * (w.ndim - 1) + [(0, pad)])
  diff = np.pad(q[:, None, :] != x[None], [(0, 0), (0, 0), (0, pad)])  # [Q, N, 32 W]
  wq = w if w.ndim == 1 else w[:, None, :]
  entries = []
  for p in range(diff.shape[-1] // 8):
    terms = [np.where(diff[..., 8 * p + b], wq[..., 8 * p + b], np.float32(0)).astype(np.float32) for b in range(8)]
    entries.append(_pairwise32(terms))
  return _pairwise32(entries)


@pytest.mark.parametrize("num_bits", [12, 64, 200])
def test_weighted_hamming_follows_the_documented_order_bit_for_bit(num_bits):
  rng = np.random.default_rng(num_bits + 7)
  q = rng.integers(0, 2, size=(6, num_bits))
  x = rng.integers(0, 2, size=(11, num_bits))
  w = rng.uniform(0.1, 3.0, size=num_bits).astype(np.float32)
  got = np.asarray(codes.weighted_hamming_distance(_ref_pack(q), _ref_pack(x), w))
  np.testing.assert_array_equal(got, _documented_order(q, x, w))
  jitted = np.asarray(jax.jit(codes.weighted_hamming_distance)(_ref_pack(q), _ref_pack(x), w))
  np.testing.assert_array_equal(jitted, got)


def test_weighted_hamming_counts_subnormal_weights_as_zero():
  # A subnormal weight would be flushed to 0 by some backends' float modes and not by others: it is 0.
  q, x = _ref_pack(np.array([[1, 1, 0]])), _ref_pack(np.array([[0, 0, 0]]))
  w = np.array([1.0, 1e-39, 0.5], np.float32)
  assert np.asarray(codes.weighted_hamming_distance(q, x, w)).tolist() == [[1.0]]
