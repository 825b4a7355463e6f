r"""Isotropic hashing (IsoHash; Kong & Li, NIPS 2012).

PCA hashing gives its leading bits most of the variance and its trailing bits
almost none, yet every bit counts the same in a Hamming distance. IsoHash
projects centred features onto the ``b = num_bits`` leading principal
directions, ``V = (X - mean) W`` with per-direction variances
``Lambda = diag(lambda_1 >= ... >= lambda_b)``, then learns an orthogonal
``Q`` so that the rotated projections ``V Q`` all have the same variance
``a = trace(Lambda) / b``:

.. math:: \mathrm{find}\ Q^\top Q = I \ \mathrm{with}\ \mathrm{diag}(Q^\top \Lambda Q) = (a, \dots, a)

Such a ``Q`` always exists (Schur-Horn: the constant vector is majorised by
any spectrum with the same sum). Two solvers from the paper:

* ``"lift_and_projection"`` (the default) alternates projections between the
  matrices with diagonal ``a`` and the symmetric matrices with spectrum
  ``Lambda``: from ``Z = Q^T Lambda Q``, ``T = Z`` with its diagonal set to
  ``a``; then ``T = U Gamma U^T`` (eigenvalues in decreasing order, matched
  to ``Lambda``'s) and ``Z = U Lambda U^T``, i.e. ``Q = U^T``.
* ``"gradient_flow"`` descends
  :math:`F(Q) = \tfrac12 \|\mathrm{diag}(Q^\top \Lambda Q) - a\|^2` on the
  orthogonal group along ``Q' = Q [B, Z]``, ``B = diag(Z) - a I``, with
  Cayley steps (exactly orthogonal) and a backtracking step size (a step is
  kept only when it lowers ``F`` by the Armijo amount, so ``F`` decreases
  monotonically).

What the paper leaves open and this module fixes:

* The start. The paper draws a random orthogonal ``Q``; here it is one fixed
  draw (:func:`start_rotation`: the orthogonal factor of a Gaussian matrix
  from NumPy's ``RandomState(0)``, a stream NumPy keeps frozen), so the codes
  are deterministic and ``key`` is unused. A structured start is a trap: from
  the DCT-II matrix every iterate keeps its mirror symmetry over the bits and
  the first update turns some rows exactly orthogonal to the start's, so
  their signs (below) would rest on rounding. On MNIST-10k the AP of IsoHash
  moves by about 0.01-0.02 between starts, at every length.
* The sign of ``Q``. ``Z`` fixes ``Q`` only up to the signs of its rows (and
  rotations within equal eigenvalues); each lift-and-projection iterate signs
  its rows to agree with the previous iterate's, so ``Q`` follows on from the
  start rather than from an eigensolver's sign choice.
* The stopping rule (both solvers): stop when
  ``max_j |(Q^T Lambda Q)_jj - a| <= tol * a`` (relative, so it does not
  depend on the feature scale), or after ``num_iters`` updates; if the rule
  was not met, :func:`fit` warns with :class:`ConvergenceWarning`.

Variances use ``1/N``, as the PCA of every baseline does; ``num_bits``
cannot exceed the feature dimension. Codes are
``sign((x - mean) W Q)``, ``bit = 1`` iff ``> 0``.
"""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks
from hashjax import _encode
from hashjax.baselines import _common

Array = jax.Array

#: The solvers :func:`fit` accepts.
SOLVERS = ("lift_and_projection", "gradient_flow")
#: Upper bound on updates of ``Q`` (both solvers converge in tens to a few hundred at 64 bits).
DEFAULT_NUM_ITERS = 1000
#: Stopping tolerance on ``max_j |(Q^T Lambda Q)_jj - a|``, relative to ``a``.
DEFAULT_TOL = 1e-6
# Armijo constant of the gradient flow's backtracking: a step must lower F by this fraction of the
# first-order prediction.
_ARMIJO = 1e-4
# Step halvings the gradient flow tries before it declares that no step lowers F.
_MAX_HALVINGS = 100


class ConvergenceWarning(UserWarning):
  """:func:`fit` stopped after ``num_iters`` updates before the variances were equal within ``tol``.

  >>> issubclass(ConvergenceWarning, UserWarning)
  True
  """


class IsoHashParams(NamedTuple):
  """``mean[dim]``, PCA ``projection[dim, num_bits]`` and orthogonal ``rotation[num_bits, num_bits]``."""
  mean: Array
  projection: Array
  rotation: Array


