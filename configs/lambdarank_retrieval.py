r"""Nair et al. (2012) Sec. 5.2 protocol: LambdaRank codes for retrieval of Euclidean neighbours.

The relevant items of a query are its 50 Euclidean nearest neighbours in
feature space (SIFT1M / Tiny Images protocol; here on the embedded MNIST-10k:
training queries against the training set, evaluation queries against the
9,000-item database; a training query's relevant items are the same fraction,
28 of the other 4,999 training items, ``train_neighbors="scaled"``). LambdaRank's
score counts the relevant items in the 3 nearest non-empty bins (``knn_count``;
``--config.score=retrieval`` is S_R of eq. 8 with the absolute threshold). The
codes are evaluated by precision within Hamming distance < 2 (``radius=1``:
``d <= 1``), averaged over queries, 0 for a query that retrieves nothing.

  python -m experiments.train --config=configs/lambdarank_retrieval.py --workdir=runs/lambdarank_retrieval
  python -m experiments.train --config=configs/lambdarank_retrieval.py --config.method=ranknet
  python -m experiments.train --config=configs/lambdarank_retrieval.py:runlocal --workdir=/tmp/lr_quick

Measured on this 2-core CPU (shared with other jobs), seed 0, one run each,
test split, 32 bits, 1,000 steps (wall time of the whole run / of training),
precision at d <= 1: LambdaRank 0.413 (78 s / 62 s), RankNet 0.342 (78 s);
same split: ITQ 0.253, LSH 0.055. runlocal: 13 s wall. Step sizes are the
kNN ones (nair_lib.LEARNING_RATES), not tuned for retrieval.
"""

import ml_collections
from ml_collections import config_dict


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.name = "lambdarank_retrieval"
  config.dataset = "mnist_t10k"
  config.seed = 0
  config.queries_per_class = 100
  config.train_per_class = 500
  config.eval_split = "test"  # or "validation"
  config.val_per_class = 100
  config.task = "retrieval"  # or "knn"
  config.num_neighbors = 50  # relevant = the 50 Euclidean nearest neighbours (Sec. 5.2)
  config.train_neighbors = "scaled"  # neighbours of a training query in the training set (or an int)
  config.method = "lambdarank"  # or "ranknet"
  # "knn_count": relevant items in the k nearest non-empty bins (relative threshold). S_R of
  # eq. 8 ("retrieval", absolute threshold d <= radius) gives LambdaRank no active swap at 32
  # bits here (no subsampled document falls within radius 1 of a query early in training).
  config.score = "knn_count"
  config.k = 3  # relative threshold of the kNN error also reported
  config.radius = 1  # "Hamming distance < 2"
  config.swap_bins = "paper"  # ceil(bits / 3) bins (at least top_bins + 1)
  config.top_bins = "auto"  # radius + 1: swaps across the retrieved / not-retrieved boundary
  config.threshold = "auto"  # absolute for retrieval
  config.swap_method = config_dict.placeholder(str)
  config.model = "linear"
  config.hidden = (256,)
  config.init = "nair"
  config.standardize = False
  config.bits = 32
  config.queries_per_batch = 100
  config.docs_per_query = 100
  # None: documents drawn from the whole training set (Sec. 4); an int P: from P items drawn per
  # step, so the loss maps Q + P items, not all (nair_lib.make_batch_fn).
  config.doc_pool = config_dict.placeholder(int)
  # None: the per-method (and per-length) step size chosen on the validation split
  # (nair_lib.LEARNING_RATES, LEARNING_RATES_BY_BITS).
  config.learning_rate = config_dict.placeholder(float)
  config.momentum = 0.8
  config.num_steps = 1000
  config.log_every = 100
  config.eval_every = 250
  config.checkpoint_every = 500
  config.target_metric = "precision_at_radius"  # knn_error is minimised, precision_at_radius maximised
  config.target = 0.0
  config.baselines = ("lsh", "itq")
  config.exact_l2 = False  # L2 retrieves the relevant set exactly by construction
  if arg == "runlocal":
    config.dataset = "digits"
    config.queries_per_class = 10
    config.train_per_class = 60
    config.val_per_class = 10
    config.num_neighbors = 10
    config.queries_per_batch = 50
    config.docs_per_query = 50
    config.num_steps = 60
    config.log_every = config.eval_every = 20
    config.checkpoint_every = 30
  elif arg:
    raise ValueError(f"config argument: expected nothing or 'runlocal', got {arg!r}")
  return config
