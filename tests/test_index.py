"""hashjax.index against brute-force numpy references (full scans, loops, lexicographic sorts)."""

import itertools
import math

import jax.numpy as jnp
import numpy as np
import pytest

from brute_force import assert_ragged_equal as _assert_ragged_equal
from brute_force import ref_distances as _ref_distances
from brute_force import ref_radius as _ref_radius
from hashjax import codes, index, search
from hashjax.index import _common


def _data(rng, num_bits, n, num_q, pool):
  """Database codes drawn from ``pool`` distinct codes (duplicates), and queries:
  database codes with 0-3 flipped bits, plus uniformly random codes."""
  high = np.uint64(1) << np.uint64(num_bits)
  base = (rng.integers(0, 1 << 62, pool, dtype=np.uint64) % high).astype(np.uint32)
  x = base[rng.integers(0, pool, n)]
  q = x[rng.integers(0, n, num_q)].copy()
  for j in range(num_q):
    for b in rng.choice(num_bits, size=min(num_bits, int(rng.integers(0, 4))), replace=False):
      q[j] ^= np.uint32(1 << int(b))
  rand = (rng.integers(0, 1 << 62, 5, dtype=np.uint64) % high).astype(np.uint32)
  return x[:, None], np.concatenate([q, rand])[:, None]


def test_reference_distance_matches_bit_loop():
  rng = np.random.default_rng(0)
  for num_bits in (32, 40):
    qb, xb = rng.integers(0, 2, (4, num_bits)), rng.integers(0, 2, (6, num_bits))
    loop = np.array([[sum(int(a != b) for a, b in zip(qr, xr)) for xr in xb] for qr in qb])
    got = _ref_distances(np.asarray(codes.pack_bits(qb)), np.asarray(codes.pack_bits(xb)))
    np.testing.assert_array_equal(got, loop)


# num_bits, filter_bits (None: default), database size, pool of distinct codes
_CASES = [
    (1, None, 50, 2),
    (3, None, 300, 8),
    (8, None, 2000, 60),
    (8, 3, 2000, 60),  # hashed 8-bit keys, many keys per prefix
    (16, None, 3000, 400),
    (20, None, 3000, 3000),
    (24, None, 3000, 200),
    (25, None, 3000, 500),  # hashed (25 > 24 bits), one filter
    (32, None, 4000, 1500),
    (32, 27, 4000, 1500),  # hashed, coarse 24-bit filter, then the 27-bit one
    (32, 2, 4000, 300),  # hashed, about 75 keys per prefix
]


@pytest.mark.parametrize("num_bits,filter_bits,n,pool", _CASES)
def test_lookup_matches_brute_force(num_bits, filter_bits, n, pool):
  rng = np.random.default_rng(num_bits * 100 + (filter_bits or 0))
  x, q = _data(rng, num_bits, n, 40, pool)
  idx = index.build_inverted_index(x, num_bits=num_bits, filter_bits=filter_bits)
  assert idx.num_db == n
  assert idx.hashed == (filter_bits is not None and filter_bits < num_bits or num_bits > 24)
  for r in range(4):
    rows = _ref_radius(q, x, r)
    assert r == 0 or sum(len(i) for _, i in rows) > 0
    for method in ("enumerate", "scan", "auto"):
      _assert_ragged_equal(index.lookup(idx, q, r, method=method), rows)


@pytest.mark.parametrize("num_bits", [8, 16, 20, 32])
def test_lookup_equals_radius_search(num_bits):
  rng = np.random.default_rng(7 + num_bits)
  x, q = _data(rng, num_bits, 5000, 64, 700)
  idx = index.build_inverted_index(jnp.asarray(x), num_bits=num_bits)  # jax arrays are accepted too
  for r in range(4):
    got = index.lookup(idx, jnp.asarray(q), r)
    want = search.radius_search(q, x, r)
    for a, b in zip(got, want):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_every_code_and_large_radius():
  # All 2^6 codes, each held by a varying number of items; radius up to and past num_bits.
  rng = np.random.default_rng(3)
  x = rng.integers(0, 64, 500).astype(np.uint32)[:, None]
  q = np.arange(64, dtype=np.uint32)[:, None]
  idx = index.build_inverted_index(x, num_bits=6)
  for r in (4, 6, 9, np.arange(64) % 8):  # the last: one radius per query
    rows = _ref_radius(q, x, r)
    for method in ("enumerate", "scan"):
      _assert_ragged_equal(index.lookup(idx, q, r, method=method), rows)
  assert all(len(i) == 500 for _, i in _ref_radius(q, x, 6))


def test_index_structure():
  rng = np.random.default_rng(1)
  for num_bits, filter_bits in ((12, None), (32, None), (32, 5)):
    x, _ = _data(rng, num_bits, 1000, 1, 90)
    idx = index.build_inverted_index(x, num_bits=num_bits, filter_bits=filter_bits)
    groups = {}
    for i, c in enumerate(x[:, 0].tolist()):
      groups.setdefault(c, []).append(i)
    assert sorted(idx.codes.tolist()) == sorted(groups)
    for u, c in enumerate(idx.codes.tolist()):
      assert idx.items[idx.code_offsets[u]:idx.code_offsets[u + 1]].tolist() == groups[c]
    assert np.all(np.diff(idx.keys.astype(np.int64)) > 0)


