"""Column generation hashing (Lin et al.): inference, pair weights, duals, degenerate bits, models, bad input.

Every reference here is independent of the implementation: enumerated rankings, explicit loops over triplets,
finite differences and scipy on the primal, LP strong duality.
"""

import itertools
import json
import math

import numpy as np
import pytest
import scipy.optimize

import hashjax as hj
from configs import cghash as cghash_config
from configs import structhash as structhash_config
from experiments import colgen as colgen_experiment
from experiments import tasks
from hashjax import models
from hashjax.colgen import cghash, features, inference, loop, result, structhash, subproblem, triplets


# ---------------------------------------------------------------------------- loss-augmented inference


def _brute_force(dp, dn, loss, k):
  """max over every permutation of H(y) = Delta(y) - w^T delta Psi(y), from the paper's definitions."""
  p, m = len(dp), len(dn)
  items = [("+", j) for j in range(p)] + [("-", j) for j in range(m)]
  best = -np.inf
  for perm in itertools.permutations(items):
    swapped, before = [], {}
    for pos, (kind, j) in enumerate(perm):
      if kind == "+":
        above = [i for c, i in perm[:pos] if c == "-"]
        before[j] = len(above)
        swapped += [(j, i) for i in above]
    psi = 2.0 / (p * m) * sum(dn[i] - dp[j] for j, i in swapped)
    if loss == "auc":  # eq. 59: the fraction of correctly ordered pairs
      delta = len(swapped) / (p * m)
    elif loss == "sndcg":  # eqs. 61-62: relevant item j alone with the irrelevant items, at position before + 1
      delta = 1.0 - np.mean([1.0 / math.log2(1.0 + before[j] + 1.0) for j in range(p)])
    else:  # eq. 60, normalised by the ideal ranking's DCG@k
      gain = lambda i: 0.0 if i > k else (1.0 if i == 1 else 1.0 / math.log2(i))
      dcg = sum(gain(pos + 1) for pos, (c, _) in enumerate(perm) if c == "+")
      delta = 1.0 - dcg / sum(gain(i) for i in range(1, min(k, p) + 1))
    best = max(best, delta - psi)
  return best


@pytest.mark.parametrize("loss", inference.RANKING_LOSSES)
def test_most_violated_ranking_matches_enumeration(loss):
  rng = np.random.default_rng({"auc": 0, "ndcg": 1, "sndcg": 2}[loss])
  for p, m in ((1, 1), (2, 3), (3, 2), (3, 3)):
    n = 4
    scale = rng.choice([0.05, 0.3, 1.0], size=(n, 1))
    dp = rng.integers(0, 4, (n, p)) * scale  # integer steps: plenty of exact ties
    dn = rng.integers(0, 4, (n, m)) * scale
    k = int(rng.integers(1, p + m + 1))
    got = inference.most_violated(dp, dn, loss=loss, k=k if loss == "ndcg" else None)
    for i in range(n):
      assert got.violation[i] == pytest.approx(_brute_force(dp[i], dn[i], loss, k), abs=1e-12)
    # The returned ranking attains the value: its loss and its swapped pairs, counted independently.
    psi = 2.0 / (p * m) * (np.sum(got.after * dn, 1) - np.sum(got.before * dp, 1))
    assert np.allclose(got.loss - psi, got.violation, atol=1e-12)
    assert np.array_equal(got.before.sum(1), got.after.sum(1))  # both count the swapped pairs
    assert np.all(got.violation >= -1e-12)


def test_ranking_losses_of_known_rankings():
  # P = 2, M = 2: ranking (-, +, -, +): before = [1, 2].
  before = np.array([[1, 2]])
  assert inference.ranking_loss(before, loss="auc", num_irrelevant=2)[0] == pytest.approx(3 / 4)
  assert inference.ranking_loss(before, loss="sndcg", num_irrelevant=2)[0] == pytest.approx(
      1 - (1 / math.log2(3) + 1 / math.log2(4)) / 2)
  # NDCG@3: relevant at positions 2 and 4 (4 is beyond k); ideal positions 1, 2; S(1) = S(2) = 1.
  assert inference.ranking_loss(before, loss="ndcg", num_irrelevant=2, k=3)[0] == pytest.approx(1 - 1 / 2)


