"""hashjax.metrics against independent references.

* Tie-aware metrics: the mean of the ordinary metric over ALL orders of tied
  items, enumerated with itertools (pure python), to 1e-9 in float64.
* Large ranks (beyond the brute-force reach): He et al.'s eq. 3 / eq. 4 summed
  term by term over every rank with math.fsum.
* Deterministic AP, radius metrics, kNN: python loops; AP without ties: sklearn.
"""

import contextlib
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.metrics import average_precision_score

from compile_events import compiled_programs
from hashjax import codes
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

#: Every formula runs on three paths: numpy on the host for concrete inputs; under jit on the
#: CPU, the same numpy code through jax.pure_callback ("traced"); under jit on other backends,
#: jax.numpy traced into the caller's program ("compiled", forced here on the CPU). The
#: contract tests run all three against the references.
PATHS = ["host", "traced", "compiled"]


def _compiled_formulas(compiled: bool = True):
  """Traced formulas compiled with jax.numpy, as on an accelerator (no host callback)."""
  return metrics._compiled_formulas() if compiled else contextlib.nullcontext()


def _on(path):
  """``call(fn, *arrays, **options)`` -> numpy result of ``fn`` on the given path."""
  def call(fn, *arrays, **options):
    if path == "host":
      out = fn(*arrays, **options)
    else:
      with _compiled_formulas(path == "compiled"):  # the choice is made while tracing
        out = jax.jit(lambda *xs: fn(*xs, **options))(*arrays)
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
  # Few distinct distances = big ties. num_bits stays 7 (one compilation for all cases).
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
    got = _on(path)(every_metric, d, rel, aff, where)  # traced: one program for every metric
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


def _eq3_direct(hist, k=None):
  n = hist.sum(-1)
  p = n - hist[:, 0]
  npos = p.sum()
  if npos == 0:
    return NAN
  k = int(n.sum()) if k is None else k
  a = np.cumsum(n) - n
  pb = np.cumsum(p) - p
  terms = []
  for d in range(len(n)):
    if p[d] == 0:
      continue
    r = (p[d] - 1) / (n[d] - 1) if n[d] > 1 else 0.0
    t = np.arange(a[d] + 1, min(a[d] + n[d], k) + 1, dtype=np.float64)
    terms.extend((p[d] / n[d]) * (pb[d] + 1 + (t - a[d] - 1) * r) / t)
  return math.fsum(terms) / min(npos, k)


def _eq4_direct(hist, k=None):
  n = hist.sum(-1)
  total = int(n.sum())
  k = total if k is None else k
  disc = 1.0 / np.log2(np.arange(2, total + 2, dtype=np.float64))  # D(t), t = 1..N
  gains = 2.0 ** np.arange(hist.shape[-1]) - 1.0
  a = np.cumsum(n) - n
  dcg = math.fsum((hist[d] * gains).sum() / n[d] * math.fsum(disc[a[d]:min(a[d] + n[d], k)])
                  for d in range(len(n)) if n[d])
  ideal_gains = np.repeat(gains[::-1], hist.sum(0)[::-1])[:k]
  ideal = math.fsum(ideal_gains * disc[:len(ideal_gains)])
  return NAN if ideal == 0 else dcg / ideal


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
  for q in range(16):
    assert _close(ap_t[q], _eq3_direct(hist[q])), q
    assert _close(ap_k[q], _eq3_direct(hist[q], 20000)), q
    assert _close(ndcg[q], _eq4_direct(hist[q])), q
    assert _close(ndcg_k[q], _eq4_direct(hist[q], 20000)), q


