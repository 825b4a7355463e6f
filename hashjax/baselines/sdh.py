r"""Supervised discrete hashing (SDH; Shen, Shen, Liu & Shen, CVPR 2015).

Codes :math:`B \in \{-1, +1\}^{n \times b}` of the training items are learned jointly with a linear classifier
``W`` that reads the class from the code and a hash function :math:`F(x) = P^\top \bar\phi(x)` on RBF responses to
``A`` anchors drawn from the training set (:mod:`hashjax.baselines._anchors`, centred on their training mean),
plus an intercept ``c``:

.. math:: \min_{B, W, P, c}\ \|Y - B W\|_F^2 + \lambda \|W\|_F^2 + \nu \big(\|B - \bar\Phi P - 1 c^\top\|_F^2
   + \delta \|P\|_F^2\big),

with ``Y`` the one-hot labels. From random codes, each outer iteration alternates three exact block
minimisations, so the objective never increases:

* the B-step, discrete cyclic coordinate descent: one bit column at a time,
  :math:`b_k = \mathrm{sgn}(q_k - B_{\neg k} W_{\neg k} w_k)` with :math:`Q = Y W^\top + \nu (\bar\Phi P + 1 c^\top)`
  (a zero keeps the previous bit), sweeping the bits until no bit changes or :data:`NUM_SWEEPS` sweeps;
* the G-step, ridge regression :math:`W = (B^\top B + \lambda I)^{-1} B^\top Y`;
* the F-step, ridge regression :math:`P = (\bar\Phi^\top \bar\Phi + \delta I)^{-1} \bar\Phi^\top B` and the
  unpenalised intercept :math:`c = \bar B`, the codes' mean (:math:`\bar\Phi` is centred).

The paper writes the F-step's ridge apart from the objective; here it is part of it, which is what makes every
step exact. The paper's :math:`F(x) = P^\top \phi(x)` has no intercept; the authors' code appends a column of
ones to the kernel features, and here that intercept is left out of the ridge, so that a bit whose training
codes are unbalanced is still fitted. Items are hashed by :math:`\mathrm{sgn}(P^\top \bar\phi(x) + c)`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from hashjax import _checks
from hashjax.baselines import _anchors
from hashjax.baselines import _common

Array = jax.Array

#: Anchors of :func:`fit` unless told otherwise (the paper's 1,000).
DEFAULT_NUM_ANCHORS = 1000
#: Outer iterations (B-, G- and F-steps) of :func:`fit` unless told otherwise (the paper's 5).
DEFAULT_NUM_ITERS = 5
#: Ridge weight ``lambda`` of the classifier (the paper's 1).
DEFAULT_REG = 1.0
#: Weight ``nu`` of the hash-function fit (the paper's 1e-5).
DEFAULT_PENALTY = 1e-5
#: Ridge weight ``delta`` of the projection (the paper's 0.01).
DEFAULT_RIDGE = 0.01
#: Most sweeps over the bits per B-step.
NUM_SWEEPS = 10


class SDHParams(NamedTuple):
  """``mean[dim]`` (training mean), ``anchors[A, dim]`` (centred by ``mean``), ``scale`` (``float[]``, the RBF
  width), ``projection[A, num_bits]`` (``P``) and ``bias[num_bits]`` (the intercept ``c`` less the kernel mean
  times ``P``)."""
  mean: Array
  anchors: Array
  scale: Array
  projection: Array
  bias: Array


def _values(params: SDHParams, features: Array) -> Array:
  """``features[..., dim]`` to ``P^T (phi(x) - mean phi) + c``, ``[..., num_bits]``."""
  return _anchors.kernel_values(features, params.mean, params.anchors, params.scale, params.projection, params.bias)


def alternate(phi: np.ndarray, targets: np.ndarray, codes: np.ndarray, *, num_iters: int, reg: float,
              penalty: float, ridge: float) -> tuple:
  r"""SDH's alternation from ``codes``: ``(codes[n, b], classifier[b, C], projection[A, b], intercept[b])``,
  float64.

  .. math:: \min_{B, W, P, c}\ \|Y - B W\|_F^2 + \lambda \|W\|_F^2
     + \nu (\|B - \Phi P - 1 c^\top\|_F^2 + \delta \|P\|_F^2)

  The classifier, projection and intercept are first fitted to the given codes; each of ``num_iters`` iterations then
  runs the B-, G- and F-steps (module docstring). Inputs are trusted (:func:`fit` checks them).

  Args:
    phi: ``float64[n, A]`` centred kernel features :math:`\Phi` (each column sums to 0).
    targets: ``float64[n, c]`` one-hot labels ``Y``.
    codes: ``float64[n, b]`` initial codes in ``{-1, +1}``.
    num_iters: outer iterations.
    reg, penalty, ridge: :math:`\lambda`, :math:`\nu`, :math:`\delta`.

  One code bit starts with one item of each class on the wrong side; the B-step moves both over:

  >>> phi = np.array([[0.5, -0.5], [0.4, -0.4], [-0.5, 0.5], [-0.4, 0.4]])
  >>> y = np.repeat(np.eye(2), 2, axis=0)
  >>> b, w, p, c = alternate(phi, y, np.array([[1.0], [-1.0], [-1.0], [1.0]]), num_iters=2, reg=1.0,
  ...                        penalty=1e-5, ridge=0.01)
  >>> b[:, 0].tolist()
  [1.0, 1.0, -1.0, -1.0]
  """
  codes, num_bits = codes.copy(), codes.shape[1]
  factor = scipy.linalg.cho_factor(phi.T @ phi + ridge * np.eye(phi.shape[1]))
  classifier = np.linalg.solve(codes.T @ codes + reg * np.eye(num_bits), codes.T @ targets)
  projection, intercept = scipy.linalg.cho_solve(factor, phi.T @ codes), codes.mean(0)
  for _ in range(num_iters):
    q = targets @ classifier.T + penalty * (phi @ projection + intercept)
    for _ in range(NUM_SWEEPS):
      changed = False
      for k in range(num_bits):
        w_k = classifier[k]
        others = codes @ (classifier @ w_k) - codes[:, k] * (w_k @ w_k)
        v = q[:, k] - others
        column = np.where(v > 0, 1.0, np.where(v < 0, -1.0, codes[:, k]))
        changed = changed or bool(np.any(column != codes[:, k]))
        codes[:, k] = column
      if not changed:
        break
    classifier = np.linalg.solve(codes.T @ codes + reg * np.eye(num_bits), codes.T @ targets)
    projection, intercept = scipy.linalg.cho_solve(factor, phi.T @ codes), codes.mean(0)
  return codes, classifier, projection, intercept


def fit(features: Array, *, num_bits: int, key: Any, labels: Any = None,
        num_anchors: int = DEFAULT_NUM_ANCHORS, num_iters: int = DEFAULT_NUM_ITERS, reg: float = DEFAULT_REG,
        penalty: float = DEFAULT_PENALTY, ridge: float = DEFAULT_RIDGE) -> SDHParams:
  r"""Learns SDH's codes, classifier and kernel hash function from labelled ``features``.

  .. math:: \min_{B \in \{\pm 1\}^{n \times b}, W, P, c}\ \|Y - B W\|_F^2 + \lambda \|W\|_F^2
     + \nu (\|B - \bar\Phi P - 1 c^\top\|_F^2 + \delta \|P\|_F^2)

  Args:
    features: ``[N, dim]`` finite training features.
    num_bits: code length, ``1 <= num_bits <= num_anchors``.
    key: a ``jax.random`` key (the anchors and the initial codes).
    labels: ``int[N]`` class labels (at least two classes).
    num_anchors: RBF anchors drawn from the training items, at most ``N``.
    num_iters: outer iterations (``0``: the hash function fitted to the random initial codes).
    reg: classifier ridge :math:`\lambda > 0`.
    penalty: hash-function weight :math:`\nu > 0`.
    ridge: projection ridge :math:`\delta > 0`.

  Returns:
    :class:`SDHParams`.

  >>> import jax, numpy as np
  >>> x = np.repeat(np.eye(3), 10, axis=0) + np.random.default_rng(0).normal(scale=0.1, size=(30, 3))
  >>> params = fit(x, num_bits=2, key=jax.random.key(0), labels=np.repeat(np.arange(3), 10), num_anchors=6)
  >>> params.anchors.shape, params.projection.shape
  ((6, 3), (6, 2))
  """
  _common.check_fit_features(features, min_rows=2)
  n = features.shape[0]
  labels = _checks.check_class_labels(labels, n)
  num_anchors = _checks.check_int_at_most("num_anchors", num_anchors, n, what=f"the {n} training items")
  num_bits = _checks.check_int_at_most("num_bits", num_bits, num_anchors, what=f"num_anchors = {num_anchors}")
  rng = _checks.check_key_rng(key)
  num_iters = _checks.check_int("num_iters", num_iters, low=0)
  reg, penalty, ridge = (_checks.check_number(name, value, low=0, low_open=True)
                         for name, value in (("reg", reg), ("penalty", penalty), ("ridge", ridge)))
  x, dtype = _common.host_features(features)
  mean = x.mean(0)
  x = x - mean
  anchors, scale = _anchors.fit(x, num_anchors, rng, dtype=dtype)
  phi = _anchors.rbf(anchors, scale, x)
  kernel_mean = phi.mean(0)
  phi -= kernel_mean
  targets = (labels[:, None] == np.unique(labels)).astype(np.float64)
  codes = np.where(rng.standard_normal((x.shape[0], num_bits)) > 0, 1.0, -1.0)
  _, _, projection, intercept = alternate(phi, targets, codes, num_iters=num_iters, reg=reg, penalty=penalty,
                                          ridge=ridge)
  return SDHParams(*(jnp.asarray(a, dtype) for a in (mean, anchors, np.float64(scale), projection,
                                                      intercept - kernel_mean @ projection)))


def project(params: SDHParams, features: Array) -> Array:
  r"""The real values whose signs are the bits of :func:`encode` (``encode`` is ``binarize(project(...))``).

  .. math:: F(x) = P^\top (\phi(x) - \bar\phi) + c

  Args:
    params: :class:`SDHParams` from :func:`fit`.
    features: ``[..., dim]`` finite features, ``dim`` as in :func:`fit`.

  Returns:
    ``float[..., num_bits]``: bit ``k`` is 1 where value ``k`` is ``> 0``.

  >>> import jax, numpy as np
  >>> x = np.repeat(np.eye(3), 10, axis=0) + np.random.default_rng(0).normal(scale=0.1, size=(30, 3))
  >>> params = fit(x, num_bits=2, key=jax.random.key(0), labels=np.repeat(np.arange(3), 10), num_anchors=6)
  >>> bool(np.array_equal(np.asarray(project(params, x)) > 0, np.asarray(encode(params, x)) == 1))
  True
  """
  return _common.encoded(params, features, _values, cls=SDHParams, module="sdh", binary=False)


def encode(params: SDHParams, features: Array) -> Array:
  r"""Hashes ``features`` by the signs of SDH's kernel hash function.

  .. math:: b(x) = [P^\top (\phi(x) - \bar\phi) + c > 0]

  Args:
    params: :class:`SDHParams` from :func:`fit`.
    features: ``[..., dim]`` finite features, ``dim`` as in :func:`fit`.

  Returns:
    ``uint8[..., num_bits]`` bits in ``{0, 1}``.

  >>> import jax, numpy as np
  >>> x = np.repeat(np.eye(3), 10, axis=0) + np.random.default_rng(0).normal(scale=0.1, size=(30, 3))
  >>> bits = encode(fit(x, num_bits=2, key=jax.random.key(0), labels=np.repeat(np.arange(3), 10), num_anchors=6), x)
  >>> bits.shape, bits.dtype
  ((30, 2), dtype('uint8'))
  """
  return _common.encoded(params, features, _values, cls=SDHParams, module="sdh", binary=True)
