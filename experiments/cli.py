r"""The launchers' command line: config files and their fields, help, up-front checks and memory bounds.

Every launcher (``experiments.train``, ``evaluate``, ``tune``, ``nair_study``) hands its ``main`` to
:func:`run`, which

* answers ``--help`` / ``-h`` / ``--helpfull`` (exit status 0): the launcher's usage (its docstring),
  its flags and, with ``--config``, every field of that config with its default and the comment written
  beside it in the config's source; without ``--config``, the configs the launcher runs;
* loads ``--config=configs/x.py[:argument]`` and applies ``--config.<field>=<value>``, each value typed
  like the field's default: ``--config.bits=16,32`` for a tuple, ``--config.doc_pool=None``;
* checks the whole config before any data is loaded (:func:`experiments.methods.checks.check_config`: every
  choice against the library's own names, every number against its range) and refuses a run that cannot
  fit in memory (:func:`experiments.methods.checks.check_memory`, from :func:`~experiments.methods.checks.estimate_memory`);
* checks that ``--workdir`` is a directory it can write to, or can create (:func:`check_workdir`), and the
  launcher's ``main`` holds it (:func:`workdir`): a second run into a workdir another run is writing to stops at
  once, and so does a run into the workdir of another launcher, whose output it would replace or mix with its own;
* joins the processes of a config's ``num_processes``, ``process_id`` and ``coordinator_address`` (None: the
  ``JAX_*`` environment variables) before ``main`` (:func:`experiments.fitting.start_processes`);
* reports each of these problems as one line ``error: ...`` with exit status 2, no traceback; so is a
  ``ValueError`` raised later whose message names a config field (``config.<field>: ...``).

Experiments and configs are not installed with the package: they run from the root of the clone.
"""

from __future__ import annotations

import ast
import difflib
import fcntl
import importlib.util
import io as _io
import logging
import os
import re
import sys
import tokenize
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from absl import app, flags
import jax
from jax.experimental import multihost_utils
import ml_collections
import numpy as np

from experiments import fitting, process
from experiments.methods import checks
from hashjax import _checks

HELP_FLAGS = ("-h", "--help", "--helpfull", "--helpshort", "-?")
_CLONE = "experiments and configs run from the root of the hashjax clone"

#: ``--workdir``, one flag shared by every launcher (absl refuses a flag defined twice in a process).
WORKDIR = flags.DEFINE_string("workdir", None, "Where the run writes its results, model and checkpoints "
                              "(default: runs/<config name>, or as the launcher's docstring says).")


#: A problem with the command line or the config, told in one line (the launcher exits with status 2).
ConfigError = checks.ConfigError
format_value = checks.format_value

#: The file in a workdir whose lock the run writing there holds (its process 0), with that process's id and its
#: launcher (``"<process id> <launcher>"``, of the run that holds it or last held it).
RUN_LOCK = ".run.lock"
_HELD: Dict[str, int] = {}  # the workdirs (real paths) this process holds, and their open lock files


#: The launchers, as ``python -m`` names them; a workdir belongs to the one whose output it holds (:func:`workdir`).
LAUNCHERS = ("experiments.train", "experiments.evaluate", "experiments.evaluate_codes", "experiments.tune",
             "experiments.colgen", "experiments.bit_weights", "experiments.localrank",
             "experiments.localrank_synthetic", "experiments.nair_regression", "experiments.nair_study",
             "experiments.tie_breaking", "experiments.acdv_svm")


