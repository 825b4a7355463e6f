"""The launchers' command line (experiments/cli.py) and the config checks and memory bounds of experiments.methods.

The launchers run as a user runs them, in subprocesses started together (each imports jax); the pieces
(value parsing, config loading, checks, the memory estimate) are tested in-process.
"""

import logging
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

from configs import baselines, bit_weights, cghash, lambdarank_knn, lambdarank_retrieval, structhash  # noqa: E402
from configs import talr_ap, talr_ndcg  # noqa: E402
from experiments import cli, methods  # noqa: E402
from experiments.methods import checks  # noqa: E402

GB = 10 ** 9

# --------------------------------------------------------------------------- the launchers, as a user runs them

#: name -> (module, arguments); every command runs once, all started together (module fixture).
COMMANDS = {
    "help_config": ("train", ["--config=configs/talr_ap.py:runlocal", "--help"]),
    "help_configs": ("train", ["-h"]),
    "model_vit": ("train", ["--config=configs/talr_ap.py", "--config.model=vit"]),
    "unknown_field": ("train", ["--config=configs/talr_ap.py", "--config.alpah=1"]),
    "too_big": ("train", ["--config=configs/talr_ap.py", "--config.bits=10000000"]),
    "too_big_baselines": ("evaluate", ["--config=configs/baselines.py", "--config.methods=lsh,sh",
                                       "--config.bits=16,10000000"]),
    "tune_bad_trial": ("tune", ["--config=configs/talr_ap.py:runlocal", "--grid=alpha=1,-2"]),
    "study_bad_flag": ("nair_study", ["--bits=8,abc"]),
    "evaluate_lists": ("evaluate", ["--config=configs/baselines.py:runlocal", "--config.methods=lsh,pca",
                                    "--config.bits=8,16"]),
    "workdir_file": ("train", ["--config=configs/talr_ap.py:runlocal"]),  # --workdir: a file (the fixture's)
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("cli")
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  procs = {}
  for name, (module, args) in COMMANDS.items():
    argv = [sys.executable, "-m", f"experiments.{module}", *args]
    if name == "evaluate_lists":
      argv.append(f"--workdir={workdir / name}")
    if name == "workdir_file":
      (workdir / name).write_text("not a directory")
      argv.append(f"--workdir={workdir / name}")
    procs[name] = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True)
  out = {}
  for name, proc in procs.items():
    stdout, stderr = proc.communicate(timeout=300)
    out[name] = (proc.returncode, stdout, stderr)
  return out


def _one_error_line(result):
  """The stderr of a refused command: exit status 2 and one line ``error: ...``, no traceback."""
  code, stdout, stderr = result
  assert code == 2, (code, stderr)
  assert "Traceback" not in stderr and "Traceback" not in stdout
  lines = [line for line in stderr.splitlines() if line.strip()]
  assert len(lines) == 1 and lines[0].startswith("error: "), stderr
  return lines[0]


def test_help_lists_every_field_with_its_default_and_comment(runs):
  code, stdout, stderr = runs["help_config"]
  assert code == 0, stderr
  assert stdout.startswith("Trains a hash mapping")  # the launcher's usage
  assert "--workdir=" in stdout and "--config=PATH[:ARG]" in stdout  # its flags
  lines = stdout.splitlines()
  # runlocal's values, each with the comment beside the field's first assignment in configs/talr_ap.py.
  assert any(line.split() == ["--config.alpha=3.0", "#", "slope", "of", "the", "relaxation", "(eq.", "6)"]
             for line in lines)
  assert any(line.strip() == "--config.num_steps=60" for line in lines)
  assert any(line.split()[:1] == ["--config.baselines=lsh,itq"] for line in lines)  # a tuple, as it is typed
  # Every field of the config is listed once.
  listed = [line.split()[0].split("=")[0] for line in lines if line.strip().startswith("--config.")]
  assert sorted(listed) == sorted("--config." + k for k in talr_ap.get_config("runlocal").keys())


