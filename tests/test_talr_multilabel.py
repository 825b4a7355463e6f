"""The multi-label TALR run (configs/talr_multilabel.py): the two-digit dataset, its shared-label affinity, the
saved codes, and the run's table against loop references."""

import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

from configs import talr_multilabel  # pylint: disable=g-import-not-at-top,wrong-import-position
from experiments import cli, evaluate_codes, tasks  # pylint: disable=g-import-not-at-top,wrong-import-position
from experiments.methods import checks  # pylint: disable=g-import-not-at-top,wrong-import-position
from hashjax import data  # pylint: disable=g-import-not-at-top,wrong-import-position


def test_every_pair_image_is_two_mnist_digits_each_used_once_with_their_labels():
  features, labels, label_sets = tasks.load_mnist_pairs()
  digits, digit_labels = data.load_mnist_t10k()
  where = {digits[i].tobytes(): i for i in range(len(digits))}
  assert len(where) == len(digits)  # the 10,000 test digits are distinct images
  images = features.reshape(-1, 28, 56)
  used = []
  for n in range(0, len(images), 97):  # a spread of the images (all of them: a few seconds more)
    left = where[np.ascontiguousarray(images[n, :, :28]).reshape(-1).tobytes()]
    right = where[np.ascontiguousarray(images[n, :, 28:]).reshape(-1).tobytes()]
    used += [left, right]
    assert labels[n] == digit_labels[left]
    assert set(np.flatnonzero(label_sets[n])) == {digit_labels[left], digit_labels[right]}
  assert len(set(used)) == len(used)  # no digit in two images
  assert features.shape == (5000, 1568) and label_sets.dtype == bool


def test_shared_labels_affinity_counts_the_labels_two_images_share():
  config = talr_multilabel.get_config("runlocal")
  task = tasks.make_task(config)
  rows, cols = task.query[:7], task.database[:11]
  got = tasks.affinity(task, rows, cols)
  for i, r in enumerate(rows):
    for j, c in enumerate(cols):
      shared = set(np.flatnonzero(task.label_sets[r])) & set(np.flatnonzero(task.label_sets[c]))
      assert got[i, j] == len(shared)


def _hamming(query_words, db_words):
  return np.array([[sum(bin(int(a) ^ int(b)).count("1") for a, b in zip(q, x)) for x in db_words]
                   for q in query_words])


def _tie_aware_ap(distances, relevant):
  """He et al. eq. 3 as a loop over the tie groups: relevant items of a group spread evenly over its ranks."""
  order = np.unique(distances)
  seen = seen_rel = 0
  total = 0.0
  for d in order:
    group = distances == d
    n, r = int(group.sum()), int(relevant[group].sum())
    for t in range(1, n + 1):  # rank seen + t holds a relevant item with probability r / n
      expected_rel_before = seen_rel + (t - 1) * (r - 1) / max(n - 1, 1) if n > 1 else seen_rel
      total += (r / n) * (expected_rel_before + 1) / (seen + t)
    seen += n
    seen_rel += r
  return total / relevant.sum()


def test_the_runs_table_and_saved_codes_agree_with_a_loop_over_the_codes(tmp_path):
  config = talr_multilabel.get_config("runlocal")
  config.num_steps, config.warmup_steps, config.log_every, config.eval_every = 20, 2, 10, 10
  checks.check_config(config)
  from experiments import methods  # pylint: disable=g-import-not-at-top
  results = methods.train_and_evaluate(config, str(tmp_path))
  task = tasks.make_task(config)
  for row in results["rows"]:
    saved = np.load(tmp_path / "codes" / f"{row['method']}.npz")
    assert int(saved["num_bits"]) == config.bits
    np.testing.assert_array_equal(saved["query_labels"], task.label_sets[task.query])
    np.testing.assert_array_equal(saved["db_labels"], task.label_sets[task.database])
    d = _hamming(saved["query_codes"], saved["db_codes"])
    relevant = (saved["query_labels"].astype(int) @ saved["db_labels"].astype(int).T) > 0
    ap = np.mean([_tie_aware_ap(d[i], relevant[i]) for i in range(len(d)) if relevant[i].any()])
    assert row["tie_aware_ap"] == pytest.approx(ap, abs=1e-5)
    read = evaluate_codes.evaluate_file(str(tmp_path / "codes" / f"{row['method']}.npz"), topk=50)
    assert read["labels"].startswith("multi-hot") and read["num_bits"] == config.bits
    assert read["tie_aware"]["tie_aware_ap"] == pytest.approx(ap, abs=1e-5)  # the file evaluate_codes reads


@pytest.mark.parametrize("field,value,message", [
    ("affinity", "label", "config.dataset: expected a single-label dataset"),
    ("baselines", ("lsh", "ksh"), "config.baselines: expected unsupervised baselines"),
])
def test_multilabel_configs_refuse_what_they_cannot_run(field, value, message):
  config = talr_multilabel.get_config("runlocal")
  config[field] = value
  with pytest.raises(cli.ConfigError, match=message):
    checks.check_config(config)


def test_shared_labels_need_the_multilabel_dataset_and_save_codes_needs_labels():
  config = talr_multilabel.get_config("runlocal")
  config.dataset = "digits"
  with pytest.raises(cli.ConfigError, match="config.affinity: expected 'shared_labels' only on"):
    checks.check_config(config)
  from configs import talr_ndcg  # pylint: disable=g-import-not-at-top
  euclidean = talr_ndcg.get_config("runlocal")
  euclidean.save_codes = True
  with pytest.raises(cli.ConfigError, match="config.save_codes: expected False for config.affinity='euclidean'"):
    checks.check_config(euclidean)
