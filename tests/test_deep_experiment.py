"""Tests of the deep hashing launcher: configs/deep_hashing.py and experiments.methods.deep."""

import json
import os
import sys

import jax
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from configs import deep_hashing  # noqa: E402
from experiments import methods, tasks  # noqa: E402
from experiments.methods import checks, deep, talr  # noqa: E402
import hashjax  # noqa: E402
from hashjax import mappings  # noqa: E402
from hashjax.evaluate import evaluate_codes  # noqa: E402

DEEP = ("dpsh", "dtsh", "hashnet", "csq", "greedyhash")


def _quick(objective):
  """``:objective=<objective>,runlocal`` on an MLP, 20 steps, evaluated at the start and end only."""
  config = deep_hashing.get_config(f"objective={objective},runlocal")
  config.model = "mlp"
  config.num_steps, config.warmup_steps = 20, 2
  config.eval_every = config.checkpoint_every = 0
  config.log_every = 10
  config.baselines = ()
  return config


@pytest.mark.parametrize("arg", ["", ",runlocal", ",bits=16", ",runlocal,bits=64"])
@pytest.mark.parametrize("objective", deep_hashing.OBJECTIVES)
def test_every_variant_passes_the_config_checks(objective, arg):
  config = deep_hashing.get_config(f"objective={objective}{arg}")
  assert checks.check_config(config) is config
  method = {"talr_ap": "talr", "talr_ndcg": "talr", "lambdarank": "lambdarank"}.get(objective, "deep")
  assert config.method == method and config.model == "cnn" and config.affinity == "label"
  assert config.image_shape == ((8, 8, 1) if "runlocal" in arg else (28, 28, 1))
  # The same optimizer, steps and augmentation for every objective; the step each one's own (chosen on validation).
  shared = ("optimizer", "lr_schedule", "warmup_steps", "num_steps", "augment_shift", "hidden",
            "channels", "seed", "dataset", "bits")
  reference = deep_hashing.get_config(f"objective=dpsh{arg}")
  assert {k: config[k] for k in shared} == {k: reference[k] for k in shared}
  assert config.learning_rate == (1e-2 if objective in ("dpsh", "dtsh", "greedyhash", "lambdarank") else 3e-3)


def test_bad_argument_names_the_objective():
  with pytest.raises(ValueError, match=r"config argument: expected objective in \['talr_ap'"):
    deep_hashing.get_config("objective=dpsh2")


@pytest.mark.parametrize("method, objective, expected", [
    ("deep", "ap", "['dpsh', 'dtsh', 'hashnet', 'csq', 'greedyhash']"),
    ("talr", "dpsh", "['ap', 'ndcg', 'tie_unaware_ap']"),
])
def test_an_objective_of_another_method_is_a_one_line_config_error(tmp_path, method, objective, expected):
  config = deep_hashing.get_config("objective=dpsh,runlocal" if method == "deep" else "objective=talr_ap,runlocal")
  for bad in (objective, "dpshh"):
    config.objective = bad
    with pytest.raises(checks.ConfigError) as info:
      checks.check_config(config)
    assert str(info.value) == f"config.objective: expected one of {expected}, got {bad!r}"
  config.objective = objective
  with pytest.raises(checks.ConfigError, match=r"^config\.objective: "):  # before any data is loaded
    methods.train_and_evaluate(config, str(tmp_path))
  assert not os.listdir(tmp_path)


def test_class_objectives_need_label_affinity_and_options_their_range():
  config = deep_hashing.get_config("objective=csq,runlocal")
  config.affinity = "euclidean"
  with pytest.raises(checks.ConfigError, match=r"^config.affinity: expected 'label' for config.objective='csq'"):
    checks.check_config(config)
  for objective, field, bad in (("dpsh", "eta", -0.1), ("dtsh", "dtsh_alpha", -1.0), ("hashnet", "hashnet_alpha", 0.0),
                                ("hashnet", "hashnet_gamma", -1.0), ("csq", "csq_lambda", -1.0),
                                ("greedyhash", "greedy_alpha", float("nan"))):
    config = deep_hashing.get_config(f"objective={objective}")
    config[field] = bad
    with pytest.raises(checks.ConfigError, match=rf"^config\.{field}: expected"):
      checks.check_config(config)


