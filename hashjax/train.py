r"""One training loop for every learned hash mapping (TALR, RankNet, LambdaRank, ...).

The loop is generic over the objective and the optimizer::

  loss_fn(params, batch, step) -> (loss, aux)      # step: traced int32, e.g. to anneal alpha
  batch_fn(step) -> batch                           # pure in step
  optimizer: optax.GradientTransformation

and :func:`train` runs a single jit-compiled step (:func:`make_train_step`)
``num_steps`` times, logging, evaluating, checkpointing and resuming.

**Determinism contract.** ``batch_fn`` must be a pure function of the step
(draw its randomness from e.g. ``np.random.default_rng([seed, step])``, see
:func:`minibatch_sampler` and :func:`balanced_sampler`). Then a run killed
after a checkpoint and restarted on the same ``workdir`` sees exactly the
batches of an uninterrupted run and ends with bit-identical parameters.

**Checkpoints** (``workdir`` given) are written with
``orbax.checkpoint.CheckpointManager``: each save goes to a temporary
directory that is renamed to its step number once complete (orbax's
``AtomicRenameTemporaryPath`` on local file systems), so a crash mid-save
leaves the previous checkpoint as the latest; leftover temporary directories
are removed on the next start. A checkpoint holds ``params``, ``opt_state``
and a JSON record (step, history, elapsed times, the losses of the current
logging window).

**Damaged checkpoints.** Resuming tries the checkpoints from newest to oldest.
One that does not restore (a truncated array file, a damaged or missing JSON
record, a missing item, a step that does not match its directory, NaN/inf
values) is skipped; once an older one restores, each skipped one is renamed
to ``<step>.corrupt`` (orbax ignores that name, so the step can be saved again;
nothing is deleted) with one warning line naming it and the reason, and the
run continues from the older one, bit-identically to an uninterrupted run.
If none restores, nothing is renamed and ``ValueError`` names each checkpoint
and its reason.

**History** is a list of JSON-friendly dicts, each with ``"kind"``:

* ``"train"``: ``step`` (steps completed), ``loss`` (mean over the steps since
  the previous log), ``examples_per_sec``, ``wall_time``, ``train_time`` and
  the ``aux`` values of the last step;
* ``"eval"``: ``step``, ``wall_time``, ``train_time`` and the metrics of
  ``eval_fn(params)``;
* ``"target"`` (once): the first evaluation at which ``target`` was met, with
  its ``step``, ``wall_time`` and ``train_time`` (time to target).

``wall_time`` is seconds since the run started, summed over the calls that
resumed it (time between calls is not counted); ``train_time`` excludes the time
spent in ``eval_fn`` and in writing checkpoints. An evaluation's times are
taken when it starts, so time to target does not include that evaluation.
"""

from __future__ import annotations

import functools
import json
import math
import os
import time
from typing import Any, Callable, Mapping, Optional, Sequence

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp

from hashjax import _checks
from hashjax import sharding

__all__ = ["make_train_step", "learning_rate_schedule", "minibatch_sampler", "balanced_sampler", "train"]


#: What ``loss_fn`` must be, for error messages.
_LOSS_FN = "(params, batch, step) -> (loss, aux)"


def _check_step_args(loss_fn: Any, optimizer: Any, mesh: Any) -> None:
  _checks.check_callable("loss_fn", loss_fn, what=_LOSS_FN)
  if not (callable(getattr(optimizer, "init", None)) and callable(getattr(optimizer, "update", None))):
    raise ValueError(f"optimizer: expected an optax.GradientTransformation, got {type(optimizer).__name__}")
  _checks.check_type("mesh", mesh, jax.sharding.Mesh, what="a jax.sharding.Mesh (sharding.data_mesh)", allow_none=True)


