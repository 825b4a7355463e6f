"""The bit-weights experiment (Feng et al.): its rows, on the quick digits protocol."""

import json

import ml_collections
import numpy as np

from configs import bit_weights as bit_weights_config
from experiments import bit_weights, common
import hashjax as hj


def test_rows_plain_weighted_and_tie_break(tmp_path):
  config = bit_weights_config.get_config("runlocal")
  config.bits = (16,)
  config.base_codes = ("itq",)
  config.solvers = ("egd", "closed_form", "whrank")
  results = bit_weights.train_and_evaluate(config, str(tmp_path))
  rows = results["rows"]
  assert [r["weights"] for r in rows] == ["none (Hamming)", "egd", "closed_form", "whrank", "egd, ties only"]
  # The plain row is the tie-aware table of the codes themselves.
  protocol = common.load_protocol(config)
  split = protocol.split
  model = common.baseline_model("itq", protocol.features[split.train], num_bits=16, seed=config.seed)
  table = hj.evaluate_codes(model.encode(protocol.features[split.query]),
                            model.encode(protocol.features[split.database]), num_bits=16,
                            query_labels=protocol.labels[split.query], db_labels=protocol.labels[split.database])
  assert abs(rows[0]["tie_aware_ap"] - float(table["tie_aware_ap"])) < 1e-6
  assert abs(rows[0]["tie_aware_ndcg"] - float(table["tie_aware_ndcg"])) < 1e-6
  for row in rows[1:4]:
    w = np.asarray(row["weight_values"])
    assert w.shape == (16,) and np.all(w >= 0) and np.all(np.isfinite(w))
  # Breaking only the ties of the Hamming ranking keeps AP between its pessimistic and optimistic bounds.
  assert float(table["pessimistic_ap"]) - 1e-6 <= rows[-1]["tie_aware_ap"] <= float(table["optimistic_ap"]) + 1e-6
  assert json.loads((tmp_path / "results.json").read_text())["rows"][1]["weights"] == "egd"


def test_a_saved_model_is_a_base_code(tmp_path):
  config = bit_weights_config.get_config("runlocal")
  protocol = common.load_protocol(config)
  model = common.baseline_model("pca", protocol.features[protocol.split.train], num_bits=8, seed=0)
  model.save(str(tmp_path / "m" / "model"))
  config = ml_collections.ConfigDict(config.to_dict())
  config.bits, config.base_codes, config.solvers, config.tie_break = (), (), ("closed_form",), False
  config.models = (str(tmp_path / "m"),)
  rows = bit_weights.train_and_evaluate(config, str(tmp_path / "run"))["rows"]
  assert [(r["code"], r["bits"], r["weights"]) for r in rows] == [("pca (m)", 8, "none (Hamming)"),
                                                                   ("pca (m)", 8, "closed_form")]


def test_bad_config_is_one_line_naming_the_field(tmp_path):
  import pytest
  from experiments.methods import checks
  for field, value, message in (("solvers", ("egd", "foo"), "config.solvers: expected names from"),
                                ("base_codes", ("cnn",), "config.base_codes: expected names from"),
                                ("models", (str(tmp_path / "nope"),), "config.models: expected saved models"),
                                ("bits", (0,), "config.bits: expected code lengths >= 1")):
    config = bit_weights_config.get_config("runlocal")
    config[field] = value
    with pytest.raises(checks.ConfigError, match=message):
      bit_weights.train_and_evaluate(config, str(tmp_path / "run"))
