"""Tie-aware metrics of real-valued distances (``num_bits`` left out) against independent references.

* Tiny rankings: the mean (and, for the AP bounds, the min / max) of the ordinary metric over EVERY order
  of the items consistent with the distances (each group of equal values permuted), enumerated with
  itertools in pure python; to 1e-9 in float64.
* Longer rankings with many ties: He et al.'s eqs. 3-4 summed rank by rank (tests/brute_force.py) over a
  histogram of the distinct values built by np.unique.
* Integer distances without ``num_bits`` give what the ``num_bits=`` path gives; so do order-preserving
  transforms of them (shifted, scaled floats), since they keep the same ties.

Every metric runs concrete (numpy on the host), under jax.jit and under jax.vmap.
"""

import inspect
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from brute_force import bound_ap_direct, eq3_direct, eq4_direct, precision_at_k_direct
from compile_events import compiled_programs
from hashjax import _ties
from hashjax import codes
from hashjax import evaluate
from hashjax import metrics

NAN = float("nan")
INF = float("inf")
KS = [1, 3, 100]


# ----------------------------------------------------------------------------
# References: ordinary metrics of one ranked list, and every tie order of a row.


def _ap_list(rel, k=None):
  npos = sum(1 for r in rel if r)
  if npos == 0:
    return NAN
  k = len(rel) if k is None else k
  hits, terms = 0, []
  for t, r in enumerate(rel[:k], start=1):
    if r:
      hits += 1
      terms.append(hits / t)
  return math.fsum(terms) / min(npos, k)


def _ndcg_list(aff, k=None):
  k = len(aff) if k is None else k
  gains = [2.0 ** a - 1.0 for a in aff]
  dcg = math.fsum(g / math.log2(t + 1) for t, g in enumerate(gains[:k], start=1))
  ideal = math.fsum(g / math.log2(t + 1) for t, g in enumerate(sorted(gains, reverse=True)[:k], start=1))
  return NAN if ideal == 0 else dcg / ideal


def _precision_list(rel, k):
  return sum(1 for r in rel[:k] if r) / min(k, len(rel))


def _orders(d):
  """Every ranking (list of item indices) consistent with ascending ``d``: the groups of equal values
  (python equality: -0.0 == 0.0, inf == inf) in ascending order, each group in every order."""
  values = sorted(set(d))
  groups = [[i for i, x in enumerate(d) if x == v] for v in values]
  for parts in itertools.product(*(itertools.permutations(g) for g in groups)):
    yield [i for part in parts for i in part]


def _over_orders(d, labels, metric):
  """(mean, min, max) of ``metric(ranked labels)`` over every tie order of ``d``."""
  vals = [metric([labels[i] for i in order]) for order in _orders(list(d))]
  if math.isnan(vals[0]):
    return NAN, NAN, NAN
  return math.fsum(vals) / len(vals), min(vals), max(vals)


def _close(got, want, tol=1e-9):
  got, want = float(got), float(want)
  return math.isnan(got) if math.isnan(want) else abs(got - want) <= tol


def _on(path):
  """``call(fn, *arrays)`` -> numpy result of ``fn`` concrete, under jit, or under jit(vmap) over rows."""
  def call(fn, *arrays):
    if path == "concrete":
      out = fn(*arrays)
    elif path == "jit":
      out = jax.jit(fn)(*arrays)
    else:
      out = jax.jit(jax.vmap(fn))(*arrays)
    return jax.tree_util.tree_map(np.asarray, out)
  return call


def _every_metric(d, rel, aff, where, ks=tuple(KS)):
  """Every real-valued metric of one batch (one program under jit)."""
  kw = dict(where=where)
  return dict(
      ap=metrics.tie_aware_ap(d, rel, **kw),
      ap_k={k: metrics.tie_aware_ap(d, rel, k=k, **kw) for k in ks},
      ndcg=metrics.tie_aware_ndcg(d, aff, num_levels=4, **kw),
      ndcg_k={k: metrics.tie_aware_ndcg(d, aff, k=k, num_levels=4, **kw) for k in ks},
      prec_k={k: metrics.tie_aware_precision_at_k(d, rel, k=k, **kw) for k in ks},
      opt=metrics.optimistic_ap(d, rel, **kw),
      pes=metrics.pessimistic_ap(d, rel, **kw))