def make_train_step(loss_fn: Callable, optimizer: optax.GradientTransformation, *, mesh: Any = None) -> Callable:
  r"""A jit-compiled optimisation step for ``loss_fn`` under ``optimizer``.

  .. math:: (\ell, g) = (L, \nabla_\theta L)(\theta, \mathrm{batch}, t), \quad
            (u, s') = \mathrm{update}(g, s, \theta), \quad \theta' = \theta + u

  Args:
    loss_fn: ``loss_fn(params, batch, step) -> (loss, aux)`` with a real scalar
      ``loss`` and a dict ``aux`` of scalars; ``step`` arrives as a traced
      ``int32`` scalar (no recompilation per step).
    optimizer: any ``optax.GradientTransformation``.
    mesh: None, or a :class:`jax.sharding.Mesh` for data parallelism: the step's outputs are replicated over
      it (its inputs laid out by :func:`hashjax.sharding.replicate` and :func:`hashjax.sharding.shard_batch`).

  Returns:
    ``step_fn(params, opt_state, batch, step) -> (params, opt_state, loss, aux)``.

  >>> import optax, jax.numpy as jnp
  >>> loss_fn = lambda p, b, t: (jnp.sum((p - b) ** 2), {})
  >>> step_fn = make_train_step(loss_fn, optax.sgd(0.25))
  >>> p, s, loss, _ = step_fn(jnp.zeros(2), optax.sgd(0.25).init(jnp.zeros(2)), jnp.ones(2), 0)
  >>> p.tolist(), float(loss)
  ([0.5, 0.5], 2.0)
  """
  _check_step_args(loss_fn, optimizer, mesh)
  return _step_fn(loss_fn, optimizer, mesh)


def _step_fn(loss_fn: Callable, optimizer: optax.GradientTransformation, mesh: Any) -> Callable:
  """:func:`make_train_step` of checked arguments."""

  def step_fn(params, opt_state, batch, step):
    step = jnp.asarray(step, jnp.int32)
    (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch, step)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss, aux

  if mesh is None:
    return jax.jit(step_fn)
  return jax.jit(step_fn, out_shardings=jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))


#: Names accepted by :func:`learning_rate_schedule`.
SCHEDULES = ("constant", "cosine")


def learning_rate_schedule(peak: float, *, num_steps: int, kind: str = "constant",
                           warmup_steps: int = 0, final_fraction: float = 0.0) -> optax.Schedule:
  r"""A learning-rate schedule ``step -> lr``: constant, or linear warmup then cosine decay.

  .. math:: \eta(t) = \begin{cases} \eta_0 \, t / W & t < W \\
            \eta_0 \big(f + (1 - f) \tfrac12 (1 + \cos \pi \tfrac{t - W}{T - W})\big) & W \le t \le T
            \end{cases}

  ``"constant"`` is :math:`\eta_0` after the (optional) warmup; ``"cosine"``
  decays to :math:`f \eta_0` at ``num_steps`` (``optax.warmup_cosine_decay_schedule``).
  The value is a pure function of the optimizer's step count, which
  checkpoints hold, so a resumed run follows the same schedule.

  Args:
    peak: :math:`\eta_0 > 0`.
    num_steps: :math:`T \ge 1`, the length of the run.
    kind: one of :data:`SCHEDULES`.
    warmup_steps: :math:`0 \le W < T` steps of linear warmup from 0.
    final_fraction: :math:`f \in [0, 1]`, the cosine's end value over the peak.

  Returns:
    an ``optax.Schedule`` to pass as an optimizer's learning rate.

  >>> s = learning_rate_schedule(1.0, num_steps=10, kind="cosine", warmup_steps=2)
  >>> [round(float(s(t)), 3) for t in (0, 1, 2, 6, 10)]
  [0.0, 0.5, 1.0, 0.5, 0.0]
  >>> float(learning_rate_schedule(0.1, num_steps=10)(7))
  0.1
  """
  peak = _checks.check_number("peak", peak, low=0, low_open=True)
  num_steps = _checks.check_int("num_steps", num_steps, low=1)
  warmup_steps = _checks.check_int_at_most("warmup_steps", warmup_steps, num_steps - 1, low=0,
                                          what=f"num_steps - 1 = {num_steps - 1} (fewer than num_steps)")
  final_fraction = _checks.check_number("final_fraction", final_fraction, low=0, high=1)
  _checks.check_option("kind", kind, SCHEDULES)
  if kind == "cosine":
    return optax.warmup_cosine_decay_schedule(0.0, peak, warmup_steps, num_steps, end_value=peak * final_fraction)
  if not warmup_steps:
    return optax.constant_schedule(peak)
  return optax.join_schedules([optax.linear_schedule(0.0, peak, warmup_steps), optax.constant_schedule(peak)],
                              [warmup_steps])


