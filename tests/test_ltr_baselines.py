"""hashjax.localrank.baselines: SVM-MAP's inference and cutting planes, RankBoost's rounds, LambdaMART, errors."""

import itertools

import numpy as np
import pytest
import scipy.optimize

from hashjax import ranking
from hashjax.localrank import baselines


# ----------------------------------------------------------------------------- references


def _ap_of_order(relevant, order):
  hits, total = 0, 0.0
  for rank, doc in enumerate(order, start=1):
    if relevant[doc]:
      hits += 1
      total += hits / rank
  return total / hits


def _psi(x, relevant, order):
  """Yue et al.'s joint feature map: (1/(RN)) sum_{i rel, j non} y_ij (x_i - x_j), y_ij = +1 if i above j."""
  position = {doc: p for p, doc in enumerate(order)}
  rel = [i for i in range(len(relevant)) if relevant[i]]
  non = [j for j in range(len(relevant)) if not relevant[j]]
  out = np.zeros(x.shape[1])
  for i in rel:
    for j in non:
      out += (1.0 if position[i] < position[j] else -1.0) * (x[i] - x[j])
  return out / (len(rel) * len(non))


def _augmented_value(scores, relevant, order):
  """1 - AP + w . Psi with scores s = X w, written with the scores as a 1-column X."""
  return 1.0 - _ap_of_order(relevant, order) + float(_psi(scores[:, None], relevant, order)[0])


# ----------------------------------------------------------------------------- SVM-MAP


def test_svmmap_inference_is_the_argmax_over_every_ranking():
  rng = np.random.default_rng(0)
  for trial in range(40):
    n = int(rng.integers(2, 7))
    relevant = rng.random(n) < 0.5
    relevant[0], relevant[1] = True, False  # one of each
    relevant = rng.permutation(relevant)
    scale = [0.05, 0.5, 3.0][trial % 3]  # small scores: the loss decides; large: the scores do
    scores = np.round(rng.normal(size=n) * scale, 1)  # rounded: ties occur
    order = baselines.svmmap_most_violated(scores, relevant)
    assert sorted(order.tolist()) == list(range(n))
    best = max(_augmented_value(scores, relevant, p) for p in itertools.permutations(range(n)))
    assert _augmented_value(scores, relevant, order) == pytest.approx(best, abs=1e-12)


def _enumerated_constraints(x, y, q):
  """Per query with both kinds: (Psi* - Psi(y) [K, d], Delta(y) [K]) over every ranking y."""
  out = []
  for g in np.unique(q):
    rows = np.flatnonzero(q == g)
    rel = y[rows] >= 1
    if rel.all() or not rel.any():
      continue
    xq = x[rows]
    best = _psi(xq, rel, sorted(range(len(rows)), key=lambda i: not rel[i]))
    planes, losses = [], []
    for p in itertools.permutations(range(len(rows))):
      planes.append(best - _psi(xq, rel, p))
      losses.append(1.0 - _ap_of_order(rel, p))
    both = np.unique(np.column_stack([planes, losses]).round(12), axis=0)  # distinct constraints only
    out.append((both[:, :-1], both[:, -1]))
  return out


def _objective(w, constraints, c):
  return 0.5 * w @ w + c / len(constraints) * sum(max(0.0, float(np.max(loss - g @ w))) for g, loss in constraints)


