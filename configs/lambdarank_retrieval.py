r"""Nair et al. (2012) Sec. 5.2: LambdaRank (or RankNet) codes for retrieval of Euclidean neighbours.

  python -m experiments.train --config=configs/lambdarank_retrieval.py --workdir=runs/lambdarank_retrieval
  python -m experiments.train --config=configs/lambdarank_retrieval.py:method=ranknet
  python -m experiments.train --config=configs/lambdarank_retrieval.py:runlocal --workdir=/tmp/lr_quick

A query's relevant items are its 50 Euclidean nearest neighbours in feature space (a
training query's: the same fraction, 28, of the other training items); the codes are scored
by precision within Hamming distance < 2 (radius 1), 0 for a query that retrieves nothing.
Test precision, 32 bits, seed 0, 2-core CPU: LambdaRank 0.413 (78 s wall, 62 s of training),
RankNet 0.340 (71 s of training); same split: ITQ 0.277, LSH 0.055. runlocal (digits): 0.281, 13 s wall.

The argument is that of ``configs/lambdarank_knn.py`` (Nair's fixed step at every length,
with the kNN step sizes, not tuned for retrieval); ``score=retrieval`` trains on S_R of eq. 8
(absolute threshold), which gives LambdaRank no active swap early on at 32 bits here. The fields
are those of ``configs/lambdarank_knn.py`` (``--config.<field>=<value>``, lists comma-separated:
``--config.baselines=lsh,itq``; ``--help`` lists them), ``--config.num_devices=n`` (data-parallel over n
devices) included.
"""

import ml_collections

from configs import common, lambdarank_knn


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  arg = common.parse_arg(arg, method=("lambdarank", "ranknet"), bits=32, score=("knn_count", "retrieval"),
                         runlocal=False)
  config = lambdarank_knn.get_config(f"method={arg.method},bits={arg.bits},score={arg.score},fixed_step"
                                     + (",runlocal" if arg.runlocal else ""))
  config.name = "lambdarank_retrieval"
  config.affinity = "neighbors"  # relevant = the num_neighbors (50) Euclidean nearest neighbours
  config.target_metric = "precision_at_radius"  # at radius 1: "Hamming distance < 2"
  config.exact_l2 = False  # L2 retrieves the relevant set exactly by construction
  if arg.runlocal:
    config.num_neighbors = 10
  return config
