"""experiments.nair_study over two processes on localhost (jax.distributed, gloo collectives on the CPU): the
study's tables, runs and summary are the single-process ones, process 0 alone writes, and a rerun reuses
every stored file on both processes.

Two processes run the command of the module docstring (:data:`STUDY`: ``--runlocal --parts=tables
--methods=lambdarank``, two LambdaRank runs at 8 and 16 bits with LSH, ITQ, SH and exact L2 3-NN on digits) with
``--num_processes=2 --process_id=<p> --coordinator_address=localhost:<port>`` in one workdir, beside one process
running it alone in another, all three started at once; each process has one CPU device (``--runlocal``'s 50
queries per batch split over the 2 devices of the pair). The processes are started as in
``tests/test_multiprocess.py`` (its free port, gloo check and :func:`test_multiprocess._run_together`).

Tolerance: the pair trains data-parallel (each device's gradient over half of the batch, then their mean), so
the parameters differ from the single device's by float32 rounding of that sum (about 1e-7 relative); the codes,
hence the kNN errors, the printed tables and the study's summary, come out the same. Floats of a run's rows
other than its timings are compared to 1e-6 relative, the training losses to 1e-5.
"""

import json
import re

import pytest

from test_cli import _one_error_line
import test_multiprocess as tm

NUM_PROCESSES = 2


def _documented_study():
  """The study flags of the module docstring's ``A="..."`` line, without its ``--workdir``: what this test runs."""
  from experiments import nair_study  # pylint: disable=g-import-not-at-top
  doc = nair_study.__doc__
  flags = re.search(r'^\s*A="(.*)"$', doc, flags=re.M).group(1).split()
  processes = re.search(r'^\s*P="(.*)"$', doc, flags=re.M).group(1).split()
  assert processes[0] == f"--num_processes={NUM_PROCESSES}" and processes[1].startswith("--coordinator_address=")
  return ("-m", "experiments.nair_study", *(f for f in flags if not f.startswith("--workdir=")))


#: The documented two-process study.
STUDY = _documented_study()


def _one_device_environment(two_devices=tm._environment):  # pylint: disable=protected-access
  """``test_multiprocess``'s process environment with one CPU device per process instead of two."""
  return {**two_devices(), "XLA_FLAGS": "--xla_force_host_platform_device_count=1"}


def _pair(folder, address):
  return [[*STUDY, f"--workdir={folder}", f"--num_processes={NUM_PROCESSES}", f"--process_id={p}",
           f"--coordinator_address={address}"] for p in range(NUM_PROCESSES)]


def _ran(ended, names):
  for name, (status, out, err) in zip(names, ended):
    assert status == 0, f"{name} exited with {status}:\n{(out + err)[-4000:]}"
  return ended


#: Bad process settings, with the one line the study answers before any data loads: an address refused when the
#: processes would join (the flags' own checks: :func:`test_process_settings_are_checked_naming_the_flag`).
BAD = {("--num_processes=2", "--process_id=0", "--coordinator_address=localhost"):
           "error: --coordinator_address: expected 'host:port' of process 0, got 'localhost'"}


@pytest.fixture(scope="module")
def studied(tmp_path_factory):
  """``((pair, two), (one, one_folder), rerun, (bad, bad_folder))``: each ``(exit status, stdout, stderr)`` of the
  pair, of the single process, of the pair run again in its workdir ``two``, and of the :data:`BAD` commands
  (started beside the first three)."""
  reason = tm._gloo_missing()  # pylint: disable=protected-access
  if reason:
    pytest.skip(reason)
  two, one = tmp_path_factory.mktemp("study_two"), tmp_path_factory.mktemp("study_one")
  bad_folder = tmp_path_factory.mktemp("study_bad") / "workdir"
  names = [f"process {p}" for p in range(NUM_PROCESSES)]
  bad = [[*STUDY, f"--workdir={bad_folder}", *flags] for flags in BAD]
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(tm, "_environment", _one_device_environment)
    ended = tm._run_together(_pair(two, f"localhost:{tm._free_port()}") + [[*STUDY, f"--workdir={one}"]] + bad,
                             tm.TIMEOUT_S)
    _ran(ended, names + ["the single process"])
    rerun = _ran(tm._run_together(_pair(two, f"localhost:{tm._free_port()}"), tm.TIMEOUT_S),
                 [f"{n}, run again" for n in names])
  return ((ended[:NUM_PROCESSES], two), (ended[NUM_PROCESSES], one), rerun,
          (ended[NUM_PROCESSES + 1:], bad_folder))


def _tables(stdout):
  """The printed tables: from the ``tables:`` line to the line before the training times."""
  lines = stdout.splitlines()
  start = next(i for i, line in enumerate(lines) if line.startswith("tables: digits"))
  stop = next(i for i, line in enumerate(lines) if line.startswith("  train time"))
  return lines[start:stop]


def _json(path):
  with open(path) as f:
    return json.load(f)


RUNS = ("lambdarank_b8_s0", "lambdarank_b16_s0")