# ---------------------------------------------------------------------------- triplets and pair weights


def test_pair_weights_collapse_the_triplet_sum():
  rng = np.random.default_rng(0)
  labels = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2])
  nb = triplets.sample_neighbors(labels, num_relevant=2, num_irrelevant=3, seed=1)
  for i in range(9):
    assert all(labels[j] == labels[i] and j != i for j in nb.relevant[i])
    assert all(labels[k] != labels[i] for k in nb.irrelevant[i])
  mu = rng.random((9, 2, 3))
  w = triplets.pair_weights(mu)
  for _ in range(5):
    h = rng.integers(0, 2, 9)
    explicit = sum(mu[i, a, b] * (abs(h[i] - h[nb.irrelevant[i, b]]) - abs(h[i] - h[nb.relevant[i, a]]))
                   for i in range(9) for a in range(2) for b in range(3))
    assert triplets.pair_objective(h, nb, w) == pytest.approx(explicit)
    assert float(h @ subproblem.laplacian_apply(h.astype(float), nb.all, w)) == pytest.approx(explicit)


def test_cut_scan_is_the_best_threshold():
  rng = np.random.default_rng(3)
  nb = rng.integers(0, 12, (12, 4))
  w = rng.normal(size=(12, 4))
  z = rng.integers(0, 6, 12).astype(float)  # repeated projections: some cuts cannot be realised
  value, threshold, bits = subproblem.cut_scan(z, nb, w, min_side=2)
  brute = max(triplets.pair_objective((z > t).astype(int), triplets.Neighbors(nb[:, :2], nb[:, 2:]), w)
              for t in np.unique(z)[:-1] if 2 <= np.sum(z > t) <= 10)
  assert value == pytest.approx(brute)
  assert np.array_equal(bits, (z > threshold).astype(np.uint8))
  assert triplets.pair_objective(bits, triplets.Neighbors(nb[:, :2], nb[:, 2:]), w) == pytest.approx(value)


@pytest.mark.parametrize("loss", cghash.LOSSES)
def test_triplet_loss_sums_match_a_dense_loop(loss):
  rng = np.random.default_rng(4)
  dp = rng.integers(0, 5, (6, 4)) * 0.5
  dn = rng.integers(0, 5, (6, 3)) * 0.5  # margins hit the hinge's kink at rho = 1 exactly
  total, gp, gn = cghash.triplet_loss(dp, dn, loss=loss)
  rho = dn[:, None, :] - dp[:, :, None]
  f = np.maximum(0, 1 - rho) ** 2 if loss == "squared_hinge" else np.log1p(np.exp(-rho))
  df = -2 * np.maximum(0, 1 - rho) if loss == "squared_hinge" else -1 / (1 + np.exp(rho))
  assert total == pytest.approx(f.sum())
  assert np.allclose(gp, df.sum(2)) and np.allclose(gn, df.sum(1))


# ---------------------------------------------------------------------------- master problem and duals


def _tiny_workspace(num_bits=3, seed=0):
  rng = np.random.default_rng(seed)
  y = np.repeat([0, 1, 2], 4)
  x = rng.normal(size=(12, 3)) + 2.0 * np.eye(3)[y]
  ws = loop.prepare(x, y, num_bits=num_bits, num_relevant=2, num_irrelevant=3, seed=seed)
  bits = rng.integers(0, 2, (12, num_bits))
  for r in range(num_bits):  # fixed random bits, as add_bit would record them
    h = bits[:, r].astype(bool)
    ws.xp[r] = h[:, None] != h[ws.neighbors.relevant]
    ws.xn[r] = h[:, None] != h[ws.neighbors.irrelevant]
    ws.biases.append(0.0)
  return ws, bits


