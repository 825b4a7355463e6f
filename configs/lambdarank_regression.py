r"""Nair et al.'s regression task (eq. 11): LambdaRank and RankNet bit vectors for kNN regression, diabetes data.

  python -m experiments.nair_regression --config=configs/lambdarank_regression.py --workdir=runs/nair_regression
  python -m experiments.nair_regression --config=configs/lambdarank_regression.py:runlocal   # seconds

scikit-learn's diabetes set (442 patients, 10 measurements, disease progression as the target), 88 queries against
the other 354 patients (the training set); Nair's linear hash (eq. 1, N(0, 1e-3) weights) at 8, 16 and 64 bits,
LambdaRank with eq. 11's |Delta S| and RankNet, beside LSH, ITQ (8 bits only: at most the 10 features) and
spectral hashing codes, exact 3-NN and linear regression, seeds 0, 1, 2. Metric: the kNN regression error
relative to the query targets' variance (lower is better). Expected (docs/results/nair.md, regression section),
mean over the seeds at 8 / 16 / 64 bits: LambdaRank 0.540 / 0.547 / 0.549, RankNet 0.577 / 0.559 / 0.571, LSH
0.745 / 0.627 / 0.640; exact 3-NN 0.665, linear regression 0.480; about 6 minutes on a 2-core CPU shared with
other jobs.
"""

import ml_collections

from configs import common


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  arg = common.parse_arg(arg, runlocal=False)
  config = ml_collections.ConfigDict()
  config.name = "lambdarank_regression"
  config.seeds = (0, 1, 2)  # each draws the split, the initialisation and the minibatches
  config.num_queries = 88  # 20% of the 442 patients; the rest is the database and the training set
  config.bits = (8, 16, 64)  # code lengths (the paper's preliminary regression run: 64 bits)
  config.learners = ("lambdarank", "ranknet")
  config.baselines = ("lsh", "itq", "sh")  # hashjax.baselines names, fitted on the training items
  config.k = 3  # relative threshold: the items of the k nearest non-empty bins vote (Euclidean: k items)
  config.mode = "pairs"  # eq. 11 as printed, or "prediction": the squared error of the kNN estimate
  config.init = "nair"  # Nair's N(0, 1e-3) weights, or "lecun"
  config.queries_per_batch = 32
  config.docs_per_query = 100
  # Optimisation: SGD with momentum at a fixed step (Nair's recipe).
  config.optimizer = "sgd"  # or "adam"
  config.learning_rate = 0.1
  config.momentum = 0.8
  config.lr_schedule = "constant"  # or "cosine"
  config.warmup_steps = 0
  config.lr_final_fraction = 0.0
  config.weight_decay = 0.0
  config.num_steps = 1000
  config.log_every = 250
  config.eval_every = 250  # the kNN regression error on the queries during training
  config.checkpoint_every = 0  # (0: at the start and end only)
  config.target = 0.0  # > 0: log the time to reach it (config.target_metric)
  config.target_metric = "knn_regression_error"
  if arg.runlocal:
    config.seeds = (0,)
    config.bits = (8,)
    config.baselines = ("lsh",)
    config.num_steps = 60
    config.log_every = config.eval_every = 30
  return config