def test_both_processes_print_the_single_process_tables(studied):
  (pair, _), ((_, one_out, _), _), _, _ = studied
  table = _tables(one_out)
  assert [line.split()[0] for line in table[2:7]] == ["lambdarank", "lsh", "itq", "sh", "exact-l2-3nn"]
  for p, (_, out, _) in enumerate(pair):
    assert _tables(out) == table, p
    assert [line for line in out.splitlines() if line.startswith("  compression")] == \
        [line for line in one_out.splitlines() if line.startswith("  compression")], p


def test_the_runs_and_the_summary_match_the_single_process(studied):
  (_, two), (_, one), _, _ = studied
  for name in RUNS:
    got, ref = (_json(folder / "tables" / "digits" / name / "results.json") for folder in (two, one))
    assert got.keys() == ref.keys() and len(got["rows"]) == len(ref["rows"]) == 1, name
    row, want = got["rows"][0], ref["rows"][0]
    assert row.keys() == want.keys(), name
    assert row["knn_error"] == want["knn_error"] and 0 < want["knn_error"] < 1, name
    for key, value in want.items():
      if not key.endswith("_seconds"):
        assert row[key] == (pytest.approx(value, rel=1e-6) if isinstance(value, float) else value), (name, key)
    losses = [[h["loss"] for h in r["history"] if h["kind"] == "train"] for r in (got, ref)]
    assert len(losses[0]) == len(losses[1]) >= 2 and losses[0] == pytest.approx(losses[1], rel=1e-5), name
    # The pair's runs record the process settings and trained over both processes' devices.
    assert (got["config"]["num_processes"], ref["config"]["num_processes"]) == (NUM_PROCESSES, 1), name
    assert got["config"]["process_id"] == 0 and got["config"]["coordinator_address"].startswith("localhost:")
  got, ref = _json(two / "study.json"), _json(one / "study.json")
  assert got.keys() == ref.keys() and got["flags"] == ref["flags"]
  summary, want = got["tables"]["digits"], ref["tables"]["digits"]
  assert summary.keys() == want.keys()
  for key in ("per_seed", "stats", "compression"):
    assert summary[key] == want[key], key
  assert summary["train_time"].keys() == want["train_time"].keys()
  for name in ("s0_b8.json", "s0_b16.json", "s0_bexact.json"):
    assert _json(two / "baselines" / "digits" / name) == _json(one / "baselines" / "digits" / name), name


def test_only_process_zero_writes(studied):
  (pair, two), _, _, _ = studied
  for name in RUNS:  # the line process 0 logs when it saves a model
    assert f"model: {two / 'tables' / 'digits' / name / 'model'}" in pair[0][2], name
  assert "model: " not in pair[1][2]
  assert all("Traceback" not in err for _, _, err in pair)


def test_a_rerun_reuses_every_stored_file_on_both_processes(studied):
  (pair, two), _, rerun, _ = studied
  for p, (_, out, err) in enumerate(rerun):
    assert _tables(out) == _tables(pair[p][1]), p
    assert "kNN error" not in err and "train: step" not in err and "model: " not in err, p  # nothing trained


def test_process_settings_are_checked_naming_the_flag(monkeypatch):
  from experiments import nair_study  # pylint: disable=g-import-not-at-top
  from experiments.methods.checks import ConfigError  # pylint: disable=g-import-not-at-top
  for variable in ("JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "JAX_COORDINATOR_ADDRESS"):
    monkeypatch.delenv(variable, raising=False)
  assert nair_study.process_settings() == {"num_processes": None, "process_id": None, "coordinator_address": None}
  assert nair_study.process_settings(2, 1, "localhost:1234")["process_id"] == 1
  for args, message in (((0,), "--num_processes: expected an int >= 1 or None, got 0"),
                        ((None, -1), "--process_id: expected an int >= 0 or None, got -1"),
                        ((2, 2), "--process_id: expected at most --num_processes - 1 = 1, got 2"),
                        ((2, 0, ""), "--coordinator_address: expected 'host:port' of process 0, got ''")):
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
      nair_study.process_settings(*args)
  # Refused by hashjax.sharding.initialize_processes before it joins anything, named as the flag.
  with pytest.raises(ConfigError, match=r"^--coordinator_address: expected 'host:port' of process 0, got 'x'$"):
    nair_study.start_processes(nair_study.process_settings(2, 0, "x"))
  monkeypatch.setenv("JAX_NUM_PROCESSES", "two")
  with pytest.raises(ConfigError, match="^--num_processes: expected an int in the environment variable "
                                        "JAX_NUM_PROCESSES, got 'two'$"):
    nair_study.start_processes(nair_study.process_settings())
  monkeypatch.delenv("JAX_NUM_PROCESSES")
  assert nair_study.start_processes(nair_study.process_settings(1)) == 1  # one process: nothing to join


def test_bad_process_flags_fail_in_one_line_before_any_data_loads(studied):
  _, _, _, (ended, folder) = studied
  for result, want in zip(ended, BAD.values()):
    assert _one_error_line(result) == want  # stderr holds that line alone: no data loader's line before it
  assert not folder.exists()
