"""One trainer module per method, and the one ``train_and_evaluate(config, workdir)`` that picks it.

==========================  ==============================================  =========================
``config.method``           module                                          configs
==========================  ==============================================  =========================
``"talr"``                  :mod:`experiments.methods.talr` (He et al.)     talr_ap, talr_ndcg
``"ranknet"``,              :mod:`experiments.methods.nair` (Nair et al.)   lambdarank_knn,
``"lambdarank"``                                                            lambdarank_retrieval
==========================  ==============================================  =========================

Every trainer reads its task, mapping, optimizer and training run from
:mod:`experiments.common` and writes ``<workdir>/results.json``
(``{"config", "rows", "summary", "history", "columns"}``) and checkpoints
under ``<workdir>/checkpoints``; restarting the same run resumes from them.
:func:`tune` trains a grid of configs on a validation split.
"""

from __future__ import annotations

import itertools
import os
from typing import Dict, List, Tuple

import ml_collections

from experiments.methods import nair, talr
from hashjax import io

#: ``config.method`` -> the module whose ``train_and_evaluate`` runs it.
TRAINERS = {"talr": talr, "ranknet": nair, "lambdarank": nair}


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> Dict:
  """Trains, checkpoints and evaluates ``config``'s method; returns the results dict (also in results.json)."""
  if config.get("method") not in TRAINERS:
    raise ValueError(f"config.method: expected one of {list(TRAINERS)}, got {config.get('method')!r}")
  return TRAINERS[config.method].train_and_evaluate(config, workdir)


def parse_grid(grid: str, config: ml_collections.ConfigDict) -> List[Tuple[str, list]]:
  """``"lr=1e-3,1e-2;alpha=1"`` -> ``[("lr", [0.001, 0.01]), ("alpha", [1.0])]``, typed like the config."""
  axes = []
  for part in filter(None, (p.strip() for p in grid.split(";"))):
    key, _, values = part.partition("=")
    key = key.strip()
    if key not in config:
      raise ValueError(f"--grid: {key!r} is not a field of the config")
    kind = config.get_ref(key).get_type()  # declared type, also for None placeholders
    axes.append((key, [kind(v.strip()) if kind is not bool else v.strip() == "True"
                       for v in values.split(",")]))
  if not axes:
    raise ValueError(f"--grid: expected 'key=v1,v2;...', got {grid!r}")
  return axes


def tune(config: ml_collections.ConfigDict, grid: str, workdir: str, split: str = "validation") -> List[Dict]:
  """Trains every combination of ``grid`` on validation ``split``; rows of validation scores (tuning.json).

  Each trial is ``config`` with ``eval_split=split``, no baselines and no
  target, run in ``<workdir>/<key=value_...>``; its row holds the grid values,
  the learned codes' scores (the table's columns: tie-aware AP, NDCG, ... for
  TALR, kNN error and precision for RankNet / LambdaRank) and the training time.
  """
  if split not in ("validation", "validation_heldout"):
    raise ValueError(f"split: expected 'validation' or 'validation_heldout', got {split!r}")
  axes = parse_grid(grid, config)
  rows = []
  for values in itertools.product(*(v for _, v in axes)):
    trial = ml_collections.ConfigDict(config.to_dict())
    trial.eval_split = split
    trial.baselines = ()
    trial.target = 0.0
    setting = dict(zip((k for k, _ in axes), values))
    trial.update(setting)
    name = "_".join(f"{k}={v}" for k, v in setting.items())
    results = train_and_evaluate(trial, os.path.join(workdir, name))
    row = results["rows"][0]
    rows.append({**setting, **{k: row[k] for k, _ in results["columns"] if k in row},
                 "train_time": results["summary"]["train_time"]})
    print(rows[-1], flush=True)
  io.atomic_write_json(os.path.join(workdir, "tuning.json"),
                       {"config": config.to_dict(), "split": split, "rows": rows})
  return rows
