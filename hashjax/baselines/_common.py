"""Shared pieces of the unsupervised baselines: input checks, PCA and the blocked evaluation of encode.

Every baseline centres features by the training mean and (except LSH)
projects them onto principal directions. Principal directions are the
eigenvectors of the training covariance in decreasing eigenvalue order, each
with the sign that makes its largest-magnitude entry positive (the convention
of ``sklearn.utils.extmath.svd_flip``), so codes do not depend on the sign an
eigensolver happens to return.

Every ``fit`` runs on the host in float64 (NumPy), and :func:`hashjax.baselines.fit`
runs it with one BLAS thread (:func:`single_threaded_blas`), so that its params,
and the codes built on them, do not depend on the thread count, nor, except
KSH's, on the CPU: KSH's L-BFGS refinement can turn the float64 rounding of another
BLAS kernel into other codes (on the MNIST-10k protocol at 32 bits, those of 1 and 2
of the 10,000 items under OpenBLAS's Haswell and Sandybridge kernels, the AP_T
unchanged to four digits). A module's ``fit`` called directly uses the caller's
BLAS threads. Every
``encode`` (and ``project``) is jax, can be jitted, and computes its rows in
fixed blocks in full float32 (:func:`rows`), so the same features give the
same bits in any batch, on a CPU or a GPU.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator, Optional

import jax
import numpy as np
import threadpoolctl

from hashjax import _checks
from hashjax import _encode
from hashjax import codes

Array = jax.Array


#: Why a fit's inputs must be concrete.
_HOST = "a baseline's fit runs on the host in float64; call fit outside jax.jit (encode can be jitted)"


def check_fit_features(features: Any, *, min_rows: int = 1, name: str = "features") -> None:
  """Training ``features[N, dim]``: concrete (a fit runs on the host), real, finite, ``N >= min_rows``,
  ``dim >= 1``."""
  _checks.check_concrete(name, features, why=_HOST)
  _checks.check_real(name, features, shape_doc="[num_items, dim]")
  _checks.check_array(name, features, ndim=2, shape_doc="[num_items, dim]")
  if features.shape[0] < min_rows:
    raise ValueError(f"{name}: expected at least {min_rows} training rows, got shape {tuple(features.shape)}")


def check_subset_classes(name: str, labels: np.ndarray) -> None:
  """The class ``labels`` of a randomly drawn training subset (sized by option ``name``) hold two classes."""
  if np.unique(labels).size < 2:
    raise ValueError(f"{name}: expected a drawn subset of at least two classes, got only class {labels[0]} in its "
                     f"{labels.size} items (a larger {name}, or another key)")


def check_encode(params: Any, cls: type, module: str, features: Any) -> None:
  """``params`` of type ``cls`` (from ``hashjax.baselines.<module>.fit``) and features to encode ``[..., dim]``:
  real, finite, within the params' dtype's range, last axis of the width the params were fit on."""
  _checks.check_type("params", params, cls, what=f"{cls.__name__} from hashjax.baselines.{module}.fit")
  dim = params.mean.shape[-1]
  _checks.check_real("features", features, shape_doc=f"[..., {dim}]", min_ndim=1)
  _checks.check_columns("features", features, dim, what="the width the params were fit on")
  wider = np.dtype(features.dtype).itemsize > np.dtype(params.mean.dtype).itemsize
  if wider and features.size and _checks.is_concrete(features):  # values the params' dtype cannot hold
    values = np.asarray(features)
    low, high = float(values.min()), float(values.max())
    if max(high, -low) > float(np.finfo(params.mean.dtype).max):
      raise ValueError(f"features: expected values within {np.dtype(params.mean.dtype).name}'s range (the params' "
                       f"dtype), got {high if high >= -low else low:.3g}")


def check_pca_bits(num_bits: Any, dim: int) -> int:
  """``num_bits`` for methods that keep ``num_bits`` principal directions."""
  return _checks.check_int_at_most("num_bits", num_bits, dim, what=f"the feature dim {dim}, one principal direction "
                                   "per bit (LSH and spectral hashing allow longer codes)")


def host_features(features: Any, *, name: str = "features") -> tuple:
  """``(features as float64 numpy, the params dtype)`` for a fit, which runs on the host.

  A fit computes in float64 with NumPy so that its result, and the codes built
  on it, are the same however many threads or whichever CPU compute it: in
  float32 the alternation of ITQ amplifies rounding differences of the
  multithreaded matrix products into different codes. The params come back in
  the features' float dtype (at least float32; float64 only when jax's x64 is on).
  """
  dtype = np.dtype(features.dtype)
  dtype = jax.dtypes.canonicalize_dtype(np.promote_types(dtype, np.float32) if dtype.kind == "f" else np.float32)
  x = np.asarray(features, np.float64)
  with np.errstate(over="ignore"):
    norms = np.einsum("ij,ij->i", x, x)  # squared row norms
    if not np.isfinite(4.0 * norms.sum()):  # a bound on every squared distance and product of the fits
      raise ValueError(f"{name}: expected values whose squares sum to a finite float64, got an overflow (largest "
                       f"magnitude {np.max(np.abs(x)):.3g}); scale the features down")
  largest = float(np.sqrt(norms.max()))
  if largest > float(np.finfo(dtype).max) / 4:  # the params and encoding's projections are in dtype
    raise ValueError(f"{name}: expected row norms within {np.dtype(dtype).name}'s range (the params' dtype), got "
                     f"{largest:.3g}; scale the features down")
  return x, dtype


def check_float32_distances(x: np.ndarray, dtype: Any, *, scale: Optional[float] = None,
                            name: str = "features") -> None:
  """Refuses float64 training points ``x[n, d]`` (as encoding will see them) whose squared distances leave
  float32's normal range when encoding computes them in float32 (``dtype``): a squared norm past a quarter of
  float32's largest number, or a typical distance ``scale > 0`` (None: the mean norm of ``x``'s rows) whose
  square is below its smallest normal number (points that all coincide, ``scale = 0``, have distances float32
  holds)."""
  if np.dtype(dtype) != np.float32:
    return
  norms = np.einsum("ij,ij->i", x, x)
  largest = float(norms.max())
  scale = float(np.mean(np.sqrt(norms))) if scale is None else scale
  f32 = np.finfo(np.float32)
  if not ((scale == 0 or scale * scale >= float(f32.tiny)) and 4.0 * largest <= float(f32.max)):
    raise ValueError(f"{name}: expected squared distances within float32's normal range (encoding computes them "
                     f"in float32), got a typical distance of {scale:.3g} and a largest norm of "
                     f"{np.sqrt(largest):.3g}; rescale the features")


def pca(features: np.ndarray, num_dirs: int) -> tuple:
  r"""``(mean[dim], projection[dim, num_dirs])`` in float64: the training mean and top principal directions.

  .. math:: \tfrac{1}{N} (X - \mu)^\top (X - \mu) = U \Lambda U^\top, \quad W = U_{:, 1:p}

  The directions are covariance eigenvectors in decreasing eigenvalue order,
  each signed so that its largest-magnitude entry is positive.
  """
  mean = features.mean(axis=0)
  centred = features - mean
  _, vecs = np.linalg.eigh(centred.T @ centred / centred.shape[0])  # ascending eigenvalues
  return mean, sign_fixed(vecs[:, ::-1][:, :num_dirs])


def sign_fixed(vectors: np.ndarray) -> np.ndarray:
  """``vectors[d, k]``, each column signed so that its largest-magnitude entry is positive (the convention of
  ``sklearn.utils.extmath.svd_flip``): an eigensolver's sign, which may change with the BLAS build, the CPU or
  the thread count, never reaches the codes.

  >>> sign_fixed(np.array([[0.6, -0.1], [-0.8, 0.2]])).tolist()
  [[-0.6, -0.1], [0.8, 0.2]]
  """
  peak = np.argmax(np.abs(vectors), axis=0)
  return vectors * np.where(vectors[peak, np.arange(vectors.shape[1])] < 0, -1.0, 1.0)


def spectral_sign(onehot: np.ndarray, others: np.ndarray, num_bits: int) -> np.ndarray:
  r"""``float64[N]`` in ``{-1, +1}``: the signs of the leading eigenvector of the residue of a bit, the spectral
  start of FastHash's and MACHash's code inference, computed in the range of ``M`` (never ``N x N``).

  .. math:: M = b\, (2 L L^\top - \mathbf{1}\mathbf{1}^\top) - O O^\top

  ``onehot[N, C]`` the class matrix ``L``, ``others[N, r]`` the other bits ``O`` in ``{-1, +1}``. The leading
  eigenvalue repeats whenever classes are of equal size (the first bit's ``M`` then has it ``C - 1`` times), and
  any basis of its eigenspace would do: the vector taken is the projection onto that eigenspace of the first
  class indicator that is not orthogonal to it, so neither the basis nor the signs an eigensolver returns reach
  the codes; an item whose value is 0 but for rounding gets +1.

  >>> spectral_sign(np.repeat(np.eye(2), 2, axis=0), np.zeros((4, 0)), 2).tolist()
  [1.0, 1.0, -1.0, -1.0]
  """
  n, num_classes = onehot.shape
  basis = np.concatenate([onehot, np.ones((n, 1)), others], axis=1)
  weights = np.concatenate([np.full(num_classes, 2.0 * num_bits), [-float(num_bits)], -np.ones(others.shape[1])])
  # M = U C U^T: with U^T U = V D V^T and T = V D^{-1/2} (the nonzero part), U T is an orthonormal basis of
  # M's range, and M's leading eigenvector is U T v for the leading v of (T^T G) C (G T).
  gram = basis.T @ basis
  d, v = np.linalg.eigh(gram)
  keep = d > 1e-9 * d[-1]
  t = v[:, keep] / np.sqrt(d[keep])
  reduced = t.T @ gram
  vals, vecs = np.linalg.eigh((reduced * weights) @ reduced.T)
  top = vecs[:, vals >= vals[-1] - 1e-9 * np.abs(vals).max()]  # the leading eigenspace, in the coordinates U T
  reach = top.T @ (t.T @ gram[:, :num_classes])  # [k, C]: (U T top)^T L, each class indicator's projection
  norms = np.linalg.norm(reach, axis=0)
  if norms.max() > 1e-9 * np.sqrt(n):
    lead = top @ reach[:, np.argmax(norms > 1e-9 * np.sqrt(n))]
  else:  # an eigenspace orthogonal to every class (not met in practice): its last vector, signed
    lead = sign_fixed(top[:, -1:])[:, 0]
  value = basis @ (t @ lead)
  return np.where(value < -1e-9 * np.abs(value).max(), -1.0, 1.0)  # a value 0 but for rounding: +1


def project(features: Array, mean: Array, projection: Array) -> Array:
  """``(features - mean) @ projection`` in full float32 (``Precision.HIGHEST``)."""
  return _encode.matmul(features.astype(mean.dtype) - mean, projection)


def centred_projection(params: Any, features: Array) -> Array:
  """``(features - params.mean) @ params.projection``: the values of LSH and PCA."""
  return project(features, params.mean, params.projection)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _block(values: Callable, binary: bool, params: Any, features: Array) -> Array:
  v = values(params, features)
  return codes.binarize(v) if binary else v


def rows(values: Callable, params: Any, features: Any, *, binary: bool) -> Array:
  """``values(params, x)`` of ``features[..., dim]`` (its bits ``uint8`` when ``binary``), computed
  :data:`hashjax._encode.BLOCK_ROWS` rows per call: the same features give the same bits in any batch."""
  return _checks.as_jax(_encode.blockwise(lambda x: _block(values, binary, params, x), features))


def encoded(params: Any, features: Any, values: Callable, *, cls: type, module: str, binary: bool) -> Array:
  """The body of every baseline's ``project`` (``binary`` False) and ``encode`` (True): ``params`` and
  ``features`` checked (:func:`check_encode`), then :func:`rows` of ``values``."""
  check_encode(params, cls, module, features)
  return rows(values, params, features, binary=binary)


@contextlib.contextmanager
def single_threaded_blas() -> Iterator[None]:
  """Runs host solvers with one BLAS thread (``threadpoolctl``), restored on exit.

  Two reasons: the iterative fits (KSH's L-BFGS, column generation's solvers) amplify the rounding of a
  multithreaded product into different codes (KSH at 64 bits on MNIST-10k gave AP_T 0.9139 with two threads and
  0.9233 with one), and their small products pay a hand-off between threads at every call (on a loaded 2-core
  machine KSH's fit took 140 s with two threads and 92 s with one; a 600-point column-generation run 9.2 s
  against 1.7 s).

  >>> with single_threaded_blas():
  ...   pass
  """
  with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
    yield
