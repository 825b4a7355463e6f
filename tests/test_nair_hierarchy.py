"""Nair et al.'s hierarchical classification score (eq. 10) as an experiment: a class hierarchy from the training
items' class means, its similarity table, LambdaRank trained on it, and the severity of mistakes.

The tree and the table are checked against trees merged by hand; the end-to-end run's metrics against loops over
queries and neighbours on the saved model's codes, with the LCA heights read off scipy's merge list by walking it.
"""

import os
import sys

import numpy as np
import pytest
import scipy.cluster.hierarchy

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import hashjax  # noqa: E402
from configs import lambdarank_knn  # noqa: E402
from experiments import tasks  # noqa: E402
from experiments.methods import checks, nair  # noqa: E402
from hashjax import data, objectives  # noqa: E402

# Four classes on a line: means 1, 3, 11, 30 (class 0's items 0 and 2, class 2's 10 and 12), a second
# feature constant, and the items out of class order.
_X = np.array([[10.0, 7.0], [0.0, 7.0], [30.0, 7.0], [3.0, 7.0], [12.0, 7.0], [2.0, 7.0]])
_Y = np.array([2, 0, 3, 1, 2, 0])


def _hand_tree(first, second, root):
  """(0 1) merge at ``first``, then class 2 joins them at ``second``, class 3 at ``root``; heights over the root."""
  h = np.array([[0, first, second, root], [first, 0, second, root], [second, second, 0, root],
                [root, root, root, 0]], np.float64)
  return h / root


@pytest.mark.parametrize("linkage, expected", [
    # pairwise mean distances: d01 = 2, d02 = 10, d12 = 8, d23 = 19, d03 = 29, d13 = 27
    ("average", _hand_tree(2, (10 + 8) / 2, (29 + 27 + 19) / 3)),  # (0 1) at 2; 2 at 9 (< 28, 19); 3 at 25
    ("complete", _hand_tree(2, 10, 29)),  # 2 joins at max(10, 8) = 10 < 19
    ("single", _hand_tree(2, 8, 19)),  # 2 joins at min(10, 8) = 8
])
def test_class_tree_distance_is_the_hand_merged_tree(linkage, expected):
  h = data.class_tree_distance(_X, _Y, linkage=linkage)
  np.testing.assert_allclose(h, expected, rtol=1e-12)
  assert h.dtype == np.float64


def test_tree_similarity_of_the_hand_tree():
  f = np.asarray(objectives.tree_similarity(data.class_tree_distance(_X, _Y)))
  # average linkage: F = 1 - h = 1 - 2/25, 1 - 9/25, 0 for class 3 against the others
  expected = np.array([[1, 0.92, 0.64, 0], [0.92, 1, 0.64, 0], [0.64, 0.64, 1, 0], [0, 0, 0, 1]])
  np.testing.assert_allclose(f, expected, atol=1e-6)
  # any LCA-height table, unnormalised: F = 1 - h / max h
  np.testing.assert_allclose(objectives.tree_similarity(np.array([[0, 3], [3, 0]])), [[1, 0], [0, 1]])
  np.testing.assert_allclose(objectives.tree_similarity(np.zeros((1, 1))), [[1.0]])
  # with the similarity, eq. 10 of one query of class 0 whose 2 nearest bins hold classes 0, 1, 2
  pairs = objectives.label_pairs(np.array([0]), np.array([0, 1, 2, 3]), num_classes=4)
  score = objectives.hierarchical_score(np.array([[0, 1, 1, 5]]), pairs, similarity=f, k=2)
  np.testing.assert_allclose(score, [1 + 0.92 + 0.64], rtol=1e-6)


@pytest.mark.parametrize("table, fragment", [
    (np.array([[0.0, 1.0], [2.0, 0.0]]), "symmetric"),
    (np.array([[1.0, 1.0], [1.0, 0.0]]), "zeros on the diagonal"),
    (np.array([[0.0, -1.0], [-1.0, 0.0]]), "tree distances"),
    (np.zeros((2, 3)), "square"),
    (np.array([[0.0, np.nan], [np.nan, 0.0]]), "finite"),
])
def test_tree_similarity_refuses_what_is_no_tree_distance(table, fragment):
  with pytest.raises(ValueError, match=f"tree_distance.*{fragment}"):
    objectives.tree_similarity(table)


