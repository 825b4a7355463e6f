"""Tests for hashjax.relaxations against independent numpy references.

References written here from the paper, not from the implementation:
eq. 3 (AP_T) and eq. 4 (DCG_T) as loops over positions, brute-force averages
over every ordering of tied items, eq. 14 as a loop, eqs. 15-16 in numpy, and
central finite differences. Histograms of one fixed shape are reused so each
jitted function compiles a few times only.
"""

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hashjax import mappings
from hashjax import relaxations as R
from hashjax.objectives import talr

B = 8  # histograms are [Q, B + 1, V]
Q = 6


# --------------------------------------------------------------------------- references


def ap_t_ref(hist):
  """Eq. 3: tie-aware AP from an integer histogram [B + 1, 2], looping over positions."""
  hist = np.asarray(hist, np.float64)
  npos_total = hist[:, 1].sum()
  if npos_total == 0:
    return float("nan")
  total, before, pos_before = 0.0, 0.0, 0.0
  for nneg, npos in hist:
    n = nneg + npos
    if npos > 0:
      slope = (npos - 1) / (n - 1) if n > 1 else 0.0  # n = 1: the term (t - N - 1) is 0
      s = 0.0
      for t in range(int(before) + 1, int(before + n) + 1):
        s += (pos_before + (t - before - 1) * slope + 1) / t
      total += npos / n * s
    before += n
    pos_before += npos
  return total / npos_total


def ap_of_ranking(labels):
  """Eq. 1 for one ranking of {0, 1} labels."""
  hits, total = 0, 0.0
  for k, rel in enumerate(labels, 1):
    if rel:
      hits += 1
      total += hits / k
  return total / hits


def tie_orders(hist):
  """Every distinct arrangement of labels within each tie (all equally likely)."""
  per_bin = []
  for counts in np.asarray(hist, int):
    labels = [v for v, c in enumerate(counts) for _ in range(c)]
    per_bin.append(sorted(set(itertools.permutations(labels))))
  for combo in itertools.product(*per_bin):
    yield [x for tie in combo for x in tie]


def discount(t):
  return 1.0 / math.log2(t + 1)


def dcg_t_ref(hist):
  """Eq. 4: tie-aware DCG from an integer histogram [B + 1, V]."""
  hist = np.asarray(hist, np.float64)
  gains = 2.0 ** np.arange(hist.shape[1]) - 1
  total, before = 0.0, 0
  for counts in hist:
    n = int(counts.sum())
    if n:
      total += (gains @ counts) / n * sum(discount(t) for t in range(before + 1, before + n + 1))
    before += n
  return total


def ideal_ref(totals):
  gains = 2.0 ** np.arange(len(totals)) - 1
  ranked = sorted((g for g, c in zip(gains, np.asarray(totals, int)) for _ in range(c)), reverse=True)
  return sum(g * discount(t) for t, g in enumerate(ranked, 1))


def dcg_of_ranking(levels):
  return sum((2.0 ** v - 1) * discount(t) for t, v in enumerate(levels, 1))


def random_int_hist(rng, q, levels, high=4, p_empty=0.3, bins=B + 1):
  h = rng.integers(0, high + 1, (q, bins, levels))
  h[rng.random((q, bins, levels)) < p_empty] = 0
  return h


# --------------------------------------------------------------------------- relaxed codes and distances


def test_relax_is_scaled_sigmoid():
  rng = np.random.default_rng(0)
  f = rng.normal(size=(3, 5)).astype(np.float32) * 3
  got = np.asarray(R.relax(f, alpha=1.7))
  np.testing.assert_allclose(got, 2 / (1 + np.exp(-1.7 * f)) - 1, atol=1e-6)
  assert got.dtype == np.float32
  np.testing.assert_array_equal(np.asarray(R.relax(f, alpha=1e4)), np.sign(f))
  # alpha may be traced (annealed under jit)
  np.testing.assert_allclose(jax.jit(lambda a: R.relax(f, alpha=a))(jnp.float32(1.7)), got, atol=1e-6)


def test_relaxed_hamming_matches_loops_and_hamming_on_signs():
  rng = np.random.default_rng(1)
  q = rng.uniform(-1, 1, (2, 3, 7))
  x = rng.uniform(-1, 1, (4, 7))
  got = np.asarray(R.relaxed_hamming(q, x))
  assert got.shape == (2, 3, 4)
  for b, i, j in itertools.product(range(2), range(3), range(4)):
    assert got[b, i, j] == pytest.approx((7 - sum(q[b, i, k] * x[j, k] for k in range(7))) / 2, abs=1e-5)
  qs, xs = np.sign(q[0]), np.sign(x)
  ham = np.array([[sum(a != c for a, c in zip(u, v)) for v in xs] for u in qs])
  np.testing.assert_array_equal(np.asarray(R.relaxed_hamming(qs, xs)), ham)


def test_nair_hamming_matches_eq2_loop():
  rng = np.random.default_rng(2)
  hq, hx = rng.uniform(0, 1, (3, 6)), rng.uniform(0, 1, (5, 6))
  got = np.asarray(R.nair_hamming(hq, hx))
  ref = [[sum(a * (1 - c) + (1 - a) * c for a, c in zip(u, v)) for v in hx] for u in hq]
  np.testing.assert_allclose(got, ref, atol=1e-5)
  bq, bx = (hq > 0.5).astype(np.float32), (hx > 0.5).astype(np.float32)
  np.testing.assert_array_equal(np.asarray(R.nair_hamming(bq, bx)), (bq[:, None] != bx[None]).sum(-1))
  half = np.full((1, 6), 0.5)
  assert float(R.nair_hamming(half, half)[0, 0]) == 3.0  # not a metric: b/2 against itself


