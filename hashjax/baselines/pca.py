r"""PCA hashing (PCAH): the signs of the top principal components.

Bits are the signs of the centred features projected onto the ``num_bits``
leading eigenvectors of the training covariance (the PCA baseline of Gong &
Lazebnik 2011 and Wang et al. 2010). Each direction's sign is fixed so that
its largest-magnitude entry is positive, which makes the codes independent of
the eigensolver. ``num_bits`` cannot exceed the feature dimension.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp

from hashjax import _checks
from hashjax.baselines import _common

Array = jax.Array


class PCAParams(NamedTuple):
  """Principal directions: ``mean[dim]`` and ``projection[dim, num_bits]`` (orthonormal columns)."""
  mean: Array
  projection: Array


def fit(features: Array, *, num_bits: int, key: Optional[Any] = None) -> PCAParams:
  r"""Finds the ``num_bits`` leading principal directions of ``features``.

  .. math:: \tfrac{1}{N} (X - \mu)^\top (X - \mu) = U \Lambda U^\top, \qquad
     W = U_{:, 1:b} \ (\lambda_1 \ge \dots \ge \lambda_b)

  Args:
    features: ``[N, dim]`` finite training features, ``N >= 2``.
    num_bits: code length, ``1 <= num_bits <= dim``.
    key: unused (PCA is deterministic); accepted so every baseline has the
      same signature.

  Returns:
    :class:`PCAParams` with ``mean[dim]`` and ``projection[dim, num_bits]``.

  >>> import numpy as np
  >>> x = np.random.default_rng(0).normal(size=(100, 8)).astype(np.float32)
  >>> params = fit(x, num_bits=4)
  >>> params.projection.shape
  (8, 4)
  """
  _common.check_fit_features(features, min_rows=2)
  num_bits = _common.check_pca_bits(num_bits, features.shape[1])
  if key is not None:
    _checks.check_host_key(key)
  x, dtype = _common.host_features(features)
  mean, projection = _common.pca(x, num_bits)
  return PCAParams(mean=jnp.asarray(mean, dtype), projection=jnp.asarray(projection, dtype))


def project(params: PCAParams, features: Array) -> Array:
  r"""The real values whose signs are the bits of :func:`encode` (``encode`` is ``binarize(project(...))``).

  .. math:: v_j(x) = (x - \mu)^\top u_j

  Args:
    params: :class:`PCAParams` from :func:`fit`.
    features: ``[..., dim]`` finite features, ``dim`` as in :func:`fit`.

  Returns:
    ``float[..., num_bits]``: bit ``j`` is 1 where value ``j`` is ``> 0``.

  >>> import jax, numpy as np
  >>> x = np.random.default_rng(0).normal(size=(40, 6)).astype(np.float32)
  >>> params = fit(x, num_bits=4, key=jax.random.key(0))
  >>> bool(np.array_equal(np.asarray(project(params, x)) > 0, np.asarray(encode(params, x)) == 1))
  True
  """
  return _common.encoded(params, features, _common.centred_projection, cls=PCAParams, module="pca", binary=False)


def encode(params: PCAParams, features: Array) -> Array:
  r"""Hashes ``features`` by the signs of their principal components.

  .. math:: b_j(x) = [(x - \mu)^\top u_j > 0]

  Args:
    params: :class:`PCAParams` from :func:`fit`.
    features: ``[..., dim]`` finite features, ``dim`` as in :func:`fit`.

  Returns:
    ``uint8[..., num_bits]`` bits in ``{0, 1}``.

  >>> import numpy as np
  >>> x = np.array([[-2.0, 0.0], [-1.0, 0.1], [1.0, -0.1], [2.0, 0.0]])
  >>> encode(fit(x, num_bits=1), x).ravel().tolist()
  [0, 0, 1, 1]
  """
  return _common.encoded(params, features, _common.centred_projection, cls=PCAParams, module="pca", binary=True)
