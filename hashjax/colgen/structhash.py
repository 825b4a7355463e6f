r"""StructHash (Lin et al., Sec. 4): column generation with a 1-slack structural SVM over ranking losses.

With the bits learned so far fixed, the weights solve the 1-slack problem (eqs. 48-49) by cutting planes
(Algorithm 2): a working set of constraints :math:`(c, y)`, each

.. math:: \frac{1}{n} w^\top \sum_i c_i\, \delta\Psi_i(y_i) \ge \frac{1}{n} \sum_i c_i\, \Delta(y_i^\star, y_i) - \xi,

and the LP :math:`\min_{w \ge 0, \xi \ge 0} \mathbf{1}^\top w + C \xi` over it, solved by HiGHS
(``scipy.optimize.linprog``). Each round runs loss-augmented inference (:mod:`hashjax.colgen.inference`) for
every training point at the current weights, sets :math:`c_i = [H_i > 0]` and adds the resulting constraint;
the loop ends when that constraint is violated by no more than ``cp_tolerance`` beyond :math:`\xi`. The LP's
constraint duals :math:`\lambda_{(c, y)}` (HiGHS marginals) give the triplet weights of eq. 56, which collapse
onto the pairs (:mod:`hashjax.colgen.triplets`) of the next bit's sub-problem (eq. 55): a constraint whose point
``i`` has ``before[i, j]`` irrelevant items above relevant ``j`` and ``after[i, k]`` relevant items below
irrelevant ``k`` contributes :math:`-\lambda c_i \frac{2}{nPM} \mathrm{before}_{ij}` to pair :math:`(i, j)` and
:math:`+\lambda c_i \frac{2}{nPM} \mathrm{after}_{ik}` to pair :math:`(i, k)`.

**Stage-wise training** (Sec. 4.5.1): at bit ``t`` the LP has two weights, one shared by bits ``1..t-1`` and
one for bit ``t``; afterwards all ``t`` bits share one weight, so the final model ranks by plain Hamming distance
(``bit_weights`` all 1). The constraints found at earlier bits stay in the working set (their features are
re-read in the current two-weight space); constraints inactive at the end of a bit (:math:`\lambda = 0`) are
dropped.

**Start.** Algorithm 3 starts from arbitrary rankings with :math:`\mu = C/n`; here the first working set holds
the worst ranking of every point (all irrelevant items first), the most violated one at :math:`w = 0`, with
:math:`\lambda = C`. Column generation stops at ``num_bits``, or (not stage-wise) when the new bit's dual
violation is at most :math:`1 + \mathrm{tol}` (eq. 52: no column can lower the objective).
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional

import numpy as np
import scipy.optimize

from hashjax import _checks
from hashjax.colgen import inference, loop
from hashjax.colgen.result import ColgenResult
from hashjax.baselines._common import single_threaded_blas

__all__ = ["solve_lp", "fit"]


def solve_lp(features: Any, losses: Any, *, C: float, what: str = "StructHash cutting-plane LP") -> tuple:
  r"""The 1-slack LP over a working set: ``(w[d], xi, duals[K])`` from HiGHS.

  .. math:: \min_{w \ge 0,\, \xi \ge 0} \mathbf{1}^\top w + C \xi \quad \text{s.t.} \quad
     g_c^\top w + \xi \ge \Delta_c \quad (c = 1..K)

  ``duals`` are the constraint multipliers :math:`\lambda_c \ge 0` (``-marginals`` of ``linprog``), with
  :math:`\sum_c \lambda_c \le C` and :math:`\sum_c \lambda_c g_c \le \mathbf{1}`. Raises RuntimeError naming
  ``what`` when HiGHS does not report an optimum.

  >>> w, xi, duals = solve_lp(np.array([[0.5]]), np.array([1.0]), C=10.0)
  >>> w.round(6).tolist(), round(xi, 6), duals.round(6).tolist()
  ([2.0], 0.0, [2.0])
  """
  g = np.asarray(features, np.float64)
  delta = np.asarray(losses, np.float64)
  k, d = g.shape
  cost = np.concatenate([np.ones(d), [C]])
  a_ub = -np.concatenate([g, np.ones((k, 1))], axis=1)
  res = scipy.optimize.linprog(cost, A_ub=a_ub, b_ub=-delta, bounds=[(0.0, None)] * (d + 1), method="highs")
  if res.status != 0 or res.x is None:
    raise RuntimeError(f"{what} (HiGHS, {d} weights, {k} constraints): status {res.status}: {res.message}")
  return res.x[:d], float(res.x[d]), np.clip(-np.asarray(res.ineqlin.marginals), 0.0, None)


class _WorkingSet:
  """Constraints as interleaving counts (``before``/``after``, rows with ``c_i = 0`` zeroed), their losses, and
  their features per bit ``g[K, r]``."""

  def __init__(self, ws: loop.Workspace):
    self.ws = ws
    n, p = ws.neighbors.relevant.shape
    self.scale = 2.0 / (n * p * ws.neighbors.irrelevant.shape[1])
    self.before: List[np.ndarray] = []
    self.after: List[np.ndarray] = []
    self.delta: List[float] = []
    self.g = np.zeros((0, 0))

  def features_of(self, before: np.ndarray, after: np.ndarray, bits: range) -> np.ndarray:
    xn, xp = self.ws.xn, self.ws.xp
    return np.array([self.scale * (np.sum(xn[r] * after) - np.sum(xp[r] * before)) for r in bits])

  def add(self, before: np.ndarray, after: np.ndarray, delta: float, g: np.ndarray) -> None:
    self.before.append(before.astype(np.int16))
    self.after.append(after.astype(np.int16))
    self.delta.append(float(delta))
    self.g = np.concatenate([self.g, g[None, :]], axis=0) if self.g.size else g[None, :].copy()

  def extend(self, r: int) -> None:
    """Appends every constraint's feature of the new bit ``r``."""
    col = np.array([self.features_of(b, a, range(r, r + 1))[0] for b, a in zip(self.before, self.after)])
    self.g = np.concatenate([self.g, col[:, None]], axis=1)

  def keep(self, mask: np.ndarray) -> None:
    idx = np.flatnonzero(mask)
    self.before = [self.before[i] for i in idx]
    self.after = [self.after[i] for i in idx]
    self.delta = [self.delta[i] for i in idx]
    self.g = self.g[idx]

  def pair_weights(self, duals: np.ndarray) -> np.ndarray:
    n, p = self.ws.neighbors.relevant.shape
    m = self.ws.neighbors.irrelevant.shape[1]
    wp, wn = np.zeros((n, p)), np.zeros((n, m))
    for lam, b, a in zip(duals, self.before, self.after):
      if lam > 0:
        wp += lam * b
        wn += lam * a
    return self.scale * np.concatenate([-wp, wn], axis=1)


