"""What a run reports: result rows of the learned codes and the baselines, the saved model, results.json and the
text table."""

from __future__ import annotations

import io as _bytes_io
import os
import time
from typing import Callable, Dict, List, Optional, Sequence

from absl import logging
import jax
from jax.experimental import multihost_utils
import ml_collections
import numpy as np

from experiments import fitting, plots, tasks
from hashjax import io, models


def result_rows(config: ml_collections.ConfigDict, task: tasks.Task, *, name: str, learned_words: Callable,
                evaluate: Callable, workdir: str, mesh=None) -> List[Dict]:
  """Table rows: the learned codes (``learned_words() -> (query_words, db_words)``), then ``config.baselines``.

  ``evaluate(query_words, db_words) -> {metric: value}`` scores each; the
  learned row also holds ``eval_seconds`` (encoding and evaluation). With
  ``config.plots``, every row also holds the ``curves`` the figures are drawn from
  (:func:`experiments.plots.distance_curves`). With a ``mesh``, the baselines' database words are split over
  its devices as :func:`experiments.fitting.encode_split` splits them (``learned_words`` should do the same);
  the curves then read every process's real rows. With ``config.save_codes``, each row's codes go to
  ``<workdir>/codes/<method>.npz`` (:func:`save_codes`).
  """
  if config.plots:
    relevance = ({"query_labels": task.labels[task.query], "db_labels": task.labels[task.database]}
                 if task.affinity == "label" else {"affinity": tasks.eval_affinity(task)})

  def row(method, words, **extra):
    out = {"method": method, "bits": config.bits, **plain(evaluate(*words)), **extra}
    if config.plots or config.get("save_codes"):
      query_words, db_words = words
      if mesh is not None:  # every process's rows, padding cut off
        db_words = multihost_utils.process_allgather(db_words, tiled=True)[:len(task.database)]
      if config.plots:
        out["curves"] = plots.distance_curves(query_words, db_words, num_bits=config.bits, **relevance)
      if config.get("save_codes") and jax.process_index() == 0:
        path = save_codes(os.path.join(workdir, CODES_DIR, f"{method}.npz"), query_words, db_words, task,
                          num_bits=config.bits)
        logging.info("codes: %s (python -m experiments.evaluate_codes --codes=%s)", path, path)
    return out

  start = time.perf_counter()
  words = learned_words()
  rows = [row(name, words, eval_seconds=time.perf_counter() - start)]
  for method in config.baselines:
    rows.append(row(method, fitting.baseline_words(method, task.features, task.train, task.query, task.database,
                                                   num_bits=config.bits, seed=config.seed, labels=task.labels,
                                                   mesh=mesh)))
  return rows


#: Where ``config.save_codes`` writes each row's codes in the workdir.
CODES_DIR = "codes"


def save_codes(path: str, query_words, db_words, task: tasks.Task, *, num_bits: int) -> str:
  """Writes packed codes with the task's labels as the ``.npz`` that ``experiments.evaluate_codes`` reads.

  Keys ``query_codes`` / ``db_codes`` (``uint32`` words), ``num_bits``, and ``query_labels`` / ``db_labels``:
  class labels ``int32[n]``, or for ``"shared_labels"`` multi-hot rows ``uint8[n, L]``. Written atomically;
  returns ``path``.
  """
  sets = task.label_sets if task.affinity == "shared_labels" else None
  labels = task.labels if sets is None else sets.astype(np.uint8)
  buffer = _bytes_io.BytesIO()
  np.savez(buffer, query_codes=np.asarray(query_words, np.uint32), db_codes=np.asarray(db_words, np.uint32),
           num_bits=np.int64(num_bits), query_labels=labels[task.query], db_labels=labels[task.database])
  io.atomic_write_bytes(path, buffer.getvalue())
  return path


#: Where a training run writes its model in the workdir (``hashjax.load_model(workdir)`` reads it).
MODEL_DIR = "model"


def recorded_config(config: ml_collections.ConfigDict, resolved: Optional[Dict] = None) -> Dict:
  """The config as run, for ``results.json`` and the saved model: ``config.to_dict()`` with the values the
  trainer resolved at run time (``resolved``: field -> value) in place of the placeholders that stood for them;
  ``eval_every`` / ``checkpoint_every`` None are recorded as the 0 that
  :func:`experiments.fitting.fit` reads them as; a config's process settings
  (:func:`experiments.fitting.start_processes`) as the run's: ``num_processes`` and
  ``process_id`` from jax, ``coordinator_address`` as given or from ``JAX_COORDINATOR_ADDRESS``,
  ``"unused"`` for one process, ``"detected by jax"`` when neither names it.

  A field still ``None`` afterwards is logged as a warning: every option a run used should be on record.
  """
  record = config.to_dict()
  for key in ("eval_every", "checkpoint_every"):  # None: only at the start and end, as fitting.fit reads 0
    if key in record and record[key] is None:
      record[key] = 0
  if "num_processes" in record:
    count = jax.process_count()
    record.update(num_processes=count, process_id=jax.process_index())
    record["coordinator_address"] = (record.get("coordinator_address") or os.environ.get("JAX_COORDINATOR_ADDRESS")
                                     or ("unused" if count == 1 else "detected by jax"))
  record.update(resolved or {})
  nulls = sorted(k for k, v in record.items() if v is None)
  if nulls:
    logging.warning("config fields recorded as null (no value resolved for them): %s", ", ".join(nulls))
  return record


