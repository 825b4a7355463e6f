"""Pieces every experiment shares: datasets, the retrieval protocol and its task, the mapping and
optimizer a config names, image shifts, the training run, result rows and the table.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import os
import time
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence

from absl import logging
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from experiments import plots
from hashjax import _checks, baselines, data, io, mappings, models, sharding
from hashjax import train as train_lib

# --------------------------------------------------------------------------- data and protocol


#: ``config.eval_split``: the protocol's queries, or one of two validation splits carved from the training set.
EVAL_SPLITS = ("test", "validation", "validation_heldout")
#: ``config.optimizer`` (:func:`make_optimizer`).
OPTIMIZERS = ("adam", "sgd")


class Protocol(NamedTuple):
  """A labelled dataset split into queries, database and a training subset."""
  features: np.ndarray  # float32 [num_items, dim]
  labels: np.ndarray  # int32 [num_items]
  split: data.RetrievalSplit
  name: str


def load_dataset(name: str, *, tfds_split: str = "test", data_dir: str | None = None):
  """Features and labels of a dataset named in a config.

  ``mnist_t10k`` (embedded, the default) and ``digits`` (scikit-learn) are
  offline; ``tfds:<name>`` (e.g. ``tfds:mnist``, ``tfds:cifar10``) reads a
  prepared tensorflow-datasets copy through ``data_source``; your own
  labelled images come as ``idx:<images file>,<labels file>`` (an IDX pair,
  e.g. MNIST's training set or EMNIST digits) or ``npz:<file>`` (arrays
  ``features`` and ``labels`` saved with ``numpy.savez``).
  """
  if name == "mnist_t10k":
    return data.load_mnist_t10k()
  if name == "digits":
    return data.load_digits()
  if name.startswith("tfds:"):
    return data.load_tfds(name[len("tfds:"):], split=tfds_split, data_dir=data_dir)
  if name.startswith("idx:"):
    paths = name[len("idx:"):].split(",")
    if len(paths) != 2 or not all(paths):
      raise ValueError(f"config.dataset: expected 'idx:<images file>,<labels file>', got {name!r}")
    return data.load_idx_images(*paths)
  if name.startswith("npz:") and name[len("npz:"):]:
    return data.load_npz(name[len("npz:"):])
  raise ValueError("config.dataset: expected 'mnist_t10k', 'digits', 'tfds:<name>', "
                   f"'idx:<images>,<labels>' or 'npz:<file>', got {name!r}")


def load_protocol(config: ml_collections.ConfigDict) -> Protocol:
  """The dataset and its seeded query/database/train split, as the config names them."""
  features, labels = load_dataset(config.dataset, tfds_split=config.get("tfds_split", "test"),
                                  data_dir=config.get("data_dir", None))
  split = data.retrieval_split(labels, queries_per_class=config.queries_per_class,
                               train_per_class=config.train_per_class, seed=config.seed)
  return Protocol(features.astype(np.float32), labels.astype(np.int32), split, config.dataset)


def evaluation_split(config: ml_collections.ConfigDict):
  """``(protocol, train, query, database)`` index sets for ``config.eval_split``.

  ``"test"``: the protocol's training subset, queries and database.
  ``"validation"``: ``config.val_per_class`` per class of the training subset
  become the queries, searched against (and trained on) the rest of it, the
  split on which hyper-parameters were first chosen. Its database holds only
  trained-on items, so it cannot see how codes of unseen items generalise.
  ``"validation_heldout"``: mirrors the test protocol, whose database holds
  items never trained on (4,000 of 9,000 on MNIST-10k, 44%). The same
  ``config.val_per_class`` queries per class are carved out first, then
  ``config.val_heldout_per_class`` further items per class are held out of
  training but kept in the database; the model trains on the rest, and the
  database is the rest plus the held-out items. With 500 training items per
  class, 100 queries and 175 held out: training on 225 per class, a database of
  400 per class of which 175 (44%) are unseen, 1,000 queries as in the test.
  Both validation variants draw from ``config.seed``; they share their queries.
  """
  protocol = load_protocol(config)
  split = protocol.split
  if config.eval_split in ("validation", "validation_heldout"):
    val = data.validation_split(split.train, labels=protocol.labels, per_class=config.val_per_class,
                                seed=config.seed)
    if config.eval_split == "validation":
      return protocol, val.train, val.validation, val.train
    held = data.validation_split(val.train, labels=protocol.labels,
                                 per_class=config.val_heldout_per_class,
                                 seed=np.random.default_rng([config.seed, 1]))
    # Trained on held.train; the database is all of val.train (held.train + held.validation).
    return protocol, held.train, val.validation, val.train
  if config.eval_split != "test":
    raise ValueError(f"config.eval_split: expected one of {list(EVAL_SPLITS)}, "
                     f"got {config.eval_split!r}")
  return protocol, split.train, split.query, split.database


# --------------------------------------------------------------------------- the task: split and relevance

#: ``config.affinity``: same label; TALR's multi-level Euclidean levels (the closest 5 / 1 / 0.2 /
#: 0.1% of training pairs -> 1 / 2 / 5 / 10); or Nair's Sec. 5.2 relevance, the
#: ``config.num_neighbors`` Euclidean nearest neighbours in feature space.
AFFINITIES = ("label", "euclidean", "neighbors")


class Task(NamedTuple):
  """An evaluation split and its relevance; ``train``, ``query`` and ``database`` index ``features``."""
  features: np.ndarray  # float32 [num_items, dim]
  labels: np.ndarray  # int32 [num_items]
  train: np.ndarray
  query: np.ndarray
  database: np.ndarray
  num_classes: int
  affinity: str  # one of AFFINITIES
  thresholds: Optional[np.ndarray] = None  # "euclidean": squared-distance thresholds of the levels
  train_relevance: Optional[np.ndarray] = None  # "neighbors": bool [n_train, n_train], positions in train
  eval_relevance: Optional[np.ndarray] = None  # "neighbors": bool [n_query, n_database]
  train_neighbors: Optional[int] = None  # "neighbors": config.train_neighbors resolved to a count


def make_task(config: ml_collections.ConfigDict) -> Task:
  """The split of ``config.eval_split`` (:func:`evaluation_split`) with the relevance of ``config.affinity``.

  ``"neighbors"``: an evaluation query's relevant items are its
  ``config.num_neighbors`` Euclidean nearest neighbours in the database; a
  training query's, its ``config.train_neighbors`` nearest in the training set
  (``"scaled"``: the same fraction of the set, ``round(num_neighbors (n_train - 1) / n_database)``).
  """
  kind = _checks.check_option("config.affinity", config.affinity, AFFINITIES)
  protocol, train, query, database = evaluation_split(config)
  x = protocol.features
  thresholds = train_rel = eval_rel = k_train = None
  if kind == "euclidean":
    thresholds = data.euclidean_thresholds(x[train])
  elif kind == "neighbors":
    k = _checks.check_positive_int("config.num_neighbors", config.num_neighbors)
    k_train = config.train_neighbors
    if k_train == "scaled":
      k_train = max(1, int(round(k * (len(train) - 1) / len(database))))
    k_train = _checks.check_positive_int("config.train_neighbors", k_train)
    train_rel = euclidean_neighbors(x[train], x[train], num_neighbors=k_train, exclude_self=True)
    eval_rel = euclidean_neighbors(x[query], x[database], num_neighbors=k,
                                   exclude_self=config.eval_split == "validation")
  num_classes = int(protocol.labels.max()) + 1
  logging.info("%s: %d training items, %d evaluation queries, %d database items (eval split %s, affinity %s)",
               config.dataset, len(train), len(query), len(database), config.eval_split, kind)
  return Task(x, protocol.labels, train, query, database, num_classes, kind, thresholds, train_rel, eval_rel,
              k_train)


def euclidean_neighbors(query_features: np.ndarray, db_features: np.ndarray, *, num_neighbors: int,
                        exclude_self: bool = False, block: int = 1024) -> np.ndarray:
  r"""bool ``[Q, N]``: ``db`` item ``j`` is among the ``num_neighbors`` Euclidean nearest of query ``i``.

  .. math:: R_{ij} = [\, |\{ l : \|x_i - y_l\| < \|x_i - y_j\| \}| < n \,]

  (ties at the ``n``-th distance are broken by index). With ``exclude_self``
  (queries = database), an item is never its own neighbour.

  >>> x = np.array([[0.0], [1.0], [3.0], [7.0]], np.float32)
  >>> euclidean_neighbors(x, x, num_neighbors=1, exclude_self=True).astype(int).tolist()
  [[0, 1, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]]
  """
  q = np.asarray(query_features, np.float64)
  db = np.asarray(db_features, np.float64)
  n = db.shape[0] - (1 if exclude_self else 0)
  if not 1 <= num_neighbors <= n:
    raise ValueError(f"num_neighbors: expected an int in [1, {n}], got {num_neighbors!r}")
  db_sq = np.sum(db * db, axis=1)
  out = np.zeros((q.shape[0], db.shape[0]), bool)
  for start in range(0, q.shape[0], block):
    rows = q[start:start + block]
    d = db_sq[None, :] - 2.0 * rows @ db.T
    if exclude_self:
      d[np.arange(rows.shape[0]), start + np.arange(rows.shape[0])] = np.inf
    nearest = np.argpartition(d, num_neighbors - 1, axis=1)[:, :num_neighbors]
    out[start + np.arange(rows.shape[0])[:, None], nearest] = True
  return out


def affinity(task: Task, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
  """int32 ``[len(rows), len(cols)]`` affinity of two index sets: label agreement or the Euclidean levels."""
  if task.affinity == "label":
    return np.asarray(data.label_affinity(task.labels[rows], task.labels[cols]))
  if task.affinity == "euclidean":
    return data.euclidean_affinity_levels(task.features[rows], task.features[cols],
                                          thresholds=task.thresholds).astype(np.int32)
  raise ValueError("task.affinity: 'neighbors' relevance exists only between the task's own sets "
                   "(train_relevance, eval_relevance)")


def eval_affinity(task: Task) -> np.ndarray:
  """int32 ``[n_query, n_database]``: the relevance the evaluation queries are scored with."""
  if task.eval_relevance is not None:
    return task.eval_relevance.astype(np.int32)
  return affinity(task, task.query, task.database)


# --------------------------------------------------------------------------- model, optimizer, augmentation


def make_mapping(config: ml_collections.ConfigDict, task: Task):
  """``(mapping, params)``: ``config.model`` of ``config.bits`` on inputs centred on the training mean.

  ``config.standardize`` also divides by the training standard deviation;
  ``config.init`` is the weight initialisation (``"lecun"`` or Nair's ``"nair"``),
  ``config.hidden`` the MLP's hidden widths; ``config.seed`` draws the weights.
  """
  x = task.features[task.train]
  mean, scale = mappings.feature_stats(x)
  hidden = tuple(config.hidden) if config.model == "mlp" else None
  mapping = mappings.make_mapping(config.model, num_bits=config.bits, hidden=hidden, init=config.init,
                                  mean=mean, scale=scale if config.standardize else None)
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


def check_augment_shift(config: ml_collections.ConfigDict, features: np.ndarray) -> int:
  """``config.augment_shift`` as an int ``>= 0``; a positive one needs square images (:func:`image_side`)."""
  shift = _checks.check_int("config.augment_shift", config.augment_shift, low=0)
  if shift:
    image_side(features.shape[1])
  return shift


def image_side(dim: int) -> int:
  """The side of flattened square images of ``dim`` pixels; a ValueError for other features."""
  side = int(round(dim ** 0.5))
  if side * side != dim:
    raise ValueError(f"images: expected flattened square images (for config.augment_shift > 0; set it to 0 "
                     f"for other features), got dimension {dim}")
  return side


def shift_images(images, shifts, *, max_shift: Optional[int] = None) -> jax.Array:
  """Translates square images (flattened rows) by integer ``(dy, dx)`` each, filling with 0.

  Jit-able (Nair's loss shifts inside the loss, so the training set stays
  on the device): each image is padded by ``max_shift`` pixels and a window
  cut at its offset. ``max_shift`` (static) bounds every ``|dy|, |dx|``: None
  reads it from concrete ``shifts``, concrete shifts beyond it raise, and
  traced ones are clipped to it.

  >>> x = np.arange(9, dtype=np.float32).reshape(1, 9)  # one 3 x 3 image
  >>> np.asarray(shift_images(x, np.array([[1, -1]]))).reshape(3, 3).tolist()
  [[0.0, 0.0, 0.0], [1.0, 2.0, 0.0], [4.0, 5.0, 0.0]]
  """
  side = image_side(images.shape[1])
  if max_shift is None or _checks.is_concrete(shifts):
    shifts = np.asarray(shifts)
    largest = int(np.abs(shifts).max(initial=0))
    if max_shift is not None and largest > max_shift:
      raise ValueError(f"shifts: expected offsets in [-{max_shift}, {max_shift}] (max_shift), got {largest}")
    max_shift = largest if max_shift is None else max_shift
  return _shift_images(images, shifts, int(max_shift), side)


@functools.partial(jax.jit, static_argnums=(2, 3))
def _shift_images(images, shifts, pad: int, side: int):
  padded = jnp.pad(images.reshape(-1, side, side), ((0, 0), (pad, pad), (pad, pad)))
  # Traced offsets beyond the bound become the bound, not a wrapped index.
  shifts = jnp.clip(shifts.astype(jnp.int32).reshape(images.shape[0], 2), -pad, pad)
  window = lambda img, d: jax.lax.dynamic_slice(img, (pad - d[0], pad - d[1]), (side, side))
  return jax.vmap(window)(padded, shifts).reshape(images.shape)


# --------------------------------------------------------------------------- training run and results


def device_mesh(config: ml_collections.ConfigDict, *, batch_rows: int, rows_from: str):
  """The mesh of ``config.num_devices > 1`` (data parallelism, :func:`hashjax.sharding.data_mesh`), else None.

  ``batch_rows`` is the leading axis of the batch's split leaves (``rows_from`` tells which config fields make
  it, for the error): the device count must divide it, since a padded batch would change the loss.
  """
  n = config.get("num_devices", 1)
  n = _checks.check_int("config.num_devices", 1 if n is None else n, low=1)
  if n == 1:
    return None
  if n > jax.device_count():
    raise ValueError(f"config.num_devices: expected at most the {jax.device_count()} device(s) jax sees, got {n}")
  if batch_rows % n:
    raise ValueError(f"config.num_devices: expected a divisor of the batch's {batch_rows} rows ({rows_from}), "
                     f"since the batch is split over the devices, got {n}")
  return sharding.data_mesh(n)


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


def baseline_model(method: str, train_features: np.ndarray, *, num_bits: int, seed: int,
                   config=None) -> models.Model:
  """Baseline ``method`` fitted on ``train_features``, as a :class:`hashjax.models.Model`.

  The key is ``fold_in(key(seed), num_bits)``, so every experiment that runs a
  baseline at a given seed and length gets the very same codes.
  """
  params = baselines.fit(method, train_features, num_bits=num_bits,
                         key=jax.random.fold_in(jax.random.key(seed), num_bits))
  return models.from_baseline(method, params, train_features=train_features, config=config)


def baseline_words(method: str, features: np.ndarray, train, query, database, *, num_bits: int,
                   seed: int):
  """Fits baseline ``method`` on ``features[train]`` (:func:`baseline_model`); returns packed
  ``(query_words, db_words)``."""
  model = baseline_model(method, features[train], num_bits=num_bits, seed=seed)
  return model.encode(features[query]), model.encode(features[database])


def result_rows(config: ml_collections.ConfigDict, task: Task, *, name: str, learned_words: Callable,
                evaluate: Callable) -> List[Dict]:
  """Table rows: the learned codes (``learned_words() -> (query_words, db_words)``), then ``config.baselines``.

  ``evaluate(query_words, db_words) -> {metric: value}`` scores each; the
  learned row also holds ``eval_seconds`` (encoding and evaluation). With
  ``config.plots``, every row also holds the ``curves`` the figures are drawn from
  (:func:`experiments.plots.distance_curves`).
  """
  if config.plots:
    relevance = ({"query_labels": task.labels[task.query], "db_labels": task.labels[task.database]}
                 if task.affinity == "label" else {"affinity": eval_affinity(task)})

  def row(method, words, **extra):
    out = {"method": method, "bits": config.bits, **plain(evaluate(*words)), **extra}
    if config.plots:
      out["curves"] = plots.distance_curves(*words, num_bits=config.bits, **relevance)
    return out

  start = time.perf_counter()
  words = learned_words()
  rows = [row(name, words, eval_seconds=time.perf_counter() - start)]
  for method in config.baselines:
    rows.append(row(method, baseline_words(method, task.features, task.train, task.query, task.database,
                                           num_bits=config.bits, seed=config.seed)))
  return rows


#: Where a training run writes its model in the workdir (``hashjax.load_model(workdir)`` reads it).
MODEL_DIR = "model"


def recorded_config(config: ml_collections.ConfigDict, resolved: Optional[Dict] = None) -> Dict:
  """The config as run, for ``results.json`` and the saved model: ``config.to_dict()`` with the values the
  trainer resolved at run time (``resolved``: field -> value) in place of the placeholders that stood for them;
  ``eval_every`` / ``checkpoint_every`` None are recorded as the 0 that :func:`fit` reads them as.

  A field still ``None`` afterwards is logged as a warning: every option a run used should be on record.
  """
  record = config.to_dict()
  for key in ("eval_every", "checkpoint_every"):  # None: only at the start and end, as :func:`fit` reads 0
    if key in record and record[key] is None:
      record[key] = 0
  record.update(resolved or {})
  nulls = sorted(k for k, v in record.items() if v is None)
  if nulls:
    logging.warning("config fields recorded as null (no value resolved for them): %s", ", ".join(nulls))
  return record


def save_model(workdir: str, mapping, params, task: Task, record: Dict) -> models.Model:
  """Writes the trained mapping to ``<workdir>/model`` with the run's config ``record``; returns the model.

  Its ``encode`` gives the words the run evaluates (:func:`model_words`), and
  ``hashjax.load_model(workdir)`` restores it.
  """
  model = models.from_mapping(mapping, params, train_features=task.features[task.train], config=record)
  path = model.save(os.path.join(workdir, MODEL_DIR))
  logging.info("model: %s (hashjax.load_model(%r) restores it)", path, workdir)
  return model


def model_words(model: models.Model, task: Task):
  """``(query_words, db_words)`` of ``model`` on the task's queries and database."""
  return model.encode(task.features[task.query]), model.encode(task.features[task.database])


