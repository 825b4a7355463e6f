r"""LocalRank (Banerjee, Dubey, Machchhar, Chakrabarti): local learning to rank by query point-cloud similarity.

A query is the point cloud of its documents' feature vectors; two queries are
as similar as their clouds' principal directions are aligned (eq. 5). Training
clusters the queries by complete link on that similarity and trains one
linear ranker per cluster; testing ranks a query with the model of the
cluster of its most similar training query, found exhaustively or by LSH
(Figure 3). Modules:

* :mod:`hashjax.localrank.similarity`: cloud summaries, eq. 5 and the other
  similarities (mean, variance, skew, symmetric KL, Bhattacharyya);
* :mod:`hashjax.localrank.rankers`: linear RankNet rankers (scipy L-BFGS-B);
* :mod:`hashjax.localrank.selection`: complete-link clustering, exhaustive and LSH model selection;
* :mod:`hashjax.localrank.model`: :func:`fit`, :func:`score`, and the KNN (Geng et al.) and D&K baselines;
* :mod:`hashjax.localrank.baselines`: the global learning-to-rank baselines RankBoost, SVM-MAP and
  LambdaMART (LightGBM, the ``ltr`` extra).

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> x, y, q = rng.random((60, 4)), rng.integers(0, 3, 60), np.repeat(np.arange(12), 5)
>>> model = fit(x, y, q, num_clusters=3)
>>> score(model, x[:10], q[:10]).shape
(10,)
"""

from hashjax.localrank.baselines import RankBoostModel, fit_lambdamart, fit_rankboost, fit_svmmap
from hashjax.localrank.baselines import lambdamart_scores, rankboost_scores, svmmap_most_violated
from hashjax.localrank.model import SELECTIONS, LocalRankModel, Selection, dk_scores, fit, fit_clusters
from hashjax.localrank.model import knn_scores, query_features, score, select
from hashjax.localrank.rankers import RankNetPairs, fit_ranknet, fit_ranknet_pairs, ranknet_objective, ranknet_pairs
from hashjax.localrank.selection import LshTables, build_lsh, complete_link, complete_link_tree, cut_clusters
from hashjax.localrank.selection import lsh_nearest, nearest_training_query
from hashjax.localrank.similarity import SIMILARITIES, CloudSummary, cloud_distances, cloud_summaries
from hashjax.localrank.similarity import pca_similarity, principal_components

__all__ = [
    "SELECTIONS", "SIMILARITIES", "CloudSummary", "LocalRankModel", "LshTables", "RankBoostModel", "RankNetPairs",
    "Selection", "build_lsh", "cloud_distances", "cloud_summaries", "complete_link", "complete_link_tree",
    "cut_clusters", "dk_scores", "fit", "fit_clusters", "fit_lambdamart", "fit_rankboost", "fit_ranknet",
    "fit_ranknet_pairs", "fit_svmmap", "knn_scores", "lambdamart_scores", "lsh_nearest", "nearest_training_query",
    "pca_similarity", "principal_components", "query_features", "rankboost_scores", "ranknet_objective",
    "ranknet_pairs", "score", "select", "svmmap_most_violated",
]
