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
precision at d <= 1: LambdaRank 0.413 (78 s / 62 s), RankNet 0.340 (70.7 s of
training; 0.342 at its earlier step 20, ``--config.learning_rate=20``); same
split: ITQ 0.253, LSH 0.055. runlocal: 13 s wall. Step
sizes are the kNN ones (nair_lib.LEARNING_RATES, LEARNING_RATES_BY_BITS), not
tuned for retrieval.
"""

import ml_collections

from configs import lambdarank_knn


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """``configs/lambdarank_knn.py`` (same learner, step sizes and runlocal sizes) with the retrieval task."""
  config = lambdarank_knn.get_config(arg)
  config.name = "lambdarank_retrieval"
  config.task = "retrieval"  # relevant = the num_neighbors (50) Euclidean nearest neighbours (Sec. 5.2)
  # "knn_count": relevant items in the k nearest non-empty bins (relative threshold). S_R of
  # eq. 8 ("retrieval", absolute threshold d <= radius) gives LambdaRank no active swap at 32
  # bits here (no subsampled document falls within radius 1 of a query early in training).
  config.score = "knn_count"
  config.target_metric = "precision_at_radius"  # at radius 1: "Hamming distance < 2"
  config.exact_l2 = False  # L2 retrieves the relevant set exactly by construction
  if arg == "runlocal":
    config.num_neighbors = 10
    config.bits = 32
  return config
