r"""Hashes a dataset with the unsupervised baselines and prints tie-aware metrics.

  python -m experiments.evaluate --config=configs/baselines.py
  python -m experiments.evaluate --config=configs/baselines.py --config.bits=32 --workdir=runs/b32

For every method and code length: fit on the protocol's training subset, encode
queries and database, and evaluate the Hamming ranking with
:func:`hashjax.metrics.evaluate_codes` (tie-aware AP and NDCG, optimistic and
pessimistic AP, precision within Hamming radius 2, tie-aware precision@100).
The table goes to stdout and, with the timings, to ``<workdir>/results.json``.
"""

from __future__ import annotations

import os
import time
from typing import Dict, List

from absl import app, flags, logging
import ml_collections
from ml_collections import config_flags

from experiments import common
from hashjax import io, metrics

_CONFIG = config_flags.DEFINE_config_file("config", None, "Path to a configs/*.py file.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory (default: runs/<config name>).")


def evaluate(config: ml_collections.ConfigDict, workdir: str) -> List[Dict]:
  """Runs every (method, bits) of ``config``; returns the result rows and writes JSON."""
  protocol = common.load_protocol(config)
  split = protocol.split
  x = protocol.features
  logging.info("%s: %d queries, %d database items, %d training items, dim %d", protocol.name,
               len(split.query), len(split.database), len(split.train), x.shape[1])
  rows = []
  for num_bits in config.bits:
    for method in config.methods:
      start = time.perf_counter()
      query_words, db_words = common.baseline_words(method, x, split.train, split.query, split.database,
                                                    num_bits=num_bits, seed=config.seed)
      fit_seconds = time.perf_counter() - start
      start = time.perf_counter()
      result = metrics.evaluate_codes(
          query_words, db_words, query_labels=protocol.labels[split.query],
          db_labels=protocol.labels[split.database], num_bits=num_bits,
          radius=config.radius, k=config.precision_k)
      row = {"method": method, "bits": int(num_bits), **common.plain(result),
             "fit_encode_seconds": fit_seconds, "eval_seconds": time.perf_counter() - start}
      logging.info("%s %d bits: AP_T %.4f (fit+encode %.2fs, eval %.2fs)", method, num_bits,
                   row["tie_aware_ap"], row["fit_encode_seconds"], row["eval_seconds"])
      rows.append(row)
  io.atomic_write_json(os.path.join(workdir, "results.json"),
                       {"config": config.to_dict(), "dataset": protocol.name, "rows": rows})
  return rows


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  config = _CONFIG.value
  workdir = _WORKDIR.value or common.default_workdir(config.get("name", "baselines"))
  rows = evaluate(config, workdir)
  print(common.format_table(rows))
  print(f"results: {os.path.join(workdir, 'results.json')}")


if __name__ == "__main__":
  flags.mark_flag_as_required("config")
  app.run(main)
