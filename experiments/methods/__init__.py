"""One trainer module per method, and the one ``train_and_evaluate(config, workdir)`` that picks it.

==========================  ==============================================  =========================
``config.method``           module                                          configs
==========================  ==============================================  =========================
``"talr"``                  :mod:`experiments.methods.talr` (He et al.)     talr_ap, talr_ndcg,
                                                                            deep_hashing
``"ranknet"``,              :mod:`experiments.methods.nair` (Nair et al.)   lambdarank_knn,
``"lambdarank"``                                                            lambdarank_retrieval,
                                                                            deep_hashing
``"deep"``                  :mod:`experiments.methods.deep` (DPSH, DTSH,    deep_hashing
                            HashNet, CSQ, GreedyHash)
==========================  ==============================================  =========================

``configs/deep_hashing.py`` is the launcher of one comparison: every deep hashing objective, TALR-AP,
TALR-NDCG and LambdaRank on the same backbone, optimizer, steps and augmentation (``:objective=<name>``).

Every trainer reads its task, mapping, optimizer and training run from
:mod:`experiments.tasks`, :mod:`experiments.fitting` and :mod:`experiments.augment`, writes ``<workdir>/results.json``
(``{"config", "rows", "summary", "history", "columns"}``) and checkpoints
under ``<workdir>/checkpoints``; restarting the same run resumes from them.
:func:`tune` trains a grid of configs on a validation split.

Before any data is loaded, :func:`experiments.methods.checks.check_run` checks the
config and refuses a run that cannot fit in memory.
"""

from __future__ import annotations

import difflib
import itertools
import os
from typing import Dict, List, Tuple

import jax
import ml_collections

from experiments import plots
from experiments.methods import checks
from experiments.methods.checks import ConfigError
from experiments.methods import deep, nair, talr
from hashjax import io

#: ``config.method`` -> the module whose ``train_and_evaluate`` runs it.
TRAINERS = {"talr": talr, "ranknet": nair, "lambdarank": nair, "deep": deep}


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> Dict:
  """Trains, checkpoints and evaluates ``config``'s method; returns the results dict (also in results.json).

  :func:`check_run` first: a config that cannot run raises ConfigError before any data is loaded.
  """
  if config.get("method") not in TRAINERS:
    raise ConfigError(f"config.method: expected one of {list(TRAINERS)}, got {config.get('method')!r}")
  checks.check_run(config)
  if config.plots:
    plots.require_matplotlib()  # before training, not after it
  return TRAINERS[config.method].train_and_evaluate(config, workdir)


def parse_grid(grid: str, config: ml_collections.ConfigDict) -> List[Tuple[str, list]]:
  """``"lr=1e-3,1e-2;alpha=1"`` -> ``[("lr", [0.001, 0.01]), ("alpha", [1.0])]``, typed like the config.

  Values are typed as on the command line (:func:`experiments.methods.checks.parse_value`:
  ``None`` sets None, bools take true/false, yes/no, 1/0). Raises ConfigError for an
  unknown field (naming close matches) or a value of the wrong type.
  """
  if not isinstance(grid, str):
    raise ConfigError(f"--grid: expected 'key=v1,v2;...', got {grid!r}")
  axes = []
  for part in filter(None, (p.strip() for p in grid.split(";"))):
    key, eq, values = part.partition("=")
    key = key.strip()
    if key not in config:
      close = difflib.get_close_matches(key, list(config.keys()), n=3, cutoff=0.6)
      raise ConfigError(f"--grid: {key!r} is not a field of the config"
                        + (f"; did you mean {', '.join(close)}?" if close else ""))
    if not eq or not values.strip():
      raise ConfigError(f"--grid: expected '{key}=v1,v2', got {part!r}")
    kind = config.get_type(key)  # the declared type, also for None placeholders
    if kind in (tuple, list):
      raise ConfigError(f"--grid: {key}: a list field is not a grid axis (set it with --config.{key}=a,b)")
    axes.append((key, [checks.parse_value(v, config[key], kind, name=f"--grid: {key}") for v in values.split(",")]))
  if not axes:
    raise ConfigError(f"--grid: expected 'key=v1,v2;...', got {grid!r}")
  return axes


def tune_trials(config: ml_collections.ConfigDict, grid: str,
                split: str = "validation") -> List[Tuple[str, Dict, ml_collections.ConfigDict]]:
  """``[(run name, grid values, config)]`` of every combination of ``grid``, each checked before any runs.

  Each trial is ``config`` with ``eval_split=split``, no baselines and no
  target; :func:`check_config` and :func:`check_memory` pass on every one or
  ConfigError names the first that fails.
  """
  if split not in ("validation", "validation_heldout"):
    raise ConfigError(f"split: expected 'validation' or 'validation_heldout', got {split!r}")
  axes = parse_grid(grid, config)
  trials = []
  for values in itertools.product(*(v for _, v in axes)):
    trial = ml_collections.ConfigDict(config.to_dict())
    trial.eval_split = split
    trial.baselines = ()
    trial.target = 0.0
    trial.plots = False
    setting = dict(zip((k for k, _ in axes), values))
    trial.update(setting)
    name = "_".join(f"{k}={v}" for k, v in setting.items())
    try:
      checks.check_run(trial)
    except ConfigError as e:
      raise ConfigError(f"{e} (in the grid's trial {name})") from None
    trials.append((name, setting, trial))
  return trials


def tune(config: ml_collections.ConfigDict, grid: str, workdir: str, split: str = "validation") -> List[Dict]:
  """Trains every combination of ``grid`` on validation ``split``; rows of validation scores (tuning.json).

  Each trial (:func:`tune_trials`, all checked first) runs in
  ``<workdir>/<key=value_...>``; its row holds the grid values, the learned
  codes' scores (the table's columns: tie-aware AP, NDCG, ... for TALR, kNN
  error and precision for RankNet / LambdaRank) and the training time. Several
  processes (the config's ``num_processes``) run every trial together, each
  trial data-parallel over all their devices; every process returns the rows,
  and process 0 alone writes.
  """
  rows = []
  for name, setting, trial in tune_trials(config, grid, split):
    results = train_and_evaluate(trial, os.path.join(workdir, name))
    row = results["rows"][0]
    rows.append({**setting, **{k: row[k] for k, _ in results["columns"] if k in row},
                 "train_time": results["summary"]["train_time"]})
    print(rows[-1], flush=True)
  if jax.process_index() == 0:  # of several processes (each trains every trial together), the first writes
    io.atomic_write_json(os.path.join(workdir, "tuning.json"),
                         {"config": config.to_dict(), "split": split, "rows": rows})
  return rows
