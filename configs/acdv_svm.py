r"""Feng, Liu, Wang's Table 1: a linear SVM on absolute code differences of same- and different-class pairs.

  python -m experiments.acdv_svm --config=configs/acdv_svm.py --workdir=runs/acdv_svm
  python -m experiments.acdv_svm --config=configs/acdv_svm.py:runlocal  # scikit-learn digits, seconds

LSH, SH and ITQ at 64 bits on MNIST-10k (up to 1,000 images per class, 70% / 30%), 20,000 training and 20,000
test pairs, half of one class. Expected (seed 0): linear-SVM test accuracy LSH 69.4%, SH 69.5%, ITQ 76.4% (the
paper: 71.3%, 83.5%, 85.7%), in about 12 s on 2 cores; docs/results/bit_weights.md has three seeds.
"""

import ml_collections

from configs import common


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  arg = common.parse_arg(arg, runlocal=False)
  config = ml_collections.ConfigDict()
  config.name = "acdv_svm"
  config.dataset = "mnist_t10k"  # or "digits", "tfds:<name>", "idx:<images>,<labels>", "npz:<file>"
  config.seed = 0  # the split, the baselines' draws, the pairs, the SVM
  config.per_class = 1000  # images per class (the paper's subset)
  config.train_fraction = 0.7  # of each class, for training (the paper's 70%)
  config.methods = ("lsh", "sh", "itq")  # the paper's; any of hashjax.baselines.BASELINES
  config.bits = (64,)  # the paper's
  config.pairs = 20000  # pairs on each side (training, test), half of one class
  config.C = 1.0  # LinearSVC's C (fixed, not tuned)
  if arg.runlocal:
    config.dataset = "digits"
    config.per_class = 100
    config.pairs = 2000
    config.bits = (16,)
  return config