def test_squared_euclidean_and_distance_registry():
  rng = np.random.default_rng(3)
  q, x = rng.normal(size=(3, 6)), rng.normal(size=(5, 6))
  np.testing.assert_allclose(np.asarray(R.squared_euclidean(q, x)),
                             ((q[:, None] - x[None]) ** 2).sum(-1), rtol=1e-5, atol=1e-5)
  u, v = rng.uniform(0, 1, (3, 6)), rng.uniform(0, 1, (5, 6))
  for name, fn in R.DISTANCES.items():
    assert fn is getattr(R, name)
    assert fn(u, v).shape == (3, 5)


def test_off_diagonal_matches_loop():
  x = np.arange(2 * 4 * 4).reshape(2, 4, 4)
  got = np.asarray(R.off_diagonal(x))
  ref = [[[x[b, r, c] for c in range(4) if c != r] for r in range(4)] for b in range(2)]
  np.testing.assert_array_equal(got, ref)


# --------------------------------------------------------------------------- soft histograms


def soft_hist_loop(dist, aff, num_bits, levels, width):
  h = np.zeros((num_bits + 1, levels))
  for x, a in zip(dist, aff):
    for d in range(num_bits + 1):
      h[d, a] += max(0.0, 1 - abs(x - d) / width)
  return h


def test_soft_histogram_at_integers_is_counting_histogram():
  rng = np.random.default_rng(4)
  dist = rng.integers(0, B + 1, (2, 3, 40))
  aff = rng.integers(0, 3, (2, 3, 40))
  got = np.asarray(R.soft_histogram(dist.astype(np.float32), aff, num_bits=B, num_levels=3))
  ref = np.zeros((2, 3, B + 1, 3))
  for idx in np.ndindex(2, 3):
    for d, a in zip(dist[idx], aff[idx]):
      ref[idx + (d, a)] += 1
  np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("width", [0.5, 1.0, 2.0])
def test_soft_histogram_matches_eq14_loop(width):
  rng = np.random.default_rng(5)
  dist = rng.uniform(-0.5, B + 0.5, (3, 30))
  aff = rng.integers(0, 2, (3, 30))
  got = np.asarray(R.soft_histogram(dist, aff, num_bits=B, num_levels=2, width=width))
  for i in range(3):
    np.testing.assert_allclose(got[i], soft_hist_loop(dist[i], aff[i], B, 2, width), atol=1e-5)
  if width == 1.0:  # inside [0, b] every item keeps unit mass
    inside = (dist >= 0) & (dist <= B)
    np.testing.assert_allclose(R.soft_histogram(dist[inside], aff[inside], num_bits=B, num_levels=2).sum(),
                               inside.sum(), rtol=1e-6)


def test_soft_histogram_gradients_match_eqs_15_16():
  rng = np.random.default_rng(6)
  b, n, levels, width = 6, 7, 3, 1.0
  with jax.enable_x64(True):
    phi_q = rng.uniform(-1, 1, b)
    phi_x = rng.uniform(-1, 1, (n, b))
    aff = rng.integers(0, levels, n)

    def hist_of(q, x):
      return R.soft_histogram(R.relaxed_hamming(q[None], x)[0], aff, num_bits=b, num_levels=levels)

    jac_x = np.asarray(jax.jacobian(hist_of, argnums=1)(jnp.asarray(phi_q), jnp.asarray(phi_x)))
    jac_q = np.asarray(jax.jacobian(hist_of, argnums=0)(jnp.asarray(phi_q), jnp.asarray(phi_x)))
  dist = (b - phi_x @ phi_q) / 2

  def ddelta(x, d):  # derivative of the triangular kernel (eq. 14)
    return -np.sign(x - d) / width if abs(x - d) < width else 0.0

  ref_x = np.zeros((b + 1, levels, n, b))
  ref_q = np.zeros((b + 1, levels, b))
  for d in range(b + 1):
    for v in range(levels):
      for i in range(n):
        if aff[i] == v:
          ref_x[d, v, i] = ddelta(dist[i], d) * (-phi_q / 2)  # eq. 15
          ref_q[d, v] += ddelta(dist[i], d) * (-phi_x[i] / 2)  # eq. 16
  np.testing.assert_allclose(jac_x, ref_x, atol=1e-12)
  np.testing.assert_allclose(jac_q, ref_q, atol=1e-12)


# --------------------------------------------------------------------------- continuations


def test_harmonic_number_and_cumulative_discount_exact_at_integers():
  xs = np.array([0, 1, 2, 3, 7, 50, 1000, 20000], np.float64)
  with jax.enable_x64(True):
    h = np.asarray(R.harmonic_number(xs))
    f = np.asarray(R.cumulative_discount(xs))
  for x, hv, fv in zip(xs.astype(int), h, f):
    t = np.arange(1, x + 1, dtype=np.float64)
    assert hv == pytest.approx(np.sum(1 / t), rel=1e-10, abs=1e-12)
    assert fv == pytest.approx(np.sum(1 / np.log2(t + 1)), rel=1e-9, abs=1e-12)
  # float32: relative error of order the float32 epsilon
  np.testing.assert_allclose(R.cumulative_discount(xs.astype(np.float32)), f, rtol=2e-6)
  np.testing.assert_allclose(R.harmonic_number(xs.astype(np.float32)), h, rtol=2e-6)