def minibatch_sampler(num_items: int, batch_size: int, *, seed: int) -> Callable[[int], np.ndarray]:
  r"""Epoch-wise shuffled minibatch indices as a pure function of the step.

  .. math:: e = \lfloor t / K \rfloor,\ k = t \bmod K,\ K = \lfloor N / B \rfloor:\quad
            \mathrm{idx}(t) = \pi_e[kB : (k+1)B],\ \pi_e = \mathrm{perm}(\mathrm{rng}(seed, e))

  Each epoch is a fresh permutation from ``np.random.default_rng([seed,
  epoch])``; the ``N mod B`` items left over by an epoch's permutation are
  skipped in that epoch, so every batch has exactly ``batch_size`` items (one
  compilation).

  Args:
    num_items: ``N >= 1`` items to sample from.
    batch_size: ``1 <= B <= N``.
    seed: non-negative int.

  Returns:
    ``indices(step) -> int64[batch_size]``, distinct within a batch.

  >>> sampler = minibatch_sampler(6, 2, seed=0)
  >>> sorted(np.concatenate([sampler(t) for t in range(3)]).tolist())  # one epoch
  [0, 1, 2, 3, 4, 5]
  >>> bool(np.array_equal(sampler(4), minibatch_sampler(6, 2, seed=0)(4)))
  True
  """
  num_items = _checks.check_int("num_items", num_items, low=1)
  batch_size = _checks.check_int_at_most("batch_size", batch_size, num_items, what=f"num_items={num_items}")
  seed = _checks.check_int("seed", seed, low=0)
  per_epoch = num_items // batch_size
  cache: dict = {}

  def indices(step: int) -> np.ndarray:
    epoch, k = divmod(step, per_epoch)
    if cache.get("epoch") != epoch:  # a cache only: the result depends on (seed, step) alone
      cache["perm"] = np.random.default_rng([seed, epoch]).permutation(num_items)
      cache["epoch"] = epoch
    return cache["perm"][k * batch_size:(k + 1) * batch_size].copy()

  return _checked_steps(indices)


def balanced_sampler(labels: Any, per_class: int, *, seed: int) -> Callable[[int], np.ndarray]:
  r"""Class-balanced minibatch indices: ``per_class`` items of every class, per step.

  .. math:: \mathrm{idx}(t) = \mathrm{shuffle}\Big(\bigcup_{c} \mathrm{choice}(\{i : y_i = c\},\ m)\Big)
            \text{ with } \mathrm{rng}(seed, t)

  Useful for query-vs-rest objectives (TALR), where every query of a batch
  needs relevant items in it. Items are drawn without replacement within a
  class and a step, independently across steps, from
  ``np.random.default_rng([seed, step])``; the batch is shuffled so position
  carries no label information.

  Args:
    labels: ``int[N]`` class labels (any integers; each distinct value is a class).
    per_class: ``m >= 1``, at most the size of the smallest class.
    seed: non-negative int.

  Returns:
    ``indices(step) -> int64[num_classes * per_class]``.

  >>> sampler = balanced_sampler(np.array([0, 0, 0, 1, 1, 2, 2, 2]), 2, seed=0)
  >>> np.bincount(np.array([0, 0, 0, 1, 1, 2, 2, 2])[sampler(5)]).tolist()
  [2, 2, 2]
  """
  _checks.check_array("labels", labels, ndim=1, shape_doc="[N]", kinds="iu", what="integer array of class labels")
  labels = np.asarray(labels)
  classes, counts = np.unique(labels, return_counts=True)
  small = np.argmin(counts)
  most = int(counts[small])
  per_class = _checks.check_int_at_most("per_class", per_class, most, what=f"{most}, class {classes[small]}'s size")
  seed = _checks.check_int("seed", seed, low=0)
  members = [np.flatnonzero(labels == c) for c in classes]

  def indices(step: int) -> np.ndarray:
    rng = np.random.default_rng([seed, step])
    picked = np.concatenate([rng.choice(m, per_class, replace=False) for m in members])
    return rng.permutation(picked)

  return _checked_steps(indices)


def _checked_steps(indices: Callable[[int], np.ndarray]) -> Callable[[int], np.ndarray]:
  """A sampler's ``indices(step)``, given a step that is an int >= 0 (checked)."""
  return lambda step: indices(_checks.check_int("step", step, low=0))


# ----------------------------------------------------------------------------
# The loop: input checks, run bookkeeping, checkpoints, then train() itself.


