r"""The new-bit sub-problem of column generation (eqs. 17, 20 and 55): the most violated dual constraint.

Given pair weights :math:`W` (:mod:`hashjax.colgen.triplets`), the next bit is the perceptron
:math:`h(x) = [v^\top \phi(x) + b > 0]` maximising

.. math:: F(h) = \sum_{i, q} W_{iq}\, (h_i - h_{\nu_{iq}})^2 = h^\top L h .

The search, for every start:

1. **spectral start** (Sec. 3.1, after [5]): drop the sign and solve the generalised eigenproblem
   :math:`\Phi^\top L \Phi\, v = \lambda\, (\Phi^\top \Phi + \epsilon I)\, v`; the top ``num_starts``
   eigenvectors are the starts;
2. **exact bias scan**: along a direction :math:`v` every bias gives one of the ``n + 1`` cuts of the sorted
   projections; all their exact objectives come from one cumulative sum (a pair is split by the cuts between
   its two ranks), so the best bias is found exactly in :math:`O(n \log n + nQ)`;
3. **sigmoid relaxation** (eq. 20): :math:`h \approx \sigma(v^\top \phi + b)`, maximised by L-BFGS from the
   scanned start, then the bias is scanned again.

The candidate with the best exact discrete objective wins, unrefined spectral starts included, among those that
are not degenerate: a bit that puts fewer than ``min_fraction`` of the points on one side, or that agrees with an
earlier bit (or its complement, which gives the same distances) on more than ``1 - duplicate_tolerance`` of
them. When every spectral candidate is degenerate, random directions are tried; when those are too, there is no
new bit (:func:`new_bit` returns None).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import numpy as np
import scipy.optimize
import scipy.sparse
import scipy.sparse.linalg

from hashjax import _checks
from hashjax.baselines._common import single_threaded_blas
from hashjax.colgen import triplets


__all__ = ["NewBit", "cut_scan", "laplacian_apply", "whitening", "spectral_directions",
           "relaxed_objective", "refine", "degenerate", "new_bit"]


class NewBit(NamedTuple):
  """The winning hash function of one sub-problem and how it was found."""
  direction: np.ndarray  # float64 [D]: v
  bias: float  # b
  bits: np.ndarray  # uint8 [n]: h on the training points
  value: float  # exact objective F(h)
  spectral_value: float  # best exact objective among the unrefined (scanned) spectral starts
  start: int  # index of the winning start (random starts follow the spectral ones)
  refined: bool  # whether the winner came out of the sigmoid refinement
  rejected: int  # candidates rejected as degenerate


def cut_scan(projections: Any, neighbors: np.ndarray, weights: Any, *, min_side: int = 1) -> tuple:
  r"""Exact objectives of every bias along one direction: ``(best_value, threshold, bits)``.

  .. math:: F(c) = \sum_{i,q} W_{iq}\, [\min(r_i, r_{\nu_{iq}}) < c \le \max(r_i, r_{\nu_{iq}})],
     \qquad c = \text{points below the cut}

  with :math:`r` the ranks of the projections (ascending). A cut between two equal projections cannot be
  realised and is skipped, as are cuts leaving fewer than ``min_side`` points on either side.

  Args:
    projections: ``float[n]`` values :math:`v^\top \phi(x_i)`.
    neighbors: ``int[n, Q]`` neighbour indices of the pairs.
    weights: ``float[n, Q]`` pair weights.
    min_side: the fewest points allowed on either side of the cut.

  Returns:
    ``(value, threshold, bits)``: the best exact objective, the cut value (bits are ``projections > threshold``)
    and ``uint8[n]`` bits; ``(-inf, nan, None)`` when no cut is allowed.

  >>> nb = np.array([[1], [0], [3], [2]])
  >>> value, t, bits = cut_scan(np.array([0.0, 1.0, 2.0, 3.0]), nb, np.array([[-1.0], [-1.0], [-1.0], [-1.0]]))
  >>> value, t, bits.tolist()  # split 0, 1 | 2, 3: no relevant pair cut
  (0.0, 1.5, [0, 0, 1, 1])
  """
  z = np.asarray(projections, np.float64)
  n = z.shape[0]
  order = np.argsort(z, kind="stable")
  rank = np.empty(n, np.int64)
  rank[order] = np.arange(n)
  ri = np.broadcast_to(rank[:, None], neighbors.shape)
  rn = rank[neighbors]
  lo, hi = np.minimum(ri, rn).ravel(), np.maximum(ri, rn).ravel()
  w = np.asarray(weights, np.float64).ravel()
  delta = np.bincount(lo + 1, weights=w, minlength=n + 2) - np.bincount(hi + 1, weights=w, minlength=n + 2)
  values = np.cumsum(delta)[:n + 1]  # values[c]: the lowest c points get bit 0
  zs = z[order]
  allowed = np.zeros(n + 1, bool)
  allowed[max(min_side, 1):n - max(min_side, 1) + 1] = True
  allowed[1:n] &= zs[1:] > zs[:-1]
  if not allowed.any():
    return -np.inf, np.nan, None
  values = np.where(allowed, values, -np.inf)
  c = int(np.argmax(values))
  threshold = 0.5 * (zs[c - 1] + zs[c])
  return float(values[c]), float(threshold), (z > threshold).astype(np.uint8)


def laplacian_apply(z: np.ndarray, neighbors: np.ndarray, weights: np.ndarray) -> np.ndarray:
  r"""``L @ z`` for the Laplacian of the symmetrised pair weights, from the pairs (no matrix is formed).

  .. math:: (Lz)_a = \sum_{(a, b)} W_{ab} (z_a - z_b) + \sum_{(b, a)} W_{ba} (z_a - z_b),
     \qquad z^\top L z = \sum_{i,q} W_{iq} (z_i - z_{\nu_{iq}})^2

  Args:
    z: ``float[n]`` or ``float[n, c]``.
    neighbors: ``int[n, Q]``; weights: ``float[n, Q]``.

  >>> z = np.array([0.0, 1.0])
  >>> float(z @ laplacian_apply(z, np.array([[1], [0]]), np.array([[2.0], [0.0]])))
  2.0
  """
  z = np.asarray(z, np.float64)
  flat = z.reshape(z.shape[0], -1)
  n = flat.shape[0]
  out = np.empty_like(flat)
  idx = neighbors.ravel()
  for c in range(flat.shape[1]):
    col = flat[:, c]
    wd = weights * (col[:, None] - col[neighbors])
    out[:, c] = wd.sum(axis=1) - np.bincount(idx, weights=wd.ravel(), minlength=n)
  return out.reshape(z.shape)


def whitening(phi: Any, *, ridge: float = 1e-3, max_dim: Optional[int] = None) -> np.ndarray:
  r"""``float64[D, r]`` :math:`U_r \Lambda_r^{-1/2}` of :math:`\Phi^\top \Phi + \epsilon I = U \Lambda U^\top` (its
  top ``r = min(D, max_dim)`` eigenpairs), with :math:`\epsilon = \mathrm{ridge} \cdot \mathrm{tr}(\Phi^\top \Phi)
  / D` (at least 1e-12): the features :math:`\Psi = \Phi U_r \Lambda_r^{-1/2}` have :math:`\Psi^\top \Psi \preceq
  I`, and the generalised eigenproblem of the spectral start becomes an ordinary one.

  .. math:: \Phi^\top L \Phi\, v = \lambda (\Phi^\top\Phi + \epsilon I) v \iff
     \Psi^\top L \Psi\, u = \lambda u, \quad v = U \Lambda^{-1/2} u \quad (r = D)

  With ``r < D`` the hash directions are searched within the top-``r`` principal subspace of the training features.

  >>> whitening(np.array([[2.0, 0.0], [-2.0, 0.0]]), ridge=0.5).round(3).tolist()
  [[0.316, 0.0], [0.0, 0.707]]
  """
  phi = np.asarray(phi, np.float64)
  g = phi.T @ phi
  eps = max(ridge * float(np.trace(g)) / g.shape[0], 1e-12)
  lam, u = np.linalg.eigh(g + eps * np.eye(g.shape[0]))
  r = g.shape[0] if max_dim is None else min(g.shape[0], _checks.check_int("max_dim", max_dim))
  lam, u = lam[::-1][:r], u[:, ::-1][:, :r]
  return u / np.sqrt(lam)


def spectral_directions(psi: Any, neighbors: np.ndarray, weights: Any, *, num_directions: int,
                        seed: _checks.Seed = 0) -> np.ndarray:
  r"""The top eigenvectors of the sign-free sub-problem on whitened features: ``float64[D, k]``, best first.

  .. math:: \Psi^\top L \Psi\, u = \lambda u

  (the generalised eigenproblem of [5] after :func:`whitening`), by Lanczos iteration on products with
  :math:`\Psi` and :func:`laplacian_apply`, so neither :math:`L` nor :math:`\Psi^\top L \Psi` is formed.

  Args:
    psi: ``float[n, D]`` whitened centred features.
    neighbors: ``int[n, Q]`` neighbour indices; ``weights``: ``float[n, Q]`` pair weights.
    num_directions: how many eigenvectors (at most ``D - 1``).
    seed: the Lanczos start vector.

  >>> psi = np.array([[-1.0, 0.1], [1.0, -0.1], [-1.0, -0.1], [1.0, 0.1]]) / 2
  >>> v = spectral_directions(psi, np.array([[1], [0], [3], [2]]), np.ones((4, 1)), num_directions=1)
  >>> bool(abs(v[0, 0]) > abs(v[1, 0]))  # the first feature separates the irrelevant pairs
  True
  """
  psi = np.asarray(psi, np.float64)
  d = psi.shape[1]
  w = np.asarray(weights, np.float64)
  k = max(1, min(int(num_directions), d - 1))
  if d <= 2 * k + 1 or d <= 64:
    m = psi.T @ laplacian_apply(psi, neighbors, w)
    _, vectors = np.linalg.eigh(0.5 * (m + m.T))
    return vectors[:, ::-1][:, :k]
  rng = _checks.check_rng(seed)
  op = scipy.sparse.linalg.LinearOperator((d, d), matvec=lambda u: psi.T @ laplacian_apply(psi @ u, neighbors, w),
                                          dtype=np.float64)
  try:
    values, vectors = scipy.sparse.linalg.eigsh(op, k=k, which="LA", v0=rng.normal(size=d), tol=1e-6)
  except scipy.sparse.linalg.ArpackError as e:
    raise RuntimeError(f"spectral start of the new-bit sub-problem: Lanczos (ARPACK) failed ({e})") from None
  return vectors[:, np.argsort(values)[::-1]]


def relaxed_objective(params: np.ndarray, phi: np.ndarray, neighbors: np.ndarray, weights: np.ndarray) -> tuple:
  r"""``(-F, -dF/d(v, b))`` of the sigmoid relaxation (eq. 20), for a minimiser; ``params = [v, b]``.

  .. math:: F(v, b) = \sum_{i,q} W_{iq} (s_i - s_{\nu_{iq}})^2, \qquad s = \sigma(\Phi v + b)

  >>> phi = np.array([[-1.0], [1.0]])
  >>> value, grad = relaxed_objective(np.array([50.0, 0.0]), phi, np.array([[1], [0]]), np.ones((2, 1)))
  >>> round(float(-value), 6), grad.shape
  (2.0, (2,))
  """
  v, b = params[:-1], params[-1]
  z = (phi @ v.astype(phi.dtype)).astype(np.float64) + b
  s = 0.5 * (1.0 + np.tanh(0.5 * z))  # the logistic sigmoid, without overflow
  diff = s[:, None] - s[neighbors]
  wd = weights * diff
  value = float(np.sum(wd * diff))
  gs = 2.0 * (wd.sum(axis=1) - np.bincount(neighbors.ravel(), weights=wd.ravel(), minlength=s.shape[0]))
  gz = gs * s * (1.0 - s)
  grad = np.concatenate([(phi.T @ gz.astype(phi.dtype)).astype(np.float64), [gz.sum()]])
  return -value, -grad


def refine(phi: np.ndarray, neighbors: np.ndarray, weights: np.ndarray, direction: np.ndarray, bias: float, *,
           max_iterations: int = 50) -> tuple:
  r"""L-BFGS on the sigmoid relaxation from ``(direction, bias)``; returns the refined ``(v, b)``.

  .. math:: (v, b) \leftarrow \arg\max_{v, b} \sum_{i,q} W_{iq} (\sigma_i - \sigma_{\nu_{iq}})^2

  The products with ``phi`` run in its dtype (float32 halves their memory traffic). Raises RuntimeError when the
  objective or its gradient become non-finite.

  >>> phi = np.array([[-1.0], [-0.5], [0.5], [1.0]])
  >>> v, b = refine(phi, np.array([[3], [2], [1], [0]]), np.ones((4, 1)), np.array([1.0]), 0.0)
  >>> bool(v[0] > 1.0)  # sharper than the start: the irrelevant pairs are split more fully
  True
  """
  x0 = np.concatenate([direction, [bias]])
  args = (phi, neighbors, weights)
  res = scipy.optimize.minimize(relaxed_objective, x0, args=args, jac=True, method="L-BFGS-B",
                                options={"maxiter": int(max_iterations)})
  if not (np.isfinite(res.fun) and np.all(np.isfinite(res.x))):
    raise RuntimeError(f"sigmoid relaxation of the new-bit sub-problem (L-BFGS-B): non-finite result ({res.message})")
  return res.x[:-1], float(res.x[-1])


def degenerate(bits: np.ndarray, existing: Optional[np.ndarray], *, min_side: int,
               duplicate_tolerance: float) -> bool:
  r"""Whether a new bit is one-sided or duplicates an earlier bit or its complement.

  .. math:: \min(|h|, n - |h|) < \mathrm{min\_side} \ \lor\ \exists r:\ \min(a_r, 1 - a_r) \le \tau,
     \quad a_r = \tfrac{1}{n} |\{i : h_i = h_r(x_i)\}|

  >>> degenerate(np.array([0, 1, 1, 0]), np.array([[1], [0], [0], [1]]), min_side=1, duplicate_tolerance=0.0)
  True
  """
  n = bits.shape[0]
  ones = int(bits.sum())
  if min(ones, n - ones) < max(min_side, 1):
    return True
  if existing is None or existing.shape[1] == 0:
    return False
  agree = np.mean(existing == bits[:, None], axis=0)
  return bool(np.any(np.minimum(agree, 1.0 - agree) <= duplicate_tolerance))


def new_bit(phi: Any, neighbors: triplets.Neighbors, weights: Any, *, existing: Optional[np.ndarray] = None,
            num_starts: int = 2, max_iterations: int = 30, sharpness: float = 4.0, min_fraction: float = 0.02,
            duplicate_tolerance: float = 0.01, whiten: Optional[np.ndarray] = None, psi: Optional[np.ndarray] = None,
            seed: _checks.Seed = 0) -> Optional[NewBit]:
  r"""Solves the sub-problem: the non-degenerate perceptron bit with the largest exact :math:`F(h)`.

  .. math:: h^\star = \arg\max_{h \in \mathcal{C}} \sum_{i, q} W_{iq} (h_i - h_{\nu_{iq}})^2

  Args:
    phi: ``float[n, D]`` centred training features; the bias scans and the sigmoid refinement run on them.
    neighbors: the training :class:`~hashjax.colgen.triplets.Neighbors`.
    weights: ``float[n, P + M]`` pair weights (order of :attr:`Neighbors.all`).
    existing: ``{0,1}[n, r]`` the earlier bits on the training points (for the duplicate check), or None.
    num_starts: spectral starts (each scanned, then refined).
    max_iterations: L-BFGS iterations per start.
    sharpness: the start's projections are scaled to this standard deviation before the sigmoid.
    min_fraction: the fewest points (as a fraction of ``n``) allowed on either side.
    duplicate_tolerance: a bit agreeing with an earlier one (or its complement) on more than ``1 - tol`` of the
      points is rejected.
    whiten: :func:`whitening` of ``phi`` (computed when None); the spectral starts are found on the whitened
      features (the generalised eigenproblem) and mapped back, :math:`v = U \Lambda^{-1/2} u`.
    psi: ``phi @ whiten`` when already computed.
    seed: draws the random fallback directions.

  Returns:
    :class:`NewBit`, or None when every candidate is degenerate.

  >>> rng = np.random.default_rng(0)
  >>> x = np.concatenate([rng.normal(-2, 1, (20, 2)), rng.normal(2, 1, (20, 2))])
  >>> nb = triplets.sample_neighbors(np.repeat([0, 1], 20), num_relevant=3, num_irrelevant=3, seed=0)
  >>> w = triplets.pair_weights(np.ones((40, 3, 3)))
  >>> bit = new_bit(x - x.mean(0), nb, w)
  >>> bool(bit.bits[:20].sum() in (0, 20) and bit.bits[20:].sum() in (0, 20))  # splits the two classes
  True
  """
  with single_threaded_blas():
    phi = np.asarray(phi, np.float64)
    n = phi.shape[0]
    nbr = neighbors.all
    w = np.asarray(weights, np.float64)
    _checks.check_real("weights", w, shape=nbr.shape, like="the pairs of neighbors")
    min_side = max(1, int(np.ceil(min_fraction * n)))
    phi32 = phi.astype(np.float32)
    rng = _checks.check_rng(seed)
    if whiten is None:
      whiten = whitening(phi)
    if psi is None:
      psi = phi @ whiten
    directions = whiten @ spectral_directions(psi, nbr, w, num_directions=num_starts, seed=rng)
    best, rejected, spectral_best = None, 0, -np.inf

    def consider(v, b, bits, value, start, refined):
      nonlocal best, rejected
      if bits is None or not np.isfinite(value):
        return
      if degenerate(bits, existing, min_side=min_side, duplicate_tolerance=duplicate_tolerance):
        rejected += 1
        return
      if best is None or value > best.value:
        best = NewBit(np.asarray(v, np.float64), float(b), bits, float(value), spectral_best, start, refined, 0)

    def search(dirs, offset, spectral):
      nonlocal spectral_best
      for s in range(dirs.shape[1]):
        v = dirs[:, s]
        z = phi @ v
        std = float(np.std(z))
        if not std > 0:
          continue
        v = v * (sharpness / std)
        z = z * (sharpness / std)
        value, t, bits = cut_scan(z, nbr, w, min_side=min_side)
        if spectral and np.isfinite(value):
          spectral_best = max(spectral_best, value)
        consider(v, -t, bits, value, offset + s, False)
        if bits is None:
          continue
        v2, b2 = refine(phi32, nbr, w, v, -t, max_iterations=max_iterations)
        z2 = phi @ v2
        value2, t2, bits2 = cut_scan(z2, nbr, w, min_side=min_side)
        consider(v2, -t2, bits2, value2, offset + s, True)

    search(directions, 0, True)
    if best is None:
      search(rng.normal(size=(phi.shape[1], num_starts)), directions.shape[1], False)
    if best is None:
      return None
    return best._replace(spectral_value=float(spectral_best), rejected=rejected)
