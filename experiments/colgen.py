r"""Column generation hashing (Lin et al.): CGHash and StructHash beside ITQ and TALR on one retrieval protocol.

  python -m experiments.colgen --config=configs/cghash.py
  python -m experiments.colgen --config=configs/structhash.py --config.loss=sndcg --config.stagewise=True
  python -m experiments.colgen --config=configs/cghash.py:runlocal       # scikit-learn digits, seconds
  python -m experiments.colgen --config=configs/cghash.py --config.models=runs/talr16,runs/talr32,runs/talr64

One column-generation run learns ``max(config.bits)`` bits on ``config.train_subset_per_class`` training items
per class; its first 16 or 32 bits with the weights of that iteration are the shorter models (column generation
adds one bit at a time, so a 16-bit run would learn exactly these). Every model is saved to
``<workdir>/models/<method>-<bits>/`` (``hashjax.load_model`` reads it; ``model.bit_weights`` holds the learned
weights) and scored on the queries against the database: tie-aware AP by plain Hamming distance and by the
weighted Hamming distance of the learned bit weights (tie-aware over groups of equal distances), tie-aware
NDCG@100 and precision@100 (both rankings), NDCG@100 with Hamming ties in ascending database index (``NDCG
idx``: the paper's eq. 60 ignores ties; :func:`hashjax.metrics.ndcg`), the training time split into the bit
sub-problem and the weight solve (master problem or cutting planes), the bits with a positive
weight, and the cutting-plane rounds per bit. ITQ
(``config.baselines``), a linear TALR-AP mapping trained for ``config.talr_steps`` steps at every length
(``experiments.train``'s trainer on the same protocol, saved in ``<workdir>/talr-<bits>/``) and saved models
(``config.models``, e.g. longer TALR runs) are scored on the same split. The table goes to stdout and, with every per-bit record, to ``<workdir>/results.json``;
with ``--config.plots=True`` the precision-recall curves of the plain Hamming rankings over the radii 0 .. b (Lin
et al. Table 2's curves, one point per radius: ties are whole bins) go to ``<workdir>/pr_curves.png`` with the
distance histograms (:mod:`experiments.plots`; ``python -m experiments.plots <workdir>`` re-draws them).
"""

from __future__ import annotations

import os
import time
from typing import Dict, List

from absl import logging
import ml_collections
import numpy as np

from configs import talr_ap
from experiments import cli, fitting, methods, plots, reporting, tasks
from experiments.methods import checks
from hashjax import codes, data, io, load_model, metrics, models
from hashjax.colgen import cghash, loop, result, structhash
from hashjax.evaluate import evaluate_codes, evaluate_distances

#: Columns of the printed table.
COLUMNS = (("ap", "AP_T"), ("ap_weighted", "AP_T w"), ("ndcg", "NDCG@k"), ("ndcg_weighted", "NDCG@k w"),
           ("ndcg_index", "NDCG idx"), ("precision", "P@k"), ("precision_weighted", "P@k w"),
           ("train_seconds", "train s"), ("subproblem_seconds", "sub s"), ("master_seconds", "master s"),
           ("bits_kept", "kept"), ("cutting_planes_per_bit", "CP/bit"))


def _hamming_scores(query_words, db_words, num_bits: int, query_labels, db_labels, k: int, *,
                    curves: bool = False) -> Dict[str, float]:
  """Tie-aware AP, NDCG@k and precision@k of a plain Hamming ranking (ties: Hamming bins), and NDCG@k as the paper
  computes it (eq. 60, ties ignored: here in ascending database index); with ``curves`` also the precision-recall
  curve over Hamming radii (:func:`experiments.plots.distance_curves`)."""
  table = evaluate_codes(query_words, db_words, num_bits=num_bits, query_labels=query_labels, db_labels=db_labels,
                         k=k, ndcg_k=k)
  distances = codes.hamming_distance(query_words, db_words)
  index_order = metrics.ndcg(distances, data.label_affinity(query_labels, db_labels), num_bits=num_bits, k=k)
  row = {"ap": table["tie_aware_ap"], "ndcg": table["tie_aware_ndcg"], "precision": table["tie_aware_precision_at_k"],
         "ndcg_index": float(np.nanmean(np.asarray(index_order)))}
  if curves:
    row["curves"] = plots.distance_curves(query_words, db_words, num_bits=num_bits, query_labels=query_labels,
                                          db_labels=db_labels)
  return row