def _batch_size_of(batch: Any) -> int:
  leaves = [x for x in jax.tree.leaves(batch) if hasattr(x, "shape") and len(x.shape) >= 1]
  if not leaves:
    raise ValueError("batch_size: the batch has no array leaf with a leading axis to derive it from; pass it")
  return int(leaves[0].shape[0])


def _check_target(target: Any) -> Optional[tuple]:
  if target is None:
    return None
  ok = isinstance(target, (tuple, list)) and len(target) in (2, 3) and isinstance(target[0], str)
  ok = ok and isinstance(target[1], (int, float, np.integer, np.floating)) and math.isfinite(target[1])
  ok = ok and (len(target) == 2 or target[2] in ("max", "min"))
  if not ok:
    raise ValueError(f"target: expected (metric_name, value) or (metric_name, value, 'max'|'min'), got {target!r}")
  return (target[0], float(target[1]), target[2] if len(target) == 3 else "max")


def _check_params(params: Any) -> None:
  leaves = jax.tree.leaves(params)
  if not leaves or not all(hasattr(x, "dtype") for x in leaves):
    raise ValueError("params: expected a non-empty pytree of arrays")
  for i, leaf in enumerate(leaves):
    if jnp.issubdtype(leaf.dtype, jnp.inexact):
      _checks.check_finite(f"params (leaf {i})", leaf)


#: Keys of history entries that aux values and metrics may not use.
_RESERVED = ("kind", "step", "loss", "examples_per_sec", "wall_time", "train_time")


def _scalars(name: str, values: Any, what: str) -> dict:
  """``values``, a dict of str keys (not history fields) to real scalars, as floats; abstract values
  (``jax.ShapeDtypeStruct``, of ``jax.eval_shape``) are only checked (None)."""
  _checks.check_type(name, values, Mapping, what=f"{what} to be a dict of scalars")
  out = {}
  for k, v in values.items():
    if not isinstance(k, str) or k in _RESERVED:
      raise ValueError(f"{name}: expected {what} keys to be str other than the history fields {_RESERVED}, got {k!r}")
    abstract = isinstance(v, jax.ShapeDtypeStruct)
    arr = v if abstract else np.asarray(jax.device_get(v))
    if arr.shape != () or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
      raise ValueError(f"{name}: expected {what}[{k!r}] to be a real scalar, got {arr.dtype.name} {arr.shape}")
    out[k] = None if abstract else float(arr)
  return out


def _check_loss_signature(loss_fn: Callable, params: Any, batch: Any) -> None:
  """``loss_fn(params, batch, step)`` must return ``(loss, aux)``: a real scalar and aux as :func:`_scalars` takes
  it (checked on the shapes, before any step runs)."""
  try:
    out = jax.eval_shape(loss_fn, params, batch, jnp.zeros((), jnp.int32))
  except Exception as e:  # pylint: disable=broad-except
    raise ValueError(f"loss_fn: calling loss_fn(params, batch, step) failed: {type(e).__name__}: {e}") from e
  loss, aux = out if isinstance(out, tuple) and len(out) == 2 else (None, None)
  if getattr(loss, "shape", None) != () or not jnp.issubdtype(loss.dtype, jnp.floating):
    raise ValueError("loss_fn: expected it to return (loss, aux) with a real scalar loss, "
                     f"got {jax.tree.map(lambda x: f'{x.dtype}{list(x.shape)}', out)}")
  _scalars("loss_fn", aux, "aux")


def _due(done: int, every: int, num_steps: int) -> bool:
  """Whether an action due every ``every`` steps (0: never) and after the last step is due after ``done`` steps."""
  return done == num_steps or bool(every and done % every == 0)


