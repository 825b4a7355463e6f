"""The convolutional hash mapping (hashjax.mappings.CNN): its forward pass against loops, its options and errors,
batch-independent codes, saved models, training, and a run of experiments.train with --config.model=cnn."""

import json
import os
import re
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import hashjax
from hashjax import data, evaluate, mappings, models, train
from hashjax.objectives import talr

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

from configs import talr_ap  # noqa: E402
from experiments import tasks  # noqa: E402
from experiments.methods import checks  # noqa: E402

COMMAND = ["--config=configs/talr_ap.py:runlocal", "--config.model=cnn", "--config.image_shape=8,8,1"]


@pytest.fixture(scope="module", autouse=True)
def train_command(tmp_path_factory):
  """``python -m experiments.train`` of a CNN on digits, started with the module's first test and running
  beside the in-process ones; ``(proc, workdir)``."""
  workdir = tmp_path_factory.mktemp("cnn_run") / "run"
  proc = subprocess.Popen([sys.executable, "-m", "experiments.train", *COMMAND, f"--workdir={workdir}"], cwd=ROOT,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"}, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
  yield proc, workdir
  if proc.poll() is None:
    proc.kill()
    proc.communicate()


@pytest.fixture(scope="module")
def digits():
  return data.load_digits()


def _param_shapes(m, dim):
  """The tree of ``mappings.init(key, m, features[:, dim])``, shapes and dtypes only (traced, nothing drawn)."""
  return jax.eval_shape(lambda: mappings.init(jax.random.key(0), m, np.zeros((1, dim), np.float32)))


def _random_params(m, dim, seed):
  """Parameters of ``m`` in the tree of :func:`mappings.init`: kernels ~ N(0, 1 / fan_in), biases ~ N(0, 0.1^2)
  (not zero, unlike an initialisation), drawn by numpy (no random-number program compiled for each new shape,
  which takes seconds on a CPU)."""
  rng = np.random.default_rng(seed)

  def draw(leaf):
    std = 0.1 if len(leaf.shape) == 1 else 1 / np.sqrt(np.prod(leaf.shape[:-1]))
    return jnp.asarray(rng.normal(0.0, std, leaf.shape), jnp.float32)

  return jax.tree.map(draw, _param_shapes(m, dim))


def _reference_logits(params, x, *, image_shape, mean, scale, act):
  """Logits by loops in float64: 3x3 zero-padded convolution, activation, 2x2 max pool; dense layers; output."""
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
  convs = sorted(k for k in p if k.startswith("conv_"))
  hidden = sorted(k for k in p if k.startswith("hidden_"))
  out = []
  for row in (np.asarray(x, np.float64) - mean) / scale:
    image = row.reshape(image_shape)
    for name in convs:
      kernel, bias = p[name]["kernel"], p[name]["bias"]
      h, w, c_in = image.shape
      c_out = bias.shape[0]
      padded = np.zeros((h + 2, w + 2, c_in))
      padded[1:-1, 1:-1] = image
      conv = np.zeros((h, w, c_out))
      for i in range(h):
        for j in range(w):
          for o in range(c_out):
            total = bias[o]
            for di in range(3):
              for dj in range(3):
                for c in range(c_in):
                  total += padded[i + di, j + dj, c] * kernel[di, dj, c, o]
            conv[i, j, o] = act(total)
      pooled = np.zeros((h // 2, w // 2, c_out))
      for i in range(h // 2):
        for j in range(w // 2):
          for o in range(c_out):
            pooled[i, j, o] = max(conv[2 * i + a, 2 * j + b, o] for a in (0, 1) for b in (0, 1))
      image = pooled
    v = image.reshape(-1)  # (i, j, c) row-major
    for name in hidden:
      v = act(v @ p[name]["kernel"] + p[name]["bias"])
    out.append(v @ p["output"]["kernel"] + p["output"]["bias"])
  return np.array(out)


@pytest.mark.parametrize("image_shape, channels, hidden, activation", [
    ((6, 6, 1), (2,), (3,), "relu"),
    ((7, 5, 2), (2, 3), (), "tanh"),  # odd sides: the pools drop the last row / column
])
def test_forward_pass_matches_loops_over_pixels(image_shape, channels, hidden, activation):
  dim = int(np.prod(image_shape))
  rng = np.random.default_rng(0)
  x = rng.normal(size=(4, dim)).astype(np.float32)
  mean, scale = rng.normal(size=dim).astype(np.float32), rng.uniform(0.5, 2.0, dim).astype(np.float32)
  m = mappings.make_mapping("cnn", num_bits=5, image_shape=image_shape, channels=channels, hidden=hidden,
                            activation=activation, mean=mean, scale=scale)
  params = _random_params(m, dim, seed=1)
  act = {"relu": lambda v: max(v, 0.0) if np.ndim(v) == 0 else np.maximum(v, 0.0), "tanh": np.tanh}[activation]
  want = _reference_logits(params, x, image_shape=image_shape, mean=mean, scale=scale, act=act)
  np.testing.assert_allclose(np.asarray(mappings.apply(m, params, x)), want, rtol=1e-5, atol=1e-5)
  bits = np.asarray(mappings.encode(m, params, x))
  want_words = ((want > 0) * (1 << np.arange(5))).sum(1)  # bit j at position j of the one word
  np.testing.assert_array_equal(bits[:, 0], want_words)


def test_shapes_of_params_logits_and_words():
  m = mappings.make_mapping("cnn", num_bits=40)  # the defaults: a 28x28x1 image, channels (16, 32), hidden (128,)
  assert (m.image_shape, m.channels, m.hidden, m.activation) == ((28, 28, 1), (16, 32), (128,), "relu")
  assert jax.tree.map(np.shape, _param_shapes(m, 784)) == {
      "conv_0": {"kernel": (3, 3, 1, 16), "bias": (16,)}, "conv_1": {"kernel": (3, 3, 16, 32), "bias": (32,)},
      "hidden_0": {"kernel": (7 * 7 * 32, 128), "bias": (128,)}, "output": {"kernel": (128, 40), "bias": (40,)}}
  bare = mappings.make_mapping("cnn", num_bits=40, image_shape=(9, 8, 3), channels=(4,), hidden=())
  assert jax.tree.map(np.shape, _param_shapes(bare, 216)) == {"conv_0": {"kernel": (3, 3, 3, 4), "bias": (4,)},
                                                              "output": {"kernel": (4 * 4 * 4, 40), "bias": (40,)}}
  assert bare == mappings.make_mapping("cnn", num_bits=40, image_shape=[9, 8, 3], channels=[4], hidden=[])
  params = _random_params(bare, 216, seed=0)
  x = np.random.default_rng(0).random((2, 3, 216), dtype=np.float32)
  logits = np.asarray(mappings.apply(bare, params, x))
  assert logits.shape == (2, 3, 40)
  np.testing.assert_allclose(np.asarray(mappings.apply(bare, params, x[1, 2])), logits[1, 2], rtol=1e-6, atol=1e-6)
  words = mappings.encode(bare, params, x)
  assert words.shape == (2, 3, 2) and words.dtype == jnp.uint32


def test_an_image_shape_that_does_not_fit_the_features_is_refused_before_training():
  x = np.zeros((3, 64), np.float32)
  with pytest.raises(ValueError, match=r"^image_shape: expected a shape whose product is the feature width 64 "
                                       r"\(of mean\), got \(28, 28, 1\) \(product 784\)$"):
    mappings.make_mapping("cnn", num_bits=8, mean=x.mean(0))
  with pytest.raises(ValueError, match=r"image_shape: .*width 64 \(of scale\)"):
    mappings.make_mapping("cnn", num_bits=8, image_shape=(4, 4, 1), scale=np.ones(64))
  m = mappings.make_mapping("cnn", num_bits=8, image_shape=(8, 4, 1))
  with pytest.raises(ValueError, match=r"^example_features: expected 32 columns \(the product of the mapping's "
                                       r"image_shape \(8, 4, 1\)\), got shape \(3, 64\)$"):
    mappings.init(jax.random.key(0), m, x)
  params = _random_params(m, 32, seed=0)
  for fn in (mappings.apply, mappings.encode):
    with pytest.raises(ValueError, match=r"^features: expected 32 columns .*image_shape"):
      fn(m, params, x)
  with pytest.raises(ValueError, match=r"^image_shape: expected height and width of at least 4 for 2 blocks"):
    mappings.make_mapping("cnn", num_bits=8, image_shape=(3, 8, 1))
  for bad in ((8, 8), (8, 8, 0), (8.0, 8, 1), "8,8,1", 64):
    with pytest.raises(ValueError, match=r"^image_shape: expected \(height, width, channels\), three positive ints"):
      mappings.make_mapping("cnn", num_bits=8, image_shape=bad)
  for bad in ((), (16, 0), 16):
    with pytest.raises(ValueError, match=r"^channels: expected a non-empty sequence of positive ints"):
      mappings.make_mapping("cnn", num_bits=8, channels=bad)
  with pytest.raises(ValueError, match=r"^hidden: expected a sequence of positive ints, got \(0,\)$"):
    mappings.make_mapping("cnn", num_bits=8, hidden=(0,))
  for name in ("linear", "mlp"):
    with pytest.raises(ValueError, match=rf"^image_shape: expected None for name='{name}' \(use name='cnn'\)"):
      mappings.make_mapping(name, num_bits=8, image_shape=(8, 8, 1))
    with pytest.raises(ValueError, match=rf"^channels: expected None for name='{name}'"):
      mappings.make_mapping(name, num_bits=8, channels=(4,))
  with pytest.raises(ValueError, match=r"^params: expected the parameters of a CNN mapping"):
    mappings.apply(m, {"kernel": np.zeros((32, 8))}, x[:, :32])


def test_encode_gives_the_same_words_for_a_row_in_any_batch(digits):
  x = digits[0][:700]
  m = mappings.make_mapping("cnn", num_bits=40, image_shape=(8, 8, 1), mean=x.mean(0))
  params = _random_params(m, 64, seed=3)
  whole = np.asarray(mappings.encode(m, params, x))
  assert whole.shape == (700, 2)
  assert len(np.unique(whole, axis=0)) > 300  # codes that tell digits apart, not a constant (527 distinct)
  for piece in (1, 13, 256):
    parts = np.concatenate([np.asarray(mappings.encode(m, params, x[i:i + piece])) for i in range(0, 700, piece)])
    np.testing.assert_array_equal(parts, whole, err_msg=f"pieces of {piece} rows")


def _to_format_2(path):
  """Rewrites a saved model as format version 2 stored it (model.json without checksums, arrays.npz)."""
  with open(os.path.join(path, "model.json")) as f:
    meta = json.load(f)
  arrays = {e["name"]: np.load(os.path.join(path, e["file"])) for e in meta["arrays"]}
  for name in os.listdir(path):
    if name.startswith("data-"):
      shutil.rmtree(os.path.join(path, name))
  os.remove(os.path.join(path, ".lock"))
  meta = {k: v for k, v in meta.items() if k not in ("data", "checksum")}
  meta.update(version=2, arrays=[{"name": k, "dtype": v.dtype.name, "shape": list(v.shape)} for k, v in arrays.items()])
  np.savez(os.path.join(path, "arrays.npz"), **arrays)
  with open(os.path.join(path, "model.json"), "w") as f:
    json.dump(meta, f)


def test_a_saved_cnn_reloads_and_encodes_bit_identically(digits, tmp_path):
  x = digits[0][:300]
  mean, scale = mappings.feature_stats(x)
  m = mappings.make_mapping("cnn", num_bits=24, image_shape=(8, 8, 1), channels=(4, 6), hidden=(10, 12),
                            activation="tanh", init="nair", mean=mean, scale=scale)
  params = _random_params(m, 64, seed=2)
  model = models.from_mapping(m, params, train_features=x, config={"model": "cnn"})
  assert model.kind == "cnn" and (model.num_bits, model.dim) == (24, 64)
  assert model.settings == {"init": "nair", "param_dtype": "float32", "image_shape": [8, 8, 1], "channels": [4, 6],
                            "hidden": [10, 12], "activation": "tanh"}
  words = np.asarray(model.encode(x))
  np.testing.assert_array_equal(words, np.asarray(mappings.encode(m, params, x)))
  path = model.save(tmp_path / "cnn")
  with open(os.path.join(path, "model.json")) as f:
    meta = json.load(f)
  assert (meta["kind"], meta["version"], meta["settings"]) == ("cnn", 3, model.settings)
  assert {e["name"] for e in meta["arrays"]} == {
      "preprocess/mean", "preprocess/scale", *(f"params/{layer}/{leaf}" for layer in
                                               ("conv_0", "conv_1", "hidden_0", "hidden_1", "output")
                                               for leaf in ("kernel", "bias"))}
  loaded = hashjax.load_model(tmp_path / "cnn")
  assert (loaded.kind, loaded.settings, loaded.mapping) == ("cnn", model.settings, m)
  np.testing.assert_array_equal(np.asarray(loaded.encode(x)), words)
  for a, b in zip(jax.tree.leaves(loaded.params), jax.tree.leaves(params)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  _to_format_2(path)  # no hashjax wrote a CNN in format 2
  with pytest.raises(ValueError, match=r"kind 'cnn' needs format version 3 or newer, got 2$"):
    hashjax.load_model(path)


def test_training_on_digits_raises_tie_aware_ap_well_above_the_untrained_mapping(digits):
  x, y = digits
  order = np.random.default_rng(0).permutation(len(x))
  query, database = order[:200], order[200:]
  train_items = database[:1000]
  m = mappings.make_mapping("cnn", num_bits=16, image_shape=(8, 8, 1), channels=(8, 16), hidden=(64,),
                            mean=x[train_items].mean(0))
  sampler = train.balanced_sampler(y[train_items], 10, seed=0)

  def batch_fn(step):
    rows = train_items[sampler(step)]
    return {"features": x[rows], "affinity": (y[rows, None] == y[None, rows]).astype(np.int32)}

  def ap(params):
    return evaluate.evaluate_codes(mappings.encode(m, params, x[query]), mappings.encode(m, params, x[database]),
                                   num_bits=16, query_labels=y[query], db_labels=y[database])["tie_aware_ap"]

  initial = mappings.init(jax.random.key(0), m, x)
  loss_fn = talr.query_vs_rest(m, metric=talr.metric_fn("ap"), num_bits=16, alpha=3.0)
  trained, _ = train.train(params=initial, loss_fn=loss_fn, optimizer=optax.adam(1e-2), batch_fn=batch_fn,
                           num_steps=50, log_every=50)
  before, after = ap(initial), ap(trained)
  # Measured at seeds 0, 1, 2: 0.136 -> 0.694, 0.166 -> 0.783, 0.198 -> 0.839.
  assert after > before + 0.3, (before, after)


def test_config_checks_of_a_cnn_run_and_its_parameter_count():
  config = talr_ap.get_config("runlocal")
  config.model = "cnn"
  assert checks.check_run(config) is config  # digits: 8 x 8 x 1 = 64 features
  for field, value, fragment in (
      ("image_shape", (8, 8), "config.image_shape: expected (height, width, channels), three positive ints"),
      ("image_shape", (8, 0, 1), "config.image_shape: expected (height, width, channels)"),
      ("channels", (), "config.channels: expected one or more positive channel counts"),
      ("channels", (16, -1), "config.channels: expected one or more positive channel counts")):
    bad = talr_ap.get_config("runlocal")
    bad[field] = value
    with pytest.raises(checks.ConfigError, match="^" + re.escape(fragment)):
      checks.check_config(bad)
  config.image_shape = (28, 28, 1)
  checks.check_config(config)  # the width is a relation to the dataset, checked by check_run
  with pytest.raises(checks.ConfigError, match=r"^config.image_shape=28,28,1: expected a shape whose product is the "
                                               r"64 features of digits, got product 784$"):
    checks.check_run(config)
  config.dataset = "npz:/nonexistent.npz"  # sizes unknown before loading: not checked here
  checks.check_image_shape(config)
  mnist = talr_ap.get_config()
  mnist.model, mnist.hidden = "cnn", (128,)
  del mnist["image_shape"], mnist["channels"]  # a config without the fields: the mapping's defaults
  checks.check_run(mnist)
  for shape, channels, dim in (((28, 28, 1), (16, 32), 784), ((7, 5, 2), (2, 3), 70)):
    mnist.image_shape, mnist.channels = shape, channels
    m = mappings.make_mapping("cnn", num_bits=32, image_shape=shape, channels=channels, hidden=(128,))
    count = sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(_param_shapes(m, dim)))
    _, lines = checks.estimate_memory(mnist, shape=checks.DataShape(1000, dim, 10))
    assert any(line.startswith(f"model (always): {count:,} parameters (cnn, {dim} -> 32 bits)") for line in lines)


def test_experiments_train_with_model_cnn_writes_a_model_that_reproduces_its_codes(train_command):
  proc, workdir = train_command
  stdout, stderr = proc.communicate(timeout=300)
  assert proc.returncode == 0, stderr[-3000:]
  assert "talr-ap-cnn" in stdout
  model = hashjax.load_model(workdir)
  assert model.kind == "cnn" and model.settings["image_shape"] == [8, 8, 1] and model.num_bits == 32
  with open(workdir / "results.json") as f:
    results = json.load(f)
  row = next(r for r in results["rows"] if r["method"] == "talr-ap-cnn")
  task = tasks.make_task(talr_ap.get_config("runlocal"))  # the run's split
  x = task.features
  words = model.encode(x[task.query]), model.encode(x[task.database])
  assert words[0].shape == (len(task.query), 1) and words[0].dtype == jnp.uint32
  again = evaluate.evaluate_codes(*words, num_bits=32, query_labels=task.labels[task.query],
                                  db_labels=task.labels[task.database])
  assert again["tie_aware_ap"] == pytest.approx(row["tie_aware_ap"], rel=1e-6)
  assert row["tie_aware_ap"] > 0.7  # 0.864 measured (a linear mapping: 0.820)
