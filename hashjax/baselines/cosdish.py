r"""Column-sampling discrete supervised hashing (COSDISH; Kang, Li & Zhou, AAAI 2016).

Supervised: class labels give the similarity :math:`S_{ij} = 1` for items of the same class and :math:`-r`
otherwise, where :math:`r \le 1` is the number of similar over dissimilar pairs among the sampled columns, so
that the similarities sum to about zero. Like the authors' reference code, which balances them (with
:math:`+r`, which makes every similarity 1 for two equal classes): with :math:`-1` the many dissimilar pairs of
ten classes drive every code to the same word. The training codes :math:`B \in \{\pm 1\}^{N \times b}` minimise

.. math:: \min_{B \in \{\pm 1\}^{N \times b}} \|b\, S - B B^\top\|_F^2 .

Each of ``num_rounds`` rounds samples ``num_columns`` columns :math:`\Omega` of :math:`S` (the rest of the items
are :math:`\Gamma`) and alternates ``num_alternations`` times between

* the codes of the rest: the paper's closed form :math:`B^\Gamma = \mathrm{sgn}(b\, S^{\Gamma\Omega} B^\Omega)`
  drops the quadratic term of :math:`\|b S^{\Gamma\Omega} - B^\Gamma B^{\Omega\top}\|^2`; here that sign (a zero
  keeps the previous bit) is the start of an exact coordinate descent on each row's whole term
  :math:`\|b\, s_i - B^\Omega \mathbf{b}_i\|^2` (rows of one class share their similarities, so one descent per
  class), and
* the codes of the sampled items bit by bit: with the other bits fixed, bit :math:`k` of :math:`B^\Omega` minimises
  :math:`\|E^\Gamma - B^\Gamma_{:k} z^\top\|^2 + \|E^\Omega - z z^\top\|^2` over :math:`z \in \{\pm 1\}^{|\Omega|}`
  (:math:`E` the residuals of the other bits), a binary quadratic program
  :math:`\min_z -2 z^\top E^\Omega z - 2 (E^{\Gamma\top} B^\Gamma_{:k})^\top z`.

The paper solves that program with a 2-approximation; here it is solved by exact coordinate descent started
from the current bit (one-coordinate moves, repeated until none improves), which never does worse than the
current bit. Codes start random (from ``key``). The reference code samples as many columns as bits; the default
here is 100 columns per round.

Out-of-sample hash functions, as the paper's kernel variant: ridge regression from RBF responses to
``num_anchors`` training points (:mod:`hashjax.baselines._anchors`) to the training codes,

.. math:: h(x) = \mathrm{sgn}\big((\phi(x) - \bar\phi)^\top W + \bar B\big), \quad
   W = (\Phi_c^\top \Phi_c + \lambda N I)^{-1} \Phi_c^\top B,

with :math:`\Phi_c` the centred responses (``num_anchors=0``: linear regression on the centred features).
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

#: Anchors of the RBF features when ``fit`` is not told (a fit needs at least as many training items).
DEFAULT_NUM_ANCHORS = 1000


class CosdishParams(NamedTuple):
  """``mean[dim]``, ``anchors[A, dim]`` (centred by ``mean``; ``A = 0``: linear), RBF ``scale[]``, regression
  ``weights[A or dim, num_bits]`` and ``bias[num_bits]``."""
  mean: Array
  anchors: Array
  scale: Array
  weights: Array
  bias: Array


def _descend(quad: np.ndarray, lin: np.ndarray, z: np.ndarray) -> np.ndarray:
  """Coordinate descent on ``min_z z^T quad z + lin^T z`` over ``z in {-1, +1}^m`` (``quad`` symmetric, zero
  diagonal) from ``z``; stops when no single flip lowers it."""
  z = z.copy()
  field = quad @ z
  changed = True
  while changed:
    changed = False
    for i in range(z.size):
      best = -1.0 if 2.0 * field[i] + lin[i] > 0 else 1.0
      if best != z[i] and 2.0 * field[i] + lin[i] != 0:
        field += quad[:, i] * (best - z[i])
        z[i] = best
        changed = True
  return z


def discrete_codes(labels: np.ndarray, num_bits: int, rng: np.random.Generator, *, num_columns: int,
                   num_rounds: int, num_alternations: int) -> np.ndarray:
  r"""``float64[N, num_bits]`` training codes in ``{-1, +1}`` of COSDISH's column-sampling alternation.

  .. math:: \min_{B^\Omega, B^\Gamma} \|b S^{\Gamma\Omega} - B^\Gamma B^{\Omega\top}\|_F^2
     + \|b S^{\Omega\Omega} - B^\Omega B^{\Omega\top}\|_F^2

  Args:
    labels: ``int[N]`` class labels (trusted).
    num_bits: code length ``b``.
    rng: numpy ``Generator`` for the initial codes and the sampled columns.
    num_columns: columns sampled per round (at most ``N``).
    num_rounds: sampling rounds.
    num_alternations: alternations per round.

  >>> b = discrete_codes(np.array([0, 0, 1, 1]), 2, np.random.default_rng(0), num_columns=2, num_rounds=3,
  ...                    num_alternations=2)
  >>> bool((b[0] == b[1]).all() and (b[2] == b[3]).all() and (b[0] != b[2]).any())
  True
  """
  n = labels.size
  codes = rng.choice([-1.0, 1.0], size=(n, num_bits))
  for _ in range(num_rounds):
    omega = np.sort(rng.choice(n, num_columns, replace=False))
    gamma = np.setdiff1d(np.arange(n), omega)
    classes, member = np.unique(labels[gamma], return_inverse=True)
    same = labels[:, None] == labels[omega][None, :]
    low = -min(same.sum() / max((~same).sum(), 1), 1.0)  # dissimilar target: balances the similar pairs
    s_co = num_bits * np.where(classes[:, None] == labels[omega][None, :], 1.0, low)
    s_oo = num_bits * np.where(same[omega], 1.0, low)
    b_o, b_g = codes[omega], codes[gamma]
    for _ in range(num_alternations):
      for k in range(num_bits):
        rest = np.arange(num_bits) != k
        g_sum = np.bincount(member, weights=b_g[:, k], minlength=classes.size)  # sum of bit k per class
        lin = s_co.T @ g_sum - b_o[:, rest] @ (b_g[:, rest].T @ b_g[:, k])
        quad = -2.0 * (s_oo - b_o[:, rest] @ b_o[:, rest].T)
        np.fill_diagonal(quad, 0.0)
        b_o[:, k] = _descend(quad, -2.0 * lin, b_o[:, k])
      # Rows of B^Gamma of one class share their similarity row: one solve per class.
      quad = b_o.T @ b_o
      np.fill_diagonal(quad, 0.0)
      target = s_co @ b_o
      for c in range(classes.size):
        start = b_g[np.flatnonzero(member == c)[0]]
        start = np.where(target[c] > 0, 1.0, np.where(target[c] < 0, -1.0, start))
        b_g[member == c] = _descend(quad, -2.0 * target[c], start)
    codes[omega], codes[gamma] = b_o, b_g
  return codes


def objective(codes: np.ndarray, labels: np.ndarray) -> float:
  r"""COSDISH's training loss of ``codes[N, b]`` in ``{-1, +1}`` on class ``labels[N]``, without forming ``S``.

  .. math:: \|b S - B B^\top\|_F^2, \quad S = (1 + r) L L^\top - r \mathbf{1}\mathbf{1}^\top, \quad
     r = \min\Big(1, \frac{|\{(i, j): y_i = y_j\}|}{|\{(i, j): y_i \ne y_j\}|}\Big)

  (:math:`L` the one-hot class matrix: similar pairs target :math:`b`, dissimilar ones :math:`-r b`.)

  >>> objective(np.array([[1.0], [1.0], [-1.0]]), np.array([0, 0, 1]))  # r = min(1, 5/4): a perfect fit
  0.0
  >>> objective(np.array([[1.0], [1.0], [1.0]]), np.array([0, 0, 1]))  # 4 dissimilar pairs miss by 2
  16.0
  """
  n, b = codes.shape
  onehot = (labels[:, None] == np.unique(labels)[None, :]).astype(np.float64)
  num_same = float(np.sum(onehot.sum(0) ** 2))
  low = min(num_same / (n * n - num_same), 1.0)
  cross = (1.0 + low) * np.sum((onehot.T @ codes) ** 2) - low * np.sum(codes.sum(0) ** 2)
  target = b * b * (num_same + low * low * (n * n - num_same))
  return float(np.sum((codes.T @ codes) ** 2) - 2.0 * b * cross + target)


def fit(features: Array, *, num_bits: int, key: Optional[Any] = None, labels: Any = None,
        num_anchors: int = DEFAULT_NUM_ANCHORS, regularization: float = 1e-7, num_columns: int = 100, num_rounds: int = 10,
        num_alternations: int = 3) -> CosdishParams:
  r"""Learns COSDISH's discrete training codes and the kernel regression that hashes new items.

  .. math:: \min_{B \in \{\pm 1\}^{N \times b}} \|b S - B B^\top\|_F^2, \qquad
     W = (\Phi_c^\top \Phi_c + \lambda N I)^{-1} \Phi_c^\top B

  Args:
    features: ``[N, dim]`` finite training features, ``N >= 2``.
    num_bits: code length ``1 <= b <= A`` (``dim`` when ``A = 0``): one regression per bit on ``A`` inputs.
    key: a ``jax.random`` key for the initial codes, the sampled columns and the anchors (None:
      ``jax.random.key(0)``).
    labels: ``int[N]`` class labels, at least two classes (required).
    num_anchors: RBF anchors ``A`` drawn from the training points, ``A <= N`` (``0``: linear regression on the
      features).
    regularization: ridge weight :math:`\lambda > 0`, per training item.
    num_columns: columns of :math:`S` sampled per round, at most ``N``.
    num_rounds: sampling rounds.
    num_alternations: alternations of the two code updates per round.

  Returns:
    :class:`CosdishParams`.

  >>> import numpy as np
  >>> x = np.random.default_rng(0).normal(size=(60, 5)) + np.repeat(np.eye(5)[:3] * 6, 20, axis=0)
  >>> params = fit(x, num_bits=8, labels=np.repeat([0, 1, 2], 20), num_anchors=20, num_columns=30)
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
  num_columns = _checks.check_int_at_most("num_columns", num_columns, n, what=f"the {n} training points")
  num_rounds = _checks.check_int("num_rounds", num_rounds)
  num_alternations = _checks.check_int("num_alternations", num_alternations)
  rng = _checks.check_key_rng(jax.random.key(0) if key is None else key)
  x, dtype = _common.host_features(features)
  codes = discrete_codes(labels, num_bits, rng, num_columns=num_columns, num_rounds=num_rounds,
                         num_alternations=num_alternations)
  mean = x.mean(axis=0)
  x = x - mean
  if num_anchors:
    anchors, scale = _anchors.fit(x, num_anchors, rng, dtype=dtype)
    inputs = _anchors.rbf(anchors, scale, x)
  else:
    anchors, scale, inputs = np.zeros((0, x.shape[1])), 1.0, x
  centre = inputs.mean(axis=0)
  centred = inputs - centre
  gram = centred.T @ centred + regularization * n * np.eye(centred.shape[1])
  weights = np.linalg.solve(gram, centred.T @ codes)
  bias = codes.mean(axis=0) - centre @ weights
  return CosdishParams(*(jnp.asarray(a, dtype) for a in (mean, anchors, scale, weights, bias)))


