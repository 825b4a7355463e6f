"""The datasets a config names, the retrieval protocol's splits, and the task: a split with its relevance."""

from __future__ import annotations

from typing import NamedTuple, Optional

from absl import logging
import ml_collections
import numpy as np

from hashjax import _checks, data

#: ``config.eval_split``: the protocol's queries, or one of two validation splits carved from the training set.
EVAL_SPLITS = ("test", "validation", "validation_heldout")

class Protocol(NamedTuple):
  """A labelled dataset split into queries, database and a training subset (stratified by ``labels``)."""
  features: np.ndarray  # float32 [num_items, dim]
  labels: np.ndarray  # int32 [num_items]
  split: data.RetrievalSplit
  name: str
  label_sets: Optional[np.ndarray] = None  # multi-label datasets: bool [num_items, num_labels]


#: The multi-label dataset: two MNIST-10k digits side by side (:func:`load_mnist_pairs`).
PAIRS = "mnist_pairs"


def load_mnist_pairs():
  r"""Two-digit images from the embedded MNIST test set: ``(features, labels, label_sets)``.

  The 10,000 digits, in one fixed random order (seed 0, whatever the run's seed), are paired two by two; each
  pair becomes one 28 x 56 image, the first digit on the left, flattened row-major: 5,000 images of 1,568
  pixels, no digit in two images. ``label_sets`` ``bool[5000, 10]`` holds the digits an image shows (one label
  when both are the same digit, else two); ``labels`` ``int32[5000]``, the left digit, is what the retrieval
  split is stratified by.

  .. math:: x = [\,l_{r,:}\;\; r_{r,:}\,]_{r=1}^{28}, \quad Y = \{y_l, y_r\}

  >>> x, y, sets = load_mnist_pairs()
  >>> x.shape, y.shape, sets.shape, int(sets.sum(axis=1).min()), int(sets.sum(axis=1).max())
  ((5000, 1568), (5000,), (5000, 10), 1, 2)
  """
  features, labels = data.load_mnist_t10k()
  order = np.random.default_rng(0).permutation(len(labels)).reshape(-1, 2)
  left, right = order[:, 0], order[:, 1]
  images = np.concatenate([features[left].reshape(-1, 28, 28), features[right].reshape(-1, 28, 28)], axis=2)
  label_sets = np.zeros((len(order), 10), bool)
  label_sets[np.arange(len(order)), labels[left]] = True
  label_sets[np.arange(len(order)), labels[right]] = True
  return images.reshape(len(order), -1), labels[left].astype(np.int32), label_sets


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
  label_sets = None
  if config.dataset == PAIRS:
    features, labels, label_sets = load_mnist_pairs()
  else:
    features, labels = load_dataset(config.dataset, tfds_split=config.get("tfds_split", "test"),
                                    data_dir=config.get("data_dir", None))
  try:
    split = data.retrieval_split(labels, queries_per_class=config.queries_per_class,
                                 train_per_class=config.train_per_class, seed=config.seed)
  except ValueError as e:  # a split the dataset's classes cannot give: told in one line (experiments.cli)
    raise ValueError(f"config.queries_per_class / train_per_class on {config.dataset}: {e}") from None
  return Protocol(features.astype(np.float32), labels.astype(np.int32), split, config.dataset, label_sets)


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
    raise ValueError(f"config.eval_split: expected one of {list(EVAL_SPLITS)}, "
                     f"got {config.eval_split!r}")
  return protocol, split.train, split.query, split.database


#: ``config.affinity``: same label; TALR's multi-level Euclidean levels (the closest 5 / 1 / 0.2 /
#: 0.1% of training pairs -> 1 / 2 / 5 / 10); Nair's Sec. 5.2 relevance, the
#: ``config.num_neighbors`` Euclidean nearest neighbours in feature space; or, on a multi-label dataset
#: (:data:`PAIRS`), the number of labels two items share (He et al.'s NUS-WIDE affinity, Sec. 5.3).
AFFINITIES = ("label", "euclidean", "neighbors", "shared_labels")


class Task(NamedTuple):
  """An evaluation split and its relevance; ``train``, ``query`` and ``database`` index ``features``."""
  features: np.ndarray  # float32 [num_items, dim]
  labels: np.ndarray  # int32 [num_items]
  train: np.ndarray
  query: np.ndarray
  database: np.ndarray
  num_classes: int
  affinity: str  # one of AFFINITIES
  thresholds: Optional[np.ndarray] = None  # "euclidean": squared-distance thresholds of the levels
  train_relevance: Optional[np.ndarray] = None  # "neighbors": bool [n_train, n_train], positions in train
  eval_relevance: Optional[np.ndarray] = None  # "neighbors": bool [n_query, n_database]
  train_neighbors: Optional[int] = None  # "neighbors": config.train_neighbors resolved to a count
  label_sets: Optional[np.ndarray] = None  # "shared_labels": bool [num_items, num_labels]


