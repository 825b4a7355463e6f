"""hashjax.metrics against independent references.

* Tie-aware metrics: the mean of the ordinary metric over ALL orders of tied
  items, enumerated with itertools (pure python), to 1e-9 in float64.
* Large ranks (beyond the brute-force reach): He et al.'s eq. 3 / eq. 4 summed
  term by term over every rank with math.fsum (tests/brute_force.py).
* Deterministic AP, radius metrics, kNN: python loops; AP without ties: sklearn.

Every metric runs on its two paths, concrete (numpy on the host) and traced
(under jax.jit and jax.vmap), against the same references.
"""

import inspect
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.metrics import average_precision_score

from brute_force import bound_ap_direct, eq3_direct, eq4_direct, precision_at_k_direct
from compile_events import compiled_programs
from hashjax import metrics

NAN = float("nan")

# ----------------------------------------------------------------------------
# Brute-force references (ordinary metrics of one ranked sequence).


def _ap_seq(rel, k=None):
  npos = int(np.sum(rel))
  if npos == 0:
    return NAN
  k = len(rel) if k is None else k
  hits, total = 0, 0.0
  for t, r in enumerate(rel[:k], start=1):
    if r:
      hits += 1
      total += hits / t
  return total / min(npos, k)


def _ndcg_seq(aff, k=None):
  k = len(aff) if k is None else k
  gains = [2.0 ** int(a) - 1.0 for a in aff]
  dcg = math.fsum(g / math.log2(t + 1) for t, g in enumerate(gains[:k], start=1))
  ideal = math.fsum(g / math.log2(t + 1) for t, g in enumerate(sorted(gains, reverse=True)[:k], start=1))
  return NAN if ideal == 0 else dcg / ideal


def _prec_seq(rel, k):
  return float(np.sum(rel[:k])) / min(k, len(rel))


def _tie_orders(d):
  """Every ranking of items consistent with ascending distance (all tie permutations), [M, n]."""
  groups = [np.flatnonzero(d == v) for v in np.unique(d)]
  return np.array([np.concatenate(c) for c in itertools.product(*(itertools.permutations(g) for g in groups))],
                  dtype=int)


def _ap_orders(rel, k=None):
  """AP(@k) of every ranked row of rel [M, n] (the loop of _ap_seq, vectorized over rows)."""
  m, n = rel.shape
  npos = rel[0].sum()
  if npos == 0:
    return np.full(m, NAN)
  k = n if k is None else k
  rank = np.arange(1, n + 1)
  terms = np.where((rel > 0) & (rank <= k), np.cumsum(rel, axis=1) / rank, 0.0)
  return terms.sum(1) / min(npos, k)


def _ndcg_orders(aff, k=None):
  m, n = aff.shape
  k = n if k is None else k
  gains = 2.0 ** aff - 1.0
  disc = np.where(np.arange(1, n + 1) <= k, 1.0 / np.log2(np.arange(2, n + 2)), 0.0)
  ideal = np.sum(np.sort(gains[0])[::-1] * disc)
  return np.full(m, NAN) if ideal == 0 else (gains * disc).sum(1) / ideal


def _prec_orders(rel, k):
  return rel[:, :k].sum(1) / min(k, rel.shape[1])


def _over_orders(d, values, metric):
  """(mean, min, max) of metric over all tie orders of distances d (metric maps [M, n] -> [M])."""
  vals = metric(values[_tie_orders(d)])
  if np.isnan(vals[0]):
    return NAN, NAN, NAN
  return math.fsum(vals) / len(vals), vals.min(), vals.max()


def _close(got, want, tol=1e-9):
  got, want = float(got), float(want)
  if math.isnan(want):
    return math.isnan(got)
  return abs(got - want) <= tol


def _random_batch(rng, num_bits, rows, n, p_rel, levels=2):
  d = rng.integers(0, num_bits + 1, size=(rows, n))
  d[0] = rng.integers(0, num_bits + 1)  # all tied
  rel = (rng.random((rows, n)) < p_rel).astype(np.int32)
  rel[1] = 0  # no relevant item
  rel[2] = 1  # all relevant
  aff = rng.integers(0, levels, size=(rows, n))
  aff[3] = 0
  return d, rel, aff


KS = [1, 2, 3, 4, 6, 100]

#: The paths of every formula: numpy on the host for concrete inputs; jax.numpy traced under jax.jit, and
#: under jax.vmap (jitted) over the leading axis (arrays of fewer dimensions than the first are shared).
PATHS = ["concrete", "jit", "vmap"]


def _on(path):
  """``call(fn, *arrays, **options)`` -> numpy result of ``fn`` on the given path."""
  def call(fn, *arrays, **options):
    if path == "concrete":
      out = fn(*arrays, **options)
    elif path == "jit":
      out = jax.jit(lambda *xs: fn(*xs, **options))(*arrays)
    else:
      axes = tuple(0 if np.ndim(x) == np.ndim(arrays[0]) else None for x in arrays)
      out = jax.jit(jax.vmap(lambda *xs: fn(*xs, **options), in_axes=axes))(*arrays)
    return jax.tree_util.tree_map(np.asarray, out)
  return call