def _values(params: CosdishParams, features: Array) -> Array:
  return _anchors.kernel_values(features, params.mean, params.anchors, params.scale, params.weights, params.bias)


def project(params: CosdishParams, features: Array) -> Array:
  r"""The regression outputs whose signs are the bits of :func:`encode` (``binarize(project(...))``).

  .. math:: v(x) = W^\top \phi(x - \mu) + c

  Args:
    params: :class:`CosdishParams` from :func:`fit`.
    features: ``[..., dim]`` finite features, ``dim`` as in :func:`fit`.

  Returns:
    ``float[..., num_bits]``: bit ``j`` is 1 where value ``j`` is ``> 0``.

  >>> import numpy as np
  >>> x = np.random.default_rng(0).normal(size=(40, 4))
  >>> params = fit(x, num_bits=4, labels=np.arange(40) % 2, num_anchors=10, num_columns=10)
  >>> bool(np.array_equal(np.asarray(project(params, x)) > 0, np.asarray(encode(params, x)) == 1))
  True
  """
  return _common.encoded(params, features, _values, cls=CosdishParams, module="cosdish", binary=False)


def encode(params: CosdishParams, features: Array) -> Array:
  r"""Hashes ``features`` by the signs of the learned kernel regression.

  .. math:: b(x) = [W^\top \phi(x - \mu) + c > 0]

  Args:
    params: :class:`CosdishParams` from :func:`fit`.
    features: ``[..., dim]`` finite features, ``dim`` as in :func:`fit`.

  Returns:
    ``uint8[..., num_bits]`` bits in ``{0, 1}``.

  >>> import numpy as np
  >>> x = np.random.default_rng(0).normal(size=(40, 4))
  >>> bits = encode(fit(x, num_bits=6, labels=np.arange(40) % 2, num_anchors=10, num_columns=10), x)
  >>> bits.shape, bits.dtype
  ((40, 6), dtype('uint8'))
  """
  return _common.encoded(params, features, _values, cls=CosdishParams, module="cosdish", binary=True)