def _tiny_batch(rng, rows=14, n=7):
  """Float distances from a small pool (negative, signed zeros, infinities, near-equal values) so that
  ties are many, with the edge rows: all tied, no relevant item, all relevant, no gain."""
  pool = np.array([-INF, -1.5, -0.0, 0.0, 0.3, 0.30000001, 2.0, 2.0, 1e30, INF])
  d = rng.choice(pool, size=(rows, n))
  d[0] = 0.3  # all tied
  d[1] = rng.normal(size=n)  # no ties
  rel = (rng.random((rows, n)) < 0.45).astype(np.int32)
  rel[2] = 0
  rel[3] = 1
  aff = rng.integers(0, 4, size=(rows, n))
  aff[4] = 0
  where = np.ones((rows, n), bool)
  where[5, 4:] = False
  where[6, 1:] = False  # a single item
  where[7, ::2] = False
  return d, rel, aff, where


# ----------------------------------------------------------------------------
# Tiny rankings: the mean over all tie orders.


# Every dtype on the host; each traced path once (a compilation costs seconds).
@pytest.mark.parametrize("dtype,path", [(np.float64, "concrete"), (np.float32, "concrete"), (np.int32, "concrete"),
                                        (np.float64, "jit"), (np.int32, "vmap")])
def test_equal_mean_over_all_tie_orders(dtype, path):
  rng = np.random.default_rng(3 + np.dtype(dtype).itemsize)
  d, rel, aff, where = _tiny_batch(rng)
  if dtype == np.int32:  # negative and large ints
    d = rng.choice(np.array([-2**31, -7, 0, 0, 3, 2**31 - 1]), size=d.shape)
    d[0] = 5
  d = d.astype(dtype)
  ks = [3] if path == "vmap" else KS
  with jax.enable_x64(True):
    got = _on(path)(lambda *arrays: _every_metric(*arrays, ks=ks), d, rel, aff, where)
  assert got["ap"].dtype == np.float64 and got["ap"].shape == (d.shape[0],)
  for q in range(d.shape[0]):
    dq, rq, aq = d[q][where[q]].tolist(), rel[q][where[q]].tolist(), aff[q][where[q]].tolist()
    mean, lo, hi = _over_orders(dq, rq, _ap_list)
    assert _close(got["ap"][q], mean), (q, got["ap"][q], mean)
    assert _close(got["opt"][q], hi) and _close(got["pes"][q], lo), q
    assert _close(got["ndcg"][q], _over_orders(dq, aq, _ndcg_list)[0]), q
    for k in ks:
      assert _close(got["ap_k"][k][q], _over_orders(dq, rq, lambda r: _ap_list(r, k))[0]), (q, k)
      assert _close(got["ndcg_k"][k][q], _over_orders(dq, aq, lambda a: _ndcg_list(a, k))[0]), (q, k)
      assert _close(got["prec_k"][k][q], _over_orders(dq, rq, lambda r: _precision_list(r, k))[0]), (q, k)
  assert np.isnan(got["ap"][2]) and np.isnan(got["opt"][2]) and np.isnan(got["pes"][2])
  assert got["ap"][3] == pytest.approx(1.0) and np.isnan(got["ndcg"][4])


