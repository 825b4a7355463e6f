r"""Deep hashing objectives, TALR and LambdaRank on one backbone, MNIST-10k: the argument picks the objective.

  python -m experiments.train --config=configs/deep_hashing.py:objective=talr_ap --workdir=runs/deep-talr_ap-32
  python -m experiments.train --config=configs/deep_hashing.py:objective=talr_ndcg --workdir=runs/deep-talr_ndcg-32
  python -m experiments.train --config=configs/deep_hashing.py:objective=dpsh --workdir=runs/deep-dpsh-32
  python -m experiments.train --config=configs/deep_hashing.py:objective=dtsh --workdir=runs/deep-dtsh-32
  python -m experiments.train --config=configs/deep_hashing.py:objective=hashnet --workdir=runs/deep-hashnet-32
  python -m experiments.train --config=configs/deep_hashing.py:objective=csq --workdir=runs/deep-csq-32
  python -m experiments.train --config=configs/deep_hashing.py:objective=greedyhash --workdir=runs/deep-greedyhash-32
  python -m experiments.train --config=configs/deep_hashing.py:objective=lambdarank --workdir=runs/deep-lambdarank-32
  python -m experiments.train --config=configs/deep_hashing.py:objective=dpsh,runlocal --workdir=/tmp/deep_quick

and every saved model in one tie-aware table (AP_T, NDCG_T, P@r, ...) beside ITQ on the same split (the
LambdaRank run's own table reports Nair's kNN error and precision at radius):

  python -m experiments.evaluate --config=configs/supervised.py --config.methods=itq --config.weighted='()' \
      --config.bits=32 --workdir=runs/deep-table --config.models=runs/deep-talr_ap-32,runs/deep-talr_ndcg-32,\
runs/deep-dpsh-32,runs/deep-dtsh-32,runs/deep-hashnet-32,runs/deep-csq-32,runs/deep-greedyhash-32,\
runs/deep-lambdarank-32

Every variant trains the same backbone (``config.model = "cnn"``: ``config.channels`` convolution blocks on
``config.image_shape`` images, then ``config.hidden`` dense layers) with the same optimizer (Adam, 50 warmup
steps then cosine decay over 3,000 steps; each objective's own step), 100 images per step (10 per class; LambdaRank: 20
queries and 80 documents' items) shifted by up to a pixel, and is scored on the same split and label
relevance (TALR-NDCG on labels here, not ``configs/talr_ndcg.py``'s Euclidean levels). Options per
objective: TALR's those of ``configs/talr_ap.py`` / ``configs/talr_ndcg.py``; DPSH, DTSH, HashNet, CSQ and
GreedyHash their papers' (:mod:`experiments.methods.deep`: ``eta``, ``dtsh_alpha``, ``hashnet_alpha`` (None:
10 / bits), ``hashnet_gamma``, ``csq_lambda``, ``greedy_alpha``); LambdaRank Nair's swap restriction with
tie-aware AP as its score (``configs/lambdarank_knn.py:score=ap``). The step and each objective's main option
were chosen on the validation split (``experiments.tune``; docs/results/deep.md has the grids): TALR-AP alpha
3, TALR-NDCG alpha 1, DPSH eta 1, DTSH alpha 5, HashNet gamma 0.02, CSQ lambda 1e-4, GreedyHash alpha 1 (1,000-step
runs); the step 3e-3 for TALR-AP, TALR-NDCG, HashNet and CSQ, 1e-2 for DPSH, DTSH, GreedyHash and LambdaRank
(full-length runs where the short ones preferred a step above 3e-3).
A config holds its own objective's fields only; ``:bits=`` sets the code length (LambdaRank's
``swap_bins`` follows it; ``--config.bits`` changes that field alone). ``runlocal``: scikit-learn digits,
8x8 images, 60 steps, seconds.

Test AP_T, 32 bits, seed 0 (docs/results/deep.md), each run 3-7 minutes on a 2-core CPU shared with other
jobs (2-4 minutes alone):

  talr_ap 0.9875   talr_ndcg 0.9892   dpsh 0.9861   dtsh 0.9921
  hashnet 0.9841   csq 0.9872         greedyhash 0.9899   lambdarank 0.9869
"""

