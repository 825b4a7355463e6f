r"""Sequential projection learning for hashing (SPLH; Wang, Kumar & Chang, ICML 2010), semi-supervised.

A labelled subset ``X_l`` (``l`` rows) of the centred training features ``X``
gives the pairwise label matrix :math:`S_{ij} = +1` (same class) or ``-1``
(different classes). Bit ``k`` is the sign of the projection onto the leading
eigenvector of the adjusted covariance

.. math:: M_k = \tfrac{1}{l^2} X_l^\top S_k X_l + \tfrac{\eta}{n} X_k^\top X_k, \qquad
   w_k = \operatorname{arg\,max}_{\|w\| = 1} w^\top M_k w,

after which the pairs that projection gets wrong weigh more for the next bit
(boosting-like): with :math:`\tilde S_k = X_l w_k w_k^\top X_l^\top / \sigma_k^2`,
:math:`S_{k+1} = S_k - \alpha\, T(\tilde S_k, S_k)`, where
:math:`T(\tilde S, S)_{ij} = \tilde S_{ij}` when :math:`\tilde S_{ij} S_{ij} < 0` and 0
otherwise, times :math:`\beta` (``similar_weight``) for a same-class pair;
and the unsupervised term moves to the residue
:math:`X_{k+1} = X_k - X_k w_k w_k^\top` (features rows, as in the authors' code).
The rows of ``X_l`` keep their full projections. The scalings ``1/l^2`` (the
supervised term sums over the ``l^2`` labelled pairs) and ``1/n`` make ``eta``
independent of the set sizes.

Departures from the paper:

- A same-class pair a projection splits gains :math:`\beta` times the weight
  of a pair of two classes it keeps together (the paper: :math:`\beta = 1`).
  With ten classes, nine pairs in ten are of two classes and any one bit keeps
  about half of them together, which Hamming ranking can afford, while every
  split same-class pair lowers a relevant item's rank. On the MNIST-10k
  validation splits (32 bits, the mean of three) :math:`\beta = 2` with
  :math:`\alpha = 2.5` scored 0.641 AP_T, against 0.615 for the paper's rule
  at the best :math:`\alpha \le 3, \eta` of the same grid (docs/results/supervised.md).
- :math:`\tilde S_k` is divided by the mean squared projection
  :math:`\sigma_k^2 = \tfrac{1}{l}\|X_l w_k\|^2` of the labelled items, so
  that it is on the scale of the labels :math:`\pm 1` and ``alpha`` does not
  depend on the units of the features (unnormalised, the update is negligible
  for small features, e.g. RBF responses, and every bit repeats the first
  direction, while for large features it swamps the labels).

Besides the paper's linear projections of the raw features
(``num_anchors=0``), the same algorithm runs on the centred RBF responses to
``num_anchors`` anchors (:mod:`hashjax.baselines._anchors`). ``num_bits`` is at
most the width of the space projected (``dim``, or ``num_anchors``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from hashjax import _checks
from hashjax import _encode
from hashjax.baselines import _anchors
from hashjax.baselines import _common

Array = jax.Array


class SPLHParams(NamedTuple):
  """``mean[dim]``, centred ``anchors[A, dim]`` (``A = 0``: raw features), RBF width ``scale[]``, mean
  responses ``offset[A]`` and ``projection[width, num_bits]`` (``width = A``, or ``dim`` when ``A = 0``)."""
  mean: Array
  anchors: Array
  scale: Array
  offset: Array
  projection: Array


def _mapped(params: SPLHParams, features: Array) -> Array:
  """The space projected: centred features, or their centred RBF responses."""
  x = features.astype(params.mean.dtype) - params.mean
  if params.anchors.shape[0] == 0:
    return x
  return _anchors.rbf(params.anchors, params.scale, x, jnp) - params.offset


def _values(params: SPLHParams, features: Array) -> Array:
  return _encode.matmul(_mapped(params, features), params.projection)


def _sequence(z: np.ndarray, labelled: np.ndarray, labels: np.ndarray, num_bits: int, eta: float,
              alpha: float, similar_weight: float) -> np.ndarray:
  r"""``projection[width, num_bits]``: the sequentially learned directions for mapped features ``z[n, width]``.

  The ``l x l`` pair matrix is never formed. An update only moves :math:`S_{ij}` away from 0, so :math:`S_k` keeps
  the signs of :math:`S_0 = 2 Y Y^\top - 1 1^\top` (``Y`` the labelled items' one-hot classes), and the pairs a
  projection ``p`` gets wrong are, where :math:`p_i p_j \ne 0`, :math:`\tfrac12 (1 + u u^\top) - Y Y^\top \circ
  u u^\top` with :math:`u = \operatorname{sign}(p)`; the correction, with same-class pairs weighted by
  :math:`\beta`, is then :math:`T = \tfrac12 (p p^\top + a a^\top) + \tfrac{\beta - 1}{2} (D_p Y)(D_p Y)^\top
  - \tfrac{\beta + 1}{2} (D_a Y)(D_a Y)^\top` with :math:`a = |p|`, of rank at most ``2C`` (``p`` and ``a``
  are the row sums of :math:`D_p Y` and :math:`D_a Y`), and :math:`X_l^\top T X_l` costs
  :math:`O(l \cdot \text{width} + C \cdot \text{width}^2)` from the class sums instead of
  :math:`O(l^2 \cdot \text{width})`.
  """
  order = labelled[np.argsort(labels[labelled], kind="stable")]  # the labelled items grouped by class
  zl = z[order]
  firsts = np.flatnonzero(np.r_[True, labels[order][1:] != labels[order][:-1]])  # each class's first row
  zy, zs = np.add.reduceat(zl, firsts, axis=0), zl.sum(0)  # [C, width]: the class sums
  supervised = 2.0 * zy.T @ zy - np.outer(zs, zs)
  cov = z.T @ z
  width = z.shape[1]
  projection = np.zeros((width, num_bits))
  for k in range(num_bits):
    m = supervised / zl.shape[0] ** 2 + eta * cov / z.shape[0]
    w = scipy.linalg.eigh(m, subset_by_index=[width - 1, width - 1])[1][:, 0]
    w = w * (1.0 if w[np.argmax(np.abs(w))] > 0 else -1.0)
    projection[:, k] = w
    p = zl @ w
    a = np.abs(p)
    zp, za = zl.T @ p, zl.T @ a
    zyp, zya = (np.add.reduceat(zl * v[:, None], firsts, axis=0) for v in (p, a))  # [C, width]
    # X_l^T T(S~_k, S_k) X_l, times sigma_k^2 (the same-class pairs' part weighed by similar_weight)
    wrong = (0.5 * (np.outer(zp, zp) + np.outer(za, za)) + 0.5 * (similar_weight - 1.0) * zyp.T @ zyp
             - 0.5 * (similar_weight + 1.0) * zya.T @ zya)
    supervised -= alpha / max(np.mean(p * p), np.finfo(float).tiny) * wrong
    cw = cov @ w
    cov = cov - np.outer(w, cw) - np.outer(cw, w) + (w @ cw) * np.outer(w, w)
  return projection


def fit(features: Array, *, num_bits: int, key: Any, labels: Any = None, num_labelled: int | None = None,
        num_anchors: int = 0, eta: float = 0.01, alpha: float = 2.5, similar_weight: float = 2.0) -> SPLHParams:
  r"""Learns SPLH projections from ``features`` and the labels of a random subset of them.

  .. math:: w_k = \operatorname{arg\,max}_{\|w\| = 1} w^\top \Big(\tfrac{1}{l^2} X_l^\top S_k X_l
     + \tfrac{\eta}{n} X_k^\top X_k\Big) w

  Args:
    features: ``[N, dim]`` finite training features.
    num_bits: code length, at most the width projected (``num_anchors``, or ``dim`` when it is 0).
    key: a ``jax.random`` key: the labelled subset and the anchors.
    labels: ``int[N]`` class labels (required), at least two classes; only the ``num_labelled`` drawn
      items' labels are used, the rest of the items count as unlabelled.
    num_labelled: size ``l >= 2`` of the labelled subset drawn at random; ``None`` (or ``l >= N``): every item.
    num_anchors: anchors ``A <= N`` of the RBF features, or 0 for the paper's linear projections.
    eta: weight ``>= 0`` of the unsupervised (variance) term.
    alpha: step ``>= 0`` of the pairwise label update.
    similar_weight: weight ``>= 0`` of a same-class pair in the update, relative to a pair of two classes
      (1: the paper's rule).

  Returns:
    :class:`SPLHParams`.

  >>> import jax, numpy as np
  >>> rng = np.random.default_rng(0)
  >>> y = np.repeat(np.arange(3), 20)
  >>> x = rng.normal(size=(60, 5)) + 4 * np.eye(5)[y]
  >>> params = fit(x, num_bits=4, key=jax.random.key(0), labels=y, num_anchors=0)
  >>> params.projection.shape, params.anchors.shape
  ((5, 4), (0, 5))
  """
  _common.check_fit_features(features, min_rows=2)
  n = features.shape[0]
  labels = _checks.check_class_labels(labels, n)
  num_anchors = _checks.check_int_at_most("num_anchors", num_anchors, n, low=0, what=f"the {n} training points")
  width = num_anchors or features.shape[1]
  num_bits = _checks.check_int_at_most("num_bits", num_bits, width, what=f"the width projected, {width}")
  rng = _checks.check_key_rng(key)
  if num_labelled is not None:
    num_labelled = _checks.check_int("num_labelled", num_labelled, low=2)
  eta = _checks.check_number("eta", eta, low=0)
  alpha = _checks.check_number("alpha", alpha, low=0)
  similar_weight = _checks.check_number("similar_weight", similar_weight, low=0)
  x, dtype = _common.host_features(features)
  mean = x.mean(0)
  x = x - mean
  labelled = np.sort(rng.choice(x.shape[0], min(num_labelled or x.shape[0], x.shape[0]), replace=False))
  _common.check_subset_classes("num_labelled", labels[labelled])
  anchors, scale, offset = np.zeros((0, x.shape[1])), 1.0, np.zeros(0)
  z = x
  if num_anchors:
    anchors, scale = _anchors.fit(x, num_anchors, rng, dtype=dtype)
    phi = _anchors.rbf(anchors, scale, x)
    offset = phi.mean(0)
    z = phi - offset
  projection = _sequence(z, labelled, labels, num_bits, eta, alpha, similar_weight)
  return SPLHParams(*(jnp.asarray(a, dtype) for a in (mean, anchors, scale, offset, projection)))


def project(params: SPLHParams, features: Array) -> Array:
  r"""The projections whose signs are the bits of :func:`encode` (``encode`` is ``binarize(project(...))``).

  .. math:: v(x) = W^\top z(x), \quad z(x) = x - \mu \text{ or } \phi(x - \mu) - m

  Args:
    params: :class:`SPLHParams` from :func:`fit`.
    features: ``[..., dim]`` finite features, ``dim`` as in :func:`fit`.

  Returns:
    ``float[..., num_bits]``: bit ``k`` is 1 where value ``k`` is ``> 0``.

  >>> import jax, numpy as np
  >>> y = np.repeat(np.arange(2), 15)
  >>> x = np.random.default_rng(0).normal(size=(30, 4)) + 3 * np.eye(4)[y]
  >>> params = fit(x, num_bits=3, key=jax.random.key(0), labels=y, num_anchors=10)
  >>> bool(np.array_equal(np.asarray(project(params, x)) > 0, np.asarray(encode(params, x)) == 1))
  True
  """
  return _common.encoded(params, features, _values, cls=SPLHParams, module="splh", binary=False)


def encode(params: SPLHParams, features: Array) -> Array:
  r"""Hashes ``features`` by the signs of their learned projections.

  .. math:: b_k(x) = [w_k^\top z(x) > 0]

  Args:
    params: :class:`SPLHParams` from :func:`fit`.
    features: ``[..., dim]`` finite features, ``dim`` as in :func:`fit`.

  Returns:
    ``uint8[..., num_bits]`` bits in ``{0, 1}``.

  >>> import jax, numpy as np
  >>> y = np.repeat(np.arange(2), 15)
  >>> x = np.random.default_rng(0).normal(size=(30, 4)) + 3 * np.eye(4)[y]
  >>> bits = encode(fit(x, num_bits=3, key=jax.random.key(0), labels=y, num_anchors=0), x)
  >>> bits.shape, bits.dtype
  ((30, 3), dtype('uint8'))
  """
  return _common.encoded(params, features, _values, cls=SPLHParams, module="splh", binary=True)
