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
from typing import NamedTuple, Optional, Tuple, Union

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


def load_svmlight_ranking(path: PathLike, *, num_features: int, query_file: Optional[PathLike] = None,
                          max_label: Optional[int] = None) -> RankingData:
  r"""Reads a LETOR/SVMlight ranking file into dense numpy arrays.

  Parsing is scikit-learn's ``load_svmlight_file(..., query_id=True,
  zero_based=False)``; ``#`` comments and blank lines are ignored and missing
  features are 0. A file that it refuses is scanned line by line to name the
  first bad line. Queries come as ``qid:`` on every line, or, with
  ``query_file``, in the LightGBM/XGBoost convention: the data file has no
  ``qid:`` and ``query_file`` holds one query's document count per line, in
  file order (query ids ``0, 1, ...``). A query's documents must be contiguous.

  .. math:: \text{line } i:\; a_i \;\; \mathrm{qid}{:}q_i \;\; j{:}x_{ij} \dots,
     \quad 1 \le j \le \mathrm{num\_features}

  Args:
    path: a local text file (e.g. LETOR 4.0 ``S1.txt`` or MSLR ``train.txt``).
    num_features: the feature count of the format (46 for LETOR 4.0, 136 for
      MSLR-WEB); files that use fewer are zero-padded, more is an error.
    query_file: optional file of per-query document counts (``train.txt.query``,
      ``train.group``) for a data file without ``qid:``.
    max_label: optional largest allowed relevance label (2 for MQ2008).

  Returns:
    ``RankingData(features float32[n, num_features], affinity int32[n],
    query_ids int64[n])``.

  Raises:
    ValueError: naming ``path`` and the line for unparsable content, a
      missing ``qid:``, a query id that reappears after other queries,
      NaN/inf features, non-integer, negative or too large labels; naming
      ``num_features`` and the line for a larger feature index; naming
      ``query_file`` and its line for a bad count or counts that do not sum
      to the number of documents; an empty file.

  >>> import tempfile, os
  >>> with tempfile.TemporaryDirectory() as d:
  ...   f = os.path.join(d, "tiny.txt")
  ...   with open(f, "w") as out:
  ...     _ = out.write("2 qid:7 1:0.5 3:1 #doc a\n0 qid:7 2:0.25\n1 qid:9 1:1\n")
  ...   data = load_svmlight_ranking(f, num_features=3)
  >>> data.features.tolist(), data.affinity.tolist(), data.query_ids.tolist()
  ([[0.5, 0.0, 1.0], [0.0, 0.25, 0.0], [1.0, 0.0, 0.0]], [2, 0, 1], [7, 7, 9])
  """
  num_features = _checks.check_int("num_features", num_features)
  if max_label is not None:
    max_label = _checks.check_int_at_most("max_label", max_label, _checks.INT32_MAX, low=0, what="2^31 - 1 (int32)")
  path = pathlib.Path(_checks.check_file("path", path))
  if query_file is not None:
    query_file = pathlib.Path(_checks.check_file("query_file", query_file))
  from sklearn.datasets import load_svmlight_file  # pylint: disable=g-import-not-at-top
  try:
    x, y, qid = load_svmlight_file(str(path), query_id=True, zero_based=False, dtype=np.float64)
  except (ValueError, OverflowError) as e:  # OverflowError: a query id beyond int64
    line, reason = _first_bad_line(path)
    where = f" line {line}: {reason}" if line else f" ({e})"
    raise ValueError(f"path: {str(path)!r} is not a valid SVMlight/LETOR file;{where}") from e
  n = x.shape[0]
  if n == 0:
    raise ValueError(f"path: {str(path)!r} holds no documents")
  lines = lambda: _data_lines(path)  # the file line of each document, read only to name a bad one
  if query_file is None:
    if qid.shape[0] != n:
      line = _first_line_without_qid(path)
      raise ValueError(f"path: {str(path)!r} line {line} has no 'qid:' (needed on every line, or a query_file)")
  else:
    if qid.shape[0]:
      line = int(lines()[0]) if qid.shape[0] == n else _first_line_with_qid(path)
      raise ValueError(f"query_file: given, but {str(path)!r} line {line} has 'qid:' (use one or the other)")
    qid = _query_ids_from_counts(query_file, n, path)
  problem = _first_bad_document(x, y, qid, num_features, max_label, lines)
  if problem is not None:
    name, row, reason = problem
    raise ValueError(f"{name}: {str(path)!r} line {lines()[row]}: {reason}")
  features = np.zeros((n, num_features), np.float32)
  features[:, :x.shape[1]] = x.toarray()
  return RankingData(features, y.astype(np.int32), qid.astype(np.int64))


