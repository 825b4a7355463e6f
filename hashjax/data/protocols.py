"""Retrieval protocols: which items are queries, database and training set.

A protocol returns sorted ``int64`` index arrays into the dataset; the
training set is drawn from the database (the queries are never trained on),
and hyper-parameters are tuned on a validation split carved from the training
set (``validation_split``), never on the queries.

Randomness comes only from ``seed`` (an int or a ``numpy.random.Generator``);
the same seed gives the same split.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from hashjax import _checks

Seed = _checks.Seed


class RetrievalSplit(NamedTuple):
  """Sorted ``int64`` indices: ``query`` and ``database`` partition the data, ``train`` ⊆ ``database``."""
  query: np.ndarray
  database: np.ndarray
  train: np.ndarray


class ValidationSplit(NamedTuple):
  """Sorted ``int64`` indices partitioning a training set."""
  train: np.ndarray
  validation: np.ndarray


def _indices(name: str, x, *, what: str) -> np.ndarray:
  """A non-empty 1-D integer array of values in ``[0, 2^31)`` on the host."""
  _checks.check_int_range(name, x, 0, _checks.INT32_MAX, what=what, ndim=1, shape_doc="[n]")
  return np.asarray(x)


def _round(x: float) -> int:
  return int(np.floor(x + 0.5))


def retrieval_split(labels: np.ndarray, *, queries_per_class: int = 100,
                    train_per_class: Optional[int] = 500, seed: Seed = 0) -> RetrievalSplit:
  r"""Stratified query / database / training split of a labelled dataset.

  For each class ``c`` (in increasing order) a random permutation of its
  items gives ``queries_per_class`` queries, then ``train_per_class`` training
  items; everything that is not a query is database. This is the first
  CIFAR-10 setting of He et al. (2018, Sec. 5): 100 queries per class, the
  rest as database, 500 per class of the database for training; on MNIST-10k
  it gives 1,000 queries, 9,000 database items and 5,000 training items.

  .. math:: |Q_c| = q, \quad T_c \subseteq D_c = X_c \setminus Q_c,\quad |T_c| = t

  Args:
    labels: ``int[n]`` class labels (>= 0).
    queries_per_class: ``q``, queries drawn from every class.
    train_per_class: ``t``, training items drawn from every class's database
      part; ``None`` trains on the whole database (He et al.'s second setting).
    seed: int or ``numpy.random.Generator``.

  Returns:
    ``RetrievalSplit(query, database, train)``, sorted ``int64`` indices.

  Raises:
    ValueError: naming ``labels`` when a class has fewer than ``q + t``
      items (``q + 1`` if ``t`` is None).

  >>> s = retrieval_split(np.array([0, 0, 0, 1, 1, 1, 1]), queries_per_class=1,
  ...                     train_per_class=2, seed=0)
  >>> len(s.query), len(s.database), len(s.train), set(s.train) <= set(s.database)
  (2, 5, 4, True)
  """
  labels = _indices("labels", labels, what="class labels")
  q = _checks.check_int("queries_per_class", queries_per_class)
  t = _checks.check_int("train_per_class", train_per_class, allow_none=True)
  rng = _checks.check_rng(seed)
  need = q + (1 if t is None else t)
  classes, counts = np.unique(labels, return_counts=True)
  short = counts < need
  if short.any():
    c = int(np.argmax(short))
    raise ValueError(f"labels: class {classes[c]} has {counts[c]} items, but queries_per_class={q} and "
                     f"train_per_class={t} need {need} per class ({int(short.sum())} class(es) too small)")
  query, train = [], []
  for c in classes:
    perm = rng.permutation(np.flatnonzero(labels == c))
    query.append(perm[:q])
    if t is not None:
      train.append(perm[q:q + t])
  query = np.sort(np.concatenate(query)).astype(np.int64)
  is_db = np.ones(labels.size, bool)
  is_db[query] = False
  database = np.flatnonzero(is_db).astype(np.int64)
  train = database if t is None else np.sort(np.concatenate(train)).astype(np.int64)
  return RetrievalSplit(query, database, train)


def random_split(num_items: int, *, num_queries: int, num_train: Optional[int] = None,
                 seed: Seed = 0) -> RetrievalSplit:
  r"""Unstratified query / database / training split (for unlabelled data).

  ``num_queries`` random items are queries, the rest database, and
  ``num_train`` random database items the training set: LabelMe in He et al.
  (2K / 20K / 5K) and the StructHash protocol (Lin et al.: 2,000 queries, the
  rest database, 2,000 or 5,000 training items sampled from the database).

  .. math:: |Q| = n_q, \quad D = X \setminus Q, \quad T \subseteq D, \; |T| = n_t

  Args:
    num_items: dataset size ``n``.
    num_queries: ``n_q < n``.
    num_train: ``n_t <= n - n_q``; ``None`` trains on the whole database.
    seed: int or ``numpy.random.Generator``.

  Returns:
    ``RetrievalSplit(query, database, train)``, sorted ``int64`` indices.

  >>> s = random_split(10, num_queries=2, num_train=3, seed=0)
  >>> len(s.query), len(s.database), len(s.train)
  (2, 8, 3)
  """
  n = _checks.check_int("num_items", num_items)
  nq = _checks.check_int_at_most("num_queries", num_queries, n - 1, what=f"num_items - 1 = {n - 1} (keeps a database)")
  nt = None if num_train is None else _checks.check_int_at_most(
      "num_train", num_train, n - nq, what=f"num_items - num_queries = {n - nq}", low=0)
  rng = _checks.check_rng(seed)
  perm = rng.permutation(n)
  query = np.sort(perm[:nq]).astype(np.int64)
  database = np.sort(perm[nq:]).astype(np.int64)
  train = database if nt is None else np.sort(rng.choice(database, nt, replace=False)).astype(np.int64)
  return RetrievalSplit(query, database, train)


def validation_split(train_indices: np.ndarray, *, labels: Optional[np.ndarray] = None,
                     per_class: Optional[int] = None, fraction: Optional[float] = None,
                     seed: Seed = 0) -> ValidationSplit:
  r"""Carves a validation set out of a training set, stratified when labelled.

  Give exactly one of ``per_class`` (needs ``labels``) or ``fraction``. With
  ``labels`` each class ``c`` of the training set gives ``per_class`` or
  ``round(fraction * n_c)`` (at least 1) validation items; without labels
  ``round(fraction * n)`` (at least 1) items are drawn uniformly. Every class
  keeps at least one training item.

  .. math:: V_c \subset T_c, \quad |V_c| = v \text{ or } \max(1, \mathrm{round}(f\, |T_c|)),
     \quad T'_c = T_c \setminus V_c \ne \emptyset

  Args:
    train_indices: ``int[n_t]`` distinct indices into the dataset (e.g.
      ``RetrievalSplit.train``).
    labels: optional ``int[n]`` class labels of the whole dataset.
    per_class: validation items per class.
    fraction: validation fraction in ``(0, 1)``.
    seed: int or ``numpy.random.Generator``.

  Returns:
    ``ValidationSplit(train, validation)``, sorted ``int64`` dataset indices
    partitioning ``train_indices``.

  >>> v = validation_split(np.arange(10), labels=np.array([0, 1] * 5), per_class=1, seed=0)
  >>> len(v.train), len(v.validation), sorted(np.array([0, 1] * 5)[v.validation].tolist())
  (8, 2, [0, 1])
  """
  train_indices = _indices("train_indices", train_indices, what="dataset indices")
  repeated = train_indices.size - np.unique(train_indices).size
  if repeated:
    raise ValueError(f"train_indices: expected distinct indices, got {repeated} repeated among {train_indices.size}")
  if (per_class is None) == (fraction is None):
    raise ValueError(f"per_class: give exactly one of per_class and fraction, got {per_class!r} and {fraction!r}")
  if per_class is not None and labels is None:
    raise ValueError("labels: per_class needs the class labels, got None")
  if per_class is not None:
    per_class = _checks.check_int("per_class", per_class)
  else:
    fraction = _checks.check_number("fraction", fraction, low=0, high=1, low_open=True, high_open=True)
  rng = _checks.check_rng(seed)

  if labels is None:
    groups = {"fraction: the training set": train_indices}
  else:
    labels = _indices("labels", labels, what="class labels")
    _checks.check_int_range("train_indices", train_indices, 0, labels.size - 1, what="indices into labels")
    train_labels = labels[train_indices]
    groups = {f"labels: class {c}": train_indices[train_labels == c] for c in np.unique(train_labels)}
  keep, held = [], []
  for group, members in groups.items():
    v = per_class if per_class is not None else max(1, _round(fraction * members.size))
    if v >= members.size:
      raise ValueError(f"{group} has {members.size} training items, too few to hold out {v} and keep one to train")
    perm = rng.permutation(members)
    held.append(perm[:v])
    keep.append(perm[v:])
  return ValidationSplit(np.sort(np.concatenate(keep)).astype(np.int64),
                         np.sort(np.concatenate(held)).astype(np.int64))
