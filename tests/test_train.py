"""Tests of hashjax.train: the shared optax loop, samplers, checkpoints and resume."""

import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from hashjax import train as train_lib

# A small least-squares problem: y = X w* + b* + noise.
_RNG = np.random.default_rng(0)
X = _RNG.normal(size=(96, 4)).astype(np.float32)
W_TRUE = np.array([1.0, -2.0, 0.5, 3.0], np.float32)
Y = (X @ W_TRUE + 0.7 + 0.01 * _RNG.normal(size=96)).astype(np.float32)
BATCH = 16


def _params0():
  return {"w": np.zeros(4, np.float32), "b": np.zeros((), np.float32)}


def _loss_fn(params, batch, step):
  x, y = batch
  residual = x @ params["w"] + params["b"] - y
  # The step enters the objective (as alpha annealing would), so a resumed run
  # must pass the right step, not just the right batch.
  weight = 1.0 + 0.01 * jnp.minimum(step, 20).astype(jnp.float32)
  loss = weight * jnp.mean(residual ** 2)
  return loss, {"mse": jnp.mean(residual ** 2)}


_SAMPLER = train_lib.minibatch_sampler(96, BATCH, seed=3)


def _batch_fn(step):
  idx = _SAMPLER(step)
  return X[idx], Y[idx]


def _optimizer():
  # Adam has state (moments and a count), so a resume that lost opt_state would differ.
  return optax.adam(0.05)


def _run(workdir, num_steps, batch_fn=_batch_fn, optimizer=None, **kwargs):
  kwargs.setdefault("log_every", 5)
  kwargs.setdefault("checkpoint_every", 5)
  return train_lib.train(params=_params0(), loss_fn=_loss_fn, optimizer=optimizer or _optimizer(),
                         batch_fn=batch_fn, num_steps=num_steps, workdir=workdir, **kwargs)


def _assert_bitwise_equal(a, b):
  la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
  assert jax.tree.structure(a) == jax.tree.structure(b)
  for x, y in zip(la, lb):
    x, y = np.asarray(x), np.asarray(y)
    assert x.dtype == y.dtype and x.shape == y.shape
    assert x.tobytes() == y.tobytes(), (x, y)


def _losses(history):
  return [(h["step"], h["loss"]) for h in history if h["kind"] == "train"]


# ----------------------------------------------------------------------------
# The step and the loop.