def test_by_hand():
  with jax.enable_x64(True):
    # One tie of 4 with one relevant item: rank t with chance 1/4.
    got = metrics.tie_aware_ap(np.full((1, 4), 0.25), np.array([[0, 1, 0, 0]]))
    assert abs(float(got[0]) - (1 + 1 / 2 + 1 / 3 + 1 / 4) / 4) < 1e-12
    # -0.0 ties 0.0; +inf after everything, ties another +inf; -inf before everything.
    d, r = np.array([[np.inf, 0.0, -0.0, np.inf, -np.inf]]), np.array([[1, 0, 1, 0, 0]])
    # Ranks: -inf (irrelevant) at 1; {0, -0} at 2-3 with one relevant; {inf, inf} at 4-5 with one relevant.
    want = ((1 / 2) * (1 / 2) + (1 / 2) * (1 / 3) + (1 / 2) * (2 / 4) + (1 / 2) * (2 / 5)) / 2
    assert abs(float(metrics.tie_aware_ap(d, r)[0]) - want) < 1e-12
    assert abs(float(metrics.optimistic_ap(d, r)[0]) - (1 / 2 + 2 / 4) / 2) < 1e-12
    assert abs(float(metrics.pessimistic_ap(d, r)[0]) - (1 / 3 + 2 / 5) / 2) < 1e-12
    assert abs(float(metrics.tie_aware_precision_at_k(d, r, k=2)[0]) - 0.5 / 2) < 1e-12
    # A single item; no relevant item; no gain.
    assert float(metrics.tie_aware_ap(np.array([[3.5]]), np.array([[1]]))[0]) == 1.0
    assert np.isnan(metrics.tie_aware_ap(np.array([[3.5, 1.0]]), np.array([[0, 0]]))[0])
    assert np.isnan(metrics.tie_aware_ndcg(np.array([[3.5, 1.0]]), np.array([[0, 0]]))[0])
    # Leading axes are kept: [2, 3, N] -> [2, 3].
    assert metrics.tie_aware_ap(np.random.default_rng(0).random((2, 3, 5)), np.ones((2, 3, 5), int)).shape == (2, 3)


# ----------------------------------------------------------------------------
# Longer rankings: eqs. 3-4 summed rank by rank over a histogram of np.unique's values.


def _unique_hist(d, labels, levels):
  """``hist[G, V]`` of one row: np.unique's distinct values (ascending) per level."""
  _, group = np.unique(d, return_inverse=True)
  hist = np.zeros((group.max() + 1, levels), np.int64)
  np.add.at(hist, (group, labels), 1)
  return hist


@pytest.mark.parametrize("path", ["concrete", "jit"])
def test_many_forced_ties_match_eq3_and_eq4(path):
  rng = np.random.default_rng(21)
  rows, n = 12, 1100  # traced: over 1024 bins, the cumulative sums of jnp.cumsum
  d = (np.round(rng.normal(size=(rows, n)) * 8) / 8).astype(np.float32)  # ~50 distinct values per row
  d[0] = rng.random(n).astype(np.float32)  # (almost) no ties
  d[1, :500] = np.inf
  aff = rng.integers(0, 3, size=(rows, n)) * (rng.random((rows, n)) < 0.3)
  aff[2] = 0
  rel = (aff > 0).astype(np.int32)
  ks = [7, 1000]

  def every(d, rel, aff):
    return dict(ap=metrics.tie_aware_ap(d, rel), ap_k={k: metrics.tie_aware_ap(d, rel, k=k) for k in ks},
                ndcg=metrics.tie_aware_ndcg(d, aff, num_levels=3),
                ndcg_k={k: metrics.tie_aware_ndcg(d, aff, k=k, num_levels=3) for k in ks},
                prec_k={k: metrics.tie_aware_precision_at_k(d, rel, k=k) for k in ks},
                opt=metrics.optimistic_ap(d, rel), pes=metrics.pessimistic_ap(d, rel))

  with jax.enable_x64(True):
    got = _on(path)(every, d, rel, aff)
  for q in range(rows):
    hist = _unique_hist(d[q], aff[q], 3)
    assert _close(got["ap"][q], eq3_direct(hist)), q
    assert _close(got["ndcg"][q], eq4_direct(hist)), q
    assert _close(got["opt"][q], bound_ap_direct(hist, True)) and _close(got["pes"][q], bound_ap_direct(hist, False))
    for k in ks:
      assert _close(got["ap_k"][k][q], eq3_direct(hist, k)), (q, k)
      assert _close(got["ndcg_k"][k][q], eq4_direct(hist, k)), (q, k)
      assert _close(got["prec_k"][k][q], precision_at_k_direct(hist, k)), (q, k)
  assert np.isnan(got["ap"][2]) and np.isnan(got["ndcg"][2])


