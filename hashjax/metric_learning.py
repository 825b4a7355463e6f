r"""Learned Euclidean metrics for kNN classification: NCA and LMNN, the real-valued baselines of Nair et al.

Both fits return a linear map ``L`` ``float64[d, k]``: the learned distance of two items ``x, y`` ``[d]`` is
:math:`\|(x - y) L\|`, so callers map their features with ``features @ L`` and run any Euclidean kNN on the
mapped rows (there is no ``transform`` function). Neither gives bit vectors; Nair et al. (2012, Table 4) compare
their codes against the kNN error of these metrics.

* :func:`fit_nca`: Neighbourhood Components Analysis (Goldberger et al. 2004), through scikit-learn's
  ``NeighborhoodComponentsAnalysis`` (maintained, and already a dependency), run in float64 with one BLAS thread.
* :func:`fit_lmnn`: Large Margin Nearest Neighbour (Weinberger & Saul 2009, JMLR, eq. 13), written here (the
  ``metric-learn`` package does not run with scikit-learn 1.9). :func:`target_neighbors` and :func:`lmnn_loss`
  are its pieces, public so that they can be checked.

**LMNN.** Target neighbours :math:`j \rightsquigarrow i` are the ``k`` nearest items of :math:`i`'s class in the
input space (fixed during the fit); impostors :math:`l` are items of another class. With
:math:`d_L(a, b) = \|(x_a - x_b) L\|^2` and :math:`\mu` = ``regularization``,

.. math:: \varepsilon(L) = \frac{1}{nk} \Big[ (1 - \mu) \sum_{i, j \rightsquigarrow i} d_L(i, j)
   + \mu \sum_{i, j \rightsquigarrow i} \sum_{l: y_l \ne y_i} [1 + d_L(i, j) - d_L(i, l)]_+ \Big],

eq. 13 divided by the number :math:`nk` of target pairs (the paper sums; the minimiser is the same, and a step
size then does not depend on ``n``). The solver is gradient descent on ``L`` (not on :math:`M = L L^\top` with a
projection onto the PSD cone as in the paper's eq. 14: ``L`` keeps :math:`M` PSD by construction, allows
``k < d``, and needs no eigendecomposition per step; the price is a non-convex objective, started from the
identity, or from the top ``k`` principal directions when ``k < d``). The gradient is

.. math:: \frac{\partial \varepsilon}{\partial L} = \frac{2}{nk} \Big[ (1 - \mu) \sum_{i, j} C_{ij}
   + \mu \sum_{(i, j, l) \text{ active}} (C_{ij} - C_{il}) \Big] L, \qquad C_{ab} = (x_a - x_b)^\top (x_a - x_b).

Schedule (a simple, documented one): the impostor pairs :math:`(i, l)` with an active hinge for some target
:math:`j` are found exactly every :data:`REFRESH_EVERY` iterations; in between, only those pairs are scored (the
active-set idea of the paper's solver). The step is multiplied by 1.01 after a step that lowers the objective and
halved, the step rejected, otherwise. The fit stops after ``max_iterations`` steps, or once the exact objective
falls by less than :data:`TOLERANCE` (relative) between two refreshes, and returns the checked iterate of lowest
exact objective. All arithmetic is float64 with one BLAS thread, so a fit does not depend on the thread count.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np
import scipy.sparse
import threadpoolctl

from hashjax import _checks

#: LMNN: iterations between two exact impostor searches.
REFRESH_EVERY = 10
#: LMNN: stop once the exact objective falls by less than this fraction between two impostor searches.
TOLERANCE = 1e-6
#: Rows per block of the pairwise-distance computations (memory ``ROW_BLOCK * n`` floats).
ROW_BLOCK = 512


def _features(features: Any) -> np.ndarray:
  _checks.check_real("features", features, ndim=2, shape_doc="[n, d]")
  return np.asarray(features, np.float64)


def _check_components(num_components: Any, d: int) -> int:
  """The width ``r`` of a linear map on ``d`` features: ``num_components``, an int in ``[1, d]``, or ``d`` for None."""
  what = f"the {d} columns of features"
  return d if num_components is None else _checks.check_int_at_most("num_components", num_components, d, what=what)


def _labels_and_k(labels: Any, n: int, k: Any) -> Tuple[np.ndarray, int]:
  """Labels with at least two classes, and ``k`` no larger than the smallest class minus the item itself."""
  labels = _checks.check_class_labels(labels, n)
  classes, counts = np.unique(labels, return_counts=True)
  c = int(np.argmin(counts))
  most = int(counts[c]) - 1  # an item is not its own target neighbour
  return labels, _checks.check_int_at_most("k", k, most, what=f"{most}, the size of class {classes[c]} - 1")


def _sq_dist_pairs(z: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """``||z[a] - z[b]||^2`` ``[P]`` from the differences (not the Gram expansion), in blocks of rows."""
  out = np.empty(len(a), np.float64)
  step = 1 << 16
  for s in range(0, len(a), step):
    diff = z[a[s:s + step]] - z[b[s:s + step]]
    out[s:s + step] = np.einsum("pk,pk->p", diff, diff)
  return out


def _targets(x: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
  n = len(x)
  targets = np.empty((n, k), np.int64)
  for c in np.unique(labels):
    members = np.flatnonzero(labels == c)
    xc = x[members]
    for s in range(0, len(members), 64):
      diff = xc[s:s + 64, None, :] - xc[None, :, :]
      d = np.einsum("qmd,qmd->qm", diff, diff)
      d[np.arange(d.shape[0]), np.arange(s, s + d.shape[0])] = np.inf  # not its own neighbour
      order = np.argsort(d, axis=1, kind="stable")[:, :k]  # ties: the smaller index first
      targets[members[s:s + 64]] = members[order]
  return targets


def target_neighbors(features: Any, labels: Any, *, k: int = 3) -> np.ndarray:
  r"""LMNN's target neighbours: each item's ``k`` nearest items of its own class, nearest first.

  .. math:: T_i = \operatorname{arg\,k\text{-}min}_{j \ne i,\ y_j = y_i} \|x_i - x_j\|

  Euclidean distance in the input space ``features[n, d]``; ties go to the smaller index. ``labels`` ``int[n]``
  (at least two classes, each of at least ``k + 1`` items). Returns ``int64[n, k]`` indices into ``features``.

  >>> import numpy as np
  >>> x = np.array([[0.0], [1.0], [3.0], [10.0], [12.0], [11.5]])
  >>> target_neighbors(x, np.array([0, 0, 0, 1, 1, 1]), k=2)
  array([[1, 2],
         [0, 2],
         [1, 0],
         [5, 4],
         [5, 3],
         [4, 3]])
  """
  x = _features(features)
  labels, k = _labels_and_k(labels, len(x), k)
  return _targets(x, labels, k)


def _impostor_pairs(z: np.ndarray, labels: np.ndarray, target_dist: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
  """Every pair ``(i, l)``, ``y_l != y_i``, whose hinge ``1 + d(i, j) - d(i, l)`` is positive for some target
  ``j`` of ``i`` (``target_dist[n, k]`` the squared distances to the targets), and a few more within rounding."""
  sq = np.einsum("nk,nk->n", z, z)
  reach = target_dist.max(axis=1) + 1.0
  reach = reach + 1e-9 * (1.0 + reach)  # the Gram expansion's rounding must not drop a barely active pair
  rows, cols = [], []
  for s in range(0, len(z), ROW_BLOCK):
    d = sq[s:s + ROW_BLOCK, None] + sq[None, :] - 2.0 * (z[s:s + ROW_BLOCK] @ z.T)
    hit = (d < reach[s:s + ROW_BLOCK, None]) & (labels[s:s + ROW_BLOCK, None] != labels[None, :])
    i, l = np.nonzero(hit)
    rows.append(i + s)
    cols.append(l)
  return np.concatenate(rows).astype(np.int64), np.concatenate(cols).astype(np.int64)


def _loss_grad(x: np.ndarray, linear_map: np.ndarray, targets: np.ndarray, pairs: Tuple[np.ndarray, np.ndarray],
               mu: float) -> Tuple[float, np.ndarray]:
  """The objective and its gradient with the impostors restricted to ``pairs`` (``(i, l)``, other classes)."""
  n, k = targets.shape
  z = x @ linear_map
  ti, tj = np.repeat(np.arange(n), k), targets.ravel()
  d_target = _sq_dist_pairs(z, ti, tj).reshape(n, k)
  imp_i, imp_l = pairs
  hinge = 1.0 + d_target[imp_i] - _sq_dist_pairs(z, imp_i, imp_l)[:, None]  # [P, k]
  active = hinge > 0
  loss = ((1.0 - mu) * d_target.sum() + mu * hinge[active].sum()) / (n * k)
  # Weight of C_ab in the gradient: (1 - mu) + mu * (#active impostors) for a target pair, -mu * (#active targets)
  # for an impostor pair.
  active_per_target = np.stack([np.bincount(imp_i, weights=active[:, c], minlength=n) for c in range(k)], axis=1)
  w = np.concatenate([((1.0 - mu) + mu * active_per_target).ravel(), -mu * active.sum(axis=1)]) / (n * k)
  a, b = np.concatenate([ti, imp_i]), np.concatenate([tj, imp_l])
  # sum_p w_p (x_a - x_b)^T (z_a - z_b) = X^T (D - W - W^T) Z, D the diagonal of W's row plus column sums.
  weights = scipy.sparse.csr_matrix((w, (a, b)), shape=(n, n))
  degree = np.bincount(a, weights=w, minlength=n) + np.bincount(b, weights=w, minlength=n)
  laplacian_z = degree[:, None] * z - weights @ z - weights.T @ z
  return float(loss), 2.0 * (x.T @ laplacian_z)


def lmnn_loss(linear_map: Any, features: Any, labels: Any, targets: Any, *,
              regularization: float = 0.5) -> Tuple[float, np.ndarray]:
  r"""LMNN's objective (eq. 13 over ``n k``, as in the module docstring) at ``linear_map``, and its gradient.

  .. math:: \varepsilon(L) = \frac{1}{nk} \Big[ (1 - \mu) \sum_{i, j} d_L(i, j)
     + \mu \sum_{i, j} \sum_{l: y_l \ne y_i} [1 + d_L(i, j) - d_L(i, l)]_+ \Big]

  ``linear_map`` ``float[d, r]``, ``features`` ``float[n, d]``, ``labels`` ``int[n]``, ``targets`` ``int[n, k]``
  (each row indices of same-class items other than the row's own, e.g. :func:`target_neighbors`),
  ``regularization`` :math:`\mu \in [0, 1]`. Every impostor is counted (an exact search, not the fit's active set).
  Returns ``(loss, gradient float64[d, r])``; at a kink of a hinge the gradient takes the hinge's slope as 0.

  >>> import numpy as np
  >>> x = np.array([[0.0, 0.0], [0.5, 0.0], [0.2, 0.1], [0.7, 0.1]])
  >>> y = np.array([0, 0, 1, 1])
  >>> loss, grad = lmnn_loss(np.eye(2), x, y, target_neighbors(x, y, k=1))
  >>> round(loss, 4), grad.shape  # pull 4 * 0.25, hinges summing to 8.6: (0.5 * 1 + 0.5 * 8.6) / 4
  (1.2, (2, 2))
  """
  x = _features(features)
  n, d = x.shape
  _checks.check_real("linear_map", linear_map, ndim=2, shape_doc="[d, r]")
  if linear_map.shape[0] != d:
    raise ValueError(f"linear_map: expected {d} rows (the columns of features), got shape {tuple(linear_map.shape)}")
  labels = _checks.check_class_labels(labels, n)
  _checks.check_int_range("targets", targets, 0, n - 1, what="indices into features", ndim=2, shape_doc="[n, k]",
                          shape=(n,) + np.shape(targets)[1:], like="one row of targets per item of features")
  targets = np.asarray(targets, np.int64)
  rows = np.arange(n)[:, None]
  bad = (labels[targets] != labels[:, None]) | (targets == rows)
  if bad.any():
    i, c = (int(v) for v in np.argwhere(bad)[0])
    raise ValueError(f"targets: expected items of the row's own class other than itself, got {bad.sum()} that are "
                     f"not (first: row {i}, column {c}, item {targets[i, c]})")
  mu = _checks.check_number("regularization", regularization, low=0, high=1)
  m = np.asarray(linear_map, np.float64)
  with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
    z = x @ m
    pairs = _impostor_pairs(z, labels, _sq_dist_pairs(z, np.repeat(rows[:, 0], targets.shape[1]),
                                                      targets.ravel()).reshape(targets.shape))
    return _loss_grad(x, m, targets, pairs, mu)


def _principal_directions(x: np.ndarray, r: int) -> np.ndarray:
  """The top ``r`` principal directions of ``x`` ``[d, r]``, each signed so that its largest entry is positive."""
  centred = x - x.mean(axis=0)
  values, vectors = np.linalg.eigh(centred.T @ centred)
  top = vectors[:, np.argsort(-values, kind="stable")[:r]]
  signs = np.sign(top[np.argmax(np.abs(top), axis=0), np.arange(r)])
  return top * np.where(signs == 0, 1.0, signs)


def fit_lmnn(features: Any, labels: Any, *, num_components: Optional[int] = None, k: int = 3,
             regularization: float = 0.5, learning_rate: float = 1e-2, max_iterations: int = 1000) -> np.ndarray:
  r"""Large Margin Nearest Neighbour (Weinberger & Saul 2009): a linear map ``float64[d, r]`` for kNN.

  .. math:: L^\star \approx \arg\min_L\ \varepsilon(L) \quad \text{(eq. 13 over } nk\text{, by gradient descent on } L)

  ``features`` ``float[n, d]`` (finite), ``labels`` ``int[n]`` (at least two classes, each of at least ``k + 1``
  items); ``num_components`` ``r`` (None: ``d``; the start is the identity, or the top ``r`` principal directions
  when ``r < d``); ``k`` target neighbours per item; ``regularization`` :math:`\mu \in [0, 1]`, the weight of the
  push term (the paper's 0.5 by default); ``learning_rate`` the first step, adapted as the module docstring says;
  ``max_iterations`` >= 0 steps at most. Deterministic: there are no random draws. Cost per step
  :math:`O((nk + P) r)` for ``P`` active impostor pairs, and :math:`O(n^2 r)` per exact impostor search.
  Map features with ``features @ L``.

  >>> import numpy as np
  >>> rng = np.random.default_rng(0)
  >>> y = np.repeat([0, 1], 20)
  >>> x = np.stack([y + 0.3 * rng.normal(size=40), 3.0 * rng.normal(size=40)], axis=1)  # noise in column 1
  >>> m = fit_lmnn(x, y, k=3)
  >>> m.shape, bool(abs(m[1]).sum() < abs(m[0]).sum())  # the noisy column is shrunk
  ((2, 2), True)
  """
  x = _features(features)
  n, d = x.shape
  labels, k = _labels_and_k(labels, n, k)
  r = _check_components(num_components, d)
  mu = _checks.check_number("regularization", regularization, low=0, high=1)
  step = _checks.check_number("learning_rate", learning_rate, low=0, low_open=True)
  max_iterations = _checks.check_int("max_iterations", max_iterations, low=0)
  with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
    targets = _targets(x, labels, k)
    m = np.eye(d) if r == d else _principal_directions(x, r)
    ti, tj = np.repeat(np.arange(n), k), targets.ravel()
    best, best_loss, previous = m, np.inf, np.inf
    for it in range(max_iterations + 1):
      if it % REFRESH_EVERY == 0 or it == max_iterations:  # an exact impostor search, and the exact objective
        z = x @ m
        pairs = _impostor_pairs(z, labels, _sq_dist_pairs(z, ti, tj).reshape(n, k))
        loss, grad = _loss_grad(x, m, targets, pairs, mu)
        if loss < best_loss:
          best, best_loss = m, loss
        if it == max_iterations or 0 <= previous - loss < TOLERANCE * previous:
          break
        previous = loss
      candidate = m - step * grad
      candidate_loss, candidate_grad = _loss_grad(x, candidate, targets, pairs, mu)
      if candidate_loss < loss:
        m, loss, grad = candidate, candidate_loss, candidate_grad
        step *= 1.01
      else:
        step *= 0.5
  return best


def fit_nca(features: Any, labels: Any, *, num_components: Optional[int] = None, max_iterations: int = 100,
            seed: int = 0) -> np.ndarray:
  r"""Neighbourhood Components Analysis (Goldberger et al. 2004): a linear map ``float64[d, r]`` for kNN.

  .. math:: L^\star = \arg\max_L \sum_i \sum_{j: y_j = y_i} p_{ij}, \qquad
     p_{ij} = \frac{e^{-\|(x_i - x_j) L\|^2}}{\sum_{m \ne i} e^{-\|(x_i - x_m) L\|^2}}, \ p_{ii} = 0

  scikit-learn's ``NeighborhoodComponentsAnalysis`` (L-BFGS-B, at most ``max_iterations`` iterations, its
  default tolerance and ``init="auto"``: LDA when ``r`` is at most the number of classes minus one, else PCA when
  ``r < d``, else the identity), in float64 with one BLAS thread. ``features`` ``float[n, d]`` (finite),
  ``labels`` ``int[n]`` (at least two classes), ``num_components`` ``r`` (None: ``d``), ``seed`` scikit-learn's
  ``random_state`` (its PCA start may draw). Cost per iteration :math:`O(n^2 r)` time and :math:`O(n^2)` memory.
  Map features with ``features @ L``.

  >>> import numpy as np
  >>> rng = np.random.default_rng(0)
  >>> y = np.repeat([0, 1], 20)
  >>> x = np.stack([y + 0.3 * rng.normal(size=40), 3.0 * rng.normal(size=40)], axis=1)
  >>> fit_nca(x, y, num_components=1).shape
  (2, 1)
  """
  from sklearn.neighbors import NeighborhoodComponentsAnalysis  # pylint: disable=g-import-not-at-top
  x = _features(features)
  n, d = x.shape
  labels = _checks.check_class_labels(labels, n)
  r = _check_components(num_components, d)
  max_iterations = _checks.check_int("max_iterations", max_iterations)
  seed = _checks.check_int("seed", seed, low=0)
  nca = NeighborhoodComponentsAnalysis(n_components=r, init="auto", max_iter=max_iterations, random_state=seed)
  with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
    nca.fit(x, labels)
  return np.asarray(nca.components_, np.float64).T.copy()
