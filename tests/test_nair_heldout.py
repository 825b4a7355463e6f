"""experiments.nair_lib: the held-out validation split, shifted training images and the LR schedule.

All on the runlocal config (scikit-learn digits, 8 x 8 images), in seconds.
"""

import os
import sys

import jax
import ml_collections
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from configs import lambdarank_knn  # noqa: E402
from experiments import nair_lib  # noqa: E402
from experiments import train_lib as talr_lib  # noqa: E402
from hashjax import train as train_lib  # noqa: E402
from test_nair_experiment import _eval, _train  # noqa: E402  (tests/ is on the path, as for brute_force)


def _config(**overrides):
  config = lambdarank_knn.get_config("runlocal")
  config.update(overrides)
  return config


def test_validation_heldout_database_holds_items_never_trained_on():
  config = _config(eval_split="validation_heldout")
  task = nair_lib.make_task(config)
  q, h = config.val_per_class, config.val_heldout_per_class
  t = config.train_per_class - q - h
  held_out = np.setdiff1d(task.database, task.train)
  assert np.all(np.isin(task.train, task.database))
  assert not np.intersect1d(task.query, task.database).size and not np.intersect1d(task.query, task.train).size
  for indices, per_class in ((task.query, q), (task.train, t), (held_out, h), (task.database, t + h)):
    assert len(np.unique(indices)) == len(indices)
    np.testing.assert_array_equal(np.bincount(task.labels[indices], minlength=task.num_classes), per_class)
  # The same queries as the plain validation split, whose database is all trained on.
  plain = nair_lib.make_task(_config(eval_split="validation"))
  np.testing.assert_array_equal(plain.query, task.query)
  np.testing.assert_array_equal(plain.database, task.database)
  np.testing.assert_array_equal(plain.train, plain.database)
  # The batches index the training items only: the held-out ones are never mapped by the loss.
  batch = nair_lib.make_batch_fn(config, task)(0)
  assert batch["features"].shape == (len(task.train), task.features.shape[1])
  np.testing.assert_array_equal(np.asarray(batch["features"]), task.features[task.train])
  assert batch["docs"].max() < len(task.train) and batch["queries"].max() < len(task.train)


@pytest.mark.parametrize("pool", [None, 200])
def test_shifted_batches_are_a_pure_function_of_the_step(pool):
  config = _config(eval_split="validation_heldout", augment_shift=1, doc_pool=pool)
  task = nair_lib.make_task(config)
  batch_fn = nair_lib.make_batch_fn(config, task)
  a, b, c = batch_fn(3), batch_fn(3), batch_fn(4)
  for key in a:
    np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(b[key]))
  assert not np.array_equal(a["shifts"], c["shifts"])
  # Queries, documents and relevance are those of the unshifted batch (a stream of their own).
  plain = nair_lib.make_batch_fn(_config(eval_split="validation_heldout", augment_shift=0, doc_pool=pool), task)(3)
  assert set(a) == set(plain) | {"shifts"}
  for key in plain:
    np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(plain[key]))
  # One shift per training image, in [-1, 1]^2, not all (0, 0).
  assert a["shifts"].shape == (len(task.train), 2) and np.abs(a["shifts"]).max() == 1
  assert len(np.unique(a["shifts"], axis=0)) > 1
  # The loss maps the shifted images: the same loss as on images shifted one at a time by a loop.
  mapping, params = nair_lib.make_mapping(config, task)
  params = jax.tree_util.tree_map(lambda p: p * 300.0, params)  # far from zero: shifts change the loss
  x = task.features[task.train]
  side = 8
  moved = np.zeros_like(x)
  for i, (dy, dx) in enumerate(a["shifts"]):
    for r in range(side):
      for col in range(side):
        if 0 <= r - dy < side and 0 <= col - dx < side:
          moved[i, r * side + col] = x[i, (r - dy) * side + col - dx]
  loss_fn = nair_lib.make_objective(config, mapping, task)
  explicit = {k: v for k, v in a.items() if k != "shifts"}
  explicit["features"] = moved
  got, want = loss_fn(params, a, 0)[0], loss_fn(params, explicit, 0)[0]
  np.testing.assert_allclose(float(got), float(want), rtol=1e-6)
  unshifted = loss_fn(params, {k: v for k, v in a.items() if k != "shifts"}, 0)[0]
  assert abs(float(unshifted) - float(want)) > 1e-6


