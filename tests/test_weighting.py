"""hashjax.weighting against independent references: python loops over tuples, numpy means, scipy's L-BFGS-B."""

import numpy as np
import pytest
import scipy.optimize

from hashjax import codes, weighting


def _problem(seed=0, n=60, num_bits=10, num_classes=3):
  """Labels and codes where bit 0 and bit 1 follow the class (with some flips) and the rest are noise."""
  rng = np.random.default_rng(seed)
  labels = np.repeat(np.arange(num_classes), n // num_classes)
  bits = rng.integers(0, 2, (n, num_bits)).astype(np.uint8)
  flip = rng.random(n) < 0.1
  bits[:, 0] = (labels % 2) ^ flip
  bits[:, 1] = (labels == 2) ^ (rng.random(n) < 0.2)
  return bits, labels


def _differences_loop(bits, tuples):
  """x = a_qd - a_qs and c = a_qs - a_qs', one tuple and one bit at a time."""
  num, num_bits = len(tuples), bits.shape[1]
  x = np.zeros((num, num_bits))
  c = np.zeros((num, num_bits))
  for t, (q, s, s2, d) in enumerate(tuples):
    for k in range(num_bits):
      a_qs = float(bits[q, k] != bits[s, k])
      a_qs2 = float(bits[q, k] != bits[s2, k])
      a_qd = float(bits[q, k] != bits[d, k])
      x[t, k] = a_qd - a_qs
      c[t, k] = a_qs - a_qs2
  return x, c


def _objective_loop(w, bits, tuples, lam, mu):
  total = 0.5 * lam * sum(v * v for v in w)
  x, c = _differences_loop(bits, tuples)
  for t in range(len(tuples)):
    margin = sum(w[k] * x[t, k] for k in range(len(w)))
    spread = sum(w[k] * c[t, k] for k in range(len(w)))
    total += (max(0.0, 1.0 - margin) ** 2 + mu * spread ** 2) / len(tuples)
  return total


def _scipy_optimum(bits, tuples, lam, mu):
  x, c = _differences_loop(bits, tuples)
  num = len(tuples)

  def value_and_grad(w):
    hinge = np.maximum(0.0, 1.0 - x @ w)
    spread = c @ w
    value = 0.5 * lam * w @ w + np.mean(hinge ** 2) + mu * np.mean(spread ** 2)
    return value, lam * w - (2.0 / num) * hinge @ x + (2.0 * mu / num) * spread @ c

  result = scipy.optimize.minimize(value_and_grad, np.ones(bits.shape[1]), jac=True, method="L-BFGS-B",
                                   bounds=[(0, None)] * bits.shape[1],
                                   options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 10000})
  return result.x, result.fun


def test_objective_matches_a_loop_over_tuples():
  bits, labels = _problem(num_bits=7, n=30)
  tuples = weighting.sample_tuples(labels, num_tuples=40, seed=3)
  w = np.random.default_rng(1).uniform(0, 1, 7).astype(np.float32)
  for lam, mu in [(0.0, 0.0), (0.3, 0.0), (0.1, 2.0)]:
    got = weighting.objective(w, bits, tuples, lam=lam, mu=mu)
    want = _objective_loop(w.astype(np.float64), bits, tuples, lam, mu)
    assert got == pytest.approx(want, rel=1e-5)


@pytest.mark.parametrize("num_bits", [3, 32, 33, 70])
def test_code_differences_from_words_equal_the_ones_from_bits(num_bits):
  bits, labels = _problem(num_bits=num_bits, n=30)
  tuples = weighting.sample_tuples(labels, num_tuples=25, seed=0)
  x, c = weighting.code_differences(codes.pack_bits(bits), tuples, num_bits=num_bits)
  want_x, want_c = _differences_loop(bits, tuples)
  assert x.dtype == np.int8 and x.shape == (25, num_bits)
  np.testing.assert_array_equal(x, want_x)
  np.testing.assert_array_equal(c, want_c)