def test_continuations_obey_recurrence_and_are_concave_between_integers():
  rng = np.random.default_rng(7)
  x = rng.uniform(1, 400, 64)
  with jax.enable_x64(True):
    f = lambda z: np.asarray(R.cumulative_discount(jnp.asarray(z)))
    h = lambda z: np.asarray(R.harmonic_number(jnp.asarray(z)))
    np.testing.assert_allclose(f(x) - f(x - 1), 1 / np.log2(x + 1), rtol=1e-9)
    np.testing.assert_allclose(h(x) - h(x - 1), 1 / x, rtol=1e-9)
    grid = np.linspace(0, 6, 241)
    for g in (f(grid), h(grid)):
      assert np.all(np.diff(g) > 0)
      assert np.all(np.diff(g, 2) < 1e-12)  # concave, no periodic wiggle between integers


# --------------------------------------------------------------------------- relaxed AP at integer histograms


def test_digamma_ap_equals_brute_force_tie_average():
  rng = np.random.default_rng(8)
  hists = []
  while len(hists) < Q:
    h = random_int_hist(rng, 1, 2, high=2, p_empty=0.4, bins=3)[0]
    if h[:, 1].sum() and h.sum() <= 7:
      hists.append(h)
  padded = np.zeros((Q, B + 1, 2))
  padded[:, :3] = hists
  with jax.enable_x64(True):
    got = np.asarray(R.relaxed_ap(padded))
  for h, g in zip(hists, got):
    brute = np.mean([ap_of_ranking(r) for r in tie_orders(h)])
    assert ap_t_ref(h) == pytest.approx(brute, abs=1e-12)  # the reference is eq. 3
    assert g == pytest.approx(brute, abs=1e-10)


def test_digamma_ap_equals_eq3_exactly_at_integer_histograms():
  rng = np.random.default_rng(9)
  hist = random_int_hist(rng, Q, 2, high=40)
  hist[0] = 0
  hist[0, 3] = [5, 2]  # all tied
  hist[1, :, 1] = 0  # no relevant item
  hist[2] = 0
  hist[2, 0, 1] = 1  # a lone relevant item in the first bin
  hist[2, 4] = [3, 1]
  with jax.enable_x64(True):
    got = np.asarray(R.relaxed_ap(hist.astype(np.float64)))
  ref = np.array([ap_t_ref(h) for h in hist])
  assert got[1] == 0.0 and np.isnan(ref[1])
  keep = ~np.isnan(ref)
  np.testing.assert_allclose(got[keep], ref[keep], rtol=0, atol=1e-9)
  assert got[2] == pytest.approx((1 + (2 / 2 + 2 / 3 + 2 / 4 + 2 / 5) / 4) / 2, abs=1e-12)
  got32 = np.asarray(R.relaxed_ap(hist.astype(np.float32)))
  assert got32.dtype == np.float32
  np.testing.assert_allclose(got32[keep], ref[keep], atol=2e-6)
  np.testing.assert_array_equal(np.asarray(R.relaxed_ap(hist)), got32)  # int counts: float32


def ln_gap_and_bound(hist):
  """AP_T - AP_ln at an integer histogram, from eq. 9 (A, B) and the harmonic integral."""
  gap, bound, before, pos_before = 0.0, 0.0, 0, 0
  for nneg, npos in np.asarray(hist, int):
    n = nneg + npos
    if npos:
      a = (npos - 1) / (n - 1) if n > 1 else 0.0
      b = pos_before + 1 - a * (before + 1)
      exact = sum(1 / t for t in range(before + 1, before + n + 1))
      err = exact - math.log((before + n) / (before + 1))
      assert 1 / (before + n) - 1e-12 <= err <= 1 / (before + 1) + 1e-12  # integral test
      gap += npos / n * b * err
      bound += npos / n * abs(b) / (before + 1)
    before += n
    pos_before += npos
  npos_total = np.asarray(hist)[:, 1].sum()
  return gap / npos_total, bound / npos_total


def test_ln_ap_gap_to_ap_t_is_the_harmonic_integral_error_and_shrinks():
  rng = np.random.default_rng(10)
  hist = random_int_hist(rng, Q, 2, high=6)
  hist[:, 0, 1] = 1  # a relevant item first: the top of the ranking, where ln undervalues most
  scales = [1, 2, 4, 8, 16]
  with jax.enable_x64(True):
    got = np.stack([np.asarray(R.relaxed_ap((k * hist).astype(np.float64), harmonic="ln"))
                    for k in scales])
  gaps = np.zeros((len(scales), Q))
  for i, k in enumerate(scales):
    for q in range(Q):
      ref = ap_t_ref(k * hist[q])
      gap, bound = ln_gap_and_bound(k * hist[q])
      # eq. 7 at integers is eq. 3 with the harmonic sums replaced by logs, exactly
      assert ref - got[i, q] == pytest.approx(gap, abs=1e-10)
      assert abs(gap) <= bound + 1e-12
      assert bound <= (B + 1) / (k * hist[q, :, 1].sum()) + 1e-12  # O(#bins / N+)
      gaps[i, q] = gap
  assert np.all(np.abs(gaps[0]) > 1e-2)  # the gap is real at small counts
  # once no tie holds a single item (k >= 2) the gap is O(1 / k): it halves as counts double
  assert np.all(np.abs(gaps[2:]) < np.abs(gaps[1:-1]))
  assert np.all(np.abs(gaps[-1]) < np.abs(gaps[1]) / 4)