def start_rotation(num_bits: int) -> np.ndarray:
  r"""The start of both solvers: a fixed Haar-distributed orthogonal matrix, float64 ``[num_bits, num_bits]``.

  .. math:: G = Q_0 R \ (\mathrm{QR}), \quad G_{ik} \sim \mathcal{N}(0, 1)\ \mathrm{from}\
     \mathtt{RandomState(0)}, \quad \mathrm{diag}(R) > 0

  Args:
    num_bits: ``b >= 1``.

  Returns:
    Orthogonal float64 ``[num_bits, num_bits]``, the same on every call.

  >>> import numpy as np
  >>> q = start_rotation(4)
  >>> bool(np.allclose(q.T @ q, np.eye(4))), bool(np.array_equal(q, start_rotation(4)))
  (True, True)
  """
  b = _checks.check_num_bits(num_bits)
  q, r = np.linalg.qr(np.random.RandomState(0).standard_normal((b, b)))
  return q * np.where(np.diag(r) < 0, -1.0, 1.0)


def _deviation(lam: np.ndarray, q: np.ndarray, a: float) -> tuple:
  """``(Z = Q^T diag(lam) Q, diag(Z) - a)``."""
  z = q.T @ (lam[:, None] * q)
  return z, np.diag(z) - a


def _lift_and_projection(lam: np.ndarray, q: np.ndarray, a: float, num_iters: int, tol: float) -> tuple:
  """``(Q, max_j |Z_jj - a|)`` after alternating projections from ``q``."""
  order = np.argsort(-lam, kind="stable")  # lam's indices from the largest variance down
  z, dev = _deviation(lam, q, a)
  for _ in range(num_iters):
    if np.max(np.abs(dev)) <= tol * a:
      break
    t = z.copy()
    np.fill_diagonal(t, a)
    _, u = np.linalg.eigh(t)
    # The eigenvector of T's i-th largest eigenvalue carries lam's i-th largest value: Z = U Lambda U^T.
    new = np.empty_like(q)
    new[order] = u[:, ::-1].T
    signs = np.where(np.sum(new * q, axis=1) < 0, -1.0, 1.0)
    q = new * signs[:, None]
    z, dev = _deviation(lam, q, a)
  return q, np.max(np.abs(dev))


def _gradient_flow(lam: np.ndarray, q: np.ndarray, a: float, num_iters: int, tol: float) -> tuple:
  """``(Q, max_j |Z_jj - a|)`` after Cayley steps down ``F(Q) = |diag(Q^T Lambda Q) - a|^2 / 2``."""
  eye = np.eye(len(lam))
  z, dev = _deviation(lam, q, a)
  f = 0.5 * dev @ dev
  step = 1.0 / (a * a) if a > 0 else 1.0  # F is quartic in the features' scale, so the step goes as 1/a^2
  for _ in range(num_iters):
    if np.max(np.abs(dev)) <= tol * a:
      break
    skew = dev[:, None] * z - z * dev[None, :]  # [B, Z]: Q' = Q [B, Z] is the steepest descent of F
    slope = np.sum(skew * skew)  # dF/dt along the flow is -|[B, Z]|_F^2
    if slope == 0:
      break  # a stationary point of F that is not isotropic: the flow stays there
    for _ in range(_MAX_HALVINGS):
      half = 0.5 * step * skew
      new = q @ np.linalg.solve(eye - half, eye + half)
      new_z, new_dev = _deviation(lam, new, a)
      new_f = 0.5 * new_dev @ new_dev
      if new_f <= f - _ARMIJO * step * slope:
        break
      step *= 0.5
    else:
      break  # no step lowers F at float64 precision
    q, z, dev, f = new, new_z, new_dev, new_f
    step *= 2.0  # let the step grow back after a backtrack
  return q, np.max(np.abs(dev))


