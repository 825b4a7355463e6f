"""experiments.localrank_synthetic: the construction's stated properties, and the rows against small references."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from configs import localrank_synthetic as config_lib
from experiments import localrank_synthetic as exp
from experiments.methods import checks
from hashjax import localrank


def _config(**overrides):
  config = config_lib.get_config()
  config.seeds = (0, 1, 2)
  for k, v in overrides.items():
    config[k] = v
  return config


def _directions(cov):
  """Eigenvectors of a covariance, columns by decreasing eigenvalue (numpy)."""
  values, vectors = np.linalg.eigh(cov)
  return vectors[:, ::-1], values[::-1]


def test_population_construction_has_the_stated_properties():
  config = _config()
  qs = exp.make_queries(config, 4)
  means, covs, rel = qs["means"], qs["covariances"], qs["relevance"]
  u1, e1 = _directions(covs[0])
  u2, e2 = _directions(covs[1])
  u3, e3 = _directions(covs[2])
  # q2: the same principal directions (up to sign) and relevance direction, a different mean and scale
  np.testing.assert_allclose(np.abs(u1.T @ u2), np.eye(config.dim), atol=1e-8)
  np.testing.assert_allclose(rel[1], rel[0], atol=1e-12)
  np.testing.assert_allclose(e2, config.scale ** 2 * e1, rtol=1e-10)
  assert np.linalg.norm(means[1] - means[0]) > 1.0
  # q3: q1's mean and per-feature variances, the same spectrum, other principal and relevance directions
  np.testing.assert_allclose(means[2], means[0], atol=1e-12)
  np.testing.assert_allclose(np.diag(covs[2]), np.diag(covs[0]), rtol=1e-12)
  np.testing.assert_allclose(e3, e1, rtol=1e-10)
  assert np.abs(covs[2] - covs[0]).max() > 0.1
  assert np.mean(np.abs(np.sum(u1 * u3, axis=0))) < 0.9
  assert abs(rel[2] @ rel[0]) < 0.99
  # class means: relevant minus non-relevant points along the relevance direction
  for q in range(3):
    gap = qs["class_means"][q, 0] - qs["class_means"][q, 1]
    np.testing.assert_allclose(gap / np.linalg.norm(gap), rel[q], atol=1e-12)


def test_samples_follow_the_population():
  config = _config(relevant_docs=5000, nonrelevant_docs=15000)
  qs = exp.make_queries(config, 1)
  x, q, y = qs["features"], qs["query_ids"], qs["labels"]
  assert np.bincount(q).tolist() == [0, 20000, 20000, 20000]
  assert [int(y[q == i].sum()) for i in (1, 2, 3)] == [5000] * 3
  for i in range(3):
    cloud = x[q == i + 1]
    scale = np.sqrt(np.diag(qs["covariances"][i]))
    np.testing.assert_allclose(cloud.mean(axis=0), qs["means"][i], atol=0.05 * scale.max())
    np.testing.assert_allclose(np.cov(cloud, rowvar=False), qs["covariances"][i],
                               atol=0.06 * qs["covariances"][i].diagonal().max())
  # q3's per-feature variances are q1's
  np.testing.assert_allclose(x[q == 3].var(axis=0), x[q == 1].var(axis=0), rtol=0.08)


def test_pca_distance_of_an_affine_copy_is_zero():
  """Eq. 5 is translation and scale invariant: a cloud and 2 x + eta have the same principal directions."""
  config = _config()
  qs = exp.make_queries(config, 0)
  cloud = qs["features"][qs["query_ids"] == 1]
  x = np.concatenate([cloud, 2.0 * cloud + 7.0])
  s = localrank.cloud_summaries(x, np.repeat([1, 2], len(cloud)), similarity="pca")
  assert localrank.cloud_distances(s, s)[0, 1] == pytest.approx(0.0, abs=1e-9)


def _eq5_distance(a, b, fraction):
  """1 - eq. 5 by numpy, P = the larger of the two clouds' 80%-rule counts."""
  ua, ea = _directions(np.cov(a, rowvar=False, bias=True))
  ub, eb = _directions(np.cov(b, rowvar=False, bias=True))
  count = lambda e: int(np.searchsorted(np.cumsum(e) / e.sum(), fraction * (1 - 1e-12)) + 1)
  p = max(count(ea), count(eb))
  return 1.0 - np.mean(np.abs(np.sum(ua[:, :p] * ub[:, :p], axis=0)))