def test_help_without_a_config_lists_the_launchers_configs(runs):
  code, stdout, _ = runs["help_configs"]
  assert code == 0
  assert "configs/talr_ap.py" in stdout and "configs/lambdarank_knn.py" in stdout
  assert "configs/baselines.py" not in stdout  # experiments.evaluate's config
  assert "--config=<config> --help" in stdout


def test_an_unknown_choice_names_the_valid_ones(runs):
  assert _one_error_line(runs["model_vit"]) == ("error: config.model: expected one of ['linear', 'mlp', 'cnn'], "
                                                "got 'vit'")


def test_an_unknown_field_names_the_close_ones(runs):
  line = _one_error_line(runs["unknown_field"])
  assert "'alpah'" in line and "did you mean config.alpha?" in line


def test_a_run_that_cannot_fit_in_memory_is_refused_with_its_estimate(runs):
  line = _one_error_line(runs["too_big"])
  assert line.startswith("error: config.bits=10000000: this run needs about ")
  assert "soft histograms: batch 250 x 249 others x 10,000,001 bins" in line and "available" in line
  line = _one_error_line(runs["too_big_baselines"])
  assert line.startswith("error: config.bits=16,10000000: this run needs about ")


def test_tune_and_the_nair_study_check_before_they_run(runs):
  line = _one_error_line(runs["tune_bad_trial"])
  assert "config.alpha: expected a finite number > 0, got -2.0" in line and "alpha=-2.0" in line
  assert _one_error_line(runs["study_bad_flag"]) == "error: --bits: expected comma-separated integers, got '8,abc'"


def test_a_workdir_that_is_a_file_is_refused_before_any_data_loads(runs, tmp_path, monkeypatch):
  line = _one_error_line(runs["workdir_file"])
  assert line.startswith("error: --workdir=") and line.endswith("workdir_file: expected a directory, got a file")
  with monkeypatch.context() as m, pytest.raises(checks.ConfigError, match=r"^--workdir=.*: expected a writable "):
    m.setattr(os, "access", lambda path, mode: False)  # as a read-only file system answers
    cli.check_workdir(str(tmp_path / "new"))
  (tmp_path / "f").write_text("")
  with pytest.raises(checks.ConfigError, match=r"^--workdir=.*: expected a directory that can be created"):
    cli.check_workdir(str(tmp_path / "f" / "run"))
  assert cli.check_workdir(str(tmp_path / "new" / "run")) == str(tmp_path / "new" / "run")
  assert not (tmp_path / "new").exists()  # checked, not created


_HOLDER = """
import sys
sys.path.insert(0, sys.argv[1])
from absl import flags
from experiments import cli
flags.FLAGS(["holder", "--workdir=" + sys.argv[2]])
launcher = sys.argv[3] if len(sys.argv) > 3 else "experiments.evaluate"
assert cli.workdir("unused", launcher=launcher) == sys.argv[2] == cli.workdir("unused", launcher=launcher)  # kept
print("held", flush=True)
sys.stdin.read()
"""