def test_float32_within_1e6_of_float64():
  rng = np.random.default_rng(4)
  d = np.round(rng.normal(size=(6, 3000)) * 20).astype(np.float32)
  rel = (rng.random((6, 3000)) < 0.1).astype(np.int32)
  for fn in (metrics.tie_aware_ap, metrics.tie_aware_ndcg, metrics.optimistic_ap, metrics.pessimistic_ap,
             lambda d, r: metrics.tie_aware_precision_at_k(d, r, k=100)):
    f32 = np.asarray(fn(d, rel))
    with jax.enable_x64(True):
      f64 = np.asarray(fn(d, rel))
    assert f32.dtype == np.float32 and f64.dtype == np.float64
    assert np.max(np.abs(f32 - f64)) <= 1e-6


# ----------------------------------------------------------------------------
# Integer distances without num_bits = the num_bits path; monotone transforms keep the ties.


@pytest.mark.parametrize("x64", [False, True])
def test_int_distances_without_num_bits_equal_the_num_bits_path(x64):
  # Concrete on the host in both modes; traced once (x64), all metrics in one program.
  rng = np.random.default_rng(9)
  num_bits, rows, n = 16, 20, 500
  d = rng.integers(0, num_bits + 1, size=(rows, n))
  d[0] = 4
  aff = rng.integers(0, 3, size=(rows, n)) * (rng.random((rows, n)) < 0.4)
  aff[1] = 0
  rel = (aff > 0).astype(np.int32)
  where = rng.random((rows, n)) < 0.9
  calls = [
      lambda d, **kw: metrics.tie_aware_ap(d, rel, where=where, **kw),
      lambda d, **kw: metrics.tie_aware_ap(d, rel, k=30, **kw),
      lambda d, **kw: metrics.tie_aware_ndcg(d, aff, where=where, **kw),
      lambda d, **kw: metrics.tie_aware_ndcg(d, aff, k=30, **kw),
      lambda d, **kw: metrics.optimistic_ap(d, rel, **kw),
      lambda d, **kw: metrics.pessimistic_ap(d, rel, where=where, **kw),
      lambda d, **kw: metrics.tie_aware_precision_at_k(d, rel, k=40, **kw)]
  tol = 1e-12 if x64 else 1e-6
  with jax.enable_x64(x64):
    want = [np.asarray(call(d, num_bits=num_bits)) for call in calls]
    for same_ties in (d, d.astype(np.uint8), d - 1000, d * 0.37 - 2.0, np.exp(d / 3.0)):
      for call, w in zip(calls, want):
        got = np.asarray(call(same_ties))
        assert got.dtype == w.dtype
        np.testing.assert_allclose(got, w, rtol=tol, atol=tol)
    if x64:
      traced = jax.jit(lambda x: [call(x) for call in calls])(d * 0.5)
      for got, w in zip(traced, want):
        np.testing.assert_allclose(np.asarray(got), w, rtol=tol, atol=tol)


def test_evaluate_distances_of_hamming_distances_equals_evaluate_codes():
  rng = np.random.default_rng(5)
  num_bits, nq, ndb = 12, 15, 400
  ql, xl = rng.integers(0, 4, nq), rng.integers(0, 4, ndb)
  ql[0] = 9  # no relevant item
  qb, xb = rng.integers(0, 2, (nq, num_bits)), rng.integers(0, 2, (ndb, num_bits))
  d = (qb[:, None, :] != xb[None, :, :]).sum(-1)
  with jax.enable_x64(True):
    want = evaluate.evaluate_codes(codes.pack_bits(qb), codes.pack_bits(xb), num_bits=num_bits, query_labels=ql,
                                   db_labels=xl, radius=3, k=40)
    got = evaluate.evaluate_distances(d * 0.5, query_labels=ql, db_labels=xl, radius=1.5, k=40)
  assert set(got) == set(want) and got["radius"] == 1.5 and got["num_undefined_ap"] == 1
  for key, val in want.items():
    if key != "radius":
      assert _close(got[key], val, 1e-12), key