@pytest.mark.parametrize("path", PATHS)
def test_harmonic_and_discount_sums_match_fsum(path):
  rng = np.random.default_rng(0)
  a = np.concatenate([[0, 0, 31, 32, 33, 63, 64, 65, 1000, 99999], rng.integers(0, 300000, 30)])
  b = a + np.concatenate([[0, 5, 2, 1, 2, 3, 1, 40, 1, 1], rng.integers(0, 300000, 30)])
  inv = 1.0 / np.arange(1, b.max() + 1, dtype=np.float64)
  disc = 1.0 / np.log2(np.arange(2, b.max() + 2, dtype=np.float64))
  t_all = np.arange(1, b.max() + 1, dtype=np.float64)
  def sums(dtype):
    if path == "host":
      ai, bi = a.astype(np.int32), b.astype(np.int32)
      return metrics._harmonic_pieces(ai, bi, dtype, np) + (metrics._discount_sum(ai, bi, dtype, np),)
    fn = jax.jit(lambda a, b: metrics._harmonic_pieces(a, b, dtype) + (metrics._discount_sum(a, b, dtype),))
    return map(np.asarray, fn(jnp.asarray(a, jnp.int32), jnp.asarray(b, jnp.int32)))

  with jax.enable_x64(True):
    dh, s1, ds = sums(np.float64)
  dh32, s132, ds32 = sums(np.float32)
  for i in range(len(a)):
    want_dh = math.fsum(inv[a[i]:b[i]])
    want_s1 = math.fsum((t_all[a[i]:b[i]] - a[i] - 1) / t_all[a[i]:b[i]])
    want_ds = math.fsum(disc[a[i]:b[i]])
    for got, got32, want in ((dh[i], dh32[i], want_dh), (s1[i], s132[i], want_s1), (ds[i], ds32[i], want_ds)):
      assert abs(got - want) <= 1e-13 * max(want, 1e-300), (a[i], b[i], got, want)
      assert abs(got32 - want) <= 8 * 2.0 ** -24 * want, (a[i], b[i], got32, want)  # <= 8 ulp


@pytest.mark.parametrize("num_bits,dots", [(64, 1), (200, 3)])
def test_compiled_counts_of_long_and_short_codes_equal_host(num_bits, dots):
  # Traced, the counts are one matmul up to 64 bits and sums and cumulative sums beyond
  # (metrics._COUNT_MAP_ELEMENTS); both equal the host path.
  rng = np.random.default_rng(num_bits)
  hist = rng.integers(0, 400, size=(2, 3, num_bits + 1, 3)).astype(np.int32)
  hist[0, 1] = 0  # no item at all
  hist[1, 2, :, 1:] = 0  # no relevant item
  fns = [lambda h: metrics.tie_aware_ap_from_histogram(h), lambda h: metrics.tie_aware_ap_from_histogram(h, k=50),
         metrics.optimistic_ap_from_histogram, metrics.pessimistic_ap_from_histogram,
         lambda h: metrics.tie_aware_ndcg_from_histogram(h), lambda h: metrics.tie_aware_ndcg_from_histogram(h, k=50),
         lambda h: metrics.tie_aware_precision_at_k_from_histogram(h, k=70),
         metrics.precision_recall_curve_from_histogram]
  with jax.enable_x64(True), _compiled_formulas():
    jaxpr = jax.make_jaxpr(metrics.tie_aware_ap_from_histogram)(hist)
    assert sum(e.primitive.name == "dot_general" for e in jaxpr.eqns) == dots
    for fn in fns:
      host, compiled = _on("host")(fn, hist), _on("compiled")(fn, hist)
      for h, c in zip(jax.tree_util.tree_leaves(host), jax.tree_util.tree_leaves(compiled)):
        np.testing.assert_allclose(c, h, rtol=1e-12, atol=1e-15)


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


@pytest.mark.parametrize("path", PATHS)
def test_radius_metrics_and_curve_match_loops(path):
  rng = np.random.default_rng(9)
  d = rng.integers(0, 6, size=(8, 25))
  d[0] = 5  # retrieves nothing below radius 5
  rel = (rng.random((8, 25)) < 0.4).astype(int)
  rel[1] = 0
  on = _on(path)
  with jax.enable_x64(True):
    prec_curve, rec_curve = on(metrics.precision_recall_curve, d, rel, num_bits=5)
    for radius in [0, 2, 5, 9]:
      prec = on(metrics.precision_at_radius, d, rel, num_bits=5, radius=radius)
      rec = on(metrics.recall_at_radius, d, rel, num_bits=5, radius=radius)
      ret = on(metrics.retrieved_at_radius, d, num_bits=5, radius=radius)
      for q in range(8):
        inside = [i for i in range(25) if d[q, i] <= radius]
        hits = sum(rel[q, i] for i in inside)
        assert ret[q] == len(inside)
        assert _close(prec[q], hits / len(inside) if inside else 0.0)
        assert _close(rec[q], hits / rel[q].sum() if rel[q].sum() else NAN)
        if radius <= 5:
          assert _close(prec_curve[q, radius], prec[q]) and _close(rec_curve[q, radius], rec[q])
  assert prec_curve.shape == (8, 6)


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
@pytest.mark.parametrize("compiled", [False, True])
def test_jit_and_vmap_compatible(compiled, x64):
  rng = np.random.default_rng(1)
  d = rng.integers(0, 5, size=(3, 20))
  rel = (rng.random((3, 20)) < 0.5).astype(np.int32)
  eager = np.asarray(metrics.tie_aware_ap(d, rel, num_bits=4))
  with _compiled_formulas(compiled), jax.enable_x64(x64):  # float64 results cross the callback too
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
  # Float values are traced with jax.numpy (no host callback, which has no derivative).
  w = jnp.array([1.0, 2.0, 3.0])
  grad = jax.jit(jax.grad(lambda v: metrics.mean_and_count(v * 2.0).mean))(w)
  np.testing.assert_allclose(np.asarray(grad), [2.0 / 3] * 3, rtol=1e-6)
  where = np.array([True, False, True])
  masked = jax.jit(lambda v, m: metrics.mean_and_count(v, where=m))(w, where)
  assert float(masked.mean) == 2.0 and int(masked.num_undefined) == 0


