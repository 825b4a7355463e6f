"""LETOR/SVMlight reader: qid and query-file conventions, errors with file and line, and the fold loader."""

import os
import pathlib

import numpy as np
import pytest

from hashjax import data

REPO = pathlib.Path(__file__).resolve().parent.parent
SHARED_DATA = pathlib.Path(os.environ.get("HASHJAX_SHARED_DATA", REPO.parent / "shared" / "data"))


def _write(tmp_path, name, text):
  path = tmp_path / name
  path.write_text(text)
  return path


def test_query_file_convention_equals_qid_lines(tmp_path):
  with_qid = _write(tmp_path, "a.txt", "2 qid:0 1:0.5 #x\n0 qid:0 2:1\n\n# comment\n1 qid:1 3:2\n0 qid:2 1:1\n")
  plain = _write(tmp_path, "b.txt", "2 1:0.5 #x\n0 2:1\n\n# comment\n1 3:2\n0 1:1\n")
  counts = _write(tmp_path, "b.txt.query", "2\n1\n1\n")
  a = data.load_svmlight_ranking(with_qid, num_features=3)
  b = data.load_svmlight_ranking(plain, num_features=3, query_file=counts)
  for x, y in zip(a, b):
    np.testing.assert_array_equal(x, y)
  assert b.query_ids.dtype == np.int64 and b.query_ids.tolist() == [0, 0, 1, 2]


@pytest.mark.parametrize("counts,match", [
    ("2\n1\n", r"sum to 3 documents over its 2 queries, but .* holds 4"),
    ("2\n1\n2\n", r"line 3: the counts reach 5 documents"),
    ("2\nx\n2\n", r"line 2: expected a positive document count, got 'x'"),
    ("2\n0\n2\n", r"line 2: expected a positive document count"),
])
def test_query_file_errors_name_the_line(tmp_path, counts, match):
  plain = _write(tmp_path, "b.txt", "2 1:0.5\n0 2:1\n1 3:2\n0 1:1\n")
  query_file = _write(tmp_path, "b.txt.query", counts)
  with pytest.raises(ValueError, match="query_file: .*b.txt.query.* " + match):
    data.load_svmlight_ranking(plain, num_features=3, query_file=query_file)


def test_query_file_with_qid_lines_is_refused(tmp_path):
  path = _write(tmp_path, "a.txt", "# header\n2 qid:4 1:0.5\n")
  with pytest.raises(ValueError, match=r"query_file: given, but .*a.txt' line 2 has 'qid:'"):
    data.load_svmlight_ranking(path, num_features=3, query_file=_write(tmp_path, "q", "1\n"))
  with pytest.raises(FileNotFoundError, match="query_file"):
    data.load_svmlight_ranking(path, num_features=3, query_file=tmp_path / "missing")


@pytest.mark.parametrize("text,match", [
    ("1 qid:1 1:1\n0 qid:1 2:1\n1 qid:1 2:abc\n", r"line 3: '2:abc' is not index:value"),
    ("# c\n\n1 qid:1 1:1\nx qid:1 1:1\n", r"line 4: label 'x' is not a number"),
    ("1 qid:1 1:1\n1 qid:1 0:1\n", r"line 2: feature index 0 \(indices start at 1\)"),
    ("1 qid:1 2:1 1:1\n", r"line 1: feature index 1 after 2"),
    ("1 qid:a 1:1\n", r"line 1: query id 'qid:a' is not an integer"),
    ("1 qid:1 1:1\n1 qid:99999999999999999999 1:1\n", r"line 2: query id 'qid:9+' is outside the int64 range"),
    ("1 qid:1 1:1\n0 1:1\n", r"line 2 has no 'qid:'"),
    ("1 qid:1 1:1\n1 qid:2 1:1\n\n0 qid:1 1:1\n", r"line 4: query id 1 reappears after other queries "
                                                 r"\(first seen on line 1\)"),
    ("1 qid:1 1:1\n# x\n1 qid:1 1:nan\n", r"line 3: NaN/inf feature value"),
    ("1 qid:1 1:1\n1.5 qid:1 1:1\n", r"line 2: relevance label 1.5, expected integers >= 0"),
    ("1 qid:1 1:1\n-1 qid:1 1:1\n", r"line 2: relevance label -1"),
    ("1 qid:1 1:1\n3000000000 qid:1 1:1\n", r"line 2: relevance label 3e\+09, expected integers >= 0 \(at most "),
])
def test_malformed_files_name_file_and_line(tmp_path, text, match):
  path = _write(tmp_path, "bad.txt", text)
  with pytest.raises(ValueError, match=r"path: .*bad.txt.*" + match):
    data.load_svmlight_ranking(path, num_features=3)


