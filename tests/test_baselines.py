"""Tests for hashjax.baselines against independent numpy references.

Each method is checked against its paper's algorithm written out in numpy:
LSH against sign((X - mean) W) and Charikar's collision probability theta/pi,
PCA against numpy's SVD, ITQ against a numpy Procrustes step and the monotone
decrease of its quantisation loss, SH against a brute-force enumeration of
the 1-D Laplacian eigenvalues over (direction, mode) pairs, IsoHash against
numpy's per-bit variances of the rotated projections, a numpy
lift-and-projection step and the monotone decrease of its gradient flow's
objective.
"""

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.datasets import load_digits

from hashjax import baselines, codes, models
from hashjax.baselines import isohash, itq, lsh, pca, spectral

METHODS = ["lsh", "pca", "itq", "sh", "iso"]
KEY = jax.random.key(0)


@functools.lru_cache(maxsize=None)
def _digits():
  data = load_digits()
  return data.data.astype(np.float64), data.target


def _anisotropic(n=400, d=5, seed=0):
  """Gaussian data with clearly distinct variances along random axes."""
  rng = np.random.default_rng(seed)
  scales = np.array([3.0, 2.2, 1.5, 1.0, 0.6, 0.4, 0.3, 0.2])[:d]
  basis, _ = np.linalg.qr(rng.normal(size=(d, d)))
  return (rng.normal(size=(n, d)) * scales) @ basis.T + rng.normal(size=d)


def _np_pca(x, num_dirs):
  """Reference PCA: numpy SVD of the centred data, largest |entry| made positive."""
  mean = x.mean(0)
  _, _, vt = np.linalg.svd(x - mean, full_matrices=False)
  dirs = vt[:num_dirs].T.copy()
  for j in range(num_dirs):
    if dirs[np.argmax(np.abs(dirs[:, j])), j] < 0:
      dirs[:, j] *= -1
  return mean, dirs


# ----------------------------------------------------------------------------- LSH

def test_lsh_bits_are_signs_of_gaussian_hyperplanes():
  x = _anisotropic(n=300, d=7)
  with jax.enable_x64(True):
    params = lsh.fit(x, num_bits=24, key=KEY)
    w = np.asarray(jax.random.normal(KEY, (7, 24), dtype=jnp.float64))
    bits = np.asarray(lsh.encode(params, x))
  np.testing.assert_allclose(np.asarray(params.mean), x.mean(0), rtol=1e-12)
  np.testing.assert_array_equal(np.asarray(params.projection), w)
  np.testing.assert_array_equal(bits, ((x - x.mean(0)) @ w > 0).astype(np.uint8))
  assert bits.dtype == np.uint8


def test_lsh_collision_probability_is_angle_over_pi():
  # Charikar 2002: Pr[h(u) != h(v)] = theta(u, v) / pi for random hyperplanes.
  rng = np.random.default_rng(3)
  u, v = rng.normal(size=6), rng.normal(size=6)
  theta = np.arccos(u @ v / np.linalg.norm(u) / np.linalg.norm(v))
  train = np.stack([u, v, -u, -v])  # mean zero: hyperplanes pass through the origin
  num_bits = 20000
  with jax.enable_x64(True):
    params = lsh.fit(train, num_bits=num_bits, key=jax.random.key(7))
    bits = np.asarray(lsh.encode(params, np.stack([u, v])))
  frac = np.mean(bits[0] != bits[1])
  p = theta / np.pi
  assert abs(frac - p) < 5 * np.sqrt(p * (1 - p) / num_bits), (frac, p)


def test_lsh_allows_more_bits_than_dims():
  x = _anisotropic(d=3)
  assert lsh.encode(lsh.fit(x, num_bits=40, key=KEY), x).shape == (400, 40)


# ----------------------------------------------------------------------------- PCA

def test_pca_matches_numpy_svd_on_digits():
  x, _ = _digits()
  with jax.enable_x64(True):
    params = pca.fit(x, num_bits=16)
    bits = np.asarray(pca.encode(params, x))
  mean, dirs = _np_pca(x, 16)
  np.testing.assert_allclose(np.asarray(params.mean), mean, atol=1e-12)
  np.testing.assert_allclose(np.asarray(params.projection), dirs, atol=1e-8)
  np.testing.assert_array_equal(bits, ((x - mean) @ dirs > 0).astype(np.uint8))


def test_pca_float32_agrees_with_numpy_up_to_rare_boundary_items():
  x, _ = _digits()
  bits = np.asarray(pca.encode(pca.fit(x.astype(np.float32), num_bits=8), x.astype(np.float32)))
  mean, dirs = _np_pca(x, 8)
  ref = ((x - mean) @ dirs > 0).astype(np.uint8)
  assert np.mean(bits != ref) < 1e-3