# ------------------------------------------------------------- relaxed DCG / NDCG at integer histograms


def test_exact_dcg_equals_brute_force_tie_average():
  rng = np.random.default_rng(11)
  hists = []
  while len(hists) < Q:
    h = random_int_hist(rng, 1, 3, high=2, p_empty=0.5, bins=3)[0]
    if h.sum() <= 7:
      hists.append(h)
  padded = np.zeros((Q, B + 1, 3))
  padded[:, :3] = hists
  with jax.enable_x64(True):
    got = np.asarray(R.relaxed_dcg(padded))
  for h, g in zip(hists, got):
    brute = np.mean([dcg_of_ranking(r) for r in tie_orders(h)]) if h.sum() else 0.0
    assert dcg_t_ref(h) == pytest.approx(brute, abs=1e-12)  # the reference is eq. 4
    assert g == pytest.approx(brute, abs=1e-9)


def test_ndcg_forms_at_integer_histograms():
  rng = np.random.default_rng(12)
  hist = random_int_hist(rng, Q, 4, high=30)
  hist[0] = 0
  hist[0, 2] = [3, 2, 0, 1]  # all tied
  hist[1, :, 1:] = 0  # no relevant item
  hist[2] = 0  # ties of at most one item
  hist[2, 0] = [0, 0, 1, 0]
  hist[2, 1] = [1, 0, 0, 0]
  hist[2, 5] = [0, 1, 0, 0]
  h64 = hist.astype(np.float64)
  with jax.enable_x64(True):
    dcg = {d: np.asarray(R.relaxed_dcg(h64, discount=d)) for d in R.DISCOUNTS}
    ndcg = {d: np.asarray(R.relaxed_ndcg(h64, discount=d)) for d in R.DISCOUNTS}
    ideal = np.asarray(R.ideal_dcg(h64.sum(-2)))
  ref_dcg = np.array([dcg_t_ref(h) for h in hist])
  ref_ideal = np.array([ideal_ref(t) for t in hist.sum(-2)])
  np.testing.assert_allclose(dcg["exact"], ref_dcg, rtol=1e-9)
  np.testing.assert_allclose(ideal, ref_ideal, rtol=1e-9)
  rel = ref_ideal > 0
  np.testing.assert_allclose(ndcg["exact"][rel], ref_dcg[rel] / ref_ideal[rel], rtol=1e-9)
  assert not rel[1] and all(ndcg[d][1] == 0 for d in R.DISCOUNTS)
  np.testing.assert_allclose(np.asarray(R.relaxed_ndcg(hist.astype(np.float32))), ndcg["exact"], atol=2e-6)
  # "li" (eq. 8) lies below DCG_T by the integral-test bounds of the discount sums
  for q in range(Q):
    lo = hi = 0.0
    before = 0
    for counts in hist[q]:
      n = counts.sum()
      if n:
        mean_gain = (2.0 ** np.arange(4) - 1) @ counts / n
        lo += mean_gain * discount(before + n)
        hi += mean_gain * discount(before + 1)
      before += n
    assert lo - 1e-9 <= ref_dcg[q] - dcg["li"][q] <= hi + 1e-9
  # "simplified": the discount at the mean position is at most the mean discount (D convex)
  assert np.all(dcg["simplified"] <= ref_dcg + 1e-9)
  assert dcg["simplified"][2] == pytest.approx(ref_dcg[2], abs=1e-12)


def test_li_ndcg_gap_shrinks_as_counts_grow():
  rng = np.random.default_rng(13)
  hist = random_int_hist(rng, Q, 3, high=5, p_empty=0.2)
  hist[:, 0, 2] = 1
  scales = [1, 4, 16]
  with jax.enable_x64(True):
    got = np.stack([np.asarray(R.relaxed_ndcg((k * hist).astype(np.float64), discount="li")) for k in scales])
  ref = np.array([[dcg_t_ref(k * h) / ideal_ref((k * h).sum(0)) for h in hist] for k in scales])
  gap = np.abs(ref - got)
  assert np.all(gap[1] < gap[0]) and np.all(gap[2] < gap[1])
  assert np.all(gap[0] > 1e-3)


def test_nearly_empty_bins_count_for_nothing_only_in_the_exact_at_integers_forms():
  rng = np.random.default_rng(19)
  hist = random_int_hist(rng, Q, 2, high=5, p_empty=0.0).astype(np.float64)
  hist[:, 0] = [1.0, 1.0]
  hist[:, 5] = 0.0
  tiny = hist.copy()
  tiny[:, 5] = [0.0, 1e-6]  # a trace of relevant mass in an empty bin
  t3 = np.zeros((Q, B + 1, 3))
  t3[:, :, 0], t3[:, :, 2] = hist[:, :, 0], hist[:, :, 1]
  tiny3 = t3.copy()
  tiny3[:, 5] = [0.0, 0.0, 1e-6]
  with jax.enable_x64(True):
    for harmonic in R.HARMONICS:
      jump = np.asarray(R.relaxed_ap(tiny, harmonic=harmonic) - R.relaxed_ap(hist, harmonic=harmonic))
      if harmonic == "digamma":
        assert np.all(np.abs(jump) < 1e-5)
      else:  # eq. 7's limit as the bin empties: (N^-_{d-1}) ln((C_{d-1} + 1) / C_{d-1}) / N^+
        before, neg_before = hist[:, :5].sum((1, 2)), hist[:, :5, 0].sum(1)
        limit = neg_before * np.log((before + 1) / before) / hist[:, :, 1].sum(1)
        np.testing.assert_allclose(jump, limit, rtol=1e-4)
        assert np.all(jump > 1e-2)
    for discount in R.DISCOUNTS:
      jump = np.asarray(R.relaxed_ndcg(tiny3, discount=discount) - R.relaxed_ndcg(t3, discount=discount))
      if discount == "li":  # eq. 8 with a tie one position short: a negative contribution
        assert np.all(jump < -1e-2)
      else:
        assert np.all(np.abs(jump) < 1e-5)


