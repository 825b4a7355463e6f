"""Kernel supervised baselines (KSH, SDH): codes, batching, what the algorithms achieve, refused inputs."""

import jax
import numpy as np
import pytest

from hashjax.baselines import ksh, sdh

KEY = jax.random.key(0)
OPTIONS = {ksh: {"num_anchors": 20, "num_iters": 20}, sdh: {"num_anchors": 20}}


def _blobs(num_per_class=60, dim=8, noise_seed=1):
  centres = 3.0 * np.random.default_rng(0).normal(size=(3, dim))
  labels = np.repeat(np.arange(3), num_per_class)
  features = centres[labels] + np.random.default_rng(noise_seed).normal(size=(labels.size, dim))
  return features.astype(np.float32), labels.astype(np.int32)


X, Y = _blobs()


@pytest.fixture(scope="module", params=[ksh, sdh], ids=["ksh", "sdh"])
def fitted(request):
  module = request.param
  return module, module.fit(X, num_bits=8, key=KEY, labels=Y, **OPTIONS[module])


def test_bits_match_values_and_batches(fitted):
  module, params = fitted
  assert params.mean.shape == (8,)
  bits = np.asarray(module.encode(params, X))
  assert bits.shape == (180, 8) and bits.dtype == np.uint8
  np.testing.assert_array_equal(bits, np.asarray(module.project(params, X)) > 0)
  one = np.stack([np.asarray(module.encode(params, X[i:i + 1]))[0] for i in range(0, 180, 9)])
  np.testing.assert_array_equal(one, bits[::9])
  sevens = np.concatenate([np.asarray(module.encode(params, X[i:i + 7])) for i in range(0, 180, 7)])
  np.testing.assert_array_equal(sevens, bits)


def test_same_class_codes_are_nearer(fitted):
  module, params = fitted
  test_x, test_y = _blobs(num_per_class=20, noise_seed=2)  # the same blobs, unseen points
  bits = np.asarray(module.encode(params, test_x)).astype(int)
  dist = np.abs(bits[:, None, :] - bits[None, :, :]).sum(-1)
  same = test_y[:, None] == test_y[None, :]
  # Every item's farthest same-class code is nearer than its nearest other-class code.
  assert np.all(np.where(same, dist, -1).max(1) < np.where(same, 99, dist).min(1))


def _ksh_residue_fit(bits, labels):
  """``sum_k h_k^T R_{k-1} h_k`` by the paper's explicit ``l x l`` residues."""
  h = 2.0 * bits - 1.0
  residue = h.shape[1] * np.where(labels[:, None] == labels[None, :], 1.0, -1.0)
  gains = []
  for k in range(h.shape[1]):
    gains.append(h[:, k] @ residue @ h[:, k])
    residue = residue - np.outer(h[:, k], h[:, k])
  return np.array(gains), np.sum(residue ** 2)


def test_ksh_refinement_never_loses_to_the_spectral_start():
  spectral = ksh.fit(X, num_bits=6, key=KEY, labels=Y, num_anchors=20, num_iters=0)
  refined = ksh.fit(X, num_bits=6, key=KEY, labels=Y, num_anchors=20, num_iters=20)
  gain_s, loss_s = _ksh_residue_fit(np.asarray(ksh.encode(spectral, X)), Y)
  gain_r, loss_r = _ksh_residue_fit(np.asarray(ksh.encode(refined, X)), Y)
  assert gain_r[0] >= gain_s[0] and loss_r <= loss_s
  # Every bit fits the residue: h^T R h > 0, so the loss drops below ||b S||^2.
  assert np.all(gain_r > 0) and loss_r < 6 ** 2 * 180 ** 2


def _sdh_objective(phi, y, b, w, p, c, reg, penalty, ridge):
  return (np.sum((y - b @ w) ** 2) + reg * np.sum(w ** 2)
          + penalty * (np.sum((b - phi @ p - c) ** 2) + ridge * np.sum(p ** 2)))


def test_sdh_objective_never_increases():
  rng = np.random.default_rng(0)
  phi = rng.normal(size=(40, 6))
  phi -= phi.mean(0)
  y = np.eye(3)[rng.integers(0, 3, 40)]
  start = np.where(rng.normal(size=(40, 5)) > 0, 1.0, -1.0)
  options = {"reg": 0.5, "penalty": 0.3, "ridge": 0.1}
  values = [_sdh_objective(phi, y, *sdh.alternate(phi, y, start, num_iters=t, **options), **options)
            for t in range(5)]
  assert np.all(np.diff(values) <= 1e-9 * values[0]) and values[-1] < values[0]
  codes, w, p, c = sdh.alternate(phi, y, start, num_iters=3, **options)
  # The G- and F-steps are the ridge regressions on the final codes (the F-step's intercept unpenalised).
  np.testing.assert_allclose(w, np.linalg.lstsq(np.vstack([codes, np.sqrt(0.5) * np.eye(5)]),
                                                np.vstack([y, np.zeros((5, 3))]), rcond=None)[0], atol=1e-9)
  design = np.vstack([np.c_[phi, np.ones(40)], np.c_[np.sqrt(0.1) * np.eye(6), np.zeros(6)]])
  solution = np.linalg.lstsq(design, np.vstack([codes, np.zeros((6, 5))]), rcond=None)[0]
  np.testing.assert_allclose(p, solution[:6], atol=1e-9)
  np.testing.assert_allclose(c, solution[6], atol=1e-9)


@pytest.mark.parametrize("module", [ksh, sdh], ids=["ksh", "sdh"])
@pytest.mark.parametrize("change, message", [
    ({"labels": None}, "labels: expected int class labels"),
    ({"labels": Y[:-1]}, r"labels: expected shape \(180,\)"),
    ({"labels": np.zeros(180, np.int32)}, "labels: expected at least two classes"),
    ({"labels": Y.astype(np.float32)}, "labels: expected an integer array"),
    ({"num_anchors": 181}, "num_anchors: expected at most the 180 training items"),
    ({"num_bits": 21}, "num_bits: expected at most num_anchors = 20"),
    ({"key": None}, "key: expected a jax.random key"),
    ({"key": np.array([1, 2, 3], np.uint32)}, r"key: expected a jax.random key .* got dtype uint32 and shape \(3,\)"),
])
def test_bad_inputs_are_refused(module, change, message, monkeypatch):
  def no_fitting(*args, **kwargs):
    raise AssertionError("fitting started")
  monkeypatch.setattr("hashjax.baselines._anchors.fit", no_fitting)
  kwargs = {"num_bits": 4, "key": KEY, "labels": Y, "num_anchors": 20, **change}
  with pytest.raises(ValueError, match=message):
    module.fit(X, **kwargs)