def _first_bad_document(x, y: np.ndarray, qid: np.ndarray, num_features: int, max_label: Optional[int],
                        lines) -> Optional[Tuple[str, int, str]]:
  """``(argument, row, reason)`` for the first rule of the format that a document of the parsed file breaks (None:
  every document keeps them): a query's documents contiguous, feature indices up to ``num_features``, finite
  feature values, integer labels in ``[0, max_label]`` (labels are returned as int32: larger ones are refused, not
  wrapped). ``lines()`` gives each document's file line."""
  row_of_entry = lambda: np.repeat(np.arange(x.shape[0]), np.diff(x.indptr))
  first_row = _first_repeated_row(qid)
  if first_row is not None:
    first_seen = lines()[np.flatnonzero(qid == qid[first_row])[0]]
    return ("path", first_row, f"query id {qid[first_row]} reappears after other queries (first seen on line "
            f"{first_seen}); a query's documents must be contiguous")
  if x.shape[1] > num_features:
    entry = int(np.argmax(x.indices >= num_features))
    reason = f"feature index {x.indices[entry] + 1}, more than num_features={num_features}"
    return "num_features", int(row_of_entry()[entry]), reason
  bad = ~np.isfinite(x.data)
  if bad.any():
    return "path", int(row_of_entry()[np.argmax(bad)]), f"NaN/inf feature value ({int(bad.sum())} in the file)"
  high = _checks.INT32_MAX if max_label is None else max_label
  bad = ~np.isfinite(y) | (y != np.round(y)) | (y < 0) | (y > high)
  if bad.any():
    row = int(np.argmax(bad))
    expected = f"integers >= 0 (at most {high})" if max_label is None else f"integers in [0, {high}]"
    return "path", row, f"relevance label {y[row]:g}, expected {expected}"
  return None


def _content(line: str) -> str:
  return line.split("#", 1)[0].strip()


def _data_lines(path: pathlib.Path) -> np.ndarray:
  """1-based file line of each document (lines with content before any ``#``)."""
  with open(path, encoding="utf-8", errors="replace") as f:
    return np.array([i for i, line in enumerate(f, 1) if _content(line)], np.int64)


def _first_line_without_qid(path: pathlib.Path) -> int:
  with open(path, encoding="utf-8", errors="replace") as f:
    for i, line in enumerate(f, 1):
      tokens = _content(line).split()
      if tokens and (len(tokens) < 2 or not tokens[1].startswith("qid:")):
        return i
  return 0


def _first_line_with_qid(path: pathlib.Path) -> int:
  with open(path, encoding="utf-8", errors="replace") as f:
    for i, line in enumerate(f, 1):
      tokens = _content(line).split()
      if len(tokens) > 1 and tokens[1].startswith("qid:"):
        return i
  return 0


