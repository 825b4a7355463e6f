"""Pieces every experiment shares: datasets by name, the retrieval protocol, the result table."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
from typing import Dict, List, NamedTuple, Sequence

import jax
import ml_collections
import numpy as np

from hashjax import baselines, codes, data


class Protocol(NamedTuple):
  """A labelled dataset split into queries, database and a training subset."""
  features: np.ndarray  # float32 [num_items, dim]
  labels: np.ndarray  # int32 [num_items]
  split: data.RetrievalSplit
  name: str


def load_dataset(name: str, *, tfds_split: str = "test", data_dir: str | None = None):
  """Features and labels of a dataset named in a config.

  ``mnist_t10k`` (embedded, the default) and ``digits`` (scikit-learn) are
  offline; ``tfds:<name>`` (e.g. ``tfds:mnist``, ``tfds:cifar10``) reads a
  prepared tensorflow-datasets copy through ``data_source``; your own
  labelled images come as ``idx:<images file>,<labels file>`` (an IDX pair,
  e.g. MNIST's training set or EMNIST digits) or ``npz:<file>`` (arrays
  ``features`` and ``labels`` saved with ``numpy.savez``).
  """
  if name == "mnist_t10k":
    return data.load_mnist_t10k()
  if name == "digits":
    return data.load_digits()
  if name.startswith("tfds:"):
    return data.load_tfds(name[len("tfds:"):], split=tfds_split, data_dir=data_dir)
  if name.startswith("idx:"):
    paths = name[len("idx:"):].split(",")
    if len(paths) != 2 or not all(paths):
      raise ValueError(f"config.dataset: expected 'idx:<images file>,<labels file>', got {name!r}")
    return data.load_idx_images(*paths)
  if name.startswith("npz:") and name[len("npz:"):]:
    return data.load_npz(name[len("npz:"):])
  raise ValueError("config.dataset: expected 'mnist_t10k', 'digits', 'tfds:<name>', "
                   f"'idx:<images>,<labels>' or 'npz:<file>', got {name!r}")


def load_protocol(config: ml_collections.ConfigDict) -> Protocol:
  """The dataset and its seeded query/database/train split, as the config names them."""
  features, labels = load_dataset(config.dataset, tfds_split=config.get("tfds_split", "test"),
                                  data_dir=config.get("data_dir", None))
  split = data.retrieval_split(labels, queries_per_class=config.queries_per_class,
                               train_per_class=config.train_per_class, seed=config.seed)
  return Protocol(features.astype(np.float32), labels.astype(np.int32), split, config.dataset)


def evaluation_split(config: ml_collections.ConfigDict):
  """``(protocol, train, query, database)`` index sets for ``config.eval_split``.

  ``"test"``: the protocol's training subset, queries and database.
  ``"validation"``: ``config.val_per_class`` per class of the training subset
  become the queries, searched against (and trained on) the rest of it, the
  split on which hyper-parameters were first chosen. Its database holds only
  trained-on items, so it cannot see how codes of unseen items generalise.
  ``"validation_heldout"``: mirrors the test protocol, whose database holds
  items never trained on (4,000 of 9,000 on MNIST-10k, 44%). The same
  ``config.val_per_class`` queries per class are carved out first, then
  ``config.val_heldout_per_class`` further items per class are held out of
  training but kept in the database; the model trains on the rest, and the
  database is the rest plus the held-out items. With 500 training items per
  class, 100 queries and 175 held out: training on 225 per class, a database of
  400 per class of which 175 (44%) are unseen, 1,000 queries as in the test.
  Both validation variants draw from ``config.seed``; they share their queries.
  """
  protocol = load_protocol(config)
  split = protocol.split
  if config.eval_split in ("validation", "validation_heldout"):
    val = data.validation_split(split.train, labels=protocol.labels, per_class=config.val_per_class,
                                seed=config.seed)
    if config.eval_split == "validation":
      return protocol, val.train, val.validation, val.train
    held = data.validation_split(val.train, labels=protocol.labels,
                                 per_class=config.val_heldout_per_class,
                                 seed=np.random.default_rng([config.seed, 1]))
    # Trained on held.train; the database is all of val.train (held.train + held.validation).
    return protocol, held.train, val.validation, val.train
  if config.eval_split != "test":
    raise ValueError(f"config.eval_split: expected 'test', 'validation' or 'validation_heldout', "
                     f"got {config.eval_split!r}")
  return protocol, split.train, split.query, split.database


def baseline_words(method: str, features: np.ndarray, train, query, database, *, num_bits: int,
                   seed: int):
  """Fits baseline ``method`` on ``features[train]``; returns packed ``(query_words, db_words)``.

  The key is ``fold_in(key(seed), num_bits)``, so every experiment that runs a
  baseline at a given seed and length gets the very same codes.
  """
  params = baselines.fit(method, features[train], num_bits=num_bits,
                         key=jax.random.fold_in(jax.random.key(seed), num_bits))
  return (codes.pack_bits(baselines.encode(method, params, features[query])),
          codes.pack_bits(baselines.encode(method, params, features[database])))


def train_summary(history: Sequence[Dict]) -> Dict:
  """Median train-step throughput, training time and the time-to-target event of a ``hashjax.train`` history."""
  train_logs = [h for h in history if h["kind"] == "train"]
  return {
      "examples_per_sec": float(np.median([h["examples_per_sec"] for h in train_logs]))
                          if train_logs else None,
      "train_time": max((h["train_time"] for h in history), default=0.0),
      "time_to_target": next((h for h in history if h["kind"] == "target"), None),
  }


def default_workdir(config_name: str) -> str:
  return os.path.join("runs", config_name)


COLUMNS = (
    ("tie_aware_ap", "AP_T"),
    ("tie_aware_ndcg", "NDCG_T"),
    ("optimistic_ap", "AP_opt"),
    ("pessimistic_ap", "AP_pes"),
    ("precision_at_radius", "P@r"),
    ("num_empty_at_radius", "empty@r"),
    ("tie_aware_precision_at_k", "P@k_T"),
)


def _cell(value) -> str:
  if value is None:
    return f"{'-':>10}"
  if isinstance(value, (int, np.integer)):
    return f"{value:>10d}"
  return f"{value:>10.4f}"


def format_table(rows: Sequence[Dict], columns: Sequence = COLUMNS) -> str:
  """A fixed-width text table: method, bits, then one column per metric."""
  header = f"{'method':<14}{'bits':>5}" + "".join(f"{title:>10}" for _, title in columns)
  lines: List[str] = [header, "-" * len(header)]
  for row in rows:
    cells = "".join(_cell(row.get(key)) for key, _ in columns)
    lines.append(f"{row['method']:<14}{row['bits']:>5}" + cells)
  return "\n".join(lines)


class _DropLibraryInfo:
  """absl-log filter: drops INFO records emitted from inside orbax (per-save chatter)."""

  def filter(self, record) -> bool:
    import logging as pylogging
    return record.levelno > pylogging.INFO or "/orbax/" not in record.pathname.replace("\\", "/")


def quiet_library_logs() -> None:
  """Keeps experiment logs readable: orbax's per-checkpoint INFO lines are dropped."""
  from absl import logging as absl_logging
  absl_logging.get_absl_handler().addFilter(_DropLibraryInfo())


