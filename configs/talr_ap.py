r"""TALR-AP (He et al. 2018): a hash mapping trained on relaxed tie-aware AP, MNIST-10k.

  python -m experiments.train --config=configs/talr_ap.py --workdir=runs/talr_ap
  python -m experiments.train --config=configs/talr_ap.py:model=mlp --workdir=runs/talr_ap_mlp
  python -m experiments.train --config=configs/talr_ap.py:bits=16 --workdir=runs/talr_ap16
  python -m experiments.train --config=configs/talr_ap.py:runlocal --workdir=/tmp/talr_quick

Test AP_T, seed 0, 2 threads (training time on a 2-core CPU; under load it grows):

  (default) linear, 32 bits   0.8724   132 s at load 4 (65 s on a quiet machine, earlier)
  bits=16 / bits=64           0.8230 / 0.8878
  model=mlp                   0.9662   87 s
  model=mlp,bits=16 / 64      0.9609 / 0.9746
  runlocal (digits)           0.8203   seconds

Mean over seeds 0, 1, 2 (``--config.seed=S``, docs/results/talr.md) at 16 / 32 / 64 bits: linear 0.8236 /
0.8715 / 0.8919, MLP 0.9588 / 0.9627 / 0.9659; a seed moves AP_T by up to 0.015.

The argument sets the model and code length together with the options chosen for
them on validation splits (README, TALR); a flag such as ``--config.bits=16`` changes
that one field alone, a list takes comma-separated values (``--config.baselines=lsh,itq,sh``,
``--config.hidden=512,256``). ``python -m experiments.train --config=configs/talr_ap.py --help``
lists every field with its default. ``--config.num_devices=n`` trains data-parallel over n devices (each
minibatch split over them, the parameters replicated; n must divide the minibatch): the same numbers as one
device, up to the order of float sums (e.g. ``XLA_FLAGS=--xla_force_host_platform_device_count=2 ...
:runlocal --config.num_devices=2`` on a CPU, where it is no faster).
"""

import ml_collections
from ml_collections import config_dict

