r"""Kernel-based supervised hashing (KSH; Liu, Wang, Ji, Jiang & Chang, CVPR 2012).

Every bit is the sign of a kernel expansion over ``A`` anchors drawn from the training set,
:math:`h_k(x) = \mathrm{sgn}(a_k^\top \bar k(x))`, with :math:`\bar k(x)` the RBF responses to the anchors
(:mod:`hashjax.baselines._anchors`) centred on their training mean. On ``l`` labelled items with pairwise labels
:math:`S_{ij} = +1` (same class) or :math:`-1`, KSH fits the code inner products to :math:`b S`,

.. math:: \min_{A} \big\| \mathrm{sgn}(\bar K_l A)\, \mathrm{sgn}(\bar K_l A)^\top - b\, S \big\|_F^2,

greedily, one bit at a time against the residue :math:`R_{k-1} = b S - \sum_{t < k} h_t h_t^\top`: each bit
maximises :math:`h_k^\top R_{k-1} h_k`, started from the top generalised eigenvector of
:math:`(\bar K_l^\top R_{k-1} \bar K_l, \bar K_l^\top \bar K_l)` (scaled to :math:`\|\bar K_l a\|^2 = l`) and
refined through the sigmoid relaxation :math:`\varphi(t) = 2 / (1 + e^{-t}) - 1` by L-BFGS; the better of the
two (by the discrete objective) is kept, as in the authors' code, and :math:`R_k = R_{k-1} - h_k h_k^\top`.

Departures from the paper: the ``l x l`` matrices :math:`S` and :math:`R` are never formed (:math:`S = 2 Y Y^\top
- 1 1^\top` for one-hot labels ``Y``, so a product with ``R`` costs ``O(l (c + b))``), which lets KSH train on all
labelled items rather than the paper's 1,000-2,000; :math:`\bar K_l^\top R\, \bar K_l` has rank at most
``c + 1 + k`` (``c`` classes), so the generalised eigenproblem (a tiny ridge on :math:`\bar K_l^\top \bar K_l`)
is solved in that small subspace; L-BFGS replaces the paper's gradient descent.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
import scipy.optimize

from hashjax import _checks
from hashjax.baselines import _anchors
from hashjax.baselines import _common

Array = jax.Array

#: Anchors of :func:`fit` unless told otherwise (chosen on three validation splits of MNIST-10k; the paper has 300).
DEFAULT_NUM_ANCHORS = 1000
#: L-BFGS iterations per bit (the mean of three validation splits of MNIST-10k at 32 bits: 20 gave AP_T 0.9298,
#: 50 gave 0.9259).
DEFAULT_NUM_ITERS = 20


class KSHParams(NamedTuple):
  """``mean[dim]`` (training mean), ``anchors[A, dim]`` (centred by ``mean``), ``scale`` (``float[]``, the RBF
  width), ``projection[A, num_bits]`` (the ``a_k``) and ``bias[num_bits]`` (``-`` the kernel mean times them)."""
  mean: Array
  anchors: Array
  scale: Array
  projection: Array
  bias: Array


def _values(params: KSHParams, features: Array) -> Array:
  """``features[..., dim]`` to ``a_k^T (k(x) - mean k)``, ``[..., num_bits]``."""
  return _anchors.kernel_values(features, params.mean, params.anchors, params.scale, params.projection, params.bias)


def _residue_product(v: np.ndarray, onehot: np.ndarray, codes: np.ndarray, num_bits: int) -> np.ndarray:
  """``R v`` for ``R = b (2 Y Y^T - 1 1^T) - H H^T`` and ``v[l, p]``."""
  return num_bits * (2.0 * onehot @ (onehot.T @ v) - v.sum(0)) - codes @ (codes.T @ v)


def fit(features: Array, *, num_bits: int, key: Any, labels: Any = None,
        num_anchors: int = DEFAULT_NUM_ANCHORS, num_labelled: Optional[int] = None,
        num_iters: int = DEFAULT_NUM_ITERS) -> KSHParams:
  r"""Learns KSH's kernel hash functions from labelled ``features``.

  .. math:: \max_{a_k}\ \mathrm{sgn}(\bar K_l a_k)^\top R_{k-1}\, \mathrm{sgn}(\bar K_l a_k), \qquad
     R_k = R_{k-1} - h_k h_k^\top, \quad R_0 = b\, S

  Args:
    features: ``[N, dim]`` finite training features.
    num_bits: code length, ``1 <= num_bits <= num_anchors``.
    key: a ``jax.random`` key (the anchors and the labelled subset).
    labels: ``int[N]`` class labels (at least two classes).
    num_anchors: RBF anchors drawn from the training items, at most ``N``.
    num_labelled: ``l``, the labelled items the bits are fitted on, drawn from the training items
      (None: all ``N``).
    num_iters: L-BFGS iterations per bit (``0`` keeps the spectral start).

  Returns:
    :class:`KSHParams`.

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
  num_labelled = n if num_labelled is None else _checks.check_int_at_most(
      "num_labelled", num_labelled, n, what=f"the {n} training items")
  num_iters = _checks.check_int("num_iters", num_iters, low=0)
  x, dtype = _common.host_features(features)
  mean = x.mean(0)
  x = x - mean
  anchors, scale = _anchors.fit(x, num_anchors, rng, dtype=dtype)
  kernel_mean = _anchors.rbf(anchors, scale, x).mean(0)
  subset = np.sort(rng.choice(x.shape[0], num_labelled, replace=False))
  _common.check_subset_classes("num_labelled", labels[subset])
  kernel = _anchors.rbf(anchors, scale, x[subset]) - kernel_mean
  onehot = (labels[subset, None] == np.unique(labels[subset])).astype(np.float64)
  gram = kernel.T @ kernel
  chol = scipy.linalg.cholesky(gram + 1e-10 * np.trace(gram) / num_anchors * np.eye(num_anchors), lower=True)
  kernel_labels, kernel_sum = kernel.T @ onehot, kernel.sum(0)
  projection = np.zeros((num_anchors, num_bits))
  codes = np.zeros((num_labelled, 0))

  def discrete(a):
    h = np.where(kernel @ a > 0, 1.0, -1.0)
    return float(h @ _residue_product(h[:, None], onehot, codes, num_bits)[:, 0])

  def smooth(a):
    h = np.tanh(0.5 * (kernel @ a))  # 2 / (1 + e^-t) - 1
    r_h = _residue_product(h[:, None], onehot, codes, num_bits)[:, 0]
    return -float(h @ r_h), -kernel.T @ (r_h * (1.0 - h * h))

  for k in range(num_bits):
    # K^T R K = U D U^T has rank <= c + 1 + k: its top generalised eigenvector lies in the whitened span of U.
    factors = np.concatenate([kernel_labels, kernel_sum[:, None], kernel.T @ codes], axis=1)
    signs = np.concatenate([np.full(onehot.shape[1], 2.0 * num_bits), [-float(num_bits)], -np.ones(k)])
    basis, tri = np.linalg.qr(scipy.linalg.solve_triangular(chol, factors, lower=True))
    _, vecs = np.linalg.eigh((tri * signs) @ tri.T)
    top = _common.sign_fixed(scipy.linalg.solve_triangular(chol.T, basis @ vecs[:, -1:], lower=False))[:, 0]
    start = top * np.sqrt(num_labelled / max(float(np.sum((kernel @ top) ** 2)), 1e-300))
    best = start
    if num_iters:
      refined = scipy.optimize.minimize(smooth, start, jac=True, method="L-BFGS-B",
                                        options={"maxiter": num_iters}).x
      best = refined if discrete(refined) >= discrete(start) else start
    projection[:, k] = best
    codes = np.concatenate([codes, np.where(kernel @ best > 0, 1.0, -1.0)[:, None]], axis=1)
  return KSHParams(*(jnp.asarray(a, dtype) for a in (mean, anchors, np.float64(scale), projection,
                                                      -kernel_mean @ projection)))


