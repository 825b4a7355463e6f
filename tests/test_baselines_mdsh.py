"""Tests for hashjax.baselines.mdsh (multidimensional spectral hashing) against references written here in numpy.

The eigenvalues against a numerical convolution of the eigenfunctions with the Gaussian affinity; the chosen mode
vectors against a brute-force enumeration of a grid of them; the box and the bandwidth against a PCA by SVD and
a loop over items; the bits against a loop over items evaluating the products of cosines; the paper's weighted
score against the weighted Hamming distance of hashjax.codes; and the codes' quality on two blobs and on the
affinity of uniform data.
"""

import fractions
import functools
import itertools

import jax
import numpy as np
import pytest

from hashjax import codes
from hashjax.baselines import mdsh, spectral

KEY = jax.random.key(0)


def _box(n=300, seed=0):
  """Uniform points on a 2-D box of sides 4 and 1.5, rotated (so that PCA has something to undo), shifted."""
  rng = np.random.default_rng(seed)
  u = rng.uniform(size=(n, 2)) * np.array([4.0, 1.5])
  c, s = np.cos(0.3), np.sin(0.3)
  return u @ np.array([[c, s], [-s, c]]) + np.array([1.0, -2.0])


@functools.lru_cache(maxsize=None)
def _blobs():
  rng = np.random.default_rng(1)
  centres = np.zeros((2, 6))
  centres[1, :2] = 6.0
  x = np.concatenate([c + rng.normal(size=(50, 6)) for c in centres])
  return x, np.repeat([0, 1], 50)


def _brute_modes(spread, num_bits, max_mode):
  """Every mode vector in {0..max_mode}^p but 0, sorted by (sum_i (K_i / s_i)^2, lexicographically larger first)."""
  cands = [k for k in itertools.product(range(max_mode + 1), repeat=len(spread)) if any(k)]
  cost = [sum(fractions.Fraction(ki) ** 2 / fractions.Fraction(si) ** 2 for ki, si in zip(k, spread))
          for k in cands]  # exact: equal costs tie
  order = sorted(range(len(cands)), key=lambda j: (cost[j], tuple(-v for v in cands[j])))
  return np.array([cands[j] for j in order[:num_bits]])


def _reference_box(x, num_dirs, clip):
  """Mean, the top principal directions by SVD (each sign free), and the percentile box of the projections."""
  mean = x.mean(0)
  _, _, vt = np.linalg.svd(x - mean, full_matrices=False)
  proj = (x - mean) @ vt[:num_dirs].T
  lo, hi = np.percentile(proj, [clip, 100 - clip], axis=0)
  return mean, vt[:num_dirs].T, hi - lo


def _reference_values(x, params):
  """The products of cosines, item by item and bit by bit, in float64."""
  mean, w, lo, hi = (np.asarray(a, np.float64) for a in params[:4])
  modes = np.asarray(params.modes)
  out = np.empty((len(x), len(modes)))
  for n, item in enumerate(x):
    u = np.clip(((item - mean) @ w - lo) / (hi - lo), 0.0, 1.0)
    for j, mode in enumerate(modes):
      out[n, j] = np.prod([np.cos(k * np.pi * u[i]) for i, k in enumerate(mode)])
  return out


# ----------------------------------------------------------------------------- eigenfunctions and eigenvalues

def test_weights_are_the_gaussian_affinitys_eigenvalues_of_the_product_cosines():
  # On the box's own coordinates the affinity is exp(-|t|^2 / (2 sigma^2)); convolving it (normalised) with
  # prod_i cos(w_i y_i) gives lambda * prod_i cos(w_i y_i) at any interior point: a 2-D grid quadrature here.
  x = _box()
  params = mdsh.fit(x, num_bits=8, sigma_scale=0.3, clip_percent=0.0)
  spread = np.asarray(params.maximum, np.float64) - np.asarray(params.minimum, np.float64)
  sigma = float(params.sigma)
  t = np.linspace(-6 * sigma, 6 * sigma, 801)
  g = np.exp(-(t[:, None] ** 2 + t[None, :] ** 2) / (2 * sigma ** 2))
  y = np.array([0.37, 0.81])  # a point of the box (relative coordinates u), away from its edges
  modes = np.asarray(params.modes)
  assert (np.count_nonzero(modes, axis=1) == 2).any()  # a product of two directions is among them
  for mode, weight in zip(modes, np.asarray(params.weights, np.float64)):
    w = mode * np.pi / spread
    f = lambda a, b: np.cos(w[0] * (y[0] * spread[0] + a)) * np.cos(w[1] * (y[1] * spread[1] + b))
    conv = np.sum(g * f(t[:, None], t[None, :])) / np.sum(g)
    np.testing.assert_allclose(conv, weight * f(0.0, 0.0), rtol=1e-6, atol=1e-9)
  # and the formula itself: the product of the 1-D eigenvalues exp(-sigma^2 w_i^2 / 2)
  one_d = np.exp(-0.5 * sigma ** 2 * (modes * np.pi / spread) ** 2)
  np.testing.assert_allclose(np.asarray(params.weights), one_d.prod(1), rtol=1e-5)
  assert np.all(np.diff(np.asarray(params.weights)) <= 0)