def test_vectorized_references_agree_with_loops():
  rng = np.random.default_rng(12)
  for row in range(40):  # each call: rankings of one multiset of labels, as in _over_orders
    rel = rng.integers(0, 2, size=9) * (row % 5 != 0)
    aff = rng.integers(0, 4, size=9)
    rels = np.array([rng.permutation(rel) for _ in range(5)])
    affs = np.array([rng.permutation(aff) for _ in range(5)])
    for k in [None, 1, 3, 20]:
      np.testing.assert_allclose(_ap_orders(rels, k), [_ap_seq(r, k) for r in rels], rtol=1e-12)
      np.testing.assert_allclose(_ndcg_orders(affs, k), [_ndcg_seq(a, k) for a in affs], rtol=1e-12)
      if k:
        np.testing.assert_allclose(_prec_orders(rels, k), [_prec_seq(r, k) for r in rels], rtol=1e-12)


# ----------------------------------------------------------------------------
# Tie-aware metrics = mean over all tie orders.


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("max_distance", [1, 2, 4])
def test_tie_aware_metrics_equal_mean_over_all_tie_orders(max_distance, path):
  # Few distinct distances = big ties. num_bits stays 7 (one compilation per path for all cases).
  num_bits = 7
  rng = np.random.default_rng(max_distance)
  n = 7  # up to 7! = 5040 orders per query
  d, rel, aff = _random_batch(rng, max_distance, rows=12, n=n, p_rel=0.45, levels=4)
  # where masks shorten some rows: the brute force sees only the valid items.
  where = np.ones((12, n), bool)
  where[4, 5:] = False
  where[5, 1:] = False  # single item
  where[6, ::2] = False
  def every_metric(d, rel, aff, where):
    kw = dict(num_bits=num_bits, where=where)
    return dict(
        ap_t=metrics.tie_aware_ap(d, rel, **kw),
        ap_k={k: metrics.tie_aware_ap(d, rel, k=k, **kw) for k in KS},
        ndcg=metrics.tie_aware_ndcg(d, aff, num_levels=4, **kw),
        ndcg_k={k: metrics.tie_aware_ndcg(d, aff, k=k, num_levels=4, **kw) for k in KS},
        prec_k={k: metrics.tie_aware_precision_at_k(d, rel, k=k, **kw) for k in KS},
        opt=metrics.optimistic_ap(d, rel, **kw),
        pes=metrics.pessimistic_ap(d, rel, **kw))

  with jax.enable_x64(True):
    got = _on(path)(every_metric, d, rel, aff, where)  # jit / vmap: one program for every metric
  ap_t, ap_k, ndcg, ndcg_k, prec_k, opt, pes = (got[key] for key in
                                                ("ap_t", "ap_k", "ndcg", "ndcg_k", "prec_k", "opt", "pes"))
  assert ap_t.dtype == np.float64
  for q in range(12):
    dq, rq, aq = d[q][where[q]], rel[q][where[q]], aff[q][where[q]]
    mean, lo, hi = _over_orders(dq, rq, _ap_orders)
    assert _close(ap_t[q], mean), (q, ap_t[q], mean)
    assert _close(opt[q], hi) and _close(pes[q], lo), (q, opt[q], hi, pes[q], lo)
    if not math.isnan(mean):
      assert pes[q] - 1e-12 <= ap_t[q] <= opt[q] + 1e-12
    assert _close(ndcg[q], _over_orders(dq, aq, _ndcg_orders)[0]), q
    for k in KS:
      assert _close(ap_k[k][q], _over_orders(dq, rq, lambda r: _ap_orders(r, k))[0]), (q, k)
      assert _close(ndcg_k[k][q], _over_orders(dq, aq, lambda a: _ndcg_orders(a, k))[0]), (q, k)
      assert _close(prec_k[k][q], _over_orders(dq, rq, lambda r: _prec_orders(r, k))[0]), (q, k)
  assert np.isnan(ap_t[1]) and not np.isnan(ap_t[2]) and np.isnan(ndcg[3])


