"""Tests for the supervised discrete baselines COSDISH and FastHash (and MACHash's bits) against independent numpy
references.

The training losses are checked against sums over an explicit similarity matrix; COSDISH's alternation, with
every column sampled, against the monotone decrease of that loss; FastHash's block inference against the
leading eigenvector of an explicit ``M = b Y - H H^T`` and the monotone rise of ``z^T M z``; both fits against
separable blobs, where items of one class must land far nearer to each other than to the other classes.
"""

import functools

import jax
import numpy as np
import pytest

from hashjax.baselines import cosdish, fasthash, machash

MODULES = [cosdish, fasthash]
SMALL = {cosdish: dict(num_anchors=30, num_columns=40), fasthash: dict(num_anchors=30),
         machash: dict(num_anchors=30, num_iters=5)}


@functools.lru_cache(maxsize=None)
def _blobs():
  """Three Gaussian blobs of 60 points in 8-d, far apart."""
  rng = np.random.default_rng(0)
  centres = rng.normal(size=(3, 8)) * 6.0
  labels = np.repeat(np.arange(3), 60)
  return (centres[labels] + rng.normal(size=(180, 8))).astype(np.float32), labels.astype(np.int32)


@functools.lru_cache(maxsize=None)
def _fitted(module):
  x, labels = _blobs()
  return module.fit(x, num_bits=12, key=jax.random.key(0), labels=labels, **SMALL[module])


def _similarity(labels, dissimilar):
  return np.where(labels[:, None] == labels[None, :], 1.0, dissimilar)


def _loss(codes, s):
  b = codes.shape[1]
  return sum((b * s[i, j] - codes[i] @ codes[j]) ** 2 for i in range(len(codes)) for j in range(len(codes)))


@pytest.mark.parametrize("module", MODULES + [machash])
def test_bits_shape_dtype_signs_and_batches(module):
  x, _ = _blobs()
  params = _fitted(module)
  bits = np.asarray(module.encode(params, x))
  assert bits.shape == (180, 12) and bits.dtype == np.uint8
  np.testing.assert_array_equal(bits == 1, np.asarray(module.project(params, x)) > 0)
  one = np.concatenate([np.asarray(module.encode(params, x[i:i + 1])) for i in range(0, 180, 23)])
  np.testing.assert_array_equal(one, bits[::23])
  seven = np.concatenate([np.asarray(module.encode(params, x[i:i + 7])) for i in range(0, 180, 7)])
  np.testing.assert_array_equal(seven, bits)
  assert np.asarray(module.encode(params, x.reshape(6, 30, 8))).shape == (6, 30, 12)


@pytest.mark.parametrize("module", MODULES)
def test_classes_separate_in_hamming_space(module):
  x, labels = _blobs()
  bits = np.asarray(module.encode(_fitted(module), x)).astype(int)
  dist = np.abs(bits[:, None, :] - bits[None, :, :]).sum(-1)
  same = labels[:, None] == labels[None, :]
  assert dist[same].mean() < 0.2 * dist[~same].mean()
  assert dist[~same].min() > dist[same].mean()


@pytest.mark.parametrize("module", MODULES)
def test_key_decides_the_fit(module):
  x, labels = _blobs()
  again = module.fit(x, num_bits=12, key=jax.random.key(0), labels=labels, **SMALL[module])
  np.testing.assert_array_equal(np.asarray(again.weights), np.asarray(_fitted(module).weights))
  default = module.fit(x, num_bits=4, labels=labels, **SMALL[module])
  assert default.weights.shape == (30, 4) and default.mean.shape == (8,)


def test_objectives_match_explicit_similarity_sums():
  rng = np.random.default_rng(1)
  labels = rng.integers(0, 3, size=9)
  codes = rng.choice([-1.0, 1.0], size=(9, 4))
  num_same = (labels[:, None] == labels[None, :]).sum()
  ratio = min(num_same / (81 - num_same), 1.0)
  assert np.isclose(cosdish.objective(codes, labels), _loss(codes, _similarity(labels, -ratio)))
  assert np.isclose(fasthash.objective(codes, labels), _loss(codes, _similarity(labels, -1.0)))


