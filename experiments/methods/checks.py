"""Config values and checks of a config before any data is loaded: its fields, and whether the run fits in memory.

:func:`parse_value` types a command-line value like the field it sets (``--config.<field>=<value>``,
``--grid``); :func:`check_config` checks a config of any launcher (``experiments.train``, ``evaluate``,
``tune``, ``colgen``, ``bit_weights``, ``localrank``): every choice against the library's own names, every
number against its range, the fields that must agree; :func:`check_memory` refuses a run that cannot fit in
memory, with :func:`estimate_memory`'s estimate (the arrays that grow with the code length, the batch and the
model); :func:`check_run` does both. They raise :class:`ConfigError`, a one-line ``ValueError`` the launchers
print as ``error: ...`` (``experiments.cli``).
"""

from __future__ import annotations

import gzip
import os
import zipfile
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import ml_collections
import numpy as np

from experiments import fitting, tasks
from experiments.methods.deep import CLASS_OBJECTIVES as DEEP_CLASS_OBJECTIVES, OBJECTIVES as DEEP_OBJECTIVES
from experiments.methods.nair import AFFINITIES as NAIR_AFFINITIES, METHODS as NAIR_METHODS, SCORES as NAIR_SCORES
from experiments.methods.talr import EVAL_KEYS as TALR_EVAL_KEYS, OBJECTIVES as TALR_OBJECTIVES
from experiments.methods.talr import SETTINGS as TALR_SETTINGS
from hashjax import _checks, baselines, data, localrank, mappings, relaxations, weighting
from hashjax import train as train_lib
from hashjax.colgen import cghash, features as colgen_features, inference as colgen_inference
from hashjax.objectives import ranknet as ranknet_lib
from hashjax.objectives import scores as scores_lib
from hashjax.objectives import talr as talr_lib

#: ``config.method`` of ``experiments.train``: the trained methods (``experiments.methods.TRAINERS`` runs each).
METHODS = ("talr", "ranknet", "lambdarank", "deep")
#: ``config.method`` of ``experiments.colgen``.
COLGEN_METHODS = ("cghash", "structhash")
#: ``config.solvers`` of ``experiments.bit_weights``: :data:`hashjax.weighting.SOLVERS` and WhRank.
BIT_WEIGHT_SOLVERS = weighting.SOLVERS + ("whrank",)
#: ``config.select_by`` of ``experiments.localrank`` (``hashjax.ranking.query_metrics`` keys).
LOCALRANK_METRICS = ("ap", "ndcg@1", "ndcg@5", "ndcg@10")
#: ``config.ltr_baselines`` of experiments.localrank (hashjax.localrank.baselines).
LTR_BASELINES = ("rankboost", "svmmap", "lambdamart")
#: ``config.ranker`` of experiments.localrank_synthetic (hashjax.localrank: fit_svmmap, fit_ranknet).
SYNTHETIC_RANKERS = ("svmmap", "ranknet")
#: ``config.target_metric``: what each method's periodic evaluation logs.
TARGETS = {"talr": TALR_EVAL_KEYS, "nair": ("knn_error", "precision_at_radius"), "deep": TALR_EVAL_KEYS}
#: Command-line words of a bool (any case).
TRUE_WORDS, FALSE_WORDS = ("true", "yes", "1"), ("false", "no", "0")


class ConfigError(ValueError):
  """A config that cannot run, told in one line naming the field (a launcher exits with status 2)."""


def format_value(value) -> str:
  """A field's value as it is typed on the command line: ``16,32`` for a tuple, ``()`` when empty, ``None``."""
  if isinstance(value, (tuple, list)):
    return ",".join(format_value(v) for v in value) if value else "()"
  return str(value)


# --------------------------------------------------------------------------- values


def _split_list(text: str) -> List[str]:
  s = text.strip()
  if len(s) >= 2 and s[0] + s[-1] in ("()", "[]"):
    s = s[1:-1]
  return [p.strip().strip("'\"") for p in s.split(",") if p.strip()]


def _infer(text: str):
  """A value of a field without a declared type: an int, a float, a bool word, else the text."""
  for kind in (int, float):
    try:
      return kind(text)
    except ValueError:
      pass
  if text.lower() in TRUE_WORDS + FALSE_WORDS:
    return text.lower() in TRUE_WORDS
  return text


def parse_value(text: Optional[str], default, kind: type, *, name: str):
  """``text`` typed like a field whose default is ``default`` and type ``kind``; ConfigError if it cannot be.

  Tuples and lists take comma-separated elements typed like the default's
  (``"16,32"`` -> ``(16, 32)``; brackets optional; ``""`` or ``()`` empty);
  ``None`` sets None; bools take true/false, yes/no, 1/0 in any case; a bare
  ``--config.<bool field>`` (``text`` None) is True. ``name`` starts the error.

  >>> parse_value("16,32", (16, 32, 64), tuple, name="--config.bits")
  (16, 32)
  >>> parse_value("lsh, itq", ("lsh",), tuple, name="--config.methods")
  ('lsh', 'itq')
  >>> parse_value("No", True, bool, name="--config.plots")
  False
  """
  if text is None:
    if kind is bool:
      return True
    raise ConfigError(f"{name}: expected {name}=<value>, got no value")
  s = text.strip()
  if s == "None":
    return None
  if kind is bool:
    if s.lower() in TRUE_WORDS + FALSE_WORDS:
      return s.lower() in TRUE_WORDS
    raise ConfigError(f"{name}={text}: expected true or false, got {text!r}")
  if kind in (tuple, list):
    parts = _split_list(s)
    if not default:
      return kind(_infer(p) for p in parts)
    elem = type(default[0])
    try:
      return kind(parse_value(p, default[0], elem, name=name) for p in parts)
    except ConfigError:
      raise ConfigError(f"{name}={text}: expected comma-separated values of type {elem.__name__} (like the "
                        f"default {format_value(default)}), got {text!r}") from None
  if kind is int or kind is float:
    try:
      return kind(s)
    except ValueError:
      what = "an int" if kind is int else "a number"
      raise ConfigError(f"{name}={text}: expected {what} (like the default {format_value(default)}), "
                        f"got {text!r}") from None
  if kind is str:
    return s[1:-1] if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"" else s
  if kind is type(None):
    return _infer(s)
  if isinstance(default, ml_collections.ConfigDict):
    raise ConfigError(f"{name}: a group of fields; set them one by one as {name}.<field>=<value>")
  try:
    return kind(s)
  except (TypeError, ValueError) as e:
    raise ConfigError(f"{name}={text}: expected a {kind.__name__}, got {text!r} ({e})") from None


