r"""Binary reconstructive embedding (BRE; Kulis & Darrell, NIPS 2009), supervised variant.

Bit ``p`` of ``x`` is the sign of a kernel expansion over ``A`` anchor points,
:math:`h_p(x) = [\sum_a W_{ap} (\phi_a(x) - m_a) > 0]`, and ``W`` minimises the
squared error between the scaled Hamming distances of the training codes and the
target distances, 0 for a pair of the same class and 1 (the maximum) otherwise:

.. math:: \min_W \sum_{i, j} \Big(d_{ij} - \frac{1}{b} \|h(x_i) - h(x_j)\|_1\Big)^2, \qquad
   d_{ij} = [y_i \ne y_j].

As in the paper, ``W`` is learned by cyclic coordinate descent: each entry
``W_ap`` in turn is set to the value that minimises the objective with every
other entry fixed. Along one entry the objective is piecewise constant, changing
where a training point's bit flips; all of these breakpoints are scanned at once
because the objective of bit ``p`` (all other bits fixed) is, up to constants,
the quadratic form

.. math:: s^\top E s = \tfrac12 (\mathbf 1^\top s)^2 - \|Y^\top s\|^2 + \tfrac{1}{2b} \|S_{-p}^\top s\|^2

of its ``{-1, +1}`` column ``s`` (``Y`` one-hot labels, ``S_{-p}`` the other
bits), so all ``N^2`` pairs cost ``O(N (C + b))`` per breakpoint scan, in exact
integer arithmetic. The new value is the midpoint of the best interval (1 beyond
the last breakpoint on its side when the best is unbounded); an entry that cannot
lower the objective is left alone, so the objective never increases.

Departures from the paper: the kernel is the RBF of :mod:`hashjax.baselines._anchors`
on ``A`` anchors shared by all bits (the paper draws a few points per bit and uses
a normalised linear kernel), the responses are centred by their training mean
(balanced bits, as in KSH), and ``W`` starts from a ridge regression of random
class codes (each class draws a random code; the paper starts at random), which
the descent then refines.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks
from hashjax import _encode
from hashjax.baselines import _anchors
from hashjax.baselines import _common

Array = jax.Array

#: Anchors of the RBF features when ``fit`` is not told (a fit needs at least as many training items).
DEFAULT_NUM_ANCHORS = 200


class BREParams(NamedTuple):
  """``mean[dim]``, centred ``anchors[A, dim]``, RBF width ``scale[]``, mean responses ``offset[A]`` and
  ``weights[A, num_bits]``."""
  mean: Array
  anchors: Array
  scale: Array
  offset: Array
  weights: Array


def _values(params: BREParams, features: Array) -> Array:
  """``(phi(x - mean) - offset) W`` for ``features[..., dim]``."""
  phi = _anchors.rbf(params.anchors, params.scale, features.astype(params.mean.dtype) - params.mean, jnp)
  return _encode.matmul(phi - params.offset, params.weights)


def _best_step(y: np.ndarray, k: np.ndarray, basis: np.ndarray, weights: np.ndarray, s: np.ndarray) -> float:
  """The step ``t`` minimising ``sum_r weights_r (basis^T sgn(y + t k))_r^2``: the midpoint of the best interval
  between breakpoints, or a point 1 beyond the first or last breakpoint when an unbounded interval is best
  (0 when none beats the current signs ``s``)."""
  moving = k != 0
  if not moving.any():
    return 0.0
  breaks = -y[moving] / k[moving]
  order = np.argsort(breaks, kind="stable")
  breaks = breaks[order]
  flips = np.where(k[moving][order] > 0, 1, -1)
  rows = basis[moving][order] * flips[:, None]
  # Signs at t -> -inf are -sgn(k); passing breakpoint i turns s_i into +sgn(k_i). Interval j lies between
  # breakpoints j - 1 and j (j = 0: below the first, j = len(breaks): above the last).
  start = basis[~moving].T @ s[~moving] - rows.sum(0)
  z = start + 2 * np.concatenate([np.zeros((1, start.size), start.dtype), np.cumsum(rows, 0)])
  cost = (z * z) @ weights
  cost = np.where(np.r_[True, breaks[:-1] < breaks[1:], True], cost, np.iinfo(np.int64).max)
  best = int(np.argmin(cost))
  now = basis.T @ s
  current = (now * now) @ weights
  if cost[best] >= current:
    return 0.0
  t = float(breaks[0] - 1.0 if best == 0 else breaks[-1] + 1.0 if best == breaks.size
            else 0.5 * (breaks[best - 1] + breaks[best]))
  # The signs t gives, costed: a midpoint of breakpoints an ulp apart rounds onto one, whose sign is then not the
  # interval's.
  signs = np.where(y + t * k > 0, 1, -1)
  changed = signs != s
  after = now + basis[changed].T @ (signs - s)[changed]
  return t if (after * after) @ weights < current else 0.0


def _descend(kernel: np.ndarray, onehot: np.ndarray, weights: np.ndarray, num_sweeps: int, rng) -> np.ndarray:
  """``weights[A, b]`` after ``num_sweeps`` cyclic sweeps of exact coordinate descent."""
  n, b = kernel.shape[0], weights.shape[1]
  values = kernel @ weights
  signs = np.where(values > 0, 1, -1)
  form = np.concatenate([[b], np.full(onehot.shape[1], -2 * b), np.ones(b - 1)]).astype(np.int64)
  for _ in range(num_sweeps):
    for p in range(b):
      basis = np.concatenate([np.ones((n, 1), np.int64), onehot, np.delete(signs, p, 1)], 1)
      y = values[:, p]
      for a in rng.permutation(kernel.shape[1]):
        t = _best_step(y, kernel[:, a], basis, form, signs[:, p])
        if t != 0.0:
          weights[a, p] += t
          y = y + t * kernel[:, a]
          signs[:, p] = np.where(y > 0, 1, -1)
      values[:, p] = y
  return weights


def fit(features: Array, *, num_bits: int, key: Any, labels: Any = None, num_train: int = 800,
        num_anchors: int = DEFAULT_NUM_ANCHORS, num_sweeps: int = 1, ridge: float = 1.0) -> BREParams:
  r"""Learns BRE kernel hash functions from class ``labels``.

  .. math:: \min_W \sum_{i, j \le n} \Big([y_i \ne y_j] - \frac{1}{b} \|h(x_i) - h(x_j)\|_1\Big)^2

  Args:
    features: ``[N, dim]`` finite training features.
    num_bits: code length ``1 <= b <= num_anchors`` (one kernel expansion per bit on the anchors).
    key: a ``jax.random`` key: the training subset, the anchors, the initial class codes and the order of
      the coordinates.
    labels: ``int[N]`` class labels (required), at least two classes.
    num_train: the objective runs over a random subset of this many training items (all when ``N`` is
      smaller); the coordinate descent costs ``O(num_train (C + b))`` per entry of ``W``.
    num_anchors: anchors ``A <= min(N, num_train)`` of the RBF kernel.
    num_sweeps: cyclic sweeps over all ``A b`` entries of ``W`` (``0`` keeps the initial regression).
    ridge: ``lambda > 0`` of the initial ridge regression
      :math:`W_0 = (K^\top K + \lambda I)^{-1} K^\top B_0`.

  Returns:
    :class:`BREParams`.

  >>> import jax, numpy as np
  >>> rng = np.random.default_rng(0)
  >>> y = np.repeat(np.arange(3), 20)
  >>> x = rng.normal(size=(60, 5)) + 4 * np.eye(5)[y]
  >>> params = fit(x, num_bits=6, key=jax.random.key(0), labels=y, num_anchors=20)
  >>> params.weights.shape
  (20, 6)
  """
  _common.check_fit_features(features, min_rows=2)
  n = features.shape[0]
  labels = _checks.check_class_labels(labels, n)
  num_bits = _checks.check_num_bits(num_bits)
  rng = _checks.check_key_rng(key)
  num_train = _checks.check_int("num_train", num_train, low=2)
  rows = min(n, num_train)
  num_anchors = _checks.check_int_at_most("num_anchors", num_anchors, rows, what=f"the {rows} items the objective "
                                          f"runs over (min(N = {n}, num_train = {num_train}))")
  _checks.check_int_at_most("num_bits", num_bits, num_anchors, what=f"num_anchors = {num_anchors}")
  num_sweeps = _checks.check_int("num_sweeps", num_sweeps, low=0)
  ridge = _checks.check_number("ridge", ridge, low=0, low_open=True)
  x, dtype = _common.host_features(features)
  if num_train < x.shape[0]:
    keep = np.sort(rng.choice(x.shape[0], num_train, replace=False))
    x, labels = x[keep], labels[keep]
    _common.check_subset_classes("num_train", labels)
  mean = x.mean(0)
  x = x - mean
  anchors, scale = _anchors.fit(x, num_anchors, rng, dtype=dtype)
  phi = _anchors.rbf(anchors, scale, x)
  offset = phi.mean(0)
  kernel = phi - offset
  classes, index = np.unique(labels, return_inverse=True)
  onehot = np.eye(classes.size, dtype=np.int64)[index]
  codes = np.where(rng.normal(size=(classes.size, num_bits))[index] > 0, 1.0, -1.0)
  start = np.linalg.solve(kernel.T @ kernel + ridge * np.eye(kernel.shape[1]), kernel.T @ codes)
  weights = _descend(kernel, onehot, start, num_sweeps, rng)
  return BREParams(*(jnp.asarray(a, dtype) for a in (mean, anchors, scale, offset, weights)))


def project(params: BREParams, features: Array) -> Array:
  r"""The kernel expansions whose signs are the bits of :func:`encode` (``encode`` is ``binarize(project(...))``).

  .. math:: v_p(x) = \sum_a W_{ap} (\phi_a(x - \mu) - m_a)

  Args:
    params: :class:`BREParams` from :func:`fit`.
    features: ``[..., dim]`` finite features, ``dim`` as in :func:`fit`.

  Returns:
    ``float[..., num_bits]``: bit ``p`` is 1 where value ``p`` is ``> 0``.

  >>> import jax, numpy as np
  >>> y = np.repeat(np.arange(2), 15)
  >>> x = np.random.default_rng(0).normal(size=(30, 4)) + 3 * np.eye(4)[y]
  >>> params = fit(x, num_bits=4, key=jax.random.key(0), labels=y, num_anchors=10)
  >>> bool(np.array_equal(np.asarray(project(params, x)) > 0, np.asarray(encode(params, x)) == 1))
  True
  """
  return _common.encoded(params, features, _values, cls=BREParams, module="bre", binary=False)


def encode(params: BREParams, features: Array) -> Array:
  r"""Hashes ``features`` by the signs of their kernel expansions.

  .. math:: b_p(x) = \Big[\sum_a W_{ap} (\phi_a(x - \mu) - m_a) > 0\Big]

  Args:
    params: :class:`BREParams` from :func:`fit`.
    features: ``[..., dim]`` finite features, ``dim`` as in :func:`fit`.

  Returns:
    ``uint8[..., num_bits]`` bits in ``{0, 1}``.

  >>> import jax, numpy as np
  >>> y = np.repeat(np.arange(2), 15)
  >>> x = np.random.default_rng(0).normal(size=(30, 4)) + 3 * np.eye(4)[y]
  >>> bits = encode(fit(x, num_bits=4, key=jax.random.key(0), labels=y, num_anchors=10), x)
  >>> bits.shape, bits.dtype
  ((30, 4), dtype('uint8'))
  """
  return _common.encoded(params, features, _values, cls=BREParams, module="bre", binary=True)
