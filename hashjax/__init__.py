"""hashjax: learning and searching binary hash codes as learning to rank, in JAX.

Modules, one concept each (see the README's design section):

* :mod:`hashjax.codes`: bits <-> packed ``uint32`` words, Hamming distances, histograms;
* :mod:`hashjax.search`: exact k-NN and radius search over packed codes;
* :mod:`hashjax.index`: inverted index and cascade search for short codes;
* :mod:`hashjax.metrics`: tie-aware AP/NDCG and friends, read from histograms;
* :mod:`hashjax.relaxations`: relaxed codes, distances, soft histograms, relaxed AP/NDCG;
* :mod:`hashjax.mappings`: hash functions (linear, MLP);
* :mod:`hashjax.objectives`: TALR, RankNet and LambdaRank losses, swap deltas, task scores;
* :mod:`hashjax.train`: the shared optax training loop with checkpoints;
* :mod:`hashjax.data`: datasets, protocols, affinities;
* :mod:`hashjax.baselines`: LSH, PCA-sign, ITQ, spectral hashing.
"""

from hashjax import baselines, codes, data, histograms, index, io, mappings, metrics, objectives, relaxations, search, train
from hashjax.codes import binarize, hamming_distance
from hashjax.histograms import distance_histogram, hamming_histogram
from hashjax.codes import pack_bits, unpack_bits, weighted_hamming_distance

__version__ = "0.1.0"
