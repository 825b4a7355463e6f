"""MACHash against independent numpy references.

The affinity loss is checked against a double loop over the pairs; a bit's Z-step update against enumeration of
all 2^N codes of its subproblem (the penalised loss by an explicit affinity matrix); a whole Z-step against the
monotone decrease of that penalised loss; the MAC fit against the two-step method's hash functions (its training
loss, by the double loop, is never worse); the bits against an independent numpy evaluation of the kernel
classifiers; the codes against separable and overlapping labelled blobs.
"""

import functools
import itertools

import jax
import numpy as np
import pytest

from hashjax.baselines import _common, machash

KEY = jax.random.key(0)
SMALL = dict(num_anchors=30, num_iters=5)


def _blobs(num_per_class=60, dim=8, noise_seed=1, spread=6.0):
  """Three Gaussian blobs in ``dim``-d, centres ``spread`` apart (unit noise)."""
  centres = spread * np.random.default_rng(0).normal(size=(3, dim))
  labels = np.repeat(np.arange(3), num_per_class)
  features = centres[labels] + np.random.default_rng(noise_seed).normal(size=(labels.size, dim))
  return features.astype(np.float32), labels.astype(np.int32)


X, Y = _blobs()


@functools.lru_cache(maxsize=None)
def _fitted():
  return machash.fit(X, num_bits=12, key=KEY, labels=Y, **SMALL)


def _loss(codes, labels):
  """``sum_{n,m} (z_n^T z_m - b y_nm)^2`` by a double loop."""
  b = codes.shape[1]
  total = 0.0
  for n in range(len(codes)):
    for m in range(len(codes)):
      target = b if labels[n] == labels[m] else -b
      total += (codes[n] @ codes[m] - target) ** 2
  return total


def _penalised(codes, labels, hashes, penalty):
  """``L(Z) / (N b) + mu ||Z - H||^2`` with an explicit ``N x N`` affinity matrix."""
  n, b = codes.shape
  affinity = np.where(labels[:, None] == labels[None, :], 1.0, -1.0)
  return np.sum((codes @ codes.T - b * affinity) ** 2) / (n * b) + penalty * np.sum((codes - hashes) ** 2)


def test_bits_are_signs_of_an_independent_kernel_expansion():
  params = _fitted()
  mean, anchors, scale, weights, bias = (np.asarray(a, np.float64) for a in params)
  centred = X.astype(np.float64) - mean
  sq = ((centred[:, None, :] - anchors[None, :, :]) ** 2).sum(-1)
  values = np.exp(-sq / (2.0 * scale ** 2)) @ weights + bias
  np.testing.assert_allclose(np.asarray(machash.project(params, X)), values, atol=1e-4 * np.abs(values).max())
  clear = np.abs(values) > 1e-3 * np.abs(values).max()
  bits = np.asarray(machash.encode(params, X))
  np.testing.assert_array_equal(bits[clear], (values > 0)[clear])


def test_without_anchors_the_hash_functions_are_affine():
  params = machash.fit(X, num_bits=6, key=KEY, labels=Y, num_anchors=0, num_iters=3)
  assert params.anchors.shape == (0, 8) and params.weights.shape == (8, 6)
  a, b = X[:50].astype(np.float64), X[50:100].astype(np.float64)
  mix = np.asarray(machash.project(params, (0.3 * a + 0.7 * b).astype(np.float32)), np.float64)
  expected = 0.3 * np.asarray(machash.project(params, a.astype(np.float32))) + 0.7 * np.asarray(
      machash.project(params, b.astype(np.float32)))
  np.testing.assert_allclose(mix, expected, atol=1e-4)


def test_unseen_items_find_their_class_in_hamming_space():
  test_x, test_y = _blobs(num_per_class=20, noise_seed=2)  # the same blobs, unseen points
  bits = np.asarray(machash.encode(_fitted(), test_x)).astype(int)
  dist = np.abs(bits[:, None, :] - bits[None, :, :]).sum(-1)
  np.fill_diagonal(dist, 99)
  same = test_y[:, None] == test_y[None, :]
  # Every item's nearest code (any tie) is of its class: chance would be about 1/3.
  nearest = dist == dist.min(1, keepdims=True)
  assert np.all((nearest & same).sum(1) == nearest.sum(1))
  np.fill_diagonal(dist, 0)
  assert dist[same].mean() < 0.2 * dist[~same].mean()