# ----------------------------------------------------------------------------- ITQ

def _np_itq_loss(params, x):
  v = (x - np.asarray(params.mean)) @ np.asarray(params.projection) @ np.asarray(params.rotation)
  return np.sum((np.where(v > 0, 1.0, -1.0) - v) ** 2)


def test_itq_quantization_loss_decreases_monotonically():
  x, _ = _digits()
  with jax.enable_x64(True):
    losses = [_np_itq_loss(itq.fit(x, num_bits=16, key=KEY, num_iters=t), x) for t in range(21)]
  losses = np.array(losses)
  assert np.all(np.diff(losses) <= 1e-9 * losses[0]), losses
  # The alternation actually moves (||V||_F^2, a constant, dominates the loss on raw digits).
  assert losses[0] - losses[-1] > 1e-2 * losses[0]


def test_itq_step_is_orthogonal_procrustes():
  # Gong & Lazebnik 2011, Sec. 2.3: B = sgn(VR); SVD B^T V = S Omega S_hat^T; R = S_hat S^T.
  x, _ = _digits()
  with jax.enable_x64(True):
    for t in (0, 3):
      before = itq.fit(x, num_bits=12, key=KEY, num_iters=t)
      after = itq.fit(x, num_bits=12, key=KEY, num_iters=t + 1)
      v = (x - np.asarray(before.mean)) @ np.asarray(before.projection)
      b = np.where(v @ np.asarray(before.rotation) > 0, 1.0, -1.0)
      s, _, s_hat_t = np.linalg.svd(b.T @ v)
      np.testing.assert_allclose(np.asarray(after.rotation), s_hat_t.T @ s.T, atol=1e-9)
  mean, dirs = _np_pca(x, 12)
  np.testing.assert_allclose(np.asarray(after.projection), dirs, atol=1e-8)


def test_itq_rotation_orthogonal_and_encode_matches_numpy():
  x, _ = _digits()
  with jax.enable_x64(True):
    params = itq.fit(x, num_bits=16, key=KEY)
    bits = np.asarray(itq.encode(params, x))
    loss = float(itq.quantization_loss(params, x))
  r = np.asarray(params.rotation)
  np.testing.assert_allclose(r.T @ r, np.eye(16), atol=1e-10)
  v = (x - x.mean(0)) @ np.asarray(params.projection) @ r
  np.testing.assert_array_equal(bits, (v > 0).astype(np.uint8))
  np.testing.assert_allclose(loss, _np_itq_loss(params, x), rtol=1e-10)


# ----------------------------------------------------------------------------- SH

def _np_spectral(x, num_bits, max_mode=None):
  """Reference SH (Weiss et al. 2008): brute-force all (direction, k) eigenvalues."""
  num_dirs = min(num_bits, x.shape[1])
  mean, dirs = _np_pca(x, num_dirs)
  y = (x - mean) @ dirs
  lo, hi = y.min(0), y.max(0)
  eps = 0.5  # any kernel width gives the same order
  candidates = []
  for i in range(num_dirs):
    for k in range(1, (max_mode or 3 * num_bits) + 1):
      lam = -np.expm1(-eps ** 2 / 2 * (k * np.pi / (hi[i] - lo[i])) ** 2)  # 1 - exp(.)
      candidates.append((lam, i, k))
  chosen = sorted(candidates)[:num_bits]
  direction = np.array([c[1] for c in chosen])
  mode = np.array([c[2] for c in chosen])
  return mean, dirs, lo, hi, direction, mode


def _np_spectral_bits(x, mean, dirs, lo, hi, direction, mode):
  y = (x - mean) @ dirs
  phase = np.pi / 2 + mode * np.pi * (y[:, direction] - lo[direction]) / (hi - lo)[direction]
  return (np.sin(phase) > 0).astype(np.uint8)


@pytest.mark.parametrize("data,num_bits", [("aniso", 12), ("aniso", 3), ("digits", 16), ("digits", 40)])
def test_spectral_matches_brute_force_modes(data, num_bits):
  x = _anisotropic() if data == "aniso" else _digits()[0]
  mean, dirs, lo, hi, direction, mode = _np_spectral(x, num_bits)
  with jax.enable_x64(True):
    params = spectral.fit(x, num_bits=num_bits)
    bits = np.asarray(spectral.encode(params, x))
  np.testing.assert_allclose(np.asarray(params.projection), dirs, atol=1e-8)
  np.testing.assert_allclose(np.asarray(params.minimum), lo, atol=1e-8)
  np.testing.assert_allclose(np.asarray(params.maximum), hi, atol=1e-8)
  np.testing.assert_array_equal(np.asarray(params.direction), direction)
  np.testing.assert_array_equal(np.asarray(params.mode), mode)
  np.testing.assert_array_equal(bits, _np_spectral_bits(x, mean, dirs, lo, hi, direction, mode))
  if data == "aniso" and num_bits == 12:
    assert len(set(direction.tolist())) > 1 and mode.max() > 1  # a non-trivial mix of modes


