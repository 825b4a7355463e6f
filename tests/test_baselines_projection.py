"""Supervised kernel and projection baselines: BRE and SPLH."""

import functools

import jax
import numpy as np
import pytest

from hashjax.baselines import bre, splh


def _blobs(num_classes=3, per_class=20, dim=8, seed=0):
  rng = np.random.default_rng(seed)
  labels = np.repeat(np.arange(num_classes), per_class).astype(np.int32)
  x = rng.normal(size=(labels.size, dim)) * 0.5 + 4.0 * np.eye(dim)[labels]
  return x.astype(np.float32), labels


def _bre_objective(bits, labels):
  """Sum over ordered pairs of ([y_i != y_j] - hamming / b)^2, by enumerating the pairs."""
  n, b = bits.shape
  total = 0.0
  for i in range(n):
    for j in range(n):
      total += (float(labels[i] != labels[j]) - np.sum(bits[i] != bits[j]) / b) ** 2
  return total


FITS = {"bre": lambda x, y, b, **o: bre.fit(x, num_bits=b, key=jax.random.key(1), labels=y, num_anchors=15, **o),
        "splh": lambda x, y, b, **o: splh.fit(x, num_bits=b, key=jax.random.key(1), labels=y, **o)}
MODULES = {"bre": bre, "splh": splh}


@pytest.mark.parametrize("method", ["bre", "splh"])
def test_bits_batches_and_classes(method):
  x, y = _blobs()
  mod = MODULES[method]
  params = FITS[method](x, y, 6)
  bits = np.asarray(mod.encode(params, x))
  assert bits.shape == (60, 6) and bits.dtype == np.uint8
  np.testing.assert_array_equal(np.asarray(mod.project(params, x)) > 0, bits == 1)
  np.testing.assert_array_equal(np.asarray(mod.encode(params, x[:1])), bits[:1])
  np.testing.assert_array_equal(np.concatenate([np.asarray(mod.encode(params, x[i:i + 7]))
                                                for i in range(0, 60, 7)]), bits)
  dist = np.sum(bits[:, None, :] != bits[None, :, :], axis=-1)
  same = y[:, None] == y[None, :]
  if method == "bre":
    # Separable blobs: every item is nearer (in Hamming distance) to its class than to any other class.
    assert np.max(np.where(same, dist, 0), axis=1).max() < np.min(np.where(same, 99, dist), axis=1).min()
  else:
    # SPLH's hyperplanes pass through the mean, so a direction separating two of three symmetric blobs may cut
    # the third: items of different classes never share a code, and each class is nearer to itself on average.
    assert np.min(np.where(same, 99, dist)) >= 1
    mean = np.array([[dist[y == a][:, y == b].mean() for b in range(3)] for a in range(3)])
    assert np.all(np.diag(mean) < np.min(mean + 99 * np.eye(3), axis=1))


def test_bre_descent_lowers_the_objective_every_sweep():
  x, y = _blobs(per_class=12, dim=4, seed=3)
  y = np.where(np.arange(36) % 5 == 0, (y + 1) % 3, y).astype(np.int32)  # label noise: the start is not optimal
  values = [_bre_objective(np.asarray(bre.encode(FITS["bre"](x, y, 4, num_sweeps=s, ridge=5.0), x)), y)
            for s in range(3)]
  assert values[0] > values[1] >= values[2]


def test_bre_step_is_the_best_point_along_the_entry():
  # The objective along one entry of W changes only at breakpoints: a point inside each interval (the two unbounded
  # ones included) and the current point 0 are every value it takes.
  from hashjax.baselines.bre import _best_step  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  n, c, b = 12, 3, 3
  form = np.concatenate([[b], np.full(c, -2 * b), np.ones(b - 1)]).astype(np.int64)
  unbounded = 0
  for _ in range(300):
    y, k = rng.normal(size=n), np.where(rng.random(n) < 0.2, 0.0, rng.normal(size=n))
    basis = np.concatenate([np.ones((n, 1), np.int64), np.eye(c, dtype=np.int64)[rng.integers(0, c, n)],
                            rng.choice([-1, 1], size=(n, b - 1))], 1)
    cost = lambda t: ((basis.T @ np.where(y + t * k > 0, 1, -1)) ** 2) @ form  # pylint: disable=cell-var-from-loop
    breaks = np.sort(-y[k != 0] / k[k != 0])
    points = np.r_[breaks[0] - 1.0, 0.5 * (breaks[:-1] + breaks[1:]), breaks[-1] + 1.0, 0.0]
    t = _best_step(y, k, basis, form, np.where(y > 0, 1, -1))
    assert cost(t) == min(cost(p) for p in points)
    unbounded += bool(t < breaks[0] or t > breaks[-1])
  assert unbounded > 0  # the case this checks arises


