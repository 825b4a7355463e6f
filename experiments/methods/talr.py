r"""TALR (He et al. 2018): a hash mapping trained on a relaxed tie-aware metric, evaluated tie-aware.

``config.method = "talr"`` (``configs/talr_ap.py``, ``configs/talr_ndcg.py``). The run trains
``config.model`` on class-balanced minibatches (``config.batch_per_class`` per class),
relaxed AP (``config.objective="ap"``) or NDCG (``"ndcg"``) of ``config.distance`` with slope
``config.alpha`` and soft-histogram width ``config.width``, logs periodic tie-aware AP and
NDCG on the evaluation queries, and ends with the tie-aware table of the learned codes beside
``config.baselines`` (:func:`hashjax.evaluate.evaluate_codes`). ``config.num_devices > 1`` trains
data-parallel over that many devices: each minibatch's queries split over them (``"query_vs_database"``: the
database sample copied to each), the parameters replicated; the same numbers as one device. The evaluation
database is then split by rows over the same devices, each process encoding only its own rows
(:func:`experiments.fitting.encode_split`), and counted shard by shard; the queries are copied to every device.
"""

from __future__ import annotations

import functools
from typing import Callable, Dict

import jax
import ml_collections
import numpy as np

from experiments import augment, fitting, reporting, tasks
from hashjax import data, mappings
from hashjax.evaluate import evaluate_codes
from hashjax import train as train_lib
from hashjax.objectives import talr

#: ``config.objective``: relaxed AP or relaxed NDCG (tie-aware), or the tie-unaware Smooth-AP control.
OBJECTIVES = ("ap", "ndcg", "tie_unaware_ap")
#: ``config.setting``: each minibatch item against the others, or the minibatch against the training set.
SETTINGS = ("query_vs_rest", "query_vs_database")
#: What the periodic evaluation logs.
EVAL_KEYS = ("tie_aware_ap", "tie_aware_ndcg")


def num_levels(task: tasks.Task) -> int:
  """Affinity levels ``V``: 2 for labels, 11 for the Euclidean levels 0 / 1 / 2 / 5 / 10, one more than the most
  labels of an item for shared labels."""
  if task.affinity == "shared_labels":
    return int(task.label_sets.sum(axis=1).max()) + 1
  return 2 if task.affinity == "label" else max(data.TALR_LEVELS) + 1


def evaluate(config: ml_collections.ConfigDict, task: tasks.Task, query_words, db_words) -> Dict:
  """The tie-aware table of :func:`hashjax.evaluate.evaluate_codes` (``config.radius``, ``config.precision_k``).

  ``db_words`` holds the task's database, or is split by rows over devices with padding rows past it
  (:func:`experiments.fitting.encode_split`), which are not counted."""
  kwargs = dict(num_bits=config.bits, radius=config.radius, k=config.precision_k, num_db=len(task.database))
  if task.affinity == "label":
    return evaluate_codes(query_words, db_words, query_labels=task.labels[task.query],
                                  db_labels=task.labels[task.database], **kwargs)
  return evaluate_codes(query_words, db_words, affinity=tasks.eval_affinity(task), **kwargs)


def make_objective(config: ml_collections.ConfigDict, mapping, task: tasks.Task) -> Callable:
  """``loss_fn(params, batch, step)`` of ``config.setting``: query-vs-rest or query-vs-database.

  ``config.objective="tie_unaware_ap"`` trains query-vs-rest on Smooth-AP of the relaxed distances with
  temperature ``config.temperature`` (:func:`hashjax.objectives.talr.tie_unaware_ap`), the tie-unaware
  control for TALR-AP.

  ``config.alpha_final > 0`` anneals the slope linearly from ``config.alpha``
  over ``config.num_steps`` (:func:`hashjax.mappings.alpha_schedule`).
  """
  alpha = config.alpha
  if config.alpha_final and config.alpha_final != alpha:
    alpha = functools.partial(mappings.alpha_schedule, init=alpha, final=config.alpha_final, steps=config.num_steps)
  if config.objective == "tie_unaware_ap":  # query-vs-rest only (experiments.methods.checks)
    return talr.tie_unaware_ap(mapping, num_bits=config.bits, temperature=config.temperature,
                               distance=config.distance, alpha=alpha)
  if config.objective == "ap":
    metric = talr.metric_fn("ap", harmonic=config.harmonic)
  elif config.objective == "ndcg":
    metric = talr.metric_fn("ndcg", discount=config.discount)
  else:
    raise ValueError(f"config.objective: expected one of {list(OBJECTIVES)}, got {config.objective!r}")
  kwargs = dict(metric=metric, num_bits=config.bits, num_levels=2 if config.objective == "ap" else num_levels(task),
                distance=config.distance, alpha=alpha, width=config.width)
  if config.setting == "query_vs_rest":
    return talr.query_vs_rest(mapping, **kwargs)
  if config.setting == "query_vs_database":
    return talr.query_vs_database(mapping, cached=config.database_cached, **kwargs)
  raise ValueError(f"config.setting: expected one of {list(SETTINGS)}, got {config.setting!r}")


