r"""CGHash (Lin et al., Sec. 3): column generation for a triplet loss on weighted Hamming, MNIST-10k.

  python -m experiments.colgen --config=configs/cghash.py
  python -m experiments.colgen --config=configs/cghash.py:runlocal     # scikit-learn digits, seconds
  python -m experiments.colgen --config=configs/cghash.py --config.features=linear   # raw pixels
  python -m experiments.colgen --config=configs/cghash.py --config.regularizer=linf --config.C=0.1   # weight bound
  python -m experiments.colgen --config=configs/cghash.py --config.loss=logistic   # logistic loss, about 10 minutes

One 64-bit run (its first 16 and 32 bits are the shorter models) on 200 training items per class, 50 relevant
and 100 irrelevant neighbours each (10^7 triplets), perceptron hash functions on RBF responses to 300 training
anchors, squared hinge loss with l1 regularisation; beside ITQ and a linear TALR-AP mapping of 1,000 steps per
length. Expected (docs/results/colgen.md): tie-aware AP 0.822 / 0.858 / 0.875 at 16 / 32 / 64 bits by plain
Hamming distance, 0.830 / 0.863 / 0.878 by the learned weights; 114 s of column generation on a 2-core CPU at
load 4, and about 3 minutes more for the three TALR runs (AP_T 0.817 / 0.861 / 0.879 when last measured, at
commit aa96786). ``C`` weighs the *mean* triplet loss (the paper's per-triplet C is C / 10^7 = 3e-5); under ``regularizer="linf"`` it is the weight bound C'. C and the features
were chosen on the validation split (``--config.eval_split=validation_heldout``), never on the queries.
"""

import ml_collections

from configs import common


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  arg = common.parse_arg(arg, runlocal=False)
  config = ml_collections.ConfigDict()
  config.name = "cghash"
  config.method = "cghash"  # or "structhash" (configs/structhash.py)
  config.dataset = "mnist_t10k"  # or "digits", "idx:<images>,<labels>", "npz:<file>"
  config.seed = 0  # the split, the training subset, the neighbours, the anchors
  config.queries_per_class = 100  # the rest of each class is the database
  config.train_per_class = 500  # of the database: the training set (ITQ is fitted on all of it)
  config.eval_split = "test"  # or "validation_heldout" / "validation": queries carved from the training set
  config.val_per_class = 100  # validation queries per class
  config.val_heldout_per_class = 175  # validation database items per class held out of training
  config.affinity = "label"  # relevance = same label
  config.train_subset_per_class = 200  # training items per class that column generation learns from
  config.bits = (16, 32, 64)  # one run to the longest; the shorter models are its first bits
  config.num_relevant = 50  # relevant neighbours per training item
  config.num_irrelevant = 100  # irrelevant neighbours per training item
  config.features = "rbf"  # hash family: "rbf" (kernel to num_anchors anchors) or "linear" (raw features)
  config.num_anchors = 300  # anchors of the "rbf" features
  config.C = 300.0  # > 0: weight of the mean triplet loss (l1), or the weight bound (linf)
  config.regularizer = "l1"  # "l1" or "linf"
  config.loss = "squared_hinge"  # "squared_hinge" or "logistic"
  config.tolerance = 1e-3  # stop adding bits when the new bit's dual violation is within this
  config.num_starts = 2  # spectral starts of the new-bit sub-problem
  config.max_iterations = 30  # L-BFGS iterations of the sigmoid relaxation per start
  config.sharpness = 4.0  # standard deviation of a start's projections, inside the sigmoid
  config.min_fraction = 0.02  # a bit must put at least this fraction of the points on either side
  config.duplicate_tolerance = 0.01  # a bit agreeing with an earlier one (or its complement) on > 99% is rejected
  config.max_dim = 0  # search hash directions in the top-max_dim principal subspace (0: all directions)
  config.stagewise = False  # StructHash only
  config.ndcg_k = 100  # StructHash with loss="ndcg" only: the training NDCG cutoff
  config.cp_tolerance = 1e-3  # StructHash only: cutting-plane tolerance
  config.max_cp_iterations = 200  # StructHash only: cutting-plane rounds per bit at most
  config.baselines = ("itq",)  # reference rows (hashjax.baselines), plain Hamming
  config.models = ()  # saved models to score beside (hashjax.load_model paths), e.g. TALR runs
  config.plots = False  # True: precision-recall curves and distance histograms as PNGs in the workdir
  config.talr_steps = 1000  # > 0: train a linear TALR-AP mapping at every length for the table (0: none)
  config.precision_k = 100  # NDCG@k and precision@k
  if arg.runlocal:
    config.dataset = "digits"
    config.queries_per_class = 10
    config.train_per_class = 60
    config.train_subset_per_class = 60
    config.bits = (8, 16)
    config.num_relevant = 10
    config.num_irrelevant = 20
    config.precision_k = 20
    config.num_anchors = 100
    config.talr_steps = 0  # the TALR rows: --config.talr_steps=20
  return config
