"""Losses for learning binary codes: RankNet/LambdaRank with task score functions (Nair et al. 2012).

* :mod:`~hashjax.objectives.scores`: the task scores ``S`` (kNN classification
  eqs. 6-7, retrieval eq. 8, hierarchical eq. 10, regression eq. 11, tie-aware
  AP and NDCG), each ``(distances, affinity) -> score`` with keyword options,
  plus histogram forms and ``tree_similarity`` (eq. 10's class similarity from
  a class hierarchy);
* :mod:`~hashjax.objectives.swap`: swap-delta matrices ``Delta S[N, N]`` of
  one query: ``swap_deltas`` (any score function, evaluated on every swapped
  ranking), the exact closed form of each shipped score (``knn_count_deltas``,
  ``retrieval_deltas``, ``hierarchical_deltas``, ``knn_majority_deltas``,
  ``regression_deltas``, ``ndcg_deltas``, ``average_precision_deltas``) and
  ``histogram_swap_deltas`` (histogram scores, one evaluation per pair of cells);
* :mod:`~hashjax.objectives.ranknet`: ``ranknet_loss`` (eqs. 3-4) and
  ``lambdarank_loss`` (eq. 5) with the swap matrices of a ``deltas_fn`` the
  caller passes, pair and swap-mask helpers;
* :mod:`~hashjax.objectives.talr`: tie-aware objectives (He et al. 2018) from a
  mapping, a relaxed distance and a relaxed metric: ``query_vs_rest``,
  ``query_vs_database``, ``ranking_loss``, and the tie-unaware control ``tie_unaware_ap``;
* :mod:`~hashjax.objectives.deep`: deep supervised hashing losses of a mapping
  with the same ``loss_fn(params, batch, step)`` signature: ``dpsh``, ``dtsh``,
  ``hashnet`` (continuation ``hashnet_beta``), ``csq`` (``hash_centers``) and
  ``greedyhash`` (``greedyhash_init``).
"""

from hashjax.objectives import deep, ranknet, scores, swap, talr
from hashjax.objectives.deep import csq, dpsh, dtsh, greedyhash, greedyhash_init, hash_centers, hashnet
from hashjax.objectives.deep import hashnet_beta
from hashjax.objectives.ranknet import THRESHOLDS, hard_distances, lambdarank_loss, lambdarank_weights
from hashjax.objectives.ranknet import paper_swap_bins, preference_pairs, ranknet_loss, relaxed_scores
from hashjax.objectives.ranknet import subsample_documents, swap_mask, triplet_ranknet_loss
from hashjax.objectives.scores import REGRESSION_MODES, TIES, average_precision_from_histogram
from hashjax.objectives.scores import average_precision_score, hierarchical_from_histogram, hierarchical_score
from hashjax.objectives.scores import knn_count_from_histogram, knn_count_score, knn_majority_from_histogram
from hashjax.objectives.scores import knn_majority_score, label_pairs, majority_from_votes, ndcg_from_histogram
from hashjax.objectives.scores import ndcg_score, nearest_bins_mask, pair_relevance, regression_score
from hashjax.objectives.scores import retrieval_from_histogram, retrieval_score, target_offsets, tree_similarity
from hashjax.objectives.swap import SWAP_METHODS, average_precision_deltas
from hashjax.objectives.swap import hierarchical_deltas, histogram_swap_deltas, knn_count_deltas
from hashjax.objectives.swap import knn_majority_deltas, ndcg_deltas, regression_deltas, retrieval_deltas
from hashjax.objectives.swap import swap_deltas
from hashjax.objectives.talr import query_vs_database, query_vs_rest, ranking_loss, tie_unaware_ap

__all__ = [
    # swap.py
    "swap_deltas", "histogram_swap_deltas", "knn_count_deltas", "retrieval_deltas", "hierarchical_deltas",
    "knn_majority_deltas", "regression_deltas", "ndcg_deltas", "average_precision_deltas",
    "SWAP_METHODS",
    # scores.py
    "knn_count_score", "knn_majority_score", "hierarchical_score", "retrieval_score", "regression_score",
    "average_precision_score", "ndcg_score", "knn_count_from_histogram", "knn_majority_from_histogram",
    "hierarchical_from_histogram", "retrieval_from_histogram", "average_precision_from_histogram",
    "ndcg_from_histogram", "majority_from_votes", "nearest_bins_mask", "label_pairs", "pair_relevance",
    "target_offsets", "tree_similarity", "TIES", "REGRESSION_MODES",
    # ranknet.py
    "ranknet_loss", "triplet_ranknet_loss", "lambdarank_loss", "lambdarank_weights", "preference_pairs",
    "swap_mask", "paper_swap_bins", "subsample_documents", "relaxed_scores", "hard_distances", "THRESHOLDS",
    # talr.py
    "query_vs_rest", "query_vs_database", "ranking_loss", "tie_unaware_ap",
    # deep.py
    "dpsh", "dtsh", "hashnet", "hashnet_beta", "csq", "hash_centers", "greedyhash", "greedyhash_init",
]
