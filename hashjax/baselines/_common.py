"""Shared pieces of the unsupervised baselines: input checks and PCA.

Every baseline centres features by the training mean and (except LSH)
projects them onto principal directions. Principal directions are the
eigenvectors of the training covariance in decreasing eigenvalue order, each
with the sign that makes its largest-magnitude entry positive (the convention
of ``sklearn.utils.extmath.svd_flip``), so codes do not depend on the sign an
eigensolver happens to return.
"""

from __future__ import annotations

from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks

Array = jax.Array


def _desc(x: Any) -> str:
  return f"dtype {np.dtype(x.dtype).name} and shape {tuple(x.shape)}"


def _check_real(name: str, x: Any) -> None:
  if not hasattr(x, "dtype") or not hasattr(x, "shape"):
    raise ValueError(f"{name}: expected a real-valued array, got {type(x).__name__}")
  dt = x.dtype
  if dt == np.bool_ or not (jnp.issubdtype(dt, jnp.integer) or jnp.issubdtype(dt, jnp.floating)):
    raise ValueError(f"{name}: expected a real-valued (integer or floating) array, got {_desc(x)}")


def check_fit_features(features: Any, *, min_rows: int = 1, name: str = "features") -> None:
  """Training ``features[N, dim]``: real, finite, ``N >= min_rows``, ``dim >= 1``."""
  _check_real(name, features)
  if features.ndim != 2:
    raise ValueError(f"{name}: expected a 2-D array [num_items, dim], got {_desc(features)}")
  if features.shape[1] == 0:
    raise ValueError(f"{name}: expected at least one feature column, got shape {tuple(features.shape)}")
  if features.shape[0] < min_rows:
    what = "training row" if min_rows == 1 else f"{min_rows} training rows"
    raise ValueError(f"{name}: expected at least {what}, got shape {tuple(features.shape)}")
  _checks.check_finite(name, features)


def check_encode_features(features: Any, dim: int, *, name: str = "features") -> None:
  """Features to encode ``[..., dim]``: real, finite, last axis of width ``dim``."""
  _check_real(name, features)
  if features.ndim < 1:
    raise ValueError(f"{name}: expected an array [..., {dim}], got {_desc(features)}")
  if features.shape[-1] != dim:
    raise ValueError(
        f"{name}: expected {dim} feature columns (the width the params were fit on), "
        f"got shape {tuple(features.shape)}")
  _checks.check_finite(name, features)


def check_pca_bits(num_bits: Any, dim: int) -> int:
  """``num_bits`` for methods that keep ``num_bits`` principal directions."""
  num_bits = _checks.check_num_bits(num_bits)
  if num_bits > dim:
    raise ValueError(
        f"num_bits: this method projects onto num_bits principal directions, so it needs "
        f"num_bits <= feature dim {dim}, got {num_bits} (use LSH or spectral hashing for longer codes)")
  return num_bits


def check_num_iters(num_iters: Any, *, name: str = "num_iters") -> int:
  if isinstance(num_iters, (bool, np.bool_)) or not isinstance(num_iters, (int, np.integer)):
    raise ValueError(f"{name}: expected a non-negative Python int, got {num_iters!r}")
  if num_iters < 0:
    raise ValueError(f"{name}: expected a non-negative int, got {num_iters}")
  return int(num_iters)


def check_params(params: Any, cls: type, module: str, *, name: str = "params") -> None:
  if not isinstance(params, cls):
    raise ValueError(
        f"{name}: expected {cls.__name__} from hashjax.baselines.{module}.fit, got {type(params).__name__}")


def as_float(x: Any, dtype: Optional[Any] = None) -> Array:
  """Float view of ``x``: at least float32, float64 kept (when x64 is on)."""
  x = jnp.asarray(x)
  if dtype is None:
    dtype = jnp.promote_types(x.dtype, jnp.float32) if jnp.issubdtype(x.dtype, jnp.floating) else jnp.float32
  return x.astype(dtype)


def principal_directions(centred: Array, num_dirs: int) -> Array:
  """Top ``num_dirs`` covariance eigenvectors of ``centred[N, dim]`` as ``[dim, num_dirs]``."""
  cov = jnp.matmul(centred.T, centred, precision=jax.lax.Precision.HIGHEST) / centred.shape[0]
  _, vecs = jnp.linalg.eigh(cov)  # ascending eigenvalues
  vecs = vecs[:, ::-1][:, :num_dirs]
  peak = jnp.argmax(jnp.abs(vecs), axis=0)
  signs = jnp.sign(vecs[peak, jnp.arange(num_dirs)])
  return vecs * signs


def project(features: Array, mean: Array, projection: Array) -> Array:
  """``(features - mean) @ projection`` at full precision."""
  x = features.astype(mean.dtype) - mean
  return jnp.matmul(x, projection, precision=jax.lax.Precision.HIGHEST)
