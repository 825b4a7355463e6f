"""Spherical hashing and anchor graph hashing against hand-written references of their papers' steps."""

import jax
import numpy as np
import pytest

from hashjax.baselines import _common, agh, spherical

# Three well-separated Gaussian blobs of 60 points in 8-d.
_RNG = np.random.default_rng(0)
_CENTRES = np.zeros((3, 8))
_CENTRES[1, 0] = _CENTRES[2, 1] = 8.0
X = np.concatenate([c + _RNG.normal(size=(60, 8)) for c in _CENTRES]).astype(np.float32)
Y = np.repeat(np.arange(3), 60)
N = X.shape[0]

FITS = {
    "sph": (spherical, dict(num_bits=8)),
    # s = 3 nearest anchors link the blobs into one graph (s = 2 leaves three parts, whose basis is the parts')
    "agh1": (agh, dict(num_bits=4, num_anchors=12, layers=1, num_nearest=3)),
    "agh2": (agh, dict(num_bits=8, num_anchors=12, layers=2, num_nearest=3)),
}
PARAMS = {name: mod.fit(X, key=jax.random.key(0), **opts) for name, (mod, opts) in FITS.items()}


@pytest.mark.parametrize("name", sorted(FITS))
def test_codes_shape_sign_batches_and_blobs(name):
  mod, opts = FITS[name]
  params = PARAMS[name]
  bits = np.asarray(mod.encode(params, X))
  assert bits.shape == (N, opts["num_bits"]) and bits.dtype == np.uint8
  np.testing.assert_array_equal(bits, np.asarray(mod.project(params, X)) > 0)
  np.testing.assert_array_equal(np.asarray(mod.encode(params, X[:1])), bits[:1])
  np.testing.assert_array_equal(np.asarray(mod.encode(params, X[:7].reshape(7, 1, 8))), bits[:7, None])
  # Separable blobs: codes of the same blob are nearer than codes of different blobs. AGH's graph eigenvectors
  # follow the blobs; every sphere holds half of the points, so it must cut a blob (90 = 60 + 30).
  dist = (bits[:, None, :] != bits[None, :, :]).sum(-1)
  same = Y[:, None] == Y[None, :]
  assert dist[same].mean() < (0.9 if name == "sph" else 0.5) * dist[~same].mean()


def _sph_reference(x, pivots, num_iters, eps_mean=0.1, eps_std=0.15):
  """The paper's iteration written with loops over points and pairs of spheres."""
  n, b = len(x), len(pivots)
  pivots = pivots.copy()

  def radii_of(p):
    r = np.empty(b)
    for k in range(b):
      d = np.sort([np.linalg.norm(xi - p[k]) for xi in x])
      half = (n + 1) // 2
      r[k] = (d[half - 1] + d[half]) / 2
    return r

  for _ in range(num_iters):
    r = radii_of(pivots)
    inside = np.array([[np.linalg.norm(xi - pivots[k]) < r[k] for k in range(b)] for xi in x])
    overlap = {(k, l): int(np.sum(inside[:, k] & inside[:, l])) for k in range(b) for l in range(b) if k != l}
    # the mean of |o_kl - n/4| and the standard deviation of o_kl, each relative to n/4
    upper = np.array([overlap[k, l] for k in range(b) for l in range(k + 1, b)])
    if np.mean(np.abs(upper - n / 4)) <= eps_mean * n / 4 and np.std(upper) <= eps_std * n / 4:
      break
    new = pivots.copy()
    for k in range(b):
      force = sum(0.5 * (overlap[k, l] - n / 4) / (n / 4) * (pivots[k] - pivots[l]) for l in range(b) if l != k)
      new[k] = pivots[k] + force / b
    pivots = new
  return pivots, radii_of(pivots)