class _Run:
  """Bookkeeping of one :func:`train` call: history, times, and the losses of the current logging window.

  The history, the elapsed times and the losses of the open logging window
  are saved with each checkpoint (:meth:`meta`) and restored from it
  (:meth:`from_meta`), so a resumed run continues the same history and window.
  """

  def __init__(self, history=(), wall_offset=0.0, train_offset=0.0, pending=(), target_done=False):
    self.history = list(history)
    self.wall_offset = float(wall_offset)
    self.train_offset = float(train_offset)
    self.pending = list(pending)  # [(step, loss)]: losses since the last log, device or float
    self.checked = len(self.pending)  # pending[:checked] are known finite floats
    self.target_done = bool(target_done)
    self.t0 = time.perf_counter()
    self.train_time_here = 0.0
    self.segment_start = self.t0
    self.window_steps = 0  # steps run in this call since the last log
    self.window_train_time = 0.0

  @classmethod
  def from_meta(cls, meta: Mapping) -> "_Run":
    return cls(meta["history"], meta["wall_time"], meta["train_time"],
               [(int(s), float(v)) for s, v in meta["pending"]], meta["target_done"])

  def meta(self, step: int) -> dict:
    # A deep snapshot: orbax may serialise it in a background thread while
    # the loop keeps appending to the history.
    return json.loads(json.dumps(
        {"step": step, "history": self.history, "wall_time": self.wall(),
         "train_time": self.train_time(), "target_done": self.target_done,
         "pending": [[s, v] for s, v in self.pending]}))

  def wall(self) -> float:
    return self.wall_offset + time.perf_counter() - self.t0

  def train_time(self) -> float:
    return self.train_offset + self.train_time_here

  def close_segment(self) -> None:
    now = time.perf_counter()
    self.train_time_here += now - self.segment_start
    self.window_train_time += now - self.segment_start
    self.segment_start = now

  def open_segment(self) -> None:
    self.segment_start = time.perf_counter()

  def add_loss(self, step: int, loss: Any) -> None:
    self.pending.append((step, loss))
    self.window_steps += 1

  def check_pending(self) -> None:
    """Syncs the pending losses; raises FloatingPointError at the first non-finite one."""
    todo = self.pending[self.checked:]
    if not todo:
      return
    values = jax.device_get([loss for _, loss in todo])
    for (step, _), value in zip(todo, values):
      value = float(value)
      if not math.isfinite(value):
        raise FloatingPointError(f"train: the loss became non-finite ({value}) at step {step} (batch_fn({step}) after "
                                 f"{step} updates); lower the learning rate, check the data or clip gradients")
    self.pending[self.checked:] = [(s, float(v)) for (s, _), v in zip(todo, values)]
    self.checked = len(self.pending)

  def log(self, step: int, num_steps: int, batch_size: int, aux: Mapping) -> None:
    """Appends a ``"train"`` entry (mean loss of the window) and opens a new window."""
    seconds = self.window_train_time
    losses = np.asarray([v for _, v in self.pending], np.float64)
    entry = {"kind": "train", "step": step, "loss": float(np.mean(losses)),
             "examples_per_sec": batch_size * self.window_steps / seconds if seconds > 0 else float("nan"),
             "wall_time": self.wall(), "train_time": self.train_time()}
    entry.update(_scalars("loss_fn", aux, "aux"))
    self.history.append(entry)
    logging.info("train: step %d/%d loss %.6g (%.4g examples/s, %.2f s)", step, num_steps,
                 entry["loss"], entry["examples_per_sec"], entry["wall_time"])
    self.pending, self.checked = [], 0
    self.window_steps, self.window_train_time = 0, 0.0

  def evaluate(self, step: int, eval_fn: Callable, params: Any, target: Optional[tuple]) -> None:
    """Appends an ``"eval"`` entry, and a ``"target"`` entry the first time ``target`` is met."""
    entry = {"kind": "eval", "step": step, "wall_time": self.wall(), "train_time": self.train_time()}
    metrics = _scalars("eval_fn", eval_fn(params), "its result")
    entry.update(metrics)
    self.history.append(entry)
    logging.info("train: eval at step %d: %s", step, ", ".join(f"{k}={v:.6g}" for k, v in metrics.items()))
    if target is None or self.target_done:
      return
    name, value, mode = target
    _checks.check_option("target (a metric of eval_fn)", name, sorted(metrics))
    if (metrics[name] >= value) if mode == "max" else (metrics[name] <= value):
      self.target_done = True
      self.history.append({"kind": "target", "metric": name, "target": value, "value": metrics[name],
                           "step": step, "wall_time": entry["wall_time"], "train_time": entry["train_time"]})
      logging.info("train: target %s %s %g reached at step %d after %.3f s (train time %.3f s)",
                   name, ">=" if mode == "max" else "<=", value, step, entry["wall_time"], entry["train_time"])


def _checkpoint_manager(workdir: Any, *, max_to_keep: int, async_checkpoints: bool) -> Optional[ocp.CheckpointManager]:
  if workdir is None:
    return None
  return ocp.CheckpointManager(
      os.path.abspath(os.fspath(workdir)),
      options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True, cleanup_tmp_directories=True,
                                           enable_async_checkpointing=async_checkpoints))


