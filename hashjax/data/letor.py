"""Learning-to-rank data in the SVMlight/LETOR format.

A line reads ``<relevance> qid:<query id> 1:<v> 2:<v> ... # comment``, with
1-based feature indices (LETOR 4.0 MQ2007/MQ2008, MSLR-WEB10K/30K, Yahoo!).
Graded relevance labels are hashjax *affinity* levels (0 = irrelevant).

No LETOR file ships with hashjax: the data are Microsoft Research's, under
their own terms; point ``path`` at your copy.
"""

from __future__ import annotations

import os
import pathlib
from typing import NamedTuple, Tuple, Union

import numpy as np

from hashjax import _checks

PathLike = Union[str, os.PathLike]


class RankingData(NamedTuple):
  """Documents of a ranking file, in file order."""
  features: np.ndarray  #: ``float32[n, num_features]``
  affinity: np.ndarray  #: ``int32[n]`` graded relevance, 0 = irrelevant
  query_ids: np.ndarray  #: ``int64[n]`` the ``qid:`` of each document


class QueryGroups(NamedTuple):
  """Documents grouped by query, queries in order of first appearance."""
  query_ids: np.ndarray  #: ``int64[G]`` distinct query ids
  indices: Tuple[np.ndarray, ...]  #: ``G`` ascending ``int64`` row-index arrays


def load_svmlight_ranking(path: PathLike, *, num_features: int) -> RankingData:
  r"""Reads a LETOR/SVMlight ranking file into dense numpy arrays.

  Parsing is scikit-learn's ``load_svmlight_file(..., query_id=True,
  zero_based=False)``; ``#`` comments are ignored and missing features are 0.

  .. math:: \text{line } i:\; a_i \;\; \mathrm{qid}{:}q_i \;\; j{:}x_{ij} \dots,
     \quad 1 \le j \le \mathrm{num\_features}

  Args:
    path: a local text file (e.g. LETOR 4.0 ``S1.txt`` or MSLR ``train.txt``).
    num_features: the feature count of the format (46 for LETOR 4.0, 136 for
      MSLR-WEB); files that use fewer are zero-padded, more is an error.

  Returns:
    ``RankingData(features float32[n, num_features], affinity int32[n],
    query_ids int64[n])``.

  Raises:
    ValueError: naming ``path`` for unparsable content, no documents, a
      missing ``qid:``, NaN/inf features or non-integer/negative labels;
      naming ``num_features`` when the file uses a larger index.

  >>> import tempfile, os
  >>> with tempfile.TemporaryDirectory() as d:
  ...   f = os.path.join(d, "tiny.txt")
  ...   with open(f, "w") as out:
  ...     _ = out.write("2 qid:7 1:0.5 3:1 #doc a\n0 qid:7 2:0.25\n1 qid:9 1:1\n")
  ...   data = load_svmlight_ranking(f, num_features=3)
  >>> data.features.tolist(), data.affinity.tolist(), data.query_ids.tolist()
  ([[0.5, 0.0, 1.0], [0.0, 0.25, 0.0], [1.0, 0.0, 0.0]], [2, 0, 1], [7, 7, 9])
  """
  num_features = _checks.check_positive_int("num_features", num_features)
  path = pathlib.Path(path)
  if not path.is_file():
    raise FileNotFoundError(f"path: no file at {str(path)!r}")
  from sklearn.datasets import load_svmlight_file  # pylint: disable=g-import-not-at-top
  try:
    x, y, qid = load_svmlight_file(str(path), query_id=True, zero_based=False, dtype=np.float64)
  except ValueError as e:
    raise ValueError(f"path: {str(path)!r} is not a valid SVMlight/LETOR file ({e})") from e
  n = x.shape[0]
  if n == 0:
    raise ValueError(f"path: {str(path)!r} holds no documents")
  if qid.shape[0] != n:
    raise ValueError(f"path: {str(path)!r} has lines without 'qid:' (ranking data need a query id per line)")
  if x.shape[1] > num_features:
    raise ValueError(f"num_features: {str(path)!r} uses feature index {x.shape[1]}, "
                     f"more than num_features={num_features}")
  if not np.isfinite(x.data).all():
    bad = int((~np.isfinite(x.data)).sum())
    raise ValueError(f"path: {str(path)!r} holds {bad} NaN/inf feature values")
  if not np.isfinite(y).all() or (y != np.round(y)).any() or y.min() < 0:
    shown = np.unique(y)[:6].tolist()
    raise ValueError(f"path: {str(path)!r} relevance labels must be non-negative integers, got {shown}")
  features = np.zeros((n, num_features), np.float32)
  features[:, :x.shape[1]] = x.toarray()
  return RankingData(features, y.astype(np.int32), qid.astype(np.int64))


def group_by_query(query_ids: np.ndarray) -> QueryGroups:
  r"""Row indices of each query's documents, queries in order of first appearance.

  .. math:: I_g = \{ i : q_i = g \}

  Args:
    query_ids: ``int[n]`` query id per document (need not be contiguous).

  Returns:
    ``QueryGroups(query_ids int64[G], indices)`` with ``indices[g]`` the
    ascending rows of query ``query_ids[g]``.

  >>> groups = group_by_query(np.array([7, 7, 9, 7]))
  >>> groups.query_ids.tolist(), [g.tolist() for g in groups.indices]
  ([7, 9], [[0, 1, 3], [2]])
  """
  if not hasattr(query_ids, "dtype") or not np.issubdtype(np.asarray(query_ids).dtype, np.integer):
    raise ValueError(f"query_ids: expected an integer array, got "
                     f"{getattr(query_ids, 'dtype', type(query_ids).__name__)}")
  query_ids = np.asarray(query_ids)
  if query_ids.ndim != 1 or query_ids.size == 0:
    raise ValueError(f"query_ids: expected a non-empty 1-D array [n], got shape {query_ids.shape}")
  uniq, first, inverse = np.unique(query_ids, return_index=True, return_inverse=True)
  order = np.argsort(first, kind="stable")  # groups by first appearance
  rows = np.argsort(inverse, kind="stable")  # rows sorted by group, ascending within
  bounds = np.cumsum(np.bincount(inverse, minlength=uniq.size))[:-1]
  per_group = np.split(rows.astype(np.int64), bounds)
  return QueryGroups(uniq[order].astype(np.int64), tuple(per_group[g] for g in order))
