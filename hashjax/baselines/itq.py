r"""Iterative quantization (ITQ; Gong & Lazebnik, CVPR 2011).

Centred features are projected onto the ``num_bits`` leading principal
directions, ``V = (X - mean) W``, and an orthogonal rotation ``R`` is learned
to minimise the quantisation loss :math:`\|B - V R\|_F^2` over codes
``B in {-1, +1}`` by alternating

* ``B = sgn(V R)`` (optimal codes for fixed ``R``), and
* ``R = U_A U_B^T`` from the SVD ``B^T V = U_B S U_A^T`` (orthogonal
  Procrustes: optimal rotation for fixed ``B``),

starting from a random orthogonal ``R`` (the orthogonal factor of a
Gaussian matrix drawn from the key). Each half-step cannot increase the loss,
so it decreases monotonically over iterations. ``num_bits`` cannot exceed
the feature dimension.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks
from hashjax import _encode
from hashjax.baselines import _common

Array = jax.Array

#: Alternations of ITQ run by :func:`fit` unless told otherwise (the paper's 50).
DEFAULT_NUM_ITERS = 50


class ITQParams(NamedTuple):
  """``mean[dim]``, PCA ``projection[dim, num_bits]`` and ``rotation[num_bits, num_bits]``."""
  mean: Array
  projection: Array
  rotation: Array


def _rotated(params: ITQParams, features: Array) -> Array:
  """``features[..., dim]`` projected and rotated: ``((x - mean) W) R``."""
  return _encode.matmul(_common.project(features, params.mean, params.projection), params.rotation)


def fit(features: Array, *, num_bits: int, key: Any,
        num_iters: int = DEFAULT_NUM_ITERS) -> ITQParams:
  r"""Learns PCA directions and an ITQ rotation on ``features``.

  .. math:: \min_{B \in \{\pm 1\}^{N \times b},\ R^\top R = I} \|B - (X - \mu) W R\|_F^2

  Args:
    features: ``[N, dim]`` finite training features, ``N >= 2``.
    num_bits: code length, ``1 <= num_bits <= dim``.
    key: a ``jax.random`` key for the initial rotation.
    num_iters: alternations of codes and rotation (``0`` keeps the random
      initial rotation).

  Returns:
    :class:`ITQParams` with ``mean[dim]``, ``projection[dim, num_bits]`` and
    ``rotation[num_bits, num_bits]``.

  >>> import jax, numpy as np
  >>> x = np.random.default_rng(0).normal(size=(100, 8)).astype(np.float32)
  >>> params = fit(x, num_bits=4, key=jax.random.key(0))
  >>> params.rotation.shape
  (4, 4)
  >>> bool(np.allclose(params.rotation.T @ params.rotation, np.eye(4), atol=1e-5))
  True
  """
  _common.check_fit_features(features, min_rows=2)
  num_bits = _common.check_pca_bits(num_bits, features.shape[1])
  _checks.check_host_key(key)
  num_iters = _checks.check_int("num_iters", num_iters, low=0)
  x, dtype = _common.host_features(features)
  mean, projection = _common.pca(x, num_bits)
  projected = (x - mean) @ projection
  # A Haar-random start: the Q of a Gaussian matrix's QR, its signs fixed by R's diagonal.
  q, r = np.linalg.qr(np.asarray(jax.random.normal(key, (num_bits, num_bits), dtype=dtype), np.float64))
  rotation = q * np.where(np.diag(r) < 0, -1.0, 1.0)
  for _ in range(num_iters):
    codes_pm = np.where(projected @ rotation > 0, 1.0, -1.0)
    u_b, _, u_a_t = np.linalg.svd(codes_pm.T @ projected)
    rotation = u_a_t.T @ u_b.T
  return ITQParams(*(jnp.asarray(a, dtype) for a in (mean, projection, rotation)))


def project(params: ITQParams, features: Array) -> Array:
  r"""The real values whose signs are the bits of :func:`encode` (``encode`` is ``binarize(project(...))``).

  .. math:: v(x) = R^\top W^\top (x - \mu)

  Args:
    params: :class:`ITQParams` from :func:`fit`.
    features: ``[..., dim]`` finite features, ``dim`` as in :func:`fit`.

  Returns:
    ``float[..., num_bits]``: bit ``j`` is 1 where value ``j`` is ``> 0``.

  >>> import jax, numpy as np
  >>> x = np.random.default_rng(0).normal(size=(40, 6)).astype(np.float32)
  >>> params = fit(x, num_bits=4, key=jax.random.key(0))
  >>> bool(np.array_equal(np.asarray(project(params, x)) > 0, np.asarray(encode(params, x)) == 1))
  True
  """
  return _common.encoded(params, features, _rotated, cls=ITQParams, module="itq", binary=False)


def encode(params: ITQParams, features: Array) -> Array:
  r"""Hashes ``features`` by the signs of their rotated principal components.

  .. math:: b(x) = [R^\top W^\top (x - \mu) > 0]

  Args:
    params: :class:`ITQParams` from :func:`fit`.
    features: ``[..., dim]`` finite features, ``dim`` as in :func:`fit`.

  Returns:
    ``uint8[..., num_bits]`` bits in ``{0, 1}``.

  >>> import jax, numpy as np
  >>> x = np.random.default_rng(0).normal(size=(100, 8)).astype(np.float32)
  >>> bits = encode(fit(x, num_bits=4, key=jax.random.key(0)), x)
  >>> bits.shape, bits.dtype
  ((100, 4), dtype('uint8'))
  """
  return _common.encoded(params, features, _rotated, cls=ITQParams, module="itq", binary=True)


def quantization_loss(params: ITQParams, features: Array) -> Array:
  r"""ITQ's objective on ``features``: squared distance of rotated projections to their signs.

  .. math:: Q(B, R) = \|B - V R\|_F^2, \quad V = (X - \mu) W, \quad B = \mathrm{sgn}(V R)

  Args:
    params: :class:`ITQParams` from :func:`fit`.
    features: ``[N, dim]`` finite features.

  Returns:
    A scalar: the loss summed over items and bits.

  >>> import jax, numpy as np
  >>> x = np.random.default_rng(0).normal(size=(100, 8)).astype(np.float32)
  >>> start = fit(x, num_bits=4, key=jax.random.key(0), num_iters=0)
  >>> done = fit(x, num_bits=4, key=jax.random.key(0))
  >>> bool(quantization_loss(done, x) <= quantization_loss(start, x))
  True
  """
  _common.check_encode(params, ITQParams, "itq", features)
  rotated = _rotated(params, jnp.asarray(features))
  codes_pm = jnp.where(rotated > 0, 1.0, -1.0).astype(rotated.dtype)
  return jnp.sum((codes_pm - rotated) ** 2)