def workdir(default: str, *, launcher: str) -> str:
  """The run's workdir, ``--workdir`` or else ``default``, created and held for the rest of the process.

  Process 0 of a run takes an exclusive ``flock`` on ``<workdir>/.run.lock`` without waiting, so that a second
  run started into the same workdir stops at once with one line (status 2) rather than mixing its results and
  models with the first's; the lock goes when the process ends (also when it is killed). The lock file keeps
  the process id and the ``launcher`` (one of :data:`LAUNCHERS`) of the run that holds it or last held it, and a
  run of another launcher is refused in one line too, while that run holds the workdir or once it has left any
  output there (results, checkpoints, models: anything but the lock file), which this run would replace or mix
  with its own; a workdir it left empty is taken over (a lock file of a version that recorded no launcher lets
  any launcher in). The other processes of a multi-process run, which write nothing, take none, and stop with
  process 0 (its answer is broadcast); a process that holds the workdir already (a launcher's ``main`` called
  twice) keeps it.
  """
  _checks.check_option("launcher", launcher, LAUNCHERS)
  path = check_workdir(WORKDIR.value if WORKDIR.value is not None else default)
  real = os.path.realpath(path)
  if real in _HELD:
    return path
  holder = _take(path, real, launcher) if jax.process_index() == 0 else 0
  if jax.process_count() > 1:
    holder = int(multihost_utils.broadcast_one_to_all(np.int64(holder)))
  if holder <= -2:
    raise ConfigError(f"--workdir={path}: expected a workdir of {launcher} or a new one, got a workdir of "
                      f"{LAUNCHERS[-2 - holder]} ({RUN_LOCK}), whose output this run would replace or mix with "
                      f"its own; choose another --workdir")
  if holder:
    raise ConfigError(f"--workdir={path}: expected a workdir no other run is writing to, got one held by "
                      f"{f'process {holder}' if holder > 0 else 'another process'} ({RUN_LOCK}); wait for it to end "
                      f"or choose another --workdir")
  _HELD.setdefault(real, -1)
  return path


def _take(path: str, real: str, launcher: str) -> int:
  """Locks ``path``'s :data:`RUN_LOCK` for this process and ``launcher`` (0); or the id of the process holding
  it (-1: unknown); or, when a run of another launcher holds it or has left any output there, ``-2 -`` that
  launcher's index in :data:`LAUNCHERS`."""
  os.makedirs(path, exist_ok=True)
  fd = os.open(os.path.join(path, RUN_LOCK), os.O_RDWR | os.O_CREAT, 0o666)  # less the umask, as open() gives
  try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    taken = True
  except BlockingIOError:
    taken = False
  fields = os.read(fd, 256).decode("ascii", "replace").split()  # "<process id> <launcher>"
  owner = fields[1] if len(fields) > 1 and fields[1] in LAUNCHERS else launcher
  # Another launcher's workdir: while its run holds it, or once that run has left output (anything but the lock).
  if owner != launcher and (not taken or set(os.listdir(path)) - {RUN_LOCK}):
    os.close(fd)  # (closing releases the lock)
    return -2 - LAUNCHERS.index(owner)
  if not taken:
    os.close(fd)
    return int(fields[0]) if fields and fields[0].isdigit() and int(fields[0]) > 0 else -1
  os.ftruncate(fd, 0)
  os.pwrite(fd, f"{os.getpid()} {launcher}".encode("ascii"), 0)
  _HELD[real] = fd
  return 0


# --------------------------------------------------------------------------- fields


def config_fields(config: ml_collections.ConfigDict, prefix: str = "") -> List[Tuple[str, object]]:
  """``[(dotted name, value)]`` of every field, nested groups flattened (``model.width``)."""
  out = []
  for key in config.keys():
    value = config[key]
    if isinstance(value, ml_collections.ConfigDict):
      out += config_fields(value, f"{prefix}{key}.")
    else:
      out.append((prefix + key, value))
  return out


# --------------------------------------------------------------------------- config files


def _split_spec(spec: str) -> Tuple[str, Optional[str]]:
  if os.path.isfile(spec):
    return spec, None
  m = re.match(r"^(.*?\.py):(.*)$", spec)
  if m:
    return m.group(1), m.group(2)
  path, sep, arg = spec.partition(":")
  return path, (arg if sep else None)


def _read(path: str) -> str:
  with open(path, encoding="utf-8") as f:
    return f.read()