#: Suffix of a checkpoint directory set aside because it does not restore. Orbax lists only directories named
#: by a bare step number, so ``<step>.corrupt`` is neither resumed from, counted against ``max_to_keep`` nor deleted.
_CORRUPT_SUFFIX = ".corrupt"

#: The file orbax's ``JsonCheckpointHandler`` writes inside the ``meta`` item.
_META_FILE = os.path.join("meta", "metadata")


def _reason(error: BaseException) -> str:
  """``"TypeName: first line of the message"``, without tensorstore's spec dump, at most ~400 characters."""
  message = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
  message = str(message).split(" [tensorstore_spec", 1)[0].strip()
  message = message.splitlines()[0] if message else ""
  if len(message) > 400:
    message = message[:397] + "..."
  return f"{type(error).__name__}: {message}" if message else type(error).__name__


def _restore_step(manager: ocp.CheckpointManager, step: int, step_dir: str, params: Any, opt_state: Any) -> tuple:
  """``(params, opt_state, run)`` from checkpoint ``step``; raises ValueError with a one-line reason otherwise."""
  # The JSON record first and alone, so that a damaged one is reported with its file.
  meta_file = os.path.join(step_dir, _META_FILE)
  try:
    meta = manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
  except Exception as e:  # pylint: disable=broad-except
    where = meta_file if isinstance(e, (json.JSONDecodeError, UnicodeDecodeError)) else "meta"  # a damaged file
    raise ValueError(f"{where}: {_reason(e)}") from e
  try:
    recorded = meta["step"]
    run = _Run.from_meta(meta)
  except (KeyError, TypeError, ValueError) as e:
    raise ValueError(f"{meta_file}: not a training record ({_reason(e)})") from e
  if recorded != step:
    raise ValueError(f"{meta_file}: records step {recorded!r}, not the directory's step {step}")
  try:
    state = manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore({"params": params, "opt_state": opt_state})))["state"]
  except Exception as e:  # pylint: disable=broad-except
    raise ValueError(f"state: {_reason(e)}") from e
  # train never saves a non-finite state (the losses are checked first), so one is damage.
  for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
    if jnp.issubdtype(leaf.dtype, jnp.inexact) and not np.isfinite(np.asarray(leaf)).all():
      raise ValueError(f"state: {jax.tree_util.keystr(path)} holds NaN/inf values")
  return state["params"], state["opt_state"], run


def _set_aside(step_dir: str) -> str:
  """Renames ``step_dir`` to ``step_dir.corrupt`` (or ``.corrupt-2``, ... if taken); returns the new path."""
  target, n = step_dir + _CORRUPT_SUFFIX, 1
  while os.path.exists(target):
    n += 1
    target = f"{step_dir}{_CORRUPT_SUFFIX}-{n}"
  os.rename(step_dir, target)
  return target


def _restore(manager: Optional[ocp.CheckpointManager], workdir: Any, params: Any, opt_state: Any,
             num_steps: int) -> tuple:
  """``(params, opt_state, run, start)`` from the newest checkpoint that restores, or the given state at step 0.

  Checkpoints that do not restore (a truncated array file, a damaged JSON record, a missing item, a step
  mismatch) are skipped. Once an older one restores, each skipped one is renamed to ``<step>.corrupt`` (so that
  saving that step again does not collide; nothing is deleted) with one warning line naming it and the reason.
  If none restores, nothing is renamed and a ValueError names each checkpoint and its reason.
  """
  steps = [] if manager is None else sorted(manager.all_steps(), reverse=True)
  if not steps:
    return params, opt_state, _Run(), 0
  if steps[0] > num_steps:
    raise ValueError(f"num_steps: {workdir} holds a checkpoint at step {steps[0]}, beyond "
                     f"num_steps={num_steps}; use a fresh workdir or num_steps >= {steps[0]}")
  skipped = []
  for step in steps:
    # The manager's default name format: the step number itself.
    step_dir = os.fspath(ocp.step.build_step_path(manager.directory, ocp.step.standard_name_format(), step))
    try:
      restored = _restore_step(manager, step, step_dir, params, opt_state)
    except ValueError as e:
      skipped.append((step_dir, str(e)))
      continue
    for bad_dir, reason in skipped:
      moved = _set_aside(bad_dir)
      logging.warning("train: checkpoint %s does not restore (%s); moved it to %s and resuming from step %d",
                      bad_dir, reason, moved, step)
    if skipped:
      manager.reload()  # the manager caches the step list, which no longer holds the renamed steps
    logging.info("train: resumed from %s at step %d of %d", workdir, step, num_steps)
    return restored + (step,)
  raise ValueError(f"workdir: none of the {len(steps)} checkpoint(s) in {workdir} restores (nothing was changed; "
                   "move them away to start over): " + "; ".join(f"{d}: {r}" for d, r in skipped))