def test_spectral_skips_constant_direction():
  x = _anisotropic(d=3)
  x = np.concatenate([x, np.zeros((x.shape[0], 1))], axis=1)  # 4th PCA direction has zero range
  with jax.enable_x64(True):
    params = spectral.fit(x, num_bits=10)
    bits = np.asarray(spectral.encode(params, x))
  assert 3 not in np.asarray(params.direction).tolist()
  _, _, _, _, direction, mode = _np_spectral(x[:, :3], 10)
  np.testing.assert_array_equal(np.asarray(params.mode), mode)
  assert set(np.unique(bits).tolist()) <= {0, 1}


def test_spectral_all_constant_features_gives_constant_bits():
  x = np.ones((5, 3), np.float32)
  bits = np.asarray(spectral.encode(spectral.fit(x, num_bits=4), x + 1))
  np.testing.assert_array_equal(bits, np.ones((5, 4), np.uint8))


# ----------------------------------------------------------------------------- all methods

def _nn_label_precision(bits, labels):
  """Mean over items of the same-label fraction among their nearest other items."""
  b = bits.astype(np.int32)
  dist = b.shape[1] - (b @ b.T + (1 - b) @ (1 - b).T)
  np.fill_diagonal(dist, b.shape[1] + 1)
  nearest = dist == dist.min(1, keepdims=True)
  same = labels[:, None] == labels[None, :]
  return np.mean((nearest & same).sum(1) / nearest.sum(1))


def test_retrieval_quality_on_digits():
  x, y = _digits()
  scores = {}
  for method in METHODS:
    params = baselines.fit(method, x.astype(np.float32), num_bits=32, key=KEY)
    scores[method] = _nn_label_precision(np.asarray(baselines.encode(method, params, x.astype(np.float32))), y)
  assert all(s > 0.5 for s in scores.values()), scores  # chance is ~0.1
  assert scores["itq"] > scores["lsh"], scores


@pytest.mark.parametrize("method", METHODS)
def test_same_key_same_codes(method):
  x, _ = _digits()
  a = baselines.encode(method, baselines.fit(method, x, num_bits=8, key=jax.random.key(5)), x)
  b = baselines.encode(method, baselines.fit(method, x, num_bits=8, key=jax.random.key(5)), x)
  np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("method", ["lsh", "itq"])
def test_different_key_different_codes(method):
  x, _ = _digits()
  a = baselines.encode(method, baselines.fit(method, x, num_bits=8, key=jax.random.key(1)), x)
  b = baselines.encode(method, baselines.fit(method, x, num_bits=8, key=jax.random.key(2)), x)
  assert np.any(np.asarray(a) != np.asarray(b))


@pytest.mark.parametrize("method", METHODS)
def test_shapes_dtype_batch_dims_and_integer_features(method):
  x, _ = _digits()
  xi = x.astype(np.uint8)
  params = baselines.fit(method, xi, num_bits=8, key=KEY)
  ref = np.asarray(baselines.encode(method, baselines.fit(method, xi.astype(np.float32), num_bits=8, key=KEY),
                                    xi.astype(np.float32)))
  bits = np.asarray(baselines.encode(method, params, xi))
  np.testing.assert_array_equal(bits, ref)
  assert bits.dtype == np.uint8 and bits.shape == (len(x), 8)
  assert set(np.unique(bits).tolist()) <= {0, 1}
  batched = np.asarray(baselines.encode(method, params, x[:12].reshape(3, 4, 64)))
  np.testing.assert_array_equal(batched.reshape(12, 8), bits[:12])


@pytest.mark.parametrize("method", METHODS)
def test_fit_runs_on_the_host_and_encode_jits(method):
  x = _anisotropic(n=100, d=5).astype(np.float32)
  mod = baselines.BASELINES[method]
  with pytest.raises(ValueError, match="features: .*outside jax.jit"):
    jax.jit(functools.partial(mod.fit, num_bits=4))(x, key=KEY)
  params = mod.fit(x, num_bits=4, key=KEY)
  assert all(a.dtype in (jnp.float32, jnp.int32) for a in params)
  np.testing.assert_array_equal(np.asarray(jax.jit(mod.encode)(params, x)), np.asarray(mod.encode(params, x)))