@pytest.mark.parametrize("solver,tol", [("egd", 1e-3), ("pgd", 1e-4)])
def test_egd_and_pgd_reach_scipys_optimum_within_their_certified_tolerance(solver, tol):
  bits, labels = _problem()
  tuples = weighting.sample_tuples(labels, num_tuples=200, seed=1)
  lam, mu = 1.0, 0.5
  want_w, want_f = _scipy_optimum(bits, tuples, lam, mu)
  result = weighting.fit_batch(bits, labels, method=solver, tuples=tuples, lam=lam, mu=mu, tol=tol, max_iters=3000)
  w = result.weights
  assert result.converged
  assert w.dtype == np.float32 and w.shape == (10,) and np.all(w >= 0)
  # The stopping rule certifies |w - w*| <= tol |w|.
  assert np.linalg.norm(w - want_w) <= tol * np.linalg.norm(w)
  assert weighting.objective(w, bits, tuples, lam=lam, mu=mu) == pytest.approx(want_f, rel=1e-5)
  log = result.objective
  assert len(log) == result.iterations + 1 and np.all(np.diff(log) <= 0)
  assert log[-1] == pytest.approx(want_f, rel=1e-5)


def test_closed_form_is_the_clipped_mean_difference():
  bits, labels = _problem()
  tuples = weighting.sample_tuples(labels, num_tuples=200, seed=2)
  x, _ = _differences_loop(bits, tuples)
  want = np.maximum(0.0, x.mean(axis=0))
  assert (want == 0).any()  # the test covers the clipping
  np.testing.assert_allclose(weighting.closed_form(bits, labels, tuples=tuples), want, atol=1e-6)


def test_large_lambda_limit_is_twice_the_closed_form_over_lambda():
  # KKT: lam w = max(0, 2 mean(h x) - 2 mu M w) with hinges h = 1 - w.x -> 1 as w = O(1/lam) -> 0,
  # so lam w -> 2 max(0, mean x) with an error O(1/lam).
  bits, labels = _problem()
  tuples = weighting.sample_tuples(labels, num_tuples=200, seed=2)
  closed = weighting.closed_form(bits, labels, tuples=tuples)
  errors = []
  for lam in [1e1, 1e2, 1e3]:
    pgd = weighting.fit_batch(bits, labels, method="pgd", tuples=tuples, lam=lam, mu=0.5, tol=1e-4,
                              max_iters=3000).weights
    errors.append(np.abs(lam * pgd / 2 - closed).max())
    egd = weighting.fit_batch(bits, labels, method="egd", tuples=tuples, lam=lam, mu=0.5, tol=1e-3, max_iters=3000)
    assert egd.converged and np.linalg.norm(egd.weights - pgd) <= 1.1e-3 * np.linalg.norm(pgd)
  assert errors[0] > 5 * errors[1] > 25 * errors[2]
  assert errors[2] < 3e-3 * closed.max()


def _batch_first_step(bits, tuples, method, lam, mu):
  """The first accepted step of EGD / PGD written out in float64: the floored, scaled closed form, the first
  step size, halved until the Armijo condition holds."""
  x, c = _differences_loop(bits, tuples)
  num = len(tuples)

  def value(w):
    hinge = np.maximum(0.0, 1.0 - x @ w)
    return 0.5 * lam * w @ w + np.mean(hinge ** 2) + mu * np.mean((c @ w) ** 2)

  mean = x.mean(axis=0)
  w = np.maximum(mean, 0.01 * mean.max())
  w = w / (w @ mean)
  g = lam * w - (2.0 / num) * np.maximum(0.0, 1.0 - x @ w) @ x + (2.0 * mu / num) * (c @ w) @ c
  eta = 0.25 * (1.0 if method == "egd" else w.max()) / np.abs(g).max()
  while True:
    new = w * np.exp(-eta * g) if method == "egd" else np.maximum(0.0, w - eta * g)
    if value(new) - value(w) <= 1e-4 * g @ (new - w):
      return w, new, value(w), value(new)
    eta /= 2


