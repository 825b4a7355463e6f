"""hashjax.sharding over two processes on localhost (jax.distributed, gloo collectives on the CPU): sharded
search, histograms, evaluation, data-parallel TALR training and the ``experiments.train`` launcher give the
single-process answers.

The test writes a seeded database; two processes (tests/multiprocess_worker.py, 2 forced host devices each, so a
mesh of 4) join through :func:`hashjax.sharding.initialize_processes`, each reads only its rows of the database
(:func:`hashjax.sharding.process_rows`, through a memory map) and lays them out with
:func:`hashjax.sharding.shard_process_rows`; both save their answers. The references here are plain numpy (byte
popcounts, lexicographic sorts, counting loops), ``evaluate_codes`` and the training run in this one process.

Then two processes run the launcher (:data:`LAUNCH` with ``--config.num_processes=2 --config.process_id=<p>
--config.coordinator_address=localhost:<port>``, one workdir), beside one process running :data:`LAUNCH` alone
in another workdir: the tables, periodic evaluations and saved models agree, and only process 0 writes.
"""

import json
import os
import pathlib
import re
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


def _readme_launch():
  """The launch of the README's "Several hosts" lines (their ``A="..."``): what this test runs, word for word."""
  text = pathlib.Path(ROOT, "README.md").read_text(encoding="utf-8")
  block = re.search(r"\*\*Several hosts\.\*\*.*?```shell\n(.*?)```", text, flags=re.S).group(1)
  return ("-m", "experiments.train", *re.search(r'^A="(.*)"$', block, flags=re.M).group(1).split())


#: The launcher's command: 5 TALR steps on scikit-learn digits (1,697 database items: 4 devices hold 425 rows
#: each, 3 of them padding) at 24 bits (codes with padding bits), evaluated at the start and the end.
LAUNCH = _readme_launch()


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


