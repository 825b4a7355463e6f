r"""Spectral hashing (SH; Weiss, Torralba & Fergus, NIPS 2008).

The algorithm of the paper (and of its reference ``trainSH``/``compressSH``):

1. PCA: centre the features and project them onto the ``p = min(num_bits, dim)``
   leading principal directions;
2. fit a uniform distribution on each direction: the range ``[a_i, b_i]`` of
   the training projections;
3. the 1-D eigenfunctions of the weighted Laplacian for a uniform density on
   ``[a, b]`` are :math:`\Phi_k(x) = \sin(\pi/2 + k\pi (x - a)/(b - a))` with
   eigenvalues :math:`\lambda_k = 1 - e^{-\frac{\epsilon^2}{2} |k\pi/(b - a)|^2}`,
   which increase with :math:`k / (b - a)`; over all directions ``i`` and modes
   ``k >= 1`` keep the ``num_bits`` smallest eigenvalues (ties: lower
   direction first, then lower ``k``);
4. bit ``j`` of ``x`` is the sign of its eigenfunction:
   :math:`[\sin(\pi/2 + k_j \pi (y_{i_j} - a_{i_j}) / (b_{i_j} - a_{i_j})) > 0]`.

A direction whose training range is zero has infinite frequencies and is
only picked when every direction is degenerate; its bits are then constant 1.
Unlike PCA and ITQ, ``num_bits`` may exceed ``dim`` (several modes per
direction).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks
from hashjax.baselines import _common

Array = jax.Array


class SpectralParams(NamedTuple):
  """Spectral hashing parameters.

  ``mean[dim]``, PCA ``projection[dim, p]``, training range ``minimum[p]`` and
  ``maximum[p]`` of each projection, and for each bit the PCA ``direction``
  (``int32[num_bits]``) and ``mode`` ``k >= 1`` (``int32[num_bits]``) of its
  eigenfunction, in increasing eigenvalue order.
  """
  mean: Array
  projection: Array
  minimum: Array
  maximum: Array
  direction: Array
  mode: Array


def fit(features: Array, *, num_bits: int, key: Optional[Any] = None) -> SpectralParams:
  r"""Fits spectral hashing: PCA, per-direction ranges, and the ``num_bits`` smallest-eigenvalue modes.

  .. math:: \{(i_j, k_j)\}_{j=1}^{b} = \operatorname{arg\,smallest}_b \
     \Big\{ 1 - e^{-\frac{\epsilon^2}{2} \big(\frac{k \pi}{b_i - a_i}\big)^2} :
     i \le \min(b, d),\ k \ge 1 \Big\}

  Args:
    features: ``[N, dim]`` finite training features, ``N >= 2``.
    num_bits: code length ``b >= 1`` (may exceed ``dim``).
    key: unused (SH is deterministic); accepted so every baseline has the
      same signature.

  Returns:
    :class:`SpectralParams`.

  >>> import numpy as np
  >>> # Range 4 along the first axis, 1 along the second.
  >>> x = np.array([[-2.0, 0.0], [2.0, 0.0], [0.0, -0.5], [0.0, 0.5]])
  >>> params = fit(x, num_bits=5)
  >>> params.direction.tolist(), params.mode.tolist()
  ([0, 0, 0, 0, 1], [1, 2, 3, 4, 1])
  """
  _common.check_fit_features(features, min_rows=2)
  num_bits = _checks.check_num_bits(num_bits)
  if key is not None:
    _checks.check_host_key(key)
  x, dtype = _common.host_features(features)
  num_dirs = min(num_bits, x.shape[1])
  mean, projection = _common.pca(x, num_dirs)
  projected = (x - mean) @ projection
  minimum = projected.min(axis=0)
  maximum = projected.max(axis=0)
  spread = maximum - minimum
  # Eigenvalues grow with k / (b - a); k <= num_bits per direction suffices,
  # since mode num_bits + 1 of a direction ranks after its first num_bits.
  k = np.arange(1, num_bits + 1, dtype=np.float64)
  with np.errstate(divide="ignore"):
    freq = np.where(spread[:, None] > 0, k[None, :] / np.where(spread > 0, spread, 1)[:, None], np.inf)
  order = np.argsort(freq.ravel(), kind="stable")[:num_bits]  # row-major: direction, then k
  direction = jnp.asarray(order // num_bits, jnp.int32)
  mode = jnp.asarray(order % num_bits + 1, jnp.int32)
  mean, projection, minimum, maximum = (jnp.asarray(a, dtype) for a in (mean, projection, minimum, maximum))
  return SpectralParams(mean, projection, minimum, maximum, direction, mode)


def _eigenfunctions(params: SpectralParams, features: Array) -> Array:
  projected = _common.project(features, params.mean, params.projection[:, params.direction])
  low = params.minimum[params.direction]
  spread = params.maximum[params.direction] - low
  position = jnp.where(spread > 0, (projected - low) / jnp.where(spread > 0, spread, 1), 0)
  phase = jnp.pi / 2 + params.mode.astype(position.dtype) * jnp.pi * position
  return jnp.sin(phase)


def project(params: SpectralParams, features: Array) -> Array:
  r"""The eigenfunction values whose signs are the bits of :func:`encode` (``binarize(project(...))``).

  .. math:: v_j(x) = \sin\Big(\frac{\pi}{2} + k_j \pi \frac{u_{i_j}^\top (x - \mu) - a_{i_j}}{b_{i_j} - a_{i_j}}\Big)

  Args:
    params: :class:`SpectralParams` from :func:`fit`.
    features: ``[..., dim]`` finite features, ``dim`` as in :func:`fit`.

  Returns:
    ``float[..., num_bits]`` in ``[-1, 1]``: bit ``j`` is 1 where value ``j`` is ``> 0``.

  >>> import numpy as np
  >>> x = np.array([[-2.0, 0.0], [2.0, 0.0], [0.0, -0.5], [0.0, 0.5]])
  >>> np.round(np.asarray(project(fit(x, num_bits=1), np.array([[-2.0, 0.0], [0.0, 0.0]]))), 3).tolist()
  [[1.0], [0.0]]
  """
  return _common.encoded(params, features, _eigenfunctions, cls=SpectralParams, module="spectral", binary=False)


def encode(params: SpectralParams, features: Array) -> Array:
  r"""Hashes ``features`` by the signs of their selected eigenfunctions.

  .. math:: b_j(x) = \Big[\sin\Big(\frac{\pi}{2} + k_j \pi
     \frac{u_{i_j}^\top (x - \mu) - a_{i_j}}{b_{i_j} - a_{i_j}}\Big) > 0\Big]

  Args:
    params: :class:`SpectralParams` from :func:`fit`.
    features: ``[..., dim]`` finite features, ``dim`` as in :func:`fit`.

  Returns:
    ``uint8[..., num_bits]`` bits in ``{0, 1}``.

  >>> import numpy as np
  >>> x = np.array([[-2.0, 0.0], [2.0, 0.0], [0.0, -0.5], [0.0, 0.5]])
  >>> params = fit(x, num_bits=2)
  >>> # mode 1 splits the first axis at its midpoint, mode 2 at its quartiles.
  >>> encode(params, np.array([[-1.5, 0.0], [-0.5, 0.0], [0.5, 0.0], [1.5, 0.0]])).tolist()
  [[1, 1], [1, 0], [0, 0], [0, 1]]
  """
  return _common.encoded(params, features, _eigenfunctions, cls=SpectralParams, module="spectral", binary=True)