def test_edge_cases_by_hand():
  with jax.enable_x64(True):
    # All 4 items tied, 1 relevant: the relevant item is at rank t w.p. 1/4.
    got = metrics.tie_aware_ap(np.zeros((1, 4), int), np.array([[0, 1, 0, 0]]), num_bits=7)
    assert abs(float(got[0]) - (1 + 1 / 2 + 1 / 3 + 1 / 4) / 4) < 1e-12
    # Figure 1 of He et al.: all tied; optimistic AP = 1.
    assert float(metrics.optimistic_ap(np.zeros((1, 5), int), np.array([[0, 1, 0, 1, 0]]), num_bits=7)[0]) == 1.0
    # Single item.
    assert float(metrics.tie_aware_ap(np.array([[2]]), np.array([[1]]), num_bits=7)[0]) == 1.0
    assert np.isnan(metrics.tie_aware_ap(np.array([[2]]), np.array([[0]]), num_bits=7)[0])
    # k straddling a tie of 3 (ranks 2..4) holding 1 relevant; AP@2 normaliser min(N+, k) = 2.
    d, r = np.array([[0, 1, 1, 1]]), np.array([[1, 0, 1, 0]])
    want = (1.0 + (1 / 3) * (2 / 2)) / 2
    assert abs(float(metrics.tie_aware_ap(d, r, num_bits=7, k=2)[0]) - want) < 1e-12
    assert abs(float(metrics.tie_aware_precision_at_k(d, r, num_bits=7, k=2)[0]) - (1 + 1 / 3) / 2) < 1e-12


def test_undefined_queries_are_nan_and_counted():
  d = np.array([[0, 1], [1, 1], [0, 0]])
  r = np.array([[1, 0], [0, 0], [0, 1]])
  with jax.enable_x64(True):
    vals = metrics.tie_aware_ap(d, r, num_bits=7)
    m = metrics.mean_and_count(vals)
    assert int(m.num_undefined) == 1
    assert abs(float(m.mean) - (1.0 + 0.75) / 2) < 1e-12
    m = metrics.mean_and_count(vals, where=np.array([True, True, False]))
    assert int(m.num_undefined) == 1 and float(m.mean) == 1.0
    ndcg = metrics.tie_aware_ndcg(d, r, num_bits=7)
    assert np.isnan(ndcg[1]) and int(metrics.mean_and_count(ndcg).num_undefined) == 1
    assert np.isnan(metrics.mean_and_count(np.full(3, np.nan)).mean)


# ----------------------------------------------------------------------------
# Large ranks: eq. 3 and eq. 4 summed rank by rank.


def _big_hists(rng, rows, num_bits, levels, max_count):
  hist = rng.integers(0, max_count, size=(rows, num_bits + 1, levels))
  hist[rng.random(hist.shape) < 0.3] = 0  # empty cells and empty bins
  hist[0, :, 1:] = 0  # no relevant
  hist[1, :5] = 0
  hist[1, 5, 0] = 3 * max_count  # a huge first tie with no relevant item
  return hist


@pytest.mark.parametrize("path", PATHS)
def test_large_ranks_match_eq3_and_eq4_summed_term_by_term(path):
  rng = np.random.default_rng(7)
  hist = _big_hists(rng, rows=16, num_bits=24, levels=3, max_count=3000)
  on = _on(path)
  with jax.enable_x64(True):
    ap_t = on(metrics.tie_aware_ap_from_histogram, hist)
    ndcg = on(metrics.tie_aware_ndcg_from_histogram, hist)
    ap_k = on(metrics.tie_aware_ap_from_histogram, hist, k=20000)
    ndcg_k = on(metrics.tie_aware_ndcg_from_histogram, hist, k=20000)
    opt = on(metrics.optimistic_ap_from_histogram, hist)
    pes = on(metrics.pessimistic_ap_from_histogram, hist)
    prec_k = on(metrics.tie_aware_precision_at_k_from_histogram, hist, k=20000)
  for q in range(16):
    assert _close(ap_t[q], eq3_direct(hist[q])), q
    assert _close(ap_k[q], eq3_direct(hist[q], 20000)), q
    assert _close(ndcg[q], eq4_direct(hist[q])), q
    assert _close(ndcg_k[q], eq4_direct(hist[q], 20000)), q
    assert _close(opt[q], bound_ap_direct(hist[q], True)) and _close(pes[q], bound_ap_direct(hist[q], False)), q
    assert _close(prec_k[q], precision_at_k_direct(hist[q], 20000)), q


