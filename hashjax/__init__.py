"""hashjax: learning and searching binary hash codes as learning to rank, in JAX.

Modules, one concept each (``docs/design.md`` has the map and the rules):

* :mod:`hashjax.codes`: bits <-> packed ``uint32`` words, Hamming and weighted Hamming distances;
* :mod:`hashjax.histograms`: distance histograms ``hist[Q, b+1, V]``, the input of every ranking metric;
* :mod:`hashjax.metrics`: tie-aware AP/NDCG and friends, one formula each over histograms;
* :mod:`hashjax.evaluate`: ``evaluate_codes`` / ``evaluate_distances``, the whole tie-aware table from packed codes
  or any real-valued distances;
* :mod:`hashjax.search`: exact k-NN and radius search over packed codes;
* :mod:`hashjax.index`: exact indexes (the inverted index for short codes, multi-index hashing for long ones),
  saved and loaded atomically, and faiss interop;
* :mod:`hashjax.sharding`: databases and training batches over several devices (jax.sharding): sharded k-NN,
  radius search, histograms;
* :mod:`hashjax.relaxations`: relaxed codes, distances, soft histograms, relaxed AP/NDCG;
* :mod:`hashjax.mappings`: hash functions (linear, MLP, CNN);
* :mod:`hashjax.objectives`: TALR, RankNet and LambdaRank losses, swap deltas, task scores;
* :mod:`hashjax.train`: the shared optax training loop with checkpoints;
* :mod:`hashjax.data`: datasets, protocols, affinities;
* :mod:`hashjax.baselines`: LSH, PCA-sign, ITQ, spectral hashing, isotropic hashing;
* :mod:`hashjax.models`: saved models (a trained mapping or a fitted baseline) that encode new data;
* :mod:`hashjax.weighting`: learned bit weights for a weighted Hamming ranking (Feng et al.), and WhRank;
* :mod:`hashjax.colgen`: column generation hashing (Lin et al.): CGHash and StructHash;
* :mod:`hashjax.ranking`: learning-to-rank metrics of real-valued scores grouped by query (tie-aware, and LETOR
  4.0's official conventions), and a paired bootstrap;
* :mod:`hashjax.localrank`: LocalRank (Banerjee et al.): query point-cloud similarity, clustered local linear
  rankers, LSH model selection, and the KNN, D&K, RankBoost, SVM-MAP and LambdaMART baselines;
* :mod:`hashjax.metric_learning`: NCA and LMNN, the metric-learning baselines of Nair et al.'s kNN task.
"""

from hashjax import baselines, codes, colgen, data, evaluate, histograms, index, io, localrank, mappings  # noqa: F401
from hashjax import metric_learning, metrics, models, objectives, ranking, relaxations, search, sharding  # noqa: F401
from hashjax import train, weighting  # noqa: F401
from hashjax.codes import binarize, hamming_distance, pack_bits, unpack_bits, weighted_hamming_distance  # noqa: F401
from hashjax.evaluate import evaluate_codes, evaluate_distances  # noqa: F401
from hashjax.histograms import distance_histogram, hamming_histogram  # noqa: F401
from hashjax.models import load_model  # noqa: F401

__version__ = "0.1.0"
