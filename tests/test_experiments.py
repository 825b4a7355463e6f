"""Tests of the experiment pieces (experiments/, configs/): TALR batches, config variants, splits, data."""

import json
import os
import sys

import numpy as np
import pytest

# ----------------------------------------------------------------------------
# The TALR experiment's batches (experiments.methods.talr).


def _repo_on_path():
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  if root not in sys.path:
    sys.path.insert(0, root)


def test_talr_batches_are_pure_in_the_step_and_databases_exclude_the_queries():
  _repo_on_path()
  from configs import talr_ap  # pylint: disable=g-import-not-at-top
  from experiments import tasks  # pylint: disable=g-import-not-at-top
  from experiments.methods import talr  # pylint: disable=g-import-not-at-top
  config = talr_ap.get_config("runlocal,model=mlp")
  config.augment_shift = 1  # every training image shifted by up to 1 pixel
  task = tasks.make_task(config)
  batch_fn = talr.make_batch_fn(config, task)
  m = 10 * config.batch_per_class
  a, b = batch_fn(3), batch_fn(3)
  assert a["features"].shape == (m, task.features.shape[1]) and a["affinity"].shape == (m, m)
  np.testing.assert_array_equal(a["features"], b["features"])
  assert not np.array_equal(a["features"], batch_fn(4)["features"])
  config.setting, config.database_size = "query_vs_database", 50
  db = talr.make_batch_fn(config, task)(3)
  assert db["db_features"].shape == (50, task.features.shape[1]) and db["affinity"].shape == (m, 50)
  config.augment_shift, config.database_size = 0, 0
  full = talr.make_batch_fn(config, task)(3)
  n = len(task.train)
  assert full["db_features"].shape[0] == n - m  # the rest of the training set
  assert full["affinity"].shape == (m, n - m)


def test_shift_images_translates_and_fills_with_zeros():
  _repo_on_path()
  from experiments.augment import shift_images  # pylint: disable=g-import-not-at-top
  x = np.arange(16, dtype=np.float32).reshape(1, 16)
  np.testing.assert_array_equal(shift_images(x, np.array([[0, 0]])), x)
  down_right = shift_images(x, np.array([[1, 2]])).reshape(4, 4)
  np.testing.assert_array_equal(down_right[1:, 2:], x.reshape(4, 4)[:3, :2])
  assert np.all(down_right[0] == 0) and np.all(down_right[:, :2] == 0)
  with pytest.raises(ValueError, match="images"):
    shift_images(np.zeros((1, 5), np.float32), np.array([[0, 0]]))


def test_talr_config_variants_hold_the_options_chosen_for_them():
  _repo_on_path()
  from configs import talr_ap, talr_ndcg  # pylint: disable=g-import-not-at-top
  linear = talr_ap.get_config()
  assert (linear.model, linear.bits, linear.alpha, linear.learning_rate) == ("linear", 32, 3.0, 1e-2)
  assert (linear.lr_schedule, linear.warmup_steps, linear.num_steps, linear.augment_shift) == ("cosine", 50, 3000, 1)
  assert talr_ap.get_config("bits=16").alpha == 5.0 and talr_ap.get_config("bits=64").alpha == 3.0
  for arg in ("model=mlp", "model=mlp,bits=16"):
    mlp = talr_ap.get_config(arg)
    assert (mlp.model, mlp.alpha, mlp.learning_rate, mlp.lr_schedule, mlp.warmup_steps, mlp.num_steps) == \
        ("mlp", 1.0, 3e-3, "constant", 0, 1000)
  assert talr_ap.get_config("model=mlp,bits=16").bits == 16
  quick = talr_ap.get_config("runlocal")
  assert quick.dataset == "digits" and quick.augment_shift == 0 and quick.warmup_steps < quick.num_steps
  ndcg = talr_ndcg.get_config("bits=16")  # its own options, whatever the length
  assert (ndcg.alpha, ndcg.learning_rate, ndcg.num_steps, ndcg.affinity) == (1.0, 3e-3, 1000, "euclidean")
  for bad in ("fast", "bits", "model=cnn", "runlocal=1"):
    with pytest.raises(ValueError, match="config argument"):
      talr_ap.get_config(bad)