from configs import common


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  arg = common.parse_arg(arg, model=("linear", "mlp"), bits=32, runlocal=False)
  config = ml_collections.ConfigDict()
  config.name = "talr_ap"
  config.method = "talr"
  # Data: the TALR protocol on the embedded MNIST-10k (1,000 queries, 9,000 database, 5,000 train).
  config.dataset = "mnist_t10k"  # or "digits", "tfds:<name>", "idx:<images>,<labels>", "npz:<file>"
  config.seed = 0  # the split, the initialisation and the minibatches
  config.queries_per_class = 100  # the rest of each class is the database
  config.train_per_class = 500  # of the database, trained on
  # "test": the protocol's queries. Hyper-parameters are chosen on "validation" (val_per_class
  # queries per class against the rest of the training set) or "validation_heldout" (the
  # database also holds val_heldout_per_class items per class never trained on, 44% as in test).
  config.eval_split = "test"  # or "validation", "validation_heldout"
  config.val_per_class = 100  # validation queries per class, carved out of the training set
  config.val_heldout_per_class = 175  # "validation_heldout": kept out of training, in the database
  config.affinity = "label"  # or "euclidean": TALR's multi-level 5/1/0.2/0.1% -> 1/2/5/10
  # Model: centred, unscaled inputs (standardize=True also divides by the std).
  config.model = arg.model  # "linear" or "mlp" (or --config.model=cnn)
  config.hidden = (1024,)  # the MLP's hidden widths (a CNN's dense layers): --config.hidden=512,256
  config.image_shape = (28, 28, 1)  # model="cnn": the features as (height, width, channels) images
  config.channels = (16, 32)  # model="cnn": channels of its 3x3 convolution + 2x2 max-pool blocks
  config.init = "lecun"  # or "nair": weights ~ N(0, 1e-3)
  config.standardize = False  # True: also divide the centred inputs by their std
  config.bits = arg.bits  # code length
  # Objective.
  config.objective = "ap"  # or "ndcg", or "tie_unaware_ap" (Smooth-AP of the relaxed distances, the control)
  config.temperature = 1.0  # "tie_unaware_ap": the sigmoid's temperature, in bits
  config.harmonic = "digamma"  # relaxed AP: "digamma" (exact at integers) or "ln" (eq. 7 as printed)
  config.discount = "exact"  # relaxed NDCG: "exact", "li" (eq. 8) or "simplified"
  config.distance = "relaxed_hamming"  # or "nair_hamming", "squared_euclidean"
  config.alpha = 3.0  # slope of the relaxation (eq. 6)
  config.alpha_final = 0.0  # > 0: anneal alpha linearly to this over the run
  config.width = 1.0  # soft-histogram bin width (eq. 14)
  # "query_vs_rest": each minibatch item against the others; "query_vs_database": the
  # minibatch as queries against the rest of the training set (database_size > 0: a sample).
  config.setting = "query_vs_rest"  # or "query_vs_database"
  config.database_size = 0  # "query_vs_database": items sampled per step (0: all the rest)
  config.database_cached = False  # database codes as constants (no gradient through them)
  # Optimisation: Adam, 50 warmup steps then cosine decay over 3,000 steps.
  config.optimizer = "adam"  # or "sgd" (with momentum)
  config.learning_rate = 1e-2
  config.momentum = 0.9  # "sgd"'s momentum, in [0, 1)
  config.lr_schedule = "cosine"  # or "constant"
  config.warmup_steps = 50  # linear warmup from 0, fewer than num_steps
  config.lr_final_fraction = 0.0  # cosine: the rate at the last step over the peak
  config.weight_decay = 0.0  # > 0: decoupled weight decay (AdamW)
  config.augment_shift = 1  # translate each training image by up to this many pixels, per step
  config.input_noise = 0.0  # > 0: Gaussian noise of this std added to the training features
  config.batch_per_class = 25  # class-balanced minibatches of 250
  config.num_devices = 1  # > 1: data-parallel over that many devices (batch split, parameters replicated)
  # Several processes (hosts), jax.distributed: None reads JAX_NUM_PROCESSES / JAX_PROCESS_ID / JAX_COORDINATOR_ADDRESS.
  config.num_processes = config_dict.placeholder(int)  # processes in the run (None and unset: one)
  config.process_id = config_dict.placeholder(int)  # this process, 0 .. num_processes - 1 (process 0 writes)
  config.coordinator_address = config_dict.placeholder(str)  # "host:port" of process 0
  config.num_steps = 3000
  config.log_every = 100
  config.eval_every = 100  # periodic evaluation on the queries (0 or None: at the start and end only)
  config.checkpoint_every = 200  # (0 or None: at the start and end only)
  config.target_metric = "tie_aware_ap"  # or "tie_aware_ndcg"
  config.target = 0.86  # > 0: log the time to reach it
  # Evaluation.
  config.radius = 2  # precision within Hamming radius 2 (distance <= 2)
  config.precision_k = 100  # tie-aware precision@100
  config.baselines = ("lsh", "itq")  # the table's baselines at the same length: --config.baselines=lsh,itq,sh
  config.plots = False  # True: precision-recall and distance histograms as PNGs in the workdir
  config.save_codes = False  # True: each row's codes and labels to <workdir>/codes/<method>.npz (evaluate_codes)

  if arg.model == "linear" and arg.bits == 16:
    config.alpha = 5.0  # chosen on validation_heldout at 16 bits
  if arg.model == "mlp":  # one hidden layer of 1,024 ReLU units, 1,000 constant steps
    config.alpha = 1.0
    config.learning_rate = 3e-3
    config.lr_schedule = "constant"
    config.warmup_steps = 0
    config.num_steps = 1000
  if arg.runlocal:  # scikit-learn digits, seconds
    config.dataset = "digits"
    config.image_shape = (8, 8, 1)
    config.queries_per_class = 10
    config.train_per_class = 60
    config.val_per_class = 20
    config.val_heldout_per_class = 15
    config.batch_per_class = 10
    config.num_steps = 60
    config.warmup_steps = 0 if arg.model == "mlp" else 6  # a tenth of the run
    config.augment_shift = 0  # a 1-pixel shift moves an 8x8 digit by an eighth of its width
    config.log_every = config.eval_every = 20
    config.checkpoint_every = 30
    config.target = 0.0
  return config