def warmup_steps(config: ml_collections.ConfigDict, default: int, num_steps: int) -> int:
  """``config.warmup_steps``, or ``default`` cut to a tenth of ``num_steps`` when the config leaves it None.

  A default warmup chosen for a long run must not swallow a short one (and
  :func:`hashjax.train.learning_rate_schedule` needs it below ``num_steps``);
  an explicit value is kept as given.

  >>> config = ml_collections.ConfigDict({"warmup_steps": None})
  >>> warmup_steps(config, 50, 3000), warmup_steps(config, 50, 60)
  (50, 6)
  """
  value = config.get("warmup_steps")
  return int(value) if value is not None else min(int(default), num_steps // 10)


#: Bytes glibc's malloc keeps at the top of a heap when it grows or trims one (M_TOP_PAD).
MALLOC_TOP_PAD = 256 << 20


def pad_malloc_heaps(top_pad: int = MALLOC_TOP_PAD) -> bool:
  """Lets glibc keep freed memory in its heaps rather than return it to the OS after every step.

  XLA's CPU runtime allocates each execution's temporaries (megabytes for
  LambdaRank's ``[Q, M, M]`` pairs) and frees them at the end; with glibc's
  default pad of 128 KB the heaps of its worker threads shrink and grow again
  every step, and the pages fault back in: the shipped 32-bit Nair run (the
  default LambdaRank config) trained in 124.4 s with the default pad and in
  79.6 s with 256 MB (setting ``MALLOC_TOP_PAD_`` in the environment has the
  same effect). Setting the pad also freezes glibc's dynamic mmap threshold at
  128 KB; raising that threshold to 32 MB as well made the same run slower
  (99.3 s, with 5 times the system time), so it is left alone. Returns False
  (and changes nothing) where the C library has no ``mallopt``.
  """
  try:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    return bool(libc.mallopt(-2, int(top_pad)))  # -2: M_TOP_PAD in glibc's malloc.h
  except (OSError, AttributeError):
    return False


def freeze_gc() -> None:
  """Takes every object alive now out of the garbage collector's scans (``gc.freeze``); call after setup.

  With jax, numpy and the data loaded, each of Python's full collections
  scanned all of them: 0.08 to 0.14 s, at moments set by allocation counts,
  so some fell inside first calls and counted as compilation (a bit-sliced
  kernel that compiled in 0.21 s measured 0.35 s with one). After the freeze
  they took 0.001 to 0.03 s (development measurements). Objects created later
  are collected as usual; the benchmarks call this so that their compile
  figures time compilation.
  """
  gc.collect()
  gc.freeze()