def test_one_d_modes_are_eigenvectors_of_the_uniform_densitys_laplacian():
  # SH's 1-D eigenfunctions cos(k pi u), whose signs MDSH multiplies: on a fine uniform grid of [0, 1] with a
  # narrow Gaussian affinity, the random-walk Laplacian's eigenvectors after the constant are cos(k pi u).
  u = (np.arange(400) + 0.5) / 400
  w = np.exp(-((u[:, None] - u[None, :]) ** 2) / (2 * 0.01 ** 2))
  d = w.sum(1)
  vals, vecs = np.linalg.eigh(w / np.sqrt(d[:, None] * d[None, :]))
  vecs = vecs[:, ::-1] / np.sqrt(d)[:, None]
  for k in range(1, 5):
    v = vecs[:, k] / np.linalg.norm(vecs[:, k])
    ref = np.cos(k * np.pi * u) / np.linalg.norm(np.cos(k * np.pi * u))
    assert abs(v @ ref) > 0.999, k


# ----------------------------------------------------------------------------- the chosen modes

@pytest.mark.parametrize("spread,num_bits", [((4.0, 1.5, 1.0), 20), ((1.0, 1.0, 3.0), 15), ((2.0, 0.7), 12),
                                             ((1.0, 7.0), 8), ((1.0, 6.0), 30), ((3.0, 5.0, 7.0), 40)])  # ties
def test_top_modes_match_a_brute_force_enumeration(spread, num_bits):
  np.testing.assert_array_equal(mdsh.top_modes(np.array(spread), num_bits), _brute_modes(spread, num_bits, 12))


def test_fit_keeps_the_top_modes_of_its_box_and_more_bits_than_dimensions():
  x = _box(n=400, seed=3)
  params = mdsh.fit(x, num_bits=10, clip_percent=2.5)
  mean, basis, spread = _reference_box(x, 2, 2.5)
  np.testing.assert_allclose(np.asarray(params.mean), mean, rtol=1e-5)
  np.testing.assert_allclose(np.abs(np.asarray(params.projection, np.float64).T @ basis), np.eye(2), atol=1e-5)
  np.testing.assert_allclose(np.asarray(params.maximum) - np.asarray(params.minimum), spread, rtol=1e-5)
  modes = np.asarray(params.modes)
  np.testing.assert_array_equal(modes, _brute_modes(spread, 10, 12))
  assert modes.dtype == np.int32 and modes.shape == (10, 2)
  # SH's modes are the single-direction ones of the same box: MDSH's list holds products besides.
  single = modes[np.count_nonzero(modes, axis=1) == 1]
  assert 0 < len(single) < 10


def test_bandwidth_is_scale_times_mean_distance_to_100_nearest():
  x = _box(n=150, seed=4)
  dists = []
  for i, item in enumerate(x):
    d = np.sort([np.linalg.norm(item - other) for j, other in enumerate(x) if j != i])
    dists.append(d[:100].mean())
  np.testing.assert_allclose(mdsh.bandwidth_scale(x), np.mean(dists), rtol=1e-10)
  assert float(mdsh.fit(x, num_bits=3, sigma_scale=0.25).sigma) == pytest.approx(0.25 * np.mean(dists), rel=1e-6)
  # fewer rows than neighbours: all the other rows
  few = x[:5]
  ref = np.mean([np.mean([np.linalg.norm(few[i] - few[j]) for j in range(5) if j != i]) for i in range(5)])
  np.testing.assert_allclose(mdsh.bandwidth_scale(few), ref, rtol=1e-10)


# ----------------------------------------------------------------------------- the bits

def test_bits_are_signs_of_the_product_cosines_computed_item_by_item():
  x, _ = _blobs()
  params = mdsh.fit(x, num_bits=24)
  rng = np.random.default_rng(5)
  probe = np.concatenate([x[::7], x[:10] + rng.normal(scale=3.0, size=(10, 6))])  # some outside the box
  ref = _reference_values(probe, params)
  values = np.asarray(mdsh.project(params, probe.astype(np.float32)), np.float64)
  np.testing.assert_allclose(values, ref, atol=2e-4)
  bits = np.asarray(mdsh.encode(params, probe.astype(np.float32)))
  clear = np.abs(ref) > 1e-3
  assert clear.mean() > 0.99
  np.testing.assert_array_equal(bits[clear], (ref > 0)[clear])
  assert (np.abs(ref) == 1.0).any()  # clipped outside the box: cos(0) or cos(k pi)


