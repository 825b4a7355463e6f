r"""CGHash (Lin et al., Sec. 3): column generation over hash functions for a triplet loss on weighted Hamming.

The restricted master problem over the weights of the bits learned so far is, with :math:`T` triplets and the
margins :math:`\rho_{ijk} = d_w(x_i, x_k) - d_w(x_i, x_j) = w^\top \delta\Phi(i, j, k)` (eqs. 3, 22),

.. math:: \ell_1 \text{ (eq. 23)}: \quad \min_{w \ge 0}\ \mathbf{1}^\top w + \frac{C}{T} \sum_{ijk} f(\rho_{ijk}),
   \qquad \ell_\infty \text{ (eq. 37)}: \quad \min_{0 \le w \le C}\ \frac{1}{T} \sum_{ijk} f(\rho_{ijk}),

with the squared hinge :math:`f(\rho) = \max(0, 1 - \rho)^2` (eq. 24) or the logistic loss
:math:`f(\rho) = \log(1 + e^{-\rho})` (eq. 32), solved by L-BFGS-B warm-started from the previous weights
(the new bit's weight starting at 0). **C is stated per triplet**: the paper's :math:`C` of eq. 23 multiplies
a *sum* over triplets, so its useful value shrinks as the triplets grow; here ``C`` multiplies their *mean*,
and the paper's value is ``C / T`` (recorded as ``C_per_triplet``). Under :math:`\ell_\infty`, ``C`` is the
box bound :math:`C'` of eq. 37.

The dual variables come from the KKT conditions (eqs. 18, 30, 35), :math:`\mu_{ijk} = -\frac{C}{T}
f'(\rho^\star_{ijk})` (:math:`\frac{1}{T}` under :math:`\ell_\infty`), and collapse into pair weights
(:mod:`hashjax.colgen.triplets`) for the next bit's sub-problem (eq. 17). Column generation stops at
``num_bits`` bits, or when the new bit does not violate its dual constraint by more than ``tolerance``:
:math:`\sum \mu\, \delta h \le 1 + \mathrm{tol}` under :math:`\ell_1` (eq. 16), :math:`\le \mathrm{tol}` under
:math:`\ell_\infty` (eq. 39, where a column with a positive reduced gain always lowers the objective).

The loss sums never form the ``[n, P, M]`` triplet array for the squared hinge: per point, with the
irrelevant distances sorted, the active triplets of each relevant neighbour are a prefix, and prefix sums of
:math:`d, d^2` give the loss and both gradient sums in :math:`O(n (P + M) \log M)`. The logistic loss is summed
densely, in blocks of points.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional

import numpy as np
import scipy.optimize
import scipy.special

from hashjax import _checks
from hashjax.colgen import loop, triplets
from hashjax.colgen.result import ColgenResult
from hashjax.baselines._common import single_threaded_blas

#: ``loss=`` of :func:`fit`.
LOSSES = ("squared_hinge", "logistic")
#: ``regularizer=`` of :func:`fit`.
REGULARIZERS = ("l1", "linf")

__all__ = ["LOSSES", "REGULARIZERS", "triplet_loss", "master_objective", "solve_master", "fit"]

_BLOCK_TRIPLETS = 1 << 20


def _row_searchsorted(sorted_rows: np.ndarray, values: np.ndarray, side: str) -> np.ndarray:
  """``searchsorted`` of every row of ``values[n, a]`` in the same row of ``sorted_rows[n, b]``."""
  n, b = sorted_rows.shape
  span = max(float(np.max(np.abs(sorted_rows), initial=0.0)), float(np.max(np.abs(values), initial=0.0)))
  offset = (2.0 * span + 2.0) * np.arange(n)[:, None]
  idx = np.searchsorted((sorted_rows + offset).ravel(), (values + offset).ravel(), side=side)
  return idx.reshape(values.shape) - b * np.arange(n)[:, None]


def triplet_loss(dp: Any, dn: Any, *, loss: str = "squared_hinge") -> tuple:
  r"""The triplet loss sum and its two gradient sums: ``(sum f, gp[n, P], gn[n, M])``.

  .. math:: \sum_{ijk} f(\rho_{ijk}), \quad g^+_{ij} = \sum_k f'(\rho_{ijk}), \quad
     g^-_{ik} = \sum_j f'(\rho_{ijk}), \qquad \rho_{ijk} = d^-_{ik} - d^+_{ij}

  Args:
    dp: ``float[n, P]`` distances of every point to its relevant neighbours.
    dn: ``float[n, M]`` distances to its irrelevant neighbours.
    loss: ``"squared_hinge"`` (prefix sums over sorted distances) or ``"logistic"`` (dense, in blocks).

  >>> total, gp, gn = triplet_loss(np.array([[0.0, 1.0]]), np.array([[0.5]]))
  >>> round(total, 6), gp.tolist(), gn.tolist()  # rho = 0.5, -0.5: 0.25 + 2.25
  (2.5, [[-1.0, -3.0]], [[-4.0]])
  """
  _checks.check_option("loss", loss, LOSSES)
  dp = np.asarray(dp, np.float64)
  dn = np.asarray(dn, np.float64)
  n, p = dp.shape
  m = dn.shape[1]
  if loss == "squared_hinge":
    c = 1.0 + dp  # triplet (j, k) is active iff dn_k < c_j
    order = np.argsort(dn, axis=1)
    dns = np.take_along_axis(dn, order, axis=1)
    s1 = np.concatenate([np.zeros((n, 1)), np.cumsum(dns, axis=1)], axis=1)
    s2 = np.concatenate([np.zeros((n, 1)), np.cumsum(dns * dns, axis=1)], axis=1)
    k = _row_searchsorted(dns, c, "left")
    a1, a2 = np.take_along_axis(s1, k, 1), np.take_along_axis(s2, k, 1)
    total = float(np.sum(k * c * c - 2.0 * c * a1 + a2))
    gp = -2.0 * (k * c - a1)
    cs = np.sort(c, axis=1)
    t1 = np.concatenate([np.zeros((n, 1)), np.cumsum(cs, axis=1)], axis=1)
    below = _row_searchsorted(cs, dn, "right")  # relevant neighbours with c_j <= dn_k are inactive
    gn = -2.0 * ((t1[:, -1:] - np.take_along_axis(t1, below, 1)) - (p - below) * dn)
    return total, gp, gn
  total, gp, gn = 0.0, np.empty((n, p)), np.empty((n, m))
  step = max(1, _BLOCK_TRIPLETS // (p * m))
  for s in range(0, n, step):
    rho = dn[s:s + step, None, :] - dp[s:s + step, :, None]
    total += float(np.sum(np.logaddexp(0.0, -rho)))
    g = -scipy.special.expit(-rho)
    gp[s:s + step], gn[s:s + step] = g.sum(axis=2), g.sum(axis=1)
  return total, gp, gn


def master_objective(weights: Any, ws: loop.Workspace, *, C: float, loss: str, regularizer: str) -> tuple:
  r"""``(value, gradient, pair_weights)`` of the restricted master problem at ``weights`` (the first bits of ``ws``).

  .. math:: J(w) = R(w) + \frac{c}{T} \sum_{ijk} f(\rho_{ijk}), \quad
     \nabla J = \nabla R + \frac{c}{T}\Big(\sum_{ik} g^-_{ik} x^-_{ik} - \sum_{ij} g^+_{ij} x^+_{ij}\Big)

  with :math:`R = \mathbf{1}^\top w, c = C` under :math:`\ell_1` and :math:`R = 0, c = 1` under
  :math:`\ell_\infty`. ``pair_weights`` are the KKT duals :math:`\mu = -\frac{c}{T} f'(\rho)` collapsed onto
  the pairs, ``[-B, A]`` (:func:`hashjax.colgen.triplets.pair_weights`).
  """
  w = np.asarray(weights, np.float64)
  r = w.shape[0]
  dp, dn = ws.distances(w)
  total, gp, gn = triplet_loss(dp, dn, loss=loss)
  scale = (C if regularizer == "l1" else 1.0) / ws.num_triplets
  grad = np.zeros(0)
  if r:
    grad = scale * (ws.xn[:r].reshape(r, -1) @ gn.ravel() - ws.xp[:r].reshape(r, -1) @ gp.ravel())
  value = scale * total
  if regularizer == "l1":
    value += float(np.sum(w))
    grad = grad + 1.0
  return value, grad, np.concatenate([scale * gp, -scale * gn], axis=1)


def solve_master(ws: loop.Workspace, initial: Any, *, C: float, loss: str, regularizer: str,
                 max_iterations: int = 500) -> tuple:
  r"""L-BFGS-B on the restricted master problem from ``initial``; returns ``(w, pair_weights, info)``.

  .. math:: w^\star = \arg\min_{w \in \mathcal{B}} J(w), \qquad
     \mathcal{B} = [0, \infty)^r \ (\ell_1) \text{ or } [0, C]^r \ (\ell_\infty)

  Raises RuntimeError, naming the master problem, when the solver returns non-finite values.
  """
  r = len(initial)
  bounds = [(0.0, None if regularizer == "l1" else C)] * r
  fun = lambda w: master_objective(w, ws, C=C, loss=loss, regularizer=regularizer)[:2]
  res = scipy.optimize.minimize(fun, np.asarray(initial, np.float64), jac=True, method="L-BFGS-B", bounds=bounds,
                                options={"maxiter": int(max_iterations), "ftol": 1e-12, "gtol": 1e-9})
  if not (np.isfinite(res.fun) and np.all(np.isfinite(res.x))):
    raise RuntimeError(f"CGHash master problem ({regularizer}, {loss}, {r} bits; L-BFGS-B): non-finite result "
                       f"({res.message})")
  w = np.clip(res.x, 0.0, None)
  value, _, pair_w = master_objective(w, ws, C=C, loss=loss, regularizer=regularizer)
  return w, pair_w, {"objective": float(value), "master_iterations": int(res.nit),
                     "master_evaluations": int(res.nfev), "master_status": str(res.message)}


def fit(features: Any, labels: Any, *, num_bits: int, C: float = 1.0, loss: str = "squared_hinge",
        regularizer: str = "l1", num_relevant: int = 50, num_irrelevant: int = 100, feature_kind: str = "linear",
        num_anchors: int = 300, tolerance: float = 1e-3, subproblem: Optional[loop.SubproblemOptions] = None,
        seed: int = 0) -> ColgenResult:
  r"""Trains CGHash (Algorithm 1): alternately the new-bit sub-problem and the warm-started master problem.

  .. math:: h_{r+1} = \arg\max_h \sum_{ijk} \mu_{ijk}\, \delta h(i, j, k), \qquad
     \mu_{ijk} = -\tfrac{C}{T} f'(\rho_{ijk}(w^{(r)}))

  Args:
    features: ``float[n, d]`` training features (finite).
    labels: ``int[n]`` their class labels (relevance = same label).
    num_bits: the most bits to learn.
    C: > 0; the weight of the mean triplet loss under ``"l1"``, the weight bound under ``"linf"``.
    loss: ``"squared_hinge"`` or ``"logistic"``.
    regularizer: ``"l1"`` or ``"linf"``.
    num_relevant, num_irrelevant: neighbours per point (``P``, ``M``); ``n P M`` triplets.
    feature_kind: ``"linear"`` (raw) or ``"rbf"`` (kernel to ``num_anchors`` anchors), see
      :mod:`hashjax.colgen.features`.
    num_anchors: anchors of ``"rbf"``.
    tolerance: stop when the new bit's dual violation is within it (see the module docstring).
    subproblem: :class:`~hashjax.colgen.loop.SubproblemOptions`.
    seed: the neighbours, the anchors and the sub-problem's fallback starts.

  Returns:
    :class:`~hashjax.colgen.result.ColgenResult`; ``history[r]`` holds the bit's ``violation``,
    ``subproblem_seconds``, ``master_seconds``, ``objective`` and the solver's iterations.

  >>> rng = np.random.default_rng(0)
  >>> y = np.repeat([0, 1, 2], 10)
  >>> x = rng.normal(size=(30, 4)) + 3.0 * np.eye(4)[y]
  >>> result = fit(x, y, num_bits=2, C=10.0, num_relevant=3, num_irrelevant=4)
  >>> result.num_bits, bool(np.all(result.bit_weights >= 0))
  (2, True)
  """
  _checks.check_option("loss", loss, LOSSES)
  _checks.check_option("regularizer", regularizer, REGULARIZERS)
  C = _checks.check_number("C", C, low=0.0, low_open=True)
  tolerance = _checks.check_number("tolerance", tolerance, low=0.0)
  options = subproblem or loop.SubproblemOptions()
  with single_threaded_blas():
    ws = loop.prepare(features, labels, num_bits=num_bits, num_relevant=num_relevant, num_irrelevant=num_irrelevant,
                      feature_kind=feature_kind, num_anchors=num_anchors, max_dim=options.max_dim, seed=seed)
    # Duals at w = 0 (the KKT duals of the empty model): every triplet has margin 0.
    w = np.zeros(0)
    _, _, pair_w = master_objective(w, ws, C=C, loss=loss, regularizer=regularizer)
    threshold = (1.0 if regularizer == "l1" else 0.0) + tolerance
    path: List[np.ndarray] = []
    history: List[Dict[str, Any]] = []
    stop = "num_bits"
    for _ in range(ws.xp.shape[0]):
      record = loop.add_bit(ws, pair_w, options)
      if record is None:
        stop = "degenerate"
        break
      if record["violation"] <= threshold:
        ws.directions.pop()
        ws.biases.pop()
        stop = "no violation"
        break
      start = time.perf_counter()
      w, pair_w, info = solve_master(ws, np.append(w, 0.0), C=C, loss=loss, regularizer=regularizer)
      record.update(info, master_seconds=time.perf_counter() - start)
      history.append(record)
      path.append(w.copy())
    return loop.finish(ws, path, history, stop, {"method": "cghash", "C": C, "C_per_triplet": C / ws.num_triplets,
                                                "loss": loss, "regularizer": regularizer, "tolerance": tolerance})