def test_training_objectives_compile_their_formulas():
  # The scores LambdaRank evaluates on every swap of every step stay in the XLA program.
  from hashjax import objectives  # pylint: disable=g-import-not-at-top
  d = np.random.default_rng(4).integers(0, 9, size=(3, 12)).astype(np.int32)
  aff = (d % 3 == 0).astype(np.int32)
  for score in (lambda x, a: objectives.average_precision_score(x, a, num_bits=8),
                lambda x, a: objectives.ndcg_score(x, a, num_bits=8, num_levels=2),
                lambda x, a: objectives.average_precision_from_histogram(
                    codes.distance_histogram(x, a, num_bits=8, num_levels=2))):
    text = jax.jit(score).lower(d, aff).as_text()
    assert "callback" not in text and "log_plus_one" in text
  text = jax.jit(lambda x, a: metrics.tie_aware_ap(x, a, num_bits=8)).lower(d, aff).as_text()
  assert "callback" in text  # the public metric under a caller's jit on the CPU


def test_traced_formulas_are_a_host_callback_on_the_cpu():
  # Under jit on the CPU the caller's program holds a call to the numpy formula, not the
  # formula: no log1p or exp of the harmonic and discount sums to compile.
  hist = np.random.default_rng(2).integers(0, 9, size=(4, 9, 2)).astype(np.int32)
  lowered = lambda: jax.jit(lambda h: (metrics.tie_aware_ap_from_histogram(h),  # a new function:
                                       metrics.tie_aware_ndcg_from_histogram(h))).lower(hist).as_text()  # no cache
  with _compiled_formulas(False):
    text = lowered()
  with _compiled_formulas(True):
    compiled = lowered()
  assert "callback" in text and "log_plus_one" not in text and "exponential" not in text
  assert "callback" not in compiled and "log_plus_one" in compiled


# ----------------------------------------------------------------------------
# Histograms (codes.py) and the one-call evaluation.