@pytest.mark.parametrize("num_bits,radius", [(1, 3), (5, 2), (10, 3), (32, 2), (32, 3)])
def test_masks_enumerate_the_ball(num_bits, radius):
  masks, weights = _common.masks(num_bits, radius)
  want = [sum(1 << b for b in combo) for w in range(min(radius, num_bits) + 1)
          for combo in sorted(itertools.combinations(range(num_bits), w), key=lambda c: sum(1 << b for b in c))]
  assert masks.tolist() == want
  assert weights.tolist() == [bin(m).count("1") for m in want]
  assert index.num_masks(num_bits, radius) == sum(math.comb(num_bits, j) for j in range(min(radius, num_bits) + 1))


def test_choose_method_cost_model():
  x = np.arange(1000, dtype=np.uint32)[:, None]
  idx = index.build_inverted_index(x, num_bits=32)
  for r in range(4):
    want = "enumerate" if index.num_masks(32, r) * index.PROBE_COST_PER_SCANNED_CODE < 1000 else "scan"
    assert index.choose_method(idx, r) == want
  assert index.choose_method(idx, 0) == "enumerate" and index.choose_method(idx, 3) == "scan"


def test_enumerate_refuses_huge_ball():
  idx = index.build_inverted_index(np.arange(10, dtype=np.uint32)[:, None], num_bits=32)
  with pytest.raises(ValueError, match="^r: .*MAX_MASKS"):
    index.lookup(idx, np.zeros((1, 1), np.uint32), 12, method="enumerate")
  # The scan gives the answer instead (everything within 12 bits of 0 here).
  res = index.lookup(idx, np.zeros((1, 1), np.uint32), 12, method="scan")
  assert np.asarray(res.indices).tolist() == [0, 1, 2, 4, 8, 3, 5, 6, 9, 7]


def test_bad_inputs():
  x = np.arange(8, dtype=np.uint32)[:, None]
  idx = index.build_inverted_index(x, num_bits=4)
  q = np.zeros((2, 1), np.uint32)
  cases = [
      ("num_bits", lambda: index.build_inverted_index(np.zeros((3, 2), np.uint32), num_bits=33)),
      ("num_bits", lambda: index.build_inverted_index(x, num_bits=0)),
      ("num_bits", lambda: index.build_inverted_index(x, num_bits=4.0)),
      ("db_words", lambda: index.build_inverted_index(x.astype(np.int32), num_bits=4)),
      ("db_words", lambda: index.build_inverted_index(np.zeros((3, 2), np.uint32), num_bits=32)),
      ("db_words", lambda: index.build_inverted_index(x[:, 0], num_bits=4)),
      ("db_words", lambda: index.build_inverted_index(x[:0], num_bits=4)),
      ("db_words", lambda: index.build_inverted_index(x, num_bits=2)),  # bits above num_bits
      ("filter_bits", lambda: index.build_inverted_index(x, num_bits=4, filter_bits=5)),
      ("filter_bits", lambda: index.build_inverted_index(x, num_bits=4, filter_bits=0)),
      ("index", lambda: index.lookup((x, 4), q, 1)),
      ("query_words", lambda: index.lookup(idx, q.astype(np.int64), 1)),
      ("query_words", lambda: index.lookup(idx, np.zeros((2, 2), np.uint32), 1)),
      ("query_words", lambda: index.lookup(idx, np.array([[16]], np.uint32), 1)),
      ("query_words", lambda: index.lookup(idx, q[:0], 1)),
      ("^r: ", lambda: index.lookup(idx, q, -1)),
      ("^r: ", lambda: index.lookup(idx, q, 1.0)),
      ("^r: ", lambda: index.lookup(idx, q, True)),
      ("^r: ", lambda: index.lookup(idx, q, np.ones(q.shape[0] + 1, np.int64))),
      ("method", lambda: index.lookup(idx, q, 1, method="faiss")),
      ("radius", lambda: index.choose_method(idx, -2)),
      ("radius", lambda: index.num_masks(4, -1)),
  ]
  for name, fn in cases:
    with pytest.raises(ValueError, match=name):
      fn()


def test_public_names_stay_importable():
  # The inverted index moved into the package hashjax.index; its names are still hashjax.index.<name>.
  from hashjax.index import inverted  # pylint: disable=g-import-not-at-top
  for name in ("InvertedIndex", "build_inverted_index", "lookup", "choose_method", "num_masks", "DIRECT_MAX_BITS",
               "MAX_FILTER_BITS", "COARSE_FILTER_BITS", "PROBE_COST_PER_SCANNED_CODE", "MAX_MASKS"):
    assert getattr(index, name) is getattr(inverted, name)
  assert index.RaggedNeighbors is search.RaggedNeighbors