def make_batch_fn(config: ml_collections.ConfigDict, task: tasks.Task, *, labels: bool = False
                  ) -> Callable[[int], Dict]:
  """``batch_fn(step)`` of ``config.setting``, a pure function of the step.

  ``"query_vs_rest"``: a class-balanced minibatch (``config.batch_per_class``
  per class), each item a query against the others. ``"query_vs_database"``:
  the same minibatch as queries against the rest of the training set, or a
  uniform sample of ``config.database_size`` of it (0: all of it). With
  ``config.augment_shift = s > 0`` every training image is translated by a
  random ``(dy, dx)`` in ``[-s, s]^2`` (:func:`experiments.augment.shift_images`);
  with ``config.input_noise = sigma > 0`` Gaussian noise of standard deviation
  ``sigma`` is added to every training feature (after any shift). Affinities
  are those of the original items; AP reads binary relevance (any level >= 1).
  A config without ``setting`` (``config.method="deep"``) trains query-vs-rest; ``labels``
  adds the minibatch's class labels ``"labels"`` ``int32[M]`` (the class-based deep hashing losses).
  """
  if task.affinity == "neighbors":
    raise ValueError("config.affinity: expected 'label', 'euclidean' or 'shared_labels' for TALR, got 'neighbors'")
  x = task.features
  sampler = train_lib.balanced_sampler(task.labels[task.train], config.batch_per_class, seed=config.seed)
  setting = config.get("setting", "query_vs_rest")
  db_size = int(config.get("database_size", 0))
  shift = augment.check_augment_shift(config, x)
  noise = float(config.input_noise)

  def relevance(rows, cols):
    a = tasks.affinity(task, rows, cols)
    return a if config.objective == "ndcg" else (a > 0).astype(np.int32)

  def features(rows, step, stream):
    if not shift and not noise:
      return x[rows]
    rng = np.random.default_rng([config.seed, step, stream])
    out = x[rows]
    if shift:
      out = np.asarray(augment.shift_images(out, rng.integers(-shift, shift + 1, size=(len(rows), 2)),
                                           max_shift=shift), dtype=out.dtype)
    if noise:
      out = out + rng.normal(0.0, noise, size=out.shape).astype(out.dtype)
    return out

  def batch_fn(step):
    picked = sampler(step)
    idx = task.train[picked]
    if setting != "query_vs_database":
      batch = {"features": features(idx, step, 2), "affinity": relevance(idx, idx)}
    else:
      rest = np.delete(task.train, picked)
      if db_size:
        rng = np.random.default_rng([config.seed, step, 1])
        rest = rest[np.sort(rng.choice(len(rest), db_size, replace=False))]
      batch = {"features": features(idx, step, 2), "db_features": features(rest, step, 3),
               "affinity": relevance(idx, rest)}
    if labels:
      batch["labels"] = task.labels[idx]
    return batch

  return batch_fn


def make_eval_fn(config: ml_collections.ConfigDict, task: tasks.Task, mapping, mesh=None
                 ) -> Callable[[object], Dict]:
  """``eval_fn(params)``: the :data:`EVAL_KEYS` of :func:`evaluate` on the mapping's codes of the queries and
  the database, what :func:`experiments.fitting.fit` logs periodically. With the training ``mesh``, the
  parameters come to the host and each process encodes its own database rows, split over the mesh
  (:func:`experiments.fitting.encode_split`)."""
  x = task.features

  def eval_fn(params):
    if mesh is None:
      return pick(evaluate(config, task, mappings.encode(mapping, params, x[task.query]),
                           mappings.encode(mapping, params, x[task.database])))
    host = jax.device_get(params)
    words = fitting.encode_split(lambda f: mappings.encode(mapping, host, f), x, task.query, task.database,
                                 mesh=mesh)
    return pick(evaluate(config, task, *words))

  def pick(result):
    return {k: result[k] for k in EVAL_KEYS}

  return eval_fn


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> Dict:
  """Trains, checkpoints and evaluates as ``config`` says; writes ``<workdir>/model`` and returns (and writes)
  the results dict."""
  task = tasks.make_task(config)
  mapping, params = fitting.make_mapping(config, task)
  score = functools.partial(evaluate, config, task)
  mesh = fitting.device_mesh(config, batch_rows=config.batch_per_class * task.num_classes,
                            rows_from=f"config.batch_per_class x {task.num_classes} classes")
  replicated = ("db_features",) if mesh and config.setting == "query_vs_database" else ()
  params, history = fitting.fit(config, workdir, params=params, loss_fn=make_objective(config, mapping, task),
                               batch_fn=make_batch_fn(config, task),
                               eval_fn=make_eval_fn(config, task, mapping, mesh), mesh=mesh, replicated=replicated)
  record = reporting.recorded_config(config)  # every TALR option is a literal value of its config
  model = reporting.save_model(workdir, mapping, params, task, record)
  rows = reporting.result_rows(config, task, name=f"talr-{config.objective}-{config.model}",
                               learned_words=lambda: reporting.model_words(model, task, mesh), evaluate=score,
                               mesh=mesh, workdir=workdir)
  return reporting.write_results(workdir, record, rows, history)