def test_distance_level_signatures():
  want = {
      # num_bits=None: real-valued distances (tests/test_real_distances.py).
      "tie_aware_ap": "(distances, relevance, *, num_bits=None, k=None, where=None, dtype=None)",
      "optimistic_ap": "(distances, relevance, *, num_bits=None, where=None, dtype=None)",
      "pessimistic_ap": "(distances, relevance, *, num_bits=None, where=None, dtype=None)",
      "ap": "(distances, relevance, *, num_bits, k=None, where=None, dtype=None)",
      "tie_aware_ndcg": "(distances, affinity, *, num_bits=None, k=None, num_levels=None, where=None, dtype=None)",
      "tie_aware_precision_at_k": "(distances, relevance, *, num_bits=None, k, where=None, dtype=None)",
      "precision_at_radius": "(distances, relevance, *, num_bits, radius, where=None, dtype=None)",
      "recall_at_radius": "(distances, relevance, *, num_bits, radius, where=None, dtype=None)",
      "retrieved_at_radius": "(distances, *, num_bits, radius, where=None)",
      "precision_recall_curve": "(distances, relevance, *, num_bits, where=None, dtype=None)",
      "knn_classify": "(distances, db_labels, *, num_classes, num_bits, k, threshold='relative', where=None)",
  }
  for name, text in want.items():
    fn = getattr(metrics, name)
    sig = inspect.signature(fn).replace(return_annotation=inspect.Signature.empty)
    assert str(sig.replace(parameters=[p.replace(annotation=p.empty) for p in sig.parameters.values()])) == text
    assert fn.__name__ == name and "Ties:" in fn.__doc__ and ".. math::" in fn.__doc__ and ">>>" in fn.__doc__
  # Keywords by name, positional data, and the errors of a plain function.
  d, rel = np.array([[0, 1, 1, 2]]), np.array([[1, 0, 1, 0]])
  assert float(metrics.tie_aware_ap(distances=d, relevance=rel, num_bits=2)[0]) == pytest.approx(11 / 12)
  with pytest.raises(TypeError):
    metrics.tie_aware_ap(d, rel, 2)
  with pytest.raises(TypeError):
    metrics.tie_aware_ap(d, rel, num_bits=2, radius=1)