# ----------------------------------------------------------------------------
# evaluate_distances against direct formulas and loops.


def test_evaluate_distances_matches_direct_formulas(monkeypatch):
  rng = np.random.default_rng(6)
  nq, ndb = 11, 300
  d = np.round(rng.normal(size=(nq, ndb)) * 4) / 4
  ql, xl = rng.integers(0, 3, nq), rng.integers(0, 3, ndb)
  ql[1] = 5
  rel = (ql[:, None] == xl[None, :]).astype(np.int64)
  radius = 0.25
  hists = [_unique_hist(d[q], rel[q], 2) for q in range(nq)]
  inside = d <= radius
  want = {
      "tie_aware_ap": np.nanmean([eq3_direct(h) for h in hists]),
      "tie_aware_ndcg": np.nanmean([eq4_direct(h) for h in hists]),
      "optimistic_ap": np.nanmean([bound_ap_direct(h, True) for h in hists]),
      "pessimistic_ap": np.nanmean([bound_ap_direct(h, False) for h in hists]),
      "tie_aware_precision_at_k": np.mean([precision_at_k_direct(h, 20) for h in hists]),
      "precision_at_radius": np.mean([rel[q][inside[q]].mean() if inside[q].any() else 0.0 for q in range(nq)]),
      "num_empty_at_radius": int(sum(not inside[q].any() for q in range(nq))),
      "recall_at_radius": np.nanmean([rel[q][inside[q]].sum() / rel[q].sum() if rel[q].sum() else NAN
                                      for q in range(nq)]),
      "num_undefined_ap": 1, "num_undefined_ndcg": 1, "radius": radius, "k": 20, "num_queries": nq, "num_db": ndb,
  }
  monkeypatch.setattr(evaluate, "_BLOCK_CELLS", 3 * ndb * 2)  # blocks of 3 queries: the blocks are joined right
  with jax.enable_x64(True):
    out = evaluate.evaluate_distances(d, query_labels=ql, db_labels=xl, radius=radius, k=20)
    out_rel = evaluate.evaluate_distances(d, relevance=rel, radius=radius, k=20)
    out_aff = evaluate.evaluate_distances(d, affinity=rel * 2, k=20)
  assert set(out) == set(want) == set(out_rel)
  for key, val in want.items():
    assert _close(out[key], val, 1e-12) and _close(out_rel[key], val, 1e-12), key
  assert set(out_aff) == set(want) - {"precision_at_radius", "num_empty_at_radius", "recall_at_radius", "radius"}
  assert _close(out_aff["tie_aware_ap"], want["tie_aware_ap"], 1e-12)  # levels >= 1 relevant
  ndcg2 = np.nanmean([eq4_direct(_unique_hist(d[q], rel[q] * 2, 3)) for q in range(nq)])
  assert _close(out_aff["tie_aware_ndcg"], ndcg2, 1e-12)
  out32 = evaluate.evaluate_distances(d.astype(np.float32), query_labels=ql, db_labels=xl, radius=radius, k=20)
  for key, val in want.items():
    assert abs(out32[key] - val) <= 1e-6, key


# ----------------------------------------------------------------------------
# Host blocks, compilation, the group histogram, signatures, bad input.


def test_host_blocks_and_no_compilation(monkeypatch):
  rng = np.random.default_rng(8)
  d = np.round(rng.random((9, 37)) * 6).astype(np.float32)
  rel = (rng.random((9, 37)) < 0.3).astype(np.int32)
  with jax.enable_x64(True):
    whole = np.asarray(metrics.tie_aware_ap(d, rel))
    monkeypatch.setattr(_ties, "_HOST_BLOCK_CELLS", 2 * 37 * 2)  # blocks of 2 rows
    blocked = np.asarray(metrics.tie_aware_ap(d, rel))
  np.testing.assert_array_equal(blocked, whole)
  d = np.round(rng.random((7, 29)) * 5) - 2.5  # a shape no other test uses
  rel, aff = (rng.random((7, 29)) < 0.3).astype(np.int32), rng.integers(0, 3, (7, 29))
  with compiled_programs() as compiled:
    outs = [metrics.tie_aware_ap(d, rel), metrics.tie_aware_ndcg(d, aff), metrics.optimistic_ap(d, rel),
            metrics.pessimistic_ap(d, rel), metrics.tie_aware_precision_at_k(d, rel, k=3)]
    jax.block_until_ready(outs)
  assert compiled == [] and all(isinstance(o, jax.Array) and o.shape == (7,) for o in outs)


