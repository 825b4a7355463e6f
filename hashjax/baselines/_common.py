"""Shared pieces of the unsupervised baselines: input checks and PCA.

Every baseline centres features by the training mean and (except LSH)
projects them onto principal directions. Principal directions are the
eigenvectors of the training covariance in decreasing eigenvalue order, each
with the sign that makes its largest-magnitude entry positive (the convention
of ``sklearn.utils.extmath.svd_flip``), so codes do not depend on the sign an
eigensolver happens to return.
"""

from __future__ import annotations

import functools
from typing import Any, Optional

import jax
import jax.numpy as jnp

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


def as_float(x: Any, dtype: Optional[Any] = None) -> Array:
  """Float view of ``x``: at least float32, float64 kept (when x64 is on)."""
  x = jnp.asarray(x)
  if dtype is None:
    dtype = jnp.promote_types(x.dtype, jnp.float32) if jnp.issubdtype(x.dtype, jnp.floating) else jnp.float32
  return x.astype(dtype)


@functools.partial(jax.jit, static_argnames="num_dirs")
def pca(features: Array, num_dirs: int) -> tuple:
  """``(mean[dim], projection[dim, num_dirs])``: the training mean and the top principal directions.

  Compiled as one program: its rounding, and so the codes of every baseline
  built on it, is then the same however the caller runs ``fit`` (eager
  dispatch computes the centring with a different summation and flips a few
  codes).
  """
  mean = jnp.mean(features, axis=0)
  return mean, principal_directions(features - mean, num_dirs)


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