def test_perfectly_separated_soft_histograms_score_one():
  rng = np.random.default_rng(14)
  ap_hist = np.zeros((Q, B + 1, 2))
  split = np.zeros((Q, B + 1, 3))  # each level spread over consecutive bins
  single = np.zeros((Q, B + 1, 3))  # one bin per level
  for q in range(Q):
    ap_hist[q, :3, 1] = rng.uniform(0.05, 3, 3)
    ap_hist[q, 3:, 0] = rng.uniform(0.05, 3, B - 2)
    split[q, :2, 2] = rng.uniform(0.05, 3, 2)
    split[q, 2:5, 1] = rng.uniform(0.05, 3, 3)
    split[q, 5:, 0] = rng.uniform(0.05, 3, B - 4)
    single[q, [1, 4, 6], [2, 1, 0]] = rng.uniform(1.05, 5, 3)
  ap_hist[0, :3, 1] = [0.0, 1.0, 0.97]  # c_d at and near the removable singularity
  np.testing.assert_allclose(R.relaxed_ap(ap_hist.astype(np.float32)), 1.0, atol=1e-5)
  ln = np.asarray(R.relaxed_ap(ap_hist.astype(np.float32), harmonic="ln"))
  np.testing.assert_allclose(ln[1:], 1.0, atol=1e-5)
  assert ln[0] == pytest.approx(0.97 / 1.97, abs=1e-6)  # eq. 7 scores the lone item at the top 0
  # "exact" is additive over consecutive ties; the others only score 1 with one tie per level
  np.testing.assert_allclose(R.relaxed_ndcg(split.astype(np.float32)), 1.0, atol=1e-5)
  for d in R.DISCOUNTS:
    np.testing.assert_allclose(R.relaxed_ndcg(single.astype(np.float32), discount=d), 1.0, atol=1e-5)
    if d != "exact":
      assert np.all(np.abs(np.asarray(R.relaxed_ndcg(split.astype(np.float32), discount=d)) - 1) > 1e-3)


# --------------------------------------------------------------------------- gradients


def fd_grad(f, x, eps=1e-6):
  g = np.zeros_like(x)
  for idx in np.ndindex(x.shape):
    e = np.zeros_like(x)
    e[idx] = eps
    g[idx] = (f(x + e) - f(x - e)) / (2 * eps)
  return g


def test_end_to_end_gradients_match_finite_differences():
  """logits -> relax -> relaxed Hamming -> query-vs-rest soft histogram -> AP_r / NDCG_r."""
  rng = np.random.default_rng(15)
  m, feat = Q, 3  # Q queries against the other Q - 1 items, B bits: hist [Q, B + 1, V]
  x = rng.normal(size=(m, feat))
  labels = np.array([0, 0, 1, 1, 2, 2])
  diff = np.abs(labels[:, None] - labels[None])
  aff2 = (diff == 0).astype(np.int32)
  aff3 = np.where(diff == 0, 2, np.where(diff == 1, 1, 0)).astype(np.int32)

  def objective(w, kind):
    codes = R.relax(x @ w, alpha=1.5)
    dist = R.off_diagonal(R.relaxed_hamming(codes, codes))
    if kind == "ap":
      return jnp.mean(R.relaxed_ap(R.soft_histogram(dist, R.off_diagonal(aff2), num_bits=B, num_levels=2)))
    return jnp.mean(R.relaxed_ndcg(R.soft_histogram(dist, R.off_diagonal(aff3), num_bits=B, num_levels=3)))

  with jax.enable_x64(True):
    w = rng.normal(size=(feat, B))
    compiled = jax.jit(objective, static_argnums=1)  # the differences evaluate it 2 * w.size times
    for kind in ("ap", "ndcg"):
      auto = np.asarray(jax.jit(jax.grad(objective), static_argnums=1)(jnp.asarray(w), kind))
      num = fd_grad(lambda v: float(compiled(jnp.asarray(v), kind)), w)
      assert np.abs(auto).max() > 1e-3
      np.testing.assert_allclose(auto, num, rtol=1e-5, atol=1e-8, err_msg=kind)


def test_relaxed_metric_gradients_match_finite_differences_on_soft_histograms():
  rng = np.random.default_rng(16)
  with jax.enable_x64(True):
    # the shapes of the end-to-end test, so the compiled gradients are shared
    h2 = rng.uniform(0.0, 3.0, (Q, B + 1, 2))
    h2[0, 1] = [0.3, 0.4]  # c_d < 1, inside the digamma slope's interpolation window
    h2[1, 2] = [0.05, 1.02]  # c_d near 1
    h3 = rng.uniform(0.0, 3.0, (Q, B + 1, 3))
    h3[0, 0] = [0.01, 0.02, 0.005]  # a nearly empty first bin
    for fn, h, option in [(R.relaxed_ap, h2, "digamma"), (R.relaxed_ap, h2, "ln"),
                          (R.relaxed_ndcg, h3, "exact"), (R.relaxed_ndcg, h3, "simplified"),
                          (R.relaxed_ndcg, h3, "li")]:
      key = "harmonic" if fn is R.relaxed_ap else "discount"
      f = jax.jit(lambda v: jnp.sum(fn(v, **{key: option})))  # jitted: the differences evaluate it 2 x h.size times
      auto = np.asarray(jax.grad(f)(jnp.asarray(h)))
      num = fd_grad(lambda v: float(f(jnp.asarray(v))), h, eps=1e-7)
      np.testing.assert_allclose(auto, num, rtol=1e-5, atol=1e-6, err_msg=option)


