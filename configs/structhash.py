r"""StructHash (Lin et al., Sec. 4): column generation with a 1-slack structural SVM on a ranking loss, MNIST-10k.

  python -m experiments.colgen --config=configs/structhash.py                   # simplified NDCG, stage-wise
  python -m experiments.colgen --config=configs/structhash.py --config.loss=ndcg  # or auc; --config.stagewise=False
  python -m experiments.colgen --config=configs/structhash.py:runlocal          # scikit-learn digits, seconds

One 64-bit run (its first 16 and 32 bits are the shorter models) on 200 training items per class with 50 relevant
and 100 irrelevant neighbours each, the hash family of configs/cghash.py (RBF features to 300 anchors); the weights
of every bit by cutting planes (HiGHS LPs) with the loss-augmented inference of ``config.loss`` (``"sndcg"``,
``"ndcg"`` at ``config.ndcg_k`` or ``"auc"``). Stage-wise (the default) learns two weights per bit and ranks by
plain Hamming distance. Expected (docs/results/colgen.md): tie-aware NDCG@100 0.851 / 0.883 / 0.900 at 16 / 32 /
64 bits; 79 s of training on a 2-core CPU at load 4. C was chosen on the validation split
(``--config.eval_split=validation_heldout``), never on the queries.
"""

import ml_collections

from configs import cghash


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  config = cghash.get_config(arg)
  config.name = "structhash"
  config.method = "structhash"
  config.loss = "sndcg"  # "sndcg" (simplified NDCG), "ndcg" (NDCG@ndcg_k) or "auc"
  config.stagewise = True  # two weights per bit (shared, new); the model ranks by plain Hamming distance
  config.C = 3.0  # > 0: weight of the slack (eq. 48); too small a C gives all-zero weights
  config.ndcg_k = 100  # loss="ndcg": the training NDCG cutoff (at 10 the first bit got weight 0 at any C tried)
  config.cp_tolerance = 1e-3  # cutting planes stop when the new constraint is violated by at most this
  config.max_cp_iterations = 200  # cutting-plane rounds per bit at most
  return config