def test_train_step_matches_hand_sgd():
  # One SGD step on the mean squared error, gradient written out by hand.
  opt = optax.sgd(0.1)
  step_fn = train_lib.make_train_step(lambda p, b, t: (jnp.mean((b[0] @ p - b[1]) ** 2), {}), opt)
  p0 = np.array([0.5, -1.0, 0.0, 2.0], np.float32)
  x, y = X[:16], Y[:16]
  p1, _, loss, aux = step_fn(p0, opt.init(p0), (x, y), 0)
  r = x.astype(np.float64) @ p0 - y
  grad = 2.0 / 16 * x.T.astype(np.float64) @ r
  np.testing.assert_allclose(np.asarray(p1), p0 - 0.1 * grad, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(float(loss), np.mean(r ** 2), rtol=1e-5)
  assert aux == {}


def test_loss_decreases_and_reaches_least_squares():
  params, history = _run(None, 300, log_every=50)
  losses = [loss for _, loss in _losses(history)]
  assert [s for s, _ in _losses(history)] == [50, 100, 150, 200, 250, 300]
  assert losses[-1] < 0.01 * losses[0]
  # Independent reference: the least-squares solution.
  design = np.concatenate([X, np.ones((96, 1), np.float32)], axis=1).astype(np.float64)
  sol = np.linalg.lstsq(design, Y.astype(np.float64), rcond=None)[0]
  np.testing.assert_allclose(np.asarray(params["w"]), sol[:4], atol=2e-2)
  np.testing.assert_allclose(float(params["b"]), sol[4], atol=2e-2)
  for h in history:
    assert h["examples_per_sec"] > 0 and np.isfinite(h["examples_per_sec"])
    assert h["wall_time"] >= h["train_time"] > 0
    assert set(h) == {"kind", "step", "loss", "examples_per_sec", "wall_time", "train_time", "mse"}


def test_history_loss_is_the_window_mean():
  # Reference: replay the same steps by hand with the jit step and average each window.
  num_steps, log_every = 12, 4
  _, history = _run(None, num_steps, log_every=log_every)
  opt = _optimizer()
  step_fn = train_lib.make_train_step(_loss_fn, opt)
  params = jax.tree.map(jnp.asarray, _params0())
  state = opt.init(params)
  per_step = []
  for t in range(num_steps):
    params, state, loss, _ = step_fn(params, state, _batch_fn(t), t)
    per_step.append(float(loss))
  expected = [(s, float(np.mean(per_step[s - log_every:s]))) for s in (4, 8, 12)]
  assert _losses(history) == expected


# ----------------------------------------------------------------------------
# Checkpoints and resume.


class _Crash(Exception):
  pass


def _crashing(at_step, calls):
  def batch_fn(step):
    calls.append(step)
    if step == at_step:
      raise _Crash(step)
    return _batch_fn(step)
  return batch_fn


def test_resume_after_crash_is_bit_identical(tmp_path):
  ref_params, ref_history = _run(str(tmp_path / "ref"), 30)

  work = str(tmp_path / "run")
  calls = []
  with pytest.raises(_Crash):
    _run(work, 30, batch_fn=_crashing(17, calls))  # checkpoints at 5, 10, 15; dies in step 17
  assert calls[-1] == 17
  calls = []
  params, history = _run(work, 30, batch_fn=_crashing(-1, calls))
  assert calls == list(range(15, 30))  # resumed from the checkpoint at 15, not from scratch
  _assert_bitwise_equal(params, ref_params)
  assert _losses(history) == _losses(ref_history)
  # Only the last max_to_keep (3) checkpoints remain, all finalised.
  assert sorted(os.listdir(work)) == ["20", "25", "30"]


def test_resume_mid_log_window_keeps_the_window_mean(tmp_path):
  # log_every=4 and a checkpoint at 6: the resumed window 5..8 mixes both runs.
  ref_params, ref_history = _run(None, 12, log_every=4)
  work = str(tmp_path / "run")
  with pytest.raises(_Crash):
    _run(work, 12, batch_fn=_crashing(7, []), log_every=4, checkpoint_every=6)
  params, history = _run(work, 12, log_every=4, checkpoint_every=6)
  _assert_bitwise_equal(params, ref_params)
  assert _losses(history) == _losses(ref_history)


def test_resume_follows_the_learning_rate_schedule(tmp_path):
  # The schedule reads the optimizer's step count, which the checkpoint holds.
  def optimizer():
    return optax.adamw(train_lib.learning_rate_schedule(0.05, num_steps=12, kind="cosine",
                                                        warmup_steps=3), weight_decay=0.1)
  ref_params, ref_history = _run(None, 12, optimizer=optimizer())
  work = str(tmp_path / "run")
  with pytest.raises(_Crash):
    _run(work, 12, batch_fn=_crashing(7, []), optimizer=optimizer())
  params, history = _run(work, 12, optimizer=optimizer())
  _assert_bitwise_equal(params, ref_params)
  assert _losses(history) == _losses(ref_history)


def test_learning_rate_schedule_shapes_and_bad_inputs():
  cosine = train_lib.learning_rate_schedule(0.1, num_steps=20, kind="cosine", warmup_steps=4,
                                            final_fraction=0.1)
  values = np.array([float(cosine(t)) for t in range(21)])
  np.testing.assert_allclose(values[:5], [0.0, 0.025, 0.05, 0.075, 0.1], rtol=1e-6)
  assert np.all(np.diff(values[4:]) < 0) and abs(values[20] - 0.01) < 1e-7
  warm = train_lib.learning_rate_schedule(0.1, num_steps=20, warmup_steps=2)
  np.testing.assert_allclose([float(warm(t)) for t in (0, 1, 2, 19)], [0.0, 0.05, 0.1, 0.1], rtol=1e-6)
  for kwargs, name in [(dict(kind="step"), "kind"), (dict(warmup_steps=20), "warmup_steps"),
                       (dict(final_fraction=1.5), "final_fraction"), (dict(num_steps=0), "num_steps")]:
    args = dict(num_steps=20)
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
      train_lib.learning_rate_schedule(0.1, **args)
  with pytest.raises(ValueError, match="peak"):
    train_lib.learning_rate_schedule(0.0, num_steps=5)


def test_finished_run_reloads_and_returns(tmp_path):
  work = str(tmp_path / "run")
  params, history = _run(work, 10)
  calls = []
  again, history2 = _run(work, 10, batch_fn=_crashing(-1, calls))
  assert calls == []  # nothing recomputed
  _assert_bitwise_equal(again, params)
  assert history2 == history
  # Asking for fewer steps than the checkpoint holds is an error, not a silent truncation.
  with pytest.raises(ValueError, match="num_steps"):
    _run(work, 5)
  # Asking for more continues the run, bit-identically to a longer uninterrupted one.
  longer, _ = _run(work, 20)
  ref, _ = _run(None, 20)
  _assert_bitwise_equal(longer, ref)


def test_checkpoints_are_written_to_a_temporary_directory_then_renamed(tmp_path, monkeypatch):
  from orbax.checkpoint._src.path import async_path  # pylint: disable=g-import-not-at-top
  renames = []
  original = async_path.rename

  async def recording_rename(src, dst):
    renames.append((str(src), str(dst)))
    return await original(src, dst)

  monkeypatch.setattr(async_path, "rename", recording_rename)
  work = tmp_path / "run"
  _run(str(work), 10)
  step_renames = [(s, d) for s, d in renames if os.path.dirname(d) == str(work)]
  assert [os.path.basename(d) for _, d in step_renames] == ["5", "10"]
  for src, dst in step_renames:
    assert src != dst and ".orbax-checkpoint-tmp" in os.path.basename(src)


def test_leftover_temporary_directory_is_ignored_and_removed(tmp_path):
  work = tmp_path / "run"
  _run(str(work), 10, checkpoint_every=10)
  # A crash mid-save leaves a temporary directory behind.
  junk = work / "15.orbax-checkpoint-tmp"
  (junk / "state").mkdir(parents=True)
  (junk / "state" / "garbage").write_bytes(b"\x00" * 10)
  calls = []
  params, _ = _run(str(work), 20, batch_fn=_crashing(-1, calls), checkpoint_every=10)
  assert calls == list(range(10, 20))
  ref, _ = _run(None, 20)
  _assert_bitwise_equal(params, ref)
  assert sorted(os.listdir(work)) == ["10", "20"]


_CHILD = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, {tests!r})
    sys.path.insert(0, {root!r})
    import test_train as t

    def batch_fn(step):
      if step == 12:
        os._exit(3)  # a hard kill: no finally blocks, no flushing, no waiting for orbax
      return t._batch_fn(step)

    t._run({work!r}, 30, batch_fn=batch_fn, checkpoint_every=5)
