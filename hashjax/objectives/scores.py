r"""Task score functions S of Nair et al. 2012 for LambdaRank's swap weights.

Every score reads one query's Hamming ranking and has the signature of
:func:`hashjax.objectives.swap_deltas`::

  score_fn(distances[..., N] int, affinity[..., N]) -> [...] float

with its options (thresholds, class similarity, code length) keyword-only, to
be bound with ``functools.partial``. Each histogram-based score also comes as
``*_from_histogram(hist[..., num_bits + 1, V]) -> [...]``, the form
:func:`hashjax.objectives.histogram_swap_deltas` reads. The exact swap
matrices of these scores are the closed forms of :mod:`hashjax.objectives.swap`
(``knn_count_deltas``, ...), one per score, with the same options.

What ``affinity`` holds depends on the task:

* relevance tasks (:func:`knn_count_score`, :func:`retrieval_score`,
  :func:`average_precision_score`, :func:`ndcg_score`): affinity levels,
  ``0`` = irrelevant (for kNN classification, ``[l_d == l_q]``, e.g.
  :func:`hashjax.data.label_affinity`);
* label tasks (:func:`knn_majority_score`, :func:`hierarchical_score`): the
  pair of labels ``l_q * num_classes + l_d`` (:func:`label_pairs`), because
  the majority vote needs every document's class, not only whether it matches
  the query's; their histogram forms instead take a histogram over document
  labels with the query's label bound as ``query_label=``;
* regression (:func:`regression_score`): the target offsets ``t_d - t_q``
  (:func:`target_offsets`).

Tie policies. The *relative threshold* ``k`` keeps every document of the ``k``
nearest non-empty distance bins, never breaking ties inside a bin (Nair Sec.
3.5.1), so at least ``k`` documents vote when there are ``k`` of them, and
all of them when fewer than ``k`` bins are occupied. The *absolute threshold*
(``radius``) keeps distances ``<= radius``. A tie between classes in the
majority vote is resolved as the expected value under uniformly random
tie-breaking (``ties="expected"``) or counted as wrong (``ties="strict"``).
AP and NDCG are tie-aware (He et al. 2018, eqs. 3-4): averaged over all orders
of the documents within each bin; those of :mod:`hashjax.metrics`, with 0
where they are undefined (no relevant document) instead of NaN. Every function here
validates its inputs and computes with ``jax.numpy``: a plain function that a
caller jits (the training step jits the whole loss).
"""

from __future__ import annotations

from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks
from hashjax import metrics
from hashjax.metrics import nearest_bins_mask

Array = jax.Array

__all__ = [
    "knn_count_score", "knn_majority_score", "hierarchical_score", "tree_similarity", "retrieval_score",
    "regression_score", "average_precision_score", "ndcg_score",
    "knn_count_from_histogram", "knn_majority_from_histogram", "hierarchical_from_histogram",
    "retrieval_from_histogram", "average_precision_from_histogram", "ndcg_from_histogram",
    "majority_from_votes", "nearest_bins_mask", "label_pairs", "pair_relevance", "target_offsets",
    "TIES", "REGRESSION_MODES",
]

#: Options of the majority scores' ``ties=``.
TIES = ("expected", "strict")
#: Options of :func:`regression_score`'s ``mode=``.
REGRESSION_MODES = ("pairs", "prediction")

_BIG = np.iinfo(np.int32).max


# --------------------------------------------------------------------------- checks


def _float():
  return jnp.result_type(float)


def check_affinity(affinity: Any, distances: Any, *, what: str = "per-document values", nonnegative: bool = False,
                   high: Optional[int] = None) -> None:
  """``affinity`` shaped like ``distances``: integer levels in ``[0, high]`` when ``high`` is given, else real
  values (non-negative with ``nonnegative``; values checked when concrete)."""
  if high is None:
    _checks.check_real("affinity", affinity, shape_doc=f"of {what}", shape=np.shape(distances), like="distances")
  if nonnegative or high is not None:
    _checks.check_nonnegative("affinity", affinity, what=what)
  if high is not None:
    _checks.check_int_range("affinity", affinity, 0, high, what=what, shape=np.shape(distances), like="distances")