def config_files(folder: str) -> List[str]:
  """The config files of ``folder`` (the ``*.py`` files that define ``get_config``), sorted."""
  out = []
  for name in sorted(os.listdir(folder)):
    path = os.path.join(folder, name)
    if name.endswith(".py") and not name.startswith("_") and os.path.isfile(path) and "def get_config" in _read(path):
      out.append(name)
  return out


def _missing_file(path: str) -> ConfigError:
  msg = f"--config: no config file {path!r}"
  if not os.path.isabs(path):
    msg += f" in the current directory {os.getcwd()} ({_CLONE})"
  folder = os.path.dirname(path) or "."
  if os.path.isdir(folder):
    names = config_files(folder)
    close = difflib.get_close_matches(os.path.basename(path), names, n=1)
    if close:
      msg += f"; did you mean {os.path.join(os.path.dirname(path), close[0])}?"
    elif names:
      msg += f"; {folder} holds {', '.join(names)}"
  return ConfigError(msg)


def _import_config(path: str):
  if not os.path.isfile(path):
    raise _missing_file(path)
  stem = re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
  spec = importlib.util.spec_from_file_location(f"_launcher_config_{stem}", path)
  module = importlib.util.module_from_spec(spec)
  try:
    spec.loader.exec_module(module)
  except SyntaxError as e:
    raise ConfigError(f"--config={path}: line {e.lineno}: {e.msg}") from None
  except ImportError as e:
    hint = f" ({_CLONE})" if (e.name or "").split(".")[0] in ("configs", "experiments") else ""
    raise ConfigError(f"--config={path}: {e}{hint}") from None
  if not callable(getattr(module, "get_config", None)):
    raise ConfigError(f"--config={path}: defines no get_config(arg=None) returning a ConfigDict")
  return module


def _load(spec: str):
  path, arg = _split_spec(spec)
  module = _import_config(path)
  try:
    config = module.get_config() if arg is None else module.get_config(arg)
  except (ValueError, TypeError, KeyError) as e:
    raise ConfigError(f"--config={spec}: {e}") from None
  if not isinstance(config, ml_collections.ConfigDict):
    raise ConfigError(f"--config={spec}: get_config returned {type(config).__name__}, not a ConfigDict")
  return module, config


def set_field(config: ml_collections.ConfigDict, name: str, text: Optional[str], *, where: str = "the config",
              help_hint: str = "") -> None:
  """Sets dotted field ``name`` of ``config`` from command-line ``text`` (:func:`checks.parse_value`)."""
  flag = f"--config.{name}"
  node, parts = config, name.split(".")
  for i, part in enumerate(parts):
    if not isinstance(node, ml_collections.ConfigDict) or part not in node:
      known = [n for n, _ in config_fields(config)]
      close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
      hint = f"; did you mean {', '.join('config.' + c for c in close)}?" if close else help_hint
      raise ConfigError(f"{flag if text is None else f'{flag}={text}'}: {where} has no field {name!r}{hint}")
    if i < len(parts) - 1:
      node = node[part]
  key = parts[-1]
  value = checks.parse_value(text, node[key], node.get_type(key), name=flag)
  try:
    node[key] = value
  except (TypeError, ValueError) as e:
    raise ConfigError(f"{flag}={text}: {e}") from None


def load_config(spec: str, overrides: Sequence[Tuple[str, Optional[str]]] = (), *,
                help_hint: str = "") -> ml_collections.ConfigDict:
  """The config of ``--config=<spec>`` (``path[:argument]``) with ``--config.<field>=<value>`` overrides.

  Raises ConfigError, in one line, for a missing or unimportable file, a
  bad argument, an unknown field (naming close matches) or a value that
  does not parse as the field's type (``help_hint`` ends the unknown field's
  message when no field is close).
  """
  _, config = _load(spec)
  for name, text in overrides:
    set_field(config, name, text, where=spec, help_hint=help_hint)
  return config


def _dotted(node) -> Optional[str]:
  parts = []
  while isinstance(node, ast.Attribute):
    parts.append(node.attr)
    node = node.value
  return ".".join(reversed(parts)) if isinstance(node, ast.Name) and node.id == "config" and parts else None