@pytest.mark.parametrize("num_bits,path", [(64, "vmap"), (200, "jit")])
def test_traced_formulas_of_long_and_short_codes_equal_concrete(num_bits, path):
  rng = np.random.default_rng(num_bits)
  hist = rng.integers(0, 400, size=(2, 3, num_bits + 1, 3)).astype(np.int32)
  hist[0, 1] = 0  # no item at all
  hist[1, 2, :, 1:] = 0  # no relevant item
  fns = [lambda h: metrics.tie_aware_ap_from_histogram(h), lambda h: metrics.tie_aware_ap_from_histogram(h, k=50),
         metrics.optimistic_ap_from_histogram, metrics.pessimistic_ap_from_histogram,
         lambda h: metrics.tie_aware_ndcg_from_histogram(h), lambda h: metrics.tie_aware_ndcg_from_histogram(h, k=50),
         lambda h: metrics.tie_aware_precision_at_k_from_histogram(h, k=70),
         metrics.precision_recall_curve_from_histogram]
  with jax.enable_x64(True):
    for fn in fns:
      concrete = _on("concrete")(fn, hist)
      for h, c in zip(jax.tree_util.tree_leaves(concrete), jax.tree_util.tree_leaves(_on(path)(fn, hist))):
        np.testing.assert_allclose(c, np.broadcast_to(h, c.shape), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("path", PATHS)
def test_float32_within_1e6_of_float64(path):
  rng = np.random.default_rng(11)
  hist = _big_hists(rng, rows=16, num_bits=24, levels=3, max_count=40000)  # N up to ~1e6 per query
  hist[2, :, :] = rng.integers(0, 3, size=(25, 3))  # short rankings too
  fns = [lambda h, dt: metrics.tie_aware_ap_from_histogram(h, dtype=dt),
         lambda h, dt: metrics.tie_aware_ap_from_histogram(h, k=1000, dtype=dt),
         lambda h, dt: metrics.tie_aware_ndcg_from_histogram(h, dtype=dt),
         lambda h, dt: metrics.tie_aware_ndcg_from_histogram(h, k=100, dtype=dt),
         lambda h, dt: metrics.optimistic_ap_from_histogram(h, dtype=dt),
         lambda h, dt: metrics.pessimistic_ap_from_histogram(h, dtype=dt),
         lambda h, dt: metrics.tie_aware_precision_at_k_from_histogram(h, k=100, dtype=dt)]
  on = _on(path)
  for fn in fns:
    f32 = on(fn, hist, dt=np.float32)
    with jax.enable_x64(True):
      f64 = on(fn, hist, dt=np.float64)
    assert f32.dtype == np.float32 and f64.dtype == np.float64
    np.testing.assert_array_equal(np.isnan(f32), np.isnan(f64))
    ok = ~np.isnan(f64)
    assert np.max(np.abs(f32[ok] - f64[ok])) <= 1e-6


# ----------------------------------------------------------------------------
# Deterministic AP, radius metrics, kNN, where.


def test_index_order_ndcg_matches_a_loop():
  rng = np.random.default_rng(6)
  d = rng.integers(0, 4, size=(10, 30))
  a = rng.integers(0, 3, size=(10, 30)) * (rng.random((10, 30)) < 0.5)
  a[0] = 0  # no positive gain: NaN
  where = rng.random((10, 30)) < 0.7

  def loop(q, k, mask):
    items = [i for i in range(30) if mask[i]]
    order = sorted(items, key=lambda i: (d[q, i], i))  # ties by ascending index
    dcg = sum((2.0 ** a[q, i] - 1) / math.log2(t + 2) for t, i in enumerate(order[:k]))
    ideal = sum((2.0 ** g - 1) / math.log2(t + 2) for t, g in enumerate(sorted(a[q, items], reverse=True)[:k]))
    return dcg / ideal if ideal > 0 else math.nan

  with jax.enable_x64(True):
    full = np.asarray(metrics.ndcg(d, a, num_bits=7))
    cut = np.asarray(metrics.ndcg(d, a, num_bits=7, k=5, where=where))
    traced = jax.jit(lambda d, a, w: metrics.ndcg(d, a, num_bits=7, k=5, num_levels=3, where=w))(d, a, where)
  for q in range(10):
    for got, want in ((full[q], loop(q, 30, np.ones(30, bool))), (cut[q], loop(q, 5, where[q]))):
      assert (math.isnan(got) and math.isnan(want)) or abs(got - want) < 1e-12, (q, got, want)
  np.testing.assert_allclose(np.asarray(traced), cut, rtol=1e-12)


def test_index_order_ap_matches_loop_and_sklearn():
  rng = np.random.default_rng(5)
  d = rng.integers(0, 4, size=(10, 30))
  rel = (rng.random((10, 30)) < 0.3).astype(int)
  rel[0] = 0
  with jax.enable_x64(True):
    got = np.asarray(metrics.ap(d, rel, num_bits=7))
    got_k = np.asarray(metrics.ap(d, rel, num_bits=7, k=7))
  for q in range(10):
    order = sorted(range(30), key=lambda i: (d[q, i], i))  # ties by ascending index
    assert _close(got[q], _ap_seq(rel[q][order])), q
    assert _close(got_k[q], _ap_seq(rel[q][order], 7)), q
  # Traced (XLA's stable sort), with a mask and a cutoff: the same as the host path.
  where = rng.random((10, 30)) < 0.7
  with jax.enable_x64(True):
    traced = jax.jit(lambda d, r, w: metrics.ap(d, r, num_bits=7, k=7, where=w))(d, rel, where)
    host = metrics.ap(d, rel, num_bits=7, k=7, where=where)
  np.testing.assert_allclose(np.asarray(traced), np.asarray(host), rtol=1e-12)
  for q in range(1, 10):
    order = sorted(np.flatnonzero(where[q]), key=lambda i: (d[q, i], i))
    assert _close(np.asarray(host)[q], _ap_seq(rel[q][order], 7)), q
  # Long codes: uint16 sort keys up to 65,534 bits, int32 beyond (the masked items' key is num_bits + 1).
  for num_bits in (300, 65534, 65535, 70000):
    dl = np.array([[num_bits // 2, num_bits, 3, num_bits - 1]])
    rl, wl = np.array([[0, 1, 0, 1]]), np.array([[True, True, False, True]])
    want = _ap_seq(np.array([0, 1, 1]))  # order: num_bits // 2, num_bits - 1, num_bits (masked item last)
    with jax.enable_x64(True):
      got = np.asarray(metrics.ap(dl, rl, num_bits=num_bits, where=wl))[0]
    assert _close(got, want), num_bits
  # Without ties, every tie rule agrees with sklearn's AP.
  d = np.stack([rng.permutation(30) for _ in range(5)])
  rel = (rng.random((5, 30)) < 0.4).astype(int)
  with jax.enable_x64(True):
    mine = np.asarray(metrics.ap(d, rel, num_bits=29))
    tie = np.asarray(metrics.tie_aware_ap(d, rel, num_bits=29))
  for q in range(5):
    want = average_precision_score(rel[q], -d[q])
    assert _close(mine[q], want) and _close(tie[q], want)


@pytest.mark.parametrize("x64", [False, True])
@pytest.mark.parametrize("path", PATHS)
def test_radius_metrics_and_curve_match_loops(path, x64):
  rng = np.random.default_rng(9)
  d = rng.integers(0, 6, size=(8, 25))
  d[0] = 5  # retrieves nothing below radius 5
  rel = (rng.random((8, 25)) < 0.4).astype(int)
  rel[1] = 0
  on = _on(path)
  tol = 1e-9 if x64 else 1e-6
  close = lambda got, want: _close(got, want, tol)
  with jax.enable_x64(x64):
    prec_curve, rec_curve = on(metrics.precision_recall_curve, d, rel, num_bits=5)
    for radius in [0, 2, 5, 9]:
      prec = on(metrics.precision_at_radius, d, rel, num_bits=5, radius=radius)
      rec = on(metrics.recall_at_radius, d, rel, num_bits=5, radius=radius)
      ret = on(metrics.retrieved_at_radius, d, num_bits=5, radius=radius)
      for q in range(8):
        inside = [i for i in range(25) if d[q, i] <= radius]
        hits = sum(rel[q, i] for i in inside)
        assert ret[q] == len(inside)
        assert close(prec[q], hits / len(inside) if inside else 0.0)
        assert close(rec[q], hits / rel[q].sum() if rel[q].sum() else NAN)
        if radius <= 5:
          assert close(prec_curve[q, radius], prec[q]) and close(rec_curve[q, radius], rec[q])
  assert prec_curve.shape == (8, 6)
  assert prec.dtype == rec.dtype == prec_curve.dtype == (np.float64 if x64 else np.float32) and ret.dtype == np.int32


def test_one_vote_rule_for_knn_classify_and_the_majority_score():
  from hashjax import objectives  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(5)
  votes = rng.integers(0, 3, size=(40, 4))
  votes[0] = 0
  winners = np.asarray(metrics.vote_winners(votes))
  predicted = np.asarray(metrics.knn_classify_from_histogram(votes[:, None, :], k=1))  # one bin: these votes
  expected = np.asarray(objectives.majority_from_votes(votes, votes[:, 1]))  # the query's class is 1
  strict = np.asarray(objectives.majority_from_votes(votes, votes[:, 1], ties="strict"))
  for q in range(len(votes)):
    top = max(votes[q].tolist())
    want = [c for c in range(4) if top > 0 and votes[q, c] == top]
    assert np.flatnonzero(winners[q]).tolist() == want
    assert predicted[q] == (want[0] if want else -1)
    assert expected[q] == pytest.approx(1.0 / len(want) if 1 in want else 0.0)
    assert strict[q] == float(want == [1])


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("threshold", ["relative", "absolute"])
def test_knn_classify_matches_loop(threshold, path):
  rng = np.random.default_rng(2)
  num_bits, n, c = 6, 40, 4
  d = rng.integers(0, num_bits + 1, size=(20, n))
  d[0] = np.where(np.arange(n) < 2, 0, 6)  # a vote tie in the first bin: labels below
  labels = rng.integers(0, c, size=n)
  labels[:2] = [3, 1]
  qlabels = rng.integers(0, c, size=20)
  for k in [0, 1, 2, 3]:
    if threshold == "relative" and k == 0:
      continue
    got = _on(path)(metrics.knn_classify, d, labels, num_classes=c, num_bits=num_bits, k=k,
                    threshold=threshold)
    for q in range(20):
      if threshold == "relative":
        bins = sorted(set(d[q].tolist()))[:k]
      else:
        bins = list(range(k + 1))
      votes = np.zeros(c, int)
      for i in range(n):
        if d[q, i] in bins:
          votes[labels[i]] += 1
      want = -1 if votes.max() == 0 else min(np.flatnonzero(votes == votes.max()))  # smallest label
      assert got[q] == want, (threshold, k, q)
    if threshold == "relative" and k == 1:
      assert got[0] == 1  # 3 and 1 tie in bin 0: smallest label
    err = float(metrics.error_rate(got, qlabels))
    assert abs(err - np.mean(got != qlabels)) < 1e-7


def test_where_equals_dropping_items():
  rng = np.random.default_rng(4)
  d = rng.integers(0, 8, size=(6, 50))
  rel = (rng.random((6, 50)) < 0.3).astype(int)
  where = rng.random((6, 50)) < 0.6
  with jax.enable_x64(True):
    masked = np.asarray(metrics.tie_aware_ap(d, rel, num_bits=7, where=where))
    masked_det = np.asarray(metrics.ap(d, rel, num_bits=7, k=10, where=where))
    for q in range(6):
      sub = metrics.tie_aware_ap(d[q][where[q]], rel[q][where[q]], num_bits=7)
      assert _close(masked[q], sub)
      sub = metrics.ap(d[q][where[q]], rel[q][where[q]], num_bits=7, k=10)
      assert _close(masked_det[q], sub)


@pytest.mark.parametrize("x64", [False, True])
def test_jit_and_vmap_compatible(x64):
  rng = np.random.default_rng(1)
  d = rng.integers(0, 5, size=(3, 20))
  rel = (rng.random((3, 20)) < 0.5).astype(np.int32)
  eager = np.asarray(metrics.tie_aware_ap(d, rel, num_bits=4))
  with jax.enable_x64(x64):
    assert metrics.tie_aware_ap(d, rel, num_bits=4).dtype == (np.float64 if x64 else np.float32)
    jitted = jax.jit(lambda x, y: metrics.tie_aware_ap(x, y, num_bits=4))(d, rel)
    vmapped = jax.vmap(lambda x, y: metrics.tie_aware_ap(x, y, num_bits=4))(d, rel)
    nd = jax.jit(lambda x, y: metrics.tie_aware_ndcg(x, y, num_bits=4, num_levels=2))(d, rel)
    # Means per row of a vmapped batch (the means themselves are traced with jax.numpy).
    means = jax.jit(jax.vmap(lambda x, y: metrics.mean_and_count(metrics.tie_aware_ap(x, y, num_bits=4))))(
        d.reshape(3, 1, 20), rel.reshape(3, 1, 20))
  assert jitted.dtype == vmapped.dtype == nd.dtype == means.mean.dtype == (np.float64 if x64 else np.float32)
  np.testing.assert_allclose(np.asarray(jitted), eager, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(vmapped), eager, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(nd), np.asarray(metrics.tie_aware_ndcg(d, rel, num_bits=4)), rtol=1e-6)
  np.testing.assert_allclose(np.asarray(means.mean), np.where(np.isnan(eager), np.nan, eager), rtol=1e-6)
  np.testing.assert_array_equal(np.asarray(means.num_undefined), np.isnan(eager).astype(np.int32))


def test_mean_and_count_stays_differentiable_under_jit():
  # Traced values are evaluated with jax.numpy, differentiable.
  w = jnp.array([1.0, 2.0, 3.0])
  grad = jax.jit(jax.grad(lambda v: metrics.mean_and_count(v * 2.0).mean))(w)
  np.testing.assert_allclose(np.asarray(grad), [2.0 / 3] * 3, rtol=1e-6)
  where = np.array([True, False, True])
  masked = jax.jit(lambda v, m: metrics.mean_and_count(v, where=m))(w, where)
  assert float(masked.mean) == 2.0 and int(masked.num_undefined) == 0


# ----------------------------------------------------------------------------
# Bad input.

_D = np.array([[0, 1, 2]])
_R = np.array([[1, 0, 1]])


@pytest.mark.parametrize("call,argname", [
    (lambda: metrics.tie_aware_ap(np.array([[0, 9]]), np.array([[1, 0]]), num_bits=8), "distances"),
    (lambda: metrics.tie_aware_ap(np.array([[0, -1]]), np.array([[1, 0]]), num_bits=8), "distances"),
    (lambda: metrics.tie_aware_ap(np.array([[0.0, np.nan]]), np.array([[1, 0]]), num_bits=8), "distances"),
    (lambda: metrics.tie_aware_ap(np.array([[0.0, 1.0]]), np.array([[1, 0]]), num_bits=8), "distances"),
    (lambda: metrics.tie_aware_ap(_D, np.array([[1, 2, 0]]), num_bits=2), "relevance"),
    (lambda: metrics.tie_aware_ap(_D, np.array([[1.0, np.nan, 0.0]]), num_bits=2), "relevance"),
    (lambda: metrics.tie_aware_ap(_D, np.array([[1, 0]]), num_bits=2), "relevance"),
    (lambda: metrics.tie_aware_ap(_D, _R, num_bits=0), "num_bits"),
    (lambda: metrics.tie_aware_ap(_D, _R, num_bits=2, k=0), "k"),
    (lambda: metrics.tie_aware_ap(_D, _R, num_bits=2, where=np.ones((1, 3))), "where"),
    (lambda: metrics.tie_aware_ap(_D, _R, num_bits=2, where=np.ones((1, 2), bool)), "where"),
    (lambda: metrics.tie_aware_ap(_D, _R, num_bits=2, dtype=np.int32), "dtype"),
    (lambda: metrics.tie_aware_ap(_D, _R, num_bits=2, dtype=np.float64), "dtype"),
    (lambda: metrics.tie_aware_ap(np.zeros((1, 0), int), np.zeros((1, 0), int), num_bits=2), "distances"),
    (lambda: metrics.optimistic_ap(_D, -_R, num_bits=2), "relevance"),
    (lambda: metrics.pessimistic_ap(_D + 5, _R, num_bits=2), "distances"),
    (lambda: metrics.ap(_D, _R + 1, num_bits=2), "relevance"),
    (lambda: metrics.tie_aware_ndcg(_D, -_R, num_bits=2), "affinity"),
    (lambda: metrics.tie_aware_ndcg(_D, np.array([[1, 0]]), num_bits=2), "affinity"),
    (lambda: metrics.tie_aware_ndcg(_D, np.array([[1.5, 0.0, 1.0]]), num_bits=2), "affinity"),
    (lambda: metrics.tie_aware_precision_at_k(_D, _R, num_bits=2, k=None), "k"),
    (lambda: metrics.precision_at_radius(_D, _R, num_bits=2, radius=-1), "radius"),
    (lambda: metrics.recall_at_radius(_D, _R, num_bits=2, radius=1.0), "radius"),
    (lambda: metrics.knn_classify(_D, np.array([0, 1, 2]), num_classes=2, num_bits=2, k=1), "db_labels"),
    (lambda: metrics.knn_classify(_D, np.array([0, 1]), num_classes=2, num_bits=2, k=1), "db_labels"),
    (lambda: metrics.knn_classify(_D, np.array([0, 1, 1]), num_classes=2, num_bits=2, k=0), "k"),
    (lambda: metrics.knn_classify(_D, np.array([0, 1, 1]), num_classes=2, num_bits=2, k=1,
                                  threshold="nearest"), "threshold"),
    (lambda: metrics.knn_classify(_D, np.array([0, 1, 1]), num_classes=0, num_bits=2, k=1), "num_classes"),
    (lambda: metrics.error_rate(np.array([1, 2]), np.array([1])), "labels"),
    (lambda: metrics.mean_and_count(np.array([1, 2])), "values"),
    (lambda: metrics.tie_aware_ap_from_histogram(np.array([1, 2])), "hist"),
    (lambda: metrics.tie_aware_ap_from_histogram(-np.ones((2, 2), int)), "hist"),
    (lambda: metrics.tie_aware_ndcg_from_histogram(np.full((2, 2), np.nan)), "hist"),
    (lambda: metrics.knn_classify_from_histogram(np.ones((3, 2), int), k=1, threshold="x"), "threshold"),
    (lambda: metrics.tie_aware_ndcg_from_histogram(np.ones((2, 2), int), k=0), "k"),
    (lambda: metrics.precision_at_radius_from_histogram(np.ones((2, 2), int), radius=1, dtype="float16"), "dtype"),
    (lambda: metrics.mean_and_count(np.ones(3), where=np.ones(3)), "where"),
    (lambda: metrics.knn_classify(_D, np.array([0, 1, 1]), num_classes=2, num_bits=2, k=1,
                                  where=np.ones((1, 3), int)), "where"),
    (lambda: metrics.tie_aware_ndcg(_D, np.array([[1, 70, 0]]), num_bits=2), "affinity"),
])
def test_bad_input_raises_naming_the_argument(call, argname):
  with pytest.raises(ValueError, match=argname):
    call()


def test_formulas_on_concrete_histograms_compile_nothing():
  # A histogram shape no other test uses: anything jitted would have to compile for it.
  hist = np.random.default_rng(13).integers(0, 50, size=(7, 13, 3)).astype(np.int32)
  with compiled_programs() as compiled:
    outs = [metrics.tie_aware_ap_from_histogram(hist), metrics.tie_aware_ap_from_histogram(hist, k=5),
            metrics.optimistic_ap_from_histogram(hist), metrics.pessimistic_ap_from_histogram(hist),
            metrics.tie_aware_ndcg_from_histogram(hist), metrics.tie_aware_precision_at_k_from_histogram(hist, k=4),
            metrics.precision_at_radius_from_histogram(hist, radius=3),
            metrics.recall_at_radius_from_histogram(hist, radius=3),
            metrics.retrieved_at_radius_from_histogram(hist, radius=3),
            *metrics.precision_recall_curve_from_histogram(hist),
            metrics.knn_classify_from_histogram(hist, k=2)]
    outs += list(metrics.mean_and_count(outs[0]))
    jax.block_until_ready(outs)
  assert compiled == []
  assert all(isinstance(o, jax.Array) for o in outs)




def _eleven_point_loop(distances, relevant):
  """PASCAL VOC 2007 AP of one query by loops: a precision-recall point after each group of equal distances."""
  total = sum(relevant)
  if total == 0:
    return float("nan")
  points = []
  for d in sorted(set(distances)):
    kept = [r for x, r in zip(distances, relevant) if x <= d]
    points.append((sum(kept) / total, sum(kept) / len(kept)))
  return sum(max([p for r, p in points if r >= t - 1e-9], default=0.0) for t in [i / 10 for i in range(11)]) / 11


def test_interpolated_ap_matches_loops_on_hamming_and_real_distances():
  rng = np.random.default_rng(7)
  d = rng.integers(0, 5, size=(6, 25))
  rel = (rng.random((6, 25)) < 0.3).astype(np.int32)
  rel[5] = 0
  want = [_eleven_point_loop(list(d[q]), list(rel[q])) for q in range(6)]
  with jax.enable_x64(True):
    np.testing.assert_allclose(np.asarray(metrics.interpolated_ap(d, rel, num_bits=4)), want, rtol=1e-12)
    real = d + 0.25 * rng.integers(0, 2, size=d.shape)  # more, finer tie groups
    want_real = [_eleven_point_loop(list(real[q]), list(rel[q])) for q in range(6)]
    np.testing.assert_allclose(np.asarray(metrics.interpolated_ap(real, rel)), want_real, rtol=1e-12)
    where = rng.random(d.shape) < 0.8
    want_where = [_eleven_point_loop(list(d[q][where[q]]), list(rel[q][where[q]])) for q in range(6)]
    np.testing.assert_allclose(np.asarray(metrics.interpolated_ap(d, rel, num_bits=4, where=where)), want_where,
                               rtol=1e-12)
    traced = jax.jit(lambda a, b: metrics.interpolated_ap(a, b, num_bits=4))(d, rel)
    np.testing.assert_allclose(np.asarray(traced), want, rtol=1e-12)
  with pytest.raises(ValueError, match="relevance"):
    metrics.interpolated_ap(d, rel[:, :3], num_bits=4)