# --------------------------------------------------------------------------- checks


def _fail(name: str, expected: str, value) -> ConfigError:
  return ConfigError(f"{name}: expected {expected}, got {value!r}")


def _choice(options):
  def check(name, v):
    _checks.check_option(name, v, list(options))
  return check


def _int(low: int, allow_none: bool = False):
  def check(name, v):
    _checks.check_int(name, v, low=low, allow_none=allow_none)
  return check


def _num(low=None, high=None, low_open=False, high_open=False):
  def check(name, v):
    _checks.check_number(name, v, low=low, high=high, low_open=low_open, high_open=high_open)
  return check


def _bool(name, v):
  _checks.check_bool(name, v)


def _distinct(name: str, values, what: str) -> None:
  """Each of ``values`` once: a list naming one twice would give two rows of one name."""
  seen = set()
  for value in values:
    if value in seen:
      raise ConfigError(f"{name}: expected distinct {what}, got {value!r} twice")
    seen.add(value)


def _names(options, *, nonempty: bool):
  def check(name, v):
    if not isinstance(v, (tuple, list)) or (nonempty and not v):
      raise _fail(name, "a " + ("non-empty " if nonempty else "") + f"list of names from {sorted(options)} "
                  f"(--{name}=lsh,itq)", v)
    for item in v:
      if item not in options:
        raise _fail(name, f"names from {sorted(options)}", item)
    _distinct(name, v, "names")
  return check


def _ints(low: int, nonempty: bool = False):
  def check(name, v):
    if not isinstance(v, (tuple, list)) or (nonempty and not v) or not all(_checks.is_int(x) and x >= low for x in v):
      raise _fail(name, f"a {'non-empty ' if nonempty else ''}list of ints >= {low} (--{name}=1,2)", v)
    _distinct(name, v, "values")
  return check


def _hidden(name, v):
  if not isinstance(v, (tuple, list)) or not all(_checks.is_int(w) and w >= 1 for w in v):
    raise _fail(name, "a list of positive layer widths (--config.hidden=512,256)", v)


def _image_shape(name, v):
  if not (isinstance(v, (tuple, list)) and len(v) == 3 and all(_checks.is_int(n) and n >= 1 for n in v)):
    raise _fail(name, "(height, width, channels), three positive ints (--config.image_shape=28,28,1)", v)


def _channels(name, v):
  if not (isinstance(v, (tuple, list)) and v and all(_checks.is_int(n) and n >= 1 for n in v)):
    raise _fail(name, "one or more positive channel counts (--config.channels=16,32)", v)


def _bits(name, v):
  if isinstance(v, (tuple, list)):  # several code lengths (evaluate, colgen, bit_weights)
    if not all(_checks.is_int(b) and b >= 1 for b in v):
      raise _fail(name, "code lengths >= 1 (one, or a list: --config.bits=16,32)", v)
    _distinct(name, v, "code lengths")
  else:
    _checks.check_int(name, v, low=1)


def _folder(name, v):
  if not isinstance(v, str) or not os.path.isdir(v):
    where = f" (relative paths are read from the current directory {os.getcwd()})" if isinstance(
        v, str) and not os.path.isabs(v) else ""
    raise _fail(name, "an existing folder" + where, v)


def _folders(name, v):
  if not isinstance(v, (tuple, list)):
    raise _fail(name, "a list of saved models (directories)", v)
  for path in v:
    if not isinstance(path, str) or not os.path.isdir(path):
      raise ConfigError(f"{name}: expected saved models (directories), got {path!r}, which is not one")
  real = [os.path.realpath(path) for path in v]
  for i, path in enumerate(v):
    if real[i] in real[:i]:
      raise ConfigError(f"{name}: expected distinct directories, got {path!r} twice ({v[real.index(real[i])]!r})")


def _train_neighbors(name, v):
  if v != "scaled":
    _checks.check_int(name, v, low=1)


def _file_exists(name: str, path: str, value: str) -> None:
  if not os.path.isfile(path):
    where = f" (relative paths are read from the current directory {os.getcwd()})" if not os.path.isabs(path) else ""
    raise ConfigError(f"{name}: no file {path!r}{where}, got {value!r}")


def _dataset(name, v):
  forms = f"'mnist_t10k', 'digits', {tasks.PAIRS!r}, 'tfds:<name>', 'idx:<images>,<labels>' or 'npz:<file>'"
  if not isinstance(v, str):
    raise _fail(name, forms, v)
  if v in ("mnist_t10k", "digits", tasks.PAIRS) or (v.startswith("tfds:") and v[5:]):
    return
  if v.startswith("idx:"):
    paths = v[4:].split(",")
    if len(paths) != 2 or not all(paths):
      raise _fail(name, "'idx:<images file>,<labels file>'", v)
    for p in paths:
      _file_exists(name, p, v)
    return
  if v.startswith("npz:") and v[4:]:
    _file_exists(name, v[4:], v)
    return
  raise _fail(name, forms, v)