def test_histogram_paths_match_bincount():
  rng = np.random.default_rng(6)
  # Past the bucketing size: the jitted core streams an unpadded [3, N] block by block.
  d = rng.integers(0, 33, size=(3, 70001)).astype(np.int32)
  a = rng.integers(0, 3, size=(3, 70001))
  where = rng.random((3, 70001)) < 0.9
  got = np.asarray(codes._distance_histogram(jnp.asarray(d), jnp.asarray(a), 32, 3, jnp.asarray(where)))
  for q in range(3):
    keys = d[q][where[q]] * 3 + a[q][where[q]]
    np.testing.assert_array_equal(got[q].reshape(-1), np.bincount(keys, minlength=99))
  # Large numpy input: sent to the device in row tiles (the last one padded), same counts.
  d = rng.integers(0, 33, size=(20, 70001)).astype(np.int16)
  a = rng.integers(0, 3, size=(20, 70001))
  got = np.asarray(codes.distance_histogram(d, a, num_bits=32, num_levels=3))
  for q in range(20):
    np.testing.assert_array_equal(got[q].reshape(-1), np.bincount(d[q] * 3 + a[q], minlength=99))
  # Label-streamed Hamming histogram (no [Q, N] relevance matrix).
  q = rng.integers(0, 2, size=(5, 40))
  x = rng.integers(0, 2, size=(777, 40))
  # Labels of two integer dtypes (compared as int32 in the kernel).
  ql, xl = rng.integers(0, 3, 5).astype(np.int8), rng.integers(0, 3, 777).astype(np.uint16)
  hist = np.asarray(codes._stream_hamming_bucketed(codes.pack_bits(q), codes.pack_bits(x), num_bits=40,
                                                   num_levels=2, chunk_size=100, query_labels=ql,
                                                   db_labels=xl))
  for i in range(5):
    dist = (q[i] != x).sum(1)
    np.testing.assert_array_equal(hist[i].reshape(-1), np.bincount(dist * 2 + (xl == ql[i]), minlength=82))
  # An affinity matrix is not padded: blocks of 100 items (chunk_size), the last one shifted back over 777.
  aff = rng.integers(0, 3, size=(5, 777))
  hist = np.asarray(codes.hamming_histogram(codes.pack_bits(q), codes.pack_bits(x), aff, num_bits=40,
                                            chunk_size=100))
  for i in range(5):
    dist = (q[i] != x).sum(1)
    np.testing.assert_array_equal(hist[i].reshape(-1), np.bincount(dist * 3 + aff[i], minlength=123))


@pytest.mark.parametrize("shape", [(1001, 100), (7, 3), (5, 40000), (2, 131073), (2, 131075), (3, 2, 9)])
@pytest.mark.parametrize("shared", [False, True])
def test_streamed_distance_histogram_blocks_match_bincount(shape, shared):
  # The jitted core on device arrays (no bucketing): row tiles that do not divide the rows
  # (1001 x 100: two tiles of 501 rows), blocks that do not divide the items (131,075 = 3 blocks of
  # 43,692 minus 1), exact ones, and an [N] affinity and mask shared by every row.
  rng = np.random.default_rng(sum(shape))
  d = rng.integers(0, 9, size=shape).astype(np.int32)
  a = rng.integers(0, 3, size=shape[-1:] if shared else shape)
  where = rng.random(shape[-1:] if shared else shape) < 0.8
  got = np.asarray(codes._distance_histogram(jnp.asarray(d), jnp.asarray(a), 8, 3, jnp.asarray(where)))
  plain = np.asarray(codes._distance_histogram(jnp.asarray(d), None, 8, 1))
  assert got.shape == shape[:-1] + (9, 3) and plain.shape == shape[:-1] + (9, 1)
  for idx in np.ndindex(*shape[:-1]):
    ai, wi = (a, where) if shared else (a[idx], where[idx])
    np.testing.assert_array_equal(got[idx].reshape(-1), np.bincount((d[idx] * 3 + ai)[wi], minlength=27))
    np.testing.assert_array_equal(plain[idx].reshape(-1), np.bincount(d[idx], minlength=9))


@pytest.mark.parametrize("shared", [False, True])
def test_bucketed_distance_histogram_of_numpy_inputs(shared):
  # Small inputs padded to power-of-two shapes (items past N left out by num_valid), large ones in
  # row tiles of a power of two rows within 2^20 elements (the last one padded with rows): both
  # against bincount, and new numbers of rows in the same buckets compile nothing (the tiles are
  # joined on the host).
  rng = np.random.default_rng(8 + shared)
  for shape, again in (((5, 37), (7, 35)), ((150, 9000), (149, 9000))):
    d = rng.integers(0, 9, size=shape).astype(np.int32)
    a = rng.integers(0, 3, size=shape[-1:] if shared else shape)
    where = rng.random(shape[-1:] if shared else shape) < 0.8
    got = np.asarray(codes._bucketed_distance_histogram(d, a, 8, 3, where))
    for i in range(shape[0]):
      ai, wi = (a, where) if shared else (a[i], where[i])
      np.testing.assert_array_equal(got[i].reshape(-1), np.bincount((d[i] * 3 + ai)[wi], minlength=27))
    codes._bucketed_distance_histogram(d, None, 8, 1)
    d2 = rng.integers(0, 9, size=again).astype(np.int32)
    with compiled_programs() as compiled:
      plain = np.asarray(codes._bucketed_distance_histogram(d2, None, 8, 1))
    assert compiled == [], (shape, again, compiled)
    for i in range(again[0]):
      np.testing.assert_array_equal(plain[i, :, 0], np.bincount(d2[i], minlength=9))


