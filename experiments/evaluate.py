r"""Hashes a dataset with the baselines (and saved learned models) and prints tie-aware metrics.

  python -m experiments.evaluate --config=configs/baselines.py
  python -m experiments.evaluate --config=configs/baselines.py --config.bits=32 --workdir=runs/b32
  python -m experiments.evaluate --config=configs/baselines.py --config.methods=lsh,itq --config.bits=16,32
  python -m experiments.evaluate --config=configs/supervised.py --config.models=runs/talr_ap  # a trained model too
  python -m experiments.evaluate --config=configs/baselines.py --help   # the config's fields and defaults

For every method and code length: fit on the protocol's training subset, encode
queries and database, and evaluate the Hamming ranking with
:func:`hashjax.evaluate.evaluate_codes` (tie-aware AP and NDCG, optimistic and
pessimistic AP, precision within Hamming radius 2, tie-aware precision@100).
Every saved model of ``config.models`` (a TALR, CGHash or StructHash run on the
same protocol) is scored beside them on the same queries and database, and by
its learned bit weights too when it has them; every method of
``config.weighted`` is also ranked by bit weights learned on its training codes
(:func:`hashjax.weighting.fit`, EGD; Feng, Liu, Wang), which rank by the
weighted Hamming distance, so its radius columns are left empty.
With ``--config.unseen_database=True`` the queries search only the database items outside the training
subset (4,000 of 9,000 on MNIST-10k), so every code searched was made for an item no method was fitted on.
The table goes to stdout and, with the timings, to ``<workdir>/results.json``; each fitted baseline to
``<workdir>/models/<method>-<bits>`` (``hashjax.load_model``), and with ``--config.plots=True`` the figures
(AP against code length, precision-recall curves, distance histograms) to ``<workdir>/*.png``.

Over several processes (``--config.num_processes``, ``--config.process_id``, ``--config.coordinator_address``,
or the ``JAX_*`` environment variables) or ``--config.num_devices > 1``, every process fits the same baselines
(on the host, in float64, so their codes agree), encodes only its own rows of the database, and the
evaluation runs over the database split by rows across every device (:func:`hashjax.sharding.hamming_histogram`
through ``evaluate_codes``); process 0 alone saves the models and writes ``results.json``.
"""

from __future__ import annotations

import os
import time
from typing import Dict, List

from absl import logging
import jax
import ml_collections
import numpy as np

from experiments import cli, fitting, plots, reporting, tasks
from hashjax import codes, io, load_model, models, weighting
from hashjax.evaluate import evaluate_codes, evaluate_distances

#: What a saved model of ``config.models`` must share with the run: the same queries (a model trained on a
#: different split may have trained on this run's queries); with ``config.unseen_database``, the same training
#: items too (``train_per_class``), which that database leaves out.
PROTOCOL_FIELDS = ("dataset", "seed", "queries_per_class")


def model_paths(path: str) -> List[str]:
  """The saved models a ``config.models`` entry names: a model's directory or a workdir with one model
  (:func:`hashjax.load_model` reads either), or every model under a run's ``models/`` (a colgen run's
  ``models/cghash-16``, ``-32``, ...), ordered by their directories' names."""
  if os.path.isfile(os.path.join(path, models.MODEL_FILE)):
    return [path]
  return run_models(path) or [path]


def run_models(workdir: str) -> List[str]:
  """The saved models under ``<workdir>/models/`` (:func:`hashjax.models.list_models`), ordered by name."""
  return models.list_models(os.path.join(workdir, "models"))


