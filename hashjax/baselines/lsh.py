r"""Locality-sensitive hashing with random hyperplanes (Charikar 2002).

Each bit is the side of a random hyperplane through the training mean:
``bit_j = [(x - mean) . w_j > 0]`` with ``w_j ~ N(0, I)`` drawn from the key.
For two centred vectors at angle :math:`\theta` a bit differs with
probability :math:`\theta / \pi`, so the Hamming distance estimates the angle
(Charikar 2002; Andoni & Indyk 2008). The training data only supply the mean
and the width.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from hashjax import _checks
from hashjax.baselines import _common

Array = jax.Array


class LSHParams(NamedTuple):
  """Random hyperplanes: ``mean[dim]`` and ``projection[dim, num_bits]``."""
  mean: Array
  projection: Array


def fit(features: Array, *, num_bits: int, key: Any) -> LSHParams:
  r"""Draws ``num_bits`` random hyperplanes through the mean of ``features``.

  .. math:: \mu = \tfrac{1}{N} \sum_i x_i, \qquad W = \mathrm{normal}(key, [d, b])

  ``W`` is exactly ``jax.random.normal(key, (dim, num_bits), dtype)`` where
  ``dtype`` is the float dtype of ``features`` (integers become float32).

  Args:
    features: ``[N, dim]`` finite training features (integer or float).
    num_bits: code length ``b >= 1`` (may exceed ``dim``).
    key: a ``jax.random`` key; the same key gives the same hyperplanes.

  Returns:
    :class:`LSHParams` with ``mean[dim]`` and ``projection[dim, num_bits]``.

  >>> import jax, numpy as np
  >>> x = np.random.default_rng(0).normal(size=(100, 8)).astype(np.float32)
  >>> params = fit(x, num_bits=16, key=jax.random.key(0))
  >>> params.projection.shape
  (8, 16)
  """
  _common.check_fit_features(features)
  num_bits = _checks.check_num_bits(num_bits)
  _checks.check_host_key(key)
  x, dtype = _common.host_features(features)
  projection = jax.random.normal(key, (x.shape[1], num_bits), dtype=dtype)
  return LSHParams(mean=jnp.asarray(x.mean(axis=0), dtype), projection=projection)


def project(params: LSHParams, features: Array) -> Array:
  r"""The real values whose signs are the bits of :func:`encode` (``encode`` is ``binarize(project(...))``).

  .. math:: v(x) = W^\top (x - \mu)

  Args:
    params: :class:`LSHParams` from :func:`fit`.
    features: ``[..., dim]`` finite features, ``dim`` as in :func:`fit`.

  Returns:
    ``float[..., num_bits]``: bit ``j`` is 1 where value ``j`` is ``> 0``.

  >>> import jax, numpy as np
  >>> x = np.random.default_rng(0).normal(size=(40, 6)).astype(np.float32)
  >>> params = fit(x, num_bits=4, key=jax.random.key(0))
  >>> bool(np.array_equal(np.asarray(project(params, x)) > 0, np.asarray(encode(params, x)) == 1))
  True
  """
  return _common.encoded(params, features, _common.centred_projection, cls=LSHParams, module="lsh", binary=False)


def encode(params: LSHParams, features: Array) -> Array:
  r"""Hashes ``features`` by the side of each hyperplane.

  .. math:: b_j(x) = [(x - \mu)^\top w_j > 0]

  Args:
    params: :class:`LSHParams` from :func:`fit`.
    features: ``[..., dim]`` finite features, ``dim`` as in :func:`fit`.

  Returns:
    ``uint8[..., num_bits]`` bits in ``{0, 1}``.

  >>> import jax, numpy as np
  >>> x = np.random.default_rng(0).normal(size=(100, 8)).astype(np.float32)
  >>> params = fit(x, num_bits=16, key=jax.random.key(0))
  >>> bits = encode(params, x[:3])
  >>> bits.shape, bits.dtype
  ((3, 16), dtype('uint8'))
  """
  return _common.encoded(params, features, _common.centred_projection, cls=LSHParams, module="lsh", binary=True)