def save_model(workdir: str, mapping, params, task: tasks.Task, record: Dict) -> models.Model:
  """Writes the trained mapping to ``<workdir>/model`` with the run's config ``record``; returns the model.

  Its ``encode`` gives the words the run evaluates (:func:`model_words`), and
  ``hashjax.load_model(workdir)`` restores it. Of several processes, only process 0 writes.
  """
  # On the host: the model encodes on this process's devices alone, whatever mesh trained the parameters.
  model = models.from_mapping(mapping, jax.device_get(params), train_features=task.features[task.train],
                              config=record)
  if jax.process_index() == 0:  # of several processes (experiments.fitting.start_processes), the first writes
    path = model.save(os.path.join(workdir, MODEL_DIR))
    logging.info("model: %s (hashjax.load_model(%r) restores it)", path, workdir)
  return model


def model_words(model: models.Model, task: tasks.Task, mesh=None):
  """``(query_words, db_words)`` of ``model`` on the task's queries and database; with a ``mesh``, the database
  split over its devices, each process encoding its own rows (:func:`experiments.fitting.encode_split`)."""
  return fitting.encode_split(model.encode, task.features, task.query, task.database, mesh=mesh)


def write_results(workdir: str, config, rows: List[Dict], history: List[Dict],
                  columns: Sequence = None) -> Dict:
  """``{"config", "rows", "summary", "history", "columns"}``, written atomically to ``<workdir>/results.json``.

  ``config``: the record of :func:`recorded_config` (or a ConfigDict, recorded as it is). Of several
  processes, only process 0 writes.
  """
  record = config.to_dict() if isinstance(config, ml_collections.ConfigDict) else dict(config)
  results = {"config": record, "rows": rows, "summary": train_summary(history), "history": history,
             "columns": [list(c) for c in (COLUMNS if columns is None else columns)]}
  if jax.process_index() != 0:  # of several processes, the first writes
    return results
  io.atomic_write_json(os.path.join(workdir, "results.json"), results)
  if record.get("plots"):
    for path in plots.write_plots(workdir, rows, title=record.get("dataset")):
      logging.info("plot: %s", path)
  return results


def plain(result: Dict) -> Dict:
  """Metric values as Python numbers (scalars) or lists, for JSON."""
  return {k: (np.asarray(v).item() if np.ndim(v) == 0 else np.asarray(v).tolist()) for k, v in result.items()}


def train_summary(history: Sequence[Dict]) -> Dict:
  """Median train-step throughput, training time and the time-to-target event of a ``hashjax.train`` history.

  ``examples_per_sec`` is 0 when no step was logged; ``time_to_target`` is ``{}`` when no target was set or
  it was not reached.
  """
  train_logs = [h for h in history if h["kind"] == "train"]
  return {
      "examples_per_sec": float(np.median([h["examples_per_sec"] for h in train_logs])) if train_logs else 0.0,
      "train_time": max((h["train_time"] for h in history), default=0.0),
      "time_to_target": next((h for h in history if h["kind"] == "target"), {}),
  }


def default_workdir(config_name: str) -> str:
  return os.path.join("runs", config_name)


COLUMNS = (
    ("tie_aware_ap", "AP_T"),
    ("tie_aware_ndcg", "NDCG_T"),
    ("optimistic_ap", "AP_opt"),
    ("pessimistic_ap", "AP_pes"),
    ("precision_at_radius", "P@r"),
    ("num_empty_at_radius", "empty@r"),
    ("tie_aware_precision_at_k", "P@k_T"),
)


def _cell(value) -> str:
  if value is None:
    return f"{'-':>10}"
  if isinstance(value, (int, np.integer)):
    return f"{value:>10d}"
  return f"{value:>10.4f}"


def format_table(rows: Sequence[Dict], columns: Sequence = COLUMNS) -> str:
  """A fixed-width text table: method, bits, then one column per metric."""
  width = max([14] + [len(str(row["method"])) + 1 for row in rows])
  header = f"{'method':<{width}}{'bits':>5}" + "".join(f"{title:>10}" for _, title in columns)
  lines: List[str] = [header, "-" * len(header)]
  for row in rows:
    cells = "".join(_cell(row.get(key)) for key, _ in columns)
    lines.append(f"{row['method']:<{width}}{row['bits']:>5}" + cells)
  return "\n".join(lines)