def test_bre_step_never_raises_the_objective_when_breakpoints_are_an_ulp_apart():
  # One point's breakpoint moved an ulp past another's: the best interval may be that gap, whose midpoint rounds
  # onto a breakpoint; the step taken must still not cost more than staying put.
  from hashjax.baselines.bre import _best_step  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(1)
  for _ in range(3000):
    n, b = int(rng.integers(4, 10)), int(rng.integers(1, 4))
    k = rng.normal(size=n)
    y = -rng.normal() * k  # every breakpoint at one t ...
    j = rng.integers(0, n)
    y[j] = np.nextafter(y[j], np.inf if k[j] < 0 else -np.inf)  # ... but one, an ulp away
    y += rng.normal(size=n) * (rng.random(n) < 0.5)
    basis = np.concatenate([np.ones((n, 1), np.int64), np.eye(2, dtype=np.int64)[rng.integers(0, 2, n)],
                            rng.choice([-1, 1], size=(n, b - 1))], 1)
    form = np.concatenate([[b], np.full(2, -2 * b), np.ones(b - 1)]).astype(np.int64)
    cost = lambda s: ((basis.T @ s) ** 2) @ form  # pylint: disable=cell-var-from-loop
    s = np.where(y > 0, 1, -1)
    t = _best_step(y, k, basis, form, s)
    assert cost(np.where(y + t * k > 0, 1, -1)) <= cost(s)


@pytest.mark.parametrize("similar_weight", [1.0, 3.0])
def test_splh_first_four_bits_match_a_reference(similar_weight):
  # Labels -3 / -1 / 1 (negative, not contiguous) and 20 of 30 items labelled: the pair matrix over the labelled
  # subset, the variance term over every item; 1.0 is the paper's update. The classes overlap, so that bits split
  # same-class pairs and the weight moves the later bits.
  from hashjax import _checks  # pylint: disable=g-import-not-at-top
  x, y = _blobs(per_class=10, dim=5, seed=2)
  x = x + np.random.default_rng(5).normal(size=x.shape).astype(np.float32)
  labels = 2 * y - 3
  fit = functools.partial(splh.fit, x, num_bits=4, key=jax.random.key(0), labels=labels, num_anchors=0,
                          num_labelled=20, eta=0.05, alpha=2.0)
  params = fit(similar_weight=similar_weight)
  if similar_weight != 1.0:
    moved = 1 - np.abs(np.sum(np.asarray(params.projection) * np.asarray(fit(similar_weight=1.0).projection), 0))
    assert moved.max() > 1e-3, moved
  xc = x.astype(np.float64) - x.astype(np.float64).mean(0)
  n = len(y)
  lab = np.sort(_checks.check_key_rng(jax.random.key(0)).choice(n, 20, replace=False))  # fit's draw
  xl = xc[lab]
  pairs = np.array([[1.0 if labels[a] == labels[b] else -1.0 for b in lab] for a in lab])
  residue = xc.copy()
  for k in range(4):
    w_k = np.linalg.eigh(xl.T @ pairs @ xl / 20 ** 2 + 0.05 * residue.T @ residue / n)[1][:, -1]
    assert abs(abs(np.asarray(params.projection)[:, k] @ w_k) - 1) < 1e-5, k
    # Next bit: the labelled pairs this projection gets wrong gain alpha * p_i p_j / mean(p^2) (over the labelled
    # items), times similar_weight for a same-class pair, and the variance term moves to the residue.
    p = xl @ w_k
    scale = np.mean(p ** 2)
    for i in range(20):
      for j in range(20):
        if p[i] * p[j] * pairs[i, j] < 0:
          pairs[i, j] -= 2.0 * (similar_weight if labels[lab[i]] == labels[lab[j]] else 1.0) * p[i] * p[j] / scale
    residue = residue - np.outer(residue @ w_k, w_k)


@pytest.mark.parametrize("method", ["bre", "splh"])
def test_refuses_bad_inputs_before_fitting(method):
  x, y = _blobs()
  fit = MODULES[method].fit
  key = jax.random.key(0)
  with pytest.raises(ValueError, match="labels: expected int class labels"):
    fit(x, num_bits=4, key=key)
  with pytest.raises(ValueError, match=r"labels: expected shape \(60,\)"):
    fit(x, num_bits=4, key=key, labels=y[:50])
  with pytest.raises(ValueError, match="labels: expected at least two classes"):
    fit(x, num_bits=4, key=key, labels=np.zeros(60, np.int32))
  with pytest.raises(ValueError, match="num_anchors: expected at most"):
    fit(x, num_bits=4, key=key, labels=y, num_anchors=61)
  with pytest.raises(ValueError, match="num_bits: expected at most"):
    fit(x, num_bits=16, key=key, labels=y, num_anchors=15)
  with pytest.raises(ValueError, match="key"):
    fit(x, num_bits=4, key=None, labels=y)
  subset = "num_train" if method == "bre" else "num_labelled"
  rare = np.r_[np.zeros(59, np.int32), 1]  # two classes; a drawn pair holds the second with probability 1/30
  with pytest.raises(ValueError, match=f"^{subset}: expected a drawn subset of at least two classes, got only "
                     f"class 0 in its 2 items"):
    fit(x, num_bits=2, key=key, labels=rare, num_anchors=2, **{subset: 2})
  if method == "bre":
    with pytest.raises(ValueError, match=r"^num_anchors: expected at most the 40 items the objective runs over "
                       r"\(min\(N = 60, num_train = 40\)\), got 50$"):
      fit(x, num_bits=4, key=key, labels=y, num_train=40, num_anchors=50)


@pytest.mark.parametrize("option", ["eta", "alpha", "similar_weight"])
def test_splh_refuses_a_negative_weight(option):
  x, y = _blobs()
  with pytest.raises(ValueError, match=f"{option}: expected"):
    splh.fit(x, num_bits=4, key=jax.random.key(0), labels=y, **{option: -1.0})