def test_parse_arg_types_values_like_the_spec():
  _repo_on_path()
  from configs import common as configs_common  # pylint: disable=g-import-not-at-top
  spec = dict(model=("linear", "mlp"), bits=int, steps=10, name="a", runlocal=False)
  assert configs_common.parse_arg(None, **spec).to_dict() == \
      {"model": "linear", "bits": None, "steps": 10, "name": "a", "runlocal": False}
  assert configs_common.parse_arg("runlocal, bits=16,steps=3,name=b,model=mlp", **spec).to_dict() == \
      {"model": "mlp", "bits": 16, "steps": 3, "name": "b", "runlocal": True}


def test_train_and_evaluate_names_an_unknown_method(tmp_path):
  _repo_on_path()
  from configs import talr_ap  # pylint: disable=g-import-not-at-top
  from experiments import methods  # pylint: disable=g-import-not-at-top
  config = talr_ap.get_config("runlocal")
  config.method = "lambda"
  with pytest.raises(ValueError, match="config.method"):
    methods.train_and_evaluate(config, str(tmp_path))


@pytest.mark.parametrize("arg", [None, "runlocal"])
def test_validation_heldout_split_mirrors_the_protocol(arg):
  _repo_on_path()
  from configs import talr_ap  # pylint: disable=g-import-not-at-top
  from experiments import tasks  # pylint: disable=g-import-not-at-top
  config = talr_ap.get_config(arg)
  config.eval_split = "validation_heldout"
  protocol, train, query, database = tasks.evaluation_split(config)
  full_train = protocol.split.train
  q, h = config.val_per_class, config.val_heldout_per_class
  t = config.train_per_class - q - h
  held_out = np.setdiff1d(database, train)
  # Queries, trained-on and held-out items partition the protocol's training set.
  assert not np.intersect1d(query, database).size and not np.intersect1d(query, train).size
  np.testing.assert_array_equal(np.sort(np.concatenate([query, database])), np.sort(full_train))
  assert np.all(np.isin(train, database))
  for indices, per_class in ((query, q), (train, t), (held_out, h), (database, t + h)):
    assert len(np.unique(indices)) == len(indices)
    counts = np.bincount(protocol.labels[indices], minlength=10)
    np.testing.assert_array_equal(counts, per_class)
  if arg is None:  # MNIST-10k: 1,000 queries, 2,250 trained on, 4,000 database of which 44% unseen
    assert (len(query), len(train), len(database)) == (1000, 2250, 4000)
  # The plain validation split has the same queries and trains on its whole database.
  config.eval_split = "validation"
  _, v_train, v_query, v_database = tasks.evaluation_split(config)
  np.testing.assert_array_equal(v_query, query)
  np.testing.assert_array_equal(v_database, database)
  np.testing.assert_array_equal(v_train, v_database)
  # The seed redraws the held-out items; the same seed gives the same split.
  config.eval_split = "validation_heldout"
  np.testing.assert_array_equal(tasks.evaluation_split(config)[1], train)
  config.seed = 1
  assert not np.array_equal(tasks.evaluation_split(config)[1], train)
  config.eval_split = "validate"
  with pytest.raises(ValueError, match="eval_split"):
    tasks.evaluation_split(config)


