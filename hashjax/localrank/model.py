r"""LocalRank (Banerjee et al., Figure 2): clustered local rankers, and the KNN and D&K local baselines.

Training (:func:`fit`): summarise each training query's cloud
(:mod:`hashjax.localrank.similarity`), cluster the queries by complete link
on the cloud distances into ``C`` clusters, train one linear RankNet ranker
per cluster (:mod:`hashjax.localrank.rankers`); with the PCA similarity, also
build the LSH tables of Figure 3. Testing (:func:`score`): summarise each
test query's cloud, take the cluster of its most similar training query
(exhaustively, or by LSH), and score its documents with that cluster's
model. ``num_clusters=1`` is the global ranker.

Baselines: :func:`knn_scores` (Geng et al.: one model per test query, trained
at test time on its ``K`` nearest training queries in a query-feature space)
and :func:`dk_scores` (Duh and Kirchhoff as Banerjee et al. reimplemented it:
linear PCA of the test query's cloud, a model trained at test time on the
training data projected onto its principal directions).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from hashjax import _checks
from hashjax.data import letor
from hashjax.localrank import rankers
from hashjax.localrank import selection as sel
from hashjax.localrank import similarity as sim_lib

__all__ = ["SELECTIONS", "LocalRankModel", "Selection", "fit_clusters", "fit", "select", "score",
           "query_features", "knn_scores", "dk_scores"]

#: ``selection=`` of :func:`select` and :func:`score`.
SELECTIONS = ("exhaustive", "lsh")


class LocalRankModel(NamedTuple):
  """A fitted LocalRank model: ``C`` linear rankers and what selects among them."""
  weights: np.ndarray  #: ``float64[C, d]`` one linear ranker per cluster
  clusters: np.ndarray  #: ``int64[G]`` cluster of each training query
  train: sim_lib.CloudSummary  #: the training queries' cloud summaries
  lsh: Optional[sel.LshTables]  #: Figure 3's tables (``"pca"`` only)
  num_components: Optional[int]  #: ``P`` (None: the variance rule)
  variance_fraction: float  #: the rule's fraction
  ridge: float  #: covariance ridge of ``"kl"``/``"bhattacharyya"``


class Selection(NamedTuple):
  """The model chosen for each test query."""
  query_ids: np.ndarray  #: ``int64[T]`` test queries in order of first appearance
  nearest: np.ndarray  #: ``int64[T]`` most similar training query (index into the model's training queries)
  clusters: np.ndarray  #: ``int64[T]`` its cluster
  fallback: np.ndarray  #: ``bool[T]`` LSH found no candidate (the exhaustive choice was taken)


def fit_clusters(pairs: rankers.RankNetPairs, clusters: np.ndarray, *, num_clusters: int, l2: float = 1e-3,
                 solver: str = "newton") -> np.ndarray:
  r"""One linear RankNet ranker per cluster of training queries (Figure 2, lines 7-9).

  .. math:: w_c = \arg\min_w L_{Q_c}(w), \quad Q_c = \{q : c_q = c\}

  Args:
    pairs: :class:`~hashjax.localrank.rankers.RankNetPairs` of the training queries.
    clusters: ``int[G]`` cluster of each of its queries, in ``[0, C)``.
    num_clusters: ``C``.
    l2: the L2 penalty of every model.
    solver: ``"newton"`` or ``"lbfgs"`` (:func:`hashjax.localrank.rankers.fit_ranknet_pairs`).

  Returns:
    ``float64[C, d]``; a cluster without any preference pair gets the ranker of all training queries.

  >>> import numpy as np
  >>> p = rankers.ranknet_pairs(np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]]),
  ...                           np.array([1, 0, 0, 1]), np.array([1, 1, 2, 2]))
  >>> w = fit_clusters(p, np.array([0, 1]), num_clusters=2, l2=0.1)
  >>> bool(w[0, 0] > w[0, 1]), bool(w[1, 0] < w[1, 1])
  (True, True)
  """
  _checks.check_type("pairs", pairs, rankers.RankNetPairs, what="RankNetPairs (ranknet_pairs)")
  num_clusters = _checks.check_int("num_clusters", num_clusters)
  _checks.check_int_range("clusters", clusters, 0, num_clusters - 1, what="cluster indices")
  _checks.check_shape("clusters", clusters, pairs.query_ids.shape, like="pairs.query_ids")
  return _fit_clusters(pairs, np.asarray(clusters), num_clusters, l2, solver)


def _fit_clusters(pairs: rankers.RankNetPairs, clusters: np.ndarray, num_clusters: int, l2: float,
                  solver: str) -> np.ndarray:
  """:func:`fit_clusters` of checked arguments (``l2`` and ``solver`` are checked by each ranker's fit)."""
  # A cluster whose queries hold no preference pair (every document of each query equally relevant) has no
  # ranker of its own; it takes the ranker of all training queries rather than all-zero weights (which would
  # tie every document of a test query routed to it).
  pair_counts = np.bincount(clusters, weights=pairs.counts, minlength=num_clusters)
  overall = None
  if not pair_counts.all():
    overall = rankers.fit_ranknet_pairs(pairs, l2=l2, solver=solver)
  return np.stack([rankers.fit_ranknet_pairs(pairs, queries=clusters == c, l2=l2, solver=solver)
                   if pair_counts[c] else overall for c in range(num_clusters)])


def fit(features: np.ndarray, labels: np.ndarray, query_ids: np.ndarray, *, num_clusters: int,
        similarity: str = "pca", seed: _checks.Seed = 0, num_components: Optional[int] = None,
        variance_fraction: float = 0.8, ridge: float = 1e-3, l2: float = 1e-3, lsh_bits: int = 8, lsh_tables: int = 8,
        solver: str = "newton") -> LocalRankModel:
  r"""Trains LocalRank (Figure 2): cloud similarity, complete-link clusters, one linear ranker each.

  .. math:: \{Q_c\}_{c < C} = \mathrm{CompleteLink}(\delta(D_q, D_{q'})), \quad
     w_c = \arg\min_w L_{Q_c}(w)

  Args:
    features: real ``[n, d]`` training documents.
    labels: ``int[n]`` graded relevance (0 = irrelevant).
    query_ids: ``int[n]`` query of each document.
    num_clusters: ``C``, at most the number of training queries; 1 is the global ranker.
    similarity: one of :data:`hashjax.localrank.SIMILARITIES` (``"pca"``: eq. 5).
    seed: the LSH hyperplanes' numpy seed, an int >= 0 or a ``np.random.Generator`` (the clustering is
      deterministic).
    num_components: fixed ``P`` of eq. 5 (None: the ``variance_fraction`` rule).
    variance_fraction: the rule's fraction (the paper's 80%).
    ridge: covariance ridge of ``"kl"`` and ``"bhattacharyya"``.
    l2: L2 penalty of every ranker.
    lsh_bits: ``h``, hyperplanes per LSH table (``"pca"``).
    lsh_tables: ``m``, tables per principal component (``"pca"``).
    solver: ``"newton"`` or ``"lbfgs"`` (:func:`hashjax.localrank.rankers.fit_ranknet_pairs`).

  Returns:
    :class:`LocalRankModel`.

  >>> import numpy as np
  >>> rng = np.random.default_rng(0)
  >>> x, y, q = rng.random((40, 3)), rng.integers(0, 3, 40), np.repeat(np.arange(8), 5)
  >>> model = fit(x, y, q, num_clusters=2)
  >>> model.weights.shape, sorted(set(model.clusters.tolist()))
  ((2, 3), [0, 1])
  """
  summary = sim_lib.cloud_summaries(features, query_ids, similarity=similarity, num_components=num_components,
                                    variance_fraction=variance_fraction, ridge=ridge)
  g = len(summary.query_ids)
  num_clusters = _checks.check_int_at_most("num_clusters", num_clusters, g, what=f"the {g} training queries")
  rng = _checks.check_rng(seed)
  pairs = rankers.ranknet_pairs(features, labels, query_ids)
  if num_clusters == 1:
    clusters = np.zeros(g, np.int64)
  else:
    clusters = sel.complete_link(sim_lib.cloud_distances(summary, summary), num_clusters=num_clusters)
  weights = _fit_clusters(pairs, clusters, num_clusters, l2, solver)
  lsh = None
  if similarity == "pca":
    lsh = sel.build_lsh(summary, num_bits=lsh_bits, num_tables=lsh_tables, seed=rng)
  return LocalRankModel(weights, clusters, summary, lsh, num_components, float(variance_fraction), float(ridge))


def _check_test(model: LocalRankModel, features: np.ndarray, query_ids: np.ndarray, selection: str) -> None:
  """The arguments of :func:`select` and :func:`score`."""
  _checks.check_type("model", model, LocalRankModel, what="a LocalRankModel (hashjax.localrank.fit)")
  _checks.check_ranking_data("features", features, None, query_ids, ndim=2, shape_doc="[n, d]")
  _checks.check_columns("features", features, model.weights.shape[1], what="the model's training features")
  if _checks.check_option("selection", selection, SELECTIONS) == "lsh" and model.lsh is None:
    raise ValueError(f"selection: 'lsh' needs a 'pca' model, got a {model.train.similarity!r} model")


def select(model: LocalRankModel, features: np.ndarray, query_ids: np.ndarray, *,
           selection: str = "exhaustive", num_candidates: Optional[int] = 16) -> Selection:
  r"""The cluster of each test query: that of its most similar training query (Figure 2, testing line 5).

  .. math:: c^*(t) = c\big(\arg\min_q \delta(D_t, D_q)\big) = \arg\max_c \max_{q \in Q_c} \mathrm{sim}(D_t, D_q)

  Args:
    model: a :class:`LocalRankModel`.
    features: real ``[n, d]`` test documents.
    query_ids: ``int[n]``.
    selection: ``"exhaustive"`` (every training query) or ``"lsh"`` (Figure 3, ``"pca"`` models only).
    num_candidates: ``"lsh"``: the most voted candidates re-ranked by eq. 5 (None: all voted).

  Returns:
    :class:`Selection`.

  >>> import numpy as np
  >>> rng = np.random.default_rng(0)
  >>> x, y, q = rng.random((40, 3)), rng.integers(0, 3, 40), np.repeat(np.arange(8), 5)
  >>> model = fit(x, y, q, num_clusters=2)
  >>> s = select(model, x, q)
  >>> bool(np.array_equal(s.clusters, model.clusters))  # each training query is nearest to itself
  True
  """
  _check_test(model, features, query_ids, selection)
  return _select(model, features, query_ids, selection, num_candidates)


def _select(model: LocalRankModel, features: np.ndarray, query_ids: np.ndarray, selection: str,
            num_candidates: Optional[int]) -> Selection:
  test = sim_lib.cloud_summaries(features, query_ids, similarity=model.train.similarity,
                                 num_components=model.num_components, variance_fraction=model.variance_fraction,
                                 ridge=model.ridge)
  t = len(test.query_ids)
  fallback = np.zeros(t, bool)
  if selection == "lsh":
    nearest, fallback = sel.lsh_nearest(model.lsh, model.train, test, num_candidates=num_candidates)
  else:
    nearest = sel.nearest_training_query(sim_lib.cloud_distances(test, model.train))
  return Selection(test.query_ids, nearest, model.clusters[nearest], fallback)


def _scores_by_query(features: np.ndarray, query_ids: np.ndarray, ids: np.ndarray, weights: np.ndarray) -> np.ndarray:
  """``float64[n]``: each document scored by the weights ``[T, d]`` of its query (``ids[T]``, distinct)."""
  order = np.argsort(ids, kind="stable")
  row = order[np.searchsorted(ids[order], np.asarray(query_ids))]
  return np.einsum("nd,nd->n", np.asarray(features, np.float64), weights[row])


def score(model: LocalRankModel, features: np.ndarray, query_ids: np.ndarray, *, selection: str = "exhaustive",
          num_candidates: Optional[int] = 16) -> np.ndarray:
  r"""Scores test documents with the model of their query's cluster (higher ranks first).

  .. math:: s_i = w_{c^*(q_i)}^\top x_i

  Args:
    model: a :class:`LocalRankModel`.
    features: real ``[n, d]`` test documents.
    query_ids: ``int[n]`` their queries.
    selection: ``"exhaustive"`` (the default, as the experiment) or ``"lsh"``.
    num_candidates: ``"lsh"``: candidates re-ranked by eq. 5.

  Returns:
    ``float64[n]``.

  >>> import numpy as np
  >>> rng = np.random.default_rng(0)
  >>> x, y, q = rng.random((40, 3)), rng.integers(0, 3, 40), np.repeat(np.arange(8), 5)
  >>> score(fit(x, y, q, num_clusters=2), x[:5], q[:5]).shape
  (5,)
  """
  _check_test(model, features, query_ids, selection)
  if model.weights.shape[0] == 1:  # the global ranker: nothing to select
    return np.asarray(features, np.float64) @ model.weights[0]
  chosen = _select(model, features, query_ids, selection=selection, num_candidates=num_candidates)
  return _scores_by_query(features, query_ids, chosen.query_ids, model.weights[chosen.clusters])


def query_features(features: np.ndarray, query_ids: np.ndarray, *, rank_feature: Optional[int] = None,
                   top: Optional[int] = None) -> np.ndarray:
  r"""Geng et al.'s query representation: the mean feature vector of a query's top documents.

  The top ``T`` documents by feature ``rank_feature`` (BM25 in Geng et al.;
  ties by file order), all documents when either is None.

  .. math:: z_q = \frac{1}{|T_q|} \sum_{i \in T_q} x_i

  Args:
    features: real ``[n, d]``.
    query_ids: ``int[n]``.
    rank_feature: 0-based column that ranks a query's documents (None: all documents).
    top: ``T``.

  Returns:
    ``float64[G, d]`` of the queries in order of first appearance.

  >>> import numpy as np
  >>> query_features(np.array([[1.0, 0.0], [3.0, 1.0], [5.0, 2.0]]), np.array([1, 1, 1]), rank_feature=1,
  ...                top=2).tolist()
  [[4.0, 1.5]]
  """
  _checks.check_ranking_data("features", features, None, query_ids, ndim=2, shape_doc="[n, d]")
  last = features.shape[1] - 1
  if rank_feature is not None:
    _checks.check_int_at_most("rank_feature", rank_feature, last, low=0, what=f"the last column, {last}")
  top = _checks.check_int("top", top, allow_none=True)
  x = np.asarray(features, np.float64)
  out = []
  for rows in letor.group_by_query(np.asarray(query_ids)).indices:
    if rank_feature is not None and top is not None:
      rows = rows[np.argsort(-x[rows, rank_feature], kind="stable")[:top]]
    out.append(x[rows].mean(axis=0))
  return np.stack(out)


def knn_scores(pairs: rankers.RankNetPairs, train_query_features: np.ndarray, features: np.ndarray,
               query_ids: np.ndarray, *, num_neighbors: int, l2: float = 1e-3, rank_feature: Optional[int] = None,
               top: Optional[int] = None, solver: str = "newton") -> np.ndarray:
  r"""Geng et al.'s KNN (online): per test query, a ranker trained on its ``K`` nearest training queries.

  .. math:: N_K(t) = \mathrm{argmin}^K_q \|z_t - z_q\|, \quad s_i = w_{N_K(t)}^\top x_i

  Args:
    pairs: :class:`~hashjax.localrank.rankers.RankNetPairs` of the training queries.
    train_query_features: ``[G, d]`` their :func:`query_features`.
    features: real ``[n, d]`` test documents.
    query_ids: ``int[n]``.
    num_neighbors: ``K`` (ties: lower index).
    l2: L2 penalty.
    rank_feature: as :func:`query_features`.
    top: as :func:`query_features`.
    solver: ``"newton"`` or ``"lbfgs"`` (:func:`hashjax.localrank.rankers.fit_ranknet_pairs`).

  Returns:
    ``float64[n]``.

  >>> import numpy as np
  >>> rng = np.random.default_rng(0)
  >>> x, y, q = rng.random((40, 3)), rng.integers(0, 3, 40), np.repeat(np.arange(8), 5)
  >>> p = rankers.ranknet_pairs(x, y, q)
  >>> knn_scores(p, query_features(x, q), x[:5], q[:5], num_neighbors=3).shape
  (5,)
  """
  _checks.check_type("pairs", pairs, rankers.RankNetPairs, what="RankNetPairs (ranknet_pairs)")
  g = len(pairs.query_ids)
  num_neighbors = _checks.check_int_at_most("num_neighbors", num_neighbors, g, what=f"the {g} training queries")
  z = query_features(features, query_ids, rank_feature=rank_feature, top=top)
  _checks.check_shape("train_query_features", train_query_features, (g, features.shape[1]), like="pairs, features")
  test_ids = letor.group_by_query(np.asarray(query_ids)).query_ids
  ref = np.asarray(train_query_features, np.float64)
  dist = np.sum(z ** 2, 1)[:, None] + np.sum(ref ** 2, 1)[None, :] - 2 * z @ ref.T
  weights = np.empty((len(test_ids), features.shape[1]))
  for i in range(len(test_ids)):
    mask = np.zeros(g, bool)
    mask[np.argsort(dist[i], kind="stable")[:num_neighbors]] = True
    weights[i] = rankers.fit_ranknet_pairs(pairs, queries=mask, l2=l2, solver=solver)
  return _scores_by_query(features, query_ids, test_ids, weights)


def dk_scores(pairs: rankers.RankNetPairs, features: np.ndarray, query_ids: np.ndarray, *,
              num_components: Optional[int] = None, variance_fraction: float = 0.8, l2: float = 1e-3,
              solver: str = "newton") -> np.ndarray:
  r"""Duh and Kirchhoff with linear PCA: per test query, a ranker on the training data projected onto its PCs.

  .. math:: U_t = \mathrm{PCA}_P(D_t), \quad v_t = \arg\min_v L(v; X U_t^\top), \quad s_i = v_t^\top U_t x_i

  Args:
    pairs: :class:`~hashjax.localrank.rankers.RankNetPairs` of the training queries.
    features: real ``[n, d]`` test documents.
    query_ids: ``int[n]``.
    num_components: fixed ``P`` (None: the ``variance_fraction`` rule).
    variance_fraction: the rule's fraction.
    l2: L2 penalty.
    solver: ``"newton"`` or ``"lbfgs"`` (:func:`hashjax.localrank.rankers.fit_ranknet_pairs`).

  Returns:
    ``float64[n]`` (a query whose cloud has no variance gets all-equal scores).

  >>> import numpy as np
  >>> rng = np.random.default_rng(0)
  >>> x, y, q = rng.random((40, 3)), rng.integers(0, 3, 40), np.repeat(np.arange(8), 5)
  >>> dk_scores(rankers.ranknet_pairs(x, y, q), x[:5], q[:5]).shape
  (5,)
  """
  _checks.check_type("pairs", pairs, rankers.RankNetPairs, what="RankNetPairs (ranknet_pairs)")
  test = sim_lib.cloud_summaries(features, query_ids, similarity="pca", num_components=num_components,
                                 variance_fraction=variance_fraction)
  _checks.check_columns("features", features, pairs.features.shape[1], what="the features of pairs")
  weights = np.zeros((len(test.query_ids), features.shape[1]))
  for i in range(len(test.query_ids)):
    u = test.vectors[i, :test.num_components[i]]
    u = u[np.any(u != 0, axis=1)]
    if not len(u):
      continue
    projected = pairs._replace(features=pairs.features @ u.T)
    weights[i] = u.T @ rankers.fit_ranknet_pairs(projected, l2=l2, solver=solver)
  return _scores_by_query(features, query_ids, test.query_ids, weights)