def test_key_decides_the_fit():
  again = machash.fit(X, num_bits=12, key=KEY, labels=Y, **SMALL)
  for a, b in zip(again, _fitted()):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  default = machash.fit(X, num_bits=12, labels=Y, **SMALL)  # None: jax.random.key(0)
  np.testing.assert_array_equal(np.asarray(default.weights), np.asarray(_fitted().weights))
  other = machash.fit(X, num_bits=12, key=jax.random.key(1), labels=Y, **SMALL)
  assert not np.array_equal(np.asarray(other.anchors), np.asarray(_fitted().anchors))


def test_objective_matches_a_double_loop_over_pairs():
  rng = np.random.default_rng(1)
  labels = rng.integers(0, 3, size=9)
  codes = rng.choice([-1.0, 1.0], size=(9, 4))
  assert np.isclose(machash.objective(codes, labels), _loss(codes, labels))


def test_bit_update_is_a_local_optimum_never_worse_than_its_start_and_mostly_the_global_one():
  n, b = 10, 3
  every = np.array(list(itertools.product([-1.0, 1.0], repeat=n)))
  optimal = 0
  for seed in range(24):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    codes = rng.choice([-1.0, 1.0], size=(n, b))
    hashes = rng.choice([-1.0, 1.0], size=(n, b))
    penalty, bit = [0.0, 0.3, 1.0][seed % 3], seed % b

    def value(z):
      changed = codes.copy()
      changed[:, bit] = z
      return _penalised(changed, labels, hashes, 0.0) + penalty * np.sum((z - hashes[:, bit]) ** 2)

    before = codes.copy()
    z = machash.update_bit(codes, bit, labels, hashes[:, bit], penalty)
    assert set(np.unique(z)) <= {-1.0, 1.0}
    np.testing.assert_array_equal(codes, before)  # the codes passed in are left alone
    best = min(value(c) for c in every)
    assert value(z) <= value(codes[:, bit]) + 1e-9
    flips = [value(np.where(np.arange(n) == i, -z, z)) for i in range(n)]
    assert min(flips) >= value(z) - 1e-9  # no single flip improves
    optimal += bool(np.isclose(value(z), best))
  # Greedy flips are not exact; on these cases they reach the enumerated optimum 20 times in 24.
  assert optimal >= 18, optimal


def test_z_step_never_raises_the_penalised_loss():
  rng = np.random.default_rng(3)
  labels = np.repeat(np.arange(4), 6)
  codes = rng.choice([-1.0, 1.0], size=(24, 5))
  hashes = rng.choice([-1.0, 1.0], size=(24, 5))
  for penalty in (0.0, 0.2, 5.0):
    values = [_penalised(codes, labels, hashes, penalty)]
    current = codes
    for _ in range(3):
      current = machash.z_step(current, labels, hashes, penalty)
      values.append(_penalised(current, labels, hashes, penalty))
    assert all(b <= a + 1e-9 for a, b in zip(values, values[1:])), values
    assert values[-1] < values[0]
  # A large penalty pins the codes to the hash functions' outputs.
  np.testing.assert_array_equal(machash.z_step(codes, labels, hashes, 1e3), hashes)


def test_initial_codes_improve_on_their_spectral_start():
  labels = np.repeat(np.arange(3), 8)
  codes = machash.initial_codes(labels, 4)
  assert codes.shape == (24, 4) and set(np.unique(codes)) <= {-1.0, 1.0}
  # Items of a class share their code, classes differ: the loss of an exact fit of b Y is impossible for three
  # classes, but every pair of the same class is at distance 0 and no two classes share a code.
  for c in range(3):
    assert (codes[labels == c] == codes[labels == c][0]).all()
  assert len({tuple(codes[labels == c][0]) for c in range(3)}) == 3
  assert machash.objective(codes, labels) < _loss(np.ones((24, 4)), labels)


def test_mac_hash_functions_are_never_worse_than_the_two_step_ones():
  # Overlapping blobs and few anchors: the hash functions cannot fit the codes, so MAC has work to do.
  x, labels = _blobs(num_per_class=30, dim=4, spread=1.5)
  losses = []
  for num_iters in (0, 8):
    params = machash.fit(x, num_bits=6, key=KEY, labels=labels, num_anchors=6, num_iters=num_iters)
    losses.append(_loss(2.0 * np.asarray(machash.encode(params, x)) - 1.0, labels))
  assert losses[1] <= losses[0], losses