def _weighted_scores(query_words, db_words, weights, num_bits: int, query_labels, db_labels,
                     k: int) -> Dict[str, float]:
  """The same scores of the weighted Hamming ranking (ties: groups of equal weighted distance)."""
  distances = np.asarray(codes.weighted_hamming_distance(query_words, db_words, np.asarray(weights, np.float32)))
  table = evaluate_distances(distances, query_labels=query_labels, db_labels=db_labels, k=k)
  relevance = np.asarray(data.label_affinity(query_labels, db_labels))
  ndcg = np.asarray(metrics.tie_aware_ndcg(distances, relevance, k=k))
  return {"ap_weighted": table["tie_aware_ap"], "ndcg_weighted": float(np.nanmean(ndcg)),
          "precision_weighted": table["tie_aware_precision_at_k"]}


def _fit(config: ml_collections.ConfigDict, x: np.ndarray, y: np.ndarray) -> result.ColgenResult:
  options = loop.SubproblemOptions(num_starts=config.num_starts, max_iterations=config.max_iterations,
                                   sharpness=config.sharpness, min_fraction=config.min_fraction,
                                   duplicate_tolerance=config.duplicate_tolerance,
                                   max_dim=config.max_dim or None)
  shared = dict(num_bits=max(config.bits), C=config.C, loss=config.loss, num_relevant=config.num_relevant,
                num_irrelevant=config.num_irrelevant, feature_kind=config.features, num_anchors=config.num_anchors,
                tolerance=config.tolerance, subproblem=options, seed=config.seed)
  if config.method == "cghash":
    return cghash.fit(x, y, regularizer=config.regularizer, **shared)
  return structhash.fit(x, y, k=config.ndcg_k, stagewise=config.stagewise, cp_tolerance=config.cp_tolerance,
                        max_cp_iterations=config.max_cp_iterations, **shared)


def _train_subset(task: tasks.Task, per_class: int, seed: int) -> np.ndarray:
  """``per_class`` training items of every class (all of a smaller class), drawn with ``seed``."""
  rng = np.random.default_rng([seed, 19])
  labels = task.labels[task.train]
  parts = [rng.permutation(task.train[labels == c])[:per_class] for c in np.unique(labels)]
  return np.sort(np.concatenate(parts))


def learned_rows(config: ml_collections.ConfigDict, task: tasks.Task, workdir: str) -> List[Dict]:
  """Trains the configured method once, then scores and saves its model at every length of ``config.bits``."""
  train = _train_subset(task, config.train_subset_per_class, config.seed)
  x, y = task.features, task.labels
  start = time.perf_counter()
  full = _fit(config, x[train], y[train])
  total = time.perf_counter() - start
  setup = total - sum(h["subproblem_seconds"] + h["master_seconds"] for h in full.history)
  load = os.getloadavg()
  name = config.method if config.method == "cghash" else f"structhash-{config.loss}" + (
      "-stage" if config.stagewise else "")
  ql, dl = y[task.query], y[task.database]
  rows = []
  for bits in config.bits:
    if bits > full.num_bits:
      logging.warning("%s stopped at %d bits (%s): no %d-bit model", name, full.num_bits, full.stop_reason, bits)
      continue
    part = result.prefix(full, bits)
    model = models.from_colgen(part.params, part.bit_weights, train_features=x[train], method=config.method,
                               config=config)
    model.save(os.path.join(workdir, "models", f"{config.method}-{bits}"))
    qw, dw = model.encode(x[task.query]), model.encode(x[task.database])
    history = part.history
    sub = sum(h["subproblem_seconds"] for h in history)
    master = sum(h["master_seconds"] for h in history)
    row = {"method": name, "bits": bits,
           **_hamming_scores(qw, dw, bits, ql, dl, config.precision_k, curves=config.plots),
           **_weighted_scores(qw, dw, model.bit_weights, bits, ql, dl, config.precision_k),
           "train_seconds": setup + sub + master, "subproblem_seconds": sub, "master_seconds": master,
           "bits_kept": int(np.sum(part.bit_weights > 0)), "load_average": list(load),
           "stop_reason": part.stop_reason, "info": part.info,
           "cutting_planes_per_bit": (float(np.mean([h["cutting_planes"] for h in history]))
                                      if config.method == "structhash" else None),
           "history": [{k: v for k, v in h.items()} for h in history]}
    rows.append(row)
    logging.info("%s %d bits: AP_T %.4f (weighted %.4f), NDCG@%d %.4f, %.1f s", name, bits, row["ap"],
                 row["ap_weighted"], config.precision_k, row["ndcg"], row["train_seconds"])
  return rows