def test_class_tree_distance_refuses_bad_arguments():
  with pytest.raises(ValueError, match=r"^labels: expected every class 0 \.\. 4, got none of \[4\]$"):
    data.class_tree_distance(_X, _Y, num_classes=5)
  with pytest.raises(ValueError, match="linkage"):
    data.class_tree_distance(_X, _Y, linkage="ward")
  with pytest.raises(ValueError, match="labels"):
    data.class_tree_distance(_X, _Y[:-1])
  with pytest.raises(ValueError, match="features"):
    data.class_tree_distance(_X[:, 0], _Y)
  np.testing.assert_array_equal(data.class_tree_distance(_X, np.zeros(6, np.int32)), [[0.0]])


def _walked_tree(features, labels, num_classes):
  """LCA heights over the root's, read off scipy's merge list (not its cophenet): class means by a loop."""
  x = np.asarray(features, np.float64)
  means = np.array([x[labels == c].mean(axis=0) for c in range(num_classes)])
  merges = scipy.cluster.hierarchy.linkage(means, method="average")
  members = {c: [c] for c in range(num_classes)}
  h = np.zeros((num_classes, num_classes))
  for i, (a, b, height, _) in enumerate(merges):
    for x in members[int(a)]:
      for y in members[int(b)]:
        h[x, y] = h[y, x] = height
    members[num_classes + i] = members.pop(int(a)) + members.pop(int(b))
  return h / merges[-1, 2]


def _hierarchy_reference(distances, db_labels, query_labels, tree, k):
  """Loops over queries and neighbours: kNN error, tree distance (all, wrong), eq. 10, mean F of the neighbours."""
  wrong, heights, wrong_heights, scores, mean_f = 0, [], [], [], []
  for q in range(distances.shape[0]):
    bins = sorted(set(distances[q].tolist()))[:k]
    neighbours = [i for i in range(distances.shape[1]) if distances[q, i] in bins]
    votes = {}
    for i in neighbours:
      votes[db_labels[i]] = votes.get(db_labels[i], 0) + 1
    best = max(votes.values())
    pred = min(c for c, v in votes.items() if v == best)
    heights.append(tree[pred, query_labels[q]])
    if pred != query_labels[q]:
      wrong += 1
      wrong_heights.append(tree[pred, query_labels[q]])
    s = sum(1.0 - tree[query_labels[q], db_labels[i]] for i in neighbours)
    scores.append(s)
    mean_f.append(s / len(neighbours))
  return {"knn_error": wrong / len(heights), "tree_distance": np.mean(heights),
          "tree_distance_wrong": np.mean(wrong_heights), "hierarchical_score": np.mean(scores),
          "neighbour_similarity": np.mean(mean_f)}


def _hamming(query_words, db_words):
  qb = np.unpackbits(np.asarray(query_words).view(np.uint8), axis=1)
  db = np.unpackbits(np.asarray(db_words).view(np.uint8), axis=1)
  return np.sum(qb[:, None, :] != db[None, :, :], axis=-1)


