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
neighbours as in configs/lambdarank_retrieval.py). Options were chosen on a
validation split, never on the queries: at 32 bits (linear hash, kNN task,
MNIST-10k) on ``--config.eval_split=validation_heldout``, whose database, like
the test's, holds items never trained on (nair_lib.SETTING_DEFAULTS: every
training image shifted by a random (dy, dx) in [-1, 1]^2 each step, 3,000 SGD
steps of cosine decay after 50 warmup steps, step 20 for RankNet, 0.03 for
LambdaRank); other lengths keep Nair's fixed step for 1,000 steps on unshifted
images, chosen on ``--config.eval_split=validation`` (nair_lib.LEARNING_RATES_BY_BITS).
Measured on this 2-core CPU, test split, kNN error at 32 bits, seeds 0 / 1 / 2
(the seed draws the split, the initialisation and the batches;
``python -m experiments.nair_study --parts=tables --datasets=mnist_t10k`` runs
them): LambdaRank 6.9 / 6.8 / 5.7% (mean 6.5%), RankNet 6.6 / 7.2 / 5.7% (mean
6.5%); same splits: ITQ 10.4 / 10.4 / 10.9%, LSH 30.2 / 27.6 / 25.6%, exact L2
3-NN 5.7 / 4.2 / 4.4%. (Pinned to one core, LambdaRank gave 6.8 / 6.6 / 5.4%:
XLA's summation order depends on the thread count.) Whole run 94.8 s wall,
79.6 s of training (LambdaRank seed 0, quiet machine).
Before (Nair's fixed step, 1,000 steps, no shifts: ``--config.augment_shift=0
--config.lr_schedule=constant --config.warmup_steps=0 --config.num_steps=1000``,
and ``--config.learning_rate=50`` for RankNet):
LambdaRank 8.8 / 9.4 / 8.1% (mean 8.8%, sd 0.65), RankNet 9.8 / 10.2 / 8.6% (mean
9.5%, sd 0.8; at its former step 20: 9.2 / 10.5 / 7.8%, mean 9.2%); whole run
43-105 s wall (LambdaRank seed 0: 79 s, 66 s of training).
At 64 bits (LambdaRank step 1): LambdaRank 7.8 / 7.6 / 6.3% (mean 7.2%), ITQ
7.9 / 7.7 / 7.8%.
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
  # "test": the protocol's queries and database. Hyper-parameters are chosen on a validation
  # split, never on the queries: "validation_heldout" (val_per_class queries per class carved out
  # of the training set, and val_heldout_per_class more per class kept out of training but in
  # the database, so that 44% of it is unseen as in the test database), or "validation" (the
  # same queries against the rest of the training set, all of it trained on).
  config.eval_split = "test"
  config.val_per_class = 100
  config.val_heldout_per_class = 175
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
  # None: the per-method (and per-length) step size chosen on a validation split (nair_lib.option):
  # at 32 bits here (MNIST-10k, kNN, linear; nair_lib.SETTING_DEFAULTS, held-out validation split)
  # LambdaRank 0.03, RankNet 20, with shifts and a cosine schedule; else nair_lib.LEARNING_RATES,
  # LEARNING_RATES_BY_BITS (Nair's fixed step): LambdaRank 0.03 (64 bits: 1), RankNet 20 (32 and
  # 64 bits: 50).
  config.learning_rate = config_dict.placeholder(float)
  config.momentum = 0.8
  # "constant" (Nair's fixed step) or "cosine" (linear warmup over warmup_steps, then cosine
  # decay to 0 at num_steps). None: the default (nair_lib.option): "cosine" after 50 warmup steps
  # for the linear kNN hash at 32 bits on MNIST-10k (nair_lib.SETTING_DEFAULTS), else "constant".
  config.lr_schedule = config_dict.placeholder(str)
  config.warmup_steps = config_dict.placeholder(int)
  # s > 0: every training image translated by a random (dy, dx) in [-s, s]^2 each step
  # (experiments.train_lib.shift_images). None: the default (nair_lib.option): 1 for the linear
  # kNN hash at 32 bits on MNIST-10k, else 0 (e.g. digits' 8 x 8 images, where a pixel is an
  # eighth of the width).
  config.augment_shift = config_dict.placeholder(int)
  # None: the setting's default (nair_lib.option): 3,000 for the linear kNN hash at 32 bits on
  # MNIST-10k (nair_lib.SETTING_DEFAULTS), else 1,000.
  config.num_steps = config_dict.placeholder(int)
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
    config.val_heldout_per_class = 15
    config.bits = 16
    config.queries_per_batch = 50
    config.docs_per_query = 50
    config.num_steps = 60
    config.log_every = config.eval_every = 20
    config.checkpoint_every = 30
  elif arg:
    raise ValueError(f"config argument: expected nothing or 'runlocal', got {arg!r}")
  return config
