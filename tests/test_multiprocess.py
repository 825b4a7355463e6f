"""hashjax.sharding over two processes on localhost (jax.distributed, gloo collectives on the CPU): sharded
search, histograms, evaluation and data-parallel TALR training give the single-process answers.

The test writes a seeded database; two processes (tests/multiprocess_worker.py, 2 forced host devices each, so a
mesh of 4) join through :func:`hashjax.sharding.initialize_processes`, each reads only its rows of the database
(:func:`hashjax.sharding.process_rows`, through a memory map) and lays them out with
:func:`hashjax.sharding.shard_process_rows`; both save their answers. The references here are plain numpy (byte
popcounts, lexicographic sorts, counting loops), ``evaluate_codes`` and the training run in this one process.
"""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from brute_force import ref_distances, ref_radius
import multiprocess_worker as worker

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUM_PROCESSES = 2
TIMEOUT_S = 150


def _gloo_missing():
  """Why the installed jaxlib cannot run CPU collectives between processes (None when it can)."""
  try:
    from jaxlib import _jax as extension  # pylint: disable=g-import-not-at-top
  except ImportError:
    try:
      from jaxlib import xla_extension as extension  # pylint: disable=g-import-not-at-top
    except ImportError:
      return "the installed jaxlib has neither _jax nor xla_extension"
  if not hasattr(extension, "make_gloo_tcp_collectives"):
    return "the installed jaxlib was built without gloo CPU collectives (make_gloo_tcp_collectives)"
  return None


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


@pytest.fixture(scope="module")
def outs(tmp_path_factory):
  reason = _gloo_missing()
  if reason:
    pytest.skip(reason)
  folder = tmp_path_factory.mktemp("multiprocess")
  worker.write_inputs(str(folder))
  env = {k: v for k, v in os.environ.items() if k not in ("JAX_NUM_PROCESSES", "JAX_PROCESS_ID",
                                                         "JAX_COORDINATOR_ADDRESS")}
  env.update(JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=2",
             PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  address = f"localhost:{_free_port()}"
  procs = [subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "multiprocess_worker.py"), str(p),
                             str(NUM_PROCESSES), address, str(folder)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
           for p in range(NUM_PROCESSES)]
  logs = []
  try:
    for proc in procs:
      logs.append(proc.communicate(timeout=TIMEOUT_S)[0])
  finally:
    for proc in procs:
      if proc.poll() is None:
        proc.kill()
        proc.wait()
  for p, (proc, log) in enumerate(zip(procs, logs)):
    assert proc.returncode == 0, f"process {p} exited with {proc.returncode}:\n{log[-4000:]}"
  out = []
  for p in range(NUM_PROCESSES):
    with np.load(folder / f"out{p}.npz") as f:
      out.append(dict(f))
  with np.load(folder / "inputs.npz") as f:
    inputs = dict(f)
  return out, np.load(folder / "db.npy"), np.load(folder / "eval_db.npy"), inputs


def test_each_process_holds_half_of_the_rows_of_one_global_array(outs):
  out, _, _, _ = outs
  for p, o in enumerate(out):
    assert int(o["process_count"]) == 2 and int(o["device_count"]) == 4, p
    assert int(o["global_rows"]) == 204  # 203 rows padded to 4 shards of 51
  # Process 0's two devices hold shards 0-1 (rows 0-101), process 1's shards 2-3 (rows 102-203, one padding).
  assert out[0]["rows"].tolist() == [0, 102] and out[1]["rows"].tolist() == [102, 203]


def _ref_knn(q, x, k):
  d = ref_distances(q, x)
  order = np.stack([np.lexsort((np.arange(x.shape[0]), row))[:k] for row in d])
  return np.take_along_axis(d, order, 1), order


def test_knn_matches_brute_force_with_ties_on_every_process(outs):
  out, db, _, inputs = outs
  for k in worker.KS:
    ref_d, ref_i = _ref_knn(inputs["q"], db, k)
    for p, o in enumerate(out):
      np.testing.assert_array_equal(o[f"knn{k}_d"], ref_d, err_msg=f"k={k} process {p}")
      np.testing.assert_array_equal(o[f"knn{k}_i"], ref_i, err_msg=f"k={k} process {p}")
    assert (np.diff(ref_d, axis=1) == 0).sum() > 0  # ties were broken by index


def test_radius_search_matches_brute_force_on_every_process(outs):
  out, db, _, inputs = outs
  rows = ref_radius(inputs["q"], db, np.asarray(worker.RADII))
  offsets = np.concatenate([[0], np.cumsum([len(i) for _, i in rows])])
  for p, o in enumerate(out):
    np.testing.assert_array_equal(o["radius_offsets"], offsets, err_msg=f"process {p}")
    np.testing.assert_array_equal(o["radius_distances"], np.concatenate([d for d, _ in rows]))
    np.testing.assert_array_equal(o["radius_indices"], np.concatenate([i for _, i in rows]))


def test_histograms_count_every_row_once_on_every_process(outs):
  out, db, _, inputs = outs
  d = ref_distances(inputs["q"], db)
  same = (inputs["qlab"][:, None] == inputs["xlab"][None, :]).astype(int)
  bins = worker.NUM_BITS + 1
  ref_labels, ref_aff = np.zeros((d.shape[0], bins, 2), int), np.zeros((d.shape[0], bins, 4), int)
  for j in range(d.shape[0]):
    for i in range(d.shape[1]):  # every pair counted once, the padding row never
      ref_labels[j, d[j, i], same[j, i]] += 1
      ref_aff[j, d[j, i], inputs["aff"][j, i]] += 1
  for p, o in enumerate(out):
    np.testing.assert_array_equal(o["hist_labels"], ref_labels, err_msg=f"process {p}")
    np.testing.assert_array_equal(o["hist_affinity"], ref_aff, err_msg=f"process {p}")


def test_evaluate_codes_matches_one_process(outs):
  from hashjax import evaluate  # pylint: disable=g-import-not-at-top
  out, _, eval_db, inputs = outs
  ref = evaluate.evaluate_codes(inputs["eval_q"], eval_db, num_bits=worker.EVAL_BITS,
                                query_labels=inputs["eval_qlab"], db_labels=inputs["eval_xlab"], radius=3, k=20)
  assert 0 < ref["tie_aware_ap"] < 1 and ref["num_db"] == worker.NUM_EVAL
  for p, o in enumerate(out):
    table = json.loads(str(o["evaluate"]))
    assert table.keys() == ref.keys(), p
    for name, value in ref.items():
      assert table[name] == pytest.approx(value, rel=1e-6, abs=1e-9), (p, name)


def test_data_parallel_talr_matches_one_process(outs):
  out, _, _, _ = outs
  params, losses = worker.talr_run(None)
  assert losses.shape == (worker.TRAIN_STEPS,) and losses[-1] < losses[0]
  for p, o in enumerate(out):
    np.testing.assert_allclose(o["talr_losses"], losses, rtol=1e-5, atol=1e-6, err_msg=f"process {p}")
    np.testing.assert_allclose(o["talr_params"], params, rtol=1e-4, atol=1e-6, err_msg=f"process {p}")
  np.testing.assert_array_equal(out[0]["talr_params"], out[1]["talr_params"])
