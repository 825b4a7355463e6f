r"""Unsupervised baselines (LSH, PCA-sign, ITQ, SH) on the embedded MNIST-10k protocol.

  python -m experiments.evaluate --config=configs/baselines.py
  python -m experiments.evaluate --config=configs/baselines.py:runlocal  # scikit-learn digits

Test AP_T at 16 / 32 / 64 bits: ITQ 0.4231 / 0.4537 / 0.4667, LSH 0.2306 / 0.2455 / 0.3466
(README, the main job); about 15 s on a 2-core CPU (runlocal: a few seconds). Override
anything, e.g. ``--config.bits=32 --config.methods=lsh,itq``.
"""

import ml_collections

from configs import common


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  arg = common.parse_arg(arg, runlocal=False)
  config = ml_collections.ConfigDict()
  config.name = "baselines"
  config.dataset = "mnist_t10k"  # or "digits", "tfds:mnist", "tfds:cifar10"
  config.seed = 0
  # TALR protocol: 100 queries per class, the rest database, 500 per class of it for training.
  config.queries_per_class = 100
  config.train_per_class = 500
  config.methods = ("lsh", "pca", "itq", "sh")
  config.bits = (16, 32, 64)
  config.radius = 2  # precision within Hamming radius 2 (distance <= 2)
  config.precision_k = 100  # tie-aware precision@100
  if arg.runlocal:
    config.dataset = "digits"
    config.queries_per_class = 10
    config.train_per_class = 50
    config.bits = (16, 32)
  return config
