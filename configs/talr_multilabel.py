r"""TALR on multi-label data (He et al. 2018, Sec. 5.2-5.3, NUS-WIDE's protocol): two-digit MNIST images.

  python -m experiments.train --config=configs/talr_multilabel.py --workdir=runs/talr_multilabel
  python -m experiments.train --config=configs/talr_multilabel.py:objective=ndcg --workdir=runs/talr_multilabel_ndcg
  python -m experiments.evaluate_codes --codes=runs/talr_multilabel/codes/talr-ap-linear.npz --topk=120
  python -m experiments.train --config=configs/talr_multilabel.py:runlocal --workdir=/tmp/multilabel_quick

NUS-WIDE is not available offline; its closest setting here is ``mnist_pairs``
(:func:`experiments.tasks.load_mnist_pairs`): 5,000 images of two MNIST-10k digits side by side, labelled with
the digits they show (1.9 labels on average). As on NUS-WIDE, two images are relevant when they share a label
(34% of pairs) and NDCG's affinity is the number of labels they share (0, 1 or 2); 50 queries per left digit
(500), the other 4,500 images the database, 250 per left digit of it (2,500) trained on. Linear, 32 bits,
TALR-AP's recipe without shifts (the images are not square). ``save_codes`` writes every row's codes with
the label sets, which ``experiments.evaluate_codes`` scores as the paper's Table 1 does: AP_T over the whole
ranking beside AP@k (k = 120 is NUS-WIDE's 5,000 of 193,000 as a share of our 4,500).

Expected (docs/results/talr.md, multi-label section), seed 0: TALR-AP AP_T 0.7237 (ITQ 0.4961), TALR-NDCG
NDCG_T 0.9180; mean over seeds 0, 1, 2: 0.7259 and 0.9183. About 2 minutes each on a 2-core CPU
(``:runlocal``: 20 seconds).
"""

import ml_collections

from configs import common, talr_ap


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  arg = common.parse_arg(arg, objective=("ap", "ndcg"), runlocal=False)
  config = talr_ap.get_config()
  config.name = "talr_multilabel"
  config.dataset = "mnist_pairs"
  config.affinity = "shared_labels"  # AP: relevant when a label is shared; NDCG: the number shared
  config.queries_per_class = 50  # per left digit: 500 queries
  config.train_per_class = 250  # per left digit: 2,500 training items of the 4,500 in the database
  config.val_per_class = 50
  config.val_heldout_per_class = 90
  config.image_shape = (28, 56, 1)
  config.augment_shift = 0  # shifts are defined for square images only
  config.objective = arg.objective
  config.target_metric = "tie_aware_ap" if arg.objective == "ap" else "tie_aware_ndcg"
  config.target = 0.0
  config.baselines = ("lsh", "pca", "itq", "sh")
  config.save_codes = True
  if arg.runlocal:
    config.queries_per_class = 10
    config.train_per_class = 60
    config.val_per_class = 10
    config.val_heldout_per_class = 20
    config.batch_per_class = 10
    config.num_steps = 60
    config.warmup_steps = 6
    config.log_every = config.eval_every = 20
    config.checkpoint_every = 30
    config.baselines = ("lsh",)
  return config