def test_shifted_training_resumes_exactly(tmp_path):
  """Shifts drawn from (seed, step): stopping and resuming ends with the same parameters."""
  config = _config(eval_split="validation_heldout", augment_shift=1, method="ranknet", num_steps=12,
                   lr_schedule="cosine", warmup_steps=2)
  task = nair_lib.make_task(config)
  mapping, params0 = nair_lib.make_mapping(config, task)

  def run(num_steps, workdir):
    return train_lib.train(params=params0, loss_fn=nair_lib.make_objective(config, mapping, task),
                           optimizer=nair_lib.make_optimizer(config),
                           batch_fn=nair_lib.make_batch_fn(config, task), num_steps=num_steps,
                           workdir=workdir, checkpoint_every=6, log_every=6, eval_at_start=False)[0]

  straight = run(12, str(tmp_path / "a"))
  run(6, str(tmp_path / "b"))
  resumed = run(12, str(tmp_path / "b"))
  for u, v in zip(jax.tree_util.tree_leaves(straight), jax.tree_util.tree_leaves(resumed)):
    np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


@pytest.mark.parametrize("value", [-1, 1.5, True])
def test_bad_augment_shift_names_the_field(value):
  config = _config(augment_shift=0)
  task = nair_lib.make_task(config)
  config = ml_collections.ConfigDict(config.to_dict())  # untyped copy: take any value
  config.augment_shift = None
  config.augment_shift = value
  with pytest.raises(ValueError, match="augment_shift"):
    nair_lib.make_batch_fn(config, task)


def test_options_default_by_setting_then_method():
  """MNIST-10k, kNN, linear, 32 bits: SETTING_DEFAULTS (shifts, cosine, 3,000 steps); else METHOD_DEFAULTS."""
  names = ("augment_shift", "lr_schedule", "warmup_steps", "num_steps", "learning_rate")
  for method in nair_lib.METHODS:
    config = lambdarank_knn.get_config()
    config.method = method
    chosen = nair_lib.SETTING_DEFAULTS[("mnist_t10k", "knn", "linear", method, 32)]
    assert chosen["augment_shift"] == 1 and chosen["lr_schedule"] == "cosine" and chosen["num_steps"] == 3000
    for name in names[:-1]:
      assert config[name] is None
    assert config.learning_rate is None
    for name in names:
      assert nair_lib.option(config, name) == chosen[name]
    # Elsewhere (other lengths, digits, the retrieval task, an MLP): Nair's fixed step, unshifted.
    for change in ({"bits": 64}, {"dataset": "digits"}, {"task": "retrieval"}, {"model": "mlp"}):
      other = lambdarank_knn.get_config()
      other.method = method
      other.update(change)
      for name in names[:-1]:
        assert nair_lib.option(other, name) == nair_lib.METHOD_DEFAULTS[method][name], (change, name)
      assert nair_lib.option(other, "learning_rate") == nair_lib.LEARNING_RATES_BY_BITS.get(
          (method, other.bits), nair_lib.LEARNING_RATES[method])
    # An explicit value wins.
    config.update({"augment_shift": 2, "num_steps": 7, "lr_schedule": "constant", "learning_rate": 0.5})
    assert [nair_lib.option(config, n) for n in ("augment_shift", "num_steps", "lr_schedule", "learning_rate")] \
        == [2, 7, "constant", 0.5]
  runlocal = lambdarank_knn.get_config("runlocal")
  assert nair_lib.option(runlocal, "augment_shift") == 0 and nair_lib.option(runlocal, "num_steps") == 60


def test_default_num_steps_and_no_periodic_evaluation(tmp_path, monkeypatch):
  """num_steps None: the default; eval_every / checkpoint_every None: only at the start / end."""
  monkeypatch.setitem(nair_lib.METHOD_DEFAULTS, "ranknet", {**nair_lib.METHOD_DEFAULTS["ranknet"], "num_steps": 6})
  config = _config(method="ranknet", num_steps=None, eval_every=None, checkpoint_every=None, baselines=(),
                   exact_l2=False)
  results = nair_lib.train_and_evaluate(config, str(tmp_path))
  assert results["options"]["num_steps"] == 6 and results["options"]["augment_shift"] == 0
  evals = [h["step"] for h in results["history"] if h["kind"] == "eval"]
  assert evals == [0, 6]


