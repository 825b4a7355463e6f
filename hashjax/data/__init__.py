"""Datasets, retrieval protocols and ground-truth affinities.

* loaders: ``read_idx``, ``load_idx_images`` (any IDX image/label pair),
  ``load_npz``, ``load_mnist_t10k`` (embedded, offline), ``load_digits``
  (scikit-learn), ``load_tfds`` (tensorflow-datasets ``data_source``, no
  TensorFlow needed; tensorflow-datasets is the optional extra
  ``pip install 'hashjax[tfds]'``, imported only when ``load_tfds`` runs);
* ranking files: ``load_svmlight_ranking`` (``qid:`` or a LightGBM/XGBoost ``query_file``), ``group_by_query``,
  ``load_letor_fold`` (LETOR 4.0's S1..S5 by ``LETOR4_FOLDS``, or ``Fold<k>/`` files);
* protocols: ``retrieval_split``, ``random_split``, ``validation_split``;
* affinities: ``label_affinity``, ``multilabel_affinity``,
  ``euclidean_thresholds``, ``euclidean_affinity_levels``,
  ``euclidean_top_fraction_affinity``;
* class hierarchies: ``class_tree_distance`` (LCA heights in a dendrogram of
  the class means, for Nair et al.'s hierarchical score).
"""

from hashjax.data.affinity import TALR_FRACTIONS, TALR_LEVELS
from hashjax.data.affinity import euclidean_affinity_levels, euclidean_thresholds
from hashjax.data.affinity import euclidean_top_fraction_affinity, label_affinity, multilabel_affinity
from hashjax.data.hierarchy import LINKAGES, class_tree_distance
from hashjax.data.letor import LETOR4_FOLDS, QueryGroups, RankingData, RankingFold, group_by_query
from hashjax.data.letor import load_letor_fold, load_svmlight_ranking
from hashjax.data.loaders import MNIST_T10K_DIR, load_digits, load_idx_images, load_mnist_t10k, load_npz
from hashjax.data.loaders import load_tfds, read_idx
from hashjax.data.protocols import RetrievalSplit, ValidationSplit
from hashjax.data.protocols import random_split, retrieval_split, validation_split

__all__ = [
    "LETOR4_FOLDS", "LINKAGES", "MNIST_T10K_DIR", "QueryGroups", "RankingData", "RankingFold", "RetrievalSplit",
    "TALR_FRACTIONS", "TALR_LEVELS", "ValidationSplit", "class_tree_distance", "euclidean_affinity_levels",
    "euclidean_thresholds", "euclidean_top_fraction_affinity", "group_by_query", "label_affinity", "load_digits",
    "load_letor_fold", "load_idx_images", "load_mnist_t10k", "load_npz", "load_svmlight_ranking", "load_tfds",
    "multilabel_affinity", "random_split", "read_idx", "retrieval_split", "validation_split",
]
