"""experiments.nair_regression: Nair's eq. 11 task on the diabetes data, against loops."""

import json

import numpy as np
import pytest

from configs import lambdarank_regression
from experiments import nair_regression
from experiments.methods import checks


def _knn_estimate_loop(distances, targets, k):
  """The mean target of the items in the k nearest non-empty distance bins, by a loop."""
  bins = sorted(set(distances))[:k]
  chosen = [t for d, t in zip(distances, targets) if d in bins]
  return sum(chosen) / len(chosen)


def test_regression_error_matches_loops():
  rng = np.random.default_rng(0)
  distances = rng.integers(0, 6, size=(7, 30))
  db_targets, query_targets = rng.normal(size=30), rng.normal(size=7)
  for k in (1, 3):
    want = np.mean([(_knn_estimate_loop(distances[q], db_targets, k) - query_targets[q]) ** 2 for q in range(7)])
    got = nair_regression.regression_error(distances, query_targets, db_targets, k=k)
    assert got == pytest.approx(want / np.var(query_targets), rel=1e-5)


def test_exact_error_and_split_by_loops():
  split = nair_regression.load_split(40, seed=3)
  assert len(split["query"]) == 40 and len(split["train"]) == 402
  assert not set(split["query"]) & set(split["train"])
  train = split["train"]
  assert abs(split["targets"][train].mean()) < 1e-9 and split["targets"][train].std() == pytest.approx(1.0)
  config = lambdarank_regression.get_config()
  x, t = split["features"].astype(np.float64), split["targets"]
  errors = []
  for q in split["query"]:
    d = [float(np.sum((x[q] - x[i]) ** 2)) for i in train]
    nearest = sorted(range(len(train)), key=lambda j: d[j])[:config.k]
    errors.append((np.mean(t[train][nearest]) - t[q]) ** 2)
  assert nair_regression.exact_error(config, split) == pytest.approx(np.mean(errors) / np.var(t[split["query"]]))
  design = np.hstack([x[train], np.ones((len(train), 1))])  # least squares with an intercept
  coef = np.linalg.lstsq(design, t[train], rcond=None)[0]
  estimate = x[split["query"]] @ coef[:-1] + coef[-1]
  want = np.mean((estimate - t[split["query"]]) ** 2) / np.var(t[split["query"]])
  assert nair_regression.linear_error(split) == pytest.approx(want, rel=1e-9)


def test_runlocal_trains_both_learners_and_checks_its_config(tmp_path):
  config = lambdarank_regression.get_config("runlocal")
  results = nair_regression.train_and_evaluate(config, str(tmp_path))
  rows = {r["method"]: r for r in results["rows"]}
  assert set(rows) == {"lambdarank", "ranknet", "lsh", "exact-l2-3nn", "linear regression"}
  for learner in ("lambdarank", "ranknet"):
    evaluations = rows[learner]["evaluations"]
    assert [e["step"] for e in evaluations] == [0, 30, 60]
    assert evaluations[-1]["error"] == pytest.approx(rows[learner]["error"])
    assert evaluations[-1]["error"] < evaluations[0]["error"]  # training lowers the error of the initial codes
  assert json.loads((tmp_path / "results.json").read_text())["rows"][0]["method"] == "lambdarank"
  assert "lambdarank" in nair_regression.format_table(results["rows"])
  for field, value, message in (("mode", "mse", "config.mode: expected one of"),
                                ("learners", ("svm",), "config.learners: expected names from"),
                                ("seeds", (), "config.seeds: expected a non-empty list")):
    bad = lambdarank_regression.get_config("runlocal")
    bad[field] = value
    with pytest.raises(checks.ConfigError, match=message):
      nair_regression.train_and_evaluate(bad, str(tmp_path / "bad"))
