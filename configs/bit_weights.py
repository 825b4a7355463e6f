r"""Learned bit weights (Feng, Liu, Wang): weighted Hamming ranking of fixed codes, MNIST-10k.

  python -m experiments.bit_weights --config=configs/bit_weights.py
  python -m experiments.bit_weights --config=configs/bit_weights.py:runlocal     # scikit-learn digits, seconds
  python -m experiments.bit_weights --config=configs/bit_weights.py --config.models=runs/talr_ap  # a trained model too

For every base code (``config.base_codes`` at every length of ``config.bits``, and every saved model of
``config.models``): plain Hamming ranking, the weights of every solver of ``config.solvers``, and weights that
only break Hamming ties, each in tie-aware AP, NDCG and precision@100 (ties: equal distances) with the
fitting time. Weights are fitted on the protocol's training items, never on the queries. A list takes
comma-separated values (``--config.bits=16,32``); ``--help`` lists every field.

Expected (docs/results/bit_weights.md), ITQ at 16 / 32 / 64 bits, AP_T plain 0.4105 / 0.4539 / 0.4643 and with
EGD weights 0.4342 / 0.4924 / 0.5142 at seed 0; over seeds 0, 1, 2 EGD 0.4439 / 0.4812 / 0.5129. About 7
minutes on a 2-core CPU.
"""

import ml_collections

from configs import common


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  arg = common.parse_arg(arg, runlocal=False)
  config = ml_collections.ConfigDict()
  config.name = "bit_weights"
  config.dataset = "mnist_t10k"  # or "digits", "idx:<images>,<labels>", "npz:<file>"
  config.seed = 0  # the split, the baselines' draws, the training tuples
  config.queries_per_class = 100  # the rest of each class is the database
  config.train_per_class = 500  # of the database: what codes and weights are fitted on
  config.bits = (16, 32, 64)
  config.base_codes = ("lsh", "pca", "itq", "sh", "iso")  # any of hashjax.baselines.BASELINES
  config.models = ()  # saved models (hashjax.load_model paths), e.g. a trained TALR run's workdir
  config.solvers = ("egd", "pgd", "online", "online_last", "closed_form", "whrank")  # hashjax.weighting.SOLVERS
  config.tie_break = True  # also rank by Hamming distance with the EGD weights breaking its ties
  config.precision_k = 100  # tie-aware precision@100
  config.plots = False  # True: precision-recall curves, Hamming and EGD-weighted, as PNGs in the workdir
  if arg.runlocal:
    config.dataset = "digits"
    config.queries_per_class = 10
    config.train_per_class = 60
    config.bits = (16, 32)
  return config