""")


def test_resume_after_hard_kill_in_a_subprocess(tmp_path):
  work = str(tmp_path / "run")
  here = os.path.dirname(os.path.abspath(__file__))
  code = _CHILD.format(tests=here, root=os.path.dirname(here), work=work)
  # The child trains on this process's backend: bitwise equality is asked of the same arithmetic.
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300,
                        env={**os.environ, "JAX_PLATFORMS": jax.default_backend()})
  assert proc.returncode == 3, proc.stderr.decode()[-2000:]
  calls = []
  params, history = _run(work, 30, batch_fn=_crashing(-1, calls))
  assert calls and calls[0] in (0, 5, 10) and calls == list(range(calls[0], 30))
  ref, ref_history = _run(None, 30)
  _assert_bitwise_equal(params, ref)
  assert _losses(history) == _losses(ref_history)
  assert not [d for d in os.listdir(work) if "tmp" in d]


# ----------------------------------------------------------------------------
# Resuming past damaged checkpoints.


def _files(directory):
  """{relative path: size} of every file under ``directory``."""
  out = {}
  for root, _, names in os.walk(directory):
    for name in names:
      path = os.path.join(root, name)
      out[os.path.relpath(path, directory)] = os.path.getsize(path)
  return out


def _truncate_array_files(step_dir):
  # The array chunks orbax writes (OCDBT data files under a `d/` folder of the state item).
  chunks = [p for p in _files(os.path.join(step_dir, "state")) if os.sep + "d" + os.sep in os.sep + p]
  assert chunks
  for rel in chunks:
    path = os.path.join(step_dir, "state", rel)
    with open(path, "r+b") as f:
      f.truncate(os.path.getsize(path) // 2)


def _write(path, text):
  with open(path, "w") as f:
    f.write(text)


def _truncate_meta(step_dir):
  path = os.path.join(step_dir, "meta", "metadata")
  with open(path, "r+b") as f:
    f.truncate(20)


def _rewrite_meta_step(step_dir):
  path = os.path.join(step_dir, "meta", "metadata")
  with open(path) as f:
    meta = json.load(f)
  meta["step"] = 3
  _write(path, json.dumps(meta))


def _save_non_finite(step_dir):
  # Replaces the checkpoint by one whose parameters hold NaN (train itself never saves such a state).
  shutil.rmtree(step_dir)
  manager = train_lib._checkpoint_manager(os.path.dirname(step_dir), max_to_keep=3, async_checkpoints=False)
  params = {"w": np.array([0.0, np.nan, 1.0, 2.0], np.float32), "b": np.zeros((), np.float32)}
  train_lib._save(manager, 10, params, _optimizer().init(params), train_lib._Run())
  manager.close()


_CORRUPTIONS = {
    # name: (damage(step_dir), what the warning must say besides the directory)
    "truncated array file": (_truncate_array_files, "state: "),
    "truncated metadata": (_truncate_meta, os.path.join("10", "meta", "metadata") + ": JSONDecodeError"),
    "metadata not a record": (lambda d: _write(os.path.join(d, "meta", "metadata"), "[1, 2]"),
                              os.path.join("10", "meta", "metadata") + ": not a training record"),
    "step mismatch": (_rewrite_meta_step, "records step 3, not the directory's step 10"),
    "missing item": (lambda d: shutil.rmtree(os.path.join(d, "meta")), 'Item "meta" was not found'),
    "non-finite state": (_save_non_finite, "state: ['params']['w'] holds NaN/inf values"),
}


@pytest.fixture(scope="module")
def _ten_steps(tmp_path_factory):
  """A workdir with checkpoints at 5 and 10 (copied by each test), and an uninterrupted 15-step run."""
  work = str(tmp_path_factory.mktemp("ten") / "run")
  _run(work, 10)
  ref, ref_history = _run(None, 15)
  return work, ref, ref_history


def _warnings(caplog):
  return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "train:" in r.getMessage()]


@pytest.mark.parametrize("corruption", sorted(_CORRUPTIONS))
def test_resume_skips_a_checkpoint_that_does_not_restore(tmp_path, caplog, _ten_steps, corruption):
  damage, reason = _CORRUPTIONS[corruption]
  base, ref, ref_history = _ten_steps
  work = str(tmp_path / "run")
  shutil.copytree(base, work)
  bad = os.path.join(work, "10")
  damage(bad)
  before = _files(bad)
  calls = []
  with caplog.at_level(logging.WARNING, logger="absl"):
    params, history = _run(work, 15, batch_fn=_crashing(-1, calls))
  assert calls == list(range(5, 15))  # from the intact checkpoint at 5
  _assert_bitwise_equal(params, ref)
  assert _losses(history) == _losses(ref_history)
  warnings = _warnings(caplog)
  assert len(warnings) == 1, warnings
  assert f"checkpoint {bad} does not restore" in warnings[0] and reason in warnings[0]
  assert f"moved it to {bad}.corrupt" in warnings[0] and "resuming from step 5" in warnings[0]
  assert "\n" not in warnings[0]
  # Nothing deleted: the damaged checkpoint is set aside whole, and step 10 was saved again beside it.
  assert sorted(os.listdir(work)) == ["10", "10.corrupt", "15", "5"]
  assert _files(bad + ".corrupt") == before
  if corruption == "truncated array file":
    # The set-aside directory is not a checkpoint to orbax: a further resume starts from 15.
    calls = []
    _run(work, 20, batch_fn=_crashing(-1, calls))
    assert calls == list(range(15, 20))
    assert sorted(os.listdir(work)) == ["10", "10.corrupt", "15", "20"]


def test_resume_skips_several_damaged_checkpoints_or_names_them_all(tmp_path, caplog, _ten_steps):
  base, ref, _ = _ten_steps
  work = str(tmp_path / "run")
  shutil.copytree(base, work)
  os.rename(os.path.join(work, "5"), os.path.join(work, "5.kept"))
  _truncate_meta(os.path.join(work, "10"))
  shutil.copytree(os.path.join(work, "10"), os.path.join(work, "8"))  # the same damage, as step 8
  with pytest.raises(ValueError) as info:
    _run(work, 15)
  # None restores: one error naming the directory and each checkpoint's reason, and nothing renamed.
  message = str(info.value)
  assert message.startswith(f"workdir: none of the 2 checkpoint(s) in {work} restores")
  for step in ("10", "8"):
    assert os.path.join(work, step, "meta", "metadata") + ": JSONDecodeError" in message
  assert sorted(os.listdir(work)) == ["10", "5.kept", "8"]
  # With an intact older checkpoint, both are set aside (past a name already taken) and the run resumes from it.
  os.rename(os.path.join(work, "5.kept"), os.path.join(work, "5"))
  _write(os.path.join(work, "10.corrupt"), "a file in the way")
  with caplog.at_level(logging.WARNING, logger="absl"):
    params, _ = _run(work, 15)
  _assert_bitwise_equal(params, ref)
  assert len(_warnings(caplog)) == 2
  assert sorted(os.listdir(work)) == ["10", "10.corrupt", "10.corrupt-2", "15", "5", "8.corrupt"]


# ----------------------------------------------------------------------------
# Non-finite losses.


def _nan_from(step_index):
  def loss_fn(params, batch, step):
    loss, aux = _loss_fn(params, batch, step)
    return loss + jnp.where(step >= step_index, jnp.nan, 0.0), aux
  return loss_fn


def test_non_finite_loss_raises_naming_the_step(tmp_path):
  work = str(tmp_path / "run")
  with pytest.raises(FloatingPointError, match="step 7 "):
    train_lib.train(params=_params0(), loss_fn=_nan_from(7), optimizer=_optimizer(),
                    batch_fn=_batch_fn, num_steps=20, log_every=5, checkpoint_every=1, workdir=work)
  # Nothing non-finite was saved: the last checkpoint is after 7 good steps.
  assert max(int(d) for d in os.listdir(work) if d.isdigit()) == 7
  with pytest.raises(FloatingPointError, match="step 3 "):  # caught at the end too
    train_lib.train(params=_params0(), loss_fn=_nan_from(3), optimizer=_optimizer(),
                    batch_fn=_batch_fn, num_steps=4, log_every=100)


def test_divergence_to_inf_is_caught():
  with pytest.raises(FloatingPointError, match="non-finite"):
    train_lib.train(params=_params0(), loss_fn=_loss_fn, optimizer=optax.sgd(1e3),
                    batch_fn=_batch_fn, num_steps=60, log_every=10)


# ----------------------------------------------------------------------------
# Evaluation and time to target.


def _eval_fn(params):
  residual = X @ np.asarray(params["w"]) + float(params["b"]) - Y
  return {"neg_mse": -float(np.mean(residual ** 2)), "mse": float(np.mean(residual ** 2))}


@pytest.mark.parametrize("target", [("neg_mse", -5.0), ("mse", 5.0, "min")])
def test_eval_and_time_to_target(target):
  params, history = _run(None, 40, eval_fn=_eval_fn, eval_every=10, target=target)
  evals = [h for h in history if h["kind"] == "eval"]
  assert [h["step"] for h in evals] == [0, 10, 20, 30, 40]
  assert evals[-1]["mse"] == _eval_fn(params)["mse"]
  hits = [h for h in history if h["kind"] == "target"]
  first = next(h for h in evals if h["mse"] <= 5.0)
  assert len(hits) == 1 and hits[0]["step"] == first["step"] > 0
  assert hits[0]["wall_time"] == first["wall_time"]
  assert hits[0]["metric"] == target[0] and hits[0]["target"] == target[1]
  # Entries are in time order.
  walls = [h["wall_time"] for h in history]
  assert walls == sorted(walls)


def test_target_persists_across_resume(tmp_path):
  work = str(tmp_path / "run")
  _, h1 = _run(work, 40, eval_fn=_eval_fn, eval_every=10, target=("mse", 5.0, "min"))
  _, h2 = _run(work, 60, eval_fn=_eval_fn, eval_every=10, target=("mse", 5.0, "min"))
  assert h2[:len(h1)] == h1
  assert len([h for h in h2 if h["kind"] == "target"]) == 1


# ----------------------------------------------------------------------------
# Integration with a hash mapping: a tiny relaxed hashing objective.


def test_hashing_objective_with_a_mapping():
  from hashjax import mappings  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(1)
  labels = np.repeat(np.arange(3), 40)
  centres = rng.normal(size=(3, 8)) * 3
  feats = (centres[labels] + rng.normal(size=(120, 8))).astype(np.float32)
  m = mappings.make_mapping("linear", num_bits=8, init="nair")
  params = mappings.init(jax.random.key(0), m, feats)
  sampler = train_lib.balanced_sampler(labels, 6, seed=0)

  def batch_fn(step):
    idx = sampler(step)
    return feats[idx], labels[idx]

  def loss_fn(p, batch, step):
    x, y = batch
    alpha = mappings.alpha_schedule(step, init=1.0, final=4.0, steps=50)
    phi = 2 * jax.nn.sigmoid(alpha * mappings.apply(m, p, x)) - 1  # He et al. eq. 6
    sim = jnp.where(y[:, None] == y[None, :], 1.0, -1.0)
    return jnp.mean((phi @ phi.T / 8 - sim) ** 2), {"alpha": alpha}

  initial_loss = float(loss_fn(params, batch_fn(0), 0)[0])
  params, history = train_lib.train(params=params, loss_fn=loss_fn, optimizer=optax.adam(0.05),
                                    batch_fn=batch_fn, num_steps=100, log_every=50)
  assert history[-1]["loss"] < 0.5 * initial_loss
  assert history[-1]["alpha"] == 4.0
  words = np.asarray(mappings.encode(m, params, feats))
  bits = np.unpackbits(words.view(np.uint8), axis=1, bitorder="little")[:, :8].astype(int)
  dist = np.abs(bits[:, None, :] - bits[None, :, :]).sum(-1)
  same = labels[:, None] == labels[None, :]
  assert dist[same].mean() + 2 < dist[~same].mean()


# ----------------------------------------------------------------------------
# Samplers.


def test_minibatch_sampler_epochs_and_purity():
  sampler = train_lib.minibatch_sampler(10, 3, seed=5)  # 3 batches per epoch, 1 item skipped
  for epoch in range(3):
    batches = [sampler(epoch * 3 + k) for k in range(3)]
    flat = np.concatenate(batches)
    assert len(set(flat.tolist())) == 9 and flat.min() >= 0 and flat.max() < 10
    perm = np.random.default_rng([5, epoch]).permutation(10)
    np.testing.assert_array_equal(flat, perm[:9])
  # Pure in the step: any call order, any sampler instance.
  fresh = train_lib.minibatch_sampler(10, 3, seed=5)
  for step in (7, 0, 7, 4):
    np.testing.assert_array_equal(fresh(step), sampler(step))
  assert not np.array_equal(train_lib.minibatch_sampler(10, 3, seed=6)(0), sampler(0))


def test_balanced_sampler_counts_and_purity():
  labels = np.array([3] * 5 + [7] * 3 + [-1] * 4)
  sampler = train_lib.balanced_sampler(labels, 3, seed=2)
  for step in range(20):
    idx = sampler(step)
    assert len(set(idx.tolist())) == 9
    values, counts = np.unique(labels[idx], return_counts=True)
    assert values.tolist() == [-1, 3, 7] and counts.tolist() == [3, 3, 3]
  np.testing.assert_array_equal(train_lib.balanced_sampler(labels, 3, seed=2)(11), sampler(11))
  # All of class 7 every time (it has exactly 3), and the batch order is shuffled.
  assert {tuple(np.sort(sampler(s)[labels[sampler(s)] == 7])) for s in range(5)} == {(5, 6, 7)}
  assert len({tuple(labels[sampler(s)]) for s in range(20)}) > 1


# ----------------------------------------------------------------------------
# Bad inputs.


@pytest.mark.parametrize("kwargs,argname", [
    (dict(num_steps=-1), "num_steps"),
    (dict(num_steps=2.0), "num_steps"),
    (dict(log_every=0), "log_every"),
    (dict(eval_every=-1), "eval_every"),
    (dict(checkpoint_every=1.5), "checkpoint_every"),
    (dict(max_to_keep=0), "max_to_keep"),
    (dict(batch_size=0), "batch_size"),
    (dict(optimizer=optax.adam), "optimizer"),
    (dict(loss_fn=None), "loss_fn"),
    (dict(batch_fn=None), "batch_fn"),
    (dict(eval_fn=3), "eval_fn"),
    (dict(target="mse"), "target"),
    (dict(target=("mse", 0.5, "up")), "target"),
    (dict(target=("mse", float("nan"))), "target"),
    (dict(workdir=3), "workdir"),
    (dict(params={}), "params"),
    (dict(params={"w": np.array([np.nan], np.float32)}), "params"),
    (dict(loss_fn=lambda p, b, t: _loss_fn(p, b, t)[0]), "loss_fn"),
    (dict(loss_fn=lambda p, b, t: (jnp.ones(2), {})), "loss_fn"),
    (dict(loss_fn=lambda p, b, t: (_loss_fn(p, b, t)[0], [1.0])), "loss_fn"),
    (dict(loss_fn=lambda p, b, t: (_loss_fn(p, b, t)[0], {"loss": 1.0})), "loss_fn"),
    (dict(eval_fn=lambda p: [0.5]), "eval_fn"),
    (dict(eval_fn=lambda p: {"mse": np.ones(2)}), "eval_fn"),
    (dict(eval_fn=_eval_fn, target=("ap", 0.5)), "target"),
])
def test_train_bad_inputs(kwargs, argname):
  args = dict(params=_params0(), loss_fn=_loss_fn, optimizer=_optimizer(), batch_fn=_batch_fn,
              num_steps=2, log_every=1)
  args.update(kwargs)
  with pytest.raises(ValueError, match=argname):
    train_lib.train(**args)


def test_sampler_bad_inputs():
  with pytest.raises(ValueError, match="num_items"):
    train_lib.minibatch_sampler(0, 1, seed=0)
  with pytest.raises(ValueError, match="batch_size"):
    train_lib.minibatch_sampler(5, 6, seed=0)
  with pytest.raises(ValueError, match="seed"):
    train_lib.minibatch_sampler(5, 2, seed=-1)
  with pytest.raises(ValueError, match="step"):
    train_lib.minibatch_sampler(5, 2, seed=0)(-1)
  with pytest.raises(ValueError, match="labels"):
    train_lib.balanced_sampler(np.array([0.0, 1.0]), 1, seed=0)
  with pytest.raises(ValueError, match="labels"):
    train_lib.balanced_sampler(np.zeros((2, 2), int), 1, seed=0)
  with pytest.raises(ValueError, match="per_class"):
    train_lib.balanced_sampler(np.array([0, 0, 1]), 2, seed=0)
  with pytest.raises(ValueError, match="optimizer"):
    train_lib.make_train_step(_loss_fn, "adam")