def reference_rows(config: ml_collections.ConfigDict, task: tasks.Task) -> List[Dict]:
  """Plain-Hamming rows of ``config.baselines`` (fitted on the full training set) and of ``config.models``."""
  x, y = task.features, task.labels
  ql, dl = y[task.query], y[task.database]
  rows = []
  for bits in config.bits:
    for method in config.baselines:
      model = fitting.baseline_model(method, x[task.train], num_bits=bits, seed=config.seed, train_labels=y[task.train])
      qw, dw = model.encode(x[task.query]), model.encode(x[task.database])
      rows.append({"method": method, "bits": bits,
                   **_hamming_scores(qw, dw, bits, ql, dl, config.precision_k, curves=config.plots)})
  for path in config.models:
    model = load_model(path)
    qw, dw = model.encode(x[task.query]), model.encode(x[task.database])
    rows.append({"method": f"{model.kind} ({os.path.basename(os.path.normpath(path))})", "bits": model.num_bits,
                 **_hamming_scores(qw, dw, model.num_bits, ql, dl, config.precision_k, curves=config.plots)})
  return rows


def talr_config(config: ml_collections.ConfigDict, bits: int) -> ml_collections.ConfigDict:
  """``configs/talr_ap.py`` (a linear TALR-AP mapping) on this run's protocol, ``config.talr_steps`` steps."""
  talr = talr_ap.get_config()
  for field in ("dataset", "seed", "queries_per_class", "train_per_class", "eval_split", "val_per_class",
                "val_heldout_per_class"):
    talr[field] = config[field]
  talr.bits = bits
  talr.num_steps = config.talr_steps
  talr.warmup_steps = min(talr.warmup_steps, config.talr_steps // 2)
  talr.eval_every = 0
  talr.checkpoint_every = 0
  talr.baselines = ()
  return talr


def talr_rows(config: ml_collections.ConfigDict, task: tasks.Task, workdir: str) -> List[Dict]:
  """TALR-AP rows: a linear mapping trained for ``config.talr_steps`` steps at every length of ``config.bits``
  (``experiments.train``'s trainer on the same protocol, in ``<workdir>/talr-<bits>``), scored like the others."""
  x, y = task.features, task.labels
  rows = []
  for bits in config.bits if config.talr_steps else ():
    run = os.path.join(workdir, f"talr-{bits}")
    seconds = methods.train_and_evaluate(talr_config(config, bits), run)["summary"]["train_time"]
    model = load_model(run)
    qw, dw = model.encode(x[task.query]), model.encode(x[task.database])
    rows.append({"method": f"talr ({config.talr_steps} steps)", "bits": bits, "train_seconds": seconds,
                 **_hamming_scores(qw, dw, bits, y[task.query], y[task.database], config.precision_k,
                                   curves=config.plots)})
  return rows


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> Dict:
  """The learned rows (every length of ``config.bits``) and the reference rows; returns and writes
  ``<workdir>/results.json``."""
  checks.check_run(config)
  if config.plots:
    plots.require_matplotlib()  # before any work: a missing matplotlib fails the run up front
  task = tasks.make_task(config)
  rows = learned_rows(config, task, workdir) + reference_rows(config, task) + talr_rows(config, task, workdir)
  results = {"config": config.to_dict(), "dataset": config.dataset, "eval_split": config.eval_split,
             "columns": [list(c) for c in COLUMNS], "rows": rows}
  io.atomic_write_json(os.path.join(workdir, "results.json"), results)
  if config.plots:
    for path in plots.write_plots(workdir, rows, title=config.dataset):
      logging.info("figure: %s", path)
  return results


def format_table(rows: List[Dict]) -> str:
  """One line per (method, length); ``-`` where a column does not apply."""
  return reporting.format_table(rows, COLUMNS)


def main(config):
  workdir = cli.workdir(reporting.default_workdir(config.name), launcher="experiments.colgen")
  results = train_and_evaluate(config, workdir)
  print(format_table(results["rows"]))
  print(f"k = {config.precision_k}; results: {os.path.join(workdir, 'results.json')}")


if __name__ == "__main__":
  cli.run(main)
