r"""Column generation hashing (Lin, Liu, Shen, Wu, Shen, "Structured Learning of Binary Codes with Column Generation").

Hash bits are learned one at a time: each new bit is the perceptron that most violates the dual constraints of the
current weighted-Hamming model, then the bit weights are re-solved. Modules, one concept each:

* :mod:`hashjax.colgen.triplets`: neighbours from labels, triplet weights collapsed into pair weights;
* :mod:`hashjax.colgen.features`: the hash family (perceptrons on raw or RBF kernel features) and its params;
* :mod:`hashjax.colgen.subproblem`: the new-bit sub-problem (spectral starts, exact bias scan, sigmoid
  refinement, degenerate-bit rejection);
* :mod:`hashjax.colgen.cghash`: CGHash, the triplet loss with its restricted master problem and KKT duals;
* :mod:`hashjax.colgen.inference`: loss-augmented inference for AUC, NDCG@K and simplified NDCG;
* :mod:`hashjax.colgen.structhash`: StructHash, the 1-slack structural SVM by cutting planes (HiGHS), stage-wise;
* :mod:`hashjax.colgen.loop` and :mod:`hashjax.colgen.result`: the shared loop and what a run returns.

A trained run becomes a saved model with :func:`hashjax.models.from_colgen` (``model.bit_weights`` for the
weighted search of :func:`hashjax.search.knn`).
"""

from hashjax.colgen import cghash, features, inference, loop, result, structhash, subproblem, triplets  # noqa: F401
from hashjax.colgen.result import ColgenResult, prefix  # noqa: F401
