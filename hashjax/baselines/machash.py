r"""MACHash: affinity-based binary hashing by the method of auxiliary coordinates (Raziperchikolaei &
Carreira-Perpiñán, NIPS 2016).

Supervised: class labels give :math:`y_{nm} = +1` for items of the same class and :math:`-1` otherwise, and the
codes of the ``N`` training items should fit the KSH affinity loss
:math:`L(Z) = \sum_{n, m} (z_n^\top z_m - b\, y_{nm})^2` over :math:`z_n \in \{\pm 1\}^b`. The hash function
:math:`h` must produce those codes; MAC makes the codes auxiliary coordinates :math:`Z` (one binary code per
training item), ties them to :math:`h` by a quadratic penalty of growing weight :math:`\mu` and alternates
between them,

.. math:: \min_{h, Z \in \{\pm 1\}^{N \times b}} \frac{1}{N b} L(Z) + \mu \|Z - h(X)\|_F^2, \qquad
   \mu_i = \mu_0\, a^i,

* the Z-step: with :math:`h` fixed, alternating optimisation over the bits. With the other bits fixed, bit
  :math:`k`'s codes :math:`z \in \{\pm 1\}^N` maximise the binary quadratic
  :math:`z^\top M z / (N b) + \mu\, h_k(X)^\top z` with :math:`M = b\, Y - Z_{\bar k} Z_{\bar k}^\top` (``Y``
  the affinities, :math:`Z_{\bar k}` the other bits; the rank of ``M`` is at most ``classes + b``, so ``M`` is
  never formed). The problem is solved by greedy flips (:func:`update_bit`), started from the current bit: every
  code whose flip raises the objective is flipped, halving the set of flips (largest gains first) until the
  objective rises; it stops at a one-flip local optimum, or after 200 rounds of flips. Each bit update, hence each
  Z-step, can only lower the penalised objective.
* the h-step: with :math:`Z` fixed, one classifier per bit fitted to that bit's codes.

The codes start from a two-step solution with :math:`\mu = 0`: bit after bit, against the residue of the
bits before, the sign of the leading eigenvector of :math:`M` (exact: ``M`` has low rank), improved by the same
greedy flips; the first h-step fits them (``num_iters = 0`` is that two-step method: codes, then hash functions
fitted to them). Each iteration is a Z-step at :math:`\mu_i`, then an h-step; the alternation stops when the
Z-step leaves :math:`Z = h(X)` or after ``num_iters`` iterations. Of the hash functions of every h-step, the one
whose training codes have the lowest loss :math:`L(h(X))` is returned, so MAC's hash functions are never worse on
the training loss than the two-step method's.

Departures from the paper: the paper's hash functions are linear SVMs on the features; here each bit is a ridge
regression (squared loss instead of the hinge loss) on RBF responses to ``num_anchors`` training points
(:mod:`hashjax.baselines._anchors`), :math:`h_k(x) = \mathrm{sgn}(w_k^\top (\phi(x) - \bar\phi) + c_k)`, because
encoding here must be one blocked matrix product in jax and because the kernel features were clearly better on
a validation split of MNIST-10k (AP_T 0.961 at 32 bits against 0.787 for the best linear fit; ``num_anchors=0``
gives the paper's linear family, fitted by ridge regression on the centred features). The paper's Z-step solves
each bit's binary quadratic problem approximately by GraphCut on blocks of points (after FastHash); here by the
greedy flips above.
All ``N^2`` pairs enter the loss (the paper samples neighbours of each point): with class labels a product with
``Y`` costs ``O(N c)``. The penalty multiplies the loss divided by ``N b`` (the paper's :math:`\mu` is :math:`N b`
times this one), so that one schedule serves any training size and code length. Keeping the h of lowest
:math:`L(h(X))` is a safeguard added here: a ridge h-step refitted to its own signs drifts, and the codes follow it
once :math:`\mu` is large, which raised the training loss in later iterations.

What MAC adds depends on how well the hash functions can fit the codes. On MNIST-10k (5,000 training items,
1,000 or 2,000 anchors) the kernel h-step reproduces the two-step codes on 99% of the training bits, the Z-steps find no
codes whose refit lowers :math:`L(h(X))`, and the two-step's hash functions are kept (the same test AP_T with
``num_iters`` 0 or 10). With linear hash functions (``num_anchors=0``, ridge 1e-2) MAC raised the validation
AP_T from 0.783 to 0.787 at 32 bits; on overlapping blobs with few anchors it cuts the training loss (tests).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks
from hashjax.baselines import _anchors
from hashjax.baselines import _common

Array = jax.Array

#: Anchors of the RBF features when ``fit`` is not told (a fit needs at least as many training items): 1,000, as
#: COSDISH, FastHash and SDH, so that the supervised table compares their codes on the same features. On a
#: validation split of MNIST-10k at 32 bits (4,000 training items): 500 anchors AP_T 0.932, 1,000 0.953, 1,500
#: 0.956, 2,000 0.961, 2,500 0.962 in 40% more time than 2,000.
DEFAULT_NUM_ANCHORS = 1000
#: Ridge weight per training item of the h-step (validation, 2,000 anchors: 1e-8 0.958, 1e-7 0.961, 1e-6 0.956;
#: 1,000 anchors: 1e-8 0.952, 1e-7 0.953, 1e-6 0.946).
DEFAULT_REGULARIZATION = 1e-7
#: MAC iterations (Z-step then h-step), at most (validation: 0, the two-step method, 0.9617; 5 0.9611; 10 0.9617).
DEFAULT_NUM_ITERS = 10
#: First penalty weight :math:`\mu_0` (for the loss divided by ``N b``; validation, 10 iterations: mu_0 0.03 and
#: growth 1.5 0.9617, 0.1 and 2 0.9611, 0.1 and 1.25 0.9616).
DEFAULT_PENALTY = 0.03
#: Growth factor :math:`a` of the penalty per iteration.
DEFAULT_PENALTY_GROWTH = 1.5

#: Most greedy steps per bit update (each flips at least one code).
_MAX_STEPS = 200


class MACHashParams(NamedTuple):
  """``mean[dim]``, ``anchors[A, dim]`` (centred by ``mean``; ``A = 0``: linear), RBF ``scale[]``, per-bit
  classifier ``weights[A or dim, num_bits]`` and ``bias[num_bits]``."""
  mean: Array
  anchors: Array
  scale: Array
  weights: Array
  bias: Array


def _onehot(labels: np.ndarray) -> np.ndarray:
  return (labels[:, None] == np.unique(labels)[None, :]).astype(np.float64)


def objective(codes: np.ndarray, labels: np.ndarray) -> float:
  r"""The affinity (KSH) loss of ``codes[N, b]`` in ``{-1, +1}`` on class ``labels[N]``, without the ``N x N``
  affinities (``L`` the one-hot class matrix, ``Y = 2 L L^T - 1 1^T``).

  .. math:: L(Z) = \sum_{n, m} (z_n^\top z_m - b\, y_{nm})^2 = \|Z^\top Z\|_F^2
     - 2 b\, (2 \|L^\top Z\|_F^2 - \|\mathbf{1}^\top Z\|^2) + b^2 N^2

  >>> objective(np.array([[1.0], [1.0], [-1.0]]), np.array([0, 0, 1]))
  0.0
  >>> objective(np.array([[1.0], [1.0], [1.0]]), np.array([0, 0, 1]))  # 4 dissimilar pairs miss by 2
  16.0
  """
  n, b = codes.shape
  onehot = _onehot(np.asarray(labels))
  cross = 2.0 * np.sum((onehot.T @ codes) ** 2) - np.sum(codes.sum(0) ** 2)
  return float(np.sum((codes.T @ codes) ** 2) - 2.0 * b * cross + b * b * n * n)


def _ascend(onehot: np.ndarray, others: np.ndarray, num_bits: int, linear: np.ndarray, z: np.ndarray) -> np.ndarray:
  """Greedy flips on ``max_z z^T M z / (N b) + linear^T z``, ``M = b (2 L L^T - 1 1^T) - O O^T``, from ``z``."""
  n = z.size
  scale = 1.0 / (n * num_bits)
  diag = num_bits - np.sum(others * others, axis=1)  # M_nn

  def field(v):  # M v
    return num_bits * (2.0 * onehot @ (onehot.T @ v) - v.sum()) - others @ (others.T @ v)

  z = z.copy()
  m_z = field(z)
  value = scale * (z @ m_z) + linear @ z
  for _ in range(_MAX_STEPS):
    # Flipping z_n changes the objective by 4 (M_nn - z_n (M z)_n) / (N b) - 2 linear_n z_n.
    gain = 4.0 * scale * (diag - z * m_z) - 2.0 * linear * z
    order = np.argsort(-gain, kind="stable")
    count = int(np.sum(gain > 1e-12))
    if count == 0:
      break
    while True:
      trial = z.copy()
      trial[order[:count]] *= -1.0
      m_trial = field(trial)
      trial_value = scale * (trial @ m_trial) + linear @ trial
      if trial_value > value or count == 1:
        break
      count //= 2
    z, m_z, value = trial, m_trial, trial_value
  return z


def initial_codes(labels: Any, num_bits: int) -> np.ndarray:
  r"""``float64[N, num_bits]`` two-step codes in ``{-1, +1}``: bit after bit, the greedy maximum of the residue
  of the bits before, started from the sign of its leading eigenvector.

  .. math:: z_k = \arg\max_{z \in \{\pm 1\}^N} z^\top \big(b\, Y - Z_{1:k-1} Z_{1:k-1}^\top\big) z

  Args:
    labels: ``int[N]`` class labels (trusted).
    num_bits: code length ``b``.

  >>> z = initial_codes(np.array([0, 0, 1, 1]), 2)
  >>> bool((z[0] == z[1]).all() and (z[2] == z[3]).all() and (z[0] != z[2]).any())
  True
  """
  onehot = _onehot(np.asarray(labels))
  n = onehot.shape[0]
  codes = np.zeros((n, num_bits))
  for k in range(num_bits):
    start = _common.spectral_sign(onehot, codes[:, :k], num_bits)
    codes[:, k] = _ascend(onehot, codes[:, :k], num_bits, np.zeros(n), start)
  return codes


def update_bit(codes: np.ndarray, bit: int, labels: Any, hashes: np.ndarray, penalty: float) -> np.ndarray:
  r"""The Z-step's update of bit ``bit`` of ``codes[N, b]``: its new ``float64[N]`` codes in ``{-1, +1}``, the
  other bits fixed, by greedy flips from the current ones (never a higher penalised objective).

  .. math:: \min_{z \in \{\pm 1\}^N} \frac{1}{N b} L([Z_{\bar k}, z]) + \mu \|z - h_k(X)\|^2
     \iff \max_z \frac{z^\top M z}{N b} + \mu\, h_k(X)^\top z, \quad M = b\, Y - Z_{\bar k} Z_{\bar k}^\top

  Args:
    codes: ``{-1, +1}[N, b]`` current codes (trusted).
    bit: the bit ``k`` to update.
    labels: ``int[N]`` class labels.
    hashes: ``{-1, +1}[N]`` the hash function's outputs :math:`h_k(X)` for that bit.
    penalty: :math:`\mu \ge 0`.

  >>> codes = np.array([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]])
  >>> update_bit(codes, 1, np.array([0, 0, 1, 1]), np.array([1.0, 1.0, -1.0, -1.0]), 0.1).tolist()
  [1.0, 1.0, -1.0, -1.0]
  """
  others = np.delete(codes, bit, axis=1)
  return _ascend(_onehot(np.asarray(labels)), others, codes.shape[1], penalty * hashes, codes[:, bit])


def z_step(codes: np.ndarray, labels: Any, hashes: np.ndarray, penalty: float) -> np.ndarray:
  r"""One Z-step: :func:`update_bit` on every bit in turn; ``float64[N, b]`` new codes in ``{-1, +1}``.

  .. math:: Z \leftarrow \arg\min_{Z} \frac{1}{N b} L(Z) + \mu \|Z - h(X)\|_F^2 \quad
     \text{(one pass over the bits)}

  Args:
    codes: ``{-1, +1}[N, b]`` current codes (trusted).
    labels: ``int[N]`` class labels.
    hashes: ``{-1, +1}[N, b]`` the hash functions' outputs :math:`h(X)`.
    penalty: :math:`\mu \ge 0`.

  >>> codes = np.array([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]])
  >>> z = z_step(codes, np.array([0, 0, 1, 1]), codes, 0.0)  # one code per class, the two codes opposite
  >>> bool((z[0] == z[1]).all() and (z[2] == z[3]).all() and (z[0] == -z[2]).all())
  True
  """
  onehot = _onehot(np.asarray(labels))
  codes = np.array(codes, np.float64)
  for k in range(codes.shape[1]):
    codes[:, k] = _ascend(onehot, np.delete(codes, k, axis=1), codes.shape[1], penalty * hashes[:, k], codes[:, k])
  return codes


def fit(features: Array, *, num_bits: int, key: Optional[Any] = None, labels: Any = None,
        num_anchors: int = DEFAULT_NUM_ANCHORS, regularization: float = DEFAULT_REGULARIZATION,
        num_iters: int = DEFAULT_NUM_ITERS, penalty: float = DEFAULT_PENALTY,
        penalty_growth: float = DEFAULT_PENALTY_GROWTH) -> MACHashParams:
  r"""Learns MACHash's codes and hash functions jointly by the method of auxiliary coordinates.

  .. math:: \min_{h, Z} \frac{1}{N b} \sum_{n, m} (z_n^\top z_m - b\, y_{nm})^2 + \mu_i \|Z - h(X)\|_F^2,
     \qquad W = (\Phi_c^\top \Phi_c + \lambda N I)^{-1} \Phi_c^\top Z

  Args:
    features: ``[N, dim]`` finite training features, ``N >= 2``.
    num_bits: code length ``1 <= b <= A`` (``dim`` when ``A = 0``): one hash function per bit on ``A`` inputs.
    key: a ``jax.random`` key for the anchors (None: ``jax.random.key(0)``).
    labels: ``int[N]`` class labels, at least two classes (required).
    num_anchors: RBF anchors ``A`` drawn from the training points, ``A <= N`` (``0``: linear hash functions
      on the centred features).
    regularization: ridge weight :math:`\lambda > 0` of the h-step, per training item.
    num_iters: MAC iterations (a Z-step at :math:`\mu_i`, then an h-step), at most (``0``: the two-step
      method, the h-step on the initial codes).
    penalty: the first penalty weight :math:`\mu_0 > 0`, on the loss divided by ``N b``.
    penalty_growth: :math:`a \ge 1`, the factor of the penalty per iteration.

  Returns:
    :class:`MACHashParams`: of the h-steps' hash functions, the one of lowest training loss :math:`L(h(X))`.

  >>> import numpy as np
  >>> x = np.random.default_rng(0).normal(size=(60, 5)) + np.repeat(np.eye(5)[:3] * 6, 20, axis=0)
  >>> params = fit(x, num_bits=8, labels=np.repeat([0, 1, 2], 20), num_anchors=20)
  >>> params.weights.shape
  (20, 8)
  """
  _common.check_fit_features(features, min_rows=2)
  n = features.shape[0]
  num_bits = _checks.check_num_bits(num_bits)
  labels = _checks.check_class_labels(labels, n)
  num_anchors = _checks.check_int_at_most("num_anchors", num_anchors, n, what=f"the {n} training points", low=0)
  width = num_anchors or features.shape[1]
  _checks.check_int_at_most("num_bits", num_bits, width, what=f"the regression's input width, {width}")
  regularization = _checks.check_number("regularization", regularization, low=0, low_open=True)
  num_iters = _checks.check_int("num_iters", num_iters, low=0)
  penalty = _checks.check_number("penalty", penalty, low=0, low_open=True)
  penalty_growth = _checks.check_number("penalty_growth", penalty_growth, low=1)
  rng = _checks.check_key_rng(jax.random.key(0) if key is None else key)
  x, dtype = _common.host_features(features)
  mean = x.mean(axis=0)
  x = x - mean
  if num_anchors:
    anchors, scale = _anchors.fit(x, num_anchors, rng, dtype=dtype)
    inputs = _anchors.rbf(anchors, scale, x)
  else:
    anchors, scale, inputs = np.zeros((0, x.shape[1])), 1.0, x
  centre = inputs.mean(axis=0)
  centred = inputs - centre
  ridge = np.linalg.solve(centred.T @ centred + regularization * n * np.eye(centred.shape[1]), centred.T)

  def h_step(codes):
    weights = ridge @ codes
    offset = codes.mean(axis=0)
    return weights, offset, np.where(centred @ weights + offset > 0, 1.0, -1.0)

  codes = initial_codes(labels, num_bits)
  weights, offset, hashes = h_step(codes)  # the two-step method's hash functions
  best = (objective(hashes, labels), weights, offset)
  for i in range(num_iters):
    codes = z_step(codes, labels, hashes, penalty * penalty_growth ** i)
    if np.array_equal(codes, hashes):
      break
    weights, offset, hashes = h_step(codes)
    loss = objective(hashes, labels)
    if loss < best[0]:
      best = (loss, weights, offset)
  _, weights, offset = best
  return MACHashParams(*(jnp.asarray(a, dtype) for a in (mean, anchors, scale, weights, offset - centre @ weights)))


def _values(params: MACHashParams, features: Array) -> Array:
  return _anchors.kernel_values(features, params.mean, params.anchors, params.scale, params.weights, params.bias)


def project(params: MACHashParams, features: Array) -> Array:
  r"""The classifier outputs whose signs are the bits of :func:`encode` (``binarize(project(...))``).

  .. math:: v_k(x) = w_k^\top \phi(x - \mu) + c_k

  Args:
    params: :class:`MACHashParams` from :func:`fit`.
    features: ``[..., dim]`` finite features, ``dim`` as in :func:`fit`.

  Returns:
    ``float[..., num_bits]``: bit ``k`` is 1 where value ``k`` is ``> 0``.

  >>> import numpy as np
  >>> x = np.random.default_rng(0).normal(size=(40, 4))
  >>> params = fit(x, num_bits=4, labels=np.arange(40) % 2, num_anchors=10)
  >>> bool(np.array_equal(np.asarray(project(params, x)) > 0, np.asarray(encode(params, x)) == 1))
  True
  """
  return _common.encoded(params, features, _values, cls=MACHashParams, module="machash", binary=False)


def encode(params: MACHashParams, features: Array) -> Array:
  r"""Hashes ``features`` by the signs of the per-bit classifiers learned by MAC.

  .. math:: b_k(x) = [w_k^\top \phi(x - \mu) + c_k > 0]

  Args:
    params: :class:`MACHashParams` from :func:`fit`.
    features: ``[..., dim]`` finite features, ``dim`` as in :func:`fit`.

  Returns:
    ``uint8[..., num_bits]`` bits in ``{0, 1}``.

  >>> import numpy as np
  >>> x = np.random.default_rng(0).normal(size=(40, 4))
  >>> bits = encode(fit(x, num_bits=6, labels=np.arange(40) % 2, num_anchors=10), x)
  >>> bits.shape, bits.dtype
  ((40, 6), dtype('uint8'))
  """
  return _common.encoded(params, features, _values, cls=MACHashParams, module="machash", binary=True)
