"""experiments.nair_study: the study's bookkeeping (compression ratios, mean and sd, configs)."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments import nair_study  # noqa: E402


def test_compression_matches_a_hand_computation():
  errors = {"lambdarank": {8: 0.30, 16: 0.12, 32: 0.09, 64: 0.08},
            "ranknet": {8: 0.31, 16: 0.13, 32: 0.085, 64: 0.085},
            "itq": {16: 0.14, 32: 0.11, 64: 0.10, 128: 0.10},
            "lsh": {16: 0.5, 128: 0.40}}
  c = nair_study.compression(errors)
  # ITQ's best is 0.10, first at 64 bits; LambdaRank passes 0.10 between 16 (0.12) and 32 bits (0.09):
  # 16 + 16 * (0.12 - 0.10) / (0.12 - 0.09) = 26.67 bits.
  assert c["itq"]["best_error"] == 0.10 and c["itq"]["best_bits"] == 64
  assert c["itq"]["learner_bits"] == pytest.approx(16 + 16 * 2 / 3)
  assert c["itq"]["ratio"] == pytest.approx(64 / (16 + 16 * 2 / 3))
  # LSH's best 0.40 (128 bits) is already beaten at LambdaRank's shortest length: 8 bits, no extrapolation.
  assert c["lsh"]["learner_bits"] == 8.0 and c["lsh"]["ratio"] == 16.0
  # RankNet's best 0.085 (32 bits, the shorter of a tie) lies between 32 (0.09) and 64 bits (0.08).
  assert c["ranknet"]["best_bits"] == 32 and c["ranknet"]["learner_bits"] == pytest.approx(48.0)
  assert nair_study.compression({"lambdarank": {8: 0.5}, "itq": {8: 0.1}})["itq"]["ratio"] is None


def test_mean_sd_is_the_sample_standard_deviation():
  s = nair_study.mean_sd([0.088, 0.094, 0.081])
  assert s["mean"] == pytest.approx(np.mean([0.088, 0.094, 0.081]))
  assert s["sd"] == pytest.approx(np.sqrt(np.sum((np.array([0.088, 0.094, 0.081]) - s["mean"]) ** 2) / 2))
  assert nair_study.mean_sd([0.1])["sd"] == 0.0


def test_protocols_fit_the_datasets():
  from experiments import tasks
  for name, sizes in nair_study.PROTOCOLS.items():
    _, labels = tasks.load_dataset(name)
    smallest = np.bincount(labels).min()
    assert sizes["queries_per_class"] + sizes["train_per_class"] < smallest
    assert sizes["val_per_class"] < sizes["train_per_class"]


def test_search_entries_are_config_overrides_with_distinct_run_names():
  config = nair_study.base_config("mnist_t10k")
  slugs = set()
  for name, overrides in nair_study.SEARCH.items():
    assert "," not in name  # --search is a comma-separated list
    assert set(overrides) <= set(config.keys()), name
    c = nair_study.search_config(name, 0)  # type-checked by ml_collections
    assert all(c[k] == v for k, v in overrides.items()), name
    # Every entry is Nair's fixed step on unshifted images, whatever the 32-bit recipe says.
    assert c.augment_shift == 0 and c.lr_schedule == "constant" and c.eval_split == "validation"
    assert c.warmup_steps == 0 and c.num_steps in (1000, 2000)
    slugs.add("_".join(f"{k}={v}" for k, v in overrides.items()))
  assert len(slugs) == len(nair_study.SEARCH)


def test_table_configs_are_the_config_variants():
  """The tables run configs/lambdarank_knn.py:method=M,bits=B; digits with Nair's fixed step; MLP with model=mlp."""
  mnist = nair_study.base_config("mnist_t10k", method="ranknet", bits=32)
  assert (mnist.method, mnist.bits, mnist.learning_rate, mnist.augment_shift, mnist.num_steps) == \
      ("ranknet", 32, 20.0, 1, 3000)
  digits = nair_study.base_config("digits", method="ranknet", bits=32)
  assert (digits.dataset, digits.learning_rate, digits.augment_shift, digits.num_steps) == ("digits", 50.0, 0, 1000)
  assert (digits.queries_per_class, digits.train_per_class) == (30, 100)
  mlp = nair_study.base_config("mnist_t10k", bits=32, model="mlp")
  assert (mlp.model, mlp.doc_pool, mlp.learning_rate) == ("mlp", 500, 0.01)
  assert not mnist.baselines and not mnist.exact_l2 and mnist.eval_every is None


def test_search_runs_an_entry_once_and_reuses_it(tmp_path, monkeypatch):
  monkeypatch.setitem(nair_study.SEARCH, "test majority 64 bits",
                      {"method": "lambdarank", "bits": 64, "score": "knn_majority", "learning_rate": 0.1,
                       "num_steps": 20})
  out = nair_study.search([0], str(tmp_path), names=["test majority 64 bits"], runlocal=True)
  entry = out["test majority 64 bits"]
  assert entry["n"] == 1 and 0 <= entry["errors"][0] <= 1 and 0 < entry["active_fraction"] <= 1
  (run_dir,) = os.listdir(tmp_path / "search")
  assert "bits=64" in run_dir and "score=knn_majority" in run_dir
  results = nair_study._read_json(str(tmp_path / "search" / run_dir / "results.json"))
  assert results["config"]["bits"] == 64 and results["config"]["eval_split"] == "validation"
  assert [h["step"] for h in results["history"] if h["kind"] == "eval"][-1:] == [20]  # one, at the end
  assert len([h for h in results["history"] if h["kind"] == "eval" and h["step"] > 0]) == 1
  again = nair_study.search([0], str(tmp_path), names=["test majority 64 bits"], runlocal=True)
  assert again["test majority 64 bits"]["errors"] == entry["errors"]


