"""Swap-delta matrices and task scores against brute-force references.

Every reference here is written from the paper's definitions with Python loops
(explicit swaps, explicit neighbour sets, enumeration of tie orders), never by
calling the implementation under test.
"""

import functools
import itertools
import math
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hashjax import objectives as obj
from hashjax.histograms import distance_histogram

# --------------------------------------------------------------------------- references


def ref_neighbors(d, k):
  """Indices in the k nearest non-empty bins (Nair Sec. 3.5.1)."""
  kept = sorted(set(int(x) for x in d))[:k]
  return [i for i, x in enumerate(d) if int(x) in kept]


def ref_count(d, a, k):
  return float(sum(a[i] for i in ref_neighbors(d, k)))


def ref_majority(d, pairs, C, k, ties):
  nb = ref_neighbors(d, k)
  lq = int(pairs[0]) // C
  votes = Counter(int(pairs[i]) % C for i in nb)
  top = max(votes.values())
  winners = [c for c, v in votes.items() if v == top]
  if lq not in winners:
    return 0.0
  if ties == "strict":
    return 1.0 if len(winners) == 1 else 0.0
  return 1.0 / len(winners)


def ref_hier(d, pairs, F, k):
  C = F.shape[0]
  return float(sum(F[int(pairs[i]) // C, int(pairs[i]) % C] for i in ref_neighbors(d, k)))


def ref_retrieval(d, a, radius):
  return float(sum(a[i] for i in range(len(d)) if d[i] <= radius))


def ref_regression(d, offsets, k, mode):
  nb = ref_neighbors(d, k)
  if mode == "pairs":
    return sum(offsets[i] ** 2 for i in nb) / len(nb)
  return (sum(offsets[i] for i in nb) / len(nb)) ** 2


def ap_of_order(rel, k=None):
  """AP (AP@k normalised by min(N+, k)) of one order."""
  k = len(rel) if k is None else k
  hits, total = 0, 0.0
  for t, r in enumerate(rel, 1):
    if r:
      hits += 1
      total += hits / t if t <= k else 0.0
  return total / min(hits, k) if hits else 0.0


def dcg_of_order(levels, k=None):
  m = len(levels) if k is None else min(k, len(levels))
  return sum((2.0 ** levels[t] - 1) / math.log2(t + 2) for t in range(m))


def tie_orders(d):
  """Every order of the documents sorted by distance (all orders within ties)."""
  bins = [[i for i in range(len(d)) if d[i] == v] for v in sorted(set(int(x) for x in d))]
  for perms in itertools.product(*(itertools.permutations(b) for b in bins)):
    yield [i for p in perms for i in p]


def ref_ap_enumerated(d, a, k=None):
  orders = list(tie_orders(d))
  return sum(ap_of_order([a[i] > 0 for i in o], k) for o in orders) / len(orders)


def ref_ndcg_enumerated(d, a, k=None):
  ideal = dcg_of_order(sorted(a, reverse=True), k)
  if ideal == 0:
    return 0.0
  orders = list(tie_orders(d))
  return sum(dcg_of_order([a[i] for i in o], k) for o in orders) / len(orders) / ideal


def ref_ap_formula(d, a):
  """He et al. eq. 3 with its explicit sum over positions t (for lists too long to enumerate)."""
  rel = [x > 0 for x in a]
  npos = sum(rel)
  if npos == 0:
    return 0.0
  total, before, pos_before = 0.0, 0, 0
  for v in sorted(set(int(x) for x in d)):
    members = [i for i in range(len(d)) if d[i] == v]
    n, p = len(members), sum(rel[i] for i in members)
    r = (p - 1) / (n - 1) if n > 1 else 0.0
    total += p / n * sum((pos_before + (t - before - 1) * r + 1) / t for t in range(before + 1, before + n + 1))
    before, pos_before = before + n, pos_before + p
  return total / npos


def ref_ndcg_formula(d, a, k=None):
  """He et al. eq. 4 with explicit sums over positions (cut at k)."""
  ideal = dcg_of_order(sorted(a, reverse=True), k)
  if ideal == 0:
    return 0.0
  total, before = 0.0, 0
  kk = len(d) if k is None else k
  for v in sorted(set(int(x) for x in d)):
    members = [i for i in range(len(d)) if d[i] == v]
    g = sum(2.0 ** a[i] - 1 for i in members) / len(members)
    total += g * sum(1 / math.log2(t + 1) for t in range(before + 1, min(before + len(members), kk) + 1))
    before += len(members)
  return total / ideal


def brute_swaps(score, d, a):
  """Delta S[a, b] by explicit swaps in Python."""
  d = [int(x) for x in d]
  n = len(d)
  base = score(d, a)
  out = np.zeros((n, n))
  for i in range(n):
    for j in range(n):
      if i != j:
        e = list(d)
        e[i], e[j] = e[j], e[i]
        out[i, j] = score(e, a) - base
  return out


def random_case(seed, n, num_bits, num_levels, *, spread=None):
  rng = np.random.default_rng(seed)
  hi = num_bits if spread is None else min(num_bits, spread)
  d = rng.integers(0, hi + 1, size=n).astype(np.int32)
  a = rng.integers(0, num_levels, size=n).astype(np.int32)
  return d, a


def as_list(x):
  return [x_.item() if hasattr(x_, "item") else x_ for x_ in np.asarray(x).tolist()]


# --------------------------------------------------------------------------- references check themselves


def test_ap_formula_reference_matches_enumeration():
  for seed in range(6):
    d, a = random_case(seed, 7, 3, 2)
    assert ref_ap_formula(d, list(a)) == pytest.approx(ref_ap_enumerated(d, list(a)), abs=1e-12)


def test_ndcg_formula_reference_matches_enumeration():
  for seed, k in itertools.product(range(4), (None, 3)):
    d, a = random_case(seed, 7, 3, 3)
    assert ref_ndcg_formula(d, list(a), k) == pytest.approx(ref_ndcg_enumerated(d, list(a), k), abs=1e-12)


# --------------------------------------------------------------------------- scores


def test_relative_threshold_paper_example():
  # Nair Sec. 3.5.1: nearest documents at 4, 7, 12, 17, 20 with k = 3 select 4, 7 and 12.
  d = np.array([17, 4, 12, 20, 7, 4])
  assert obj.nearest_bins_mask(d, k=3).tolist() == [False, True, True, False, True, True]
  # Fewer non-empty bins than k: everything.
  assert obj.nearest_bins_mask(np.array([2, 2, 5]), k=3).tolist() == [True, True, True]
  # Large k goes through the loop path (k > 16).
  d = np.arange(40)[::-1] % 25
  assert obj.nearest_bins_mask(d, k=20).tolist() == [x < 20 for x in d]


@pytest.mark.parametrize("seed", range(2))
def test_scores_match_references(seed):
  rng = np.random.default_rng(seed)
  n, C = 12, 3
  d = rng.integers(0, 9, size=n)
  rel = rng.integers(0, 2, size=n)
  labels = rng.integers(0, C, size=n)
  pairs = np.asarray(obj.label_pairs(np.array([1]), labels, num_classes=C))[0]
  F = rng.uniform(0, 1, size=(C, C))
  offsets = rng.normal(size=n)
  for k in (1, 3):
    assert float(obj.knn_count_score(d, rel, k=k)) == ref_count(d, rel, k)
    for ties in ("expected", "strict"):
      assert float(obj.knn_majority_score(d, pairs, num_classes=C, k=k, ties=ties)) == pytest.approx(
          ref_majority(d, pairs, C, k, ties))
    assert float(obj.hierarchical_score(d, pairs, similarity=F, k=k)) == pytest.approx(ref_hier(d, pairs, F, k),
                                                                                       rel=1e-6)
    for mode in ("pairs", "prediction"):
      assert float(obj.regression_score(d, offsets, k=k, mode=mode)) == pytest.approx(
          ref_regression(d, offsets, k, mode), rel=1e-5)
  for radius in (0, 3):
    assert float(obj.retrieval_score(d, rel, radius=radius)) == ref_retrieval(d, rel, radius)
  levels = rng.integers(0, 3, size=n)
  assert float(obj.average_precision_score(d, rel, num_bits=8)) == pytest.approx(ref_ap_formula(d, rel), abs=1e-5)
  for k in (None, 5):
    assert float(obj.ndcg_score(d, levels, num_bits=8, k=k)) == pytest.approx(
        ref_ndcg_formula(d, levels, k), abs=1e-5)


def test_hierarchical_with_identity_is_count():
  d, labels = random_case(7, 15, 6, 4)
  pairs = np.asarray(obj.label_pairs(np.array([2]), labels, num_classes=4))[0]
  rel = np.asarray(obj.pair_relevance(pairs, num_classes=4))
  assert rel.tolist() == [int(x == 2) for x in labels]
  assert float(obj.hierarchical_score(d, pairs, similarity=np.eye(4), k=2)) == ref_count(d, rel, 2)


def test_batched_scores_equal_per_row():
  rng = np.random.default_rng(3)
  d = rng.integers(0, 6, size=(4, 10))
  rel = rng.integers(0, 2, size=(4, 10))
  batched = np.asarray(obj.knn_count_score(d, rel, k=2))
  ap = np.asarray(obj.average_precision_score(d, rel, num_bits=6))
  for q in range(4):
    assert batched[q] == ref_count(d[q], rel[q], 2)
    assert ap[q] == pytest.approx(ref_ap_formula(d[q], rel[q]), abs=1e-5)


def test_histogram_forms_match_references():
  rng = np.random.default_rng(11)
  n, b, C = 14, 6, 3
  for _ in range(3):
    d = rng.integers(0, b + 1, size=n)
    levels = rng.integers(0, 3, size=n)
    labels = rng.integers(0, C, size=n)
    lq = int(rng.integers(0, C))
    F = rng.uniform(size=(C, C))
    h3 = distance_histogram(d, levels, num_bits=b, num_levels=3)
    hl = distance_histogram(d, labels, num_bits=b, num_levels=C)
    pairs = [lq * C + int(x) for x in labels]
    for k in (1, 3):
      assert float(obj.knn_count_from_histogram(h3, k=k)) == ref_count(d, levels, k)
      assert float(obj.knn_majority_from_histogram(hl, query_label=lq, k=k)) == pytest.approx(
          ref_majority(d, pairs, C, k, "expected"))
      assert float(obj.hierarchical_from_histogram(hl, query_label=lq, similarity=F, k=k)) == pytest.approx(
          ref_hier(d, pairs, F, k), rel=1e-6)
    assert float(obj.retrieval_from_histogram(h3, radius=2)) == ref_retrieval(d, levels, 2)
    assert float(obj.average_precision_from_histogram(h3)) == pytest.approx(ref_ap_formula(d, levels), abs=1e-5)
    assert float(obj.ndcg_from_histogram(h3, k=4)) == pytest.approx(ref_ndcg_formula(d, levels, 4), abs=1e-5)


def test_no_relevant_documents_score_zero():
  d = np.array([0, 1, 2])
  z = np.zeros(3, np.int32)
  assert float(obj.average_precision_score(d, z, num_bits=2)) == 0.0
  assert float(obj.ndcg_score(d, z, num_bits=2)) == 0.0
  assert float(obj.average_precision_from_histogram(np.zeros((3, 2), np.int32))) == 0.0


# --------------------------------------------------------------------------- swap deltas: every shipped score

_JITTED = {}


def _jitted_swaps(name, score_fn, deltas_fn, d, a, method):
  """The swap matrix by ``method`` ("closed": the named closed form; "generic": ``swap_deltas``),
  jitted once per named score and method (the seeds reuse it)."""
  if (name, method) not in _JITTED:
    fn = deltas_fn if method == "closed" else (lambda d_, a_: obj.swap_deltas(score_fn, d_, a_))
    _JITTED[name, method] = jax.jit(fn)
  return np.asarray(_JITTED[name, method](d, a))


_N, _B, _C = 16, 8, 3
_F = np.random.default_rng(0).uniform(size=(_C, _C)).astype(np.float32)
_P = functools.partial
# (name, score_fn, its closed form, reference, which affinity it reads, tolerance)
_SHIPPED = [
    ("count_k1", _P(obj.knn_count_score, k=1), _P(obj.knn_count_deltas, k=1), lambda e, a: ref_count(e, a, 1),
     "rel", 0),
    ("count_k3", _P(obj.knn_count_score, k=3), _P(obj.knn_count_deltas, k=3), lambda e, a: ref_count(e, a, 3),
     "rel", 0),
    ("majority_exp", _P(obj.knn_majority_score, num_classes=_C, k=3), _P(obj.knn_majority_deltas, num_classes=_C, k=3),
     lambda e, a: ref_majority(e, a, _C, 3, "expected"), "pairs", 1e-6),
    ("majority_strict", _P(obj.knn_majority_score, num_classes=_C, k=2, ties="strict"),
     _P(obj.knn_majority_deltas, num_classes=_C, k=2, ties="strict"),
     lambda e, a: ref_majority(e, a, _C, 2, "strict"), "pairs", 0),
    ("hier", _P(obj.hierarchical_score, similarity=_F, k=3), _P(obj.hierarchical_deltas, similarity=_F, k=3),
     lambda e, a: ref_hier(e, a, _F, 3), "pairs", 1e-5),
    ("regression_pairs", _P(obj.regression_score, k=2), _P(obj.regression_deltas, k=2),
     lambda e, a: ref_regression(e, a, 2, "pairs"), "offsets", 1e-4),
    ("regression_pred", _P(obj.regression_score, k=3, mode="prediction"),
     _P(obj.regression_deltas, k=3, mode="prediction"),
     lambda e, a: ref_regression(e, a, 3, "prediction"), "offsets", 1e-4),
    ("retrieval", _P(obj.retrieval_score, radius=2), _P(obj.retrieval_deltas, radius=2),
     lambda e, a: ref_retrieval(e, a, 2), "levels", 0),
    ("ap", _P(obj.average_precision_score, num_bits=_B), _P(obj.average_precision_deltas, num_bits=_B),
     ref_ap_formula, "rel", 1e-5),
    ("ndcg", _P(obj.ndcg_score, num_bits=_B, num_levels=3, k=5), _P(obj.ndcg_deltas, num_bits=_B, num_levels=3, k=5),
     lambda e, a: ref_ndcg_formula(e, a, 5), "levels", 1e-5),
]


def test_every_shipped_score_has_a_named_closed_form():
  # One closed form per shipped score, named after it and exported next to it.
  closed = {name for name in obj.swap.__all__ if name.endswith("_deltas")} - {"swap_deltas", "histogram_swap_deltas"}
  scores = {name for name in obj.scores.__all__ if name.endswith("_score")}
  assert {name[:-len("_deltas")] for name in closed} == {name[:-len("_score")] for name in scores}
  assert {case[2].func.__name__ for case in _SHIPPED} == closed
  assert all(hasattr(obj, name) for name in closed)


def _random_affinities(rng):
  labels = rng.integers(0, _C, size=_N)
  return {
      "rel": rng.integers(0, 2, size=_N).astype(np.int32),
      "levels": rng.integers(0, 3, size=_N).astype(np.int32),
      "pairs": np.asarray(obj.label_pairs(np.array([int(rng.integers(0, _C))]), labels, num_classes=_C))[0],
      "offsets": rng.normal(size=_N).astype(np.float32),
  }


@pytest.mark.parametrize("method", ["closed", "generic"])
def test_swap_deltas_every_shipped_score(method):
  # "closed": the shipped scores' named closed forms; "generic": swap_deltas, vmap over swapped rankings.
  nonzero = Counter()
  for seed in range(3):
    rng = np.random.default_rng(100 + seed)
    d = rng.integers(0, _B + 1, size=_N).astype(np.int32)
    affinity = _random_affinities(rng)
    for name, score_fn, deltas_fn, ref, kind, tol in _SHIPPED:
      a = affinity[kind]
      want = brute_swaps(ref, d, a)
      np.testing.assert_allclose(_jitted_swaps(name, score_fn, deltas_fn, d, a, method), want, atol=tol, rtol=0,
                                 err_msg=name)
      nonzero[name] += np.count_nonzero(want)
  # Every case exercises non-trivial swaps (a test of zeros against zeros could not fail).
  assert min(nonzero.values()) > 0, nonzero


def _edge_cases():
  """(label, distances) with ties, one bin, all bins distinct, fewer bins than k, and one or two documents."""
  return [
      ("one bin", np.full(7, 3, np.int32)),
      ("two bins", np.array([0, 5, 0, 5, 5, 0, 5], np.int32)),
      ("distinct", np.array([8, 0, 6, 1, 3, 7, 2], np.int32)),
      ("heavy ties", np.array([2, 2, 2, 2, 6, 6, 1], np.int32)),
      ("far", np.array([8, 8, 7, 8, 7, 8, 8], np.int32)),
      ("one document", np.array([4], np.int32)),
      ("two documents", np.array([1, 6], np.int32)),
  ]


def test_closed_forms_equal_generic_path_and_loop_on_edge_cases():
  # Ties, empty neighbour boundaries, no relevant document, every document relevant: the closed form, the
  # generic path and the loop over pairs agree, in the score's dtype.
  rng = np.random.default_rng(7)
  for label, d in _edge_cases():
    n = d.shape[0]
    labels = rng.integers(0, _C, size=n)
    variants = {
        "rel": [rng.integers(0, 2, size=n).astype(np.int32), np.zeros(n, np.int32), np.ones(n, np.int32)],
        "levels": [rng.integers(0, 3, size=n).astype(np.int32), np.zeros(n, np.int32), np.full(n, 2, np.int32)],
        "pairs": [np.asarray(obj.label_pairs(np.array([1]), labels, num_classes=_C))[0],
                  np.asarray(obj.label_pairs(np.array([0]), np.zeros(n, np.int32), num_classes=_C))[0]],
        "offsets": [rng.normal(size=n).astype(np.float32), np.zeros(n, np.float32)],
    }
    for name, score_fn, deltas_fn, ref, kind, tol in _SHIPPED:
      for a in variants[kind]:
        closed = _jitted_swaps(name, score_fn, deltas_fn, d, a, "closed")
        generic = _jitted_swaps(name, score_fn, deltas_fn, d, a, "generic")
        assert closed.shape == (n, n) and closed.dtype == generic.dtype, (label, name)
        want = brute_swaps(ref, d, a)
        np.testing.assert_allclose(np.asarray(closed), want, atol=tol, rtol=0, err_msg=f"{label}: {name}")
        np.testing.assert_allclose(np.asarray(generic), want, atol=tol, rtol=0, err_msg=f"{label}: {name}")


def test_wrapped_shipped_scores_through_swap_deltas_equal_closed_forms():
  # A user's own wrapper of a shipped score (a lambda, a partial of a partial, a renamed function) goes
  # through swap_deltas's generic path and gives the named closed form's matrix.
  rng = np.random.default_rng(12)
  d = rng.integers(0, _B + 1, size=_N).astype(np.int32)
  affinity = _random_affinities(rng)

  def my_ap(dist, a):
    return obj.average_precision_score(dist, a, num_bits=_B)

  wrapped = [
      (lambda x, a: obj.knn_count_score(x, a, k=2), _P(obj.knn_count_deltas, k=2), "rel", 0),
      (_P(_P(obj.knn_majority_score, num_classes=_C), k=3), _P(obj.knn_majority_deltas, num_classes=_C, k=3),
       "pairs", 1e-6),
      (_P(_P(obj.hierarchical_score, similarity=_F), k=2), _P(obj.hierarchical_deltas, similarity=_F, k=2),
       "pairs", 1e-5),
      (lambda x, a: obj.retrieval_score(x, a, radius=3), _P(obj.retrieval_deltas, radius=3), "levels", 0),
      (lambda x, a: obj.regression_score(x, a, k=2, mode="prediction"), _P(obj.regression_deltas, k=2,
                                                                           mode="prediction"), "offsets", 1e-5),
      (my_ap, _P(obj.average_precision_deltas, num_bits=_B), "rel", 1e-5),
      (_P(_P(obj.ndcg_score, num_bits=_B), num_levels=3), _P(obj.ndcg_deltas, num_bits=_B, num_levels=3),
       "levels", 1e-5),
  ]
  for score_fn, deltas_fn, kind, tol in wrapped:
    a = affinity[kind]
    via_swap = np.asarray(jax.jit(lambda x, y, f=score_fn: obj.swap_deltas(f, x, y))(d, a))
    np.testing.assert_allclose(via_swap, np.asarray(jax.jit(deltas_fn)(d, a)), atol=tol, rtol=0,
                               err_msg=deltas_fn.func.__name__)
    assert np.count_nonzero(via_swap) > 0, deltas_fn.func.__name__


@pytest.mark.parametrize("method", ["closed", "generic"])
def test_swap_deltas_tie_aware_scores_enumerated_x64(method):
  # Small lists: compare with the mean over every tie order, in float64. The last case has no
  # relevant document: AP/NDCG are undefined, scored 0, so every swap weight is 0.
  def swaps(score_fn, deltas_fn):
    return jax.jit(deltas_fn if method == "closed" else lambda d_, a_: obj.swap_deltas(score_fn, d_, a_))

  with jax.enable_x64(True):
    ap = swaps(_P(obj.average_precision_score, num_bits=3), _P(obj.average_precision_deltas, num_bits=3))
    ap3 = swaps(_P(obj.average_precision_score, num_bits=3, k=3), _P(obj.average_precision_deltas, num_bits=3, k=3))
    ndcg4 = swaps(_P(obj.ndcg_score, num_bits=3, num_levels=3, k=4), _P(obj.ndcg_deltas, num_bits=3, num_levels=3,
                                                                         k=4))
    ndcg = swaps(_P(obj.ndcg_score, num_bits=3, num_levels=3), _P(obj.ndcg_deltas, num_bits=3, num_levels=3))
    ndcg_hist = jax.jit(lambda d_, a_: obj.histogram_swap_deltas(obj.ndcg_from_histogram, d_, a_, num_bits=3,
                                                                 num_levels=3))
    ap3_hist = jax.jit(lambda d_, a_: obj.histogram_swap_deltas(
        _P(obj.average_precision_from_histogram, k=3), d_, a_, num_bits=3, num_levels=2))
    cases = [random_case(seed, 6, 3, 3) for seed in range(2)] + [(random_case(9, 6, 3, 3)[0], np.zeros(6, np.int32))]
    for d, a in cases:
      rel = (a > 0).astype(np.int32)
      got_ap = np.asarray(ap(d, rel))
      assert got_ap.dtype == np.float64
      np.testing.assert_allclose(got_ap, brute_swaps(ref_ap_enumerated, d, list(rel)), atol=1e-12)
      want = brute_swaps(ref_ndcg_enumerated, d, list(a))
      np.testing.assert_allclose(np.asarray(ndcg(d, a)), want, atol=1e-12)
      np.testing.assert_allclose(np.asarray(ndcg_hist(d, a)), want, atol=1e-12)
      want_ap3 = brute_swaps(lambda e, r: ref_ap_enumerated(e, r, 3), d, list(rel))
      np.testing.assert_allclose(np.asarray(ap3_hist(d, rel)), want_ap3, atol=1e-12)
      np.testing.assert_allclose(np.asarray(ap3(d, rel)), want_ap3, atol=1e-12)
      np.testing.assert_allclose(np.asarray(ndcg4(d, a)), brute_swaps(lambda e, r: ref_ndcg_enumerated(e, r, 4), d,
                                                                      list(a)), atol=1e-12)
    assert not np.any(np.isnan(np.asarray(ap(*cases[-1]))))


def _check_generic(score_fn, ref, d, a, *, atol=1e-5):
  got = np.asarray(jax.jit(lambda d_, a_: obj.swap_deltas(score_fn, d_, a_))(d, a))
  want = brute_swaps(ref, d, a)
  np.testing.assert_allclose(got, want, atol=atol, rtol=0)
  return want


def test_swap_deltas_custom_score_functions():
  rng = np.random.default_rng(5)
  n, C = 20, 4
  d = rng.integers(0, 7, size=n).astype(np.int32)
  rel = rng.integers(0, 2, size=n).astype(np.int32)

  # Precision in the top 2 bins (absolute), a user's own function.
  def precision_top2(dist, a):
    inside = dist <= 1
    return jnp.sum(jnp.where(inside, a, 0)) / jnp.maximum(jnp.sum(inside), 1)

  def ref_precision_top2(dist, a):
    inside = [i for i in range(len(dist)) if dist[i] <= 1]
    return sum(a[i] for i in inside) / max(len(inside), 1)

  _check_generic(precision_top2, ref_precision_top2, d, rel)

  # A cost matrix between the predicted (majority, lowest label on ties) and the true class.
  labels = rng.integers(0, C, size=n).astype(np.int32)
  cost = rng.uniform(size=(C, C)).astype(np.float32)
  lq = 2

  def cost_score(dist, lab):
    near = dist <= jnp.min(dist) + 1
    votes = jnp.sum(jax.nn.one_hot(lab, C) * near[:, None], axis=0)
    return -jnp.asarray(cost)[lq, jnp.argmax(votes)]

  def ref_cost(dist, lab):
    near = [i for i in range(len(dist)) if dist[i] <= min(dist) + 1]
    votes = Counter(int(lab[i]) for i in near)
    top = max(votes.values())
    return -float(cost[lq, min(c for c, v in votes.items() if v == top)])

  w = _check_generic(cost_score, ref_cost, d, labels)
  assert np.count_nonzero(w) > 0


def _frac_top2(h):
  """A custom histogram score: relevant fraction of the two nearest non-empty bins."""
  top = (jnp.cumsum(h.sum(-1) > 0) <= 2)[:, None]
  inside = jnp.where(top, h, 0)
  return inside[:, 1:].sum() / inside.sum()


def _ref_frac_top2(e, a):
  nb = ref_neighbors(e, 2)
  return sum(a[i] > 0 for i in nb) / len(nb)


@pytest.mark.parametrize("method", ["table", "pairs"])
def test_histogram_swap_deltas_match_brute_force(method):
  rng = np.random.default_rng(21)
  n, b, C = 18, 5, 3
  lq = 1
  F = rng.uniform(size=(C, C)).astype(np.float32)
  cases = [  # (name, hist score, reference on (distances, affinity), affinity kind, num_levels)
      ("count", functools.partial(obj.knn_count_from_histogram, k=2), lambda e, a: ref_count(e, a, 2), "levels", 3),
      ("majority", functools.partial(obj.knn_majority_from_histogram, query_label=lq, k=3),
       lambda e, a: ref_majority(e, [lq * C + int(x) for x in a], C, 3, "expected"), "labels", C),
      ("hier", functools.partial(obj.hierarchical_from_histogram, query_label=lq, similarity=F, k=1),
       lambda e, a: ref_hier(e, [lq * C + int(x) for x in a], F, 1), "labels", C),
      ("retrieval", functools.partial(obj.retrieval_from_histogram, radius=1), lambda e, a: ref_retrieval(e, a, 1),
       "levels", 3),
      ("ap", obj.average_precision_from_histogram, ref_ap_formula, "levels", 3),
      ("ndcg", functools.partial(obj.ndcg_from_histogram, k=7), lambda e, a: ref_ndcg_formula(e, a, 7), "levels", 3),
      ("custom", _frac_top2, _ref_frac_top2, "levels", 3),
  ]
  compiled = {name: jax.jit(lambda d_, a_, g=g, V=V: obj.histogram_swap_deltas(
      g, d_, a_, num_bits=b, num_levels=V, method=method)) for name, g, _, _, V in cases}
  for _ in range(2):
    d = rng.integers(0, b + 1, size=n).astype(np.int32)
    affinity = {"levels": rng.integers(0, 3, size=n).astype(np.int32),
                "labels": rng.integers(0, C, size=n).astype(np.int32)}
    for name, _, ref, kind, _ in cases:
      a = affinity[kind]
      np.testing.assert_allclose(np.asarray(compiled[name](d, a)), brute_swaps(ref, d, a), atol=1e-5, rtol=0,
                                 err_msg=name)


def test_histogram_swap_deltas_linear_method():
  # Exact for scores affine in the histogram at fixed bin and level totals ...
  rng = np.random.default_rng(22)
  n, b, C = 18, 5, 3
  lq = 2
  F = rng.uniform(size=(C, C)).astype(np.float32)
  exact = [
      (functools.partial(obj.knn_count_from_histogram, k=2), lambda e, a: ref_count(e, a, 2), "levels", 3),
      (functools.partial(obj.hierarchical_from_histogram, query_label=lq, similarity=F, k=3),
       lambda e, a: ref_hier(e, [lq * C + int(x) for x in a], F, 3), "labels", C),
      (functools.partial(obj.retrieval_from_histogram, radius=2), lambda e, a: ref_retrieval(e, a, 2), "levels", 3),
      (_frac_top2, _ref_frac_top2, "levels", 3),
  ]
  inexact = [
      (functools.partial(obj.knn_majority_from_histogram, query_label=lq, k=3),
       lambda e, a: ref_majority(e, [lq * C + int(x) for x in a], C, 3, "expected"), "labels", C),
  ]
  d = rng.integers(0, b + 1, size=n).astype(np.int32)
  affinity = {"levels": rng.integers(0, 3, size=n).astype(np.int32),
              "labels": rng.integers(0, C, size=n).astype(np.int32)}
  for g, ref, kind, V in exact:
    got = obj.histogram_swap_deltas(g, d, affinity[kind], num_bits=b, num_levels=V, method="linear")
    np.testing.assert_allclose(np.asarray(got), brute_swaps(ref, d, affinity[kind]), atol=1e-5, rtol=0)
  # ... and documented as wrong for the majority vote: the brute-force check notices.
  for g, ref, kind, V in inexact:
    got = obj.histogram_swap_deltas(g, d, affinity[kind], num_bits=b, num_levels=V, method="linear")
    assert not np.allclose(np.asarray(got), brute_swaps(ref, d, affinity[kind]), atol=1e-3)
  # The metrics module's AP reads integer histograms only: refused, not silently wrong.
  with pytest.raises(ValueError, match="hist"):
    obj.histogram_swap_deltas(obj.average_precision_from_histogram, d, affinity["levels"], num_bits=b,
                              num_levels=3, method="linear")


def test_swap_deltas_vmap_over_queries_and_edge_sizes():
  rng = np.random.default_rng(8)
  d = rng.integers(0, 5, size=(3, 9)).astype(np.int32)
  a = rng.integers(0, 2, size=(3, 9)).astype(np.int32)
  s = functools.partial(obj.knn_count_score, k=2)
  many = np.asarray(jax.jit(jax.vmap(lambda x, y: obj.swap_deltas(s, x, y)))(d, a))
  fast = np.asarray(jax.jit(jax.vmap(lambda x, y: obj.histogram_swap_deltas(
      functools.partial(obj.knn_count_from_histogram, k=2), x, y, num_bits=4, num_levels=2)))(d, a))
  closed = np.asarray(jax.jit(jax.vmap(functools.partial(obj.knn_count_deltas, k=2)))(d, a))
  ap = np.asarray(jax.jit(jax.vmap(functools.partial(obj.average_precision_deltas, num_bits=4)))(d, a))
  for q in range(3):
    want = brute_swaps(lambda e, r: ref_count(e, r, 2), d[q], a[q])
    np.testing.assert_array_equal(many[q], want)
    np.testing.assert_array_equal(fast[q], want)
    np.testing.assert_array_equal(closed[q], want)
    np.testing.assert_allclose(ap[q], brute_swaps(ref_ap_formula, d[q], a[q]), atol=1e-6, rtol=0)
  one = obj.swap_deltas(s, np.array([3]), np.array([1]))
  assert one.shape == (1, 1) and float(one[0, 0]) == 0.0
  for deltas_fn in (functools.partial(obj.knn_count_deltas, k=2), functools.partial(obj.retrieval_deltas, radius=1),
                    functools.partial(obj.average_precision_deltas, num_bits=4),
                    functools.partial(obj.ndcg_deltas, num_bits=4, num_levels=2)):
    one = jax.jit(deltas_fn)(np.array([3]), np.array([1]))
    assert one.shape == (1, 1) and float(one[0, 0]) == 0.0
  assert obj.histogram_swap_deltas(obj.average_precision_from_histogram, np.array([3]), np.array([1]),
                                   num_bits=4, num_levels=2).shape == (1, 1)


# --------------------------------------------------------------------------- bad inputs


def test_bad_inputs_swap():
  s = functools.partial(obj.knn_count_score, k=1)
  d, a = np.array([0, 1, 2]), np.array([1, 0, 1])
  with pytest.raises(ValueError, match="score_fn"):
    obj.swap_deltas("not a function", d, a)
  with pytest.raises(ValueError, match="distances"):
    obj.swap_deltas(s, np.array([0.5, 1.0, 2.0]), a)
  with pytest.raises(ValueError, match="distances"):
    obj.swap_deltas(s, np.array([-1, 1, 2]), a)
  with pytest.raises(ValueError, match="distances"):
    obj.swap_deltas(s, np.zeros((2, 3), np.int32), a)
  with pytest.raises(ValueError, match="distances"):
    obj.swap_deltas(s, np.zeros((0,), np.int32), np.zeros((0,), np.int32))
  with pytest.raises(ValueError, match="affinity"):
    obj.swap_deltas(s, d, np.array([1, 0]))
  with pytest.raises(ValueError, match="score_fn"):
    obj.swap_deltas(lambda x, y: x.astype(float), d, a)  # not a scalar
  with pytest.raises(ValueError, match="k"):  # the score checks its options
    obj.swap_deltas(functools.partial(obj.knn_count_score, k=0), d, a)
  with pytest.raises(ValueError, match="affinity"):
    obj.swap_deltas(functools.partial(obj.knn_majority_score, num_classes=2), d, np.array([0, 5, 1]))
  # The closed forms check what their scores check.
  with pytest.raises(ValueError, match="k"):
    obj.knn_count_deltas(d, a, k=0)
  with pytest.raises(ValueError, match="distances"):
    obj.knn_count_deltas(np.zeros((2, 3), np.int32), a)
  with pytest.raises(ValueError, match="distances"):
    obj.retrieval_deltas(np.array([0.5, 1.0, 2.0]), a, radius=1)
  with pytest.raises(ValueError, match="radius"):
    obj.retrieval_deltas(d, a, radius=-1)
  with pytest.raises(ValueError, match="affinity"):
    obj.retrieval_deltas(d, np.array([1, 0]), radius=1)
  with pytest.raises(ValueError, match="affinity"):
    obj.knn_majority_deltas(d, np.array([0, 5, 1]), num_classes=2)
  with pytest.raises(ValueError, match="num_classes"):
    obj.knn_majority_deltas(d, a, num_classes=0)
  with pytest.raises(ValueError, match="ties"):
    obj.knn_majority_deltas(d, a, num_classes=2, ties="random")
  with pytest.raises(ValueError, match="similarity"):
    obj.hierarchical_deltas(d, a, similarity=np.ones((2, 3)))
  with pytest.raises(ValueError, match="mode"):
    obj.regression_deltas(d, a.astype(float), mode="mse")
  with pytest.raises(ValueError, match="affinity"):
    obj.regression_deltas(d, np.array([1.0, np.nan, 0.0]))
  with pytest.raises(ValueError, match="distances"):
    obj.average_precision_deltas(d, a, num_bits=1)
  with pytest.raises(ValueError, match="num_bits"):
    obj.average_precision_deltas(d, a, num_bits=0)
  with pytest.raises(ValueError, match="affinity"):
    obj.ndcg_deltas(d, np.array([1, -1, 0]), num_bits=2)
  with pytest.raises(ValueError, match="k"):
    obj.ndcg_deltas(d, a, num_bits=2, k=0)
  with pytest.raises(ValueError, match="num_levels"):  # traced affinity: the number of levels must be given
    jax.jit(functools.partial(obj.ndcg_deltas, num_bits=2))(d, a)
  g = functools.partial(obj.knn_count_from_histogram, k=1)
  with pytest.raises(ValueError, match="num_bits"):
    obj.histogram_swap_deltas(g, d, a, num_bits=0, num_levels=2)
  with pytest.raises(ValueError, match="distances"):
    obj.histogram_swap_deltas(g, d, a, num_bits=1, num_levels=2)
  with pytest.raises(ValueError, match="num_levels"):
    obj.histogram_swap_deltas(g, d, a, num_bits=2, num_levels=0)
  with pytest.raises(ValueError, match="affinity"):
    obj.histogram_swap_deltas(g, d, np.array([0, 2, 1]), num_bits=2, num_levels=2)
  with pytest.raises(ValueError, match="affinity"):
    obj.histogram_swap_deltas(g, d, np.array([0.0, 1.0, 1.0]), num_bits=2, num_levels=2)
  with pytest.raises(ValueError, match="method"):
    obj.histogram_swap_deltas(g, d, a, num_bits=2, num_levels=2, method="fast")
  with pytest.raises(ValueError, match="hist_score_fn"):
    obj.histogram_swap_deltas(None, d, a, num_bits=2, num_levels=2)


def test_bad_inputs_scores():
  d, a = np.array([0, 1, 2]), np.array([1, 0, 1])
  with pytest.raises(ValueError, match="k"):
    obj.knn_count_score(d, a, k=0)
  with pytest.raises(ValueError, match="affinity"):
    obj.knn_count_score(d, np.array([1, 0]))
  with pytest.raises(ValueError, match="affinity"):
    obj.knn_count_score(d, np.array([1.0, np.nan, 0.0]))
  with pytest.raises(ValueError, match="distances"):
    obj.knn_count_score(np.array([True, False, True]), a)
  with pytest.raises(ValueError, match="affinity"):
    obj.knn_majority_score(d, np.array([0, 1, 9]), num_classes=3)
  with pytest.raises(ValueError, match="num_classes"):
    obj.knn_majority_score(d, a, num_classes=0)
  with pytest.raises(ValueError, match="ties"):
    obj.knn_majority_score(d, a, num_classes=2, ties="random")
  with pytest.raises(ValueError, match="similarity"):
    obj.hierarchical_score(d, a, similarity=np.ones((2, 3)))
  with pytest.raises(ValueError, match="radius"):
    obj.retrieval_score(d, a, radius=-1)
  with pytest.raises(ValueError, match="mode"):
    obj.regression_score(d, a.astype(float), mode="mse")
  with pytest.raises(ValueError, match="distances"):
    obj.average_precision_score(d, a, num_bits=1)
  with pytest.raises(ValueError, match="affinity"):
    obj.ndcg_score(d, np.array([1, -1, 0]), num_bits=2)
  with pytest.raises(ValueError, match="k"):
    obj.ndcg_score(d, a, num_bits=2, k=0)
  with pytest.raises(ValueError, match="hist"):
    obj.knn_count_from_histogram(np.array([1, 2, 3]))
  with pytest.raises(ValueError, match="hist"):
    obj.average_precision_from_histogram(np.array([[1, -1], [0, 0]]))
  with pytest.raises(ValueError, match="query_label"):
    obj.knn_majority_from_histogram(np.ones((3, 2), np.int32), query_label=2)
  with pytest.raises(ValueError, match="hist"):
    obj.hierarchical_from_histogram(np.ones((3, 2), np.int32), query_label=0, similarity=np.eye(3))
  with pytest.raises(ValueError, match="num_classes"):
    obj.label_pairs(np.array([0]), np.array([1]), num_classes=0)
  with pytest.raises(ValueError, match="doc_labels"):
    obj.label_pairs(np.array([0]), np.array([1, 5]), num_classes=3)
  with pytest.raises(ValueError, match="doc_labels"):
    obj.label_pairs(np.array([0, 1]), np.zeros((3, 2), np.int32), num_classes=3)
  with pytest.raises(ValueError, match="doc_targets"):
    obj.target_offsets(np.array([0.0]), np.array([np.inf]))
  with pytest.raises(ValueError, match="pairs"):
    obj.pair_relevance(np.array([0, 9]), num_classes=3)


# --------------------------------------------------------------------------- negative affinity


def _assert_negative_rejected(fn, smallest):
  """``fn()`` raises one line naming ``affinity`` (or ``similarity``), asking for non-negative values and
  showing ``smallest``, the smallest value passed."""
  with pytest.raises(ValueError) as info:
    fn()
  message = str(info.value)
  assert message.split(":")[0] in ("affinity", "similarity") and "expected non-negative" in message, message
  assert f"smallest value of {smallest}" in message and "\n" not in message, message


def test_negative_relevance_is_rejected_by_every_score_that_reads_relevance():
  d = np.array([0, 1, 2, 2, 5], np.int32)
  neg_int = np.array([1, 0, -3, 1, 0], np.int32)
  neg_real = np.array([0.5, 0.0, 1.0, -0.25, 1.0], np.float32)
  pairs = np.array([0, 1, 3, 2, 0], np.int32)  # label_pairs codes for C = 2
  F = np.eye(2, dtype=np.float32)
  cases = [  # (call, smallest value passed)
      (lambda: obj.swap_deltas(_P(obj.knn_count_score, k=2), d, neg_int), -3),
      (lambda: obj.swap_deltas(_P(obj.retrieval_score, radius=1), d, neg_real), -0.25),
      (lambda: obj.swap_deltas(_P(obj.average_precision_score, num_bits=5), d, neg_int), -3),
      (lambda: obj.swap_deltas(_P(obj.ndcg_score, num_bits=5), d, neg_int), -3),
      (lambda: obj.swap_deltas(_P(obj.hierarchical_score, similarity=F, k=2), d, pairs - 1), -1),
      (lambda: obj.swap_deltas(_P(obj.knn_majority_score, num_classes=2), d, pairs - 1), -1),
      (lambda: obj.knn_count_deltas(d, neg_int, k=2), -3),
      (lambda: obj.knn_count_deltas(d, neg_real, k=2), -0.25),
      (lambda: obj.retrieval_deltas(d, neg_int, radius=1), -3),
      (lambda: obj.hierarchical_deltas(d, pairs - 1, similarity=F), -1),
      (lambda: obj.hierarchical_deltas(d, pairs, similarity=F - 0.5), -0.5),
      (lambda: obj.knn_majority_deltas(d, pairs - 1, num_classes=2), -1),
      (lambda: obj.ndcg_deltas(d, neg_int, num_bits=5), -3),
      (lambda: obj.average_precision_deltas(d, neg_int, num_bits=5), -3),
      (lambda: obj.histogram_swap_deltas(obj.ndcg_from_histogram, d, neg_int, num_bits=5, num_levels=2), -3),
      (lambda: obj.knn_count_score(d, neg_real, k=1), -0.25),
      (lambda: obj.hierarchical_score(d, pairs, similarity=F - 0.5), -0.5),
  ]
  for call, smallest in cases:
    _assert_negative_rejected(call, smallest)


def test_signed_regression_offsets_are_accepted():
  # Nair eq. 11 reads offsets t_i - t_q, negative for every document below the query's target.
  d = np.array([0, 1, 1, 3], np.int32)
  offsets = np.array([-1.0, 2.0, -0.5, 4.0], np.float32)
  for mode in ("pairs", "prediction"):
    got = np.asarray(obj.regression_deltas(d, offsets, k=2, mode=mode))
    want = brute_swaps(lambda e, a: ref_regression(e, a, 2, mode), d, list(offsets))
    np.testing.assert_allclose(got, want, atol=1e-5)
    np.testing.assert_allclose(np.asarray(obj.swap_deltas(_P(obj.regression_score, k=2, mode=mode), d, offsets)),
                               want, atol=1e-5)