def _assignments(path: str) -> List[Tuple[str, Optional[str], bool]]:
  """``[(field, comment or None, top level)]`` of the ``config.<field> = ...`` statements of a file, in order.

  The comment is the one at the end of the statement's first line; "top
  level": directly in a function's body, not under an ``if``.
  """
  source = _read(path)
  comments = {tok.start[0]: tok.string.lstrip("#").strip()
              for tok in tokenize.generate_tokens(_io.StringIO(source).readline) if tok.type == tokenize.COMMENT}
  out = []
  for fn in ast.walk(ast.parse(source)):
    if not isinstance(fn, ast.FunctionDef):
      continue
    top = {id(node) for node in fn.body}
    for node in ast.walk(fn):
      targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
          node, (ast.AugAssign, ast.AnnAssign)) else []
      for i, target in enumerate(targets):
        name = _dotted(target)
        if name:
          out.append((node.lineno, name, comments.get(node.lineno) if i == 0 else None, id(node) in top))
  return [(name, comment, top) for _, name, comment, top in sorted(out, key=lambda t: t[0])]


def field_comments(module) -> Tuple[Dict[str, str], Dict[str, int]]:
  """``({field: comment}, {field: position})`` from the source of a config module and the configs it imports.

  The comment is the one written beside the field's first top-level
  assignment (``config.bits = 32  # code length``; not one under an ``if``
  that sets a variant), the config's own before its bases'; the position
  is that of the field's first assignment, the bases' first.
  """
  folder = os.path.dirname(os.path.abspath(module.__file__))
  bases = [m.__file__ for m in vars(module).values() if isinstance(m, type(module)) and getattr(m, "__file__", None)
           and os.path.dirname(os.path.abspath(m.__file__)) == folder]
  own = _assignments(module.__file__)
  inherited = [a for path in bases for a in _assignments(path)]
  comments: Dict[str, Optional[str]] = {}
  for name, comment, top in own + inherited:
    if top and name not in comments:
      comments[name] = comment
  order: Dict[str, int] = {}
  for name, _, _ in inherited + own:
    order.setdefault(name, len(order))
  comments = {k: v for k, v in comments.items() if v}
  return comments, order


# --------------------------------------------------------------------------- help


def _prog() -> str:
  spec = getattr(sys.modules.get("__main__"), "__spec__", None)
  return f"python -m {spec.name}" if spec is not None else f"python {sys.argv[0]}"


def _flag_lines(config: bool) -> List[Tuple[str, str]]:
  lines = [("--config=PATH[:ARG]", "a configs/*.py file and its optional argument (required)")] if config else []
  for flag in [flags.FLAGS[WORKDIR.name], *flags.FLAGS.get_key_flags_for_module(sys.argv[0])]:
    default = flag.default
    kind = "list" if "list" in flag.flag_type() else flag.flag_type()
    shown = (",".join(default) if isinstance(default, list) else f"<{kind}>" if default is None
             else str(default))
    left = f"--[no]{flag.name}" if flag.boolean else f"--{flag.name}={shown}"
    lines.append((left + (f" (default {shown})" if flag.boolean else ""), flag.help))
  lines.append(("-h, --help, --helpfull", "this help"))
  return lines


def _columns(rows: Sequence[Tuple[str, str]], sep: str = "  ") -> List[str]:
  width = min(max((len(a) for a, _ in rows), default=0), 44)
  return [f"  {a:<{width}}{sep}{b}".rstrip() if b else f"  {a}" for a, b in rows]


def _doc_line(path: str) -> str:
  doc = ast.get_docstring(ast.parse(_read(path))) or ""
  return doc.strip().splitlines()[0] if doc.strip() else ""


def _configs_folder() -> Optional[str]:
  if os.path.isdir("configs"):
    return "configs"
  spec = importlib.util.find_spec("configs")
  return os.path.dirname(spec.origin) if spec and spec.origin else None


