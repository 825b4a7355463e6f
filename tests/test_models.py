"""Tests of hashjax.models: saved models that encode new data, and the models the experiments write."""

import json
import os
import shutil
import sys
import warnings

import jax
import numpy as np
import pytest

import hashjax
from hashjax import baselines, data, mappings, models


@pytest.fixture(scope="module")
def digits():
  x, y = data.load_digits()
  return x[:300], y[:300]


def _pack_by_hand(bits):
  """uint32 words of ``bits[n, b]``: bit ``j`` of a code at position ``j % 32`` of word ``j // 32``."""
  n, b = bits.shape
  words = np.zeros((n, (b + 31) // 32), np.uint32)
  for i in range(n):
    for j in range(b):
      if bits[i, j]:
        words[i, j // 32] |= np.uint32(1 << (j % 32))
  return words


def _check_words(words, logits, *, margin=1e-4):
  """``words`` are the packed signs of ``logits`` (float64 reference), except where a logit is within
  ``margin`` of 0 (float32 rounding may go either way there; such codes are few)."""
  clear = np.all(np.abs(logits) > margin, axis=1)
  assert clear.mean() > 0.95
  np.testing.assert_array_equal(np.asarray(words)[clear], _pack_by_hand(logits > 0)[clear])


def _saved_arrays(path):
  """``{name: array}`` of a saved model, read by hand: model.json lists each array's .npy file."""
  with open(os.path.join(path, "model.json")) as f:
    return {e["name"]: np.load(os.path.join(path, e["file"])) for e in json.load(f)["arrays"]}


def _to_old_layout(path):
  """Rewrites the saved model at ``path`` as format versions 1 and 2 stored it: model.json (each array's name,
  dtype and shape, no checksums) and arrays.npz, directly in the directory."""
  arrays = _saved_arrays(path)
  with open(os.path.join(path, "model.json")) as f:
    meta = json.load(f)
  for name in os.listdir(path):
    if name.startswith("data-"):
      shutil.rmtree(os.path.join(path, name))
  os.remove(os.path.join(path, ".lock"))
  meta = {k: v for k, v in meta.items() if k not in ("data", "checksum")}
  meta["version"] = 2 if meta["kind"] == "colgen" else 1
  meta["arrays"] = [{"name": k, "dtype": v.dtype.name, "shape": list(v.shape)} for k, v in arrays.items()]
  with open(os.path.join(path, "arrays.npz"), "wb") as f:
    np.savez(f, **arrays)
  with open(os.path.join(path, "model.json"), "w") as f:
    json.dump(meta, f)
  assert sorted(os.listdir(path)) == ["arrays.npz", "model.json"]
  return meta


def _linear_model(x, *, num_bits=40, standardize=True):
  mean, scale = mappings.feature_stats(x)
  mapping = mappings.make_mapping("linear", num_bits=num_bits, mean=mean, scale=scale if standardize else None)
  params = mappings.init(jax.random.key(1), mapping, x)
  return models.from_mapping(mapping, params, train_features=x, config={"seed": 1, "hidden": (3,)})


def test_linear_model_round_trips_and_encodes_like_numpy(digits, tmp_path):
  x, _ = digits
  model = _linear_model(x)
  path = model.save(tmp_path / "model")
  loaded = hashjax.load_model(tmp_path)  # a workdir holding model/
  assert (loaded.kind, loaded.num_bits, loaded.dim, loaded.num_words) == ("linear", 40, 64, 2)
  assert loaded.feature_range == (0.0, 1.0)
  assert loaded.config == {"seed": 1, "hidden": [3]}  # the JSON form: tuples come back as lists
  arrays = _saved_arrays(path)
  assert sorted(arrays) == ["params/bias", "params/kernel", "preprocess/mean", "preprocess/scale"]
  mean, scale = arrays["preprocess/mean"], arrays["preprocess/scale"]
  kernel, bias = arrays["params/kernel"], arrays["params/bias"]
  np.testing.assert_array_equal(kernel, model.params["kernel"])
  np.testing.assert_array_equal(mean, x.astype(np.float64).mean(0).astype(np.float32))
  new = x[::7]
  logits = ((new.astype(np.float64) - mean) / scale) @ kernel.astype(np.float64) + bias
  words = loaded.encode(new)
  assert words.dtype == np.uint32 and words.shape == (len(new), 2)
  _check_words(words, logits)
  np.testing.assert_array_equal(words, model.encode(new))
  assert loaded.encode(new[0]).shape == (2,)  # a single feature vector


def test_mlp_model_round_trips_and_encodes_like_numpy(digits, tmp_path):
  x, _ = digits
  mean, scale = mappings.feature_stats(x)
  mapping = mappings.make_mapping("mlp", num_bits=20, hidden=(16,), activation="tanh", init="nair", mean=mean)
  params = mappings.init(jax.random.key(2), mapping, x)
  params = jax.tree.map(lambda p: p + 0.05, params)  # non-zero biases
  model = models.from_mapping(mapping, params, train_features=x)
  loaded = models.load_model(model.save(tmp_path / "mlp"))
  assert loaded.settings == {"init": "nair", "param_dtype": "float32", "hidden": [16], "activation": "tanh"}
  assert loaded.config is None and loaded.mapping == mapping
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
  hidden = np.tanh((x - mean.astype(np.float64)) @ p["hidden_0"]["kernel"] + p["hidden_0"]["bias"])
  logits = hidden @ p["output"]["kernel"] + p["output"]["bias"]
  _check_words(loaded.encode(x), logits)
  np.testing.assert_array_equal(loaded.encode(x), mappings.encode(mapping, params, x))


def test_itq_model_round_trips_and_encodes_like_numpy(digits, tmp_path):
  x, _ = digits
  params = baselines.fit("itq", x[:200], num_bits=24, key=jax.random.key(0))
  model = models.from_baseline("itq", params, train_features=x[:200], config={"method": "itq"})
  assert model.num_bits == 24 and model.settings == {}
  loaded = models.load_model(model.save(tmp_path / "models" / "itq-24"))  # the one model under models/
  assert loaded.kind == "itq" and type(loaded.params).__name__ == "ITQParams"
  for a, b in zip(loaded.params, params):
    np.testing.assert_array_equal(a, b)
  p = [np.asarray(a, np.float64) for a in params]
  logits = (x[200:] - p[0]) @ p[1] @ p[2]
  _check_words(loaded.encode(x[200:]), logits)
  assert hashjax.load_model(tmp_path).kind == "itq"


def test_every_baseline_round_trips(digits, tmp_path):
  x, _ = digits
  for method in ("lsh", "pca", "sh"):
    model = models.from_baseline(method, baselines.fit(method, x, num_bits=12, key=jax.random.key(3)),
                                 train_features=x)
    loaded = models.load_model(model.save(tmp_path / method))
    assert (loaded.kind, loaded.num_bits) == (method, 12)
    np.testing.assert_array_equal(loaded.encode(x[:50]), model.encode(x[:50]))


def test_wrong_feature_width_is_an_error_naming_features(digits):
  x, _ = digits
  model = _linear_model(x)
  with pytest.raises(ValueError, match=r"features: expected 64 columns .* got shape \(5, 10\)"):
    model.encode(x[:5, :10])
  with pytest.raises(ValueError, match="features"):
    model.encode(x[:5].tolist())
  bad = x[:5].copy()
  bad[1, 3] = np.nan
  with pytest.raises(ValueError, match="features: expected finite"):
    model.encode(bad)


def test_features_far_outside_the_training_range_warn(digits):
  x, _ = digits
  model = _linear_model(x)  # trained on [0, 1]: the criterion is [0 - 1, 1 + 1]
  with pytest.warns(models.FeatureRangeWarning, match=r"span \[0, 255\].*training range \[0, 1\]"):
    model.encode(np.round(x[:5] * 255).astype(np.uint8))
  with pytest.warns(models.FeatureRangeWarning):
    model.encode(x[:5] - 1.01)
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    model.encode(x[:5] * 1.9)  # within hi + (hi - lo)
    model.encode(x[:5] - 0.99)


def test_models_are_immutable_and_constructors_check_their_input(digits):
  x, _ = digits
  model = _linear_model(x)
  with pytest.raises(AttributeError, match="immutable"):
    model.num_bits = 8
  mapping = mappings.make_mapping("linear", num_bits=8)
  params = mappings.init(jax.random.key(0), mapping, x)
  with pytest.raises(ValueError, match="params: expected the parameters of a Linear mapping on 10 features"):
    models.from_mapping(mapping, params, train_features=x[:, :10])
  with pytest.raises(ValueError, match="config: expected JSON"):
    models.from_mapping(mapping, params, train_features=x, config={"f": object()})
  with pytest.raises(ValueError, match="mapping: expected"):
    models.from_mapping("linear", params, train_features=x)
  with pytest.raises(ValueError, match="params: expected ITQParams"):
    models.from_baseline("itq", baselines.fit("pca", x, num_bits=4), train_features=x)
  with pytest.raises(ValueError, match="method"):
    models.from_baseline("cnn", None, train_features=x)


def test_old_layout_models_load_and_their_corrupt_files_are_named(digits, tmp_path):
  x, _ = digits
  model = _linear_model(x)
  path = model.save(tmp_path / "m")
  meta = _to_old_layout(path)  # as format version 1 wrote it
  np.testing.assert_array_equal(models.load_model(path).encode(x[:20]), model.encode(x[:20]))
  meta_file, arrays_file = os.path.join(path, "model.json"), os.path.join(path, "arrays.npz")
  with open(arrays_file, "rb") as f:
    blob = f.read()

  def expect(pattern):
    with pytest.raises(ValueError, match=pattern):
      models.load_model(path)

  with open(meta_file, "w") as f:
    f.write(json.dumps(meta)[:-20])
  expect(f"{meta_file}: not valid JSON")
  with open(meta_file, "w") as f:
    json.dump({**meta, "version": 99}, f)
  expect(f"{meta_file}: expected format 'hashjax-model' version 1..4 .*got format 'hashjax-model' version 99")
  with open(meta_file, "w") as f:
    json.dump({**meta, "format": "other"}, f)
  expect(f"{meta_file}: expected format 'hashjax-model'")
  with open(meta_file, "w") as f:
    json.dump({**meta, "settings": {"hidden": [4]}}, f)
  expect(f"{meta_file}: does not describe a usable model: .*hidden")
  with open(meta_file, "w") as f:
    json.dump(meta, f)
  with open(arrays_file, "wb") as f:
    f.write(blob[:len(blob) // 2])
  expect(f"{arrays_file}: truncated or not an .npz archive")
  with open(arrays_file, "wb") as f:
    f.write(b"\x93NUMPY garbage")
  expect(f"{arrays_file}: truncated or not an .npz archive")
  with open(arrays_file, "wb") as f:
    np.savez(f, **{"params/kernel": np.zeros((64, 40), np.float32)})
  expect(f"{arrays_file}: missing array 'params/bias'")
  with open(arrays_file, "wb") as f:
    np.savez(f, **{"params/kernel": np.zeros((64, 41), np.float32), "params/bias": np.zeros(40, np.float32)})
  expect(f"{arrays_file}: array 'params/kernel': expected dtype float32 and shape \\(64, 40\\)")
  kernel = np.zeros((64, 40), np.float32)
  kernel[3, 4] = np.inf
  with open(arrays_file, "wb") as f:
    np.savez(f, **{"params/kernel": kernel, "params/bias": np.zeros(40, np.float32),
                   "preprocess/mean": np.zeros(64, np.float32), "preprocess/scale": np.ones(64, np.float32)})
  expect(f"{arrays_file}: array 'params/kernel': expected finite values, got 1 NaN/inf")
  os.remove(arrays_file)
  expect(f"{arrays_file}: missing")
  with open(arrays_file, "wb") as f:
    f.write(blob)
  model.save(path)  # a save over an old-layout model replaces it; arrays.npz goes with the next save, once
  assert "arrays.npz" in os.listdir(path)  # no reader of the old model.json can need it any more
  model.save(path)
  assert sorted(n[:5] for n in os.listdir(path)) == [".lock", "data-", "data-", "model"]
  np.testing.assert_array_equal(models.load_model(path).encode(x[:20]), model.encode(x[:20]))


def test_saving_is_atomic_and_leaves_no_temporary_directory(digits, tmp_path, monkeypatch):
  x, _ = digits
  first, second = _linear_model(x, num_bits=8), _linear_model(x, num_bits=16)
  first.save(tmp_path / "model")
  second.save(tmp_path / "model")  # replaces the saved model
  assert os.listdir(tmp_path) == ["model"]
  assert models.load_model(tmp_path).num_bits == 16

  def broken_write(*args, **kwargs):
    raise OSError("disk full")

  monkeypatch.setattr(np.lib.format, "write_array", broken_write)
  with pytest.raises(OSError, match="disk full"):
    first.save(tmp_path / "model")
  monkeypatch.undo()
  assert os.listdir(tmp_path) == ["model"]
  assert models.load_model(tmp_path).num_bits == 16  # the previous model, intact
  (tmp_path / "run").mkdir()
  (tmp_path / "run" / "results.json").write_text("{}")
  with pytest.raises(ValueError, match=r"run: holds files that are not a saved model \(\['results.json'\]\); "
                                       r"choose a new or empty directory$"):
    first.save(tmp_path / "run")
  assert os.listdir(tmp_path / "run") == ["results.json"]


def test_load_model_resolves_workdirs(digits, tmp_path):
  x, _ = digits
  model = models.from_baseline("pca", baselines.fit("pca", x, num_bits=8), train_features=x)
  for name in ("pca-8", "itq-8"):
    model.save(tmp_path / "models" / name)
  with pytest.raises(ValueError, match=r"holds 2 models; pass one of them: .*models/itq-8, .*models/pca-8"):
    models.load_model(tmp_path)
  assert models.load_model(tmp_path / "models" / "pca-8").kind == "pca"
  model.save(tmp_path / "model")  # a training run's own model comes first
  assert models.load_model(str(tmp_path)).num_bits == 8
  with pytest.raises(ValueError, match=r"models' holds 2 models; pass one of them: .*itq-8, .*pca-8$"):
    models.load_model(tmp_path / "models")  # a run's models/ folder itself: its models are named
  (tmp_path / "empty").mkdir()
  with pytest.raises(ValueError, match="holds no saved model"):
    models.load_model(tmp_path / "empty")
  with pytest.raises(ValueError, match="does not exist"):
    models.load_model(tmp_path / "nowhere")
  (tmp_path / "other" / "model").mkdir(parents=True)
  with pytest.raises(ValueError, match=r"other/model/model.json: missing"):
    models.load_model(tmp_path / "other")


def test_a_baseline_with_bit_weights_is_format_version_4_and_arrays_a_model_does_not_read_are_refused(digits,
                                                                                                        tmp_path):
  x, _ = digits
  params = baselines.fit("itq", x, num_bits=8, key=jax.random.key(0))
  weights = np.arange(8, dtype=np.float32)
  saved = {"plain": models.from_baseline("itq", params, train_features=x),
           "weighted": models.from_baseline("itq", params, train_features=x, bit_weights=weights),
           "linear": _linear_model(x, num_bits=8)}
  versions = {}
  for name, model in saved.items():
    with open(os.path.join(model.save(tmp_path / name), "model.json")) as f:
      versions[name] = json.load(f)["version"]
  # A hashjax that reads up to version 3 refuses the weighted model instead of loading it without its weights.
  assert versions == {"plain": 3, "weighted": 4, "linear": 3}
  np.testing.assert_array_equal(models.load_model(tmp_path / "weighted").bit_weights, weights)
  for name, extra in (("plain", "params/offset"), ("linear", "bit_weights"), ("weighted", "preprocess/mean")):
    path = str(tmp_path / name)
    arrays, meta = _saved_arrays(path), _to_old_layout(path)
    arrays[extra] = np.ones(8, np.float32)
    meta["arrays"].append({"name": extra, "dtype": "float32", "shape": [8]})
    with open(os.path.join(path, "arrays.npz"), "wb") as f:
      np.savez(f, **arrays)
    with open(os.path.join(path, "model.json"), "w") as f:
      json.dump(meta, f)
    with pytest.raises(ValueError, match=rf"{name}/model.json: array\(s\) \['{extra}'\] are not part of a "
                                         rf"'{saved[name].kind}' model \(a newer hashjax may have written them\)$"):
      models.load_model(path)


# ----------------------------------------------------------------------------
# The models the experiments write.


def _repo_on_path():
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  if root not in sys.path:
    sys.path.insert(0, root)


def _nulls(tree, where="results"):
  if tree is None:
    return [where]
  if isinstance(tree, dict):
    return [n for k, v in tree.items() for n in _nulls(v, f"{where}.{k}")]
  if isinstance(tree, list):
    return [n for i, v in enumerate(tree) for n in _nulls(v, f"{where}[{i}]")]
  return []


def test_a_training_run_writes_the_model_it_evaluated(tmp_path):
  _repo_on_path()
  from configs import lambdarank_knn  # pylint: disable=g-import-not-at-top
  from experiments import fitting, methods, tasks  # pylint: disable=g-import-not-at-top
  from experiments.methods import nair  # pylint: disable=g-import-not-at-top
  config = lambdarank_knn.get_config("runlocal,method=ranknet")
  config.num_steps, config.log_every, config.eval_every, config.checkpoint_every = 4, 2, 0, 0
  config.baselines, config.exact_l2 = (), False
  results = methods.train_and_evaluate(config, str(tmp_path))
  assert _nulls(results) == []
  with open(tmp_path / "results.json") as f:
    assert _nulls(json.load(f)) == []
  model = hashjax.load_model(tmp_path)
  assert (model.kind, model.num_bits, model.dim, model.settings["init"]) == ("linear", config.bits, 64, "nair")
  assert model.config == json.loads(json.dumps(results["config"])) and model.config["doc_pool"] == "all"
  task = tasks.make_task(config)
  mapping, _ = fitting.make_mapping(config, task)
  assert model.mapping == mapping  # the same preprocessing constants
  query_words = model.encode(task.features[task.query])
  db_words = model.encode(task.features[task.database])
  np.testing.assert_array_equal(query_words, mappings.encode(mapping, model.params, task.features[task.query]))
  rescored = nair.evaluate(config, task, query_words, db_words)
  row = results["rows"][0]
  assert (rescored["knn_error"], rescored["precision_at_radius"]) == (row["knn_error"], row["precision_at_radius"])


def test_lambdarank_records_resolved_options_not_nulls():
  _repo_on_path()
  from configs import lambdarank_knn  # pylint: disable=g-import-not-at-top
  from experiments import reporting, tasks  # pylint: disable=g-import-not-at-top
  from experiments.methods import nair  # pylint: disable=g-import-not-at-top
  config = lambdarank_knn.get_config("runlocal,score=ap")
  assert config.doc_pool is None and config.top_bins is None  # placeholders the trainer resolves
  task = tasks.make_task(config)
  record = reporting.recorded_config(config, nair.resolved_options(config, task))
  assert _nulls(record) == []
  assert record["doc_pool"] == "all" and record["top_bins"] == "any"
  config.eval_every = config.checkpoint_every = None  # only at the start and the end
  record = reporting.recorded_config(config, nair.resolved_options(config, task))
  assert (record["eval_every"], record["checkpoint_every"]) == (0, 0) and _nulls(record) == []
  config.method = "ranknet"
  assert reporting.recorded_config(config, nair.resolved_options(config, task))["top_bins"] == "unused"
  config = lambdarank_knn.get_config("runlocal,score=retrieval")
  config.affinity, config.num_neighbors = "neighbors", 10
  task = tasks.make_task(config)
  record = reporting.recorded_config(config, nair.resolved_options(config, task))
  expected = round(10 * (len(task.train) - 1) / len(task.database))  # the "scaled" rule, by hand
  assert record["train_neighbors"] == expected == task.train_neighbors
  assert task.train_relevance.sum(axis=1).tolist() == [expected] * len(task.train)


def test_evaluate_writes_one_model_per_baseline_and_length(tmp_path):
  _repo_on_path()
  from configs import baselines as baselines_config  # pylint: disable=g-import-not-at-top
  from experiments import evaluate, tasks  # pylint: disable=g-import-not-at-top
  config = baselines_config.get_config("runlocal")
  config.methods, config.bits = ("itq",), (16,)
  rows = evaluate.evaluate(config, str(tmp_path))
  assert rows[0]["model"] == os.path.join("models", "itq-16")
  with open(tmp_path / "results.json") as f:
    assert _nulls(json.load(f)) == []
  model = hashjax.load_model(tmp_path)  # the only model under models/
  assert (model.kind, model.num_bits) == ("itq", 16) and model.config["methods"] == ["itq"]
  protocol = tasks.load_protocol(config)
  split = protocol.split
  result = hashjax.evaluate_codes(model.encode(protocol.features[split.query]),
                                  model.encode(protocol.features[split.database]),
                                  query_labels=protocol.labels[split.query],
                                  db_labels=protocol.labels[split.database], num_bits=16,
                                  radius=config.radius, k=config.precision_k)
  assert float(result["tie_aware_ap"]) == rows[0]["tie_aware_ap"]


def test_evaluate_unseen_database_searches_only_the_items_no_method_was_fitted_on(tmp_path):
  _repo_on_path()
  from configs import baselines as baselines_config  # pylint: disable=g-import-not-at-top
  from experiments import evaluate, tasks  # pylint: disable=g-import-not-at-top
  config = baselines_config.get_config("runlocal")
  config.methods, config.bits, config.unseen_database = ("itq",), (16,), True
  rows = evaluate.evaluate(config, str(tmp_path))
  protocol = tasks.load_protocol(config)
  split = protocol.split
  trained = set(split.train.tolist())
  unseen = [i for i in split.database.tolist() if i not in trained]
  assert 0 < len(unseen) < len(split.database)
  model = hashjax.load_model(tmp_path / "models" / "itq-16")
  result = hashjax.evaluate_codes(model.encode(protocol.features[split.query]),
                                  model.encode(protocol.features[unseen]),
                                  query_labels=protocol.labels[split.query], db_labels=protocol.labels[unseen],
                                  num_bits=16, radius=config.radius, k=config.precision_k)
  assert float(result["tie_aware_ap"]) == rows[0]["tie_aware_ap"]
  assert float(result["tie_aware_precision_at_k"]) == rows[0]["tie_aware_precision_at_k"]


def test_evaluate_scores_saved_models_and_learned_bit_weights_beside_the_baselines(tmp_path):
  _repo_on_path()
  from configs import baselines as baselines_config  # pylint: disable=g-import-not-at-top
  from experiments import evaluate, tasks  # pylint: disable=g-import-not-at-top
  config = baselines_config.get_config("runlocal")
  config.methods, config.bits, config.weighted = ("lsh", "itq"), (16,), ("itq",)
  first = evaluate.evaluate(config, str(tmp_path / "first"))
  config.methods, config.weighted = ("lsh",), ()
  config.models = (str(tmp_path / "first"),)  # a run's workdir: every model under its models/
  second = evaluate.evaluate(config, str(tmp_path / "second"))
  assert [r["method"] for r in first] == ["lsh", "itq", "itq+w"]
  assert [r["method"] for r in second] == ["lsh", "itq-16", "itq-16+w", "lsh-16"]  # weights saved with the model
  # A saved model scores what it scored when it was fitted: the same queries and database, with its weights too.
  assert second[1]["tie_aware_ap"] == first[1]["tie_aware_ap"]
  assert second[2]["tie_aware_ap"] == first[2]["tie_aware_ap"]
  assert second[3]["tie_aware_ap"] == second[0]["tie_aware_ap"] == first[0]["tie_aware_ap"]
  weighted = first[2]
  assert weighted.get("precision_at_radius") is None  # real-valued distances: no Hamming radius
  # The weights: EGD on the training codes; the distances by a loop over the bits.
  protocol = tasks.load_protocol(config)
  split = protocol.split
  model = hashjax.load_model(tmp_path / "first" / "models" / "itq-16")
  train_bits = hashjax.codes.unpack_bits(model.encode(protocol.features[split.train]), 16)
  w = np.asarray(hashjax.weighting.fit(train_bits, protocol.labels[split.train], solver="egd", seed=config.seed),
                 np.float64)
  qb, db = (np.asarray(hashjax.codes.unpack_bits(model.encode(protocol.features[i]), 16)) for i in (split.query,
                                                                                                    split.database))
  distances = sum(w[j] * (qb[:, j][:, None] != db[:, j][None, :]) for j in range(16))
  result = hashjax.evaluate_distances(distances, query_labels=protocol.labels[split.query],
                                      db_labels=protocol.labels[split.database], k=config.precision_k)
  assert weighted["tie_aware_ap"] == pytest.approx(float(result["tie_aware_ap"]), abs=1e-6)
  assert weighted["pessimistic_ap"] <= weighted["tie_aware_ap"] <= weighted["optimistic_ap"]


def test_evaluate_refuses_a_saved_model_of_another_split_and_weights_of_an_unrun_method(tmp_path):
  _repo_on_path()
  from configs import baselines as baselines_config  # pylint: disable=g-import-not-at-top
  from experiments import evaluate  # pylint: disable=g-import-not-at-top
  from experiments.methods import checks  # pylint: disable=g-import-not-at-top
  config = baselines_config.get_config("runlocal")
  config.methods, config.bits = ("lsh",), (16,)
  evaluate.evaluate(config, str(tmp_path / "first"))
  config.seed = 1  # another split: the saved model may have trained on this run's queries
  config.models = (str(tmp_path / "first" / "models" / "lsh-16"),)
  with pytest.raises(ValueError, match=r"config.models: .* seed=0, this run has 1"):
    evaluate.evaluate(config, str(tmp_path / "second"))
  config.models, config.weighted = (), ("itq",)
  with pytest.raises(checks.ConfigError, match=r"config.weighted: expected methods among config.methods"):
    checks.check_config(config)
  config.weighted, config.methods = (), ("lsh", "ksh")  # 1,000 anchors from runlocal's 500 training items
  with pytest.raises(checks.ConfigError, match=r"config.methods: ksh draws 1000 anchors .* gives 500"):
    checks.check_baselines_fit(config)


def test_evaluate_refuses_what_it_cannot_run_in_one_line_before_fitting(tmp_path, monkeypatch):
  _repo_on_path()
  from configs import baselines as baselines_config  # pylint: disable=g-import-not-at-top
  from experiments import evaluate, fitting  # pylint: disable=g-import-not-at-top
  config = baselines_config.get_config("runlocal")
  config.methods, config.bits = ("lsh",), (16,)
  evaluate.evaluate(config, str(tmp_path / "first"))
  x = np.random.default_rng(0).random((40, 10), dtype=np.float32)
  models.from_baseline("lsh", hashjax.baselines.fit("lsh", x, num_bits=8, key=jax.random.key(0)),
                       train_features=x).save(tmp_path / "narrow")

  def no_fitting(*args, **kwargs):
    raise AssertionError("fitting started")
  monkeypatch.setattr(fitting, "baseline_model", no_fitting)
  cases = [
      # a model of another width than the dataset's
      ({"models": (str(tmp_path / "narrow"),)}, r"^config.models: .*narrow encodes 10 features, this run's "
                                                 r"dataset digits has 64$"),
      # a folder holding no model
      ({"models": (str(tmp_path / "void"),)}, r"^config.models: .*void: path: .* holds no saved model"),
      # the unseen database needs the model's training items to be this run's
      ({"models": (str(tmp_path / "first" / "models" / "lsh-16"),), "unseen_database": True,
        "train_per_class": 40}, r"^config.models: .* train_per_class=50, this run has 40; some of this run's unseen"),
      # a split the classes cannot give
      ({"train_per_class": 170}, r"^config.queries_per_class / train_per_class on digits: labels: class"),
      # no database item outside the training subset: 40 items in each class, 10 queries and 30 training items
      ({"dataset": f"npz:{tmp_path / 'even.npz'}", "queries_per_class": 10, "train_per_class": 30,
        "unseen_database": True}, r"^config.unseen_database: expected database items outside the training subset"),
  ]
  (tmp_path / "void").mkdir()
  np.savez(tmp_path / "even.npz", features=np.random.default_rng(1).random((120, 64), dtype=np.float32),
           labels=np.repeat(np.arange(3), 40))
  for change, message in cases:
    run = config.copy_and_resolve_references()
    run.update(change)
    with pytest.raises(ValueError, match=message):
      evaluate.evaluate(run, str(tmp_path / "second"))
  # Into a workdir holding models of another split: refused before the data loads.
  run = config.copy_and_resolve_references()
  run.seed = 1
  with pytest.raises(ValueError, match=r"^config.seed=1: --workdir=.*first holds models of another split "
                                       r"\(.*lsh-16: seed=0\); choose another --workdir$"):
    evaluate.evaluate(run, str(tmp_path / "first"))
  # Where a model would be saved, a folder of other files, or a models/ that is a file: refused before fitting.
  (tmp_path / "notes" / "models" / "lsh-16").mkdir(parents=True)
  (tmp_path / "notes" / "models" / "lsh-16" / "notes.txt").write_text("mine")
  (tmp_path / "flat").mkdir()
  (tmp_path / "flat" / "models").write_text("")
  for work, message in (("notes", r"lsh-16: holds files that are not a saved model \(\['notes.txt'\]\)"),
                        ("flat", r"models/lsh-16: is below the file .*flat/models; refusing to replace it")):
    with pytest.raises(ValueError, match=rf"^--workdir=.*{work}: cannot hold the fitted models: .*{message}"):
      evaluate.evaluate(config, str(tmp_path / work))
  assert (tmp_path / "notes" / "models" / "lsh-16" / "notes.txt").read_text() == "mine"
  # The same saved model named twice: a run's workdir and its model's folder, a training run's workdir and its
  # model/.
  x64 = np.random.default_rng(0).random((40, 64), dtype=np.float32)
  models.from_baseline("pca", hashjax.baselines.fit("pca", x64, num_bits=16),
                       train_features=x64).save(tmp_path / "trained" / "model")
  for named in ((tmp_path / "first", tmp_path / "first" / "models" / "lsh-16"),
                (tmp_path / "trained", tmp_path / "trained" / "model")):
    run = config.copy_and_resolve_references()
    run.models = tuple(str(p) for p in named)
    with pytest.raises(ValueError, match=rf"^config.models: expected each model once, got {named[1]} twice"):
      evaluate.evaluate(run, str(tmp_path / "second"))


def test_evaluate_names_saved_models_of_one_folder_name_apart(tmp_path):
  _repo_on_path()
  from configs import baselines as baselines_config  # pylint: disable=g-import-not-at-top
  from experiments import evaluate  # pylint: disable=g-import-not-at-top
  from experiments.methods import checks  # pylint: disable=g-import-not-at-top
  config = baselines_config.get_config("runlocal")
  config.methods, config.bits, config.weighted = ("lsh",), (16,), ()
  x = np.random.default_rng(0).random((40, 64), dtype=np.float32)
  for run, num_bits in (("a", 16), ("b", 16), ("c", 8)):
    models.from_baseline("pca", hashjax.baselines.fit("pca", x, num_bits=num_bits),
                         train_features=x).save(tmp_path / run / "models" / "pca")
  (tmp_path / "d" / "models" / ".old").mkdir(parents=True)  # a hidden folder: not one of the run's models
  (tmp_path / "d" / "models" / ".old" / "model.json").write_text("{}")
  models.from_baseline("pca", hashjax.baselines.fit("pca", x, num_bits=8),
                       train_features=x).save(tmp_path / "d" / "models" / "lsh")
  config.models = tuple(str(tmp_path / run / "models" / "pca") for run in "abc") + (str(tmp_path / "d"),)
  rows = evaluate.evaluate(config, str(tmp_path / "out"))
  # Each named by as much of its path as tells it apart; d's model is "lsh", the name of a method of the run.
  assert [(r["method"], r["bits"]) for r in rows] == [
      ("lsh", 16), ("a/models/pca", 16), ("b/models/pca", 16), ("c/models/pca", 8), ("models/lsh", 8)]
  assert rows[1]["tie_aware_ap"] == rows[2]["tie_aware_ap"]  # the same model, saved twice
  for field, value, message in (("methods", ("lsh", "itq", "lsh"), "expected distinct names, got 'lsh' twice"),
                                ("bits", (16, 32, 16), "expected distinct code lengths, got 16 twice")):
    run = config.copy_and_resolve_references()
    run[field] = value
    with pytest.raises(checks.ConfigError, match=rf"^config.{field}: {message}$"):
      checks.check_config(run)


def test_evaluate_reruns_into_a_workdir_a_killed_first_save_left(tmp_path):
  """A folder of models/ without a model.json (the first save was killed) is no model of another split."""
  _repo_on_path()
  from configs import baselines as baselines_config  # pylint: disable=g-import-not-at-top
  from experiments import evaluate  # pylint: disable=g-import-not-at-top
  config = baselines_config.get_config("runlocal")
  config.methods, config.bits = ("lsh",), (16,)
  (tmp_path / "models" / "lsh-16").mkdir(parents=True)
  (tmp_path / "models" / "itq-16").mkdir()
  rows = evaluate.evaluate(config, str(tmp_path))
  assert [r["method"] for r in rows] == ["lsh"]
  assert models.load_model(tmp_path / "models" / "lsh-16").kind == "lsh"


def test_evaluate_refuses_a_models_folder_it_cannot_write_before_fitting(tmp_path, monkeypatch):
  _repo_on_path()
  from configs import baselines as baselines_config  # pylint: disable=g-import-not-at-top
  from experiments import evaluate  # pylint: disable=g-import-not-at-top
  config = baselines_config.get_config("runlocal")
  config.methods, config.bits = ("lsh",), (16,)
  (tmp_path / "models").mkdir()
  access = os.access
  # models/ read-only (lsh-16 would be made there), then models/lsh-16 itself read-only
  for folder, where in (("models", r" \(.*models, where it would be created\)"), ("lsh-16", "")):
    if folder == "lsh-16":
      (tmp_path / "models" / "lsh-16").mkdir()
    with monkeypatch.context() as m:  # as a read-only folder answers
      m.setattr(os, "access", lambda p, mode, f=folder: False if os.path.basename(p) == f else access(p, mode))
      with pytest.raises(ValueError, match=rf"^--workdir=.*: cannot hold the fitted models: .*models/lsh-16: "
                                           rf"expected a writable directory for the model, got one that is not "
                                           rf"writable{where}$"):
        evaluate.evaluate(config, str(tmp_path))
  (tmp_path / "models" / "lsh-16").rmdir()
  (tmp_path / "models" / "lsh-16").symlink_to(tmp_path / "nowhere")  # a link to nothing: no folder to save into
  with pytest.raises(ValueError, match=r"^--workdir=.*: cannot hold the fitted models: .*models/lsh-16: exists "
                                       r"and is not a directory"):
    evaluate.evaluate(config, str(tmp_path))