# --------------------------------------------------------------------------- degenerate inputs


def degenerate_hists(rng, levels, repeats=8):
  """[repeats, Q, B + 1, V] histograms with empty bins, c_d at/near 0 and 1,
  all-tied, empty and no-relevant queries, and counts in the thousands.

  The last (query 5 of the last repeat) is a regression case: the digamma
  form's Stirling tail once raised (x y)^8 in float32, which overflows once
  about 253 items are ranked ahead of a bin (a minibatch of 500); the value
  stayed finite but the gradient was inf / inf = NaN.
  """
  pool = np.array([0.0, 0.0, 1e-30, 1e-7, 1e-3, 0.5, 1 - 1e-7, 1.0, 1 + 1e-7, 1.0 + 1e-3, 2.0, 7.3])
  h = rng.choice(pool, (repeats, Q, B + 1, levels))
  mix = rng.random(h.shape) < 0.3
  h[mix] = rng.uniform(0, 5, mix.sum())
  h[:, 0] = 0
  for r in range(repeats):
    h[r, 0, rng.integers(B + 1)] = rng.choice(pool[2:], levels)  # all tied
  h[:, 1, :, 1:] = 0  # no relevant item
  h[:, 2] = 0  # empty query
  h[:, 3] = 0
  h[:, 3, 0, -1] = 1.0  # a lone relevant item first
  h[:, 4, :, 1:] = rng.choice(pool[2:5], (repeats, B + 1, levels - 1))  # tiny leaked relevant mass
  h[-1, 5] = rng.uniform(0.0, 2000.0, (B + 1, levels))  # long lists
  return h.astype(np.float32)


def test_degenerate_bins_give_finite_values_and_gradients():
  rng = np.random.default_rng(17)
  cases = [(R.relaxed_ap, 2, "harmonic", o) for o in R.HARMONICS]
  cases += [(R.relaxed_ndcg, 3, "discount", o) for o in R.DISCOUNTS]
  weights = jnp.arange(1.0, Q + 1.0)
  for fn, levels, key, option in cases:
    h = degenerate_hists(rng, levels)
    loss = lambda x: (jnp.sum(fn(x, **{key: option}) * weights), fn(x, **{key: option}))
    grad, values = jax.jit(jax.grad(loss, has_aux=True))(jnp.asarray(h))
    grad, values = np.asarray(grad), np.asarray(values)
    assert values.dtype == grad.dtype == np.float32
    assert np.all(np.isfinite(values)), option
    assert np.all(np.isfinite(grad)), option
    assert np.all(values[:, 1:3] == 0) and np.all(grad[:, 1:3] == 0), option
    mask = np.asarray(R.has_relevant(h))[:, :5]
    np.testing.assert_array_equal(mask, [[True, False, False, True, True]] * len(h))
    if option in ("digamma", "exact"):
      np.testing.assert_allclose(values[:, 3], 1.0, atol=1e-5)  # a lone relevant item first is perfect
    if option == "ln":
      assert np.all(values[:, 3] == 0.0)  # eq. 7's empty integral


def test_jit_and_vmap_agree_with_eager():
  rng = np.random.default_rng(18)
  h = jnp.asarray(rng.uniform(0, 3, (Q, B + 1, 2)), jnp.float32)
  eager = R.relaxed_ap(h)  # concrete: numpy on the host; under jit: jax.numpy (the same formula, rounded apart)
  np.testing.assert_allclose(jax.jit(R.relaxed_ap)(h), eager, rtol=1e-6)
  np.testing.assert_allclose(jax.vmap(R.relaxed_ap)(h.reshape(2, 3, B + 1, 2)).reshape(-1), eager, rtol=1e-6)
  d = jnp.asarray(rng.uniform(0, B, (3, 10)), jnp.float32)
  a = jnp.asarray(rng.integers(0, 2, (3, 10)))
  soft = jax.jit(lambda d, a: R.soft_histogram(d, a, num_bits=B, num_levels=2))
  np.testing.assert_allclose(soft(d, a), R.soft_histogram(d, a, num_bits=B, num_levels=2), rtol=1e-6)


@pytest.mark.parametrize("x64,transform", [(False, lambda f: jax.jit(jax.vmap(f))), (True, jax.jit)],
                         ids=["float32-vmap", "float64-jit"])