def test_tune_split_must_be_a_validation_split(tmp_path):
  _repo_on_path()
  from configs import talr_ap  # pylint: disable=g-import-not-at-top
  from experiments import methods  # the library half of experiments/tune.py (no flags)
  with pytest.raises(ValueError, match="split"):
    methods.tune(talr_ap.get_config("runlocal"), "seed=0", str(tmp_path), split="test")
  config = talr_ap.get_config("runlocal")
  config.log_every = config.eval_every = config.checkpoint_every = 2
  config.warmup_steps = 0  # fewer than the 2 steps of the grid
  rows = methods.tune(config, "num_steps=2", str(tmp_path), split="validation_heldout")
  assert len(rows) == 1 and 0.0 < rows[0]["tie_aware_ap"] <= 1.0
  saved = json.loads((tmp_path / "tuning.json").read_text())
  assert saved["split"] == "validation_heldout"
  results = json.loads((tmp_path / "num_steps=2" / "results.json").read_text())
  assert results["config"]["eval_split"] == "validation_heldout"


def test_talr_input_noise_is_gaussian_pure_in_the_step_and_keeps_affinities():
  _repo_on_path()
  from configs import talr_ap  # pylint: disable=g-import-not-at-top
  from experiments import tasks  # pylint: disable=g-import-not-at-top
  from experiments.methods import talr  # pylint: disable=g-import-not-at-top
  config = talr_ap.get_config("runlocal")
  config.input_noise = 0.0
  task = tasks.make_task(config)
  clean = talr.make_batch_fn(config, task)(3)
  config.input_noise = 0.5
  noisy_fn = talr.make_batch_fn(config, task)
  noisy = noisy_fn(3)
  np.testing.assert_array_equal(noisy["features"], noisy_fn(3)["features"])  # pure in the step
  assert not np.array_equal(noisy["features"], noisy_fn(4)["features"])
  np.testing.assert_array_equal(noisy["affinity"], clean["affinity"])  # of the clean items
  diff = noisy["features"] - clean["features"]
  assert abs(diff.std() - 0.5) < 0.05 and abs(diff.mean()) < 0.05


def test_experiments_read_a_users_own_digit_set_from_idx_or_npz(tmp_path):
  # --config.dataset=idx:<images>,<labels> / npz:<file>: the same protocol on data outside the
  # package (here the embedded MNIST files by path, and scikit-learn's digits saved as npz).
  _repo_on_path()
  from configs import talr_ap  # pylint: disable=g-import-not-at-top
  from experiments import methods, tasks  # pylint: disable=g-import-not-at-top
  from hashjax import data  # pylint: disable=g-import-not-at-top
  images = str(data.MNIST_T10K_DIR / "t10k-images-idx3-ubyte.gz")
  labels = str(data.MNIST_T10K_DIR / "t10k-labels-idx1-ubyte.gz")
  x, y = tasks.load_dataset(f"idx:{images},{labels}")
  x0, y0 = data.load_mnist_t10k()
  np.testing.assert_array_equal(x, x0)
  np.testing.assert_array_equal(y, y0)
  digits_x, digits_y = data.load_digits()
  np.savez(tmp_path / "digits.npz", features=digits_x, labels=digits_y)
  config = talr_ap.get_config("runlocal")
  config.dataset = f"npz:{tmp_path / 'digits.npz'}"
  config.num_steps, config.warmup_steps = 4, 0
  config.log_every = config.eval_every = config.checkpoint_every = 2
  results = methods.train_and_evaluate(config, str(tmp_path / "run"))
  assert 0.0 < results["rows"][0]["tie_aware_ap"] <= 1.0
  protocol = tasks.load_protocol(config)
  np.testing.assert_array_equal(protocol.labels, digits_y)
  for bad in ("idx:only_one_file", "idx:,", "npz:", "csv:data.csv"):
    with pytest.raises(ValueError, match="config.dataset"):
      tasks.load_dataset(bad)


def test_pad_malloc_heaps_sets_glibc_top_pad():
  _repo_on_path()
  import platform  # pylint: disable=g-import-not-at-top
  from experiments import process  # pylint: disable=g-import-not-at-top
  if platform.libc_ver()[0] != "glibc":
    pytest.skip(f"mallopt(M_TOP_PAD) is glibc's; this C library is {platform.libc_ver()[0] or 'unknown'}")
  assert process.pad_malloc_heaps() is True
  assert process.pad_malloc_heaps(128 << 10) is True  # glibc's default again