def test_cosine_schedule_warms_up_and_decays():
  config = _config(method="ranknet", learning_rate=2.0, num_steps=10, lr_schedule="cosine", warmup_steps=2,
                   momentum=0.0)
  opt = nair_lib.make_optimizer(config)
  schedule = train_lib.learning_rate_schedule(2.0, num_steps=10, kind="cosine", warmup_steps=2)
  params = {"w": np.ones(2, np.float32)}
  state = opt.init(params)
  for step in range(10):
    updates, state = opt.update({"w": np.ones(2, np.float32)}, state, params)
    np.testing.assert_allclose(np.asarray(updates["w"]), -float(schedule(step)) * np.ones(2), rtol=1e-5,
                               atol=1e-7)
  config.lr_schedule = "linear"
  with pytest.raises(ValueError, match="lr_schedule"):
    nair_lib.make_optimizer(config)


@pytest.mark.parametrize("method", ["ranknet", "lambdarank"])
def test_runlocal_heldout_trains_and_beats_untrained(method):
  # No shifts: a 1-pixel shift moves an 8 x 8 digit by an eighth of its width (error 0.26 -> 0.37).
  config = _config(eval_split="validation_heldout", augment_shift=0, method=method)
  task, mapping, params0, params, history = _train(config)
  assert np.all(np.isfinite([h["loss"] for h in history if h["kind"] == "train"]))
  assert _eval(config, task, mapping, params)["knn_error"] < _eval(config, task, mapping, params0)["knn_error"]


@pytest.mark.parametrize("s", [1, 2])
def test_shift_images_matches_a_loop_over_images(s):
  """train_lib.shift_images (a padded window per image, jitted) against one image at a time."""
  rng = np.random.default_rng(s)
  x = rng.normal(size=(300, 49)).astype(np.float32)
  shifts = rng.integers(-s, s + 1, size=(300, 2))
  out = np.asarray(talr_lib.shift_images(x, shifts))
  for i, (dy, dx) in enumerate(shifts):
    expected = np.zeros((7, 7), np.float32)
    for r in range(7):
      for c in range(7):
        if 0 <= r - dy < 7 and 0 <= c - dx < 7:
          expected[r, c] = x[i].reshape(7, 7)[r - dy, c - dx]
    np.testing.assert_array_equal(out[i].reshape(7, 7), expected)


def test_default_warmup_is_cut_for_short_runs():
  """The 32-bit recipe's 50 warmup steps shrink to a tenth of a short run; an explicit warmup stays."""
  config = lambdarank_knn.get_config()  # MNIST-10k, 32 bits: cosine after 50 warmup steps
  for num_steps in (1, 20, 50, 51):
    config.num_steps = num_steps
    opt = nair_lib.make_optimizer(config)
    params = {"w": np.ones(1, np.float32)}
    updates, _ = opt.update({"w": np.ones(1, np.float32)}, opt.init(params), params)
    schedule = train_lib.learning_rate_schedule(nair_lib.option(config, "learning_rate"), num_steps=num_steps,
                                                kind="cosine", warmup_steps=num_steps // 10)
    np.testing.assert_allclose(np.asarray(updates["w"]), -float(schedule(0)), rtol=1e-6)
  config.num_steps, config.warmup_steps = 20, 50
  with pytest.raises(ValueError, match="warmup_steps"):
    nair_lib.make_optimizer(config)


def test_shift_images_rejects_or_clips_offsets_beyond_max_shift():
  x = np.arange(25, dtype=np.float32).reshape(1, 25)
  with pytest.raises(ValueError, match="max_shift"):
    talr_lib.shift_images(x, np.array([[2, 0]]), max_shift=1)
  # Traced offsets are clipped to the bound (a shift of 3 acts as 1, in the same direction).
  traced = jax.jit(lambda s: talr_lib.shift_images(x, s, max_shift=1))
  for d in (2, 3, -2, -3):
    np.testing.assert_array_equal(np.asarray(traced(np.array([[d, 0]]))),
                                  np.asarray(talr_lib.shift_images(x, np.array([[np.sign(d), 0]]))))