def test_batches_carry_the_minibatch_labels_only_when_asked():
  config = _quick("csq")
  task = tasks.make_task(config)
  with_labels = talr.make_batch_fn(config, task, labels=True)(5)
  plain = talr.make_batch_fn(config, task)(5)
  assert "labels" not in plain
  np.testing.assert_array_equal(with_labels["features"], plain["features"])
  labels = with_labels["labels"]
  assert labels.shape == (10 * config.batch_per_class,)
  np.testing.assert_array_equal(np.bincount(labels, minlength=10), config.batch_per_class)  # class-balanced
  np.testing.assert_array_equal(with_labels["affinity"], (labels[:, None] == labels[None, :]).astype(np.int32))


@pytest.mark.parametrize("objective", DEEP)
def test_runlocal_trains_saves_a_model_and_beats_chance(tmp_path, objective):
  config = _quick(objective)
  workdir = str(tmp_path)
  methods.train_and_evaluate(config, workdir)
  with open(os.path.join(workdir, "results.json")) as f:
    results = json.load(f)
  row = results["rows"][0]
  assert row["method"] == f"{objective}-mlp" and row["bits"] == 32
  assert results["config"]["objective"] == objective
  if objective == "hashnet":
    assert results["config"]["hashnet_alpha"] == 10 / 32  # None resolved as the run used it
  task = tasks.make_task(config)
  model = hashjax.load_model(workdir)
  assert model.num_bits == 32 and model.kind == "mlp"
  query_words = model.encode(task.features[task.query])
  db_words = model.encode(task.features[task.database])
  assert query_words.shape == (len(task.query), 1) and query_words.dtype == np.uint32
  scores = evaluate_codes(query_words, db_words, num_bits=32, radius=config.radius, k=config.precision_k,
                          query_labels=task.labels[task.query], db_labels=task.labels[task.database])
  np.testing.assert_allclose(float(scores["tie_aware_ap"]), row["tie_aware_ap"], rtol=1e-6)
  # A random ranking's AP is about the share of relevant items; the trained codes score far above it.
  relevant = task.labels[task.query][:, None] == task.labels[task.database][None, :]
  chance = float(np.mean(relevant.mean(axis=1)))
  assert row["tie_aware_ap"] > 2 * chance, (row["tie_aware_ap"], chance)


def test_greedyhash_saves_and_encodes_with_the_mapping_params_alone(tmp_path):
  config = _quick("greedyhash")
  methods.train_and_evaluate(config, str(tmp_path))
  model = hashjax.load_model(str(tmp_path))
  task = tasks.make_task(config)
  x = task.features[task.query]
  mapping = mappings.make_mapping("mlp", num_bits=32, hidden=tuple(config.hidden))
  initial = deep.init_params(config, mapping, None, task)
  assert set(initial) == {"mapping", "classifier"}
  # The saved params are the mapping's tree (no classifier), trained away from their start.
  assert jax.tree.structure(model.params) == jax.tree.structure(initial["mapping"])
  assert jax.tree.map(np.shape, model.params) == jax.tree.map(np.shape, initial["mapping"])
  assert not np.allclose(model.params["output"]["kernel"], initial["mapping"]["output"]["kernel"])
  # Its codes: the sign bits of the mapping's logits with those params, packed least significant bit first.
  bits = np.asarray(mappings.apply(model.mapping, model.params, x)) > 0
  words = (bits.astype(np.uint64) << np.arange(32, dtype=np.uint64)).sum(axis=1).astype(np.uint32)
  np.testing.assert_array_equal(model.encode(x), words[:, None])