def test_feature_index_and_label_range_name_the_line(tmp_path):
  path = _write(tmp_path, "f.txt", "1 qid:1 1:1\n\n2 qid:1 4:1\n")
  with pytest.raises(ValueError, match=r"num_features: .*f.txt' line 3: feature index 4, more than num_features=3"):
    data.load_svmlight_ranking(path, num_features=3)
  assert data.load_svmlight_ranking(path, num_features=4, max_label=2).affinity.tolist() == [1, 2]
  with pytest.raises(ValueError, match=r"line 3: relevance label 2, expected integers in \[0, 1\]"):
    data.load_svmlight_ranking(path, num_features=4, max_label=1)
  with pytest.raises(ValueError, match="max_label"):
    data.load_svmlight_ranking(path, num_features=4, max_label=-1)


def _subsets(folder, per_subset=2):
  for s in range(1, 6):
    lines = [f"{(s + i) % 3} qid:{10 * s + i // 2} 1:{s} 2:{i}\n" for i in range(2 * per_subset)]
    (folder / f"S{s}.txt").write_text("".join(lines))


def test_fold_table_matches_the_readme(tmp_path):
  _subsets(tmp_path)
  readme = {1: ("S1 S2 S3", "S4", "S5"), 2: ("S2 S3 S4", "S5", "S1"), 3: ("S3 S4 S5", "S1", "S2"),
            4: ("S4 S5 S1", "S2", "S3"), 5: ("S5 S1 S2", "S3", "S4")}
  for fold, (train, vali, test) in readme.items():
    split = data.load_letor_fold(tmp_path, fold=fold, num_features=2)
    subset = lambda part: sorted(set((part.features[:, 0]).astype(int).tolist()))
    assert subset(split.train) == sorted(int(s[1]) for s in train.split())
    assert subset(split.validation) == [int(vali[1])] and subset(split.test) == [int(test[1])]
    # training subsets concatenated in the table's order
    first = [int(s[1]) for s in train.split()]
    assert list(dict.fromkeys(split.train.features[:, 0].astype(int).tolist())) == first


def test_fold_errors(tmp_path):
  _subsets(tmp_path)
  (tmp_path / "S4.txt").unlink()
  with pytest.raises(ValueError, match=r"folder: fold 1 .* needs .*S4.txt', which is missing"):
    data.load_letor_fold(tmp_path, fold=1, num_features=2)
  with pytest.raises(ValueError, match=r"fold: expected at most 5 \(the folds are 1 .. 5\), got 6"):
    data.load_letor_fold(tmp_path, fold=6, num_features=2)
  other = tmp_path / "dup"
  other.mkdir()
  _subsets(other)
  (other / "S5.txt").write_text("1 qid:10 1:5 2:0\n")  # qid 10 is S1's
  with pytest.raises(ValueError, match=r"folder: query id 10 appears in .*S1.txt' and in .*S5.txt'"):
    data.load_letor_fold(other, fold=1, num_features=2)


def test_fold_directories_layout(tmp_path):
  sub = tmp_path / "Fold2"
  sub.mkdir()
  for name, q in (("train", 1), ("vali", 2), ("test", 3)):
    (sub / f"{name}.txt").write_text(f"1 qid:{q} 1:1\n0 qid:{q} 2:1\n")
  split = data.load_letor_fold(tmp_path, fold=2, num_features=2)
  assert [np.unique(p.query_ids).tolist() for p in split] == [[1], [2], [3]]
  with pytest.raises(ValueError, match=r"folder: fold 1 needs .*Fold1.*train.txt'"):
    data.load_letor_fold(tmp_path, fold=1, num_features=2)


def test_mq2008_fold1_sizes():
  folder = SHARED_DATA / "letor4_mq2008"
  if not folder.is_dir():
    pytest.skip(f"shared data folder {folder} is absent (set HASHJAX_SHARED_DATA)")
  split = data.load_letor_fold(folder, fold=1, max_label=2)
  assert split.train.features.shape == (2933 + 3635 + 3062, 46)
  assert len(np.unique(split.train.query_ids)) == 3 * 157
  assert split.validation.features.shape[0] == 2707 and split.test.features.shape[0] == 2874
  assert np.bincount(split.test.affinity).tolist() == [2319, 378, 177]