def write_results(workdir: str, config, rows: List[Dict], history: List[Dict],
                  columns: Sequence = None) -> Dict:
  """``{"config", "rows", "summary", "history", "columns"}``, written atomically to ``<workdir>/results.json``.

  ``config``: the record of :func:`recorded_config` (or a ConfigDict, recorded as it is).
  """
  record = config.to_dict() if isinstance(config, ml_collections.ConfigDict) else dict(config)
  results = {"config": record, "rows": rows, "summary": train_summary(history), "history": history,
             "columns": [list(c) for c in (COLUMNS if columns is None else columns)]}
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
  header = f"{'method':<14}{'bits':>5}" + "".join(f"{title:>10}" for _, title in columns)
  lines: List[str] = [header, "-" * len(header)]
  for row in rows:
    cells = "".join(_cell(row.get(key)) for key, _ in columns)
    lines.append(f"{row['method']:<14}{row['bits']:>5}" + cells)
  return "\n".join(lines)


# --------------------------------------------------------------------------- process set-up of the launchers


class _DropLibraryInfo:
  """absl-log filter: drops INFO records emitted from inside orbax (per-save chatter)."""

  def filter(self, record) -> bool:
    import logging as pylogging
    return record.levelno > pylogging.INFO or "/orbax/" not in record.pathname.replace("\\", "/")