def _line_problem(tokens: list) -> Optional[str]:
  """Why one line's tokens are not ``label [qid:q] j:v ...`` with ascending indices ``j >= 1`` (None: fine)."""
  try:
    float(tokens[0])
  except ValueError:
    return f"label {tokens[0]!r} is not a number"
  rest = tokens[1:]
  if rest and rest[0].startswith("qid:"):
    try:
      q = int(rest[0][4:])
    except ValueError:
      return f"query id {rest[0]!r} is not an integer"
    if not -2 ** 63 <= q < 2 ** 63:
      return f"query id {rest[0]!r} is outside the int64 range"
    rest = rest[1:]
  last = 0
  for item in rest:
    index, colon, value = item.partition(":")
    try:
      j = int(index)
      float(value)
    except ValueError:
      return f"{item!r} is not index:value"
    if not colon:
      return f"{item!r} is not index:value"
    if j < 1:
      return f"feature index {j} (indices start at 1)"
    if j <= last:
      return f"feature index {j} after {last} (indices must ascend)"
    last = j
  return None


def _first_bad_line(path: pathlib.Path) -> Tuple[int, str]:
  """``(line, reason)`` of the first line :func:`_line_problem` refuses, ``(0, "")`` if none."""
  with open(path, encoding="utf-8", errors="replace") as f:
    for i, line in enumerate(f, 1):
      tokens = _content(line).split()
      if tokens:
        problem = _line_problem(tokens)
        if problem:
          return i, problem
  return 0, ""


def _query_ids_from_counts(query_file: pathlib.Path, n: int, path: pathlib.Path) -> np.ndarray:
  """Query ids ``0, 1, ...`` repeated by the counts of ``query_file`` (one positive int per line)."""
  counts, count_lines = [], []
  with open(query_file, encoding="utf-8", errors="replace") as f:
    for i, line in enumerate(f, 1):
      text = line.strip()
      if not text:
        continue
      try:
        count = int(text)
      except ValueError:
        count = 0
      if count < 1:
        raise ValueError(f"query_file: {str(query_file)!r} line {i}: expected a positive document count, got {text!r}")
      counts.append(count)
      count_lines.append(i)
  reach = np.cumsum(np.array(counts, np.int64))  # documents up to each query
  if reach.size == 0 or reach[-1] != n:
    over = np.flatnonzero(reach > n)
    found = (f"line {count_lines[over[0]]}: the counts reach {reach[over[0]]} documents" if over.size else
             f"counts sum to {reach[-1] if reach.size else 0} documents over its {reach.size} queries")
    raise ValueError(f"query_file: {str(query_file)!r} {found}, but {str(path)!r} holds {n}")
  return np.repeat(np.arange(len(counts), dtype=np.int64), counts)


def _first_repeated_row(query_ids: np.ndarray) -> Optional[int]:
  """The first row whose query id appeared before, in an earlier run of rows (None when every query is one run)."""
  starts = np.flatnonzero(np.r_[True, query_ids[1:] != query_ids[:-1]])
  run_ids = query_ids[starts]
  _, first = np.unique(run_ids, return_index=True)
  if first.size == run_ids.size:
    return None
  repeated = np.ones(run_ids.size, bool)
  repeated[first] = False
  return int(starts[np.argmax(repeated)])


#: LETOR 4.0's fold table (its ``readme.txt``): fold -> (training subsets, validation subset, test subset).
LETOR4_FOLDS = {
    1: (("S1", "S2", "S3"), "S4", "S5"),
    2: (("S2", "S3", "S4"), "S5", "S1"),
    3: (("S3", "S4", "S5"), "S1", "S2"),
    4: (("S4", "S5", "S1"), "S2", "S3"),
    5: (("S5", "S1", "S2"), "S3", "S4"),
}


class RankingFold(NamedTuple):
  """One fold of a learning-to-rank benchmark: training, validation and test documents."""
  train: RankingData
  validation: RankingData
  test: RankingData


