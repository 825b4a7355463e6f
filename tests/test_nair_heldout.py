"""experiments.methods.nair: the held-out validation split, shifted training images and the LR schedule.

All on the runlocal config (scikit-learn digits, 8 x 8 images), in seconds.
"""

import json
import os
import sys

import jax
import ml_collections
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from configs import lambdarank_knn, lambdarank_retrieval  # noqa: E402
from experiments import augment, fitting, methods, tasks  # noqa: E402
from experiments.methods import nair  # noqa: E402
from hashjax import train as train_lib  # noqa: E402
from test_nair_experiment import _eval, _train  # noqa: E402  (tests/ is on the path, as for brute_force)


def _config(arg="runlocal", **overrides):
  config = lambdarank_knn.get_config(arg)
  config.update(overrides)
  return config


def test_validation_heldout_database_holds_items_never_trained_on():
  config = _config(eval_split="validation_heldout")
  task = tasks.make_task(config)
  q, h = config.val_per_class, config.val_heldout_per_class
  t = config.train_per_class - q - h
  held_out = np.setdiff1d(task.database, task.train)
  assert np.all(np.isin(task.train, task.database))
  assert not np.intersect1d(task.query, task.database).size and not np.intersect1d(task.query, task.train).size
  for indices, per_class in ((task.query, q), (task.train, t), (held_out, h), (task.database, t + h)):
    assert len(np.unique(indices)) == len(indices)
    np.testing.assert_array_equal(np.bincount(task.labels[indices], minlength=task.num_classes), per_class)
  # The same queries as the plain validation split, whose database is all trained on.
  plain = tasks.make_task(_config(eval_split="validation"))
  np.testing.assert_array_equal(plain.query, task.query)
  np.testing.assert_array_equal(plain.database, task.database)
  np.testing.assert_array_equal(plain.train, plain.database)
  # The batches index the training items only: the held-out ones are never mapped by the loss.
  batch = nair.make_batch_fn(config, task)(0)
  assert batch["features"].shape == (len(task.train), task.features.shape[1])
  np.testing.assert_array_equal(np.asarray(batch["features"]), task.features[task.train])
  assert batch["docs"].max() < len(task.train) and batch["queries"].max() < len(task.train)


@pytest.mark.parametrize("pool", [None, 200])
def test_shifted_batches_are_a_pure_function_of_the_step(pool):
  config = _config(eval_split="validation_heldout", augment_shift=1, doc_pool=pool)
  task = tasks.make_task(config)
  batch_fn = nair.make_batch_fn(config, task)
  a, b, c = batch_fn(3), batch_fn(3), batch_fn(4)
  for key in a:
    np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(b[key]))
  assert not np.array_equal(a["shifts"], c["shifts"])
  # Queries, documents and relevance are those of the unshifted batch (a stream of their own).
  plain = nair.make_batch_fn(_config(eval_split="validation_heldout", augment_shift=0, doc_pool=pool), task)(3)
  assert set(a) == set(plain) | {"shifts"}
  for key in plain:
    np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(plain[key]))
  # One shift per training image, in [-1, 1]^2, not all (0, 0).
  assert a["shifts"].shape == (len(task.train), 2) and np.abs(a["shifts"]).max() == 1
  assert len(np.unique(a["shifts"], axis=0)) > 1
  # The loss maps the shifted images: the same loss as on images shifted one at a time by a loop.
  mapping, params = fitting.make_mapping(config, task)
  params = jax.tree_util.tree_map(lambda p: p * 300.0, params)  # far from zero: shifts change the loss
  x = task.features[task.train]
  side = 8
  moved = np.zeros_like(x)
  for i, (dy, dx) in enumerate(a["shifts"]):
    for r in range(side):
      for col in range(side):
        if 0 <= r - dy < side and 0 <= col - dx < side:
          moved[i, r * side + col] = x[i, (r - dy) * side + col - dx]
  loss_fn = nair.make_objective(config, mapping, task)
  explicit = {k: v for k, v in a.items() if k != "shifts"}
  explicit["features"] = moved
  got, want = loss_fn(params, a, 0)[0], loss_fn(params, explicit, 0)[0]
  np.testing.assert_allclose(float(got), float(want), rtol=1e-6)
  unshifted = loss_fn(params, {k: v for k, v in a.items() if k != "shifts"}, 0)[0]
  assert abs(float(unshifted) - float(want)) > 1e-6