def test_svmmap_cutting_planes_reach_the_qp_over_every_constraint():
  rng = np.random.default_rng(1)
  x = rng.normal(size=(11, 3))
  y = np.array([2, 0, 1, 0, 1, 0, 0, 1, 0, 0, 2])
  q = np.array([1, 1, 1, 1, 2, 2, 2, 3, 3, 3, 3])
  constraints = _enumerated_constraints(x, y, q)
  n, d = len(constraints), x.shape[1]
  for c in (0.5, 5.0):
    # The n-slack primal over every ranking of every query: variables (w, xi_1..xi_n).
    rows = [(k, g, loss) for k, (gs, losses) in enumerate(constraints) for g, loss in zip(gs, losses)]
    cons = [{"type": "ineq", "fun": (lambda v, k=k, g=g, loss=loss: v[:d] @ g + v[d + k] - loss),
             "jac": (lambda v, k=k, g=g: np.concatenate([g, np.eye(n)[k]]))} for k, g, loss in rows]
    ref = scipy.optimize.minimize(lambda v: 0.5 * v[:d] @ v[:d] + c / n * v[d:].sum(), np.concatenate(
        [np.zeros(d), np.ones(n)]), jac=lambda v: np.concatenate([v[:d], np.full(n, c / n)]), method="SLSQP",
        bounds=[(None, None)] * d + [(0, None)] * n, constraints=cons, options={"ftol": 1e-12, "maxiter": 500})
    assert ref.success
    w = baselines.fit_svmmap(x, y, q, c=c, epsilon=1e-9)
    assert _objective(w, constraints, c) == pytest.approx(ref.fun, abs=1e-7)
    np.testing.assert_allclose(w, ref.x[:d], atol=1e-4)  # the objective is strictly convex in w
  # A loose epsilon stops early, within c * epsilon of the minimum.
  w = baselines.fit_svmmap(x, y, q, c=5.0, epsilon=0.05)
  assert ref.fun - 1e-7 <= _objective(w, constraints, 5.0) <= ref.fun + 5.0 * 0.05


# ----------------------------------------------------------------------------- RankBoost


def _rankboost_loop(x, y, q, num_rounds, num_thresholds=None):
  """Freund et al.'s Figure 1 written out: pairs, D, and every (feature, threshold) tried in turn."""
  pairs = [(a, b) for a in range(len(y)) for b in range(len(y)) if q[a] == q[b] and y[a] > y[b]]  # a above b
  dist = {p: 1.0 / len(pairs) for p in pairs}
  out = []
  for _ in range(num_rounds):
    best = None
    for f in range(x.shape[1]):
      values = sorted(set(x[:, f].tolist()))[:-1]
      if num_thresholds is not None and len(values) > num_thresholds:
        levels = np.arange(num_thresholds) / num_thresholds
        values = sorted(v for v in set(np.quantile(x[:, f], levels, method="lower").tolist()) if v < x[:, f].max())
      for theta in values:
        r = sum(d * (float(x[a, f] > theta) - float(x[b, f] > theta)) for (a, b), d in dist.items())
        if best is None or abs(r) > abs(best[2]) + 1e-15:
          best = (f, theta, r)
    f, theta, r = best
    alpha = 0.5 * np.log((1 + r) / (1 - r))
    out.append((f, theta, alpha))
    for (a, b) in pairs:
      dist[(a, b)] *= np.exp(alpha * (float(x[b, f] > theta) - float(x[a, f] > theta)))
    total = sum(dist.values())
    dist = {p: d / total for p, d in dist.items()}
  return out


def test_rankboost_rounds_against_the_loop_over_thresholds():
  rng = np.random.default_rng(2)
  x = rng.integers(0, 6, size=(14, 3)).astype(float)
  y = rng.integers(0, 3, size=14)
  q = np.repeat([4, 9], 7)
  for num_thresholds in (None, 3):
    model = baselines.fit_rankboost(x, y, q, num_rounds=4, num_thresholds=num_thresholds)
    ref = _rankboost_loop(x, y, q, 4, num_thresholds)
    assert model.features.tolist() == [f for f, _, _ in ref]
    assert model.thresholds.tolist() == [t for _, t, _ in ref]
    np.testing.assert_allclose(model.alphas, [a for _, _, a in ref], rtol=1e-10)


