"""The accelerator kernels (compare-and-count histograms, weighted distances without tables) and the k-NN merge,
against brute-force numpy references. They run on any backend; on a CPU they are exercised directly or by
forcing the accelerator choice."""

import jax
import numpy as np
import pytest

from brute_force import ref_distances
from hashjax import evaluate
from hashjax import histograms
from hashjax._kernels import compare
from hashjax._kernels import scan
from hashjax._kernels import weighted


def _ref_histogram(d, levels, num_bits, num_levels):
  """``[Q, num_bits + 1, V]`` counts by ``np.add.at`` over every pair."""
  out = np.zeros((d.shape[0], num_bits + 1, num_levels), np.int64)
  rows = np.broadcast_to(np.arange(d.shape[0])[:, None], d.shape)
  np.add.at(out, (rows, d, 0 if levels is None else np.asarray(levels, np.int64)), 1)
  return out


def _ones(num_bits):
  """``uint32[W]``: every bit of the code set, the padding bits 0."""
  w = np.full(-(-num_bits // 32), 0xFFFFFFFF, np.uint32)
  if num_bits % 32:
    w[-1] = (1 << (num_bits % 32)) - 1
  return w


def _words(rng, rows, num_bits):
  return rng.integers(0, 2**32, (rows, -(-num_bits // 32)), dtype=np.uint32) & _ones(num_bits)


def _problem(rng, num_q, n, num_bits):
  """Codes with exact matches and complements, labels of 3 classes and affinity levels in [0, 3)."""
  q, x = _words(rng, num_q, num_bits), _words(rng, n, num_bits)
  x[:3] = q[0]
  x[3] = q[1] ^ _ones(num_bits)  # at distance num_bits
  return q, x, rng.integers(0, 3, num_q), rng.integers(0, 3, n), rng.integers(0, 3, (num_q, n))


@pytest.mark.parametrize("num_bits,chunk", [(40, 7), (5, 23)])  # 23 items: a tail of 2, and none
def test_compare_counts_match_brute_force(num_bits, chunk):
  q, x, ql, xl, aff = _problem(np.random.default_rng(num_bits), 5, 23, num_bits)
  d = ref_distances(q, x)
  run = lambda *levels, v: np.asarray(compare.counts(q, x, *levels, num_bits=num_bits, num_levels=v, chunk=chunk))
  np.testing.assert_array_equal(run(None, None, None, v=1), _ref_histogram(d, None, num_bits, 1))
  np.testing.assert_array_equal(run(None, ql, xl, v=2), _ref_histogram(d, ql[:, None] == xl, num_bits, 2))
  got = run(aff, None, None, v=3)
  assert got.dtype == np.int32
  np.testing.assert_array_equal(got, _ref_histogram(d, aff, num_bits, 3))


def test_histograms_and_evaluation_through_compare_and_count(monkeypatch):
  calls = []
  counts = compare.counts
  monkeypatch.setattr(compare, "on_accelerator", lambda *arrays: True)
  monkeypatch.setattr(compare, "counts", lambda *a, **kw: calls.append(kw["chunk"]) or counts(*a, **kw))
  monkeypatch.setattr(compare, "CHUNK_ITEMS", 8)  # 30 items: 3 chunks of 8 and a tail of 6
  num_bits = 40
  q, x, ql, xl, aff = _problem(np.random.default_rng(3), 4, 30, num_bits)
  d = ref_distances(q, x)
  got = histograms.hamming_histogram(q, x, num_bits=num_bits, query_labels=ql, db_labels=xl)
  np.testing.assert_array_equal(got, _ref_histogram(d, ql[:, None] == xl, num_bits, 2))
  got = histograms.hamming_histogram(q, x, aff, num_bits=num_bits)
  np.testing.assert_array_equal(got, _ref_histogram(d, aff, num_bits, 3))
  out = evaluate.evaluate_codes(q, x, num_bits=num_bits, query_labels=ql, db_labels=xl, k=5)
  assert calls == [8, 8, 8]
  ref = evaluate.evaluate_distances(d.astype(np.float32), query_labels=ql, db_labels=xl, k=5, radius=2)
  for key in ("tie_aware_ap", "tie_aware_ndcg", "optimistic_ap", "pessimistic_ap", "precision_at_radius",
              "recall_at_radius", "tie_aware_precision_at_k"):
    np.testing.assert_allclose(out[key], ref[key], rtol=1e-6, err_msg=key)


def test_on_accelerator_follows_the_device_of_the_arrays():
  on_cpu = jax.device_put(np.zeros((2, 1), np.uint32), jax.devices("cpu")[0])
  assert not compare.on_accelerator(on_cpu, np.zeros((2, 1), np.uint32))
  assert compare.on_accelerator(np.zeros((2, 1), np.uint32)) == (jax.default_backend() != "cpu")


def test_merge_sorted_breaks_ties_by_index_whatever_the_arrival_order():
  # The first list holds the higher indices at the tied distances: a merge on the distance alone keeps them first.
  d_a, i_a = np.array([[1, 1, 3]], np.int32), np.array([[5, 8, 9]], np.int32)
  d_b, i_b = np.array([[1, 2, 3]], np.int32), np.array([[2, 3, 4]], np.int32)
  d, i = scan.merge_sorted(d_a, i_a, d_b, i_b, 5)
  assert np.asarray(d).tolist() == [[1, 1, 1, 2, 3]]
  assert np.asarray(i).tolist() == [[2, 5, 8, 3, 4]]


def _ref_lookup_sum(xor, tables):
  """Weighted distances by numpy lookups of the byte tables, summed pairwise in float32 (the fixed order)."""
  xb = xor.astype("<u4").view(np.uint8).reshape(xor.shape[:-1] + (-1,))
  if tables.ndim == 2:
    entries = [tables[p][xb[..., p]] for p in range(xb.shape[-1])]
  else:
    rows = np.arange(tables.shape[0]).reshape((-1,) + (1,) * (xb.ndim - 2))
    entries = [tables[rows, p, xb[..., p]] for p in range(xb.shape[-1])]
  while len(entries) > 1:
    entries = [entries[i] + entries[i + 1] if i + 1 < len(entries) else entries[i]
               for i in range(0, len(entries), 2)]
  return entries[0]


@pytest.mark.parametrize("num_bits", [13, 72])
def test_bit_distances_are_the_table_lookups_bit_for_bit(num_bits):
  rng = np.random.default_rng(num_bits)
  num_words = -(-num_bits // 32)
  raw = rng.lognormal(0.0, 4.0, (3, num_bits)).astype(np.float32)  # magnitudes over many binades
  raw[:, ::5] = 0.0
  raw[:, 1] = 1e-40  # subnormal: counts as 0
  w = weighted.flush_weights(raw, num_words)
  tables = np.asarray(weighted.byte_tables(w))  # [3, 4 W, 256]
  xor = _words(rng, 3 * 50, num_bits).reshape(3, 50, num_words)
  xor[:, 0] = 0
  bits = jax.jit(weighted.bit_distances)
  got = np.asarray(bits(xor[0], w[0]))
  np.testing.assert_array_equal(got.view(np.uint32), _ref_lookup_sum(xor[0], tables[0]).view(np.uint32))
  got = np.asarray(bits(xor, w))
  np.testing.assert_array_equal(got.view(np.uint32), _ref_lookup_sum(xor, tables).view(np.uint32))
  np.testing.assert_array_equal(np.asarray(weighted.table_weights(tables)), w)
  got = np.asarray(jax.jit(weighted.table_distances)(xor, tables))
  np.testing.assert_array_equal(got.view(np.uint32), _ref_lookup_sum(xor, tables).view(np.uint32))