def check_similarity(similarity: Any) -> int:
  """``similarity`` must be a finite real non-negative square table ``F[C, C]``; returns ``C``."""
  # F(l_q, l_i) is the graded relevance of a document of class l_i to a query of class l_q.
  _checks.check_real("similarity", similarity, shape_doc="F[C, C]", ndim=2, nonnegative="class similarities")
  _checks.check_shape("similarity", similarity, (similarity.shape[0],) * 2, like="a square table F[C, C]")
  return int(similarity.shape[0])


def check_label_pairs(affinity: Any, distances: Any, num_classes: Any) -> int:
  """``affinity`` must hold :func:`label_pairs` codes in ``[0, C^2)`` shaped like ``distances``; returns ``C``."""
  num_classes = _checks.check_int("num_classes", num_classes)
  check_affinity(affinity, distances, what="label-pair codes (label_pairs)", high=num_classes * num_classes - 1)
  return num_classes


def _check_query_label(query_label: Any, hist: Any) -> None:
  """A histogram ``hist[..., B, V]`` of non-negative counts and a ``query_label`` in ``[0, V)`` broadcasting with
  its batch shape."""
  _checks.check_histogram("hist", hist, integer=False)
  query_label = np.asarray(query_label) if _checks.is_int(query_label) else query_label
  _checks.check_int_range("query_label", query_label, 0, hist.shape[-1] - 1, what="class labels")
  try:
    np.broadcast_shapes(tuple(query_label.shape), tuple(hist.shape[:-2]))
  except ValueError:
    raise ValueError(f"query_label: shape {query_label.shape} does not broadcast with hist's batch shape "
                     f"{hist.shape[:-2]}") from None


def _check_query_doc_shapes(query_name: str, query: Any, doc_name: str, doc: Any, *, what: str) -> None:
  """Per-query values ``[Q]`` and per-document values ``[N]`` (shared documents) or ``[Q, N]`` (one row per query)."""
  if query.ndim != 1 or doc.ndim == 0 or doc.shape[:-1] not in ((), query.shape):
    raise ValueError(f"{query_name}, {doc_name}: expected [Q] and [N] or [Q, N] {what}, got {query.shape}, {doc.shape}")


# --------------------------------------------------------------------------- neighbour sets


def _nearest_bins_of_hist(hist: Array, k: int) -> Array:
  """bool[..., num_bits + 1]: the ``k`` nearest non-empty bins (:func:`hashjax.metrics.nearest_bins_mask` of
  the non-empty bins' indices)."""
  return nearest_bins_mask(jnp.where(jnp.sum(hist, axis=-1) > 0, jnp.arange(hist.shape[-2]), _BIG), k=k)


# --------------------------------------------------------------------------- affinity encodings


def label_pairs(query_labels: Array, doc_labels: Array, *, num_classes: int) -> Array:
  r"""The ``affinity`` of the label scores: query and document class in one int.

  .. math:: a_{q,i} = l_q \cdot C + l_i

  Args:
    query_labels: int ``[Q]`` class labels in ``[0, num_classes)``.
    doc_labels: int ``[N]`` (shared documents) or ``[Q, N]`` (per-query lists).
    num_classes: ``C``.

  Returns:
    ``int32[Q, N]`` codes in ``[0, C^2)``; ``a // C`` is the query's label and
    ``a % C`` the document's.

  >>> import numpy as np
  >>> label_pairs(np.array([1, 0]), np.array([1, 2, 0]), num_classes=3).tolist()
  [[4, 5, 3], [1, 2, 0]]
  """
  num_classes = _checks.check_int("num_classes", num_classes)
  for name, x in (("query_labels", query_labels), ("doc_labels", doc_labels)):
    _checks.check_int_range(name, x, 0, num_classes - 1, what="class labels")
  _check_query_doc_shapes("query_labels", query_labels, "doc_labels", doc_labels, what="class labels")
  q = jnp.asarray(query_labels).astype(jnp.int32)[:, None]
  d = jnp.asarray(doc_labels).astype(jnp.int32)
  return q * num_classes + (d[None, :] if d.ndim == 1 else d)