def test_rankboost_training_ranking_loss_falls():
  rng = np.random.default_rng(3)
  x = rng.random((120, 4))
  q = np.repeat(np.arange(12), 10)
  y = np.digitize(x[:, 0] + 0.5 * x[:, 2], [0.6, 1.1])
  model = baselines.fit_rankboost(x, y, q, num_rounds=30)
  a, b = np.nonzero((q[:, None] == q[None, :]) & (y[:, None] > y[None, :]))  # a above b
  exp_loss, rank_loss = [], []
  for t in range(31):
    h = x[:, model.features[:t]] > model.thresholds[:t]
    s = h.astype(float) @ model.alphas[:t]
    exp_loss.append(np.mean(np.exp(s[b] - s[a])))  # the bound prod_t Z_t on the ranking loss
    rank_loss.append(np.mean(s[a] <= s[b]))  # Freund et al.'s rloss: ties count as wrong
  assert len(model.alphas) == 30
  assert np.all(np.diff(exp_loss) < 0)
  assert all(r <= e + 1e-12 for r, e in zip(rank_loss, exp_loss))
  assert rank_loss[0] == 1.0 and rank_loss[-1] < 0.15 and rank_loss[-1] < rank_loss[1]
  np.testing.assert_allclose(baselines.rankboost_scores(model, x), s)


# ----------------------------------------------------------------------------- LambdaMART


def _synthetic(seed, num_queries=30):
  rng = np.random.default_rng(seed)
  x = rng.random((num_queries * 10, 5))
  y = np.digitize(x[:, 2], [0.5, 0.8])  # feature 2 orders the labels perfectly
  return x, y, np.repeat(np.arange(num_queries), 10)


def test_lambdamart_learns_the_ordering_feature_and_is_deterministic():
  pytest.importorskip("lightgbm", reason="lightgbm (the ltr extra) is not installed")
  x, y, q = _synthetic(4)
  tx, ty, tq = _synthetic(5)
  opts = {"num_trees": 30, "num_leaves": 4, "min_data_in_leaf": 5}
  booster = baselines.fit_lambdamart(x, y, q, **opts)
  ap = ranking.query_metrics(baselines.lambdamart_scores(booster, tx), ty, tq)["ap"]
  chance = ranking.query_metrics(np.random.default_rng(6).random(len(ty)), ty, tq)["ap"]
  assert np.nanmean(ap) > 0.95 > np.nanmean(chance) + 0.3
  again = baselines.fit_lambdamart(x, y, q, **opts)
  np.testing.assert_array_equal(baselines.lambdamart_scores(again, tx), baselines.lambdamart_scores(booster, tx))
  assert again.model_to_string() == booster.model_to_string()
  with_val = baselines.fit_lambdamart(x, y, q, validation=(tx, ty, tq), **opts)
  assert 1 <= with_val.best_iteration <= 30
  np.testing.assert_array_equal(baselines.lambdamart_scores(with_val, tx),
                                baselines.lambdamart_scores(with_val, tx, num_trees=with_val.best_iteration))


# ----------------------------------------------------------------------------- errors


def _fits():
  return [("rankboost", baselines.fit_rankboost), ("svmmap", baselines.fit_svmmap),
          ("lambdamart", baselines.fit_lambdamart)]


@pytest.mark.parametrize("name,fit", _fits())
def test_bad_input_names_the_argument(name, fit):
  x, y, q = _synthetic(7, num_queries=3)
  with pytest.raises(ValueError, match=r"^labels: expected .*shape \(30,\).*got \(29,\)"):
    fit(x, y[:-1], q)
  no_pair = (r"^labels: no query has both a relevant \(label >= 1\) and a non-relevant \(label 0\) document$"
             if name == "svmmap" else r"^labels: expected a query with two different labels .*, got none$")
  with pytest.raises(ValueError, match=no_pair):
    fit(x, np.ones_like(y), q)
  bad = x.copy()
  bad[3, 1] = np.nan
  with pytest.raises(ValueError, match=r"^features: expected finite values, got 1 NaN/inf"):
    fit(bad, y, q)
  with pytest.raises(ValueError, match=r"^relevant: expected both relevant and non-relevant, got 3 of 3 relevant$"):
    baselines.svmmap_most_violated(np.zeros(3), np.ones(3, bool))
