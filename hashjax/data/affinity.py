"""Ground-truth affinities between queries and database items.

``affinity[Q, N]`` holds integer levels, 0 = irrelevant (hashjax's one name
for graded ground truth; binary affinity is *relevance*).

* ``label_affinity``: same class -> 1 (single-label data, e.g. CIFAR-10, MNIST).
* ``multilabel_affinity``: number of shared labels, or 1 if any (NUS-WIDE in
  He et al. 2018, Sec. 5.2).
* ``euclidean_affinity_levels``: multi-level affinity from *global* quantiles
  of the pairwise Euclidean distances of a reference (training) set
  (``euclidean_thresholds``): He et al. 2018, Sec. 5.2, on LabelMe give the
  closest 5%, 1%, 0.2%, 0.1% of pairs the levels 1, 2, 5, 10; the binary
  "top 5% on the training set" rule they cite is the one-threshold case.
* ``euclidean_top_fraction_affinity``: *per-query* top fraction: an item is
  relevant if it lies among the closest 2% of the database to that query
  (Lin et al., StructHash, Sec. 6: "the top 2 percentile points in the whole
  dataset").

Label affinities are jit-able jnp functions (usable inside a training step);
the Euclidean ones are numpy data-preparation functions computing squared
distances in float64, a block of queries at a time.
"""

from __future__ import annotations

from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks

Array = jax.Array

#: He et al. (2018) LabelMe thresholds: fractions of closest training pairs ...
TALR_FRACTIONS = (0.05, 0.01, 0.002, 0.001)
#: ... and the affinity levels they get.
TALR_LEVELS = (1, 2, 5, 10)

_BLOCK_ELEMENTS = 1 << 22  # float64 entries per block of the distance matrix (32 MB)


def label_affinity(query_labels: Array, db_labels: Array, *, num_classes: Optional[int] = None) -> Array:
  r"""Single-label agreement: 1 where query and item share their class.

  .. math:: a_{q,i} = [y_q = y_i]

  Args:
    query_labels: ``int[Q]`` class labels (>= 0).
    db_labels: ``int[N]`` class labels (>= 0).
    num_classes: optional; when given, labels must lie in ``[0, num_classes)``.

  Returns:
    ``int32[Q, N]`` affinity in ``{0, 1}``.

  >>> import numpy as np
  >>> label_affinity(np.array([0, 2]), np.array([2, 0, 0])).tolist()
  [[0, 1, 1], [1, 0, 0]]
  """
  num_classes = _checks.check_int("num_classes", num_classes, allow_none=True)
  high = _checks.INT32_MAX if num_classes is None else num_classes - 1
  for name, y in (("query_labels", query_labels), ("db_labels", db_labels)):
    _checks.check_int_range(name, y, 0, high, what="class labels", ndim=1, shape_doc="[n]")
  return (jnp.asarray(query_labels)[:, None] == jnp.asarray(db_labels)[None, :]).astype(jnp.int32)


def multilabel_affinity(query_labels: Array, db_labels: Array, *, binary: bool = False) -> Array:
  r"""Multi-label affinity from multi-hot label matrices: shared-label count.

  .. math:: a_{q,i} = \sum_l y_{q,l}\, y_{i,l}
     \quad\text{or, with binary=True,}\quad a_{q,i} = [\textstyle\sum_l y_{q,l} y_{i,l} > 0]

  Args:
    query_labels: ``{0,1}[Q, L]`` (int or bool) multi-hot labels.
    db_labels: ``{0,1}[N, L]`` multi-hot labels over the same ``L`` labels.
    binary: 1 if at least one label is shared, instead of the count.

  Returns:
    ``int32[Q, N]`` affinity in ``[0, L]`` (``{0, 1}`` when binary).

  >>> import numpy as np
  >>> q = np.array([[1, 1, 0]])
  >>> x = np.array([[1, 1, 1], [0, 1, 0], [0, 0, 1]])
  >>> multilabel_affinity(q, x).tolist(), multilabel_affinity(q, x, binary=True).tolist()
  ([[2, 1, 0]], [[1, 1, 0]])
  """
  binary = _checks.check_bool("binary", binary)
  for name, y in (("query_labels", query_labels), ("db_labels", db_labels)):
    _checks.check_int_range(name, y, 0, 1, what="multi-hot label entries", ndim=2, shape_doc="[n, num_labels]")
  _checks.check_columns("db_labels", db_labels, query_labels.shape[1], what="the labels of query_labels")
  # An exact integer matmul: counts must not pass through a reduced-precision float product.
  counts = jnp.matmul(jnp.asarray(query_labels).astype(jnp.int32), jnp.asarray(db_labels).astype(jnp.int32).T,
                      preferred_element_type=jnp.int32)
  return (counts > 0).astype(jnp.int32) if binary else counts


