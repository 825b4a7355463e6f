"""Retrieval protocols: which items are queries, database and training set.

A protocol returns sorted ``int64`` index arrays into the dataset; the
training set is drawn from the database (the queries are never trained on),
and hyper-parameters are tuned on a validation split carved from the training
set (``validation_split``), never on the queries.

Randomness comes only from ``seed`` (an int or a ``numpy.random.Generator``);
the same seed gives the same split.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Union

import numpy as np

from hashjax import _checks

Seed = Union[int, np.random.Generator]


class RetrievalSplit(NamedTuple):
  """Sorted ``int64`` indices: ``query`` and ``database`` partition the data, ``train`` ⊆ ``database``."""
  query: np.ndarray
  database: np.ndarray
  train: np.ndarray


class ValidationSplit(NamedTuple):
  """Sorted ``int64`` indices partitioning a training set."""
  train: np.ndarray
  validation: np.ndarray


def _rng(seed: Seed) -> np.random.Generator:
  if isinstance(seed, np.random.Generator):
    return seed
  if not _checks.is_int(seed) or seed < 0:
    raise ValueError(f"seed: expected a non-negative int or a numpy Generator, got {seed!r}")
  return np.random.default_rng(int(seed))


def _class_labels(name: str, labels) -> np.ndarray:
  if not hasattr(labels, "dtype") or not np.issubdtype(np.asarray(labels).dtype, np.integer):
    raise ValueError(f"{name}: expected integer class labels, got "
                     f"{getattr(labels, 'dtype', type(labels).__name__)}")
  labels = np.asarray(labels)
  if labels.ndim != 1 or labels.size == 0:
    raise ValueError(f"{name}: expected a non-empty 1-D array [n] of class labels, got shape {labels.shape}")
  if labels.min() < 0:
    raise ValueError(f"{name}: expected class labels >= 0, got minimum {labels.min()}")
  return labels


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
  labels = _class_labels("labels", labels)
  q = _checks.check_positive_int("queries_per_class", queries_per_class)
  t = _checks.check_int("train_per_class", train_per_class, allow_none=True)
  rng = _rng(seed)
  need = q + (1 if t is None else t)
  classes, counts = np.unique(labels, return_counts=True)
  short = counts < need
  if short.any():
    c = int(np.argmax(short))
    raise ValueError(
        f"labels: class {classes[c]} has {counts[c]} items, but queries_per_class={q} and "
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
  n = _checks.check_positive_int("num_items", num_items)
  nq = _checks.check_positive_int("num_queries", num_queries)
  nt = _checks.check_int("num_train", num_train, allow_none=True)
  rng = _rng(seed)
  if nq >= n:
    raise ValueError(f"num_queries: expected fewer than num_items={n} (the database must not be empty), got {nq}")
  if nt is not None and nt > n - nq:
    raise ValueError(f"num_train: expected at most num_items - num_queries = {n - nq}, got {nt}")
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
  if not hasattr(train_indices, "dtype") or not np.issubdtype(np.asarray(train_indices).dtype, np.integer):
    raise ValueError(f"train_indices: expected an integer index array, got "
                     f"{getattr(train_indices, 'dtype', type(train_indices).__name__)}")
  train_indices = np.asarray(train_indices)
  if train_indices.ndim != 1 or train_indices.size < 2:
    raise ValueError(f"train_indices: expected a 1-D array of at least 2 indices, got shape {train_indices.shape}")
  if train_indices.min() < 0:
    raise ValueError(f"train_indices: expected indices >= 0, got minimum {train_indices.min()}")
  if np.unique(train_indices).size != train_indices.size:
    raise ValueError("train_indices: expected distinct indices, got repeats")
  if (per_class is None) == (fraction is None):
    raise ValueError(f"per_class: give exactly one of per_class and fraction, got per_class={per_class!r}, "
                     f"fraction={fraction!r}")
  if per_class is not None:
    per_class = _checks.check_positive_int("per_class", per_class)
    if labels is None:
      raise ValueError("labels: per_class needs the class labels")
  else:
    fraction = _checks.check_number("fraction", fraction, low=0, high=1, low_open=True, high_open=True)
  rng = _rng(seed)

  if labels is None:
    n = train_indices.size
    v = max(1, _round(fraction * n))
    if v >= n:
      raise ValueError(f"fraction: {fraction} of {n} training items leaves none for training")
    perm = rng.permutation(train_indices)
    return ValidationSplit(np.sort(perm[v:]).astype(np.int64), np.sort(perm[:v]).astype(np.int64))

  labels = _class_labels("labels", labels)
  if train_indices.max() >= labels.size:
    raise ValueError(f"labels: has {labels.size} entries, but train_indices reaches index {train_indices.max()}")
  train_labels = labels[train_indices]
  keep, held = [], []
  for c in np.unique(train_labels):
    members = train_indices[train_labels == c]
    v = per_class if per_class is not None else max(1, _round(fraction * members.size))
    if v >= members.size:
      raise ValueError(f"labels: class {c} has {members.size} training items, too few to hold out {v} "
                       "for validation and keep one for training")
    perm = rng.permutation(members)
    held.append(perm[:v])
    keep.append(perm[v:])
  return ValidationSplit(np.sort(np.concatenate(keep)).astype(np.int64),
                         np.sort(np.concatenate(held)).astype(np.int64))