def _save(manager: ocp.CheckpointManager, step: int, params: Any, opt_state: Any, run: _Run) -> None:
  manager.save(step, args=ocp.args.Composite(
      state=ocp.args.StandardSave({"params": params, "opt_state": opt_state}),
      meta=ocp.args.JsonSave(run.meta(step))))


def train(*, params: Any, loss_fn: Callable, optimizer: optax.GradientTransformation,
          batch_fn: Callable[[int], Any], num_steps: int, workdir: Optional[str] = None,
          eval_fn: Optional[Callable[[Any], Mapping[str, Any]]] = None, eval_every: int = 0,
          checkpoint_every: int = 0, log_every: int = 100, target: Optional[Sequence] = None,
          batch_size: Optional[int] = None, max_to_keep: int = 3, eval_at_start: bool = True,
          async_checkpoints: bool = True, mesh: Any = None, replicated: Sequence[str] = ()) -> tuple:
  r"""Runs ``num_steps`` optimizer steps with logging, evaluation, checkpoints and resume.

  .. math:: \theta_{t+1} = \theta_t + \mathrm{update}\big(\nabla_\theta L(\theta_t, \mathrm{batch}(t), t)\big),
            \quad t = 0, \dots, T - 1

  With ``workdir``, the run resumes from the newest checkpoint there that
  restores (the given ``params`` then only fix the structure; damaged
  checkpoints are set aside, see the module docstring); a run that already reached
  ``num_steps`` is reloaded and returned without training. A checkpoint is
  written every ``checkpoint_every`` steps and at the end; the last
  ``max_to_keep`` are kept.

  At every log step (every ``log_every`` steps and the last), all losses since
  the previous check are fetched and a non-finite one raises
  ``FloatingPointError`` naming its step; losses are also checked before each
  evaluation and checkpoint, so no non-finite state is ever saved.

  Args:
    params: initial parameters (a pytree of arrays).
    loss_fn: ``loss_fn(params, batch, step) -> (loss, aux)``; see :func:`make_train_step`.
    optimizer: an ``optax.GradientTransformation``.
    batch_fn: ``batch_fn(step) -> batch``, a pure function of the 0-based step.
    num_steps: total steps ``T >= 0`` (counting steps of earlier calls on ``workdir``).
    workdir: checkpoint directory (created if missing); ``None`` for no checkpoints.
    eval_fn: ``eval_fn(params) -> {name: scalar}``, run every ``eval_every`` steps,
      at the end, and at step 0 of a fresh run if ``eval_at_start``.
    eval_every: evaluation period in steps (0: only at start/end).
    checkpoint_every: checkpoint period in steps (0: only at the end).
    log_every: logging period in steps (>= 1).
    target: ``(metric, value)`` (reached when ``metric >= value``) or
      ``(metric, value, "min")`` (when ``metric <= value``): records the time to target.
    batch_size: examples per step for ``examples_per_sec``; default: the leading
      dimension of the first array in the first batch.
    max_to_keep: checkpoints kept (>= 1).
    eval_at_start: evaluate the initial parameters of a fresh run.
    async_checkpoints: let orbax write in a background thread (always waited for
      before returning or raising).
    mesh: None (one device), or a :class:`jax.sharding.Mesh` to train data-parallel over: the parameters and
      optimizer state are replicated on every device (:func:`hashjax.sharding.replicate`), each batch is split
      along its leading axis (:func:`hashjax.sharding.shard_batch`; ``ValueError`` naming the leaf when the
      device count does not divide it), and the one jitted step computes the loss of the whole batch: the
      numbers of one device, up to the order of float sums.
    replicated: with ``mesh``, top-level keys of a dict batch copied to every device instead of split (e.g. a
      pool of items the loss indexes into).

  Returns:
    ``(params, history)``: the final parameters and the list of history dicts
    (module docstring), including the history of earlier calls on ``workdir``.

  Raises:
    ValueError: naming the argument for bad input; naming ``workdir`` and each
      checkpoint's reason when ``workdir`` holds checkpoints and none restores.
    FloatingPointError: when the loss becomes non-finite, naming the step.

  >>> import optax, jax.numpy as jnp
  >>> x = np.random.default_rng(0).normal(size=(64, 2)).astype(np.float32)
  >>> y = x @ np.array([1.0, -2.0], np.float32)
  >>> loss_fn = lambda p, b, t: (jnp.mean((b[0] @ p - b[1]) ** 2), {})
  >>> sampler = minibatch_sampler(64, 8, seed=0)
  >>> batch_fn = lambda t: (x[sampler(t)], y[sampler(t)])
  >>> params, history = train(params=jnp.zeros(2), loss_fn=loss_fn, optimizer=optax.adam(0.1),
  ...                         batch_fn=batch_fn, num_steps=100, log_every=50)
  >>> [h["step"] for h in history], history[1]["loss"] < history[0]["loss"]
  ([50, 100], True)
  >>> np.round(np.asarray(params), 1).tolist()
  [1.0, -2.0]
  """
  _check_step_args(loss_fn, optimizer, mesh)
  _checks.check_callable("batch_fn", batch_fn, what="step -> batch")
  if eval_fn is not None:
    _checks.check_callable("eval_fn", eval_fn, what="params -> dict (or None)")
  periods = (("num_steps", num_steps, 0), ("eval_every", eval_every, 0), ("checkpoint_every", checkpoint_every, 0),
             ("log_every", log_every, 1), ("max_to_keep", max_to_keep, 1))
  num_steps, eval_every, checkpoint_every, log_every, max_to_keep = (
      _checks.check_int(name, value, low=low) for name, value, low in periods)
  batch_size = _checks.check_int("batch_size", batch_size, allow_none=True)
  target = _check_target(target)
  _checks.check_type("workdir", workdir, (str, os.PathLike), what="a directory path", allow_none=True)
  _check_params(params)
  if replicated and mesh is None:
    raise ValueError(f"replicated: expected () without a mesh (nothing is split), got {replicated!r}")
  place = (lambda b: b) if mesh is None else functools.partial(sharding.shard_batch, mesh=mesh, replicated=replicated)

  params = jax.tree.map(jnp.asarray, params)
  if mesh is not None:
    params = sharding.replicate(params, mesh)
  manager = _checkpoint_manager(workdir, max_to_keep=max_to_keep, async_checkpoints=async_checkpoints)
  try:
    opt_state = optimizer.init(params) if mesh is None else sharding.replicate(optimizer.init(params), mesh)
    params, opt_state, run, start = _restore(manager, workdir, params, opt_state, num_steps)
    if mesh is not None:  # a restored state, as the templates were
      params, opt_state = sharding.replicate((params, opt_state), mesh)
    if start == num_steps and start > 0:
      logging.info("train: the run in %s already reached step %d; returning it", workdir, start)
      return params, run.history
    if start == 0 and eval_fn is not None and eval_at_start:
      run.evaluate(0, eval_fn, params, target)
      run.open_segment()

    step_fn = _step_fn(loss_fn, optimizer, mesh)
    for step in range(start, num_steps):
      batch = place(batch_fn(step))
      if step == start:
        _check_loss_signature(loss_fn, params, batch)
        batch_size = _batch_size_of(batch) if batch_size is None else batch_size
      params, opt_state, loss, aux = step_fn(params, opt_state, batch, step)
      run.add_loss(step, loss)
      done = step + 1
      do_log = _due(done, log_every, num_steps)
      do_eval = eval_fn is not None and _due(done, eval_every, num_steps)
      do_ckpt = manager is not None and _due(done, checkpoint_every, num_steps)
      if not (do_log or do_eval or do_ckpt):
        continue
      jax.block_until_ready((params, opt_state))  # a boundary: the clocks and the loss check sync here
      run.close_segment()
      run.check_pending()
      if do_log:
        run.log(done, num_steps, batch_size, aux)
      if do_eval:
        run.evaluate(done, eval_fn, params, target)
      if do_ckpt:
        _save(manager, done, params, opt_state, run)
      run.open_segment()
    return params, run.history
  finally:
    if manager is not None:
      manager.wait_until_finished()
      manager.close()
