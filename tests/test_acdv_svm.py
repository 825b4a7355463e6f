"""experiments.acdv_svm (Feng et al.'s Table 1): the split, the pairs and the threshold rule against loops."""

import numpy as np

from configs import acdv_svm as acdv_svm_config
from experiments import acdv_svm


def test_split_by_class_keeps_the_fraction_of_each_class():
  labels = np.repeat(np.arange(3), [10, 7, 4])
  train, test = acdv_svm.split_by_class(labels, per_class=8, train_fraction=0.75, seed=0)
  assert not set(train) & set(test)
  for c, (n_train, n_test) in enumerate([(6, 2), (5, 2), (3, 1)]):  # min(count, 8) split 75% / 25%, rounded
    assert (labels[train] == c).sum() == n_train and (labels[test] == c).sum() == n_test


def test_pairs_are_half_same_class_and_distinct():
  labels = np.random.default_rng(0).integers(0, 4, 200)
  first, second, same = acdv_svm.pairs(labels, 501, np.random.default_rng(1))
  assert len(first) == len(second) == 501 and same.sum() == 250
  for i, j, s in zip(first, second, same):
    assert (labels[i] == labels[j]) == bool(s) and i != j


def test_best_threshold_is_the_most_accurate_on_training_pairs():
  rng = np.random.default_rng(0)
  train_d, train_same = rng.integers(0, 9, 300), rng.integers(0, 2, 300)
  test_d, test_same = rng.integers(0, 9, 100), rng.integers(0, 2, 100)
  best_t, best = None, -1.0
  for t in range(-1, 9):  # the smallest most accurate threshold
    acc = np.mean([(d <= t) == s for d, s in zip(train_d, train_same)])
    if acc > best:
      best_t, best = t, acc
  want = np.mean([(d <= best_t) == s for d, s in zip(test_d, test_same)])
  assert acdv_svm.best_threshold_accuracy(train_d, train_same, test_d, test_same) == want


def test_runlocal_table(tmp_path):
  config = acdv_svm_config.get_config("runlocal")
  results = acdv_svm.train_and_evaluate(config, str(tmp_path))
  assert [(r["method"], r["bits"]) for r in results["rows"]] == [("lsh", 16), ("sh", 16), ("itq", 16)]
  for r in results["rows"]:
    assert 0.5 < r["svm_accuracy"] <= 1 and 0.5 < r["hamming_accuracy"] <= 1 and r["paper"] is None
  assert (tmp_path / "results.json").exists() and "| itq | 16 |" in acdv_svm.format_table(results["rows"])
