r"""Hashes a dataset with the unsupervised baselines and prints tie-aware metrics.

  python -m experiments.evaluate --config=configs/baselines.py
  python -m experiments.evaluate --config=configs/baselines.py --config.bits=32 --workdir=runs/b32
  python -m experiments.evaluate --config=configs/baselines.py --config.methods=lsh,itq --config.bits=16,32
  python -m experiments.evaluate --config=configs/baselines.py --help   # the config's fields and defaults

For every method and code length: fit on the protocol's training subset, encode
queries and database, and evaluate the Hamming ranking with
:func:`hashjax.evaluate.evaluate_codes` (tie-aware AP and NDCG, optimistic and
pessimistic AP, precision within Hamming radius 2, tie-aware precision@100).
The table goes to stdout and, with the timings, to ``<workdir>/results.json``; each fitted baseline to
``<workdir>/models/<method>-<bits>`` (``hashjax.load_model``), and with ``--config.plots=True`` the figures
(AP against code length, precision-recall curves, distance histograms) to ``<workdir>/*.png``.
"""

from __future__ import annotations

import os
import time
from typing import Dict, List

from absl import logging
import ml_collections

from experiments import cli, fitting, plots, reporting, tasks
from hashjax import io
from hashjax.evaluate import evaluate_codes



def evaluate(config: ml_collections.ConfigDict, workdir: str) -> List[Dict]:
  """Runs every (method, bits) of ``config``; returns the result rows and writes JSON.

  Each fitted baseline is saved to ``<workdir>/models/<method>-<bits>`` (its row's ``"model"``), which
  ``hashjax.load_model`` restores; its ``encode`` gives the words evaluated here.
  """
  if config.plots:
    plots.require_matplotlib()  # before any work: a missing matplotlib fails the run up front
  protocol = tasks.load_protocol(config)
  split = protocol.split
  x = protocol.features
  logging.info("%s: %d queries, %d database items, %d training items, dim %d", protocol.name,
               len(split.query), len(split.database), len(split.train), x.shape[1])
  rows = []
  for num_bits in config.bits:
    for method in config.methods:
      start = time.perf_counter()
      model = fitting.baseline_model(method, x[split.train], num_bits=num_bits, seed=config.seed,
                                      train_labels=protocol.labels[split.train], config=config)
      query_words, db_words = model.encode(x[split.query]), model.encode(x[split.database])
      fit_seconds = time.perf_counter() - start
      model_dir = os.path.join("models", f"{method}-{num_bits}")
      model.save(os.path.join(workdir, model_dir))
      start = time.perf_counter()
      result = evaluate_codes(
          query_words, db_words, query_labels=protocol.labels[split.query],
          db_labels=protocol.labels[split.database], num_bits=num_bits,
          radius=config.radius, k=config.precision_k)
      row = {"method": method, "bits": int(num_bits), **reporting.plain(result),
             "fit_encode_seconds": fit_seconds, "eval_seconds": time.perf_counter() - start, "model": model_dir}
      if config.plots:
        row["curves"] = plots.distance_curves(query_words, db_words, num_bits=num_bits,
                                              query_labels=protocol.labels[split.query],
                                              db_labels=protocol.labels[split.database])
      logging.info("%s %d bits: AP_T %.4f (fit+encode %.2fs, eval %.2fs)", method, num_bits,
                   row["tie_aware_ap"], row["fit_encode_seconds"], row["eval_seconds"])
      rows.append(row)
  io.atomic_write_json(os.path.join(workdir, "results.json"),
                       {"config": config.to_dict(), "dataset": protocol.name, "rows": rows})
  if config.plots:
    for path in plots.write_plots(workdir, rows, title=protocol.name):
      logging.info("plot: %s", path)
  return rows


def main(config):
  workdir = cli.WORKDIR.value or reporting.default_workdir(config.get("name", "baselines"))
  rows = evaluate(config, workdir)
  print(reporting.format_table(rows))
  print(f"results: {os.path.join(workdir, 'results.json')}")


if __name__ == "__main__":
  cli.run(main)