def test_relaxed_metrics_concrete_and_traced_agree(x64, transform):
  # Concrete histograms run the formulas with numpy on the host, traced ones with jax.numpy.
  rng = np.random.default_rng(21)
  h2 = rng.uniform(0, 3, (Q, B + 1, 2))
  h3 = rng.uniform(0, 3, (Q, B + 1, 3))
  h3[0] = 0.0  # no mass at all
  x = rng.uniform(0, 40, (Q, 4))
  cases = [(lambda h, o=o: R.relaxed_ap(h, harmonic=o), h2) for o in R.HARMONICS]
  cases += [(lambda h, o=o: R.relaxed_ndcg(h, discount=o), h3) for o in R.DISCOUNTS]
  cases += [(lambda h, o=o: R.relaxed_dcg(h, discount=o), h3) for o in R.DISCOUNTS]
  cases += [(lambda t, o=o: R.ideal_dcg(t, discount=o), h3.sum(-2)) for o in R.DISCOUNTS]
  cases += [(R.has_relevant, h3), (R.harmonic_number, x), (R.cumulative_discount, x)]
  dtype = np.float64 if x64 else np.float32
  with jax.enable_x64(x64):
    for fn, arg in cases:
      arg = arg.astype(dtype)
      concrete, traced = np.asarray(fn(arg)), np.asarray(transform(fn)(arg))
      assert concrete.dtype == traced.dtype == (np.bool_ if fn is R.has_relevant else dtype)
      np.testing.assert_allclose(traced, concrete, rtol=1e-12 if x64 else 2e-6, atol=1e-12 if x64 else 1e-6)


# --------------------------------------------------------------------------- bad inputs


def test_bad_inputs_raise_value_errors_naming_the_argument():
  h2 = np.ones((2, B + 1, 2), np.float32)
  d = np.ones((2, 5), np.float32)
  a = np.zeros((2, 5), np.int32)
  codes = np.zeros((3, 4), np.float32)
  bad = [
      (lambda: R.relaxed_ap(np.ones((2, B + 1, 3))), "hist"),
      (lambda: R.relaxed_ap(-h2), "hist"),
      (lambda: R.relaxed_ap(h2 * np.nan), "hist"),
      (lambda: R.relaxed_ap(np.ones(3)), "hist"),
      (lambda: R.relaxed_ap(h2, harmonic="log"), "harmonic"),
      (lambda: R.relaxed_ndcg(h2, discount="li2"), "discount"),
      (lambda: R.relaxed_dcg(np.ones((2, 0, 2)), discount="exact"), "hist"),
      (lambda: R.ideal_dcg(-np.ones(3)), "level_totals"),
      (lambda: R.has_relevant(np.ones(3)), "hist"),
      (lambda: R.soft_histogram(d, a, num_bits=0, num_levels=2), "num_bits"),
      (lambda: R.soft_histogram(d, a, num_bits=B, num_levels=0), "num_levels"),
      (lambda: R.soft_histogram(d, a, num_bits=B, num_levels=2, width=0.0), "width"),
      (lambda: R.soft_histogram(d, a + 2, num_bits=B, num_levels=2), "affinity"),
      (lambda: R.soft_histogram(d, a.astype(np.float32), num_bits=B, num_levels=2), "affinity"),
      (lambda: R.soft_histogram(d, a[:, :4], num_bits=B, num_levels=2), "affinity"),
      (lambda: R.soft_histogram(d * np.inf, a, num_bits=B, num_levels=2), "distances"),
      (lambda: R.relax(codes, alpha=0.0), "alpha"),
      (lambda: R.relax(codes, alpha=True), "alpha"),
      (lambda: R.relax(codes.astype(bool), alpha=1.0), "logits"),
      (lambda: R.relaxed_hamming(codes + 2, codes), "query"),
      (lambda: R.relaxed_hamming(codes, codes[:, :3]), "items"),
      (lambda: R.relaxed_hamming(codes[None].repeat(2, 0), codes[None].repeat(3, 0)), "items"),
      (lambda: R.relaxed_hamming(codes[0], codes), "query"),
      (lambda: R.nair_hamming(codes, codes - 1), "items"),
      (lambda: R.squared_euclidean(codes, codes * np.nan), "items"),
      (lambda: R.off_diagonal(np.ones((3, 4))), "x"),
      (lambda: R.cumulative_discount(-np.ones(2)), "x"),
      (lambda: R.harmonic_number(np.array([np.nan])), "x"),
  ]
  for call, name in bad:
    with pytest.raises(ValueError, match=name):
      call()


def test_negative_affinity_and_non_positive_slopes_are_rejected():
  d = np.ones((2, 5), np.float32)
  a = np.zeros((2, 5), np.int32)
  a[1, 3] = -4
  with pytest.raises(ValueError) as info:
    R.soft_histogram(d, a, num_bits=B, num_levels=2)
  assert str(info.value).startswith("affinity: expected non-negative") and "smallest value of -4" in str(info.value)
  for alpha in (0.0, -3.0, -3, float("nan"), float("inf"), np.float32(-1.0)):
    with pytest.raises(ValueError, match="alpha: expected a finite number > 0"):
      R.relax(np.zeros((2, 3), np.float32), alpha=alpha)
  with pytest.raises(ValueError, match="alpha"):
    R.relax(np.zeros((2, 3), np.float32), alpha=jnp.float32(-1.0))  # a concrete array
  for kwargs, name in [(dict(init=-3.0, final=1.0), "init"), (dict(init=1.0, final=0.0), "final")]:
    with pytest.raises(ValueError, match=name):
      mappings.alpha_schedule(0, steps=10, **kwargs)