def test_runlocal_hierarchical_run_reports_the_severity_of_its_mistakes(tmp_path):
  config = lambdarank_knn.get_config("runlocal,score=hierarchical")
  assert config.hierarchy == "average" and config.method == "lambdarank"
  config.num_steps, config.log_every, config.eval_every, config.checkpoint_every = 20, 10, 0, 0
  config.baselines = ("itq",)
  results = nair.train_and_evaluate(config, str(tmp_path))
  keys = [key for key, _ in nair.HIERARCHY_COLUMNS]
  assert [c[0] for c in results["columns"]][-4:] == keys
  assert results["config"]["hierarchy"] == "average"
  train_logs = [h for h in results["history"] if h["kind"] == "train"]
  assert train_logs and np.isfinite(train_logs[-1]["loss"]) and 0 < train_logs[-1]["active_fraction"] <= 1
  task = tasks.make_task(config)
  tree = _walked_tree(task.features[task.train], task.labels[task.train], task.num_classes)
  ql, dl = task.labels[task.query], task.labels[task.database]
  model = hashjax.load_model(tmp_path)
  dist = _hamming(model.encode(task.features[task.query]), model.encode(task.features[task.database]))
  expected = _hierarchy_reference(dist, dl, ql, tree, config.k)
  learned = results["rows"][0]
  assert learned["method"] == "lambdarank"
  for key, value in expected.items():
    assert learned[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
  assert 0 < learned["tree_distance"] < learned["tree_distance_wrong"] <= 1
  # exact L2: the 3 nearest by a sort, the smallest of the most voted classes
  x = task.features
  heights, scores = [], []
  for i, q in enumerate(task.query):
    nearest = np.argsort(np.sum((x[task.database] - x[q]) ** 2, axis=1), kind="stable")[:3]
    pred = int(np.argmax(np.bincount(dl[nearest], minlength=task.num_classes)))
    heights.append(tree[pred, ql[i]])
    scores.append(sum(1.0 - tree[ql[i], dl[j]] for j in nearest))
  l2 = results["rows"][-1]
  assert l2["method"] == "exact-l2-3nn"
  assert l2["tree_distance"] == pytest.approx(np.mean(heights), abs=1e-9)
  assert l2["hierarchical_score"] == pytest.approx(np.mean(scores), rel=1e-6)
  assert l2["neighbour_similarity"] == pytest.approx(np.mean(scores) / 3, rel=1e-6)
  assert set(keys) <= set(results["rows"][1])  # the baseline row too


def test_hierarchical_batches_order_pairs_by_the_class_similarity():
  config = lambdarank_knn.get_config("runlocal,score=hierarchical")
  task = tasks.make_task(config)
  tree = _walked_tree(task.features[task.train], task.labels[task.train], task.num_classes)
  np.testing.assert_allclose(nair.class_tree(config, task), tree, rtol=1e-12)
  batch = nair.make_batch_fn(config, task)(0)
  labels = task.labels[task.train]
  for qi, row, pref, aff in zip(batch["queries"], batch["docs"], batch["preference"], batch["affinity"]):
    np.testing.assert_allclose(pref, [1.0 - tree[labels[qi], labels[d]] for d in row], atol=1e-6)
    assert aff.tolist() == [labels[qi] * task.num_classes + labels[d] for d in row]
  plain = nair.make_batch_fn(lambdarank_knn.get_config("runlocal"), task)(0)
  assert "preference" not in plain and "affinity" not in plain


def test_hierarchy_needs_a_linkage_and_labels():
  config = lambdarank_knn.get_config("runlocal,score=hierarchical")
  checks.check_config(config)
  config.hierarchy = "ward"
  with pytest.raises(checks.ConfigError, match="config.hierarchy: expected one of"):
    checks.check_config(config)
  config.hierarchy = None
  with pytest.raises(checks.ConfigError, match="config.hierarchy: expected a linkage, one of"):
    checks.check_config(config)  # before any data is loaded
  task = tasks.make_task(config)
  with pytest.raises(ValueError, match="config.hierarchy: expected a linkage"):
    nair.deltas_fn(config, task)  # and where the run builds its score
  retrieval = lambdarank_knn.get_config("runlocal")
  retrieval.affinity, retrieval.hierarchy = "neighbors", "average"
  with pytest.raises(checks.ConfigError, match="config.hierarchy: expected None for config.affinity='neighbors'"):
    checks.check_config(retrieval)
  plain = lambdarank_knn.get_config("runlocal")
  assert plain.hierarchy is None and nair.class_tree(plain, tasks.make_task(plain)) is None
  assert "tree_distance" not in nair.evaluate(plain, task, *(np.zeros((n, 1), np.uint32)
                                                             for n in (len(task.query), len(task.database))))