def test_metric_part_scores_every_row_once_and_reuses_them(tmp_path, monkeypatch):
  from experiments import tasks
  from experiments.methods import nair
  monkeypatch.setitem(nair_study.METRIC, "nca_iterations", 3)
  monkeypatch.setitem(nair_study.METRIC, "lmnn_iterations", 20)
  out = nair_study.metric(["digits"], [0], str(tmp_path), runlocal=True)["digits"]
  assert set(out["per_seed"]) == {"l2", "pca", "nca", "lmnn"}
  assert all(0 <= s[0] <= 1 for s in out["per_seed"].values()) and out["stats"]["lmnn"]["n"] == 1
  config = nair_study.base_config("digits", runlocal=True)
  config.seed = 0
  # The raw row is the tables' exact L2 row on the same split.
  assert out["per_seed"]["l2"][0] == nair.exact_l2_row(config, tasks.make_task(config))["knn_error"]
  stored = nair_study._read_json(str(tmp_path / "metric" / "digits" / "lmnn_s0" / "results.json"))
  assert stored["num_pca_components"] == 50 and stored["options"]["lmnn_iterations"] == 20
  assert stored["rows"][0]["fit_seconds"] > 0
  stored["rows"][0]["knn_error"] = 0.5  # a stored row is read back, not refitted
  nair_study.io.atomic_write_json(str(tmp_path / "metric" / "digits" / "lmnn_s0" / "results.json"), stored)
  assert nair_study.metric(["digits"], [0], str(tmp_path), runlocal=True)["digits"]["per_seed"]["lmnn"][0] == 0.5


def test_hierarchy_runs_are_the_documented_commands():
  """The hierarchy part's configs are those of `experiments.train --config=configs/lambdarank_knn.py:<arg> ...`."""
  from experiments import cli
  commands = {"lambdarank-hierarchical": ("configs/lambdarank_knn.py:score=hierarchical",
                                          [("baselines", "lsh,itq,sh")]),
              "lambdarank": ("configs/lambdarank_knn.py", [("hierarchy", "average"), ("exact_l2", "False"),
                                                           ("baselines", "")]),
              "ranknet": ("configs/lambdarank_knn.py:method=ranknet", [("hierarchy", "average"), ("exact_l2", "False"),
                                                                      ("baselines", "")])}
  assert set(commands) == set(nair_study.HIERARCHY_RUNS)
  for name, (spec, overrides) in commands.items():
    expected = cli.load_config(spec, [("seed", "2")] + overrides).to_dict()
    assert nair_study.hierarchy_config(name, 2).to_dict() == expected, name
  assert nair_study.hierarchy_config("lambdarank", 0).score == "knn_count"


def test_hierarchy_part_runs_once_and_reads_every_row_back(tmp_path, monkeypatch, capsys):
  monkeypatch.setattr(nair_study, "HIERARCHY_RUNS", {
      "lambdarank-hierarchical": ("score=hierarchical", {"baselines": ("itq",), "num_steps": 4, "eval_every": 0,
                                                         "checkpoint_every": 0}),
      "ranknet": ("method=ranknet", {"hierarchy": "average", "exact_l2": False, "baselines": (), "num_steps": 4,
                                     "eval_every": 0, "checkpoint_every": 0})})
  out = nair_study.hierarchy([0], str(tmp_path), runlocal=True)
  assert list(out["per_seed"]) == ["lambdarank-hierarchical", "itq", "exact-l2-3nn", "ranknet"]
  stored = nair_study._read_json(str(tmp_path / "hierarchy" / "lambdarank-hierarchical_s0" / "results.json"))
  for row, name in zip(stored["rows"], ["lambdarank-hierarchical", "itq", "exact-l2-3nn"]):
    for key, _, _ in nair_study.HIERARCHY_KEYS:
      assert out["per_seed"][name][key] == [row[key]]
      assert out["stats"][name][key]["mean"] == row[key] and out["stats"][name][key]["sd"] == 0.0
  printed = capsys.readouterr().out
  assert "hierarchy: digits (runlocal), 16 bits" in printed
  assert f"{100 * stored['rows'][0]['knn_error']:.1f} (0.0)" in printed
  stored["rows"][0]["tree_distance"] = 0.5  # a stored run is read back, not rerun
  nair_study.io.atomic_write_json(str(tmp_path / "hierarchy" / "lambdarank-hierarchical_s0" / "results.json"), stored)
  again = nair_study.hierarchy([0], str(tmp_path), runlocal=True)
  assert again["per_seed"]["lambdarank-hierarchical"]["tree_distance"] == [0.5]
