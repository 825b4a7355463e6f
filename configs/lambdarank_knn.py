r"""Nair et al. (2012): 32-bit LambdaRank (or RankNet) codes for kNN classification, MNIST-10k.

Run:

  python -m experiments.train --config=configs/lambdarank_knn.py --workdir=runs/lambdarank_knn
  python -m experiments.train --config=configs/lambdarank_knn.py --config.method=ranknet --workdir=runs/ranknet_knn
  python -m experiments.train --config=configs/lambdarank_knn.py:runlocal --workdir=/tmp/lambdarank_quick

Prints the kNN classification error (relative threshold k = 3, Sec. 5.1) of
the learned codes beside LSH, ITQ and exact L2 3-NN on the same split
(1,000 queries searched against the 9,000-item database). ``--config.bits``,
``--config.method=ranknet|lambdarank`` and ``--config.task=knn|retrieval``
switch what they name (relevance = same label, or the 50 Euclidean nearest
neighbours as in configs/lambdarank_retrieval.py). Step sizes were
chosen with ``--config.eval_split=validation``, never on the queries.
Measured on this 2-core CPU (shared with other jobs), test split, 1,000 steps,
kNN error at 32 bits, seeds 0 / 1 / 2 (the seed draws the split, the
initialisation and the batches): LambdaRank 8.8 / 9.4 / 8.1% (mean 8.8%, sd
0.65), RankNet (step 50) 9.8 / 10.2 / 8.6% (mean 9.5%, sd 0.8; at its former
step 20: 9.2 / 10.5 / 7.8%, mean 9.2%); same splits: ITQ
10.4 / 10.4 / 10.9%, LSH 30.2 / 27.6 / 25.6%, exact L2 3-NN 5.7 / 4.2 / 4.4%.
At 64 bits (LambdaRank step 1): LambdaRank 7.8 / 7.6 / 6.3% (mean 7.2%), ITQ
7.9 / 7.7 / 7.8%.
Whole run 43-105 s wall (LambdaRank seed 0: 79 s, 66 s of training);
runlocal: 14 s wall.

MLP mapping (Nair Sec. 6), options chosen on the validation split
(``python -m experiments.nair_study --parts=mlp`` runs it over 3 seeds)::

  python -m experiments.train --config=configs/lambdarank_knn.py --config.model=mlp \
      --config.hidden="(1024,)" --config.init=lecun --config.doc_pool=500 --config.learning_rate=0.01
  (RankNet: --config.method=ranknet --config.learning_rate=5.0)

8/16/64 bits, LambdaRank vs RankNet over seeds and the second dataset:
``python -m experiments.nair_study`` (README).
"""

import ml_collections
from ml_collections import config_dict


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.name = "lambdarank_knn"
  # Data: the embedded MNIST-10k protocol (1,000 queries, 9,000 database, 5,000 train).
  config.dataset = "mnist_t10k"
  config.seed = 0
  config.queries_per_class = 100
  config.train_per_class = 500
  config.eval_split = "test"  # or "validation": hyper-parameter selection
  config.val_per_class = 100
  # Task and learner.
  config.task = "knn"  # or "retrieval": relevant = the num_neighbors Euclidean nearest neighbours
  config.num_neighbors = 50
  config.train_neighbors = "scaled"  # neighbours of a training query in the training set (or an int)
  config.method = "lambdarank"  # or "ranknet"
  # "auto" = "knn_count": relevant (same-label) items in the k nearest non-empty bins (eq. 7);
  # or "knn_majority" (eq. 6), "retrieval" (S_R of eq. 8, absolute threshold d <= radius), "ap".
  config.score = "auto"
  config.k = 3  # relative threshold: the k nearest non-empty Hamming bins (Sec. 3.5.1, 5.1)
  config.radius = 1  # absolute threshold: d <= radius ("Hamming distance < 2", Sec. 5.1)
  # Swap restriction (Sec. 4): swaps among the nearest ceil(bits / 3) bins ("paper": at least
  # top_bins + 1, so 8-bit codes still swap; an int, or None for all), across the top-k boundary
  # ("auto": k, or radius + 1 for score="retrieval"; None: any).
  config.swap_bins = "paper"
  config.top_bins = "auto"
  config.threshold = "auto"  # how bins count: relative, or absolute for score="retrieval"
  # Model: eq. 1, sigmoid of a linear map, weights ~ N(0, 1e-3).
  config.model = "linear"  # or "mlp"
  config.hidden = (256,)
  config.init = "nair"
  config.standardize = False  # inputs are centred always
  config.bits = 32
  # Optimisation (Sec. 4): 100 queries x 100 subsampled documents, SGD momentum 0.8, fixed step.
  config.queries_per_batch = 100
  config.docs_per_query = 100
  # None: documents drawn from the whole training set (Sec. 4); an int P: from P items drawn per
  # step, so the loss maps Q + P items, not all (nair_lib.make_batch_fn).
  config.doc_pool = config_dict.placeholder(int)
  # None: the per-method (and per-length) step size chosen on the validation split
  # (nair_lib.LEARNING_RATES, LEARNING_RATES_BY_BITS): LambdaRank 0.03 (64 bits: 1), RankNet
  # 20 (32 and 64 bits: 50).
  config.learning_rate = config_dict.placeholder(float)
  config.momentum = 0.8
  config.num_steps = 1000
  config.log_every = 100
  config.eval_every = 250
  config.checkpoint_every = 500
  config.target_metric = "knn_error"  # knn_error is minimised, precision_at_radius maximised
  config.target = 0.0  # > 0: report the time to reach this kNN error (or precision)
  # Evaluation.
  config.baselines = ("lsh", "itq")
  config.exact_l2 = True
  if arg == "runlocal":
    config.dataset = "digits"
    config.queries_per_class = 10
    config.train_per_class = 60
    config.val_per_class = 10
    config.bits = 16
    config.queries_per_batch = 50
    config.docs_per_query = 50
    config.num_steps = 60
    config.log_every = config.eval_every = 20
    config.checkpoint_every = 30
  elif arg:
    raise ValueError(f"config argument: expected nothing or 'runlocal', got {arg!r}")
  return config