def test_cosdish_with_every_column_sampled_descends_its_loss():
  labels = np.repeat(np.arange(4), 6)
  losses = [cosdish.objective(cosdish.discrete_codes(labels, 6, np.random.default_rng(3), num_columns=24,
                                                     num_rounds=t, num_alternations=1), labels)
            for t in range(4)]
  assert all(b <= a + 1e-9 for a, b in zip(losses, losses[1:])), losses
  assert losses[-1] < losses[0]


def test_fasthash_inference_starts_at_the_eigenvector_and_climbs():
  rng = np.random.default_rng(2)
  labels = np.repeat(np.arange(3), 8)
  onehot = np.eye(3)[labels]
  previous = rng.choice([-1.0, 1.0], size=(24, 2))
  m = 6 * _similarity(labels, -1.0) - previous @ previous.T
  lead = np.sign(np.linalg.eigh(m)[1][:, -1])
  values = []
  for sweeps in range(4):
    z = fasthash.infer_bit(onehot, previous, 6, np.random.default_rng(5), block_size=3, num_sweeps=sweeps)
    if sweeps == 0:
      assert abs(z @ lead) == 24
    values.append(z @ m @ z)
  assert all(b >= a for a, b in zip(values, values[1:])), values


def test_fasthash_block_whose_field_sums_to_zero_still_moves_when_that_gains():
  # Whole classes as blocks: class 2's block [1, 2] meets a field summing to 0 from the items outside it, so either
  # sign gains alike; with a positive gain it must move (to +1 or -1), not stay split.
  labels = np.array([0, 1, 2, 1, 1, 2, 0, 1, 0, 0])
  previous = np.array([[1, -1, 1], [-1, 1, 1], [-1, -1, 1], [1, -1, -1], [1, -1, 1], [1, -1, 1], [1, 1, -1],
                       [1, 1, 1], [-1, -1, 1], [-1, -1, -1]], float)
  onehot = np.eye(3)[labels]
  m = 5 * _similarity(labels, -1.0) - previous @ previous.T
  z = fasthash.infer_bit(onehot, previous, 5, np.random.default_rng(0), block_size=10, num_sweeps=5)
  # No single block (a whole class) moved to either sign raises z^T M z: a block-wise local optimum.
  for c in range(3):
    for s in (1.0, -1.0):
      moved = np.where(labels == c, s, z)
      assert moved @ m @ moved <= z @ m @ z, (c, s)


@pytest.mark.parametrize("module", MODULES)
def test_bad_inputs_are_refused_before_fitting(module, monkeypatch):
  x, labels = _blobs()
  fitted = _fitted(module)
  cases = [(dict(labels=None), "labels: expected int class labels"),
           (dict(labels=labels[:-1]), "labels: expected shape"),
           (dict(labels=np.zeros(180, np.int32)), "labels: expected at least (2|two) classes"),
           (dict(labels=labels, num_anchors=181), "num_anchors: expected at most the 180"),
           (dict(labels=labels, num_bits=0), "num_bits: expected a positive"),
           (dict(labels=labels, num_anchors=20, num_bits=21), "num_bits: expected at most .*20, got 21")]

  def no_fitting(*args, **kwargs):
    raise AssertionError("fitting started")
  monkeypatch.setattr("hashjax.baselines._anchors.fit", no_fitting)
  monkeypatch.setattr(module, "discrete_codes" if module is cosdish else "infer_bit", no_fitting)
  for options, message in cases:
    options = {"num_bits": 8, **options}
    with pytest.raises(ValueError, match=message):
      module.fit(x, key=jax.random.key(0), **options)
  with pytest.raises(ValueError, match="features"):
    module.encode(fitted, x[:, :5])


def test_cosdish_without_anchors_is_linear_regression():
  x, labels = _blobs()
  params = cosdish.fit(x, num_bits=4, labels=labels, num_anchors=0, num_columns=40)
  codes = cosdish.discrete_codes(labels.astype(np.int64), 4, np.random.default_rng([0, 0]), num_columns=40,
                                 num_rounds=10, num_alternations=3)
  design = np.concatenate([x.astype(np.float64), np.ones((180, 1))], axis=1)
  expected = design @ np.linalg.lstsq(design, codes, rcond=None)[0]
  np.testing.assert_allclose(np.asarray(cosdish.project(params, x)), expected, atol=1e-3)