def test_group_histogram_counts_and_merges_gainless_groups():
  d = np.array([[0.5, 0.25, 0.5, 2.0, 4.0, 3.0, 3.0, -1.0], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]])
  lev = np.array([[1, 0, 0, 1, 0, 0, 2, 0], [0, 1, 2, 0, 0, 0, 0, 1]])
  got = np.asarray(_ties.group_histogram(d, lev, num_levels=3))
  # Row 0 ascending: {-1: 0} and {0.25: 0} merge (no gain), {0.5: 1, 0}, {2: 1}, {3: 0, 2}, {4: 0}.
  want0 = [[2, 0, 0], [1, 1, 0], [0, 1, 0], [1, 0, 1], [1, 0, 0]]
  assert got.shape == (2, 5, 3)
  np.testing.assert_array_equal(got[0], want0)
  np.testing.assert_array_equal(got[1], [[5, 2, 1]] + [[0, 0, 0]] * 4)
  traced = np.asarray(jax.jit(lambda d, l: _ties.group_histogram(d, l, num_levels=3))(d, lev))
  assert traced.shape == (2, 8, 3)  # one group per item, unmerged
  np.testing.assert_array_equal(traced[0, :6], [[1, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [1, 0, 1], [1, 0, 0]])
  assert traced[0, 6:].sum() == 0 and traced.sum() == got.sum()


def test_signatures_and_docs():
  want = {
      "tie_aware_ap": "(distances, relevance, *, num_bits=None, k=None, where=None, dtype=None)",
      "optimistic_ap": "(distances, relevance, *, num_bits=None, where=None, dtype=None)",
      "pessimistic_ap": "(distances, relevance, *, num_bits=None, where=None, dtype=None)",
      "tie_aware_ndcg": "(distances, affinity, *, num_bits=None, k=None, num_levels=None, where=None, dtype=None)",
      "tie_aware_precision_at_k": "(distances, relevance, *, num_bits=None, k, where=None, dtype=None)",
  }
  for name, text in want.items():
    fn = getattr(metrics, name)
    sig = inspect.signature(fn)
    assert str(sig.replace(parameters=[p.replace(annotation=p.empty) for p in sig.parameters.values()],
                           return_annotation=sig.empty)) == text
    assert "Without ``num_bits``" in fn.__doc__ and "NaN is refused" in fn.__doc__
  # The Hamming-only metrics keep num_bits required.
  assert inspect.signature(metrics.precision_at_radius).parameters["num_bits"].default is inspect.Parameter.empty


_D = np.array([[0.5, 1.0, 2.0]])
_R = np.array([[1, 0, 1]])


@pytest.mark.parametrize("call,argname", [
    (lambda: metrics.tie_aware_ap(np.array([[0.5, np.nan]]), np.array([[1, 0]])), "distances"),
    (lambda: metrics.tie_aware_ndcg(np.array([[np.nan, 1.0]]), np.array([[1, 0]])), "distances"),
    (lambda: metrics.optimistic_ap(np.array([[0.5, np.nan]]), np.array([[1, 0]])), "distances"),
    (lambda: metrics.pessimistic_ap(np.array([[0.5, np.nan]]), np.array([[1, 0]])), "distances"),
    (lambda: metrics.tie_aware_precision_at_k(np.array([[0.5, np.nan]]), np.array([[1, 0]]), k=1), "distances"),
    (lambda: metrics.tie_aware_ap(np.array([[0.5, np.nan]]), np.array([[1, 0]]), where=np.array([[True, False]])),
     "distances"),  # NaN is refused even where masked
    (lambda: metrics.tie_aware_ap(np.array([[True, False]]), np.array([[1, 0]])), "distances"),
    (lambda: metrics.tie_aware_ap(np.array([[1 + 1j, 0]]), np.array([[1, 0]])), "distances"),
    (lambda: metrics.tie_aware_ap([[0.5, 1.0]], np.array([[1, 0]])), "distances"),
    (lambda: metrics.tie_aware_ap(np.zeros((1, 0)), np.zeros((1, 0), int)), "distances"),
    (lambda: metrics.tie_aware_ap(np.array(0.5), np.array(1)), "distances"),
    (lambda: metrics.tie_aware_ap(_D, np.array([[1, 0]])), "relevance"),
    (lambda: metrics.tie_aware_ap(_D, np.array([[1, 2, 0]])), "relevance"),
    (lambda: metrics.tie_aware_ap(_D, _R, num_bits=2), "distances"),
    (lambda: metrics.tie_aware_ap(_D, _R, k=0), "k"),
    (lambda: metrics.tie_aware_ap(_D, _R, where=np.ones((1, 3))), "where"),
    (lambda: metrics.tie_aware_ndcg(_D, -_R), "affinity"),
    (lambda: metrics.tie_aware_precision_at_k(_D, _R, k=None), "k"),
    (lambda: metrics.precision_at_radius(_D, _R, num_bits=None, radius=1), "num_bits"),
    (lambda: jax.jit(metrics.tie_aware_ndcg)(_D, _R), "num_levels"),
    (lambda: evaluate.evaluate_distances(_D), "relevance"),
    (lambda: evaluate.evaluate_distances(_D, relevance=_R, affinity=_R), "affinity"),
    (lambda: evaluate.evaluate_distances(np.array([[0.5, np.nan, 1.0]]), relevance=_R), "distances"),
    (lambda: evaluate.evaluate_distances(np.array([0.5, 1.0, 2.0]), relevance=_R[0]), "distances"),
    (lambda: evaluate.evaluate_distances(np.zeros((0, 3)), relevance=np.zeros((0, 3), int)), "distances"),
    (lambda: evaluate.evaluate_distances(_D, relevance=_R + 1), "relevance"),
    (lambda: evaluate.evaluate_distances(_D, relevance=_R[:, :2]), "relevance"),
    (lambda: evaluate.evaluate_distances(_D, affinity=-_R), "affinity"),
    (lambda: evaluate.evaluate_distances(_D, query_labels=np.array([0]), db_labels=np.array([0, 1])), "db_labels"),
    (lambda: evaluate.evaluate_distances(_D, query_labels=np.array([0])), "db_labels"),
    (lambda: evaluate.evaluate_distances(_D, relevance=_R, radius=np.nan), "radius"),
    (lambda: evaluate.evaluate_distances(_D, relevance=_R, radius="1"), "radius"),
    (lambda: evaluate.evaluate_distances(_D, relevance=_R, k=0), "k"),
    (lambda: evaluate.evaluate_distances(_D, relevance=_R, dtype=np.int32), "dtype"),
    (lambda: jax.jit(lambda d: evaluate.evaluate_distances(d, relevance=_R))(_D), "distances"),
])
def test_bad_input_raises_naming_the_argument(call, argname):
  with pytest.raises(ValueError, match=argname):
    call()


def test_traced_nan_is_not_checked_but_stays_contained():
  # Under jit the values cannot be checked: NaN sorts last, each NaN its own group, the other items unchanged.
  d = jnp.array([[0.5, jnp.nan, 0.5, 1.0]])
  rel = np.array([[1, 0, 0, 1]])
  got = float(jax.jit(lambda d: metrics.tie_aware_ap(d, rel))(d)[0])
  want = float(metrics.tie_aware_ap(np.array([[0.5, 9.0, 0.5, 1.0]]), rel)[0])
  assert got == pytest.approx(want, abs=1e-6)
