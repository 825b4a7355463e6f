r"""Supervised hashing baselines (KSH, SDH, COSDISH, FastHash, BRE, SPLH, MACHash) beside ITQ (plain and with
learned bit weights), the unsupervised spherical hashing, anchor graph hashing and multidimensional spectral hashing,
and the learned methods, on the embedded MNIST-10k protocol.

  python -m experiments.evaluate --config=configs/supervised.py
  python -m experiments.evaluate --config=configs/supervised.py:runlocal  # scikit-learn digits
  python -m experiments.evaluate --config=configs/supervised.py --config.unseen_database=True  # never-fitted items

The supervised methods learn from the class labels of the 5,000 training items (500 per class of the
database); each fitted model is saved to ``<workdir>/models/<method>-<bits>/``. Expected test AP_T at 32 bits
(tables in docs/results/supervised.md): MACHash, COSDISH and FastHash about 0.94-0.95, SDH and KSH about 0.92,
BRE about 0.69, SPLH about 0.63, AGH (two layers) about 0.61, MDSH about 0.29, ITQ 0.4539 (0.4924 with EGD bit
weights). About 1.5-3 minutes on a 2-core CPU, as loaded (runlocal: about 30 s). Searching only the 4,000
database items outside the training set (``unseen_database``) moves each AP_T at 32 bits by at most 0.015
(the supervised methods' down).

The learned methods join the same table from their saved models (``config.models``: a model's directory, or
a run's workdir, whose ``models/`` may hold several), trained by their own configs on the same split (their
training items are never this run's queries; a model recording another split is refused):

  for b in 16 32 64; do
    python -m experiments.train --config=configs/talr_ap.py:bits=$b --workdir=runs/talr-linear-$b
    python -m experiments.train --config=configs/talr_ap.py:model=mlp,bits=$b --workdir=runs/talr-mlp-$b
  done
  python -m experiments.colgen --config=configs/cghash.py --config.talr_steps=0 --workdir=runs/cghash
  python -m experiments.colgen --config=configs/structhash.py --config.talr_steps=0 --workdir=runs/structhash
  python -m experiments.evaluate --config=configs/supervised.py --workdir=runs/supervised \
      --config.models=runs/talr-linear-16,runs/talr-mlp-16,runs/talr-linear-32,runs/talr-mlp-32,\
runs/talr-linear-64,runs/talr-mlp-64,runs/cghash,runs/structhash

(about 8 minutes of TALR training, 5 of column generation, then 4 for the table; AP_T at 32 bits: TALR MLP
0.9662, linear 0.8724, CGHash 0.8580, StructHash about 0.85.)
"""

import ml_collections
from ml_collections import config_dict

from configs import common


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  arg = common.parse_arg(arg, runlocal=False)
  config = ml_collections.ConfigDict()
  config.name = "supervised"
  config.dataset = "mnist_t10k"  # or "digits", "tfds:mnist", "tfds:cifar10"
  config.seed = 0  # the split and the methods' random draws (anchors, starts, sampled columns)
  config.queries_per_class = 100  # the rest of each class is the database
  config.train_per_class = 500  # of the database, what the methods are fitted on (with its labels)
  # Supervised (hashjax.baselines.SUPERVISED): ksh, sdh, cosdish, fasthash, bre, splh, machash; unsupervised: lsh,
  # pca, itq, sh, mdsh, iso, sph, agh, sth.
  config.methods = ("itq", "sph", "agh", "mdsh", "ksh", "sdh", "cosdish", "fasthash", "bre", "splh", "machash")
  config.weighted = ("itq",)  # of config.methods, also ranked by learned bit weights (EGD, hashjax.weighting.fit)
  config.models = ()  # saved models (hashjax.load_model paths) on the same protocol, scored beside the methods
  config.bits = (16, 32, 64)  # code lengths (pca, itq, iso and splh: at most the input dimension)
  config.unseen_database = False  # True: search only the database items outside the training subset
  config.radius = 2  # precision within Hamming radius 2 (distance <= 2)
  config.precision_k = 100  # tie-aware precision@100
  config.plots = False  # True: AP against code length, precision-recall and distance histograms as PNGs
  config.num_devices = 1  # > 1: the database split by rows over that many devices for the evaluation
  # Several processes (hosts), jax.distributed: None reads JAX_NUM_PROCESSES / JAX_PROCESS_ID / JAX_COORDINATOR_ADDRESS.
  config.num_processes = config_dict.placeholder(int)  # processes in the run (None and unset: one)
  config.process_id = config_dict.placeholder(int)  # this process, 0 .. num_processes - 1 (process 0 writes)
  config.coordinator_address = config_dict.placeholder(str)  # "host:port" of process 0
  if arg.runlocal:
    config.dataset = "digits"
    config.queries_per_class = 10
    config.train_per_class = 120  # 1,200 items: the kernel methods draw 1,000 anchors from them
    config.bits = (16, 32)
  return config
