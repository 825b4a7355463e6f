r"""Learned bit weights (Feng, Liu, Wang): plain against weighted Hamming ranking of fixed codes.

  python -m experiments.bit_weights --config=configs/bit_weights.py
  python -m experiments.bit_weights --config=configs/bit_weights.py:runlocal
  python -m experiments.bit_weights --config=configs/bit_weights.py --config.models=runs/talr_ap

For every base code and length: fit the code on the protocol's training items, learn bit weights on the
same items with every solver of ``config.solvers`` (:func:`hashjax.weighting.fit`), and score the 1,000
queries against the database by plain Hamming distance (tie-aware over its bins), by weighted Hamming
distance (tie-aware over groups of equal distances), and, with ``config.tie_break``, by Hamming distance
with the EGD weights ordering the items inside each Hamming tie; each also in the paper's AP, PASCAL VOC's
eleven-point interpolated AP (``AP_11``, :func:`hashjax.metrics.interpolated_ap`). The table goes to stdout
and, with the weights and the fitting times, to ``<workdir>/results.json``. With ``--config.plots=True`` the
precision-recall curves of each code by Hamming distance and by its EGD weights (Feng et al. Figs. 3-5; the weighted curve's radii
are multiples of the mean weight, :func:`experiments.plots.weighted_curves`) go to ``<workdir>/pr_curves.png``.
The work is :func:`train_and_evaluate`.
"""

from __future__ import annotations

import os
import time
from typing import Dict, List

from absl import logging
import ml_collections
import numpy as np

from experiments import cli, fitting, plots, reporting, tasks
from experiments.methods import checks
from hashjax import baselines, codes, data, io, load_model, mappings, metrics, weighting
from hashjax.evaluate import evaluate_distances

#: Columns of the printed table.
COLUMNS = (("tie_aware_ap", "AP_T"), ("tie_aware_ndcg", "NDCG_T"), ("tie_aware_precision_at_k", "P@k_T"),
           ("interpolated_ap", "AP_11"), ("fit_seconds", "fit s"))


def _scores(distances, relevance, k: int) -> Dict[str, float]:
  """Tie-aware AP, NDCG and precision@k of any real-valued ``distances[Q, N]``, and the paper's AP (PASCAL VOC's
  eleven-point interpolated AP, each group of equal distances one point), means over the queries."""
  result = evaluate_distances(distances, relevance=relevance, k=k)
  interpolated = metrics.mean_and_count(metrics.interpolated_ap(distances, relevance)).mean
  return {**{key: result[key] for key, _ in COLUMNS if key in result}, "interpolated_ap": float(interpolated)}


def _projections(model, features):
  """The real values whose signs are ``model``'s bits (WhRank reads their spread)."""
  if model.mapping is not None:
    return np.asarray(mappings.apply(model.mapping, model.params, features))
  return np.asarray(baselines.project(model.kind, model.params, features))


