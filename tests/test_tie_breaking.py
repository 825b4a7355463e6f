"""experiments.tie_breaking: every AP variant of a trial against a loop over one explicit ranking per query."""

import numpy as np

from configs import tie_breaking as tie_breaking_config
from experiments import fitting, tie_breaking
from hashjax import codes, data


def _loop_ap(distances, relevant, order):
  """AP of the ranking by (distance, position in ``order``), written out."""
  position = np.empty(len(order), int)
  position[order] = np.arange(len(order))
  ranked = sorted(range(len(distances)), key=lambda i: (distances[i], position[i]))
  hits, total = 0, 0.0
  for rank, i in enumerate(ranked, 1):
    if relevant[i]:
      hits += 1
      total += hits / rank
  return total / hits if hits else np.nan


def test_trial_rows_match_a_loop_over_the_random_and_the_index_order(tmp_path):
  config = tie_breaking_config.get_config("runlocal")
  config.bits, config.trials = (8,), 2
  results = tie_breaking.train_and_evaluate(config, str(tmp_path))
  features, labels = data.load_digits()
  for row in results["rows"]:
    split = data.retrieval_split(labels, queries_per_class=config.queries_per_class,
                                 train_per_class=config.train_per_class, seed=row["seed"])
    q, db = fitting.baseline_words("lsh", np.asarray(features, np.float32), split.train, split.query,
                                   split.database, num_bits=8, seed=row["seed"], labels=labels)
    d = np.asarray(codes.hamming_distance(q, db))
    rel = labels[split.query][:, None] == labels[split.database][None, :]
    shuffled = np.random.default_rng(row["seed"]).permutation(len(split.database))
    identity = np.arange(len(split.database))
    assert np.isclose(row["random_ap"], np.nanmean([_loop_ap(d[i], rel[i], shuffled) for i in range(len(d))]))
    assert np.isclose(row["index_ap"], np.nanmean([_loop_ap(d[i], rel[i], identity) for i in range(len(d))]))
    assert row["pessimistic_ap"] <= row["random_ap"] <= row["optimistic_ap"]
    assert row["pessimistic_ap"] < row["tie_aware_ap"] < row["optimistic_ap"]  # 8 bits: many ties
  summary = results["summary"][0]
  assert summary["trials"] == 2
  assert np.isclose(summary["random_vs_tie_aware"],
                    max(abs(r["random_ap"] - r["tie_aware_ap"]) for r in results["rows"]))
  assert "| lsh | 8 |" in tie_breaking.format_summary(results["summary"])