def _brute_ap(scores, labels):
  order = np.argsort(-scores)
  hits = np.cumsum(labels[order])
  ranks = np.arange(1, len(scores) + 1)
  return float(np.sum((hits / ranks)[labels[order] == 1]) / labels.sum())


def test_seed_row_against_references():
  config = _config()
  row = exp.run_seed(config, 2)
  qs = exp.make_queries(config, 2)
  x, y, q = qs["features"], qs["labels"], qs["query_ids"]
  w = localrank.fit_svmmap(x[q == 1], y[q == 1], q[q == 1], c=config.svm_c)
  for i, k in enumerate(("q1", "q2", "q3")):
    assert row["ap"][k] == pytest.approx(_brute_ap(x[q == i + 1] @ w, y[q == i + 1]), abs=1e-6)  # float32 AP
  for i, k in ((2, "q2"), (3, "q3")):
    want = _eq5_distance(x[q == 1], x[q == i], config.variance_fraction)
    assert row["distance"]["pca"][k] == pytest.approx(want, abs=1e-6)
    mean_gap = np.linalg.norm(x[q == 1].mean(axis=0) - x[q == i].mean(axis=0))
    assert row["distance"]["mean"][k] == pytest.approx(mean_gap, rel=1e-9)
  want = "q2" if row["ap"]["q2"] > row["ap"]["q3"] else "q3"
  assert row["ranking_prefers"] == want


def test_rows_and_counts_are_consistent(tmp_path):
  config = _config(ranker="ranknet")
  results = exp.train_and_evaluate(config, str(tmp_path))
  rows = results["rows"]
  assert [r["seed"] for r in rows] == list(config.seeds)
  for r in rows:
    assert all(0.0 <= v <= 1.0 for v in r["ap"].values())
    for m in config.measures:
      assert all(np.isfinite(v) for v in r["distance"][m].values())
    assert all(0.0 <= v <= 1.0 + 1e-12 for v in r["distance"]["pca"].values())
  for m in config.measures:
    counts = results["agreement"][m]
    assert sum(counts.values()) == len(config.seeds)
    agree = sum((r["ap"]["q2"] > r["ap"]["q3"]) == (r["distance"][m]["q2"] < r["distance"][m]["q3"]) for r in rows)
    assert counts["agree"] == agree and counts["tie"] == 0
  with open(os.path.join(tmp_path, "results.json")) as f:
    assert json.load(f)["agreement"] == results["agreement"]
  text = exp.format_tables(results)
  assert "not comparable" in text and f"{rows[0]['ap']['q2']:.3f}" in text


def test_config_checks():
  config = config_lib.get_config()
  assert checks.check_config(config) is config
  assert checks.run_kind(config) is None  # not experiments.localrank's LETOR config
  for field, bad in (("measures", ("pca", "cosine")), ("ranker", "svm"), ("scale", 0.0), ("dim", 0)):
    broken = config_lib.get_config()
    broken[field] = bad
    with pytest.raises(checks.ConfigError, match=f"config.{field}"):
      checks.check_config(broken)
  with pytest.raises(ValueError, match="config.table_seed"):
    exp.train_and_evaluate(_config(table_seed=7), "/nonexistent")


def test_runlocal_command(tmp_path):
  out = subprocess.run([sys.executable, "-m", "experiments.localrank_synthetic",
                        "--config=configs/localrank_synthetic.py:runlocal", f"--workdir={tmp_path}"],
                       capture_output=True, text=True, timeout=120, check=True,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  assert "higher AP on q2" in out.stdout and (tmp_path / "results.json").exists()
