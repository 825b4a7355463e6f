r"""Triplets from labels, and their collapse into pair weights (Lin et al., Sec. 3).

Each training point :math:`i` gets a fixed set of relevant neighbours :math:`\mathcal{X}_i^+` (same label) and
irrelevant neighbours :math:`\mathcal{X}_i^-` (another label); the triplets are every
:math:`(i, j, k)` with :math:`j \in \mathcal{X}_i^+, k \in \mathcal{X}_i^-` (``n P M`` of them: 2,000 points
with 50 and 100 neighbours give :math:`10^7`). No per-triplet vector is ever formed: for one bit
:math:`h \in \{0, 1\}^n` the weighted triplet sum of eq. 17 collapses into weights on the ``n (P + M)``
(point, neighbour) pairs,

.. math:: \sum_{ijk} \mu_{ijk}\, \delta h(i, j, k)
   = \sum_{ik} A_{ik} [h_i \ne h_k] - \sum_{ij} B_{ij} [h_i \ne h_j] = h^\top L h,
   \qquad A_{ik} = \sum_j \mu_{ijk},\ B_{ij} = \sum_k \mu_{ijk},

with :math:`L` the Laplacian of the symmetrised pair weights (:math:`+A` on irrelevant pairs, :math:`-B` on
relevant ones). The same pair weights come out of StructHash's cutting planes (eq. 55), so the new-bit
sub-problem (:mod:`hashjax.colgen.subproblem`) reads only ``(neighbors, pair_weights)``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from hashjax import _checks


__all__ = ["Neighbors", "sample_neighbors", "pair_weights", "pair_objective", "code_differences", "check_labels",
           "check_features"]


class Neighbors(NamedTuple):
  """The relevant and irrelevant neighbours of every training point (indices into the training set)."""
  relevant: np.ndarray  # int32 [n, P]
  irrelevant: np.ndarray  # int32 [n, M]

  @property
  def all(self) -> np.ndarray:
    """``int32[n, P + M]``: relevant neighbours, then irrelevant ones (the order of :func:`pair_weights`)."""
    return np.concatenate([self.relevant, self.irrelevant], axis=1)


def check_labels(labels: Any, num_items: int, *, name: str = "labels") -> np.ndarray:
  """``labels`` as ``int64[num_items]``; a ValueError naming ``name`` if it is not a 1-D integer array of that
  length.

  >>> check_labels(np.array([0, 1, 1]), 3).tolist()
  [0, 1, 1]
  """
  _checks.check_int_range(name, labels, what="class labels", shape=(num_items,), like="one label per training point")
  return np.asarray(labels, np.int64)


def check_features(features: Any, *, name: str = "features") -> np.ndarray:
  """``features`` as ``float64[n, d]``; a ValueError naming ``name`` for NaN/inf, a wrong rank or no rows.

  >>> check_features(np.zeros((2, 3), np.float32)).shape
  (2, 3)
  """
  _checks.check_real(name, features, shape_doc="[num_items, dim]", ndim=2)
  return np.asarray(features, np.float64)


def sample_neighbors(labels: Any, *, num_relevant: int, num_irrelevant: int, seed: _checks.Seed = 0) -> Neighbors:
  r"""Draws ``num_relevant`` same-label and ``num_irrelevant`` other-label neighbours of every point.

  .. math:: \mathcal{X}_i^+ \subset \{j \ne i : y_j = y_i\},\ |\mathcal{X}_i^+| = P; \qquad
     \mathcal{X}_i^- \subset \{k : y_k \ne y_i\},\ |\mathcal{X}_i^-| = M

  Each set is drawn uniformly without replacement. Raises a ValueError naming ``num_relevant`` /
  ``num_irrelevant`` when some class has too few members (or too few outsiders) for the counts.

  Args:
    labels: ``int[n]`` class labels of the training points.
    num_relevant: ``P``, relevant neighbours per point.
    num_irrelevant: ``M``, irrelevant neighbours per point.
    seed: int or ``numpy.random.Generator``.

  Returns:
    :class:`Neighbors` with ``relevant int32[n, P]`` and ``irrelevant int32[n, M]``.

  >>> nb = sample_neighbors(np.array([0, 0, 0, 1, 1]), num_relevant=1, num_irrelevant=2, seed=0)
  >>> nb.relevant.shape, nb.irrelevant.shape
  ((5, 1), (5, 2))
  """
  p = _checks.check_int("num_relevant", num_relevant)
  m = _checks.check_int("num_irrelevant", num_irrelevant)
  _checks.check_array("labels", labels, ndim=1, shape_doc="[n]", kinds="biu", what="array of labels", nonempty=False)
  y = np.asarray(labels, np.int64)
  classes, counts = np.unique(y, return_counts=True)
  if counts.min(initial=np.iinfo(np.int64).max) - 1 < p:
    c = classes[np.argmin(counts)]
    raise ValueError(f"num_relevant: expected at most {counts.min() - 1} (class {c} has {counts.min()} items), got {p}")
  if y.size - counts.max() < m:
    c = classes[np.argmax(counts)]
    raise ValueError(f"num_irrelevant: expected at most {y.size - counts.max()} (the points not of class {c}), got {m}")
  rng = _checks.check_rng(seed)
  relevant = np.empty((y.size, p), np.int32)
  irrelevant = np.empty((y.size, m), np.int32)
  for c in classes:
    members = np.flatnonzero(y == c)
    others = np.flatnonzero(y != c)
    for i in members:
      same = members[members != i]
      relevant[i] = rng.choice(same, p, replace=False)
      irrelevant[i] = rng.choice(others, m, replace=False)
  return Neighbors(relevant, irrelevant)


def pair_weights(mu: Any) -> np.ndarray:
  r"""The pair weights of triplet weights ``mu[n, P, M]``: ``[-B, A]`` in the order of :attr:`Neighbors.all`.

  .. math:: A_{ik} = \sum_j \mu_{ijk}, \qquad B_{ij} = \sum_k \mu_{ijk}

  Args:
    mu: ``float[n, P, M]`` non-negative weights of the triplets ``(i, relevant[i, j], irrelevant[i, k])``.

  Returns:
    ``float64[n, P + M]``: ``-B[i, j]`` for the relevant pairs, then ``A[i, k]`` for the irrelevant ones.

  >>> pair_weights(np.ones((1, 2, 3))).tolist()
  [[-3.0, -3.0, 2.0, 2.0, 2.0]]
  """
  mu = np.asarray(mu, np.float64)
  if mu.ndim != 3:
    raise ValueError(f"mu: expected triplet weights [n, P, M], got {_checks.desc(mu)}")
  return np.concatenate([-mu.sum(axis=2), mu.sum(axis=1)], axis=1)


def pair_objective(bits: Any, neighbors: Neighbors, weights: Any) -> float:
  r"""The weighted violation of one bit over pairs, eqs. 17 and 55: :math:`\sum_{iq} W_{iq} (h_i - h_{n(i,q)})^2`.

  .. math:: F(h) = \sum_{i, q} W_{iq}\, (h_i - h_{\nu_{iq}})^2

  For ``bits`` in ``{0, 1}`` this is the exact discrete objective; for values in ``[0, 1]`` (a sigmoid
  relaxation) it is the relaxed one (eq. 20).

  Args:
    bits: ``[n]`` one bit (or its relaxation) per training point.
    neighbors: the :class:`Neighbors` the weights refer to.
    weights: ``float[n, P + M]`` pair weights (:func:`pair_weights`).

  >>> nb = Neighbors(np.array([[1], [0]]), np.array([[1], [0]]))
  >>> pair_objective(np.array([0, 1]), nb, np.array([[-1.0, 2.0], [0.0, 0.5]]))
  1.5
  """
  h = np.asarray(bits, np.float64)
  diff = h[:, None] - h[neighbors.all]
  return float(np.sum(np.asarray(weights, np.float64) * diff * diff))


def code_differences(bits: Any, neighbors: Neighbors) -> tuple:
  r"""``(xp[n, P, b], xn[n, M, b])``: where each point's code differs from its relevant / irrelevant neighbours'.

  .. math:: x^+_{ijr} = |h_r(x_i) - h_r(x_{j})|, \qquad x^-_{ikr} = |h_r(x_i) - h_r(x_{k})|

  so the weighted Hamming distances of eq. 3 are ``xp @ w`` and ``xn @ w`` and a triplet's margin
  (eq. 22) is :math:`\rho_{ijk} = (x^-_{ik} - x^+_{ij})^\top w`.

  >>> nb = Neighbors(np.array([[1], [0]]), np.array([[1], [0]]))
  >>> xp, xn = code_differences(np.array([[0, 1], [1, 1]]), nb)
  >>> xp[:, 0].tolist()
  [[1, 0], [1, 0]]
  """
  b = np.asarray(bits).astype(bool)
  return ((b[:, None, :] != b[neighbors.relevant]).astype(np.uint8),
          (b[:, None, :] != b[neighbors.irrelevant]).astype(np.uint8))