def test_encode_is_project_positive_in_any_batch_and_under_jit():
  x, _ = _blobs()
  x = x.astype(np.float32)
  params = mdsh.fit(x, num_bits=40)
  values, bits = np.asarray(mdsh.project(params, x)), np.asarray(mdsh.encode(params, x))
  assert bits.dtype == np.uint8 and bits.shape == (100, 40) and values.shape == (100, 40)
  np.testing.assert_array_equal(bits, (values > 0).astype(np.uint8))
  np.testing.assert_array_equal(np.asarray(mdsh.encode(params, x[3:4])), bits[3:4])
  np.testing.assert_array_equal(np.asarray(mdsh.encode(params, x[3])), bits[3])
  np.testing.assert_array_equal(np.asarray(mdsh.encode(params, x[:12].reshape(3, 4, 6))).reshape(12, 40), bits[:12])
  np.testing.assert_array_equal(np.asarray(jax.jit(mdsh.encode)(params, x)), bits)
  assert all(a.dtype == np.float32 for a in params if a.dtype.kind == "f")


def test_deterministic_and_key_ignored():
  x, _ = _blobs()
  fits = [mdsh.fit(x, num_bits=12, key=key) for key in (KEY, jax.random.key(3), None)]
  for params in fits[1:]:
    for a, b in zip(params, fits[0]):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_sigma_scale_changes_the_weights_only():
  x, _ = _blobs()
  narrow, wide = (mdsh.fit(x, num_bits=16, sigma_scale=t) for t in (0.1, 3.0))
  for name in ("mean", "projection", "minimum", "maximum", "modes"):
    np.testing.assert_array_equal(np.asarray(getattr(narrow, name)), np.asarray(getattr(wide, name)))
  assert np.all(np.asarray(wide.weights) < np.asarray(narrow.weights))
  # weights = lambda_1^(t^2): exp(-sigma^2 c / 2) with sigma = t d
  np.testing.assert_allclose(np.asarray(wide.weights, np.float64),
                             np.asarray(narrow.weights, np.float64) ** (3.0 / 0.1) ** 2, rtol=1e-3, atol=1e-30)


def test_all_rows_equal_gives_constant_bits_and_zero_weights():
  x = np.ones((5, 3))
  params = mdsh.fit(x, num_bits=4)
  np.testing.assert_array_equal(np.asarray(mdsh.encode(params, x)), 1)
  np.testing.assert_array_equal(np.asarray(params.weights), 0.0)
  assert float(params.sigma) == 0.0


# ----------------------------------------------------------------------------- the score and the quality

def test_weighted_score_is_the_weighted_hamming_distance():
  x, _ = _blobs()
  params = mdsh.fit(x, num_bits=20, sigma_scale=0.5)
  bits = np.asarray(mdsh.encode(params, x.astype(np.float32)))
  lam = np.asarray(params.weights, np.float64)
  y = 2.0 * bits - 1.0
  score = np.array([[np.sum(lam * a * b) for b in y] for a in y[:10]])
  words = codes.pack_bits(bits)
  dist = np.asarray(codes.weighted_hamming_distance(words[:10], words, params.weights), np.float64)
  np.testing.assert_allclose(score, lam.sum() - 2.0 * dist, rtol=1e-5, atol=1e-5)


def test_hamming_neighbours_share_the_blob():
  x, y = _blobs()
  bits = np.asarray(mdsh.encode(mdsh.fit(x, num_bits=16), x)).astype(int)
  dist = (bits[:, None, :] != bits[None, :, :]).sum(-1)
  np.fill_diagonal(dist, 99)
  nearest = np.argmin(dist, axis=1)
  assert np.mean(y[nearest] == y) > 0.95
  same, other = (y[:, None] == y[None, :]) & (dist < 99), y[:, None] != y[None, :]
  assert dist[same].mean() < 0.9 * dist[other].mean()


def test_weighted_score_tracks_the_gaussian_affinity_better_than_hamming_on_sh_bits():
  # On a uniform box the kept terms of sum_k lambda_k y_k(x) y_k(q) approximate exp(-|x - q|^2 / (2 sigma^2));
  # the correlation must be clearly positive, and above that of SH's codes (same number of bits, Hamming).
  x = _box(n=400, seed=6)
  params = mdsh.fit(x, num_bits=32, sigma_scale=0.5, clip_percent=0.0)
  sigma = float(params.sigma)
  bits = np.asarray(mdsh.encode(params, x)).astype(np.float64)
  score = (2 * bits - 1) @ np.diag(np.asarray(params.weights, np.float64)) @ (2 * bits - 1).T
  affinity = np.exp(-np.sum((x[:, None] - x[None]) ** 2, -1) / (2 * sigma ** 2))
  upper = np.triu_indices(len(x), 1)
  corr = np.corrcoef(score[upper], affinity[upper])[0, 1]
  sh = np.asarray(spectral.encode(spectral.fit(x, num_bits=32), x)).astype(np.float64)
  sh_corr = np.corrcoef(((2 * sh - 1) @ (2 * sh - 1).T)[upper], affinity[upper])[0, 1]
  assert corr > 0.5 and corr > sh_corr + 0.05, (corr, sh_corr)