def _rules() -> Dict[str, Callable]:
  """Field -> its rule: a field name means the same thing in every launcher's config."""
  return {
      "method": _choice(METHODS + COLGEN_METHODS), "dataset": _dataset, "seed": _int(0),
      "queries_per_class": _int(1), "train_per_class": _int(1), "val_per_class": _int(1),
      "val_heldout_per_class": _int(1), "eval_split": _choice(tasks.EVAL_SPLITS),
      "affinity": _choice(tasks.AFFINITIES), "num_neighbors": _int(1), "train_neighbors": _train_neighbors,
      "model": _choice(mappings.MAPPINGS), "hidden": _hidden, "init": _choice(mappings.INITS),
      "activation": _choice(mappings.ACTIVATIONS), "standardize": _bool, "bits": _bits,
      "image_shape": _image_shape, "channels": _channels,
      "harmonic": _choice(relaxations.HARMONICS),
      "discount": _choice(relaxations.DISCOUNTS), "distance": _choice(talr_lib.DISTANCES),
      "alpha": _num(0, low_open=True), "alpha_final": _num(0), "width": _num(0, low_open=True),
      "temperature": _num(0, low_open=True),
      # experiments.nair_regression
      "seeds": _ints(0, True), "num_queries": _int(1), "learners": _names(NAIR_METHODS, nonempty=False),
      "mode": _choice(scores_lib.REGRESSION_MODES),
      "setting": _choice(TALR_SETTINGS), "database_size": _int(0), "database_cached": _bool,
      # config.method="deep" (experiments.methods.deep): each objective's options
      "eta": _num(0), "dtsh_alpha": _num(0), "hashnet_alpha": _positive_or_none, "hashnet_gamma": _num(0),
      "csq_lambda": _num(0), "greedy_alpha": _num(0),
      "score": _choice(NAIR_SCORES), "k": _int(1), "radius": _int(0), "top_bins": _int(1, True),
      "hierarchy": lambda name, v: v is None or _choice(data.LINKAGES)(name, v),
      "swap_bins": _int(1, True), "threshold": _choice(ranknet_lib.THRESHOLDS),
      "queries_per_batch": _int(1), "docs_per_query": _int(1), "doc_pool": _int(1, True),
      "optimizer": _choice(fitting.OPTIMIZERS), "learning_rate": _num(0, low_open=True),
      "momentum": _num(0, 1, high_open=True), "weight_decay": _num(0), "lr_schedule": _choice(train_lib.SCHEDULES),
      "warmup_steps": _int(0), "lr_final_fraction": _num(0, 1), "augment_shift": _int(0), "input_noise": _num(0),
      "batch_per_class": _int(1), "num_steps": _int(0), "log_every": _int(1), "eval_every": _int(0, True),
      "checkpoint_every": _int(0, True), "target": _num(0), "precision_k": _int(1), "num_devices": _int(1),
      # several processes (hashjax.sharding.initialize_processes; None: the JAX_* environment variables)
      "num_processes": _int(1, True), "process_id": _int(0, True),
      "coordinator_address": lambda name, v: v is None or _checks.check_nonempty_str(
          name, v, what="'host:port' of process 0, or None"),
      "exact_l2": _bool, "plots": _bool, "save_codes": _bool, "trials": _int(1),
      "baselines": _names(baselines.BASELINES, nonempty=False), "methods": _names(baselines.BASELINES, nonempty=True),
      "models": _folders, "weighted": _names(baselines.BASELINES, nonempty=False),
      # experiments.colgen
      "regularizer": _choice(cghash.REGULARIZERS), "features": _choice(colgen_features.FEATURE_KINDS),
      "C": _num(0, low_open=True), "num_relevant": _int(1), "num_irrelevant": _int(1), "num_anchors": _int(1),
      "train_subset_per_class": _int(1), "num_starts": _int(1), "ndcg_k": _int(1), "max_cp_iterations": _int(1),
      "max_iterations": _int(0), "max_dim": _int(0), "talr_steps": _int(0), "tolerance": _num(0),
      "cp_tolerance": _num(0), "min_fraction": _num(0), "duplicate_tolerance": _num(0),
      "sharpness": _num(0, low_open=True), "stagewise": _bool,
      # experiments.bit_weights
      "base_codes": _names(baselines.BASELINES, nonempty=False), "solvers": _names(BIT_WEIGHT_SOLVERS, nonempty=False),
      "tie_break": _bool,
      # experiments.acdv_svm
      "per_class": _int(2), "train_fraction": _num(0, 1, low_open=True, high_open=True), "pairs": _int(2),
      # experiments.localrank
      "data_dir": _folder, "folds": _ints(1), "cluster_grid": _ints(1), "fixed_components": _ints(1),
      "knn_neighbors": _ints(1), "dk_folds": _ints(1), "lsh_sweep": _ints(1), "num_features": _int(1),
      "blas_threads": _int(1), "random_draws": _int(1), "lsh_bits": _int(1), "lsh_tables": _int(1),
      "lsh_candidates": _int(1), "lsh_clusters": _int(1), "bootstrap_samples": _int(1), "knn_top": _int(1),
      "single_query": _bool,
      "max_label": _int(0), "knn_rank_feature": _int(0), "l2_grid": _positive_numbers,
      "similarities": _names(localrank.SIMILARITIES, nonempty=True), "select_by": _choice(LOCALRANK_METRICS),
      "variance_fraction": _num(0, 1, low_open=True), "ridge": _num(0, low_open=True),
      "ltr_baselines": _names(LTR_BASELINES, nonempty=False), "rankboost_rounds": _ints(1, nonempty=True),
      "rankboost_thresholds": _int(1, True), "svmmap_c": _positive_numbers, "svmmap_epsilon": _num(0, low_open=True),
      "svmmap_max_iterations": _int(1), "lambdamart_trees": _ints(1, nonempty=True),
      "lambdamart_learning_rates": _positive_numbers, "lambdamart_leaves": _ints(2, nonempty=True),
      "lambdamart_min_data_in_leaf": _int(1), "lambdamart_threads": _int(1),
      # experiments.localrank_synthetic
      "table_seed": _int(0), "dim": _int(1), "relevant_docs": _int(1), "nonrelevant_docs": _int(1),
      "max_std": _num(0, low_open=True), "min_std": _num(0, low_open=True), "separation": _num(0),
      "mean_shift": _num(0), "scale": _num(0, low_open=True), "flipped": _int(0),
      "ranker": _choice(SYNTHETIC_RANKERS), "svm_c": _num(0, low_open=True), "l2": _num(0, low_open=True),
      "measures": _names(localrank.SIMILARITIES, nonempty=True),
  }