import math

import ml_collections
from ml_collections import config_dict

from configs import common

#: The argument's ``objective``: TALR's, the deep hashing losses', LambdaRank.
OBJECTIVES = ("talr_ap", "talr_ndcg", "dpsh", "dtsh", "hashnet", "csq", "greedyhash", "lambdarank")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  arg = common.parse_arg(arg, objective=OBJECTIVES, bits=32, runlocal=False)
  config = ml_collections.ConfigDict()
  config.name = "deep_hashing_" + arg.objective
  # Data: the embedded MNIST-10k protocol (1,000 queries, 9,000 database, 5,000 train), label relevance.
  config.dataset = "mnist_t10k"  # or "digits", "tfds:<name>", "idx:<images>,<labels>", "npz:<file>"
  config.seed = 0  # the split, the initialisation and the minibatches
  config.queries_per_class = 100  # the rest of each class is the database
  config.train_per_class = 500  # of the database, trained on
  config.eval_split = "test"  # or "validation", "validation_heldout"
  config.val_per_class = 100  # validation queries per class, carved out of the training set
  config.val_heldout_per_class = 175  # "validation_heldout": kept out of training, in the database
  config.affinity = "label"
  # Backbone: a CNN on the images, centred inputs.
  config.model = "cnn"  # or "linear", "mlp"
  config.image_shape = (28, 28, 1)  # (height, width, channels) of the flattened features
  config.channels = (16, 32)  # one 3x3 convolution and 2x2 max-pool block per entry
  config.hidden = (128,)  # dense hidden widths after the convolutions (the MLP's, with model="mlp")
  config.init = "lecun"
  config.standardize = False  # True: also divide the centred inputs by their std
  config.bits = arg.bits  # code length
  # Optimisation, the same for every objective: Adam, 50 warmup steps then cosine decay over 3,000 steps.
  config.optimizer = "adam"  # or "sgd" (with momentum)
  # The step, chosen on the validation split: 3e-3 of 1e-3 / 3e-3 / 1e-2 (1,000-step runs) for TALR-AP, TALR-NDCG and
  # HashNet; of 3e-3 / 1e-2 (/ 3e-2) in full-length runs for the objectives whose short runs preferred a larger one.
  config.learning_rate = 1e-2 if arg.objective in ("dpsh", "dtsh", "greedyhash", "lambdarank") else 3e-3
  config.momentum = 0.9  # "sgd"'s momentum, in [0, 1)
  config.lr_schedule = "cosine"  # or "constant"
  config.warmup_steps = 50  # linear warmup from 0, fewer than num_steps
  config.lr_final_fraction = 0.0  # cosine: the rate at the last step over the peak
  config.weight_decay = 0.0  # > 0: decoupled weight decay (AdamW)
  config.augment_shift = 1  # translate each training image by up to this many pixels, per step
  config.num_devices = 1  # > 1: data-parallel over that many devices (batch split, parameters replicated)
  # Several processes (hosts), jax.distributed: None reads JAX_NUM_PROCESSES / JAX_PROCESS_ID / JAX_COORDINATOR_ADDRESS.
  config.num_processes = config_dict.placeholder(int)  # processes in the run (None and unset: one)
  config.process_id = config_dict.placeholder(int)  # this process, 0 .. num_processes - 1 (process 0 writes)
  config.coordinator_address = config_dict.placeholder(str)  # "host:port" of process 0
  config.num_steps = 3000
  config.log_every = 100
  config.eval_every = 250  # periodic evaluation on the queries (0 or None: at the start and end only)
  config.checkpoint_every = 500  # (0 or None: at the start and end only)
  config.target = 0.0  # > 0: log the time to reach it
  # Evaluation.
  config.radius = 2  # precision within Hamming radius 2 (distance <= 2)
  config.baselines = ("lsh", "itq")  # the table's baselines at the same length: --config.baselines=lsh,itq,sh
  config.plots = False  # True: precision-recall and distance histograms as PNGs in the workdir
  config.save_codes = False  # True: each row's codes and labels to <workdir>/codes/<method>.npz (evaluate_codes)

  if arg.objective == "lambdarank":  # Nair's LambdaRank (experiments.methods.nair), tie-aware AP as its score
    config.method = "lambdarank"
    config.score = "ap"  # |Delta AP_T| weights each pair
    config.k = 3  # the kNN error's relative threshold (its table)
    config.top_bins = config_dict.placeholder(int)  # None: swaps across any boundary
    config.threshold = "relative"  # swap_bins counts non-empty bins
    config.swap_bins = max(math.ceil(arg.bits / 3), 1)  # swaps among the nearest ceil(bits / 3) bins
    config.queries_per_batch = 20
    config.docs_per_query = 80
    config.doc_pool = 80  # each step maps 20 queries + 80 documents' items, as many as the others' 100
    config.exact_l2 = False
    config.target_metric = "precision_at_radius"
  else:
    config.batch_per_class = 10  # class-balanced minibatches of 100, each item against the others
    config.input_noise = 0.0  # > 0: Gaussian noise of this std added to the training features
    config.precision_k = 100  # tie-aware precision@100
    config.target_metric = "tie_aware_ap"  # or "tie_aware_ndcg"
  if arg.objective in ("talr_ap", "talr_ndcg"):  # experiments.methods.talr, the values of talr_ap / talr_ndcg
    config.method = "talr"
    config.objective = "ap" if arg.objective == "talr_ap" else "ndcg"
    config.harmonic = "digamma"  # relaxed AP: "digamma" (exact at integers) or "ln" (eq. 7 as printed)
    config.discount = "exact"  # relaxed NDCG: "exact", "li" (eq. 8) or "simplified"
    config.distance = "relaxed_hamming"  # or "nair_hamming", "squared_euclidean"
    config.alpha = 3.0 if arg.objective == "talr_ap" else 1.0  # slope of the relaxation (eq. 6)
    config.alpha_final = 0.0  # > 0: anneal alpha linearly to this over the run
    config.width = 1.0  # soft-histogram bin width (eq. 14)
    config.setting = "query_vs_rest"  # or "query_vs_database"
    config.database_size = 0  # "query_vs_database": items sampled per step (0: all the rest)
    config.database_cached = False  # database codes as constants (no gradient through them)
  if arg.objective in ("dpsh", "dtsh", "hashnet", "csq", "greedyhash"):  # experiments.methods.deep
    config.method = "deep"
    config.objective = arg.objective
  if arg.objective in ("dpsh", "dtsh"):  # weight of the quantisation penalty (a mean over the M b code entries)
    config.eta = 1.0 if arg.objective == "dpsh" else 0.1  # DPSH: of 0.1, 1 on validation; DTSH: not tuned
  if arg.objective == "dtsh":
    config.dtsh_alpha = 5.0  # margin: the dissimilar item this many bits farther (of 2, 5 on validation)
  if arg.objective == "hashnet":
    config.hashnet_alpha = config_dict.placeholder(float)  # inner-product scale; None: 10 / bits
    config.hashnet_gamma = 0.02  # tanh scale beta = (1 + gamma step)^0.5 (of 0.005, 0.02 on validation)
  if arg.objective == "csq":
    config.csq_lambda = 1e-4  # weight of the quantisation term (of 1e-4, 1e-2 on validation)
  if arg.objective == "greedyhash":
    config.greedy_alpha = 1.0  # weight of the cubic penalty | |h| - 1 |^3 (of 0.1, 1 on validation)

  if arg.runlocal:  # scikit-learn digits, seconds
    config.dataset = "digits"
    config.image_shape = (8, 8, 1)
    config.queries_per_class = 10
    config.train_per_class = 60
    config.val_per_class = 20
    config.val_heldout_per_class = 15
    config.num_steps = 60
    config.warmup_steps = 6  # a tenth of the run
    config.augment_shift = 0  # a 1-pixel shift moves an 8x8 digit by an eighth of its width
    config.log_every = config.eval_every = 20
    config.checkpoint_every = 30
    if arg.objective == "lambdarank":
      config.queries_per_batch = 20
      config.docs_per_query = 50
      config.doc_pool = 80
    else:
      config.batch_per_class = 10
  return config