# ----------------------------------------------------------------------------- bad input

def test_bad_fit_inputs():
  x = np.random.default_rng(0).normal(size=(20, 5))
  nan = x.copy()
  nan[3, 2] = np.nan
  cases = [
      (nan, r"^features: expected finite values, got 1 NaN/inf, first np.float64\(nan\) at \(3, 2\)$"),
      (x[0], r"^features: expected a non-empty 2-D array \[num_items, dim\], got dtype float64 and shape \(5,\)$"),
      (x[:1], r"^features: expected at least 2 training rows, got shape \(1, 5\)$"),
      (np.zeros((0, 5)), r"^features: expected a non-empty 2-D array .*shape \(0, 5\)$"),
      (x.astype(np.complex64), r"^features: expected a real array \[num_items, dim\], got dtype complex64"),
  ]
  for bad, match in cases:
    with pytest.raises(ValueError, match=match):
      mdsh.fit(bad, num_bits=2)
  for bad in (0, -1, 4.0, True, None):
    with pytest.raises(ValueError, match=rf"^num_bits: expected a positive int, got {bad!r}$"):
      mdsh.fit(x, num_bits=bad)
  for bad in (0, -1.0, np.nan, np.inf, "1", True):
    with pytest.raises(ValueError, match=r"^sigma_scale: expected a finite number > 0, got "):
      mdsh.fit(x, num_bits=2, sigma_scale=bad)
  for bad in (-0.5, 50, 70.0, np.nan, None):
    with pytest.raises(ValueError, match=r"^clip_percent: expected a finite number in \[0, 50\), got "):
      mdsh.fit(x, num_bits=2, clip_percent=bad)
  for bad in (0, np.zeros(2, np.float32), jax.random.split(KEY, 2)):
    with pytest.raises(ValueError, match=r"^key: expected a "):
      mdsh.fit(x, num_bits=2, key=bad)
  with pytest.raises(ValueError, match=r"^features: expected concrete arrays .*outside jax.jit"):
    jax.jit(lambda a: mdsh.fit(a, num_bits=2))(x)


def test_bad_helper_inputs():
  with pytest.raises(ValueError, match=r"^spread: expected non-negative box sides, got a smallest value of -1.0"):
    mdsh.top_modes(np.array([1.0, -1.0]), 2)
  with pytest.raises(ValueError, match=r"^spread: expected a non-empty 1-D real array \[p\] box sides, got"):
    mdsh.top_modes(np.ones((1, 1)), 2)
  with pytest.raises(ValueError, match=r"^num_bits: expected a positive int, got 0$"):
    mdsh.top_modes(np.ones(2), 0)
  with pytest.raises(ValueError, match=r"^num_neighbors: expected an int >= 1, got 0$"):
    mdsh.bandwidth_scale(np.zeros((3, 2)), 0)
  with pytest.raises(ValueError, match=r"^features: expected at least 2 training rows, got shape \(1, 2\)$"):
    mdsh.bandwidth_scale(np.zeros((1, 2)))


def test_bad_encode_inputs():
  x = np.random.default_rng(0).normal(size=(20, 5)).astype(np.float32)
  params = mdsh.fit(x, num_bits=3)
  with pytest.raises(ValueError, match=r"^features: expected 5 columns \(the width the params were fit on\), got "
                     r"shape \(20, 4\)$"):
    mdsh.encode(params, x[:, :4])
  with pytest.raises(ValueError, match=r"^features: expected an array \[\.\.\., 5\] with at least 1 dimension"):
    mdsh.project(params, np.float32(1.0))
  with pytest.raises(ValueError, match=r"^features: expected a real array \[\.\.\., 5\], got dtype complex64"):
    mdsh.encode(params, x.astype(np.complex64))
  inf = x.copy()
  inf[1, 1] = np.inf
  with pytest.raises(ValueError, match=r"^features: expected finite values, got 1 NaN/inf"):
    mdsh.project(params, inf)
  with pytest.raises(ValueError, match=r"^params: expected MDSHParams from hashjax.baselines.mdsh.fit, got "
                     r"SpectralParams$"):
    mdsh.encode(spectral.fit(x, num_bits=3), x)