def _positive_numbers(name, v):
  if not isinstance(v, (tuple, list)) or not v or not all(
      isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 for x in v):
    raise _fail(name, "a non-empty list of numbers > 0", v)


def _positive_or_none(name, v):
  if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < float("inf")):
    raise _fail(name, "a number > 0, or None", v)


def run_kind(config: ml_collections.ConfigDict) -> Optional[str]:
  """Whose config: ``"talr"``, ``"nair"``, ``"deep"`` (``experiments.train``), ``"colgen"``, ``"baselines"``
  (``experiments.evaluate``), ``"bit_weights"``, ``"localrank"``, or None."""
  method = config.get("method")
  if method in ("talr", "deep"):
    return method
  if method in ("ranknet", "lambdarank"):
    return "nair"
  if method in COLGEN_METHODS:
    return "colgen"
  for field, kind in (("methods", "baselines"), ("solvers", "bit_weights"), ("similarities", "localrank")):
    if field in config:
      return kind
  return None


def _check_relations(config: ml_collections.ConfigDict, kind: Optional[str]) -> None:
  c = config.get
  if kind in ("talr", "nair", "deep"):
    affinities = NAIR_AFFINITIES if kind == "nair" else ("label", "euclidean", "shared_labels")
    if c("affinity") is not None and c("affinity") not in affinities:
      raise _fail("config.affinity", f"one of {list(affinities)} for config.method={c('method')!r}", c("affinity"))
    targets = TARGETS[kind]
    if c("target_metric") is not None and c("target_metric") not in targets:
      raise _fail("config.target_metric", f"one of {list(targets)} for config.method={c('method')!r}",
                  c("target_metric"))
  if "objective" in config:  # the losses of the method: TALR's, or the deep hashing ones
    _choice(DEEP_OBJECTIVES if kind == "deep" else TALR_OBJECTIVES)("config.objective", c("objective"))
  if c("objective") == "tie_unaware_ap" and c("setting") != "query_vs_rest":
    raise _fail("config.setting", "'query_vs_rest' for config.objective='tie_unaware_ap'", c("setting"))
  if c("objective") == "tie_unaware_ap" and "temperature" not in config:
    raise ConfigError("config.temperature: expected a temperature > 0 for config.objective='tie_unaware_ap', "
                      "got a config without it")
  if c("dataset") == tasks.PAIRS and (kind != "talr" or c("affinity") != "shared_labels"):
    raise _fail("config.dataset", "a single-label dataset (the multi-label one is for config.method='talr' with "
                "config.affinity='shared_labels')", c("dataset"))
  if c("affinity") == "shared_labels" and c("dataset") != tasks.PAIRS:
    raise _fail("config.affinity", f"'shared_labels' only on config.dataset={tasks.PAIRS!r} (the multi-label "
                "dataset)", c("affinity"))
  supervised = [m for m in c("baselines") or () if m in baselines.SUPERVISED]
  if c("affinity") == "shared_labels" and supervised:
    raise _fail("config.baselines", "unsupervised baselines for config.affinity='shared_labels' (the supervised "
                "ones learn from single class labels)", supervised[0])
  if c("score") == "hierarchical" and c("hierarchy") is None and kind == "nair":
    raise _fail("config.hierarchy", f"a linkage, one of {list(data.LINKAGES)} for config.score='hierarchical'",
                None)
  if c("hierarchy") is not None and c("affinity", "label") != "label":
    raise _fail("config.hierarchy", f"None for config.affinity={c('affinity')!r} (a class hierarchy needs "
                "class relevance, 'label')", c("hierarchy"))
  if c("save_codes") and c("affinity") not in ("label", "shared_labels"):
    raise _fail("config.save_codes", f"False for config.affinity={c('affinity')!r} (the saved codes carry class "
                "labels or label sets)", c("save_codes"))
  if kind == "deep" and c("objective") in DEEP_CLASS_OBJECTIVES and c("affinity") != "label":
    raise _fail("config.affinity", f"'label' for config.objective={c('objective')!r} (it trains on class labels)",
                c("affinity"))
  if c("num_processes") is not None and c("process_id") is not None and c("process_id") >= c("num_processes"):
    raise _fail("config.process_id", f"a process number below config.num_processes={c('num_processes')}",
                c("process_id"))
  if "warmup_steps" in config and "num_steps" in config and c("warmup_steps") >= max(c("num_steps"), 1):
    raise ConfigError(f"config.warmup_steps: expected fewer than config.num_steps={c('num_steps')} "
                      f"(at least 1), got {c('warmup_steps')}")
  if c("model") == "mlp" and not c("hidden"):
    raise _fail("config.hidden", "at least one hidden width for config.model='mlp'", c("hidden"))
  if c("train_per_class") is not None and c("eval_split") in ("validation", "validation_heldout"):
    held = c("val_per_class") + (c("val_heldout_per_class") if c("eval_split") == "validation_heldout" else 0)
    if held >= c("train_per_class"):
      raise ConfigError(f"config.train_per_class: expected more than the {held} items per class held out for "
                        f"config.eval_split={c('eval_split')!r}, got {c('train_per_class')}")
  if kind in ("talr", "deep") and c("batch_per_class") is not None:
    left = c("train_per_class") - (c("val_per_class") if c("eval_split") != "test" else 0) \
        - (c("val_heldout_per_class") if c("eval_split") == "validation_heldout" else 0)
    if c("batch_per_class") > left:
      raise ConfigError(f"config.batch_per_class: expected at most the {left} training items per class of "
                        f"config.eval_split={c('eval_split')!r}, got {c('batch_per_class')}")
  if kind == "baselines" and not set(c("weighted") or ()) <= set(c("methods")):
    raise _fail("config.weighted", f"methods among config.methods={list(c('methods'))} (--config.weighted= for "
                f"none)", c("weighted"))
  if kind in ("baselines", "colgen") and not c("bits"):
    raise _fail("config.bits", "at least one code length", c("bits"))
  if kind == "colgen":
    losses = cghash.LOSSES if c("method") == "cghash" else colgen_inference.RANKING_LOSSES
    _choice(losses)("config.loss", c("loss"))
  if kind == "bit_weights" and not (c("bits") and c("base_codes")) and not c("models"):
    raise ConfigError("config.bits / base_codes / models: expected at least one code to weight, got none")
  if kind == "localrank":
    _check_localrank(config)