def code_rows(name: str, model, protocol: tasks.Protocol, config: ml_collections.ConfigDict) -> List[Dict]:
  """The rows of one fixed code: plain Hamming, each solver's weights, and EGD weights breaking ties only."""
  x, labels, split = protocol.features, protocol.labels, protocol.split
  b = model.num_bits
  train_words, query_words, db_words = (model.encode(x[i]) for i in (split.train, split.query, split.database))
  train_bits = np.asarray(codes.unpack_bits(train_words, b))
  relevance = np.asarray(data.label_affinity(labels[split.query], labels[split.database]))
  hamming = np.asarray(codes.hamming_distance(query_words, db_words))
  rows = [{"code": name, "bits": b, "weights": "none (Hamming)", **_scores(hamming, relevance, config.precision_k),
           "fit_seconds": 0.0}]
  if config.plots:
    rows[0]["curves"] = plots.distance_curves(query_words, db_words, num_bits=b, affinity=relevance)
  fitted = {}
  for solver in config.solvers:
    if solver == "whrank":
      projections = _projections(model, x[split.train])
      fit = lambda: weighting.whrank(projections, labels[split.train], seed=config.seed)
    else:
      fit = lambda: weighting.fit(train_bits, labels[split.train], solver=solver, seed=config.seed)
    fit()  # compiles
    start = time.perf_counter()
    w = np.asarray(fit())
    seconds = time.perf_counter() - start
    fitted[solver] = w
    distances = np.asarray(codes.weighted_hamming_distance(query_words, db_words, w))
    rows.append({"code": name, "bits": b, "weights": solver, **_scores(distances, relevance, config.precision_k),
                 "fit_seconds": seconds, "weight_values": w.tolist()})
    if config.plots and solver == "egd":
      rows[-1]["curves"] = plots.weighted_curves(distances, relevance, weights=w)
  if config.tie_break and "egd" in fitted:
    w = fitted["egd"]
    weighted = np.asarray(codes.weighted_hamming_distance(query_words, db_words, w), np.float64)
    # Hamming distance first, the weighted distance inside a tie: one more unit of Hamming distance outweighs
    # any weighted distance, so the order is lexicographic and its ties are those of both distances.
    composite = hamming * (2.0 * float(np.sum(w)) + 1.0) + weighted
    rows.append({"code": name, "bits": b, "weights": "egd, ties only", **_scores(composite, relevance,
                                                                                 config.precision_k),
                 "fit_seconds": rows[[r["weights"] for r in rows].index("egd")]["fit_seconds"]})
  for row in rows:
    logging.info("%s %d bits, %s: AP_T %.4f", name, b, row["weights"], row["tie_aware_ap"])
  return rows


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> Dict:
  """Every (code, length, weights) row of ``config``; returns and writes ``<workdir>/results.json``."""
  checks.check_run(config)
  if config.plots:
    plots.require_matplotlib()  # before any work: a missing matplotlib fails the run up front
  protocol = tasks.load_protocol(config)
  rows = []
  for num_bits in config.bits:
    for method in config.base_codes:
      model = fitting.baseline_model(method, protocol.features[protocol.split.train], num_bits=num_bits,
                                    seed=config.seed, train_labels=protocol.labels[protocol.split.train])
      rows += code_rows(method, model, protocol, config)
  for path in config.models:
    model = load_model(path)
    rows += code_rows(f"{model.kind} ({os.path.basename(os.path.normpath(path))})", model, protocol, config)
  results = {"config": config.to_dict(), "dataset": protocol.name, "rows": rows}
  io.atomic_write_json(os.path.join(workdir, "results.json"), results)
  if config.plots:  # Feng et al. Figs. 3-5: each code's curve by Hamming distance and by its EGD weights
    entries = [{"method": r["code"] + ("" if r["weights"].startswith("none") else " weighted"), "bits": r["bits"],
                "curves": r["curves"]} for r in rows if "curves" in r]
    for path in plots.write_plots(workdir, entries, title=protocol.name):
      logging.info("figure: %s", path)
  return results


def format_table(rows: List[Dict]) -> str:
  """One line per (code, length, weights): the tie-aware scores and the fitting time."""
  header = f"{'code':<16}{'bits':>5}  {'weights':<16}" + "".join(f"{t:>9}" for _, t in COLUMNS)
  lines = [header, "-" * len(header)]
  for r in rows:
    lines.append(f"{r['code']:<16}{r['bits']:>5}  {r['weights']:<16}"
                 + "".join(f"{r[k]:>9.4f}" if k != "fit_seconds" else f"{r[k]:>9.3f}" for k, _ in COLUMNS))
  return "\n".join(lines)


def main(config):
  workdir = cli.workdir(reporting.default_workdir(config.name), launcher="experiments.bit_weights")
  results = train_and_evaluate(config, workdir)
  print(format_table(results["rows"]))
  print(f"results: {os.path.join(workdir, 'results.json')}")


if __name__ == "__main__":
  cli.run(main)