def project(params: KSHParams, features: Array) -> Array:
  r"""The real values whose signs are the bits of :func:`encode` (``encode`` is ``binarize(project(...))``).

  .. math:: v_k(x) = a_k^\top (k(x) - \bar k)

  Args:
    params: :class:`KSHParams` from :func:`fit`.
    features: ``[..., dim]`` finite features, ``dim`` as in :func:`fit`.

  Returns:
    ``float[..., num_bits]``: bit ``k`` is 1 where value ``k`` is ``> 0``.

  >>> import jax, numpy as np
  >>> x = np.repeat(np.eye(3), 10, axis=0) + np.random.default_rng(0).normal(scale=0.1, size=(30, 3))
  >>> params = fit(x, num_bits=2, key=jax.random.key(0), labels=np.repeat(np.arange(3), 10), num_anchors=6)
  >>> bool(np.array_equal(np.asarray(project(params, x)) > 0, np.asarray(encode(params, x)) == 1))
  True
  """
  return _common.encoded(params, features, _values, cls=KSHParams, module="ksh", binary=False)


def encode(params: KSHParams, features: Array) -> Array:
  r"""Hashes ``features`` by the signs of their kernel expansions.

  .. math:: b_k(x) = [a_k^\top (k(x) - \bar k) > 0]

  Args:
    params: :class:`KSHParams` from :func:`fit`.
    features: ``[..., dim]`` finite features, ``dim`` as in :func:`fit`.

  Returns:
    ``uint8[..., num_bits]`` bits in ``{0, 1}``.

  >>> import jax, numpy as np
  >>> x = np.repeat(np.eye(3), 10, axis=0) + np.random.default_rng(0).normal(scale=0.1, size=(30, 3))
  >>> bits = encode(fit(x, num_bits=2, key=jax.random.key(0), labels=np.repeat(np.arange(3), 10), num_anchors=6), x)
  >>> bits.shape, bits.dtype
  ((30, 2), dtype('uint8'))
  """
  return _common.encoded(params, features, _values, cls=KSHParams, module="ksh", binary=True)