def _triplet_margins(ws, bits, w):
  """rho[i, j, k] and delta Phi[i, j, k, r] by an explicit loop over triplets."""
  n, p = ws.neighbors.relevant.shape
  m = ws.neighbors.irrelevant.shape[1]
  dphi = np.zeros((n, p, m, bits.shape[1]))
  for i, a, b in itertools.product(range(n), range(p), range(m)):
    j, k = ws.neighbors.relevant[i, a], ws.neighbors.irrelevant[i, b]
    dphi[i, a, b] = np.abs(bits[i] - bits[k]) - np.abs(bits[i] - bits[j])
  return dphi @ w, dphi


@pytest.mark.parametrize("loss,regularizer", [("squared_hinge", "l1"), ("logistic", "l1"), ("squared_hinge", "linf")])
def test_master_duals_satisfy_kkt(loss, regularizer):
  ws, bits = _tiny_workspace()
  C = 30.0 if regularizer == "l1" else 0.7
  w, pair_w, _ = cghash.solve_master(ws, np.zeros(3), C=C, loss=loss, regularizer=regularizer)
  rho, dphi = _triplet_margins(ws, bits, w)
  t = rho.size
  scale = (C if regularizer == "l1" else 1.0) / t
  mu = scale * (2 * np.maximum(0, 1 - rho) if loss == "squared_hinge" else 1 / (1 + np.exp(rho)))  # -c f'(rho)
  assert np.allclose(pair_w, triplets.pair_weights(mu))
  reduced = np.einsum("ijk,ijkr->r", mu, dphi)  # sum mu delta h_r: the left side of the dual constraint
  if regularizer == "l1":  # eq. 14: 1 - sum mu dPhi = alpha >= 0, alpha_r w_r = 0
    assert np.all(reduced <= 1 + 1e-6)
    assert np.allclose(reduced[w > 1e-8], 1, atol=1e-6)
  else:  # box [0, C]: the gradient -sum mu dPhi is >= 0 at 0, <= 0 at C, 0 between
    inside = (w > 1e-8) & (w < C - 1e-8)
    assert np.allclose(reduced[inside], 0, atol=1e-7)
    assert np.all(reduced[w <= 1e-8] <= 1e-7) and np.all(reduced[w >= C - 1e-8] >= -1e-7)
  # The same optimum from scipy on the primal written over explicit triplets.
  def primal(v):
    r = dphi @ v
    f = np.maximum(0, 1 - r) ** 2 if loss == "squared_hinge" else np.logaddexp(0, -r)
    return (np.sum(v) if regularizer == "l1" else 0.0) + scale * f.sum()
  bounds = [(0, None if regularizer == "l1" else C)] * 3
  ref = scipy.optimize.minimize(primal, np.full(3, 0.1), method="Powell", bounds=bounds,
                                options={"xtol": 1e-10, "ftol": 1e-14, "maxiter": 20000})
  assert primal(w) <= ref.fun + 1e-7


def test_master_gradient_matches_finite_differences():
  ws, _ = _tiny_workspace()
  w = np.array([0.3, 0.8, 0.5])
  for loss in cghash.LOSSES:
    value, grad, _ = cghash.master_objective(w, ws, C=5.0, loss=loss, regularizer="l1")
    for r in range(3):
      e = np.eye(3)[r] * 1e-6
      fd = (cghash.master_objective(w + e, ws, C=5.0, loss=loss, regularizer="l1")[0]
            - cghash.master_objective(w - e, ws, C=5.0, loss=loss, regularizer="l1")[0]) / 2e-6
      assert grad[r] == pytest.approx(fd, rel=1e-5, abs=1e-8)


def test_lp_duals_close_the_duality_gap():
  rng = np.random.default_rng(5)
  g, delta, C = rng.random((6, 3)) * 0.5, rng.random(6), 4.0
  w, xi, lam = structhash.solve_lp(g, delta, C=C)
  assert np.all(g @ w + xi >= delta - 1e-9)  # primal feasible
  assert lam.sum() <= C + 1e-9 and np.all(lam @ g <= 1 + 1e-9)  # dual feasible (eq. 52)
  assert lam @ delta == pytest.approx(w.sum() + C * xi)  # eq. 51 = eq. 48
  with pytest.raises(RuntimeError, match="my LP"):
    structhash.solve_lp(g, delta, C=-1.0, what="my LP")  # unbounded: HiGHS reports no optimum


