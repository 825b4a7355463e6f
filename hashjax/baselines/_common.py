"""Shared pieces of the unsupervised baselines: input checks and PCA.

Every baseline centres features by the training mean and (except LSH)
projects them onto principal directions. Principal directions are the
eigenvectors of the training covariance in decreasing eigenvalue order, each
with the sign that makes its largest-magnitude entry positive (the convention
of ``sklearn.utils.extmath.svd_flip``), so codes do not depend on the sign an
eigensolver happens to return.

Every ``fit`` runs on the host in float64 (NumPy), so that its params, and the
codes built on them, do not depend on the thread count or the CPU; every
``encode`` is jax and can be jitted.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks

Array = jax.Array


def check_fit_features(features: Any, *, min_rows: int = 1, name: str = "features") -> None:
  """Training ``features[N, dim]``: real, finite, ``N >= min_rows``, ``dim >= 1``."""
  _checks.check_real(name, features, shape_doc="[num_items, dim]")
  if features.ndim != 2:
    raise ValueError(f"{name}: expected a 2-D array [num_items, dim], got {_checks.desc(features)}")
  if features.shape[1] == 0:
    raise ValueError(f"{name}: expected at least one feature column, got shape {tuple(features.shape)}")
  if features.shape[0] < min_rows:
    what = "training row" if min_rows == 1 else f"{min_rows} training rows"
    raise ValueError(f"{name}: expected at least {what}, got shape {tuple(features.shape)}")


def check_encode_features(features: Any, dim: int, *, name: str = "features") -> None:
  """Features to encode ``[..., dim]``: real, finite, last axis of width ``dim``."""
  _checks.check_real(name, features, shape_doc=f"[..., {dim}]", min_ndim=1)
  if features.shape[-1] != dim:
    raise ValueError(
        f"{name}: expected {dim} feature columns (the width the params were fit on), "
        f"got shape {tuple(features.shape)}")


def check_pca_bits(num_bits: Any, dim: int) -> int:
  """``num_bits`` for methods that keep ``num_bits`` principal directions."""
  num_bits = _checks.check_num_bits(num_bits)
  if num_bits > dim:
    raise ValueError(
        f"num_bits: this method projects onto num_bits principal directions, so it needs "
        f"num_bits <= feature dim {dim}, got {num_bits} (use LSH or spectral hashing for longer codes)")
  return num_bits


def check_params(params: Any, cls: type, module: str, *, name: str = "params") -> None:
  if not isinstance(params, cls):
    raise ValueError(
        f"{name}: expected {cls.__name__} from hashjax.baselines.{module}.fit, got {type(params).__name__}")


def host_features(features: Any, *, name: str = "features") -> tuple:
  """``(features as float64 numpy, the params dtype)`` for a fit, which runs on the host.

  A fit computes in float64 with NumPy so that its result, and the codes built
  on it, are the same however many threads or whichever CPU compute it: in
  float32 the alternation of ITQ amplifies rounding differences of the
  multithreaded matrix products into different codes. The params come back in
  the features' float dtype (at least float32; float64 only when jax's x64 is on).
  """
  if not _checks.is_concrete(features):
    raise ValueError(f"{name}: a baseline's fit runs on the host in float64 and needs a concrete array, got a "
                     f"traced one; call fit outside jax.jit (encode can be jitted)")
  dtype = np.dtype(features.dtype)
  dtype = jax.dtypes.canonicalize_dtype(np.promote_types(dtype, np.float32) if dtype.kind == "f" else np.float32)
  return np.asarray(features, np.float64), dtype


def pca(features: np.ndarray, num_dirs: int) -> tuple:
  r"""``(mean[dim], projection[dim, num_dirs])`` in float64: the training mean and top principal directions.

  .. math:: \tfrac{1}{N} (X - \mu)^\top (X - \mu) = U \Lambda U^\top, \quad W = U_{:, 1:p}

  The directions are covariance eigenvectors in decreasing eigenvalue order,
  each signed so that its largest-magnitude entry is positive.
  """
  mean = features.mean(axis=0)
  centred = features - mean
  _, vecs = np.linalg.eigh(centred.T @ centred / centred.shape[0])  # ascending eigenvalues
  vecs = vecs[:, ::-1][:, :num_dirs]
  peak = np.argmax(np.abs(vecs), axis=0)
  return mean, vecs * np.sign(vecs[peak, np.arange(num_dirs)])


def project(features: Array, mean: Array, projection: Array) -> Array:
  """``(features - mean) @ projection`` at full precision."""
  x = features.astype(mean.dtype) - mean
  return jnp.matmul(x, projection, precision=jax.lax.Precision.HIGHEST)