@pytest.mark.parametrize("method", ["egd", "pgd"])
def test_batch_first_step_matches_a_numpy_step(method):
  bits, labels = _problem()
  tuples = weighting.sample_tuples(labels, num_tuples=120, seed=6)
  lam, mu = 0.1, 0.5
  _, want_w, f0, f1 = _batch_first_step(bits, tuples, method, lam, mu)
  result = weighting.fit_batch(bits, labels, method=method, tuples=tuples, lam=lam, mu=mu, tol=0.0, max_iters=1)
  assert result.iterations == 1
  np.testing.assert_allclose(result.weights, want_w, rtol=2e-5, atol=1e-7)
  np.testing.assert_allclose(result.objective, [f0, f1], rtol=1e-5)


def _online_loop(bits, tuples, lam, mu, step, batch_size, inner_steps):
  """The online pass written out in float64, one mini-batch and one exponentiated step at a time."""
  x_all, c_all = _differences_loop(bits, tuples)
  w = np.ones(bits.shape[1])
  total = np.zeros_like(w)
  for start in range(0, len(tuples), batch_size):
    x, c = x_all[start:start + batch_size], c_all[start:start + batch_size]
    count = len(x)
    smooth = 1.0 + step * (lam + 2.0 * (np.sum(x * x) + mu * np.sum(c * c)) / count)
    v = w.copy()
    for _ in range(inner_steps):
      grad = (v - w) + step * (lam * v - (2.0 / count) * np.maximum(0.0, 1.0 - x @ v) @ x
                               + (2.0 * mu / count) * (c @ v) @ c)
      v = v * np.exp(-grad / (smooth * v.max()))
    w = v
    total += w
  return total / -(-len(tuples) // batch_size), w


def test_online_matches_a_numpy_loop_over_batches():
  bits, labels = _problem()
  tuples = weighting.sample_tuples(labels, num_tuples=33, seed=4)  # 5 batches of 7, the last one of 5
  lam, mu, step = 0.05, 0.3, 0.5
  want_average, want_last = _online_loop(bits, tuples, lam, mu, step, 7, 2)
  result = weighting.fit_online(bits, labels, tuples=tuples, lam=lam, mu=mu, step=step, batch_size=7, inner_steps=2)
  assert result.batches == 5
  np.testing.assert_allclose(result.last, want_last, rtol=1e-5)
  np.testing.assert_allclose(result.average, want_average, rtol=1e-5)


def test_fit_runs_each_solver_with_its_defaults():
  bits, labels = _problem()
  tuples = weighting.sample_tuples(labels, num_tuples=weighting.DEFAULT_NUM_TUPLES, seed=2)
  q, s, d = (bits[tuples[:, i]] for i in (0, 1, 3))
  want = np.maximum(0.0, np.mean((q != d).astype(float) - (q != s), axis=0))
  np.testing.assert_allclose(weighting.fit(bits, labels, solver="closed_form", seed=2), want, atol=1e-6)
  np.testing.assert_array_equal(
      weighting.fit(bits, labels, solver="online_last", seed=2),
      weighting.fit_online(bits, labels, seed=2, step=weighting.DEFAULT_LAST_STEP).last)


def test_online_is_passive_when_every_margin_holds():
  # Same-class items share a code and classes differ in two bits: with w = 1 every margin is 2, the loss is
  # zero, and (lam = mu = 0) no batch moves w.
  labels = np.repeat(np.arange(3), 20)
  bits = np.zeros((60, 10), np.uint8)
  bits[np.arange(60), labels] = 1
  w = weighting.fit_online(bits, labels, num_tuples=200, lam=0.0, mu=0.0).last
  np.testing.assert_array_equal(w, np.ones(10, np.float32))


def test_sample_tuples_is_stratified_distinct_and_valid():
  labels = np.array([0] * 10 + [1] * 20 + [2] * 30)
  tuples = weighting.sample_tuples(labels, num_tuples=600, seed=5)
  assert tuples.dtype == np.int32 and tuples.shape == (600, 4)
  q, s, s2, d = tuples.T
  assert np.all(labels[q] == labels[s]) and np.all(labels[q] == labels[s2]) and np.all(labels[q] != labels[d])
  assert np.all((q != s) & (q != s2) & (s != s2))
  assert len({tuple(t) for t in tuples.tolist()}) == 600
  np.testing.assert_array_equal(np.bincount(labels[q]), [100, 200, 300])
  # Rows in random order: the classes are mixed along the rows.
  assert len(set(labels[q[:30]].tolist())) == 3


def test_sample_tuples_can_take_every_tuple_and_no_more():
  labels = np.array([0, 0, 0, 1, 1, 1])  # 3 * 2 * 1 * 3 = 18 tuples per class
  every = weighting.sample_tuples(labels, num_tuples=36, seed=0)
  want = {(q, s, s2, d) for q in range(6) for s in range(6) for s2 in range(6) for d in range(6)
          if len({q, s, s2}) == 3 and labels[q] == labels[s] == labels[s2] != labels[d]}
  assert {tuple(t) for t in every.tolist()} == want
  with pytest.raises(ValueError, match="num_tuples"):
    weighting.sample_tuples(labels, num_tuples=37)


def test_sample_tuples_huge_classes_draw_distinct_tuples(monkeypatch):
  # Classes whose tuples cannot be numbered in int64 take independent draws made distinct.
  monkeypatch.setattr(weighting, "_BIG_POPULATION", 10)
  labels = np.array([0] * 4 + [1] * 4)
  tuples = weighting.sample_tuples(labels, num_tuples=180, seed=1)  # 96 per class exist
  q, s, s2, d = tuples.T
  assert len({tuple(t) for t in tuples.tolist()}) == 180
  assert np.all(labels[q] == labels[s]) and np.all(labels[q] == labels[s2]) and np.all(labels[q] != labels[d])
  assert np.all((q != s) & (q != s2) & (s != s2))


def test_seeds_reproduce():
  bits, labels = _problem()
  a = weighting.sample_tuples(labels, num_tuples=200, seed=7)
  np.testing.assert_array_equal(a, weighting.sample_tuples(labels, num_tuples=200, seed=7))
  np.testing.assert_array_equal(a, weighting.sample_tuples(labels, num_tuples=200, seed=np.random.default_rng(7)))
  assert not np.array_equal(a, weighting.sample_tuples(labels, num_tuples=200, seed=8))
  for fit in (lambda **kw: weighting.fit_batch(bits, labels, max_iters=3000, **kw).weights,
              lambda **kw: weighting.fit_online(bits, labels, **kw).average):
    w = fit(num_tuples=200, seed=7)
    np.testing.assert_array_equal(w, fit(num_tuples=200, seed=7))
    np.testing.assert_array_equal(w, fit(tuples=a))


def test_bit_conventions_agree():
  bits, labels = _problem()
  fit = lambda b: weighting.fit_batch(b, labels, method="pgd", num_tuples=200, max_iters=3000).weights
  want = fit(bits)
  np.testing.assert_array_equal(fit(2 * bits.astype(np.int8) - 1), want)
  np.testing.assert_array_equal(fit(bits.astype(bool)), want)


def test_whrank_is_the_ratio_of_all_pairs_to_same_class_spread():
  rng = np.random.default_rng(3)
  labels = np.repeat(np.arange(4), 25)
  proj = rng.normal(size=(100, 7))
  proj[:, 0] += 3.0 * labels  # a projection that follows the class
  proj[:, 5] = labels - 1.5  # constant within each class: no same-class spread
  proj[:, 6] = 0.25  # constant: no spread at all
  bits = (proj > 0).astype(np.uint8)
  tuples = weighting.sample_tuples(labels, num_tuples=500, seed=0)
  w = weighting.whrank(proj.astype(np.float32), labels, tuples=tuples)
  for k in range(5):
    same = np.sqrt(np.mean([(proj[q, k] - proj[s, k]) ** 2 for q, s, _, _ in tuples]))
    every = np.sqrt(np.mean([(proj[i, k] - proj[j, k]) ** 2 for i in range(100) for j in range(100)]))
    assert w[k] == pytest.approx(every / same, rel=1e-4)
  assert w[0] > 2 and np.all(np.abs(w[1:5] - 1) < 0.3)
  assert w[5] == w[:5].max() and w[6] == 0


def test_bad_input_is_refused_naming_the_argument():
  bits, labels = _problem()
  tuples = weighting.sample_tuples(labels, num_tuples=20, seed=0)
  cases = [
      ("bits", lambda: weighting.fit(bits * 2, labels)),
      ("bits", lambda: weighting.fit(np.where(bits == 0, -1, 1).astype(np.int8) * (np.arange(10) > 0), labels)),
      ("bits", lambda: weighting.fit(bits[0], labels)),
      ("bits", lambda: weighting.fit(bits.tolist(), labels)),
      ("labels", lambda: weighting.fit(bits, labels[:-1])),
      ("labels", lambda: weighting.fit(bits, labels.astype(np.float32))),
      ("labels", lambda: weighting.fit(bits, np.zeros(60, np.int64))),
      ("labels", lambda: weighting.fit(bits[:4], np.array([0, 0, 1, 1]))),
      ("num_tuples", lambda: weighting.closed_form(bits, labels, num_tuples=10 ** 9)),
      ("num_tuples", lambda: weighting.fit_online(bits, labels, num_tuples=0)),
      ("solver", lambda: weighting.fit(bits, labels, solver="newton")),
      ("solver", lambda: weighting.fit(bits, labels, solver="whrank")),
      ("method", lambda: weighting.fit_batch(bits, labels, method="online")),
      ("lam", lambda: weighting.fit_batch(bits, labels, lam=-1.0)),
      ("mu", lambda: weighting.fit_online(bits, labels, mu=float("nan"))),
      ("max_iters", lambda: weighting.fit_batch(bits, labels, max_iters=0)),
      ("step", lambda: weighting.fit_online(bits, labels, step=0.0)),
      ("batch_size", lambda: weighting.fit_online(bits, labels, batch_size=0)),
      ("seed", lambda: weighting.fit(bits, labels, seed=-1)),
      ("seed", lambda: weighting.closed_form(bits, labels, seed=1.5)),
      ("projections", lambda: weighting.whrank(np.zeros(60), labels)),
      ("projections", lambda: weighting.whrank(np.full((60, 10), np.nan), labels)),
      ("labels", lambda: weighting.whrank(np.zeros((59, 10)), labels)),
      ("tuples", lambda: weighting.closed_form(bits, labels, tuples=tuples[:, :3])),
      ("tuples", lambda: weighting.closed_form(bits, labels, tuples=tuples + 60)),
      ("tuples", lambda: weighting.closed_form(bits, labels, tuples=tuples[:, [0, 3, 2, 1]])),
      ("weights", lambda: weighting.objective(-np.ones(10), bits, tuples)),
      ("weights", lambda: weighting.objective(np.full(10, np.nan), bits, tuples)),
      ("weights", lambda: weighting.objective(np.ones(9), bits, tuples)),
      ("words", lambda: weighting.code_differences(bits, tuples, num_bits=10)),
      ("num_bits", lambda: weighting.code_differences(codes.pack_bits(bits), tuples, num_bits=40)),
  ]
  for name, call in cases:
    with pytest.raises(ValueError, match=f"^{name}:"):
      call()