# ---------------------------------------------------------------------------- degenerate bits


def test_degenerate_bits_are_rejected():
  h = np.array([0, 1, 1, 0, 1, 0])
  existing = np.stack([h, 1 - h], 1)
  assert subproblem.degenerate(h, existing[:, :1], min_side=1, duplicate_tolerance=0.0)
  assert subproblem.degenerate(1 - h, existing[:, :1], min_side=1, duplicate_tolerance=0.0)  # the complement
  assert subproblem.degenerate(np.array([0, 0, 0, 0, 0, 1]), None, min_side=2, duplicate_tolerance=0.0)
  assert not subproblem.degenerate(np.array([0, 0, 1, 1, 1, 0]), existing, min_side=2, duplicate_tolerance=0.0)
  # Two well separated pairs of classes: the best bit splits {0, 1} from {2, 3}; with that bit (or its
  # complement) already learned, the sub-problem must come up with another one.
  rng = np.random.default_rng(0)
  y = np.repeat([0, 1, 2, 3], 10)
  centres = np.array([[-4.0, -1.0], [-4.0, 1.0], [4.0, -1.0], [4.0, 1.0]])
  x = centres[y] + 0.2 * rng.normal(size=(40, 2))
  nb = triplets.sample_neighbors(y, num_relevant=3, num_irrelevant=6, seed=0)
  w = triplets.pair_weights(np.ones((40, 3, 6)))
  phi = x - x.mean(0)
  first = subproblem.new_bit(phi, nb, w)
  assert set(np.unique(first.bits[y < 2])) != set(np.unique(first.bits[y >= 2]))
  for existing in (first.bits[:, None], 1 - first.bits[:, None]):
    second = subproblem.new_bit(phi, nb, w, existing=existing)
    assert second is not None
    assert not subproblem.degenerate(second.bits, existing, min_side=1, duplicate_tolerance=0.01)


# ---------------------------------------------------------------------------- training, models, bad input


def _blobs(n_per=10, classes=3, dim=4, seed=0):
  rng = np.random.default_rng(seed)
  y = np.repeat(np.arange(classes), n_per)
  return rng.normal(size=(n_per * classes, dim)) + 3.0 * np.eye(dim)[y], y


def test_a_prefix_is_the_shorter_run():
  x, y = _blobs()
  long = cghash.fit(x, y, num_bits=3, C=10.0, num_relevant=3, num_irrelevant=4)
  short = cghash.fit(x, y, num_bits=2, C=10.0, num_relevant=3, num_irrelevant=4)
  cut = result.prefix(long, 2)
  assert np.array_equal(cut.train_bits, short.train_bits)
  assert np.allclose(cut.bit_weights, short.bit_weights)
  assert np.allclose(cut.params.projection, short.params.projection)


def test_structhash_with_too_small_c_refuses_a_zero_model():
  x, y = _blobs()
  with pytest.raises(RuntimeError, match="raise C"):
    structhash.fit(x, y, num_bits=2, C=1e-6, num_relevant=3, num_irrelevant=4)