def saved_model(path: str, config: ml_collections.ConfigDict, dim: int):
  """``hashjax.load_model(path)``, refused (in one line) when it cannot be read, encodes another width than
  ``dim``, or records a config that splits the data differently."""
  try:
    model = load_model(path)
  except (OSError, ValueError) as e:
    raise ValueError(f"config.models: {path}: {e}") from None
  if model.dim != dim:
    raise ValueError(f"config.models: {path} encodes {model.dim} features, this run's dataset "
                     f"{config.dataset} has {dim}")
  recorded = dict(model.config or {})
  fields = PROTOCOL_FIELDS + (("train_per_class",) if config.unseen_database else ())
  for field in fields:
    if field in recorded and recorded[field] != config[field]:
      why = ("some of this run's unseen database items may be its training items" if field == "train_per_class"
             else "its training items may be this run's queries")
      raise ValueError(f"config.models: {path} was trained with {field}={recorded[field]!r}, this run has "
                       f"{config[field]!r}; {why}")
  if not all(field in recorded for field in fields):
    logging.warning("%s records no protocol (%s): it is assumed not to have trained on this run's queries%s",
                    path, ", ".join(fields), " or unseen database items" if config.unseen_database else "")
  return model


def check_workdir_models(workdir: str, config: ml_collections.ConfigDict) -> None:
  """Refuses (one line) a workdir whose ``models/`` holds a model of another split, which this run's
  ``results.json`` would then sit beside; models of this split are replaced or kept (and a folder without a
  ``model.json``, a killed first save, is saved over)."""
  root = os.path.join(workdir, "models")
  for path in run_models(workdir):
    try:
      recorded = dict(load_model(path).config or {})
    except (OSError, ValueError) as e:
      raise cli.ConfigError(f"--workdir={workdir}: holds a model this run cannot read ({path}: {e}); choose "
                            f"another --workdir") from None
    for field in PROTOCOL_FIELDS + ("train_per_class",):
      if field in recorded and recorded[field] != config[field]:
        raise ValueError(f"config.{field}={config[field]!r}: --workdir={workdir} holds models of another split "
                         f"({path}: {field}={recorded[field]!r}); choose another --workdir")
  for method in config.methods:  # where this run will save its models
    for num_bits in config.bits:
      try:
        io.check_target(os.path.join(root, f"{method}-{num_bits}"), manifest=models.MODEL_FILE,
                        legacy=(models.ARRAYS_FILE,), what="model")
      except ValueError as e:
        raise cli.ConfigError(f"--workdir={workdir}: cannot hold the fitted models: {e}") from None


def row_names(paths: List[str], taken=()) -> List[str]:
  """Each saved model's row name: its directory's name, or as many of its path's last parts as tell it (and its
  ``+w`` row) from the others and from the names ``taken`` (``runs/a/models/sdh-32`` and ``runs/b/models/sdh-32``:
  ``a/models/sdh-32`` and ``b/models/sdh-32``).

  >>> row_names(["runs/a/models/sdh-32", "runs/b/models/sdh-32", "runs/talr"])
  ['a/models/sdh-32', 'b/models/sdh-32', 'talr']
  >>> row_names(["runs/x/sdh-32", "runs/y/sdh-32+w"])  # sdh-32's weighted row would be sdh-32+w
  ['x/sdh-32', 'y/sdh-32+w']
  """
  parts = [os.path.abspath(path).split(os.sep) for path in paths]
  depth = [1] * len(paths)
  while True:
    names = ["/".join(p[-d:]) for p, d in zip(parts, depth)]
    rows = [{name, f"{name}+w"} for name in names]  # a model with bit weights has a "+w" row too
    clashes = [i for i, own in enumerate(rows)
               if own & set(taken) or any(own & other for j, other in enumerate(rows) if j != i)]
    grown = [i for i in clashes if depth[i] < len(parts[i])]
    if not grown:
      return names
    for i in grown:
      depth[i] += 1


