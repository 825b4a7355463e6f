r"""Loss-augmented inference of StructHash (eq. 50): the most violated ranking for AUC, NDCG@K and simplified NDCG.

For a training point with ``P`` relevant and ``M`` irrelevant neighbours at (weighted Hamming) distances
:math:`d^+_j, d^-_k`, a ranking :math:`y` enters the structural SVM only through the set :math:`S(y)` of
mis-ordered pairs (irrelevant :math:`k` ranked before relevant :math:`j`), and eqs. 43-45 and 53 give

.. math:: w^\top \delta\Psi(y) = \frac{2}{PM} \sum_{(j,k) \in S(y)} (d^-_k - d^+_j),
   \qquad H(y) = \Delta(y) - w^\top \delta\Psi(y),

the quantity inference maximises. Every loss here depends on :math:`y` only through ``before[j]``, the number
of irrelevant items ranked before relevant item ``j``:

* AUC (eq. 59): :math:`\Delta = \frac{1}{PM} \sum_j \mathrm{before}_j`;
* NDCG@K (eq. 60): :math:`\Delta = 1 - \frac{1}{Z} \sum_t S(t + a_t)` over the relevant items in rank order
  (the ``t``-th has ``a_t`` irrelevant items before it, so it sits at position ``t + a_t``),
  :math:`S(1) = 1`, :math:`S(i) = 1 / \log_2 i` for :math:`2 \le i \le K`, :math:`S(i) = 0` beyond ``K``;
  normalised by the ideal :math:`Z = \sum_{i=1}^{\min(K, P)} S(i)`, so the true ranking has loss 0 (eq. 60
  divides by :math:`\sum_{i \le K} S(i)`, which equals ``Z`` only when ``P >= K``);
* simplified NDCG (eqs. 61-62): :math:`\Delta = 1 - \frac{1}{P} \sum_j 1 / \log_2(2 + \mathrm{before}_j)`,
  the NDCG of each relevant item in the simple ranking of itself and the irrelevant items.

**The maximiser.** Exchange arguments fix the order inside each class: relevant items by ascending
:math:`d^+` (a relevant item with more irrelevant items above it gains :math:`d^+_j` per item, so the larger
distances go lower) and irrelevant items by ascending :math:`d^-`, so a ranking is the vector ``a`` of
interleaving counts, and with :math:`C_a = \sum_{k \le a} d^-_{(k)}`

.. math:: H = \Delta(a) + \frac{2}{PM} \sum_t \big(a_t d^+_{(t)} - C_{a_t}\big).

For AUC and SNDCG the loss is a sum of per-item terms, so each :math:`a_t` is maximised on its own over
:math:`0..M`; for NDCG the positions couple them through :math:`a_1 \le a_2 \le \dots`, and a dynamic program over
``t`` with a running maximum over ``a`` is exact (:math:`O(PM)` per point, vectorised over points). Ties in
distance may be ordered either way (the value is the same).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import numpy as np

from hashjax import _checks

#: ``loss=`` of :func:`most_violated` and :func:`ranking_loss`.
RANKING_LOSSES = ("auc", "ndcg", "sndcg")

__all__ = ["RANKING_LOSSES", "Ranking", "ranking_loss", "most_violated"]


class Ranking(NamedTuple):
  """The most violated ranking of every point, by its interleaving counts (original neighbour order)."""
  before: np.ndarray  # int32 [n, P]: irrelevant items ranked before each relevant item
  after: np.ndarray  # int32 [n, M]: relevant items ranked after each irrelevant item
  loss: np.ndarray  # float64 [n]: Delta(y)
  violation: np.ndarray  # float64 [n]: H(y) = Delta(y) - w^T delta Psi(y)


def _discounts(loss: str, num_positions: int, k: Optional[int]) -> np.ndarray:
  """The position gains ``S(1..num_positions)`` (index 0 is position 1)."""
  pos = np.arange(1, num_positions + 1, dtype=np.float64)
  if loss == "sndcg":
    return 1.0 / np.log2(1.0 + pos)
  gains = np.where(pos == 1, 1.0, 1.0 / np.log2(np.maximum(pos, 2.0)))
  return np.where(pos <= k, gains, 0.0)


def _check_k(loss: str, k: Any) -> Optional[int]:
  if loss != "ndcg":
    return None
  return _checks.check_int("k", k, low=1)


def ranking_loss(before: Any, *, loss: str, num_irrelevant: int, k: Optional[int] = None) -> np.ndarray:
  r"""The loss :math:`\Delta(y)` of rankings given by their interleaving counts ``before[n, P]``.

  .. math:: \Delta_{AUC} = \frac{\sum_j b_j}{PM}, \quad
     \Delta_{NDCG@K} = 1 - \frac{\sum_t S(t + b_{(t)})}{\sum_{i \le \min(K, P)} S(i)}, \quad
     \Delta_{SNDCG} = 1 - \frac{1}{P} \sum_j \frac{1}{\log_2(2 + b_j)}

  Args:
    before: ``int[n, P]`` irrelevant items ranked before each relevant item, in ``[0, num_irrelevant]``.
    loss: ``"auc"``, ``"ndcg"`` or ``"sndcg"``.
    num_irrelevant: ``M``.
    k: the NDCG cutoff ``K`` (``"ndcg"`` only).

  Returns:
    ``float64[n]`` losses in ``[0, 1]``.

  >>> ranking_loss(np.array([[0, 0], [1, 2]]), loss="auc", num_irrelevant=2).tolist()
  [0.0, 0.75]
  """
  _checks.check_option("loss", loss, RANKING_LOSSES)
  k = _check_k(loss, k)
  m = _checks.check_int("num_irrelevant", num_irrelevant, low=1)
  _checks.check_int_range("before", before, 0, m, what="interleaving counts")
  b = np.asarray(before, np.int64)
  p = b.shape[1]
  if loss == "auc":
    return b.sum(axis=1) / float(p * m)
  gains = _discounts(loss, p + m, k)
  if loss == "sndcg":
    return 1.0 - gains[b].mean(axis=1)
  pos = np.sort(b, axis=1) + np.arange(p)  # 0-based positions of the relevant items
  return 1.0 - gains[pos].sum(axis=1) / gains[:min(k, p)].sum()


def most_violated(dp: Any, dn: Any, *, loss: str, k: Optional[int] = None) -> Ranking:
  r"""The ranking maximising :math:`H(y) = \Delta(y) - w^\top \delta\Psi(y)` for every point (eq. 50).

  .. math:: y^\star = \arg\max_y\ \Delta(y) - \frac{2}{PM} \sum_{(j,k) \in S(y)} (d^-_k - d^+_j)

  Args:
    dp: ``float[n, P]`` distances to the relevant neighbours.
    dn: ``float[n, M]`` distances to the irrelevant neighbours.
    loss: ``"auc"``, ``"ndcg"`` or ``"sndcg"``.
    k: the NDCG cutoff (``"ndcg"`` only).

  Returns:
    :class:`Ranking`; ``violation >= 0`` (the true ranking has :math:`H = 0`).

  >>> r = most_violated(np.array([[1.0]]), np.array([[0.0, 2.0]]), loss="auc")
  >>> r.before.tolist(), r.after.tolist(), r.violation.round(3).tolist()  # the closer irrelevant item jumps ahead
  ([[1]], [[1, 0]], [1.5])
  """
  _checks.check_option("loss", loss, RANKING_LOSSES)
  k = _check_k(loss, k)
  _checks.check_real("dp", dp, shape_doc="[n, P]", ndim=2)
  _checks.check_real("dn", dn, shape_doc="[n, M]", ndim=2)
  _checks.check_shape("dn", dn, (dp.shape[0], dn.shape[1]), like="[n, M] with the n rows of dp")
  dp = np.asarray(dp, np.float64)
  dn = np.asarray(dn, np.float64)
  n, p = dp.shape
  m = dn.shape[1]
  scale = 2.0 / (p * m)
  order_p = np.argsort(dp, axis=1, kind="stable")
  order_n = np.argsort(dn, axis=1, kind="stable")
  dps = np.take_along_axis(dp, order_p, 1)
  cum = np.concatenate([np.zeros((n, 1)), np.cumsum(np.take_along_axis(dn, order_n, 1), axis=1)], axis=1)
  a_range = np.arange(m + 1, dtype=np.float64)
  gains = _discounts(loss, p + m, k) if loss != "auc" else None
  if loss == "ndcg":
    z = gains[:min(k, p)].sum()
  rows = np.arange(n)
  a = np.zeros((n, p), np.int64)
  if loss in ("auc", "sndcg"):
    for t in range(p):
      psi_term = scale * (a_range * dps[:, t:t + 1] - cum)
      gain = a_range / (p * m) if loss == "auc" else (1.0 - gains[:m + 1]) / p
      value = gain + psi_term
      a[:, t] = np.argmax(value, axis=1)
  else:
    arg = np.zeros((p, n, m + 1), np.int32)
    prev = np.zeros((n, m + 1))
    idx = np.arange(m + 1)
    for t in range(p):
      f = prev + scale * (a_range * dps[:, t:t + 1] - cum) - gains[t:t + m + 1] / z
      run = np.maximum.accumulate(f, axis=1)
      fresh = np.concatenate([np.ones((n, 1), bool), f[:, 1:] > run[:, :-1]], axis=1)
      arg[t] = np.maximum.accumulate(np.where(fresh, idx, 0), axis=1)
      prev = run
    pick = arg[p - 1, rows, m]
    for t in range(p - 1, -1, -1):
      a[:, t] = pick
      if t:
        pick = arg[t - 1, rows, pick]
  before = np.empty((n, p), np.int32)
  np.put_along_axis(before, order_p, a, axis=1)
  counts = np.zeros((n, m + 2), np.int64)
  np.add.at(counts, (np.repeat(rows, p), a.ravel()), 1)
  at_least = np.cumsum(counts[:, ::-1], axis=1)[:, ::-1]  # at_least[:, v]: relevant items with a >= v
  after = np.empty((n, m), np.int32)
  np.put_along_axis(after, order_n, at_least[:, 1:m + 1].astype(np.int32), axis=1)
  delta = ranking_loss(before, loss=loss, num_irrelevant=m, k=k)
  violation = delta + scale * (np.sum(before * dp, axis=1) - np.sum(after * dn, axis=1))
  return Ranking(before, after, delta, violation)