def test_talr_objectives_check_their_slope_where_they_are_built():
  # Under jit the slope inside the loss is traced, where relax() cannot check it: the objective checks it
  # when it is built, for a fixed slope and for a schedule's start.
  m = mappings.make_mapping("linear", num_bits=8)
  ap = talr.metric_fn("ap")
  builders = (lambda **kw: talr.query_vs_rest(m, **{"metric": ap, "num_bits": 8, **kw}),
              lambda **kw: talr.query_vs_database(m, **{"metric": ap, "num_bits": 8, **kw}))
  bad = [(dict(alpha=-3.0), "alpha: expected a finite number > 0, got -3.0"), (dict(alpha=0), "alpha"),
         (dict(alpha=lambda t: -1.0 + 0.5 * t), r"alpha: expected a schedule of values > 0, got alpha\(0\) = -1.0"),
         (dict(alpha=functools.partial(mappings.alpha_schedule, init=-3.0, final=1.0, steps=10)), "init"),
         (dict(width=0.0), "width"), (dict(num_levels=0), "num_levels"), (dict(metric=None), "metric")]
  for build in builders:
    for kwargs, match in bad:
      with pytest.raises(ValueError, match=match):
        build(**kwargs)
  with pytest.raises(ValueError, match="cached"):
    talr.query_vs_database(m, metric=ap, num_bits=8, cached="yes")
  # A valid slope gives the loss of relax() with that slope, under jit too.
  x = np.random.default_rng(0).normal(size=(6, 5)).astype(np.float32)
  params = mappings.init(jax.random.key(0), m, x)
  aff = (np.arange(6)[:, None] % 2 == np.arange(6)[None] % 2).astype(np.int32)
  batch = {"features": x, "affinity": aff}
  loss_fn = talr.query_vs_rest(m, metric=ap, num_bits=8, alpha=2.0)
  phi = np.asarray(R.relax(mappings.apply(m, params, x), alpha=2.0))
  want = talr.ranking_loss(R.off_diagonal(R.relaxed_hamming(phi, phi)), R.off_diagonal(aff), metric=ap, num_bits=8,
                           num_levels=2)[0]
  np.testing.assert_allclose(float(jax.jit(loss_fn)(params, batch, 0)[0]), float(want), rtol=1e-5)


def _smooth_ap_loop(d, rel, tau):
  """Smooth-AP of one row by loops over items: ranks as 1 + the sigmoid-counted items before each."""
  sig = lambda z: 1.0 / (1.0 + math.exp(-z))
  pos = [i for i in range(len(d)) if rel[i] > 0]
  if not pos:
    return 0.0
  total = 0.0
  for i in pos:
    r_all = 1.0 + sum(sig((d[i] - d[j]) / tau) for j in range(len(d)) if j != i)
    r_pos = 1.0 + sum(sig((d[i] - d[j]) / tau) for j in pos if j != i)
    total += r_pos / r_all
  return total / len(pos)


def test_smooth_ap_matches_loop_and_sorted_ap_as_temperature_vanishes():
  rng = np.random.default_rng(3)
  d = rng.uniform(0, 8, size=(4, 9))
  rel = rng.integers(0, 2, size=(4, 9))
  rel[3] = 0  # a row without relevant items scores 0
  with jax.enable_x64(True):
    for tau in (0.3, 2.0):
      got = np.asarray(R.smooth_ap(jnp.asarray(d), rel, temperature=tau))
      np.testing.assert_allclose(got, [_smooth_ap_loop(d[q], rel[q], tau) for q in range(4)], rtol=1e-12)
    # Distinct distances, tau far below their gaps: the AP of the order the distances give (sorted by hand).
    got = np.asarray(R.smooth_ap(jnp.asarray(d), rel, temperature=1e-6))
  for q in range(3):
    order = sorted(range(9), key=lambda i: d[q, i])
    hits, ap = 0, 0.0
    for rank, i in enumerate(order, start=1):
      if rel[q, i]:
        hits += 1
        ap += hits / rank
    assert got[q] == pytest.approx(ap / hits, abs=1e-9)
  assert got[3] == 0.0


def test_tie_unaware_objective_gradients_match_finite_differences_and_reject_bad_options():
  rng = np.random.default_rng(16)
  x = rng.normal(size=(6, 3))
  labels = np.array([0, 0, 1, 1, 2, 2])
  aff = (labels[:, None] == labels[None]).astype(np.int32)
  mapping = mappings.make_mapping("linear", num_bits=B)

  with jax.enable_x64(True):
    params = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64),
                          mappings.init(jax.random.key(0), mapping, jnp.asarray(x)))
    loss_fn = talr.tie_unaware_ap(mapping, num_bits=B, temperature=0.5, alpha=1.5)
    flat, unravel = jax.flatten_util.ravel_pytree(params)
    value = lambda v: loss_fn(unravel(v), {"features": jnp.asarray(x), "affinity": aff}, 0)[0]
    # The loss by loops: relaxed codes, relaxed Hamming distances to the other items, Smooth-AP per query.
    codes = np.asarray(R.relax(mappings.apply(mapping, params, jnp.asarray(x)), alpha=1.5))
    want = -np.mean([_smooth_ap_loop([0.5 * (B - codes[q] @ codes[i]) for i in range(6) if i != q],
                                     [aff[q, i] for i in range(6) if i != q], 0.5) for q in range(6)])
    assert float(value(flat)) == pytest.approx(want, rel=1e-10)
    auto = np.asarray(jax.grad(value)(flat))
    num = fd_grad(lambda v: float(jax.jit(value)(jnp.asarray(v))), np.asarray(flat))
  assert np.abs(auto).max() > 1e-4
  np.testing.assert_allclose(auto, num, rtol=1e-5, atol=1e-8)
  with pytest.raises(ValueError, match="temperature"):
    talr.tie_unaware_ap(mapping, num_bits=B, temperature=0.0)
  with pytest.raises(ValueError, match="relevance"):
    R.smooth_ap(np.zeros((2, 3)), np.zeros((2, 4)), temperature=1.0)
