r"""Clustering of training queries and model selection at test time (Banerjee et al., Figures 2 and 3).

* :func:`complete_link`: complete-link agglomerative clustering of the
  training queries on a distance matrix (scipy's ``linkage`` and ``cut_tree``,
  exactly ``C`` clusters).
* :func:`nearest_training_query`: exhaustive selection, Figure 2 line 5:
  ``c* = argmax_c max_{q in Q_c} sim(D_t, D_q)`` is the cluster of the most
  similar training query (ties: the lowest index).
* :func:`build_lsh` / :func:`lsh_nearest`: Figure 3. One family of hash
  tables per principal component ``p`` and ``m`` tables each: a table hashes
  a direction ``u`` to the ``h`` signs of ``r . u`` for ``h`` random normal
  vectors ``r``. Training queries are stored by their ``p``-th direction; a
  test query probes with ``+u_p`` and ``-u_p`` (a direction's sign is
  arbitrary), counts ``CP[p][q]`` and ``CM[p][q]`` of its bucket hits and
  votes ``a_q = sum_p max(CP[p][q], CM[p][q])``. The most voted candidates
  are re-ranked by the exact eq. 5 and the best is returned; a query with no
  candidate falls back to the exhaustive search (counted). Buckets are found
  by binary search in each table's sorted keys.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import numpy as np
import scipy.cluster.hierarchy
import scipy.spatial.distance

from hashjax import _checks
from hashjax.localrank import similarity as sim_lib

__all__ = ["complete_link_tree", "cut_clusters", "complete_link", "nearest_training_query", "LshTables",
           "build_lsh", "lsh_nearest"]


def complete_link_tree(distances: np.ndarray) -> np.ndarray:
  r"""Complete-link agglomerative clustering tree (scipy linkage matrix) of a distance matrix.

  .. math:: \delta(A, B) = \max_{a \in A, b \in B} \delta(a, b)

  Args:
    distances: symmetric real ``[G, G]`` (the diagonal is ignored).

  Returns:
    ``float64[G - 1, 4]`` scipy linkage matrix (empty for ``G = 1``).

  >>> import numpy as np
  >>> complete_link_tree(np.array([[0.0, 1.0, 4.0], [1.0, 0.0, 3.0], [4.0, 3.0, 0.0]]))[:, 2].tolist()
  [1.0, 4.0]
  """
  g = getattr(distances, "shape", ())[:1]  # (G,), or () for a non-array, which check_real refuses first
  _checks.check_real("distances", distances, shape_doc="[G, G]", ndim=2, shape=g * 2, like="a square matrix [G, G]")
  d = np.asarray(distances, np.float64)
  if not np.allclose(d, d.T, rtol=1e-9, atol=1e-12):
    raise ValueError("distances: expected a symmetric matrix, got one that is not")
  if d.shape[0] == 1:
    return np.zeros((0, 4))
  d = 0.5 * (d + d.T)
  np.fill_diagonal(d, 0.0)
  return scipy.cluster.hierarchy.linkage(scipy.spatial.distance.squareform(d, checks=False), method="complete")


def cut_clusters(tree: np.ndarray, *, num_queries: int, num_clusters: int) -> np.ndarray:
  r"""Exactly ``num_clusters`` clusters from a tree, numbered by first appearance.

  .. math:: c_q \in \{0, \dots, C - 1\}

  Args:
    tree: linkage matrix of :func:`complete_link_tree`.
    num_queries: ``G``.
    num_clusters: ``C`` in ``[1, G]``.

  Returns:
    ``int64[G]``.

  >>> import numpy as np
  >>> tree = complete_link_tree(np.array([[0.0, 1.0, 4.0], [1.0, 0.0, 3.0], [4.0, 3.0, 0.0]]))
  >>> cut_clusters(tree, num_queries=3, num_clusters=2).tolist()
  [0, 0, 1]
  """
  g = _checks.check_int("num_queries", num_queries)
  num_clusters = _checks.check_int_at_most("num_clusters", num_clusters, g, what=f"the {g} training queries")
  if g == 1:
    return np.zeros(1, np.int64)
  labels = scipy.cluster.hierarchy.cut_tree(tree, n_clusters=num_clusters)[:, 0]
  _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
  rank = np.empty(len(first), np.int64)
  rank[np.argsort(first)] = np.arange(len(first))
  return rank[inverse]


def complete_link(distances: np.ndarray, *, num_clusters: int) -> np.ndarray:
  r"""Complete-link clusters of the queries of a distance matrix (Figure 2, line 6).

  .. math:: \text{merge } \arg\min_{A \ne B} \max_{a \in A, b \in B} \delta(a, b)
     \text{ until } C \text{ clusters remain}

  Args:
    distances: symmetric real ``[G, G]``.
    num_clusters: ``C`` in ``[1, G]``.

  Returns:
    ``int64[G]`` cluster of each query, numbered by first appearance.

  >>> import numpy as np
  >>> complete_link(np.array([[0.0, 1.0, 4.0], [1.0, 0.0, 3.0], [4.0, 3.0, 0.0]]), num_clusters=2).tolist()
  [0, 0, 1]
  """
  tree = complete_link_tree(distances)
  return cut_clusters(tree, num_queries=distances.shape[0], num_clusters=num_clusters)


def nearest_training_query(distances: np.ndarray) -> np.ndarray:
  r"""The most similar training query of each test query (ties: the lowest index).

  .. math:: q^*(t) = \arg\min_q \delta(D_t, D_q)

  Args:
    distances: real ``[T, G]`` test-by-training distances.

  Returns:
    ``int64[T]``.

  >>> import numpy as np
  >>> nearest_training_query(np.array([[0.5, 0.2, 0.2], [0.0, 1.0, 0.0]])).tolist()
  [1, 0]
  """
  _checks.check_real("distances", distances, shape_doc="[T, G]", ndim=2)
  return np.argmin(np.asarray(distances), axis=1).astype(np.int64)


class LshTables(NamedTuple):
  """Figure 3's hash tables ``HT[P][m]`` over the training queries' principal directions.

  ``P`` is the largest ``P_q`` of the training queries; a query's directions past its own ``P_q`` are stored too
  (eq. 5 compares ``max(P_t, P_q)`` of them).
  """
  planes: np.ndarray  #: ``float64[P, m, h, d]`` random normal hyperplanes of each table
  keys: np.ndarray  #: ``int64[P, m, G']`` sorted bucket keys of the stored directions
  members: np.ndarray  #: ``int64[P, m, G']`` the training query of each key (``G'`` = ``G``, padded)
  sizes: np.ndarray  #: ``int64[P]`` stored directions per component (queries with a ``p``-th direction)


def _bucket_keys(planes: np.ndarray, u: np.ndarray) -> np.ndarray:
  """``int64[m, K]`` keys of directions ``u[K, d]`` in ``m`` tables of ``h`` hyperplanes ``[m, h, d]``."""
  bits = (np.einsum("mhd,kd->mkh", planes, u) >= 0).astype(np.int64)
  return bits @ (np.int64(1) << np.arange(planes.shape[1], dtype=np.int64))


def build_lsh(summary: sim_lib.CloudSummary, *, num_bits: int = 8, num_tables: int = 8,
              seed: _checks.Seed = 0) -> LshTables:
  r"""Figure 3's preprocessing: every training query's ``p``-th direction in ``m`` tables of ``h`` hyperplanes.

  .. math:: \mathrm{key}_{p,j}(u) = \sum_{i < h} 2^i\, [r_{p,j,i}^\top u \ge 0], \quad r \sim \mathcal N(0, I)

  Args:
    summary: ``"pca"`` :class:`~hashjax.localrank.similarity.CloudSummary` of the training queries.
    num_bits: ``h``, hyperplanes per table (at most 62).
    num_tables: ``m``, tables per component.
    seed: the hyperplanes' numpy seed (an int >= 0 or a ``np.random.Generator``).

  Returns:
    :class:`LshTables`.

  >>> import numpy as np
  >>> s = sim_lib.cloud_summaries(np.array([[0.0, 0.0], [1.0, 0.1], [0.0, 0.0], [0.1, 1.0]]), np.array([1, 1, 2, 2]))
  >>> build_lsh(s, num_bits=4, num_tables=2).keys.shape
  (1, 2, 2)
  """
  sim_lib.check_summaries(("summary",), (summary,), similarity="pca")
  num_bits = _checks.check_int_at_most("num_bits", num_bits, 62, what="62 hyperplanes per table")
  num_tables = _checks.check_int("num_tables", num_tables)
  rng = _checks.check_rng(seed)
  g, _, d = summary.vectors.shape
  p_max = max(int(summary.num_components.max(initial=0)), 1)  # tables for p < the largest P of a training query
  planes = rng.standard_normal((p_max, num_tables, num_bits, d))
  keys = np.full((p_max, num_tables, g), np.iinfo(np.int64).max)
  members = np.zeros((p_max, num_tables, g), np.int64)
  sizes = np.zeros(p_max, np.int64)
  for p in range(p_max):
    stored = np.flatnonzero(np.any(summary.vectors[:, p] != 0, axis=1))  # queries with a p-th direction
    sizes[p] = len(stored)
    k = _bucket_keys(planes[p], summary.vectors[stored, p])
    order = np.argsort(k, axis=1, kind="stable")
    keys[p, :, :len(stored)] = np.take_along_axis(k, order, axis=1)
    members[p, :, :len(stored)] = stored[order]
  return LshTables(planes, keys, members, sizes)


def _votes(tables: LshTables, test: sim_lib.CloudSummary) -> np.ndarray:
  """``int64[T, G]`` votes ``a_q = sum_p max(CP[p][q], CM[p][q])`` of each test query (Figure 3, lines 5-16)."""
  t = len(test.query_ids)
  g = tables.members.shape[-1]
  votes = np.zeros((t, g), np.int64)
  for p in range(min(tables.planes.shape[0], test.vectors.shape[1])):
    probing = np.flatnonzero((p < test.num_components) & np.any(test.vectors[:, p] != 0, axis=1))
    if not len(probing) or not tables.sizes[p]:
      continue
    counts = []
    for sign in (1.0, -1.0):
      keys = _bucket_keys(tables.planes[p], sign * test.vectors[probing, p])  # [m, T']
      count = np.zeros((len(probing), g), np.int64)
      for j in range(keys.shape[0]):
        stored = tables.keys[p, j, :tables.sizes[p]]
        lo, hi = np.searchsorted(stored, keys[j], "left"), np.searchsorted(stored, keys[j], "right")
        length = hi - lo
        test_rows = np.repeat(np.arange(len(probing)), length)
        offsets = np.arange(length.sum()) - np.repeat(np.cumsum(length) - length, length)
        np.add.at(count, (test_rows, tables.members[p, j, np.repeat(lo, length) + offsets]), 1)
      counts.append(count)
    votes[probing] += np.maximum(counts[0], counts[1])
  return votes


def lsh_nearest(tables: LshTables, train: sim_lib.CloudSummary, test: sim_lib.CloudSummary, *,
                num_candidates: Optional[int] = 16) -> Tuple[np.ndarray, np.ndarray]:
  r"""Figure 3's query: candidates by bucket votes, the best of the most voted by the exact eq. 5.

  .. math:: a_q = \sum_p \max(CP_{p,q}, CM_{p,q}), \quad
     q^* = \arg\max_{q \in \mathrm{top}_k(a)} \mathrm{sim}(D_t, D_q)

  Args:
    tables: :class:`LshTables` of ``train``.
    train: ``"pca"`` summary of the ``G`` training queries.
    test: ``"pca"`` summary of ``T`` test queries.
    num_candidates: candidates re-ranked per test query, the most voted
      (ties: lower index); None re-ranks every training query with a vote.

  Returns:
    ``(nearest int64[T], fallback bool[T])``: the chosen training query,
    and whether the query had no candidate (then the exhaustive choice).

  >>> import numpy as np
  >>> s = sim_lib.cloud_summaries(np.array([[0.0, 0.0], [1.0, 0.1], [0.0, 0.0], [0.1, 1.0]]), np.array([1, 1, 2, 2]))
  >>> nearest, fallback = lsh_nearest(build_lsh(s, num_bits=2, num_tables=4), s, s)
  >>> nearest.tolist(), fallback.tolist()
  ([0, 1], [False, False])
  """
  _checks.check_type("tables", tables, LshTables, what="LshTables (build_lsh)")
  sim_lib.check_summaries(("train", "test"), (train, test), similarity="pca")
  _checks.check_columns("tables.members", tables.members, len(train.query_ids), what="one per query of train")
  _checks.check_columns("tables.planes", tables.planes, train.vectors.shape[-1], what="the features of train")
  num_candidates = _checks.check_int("num_candidates", num_candidates, allow_none=True)
  votes = _votes(tables, test)
  t, g = votes.shape
  k = g if num_candidates is None else min(num_candidates, g)
  order = np.argsort(-votes, axis=1, kind="stable")[:, :k]  # most voted first, ties by index
  voted = np.take_along_axis(votes, order, axis=1) > 0
  fallback = ~voted.any(axis=1)
  s = _candidate_similarity(test, train, order)
  s = np.where(voted, s, -1.0)
  best = np.max(s, axis=1, keepdims=True)
  # the best candidate, ties by the lowest training index (as the exhaustive search)
  nearest = np.min(np.where(voted & (s == best), order, g), axis=1)
  if fallback.any():
    rows = np.flatnonzero(fallback)
    nearest[rows] = np.argmax(sim_lib.pca_similarity(_rows(test, rows), train), axis=1)
  return nearest.astype(np.int64), fallback


def _candidate_similarity(test: sim_lib.CloudSummary, train: sim_lib.CloudSummary, cand: np.ndarray) -> np.ndarray:
  """Eq. 5 of each test query with its candidates ``cand[T, k]``: ``float64[T, k]`` (the rule of pca_similarity)."""
  pair = np.maximum(test.num_components[:, None], train.num_components[cand])
  total = np.zeros(cand.shape)
  for p in range(int(pair.max(initial=0))):
    if p >= test.vectors.shape[1] or p >= train.vectors.shape[1]:
      break  # zero directions past either summary's stored ones add 0
    dots = np.einsum("td,tkd->tk", test.vectors[:, p], train.vectors[cand, p])
    total += np.where(p < pair, np.abs(dots), 0.0)
  return np.where(pair > 0, total / np.maximum(pair, 1), 0.0)


def _rows(summary: sim_lib.CloudSummary, rows: np.ndarray) -> sim_lib.CloudSummary:
  return summary._replace(query_ids=summary.query_ids[rows], vectors=summary.vectors[rows],
                          num_components=summary.num_components[rows])
