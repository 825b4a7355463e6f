"""The bit-weights experiment (Feng et al.): its rows, on the quick digits protocol."""

import json

import ml_collections
import numpy as np
import pytest

from configs import bit_weights as bit_weights_config
from experiments import bit_weights, fitting, tasks
import hashjax as hj


def _tie_aware_loop(distances, relevant):
  """One query's AP and NDCG (binary gains) averaged over the orders of tied distances, by a loop over the groups
  of equal distance (nearest first) and the positions within each: a document is equally likely at each position
  of its group, and a relevant one finds the group's other relevant documents before it in proportion."""
  ap, dcg, before, hits_before = 0.0, 0.0, 0, 0
  for value in np.unique(distances):
    group = relevant[distances == value]
    size, hits = len(group), int(group.sum())
    for position in range(1, size + 1):
      others = (hits - 1) * (position - 1) / (size - 1) if size > 1 else 0.0
      ap += hits / size * (hits_before + 1 + others) / (before + position)
      dcg += hits / size / np.log2(before + position + 1)
    before, hits_before = before + size, hits_before + hits
  ideal = sum(1 / np.log2(r + 1) for r in range(1, hits_before + 1))
  return ap / hits_before, dcg / ideal


def _ap_in_order(relevant):
  hits = np.cumsum(relevant)
  return float(np.sum(relevant * hits / np.arange(1, len(relevant) + 1)) / hits[-1])


def test_rows_plain_weighted_and_tie_break(tmp_path):
  config = bit_weights_config.get_config("runlocal")
  config.bits = (16,)
  config.base_codes = ("itq",)
  config.solvers = ("egd", "closed_form", "whrank")
  config.plots = True
  results = bit_weights.train_and_evaluate(config, str(tmp_path))
  rows = results["rows"]
  assert [r["weights"] for r in rows] == ["none (Hamming)", "egd", "closed_form", "whrank", "egd, ties only"]
  # Curves for the Hamming and the EGD rows (Feng et al.'s figures), drawn; at radius b everything is retrieved.
  assert [("curves" in r) for r in rows] == [True, True, False, False, False]
  assert rows[1]["curves"]["recall"][-1] == pytest.approx(1.0) and (tmp_path / "pr_curves.png").stat().st_size > 0
  assert all(0.0 < r["interpolated_ap"] <= 1.0 for r in rows)  # the paper's AP (metrics.interpolated_ap)
  # The plain row: the codes' tie-aware AP and NDCG, query by query by a loop over their Hamming distances.
  protocol = tasks.load_protocol(config)
  split = protocol.split
  model = fitting.baseline_model("itq", protocol.features[split.train], num_bits=16, seed=config.seed)
  query_bits, db_bits = (np.asarray(hj.unpack_bits(model.encode(protocol.features[i]), 16))
                         for i in (split.query, split.database))
  distances = np.sum(query_bits[:, None, :] != db_bits[None, :, :], axis=2)
  relevance = protocol.labels[split.query][:, None] == protocol.labels[split.database][None, :]
  ap, ndcg = np.mean([_tie_aware_loop(d, r) for d, r in zip(distances, relevance)], axis=0)
  assert abs(rows[0]["tie_aware_ap"] - ap) < 1e-5 and abs(rows[0]["tie_aware_ndcg"] - ndcg) < 1e-5
  # The bounds: relevant items last (pessimistic) or first (optimistic) among equal distances.
  pessimistic, optimistic = (np.mean([_ap_in_order(r[np.lexsort((sign * r, d))]) for d, r in zip(distances, relevance)])
                             for sign in (1, -1))
  for row in rows[1:4]:
    w = np.asarray(row["weight_values"])
    assert w.shape == (16,) and np.all(w >= 0) and np.all(np.isfinite(w))
  # Breaking only the ties of the Hamming ranking keeps AP between its pessimistic and optimistic bounds.
  assert pessimistic - 1e-6 <= rows[-1]["tie_aware_ap"] <= optimistic + 1e-6 and pessimistic < optimistic
  assert json.loads((tmp_path / "results.json").read_text())["rows"][1]["weights"] == "egd"


def test_a_saved_model_is_a_base_code(tmp_path):
  config = bit_weights_config.get_config("runlocal")
  protocol = tasks.load_protocol(config)
  model = fitting.baseline_model("pca", protocol.features[protocol.split.train], num_bits=8, seed=0)
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