def _check_localrank(config: ml_collections.ConfigDict) -> None:
  c = config.get
  if not c("folds") or any(f > len(data.LETOR4_FOLDS) for f in c("folds")):
    raise _fail("config.folds", f"folds in 1..{len(data.LETOR4_FOLDS)}", c("folds"))
  if 1 not in c("cluster_grid"):
    raise _fail("config.cluster_grid", "a list holding 1 (the global ranker is C = 1)", c("cluster_grid"))
  if c("knn_rank_feature") >= c("num_features"):
    raise _fail("config.knn_rank_feature", f"a 0-based column below num_features={c('num_features')}",
                c("knn_rank_feature"))
  if c("lsh_bits") > 62 or any(b > 62 for b in c("lsh_sweep")):
    raise _fail("config.lsh_bits", "at most 62 hyperplanes per table", c("lsh_bits"))
  if any(p > c("num_features") for p in c("fixed_components")):
    raise _fail("config.fixed_components", f"P <= num_features={c('num_features')}", c("fixed_components"))
  if c("fixed_components") and "pca" not in c("similarities"):
    raise _fail("config.fixed_components", "an empty list unless similarities holds 'pca'", c("fixed_components"))


def check_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """Checks every field of ``config`` it knows (choices, ranges, their relations); returns ``config``.

  Raises ConfigError naming the field, what was expected and what came,
  e.g. ``config.model: expected one of ['linear', 'mlp', 'cnn'], got 'vit'``.
  Fields it does not know pass unchecked. One checker serves every launcher:
  a field means the same in each config, and the relations between fields
  follow :func:`run_kind`.

  >>> check_config(ml_collections.ConfigDict({"bits": 0}))
  Traceback (most recent call last):
  ...
  experiments.methods.checks.ConfigError: config.bits: expected an int >= 1, got 0
  """
  try:
    for name, rule in _rules().items():
      if name in config:
        rule(f"config.{name}", config[name])
    _check_relations(config, run_kind(config))
  except ConfigError:
    raise
  except ValueError as e:
    raise ConfigError(str(e)) from None
  return config


# --------------------------------------------------------------------------- memory


class DataShape(NamedTuple):
  """Sizes of a dataset, known without loading it (``known`` False: assumed)."""
  num_items: int
  dim: int
  num_classes: int
  known: bool = True


#: ``(dataset, tfds split)`` -> items, features, classes of the datasets whose sizes are known.
KNOWN_SHAPES = {
    ("mnist_t10k", None): DataShape(10000, 784, 10), ("digits", None): DataShape(1797, 64, 10),
    (tasks.PAIRS, None): DataShape(5000, 1568, 10),
    ("tfds:mnist", "test"): DataShape(10000, 784, 10), ("tfds:mnist", "train"): DataShape(60000, 784, 10),
    ("tfds:fashion_mnist", "test"): DataShape(10000, 784, 10),
    ("tfds:fashion_mnist", "train"): DataShape(60000, 784, 10),
    ("tfds:cifar10", "test"): DataShape(10000, 3072, 10), ("tfds:cifar10", "train"): DataShape(50000, 3072, 10),
}
#: What a dataset of unknown size is assumed to be.
ASSUMED_SHAPE = DataShape(10000, 784, 10, known=False)
#: Bytes of Python, jax and XLA themselves.
RUNTIME_BYTES = 500 * 10 ** 6
#: Peak bytes per query and Hamming bin of the tie-aware evaluation (hashjax.evaluate.evaluate_codes: the
#: histograms and the metrics' float arrays over them), and of the radius metrics of Nair's evaluation;
#: its kNN classification (hashjax.metrics.knn_classify on distances) takes bytes per query, item and bin.
#: Each is peak resident memory on the CPU.
EVAL_BYTES_PER_BIN = {"talr": 480, "baselines": 480, "nair": 32, "deep": 480}
KNN_BYTES_PER_ITEM_BIN = 0.125


