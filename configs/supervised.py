r"""Supervised hashing baselines (KSH, SDH, COSDISH, FastHash, BRE, SPLH) beside ITQ and the unsupervised
spherical hashing and anchor graph hashing, on the embedded MNIST-10k protocol.

  python -m experiments.evaluate --config=configs/supervised.py
  python -m experiments.evaluate --config=configs/supervised.py:runlocal  # scikit-learn digits

The supervised methods learn from the class labels of the 5,000 training items (500 per class of the
database); each fitted model is saved to ``<workdir>/models/<method>-<bits>/``. Expected test AP_T at 32 bits
(tables in docs/results/supervised.md): COSDISH and FastHash about 0.94, SDH and KSH about 0.91, BRE about 0.69,
SPLH about 0.60, AGH (two layers) about 0.60, ITQ 0.4539. About 3 minutes on a 2-core CPU (runlocal: about 30 s).
"""

import ml_collections

from configs import common


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  arg = common.parse_arg(arg, runlocal=False)
  config = ml_collections.ConfigDict()
  config.name = "supervised"
  config.dataset = "mnist_t10k"  # or "digits", "tfds:mnist", "tfds:cifar10"
  config.seed = 0  # the split and the methods' random draws (anchors, starts, sampled columns)
  config.queries_per_class = 100  # the rest of each class is the database
  config.train_per_class = 500  # of the database, what the methods are fitted on (with its labels)
  # Supervised (hashjax.baselines.SUPERVISED): ksh, sdh, cosdish, fasthash, bre, splh; unsupervised: lsh, pca,
  # itq, sh, iso, sph, agh.
  config.methods = ("itq", "sph", "agh", "ksh", "sdh", "cosdish", "fasthash", "bre", "splh")
  config.bits = (16, 32, 64)  # code lengths (pca, itq, iso and splh: at most the input dimension)
  config.radius = 2  # precision within Hamming radius 2 (distance <= 2)
  config.precision_k = 100  # tie-aware precision@100
  config.plots = False  # True: AP against code length, precision-recall and distance histograms as PNGs
  if arg.runlocal:
    config.dataset = "digits"
    config.queries_per_class = 10
    config.train_per_class = 120  # 1,200 items: the kernel methods draw 1,000 anchors from them
    config.bits = (16, 32)
  return config