def make_task(config: ml_collections.ConfigDict) -> Task:
  """The split of ``config.eval_split`` (:func:`evaluation_split`) with the relevance of ``config.affinity``.

  ``"neighbors"``: an evaluation query's relevant items are its
  ``config.num_neighbors`` Euclidean nearest neighbours in the database; a
  training query's, its ``config.train_neighbors`` nearest in the training set
  (``"scaled"``: the same fraction of the set, ``round(num_neighbors (n_train - 1) / n_database)``).
  """
  kind = _checks.check_option("config.affinity", config.affinity, AFFINITIES)
  protocol, train, query, database = evaluation_split(config)
  x = protocol.features
  thresholds = train_rel = eval_rel = k_train = None
  if kind == "euclidean":
    thresholds = data.euclidean_thresholds(x[train])
  elif kind == "neighbors":
    k = _checks.check_int("config.num_neighbors", config.num_neighbors)
    k_train = config.train_neighbors
    if k_train == "scaled":
      k_train = max(1, int(round(k * (len(train) - 1) / len(database))))
    k_train = _checks.check_int("config.train_neighbors", k_train)
    train_rel = euclidean_neighbors(x[train], x[train], num_neighbors=k_train, exclude_self=True)
    eval_rel = euclidean_neighbors(x[query], x[database], num_neighbors=k,
                                   exclude_self=config.eval_split == "validation")
  if kind == "shared_labels" and protocol.label_sets is None:
    raise ValueError(f"config.affinity: 'shared_labels' needs a multi-label dataset ({PAIRS!r}), "
                     f"got config.dataset={config.dataset!r}")
  num_classes = int(protocol.labels.max()) + 1
  logging.info("%s: %d training items, %d evaluation queries, %d database items (eval split %s, affinity %s)",
               config.dataset, len(train), len(query), len(database), config.eval_split, kind)
  return Task(x, protocol.labels, train, query, database, num_classes, kind, thresholds, train_rel, eval_rel,
              k_train, protocol.label_sets)


def euclidean_neighbors(query_features: np.ndarray, db_features: np.ndarray, *, num_neighbors: int,
                        exclude_self: bool = False, block: int = 1024) -> np.ndarray:
  r"""bool ``[Q, N]``: ``db`` item ``j`` is among the ``num_neighbors`` Euclidean nearest of query ``i``.

  .. math:: R_{ij} = [\, |\{ l : \|x_i - y_l\| < \|x_i - y_j\| \}| < n \,]

  (ties at the ``n``-th distance are broken by index). With ``exclude_self``
  (queries = database), an item is never its own neighbour.

  >>> x = np.array([[0.0], [1.0], [3.0], [7.0]], np.float32)
  >>> euclidean_neighbors(x, x, num_neighbors=1, exclude_self=True).astype(int).tolist()
  [[0, 1, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]]
  """
  q = np.asarray(query_features, np.float64)
  db = np.asarray(db_features, np.float64)
  n = db.shape[0] - (1 if exclude_self else 0)
  if not 1 <= num_neighbors <= n:
    raise ValueError(f"num_neighbors: expected an int in [1, {n}], got {num_neighbors!r}")
  db_sq = np.sum(db * db, axis=1)
  out = np.zeros((q.shape[0], db.shape[0]), bool)
  for start in range(0, q.shape[0], block):
    rows = q[start:start + block]
    d = db_sq[None, :] - 2.0 * rows @ db.T
    if exclude_self:
      d[np.arange(rows.shape[0]), start + np.arange(rows.shape[0])] = np.inf
    nearest = np.argpartition(d, num_neighbors - 1, axis=1)[:, :num_neighbors]
    out[start + np.arange(rows.shape[0])[:, None], nearest] = True
  return out


def affinity(task: Task, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
  """int32 ``[len(rows), len(cols)]`` affinity of two index sets: label agreement, the Euclidean levels or the
  number of shared labels."""
  if task.affinity == "label":
    return np.asarray(data.label_affinity(task.labels[rows], task.labels[cols]))
  if task.affinity == "shared_labels":
    return np.asarray(data.multilabel_affinity(task.label_sets[rows], task.label_sets[cols]))
  if task.affinity == "euclidean":
    return data.euclidean_affinity_levels(task.features[rows], task.features[cols],
                                          thresholds=task.thresholds).astype(np.int32)
  raise ValueError("task.affinity: 'neighbors' relevance exists only between the task's own sets "
                   "(train_relevance, eval_relevance)")


def eval_affinity(task: Task) -> np.ndarray:
  """int32 ``[n_query, n_database]``: the relevance the evaluation queries are scored with."""
  if task.eval_relevance is not None:
    return task.eval_relevance.astype(np.int32)
  return affinity(task, task.query, task.database)
