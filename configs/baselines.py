r"""Unsupervised baselines (LSH, PCA-sign, ITQ, SH) on the embedded MNIST-10k protocol; any other baseline of
``hashjax.baselines`` through ``--config.methods`` (the supervised ones: configs/supervised.py).

  python -m experiments.evaluate --config=configs/baselines.py
  python -m experiments.evaluate --config=configs/baselines.py:runlocal  # scikit-learn digits
  python -m experiments.evaluate --config=configs/baselines.py --config.methods=sth,itq  # self-taught hashing

Test AP_T at 16 / 32 / 64 bits: ITQ 0.4105 / 0.4539 / 0.4643, LSH 0.2306 / 0.2455 / 0.3466
(README, the main job; the same at any thread count); 16 s on a 2-core CPU (runlocal: a few seconds). Override
any field, a list as comma-separated values, e.g. ``--config.bits=16,32 --config.methods=lsh,itq``;
``python -m experiments.evaluate --config=configs/baselines.py --help`` lists the fields.
"""

import ml_collections
from ml_collections import config_dict

from configs import common


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  arg = common.parse_arg(arg, runlocal=False)
  config = ml_collections.ConfigDict()
  config.name = "baselines"
  config.dataset = "mnist_t10k"  # or "digits", "tfds:mnist", "tfds:cifar10"
  config.seed = 0  # the split and the baselines' random draws (LSH's projections, ITQ's rotation)
  # TALR protocol: 100 queries per class, the rest database, 500 per class of it for training.
  config.queries_per_class = 100  # the rest of each class is the database
  config.train_per_class = 500  # of the database, what the baselines are fitted on
  # Any of hashjax.baselines.BASELINES: lsh, pca, itq, sh, mdsh, iso, sph, agh, sth (unsupervised), ksh, sdh,
  # cosdish, fasthash, bre, splh, machash (supervised: fitted with the training items' labels); --config.methods=ksh
  config.methods = ("lsh", "pca", "itq", "sh")
  config.weighted = ()  # of config.methods, also ranked by learned bit weights (EGD, hashjax.weighting.fit)
  config.models = ()  # saved models (hashjax.load_model paths) on the same protocol, scored beside the methods
  config.bits = (16, 32, 64)  # code lengths: --config.bits=16,32 (pca and itq: at most the input dimension)
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
    config.train_per_class = 50
    config.bits = (16, 32)
  return config