@pytest.mark.parametrize("change, message", [
    ({"labels": None}, r"^labels: expected int class labels of shape \(180,\) \(a supervised method\), got None$"),
    ({"labels": Y[:-1]}, r"^labels: expected shape \(180,\) \(the shape of \[len\(features\)\]\), got \(179,\)$"),
    ({"labels": np.zeros(180, np.int32)}, r"^labels: expected at least two classes to learn from, got only class 0$"),
    ({"labels": Y.astype(np.float32)}, r"^labels: expected an integer array of class labels .*, got dtype float32"),
    ({"num_anchors": 181}, r"^num_anchors: expected at most the 180 training points, got 181$"),
    ({"num_anchors": -1}, r"^num_anchors: expected an int >= 0, got -1$"),
    ({"num_bits": 0}, r"^num_bits: expected a positive int, got 0$"),
    ({"num_bits": 2.0}, r"^num_bits: expected a positive int, got 2.0$"),
    ({"num_bits": 21}, r"^num_bits: expected at most the regression's input width, 20, got 21$"),
    ({"num_anchors": 0, "num_bits": 9}, r"^num_bits: expected at most the regression's input width, 8, got 9$"),
    ({"regularization": 0.0}, r"^regularization: expected a finite number > 0, got 0.0$"),
    ({"num_iters": -1}, r"^num_iters: expected an int >= 0, got -1$"),
    ({"penalty": 0}, r"^penalty: expected a finite number > 0, got 0$"),
    ({"penalty_growth": 0.5}, r"^penalty_growth: expected a finite number >= 1, got 0.5$"),
    ({"key": 3}, r"^key: expected a jax.random key \(e.g. jax.random.key\(0\)\), got int$"),
])
def test_bad_inputs_are_refused_before_fitting(change, message, monkeypatch):
  def no_fitting(*args, **kwargs):
    raise AssertionError("fitting started")
  monkeypatch.setattr("hashjax.baselines._anchors.fit", no_fitting)
  monkeypatch.setattr(machash, "initial_codes", no_fitting)
  kwargs = {"num_bits": 4, "key": KEY, "labels": Y, "num_anchors": 20, **change}
  with pytest.raises(ValueError, match=message):
    machash.fit(X, **kwargs)


def test_bad_encode_inputs_are_refused():
  params = _fitted()
  with pytest.raises(ValueError, match=r"^features: expected 8 columns \(the width the params were fit on\), "
                     r"got shape \(180, 5\)$"):
    machash.encode(params, X[:, :5])
  with pytest.raises(ValueError, match=r"^params: expected MACHashParams from hashjax.baselines.machash.fit, "
                     r"got tuple$"):
    machash.project(tuple(params), X)
  with pytest.raises(ValueError, match=r"^features: expected at least 2 training rows, got shape \(1, 8\)$"):
    machash.fit(X[:1], num_bits=4, labels=Y[:1])


def test_spectral_start_does_not_depend_on_the_basis_an_eigensolver_returns(monkeypatch):
  # Balanced classes: the first bit's M = b (2 L L^T - 1 1^T) has its top eigenvalue C - 1 times, so any basis of
  # that eigenspace is an eigensolver's valid answer. The start is the projection of class 0's indicator on it
  # (here from a dense eigendecomposition of M), whatever basis the solver returns.
  labels = np.repeat(np.arange(4), 6)
  onehot = np.eye(4)[labels]
  m = 8 * (2 * onehot @ onehot.T - 1)
  vals, vecs = np.linalg.eigh(m)
  top = vecs[:, vals > vals[-1] - 1e-6]
  assert top.shape[1] == 3
  start = _common.spectral_sign(onehot, np.zeros((24, 0)), 8)
  np.testing.assert_array_equal(start, np.where(top @ (top.T @ onehot[:, 0]) < 0, -1.0, 1.0))
  codes = machash.initial_codes(labels, 8)
  eigh = np.linalg.eigh

  def rotated(a):  # another orthonormal basis of every repeated eigenvalue's eigenspace, and flipped signs
    w, v = eigh(a)
    v = -v.copy()
    for value in np.unique(np.round(w, 6)):
      block = np.flatnonzero(np.abs(w - value) < 1e-6 * max(1.0, np.abs(w).max()))
      if block.size > 1:
        v[:, block] = v[:, block] @ np.linalg.qr(np.random.default_rng(block.size).normal(size=(block.size,) * 2))[0]
    return w, v
  monkeypatch.setattr(np.linalg, "eigh", rotated)
  np.testing.assert_array_equal(_common.spectral_sign(onehot, np.zeros((24, 0)), 8), start)
  np.testing.assert_array_equal(machash.initial_codes(labels, 8), codes)
