r"""Unsupervised baselines (LSH, PCA-sign, ITQ, SH) on the embedded MNIST-10k protocol.

Run (about 16 s on a 2-core CPU, measured from a fresh clone):

  python -m experiments.evaluate --config=configs/baselines.py

Quick run on scikit-learn's digits (a few seconds):

  python -m experiments.evaluate --config=configs/baselines.py:runlocal

Override anything, e.g. ``--config.bits=32 --config.methods=lsh,itq``.
"""

import ml_collections


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
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
  if arg == "runlocal":
    config.dataset = "digits"
    config.queries_per_class = 10
    config.train_per_class = 50
    config.bits = (16, 32)
  elif arg:
    raise ValueError(f"config argument: expected nothing or 'runlocal', got {arg!r}")
  return config
