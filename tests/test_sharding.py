"""hashjax.sharding on 8 devices: search, histograms, evaluation and data-parallel training against one device
and brute-force numpy references.

The checks need several devices, so they run in one subprocess with 8 forced host devices
(``XLA_FLAGS=--xla_force_host_platform_device_count=8``, CPU), which computes the sharded and the single-device
answers and saves them; the tests here compare them with each other and with references computed by plain
numpy (full scans, lexicographic sorts, counting loops).
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from brute_force import bound_ap_direct, eq3_direct, eq4_direct, precision_at_k_direct, ref_distances, ref_radius
from hashjax import sharding

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The subprocess: data from a seeded generator, every answer saved to an npz, error messages to JSON.
SCRIPT = r'''
import json, sys
import numpy as np
import jax
import optax
from hashjax import codes, evaluate, histograms, mappings, search, sharding
from hashjax import train as train_lib
from experiments import fitting, tasks
from experiments.methods import nair, talr
from configs import lambdarank_knn, talr_ap

out, errors = {}, {}
assert jax.device_count() == 8, jax.devices()
mesh = sharding.data_mesh()
rng = np.random.default_rng(0)
num_bits, n = 40, 203  # 203 rows: 8 shards of 26 after 5 padding rows
pool = rng.integers(0, 2, (12, num_bits))  # a few distinct codes: many ties
x = np.asarray(codes.pack_bits(pool[rng.integers(0, 12, n)]))
q = np.asarray(codes.pack_bits(np.concatenate([pool[:3], rng.integers(0, 2, (4, num_bits))])))
out["x"], out["q"] = x, q
xs = sharding.shard_rows(x, mesh, pad=True)
out["x_rows"] = np.asarray(xs.shape[0])
# One process's rows (here every row) laid out from its own block: shard_rows' array and layout, padding included.
rows = sharding.process_rows(n, mesh)
xp = sharding.shard_process_rows(x[rows], mesh, num_rows=n, pad=True)
out["process_rows"], out["process_x"] = np.array([rows.start, rows.stop]), np.asarray(xp)
out["process_x_layout"] = np.asarray(xp.sharding.is_equivalent_to(xs.sharding, 2))
for k in (5, n):  # k = n: more than a shard's 26 rows
  for tag, (d, i) in (("sharded", sharding.knn(q, xs, k, num_db=n)), ("single", search.knn(q, x, k))):
    out[f"knn{k}_{tag}_d"], out[f"knn{k}_{tag}_i"] = np.asarray(d), np.asarray(i)
w = rng.uniform(0, 2, num_bits).astype(np.float32)
w[::7] = 0  # zero weights: more ties
out["w"] = w
for k in (5, 60):  # 60: more than a shard's 26 rows
  for tag, (d, i) in (("sharded", sharding.knn(q, xs, k, num_db=n, weights=w)),
                      ("single", search.knn(q, x, k, weights=w))):
    out[f"wknn{k}_{tag}_d"], out[f"wknn{k}_{tag}_i"] = np.asarray(d), np.asarray(i)
radii = np.array([0, 3, 9, 40, 12, 1, 7])
for name, r in (("rq", radii),):
  for tag, res in (("sharded", sharding.radius_search(q, xs, r, num_db=n)), ("single", search.radius_search(q, x, r))):
    for field in ("distances", "indices", "offsets"):
      out[f"{name}_{tag}_{field}"] = np.asarray(getattr(res, field))
qlab, xlab = rng.integers(0, 3, q.shape[0]), rng.integers(0, 3, n)
aff = rng.integers(0, 4, (q.shape[0], n))
out["qlab"], out["xlab"], out["aff"] = qlab, xlab, aff
out["hist_labels"] = np.asarray(sharding.hamming_histogram(q, xs, num_bits=num_bits, query_labels=qlab,
                                                           db_labels=xlab, num_db=n))
out["hist_aff"] = np.asarray(sharding.hamming_histogram(q, xs, aff, num_bits=num_bits, num_db=n))
# evaluate_codes on a database split over the 8 devices (200 rows, no padding).
table = evaluate.evaluate_codes(q, sharding.shard_rows(x[:200], mesh), num_bits=num_bits, query_labels=qlab,
                                db_labels=xlab[:200], radius=3, k=20)
out["eval_sharded"] = np.array(json.dumps(table))

def error(name, fn):
  try:
    fn()
  except ValueError as e:
    errors[name] = str(e)

error("shard_rows", lambda: sharding.shard_rows(x, mesh))
error("shard_batch", lambda: sharding.shard_batch({"features": np.ones((12, 3))}, mesh))
error("process_rows_count", lambda: sharding.shard_process_rows(x[:100], mesh, num_rows=n, pad=True))
error("process_rows_pad", lambda: sharding.shard_process_rows(x, mesh, num_rows=n))
error("knn_unsharded", lambda: sharding.knn(q, x, 3))
error("knn_k", lambda: sharding.knn(q, xs, n + 1, num_db=n))
error("num_db", lambda: sharding.knn(q, xs, 3, num_db=xs.shape[0] + 1))
error("weights", lambda: sharding.knn(q, xs, 3, num_db=n, weights=-w))

# Data-parallel training through the experiments' objectives and batches, 2 steps on 8 devices and on one.
def run(config, module, replicated, mesh):
  task = tasks.make_task(config)
  mapping, params = fitting.make_mapping(config, task)
  params, history = train_lib.train(params=params, loss_fn=module.make_objective(config, mapping, task),
                                    optimizer=fitting.make_optimizer(config),
                                    batch_fn=module.make_batch_fn(config, task), num_steps=2, log_every=1,
                                    mesh=mesh, replicated=replicated if mesh is not None else ())
  return params, [h["loss"] for h in history]

cfg_talr = talr_ap.get_config("runlocal")
cfg_talr.batch_per_class, cfg_talr.bits = 4, 8  # 40 rows: 5 per device
cfg_nair = lambdarank_knn.get_config("runlocal")
cfg_nair.queries_per_batch, cfg_nair.docs_per_query, cfg_nair.num_devices = 16, 20, 8
for name, cfg, module, replicated in (("talr", cfg_talr, talr, ()),
                                      ("lambdarank", cfg_nair, nair, nair.replicated_keys(cfg_nair, mesh))):
  for tag, m in (("sharded", mesh), ("single", None)):
    params, losses = run(cfg, module, replicated, m)
    leaves = jax.tree.leaves(params)
    out[f"{name}_{tag}_params"] = np.concatenate([np.asarray(p).ravel() for p in leaves])
    out[f"{name}_{tag}_losses"] = np.asarray(losses)
    out[f"{name}_{tag}_devices"] = np.asarray(min(len(p.sharding.device_set) for p in leaves))
error("train_batch", lambda: run(talr_ap.get_config("runlocal"), talr, (), mesh))  # 100 rows on 8 devices

# experiments.evaluate over the 8 devices scores a saved baseline model that carries bit weights (its plain row:
# a weighted ranking reads the whole database on one host), as one device scored it.
import tempfile
from configs import baselines as baselines_config
from experiments import evaluate as evaluate_run
cfg = baselines_config.get_config("runlocal")
cfg.methods, cfg.bits, cfg.weighted = ("itq",), (8,), ("itq",)
work = tempfile.mkdtemp()
single = evaluate_run.evaluate(cfg, work + "/one")
cfg.methods, cfg.weighted, cfg.num_devices, cfg.models = ("lsh",), (), 8, (work + "/one",)
many = evaluate_run.evaluate(cfg, work + "/many")
errors["evaluate_rows"] = [[r["method"], r["tie_aware_ap"]] for r in many]
errors["evaluate_single"] = [[r["method"], r["tie_aware_ap"]] for r in single]
np.savez(sys.argv[1], **out)
with open(sys.argv[2], "w") as f:
  json.dump(errors, f)
'''


@pytest.fixture(scope="module")
def results(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("sharding")
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu",
             PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp / "out.npz"), str(tmp / "errors.json")], cwd=ROOT,
                        env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-4000:]
  with np.load(tmp / "out.npz") as f:
    out = dict(f)
  with open(tmp / "errors.json") as f:
    return out, json.load(f)


def _ref_knn(q, x, k):
  d = ref_distances(q, x)
  order = np.stack([np.lexsort((np.arange(x.shape[0]), row))[:k] for row in d])
  return np.take_along_axis(d, order, 1), order


def test_knn_matches_single_device_and_brute_force_with_ties(results):
  out, _ = results
  q, x = out["q"], out["x"]
  assert int(out["x_rows"]) == 208  # padded to 8 x 26
  for k in (5, 203):
    ref_d, ref_i = _ref_knn(q, x, k)
    for tag in ("sharded", "single"):
      np.testing.assert_array_equal(out[f"knn{k}_{tag}_d"], ref_d, err_msg=f"k={k} {tag}")
      np.testing.assert_array_equal(out[f"knn{k}_{tag}_i"], ref_i, err_msg=f"k={k} {tag}")
  assert (np.diff(ref_d, axis=1) == 0).sum() > 0  # ties were broken by index


def test_weighted_knn_matches_single_device_and_brute_force(results):
  out, errors = results
  q, x, w = out["q"], out["x"], out["w"]
  bits = lambda words: ((words[:, :, None] >> np.arange(32, dtype=np.uint32)) & 1).reshape(words.shape[0], -1)[:, :40]
  d = (bits(q)[:, None, :] != bits(x)[None, :, :]).astype(np.float64) @ w.astype(np.float64)  # [Q, N] weighted
  for k in (5, 60):
    order = np.stack([np.lexsort((np.arange(x.shape[0]), row))[:k] for row in d])
    np.testing.assert_array_equal(out[f"wknn{k}_sharded_i"], order)
    np.testing.assert_allclose(out[f"wknn{k}_sharded_d"], np.take_along_axis(d, order, 1), rtol=1e-6)
    for part in ("d", "i"):
      np.testing.assert_array_equal(out[f"wknn{k}_sharded_{part}"], out[f"wknn{k}_single_{part}"])
  assert errors["weights"].startswith("weights: expected"), errors["weights"]


def test_radius_search_matches_single_device_and_brute_force(results):
  out, _ = results
  q, x = out["q"], out["x"]
  for name, r in (("rq", np.array([0, 3, 9, 40, 12, 1, 7])),):
    rows = ref_radius(q, x, r)
    ref_offsets = np.concatenate([[0], np.cumsum([len(i) for _, i in rows])])
    for tag in ("sharded", "single"):
      np.testing.assert_array_equal(out[f"{name}_{tag}_offsets"], ref_offsets, err_msg=f"{name} {tag}")
      np.testing.assert_array_equal(out[f"{name}_{tag}_distances"], np.concatenate([d for d, _ in rows]))
      np.testing.assert_array_equal(out[f"{name}_{tag}_indices"], np.concatenate([i for _, i in rows]))
      assert out[f"{name}_{tag}_indices"].dtype == np.int32


def test_histograms_are_sums_over_shards(results):
  out, _ = results
  d = ref_distances(out["q"], out["x"])
  levels = (out["qlab"][:, None] == out["xlab"][None, :]).astype(int)
  ref_labels, ref_aff = np.zeros((d.shape[0], 41, 2), int), np.zeros((d.shape[0], 41, 4), int)
  for j in range(d.shape[0]):
    for i in range(d.shape[1]):  # every pair counted once, padding rows never
      ref_labels[j, d[j, i], levels[j, i]] += 1
      ref_aff[j, d[j, i], out["aff"][j, i]] += 1
  np.testing.assert_array_equal(out["hist_labels"], ref_labels)
  np.testing.assert_array_equal(out["hist_aff"], ref_aff)


def test_evaluate_codes_on_a_sharded_database_matches_brute_force(results):
  out, _ = results
  table = json.loads(str(out["eval_sharded"]))
  d = ref_distances(out["q"], out["x"][:200])
  rel = (out["qlab"][:, None] == out["xlab"][None, :200]).astype(int)
  per_query = {name: [] for name in ("tie_aware_ap", "tie_aware_ndcg", "optimistic_ap", "pessimistic_ap",
                                     "tie_aware_precision_at_k", "precision_at_radius", "recall_at_radius")}
  for j in range(d.shape[0]):
    hist = np.zeros((41, 2), int)
    for i in range(200):  # counting loop: items by (distance, relevance)
      hist[d[j, i], rel[j, i]] += 1
    hit = d[j] <= 3
    for name, value in (("tie_aware_ap", eq3_direct(hist)), ("tie_aware_ndcg", eq4_direct(hist)),
                        ("optimistic_ap", bound_ap_direct(hist, True)),
                        ("pessimistic_ap", bound_ap_direct(hist, False)),
                        ("tie_aware_precision_at_k", precision_at_k_direct(hist, 20)),
                        ("precision_at_radius", rel[j, hit].mean() if hit.any() else 0.0),
                        ("recall_at_radius", rel[j, hit].sum() / rel[j].sum() if rel[j].any() else np.nan)):
      per_query[name].append(value)
  for name, values in per_query.items():
    assert table[name] == pytest.approx(np.nanmean(values), rel=1e-5), name
  assert table["num_empty_at_radius"] == int(((d <= 3).sum(1) == 0).sum())
  assert table["num_db"] == 200 and 0 < table["tie_aware_ap"] < 1


@pytest.mark.parametrize("name", ["talr", "lambdarank"])
def test_data_parallel_training_matches_one_device(results, name):
  out, _ = results
  assert int(out[f"{name}_sharded_devices"]) == 8 and int(out[f"{name}_single_devices"]) == 1
  np.testing.assert_allclose(out[f"{name}_sharded_losses"], out[f"{name}_single_losses"], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(out[f"{name}_sharded_params"], out[f"{name}_single_params"], rtol=1e-4, atol=1e-6)
  start = out[f"{name}_single_params"]
  assert out[f"{name}_single_losses"].shape == (2,) and np.isfinite(start).all()


def test_evaluate_over_devices_scores_a_saved_model_with_bit_weights_by_its_codes(results):
  _, errors = results
  single, many = dict(map(tuple, errors["evaluate_single"])), errors["evaluate_rows"]
  assert [name for name, _ in many] == ["lsh", "itq-8"] and set(single) == {"itq", "itq+w"}
  assert many[1][1] == pytest.approx(single["itq"], abs=1e-6)


def test_mesh_size_errors_name_the_argument(results):
  _, errors = results
  assert errors["shard_rows"].startswith("x: expected a number of rows divisible by the mesh's 8 devices, got 203")
  assert errors["shard_batch"].startswith("batch['features']: expected a leading axis divisible by the mesh's 8")
  assert "got 12 rows" in errors["shard_batch"]
  assert errors["knn_unsharded"].startswith("db_words: expected a jax.Array laid out with a NamedSharding")
  assert errors["knn_k"].startswith("k: expected at most the 203 items of db_words[:num_db]")
  assert errors["num_db"].startswith("num_db: expected at most len(db_words) = 208")
  assert errors["train_batch"].startswith("batch['affinity']: expected a leading axis divisible by the mesh's 8")
  assert "got 100 rows" in errors["train_batch"]


def test_one_process_lays_out_its_rows_as_shard_rows(results):
  out, errors = results
  x = out["x"]
  assert out["process_rows"].tolist() == [0, 203]
  np.testing.assert_array_equal(out["process_x"], np.concatenate([x, np.repeat(x[-1:], 5, axis=0)]))
  assert bool(out["process_x_layout"])
  assert errors["process_rows_count"].startswith("local_rows: expected this process's 203 rows 0:203 of 203")
  assert "got 100 rows" in errors["process_rows_count"]
  assert errors["process_rows_pad"].startswith("num_rows: expected a number of rows divisible by the mesh's 8")


def test_process_rows_in_one_process_on_one_device():
  mesh = sharding.data_mesh(1)
  assert sharding.process_rows(7, mesh) == slice(0, 7)
  x = np.arange(14, dtype=np.uint32).reshape(7, 2)
  laid = sharding.shard_process_rows(x[sharding.process_rows(7, mesh)], mesh, num_rows=7)
  np.testing.assert_array_equal(np.asarray(laid), x)
  with pytest.raises(ValueError, match="num_rows: expected an int >= 1, got 0"):
    sharding.process_rows(0, mesh)
  with pytest.raises(ValueError, match=r"local_rows: expected this process's 7 rows 0:7 of 7 .* got 6 rows"):
    sharding.shard_process_rows(x[:6], mesh, num_rows=7)


def test_initialize_processes_single_process_and_settings_errors(monkeypatch):
  import jax  # pylint: disable=g-import-not-at-top
  for name in sharding.PROCESS_ENV:
    monkeypatch.delenv(name, raising=False)
  assert sharding.initialize_processes() == 1  # no count anywhere: one process, nothing started
  monkeypatch.setenv("JAX_NUM_PROCESSES", "1")
  assert sharding.initialize_processes(process_id=0) == 1
  assert not jax.distributed.is_initialized()
  with pytest.raises(ValueError, match="num_processes: expected an int >= 1, got 0"):
    sharding.initialize_processes(num_processes=0)
  with pytest.raises(ValueError, match=r"process_id: expected .*num_processes - 1 = 1.*got 2"):
    sharding.initialize_processes(num_processes=2, process_id=2, coordinator_address="localhost:1234")
  with pytest.raises(ValueError, match="coordinator_address: expected 'host:port' of process 0, got 'localhost'"):
    sharding.initialize_processes(num_processes=2, process_id=0, coordinator_address="localhost")
  monkeypatch.setenv("JAX_NUM_PROCESSES", "two")
  with pytest.raises(ValueError, match="num_processes: expected an int in the environment variable JAX_NUM_PROCESSES"):
    sharding.initialize_processes()
  monkeypatch.setenv("JAX_NUM_PROCESSES", "2")
  monkeypatch.setenv("JAX_PROCESS_ID", "5")
  with pytest.raises(ValueError, match=r"process_id: expected .* got 5"):
    sharding.initialize_processes(coordinator_address="localhost:1234")
  assert not jax.distributed.is_initialized()


def test_data_mesh_refuses_more_devices_than_jax_sees():
  import jax  # pylint: disable=g-import-not-at-top
  with pytest.raises(ValueError, match=r"num_devices: expected at most the \d+ device\(s\) jax sees"):
    sharding.data_mesh(jax.device_count() + 1)


def test_histogram_ignores_rows_past_num_db_whatever_they_hold():
  from hashjax.codes import pack_bits  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(5)
  q, x = pack_bits(rng.integers(0, 2, (3, 16))), pack_bits(rng.integers(0, 2, (10, 16)))  # rows 7-9 differ
  aff, qlab, xlab = rng.integers(0, 3, (3, 7)), rng.integers(0, 2, 3), rng.integers(0, 2, 7)
  db = sharding.shard_rows(x, sharding.data_mesh(1))
  d = ref_distances(q, x)[:, :7]
  ref_none, ref_aff, ref_lab = np.zeros((3, 17, 1), int), np.zeros((3, 17, 3), int), np.zeros((3, 17, 2), int)
  for j in range(3):
    for i in range(7):
      ref_none[j, d[j, i], 0] += 1
      ref_aff[j, d[j, i], aff[j, i]] += 1
      ref_lab[j, d[j, i], int(qlab[j] == xlab[i])] += 1
  np.testing.assert_array_equal(sharding.hamming_histogram(q, db, num_bits=16, num_db=7), ref_none)
  np.testing.assert_array_equal(sharding.hamming_histogram(q, db, aff, num_bits=16, num_levels=3, num_db=7), ref_aff)
  np.testing.assert_array_equal(
      sharding.hamming_histogram(q, db, num_bits=16, query_labels=qlab, db_labels=xlab, num_db=7), ref_lab)


def test_multi_index_knn_of_one_process_is_the_scan_of_its_block_with_global_indices(monkeypatch):
  from hashjax import codes, index  # pylint: disable=g-import-not-at-top
  from hashjax.index import multi  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(multi, "SCAN_BELOW_WORDS", 0)  # probed, as a larger block would be, not scanned outright
  rng = np.random.default_rng(3)
  pool = rng.integers(0, 2, (6, 24))
  db = np.asarray(codes.pack_bits(pool[rng.integers(0, 6, 40)]))  # few distinct codes: many ties
  q = np.asarray(codes.pack_bits(rng.integers(0, 2, (5, 24))))
  own = index.build_multi_index(db, num_bits=24, num_tables=3)
  d_ref = ref_distances(q, db)
  for k in (1, 7, 40):
    d, i = sharding.multi_index_knn(own, q, k, first_row=100)
    order = np.stack([np.lexsort((np.arange(40), row))[:k] for row in d_ref])
    np.testing.assert_array_equal(np.asarray(i), order + 100)
    np.testing.assert_array_equal(np.asarray(d), np.take_along_axis(d_ref, order, 1))
  with pytest.raises(ValueError, match="^k: expected at most the 40 items of the indexes of every process"):
    sharding.multi_index_knn(own, q, 41, first_row=0)
  with pytest.raises(ValueError, match="^first_row: expected an int >= 0, got -1"):
    sharding.multi_index_knn(own, q, 3, first_row=-1)
  with pytest.raises(ValueError, match=r"^index: expected a hashjax.index.MultiIndex \(build_multi_index\), got ndarray"):
    sharding.multi_index_knn(db, q, 3, first_row=0)