def test_new_database_sizes_share_compilations():
  rng = np.random.default_rng(0)
  q = codes.pack_bits(rng.integers(0, 2, size=(4, 16)))
  codes.hamming_histogram(q, codes.pack_bits(rng.integers(0, 2, size=(3000, 16))), num_bits=16)
  before = codes._stream_hamming._cache_size()
  for n in (2100, 2500, 3999):
    codes.hamming_histogram(q, codes.pack_bits(rng.integers(0, 2, size=(n, 16))), num_bits=16)
  assert codes._stream_hamming._cache_size() == before
  metrics.tie_aware_ap(np.zeros((2, 5), int), np.ones((2, 5), int), num_bits=3)
  before = codes._distance_histogram._cache_size()
  metrics.tie_aware_ap(np.zeros((2, 7), int), np.ones((2, 7), int), num_bits=3)
  assert codes._distance_histogram._cache_size() == before


def _bound_direct(hist, first):
  n = hist.sum(-1)
  p = n - hist[:, 0]
  if p.sum() == 0:
    return NAN
  terms, seen, pos_seen = [], 0, 0
  for d in range(len(n)):
    start = seen if first else seen + n[d] - p[d]
    terms += [(pos_seen + j) / (start + j) for j in range(1, p[d] + 1)]
    seen, pos_seen = seen + n[d], pos_seen + p[d]
  return math.fsum(terms) / p.sum()


def _precision_at_k_direct(hist, k):
  n = hist.sum(-1)
  p = n - hist[:, 0]
  a = np.cumsum(n) - n
  return math.fsum(p[d] * (min(max(k, a[d]), a[d] + n[d]) - a[d]) / n[d] for d in range(len(n)) if n[d]) \
      / min(k, n.sum())