def _constraint(ws: loop.Workspace, bit_weights: np.ndarray, *, loss: str, k: Optional[int]) -> tuple:
  """The most violated 1-slack constraint at ``bit_weights``: ``(before, after, delta_c)``, rows of ``c_i = 0``
  zeroed."""
  dp, dn = ws.distances(bit_weights)
  ranking = inference.most_violated(dp, dn, loss=loss, k=k)
  c = ranking.violation > 0
  n = dp.shape[0]
  before = np.where(c[:, None], ranking.before, 0)
  after = np.where(c[:, None], ranking.after, 0)
  return before, after, float(np.sum(ranking.loss[c]) / n)


def fit(features: Any, labels: Any, *, num_bits: int, C: float = 3.0, loss: str = "sndcg", k: int = 100,
        stagewise: bool = True, num_relevant: int = 50, num_irrelevant: int = 100, feature_kind: str = "linear",
        num_anchors: int = 300, cp_tolerance: float = 1e-3, max_cp_iterations: int = 200, tolerance: float = 1e-3,
        subproblem: Optional[loop.SubproblemOptions] = None, seed: int = 0) -> ColgenResult:
  r"""Trains StructHash (Algorithm 3 with Algorithm 2 inside): new bit, then cutting planes for the weights.

  .. math:: h_{t+1} = \arg\max_h \sum_{i, y} \mu_{(i, y)} \sum_{(j,k) \in S_i(y)} \delta h(i, j, k), \qquad
     \mu_{(i, y)} = \frac{2}{PM} \sum_c \lambda_{(c, y)} c_i

  Args:
    features: ``float[n, d]`` training features (finite).
    labels: ``int[n]`` class labels (relevance = same label).
    num_bits: the most bits to learn.
    C: > 0, the weight of the slack in eq. 48 (too small a C gives all-zero weights: RuntimeError).
    loss: ``"auc"``, ``"ndcg"`` (NDCG@``k``) or ``"sndcg"`` (simplified NDCG).
    k: the NDCG cutoff (``"ndcg"`` only).
    stagewise: two weights per bit (shared, new), the final model unweighted; else all weights every bit.
    num_relevant, num_irrelevant: neighbours per point (``P``, ``M``).
    feature_kind, num_anchors: the hash family (:mod:`hashjax.colgen.features`).
    cp_tolerance: cutting planes stop when the new constraint is violated by at most this beyond :math:`\xi`.
    max_cp_iterations: cap on cutting-plane rounds per bit (reaching it is recorded, not an error).
    tolerance: the dual-violation tolerance of the stopping rule (not stage-wise).
    subproblem: :class:`~hashjax.colgen.loop.SubproblemOptions`.
    seed: the neighbours, the anchors and the sub-problem's fallback starts.

  Returns:
    :class:`~hashjax.colgen.result.ColgenResult`; ``history[t]`` holds ``cutting_planes`` (inference rounds
    of the bit), ``subproblem_seconds``, ``master_seconds`` (inference and LPs), ``xi`` and ``objective``.

  >>> rng = np.random.default_rng(0)
  >>> y = np.repeat([0, 1, 2], 10)
  >>> x = rng.normal(size=(30, 4)) + 3.0 * np.eye(4)[y]
  >>> result = fit(x, y, num_bits=2, C=100.0, num_relevant=3, num_irrelevant=4)
  >>> result.num_bits, result.bit_weights.tolist()  # stage-wise: plain Hamming
  (2, [1.0, 1.0])
  """
  _checks.check_option("loss", loss, inference.RANKING_LOSSES)
  C = _checks.check_number("C", C, low=0.0, low_open=True)
  k = _checks.check_int("k", k, low=1) if loss == "ndcg" else None
  stagewise = _checks.check_bool("stagewise", stagewise)
  cp_tolerance = _checks.check_number("cp_tolerance", cp_tolerance, low=0.0)
  tolerance = _checks.check_number("tolerance", tolerance, low=0.0)
  max_cp = _checks.check_int("max_cp_iterations", max_cp_iterations, low=1)
  options = subproblem or loop.SubproblemOptions()
  with single_threaded_blas():
    ws = loop.prepare(features, labels, num_bits=num_bits, num_relevant=num_relevant, num_irrelevant=num_irrelevant,
                      feature_kind=feature_kind, num_anchors=num_anchors, max_dim=options.max_dim, seed=seed)
    n, p = ws.neighbors.relevant.shape
    m = ws.neighbors.irrelevant.shape[1]
    work = _WorkingSet(ws)
    worst_before, worst_after = np.full((n, p), m), np.full((n, m), p)
    worst = inference.ranking_loss(worst_before, loss=loss, num_irrelevant=m, k=k)
    work.add(worst_before, worst_after, float(worst.mean()), np.zeros(0))
    pair_w = work.pair_weights(np.array([C]))
    path: List[np.ndarray] = []
    history: List[Dict[str, Any]] = []
    stop = "num_bits"
    for _ in range(ws.xp.shape[0]):
      record = loop.add_bit(ws, pair_w, options)
      if record is None:
        stop = "degenerate"
        break
      r = ws.num_learned
      if not stagewise and r > 1 and record["violation"] <= 1.0 + tolerance:
        ws.directions.pop()
        ws.biases.pop()
        stop = "no violation"
        break
      start = time.perf_counter()
      work.extend(r - 1)
      what = f"StructHash cutting-plane LP (bit {r}, {loss})"
      project = (lambda g: np.stack([g[:, :-1].sum(axis=1), g[:, -1]], axis=1)) if stagewise and r > 1 else None
      rounds = 0
      while True:
        g = work.g if project is None else project(work.g)
        w_lp, xi, duals = solve_lp(g, np.array(work.delta), C=C, what=what)
        bit_w = w_lp if project is None else np.append(np.full(r - 1, w_lp[0]), w_lp[1])
        before, after, delta_c = _constraint(ws, bit_w, loss=loss, k=k)
        rounds += 1
        g_new = work.features_of(before, after, range(r))
        g_proj = g_new if project is None else project(g_new[None, :])[0]
        if delta_c - float(g_proj @ w_lp) <= xi + cp_tolerance or rounds >= max_cp:
          break
        work.add(before, after, delta_c, g_new)
      pair_w = work.pair_weights(duals)
      work.keep(duals > 0)
      record.update(cutting_planes=rounds, xi=xi, objective=float(np.sum(w_lp) + C * xi), lp_weights=w_lp.tolist(),
                    working_set=len(work.delta), master_seconds=time.perf_counter() - start)
      history.append(record)
      path.append(np.ones(r) if stagewise else bit_w.copy())
      if stagewise and not np.any(w_lp > 0):
        raise RuntimeError(f"StructHash: the stage-wise weights of bit {r} are all 0 (C = {C:g} is too small: raise C)")
    info = {"method": "structhash", "C": C, "loss": loss, "k": k, "stagewise": stagewise, "cp_tolerance": cp_tolerance}
    return loop.finish(ws, path, history, stop, info)