def _features(name: str, x) -> np.ndarray:
  """``x`` as ``float64[n, d]``, ``n, d >= 1``: a finite real array."""
  _checks.check_real(name, x, shape_doc="[n, d]", ndim=2)
  return np.asarray(x, np.float64)


def _pair(query_features, db_features):
  q = _features("query_features", query_features)
  x = _features("db_features", db_features)
  _checks.check_columns("db_features", x, q.shape[1], what="the features of query_features")
  return q, x


def _blocks(num_rows: int, num_cols: int):
  step = max(1, _BLOCK_ELEMENTS // max(num_cols, 1))
  for start in range(0, num_rows, step):
    yield start, min(num_rows, start + step)


def _sq_dists(a: np.ndarray, b: np.ndarray, b_sq: np.ndarray) -> np.ndarray:
  d = (a * a).sum(1)[:, None] + b_sq[None, :] - 2.0 * (a @ b.T)
  return np.maximum(d, 0.0, out=d)


def _rank(fraction: float, total: int) -> int:
  """k = round(fraction * total), at least 1 (round half up, robust to float noise)."""
  return int(min(total, max(1, np.floor(fraction * total + 0.5))))


def euclidean_thresholds(features: np.ndarray, *, fractions: Sequence[float] = TALR_FRACTIONS) -> np.ndarray:
  r"""Squared-distance thresholds at global quantiles of all pairwise distances.

  Over the ``M = n (n - 1) / 2`` pairs ``i < j`` of ``features``, threshold
  ``t_f`` is the ``k``-th smallest squared distance with ``k = round(f M)``
  (at least 1), so pairs with ``d^2 <= t_f`` are the closest fraction ``f``
  of pairs (more under ties). He et al. (2018, Sec. 5.2) take these on the
  training set. Exact; streams over row blocks and keeps only the ``k``
  smallest candidates (memory ``O(f M)``).

  .. math:: t_f = d^2_{(k)},\quad k = \max(1, \mathrm{round}(f M)),\quad
     d^2_{(1)} \le \dots \le d^2_{(M)} \text{ over } \{\|x_i - x_j\|^2 : i < j\}

  Args:
    features: ``float[n, d]`` reference points (``n >= 2``), e.g. the training set.
    fractions: ``F`` fractions in ``(0, 1]``.

  Returns:
    ``float64[F]`` squared-distance thresholds, in the order of ``fractions``.

  >>> import numpy as np
  >>> x = np.array([[0.0], [1.0], [3.0], [7.0]])  # pair distances 1, 2, 3, 4, 6, 7
  >>> euclidean_thresholds(x, fractions=(0.5, 0.2)).tolist()  # k = 3 and k = 1
  [9.0, 1.0]
  """
  x = _features("features", features)
  f = _checks.check_numbers("fractions", fractions, low=0, high=1, low_open=True)
  n = x.shape[0]
  if n < 2:
    raise ValueError(f"features: expected at least 2 points to form a pair, got shape {x.shape}")
  total = n * (n - 1) // 2
  ranks = np.array([_rank(fi, total) for fi in f])
  k_max = int(ranks.max())
  x_sq = (x * x).sum(1)
  best = np.empty(0, np.float64)
  for start, stop in _blocks(n, n):
    d = _sq_dists(x[start:stop], x[start:], x_sq[start:])  # columns j >= start only
    upper = np.arange(start, n)[None, :] > np.arange(start, stop)[:, None]
    vals = d[upper]
    if best.size == k_max:
      vals = vals[vals < best.max()]
    best = np.concatenate([best, vals])
    if best.size > k_max:
      best = np.partition(best, k_max - 1)[:k_max]
  best.sort()
  return best[ranks - 1]


def euclidean_affinity_levels(query_features: np.ndarray, db_features: np.ndarray, *,
                              thresholds: Sequence[float], levels: Sequence[int] = TALR_LEVELS) -> np.ndarray:
  r"""Multi-level affinity by thresholding squared Euclidean distances.

  An item gets the highest level whose threshold it meets. With thresholds
  from ``euclidean_thresholds(train, fractions=TALR_FRACTIONS)`` and the
  default levels this is He et al.'s LabelMe affinity (2018, Sec. 5.2): the
  globally closest 5%, 1%, 0.2%, 0.1% of training pairs -> 1, 2, 5, 10. The
  thresholds are global (one per level for all queries), not per query.

  .. math:: a_{q,i} = \max\big(\{0\} \cup \{\ell_j : \|x_q - x_i\|^2 \le t_j\}\big)

  Args:
    query_features: ``float[Q, d]``.
    db_features: ``float[N, d]``.
    thresholds: ``F`` squared-distance thresholds ``t_j >= 0``.
    levels: ``F`` positive int levels ``\ell_j``, one per threshold.

  Returns:
    ``int32[Q, N]`` affinity levels (numpy).

  >>> import numpy as np
  >>> q = np.array([[0.0]])
  >>> x = np.array([[0.5], [1.5], [3.0]])
  >>> euclidean_affinity_levels(q, x, thresholds=[4.0, 1.0], levels=[1, 5]).tolist()
  [[5, 1, 0]]
  """
  q, x = _pair(query_features, db_features)
  t = _checks.check_numbers("thresholds", thresholds, low=0)
  lv = np.asarray(levels)
  _checks.check_int_range("levels", lv, 1, _checks.INT32_MAX, what="levels", ndim=1, shape_doc="[F]", shape=t.shape,
                          like="thresholds")
  order = np.argsort(lv, kind="stable")  # ascending levels: later writes win
  x_sq = (x * x).sum(1)
  out = np.zeros((q.shape[0], x.shape[0]), np.int32)
  for start, stop in _blocks(q.shape[0], x.shape[0]):
    d = _sq_dists(q[start:stop], x, x_sq)
    block = out[start:stop]
    for j in order:
      block[d <= t[j]] = lv[j]
  return out


def euclidean_top_fraction_affinity(query_features: np.ndarray, db_features: np.ndarray, *,
                                    fraction: float = 0.02) -> np.ndarray:
  r"""Per-query binary relevance: the closest ``fraction`` of the database.

  StructHash's ground truth for unlabelled data (Lin et al., Sec. 6): an item
  is relevant to a query if it lies in the top 2 percentile of the database by
  Euclidean distance to that query. With ``k = round(fraction * N)`` (at least
  1), items at a distance up to the query's ``k``-th smallest are relevant,
  so ties at the boundary are all included (no arbitrary tie order).

  .. math:: a_{q,i} = [\, \|x_q - x_i\|^2 \le d^2_{q,(k)} \,],\quad k = \max(1, \mathrm{round}(f N))

  Args:
    query_features: ``float[Q, d]``.
    db_features: ``float[N, d]``.
    fraction: ``f`` in ``(0, 1]``.

  Returns:
    ``int32[Q, N]`` relevance in ``{0, 1}`` (numpy).

  >>> import numpy as np
  >>> q = np.array([[0.0]])
  >>> x = np.array([[5.0], [1.0], [2.0], [-1.0], [9.0]])
  >>> euclidean_top_fraction_affinity(q, x, fraction=0.4).tolist()  # k = 2, tie at 1
  [[0, 1, 0, 1, 0]]
  """
  q, x = _pair(query_features, db_features)
  fraction = _checks.check_number("fraction", fraction, low=0, high=1, low_open=True)
  k = _rank(fraction, x.shape[0])
  x_sq = (x * x).sum(1)
  out = np.zeros((q.shape[0], x.shape[0]), np.int32)
  for start, stop in _blocks(q.shape[0], x.shape[0]):
    d = _sq_dists(q[start:stop], x, x_sq)
    kth = np.partition(d, k - 1, axis=1)[:, k - 1:k]
    out[start:stop] = d <= kth
  return out