def test_shifted_training_resumes_exactly(tmp_path):
  """Shifts drawn from (seed, step): stopping and resuming ends with the same parameters."""
  config = _config("runlocal,method=ranknet", eval_split="validation_heldout", augment_shift=1, num_steps=12,
                   lr_schedule="cosine", warmup_steps=2)
  task = tasks.make_task(config)
  mapping, params0 = fitting.make_mapping(config, task)

  def run(num_steps, workdir):
    return train_lib.train(params=params0, loss_fn=nair.make_objective(config, mapping, task),
                           optimizer=fitting.make_optimizer(config),
                           batch_fn=nair.make_batch_fn(config, task), num_steps=num_steps,
                           workdir=workdir, checkpoint_every=6, log_every=6, eval_at_start=False)[0]

  straight = run(12, str(tmp_path / "a"))
  run(6, str(tmp_path / "b"))
  resumed = run(12, str(tmp_path / "b"))
  for u, v in zip(jax.tree_util.tree_leaves(straight), jax.tree_util.tree_leaves(resumed)):
    np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


@pytest.mark.parametrize("value", [-1, 1.5, True])
def test_bad_augment_shift_names_the_field(value):
  config = _config(augment_shift=0)
  task = tasks.make_task(config)
  config = ml_collections.ConfigDict(config.to_dict())  # untyped copy: take any value
  config.augment_shift = None
  config.augment_shift = value
  with pytest.raises(ValueError, match="augment_shift"):
    nair.make_batch_fn(config, task)


def test_config_variants_hold_the_recipe_where_it_was_chosen():
  """MNIST-10k, kNN, linear, 32 bits: shifts, cosine, 3,000 steps; elsewhere Nair's fixed step, unshifted."""
  names = ("augment_shift", "lr_schedule", "warmup_steps", "num_steps", "learning_rate")
  for method, step in (("lambdarank", 0.03), ("ranknet", 20.0)):
    config = lambdarank_knn.get_config(f"method={method}")
    assert (config.dataset, config.affinity, config.model, config.bits) == ("mnist_t10k", "label", "linear", 32)
    assert [config[n] for n in names] == [1, "cosine", 50, 3000, step]
    # Other lengths, the MLP, the retrieval task, fixed_step (the study's digits): fixed step, unshifted.
    fixed = {("lambdarank", 64): 1.0, ("ranknet", 64): 50.0, ("lambdarank", 32): 0.03, ("ranknet", 32): 50.0}
    for other, bits in ((lambdarank_knn.get_config(f"method={method},bits=64"), 64),
                        (lambdarank_knn.get_config(f"method={method},fixed_step"), 32),
                        (lambdarank_retrieval.get_config(f"method={method}"), 32)):
      assert [other[n] for n in names] == [0, "constant", 0, 1000, fixed[(method, bits)]], (method, bits)
    mlp = lambdarank_knn.get_config(f"method={method},model=mlp")
    assert [mlp[n] for n in names[:-1]] == [0, "constant", 0, 1000]
    assert (mlp.hidden, mlp.init, mlp.doc_pool) == ((1024,), "lecun", 500)
    # An explicit value wins.
    config.update({"augment_shift": 2, "num_steps": 7, "lr_schedule": "constant", "learning_rate": 0.5})
    assert [config[n] for n in ("augment_shift", "num_steps", "lr_schedule", "learning_rate")] \
        == [2, 7, "constant", 0.5]
  runlocal = lambdarank_knn.get_config("runlocal")
  assert runlocal.augment_shift == 0 and runlocal.num_steps == 60 and runlocal.dataset == "digits"


def test_no_periodic_evaluation_and_results_json(tmp_path):
  """eval_every / checkpoint_every None: only at the start / end; results.json holds the config that ran."""
  config = _config("runlocal,method=ranknet", num_steps=6, eval_every=None, checkpoint_every=None, baselines=(),
                   exact_l2=False)
  results = methods.train_and_evaluate(config, str(tmp_path))
  assert results["config"]["num_steps"] == 6 and results["config"]["augment_shift"] == 0
  evals = [h["step"] for h in results["history"] if h["kind"] == "eval"]
  assert evals == [0, 6]
  saved = json.loads((tmp_path / "results.json").read_text())
  assert saved["rows"][0]["method"] == "ranknet" and saved["columns"][0] == ["knn_error", "kNN err"]
  assert os.path.isdir(tmp_path / "checkpoints")