def codes_row(method: str, num_bits: int, query_words, db_words, protocol: tasks.Protocol,
              config: ml_collections.ConfigDict, **extra) -> Dict:
  """The row of a Hamming ranking: :func:`hashjax.evaluate.evaluate_codes` (and the plots' curves); ``db_words``
  may be split over devices, padded past the database's rows (:func:`experiments.fitting.encode_split`)."""
  split = protocol.split
  labels = {"query_labels": protocol.labels[split.query], "db_labels": protocol.labels[split.database]}
  start = time.perf_counter()
  result = evaluate_codes(query_words, db_words, num_bits=num_bits, radius=config.radius, k=config.precision_k,
                          num_db=len(split.database), **labels)
  row = {"method": method, "bits": int(num_bits), **reporting.plain(result), **extra,
         "eval_seconds": time.perf_counter() - start}
  if config.plots:
    row["curves"] = plots.distance_curves(query_words, db_words, num_bits=num_bits, **labels)
  logging.info("%s %d bits: AP_T %.4f", method, num_bits, row["tie_aware_ap"])
  return row


def weighted_row(method: str, num_bits: int, query_words, db_words, weights, protocol: tasks.Protocol,
                 config: ml_collections.ConfigDict, **extra) -> Dict:
  """The row of a ranking by the weighted Hamming distance (no radius: the distances are real)."""
  split = protocol.split
  distances = np.asarray(codes.weighted_hamming_distance(query_words, db_words, weights))
  result = evaluate_distances(distances, query_labels=protocol.labels[split.query],
                              db_labels=protocol.labels[split.database], k=config.precision_k)
  logging.info("%s %d bits: AP_T %.4f", method, num_bits, result["tie_aware_ap"])
  return {"method": method, "bits": int(num_bits), **reporting.plain(result), **extra}


def baseline_rows(method: str, num_bits: int, protocol: tasks.Protocol, config: ml_collections.ConfigDict,
                  workdir: str, mesh=None) -> List[Dict]:
  """Baseline ``method`` fitted on the training items and saved to ``<workdir>/models/<method>-<bits>`` (by
  process 0); its row, and with ``method`` in ``config.weighted`` the row of EGD bit weights learned on its
  training codes, which are saved with the model. ``mesh``: the database split over its devices
  (:func:`experiments.fitting.encode_split`)."""
  x, labels, split = protocol.features, protocol.labels, protocol.split
  start = time.perf_counter()
  model = fitting.baseline_model(method, x[split.train], num_bits=num_bits, seed=config.seed,
                                 train_labels=labels[split.train], config=config)
  query_words, db_words = fitting.encode_split(model.encode, x, split.query, split.database, mesh=mesh)
  seconds = time.perf_counter() - start
  model_dir = os.path.join("models", f"{method}-{num_bits}")
  rows = [codes_row(method, num_bits, query_words, db_words, protocol, config, fit_encode_seconds=seconds,
                    model=model_dir)]
  if method in config.weighted:
    start = time.perf_counter()
    train_bits = codes.unpack_bits(model.encode(x[split.train]), num_bits)
    weights = np.asarray(weighting.fit(train_bits, labels[split.train], solver="egd", seed=config.seed))
    model = models.from_baseline(method, model.params, train_features=x[split.train], config=model.config,
                                 bit_weights=weights)  # saved with the model: config.models scores both rows
    rows.append(weighted_row(f"{method}+w", num_bits, query_words, db_words, weights, protocol, config,
                             fit_encode_seconds=seconds + time.perf_counter() - start, model=model_dir))
  if jax.process_index() == 0:  # of several processes, the first writes
    logging.info("model: %s", model.save(os.path.join(workdir, model_dir)))
  return rows


def model_rows(path: str, name: str, model, protocol: tasks.Protocol, config: ml_collections.ConfigDict,
               mesh=None) -> List[Dict]:
  """A saved model's row, ``name`` (:func:`row_names`), and the row of its own bit weights when it has them (not
  over a ``mesh``: a weighted ranking reads the whole database on one host)."""
  x, split = protocol.features, protocol.split
  query_words, db_words = fitting.encode_split(model.encode, x, split.query, split.database, mesh=mesh)
  rows = [codes_row(name, model.num_bits, query_words, db_words, protocol, config, model=path)]
  if model.bit_weights is not None and mesh is not None:
    logging.warning("%s: its bit weights are not scored over several devices (a weighted ranking reads the "
                    "whole database on one host); run one process on one device for its %s+w row", path, name)
  elif model.bit_weights is not None:
    rows.append(weighted_row(f"{name}+w", model.num_bits, query_words, db_words, model.bit_weights, protocol,
                             config, model=path))
  return rows