def test_a_workdir_another_run_is_writing_to_is_refused_until_it_ends(tmp_path):
  work = str(tmp_path / "run")
  holder = subprocess.Popen([sys.executable, "-c", "import os; os.umask(0o002)\n" + _HOLDER, ROOT, work],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # a group's umask
  try:
    assert holder.stdout.readline().strip() == "held"
    with open(os.path.join(work, cli.RUN_LOCK)) as f:
      assert f.read() == f"{holder.pid} experiments.evaluate"
    assert os.stat(os.path.join(work, cli.RUN_LOCK)).st_mode & 0o777 == 0o664  # the umask's mode: a group's run
    done = subprocess.run([sys.executable, "-m", "experiments.evaluate", "--config=configs/baselines.py:runlocal",
                           "--config.methods=lsh", "--config.bits=8", f"--workdir={work}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert _one_error_line((done.returncode, done.stdout, done.stderr)) == (
        f"error: --workdir={work}: expected a workdir no other run is writing to, got one held by process "
        f"{holder.pid} (.run.lock); wait for it to end or choose another --workdir")
    other = _hold(work, "experiments.train")  # another launcher: waiting would not help
    assert other.stderr.strip().splitlines()[-1] == _refused_for(work, "experiments.train", "experiments.evaluate")
  finally:
    holder.communicate("", timeout=60)
  assert holder.returncode == 0
  again = subprocess.run([sys.executable, "-c", _HOLDER, ROOT, work], input="", capture_output=True, text=True,
                         timeout=120)
  assert again.returncode == 0 and again.stdout.strip() == "held", again.stderr  # the lock went with its process


def _hold(work, launcher):
  """Takes ``work`` for ``launcher`` in a process of its own, which then ends."""
  return subprocess.run([sys.executable, "-c", _HOLDER, ROOT, work, launcher], input="", capture_output=True,
                        text=True, timeout=120)


def _refused_for(work, launcher, owner):
  return (f"experiments.methods.checks.ConfigError: --workdir={work}: expected a workdir of {launcher} or a new "
          f"one, got a workdir of {owner} (.run.lock), whose output this run would replace or mix with its own; "
          f"choose another --workdir")


def test_a_workdir_of_another_launcher_is_refused_once_it_holds_output(tmp_path):
  work = str(tmp_path / "run")
  for launcher in ("experiments.train", "experiments.evaluate", "experiments.train"):  # nothing written: taken over
    assert _hold(work, launcher).stdout.strip() == "held"
  os.makedirs(os.path.join(work, "checkpoints", "100"))  # a killed training run's: no results.json yet
  for other in ("experiments.evaluate", "experiments.tune"):
    refused = _hold(work, other)
    assert refused.returncode != 0 and refused.stderr.strip().splitlines()[-1] == _refused_for(
        work, other, "experiments.train")
  with open(os.path.join(work, cli.RUN_LOCK)) as f:
    assert f.read().split()[1] == "experiments.train"  # unchanged: the workdir is still the training run's
  assert _hold(work, "experiments.train").stdout.strip() == "held"  # its own launcher comes back (and resumes)
  with open(os.path.join(work, cli.RUN_LOCK), "w") as f:
    f.write("12345")  # a lock file that names no launcher (an older version's) lets any launcher in
  assert _hold(work, "experiments.evaluate").stdout.strip() == "held"
  with open(os.path.join(work, cli.RUN_LOCK)) as f:
    assert f.read().split()[1] == "experiments.evaluate"


def test_list_valued_fields_take_comma_separated_values(runs, tmp_path_factory):
  code, stdout, stderr = runs["evaluate_lists"]
  assert code == 0, stderr
  assert "Unable to initialize backend" not in stderr  # jax's notice is dropped
  rows = [line.split()[:2] for line in stdout.splitlines() if line.split()[:1] in (["lsh"], ["pca"])]
  assert rows == [["lsh", "8"], ["pca", "8"], ["lsh", "16"], ["pca", "16"]]


# --------------------------------------------------------------------------- values and config files


@pytest.fixture(autouse=True)
def _in_the_clone(monkeypatch):
  monkeypatch.chdir(ROOT)  # configs/ paths are relative to the clone's root, as the launchers read them


@pytest.mark.parametrize("text, default, kind, expected", [
    ("lsh,itq", ("lsh", "pca"), tuple, ("lsh", "itq")),
    ("16, 32", (16, 32, 64), tuple, (16, 32)),
    ("(16,32)", (16,), tuple, (16, 32)),
    ("[512]", (1024,), tuple, (512,)),
    ("()", ("lsh",), tuple, ()),
    ("", ("lsh",), tuple, ()),
    ("lsh,sh", (), tuple, ("lsh", "sh")),  # an empty default: elements typed by what they look like
    ("7", 3, int, 7),
    ("1e-3", 0.01, float, 0.001),
    ("2", 0.01, float, 2.0),
    ("None", 500, int, None),
    ("False", True, bool, False),
    ("yes", False, bool, True),
    (None, False, bool, True),  # a bare --config.<bool field>
    ("'digits'", "mnist_t10k", str, "digits"),
])
def test_parse_value_types_like_the_default(text, default, kind, expected):
  value = checks.parse_value(text, default, kind, name="--config.x")
  assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize("text, default, kind, fragment", [
    ("abc", 32, int, "expected an int (like the default 32), got 'abc'"),
    ("1.5", 32, int, "expected an int"),
    ("16,abc", (16, 32), tuple, "expected comma-separated values of type int (like the default 16,32)"),
    ("maybe", True, bool, "expected true or false"),
    (None, 32, int, "expected --config.x=<value>"),
])
def test_parse_value_refuses_what_does_not_parse(text, default, kind, fragment):
  with pytest.raises(checks.ConfigError, match="^--config.x") as e:
    checks.parse_value(text, default, kind, name="--config.x")
  assert fragment in str(e.value)


def test_split_args_separates_the_config_from_the_flags():
  args = cli.split_args(["--config", "configs/talr_ap.py:runlocal", "--config.bits=16", "--workdir=/tmp/w",
                         "--config.alpha", "-3", "--config.standardize", "-h"])
  assert args.spec == "configs/talr_ap.py:runlocal" and args.help == "-h"
  assert args.overrides == [("bits", "16"), ("alpha", "-3"), ("standardize", None)]
  assert args.rest == ["--workdir=/tmp/w"]


def test_load_config_applies_typed_overrides():
  config = cli.load_config("configs/lambdarank_knn.py:runlocal,method=ranknet",
                           [("baselines", "lsh,itq,sh"), ("hidden", "512,256"), ("doc_pool", "200"),
                            ("swap_bins", "None"), ("learning_rate", "3")])
  assert (config.method, config.dataset) == ("ranknet", "digits")
  assert config.baselines == ("lsh", "itq", "sh") and config.hidden == (512, 256)
  assert config.doc_pool == 200 and config.swap_bins is None
  assert config.learning_rate == 3.0 and isinstance(config.learning_rate, float)


def test_load_config_errors_are_one_line_naming_the_problem(tmp_path):
  with pytest.raises(cli.ConfigError) as e:
    cli.load_config("configs/nope.py")
  assert str(e.value).startswith(f"--config: no config file 'configs/nope.py' in the current directory {ROOT} "
                                 "(experiments and configs run from the root of the hashjax clone)")
  with pytest.raises(cli.ConfigError, match=r"^--config=configs/talr_ap.py:model=cnn: config argument: expected "
                                            r"model in \['linear', 'mlp'\], got 'cnn'$"):
    cli.load_config("configs/talr_ap.py:model=cnn")
  with pytest.raises(cli.ConfigError, match=r"^--config.bits=abc: expected an int \(like the default 32\), got 'abc'$"):
    cli.load_config("configs/talr_ap.py", [("bits", "abc")])
  with pytest.raises(cli.ConfigError, match=r"has no field 'nope'$"):
    cli.load_config("configs/talr_ap.py", [("nope", "1")])
  with pytest.raises(cli.ConfigError, match=r"did you mean config.learning_rate\?"):
    cli.load_config("configs/talr_ap.py", [("learning_rat", "1")])
  with pytest.raises(cli.ConfigError, match=r"did you mean configs/talr_ap.py\?"):
    cli.load_config("configs/talr_ap_.py")
  with pytest.raises(cli.ConfigError, match=r"config argument: expected comma-separated"):
    cli.load_config("configs/talr_ap.py:fast")
  broken = tmp_path / "broken.py"
  broken.write_text("def get_config(:\n")
  with pytest.raises(cli.ConfigError, match=r"broken.py: line 1: "):
    cli.load_config(str(broken))
  outside = tmp_path / "outside.py"  # a config importing the clone's configs package from elsewhere
  outside.write_text("from configs_elsewhere import common\n")
  with pytest.raises(cli.ConfigError, match="No module named 'configs_elsewhere'"):
    cli.load_config(str(outside))


def test_help_text_lists_a_configs_fields_or_the_launchers_configs():
  text = cli.help_text(doc="Usage.", prog="python -m experiments.evaluate", takes_config=True,
                       spec="configs/baselines.py", overrides=[("bits", "8")])
  lines = [line.split("#")[0].strip() for line in text.splitlines()]
  assert text.startswith("Usage.") and "--config.methods=lsh,pca,itq,sh" in lines and "--config.bits=8" in lines
  assert any(line.startswith("--workdir=") for line in lines)  # the flag every launcher shares
  text = cli.help_text(doc="Usage.", prog="python -m experiments.evaluate", takes_config=True)
  assert "configs/baselines.py" in text and "configs/talr_ap.py" not in text


def test_field_comments_are_those_of_the_first_top_level_assignment(tmp_path):
  import importlib.util  # pylint: disable=g-import-not-at-top
  path = tmp_path / "my_config.py"
  path.write_text(
      "import ml_collections\n"
      "def get_config(arg=None):\n"
      "  config = ml_collections.ConfigDict()\n"
      "  config.size = 3  # how many\n"
      "  config.rate = 0.1\n"
      "  config.first = config.second = 2  # only the first name gets it\n"
      "  if arg:\n"
      "    config.rate = 0.5  # a variant's value\n"
      "    config.size = 4  # a variant's size\n"
      "  config.note = '# not a comment'\n"
      "  return config\n")
  spec = importlib.util.spec_from_file_location("my_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  comments, order = cli.field_comments(module)
  assert comments == {"size": "how many", "first": "only the first name gets it"}
  assert [k for k, _ in sorted(order.items(), key=lambda kv: kv[1])] == ["size", "rate", "first", "second", "note"]
  import configs.talr_ap as talr_module  # pylint: disable=g-import-not-at-top
  comments, order = cli.field_comments(talr_module)
  assert comments["alpha"] == "slope of the relaxation (eq. 6)"
  assert order["name"] < order["dataset"] < order["bits"] < order["baselines"]


def test_the_backend_notice_is_dropped_and_nothing_else():
  cli.silence_backend_notice()
  cli.silence_backend_notice()  # installed once
  logger = logging.getLogger("jax._src.xla_bridge")
  assert sum(type(f).__name__ == "_DropBackendNotice" for f in logger.filters) == 1
  seen = []

  class Keep(logging.Handler):
    def emit(self, record):
      seen.append(record.getMessage())

  handler = Keep()
  logger.addHandler(handler)
  try:
    logger.warning("Unable to initialize backend 'tpu': INTERNAL: Failed to open libtpu.so")
    logger.warning("Backend 'cpu' initialized")
  finally:
    logger.removeHandler(handler)
  assert seen == ["Backend 'cpu' initialized"]


# --------------------------------------------------------------------------- check_config


def _variants():
  out = [("talr_ap", a, talr_ap.get_config(a)) for a in (None, "model=mlp", "bits=16", "bits=64", "runlocal",
                                                          "model=mlp,bits=16", "model=mlp,runlocal")]
  out += [("talr_ndcg", a, talr_ndcg.get_config(a)) for a in (None, "model=mlp", "runlocal")]
  out += [("lambdarank_knn", a, lambdarank_knn.get_config(a))
          for a in (None, "method=ranknet", "bits=8", "bits=16", "bits=64", "model=mlp", "fixed_step", "runlocal",
                    "score=retrieval", "score=ap", "score=knn_majority", "score=hierarchical",
                    "method=ranknet,model=mlp,runlocal")]
  out += [("lambdarank_retrieval", a, lambdarank_retrieval.get_config(a))
          for a in (None, "method=ranknet", "runlocal", "score=retrieval")]
  out += [(m.__name__, a, m.get_config(a)) for m in (cghash, structhash, bit_weights) for a in (None, "runlocal")]
  return out + [("baselines", a, baselines.get_config(a)) for a in (None, "runlocal")]


def test_every_shipped_config_variant_passes_and_fits_in_4_gb():
  for name, arg, config in _variants():
    assert checks.check_run is not None
    checks.check_config(config)
    total = checks.check_memory(config, available=4 * GB)
    assert 0 < total < 4 * GB, (name, arg, total)
    checks.check_baselines_fit(config)


@pytest.mark.parametrize("field, value, fragment", [
    ("model", "vit", "config.model: expected one of ['linear', 'mlp', 'cnn'], got 'vit'"),
    ("alpha", -3.0, "config.alpha: expected a finite number > 0, got -3.0"),
    ("width", 0.0, "config.width: expected a finite number > 0"),
    ("learning_rate", 0.0, "config.learning_rate: expected a finite number > 0"),
    ("bits", 0, "config.bits: expected an int >= 1, got 0"),
    ("num_steps", -1, "config.num_steps: expected an int >= 0"),
    ("batch_per_class", 0, "config.batch_per_class: expected an int >= 1"),
    ("objective", "mrr", "config.objective: expected one of ['ap', 'ndcg', 'tie_unaware_ap'], got 'mrr'"),
    ("temperature", 0.0, "config.temperature: expected a finite number > 0"),
    ("setting", "rest", "config.setting: expected one of ['query_vs_rest', 'query_vs_database']"),
    ("distance", "cosine", "config.distance: expected one of ['relaxed_hamming', 'nair_hamming'"),
    ("harmonic", "log", "config.harmonic: expected one of ['digamma', 'ln']"),
    ("discount", "log2", "config.discount: expected one of ['exact', 'li', 'simplified']"),
    ("optimizer", "adagrad", "config.optimizer: expected one of ['adam', 'sgd']"),
    ("lr_schedule", "linear", "config.lr_schedule: expected one of ['constant', 'cosine']"),
    ("init", "glorot", "config.init: expected one of ['lecun', 'nair']"),
    ("eval_split", "val", "config.eval_split: expected one of ['test', 'validation', 'validation_heldout']"),
    ("affinity", "neighbors", "config.affinity: expected one of ['label', 'euclidean', 'shared_labels'] for config.method='talr'"),
    ("baselines", ("lsh", "foo"), "config.baselines: expected names from ['agh', 'bre', 'cosdish', 'fasthash', 'iso', 'itq', 'ksh', 'lsh', 'machash', 'mdsh', 'pca', 'sdh', 'sh', 'sph', 'splh', 'sth'], got 'foo'"),
    ("dataset", "csv:x.csv", "config.dataset: expected 'mnist_t10k', 'digits'"),
    ("dataset", "npz:no/such/file.npz", "config.dataset: no file 'no/such/file.npz' (relative paths are read from"),
    ("hidden", (), "config.hidden: expected at least one hidden width for config.model='mlp'"),
    ("warmup_steps", 1000, "config.warmup_steps: expected fewer than config.num_steps=1000"),
    ("momentum", 1.0, "config.momentum: expected a finite number in [0, 1)"),
    ("target_metric", "knn_error", "config.target_metric: expected one of ['tie_aware_ap', 'tie_aware_ndcg']"),
])
def test_check_config_names_the_field_the_expectation_and_the_value(field, value, fragment):
  config = talr_ap.get_config("model=mlp")
  config[field] = value
  with pytest.raises(checks.ConfigError) as e:
    checks.check_config(config)
  assert fragment in str(e.value) and "\n" not in str(e.value)


def test_the_tie_unaware_control_needs_query_vs_rest_and_a_temperature():
  config = talr_ap.get_config()
  config.objective, config.setting = "tie_unaware_ap", "query_vs_database"
  with pytest.raises(checks.ConfigError, match=r"config.setting: expected 'query_vs_rest' for config.objective="):
    checks.check_config(config)
  config = talr_ap.get_config()
  config.objective = "tie_unaware_ap"
  del config["temperature"]  # a config written without the field
  with pytest.raises(checks.ConfigError, match="config.temperature: expected a temperature > 0"):
    checks.check_config(config)


@pytest.mark.parametrize("field, value, fragment", [
    ("method", "lambda",
     "config.method: expected one of ['talr', 'ranknet', 'lambdarank', 'deep', 'cghash', 'structhash'], got 'lambda'"),
    ("score", "mrr", "config.score: expected one of ['knn_count', 'knn_majority', 'retrieval', 'ap', 'hierarchical']"),
    ("hierarchy", "ward", "config.hierarchy: expected one of ['average', 'complete', 'single'], got 'ward'"),
    ("threshold", "fixed", "config.threshold: expected one of ['relative', 'absolute']"),
    ("doc_pool", 0, "config.doc_pool: expected an int >= 1 or None"),
    ("swap_bins", 0, "config.swap_bins: expected an int >= 1 or None"),
    ("train_neighbors", "all", "config.train_neighbors: expected an int >= 1, got 'all'"),
    ("affinity", "euclidean", "config.affinity: expected one of ['label', 'neighbors']"),
    ("target_metric", "tie_aware_ap", "config.target_metric: expected one of ['knn_error', 'precision_at_radius']"),
])
def test_check_config_of_nair(field, value, fragment):
  config = lambdarank_knn.get_config()
  config[field] = value
  with pytest.raises(checks.ConfigError) as e:
    checks.check_config(config)
  assert fragment in str(e.value)


def test_check_config_of_the_evaluate_launcher():
  config = baselines.get_config()
  config.methods = ()
  with pytest.raises(checks.ConfigError, match=r"config.methods: expected a non-empty list"):
    checks.check_config(config)
  config = baselines.get_config("runlocal")
  config.bits = (16, 100)  # digits: 64 features, one PCA direction per bit
  with pytest.raises(checks.ConfigError, match=r"pca needs at most 64 bits on digits"):
    checks.check_run(config)
  config.methods = ("lsh", "sh")  # random projections and spectral modes: any length
  checks.check_run(config)
  # A list naming one thing twice would give two rows (or runs) of one name.
  folder = os.path.dirname(os.path.abspath(__file__))
  for field, value, message in (
      ("methods", ("lsh", "sh", "lsh"), "expected distinct names, got 'lsh' twice"),
      ("bits", (16, 32, 16), "expected distinct code lengths, got 16 twice"),
      ("models", (folder, os.path.join(folder, ".")), f"expected distinct directories, got '{folder}/.' twice "
                                                      f"\\('{folder}'\\)"),
      ("seeds", (0, 1, 0), "expected distinct values, got 0 twice")):
    run = config.copy_and_resolve_references()
    run[field] = value
    with pytest.raises(checks.ConfigError, match=rf"^config.{field}: {message}$"):
      checks.check_config(run)


def test_train_and_evaluate_checks_before_it_loads_data(tmp_path, monkeypatch):
  from experiments import tasks  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(tasks, "load_dataset", lambda *a, **k: pytest.fail("data loaded"))
  config = talr_ap.get_config("runlocal")
  config.alpha = -3.0
  with pytest.raises(checks.ConfigError, match=r"config.alpha"):
    methods.train_and_evaluate(config, str(tmp_path))


def test_tune_checks_every_trial_first(tmp_path):
  config = talr_ap.get_config("runlocal")
  trials = methods.tune_trials(config, "alpha=1,2;standardize=True,False", "validation")
  assert [t[0] for t in trials] == ["alpha=1.0_standardize=True", "alpha=1.0_standardize=False",
                                    "alpha=2.0_standardize=True", "alpha=2.0_standardize=False"]
  assert all(t[2].eval_split == "validation" and t[2].baselines == () for t in trials)
  with pytest.raises(checks.ConfigError, match=r"config.alpha: .* \(in the grid's trial alpha=-1.0\)"):
    methods.tune(config, "alpha=1,-1", str(tmp_path))
  assert not os.listdir(tmp_path)  # nothing ran
  with pytest.raises(checks.ConfigError, match=r"--grid: 'alpah' is not a field of the config; did you mean alpha"):
    methods.parse_grid("alpah=1", config)
  with pytest.raises(checks.ConfigError, match=r"--grid: standardize=maybe: expected true or false"):
    methods.parse_grid("standardize=maybe", config)


# --------------------------------------------------------------------------- memory


def test_the_estimate_grows_with_the_soft_histograms_by_hand():
  # TALR query-vs-rest: the kernel [B, B - 1, b + 1] float32 and its gradient; B = 25 x 10 classes.
  small, big = talr_ap.get_config(), talr_ap.get_config()
  big.bits = small.bits + 1000
  small.baselines = big.baselines = ()
  (a, lines), (b, _) = checks.estimate_memory(small), checks.estimate_memory(big)
  soft = 250 * 249 * 1000 * 4 * 2
  assert b - a >= soft
  assert any(line.startswith("soft histograms (train): batch 250 x 249 others x 33 bins") and
             line.endswith(f"= {250 * 249 * 33 * 8 / 1e6:.0f} MB") for line in lines)


@pytest.mark.parametrize("make, fragment", [
    (lambda: talr_ap.get_config(), "soft histograms: batch 250 x 249 others x 100,001 bins x 4 B x 2"),
    (lambda: lambdarank_knn.get_config(), "kNN classification: 1,000 queries x 9,000 items x 100,001 bins"),
    (lambda: baselines.get_config(), "evaluation histograms: 1,000 queries x 100,001 bins"),
])
def test_bits_100000_is_refused_with_the_estimate(make, fragment):
  config = make()
  config.bits = (16, 100000) if isinstance(config.bits, tuple) else 100000
  if "methods" in config:
    config.methods = ("lsh", "sh")
  with pytest.raises(checks.ConfigError) as e:
    checks.check_memory(config, available=22 * GB)
  message = str(e.value)
  assert message.startswith("config.bits=") and "this run needs about " in message
  assert fragment in message and "more than the 22 GB available; lower config.bits" in message
  total, _ = checks.estimate_memory(config)
  assert total > 22 * GB


def test_dataset_shapes_come_from_headers(tmp_path):
  from hashjax import data  # pylint: disable=g-import-not-at-top
  np.savez(tmp_path / "d.npz", features=np.zeros((7, 5), np.float32), labels=np.array([0, 1, 2, 0, 1, 2, 2]))
  config = talr_ap.get_config()
  config.dataset = f"npz:{tmp_path / 'd.npz'}"
  assert checks.dataset_shape(config) == checks.DataShape(7, 5, 3)
  mnist = data.MNIST_T10K_DIR
  config.dataset = f"idx:{mnist / 't10k-images-idx3-ubyte.gz'},{mnist / 't10k-labels-idx1-ubyte.gz'}"
  assert checks.dataset_shape(config) == checks.DataShape(10000, 784, 10)
  config.dataset = "tfds:svhn_cropped"
  assert not checks.dataset_shape(config).known
  assert any("assumed" in line for line in checks.estimate_memory(config)[1])
  assert checks.available_memory() > 0


def test_an_empty_workdir_flag_is_refused_not_read_as_the_default(tmp_path):
  from absl import flags  # pylint: disable=g-import-not-at-top
  flags.FLAGS(["launcher", "--workdir="])
  try:
    with pytest.raises(cli.ConfigError, match=r"^--workdir: expected a directory, got an empty string \(leave the "
                                              r"flag out for the launcher's default\)$"):
      cli.workdir("runs/x", launcher="experiments.train")
  finally:
    flags.FLAGS.unparse_flags()