def test_cosine_schedule_warms_up_and_decays():
  config = _config(method="ranknet", learning_rate=2.0, num_steps=10, lr_schedule="cosine", warmup_steps=2,
                   momentum=0.0)
  opt = fitting.make_optimizer(config)
  schedule = train_lib.learning_rate_schedule(2.0, num_steps=10, kind="cosine", warmup_steps=2)
  params = {"w": np.ones(2, np.float32)}
  state = opt.init(params)
  for step in range(10):
    updates, state = opt.update({"w": np.ones(2, np.float32)}, state, params)
    np.testing.assert_allclose(np.asarray(updates["w"]), -float(schedule(step)) * np.ones(2), rtol=1e-5,
                               atol=1e-7)
  config.lr_schedule = "linear"
  with pytest.raises(ValueError, match="lr_schedule"):
    fitting.make_optimizer(config)


@pytest.mark.parametrize("method", ["ranknet", "lambdarank"])
def test_runlocal_heldout_trains_and_beats_untrained(method):
  # No shifts: a 1-pixel shift moves an 8 x 8 digit by an eighth of its width (error 0.26 -> 0.37).
  config = _config(f"runlocal,method={method}", eval_split="validation_heldout", augment_shift=0)
  task, mapping, params0, params, history = _train(config)
  assert np.all(np.isfinite([h["loss"] for h in history if h["kind"] == "train"]))
  assert _eval(config, task, mapping, params)["knn_error"] < _eval(config, task, mapping, params0)["knn_error"]


@pytest.mark.parametrize("s", [1, 2])
def test_shift_images_matches_a_loop_over_images(s):
  """augment.shift_images (a padded window per image, jitted) against one image at a time."""
  rng = np.random.default_rng(s)
  x = rng.normal(size=(300, 49)).astype(np.float32)
  shifts = rng.integers(-s, s + 1, size=(300, 2))
  out = np.asarray(augment.shift_images(x, shifts))
  for i, (dy, dx) in enumerate(shifts):
    expected = np.zeros((7, 7), np.float32)
    for r in range(7):
      for c in range(7):
        if 0 <= r - dy < 7 and 0 <= c - dx < 7:
          expected[r, c] = x[i].reshape(7, 7)[r - dy, c - dx]
    np.testing.assert_array_equal(out[i].reshape(7, 7), expected)


def test_warmup_is_the_configs_and_must_be_shorter_than_the_run():
  """The optimizer warms up over exactly config.warmup_steps; a warmup as long as the run is an error."""
  config = lambdarank_knn.get_config()  # MNIST-10k, 32 bits: cosine after 50 warmup steps
  config.momentum = 0.0  # each update is then the step size times the gradient
  for num_steps, warmup in ((1, 0), (20, 2), (50, 5), (51, 5), (3000, 50)):
    config.num_steps, config.warmup_steps = num_steps, warmup
    opt = fitting.make_optimizer(config)
    params = {"w": np.ones(1, np.float32)}
    state = opt.init(params)
    schedule = train_lib.learning_rate_schedule(config.learning_rate, num_steps=num_steps, kind="cosine",
                                                warmup_steps=warmup)
    for step in range(min(num_steps, warmup + 2)):
      updates, state = opt.update({"w": np.ones(1, np.float32)}, state, params)
      np.testing.assert_allclose(np.asarray(updates["w"]), -float(schedule(step)), rtol=1e-6, atol=1e-9)
  config.num_steps, config.warmup_steps = 20, 50
  with pytest.raises(ValueError, match="warmup_steps"):
    fitting.make_optimizer(config)


def test_shift_images_rejects_or_clips_offsets_beyond_max_shift():
  x = np.arange(25, dtype=np.float32).reshape(1, 25)
  with pytest.raises(ValueError, match="max_shift"):
    augment.shift_images(x, np.array([[2, 0]]), max_shift=1)
  # Traced offsets are clipped to the bound (a shift of 3 acts as 1, in the same direction).
  traced = jax.jit(lambda s: augment.shift_images(x, s, max_shift=1))
  for d in (2, 3, -2, -3):
    np.testing.assert_array_equal(np.asarray(traced(np.array([[d, 0]]))),
                                  np.asarray(augment.shift_images(x, np.array([[np.sign(d), 0]]))))
