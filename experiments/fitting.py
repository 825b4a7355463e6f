"""The mapping and optimizer a config names, the device mesh, the training run, and the baselines' models."""

from __future__ import annotations

import os
from typing import Callable, Optional, Sequence

from absl import logging
import jax
import ml_collections
import numpy as np
import optax

from experiments import tasks
from hashjax import _checks, baselines, mappings, models, sharding
from hashjax import train as train_lib

#: ``config.optimizer`` (:func:`make_optimizer`).
OPTIMIZERS = ("adam", "sgd")



def make_mapping(config: ml_collections.ConfigDict, task: tasks.Task):
  """``(mapping, params)``: ``config.model`` of ``config.bits`` on inputs centred on the training mean.

  ``config.standardize`` also divides by the training standard deviation;
  ``config.init`` is the weight initialisation (``"lecun"`` or Nair's ``"nair"``),
  ``config.hidden`` the MLP's hidden widths (a CNN's dense layers after its
  convolutions); for ``config.model == "cnn"``, ``config.image_shape`` and
  ``config.channels`` (defaults :data:`hashjax.mappings.DEFAULT_IMAGE_SHAPE`
  and :data:`hashjax.mappings.DEFAULT_CHANNELS` where the config has no such
  field); ``config.seed`` draws the weights.
  """
  x = task.features[task.train]
  mean, scale = mappings.feature_stats(x)
  hidden = tuple(config.hidden) if config.model in ("mlp", "cnn") else None
  cnn = config.model == "cnn"
  image_shape = tuple(config.get("image_shape", mappings.DEFAULT_IMAGE_SHAPE)) if cnn else None
  channels = tuple(config.get("channels", mappings.DEFAULT_CHANNELS)) if cnn else None
  mapping = mappings.make_mapping(config.model, num_bits=config.bits, hidden=hidden, init=config.init,
                                  mean=mean, scale=scale if config.standardize else None, image_shape=image_shape,
                                  channels=channels)
  return mapping, mappings.init(jax.random.key(config.seed), mapping, x[:2])


def make_optimizer(config: ml_collections.ConfigDict) -> optax.GradientTransformation:
  """``config.optimizer`` on the config's learning-rate schedule.

  ``"adam"`` (AdamW when ``config.weight_decay > 0``) or ``"sgd"`` with
  ``config.momentum`` (and decoupled weight decay). The rate follows
  :func:`hashjax.train.learning_rate_schedule`: peak ``config.learning_rate``,
  ``config.lr_schedule`` (``"constant"`` or ``"cosine"``), ``config.warmup_steps``
  of linear warmup, decay to ``config.lr_final_fraction`` of the peak at ``config.num_steps``.
  """
  kind = _checks.check_option("config.lr_schedule", config.lr_schedule, train_lib.SCHEDULES)
  lr = train_lib.learning_rate_schedule(config.learning_rate, num_steps=max(int(config.num_steps), 1), kind=kind,
                                        warmup_steps=config.warmup_steps,
                                        final_fraction=float(config.lr_final_fraction))
  decay = float(config.weight_decay)
  if config.optimizer == "adam":
    return optax.adamw(lr, weight_decay=decay) if decay else optax.adam(lr)
  if config.optimizer == "sgd":
    sgd = optax.sgd(lr, momentum=config.momentum)
    return optax.chain(optax.add_decayed_weights(decay), sgd) if decay else sgd
  raise ValueError(f"config.optimizer: expected one of {list(OPTIMIZERS)}, got {config.optimizer!r}")


def start_processes(config: ml_collections.ConfigDict) -> int:
  """Joins the run of ``config.num_processes`` processes (:func:`hashjax.sharding.initialize_processes`, with
  ``config.process_id`` and ``config.coordinator_address``; a None field: its ``JAX_*`` environment variable);
  returns the number of processes (1: nothing started). Called before any jax computation."""
  try:
    return sharding.initialize_processes(num_processes=config.get("num_processes"),
                                         process_id=config.get("process_id"),
                                         coordinator_address=config.get("coordinator_address"))
  except ValueError as e:
    raise ValueError(f"config.{e}") from None


def device_mesh(config: ml_collections.ConfigDict, *, batch_rows: Optional[int] = None, rows_from: str = ""):
  """The mesh of ``config.num_devices > 1`` (data parallelism, :func:`hashjax.sharding.data_mesh`), else None.

  Over several processes (:func:`start_processes`), the mesh spans every device of every process
  (``config.num_devices`` is then 1 or that count). ``batch_rows`` is the leading axis of the batch's split
  leaves (``rows_from`` tells which config fields make it, for the error): the device count must divide it,
  since a padded batch would change the loss. None: nothing is trained (an evaluation's mesh only splits the
  database, padded as needed).
  """
  n = config.get("num_devices", 1)
  n = _checks.check_int("config.num_devices", 1 if n is None else n, low=1)
  if jax.process_count() > 1:
    if n not in (1, jax.device_count()):
      raise ValueError(f"config.num_devices: expected 1 or the {jax.device_count()} devices of the "
                       f"{jax.process_count()} processes (the mesh spans them all), got {n}")
    n = jax.device_count()
  if n == 1:
    return None
  if n > jax.device_count():
    raise ValueError(f"config.num_devices: expected at most the {jax.device_count()} device(s) jax sees, got {n}")
  if batch_rows is not None and batch_rows % n:
    raise ValueError(f"config.num_devices: expected a divisor of the batch's {batch_rows} rows ({rows_from}), "
                     f"since the batch is split over the devices, got {n}")
  return sharding.data_mesh(n)