def quiet_library_logs() -> None:
  """Keeps experiment logs readable: orbax's per-checkpoint INFO lines are dropped."""
  from absl import logging as absl_logging
  absl_logging.get_absl_handler().addFilter(_DropLibraryInfo())


#: Bytes glibc's malloc keeps at the top of a heap when it grows or trims one (M_TOP_PAD).
MALLOC_TOP_PAD = 256 << 20


def pad_malloc_heaps(top_pad: int = MALLOC_TOP_PAD) -> bool:
  """Lets glibc keep freed memory in its heaps rather than return it to the OS after every step.

  XLA's CPU runtime allocates each execution's temporaries (megabytes for
  LambdaRank's ``[Q, M, M]`` pairs) and frees them at the end; with glibc's
  default pad of 128 KB the heaps of its worker threads shrink and grow again
  every step, and the pages fault back in, which makes training markedly slower
  (docs/performance.md). Setting ``MALLOC_TOP_PAD_`` in the environment has the
  same effect. Setting the pad also freezes glibc's dynamic mmap threshold at
  128 KB, which is left alone (raising it made training slower). Returns False
  (and changes nothing) where the C library has no ``mallopt``.
  """
  try:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    return bool(libc.mallopt(-2, int(top_pad)))  # -2: M_TOP_PAD in glibc's malloc.h
  except (OSError, AttributeError):
    return False


def freeze_gc() -> None:
  """Takes every object alive now out of the garbage collector's scans (``gc.freeze``); call after setup.

  With jax, numpy and the data loaded, each of Python's full collections scans
  all of them, at moments set by allocation counts, so some fall inside first
  calls and would count as compilation. Objects created later are collected as
  usual; the benchmarks call this so that their compile figures time compilation.
  """
  gc.collect()
  gc.freeze()