def help_text(*, doc: str, prog: str, takes_config: bool, spec: Optional[str] = None,
              overrides: Sequence = (), full: bool = False, configs_of: Optional[str] = None) -> str:
  """The launcher's help: usage, flags, then the config's fields (or the configs to choose from).

  Without ``spec``, the configs listed are those whose source names the
  module ``configs_of`` (default: the launcher's own), else all of them.
  """
  out = [(doc or "").strip(), "", "flags:"] + _columns(_flag_lines(takes_config))
  if takes_config and spec:
    module, config = _load(spec)
    for name, text in overrides:
      set_field(config, name, text, where=spec)
    comments, order = field_comments(module)
    fields = sorted(config_fields(config), key=lambda f: (order.get(f[0], 10 ** 6), f[0]))
    out += ["", f"config {spec}: {_doc_line(module.__file__)}",
            "fields (set one with --config.<field>=<value>; a list as comma-separated values, e.g. 16,32):"]
    out += _columns([(f"--config.{n}={format_value(v)}", f"# {comments[n]}" if n in comments else "")
                     for n, v in fields])
  elif takes_config:
    folder = _configs_folder()
    launcher = configs_of or prog.split()[-1]
    rows = []
    if folder:
      names = config_files(folder)
      shown = os.path.relpath(folder) if not os.path.relpath(folder).startswith("..") else folder
      mine = [n for n in names if launcher in _read(os.path.join(folder, n))]
      rows = [(os.path.join(shown, n), _doc_line(os.path.join(folder, n))) for n in (mine or names)]
    out += ["", "configs (their fields and defaults: " + f"{prog} --config=<config> --help):"]
    out += _columns(rows) if rows else [f"  none found: {_CLONE}"]
  if full:
    out += ["", "every flag (absl):", flags.FLAGS.get_help(include_special_flags=False)]
  return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- the launcher