@pytest.mark.parametrize("kind", features.FEATURE_KINDS)
def test_saved_model_round_trip(tmp_path, kind):
  x, y = _blobs(dim=5)
  res = cghash.fit(x, y, num_bits=3, C=10.0, num_relevant=3, num_irrelevant=4, feature_kind=kind, num_anchors=8)
  model = models.from_colgen(res.params, res.bit_weights, train_features=x, method="cghash", config={"C": 10.0})
  loaded = hj.load_model(model.save(tmp_path / "model"))
  assert loaded.kind == "colgen" and loaded.settings == {"method": "cghash", "features": kind}
  assert np.array_equal(np.asarray(loaded.encode(x)), np.asarray(model.encode(x)))
  assert np.array_equal(np.asarray(hj.unpack_bits(loaded.encode(x), 3)), res.train_bits)
  assert loaded.bit_weights.dtype == np.float32 and np.allclose(loaded.bit_weights, res.bit_weights)
  if kind == "linear":  # the weights rank with the weighted search: nearest distances = numpy's sorted sums
    words = loaded.encode(x)
    dist, _ = hj.search.knn(words[:2], words, 3, weights=loaded.bit_weights)
    direct = (res.train_bits[:2, None, :] != res.train_bits[None, :, :]) @ loaded.bit_weights.astype(np.float64)
    assert np.allclose(np.asarray(dist), np.sort(direct, axis=1)[:, :3], atol=1e-5)
  meta = json.loads((tmp_path / "model" / "model.json").read_text())
  assert meta["version"] == 3
  (tmp_path / "model" / "model.json").write_text(json.dumps({**meta, "version": 1}))
  with pytest.raises(ValueError, match="needs format version 2"):
    hj.load_model(tmp_path / "model")
  with pytest.raises(ValueError, match="bit_weights"):
    models.from_colgen(res.params, -res.bit_weights - 1, train_features=x)


@pytest.mark.parametrize("kwargs,name", [
    ({"labels": np.zeros(7, int)}, "labels"),
    ({"features": np.full((30, 4), np.nan)}, "features"),
    ({"C": 0.0}, "C"),
    ({"loss": "hinge"}, "loss"),
    ({"num_relevant": 10}, "num_relevant"),
    ({"num_irrelevant": 21}, "num_irrelevant"),
])
def test_bad_input_is_refused_before_any_solve(monkeypatch, kwargs, name):
  def no_solve(*args, **kw):
    raise AssertionError("a solver ran before the input was checked")
  monkeypatch.setattr(subproblem, "new_bit", no_solve)
  monkeypatch.setattr(cghash, "solve_master", no_solve)
  x, y = _blobs()
  args = {"features": x, "labels": y, "num_bits": 2, "C": 1.0, "num_relevant": 3, "num_irrelevant": 4, **kwargs}
  for fit in (cghash.fit, structhash.fit):
    options = dict(args)
    if fit is structhash.fit and name == "loss":
      options["loss"] = "map"
    with pytest.raises(ValueError, match=f"^{name}:"):
      fit(options.pop("features"), options.pop("labels"), **options)


def test_runlocal_experiment_end_to_end(tmp_path):
  config = structhash_config.get_config("runlocal")
  config.bits = (8,)
  config.baselines = ()  # their rows are fitting.baseline_model's, tested with the bit-weights experiment
  config.plots = True
  assert cghash_config.get_config("runlocal").method == "cghash"
  results = colgen_experiment.train_and_evaluate(config, str(tmp_path))
  assert (tmp_path / "pr_curves.png").stat().st_size > 0
  # At the largest radius every item is retrieved: recall 1, precision the mean share of same-class items.
  task = tasks.make_task(config)
  ql, dl = task.labels[task.query], task.labels[task.database]
  curves = results["rows"][0]["curves"]
  assert curves["recall"][-1] == pytest.approx(1.0)
  assert curves["precision"][-1] == pytest.approx(np.mean([np.mean(dl == c) for c in ql]))
  rows = {(r["method"], r["bits"]): r for r in results["rows"]}
  assert set(rows) == {("structhash-sndcg-stage", 8)}
  learned = rows[("structhash-sndcg-stage", 8)]
  assert learned["ap_weighted"] == pytest.approx(learned["ap"])  # stage-wise: plain Hamming
  assert learned["cutting_planes_per_bit"] >= 1 and learned["bits_kept"] == 8
  model = hj.load_model(tmp_path / "models" / "structhash-8")
  assert model.bit_weights.tolist() == [1.0] * 8
  assert json.loads((tmp_path / "results.json").read_text())["rows"][0]["bits"] == 8
  table = colgen_experiment.format_table(results["rows"])
  assert "AP_T w" in table and "CP/bit" in table