def test_spherical_matches_reference_iteration_and_balances_bits():
  key = jax.random.key(3)
  start = spherical.fit(X, num_bits=6, key=key, num_iters=0)
  x = X.astype(np.float64) - np.asarray(start.mean, np.float64)
  pivots, radii = _sph_reference(x, np.asarray(start.pivots, np.float64), 3, 0.0, 0.0)
  got = spherical.fit(X, num_bits=6, key=key, num_iters=3, epsilon_mean=0.0, epsilon_stddev=0.0)
  np.testing.assert_allclose(np.asarray(got.pivots), pivots, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(np.asarray(got.radii), radii, rtol=1e-4)
  # The same stop: by the standard deviation alone (a loose mean), and at the paper's thresholds.
  for eps_mean in (1.0, 0.1):
    pivots, radii = _sph_reference(x, np.asarray(start.pivots, np.float64), 100, eps_mean)
    got = spherical.fit(X, num_bits=6, key=key, epsilon_mean=eps_mean)
    np.testing.assert_allclose(np.asarray(got.pivots), pivots, rtol=1e-4, atol=1e-4)
  # At the paper's thresholds every bit halves the training set, pairs overlap on about a quarter.
  bits = np.asarray(spherical.encode(PARAMS["sph"], X)).astype(int)
  assert (bits.sum(0) == N // 2).all()
  overlaps = (bits.T @ bits)[np.triu_indices(8, 1)]
  assert np.mean(np.abs(overlaps - N / 4)) <= 0.1 * N / 4 and np.std(overlaps) <= 0.15 * N / 4


@pytest.mark.parametrize("n", [2, 4, 5, 9])
def test_spherical_pivots_of_a_few_points_start_apart(n):
  """With fewer than 10 points each pivot starts at the mean of n // 2 of them, not of all (which is one point)."""
  x = np.random.default_rng(n).normal(size=(n, 3))
  params = spherical.fit(x, num_bits=4, key=jax.random.key(1), num_iters=0)
  assert np.ptp(np.asarray(params.pivots), axis=0).max() > 1e-3  # apart, not by the rounding of one mean


def test_agh_matches_reference_graph_and_spectral_constraints():
  # One Gaussian cloud: a connected anchor graph, whose eigenvalue 1 is simple.
  cloud = np.random.default_rng(1).normal(size=(N, 8)).astype(np.float32)
  params = agh.fit(cloud, num_bits=4, num_anchors=12, layers=1, key=jax.random.key(2))
  x = cloud.astype(np.float64) - np.asarray(params.mean, np.float64)
  anchors = np.asarray(params.anchors, np.float64)
  s, m, r = 2, 12, 4
  near = [np.argsort([np.sum((xi - u) ** 2) for u in anchors])[:s] for xi in x]
  sigma = np.mean([np.linalg.norm(xi - anchors[nb[-1]]) for xi, nb in zip(x, near)])
  np.testing.assert_allclose(float(params.bandwidth), sigma ** 2, rtol=1e-5)
  z = np.zeros((N, m))
  for i, nb in enumerate(near):
    w = np.exp(-np.array([np.sum((x[i] - anchors[j]) ** 2) for j in nb]) / sigma ** 2)
    z[i, nb] = w / w.sum()
  lam = z.sum(0)
  vals, vecs = np.linalg.eigh(np.diag(lam ** -0.5) @ z.T @ z @ np.diag(lam ** -0.5))
  assert np.isclose(vals[-1], 1.0)
  vals, vecs = vals[-2:-2 - r:-1], vecs[:, -2:-2 - r:-1]
  vecs = vecs * np.sign(vecs[np.argmax(np.abs(vecs), 0), np.arange(r)])
  projection = np.sqrt(N) * np.diag(lam ** -0.5) @ vecs / np.sqrt(vals)
  np.testing.assert_allclose(np.asarray(params.projection), projection, rtol=1e-3, atol=1e-3)
  # The relaxed codes on the training points are centred and orthogonal: Y^T 1 = 0, Y^T Y = n I.
  y = np.asarray(agh.project(params, cloud), np.float64)
  np.testing.assert_allclose(y.mean(0), 0.0, atol=1e-3)
  np.testing.assert_allclose(y.T @ y / N, np.eye(r), atol=1e-3)
  # Two layers: bit 2k is the sign of y_k, bit 2k + 1 whether y_k lies between the thresholds b- < b+, which
  # (the paper) balance the second-layer values yh = |y| - b+ 1_+ + b- 1_- and, so balanced, cut the fewest
  # edges of A = Z Lambda^-1 Z^T: yh^T (I - A) yh is smallest along the balanced line (b+, b-) + t (n_-, n_+).
  two = agh.fit(cloud, num_bits=2 * r, num_anchors=12, layers=2, key=jax.random.key(2))
  y2 = np.asarray(agh.project(two, cloud), np.float64)[:, 0::2]
  np.testing.assert_allclose(y2, y, atol=1e-5)  # the same eigenvectors
  laplacian = np.eye(N) - z @ np.diag(1.0 / lam) @ z.T
  upper, lower = np.asarray(two.upper, np.float64), np.asarray(two.lower, np.float64)
  for k in range(r):
    plus = y[:, k] > 0
    cut = lambda bp, bm: (lambda yh: yh @ laplacian @ yh)(np.abs(y[:, k]) - bp * plus + bm * ~plus)
    yh = np.abs(y[:, k]) - upper[k] * plus + lower[k] * ~plus
    assert abs(yh.sum()) < 1e-3 * N, k
    best = cut(upper[k], lower[k])
    for t in (-0.1, -1e-3, 1e-3, 0.1):
      assert cut(upper[k] + t * (~plus).sum() / N, lower[k] + t * plus.sum() / N) >= best - 1e-6, (k, t)
  bits = np.asarray(agh.encode(two, cloud))
  np.testing.assert_array_equal(bits[:, 0::2], y2 > 0)
  np.testing.assert_array_equal(bits[:, 1::2], (y2 > lower) & (y2 < upper))
  bits = np.asarray(agh.encode(PARAMS["agh2"], X))
  # An odd length: the last eigenvector gives its sign bit only.
  odd = agh.fit(X, num_bits=7, num_anchors=12, layers=2, num_nearest=3, key=jax.random.key(0))
  np.testing.assert_array_equal(np.asarray(agh.encode(odd, X)), bits[:, :7])


def test_agh_kmeans_step_moves_anchors_to_cluster_means():
  key = jax.random.key(1)
  start = agh.fit(X, num_bits=2, num_anchors=5, kmeans_iters=0, key=key)
  one = agh.fit(X, num_bits=2, num_anchors=5, kmeans_iters=1, key=key)
  x = X.astype(np.float64) - np.asarray(start.mean, np.float64)
  a0 = np.asarray(start.anchors, np.float64)
  assert all(any(np.allclose(a, xi, atol=1e-6) for xi in x) for a in a0)  # anchors start on training points
  nearest = np.array([np.argmin([np.sum((xi - a) ** 2) for a in a0]) for xi in x])
  means = np.array([x[nearest == j].mean(0) if (nearest == j).any() else a0[j] for j in range(5)])
  np.testing.assert_allclose(np.asarray(one.anchors), means, rtol=1e-5, atol=1e-5)


def test_agh_graph_in_parts_gives_the_parts_indicators_whatever_the_solver(monkeypatch):
  # Three separate blobs, each point linked to its 2 nearest anchors: three parts, so eigenvalue 1 twice after the
  # trivial one is deflated. The eigenvectors are the parts' indicators orthonormalised (parts in the order of their
  # first anchor): constant on each blob, the first equal on the two blobs after the first part's; and a solver that
  # returns another basis of that eigenspace (rotated by 0.7 rad) changes no bit.
  key = jax.random.key(0)
  params = agh.fit(X, num_bits=4, num_anchors=12, layers=1, key=key)
  anchors = np.asarray(params.anchors, np.float64)
  x = X.astype(np.float64) - np.asarray(params.mean, np.float64)
  nearest = np.argsort(((x[:, None, :] - anchors[None]) ** 2).sum(-1), axis=1)[:, :2]
  first = []  # each blob's anchors, in the order of their first anchor
  for j in range(12):
    blob = int(np.bincount(Y[np.any(nearest == j, axis=1)], minlength=3).argmax())
    if blob not in first:
      first.append(blob)
  z = np.asarray(agh.project(params, X), np.float64)[:, :2]  # y = Z W: the first two eigenvectors on the points
  # On the training points, eigenvector k of the parts' basis is constant on each blob.
  for k in range(2):
    for blob in range(3):
      assert np.ptp(z[Y == blob, k]) < 1e-4 * np.abs(z[:, k]).max(), (k, blob)
  # The first is the first part against the rest: its values on the blobs after the first are equal.
  assert abs(z[Y == first[1], 0].mean() - z[Y == first[2], 0].mean()) < 1e-4 * np.abs(z[:, 0]).max()
  eigh = np.linalg.eigh

  def rotated(a):
    vals, vecs = eigh(a)
    ones = np.flatnonzero(vals > 1.0 - 1e-9)
    if ones.size == 2:
      c, s = np.cos(0.7), np.sin(0.7)
      vecs = vecs.copy()
      vecs[:, ones] = vecs[:, ones] @ np.array([[c, -s], [s, c]])
    return vals, vecs
  monkeypatch.setattr(np.linalg, "eigh", rotated)
  again = agh.fit(X, num_bits=4, num_anchors=12, layers=1, key=key)
  np.testing.assert_array_equal(np.asarray(agh.encode(again, X)), np.asarray(agh.encode(params, X)))


def test_spherical_hashing_fits_the_same_with_jax_x64_on():
  """The start is drawn in float32 whatever jax_enable_x64 says: one key, one fit."""
  plain = spherical.fit(X, num_bits=8, key=jax.random.key(3))
  with jax.enable_x64(True):
    wide = spherical.fit(X, num_bits=8, key=jax.random.key(3))
  for a, b in zip(plain, wide):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_agh_second_layer_of_an_eigenvector_whose_halves_are_whole_parts_is_constant():
  """The parts' indicators (the first two eigenvectors on three blobs) split no part: no second cut is better
  than another, so the second-layer bit is 1 for every point, training or new, and not a copy of the sign bit
  or rounding; the eigenvectors that live on one blob keep the balanced cut of their halves."""
  params = agh.fit(X, num_bits=8, num_anchors=12, layers=2, key=jax.random.key(0))
  fresh = np.concatenate([c + 0.5 * np.random.default_rng(7).normal(size=(20, 8)) for c in _CENTRES])
  bound = np.abs(np.asarray(params.projection, np.float64)).max(0)
  np.testing.assert_allclose(np.asarray(params.upper)[:2], 2 * bound[:2], rtol=1e-6)
  np.testing.assert_allclose(np.asarray(params.lower)[:2], -2 * bound[:2], rtol=1e-6)
  for points in (X, fresh.astype(np.float32)):
    bits = np.asarray(agh.encode(params, points))
    assert (bits[:, [1, 3]] == 1).all()
  y = np.asarray(agh.project(params, X), np.float64)[:, 4::2]  # eigenvectors 2 and 3
  second = np.asarray(agh.encode(params, X))[:, [5, 7]]
  for k in range(2):
    on = y[:, k] != 0  # their own blob
    assert 0 < second[on, k].mean() < 1, k


@pytest.mark.parametrize("layers", [1, 2])
def test_agh_bits_where_an_eigenvector_vanishes_on_a_part_are_not_rounding(layers):
  """On a graph in three parts (one per blob) an eigenvector is 0 on whole parts (an orthonormalised indicator on
  the parts before its own, an eigenvector of another eigenvalue outside its part): there its values are exactly
  0 and its bits constant, for the training points and for new points near them, never decided by rounding."""
  params = agh.fit(X, num_bits=4 * layers, num_anchors=12, layers=layers, key=jax.random.key(0))
  fresh = np.concatenate([c + 0.5 * np.random.default_rng(7).normal(size=(20, 8)) for c in _CENTRES])
  vanishing = 0
  for points, labels in ((X, Y), (fresh.astype(np.float32), np.repeat(np.arange(3), 20))):
    y = np.asarray(agh.project(params, points), np.float64)[:, 0::layers]  # y_k: every layers-th value
    bits = np.asarray(agh.encode(params, points)).reshape(len(points), 4, layers)
    for blob in range(3):
      for k in range(4):
        on = y[labels == blob, k]
        if np.abs(on).max() <= 1e-6 * np.abs(y[:, k]).max():  # 0 but for rounding: exactly 0, constant bits
          vanishing += 1
          assert (on == 0).all() and (bits[labels == blob, k] == bits[labels == blob, k][0]).all(), (blob, k)
  assert vanishing >= 6  # three (blob, eigenvector) pairs in each set of points


BAD_FITS = [
    (spherical, dict(num_bits=0), "num_bits"),
    (spherical, dict(num_bits=4, key="seed"), "key"),
    (spherical, dict(num_bits=4, num_iters=-1), "num_iters"),
    (spherical, dict(num_bits=4, epsilon_mean=-0.1), "epsilon_mean"),
    (agh, dict(num_bits=4, num_anchors=N + 1), "num_anchors"),
    (agh, dict(num_bits=12, num_anchors=12, layers=1), "num_bits"),
    (agh, dict(num_bits=24, num_anchors=12, layers=2), "num_bits"),
    (agh, dict(num_bits=4, layers=3), "layers"),
    (agh, dict(num_bits=4, num_anchors=12, num_nearest=13), "num_nearest"),
    (agh, dict(num_bits=4, num_anchors=12, kmeans_iters=-1), "kmeans_iters"),
]


@pytest.mark.parametrize("mod, opts, match", BAD_FITS)
def test_bad_fit_options_refused_before_fitting(monkeypatch, mod, opts, match):
  def no_fitting(*args, **kwargs):
    raise AssertionError("fitting started")
  monkeypatch.setattr(_common, "host_features", no_fitting)
  with pytest.raises(ValueError, match=match):
    mod.fit(X, **opts)
  with pytest.raises(ValueError, match="features"):
    mod.fit(X[0], num_bits=2)


@pytest.mark.parametrize("name", ["sph", "agh1"])
def test_bad_encode_inputs(name):
  mod, _ = FITS[name]
  with pytest.raises(ValueError, match="features"):
    mod.encode(PARAMS[name], X[:, :5])
  with pytest.raises(ValueError, match="params"):
    mod.project(tuple(PARAMS[name]), X)