def pair_relevance(pairs: Array, *, num_classes: int) -> Array:
  r"""Relevance ``[l_i = l_q]`` of :func:`label_pairs` codes (for RankNet pairs, eq. 7).

  .. math:: r = [\lfloor a / C \rfloor = a \bmod C]

  Args:
    pairs: int ``[...]`` label-pair codes in ``[0, C^2)``.
    num_classes: ``C``.

  Returns:
    ``int32[...]`` in ``{0, 1}``.

  >>> import numpy as np
  >>> pair_relevance(np.array([4, 5, 3]), num_classes=3).tolist()
  [1, 0, 0]
  """
  num_classes = _checks.check_int("num_classes", num_classes)
  _checks.check_int_range("pairs", pairs, 0, num_classes * num_classes - 1, what="label-pair codes")
  p = jnp.asarray(pairs).astype(jnp.int32)
  return (p // num_classes == p % num_classes).astype(jnp.int32)


def target_offsets(query_targets: Array, doc_targets: Array) -> Array:
  r"""The ``affinity`` of :func:`regression_score`: document minus query target.

  .. math:: a_{q,i} = t_i - t_q

  Args:
    query_targets: real ``[Q]``.
    doc_targets: real ``[N]`` (shared documents) or ``[Q, N]``.

  Returns:
    float ``[Q, N]``. RankNet prefers the smaller ``|a|`` (pass
    ``preference=-abs(offsets)``).

  >>> import numpy as np
  >>> target_offsets(np.array([1.0]), np.array([0.5, 3.0])).tolist()
  [[-0.5, 2.0]]
  """
  for name, x in (("query_targets", query_targets), ("doc_targets", doc_targets)):
    _checks.check_real(name, x, shape_doc="[Q] or [N] or [Q, N] of targets", min_ndim=1)
  _check_query_doc_shapes("query_targets", query_targets, "doc_targets", doc_targets, what="targets")
  q = jnp.asarray(query_targets)
  d = jnp.asarray(doc_targets)
  dt = jnp.promote_types(jnp.promote_types(q.dtype, d.dtype), _float())
  return (d[None, :] if d.ndim == 1 else d).astype(dt) - q.astype(dt)[:, None]


# --------------------------------------------------------------------------- classification


def _masked_sum(mask: Array, values: Array) -> Array:
  """``sum_i [mask_i] values_i`` over the last axis, in ``values``' float type."""
  dt = jnp.promote_types(values.dtype, _float())
  return jnp.sum(jnp.where(mask, values.astype(dt), 0), axis=-1)


def knn_count_score(distances: Array, affinity: Array, *, k: int = 3) -> Array:
  r"""Nair's eq. 7: same-label documents among the ``k`` nearest non-empty bins.

  .. math:: S_C = \sum_{i : d_i \text{ in the } k \text{ nearest non-empty bins}} a_i

  With ``affinity = [l_i = l_q]`` this counts same-label neighbours (eq. 7);
  graded levels sum the levels (eq. 10 with ``F`` = the level).

  Args:
    distances: int ``[..., N]`` Hamming distances.
    affinity: ``[..., N]`` non-negative relevance (int levels or real weights; a
      negative entry is an error when concrete, unchecked when traced).
    k: the relative threshold (``>= 1``).

  Returns:
    float ``[...]``.

  >>> import numpy as np
  >>> knn_count_score(np.array([1, 1, 3, 5, 9]), np.array([1, 0, 1, 1, 1]), k=3).tolist()
  3.0
  """
  mask = nearest_bins_mask(distances, k=k)
  check_affinity(affinity, distances, what="relevance levels", nonnegative=True)
  return _masked_sum(mask, jnp.asarray(affinity))


def majority_from_votes(votes: Array, query_votes: Array, *, ties: str = "expected") -> Array:
  r"""Nair's eq. 6 from vote counts: whether the query's class wins the majority vote.

  The vote rule is :func:`hashjax.metrics.vote_winners` (the classes with the
  most votes win, none without a vote), as :func:`hashjax.metrics.knn_classify`
  applies it; a tie between winning classes is scored by ``ties``, where
  ``knn_classify`` predicts the smallest winning label.

  .. math:: S_C = \frac{[\, v_{l_q} = \max_c v_c > 0 \,]}{|\{c : v_c = \max_c v_c\}|}
            \quad (\text{ties="expected"}), \qquad
            [\, v_{l_q} = \max_c v_c > 0,\ \text{one top class} \,] \quad (\text{ties="strict"})

  Args:
    votes: ``[..., C]`` votes per class (counts).
    query_votes: ``[...]`` the votes of the query's class ``v_{l_q}``.
    ties: ``"expected"``: a tie among ``m`` top classes that includes the
      query's scores ``1 / m`` (uniformly random tie-breaking); ``"strict"``:
      scores 0.

  Returns:
    float ``[...]`` in ``[0, 1]``.

  >>> import numpy as np
  >>> majority_from_votes(np.array([[2, 2, 1], [3, 1, 0]]), np.array([2, 1])).tolist()
  [0.5, 0.0]
  """
  ties = _checks.check_option("ties", ties, TIES)
  winners = metrics.vote_winners(votes)
  _checks.check_real("query_votes", query_votes, shape_doc="of vote counts", shape=votes.shape[:-1],
                     like="votes without its class axis")
  num_top = jnp.sum(winners, axis=-1)
  win = jnp.any(winners, axis=-1) & (jnp.asarray(query_votes) == jnp.max(jnp.asarray(votes), axis=-1))
  if ties == "expected":
    return jnp.where(win, 1.0 / jnp.maximum(num_top, 1), 0.0).astype(_float())
  return (win & (num_top == 1)).astype(_float())


def knn_majority_score(distances: Array, affinity: Array, *, num_classes: int, k: int = 3,
                       ties: str = "expected") -> Array:
  r"""Nair's eq. 6: whether the majority label of the ``k`` nearest non-empty bins is the query's.

  .. math:: S_C = [\mathrm{MAJORITY}(l_{d_1}, \dots, l_{d_L}) = l_q]

  The vote is :func:`majority_from_votes` of the neighbours' class counts.

  Args:
    distances: int ``[..., N]`` Hamming distances.
    affinity: int ``[..., N]`` label pairs ``l_q * num_classes + l_i``
      (:func:`label_pairs`).
    num_classes: ``C``.
    k: the relative threshold (``>= 1``).
    ties: ``"expected"`` or ``"strict"`` (see :func:`majority_from_votes`).

  Returns:
    float ``[...]`` in ``[0, 1]``.

  >>> import numpy as np
  >>> pairs = label_pairs(np.array([0]), np.array([0, 1, 1, 0, 2]), num_classes=3)
  >>> knn_majority_score(np.array([[0, 1, 1, 2, 2]]), pairs, num_classes=3, k=2).tolist()
  [0.0]
  >>> knn_majority_score(np.array([[0, 1, 1, 2, 2]]), pairs, num_classes=3, k=3).tolist()
  [0.5]
  """
  mask = nearest_bins_mask(distances, k=k)
  num_classes = check_label_pairs(affinity, distances, num_classes)  # majority_from_votes checks ties
  pairs = jnp.asarray(affinity)
  lq, ld = pairs // num_classes, pairs % num_classes
  votes = jnp.sum(jax.nn.one_hot(ld, num_classes, dtype=jnp.int32) * mask[..., None], axis=-2)
  same = jnp.sum(mask & (lq == ld), axis=-1)
  return majority_from_votes(votes, same, ties=ties)


def hierarchical_score(distances: Array, affinity: Array, *, similarity: Array, k: int = 3) -> Array:
  r"""Nair's eq. 10: class similarity ``F(l_q, l_i)`` summed over the ``k`` nearest non-empty bins.

  .. math:: S_{Hier} = \sum_{i \in \text{neighbours}} F(l_q, l_i)

  A similarity function ``F(a, b)`` over ``C`` classes is passed as its table
  ``F[a, b]``; with ``F`` = identity this is eq. 7.

  Args:
    distances: int ``[..., N]`` Hamming distances.
    affinity: int ``[..., N]`` label pairs ``l_q * C + l_i`` (:func:`label_pairs`).
    similarity: real non-negative ``[C, C]`` table of ``F`` (the graded relevance
      of class ``l_i`` to a query of class ``l_q``).
    k: the relative threshold (``>= 1``).

  Returns:
    float ``[...]``.

  >>> import numpy as np
  >>> F = np.array([[1.0, 0.5], [0.5, 1.0]])
  >>> pairs = label_pairs(np.array([0]), np.array([0, 1, 1]), num_classes=2)
  >>> hierarchical_score(np.array([[0, 2, 5]]), pairs, similarity=F, k=2).tolist()
  [1.5]
  """
  num_classes = check_similarity(similarity)
  mask = nearest_bins_mask(distances, k=k)
  check_label_pairs(affinity, distances, num_classes)
  return _masked_sum(mask, jnp.asarray(similarity).reshape(-1)[jnp.asarray(affinity)])


def tree_similarity(tree_distance: Array) -> Array:
  r"""A class similarity ``F`` for :func:`hierarchical_score` from a tree distance between classes.

  .. math:: F(a, b) = 1 - \frac{h(a, b)}{\max_{c, c'} h(c, c')}

  ``h(a, b)`` is the height of the lowest common ancestor of ``a`` and ``b`` in
  a class hierarchy (e.g. :func:`hashjax.data.class_tree_distance`), so ``F``
  is 1 within a class, decreases as the LCA rises, and is 0 for two classes
  that join only at the root (Nair eq. 10's ``F``). With ``h`` = 0 everywhere
  (one class), ``F`` = 1.

  Args:
    tree_distance: real ``[C, C]`` table ``h``: non-negative, symmetric, zero on
      the diagonal.

  Returns:
    float ``[C, C]`` in ``[0, 1]``, 1 on the diagonal.

  >>> import numpy as np
  >>> h = np.array([[0.0, 1.0, 4.0], [1.0, 0.0, 4.0], [4.0, 4.0, 0.0]])  # (0 1) at height 1, then 2 at 4
  >>> tree_similarity(h).tolist()
  [[1.0, 0.75, 0.0], [0.75, 1.0, 0.0], [0.0, 0.0, 1.0]]
  """
  c = getattr(tree_distance, "shape", ())[:1]  # (C,), or () for a non-array, which check_real refuses first
  _checks.check_real("tree_distance", tree_distance, shape_doc="h[C, C]", ndim=2, nonnegative="tree distances",
                     shape=c * 2, like="a square table h[C, C]")
  if _checks.is_concrete(tree_distance):
    h = np.asarray(tree_distance)
    if np.any(np.diagonal(h) != 0) or not np.array_equal(h, h.T):
      raise ValueError("tree_distance: expected a symmetric table with zeros on the diagonal (the LCA of a class "
                       f"and itself is the class), got diagonal {np.diagonal(h).tolist()} and max |h - h^T| "
                       f"{float(np.abs(h - h.T).max())}")
  h = jnp.asarray(tree_distance, _float())
  top = jnp.max(h)
  return jnp.where(top > 0, 1 - h / jnp.where(top > 0, top, 1), jnp.ones_like(h))


# --------------------------------------------------------------------------- retrieval and regression


def retrieval_score(distances: Array, affinity: Array, *, radius: int) -> Array:
  r"""Nair's eq. 8: relevant documents within the absolute threshold (distance ``<= radius``).

  .. math:: S_R = \sum_{i : d_i \le r} a_i

  Not normalised by the number retrieved (Nair Sec. 3.5.2). Precision at
  Hamming distance ``< 2`` corresponds to ``radius=1``.

  Args:
    distances: int ``[..., N]`` Hamming distances.
    affinity: ``[..., N]`` non-negative relevance (int levels or real weights; a
      negative entry is an error when concrete, unchecked when traced).
    radius: the absolute threshold ``r >= 0``.

  Returns:
    float ``[...]``.

  >>> import numpy as np
  >>> retrieval_score(np.array([0, 1, 1, 2]), np.array([1, 0, 1, 1]), radius=1).tolist()
  2.0
  """
  _checks.check_hamming_distances(distances)
  check_affinity(affinity, distances, what="relevance levels", nonnegative=True)
  radius = _checks.check_int("radius", radius, low=0)
  return _masked_sum(jnp.asarray(distances) <= radius, jnp.asarray(affinity))


def regression_score(distances: Array, affinity: Array, *, k: int = 3, mode: str = "pairs") -> Array:
  r"""Nair's eq. 11: squared target error of the ``k`` nearest non-empty bins (lower is better).

  .. math:: S_{Reg} = \frac{1}{L} \sum_{i=1}^{L} (t_q - t_{d_i})^2 \quad (\text{mode="pairs"}),
            \qquad \Big(t_q - \frac{1}{L} \sum_i t_{d_i}\Big)^2 \quad (\text{mode="prediction"})

  ``"pairs"`` is eq. 11 as printed; ``"prediction"`` is the squared error of
  the kNN regression estimate (the neighbours' mean target). An error, not a
  reward: LambdaRank only reads ``|Delta S|``.

  Args:
    distances: int ``[..., N]`` Hamming distances.
    affinity: real ``[..., N]`` target offsets ``t_i - t_q`` (:func:`target_offsets`);
      signed, so negative values are valid.
    k: the relative threshold (``>= 1``).
    mode: ``"pairs"`` or ``"prediction"``.

  Returns:
    float ``[...]``.

  >>> import numpy as np
  >>> regression_score(np.array([0, 0, 3]), np.array([1.0, -3.0, 9.0]), k=1).tolist()
  5.0
  >>> regression_score(np.array([0, 0, 3]), np.array([1.0, -3.0, 9.0]), k=1, mode="prediction").tolist()
  1.0
  """
  mask = nearest_bins_mask(distances, k=k)
  check_affinity(affinity, distances, what="target offsets")
  mode = _checks.check_option("mode", mode, REGRESSION_MODES)
  offsets = jnp.asarray(affinity)
  offsets = offsets.astype(jnp.promote_types(offsets.dtype, _float()))
  count = jnp.sum(mask, axis=-1)
  if mode == "pairs":
    return _masked_sum(mask, offsets * offsets) / count
  mean = _masked_sum(mask, offsets) / count
  return mean * mean


# --------------------------------------------------------------------------- tie-aware AP and NDCG


def _zero_if_undefined(x):
  """hashjax.metrics returns NaN where AP / NDCG are undefined; a score of 0 gives Delta S = 0 there."""
  return jnp.where(jnp.isnan(x), jnp.zeros_like(x), x)


def average_precision_score(distances: Array, affinity: Array, *, num_bits: int, k: Optional[int] = None) -> Array:
  r"""Tie-aware average precision AP_T (He et al. 2018, eq. 3), from :mod:`hashjax.metrics`.

  .. math:: AP_T = \frac{1}{\min(N^+, k)} \sum_d \frac{n_d^+}{n_d} \sum_{t=N_{d-1}+1}^{\min(N_d, k)}
            \frac{N_{d-1}^+ + (t - N_{d-1} - 1) \frac{n_d^+ - 1}{n_d - 1} + 1}{t}

  The mean of AP(@k) over all orders of the documents within each distance
  bin (:func:`hashjax.metrics.tie_aware_ap`); documents with ``affinity > 0``
  are relevant. 0 (not NaN) when none is, so such queries get no swap weight.

  Args:
    distances: int ``[..., N]`` Hamming distances in ``[0, num_bits]``.
    affinity: int ``[..., N]`` levels (``> 0`` = relevant).
    num_bits: the code length ``b``.
    k: optional rank cutoff.

  Returns:
    float ``[...]`` in ``[0, 1]``.

  >>> import numpy as np
  >>> round(float(average_precision_score(np.array([0, 0]), np.array([1, 0]), num_bits=2)), 4)
  0.75
  """
  check_affinity(affinity, distances, what="relevance levels", high=_BIG)
  relevance = (jnp.asarray(affinity) > 0).astype(jnp.int32)  # metrics.tie_aware_ap checks distances, num_bits
  return _zero_if_undefined(metrics.tie_aware_ap(distances, relevance, num_bits=num_bits, k=k))


def ndcg_score(distances: Array, affinity: Array, *, num_bits: int, num_levels: Optional[int] = None,
               k: Optional[int] = None) -> Array:
  r"""Tie-aware NDCG (He et al. 2018, eq. 4), from :mod:`hashjax.metrics`, optionally cut at ``k``.

  .. math:: NDCG_T = \frac{1}{Z} \sum_d \frac{\sum_{i : d_i = d} G(a_i)}{n_d}
            \sum_{t=N_{d-1}+1}^{\min(N_d, k)} \frac{1}{\log_2(t + 1)}, \quad G(a) = 2^a - 1

  ``Z`` is the DCG@k of the ideal order (unaffected by ties)
  (:func:`hashjax.metrics.tie_aware_ndcg`). 0 (not NaN) when no document has
  a positive gain.

  Args:
    distances: int ``[..., N]`` Hamming distances in ``[0, num_bits]``.
    affinity: int ``[..., N]`` relevance levels ``>= 0``.
    num_bits: the code length ``b``.
    num_levels: number of levels ``V``; inferred from a concrete ``affinity``,
      required under ``jit``/``vmap`` (so inside :func:`swap_deltas`).
    k: optional cutoff position (``>= 1``); ``None`` scores the whole list.

  Returns:
    float ``[...]`` in ``[0, 1]``.

  >>> import numpy as np
  >>> round(float(ndcg_score(np.array([1, 0]), np.array([1, 0]), num_bits=2)), 4)
  0.6309
  """
  check_affinity(affinity, distances, what="relevance levels", high=_BIG)  # metrics.tie_aware_ndcg checks the rest
  return _zero_if_undefined(metrics.tie_aware_ndcg(distances, affinity, num_bits=num_bits, k=k,
                                                   num_levels=num_levels))


# --------------------------------------------------------------------------- histogram forms


def _level_sums(hist: Array) -> Array:
  """``[..., num_bits + 1]``: per bin, the sum of the items' levels ``sum_v v n_{d,v}``."""
  h = hist.astype(jnp.promote_types(hist.dtype, _float()))
  return jnp.sum(h * jnp.arange(h.shape[-1], dtype=h.dtype), axis=-1)  # not a matmul: exact on every backend


def knn_count_from_histogram(hist: Array, *, k: int = 3) -> Array:
  r""":func:`knn_count_score` from a histogram: level-weighted counts of the ``k`` nearest non-empty bins.

  .. math:: S_C = \sum_{d \in \text{top-}k} \sum_v v \, n_{d,v}

  Args:
    hist: ``[..., num_bits + 1, V]`` counts per distance and affinity level.
    k: the relative threshold (``>= 1``).

  Returns:
    float ``[...]``.

  >>> import numpy as np
  >>> from hashjax.histograms import distance_histogram
  >>> h = distance_histogram(np.array([1, 1, 3, 5, 9]), np.array([1, 0, 1, 1, 1]), num_bits=9)
  >>> knn_count_from_histogram(h, k=3).tolist()
  3.0
  """
  _checks.check_histogram("hist", hist, integer=False)
  hist = jnp.asarray(hist)
  return jnp.sum(jnp.where(_nearest_bins_of_hist(hist, k), _level_sums(hist), 0), axis=-1)


def _votes_of_hist(hist, k):
  mask = _nearest_bins_of_hist(hist, k)
  return jnp.sum(jnp.where(mask[..., None], hist, 0), axis=-2)


def knn_majority_from_histogram(hist: Array, *, query_label: Any, k: int = 3, ties: str = "expected") -> Array:
  r""":func:`knn_majority_score` from a histogram over *document labels* (eq. 6).

  .. math:: S_C = [\arg\max_c \textstyle\sum_{d \in \text{top-}k} n_{d,c} = l_q]

  Args:
    hist: ``[..., num_bits + 1, C]`` counts per distance and document class.
    query_label: int (or int ``[...]``) class of the query, bound by partial.
    k: the relative threshold (``>= 1``).
    ties: ``"expected"`` or ``"strict"`` (see :func:`knn_majority_score`).

  Returns:
    float ``[...]`` in ``[0, 1]``.

  >>> import numpy as np
  >>> from hashjax.histograms import distance_histogram
  >>> h = distance_histogram(np.array([0, 1, 1, 2, 2]), np.array([0, 1, 1, 0, 2]), num_bits=2, num_levels=3)
  >>> knn_majority_from_histogram(h, query_label=0, k=3).tolist()
  0.5
  """
  _check_query_label(query_label, hist)  # majority_from_votes checks ties
  votes = _votes_of_hist(jnp.asarray(hist), k)
  lq = jnp.broadcast_to(jnp.asarray(query_label), votes.shape[:-1]).astype(jnp.int32)
  same = jnp.take_along_axis(votes, lq[..., None], axis=-1)[..., 0]
  return majority_from_votes(votes, same, ties=ties)


def hierarchical_from_histogram(hist: Array, *, query_label: Any, similarity: Array, k: int = 3) -> Array:
  r""":func:`hierarchical_score` from a histogram over document labels (eq. 10).

  .. math:: S_{Hier} = \sum_{d \in \text{top-}k} \sum_c n_{d,c} F(l_q, c)

  Args:
    hist: ``[..., num_bits + 1, C]`` counts per distance and document class.
    query_label: int (or int ``[...]``) class of the query.
    similarity: real non-negative ``[C, C]`` table of ``F`` (the graded relevance
      of class ``l_i`` to a query of class ``l_q``).
    k: the relative threshold (``>= 1``).

  Returns:
    float ``[...]``.

  >>> import numpy as np
  >>> from hashjax.histograms import distance_histogram
  >>> h = distance_histogram(np.array([0, 2, 5]), np.array([0, 1, 1]), num_bits=5)
  >>> hierarchical_from_histogram(h, query_label=0, similarity=np.array([[1.0, 0.5], [0.5, 1.0]]), k=2).tolist()
  1.5
  """
  num_classes = check_similarity(similarity)
  _check_query_label(query_label, hist)
  _checks.check_columns("hist", hist, num_classes, what="one level per class of similarity")
  hist, similarity = jnp.asarray(hist), jnp.asarray(similarity)
  dt = jnp.promote_types(jnp.promote_types(hist.dtype, similarity.dtype), _float())
  votes = _votes_of_hist(hist.astype(dt), k)
  row = similarity.astype(dt)[jnp.broadcast_to(jnp.asarray(query_label), votes.shape[:-1]).astype(jnp.int32)]
  return jnp.sum(votes * row, axis=-1)


def retrieval_from_histogram(hist: Array, *, radius: int) -> Array:
  r""":func:`retrieval_score` from a histogram (eq. 8): level-weighted counts at distance ``<= radius``.

  .. math:: S_R = \sum_{d \le r} \sum_v v \, n_{d,v}

  Args:
    hist: ``[..., num_bits + 1, V]`` counts.
    radius: the absolute threshold ``r >= 0``.

  Returns:
    float ``[...]``.

  >>> import numpy as np
  >>> retrieval_from_histogram(np.array([[0, 1], [1, 1], [0, 1]]), radius=1).tolist()
  2.0
  """
  _checks.check_histogram("hist", hist, integer=False)
  radius = _checks.check_int("radius", radius, low=0)
  return jnp.sum(_level_sums(jnp.asarray(hist))[..., : radius + 1], axis=-1)


def average_precision_from_histogram(hist: Array, *, k: Optional[int] = None) -> Array:
  r""":func:`average_precision_score` from a histogram (levels ``>= 1`` relevant).

  .. math:: AP_T = \frac{1}{\min(N^+, k)} \sum_d \frac{n_d^+}{n_d} \sum_{t=N_{d-1}+1}^{\min(N_d, k)} \beta_d(t)

  :func:`hashjax.metrics.tie_aware_ap_from_histogram` with 0 for no relevant item.

  Args:
    hist: ``int[..., num_bits + 1, V]`` counts.
    k: optional rank cutoff.

  Returns:
    float ``[...]`` in ``[0, 1]``.

  >>> import numpy as np
  >>> round(float(average_precision_from_histogram(np.array([[1, 1], [0, 0], [0, 0]]))), 4)
  0.75
  """
  return _zero_if_undefined(metrics.tie_aware_ap_from_histogram(hist, k=k))


def ndcg_from_histogram(hist: Array, *, k: Optional[int] = None) -> Array:
  r""":func:`ndcg_score` from a histogram (level ``v`` has gain ``2^v - 1``).

  .. math:: NDCG_T = \frac{1}{Z} \sum_d \sum_v \frac{G(v) n_{d,v}}{n_d}
            \sum_{t=N_{d-1}+1}^{\min(N_d, k)} \frac{1}{\log_2(t + 1)}

  :func:`hashjax.metrics.tie_aware_ndcg_from_histogram` with 0 for no gain.

  Args:
    hist: ``int[..., num_bits + 1, V]`` counts.
    k: optional cutoff position (``>= 1``).

  Returns:
    float ``[...]`` in ``[0, 1]``.

  >>> import numpy as np
  >>> round(float(ndcg_from_histogram(np.array([[1, 0], [0, 1], [0, 0]]))), 4)
  0.6309
  """
  return _zero_if_undefined(metrics.tie_aware_ndcg_from_histogram(hist, k=k))
