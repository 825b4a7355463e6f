"""hashjax's hot loops: the few kernels that benchmarks show are needed, each once (private package).

* :mod:`hashjax._kernels.bitsliced`: Hamming histograms of codes of at most 128 bits by bit-sliced counting
  (used by :mod:`hashjax.histograms` on a CPU);
* :mod:`hashjax._kernels.compare`: Hamming histograms by compare-and-count, fused by XLA (used by
  :mod:`hashjax.histograms` on a GPU or TPU);
* :mod:`hashjax._kernels.probe`: multi-index hashing's search, one query at a time in one compiled loop (numba;
  used by :mod:`hashjax.index.multi`);
* :mod:`hashjax._kernels.scan`: exact Hamming search, the block-minimum scan and the k-NN selections (used by
  :mod:`hashjax.search`);
* :mod:`hashjax._kernels.weighted`: weighted Hamming distances as per-byte table lookups summed in one fixed
  order (the same bits on every backend), the weighted scan and the pruned weighted search (used by
  :mod:`hashjax.search` and :func:`hashjax.codes.weighted_hamming_distance`).
"""