_CODES_SCRIPT = """
import hashlib, sys, jax, numpy as np
from hashjax import baselines
x, y = np.load(sys.argv[1]), np.load(sys.argv[2])
h = hashlib.sha1()
for method in ("lsh", "pca", "itq", "sh", "iso"):
  params = baselines.fit(method, x, num_bits=32, key=jax.random.key(0))
  h.update(np.asarray(baselines.encode(method, params, x)).tobytes())
# the supervised fits on 1,500 items: iterative solvers and eigenvectors whose sign an eigensolver picks. Not
# KSH: its L-BFGS refinement turns the float64 rounding of another BLAS kernel into other codes.
for method in ("sdh", "cosdish", "fasthash", "bre", "splh", "machash"):
  small = {"num_anchors": 100} if method != "splh" else {}
  params = baselines.fit(method, x[:1500], num_bits=24, key=jax.random.key(0), labels=y[:1500], **small)
  h.update(np.asarray(baselines.encode(method, params, x)).tobytes())
print(h.hexdigest())
"""


def test_codes_do_not_depend_on_threads_or_cpu_features(tmp_path):
  # In float32 the ITQ alternation turns the rounding of multithreaded products into different codes.
  import os, shutil, subprocess, sys
  from hashjax import data
  x, y = data.load_mnist_t10k()
  np.save(tmp_path / "x.npy", x[:3000])
  np.save(tmp_path / "y.npy", y[:3000])
  script = tmp_path / "codes.py"
  script.write_text(_CODES_SCRIPT)
  # the second run changes the instruction set and the thread count at once (one subprocess fewer)
  other = {"XLA_FLAGS": "--xla_cpu_max_isa=SSE4_2", "OPENBLAS_CORETYPE": "Sandybridge", "OPENBLAS_NUM_THREADS": "1"}
  runs = [([], {}), (["taskset", "-c", "0"] if shutil.which("taskset") else [], other)]
  digests = set()
  for prefix, env in runs:
    out = subprocess.run(prefix + [sys.executable, str(script), str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
                         capture_output=True,
                         text=True, env={**os.environ, **env}, check=True)
    digests.add(out.stdout.strip())
  assert len(digests) == 1, digests


def test_registry():
  assert set(baselines.BASELINES) == {"lsh", "pca", "itq", "sh", "mdsh", "iso", "sph", "agh", "sth", "ksh", "sdh",
                                      "cosdish", "fasthash", "bre", "splh", "machash"}
  assert set(baselines.SUPERVISED) == {"ksh", "sdh", "cosdish", "fasthash", "bre", "splh", "machash"}
  assert set(baselines.PARAMS) == set(baselines.BASELINES)
  x = _anisotropic(n=50, d=4)
  with jax.enable_x64(True):
    via = baselines.encode("itq", baselines.fit("itq", x, num_bits=3, key=KEY, num_iters=5), x)
    direct = itq.encode(itq.fit(x, num_bits=3, key=KEY, num_iters=5), x)
  np.testing.assert_array_equal(np.asarray(via), np.asarray(direct))
  labels = np.arange(50) % 2
  with pytest.raises(ValueError, match="labels: 'itq' is unsupervised"):
    baselines.fit("itq", x, num_bits=3, key=KEY, labels=labels)
  with pytest.raises(ValueError, match="labels: expected int class labels"):
    baselines.fit("sdh", x, num_bits=3, key=KEY, num_anchors=10)


# ----------------------------------------------------------------------------- bad input

def _fit(method, x, num_bits=4, key=KEY):
  return baselines.fit(method, x, num_bits=num_bits, key=key)


@pytest.mark.parametrize("method", METHODS)
def test_bad_features_in_fit(method):
  x = _anisotropic(n=20, d=5)
  for bad in (np.nan, np.inf, -np.inf):
    y = x.copy()
    y[3, 2] = bad
    with pytest.raises(ValueError, match="features"):
      _fit(method, y)
  for bad in (np.zeros((0, 5)), np.zeros((20, 0)), x[0], x[None], x.astype(np.complex64), x > 0, [[1.0]]):
    with pytest.raises(ValueError, match="features"):
      _fit(method, bad)


@pytest.mark.parametrize("method", METHODS)
def test_bad_num_bits(method):
  x = _anisotropic(n=20, d=5)
  for bad in (0, -3, 4.0, True, None, np.array(4)):
    with pytest.raises(ValueError, match="num_bits"):
      _fit(method, x, num_bits=bad)


@pytest.mark.parametrize("method", ["pca", "itq", "iso"])
def test_num_bits_above_dim_for_pca_methods(method):
  with pytest.raises(ValueError, match="num_bits"):
    _fit(method, _anisotropic(n=20, d=5), num_bits=6)


@pytest.mark.parametrize("method", ["pca", "itq", "sh", "iso"])
def test_pca_methods_need_two_rows(method):
  with pytest.raises(ValueError, match="features"):
    _fit(method, np.ones((1, 5)))


@pytest.mark.parametrize("method", METHODS)
def test_bad_key(method):
  x = _anisotropic(n=20, d=5)
  for bad in (0, np.zeros(2, np.float32), jax.random.split(KEY, 2)):
    with pytest.raises(ValueError, match="key"):
      _fit(method, x, key=bad)
  if method in ("lsh", "itq"):
    with pytest.raises(ValueError, match="key"):
      _fit(method, x, key=None)
  else:
    _fit(method, x, key=None)  # deterministic methods need no key


def test_bad_num_iters():
  x = _anisotropic(n=20, d=5)
  for bad in (-1, 2.5, None):
    with pytest.raises(ValueError, match="num_iters"):
      itq.fit(x, num_bits=3, key=KEY, num_iters=bad)


@pytest.mark.parametrize("method", METHODS)
def test_bad_features_in_encode(method):
  x = _anisotropic(n=20, d=5)
  params = _fit(method, x)
  for bad in (x[:, :4], np.zeros((3, 6)), np.float32(1.0), x.astype(np.complex64)):
    with pytest.raises(ValueError, match="features"):
      baselines.encode(method, params, bad)
  y = x.copy()
  y[0, 0] = np.nan
  with pytest.raises(ValueError, match="features"):
    baselines.encode(method, params, y)
  other = "pca" if method != "pca" else "lsh"
  with pytest.raises(ValueError, match="params"):
    baselines.encode(method, _fit(other, x), x)


def test_unknown_method():
  with pytest.raises(ValueError, match="method"):
    baselines.fit("kmeans", _anisotropic(n=20, d=5), num_bits=4, key=KEY)
  with pytest.raises(ValueError, match="method"):
    baselines.encode("kmeans", None, _anisotropic(n=20, d=5))


# ----------------------------------------------------------------------------- IsoHash

def _np_spectrum(x, num_bits):
  """Reference PCA variances: the squared singular values of the centred data over N, largest first."""
  s = np.linalg.svd(x - x.mean(0), compute_uv=False)
  return s[:num_bits] ** 2 / len(x)


def _iso_fit(x, num_bits, **options):
  """IsoHash params in float64 (x64 on), as numpy arrays."""
  with jax.enable_x64(True):
    params = isohash.fit(x, num_bits=num_bits, **options)
  return [np.asarray(a, np.float64) for a in params]


def _iso_fit_unconverged(x, num_bits, **options):
  """As :func:`_iso_fit`, for a ``num_iters`` too small to meet the stopping rule."""
  with pytest.warns(isohash.ConvergenceWarning, match="num_iters"):
    return _iso_fit(x, num_bits, **options)


@pytest.mark.parametrize("solver", isohash.SOLVERS)
@pytest.mark.parametrize("data,num_bits", [("digits", 16), ("digits", 40), ("aniso", 8), ("aniso", 3)])
def test_iso_gives_every_bit_the_same_variance(solver, data, num_bits):
  x = _anisotropic(d=8) if data == "aniso" else _digits()[0]
  mean, projection, rotation = _iso_fit(x, num_bits, solver=solver)
  lam = _np_spectrum(x, num_bits)
  assert lam[0] > 3 * lam[-1]  # PCA's own bits are far from isotropic
  a = lam.sum() / num_bits
  ref_mean, dirs = _np_pca(x, num_bits)
  np.testing.assert_allclose(mean, ref_mean, atol=1e-12)
  np.testing.assert_allclose(projection, dirs, atol=1e-8)
  np.testing.assert_allclose(rotation.T @ rotation, np.eye(num_bits), atol=1e-12)
  np.testing.assert_allclose(rotation @ rotation.T, np.eye(num_bits), atol=1e-12)
  # The stopping rule: every diagonal entry of Q^T Lambda Q within tol * a of a.
  z = rotation.T @ np.diag(lam) @ rotation
  assert np.max(np.abs(np.diag(z) - a)) <= 1.001 * isohash.DEFAULT_TOL * a
  # What the rule is for: the hashed projections of the training data all have variance a.
  variances = np.var((x - x.mean(0)) @ dirs @ rotation, axis=0)
  assert np.max(np.abs(variances / a - 1)) <= 1.001 * isohash.DEFAULT_TOL
  np.testing.assert_allclose(variances.sum(), lam.sum(), rtol=1e-12)  # a rotation keeps the total


def test_iso_start_and_lift_and_projection_steps():
  # Kong & Li 2012, Sec. 3.2: T = Z with diagonal a; T = U Gamma U^T; Z = U Lambda U^T (both sorted alike).
  x, _ = _digits()
  b = 12
  lam = _np_spectrum(x, b)
  a = lam.mean()
  g = np.random.RandomState(0).standard_normal((b, b))
  q, r = np.linalg.qr(g)
  np.testing.assert_allclose(_iso_fit_unconverged(x, b, num_iters=0)[2], q * np.sign(np.diag(r)), atol=1e-12)
  for t in (0, 1, 4):
    before = _iso_fit_unconverged(x, b, num_iters=t)[2]
    after = _iso_fit_unconverged(x, b, num_iters=t + 1)[2]
    z = before.T @ np.diag(lam) @ before
    lifted = z.copy()
    lifted[np.diag_indices(b)] = a
    _, u = np.linalg.eigh(lifted)  # ascending, paired with the ascending variances
    np.testing.assert_allclose(after.T @ np.diag(lam) @ after, u @ np.diag(lam[::-1]) @ u.T, atol=1e-9 * a)
    assert np.all(np.sum(after * before, axis=1) > 0)  # rows signed to follow the previous iterate


def test_iso_stops_at_the_first_iterate_that_meets_tol():
  x, _ = _digits()
  b, tol = 10, 1e-5
  lam = _np_spectrum(x, b)
  a = lam.mean()
  worst = []
  for t in range(200):
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      q = _iso_fit(x, b, num_iters=t, tol=tol)[2]
    worst.append(np.max(np.abs(np.diag(q.T @ np.diag(lam) @ q) - a)))
    assert bool(caught) == (worst[-1] > tol * a)  # warned exactly when the rule is not met
    if worst[-1] <= tol * a:
      break
  assert 3 < t < 200, t
  np.testing.assert_array_equal(_iso_fit(x, b, num_iters=t + 100, tol=tol)[2], q)  # no update after it
  np.testing.assert_array_equal(_iso_fit(x, b, tol=tol)[2], q)


def test_iso_gradient_flow_decreases_its_objective():
  x, _ = _digits()
  b = 12
  lam = _np_spectrum(x, b)
  a = lam.mean()
  losses = []
  for t in range(12):
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", isohash.ConvergenceWarning)
      q = _iso_fit(x, b, solver="gradient_flow", num_iters=t)[2]
    np.testing.assert_allclose(q.T @ q, np.eye(b), atol=1e-12)
    d = np.diag(q.T @ np.diag(lam) @ q) - a
    losses.append(0.5 * d @ d)
  losses = np.array(losses)
  assert np.all(np.diff(losses) < 0), losses
  assert losses[-1] < 1e-2 * losses[0], losses


def test_iso_encode_matches_numpy_sign_and_jit():
  x, _ = _digits()
  with jax.enable_x64(True):
    params = isohash.fit(x, num_bits=24)
    bits = np.asarray(isohash.encode(params, x))
  mean, projection, rotation = (np.asarray(a) for a in params)
  np.testing.assert_array_equal(bits, ((x - mean) @ projection @ rotation > 0).astype(np.uint8))
  x32 = x.astype(np.float32)
  params32 = isohash.fit(x32, num_bits=24)
  assert all(a.dtype == jnp.float32 for a in params32)
  bits32 = np.asarray(isohash.encode(params32, x32))
  np.testing.assert_array_equal(np.asarray(jax.jit(isohash.encode)(params32, x32)), bits32)
  mean, projection, rotation = (np.asarray(a, np.float64) for a in params32)
  assert np.mean(bits32 != ((x - mean) @ projection @ rotation > 0)) < 1e-3


def test_iso_ignores_the_key():
  x, _ = _digits()
  fits = [isohash.fit(x, num_bits=16, key=key) for key in (None, KEY, jax.random.key(7))]
  fits.append(baselines.fit("iso", x, num_bits=16, key=jax.random.key(8)))
  for params in fits[1:]:
    for a, b in zip(params, fits[0]):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  np.testing.assert_array_equal(np.asarray(isohash.encode(fits[1], x)), np.asarray(isohash.encode(fits[0], x)))


def test_iso_registry_forwards_the_solver():
  x = _anisotropic(d=8)
  via = baselines.fit("iso", x, num_bits=6, solver="gradient_flow", num_iters=500, tol=1e-7)
  direct = isohash.fit(x, num_bits=6, solver="gradient_flow", num_iters=500, tol=1e-7)
  lp = isohash.fit(x, num_bits=6)
  np.testing.assert_array_equal(np.asarray(via.rotation), np.asarray(direct.rotation))
  assert not np.allclose(np.asarray(via.rotation), np.asarray(lp.rotation))  # the two solvers find different Q


def test_iso_beats_pca_hashing_on_digits():
  x, y = _digits()
  scores = {m: _nn_label_precision(np.asarray(baselines.encode(m, baselines.fit(m, x, num_bits=32), x)), y)
            for m in ("pca", "iso")}
  assert scores["iso"] > scores["pca"] + 0.05, scores


def test_iso_degenerate_inputs():
  x = np.ones((6, 3))  # every variance 0: already isotropic, the start is kept and no warning
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    params = isohash.fit(x, num_bits=2)
  np.testing.assert_array_equal(np.asarray(isohash.encode(params, x)), np.zeros((6, 2), np.uint8))
  r = np.asarray(params.rotation, np.float64)
  np.testing.assert_allclose(r.T @ r, np.eye(2), atol=1e-6)
  one = _iso_fit(_anisotropic(d=4), 1)
  np.testing.assert_array_equal(one[2], [[1.0]])  # one bit: nothing to rotate


def test_iso_converges_by_default():
  x, _ = _digits()
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    for solver in isohash.SOLVERS:
      for num_bits in (16, 64):  # 64: all of digits' dimensions, three of them constant
        isohash.fit(x, num_bits=num_bits, solver=solver)


def test_iso_bad_options():
  x = _anisotropic(n=20, d=5)
  for bad in ("lp", "Gradient_flow", None, 0):
    with pytest.raises(ValueError, match="solver"):
      isohash.fit(x, num_bits=3, solver=bad)
  for bad in (-1, 2.5, None, True):
    with pytest.raises(ValueError, match="num_iters"):
      isohash.fit(x, num_bits=3, num_iters=bad)
  for bad in (-1e-3, np.nan, np.inf, "1e-6", None):
    with pytest.raises(ValueError, match="tol"):
      isohash.fit(x, num_bits=3, tol=bad)
  with pytest.raises(ValueError, match="num_bits"):
    baselines.fit("iso", x, num_bits=6)
  with pytest.raises(ValueError, match="params"):
    isohash.encode(itq.fit(x, num_bits=3, key=KEY), x)
  with pytest.raises(ValueError, match="num_bits"):
    isohash.start_rotation(0)


def _pack_by_hand(bits):
  """uint32 words of ``bits[n, b <= 32]``: bit ``j`` at position ``j``."""
  return (bits.astype(np.uint64) << np.arange(bits.shape[1], dtype=np.uint64)).sum(1).astype(np.uint32)[:, None]


def test_iso_model_round_trips_and_encodes_like_numpy(tmp_path):
  x = _digits()[0].astype(np.float32)
  params = baselines.fit("iso", x[:1000], num_bits=24)
  model = models.from_baseline("iso", params, train_features=x[:1000], config={"method": "iso"})
  loaded = models.load_model(model.save(tmp_path / "iso-24"))
  assert (loaded.kind, loaded.num_bits, loaded.dim) == ("iso", 24, 64)
  assert type(loaded.params) is isohash.IsoHashParams
  for a, b in zip(loaded.params, params):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  mean, projection, rotation = (np.asarray(a, np.float64) for a in params)
  logits = (x[1000:].astype(np.float64) - mean) @ projection @ rotation
  clear = np.all(np.abs(logits) > 1e-3, axis=1)
  assert clear.mean() > 0.95
  words = np.asarray(loaded.encode(x[1000:]))
  np.testing.assert_array_equal(words[clear], _pack_by_hand(logits > 0)[clear])
  np.testing.assert_array_equal(words, np.asarray(model.encode(x[1000:])))


@pytest.mark.parametrize("method", sorted(baselines.BASELINES))
def test_every_baseline_saves_loads_and_encodes_the_same_words(tmp_path, method):
  x = np.random.default_rng(3).normal(size=(90, 6)).astype(np.float32)
  labels = np.repeat(np.arange(3), 30)
  small = {"num_anchors": 12} if method in ("ksh", "sdh", "cosdish", "fasthash", "bre", "agh", "machash") else {}
  small.update({"num_columns": 20} if method == "cosdish" else {})
  params = baselines.fit(method, x, num_bits=5, key=KEY, labels=labels if method in baselines.SUPERVISED else None,
                         **small)
  model = models.from_baseline(method, params, train_features=x)
  loaded = models.load_model(model.save(tmp_path / method))
  assert loaded.kind == method and loaded.num_bits == 5
  fresh = np.random.default_rng(4).normal(size=(7, 6)).astype(np.float32)
  np.testing.assert_array_equal(np.asarray(loaded.encode(fresh)), np.asarray(model.encode(fresh)))
  np.testing.assert_array_equal(np.asarray(model.encode(fresh)),
                                np.asarray(codes.pack_bits(baselines.encode(method, params, fresh))))


@pytest.mark.parametrize("method", sorted(baselines.BASELINES))
def test_every_baseline_refuses_finite_features_whose_products_overflow(method):
  x = np.random.default_rng(3).normal(size=(90, 6)) * 1e160
  labels = np.repeat(np.arange(3), 30) if method in baselines.SUPERVISED else None
  small = {"num_anchors": 12} if method in ("ksh", "sdh", "cosdish", "fasthash", "bre", "agh", "machash") else {}
  small.update({"num_columns": 20} if method == "cosdish" else {})
  with pytest.raises(ValueError, match=r"^features: expected values whose squares sum to a finite float64, got an "
                     r"overflow \(largest magnitude .*e\+160\); scale the features down$"):
    baselines.fit(method, x, num_bits=4, key=KEY, labels=labels, **small)


#: The baselines whose encoding computes squared distances (to anchors, pivots) in float32.
_DISTANCE_METHODS = ("agh", "bre", "cosdish", "fasthash", "ksh", "machash", "sdh", "sph")


@pytest.mark.parametrize("scale", [1e19, 1e-21])
@pytest.mark.parametrize("method", sorted(baselines.BASELINES))
def test_features_at_scales_float32_cannot_square_are_refused_or_coded_as_at_unit_scale(method, scale):
  x = np.random.default_rng(3).normal(size=(90, 6))
  labels = np.repeat(np.arange(3), 30) if method in baselines.SUPERVISED else None
  small = {"num_anchors": 12} if method in ("ksh", "sdh", "cosdish", "fasthash", "bre", "agh", "machash") else {}
  small.update({"num_columns": 20} if method == "cosdish" else {})
  fit = lambda f: baselines.fit(method, f, num_bits=4, key=KEY, labels=labels, **small)
  if method in _DISTANCE_METHODS:
    with pytest.raises(ValueError, match=r"^features: expected squared distances within float32's normal range"):
      fit(x * scale)
  else:  # a scale-free method: the same codes
    np.testing.assert_array_equal(np.asarray(baselines.encode(method, fit(x * scale), x * scale)),
                                  np.asarray(baselines.encode(method, fit(x), x)))


@pytest.mark.parametrize("method", sorted(baselines.BASELINES))
def test_features_beyond_float32_are_refused_by_fit_and_encode(method):
  x = np.random.default_rng(3).normal(size=(90, 6))
  labels = np.repeat(np.arange(3), 30) if method in baselines.SUPERVISED else None
  small = {"num_anchors": 12} if method in ("ksh", "sdh", "cosdish", "fasthash", "bre", "agh", "machash") else {}
  small.update({"num_columns": 20} if method == "cosdish" else {})
  with pytest.raises(ValueError, match=r"^features: expected row norms within float32's range"):
    baselines.fit(method, x * 1e39, num_bits=4, key=KEY, labels=labels, **small)
  params = baselines.fit(method, x, num_bits=4, key=KEY, labels=labels, **small)
  with pytest.raises(ValueError, match=r"^features: expected values within float32's range .* got 1.*e\+39$"):
    baselines.encode(method, params, np.where(np.arange(6) == 2, 1e39, x[:3]))
  with pytest.raises(ValueError, match=r"^features: expected values within float32's range .* got -2e\+39$"):
    baselines.encode(method, params, np.where(np.arange(6) == 2, -2e39, x[:3]))  # the value, with its sign


@pytest.mark.parametrize("method, traced", [(m, t) for m in sorted(baselines.BASELINES) for t in ("features", "key")]
                         + [(m, "labels") for m in sorted(baselines.SUPERVISED)])
def test_a_fit_under_jit_says_to_call_it_outside(method, traced):
  x, labels, key = np.random.default_rng(3).normal(size=(90, 6)), np.repeat(np.arange(3), 30), KEY
  args = {"features": x, "labels": labels if method in baselines.SUPERVISED else None, "key": key}

  small = {"num_anchors": 12} if method in ("ksh", "sdh", "cosdish", "fasthash", "bre", "agh", "machash") else {}
  small.update({"num_columns": 20} if method == "cosdish" else {})

  def fit(value):
    given = {**args, traced: value}
    return baselines.fit(method, given["features"], num_bits=4, key=given["key"], labels=given["labels"], **small)
  with pytest.raises(ValueError, match=rf"^{traced}: expected concrete arrays \(.*outside jax.jit"):
    jax.jit(fit)(args[traced])


def test_points_that_coincide_fit_and_float64_encodings_are_not_held_to_float32():
  params = baselines.fit("sph", np.ones((40, 5)), num_bits=4, key=KEY)  # every distance 0: float32 holds it
  assert np.asarray(baselines.encode("sph", params, np.ones((2, 5)))).shape == (2, 4)
  from hashjax.baselines import _common  # pylint: disable=g-import-not-at-top
  big = np.full((3, 2), 1e30)
  _common.check_float32_distances(big, np.float64, scale=1e30)  # an encoding in float64 (x64) squares 1e30 fine
  with pytest.raises(ValueError, match="^features: expected squared distances within float32's normal range"):
    _common.check_float32_distances(big, np.float32, scale=1e30)


def test_an_option_a_baseline_does_not_take_is_refused_naming_its_options():
  x = np.random.default_rng(0).normal(size=(40, 6))
  with pytest.raises(ValueError, match=r"^options: 'itq' has no option foo \(its options: num_iters\)$"):
    baselines.fit("itq", x, num_bits=4, key=KEY, foo=1)