def evaluate(config: ml_collections.ConfigDict, workdir: str) -> List[Dict]:
  """Runs every (method, bits) of ``config`` and scores every model of ``config.models``; returns the result
  rows and writes JSON.

  Each fitted baseline is saved to ``<workdir>/models/<method>-<bits>`` (its row's ``"model"``), which
  ``hashjax.load_model`` restores; its ``encode`` gives the words evaluated here. The saved models' rows
  follow the baselines of their code length (those of a length not in ``config.bits`` come last).
  """
  if config.plots:
    plots.require_matplotlib()  # before any work: a missing matplotlib fails the run up front
  mesh = fitting.device_mesh(config)
  check_workdir_models(workdir, config)
  paths = [path for entry in config.models for path in model_paths(entry)]
  real = []
  for path in paths:  # the directory load_model reads: a training run's workdir and its model/ are one model
    try:
      real.append(os.path.realpath(models.model_dir(path)))
    except ValueError as e:
      raise ValueError(f"config.models: {path}: {e}") from None
    if real[-1] in real[:-1]:
      raise ValueError(f"config.models: expected each model once, got {path} twice (named by two entries)")
  protocol = tasks.load_protocol(config)
  if config.unseen_database:  # search only the database items no method was fitted on
    split = protocol.split
    protocol = protocol._replace(split=split._replace(database=np.setdiff1d(split.database, split.train)))
    if not len(protocol.split.database):
      raise ValueError(f"config.unseen_database: expected database items outside the training subset, got none "
                       f"(config.train_per_class={config.train_per_class} takes every one)")
  split = protocol.split
  logging.info("%s: %d queries, %d database items, %d training items, dim %d", protocol.name,
               len(split.query), len(split.database), len(split.train), protocol.features.shape[1])
  taken = {name for method in config.methods for name in (method, f"{method}+w")}
  learned = [(path, name, saved_model(path, config, protocol.features.shape[1]))
             for path, name in zip(paths, row_names(paths, taken))]
  if mesh is not None and (config.weighted or config.plots):
    raise ValueError(f"config.num_devices / config.num_processes: weighted rankings and plots read the whole "
                     f"database on one host; run them in one process on one device (got weighted="
                     f"{tuple(config.weighted)}, plots={config.plots})")
  rows = []
  for num_bits in config.bits:
    for method in config.methods:
      rows += baseline_rows(method, num_bits, protocol, config, workdir, mesh)
    for path, name, model in learned:
      rows += model_rows(path, name, model, protocol, config, mesh) if model.num_bits == num_bits else []
  for path, name, model in learned:
    rows += model_rows(path, name, model, protocol, config, mesh) if model.num_bits not in config.bits else []
  if jax.process_index() != 0:  # of several processes, the first writes
    return rows
  io.atomic_write_json(os.path.join(workdir, "results.json"),
                       {"config": reporting.recorded_config(config), "dataset": protocol.name, "rows": rows})
  if config.plots:
    for path in plots.write_plots(workdir, rows, title=protocol.name):
      logging.info("plot: %s", path)
  return rows


def main(config):
  workdir = cli.workdir(reporting.default_workdir(config.get("name", "baselines")),
                        launcher="experiments.evaluate")
  rows = evaluate(config, workdir)
  print(reporting.format_table(rows))
  print(f"results: {os.path.join(workdir, 'results.json')}")


if __name__ == "__main__":
  cli.run(main)