def _idx_shape(path: str) -> Tuple[int, ...]:
  with open(path, "rb") as f:
    magic = f.read(2)
  with (gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")) as f:
    head = f.read(4)
    return tuple(int(n) for n in np.frombuffer(f.read(4 * head[3]), ">u4"))


def _npz_shape(path: str, key: str) -> Tuple[int, ...]:
  with zipfile.ZipFile(path) as z, z.open(key + ".npy") as f:
    version = np.lib.format.read_magic(f)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    return tuple(read(f)[0])


def dataset_shape(config: ml_collections.ConfigDict) -> DataShape:
  """Items, features and classes of ``config.dataset`` from a table or the files' headers, loading no features."""
  name = config.get("dataset")
  split = config.get("tfds_split", "test") if isinstance(name, str) and name.startswith("tfds:") else None
  if (name, split) in KNOWN_SHAPES:
    return KNOWN_SHAPES[(name, split)]
  try:
    if name.startswith("idx:"):
      images, labels = name[4:].split(",")
      shape = _idx_shape(images)
      return DataShape(shape[0], int(np.prod(shape[1:])), int(data.read_idx(labels).max()) + 1)
    if name.startswith("npz:"):
      shape = _npz_shape(name[4:], "features")
      with zipfile.ZipFile(name[4:]) as z, z.open("labels.npy") as f:
        labels = np.lib.format.read_array(f, allow_pickle=False)
      return DataShape(shape[0], int(np.prod(shape[1:])), int(labels.max()) + 1)
  except (OSError, ValueError, KeyError, IndexError, AttributeError, zipfile.BadZipFile, EOFError):
    pass  # the loader names what is wrong with the file when the run reads it
  return ASSUMED_SHAPE


class _Term(NamedTuple):
  what: str
  formula: str
  bytes: float
  phase: str  # "always", "train" or "eval"
  fields: Tuple[str, ...]


def _size(n: float) -> str:
  for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
    if n >= scale:
      return f"{n / scale:.{0 if n >= 10 * scale else 1}f} {unit}"
  return f"{n:.0f} B"


def _n(x: int) -> str:
  return f"{int(x):,}"


def _param_count(model: str, dim: int, hidden: Sequence[int], bits: int, *, image_shape: Sequence[int] = (),
                 channels: Sequence[int] = ()) -> int:
  convs = 0
  if model == "cnn":  # a 3x3 kernel and a bias per output channel; each 2x2 pool halves (floors) the sides
    height, width, dim = image_shape
    for out in channels:
      convs, height, width, dim = convs + (9 * dim + 1) * out, height // 2, width // 2, out
    dim *= height * width
  widths = [dim] + (list(hidden) if model in ("mlp", "cnn") else []) + [bits]
  return convs + sum((a + 1) * b for a, b in zip(widths, widths[1:]))


def _sizes(config, shape: DataShape) -> Tuple[int, int, int]:
  """``(queries, database, training items)`` of the config's evaluation split."""
  c, classes = config.get, shape.num_classes
  queries, train = c("queries_per_class") * classes, c("train_per_class") * classes
  split = c("eval_split", "test")
  if split == "test":
    return queries, max(shape.num_items - queries, 1), train
  q = c("val_per_class") * classes
  held = c("val_heldout_per_class") * classes if split == "validation_heldout" else 0
  return q, max(train - q, 1), max(train - q - held, 1)


def _model_terms(config, shape: DataShape, bits: int) -> List[_Term]:
  c = config.get
  params = _param_count(c("model"), shape.dim, c("hidden") or (), bits, image_shape=_image_shape_of(config),
                        channels=c("channels", mappings.DEFAULT_CHANNELS))
  moments = {"adam": 2}.get(c("optimizer"), 1 if c("momentum") else 0)
  copies = 3 + moments
  what = "parameters, gradients, " + (f"{moments} optimizer moment(s), " if moments else "") + "checkpoint copy"
  return [_Term("model", f"{_n(params)} parameters ({c('model')}, {shape.dim} -> {_n(bits)} bits) x 4 B x "
                f"{copies} ({what})", params * 4.0 * copies, "always", ("config.bits", "config.hidden"))]


def _eval_terms(config, shape: DataShape, kind: str, bits: int, queries: int, database: int) -> List[_Term]:
  c = config.get
  per_bin = EVAL_BYTES_PER_BIN[kind]
  fields = ("config.bits", "config.queries_per_class")
  terms = [_Term("evaluation histograms", f"{_n(queries)} queries x {_n(bits + 1)} bins x ~{per_bin} B",
                 float(queries) * (bits + 1) * per_bin, "eval", fields)]
  if kind == "nair":
    terms.append(_Term("kNN classification", f"{_n(queries)} queries x {_n(database)} items x {_n(bits + 1)} "
                       f"bins x {KNN_BYTES_PER_ITEM_BIN} B", KNN_BYTES_PER_ITEM_BIN * queries * database * (bits + 1),
                       "eval", fields))
  if kind != "baselines":
    terms.append(_Term("encoding", f"{_n(min(database, mappings.ENCODE_BLOCK_ROWS))} items x {_n(bits)} "
                       "logits x 5 B", float(min(database, mappings.ENCODE_BLOCK_ROWS)) * bits * 5, "eval",
                       ("config.bits",)))
  projected = [m for m in (c("methods") if kind == "baselines" else c("baselines") or ()) if m in ("lsh", "sh")]
  if projected:
    terms.append(_Term("baseline codes", f"{'/'.join(projected)}: ({_n(shape.dim)} x 4 B x 3 + {_n(database)} "
                       f"items x 8 B) x {_n(bits)} bits", (shape.dim * 12.0 + database * 8.0) * bits, "eval",
                       ("config.bits",)))
  if kind == "nair" or c("affinity", "label") != "label":
    terms.append(_Term("relevance and distances", f"{_n(queries)} queries x {_n(database)} items x 4 B x 3",
                       queries * database * 12.0, "eval", ("config.queries_per_class",)))
  return terms


def _talr_terms(config, shape: DataShape, bits: int, train: int) -> List[_Term]:
  c = config.get
  batch = c("batch_per_class") * shape.num_classes
  if c("setting") == "query_vs_database":
    others, what = c("database_size") or max(train - batch, 1), "database items"
    mapped = batch + others
  else:
    others, what, mapped = batch - 1, "others", batch
  levels = 2 if c("objective") == "ap" else 11
  hidden = sum(c("hidden") or ()) if c("model") == "mlp" else 0
  fields = ("config.bits", "config.batch_per_class") + (("config.database_size",) if what != "others" else ())
  mapped_term = _Term("mapped items",
                      f"{_n(mapped)} items x ({_n(shape.dim)} x 2 + {_n(hidden)} x 3 + {_n(bits)} x 3) x 4 B",
                      4.0 * mapped * (2 * shape.dim + 3 * hidden + 3 * bits), "train", fields[:2])
  if c("objective") == "tie_unaware_ap":  # Smooth-AP: sigmoids of every pair of each query's others
    return [_Term("sigmoid ranks", f"batch {_n(batch)} x {_n(others)} x {_n(others)} others x 4 B x 3 "
                  "(sigmoids, their gradient)", 12.0 * batch * others * others, "train", fields), mapped_term]
  return [
      _Term("soft histograms", f"batch {_n(batch)} x {_n(others)} {what} x {_n(bits + 1)} bins x 4 B x 2 "
            "(kernel and its gradient)", 8.0 * batch * others * (bits + 1), "train", fields),
      _Term("relaxed metric", f"batch {_n(batch)} x {_n(bits + 1)} bins x {levels} levels x 4 B x 12",
            48.0 * batch * (bits + 1) * levels, "train", fields[:2]),
      mapped_term,
  ]


def _nair_terms(config, shape: DataShape, bits: int, train: int) -> List[_Term]:
  c = config.get
  q, m, pool = c("queries_per_batch"), c("docs_per_query"), c("doc_pool")
  mapped = train if pool is None else q + pool
  hidden = sum(c("hidden") or ()) if c("model") == "mlp" else 0
  fields = ("config.bits", "config.queries_per_batch", "config.docs_per_query")
  return [
      _Term("pair codes", f"{_n(q)} queries x {_n(m)} documents x {_n(bits)} bits x 4 B x 4", 16.0 * q * m * bits,
            "train", fields),
      _Term("pair tensors", f"{_n(q)} x {_n(m)} x {_n(m)} pairs x 4 B x 8", 32.0 * q * m * m, "train", fields[1:]),
      _Term("mapped items", f"{_n(mapped)} items x ({_n(shape.dim)} x 2 + {_n(hidden)} x 3 + {_n(bits)} x 2) x 4 B",
            4.0 * mapped * (2 * shape.dim + 3 * hidden + 2 * bits), "train",
            ("config.bits",) + (("config.doc_pool",) if pool else ())),
  ]


def _deep_terms(config, shape: DataShape, bits: int, train: int) -> List[_Term]:
  del train  # each minibatch item against the others
  c = config.get
  batch = c("batch_per_class") * shape.num_classes
  hidden = sum(c("hidden") or ()) if c("model") == "mlp" else 0
  fields = ("config.bits", "config.batch_per_class")
  terms = [
      _Term("pair terms", f"batch {_n(batch)} x {_n(batch)} pairs x 4 B x 8", 32.0 * batch * batch, "train",
            fields[1:]),
      _Term("mapped items", f"{_n(batch)} items x ({_n(shape.dim)} x 2 + {_n(hidden)} x 3 + {_n(bits)} x 3) x 4 B",
            4.0 * batch * (2 * shape.dim + 3 * hidden + 3 * bits), "train", fields),
  ]
  if c("objective") == "dtsh":  # every (anchor, similar, dissimilar) triplet of the minibatch
    terms.append(_Term("triplets", f"batch {_n(batch)} x {_n(batch - 1)} x {_n(batch - 1)} x 4 B x 4",
                       16.0 * batch * (batch - 1) ** 2, "train", fields[1:]))
  return terms


def _terms(config: ml_collections.ConfigDict, shape: DataShape) -> List[_Term]:
  kind = run_kind(config)
  terms = [_Term("runtime", "Python, jax and XLA", RUNTIME_BYTES, "always", ()),
           _Term("data", f"{_n(shape.num_items)} items x {_n(shape.dim)} features x 4 B x 3",
                 12.0 * shape.num_items * shape.dim, "always", ("config.dataset",))]
  if kind not in ("talr", "nair", "deep", "baselines"):  # the others: sizes not modelled
    return terms
  queries, database, train = _sizes(config, shape)
  if kind == "baselines":
    return terms + _eval_terms(config, shape, kind, max(config.bits), queries, database)
  bits = config.bits
  terms += _model_terms(config, shape, bits)
  terms += {"talr": _talr_terms, "nair": _nair_terms, "deep": _deep_terms}[kind](config, shape, bits, train)
  return terms + _eval_terms(config, shape, kind, bits, queries, database)


def _total(terms: Sequence[_Term]) -> float:
  return sum(t.bytes for t in terms)


def estimate_memory(config: ml_collections.ConfigDict, *, shape: Optional[DataShape] = None) -> Tuple[int, List[str]]:
  """About how many bytes a run of ``config`` needs at its peak, and the breakdown, one line per term.

  What scales with the code length ``b``: TALR's soft histograms (``[B, N,
  b + 1]`` floats for a batch of ``B`` queries against ``N`` items, and their
  gradient), Nair's document codes (``[Q, M, b]``) and ``[Q, M, M]`` pairs,
  the model (parameters, gradients, optimizer moments, a checkpoint copy),
  and the evaluation (histograms of ``Q`` queries over ``b + 1`` bins; for
  Nair's kNN error, a cost in queries x items x bins; the logits of the
  encoded items; the baselines' projections). Dataset sizes come from
  :func:`dataset_shape`. The peak is
  the sum: what stays (runtime, data, model), a training step and an
  evaluation, which overlap in time (jax dispatches the training step
  asynchronously while the periodic evaluation runs). The per-bin costs are
  peak resident memory on the CPU.
  """
  check_config(config)
  shape = shape or dataset_shape(config)
  terms = _terms(config, shape)
  lines = [f"{t.what} ({t.phase}): {t.formula} = {_size(t.bytes)}" for t in terms]
  if not shape.known:
    lines.append(f"dataset {config.get('dataset')!r}: sizes not known before loading; assumed "
                 f"{_n(shape.num_items)} items of {_n(shape.dim)} features in {shape.num_classes} classes")
  total = _total(terms)
  lines.append(f"total: about {_size(total)} (the sum: a training step and an evaluation can overlap)")
  return int(total), lines


def available_memory() -> int:
  """Bytes the system can give a new process: ``MemAvailable`` of /proc/meminfo, else free physical pages."""
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  try:
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
  except (ValueError, OSError, AttributeError):
    return 1 << 62  # unknown: refuse nothing


def check_memory(config: ml_collections.ConfigDict, *, available: Optional[int] = None,
                 shape: Optional[DataShape] = None) -> int:
  """Refuses (ConfigError, one line with the estimate) a run that needs more than ``available`` bytes.

  ``available`` defaults to :func:`available_memory`. Returns the estimate.
  """
  shape = shape or dataset_shape(config)
  total, _ = estimate_memory(config, shape=shape)
  available = available_memory() if available is None else available
  if total <= available:
    return total
  terms = sorted(_terms(config, shape), key=lambda t: -t.bytes)
  fields = sorted(terms[0].fields or ("config.bits",), key=lambda f: f != "config.bits")
  head = fields[0]
  parts = "; ".join(f"{t.what}: {t.formula} = {_size(t.bytes)}" for t in terms[:3])
  raise ConfigError(f"{head}={format_value(config.get(head[len('config.'):]))}: this run needs about "
                    f"{_size(total)} ({parts}), more than the {_size(available)} available; "
                    f"lower {' or '.join(fields)}")


def check_baselines_fit(config: ml_collections.ConfigDict, *, shape: Optional[DataShape] = None) -> None:
  """PCA and ITQ need ``bits <= dim`` (one bit per principal direction), the kernel baselines at least as many
  training items as their anchors (``hashjax.baselines.MIN_TRAIN_ITEMS``): checked where the sizes are known."""
  shape = shape or dataset_shape(config)
  kind = run_kind(config)
  if not shape.known or kind in (None, "localrank"):
    return
  bits = config.bits if isinstance(config.bits, (tuple, list)) else (config.bits,)
  field = {"baselines": "config.methods", "bit_weights": "config.base_codes"}.get(kind, "config.baselines")
  per_class = config.get("train_per_class")
  train = (per_class * shape.num_classes if per_class
           else shape.num_items - config.get("queries_per_class", 0) * shape.num_classes)
  for m in (config.get(field[len("config."):]) or ()):
    if m in ("pca", "itq", "iso", "splh") and max(bits, default=0) > shape.dim:
      raise ConfigError(f"config.bits={format_value(config.bits)}: {m} needs at most {shape.dim} bits on "
                        f"{config.dataset} ({shape.dim} features); lower config.bits or drop {m} from {field}")
    if train < baselines.MIN_TRAIN_ITEMS.get(m, 0):
      raise ConfigError(f"{field}: {m} draws {baselines.MIN_TRAIN_ITEMS[m]} anchors from the training items, but "
                        f"config.train_per_class={per_class} gives {train}; raise it or drop {m}")


def _image_shape_of(config: ml_collections.ConfigDict) -> Tuple[int, ...]:
  """A CNN's ``config.image_shape`` (:data:`hashjax.mappings.DEFAULT_IMAGE_SHAPE` where the config has none)."""
  return tuple(config.get("image_shape", mappings.DEFAULT_IMAGE_SHAPE))


def check_image_shape(config: ml_collections.ConfigDict, *, shape: Optional[DataShape] = None) -> None:
  """A CNN's ``config.image_shape`` must multiply to the dataset's feature width: checked where it is known."""
  shape = shape or dataset_shape(config)
  if config.get("model") != "cnn" or not shape.known:
    return
  image = _image_shape_of(config)
  if int(np.prod(image)) != shape.dim:
    raise ConfigError(f"config.image_shape={format_value(image)}: expected a shape whose product is the "
                      f"{shape.dim} features of {config.dataset}, got product {int(np.prod(image))}")


def check_run(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """What every run checks before it loads data: :func:`check_config`, :func:`check_image_shape`,
  :func:`check_memory`, then :func:`check_baselines_fit`; returns ``config``."""
  shape = dataset_shape(check_config(config))
  check_image_shape(config, shape=shape)
  check_memory(config, shape=shape)
  check_baselines_fit(config, shape=shape)
  return config
