r"""The column-generation loop both methods share: training set-up, adding a bit, and the final result.

A :class:`Workspace` holds the centred training features and their whitened copy (for the spectral starts), the
sampled neighbours,
and, bit by bit, where every point's code differs from its neighbours' (``xp[r, i, j]``, ``xn[r, i, k]``, bit-major
so that the first ``r`` bits are one contiguous block). CGHash (:mod:`hashjax.colgen.cghash`) and StructHash
(:mod:`hashjax.colgen.structhash`) alternate :func:`add_bit` (the sub-problem of
:mod:`hashjax.colgen.subproblem` with their pair weights) with their own weight solve, then call :func:`finish`.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, NamedTuple, Optional

import numpy as np

from hashjax import _checks
from hashjax.colgen import features as features_lib
from hashjax.colgen import subproblem, triplets
from hashjax.colgen.result import ColgenResult

__all__ = ["Workspace", "SubproblemOptions", "prepare", "add_bit", "finish"]



class SubproblemOptions(NamedTuple):
  """Options of :func:`hashjax.colgen.subproblem.new_bit` (see there)."""
  num_starts: int = 2
  max_iterations: int = 30
  sharpness: float = 4.0
  min_fraction: float = 0.02
  duplicate_tolerance: float = 0.01
  max_dim: Optional[int] = None  # search directions within the top-max_dim principal subspace (None: all)


class Workspace:
  """Mutable training state of one column-generation run (created by :func:`prepare`).

  >>> ws = prepare(np.eye(6), np.array([0, 0, 0, 1, 1, 1]), num_bits=2, num_relevant=1, num_irrelevant=2)
  >>> ws.num_learned, ws.xp.shape
  (0, (2, 6, 1))
  """

  def __init__(self, params: features_lib.HashParams, phi: np.ndarray, neighbors: triplets.Neighbors,
               num_bits: int, seed: int, max_dim: Optional[int] = None):
    self.params = params
    self.phi = phi
    self.neighbors = neighbors
    self.whiten = subproblem.whitening(phi, max_dim=max_dim)
    self.psi = phi @ self.whiten
    n, p = neighbors.relevant.shape
    m = neighbors.irrelevant.shape[1]
    self.xp = np.zeros((num_bits, n, p))
    self.xn = np.zeros((num_bits, n, m))
    self.bits = np.zeros((n, num_bits), np.uint8)
    self.directions: List[np.ndarray] = []
    self.biases: List[float] = []
    self.seed = seed

  @property
  def num_learned(self) -> int:
    """Bits added so far."""
    return len(self.biases)

  @property
  def num_triplets(self) -> int:
    """``n P M``."""
    n, p = self.neighbors.relevant.shape
    return n * p * self.neighbors.irrelevant.shape[1]

  def distances(self, weights: np.ndarray) -> tuple:
    r"""Weighted Hamming distances ``(dp[n, P], dn[n, M])`` to the neighbours under the first ``len(weights)``
    bits, :math:`d = \sum_r w_r x_r`."""
    r = len(weights)
    n, p = self.neighbors.relevant.shape
    m = self.neighbors.irrelevant.shape[1]
    if r == 0:
      return np.zeros((n, p)), np.zeros((n, m))
    w = np.asarray(weights, np.float64)
    return (w @ self.xp[:r].reshape(r, -1)).reshape(n, p), (w @ self.xn[:r].reshape(r, -1)).reshape(n, m)


def prepare(features: Any, labels: Any, *, num_bits: int, num_relevant: int, num_irrelevant: int,
            feature_kind: str = "linear", num_anchors: int = 300, max_dim: Optional[int] = None,
            seed: int = 0) -> Workspace:
  r"""Checks the training data and sets up a :class:`Workspace`: feature map, neighbours, whitening.

  .. math:: \Phi = \phi(X) - \bar\phi, \qquad (\mathcal{X}_i^+, \mathcal{X}_i^-)_{i \le n}

  Every argument is checked before any solve: NaN features, labels of the wrong length or too few relevant or
  irrelevant points for the counts raise a ValueError naming the argument.

  >>> prepare(np.eye(4), np.array([0, 0, 1, 1]), num_bits=1, num_relevant=2, num_irrelevant=1)
  Traceback (most recent call last):
  ...
  ValueError: num_relevant: expected at most 1 (class 0 has 2 items), got 2
  """
  x = triplets.check_features(features)
  y = triplets.check_labels(labels, x.shape[0])
  num_bits = _checks.check_int("num_bits", num_bits)
  _checks.check_option("feature_kind", feature_kind, features_lib.FEATURE_KINDS)
  seed = _checks.check_int("seed", seed, low=0)
  rng = np.random.default_rng(seed)
  neighbors = triplets.sample_neighbors(y, num_relevant=num_relevant, num_irrelevant=num_irrelevant, seed=rng)
  params = features_lib.fit_feature_map(x, kind=feature_kind, num_anchors=num_anchors, seed=rng)
  phi = features_lib.feature_map(params, x)
  return Workspace(params, phi, neighbors, num_bits, seed, max_dim)


def add_bit(ws: Workspace, pair_weights: np.ndarray, options: SubproblemOptions) -> Optional[Dict[str, Any]]:
  r"""Solves the sub-problem for ``pair_weights`` and appends the new bit to ``ws``; returns its record, or
  None when every candidate was degenerate (nothing is appended).

  .. math:: h_{r+1} = \arg\max_h \sum_{iq} W_{iq} (h_i - h_{\nu_{iq}})^2

  The record: ``violation`` (the exact objective of the new bit, the left side of the dual constraint),
  ``spectral_value`` (the best unrefined spectral start), ``refined``, ``rejected``, ``subproblem_seconds``.
  """
  start = time.perf_counter()
  r = ws.num_learned
  bit = subproblem.new_bit(ws.phi, ws.neighbors, pair_weights, existing=ws.bits[:, :r], whiten=ws.whiten, psi=ws.psi,
                           num_starts=options.num_starts, max_iterations=options.max_iterations,
                           sharpness=options.sharpness, min_fraction=options.min_fraction,
                           duplicate_tolerance=options.duplicate_tolerance,
                           seed=np.random.default_rng([ws.seed, r]))
  if bit is None:
    return None
  h = bit.bits.astype(bool)
  ws.xp[r] = h[:, None] != h[ws.neighbors.relevant]
  ws.xn[r] = h[:, None] != h[ws.neighbors.irrelevant]
  ws.bits[:, r] = bit.bits
  ws.directions.append(bit.direction)
  ws.biases.append(bit.bias)
  return {"bit": r + 1, "violation": bit.value, "spectral_value": bit.spectral_value, "refined": bit.refined,
          "rejected": bit.rejected, "subproblem_seconds": time.perf_counter() - start}


def finish(ws: Workspace, weight_path: List[np.ndarray], history: List[Dict[str, Any]], stop_reason: str,
           info: Dict[str, Any]) -> ColgenResult:
  """The :class:`~hashjax.colgen.result.ColgenResult` of the bits in ``ws`` and their weights.

  Raises a RuntimeError when no bit was learned or every final weight is 0 (never a silent zero model).
  """
  r = ws.num_learned
  if r == 0:
    raise RuntimeError(f"column generation: no bit was learned ({stop_reason}), no non-degenerate hash function")
  weights = np.asarray(weight_path[-1], np.float64)
  if not np.any(weights > 0):
    raise RuntimeError("column generation: every learned bit weight is 0 (the regulariser wins: raise C)")
  params = ws.params._replace(projection=np.stack(ws.directions, axis=1), bias=np.asarray(ws.biases))
  return ColgenResult(params, weights.copy(), [np.asarray(w, np.float64) for w in weight_path],
                      ws.bits[:, :r].copy(), history, stop_reason,
                      {**info, "num_train": int(ws.phi.shape[0]), "num_triplets": ws.num_triplets,
                       "feature_dim": int(ws.phi.shape[1])})
