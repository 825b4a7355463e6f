r"""TALR-NDCG on multi-level Euclidean affinities (He et al. 2018, Sec. 5.2), MNIST-10k.

  python -m experiments.train --config=configs/talr_ndcg.py --workdir=runs/talr_ndcg
  python -m experiments.train --config=configs/talr_ndcg.py:runlocal --workdir=/tmp/ndcg_quick

Pairs of images get affinity 1, 2, 5 or 10 when their pixel distance is within the closest
5%, 1%, 0.2% or 0.1% of training pairs. Test NDCG_T, linear, 32 bits, seed 0: 0.7628 (AP_T
0.5781), about 2 minutes on a 2-core CPU, most of it computing Euclidean affinities per batch.
The argument is that of ``configs/talr_ap.py``, and so are the fields (``--config.<field>=<value>``,
lists comma-separated: ``--config.baselines=lsh,itq``; ``--help`` lists them), ``--config.num_devices=n``
(data-parallel over n devices) included.
"""

import ml_collections

from configs import talr_ap


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  config = talr_ap.get_config(arg)
  config.name = "talr_ndcg"
  config.affinity = "euclidean"
  config.objective = "ndcg"
  config.target_metric = "tie_aware_ndcg"
  config.target = 0.0
  config.baselines = ("lsh", "pca", "itq", "sh")
  # Chosen on the validation split (experiments/tune.py over discount x learning rate) with
  # unshifted images and 1,000 constant steps.
  config.learning_rate = 3e-3
  config.alpha = 1.0
  config.standardize = False
  config.augment_shift = 0
  config.num_steps = 1000
  config.lr_schedule = "constant"
  config.warmup_steps = 0
  return config