def _environment():
  """The processes' environment: 2 forced CPU devices each, no process settings from this one's."""
  env = {k: v for k, v in os.environ.items() if k not in ("JAX_NUM_PROCESSES", "JAX_PROCESS_ID",
                                                         "JAX_COORDINATOR_ADDRESS")}
  env.update(JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=2",
             PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  return env


def _run_together(commands, timeout):
  """Starts every command (argument lists after the interpreter) at once in the clone's root; returns
  ``[(exit status, stdout, stderr)]`` once all have ended (killed past ``timeout`` seconds)."""
  procs = [subprocess.Popen([sys.executable, *command], cwd=ROOT, env=_environment(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True) for command in commands]
  outs = []
  try:
    for proc in procs:
      outs.append(proc.communicate(timeout=timeout))
  finally:
    for proc in procs:
      if proc.poll() is None:
        proc.kill()
        proc.wait()
  return [(proc.returncode, out, err) for proc, (out, err) in zip(procs, outs)]


@pytest.fixture(scope="module")
def outs(tmp_path_factory):
  reason = _gloo_missing()
  if reason:
    pytest.skip(reason)
  folder = tmp_path_factory.mktemp("multiprocess")
  worker.write_inputs(str(folder))
  address = f"localhost:{_free_port()}"
  ended = _run_together([[os.path.join(ROOT, "tests", "multiprocess_worker.py"), str(p), str(NUM_PROCESSES),
                          address, str(folder)] for p in range(NUM_PROCESSES)], TIMEOUT_S)
  for p, (status, out, err) in enumerate(ended):
    assert status == 0, f"process {p} exited with {status}:\n{(out + err)[-4000:]}"
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


def test_one_multi_index_per_process_matches_brute_force_on_every_process(outs):
  out, db, _, inputs = outs
  for k in worker.KS:  # k = 203: more than either process's rows
    ref_d, ref_i = _ref_knn(inputs["q"], db, k)
    for p, o in enumerate(out):
      np.testing.assert_array_equal(o[f"mih{k}_d"], ref_d, err_msg=f"k={k} process {p}")
      np.testing.assert_array_equal(o[f"mih{k}_i"], ref_i, err_msg=f"k={k} process {p}")


def test_weighted_knn_matches_brute_force_and_local_searches_refuse(outs):
  out, db, _, inputs = outs
  q, w = inputs["q"], inputs["weights"].astype(np.float64)
  bits = lambda words: ((words[:, :, None] >> np.arange(32, dtype=np.uint32)) & 1).reshape(len(words), -1)[:, :40]
  d = (bits(q)[:, None, :] != bits(db)[None, :, :]) @ w  # [Q, N] weighted Hamming distances
  order = np.stack([np.lexsort((np.arange(db.shape[0]), row))[:7] for row in d])
  for p, o in enumerate(out):
    np.testing.assert_array_equal(o["wknn_i"], order, err_msg=f"process {p}")
    np.testing.assert_allclose(o["wknn_d"], np.take_along_axis(d, order, 1), rtol=1e-6, err_msg=f"process {p}")
    assert str(o["ties_error"]).startswith("db_words: expected an array this process holds whole, got one split "
                                           "over the devices of 2 processes; use hashjax.sharding.knn"), p


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
  # 201 rows padded to 4 shards of 51; the padding rows copy process 1's last row and are not counted.
  assert out[0]["eval_rows"].tolist() == [0, 102, 204] and out[1]["eval_rows"].tolist() == [102, 201, 204]
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


# ----------------------------------------------------------------------------
# The launcher.


def _launch_beside_one(command, tmp_path_factory, name):
  """``(two, one)``: ``command`` run by two processes in one workdir, their ``(exit status, stdout, stderr)`` and
  that workdir, then by a single process in another, all three started at once."""
  reason = _gloo_missing()
  if reason:
    pytest.skip(reason)
  two, one = tmp_path_factory.mktemp(f"{name}_two"), tmp_path_factory.mktemp(f"{name}_one")
  address = f"localhost:{_free_port()}"
  ended = _run_together([[*command, f"--workdir={two}", f"--config.num_processes={NUM_PROCESSES}",
                          f"--config.process_id={p}", f"--config.coordinator_address={address}"]
                         for p in range(NUM_PROCESSES)] + [[*command, f"--workdir={one}"]], 2 * TIMEOUT_S)
  for p, (status, out, err) in enumerate(ended):
    assert status == 0, f"{'process ' + str(p) if p < NUM_PROCESSES else 'the single process'} exited with " \
                        f"{status}:\n{(out + err)[-4000:]}"
  return (ended[:NUM_PROCESSES], two), (ended[NUM_PROCESSES], one)


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
  """:data:`LAUNCH` by two processes beside one (:func:`_launch_beside_one`)."""
  return _launch_beside_one(LAUNCH, tmp_path_factory, "launcher")


def _table(stdout, end="train step throughput"):
  """The printed result table: the lines from the header to the one before the line starting with ``end``."""
  lines = stdout.splitlines()
  start = next(i for i, line in enumerate(lines) if line.startswith("method"))
  stop = next(i for i, line in enumerate(lines) if line.startswith(end))
  return lines[start:stop]


def _results(folder):
  with open(folder / "results.json") as f:
    return json.load(f)


def test_launcher_processes_split_the_evaluation_database(launched):
  (ended, _), _ = launched
  # 1,697 rows padded to 1,700 over 4 devices: process 0's two devices hold rows 0-849, process 1's the rest.
  for p, rows in enumerate(("0:850", "850:1697")):
    assert f"evaluation database: process {p} encodes rows {rows} of 1697 over 4 devices" in ended[p][2], p
  assert "evaluation database" not in launched[1][0][2]  # one device: no mesh, the whole database


def test_launcher_tables_match_one_process(launched):
  (ended, two), ((_, one_out, _), one) = launched
  table = _table(one_out)
  assert [line.split()[0] for line in table[2:]] == ["talr-ap-linear", "lsh", "itq"]
  for p, (_, out, _) in enumerate(ended):
    assert _table(out) == table, p
  got, ref = _results(two), _results(one)
  assert len(got["rows"]) == len(ref["rows"]) == 3
  for row, want in zip(got["rows"], ref["rows"]):
    assert row.keys() == want.keys(), row["method"]
    for key, value in want.items():
      if key == "eval_seconds":
        continue
      assert row[key] == (pytest.approx(value, rel=1e-6, abs=1e-9) if isinstance(value, float) else value), key
    assert 0 < row["tie_aware_ap"] < 1 and row["num_db"] == 1697 and row["bits"] == 24
  evals = [[(h["step"], h["tie_aware_ap"], h["tie_aware_ndcg"]) for h in r["history"] if h["kind"] == "eval"]
           for r in (got, ref)]
  assert [e[0] for e in evals[1]] == [0, 5]
  for (step, ap, ndcg), (ref_step, ref_ap, ref_ndcg) in zip(*evals):
    assert step == ref_step and ap == pytest.approx(ref_ap, rel=1e-6) and ndcg == pytest.approx(ref_ndcg, rel=1e-6)


def test_launcher_only_process_zero_writes_and_the_models_agree(launched):
  from hashjax import models  # pylint: disable=g-import-not-at-top
  (ended, two), (_, one) = launched
  record = _results(two)["config"]
  assert record["process_id"] == 0 and record["num_processes"] == NUM_PROCESSES
  assert record["coordinator_address"].startswith("localhost:")
  assert "model: " in ended[0][2] and "model: " not in ended[1][2]  # the line process 0 logs when it saves
  folder = two / "model"
  assert len([n for n in os.listdir(folder) if n.startswith("data")]) == 1
  model, ref = models.load_model(str(two)), models.load_model(str(one))
  assert model.config["process_id"] == 0
  for leaf, want in zip(_leaves(model.params), _leaves(ref.params)):
    np.testing.assert_allclose(leaf, want, rtol=1e-5, atol=1e-6)


def _leaves(tree):
  """The array leaves of a parameter tree, as numpy."""
  import jax  # pylint: disable=g-import-not-at-top
  return [np.asarray(leaf) for leaf in jax.tree.leaves(tree)]


# ----------------------------------------------------------------------------
# experiments.evaluate: baselines fitted in every process, the database split over both.

#: Two unsupervised baselines and a supervised one at 24 bits (codes with padding bits) on scikit-learn digits:
#: 100 queries, 1,697 database items (4 devices hold 425 rows each, 3 of them padding), 1,200 training items.
#: The grid search run by the launcher's settings: two trials of :data:`LAUNCH` on the validation split.
TUNE = ("-m", "experiments.tune", *LAUNCH[2:], "--grid=alpha=1,3")


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
  """:data:`TUNE` by two processes beside one (:func:`_launch_beside_one`)."""
  return _launch_beside_one(TUNE, tmp_path_factory, "tune")


def test_tune_processes_print_and_record_the_one_process_trials(tuned):
  (ended, two), ((_, one_out, _), one) = tuned
  rows = lambda out: [line for line in out.splitlines() if line.startswith("alpha=")]
  assert len(rows(one_out)) == 2
  for p, (_, out, _) in enumerate(ended):
    got, want = rows(out), rows(one_out)
    assert [r.split()[0] for r in got] == [r.split()[0] for r in want], p
    for g, w in zip(got, want):  # each field key=value; the training time differs
      for a, b in zip(g.split(), w.split()):
        if not a.startswith("train_time="):
          assert float(a.split("=")[1]) == pytest.approx(float(b.split("=")[1]), rel=1e-5), (p, a, b)
  with open(two / "tuning.json") as f, open(one / "tuning.json") as g:
    got, ref = json.load(f), json.load(g)
  assert got["split"] == ref["split"] == "validation"
  for row, want in zip(got["rows"], ref["rows"]):
    assert row["alpha"] == want["alpha"] and row["tie_aware_ap"] == pytest.approx(want["tie_aware_ap"], rel=1e-6)


EVALUATE = ("-m", "experiments.evaluate", "--config=configs/baselines.py:runlocal", "--config.methods=lsh,itq,sdh",
            "--config.bits=24", "--config.train_per_class=120")


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
  """:data:`EVALUATE` by two processes beside one (:func:`_launch_beside_one`)."""
  return _launch_beside_one(EVALUATE, tmp_path_factory, "evaluate")


def test_evaluate_processes_split_the_database_and_print_the_one_process_table(evaluated):
  (ended, two), ((_, one_out, one_err), one) = evaluated
  for p, rows in enumerate(("0:850", "850:1697")):
    assert f"evaluation database: process {p} encodes rows {rows} of 1697 over 4 devices" in ended[p][2], p
  assert "evaluation database" not in one_err
  table = _table(one_out, end="results:")
  assert [line.split()[0] for line in table[2:]] == ["lsh", "itq", "sdh"]
  for p, (_, out, _) in enumerate(ended):
    assert _table(out, end="results:") == table, p
  got, ref = _results(two), _results(one)
  assert got["config"]["num_processes"] == NUM_PROCESSES and ref["config"]["num_processes"] == 1
  assert len(got["rows"]) == len(ref["rows"]) == 3
  for row, want in zip(got["rows"], ref["rows"]):
    assert row.keys() == want.keys(), row["method"]
    for key, value in want.items():
      if key.endswith("_seconds"):
        continue
      assert row[key] == (pytest.approx(value, rel=1e-6, abs=1e-9) if isinstance(value, float) else value), key
    assert 0 < row["tie_aware_ap"] < 1 and row["num_db"] == 1697 and row["bits"] == 24


def test_evaluate_only_process_zero_saves_models_that_encode_as_one_process(evaluated):
  from hashjax import models  # pylint: disable=g-import-not-at-top
  (ended, two), (_, one) = evaluated
  names = ["itq-24", "lsh-24", "sdh-24"]
  assert sorted(os.listdir(two / "models")) == sorted(os.listdir(one / "models")) == names
  assert "model: " in ended[0][2] and "model: " not in ended[1][2]  # the line process 0 logs when it saves
  x = np.random.default_rng(0).uniform(0, 1, size=(50, 64)).astype(np.float32)  # digits' 64 pixels, scaled
  for name in names:
    model, ref = models.load_model(str(two / "models" / name)), models.load_model(str(one / "models" / name))
    np.testing.assert_array_equal(np.asarray(model.encode(x)), np.asarray(ref.encode(x)), err_msg=name)
  assert all("Traceback" not in err for _, _, err in ended)


def test_both_processes_stop_with_one_line_when_another_run_holds_the_workdir(tmp_path):
  # Process 0 finds the workdir held; its answer reaches process 1, and both stop with the same line.
  reason = _gloo_missing()
  if reason:
    pytest.skip(reason)
  work = str(tmp_path / "held")
  os.makedirs(work)
  holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | "
                             "os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, b'4242'); print('held', "
                             "flush=True); sys.stdin.read()", os.path.join(work, ".run.lock")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline().strip() == "held"
    address = f"localhost:{_free_port()}"
    ended = _run_together([["-m", "experiments.evaluate", "--config=configs/baselines.py:runlocal",
                            "--config.methods=lsh", "--config.bits=8", f"--workdir={work}",
                            f"--config.num_processes={NUM_PROCESSES}", f"--config.process_id={p}",
                            f"--config.coordinator_address={address}"] for p in range(NUM_PROCESSES)], TIMEOUT_S)
  finally:
    holder.communicate("", timeout=60)
  for status, out, err in ended:
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2 and "Traceback" not in out + err, (status, err[-3000:])
    # after jax.distributed's own log lines, one line
    assert [line for line in lines if not line.startswith("I")] == [
        f"error: --workdir={work}: expected a workdir no other run is writing to, got one held by process 4242 "
        f"(.run.lock); wait for it to end or choose another --workdir"], err[-3000:]
  assert not os.path.exists(os.path.join(work, "results.json"))