def load_letor_fold(folder: PathLike, *, fold: int, num_features: int = 46,
                    max_label: Optional[int] = None) -> RankingFold:
  r"""One fold of a LETOR benchmark: LETOR 4.0's ``S1..S5.txt`` by its fold table, or ``Fold<k>/`` files.

  With ``S1.txt .. S5.txt`` in ``folder`` (LETOR 4.0 MQ2007/MQ2008), fold ``k``
  trains on three subsets, validates on one and tests on one
  (:data:`LETOR4_FOLDS`, e.g. Fold1: S1+S2+S3 / S4 / S5). Otherwise
  ``folder/Fold<k>/{train,vali,test}.txt`` (MSLR-WEB, LETOR 3.0). Training
  subsets are concatenated in the table's order; a query id may appear in
  one file only.

  .. math:: \mathcal D^{train}_k = \bigcup_{s \in T_k} S_s, \quad
     \mathcal D^{vali}_k = S_{v_k}, \quad \mathcal D^{test}_k = S_{t_k}

  Args:
    folder: the dataset's folder.
    fold: ``1 .. 5``.
    num_features: passed to :func:`load_svmlight_ranking` (46 for LETOR 4.0).
    max_label: passed to :func:`load_svmlight_ranking` (2 for MQ2008).

  Returns:
    :class:`RankingFold` ``(train, validation, test)`` of :class:`RankingData`.

  Raises:
    ValueError: naming ``folder`` and the missing file when the fold lacks
      a subset, ``fold`` outside ``1 .. 5``, or a query id in two files.

  >>> import tempfile, os
  >>> with tempfile.TemporaryDirectory() as d:
  ...   for s in range(1, 6):
  ...     with open(os.path.join(d, f"S{s}.txt"), "w") as out:
  ...       _ = out.write(f"1 qid:{s} 1:0.5\n0 qid:{s} 2:1\n")
  ...   split = load_letor_fold(d, fold=2, num_features=2)
  >>> split.train.query_ids.tolist(), split.validation.query_ids.tolist(), split.test.query_ids.tolist()
  ([2, 2, 3, 3, 4, 4], [5, 5], [1, 1])
  """
  num_folds = len(LETOR4_FOLDS)
  fold = _checks.check_int_at_most("fold", fold, num_folds, what=f"{num_folds} (the folds are 1 .. {num_folds})")
  folder = pathlib.Path(_checks.check_file("folder", folder, folder=True))
  subsets = sorted(p.name for p in folder.glob("S[0-9].txt"))
  if subsets:
    train_names, vali_name, test_name = LETOR4_FOLDS[fold]
    files = ([folder / f"{s}.txt" for s in train_names], folder / f"{vali_name}.txt", folder / f"{test_name}.txt")
    what = f"fold {fold} (train {'+'.join(train_names)}, vali {vali_name}, test {test_name})"
  else:
    sub = folder / f"Fold{fold}"
    files = ([sub / "train.txt"], sub / "vali.txt", sub / "test.txt")
    what = f"fold {fold}"
  for f in files[0] + [files[1], files[2]]:
    if not f.is_file():
      raise ValueError(f"folder: {what} needs {str(f)!r}, which is missing")
  read = lambda f: load_svmlight_ranking(f, num_features=num_features, max_label=max_label)
  parts = [read(f) for f in files[0]]
  validation, test = read(files[1]), read(files[2])
  seen = {}
  for f, part in zip(files[0] + [files[1], files[2]], parts + [validation, test]):
    for q in np.unique(part.query_ids).tolist():
      if q in seen:
        raise ValueError(f"folder: query id {q} appears in {seen[q]!r} and in {str(f)!r}")
      seen[q] = str(f)
  train = RankingData(*(np.concatenate(arrays) for arrays in zip(*parts)))
  return RankingFold(train, validation, test)


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
  _checks.check_array("query_ids", query_ids, ndim=1, shape_doc="[n]", kinds="iu", what="integer array")
  query_ids = np.asarray(query_ids)
  uniq, first, inverse = np.unique(query_ids, return_index=True, return_inverse=True)
  order = np.argsort(first, kind="stable")  # groups by first appearance
  rows = np.argsort(inverse, kind="stable")  # rows sorted by group, ascending within
  bounds = np.cumsum(np.bincount(inverse, minlength=uniq.size))[:-1]
  per_group = np.split(rows.astype(np.int64), bounds)
  return QueryGroups(uniq[order].astype(np.int64), tuple(per_group[g] for g in order))