def test_evaluate_codes_matches_direct_formulas():
  rng = np.random.default_rng(8)
  num_bits, nq, ndb = 12, 9, 300
  ql, xl = rng.integers(0, 3, nq), rng.integers(0, 3, ndb)
  protos = rng.integers(0, 2, size=(3, num_bits))
  qb = protos[ql] ^ (rng.random((nq, num_bits)) < 0.2)
  xb = protos[xl] ^ (rng.random((ndb, num_bits)) < 0.2)
  qw, xw = codes.pack_bits(qb), codes.pack_bits(xb)
  ql[0] = 7  # no relevant item
  rel = (ql[:, None] == xl[None, :]).astype(int)
  d = np.array([[int((qb[i] != xb[j]).sum()) for j in range(ndb)] for i in range(nq)])  # pair loop
  hist = np.stack([np.bincount(d[i] * 2 + rel[i], minlength=2 * (num_bits + 1)).reshape(-1, 2)
                   for i in range(nq)])
  ap_t = [_eq3_direct(h) for h in hist]
  ndcg = [_eq4_direct(h) for h in hist]
  prec2 = [rel[i][d[i] <= 2].mean() if (d[i] <= 2).any() else 0.0 for i in range(nq)]
  want = {
      "tie_aware_ap": np.nanmean(ap_t), "tie_aware_ndcg": np.nanmean(ndcg),
      "optimistic_ap": np.nanmean([_bound_direct(h, True) for h in hist]),
      "pessimistic_ap": np.nanmean([_bound_direct(h, False) for h in hist]),
      "precision_at_radius": np.mean(prec2),
      "num_empty_at_radius": int(sum((d[i] > 2).all() for i in range(nq))),
      "recall_at_radius": np.nanmean([rel[i][d[i] <= 2].sum() / rel[i].sum() if rel[i].sum() else NAN
                                      for i in range(nq)]),
      "tie_aware_precision_at_k": np.mean([_precision_at_k_direct(h, 50) for h in hist]),
      "num_undefined_ap": 1, "num_undefined_ndcg": 1, "num_queries": nq, "num_db": ndb, "radius": 2, "k": 50,
  }
  with jax.enable_x64(True):
    out = metrics.evaluate_codes(qw, xw, num_bits=num_bits, query_labels=ql, db_labels=xl, radius=2, k=50)
    out_rel = metrics.evaluate_codes(qw, xw, num_bits=num_bits, relevance=rel, radius=2, k=50, chunk_size=64)
  assert set(out) == set(want)
  for key, val in want.items():
    assert _close(out[key], val, 1e-12), key
    assert _close(out_rel[key], val, 1e-12), key
  # float32 (default mode) agrees to 1e-6.
  out32 = metrics.evaluate_codes(qw, xw, num_bits=num_bits, query_labels=ql, db_labels=xl, radius=2, k=50)
  for key, val in want.items():
    assert abs(out32[key] - val) <= 1e-6, key
  # The bit-sliced kernel (large calls; forced here) gives the same evaluation.
  assert codes._sliced_layout(qw, xw, num_bits, (ql, xl)) is None
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(codes, "_SLICED_MIN_PAIRS", 0)
    assert codes._sliced_layout(qw, xw, num_bits, (ql, xl))
    with jax.enable_x64(True):
      out_sliced = metrics.evaluate_codes(qw, xw, num_bits=num_bits, query_labels=ql, db_labels=xl, radius=2, k=50)
  for key, val in want.items():
    assert _close(out_sliced[key], val, 1e-12), key
  # Multi-level affinity: NDCG uses the levels.
  aff = rng.integers(0, 3, size=(nq, ndb))
  hist3 = np.stack([np.bincount(d[i] * 3 + aff[i], minlength=3 * (num_bits + 1)).reshape(-1, 3)
                    for i in range(nq)])
  with jax.enable_x64(True):
    out_aff = metrics.evaluate_codes(qw, xw, num_bits=num_bits, affinity=aff)
  assert _close(out_aff["tie_aware_ndcg"], np.nanmean([_eq4_direct(h) for h in hist3]), 1e-12)
  assert _close(out_aff["tie_aware_ap"], np.nanmean([_eq3_direct(h) for h in hist3]), 1e-12)


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
    (lambda: metrics.evaluate_codes(codes.pack_bits(np.ones((2, 4))), np.full((3, 1), 255, np.uint32), num_bits=4,
                                    query_labels=np.zeros(2, int), db_labels=np.zeros(3, int)), "db_words"),
    (lambda: metrics.evaluate_codes(codes.pack_bits(np.ones((2, 4))), codes.pack_bits(np.ones((3, 4))),
                                    num_bits=4), "relevance"),
    (lambda: metrics.evaluate_codes(codes.pack_bits(np.ones((2, 4))), codes.pack_bits(np.ones((3, 4))),
                                    num_bits=4, query_labels=np.array([0, 1])), "db_labels"),
    (lambda: metrics.evaluate_codes(codes.pack_bits(np.ones((2, 4))), codes.pack_bits(np.ones((3, 4))),
                                    num_bits=4, query_labels=np.array([0, 1]), db_labels=np.array([0, 1])),
     "db_labels"),
    (lambda: metrics.evaluate_codes(codes.pack_bits(np.ones((2, 4))), codes.pack_bits(np.ones((3, 4))),
                                    num_bits=4, relevance=np.full((2, 3), 2)), "relevance"),
    (lambda: metrics.evaluate_codes(codes.pack_bits(np.ones((2, 4))), codes.pack_bits(np.ones((3, 4))),
                                    num_bits=4, affinity=-np.ones((2, 3), int)), "affinity"),
    (lambda: metrics.evaluate_codes(codes.pack_bits(np.ones((2, 4))), codes.pack_bits(np.ones((3, 4))),
                                    num_bits=40, relevance=np.ones((2, 3), int)), "num_bits"),
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


@pytest.mark.parametrize("shape", [(0, 5), (3, 0), (2, 0, 4)])
def test_distance_histogram_of_nothing_is_zero(shape):
  d = np.zeros(shape, np.int32)
  want = np.zeros(shape[:-1] + (4, 1), np.int32)
  np.testing.assert_array_equal(np.asarray(codes.distance_histogram(d, num_bits=3)), want)
  traced = jax.jit(lambda x: codes.distance_histogram(x, num_bits=3))(jnp.asarray(d))
  np.testing.assert_array_equal(np.asarray(traced), want)


def test_histogram_too_large_for_int32_keys_is_refused():
  # 2^21 rows x 1,024 bins: the flat int32 keys would wrap; traced only (no memory is allocated).
  with pytest.raises(ValueError, match="2\\^31"):
    codes._distance_histogram.lower(jax.ShapeDtypeStruct((1 << 21, 1), np.int32), None, 1023, 1)