def encode_split(encode: Callable, features: np.ndarray, query, database, *, mesh=None):
  """``(query_words, db_words)``: ``encode(features[rows]) -> uint32[rows, W]`` of the queries and the database.

  ``mesh`` None: both on one device. A mesh (:func:`device_mesh`): the database is split by rows over its
  devices, each process encoding only its own rows (:func:`hashjax.sharding.process_rows`), laid out by
  :func:`hashjax.sharding.shard_process_rows` and padded to a multiple of the device count (the rows from
  ``len(database)`` on are padding: pass ``num_db=len(database)`` to :func:`hashjax.evaluate.evaluate_codes`);
  the query words, the same in every process, come back as numpy. ``encode`` then computes on this process's
  devices alone (parameters on the host, not laid out over the mesh).
  """
  query_words = encode(features[query])
  if mesh is None:
    return query_words, encode(features[database])
  num_db = len(database)
  rows = sharding.process_rows(num_db, mesh)
  logging.log_first_n(logging.INFO, "evaluation database: process %d encodes rows %d:%d of %d over %d devices", 1,
                      jax.process_index(), rows.start, rows.stop, num_db, mesh.size)
  mine = database[rows]
  width = query_words.shape[1]
  local = np.asarray(encode(features[mine])) if len(mine) else np.zeros((0, width), np.uint32)
  return np.asarray(query_words), sharding.shard_process_rows(local, mesh, num_rows=num_db, pad=True,
                                                               name="db_words")


def fit(config: ml_collections.ConfigDict, workdir: str, *, params, loss_fn: Callable, batch_fn: Callable,
        eval_fn: Callable, batch_size: Optional[int] = None, mesh=None, replicated: Sequence[str] = ()):
  """:func:`hashjax.train.train` as the config says; checkpoints in ``<workdir>/checkpoints``.

  ``config.num_steps``, ``log_every``, ``eval_every`` and ``checkpoint_every``
  (None or 0: only at the start and end), the optimizer of
  :func:`make_optimizer`, and ``config.target > 0``: the time to reach
  ``config.target_metric`` (minimised when it is an error, else maximised).
  ``mesh`` (:func:`device_mesh`): data-parallel over its devices, the batch keys ``replicated`` copied to each.
  Restarting resumes from the last checkpoint. Returns ``(params, history)``.
  """
  target = None
  if config.target:
    target = (config.target_metric, config.target, "min" if config.target_metric.endswith("error") else "max")
  return train_lib.train(
      params=params, loss_fn=loss_fn, optimizer=make_optimizer(config), batch_fn=batch_fn,
      num_steps=config.num_steps, workdir=os.path.join(workdir, "checkpoints"), eval_fn=eval_fn,
      eval_every=config.eval_every or 0, checkpoint_every=config.checkpoint_every or 0,
      log_every=config.log_every, target=target, batch_size=batch_size, mesh=mesh, replicated=replicated)


def baseline_model(method: str, train_features: np.ndarray, *, num_bits: int, seed: int, train_labels=None,
                   config=None) -> models.Model:
  """Baseline ``method`` fitted on ``train_features``, as a :class:`hashjax.models.Model`.

  The key is ``fold_in(key(seed), num_bits)``, so every experiment that runs a
  baseline at a given seed and length gets the very same codes. A supervised
  baseline (``hashjax.baselines.SUPERVISED``) learns from ``train_labels``.
  """
  labels = train_labels if method in baselines.SUPERVISED else None
  params = baselines.fit(method, train_features, num_bits=num_bits,
                         key=jax.random.fold_in(jax.random.key(seed), num_bits), labels=labels)
  return models.from_baseline(method, params, train_features=train_features, config=config)


def baseline_words(method: str, features: np.ndarray, train, query, database, *, num_bits: int,
                   seed: int, labels: np.ndarray, mesh=None):
  """Fits baseline ``method`` on ``features[train]`` (a supervised one with ``labels[train]``;
  :func:`baseline_model`); returns packed ``(query_words, db_words)``, the database split over ``mesh``'s
  devices when one is given (:func:`encode_split`)."""
  model = baseline_model(method, features[train], num_bits=num_bits, seed=seed, train_labels=labels[train])
  return encode_split(model.encode, features, query, database, mesh=mesh)