def fit(features: Array, *, num_bits: int, key: Optional[Any] = None, solver: str = "lift_and_projection",
        num_iters: int = DEFAULT_NUM_ITERS, tol: float = DEFAULT_TOL) -> IsoHashParams:
  r"""Learns PCA directions and a rotation that gives every bit the same variance.

  .. math:: V = (X - \mu) W, \quad \tfrac1N V^\top V = \Lambda, \quad
     \mathrm{diag}(Q^\top \Lambda Q) = \tfrac{\mathrm{tr}\,\Lambda}{b} \mathbf{1}, \quad Q^\top Q = I

  Args:
    features: ``[N, dim]`` finite training features, ``N >= 2``.
    num_bits: code length, ``1 <= num_bits <= dim``.
    key: unused (the start is :func:`start_rotation`); accepted so every
      baseline has the same signature.
    solver: ``"lift_and_projection"`` or ``"gradient_flow"``.
    num_iters: most updates of ``Q`` (``0`` keeps the start).
    tol: stop once ``max_j |(Q^T Lambda Q)_jj - a| <= tol * a``, ``a = trace(Lambda) / b``.

  Returns:
    :class:`IsoHashParams` with ``mean[dim]``, ``projection[dim, num_bits]``
    and ``rotation[num_bits, num_bits]``. Warns with
    :class:`ConvergenceWarning` when the stopping rule was not met.

  >>> import numpy as np
  >>> x = np.random.default_rng(0).normal(size=(200, 8)) * np.arange(1, 9)
  >>> params = fit(x.astype(np.float32), num_bits=4)
  >>> v = (x - x.mean(0)) @ np.asarray(params.projection) @ np.asarray(params.rotation)
  >>> np.round(v.var(0) / v.var(0).mean(), 5)
  array([1., 1., 1., 1.])
  """
  _common.check_fit_features(features, min_rows=2)
  num_bits = _common.check_pca_bits(num_bits, features.shape[1])
  if key is not None:
    _checks.check_host_key(key)
  solver = _checks.check_option("solver", solver, SOLVERS)
  num_iters = _checks.check_int("num_iters", num_iters, low=0)
  tol = _checks.check_number("tol", tol, low=0)
  x, dtype = _common.host_features(features)
  mean, projection = _common.pca(x, num_bits)
  lam = np.mean(((x - mean) @ projection) ** 2, axis=0)  # the eigenvalues, as variances of the projections
  a = float(np.mean(lam))
  run = _lift_and_projection if solver == "lift_and_projection" else _gradient_flow
  rotation, deviation = run(lam, start_rotation(num_bits), a, num_iters, tol)
  if deviation > tol * a:
    warnings.warn(ConvergenceWarning(
        f"num_iters: {solver} stopped after {num_iters} updates with bit variances up to "
        f"{deviation / a:.3g} of their mean away from it (tol {tol:g}); raise num_iters"), stacklevel=2)
  return IsoHashParams(*(jnp.asarray(v, dtype) for v in (mean, projection, rotation)))


def _rotated(params: IsoHashParams, features: Array) -> Array:
  return _encode.matmul(_common.project(features, params.mean, params.projection), params.rotation)


def project(params: IsoHashParams, features: Array) -> Array:
  r"""The real values whose signs are the bits of :func:`encode` (``encode`` is ``binarize(project(...))``).

  .. math:: v(x) = Q^\top W^\top (x - \mu)

  Args:
    params: :class:`IsoHashParams` from :func:`fit`.
    features: ``[..., dim]`` finite features, ``dim`` as in :func:`fit`.

  Returns:
    ``float[..., num_bits]``: bit ``j`` is 1 where value ``j`` is ``> 0``.

  >>> import jax, numpy as np
  >>> x = np.random.default_rng(0).normal(size=(40, 6)).astype(np.float32)
  >>> params = fit(x, num_bits=4, key=jax.random.key(0))
  >>> bool(np.array_equal(np.asarray(project(params, x)) > 0, np.asarray(encode(params, x)) == 1))
  True
  """
  return _common.encoded(params, features, _rotated, cls=IsoHashParams, module="isohash", binary=False)


def encode(params: IsoHashParams, features: Array) -> Array:
  r"""Hashes ``features`` by the signs of their rotated principal components.

  .. math:: b(x) = [Q^\top W^\top (x - \mu) > 0]

  Args:
    params: :class:`IsoHashParams` from :func:`fit`.
    features: ``[..., dim]`` finite features, ``dim`` as in :func:`fit`.

  Returns:
    ``uint8[..., num_bits]`` bits in ``{0, 1}``.

  >>> import numpy as np
  >>> x = np.random.default_rng(0).normal(size=(100, 8)).astype(np.float32)
  >>> bits = encode(fit(x, num_bits=4), x)
  >>> bits.shape, bits.dtype
  ((100, 4), dtype('uint8'))
  """
  return _common.encoded(params, features, _rotated, cls=IsoHashParams, module="isohash", binary=True)