class _DropBackendNotice(logging.Filter):
  """Drops jax's "Unable to initialize backend 'tpu'" INFO record, harmless where no TPU is meant to be."""

  def filter(self, record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("Unable to initialize backend")


def silence_backend_notice() -> None:
  """Installs :class:`_DropBackendNotice` on the logger jax reports backend initialisation with (once)."""
  logger = logging.getLogger("jax._src.xla_bridge")
  if not any(isinstance(f, _DropBackendNotice) for f in logger.filters):
    logger.addFilter(_DropBackendNotice())


class Args(NamedTuple):
  """A launcher's command line, split: ``--config``, its field overrides, help, and the rest (absl flags)."""
  spec: Optional[str]
  overrides: List[Tuple[str, Optional[str]]]
  help: Optional[str]
  rest: List[str]


def split_args(args: Sequence[str]) -> Args:
  """Separates ``--config=...`` / ``--config ...`` and ``--config.<field>[=value]`` from the other arguments."""
  spec, overrides, wants_help, rest = None, [], None, []
  args = list(args)
  i = 0
  while i < len(args):
    tok = args[i]
    if tok == "--":
      rest += args[i:]
      break
    if tok in HELP_FLAGS:
      wants_help = tok
    elif tok == "--config" or tok.startswith("--config="):
      if tok == "--config":
        if i + 1 >= len(args):
          raise ConfigError("--config: expected --config=<configs/x.py>[:argument], got no value")
        i += 1
        spec = args[i]
      else:
        spec = tok[len("--config="):]
    elif tok.startswith("--config."):
      name, eq, value = tok[len("--config."):].partition("=")
      if not eq:
        nxt = args[i + 1] if i + 1 < len(args) else None
        value = None
        if nxt is not None and not nxt.startswith("--") and nxt not in HELP_FLAGS:
          value, i = nxt, i + 1
      if not name:
        raise ConfigError(f"{tok}: expected --config.<field>=<value>")
      overrides.append((name, value))
    else:
      rest.append(tok)
    i += 1
  return Args(spec, overrides, wants_help, rest)


def check_workdir(path: str, *, flag: str = "--workdir") -> str:
  """``path`` if a run can write there: an existing writable directory, or one that can be created (its nearest
  existing ancestor is a writable directory); else ConfigError, one line naming ``flag``.

  >>> check_workdir(__file__)
  Traceback (most recent call last):
  ...
  experiments.methods.checks.ConfigError: --workdir=...cli.py: expected a directory, got a file
  """
  if path == "":
    raise ConfigError(f"{flag}: expected a directory, got an empty string (leave the flag out for the launcher's "
                      f"default)")
  if os.path.exists(path) and not os.path.isdir(path):
    raise ConfigError(f"{flag}={path}: expected a directory, got a file")
  existing = os.path.abspath(path)
  while not os.path.exists(existing):
    existing = os.path.dirname(existing)
  if not os.path.isdir(existing):
    raise ConfigError(f"{flag}={path}: expected a directory that can be created, got a path below the file "
                      f"{existing}")
  if not os.access(existing, os.W_OK | os.X_OK):
    raise ConfigError(f"{flag}={path}: expected a writable directory, got {existing}, which is not writable")
  return path


def _exit(message) -> None:
  print(f"error: {message}", file=sys.stderr)
  sys.exit(2)


def run(main: Callable, *, config: bool = True, required: Sequence[str] = (),
        check: Optional[Callable] = checks.check_run, configs_of: Optional[str] = None) -> None:
  """Runs ``main(config)`` (``main()`` when the launcher takes no ``config``) as the module's command line.

  Help, config loading and checks as the module docstring says. ``required``
  names absl flags that must be given; ``check(config)`` (``check()`` without
  a config) runs after the flags are parsed and before ``main`` (default
  :func:`experiments.methods.checks.check_run`); ``configs_of``: whose configs the
  help lists (:func:`help_text`). Also silences jax's backend notice, keeps
  library logs quiet (:func:`experiments.process.quiet_library_logs`) and
  pads malloc's heaps (:func:`experiments.process.pad_malloc_heaps`).
  """
  silence_backend_notice()
  argv = list(sys.argv)
  prog = _prog()
  doc = getattr(sys.modules.get("__main__"), "__doc__", "") or ""
  try:
    args = split_args(argv[1:])
    if args.help:
      sys.stdout.write(help_text(doc=doc, prog=prog, takes_config=config, spec=args.spec if config else None,
                                 overrides=args.overrides, full=args.help == "--helpfull",
                                 configs_of=configs_of))
      sys.exit(0)
    if not config and (args.spec or args.overrides):
      raise ConfigError(f"--config: {prog} takes no config ({prog} --help lists its flags)")
    try:
      positional = flags.FLAGS([argv[0]] + args.rest)[1:]
    except flags.Error as e:
      raise ConfigError(f"{e} ({prog} --help lists the flags)") from None
    if positional:
      raise ConfigError(f"unexpected arguments {positional} ({prog} --help shows the usage)")
    for name in required:
      if flags.FLAGS[name].value is None:
        raise ConfigError(f"--{name}: required ({prog} --help shows the usage)")
    if WORKDIR.value is not None:
      check_workdir(WORKDIR.value)
    cfg = None
    if config:
      if not args.spec:
        raise ConfigError(f"--config: required, e.g. --config=configs/talr_ap.py ({prog} --help lists the configs)")
      cfg = load_config(args.spec, args.overrides, help_hint=f" ({prog} --config={args.spec} --help lists them)")
  except ConfigError as e:
    _exit(e)

  def wrapper(_):
    process.quiet_library_logs()
    try:
      if check is not None and config:
        check(cfg)
      elif check is not None:
        check()
      if config and "num_processes" in cfg:
        fitting.start_processes(cfg)  # before any jax computation
      process.pad_malloc_heaps()
      return main(cfg) if config else main()
    except ConfigError as e:
      _exit(e)
    except ValueError as e:
      if str(e).startswith("config."):
        _exit(e)
      raise

  app.run(wrapper, argv=[argv[0]] + args.rest)
