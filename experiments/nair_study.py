r"""Nair et al. (2012) error tables: RankNet / LambdaRank against LSH, ITQ, spectral hashing and exact L2 kNN.

  python -m experiments.nair_study                                   # everything below (~1.5 h, 2 cores)
  python -m experiments.nair_study --parts=tables --datasets=mnist_t10k
  python -m experiments.nair_study --parts=search                    # LambdaRank vs RankNet, validation
  python -m experiments.nair_study --parts=mlp                       # MLP mapping, 32 bits
  python -m experiments.nair_study --parts=metric --datasets=mnist_t10k  # NCA and LMNN (not in the default)
  python -m experiments.nair_study --parts=hierarchy                 # eq. 10 (not in the default, ~35 min)
  python -m experiments.nair_study --runlocal                        # a quick check (digits, 2 bit lengths)

Parts (``--parts``):

* ``tables``: for every dataset of ``--datasets``, code length of ``--bits``,
  method of ``--methods`` and seed of ``--seeds``, one run of
  ``configs/lambdarank_knn.py:method=<method>,bits=<bits>`` (linear hash; on
  digits with ``fixed_step``, as the 32-bit recipe was chosen on MNIST-10k) on the test
  queries; LSH, ITQ and spectral hashing (SH, the paper's hashing baseline) at ``--bits`` and
  ``--baseline_bits`` (e.g. 128) and
  exact L2 3-NN on the same splits. Prints the kNN error (relative threshold
  3) per seed and as mean (sd over seeds), and the bit compression of Sec.
  5.4: the bits at which LambdaRank's mean error reaches the best mean error
  of LSH / ITQ / SH / RankNet over their lengths (interpolated linearly between
  lengths, as the paper does), as the ratio of the other method's bits at its
  best to LambdaRank's bits.
* ``search``: LambdaRank configurations (score function, thresholds, swap
  restriction, step size: :data:`SEARCH`) and RankNet step sizes on the
  *validation split* (queries carved from the training set), over ``--seeds``.
* ``mlp``: the MLP mapping (Nair Sec. 6) with LambdaRank and RankNet at 32
  bits (``configs/lambdarank_knn.py:model=mlp``, options chosen on the
  validation split), test queries, with the same baselines.
* ``metric``: the metric-learning rows of Nair et al.'s Table 4, for every dataset of ``--datasets`` and seed
  of ``--seeds`` on the ``tables`` split: exact 3-NN (the ``exact L2`` row's code,
  :func:`experiments.methods.nair.exact_l2_row`) with Euclidean distance on the raw features, after PCA to
  :data:`METRIC` ``["pca_components"]`` dimensions (fitted on the training items), and after NCA and LMNN
  (:mod:`hashjax.metric_learning`, fitted on the PCA features of the training items; options in
  :data:`METRIC`), with the fit seconds. Run only when named: ``--parts=metric``.
* ``hierarchy``: Nair's hierarchical classification score (eq. 10) on MNIST-10k's test split, 32 bits, for
  every seed of ``--seeds``: the runs of :data:`HIERARCHY_RUNS` (LambdaRank trained on eq. 10, on the flat
  count score eq. 7, RankNet; LSH, ITQ, SH and exact L2 3-NN from the first run's rows), each row's kNN
  error, severity of mistakes in the class hierarchy (mean tree distance of predicted and true class, over
  all queries and the wrong ones) and mean eq.-10 score, as mean (sd over seeds). The hierarchy is the
  average-linkage dendrogram of the training items' class means
  (:func:`experiments.methods.nair.class_tree`). Run only when named: ``--parts=hierarchy``.

Datasets: ``mnist_t10k`` (1,000 queries, 9,000 database, 5,000 of it for
training) and ``digits`` (scikit-learn's 1,797 8x8 digits: 30 queries per
class, the other 1,497 as database, 100 per class of it for training;
validation 20 per class of the training set), see :data:`PROTOCOLS`.

Every run writes ``<workdir>/<part>/<dataset>/<run name>/results.json`` and is
skipped when that file exists, so an interrupted study resumes where it
stopped; the summary goes to ``<workdir>/study.json`` (atomic writes; parts run by
separate commands are merged into it).

Several processes (hosts) run the study together as every launcher runs a config: each runs the same
command with ``--num_processes``, ``--process_id`` and ``--coordinator_address`` (None: the ``JAX_*``
environment variables, else one process), which are checked before anything runs and joined once, before
the first run (:func:`experiments.fitting.start_processes`). Every run's config records these settings,
and each run trains data-parallel over the devices of every process and evaluates as
``python -m experiments.train`` does; each process computes the baselines and the ``metric`` rows itself, on
its own devices, and prints every table. Process 0 alone writes: the runs' ``results.json`` and models,
the baselines' and ``metric`` rows' files and ``study.json``. Whether a stored file is reused is decided by
process 0 and broadcast (:func:`stored`), so every process skips or runs the same runs, whatever the timing
of the others' writes; a reused file is then read by every process from the shared ``--workdir`` (the
runs' checkpoints need one workdir that every process sees, as for ``experiments.train``). Two processes
on one machine, one CPU device each (``tests/test_nair_study_processes.py`` runs these lines)::

  A="--runlocal --parts=tables --methods=lambdarank --workdir=runs/study_two"
  P="--num_processes=2 --coordinator_address=localhost:12355"
  python -m experiments.nair_study $A $P --process_id=0 & python -m experiments.nair_study $A $P --process_id=1

The devices of all processes together must divide every run's ``queries_per_batch`` (``--runlocal``: 50, so
2 devices, not 4), checked once the processes have joined, before any data loads.
"""

from __future__ import annotations

import copy
import json
import os
import time
from typing import Dict, List, Optional, Sequence

from absl import app, flags, logging
import jax
from jax.experimental import multihost_utils
import ml_collections
import numpy as np

from configs import lambdarank_knn
from experiments import cli, fitting, methods, tasks
from experiments.methods import checks, nair
from hashjax import _checks, io

_PARTS = flags.DEFINE_list("parts", ["tables", "mlp", "search"],
                           "Which parts to run: tables, mlp, search, metric, hierarchy.")
_DATASETS = flags.DEFINE_list("datasets", ["mnist_t10k", "digits"], "Datasets of the tables.")
_BITS = flags.DEFINE_list("bits", ["8", "16", "32", "64"], "Code lengths of the learned codes.")
_BASELINE_BITS = flags.DEFINE_list("baseline_bits", ["128"], "Extra code lengths for the baselines only.")
_METHODS = flags.DEFINE_list("methods", ["lambdarank", "ranknet"], "Learned methods.")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds (split, initialisation, batches).")
_SEARCH = flags.DEFINE_list("search", None, "Names of SEARCH to run (default: all), e.g. for more seeds.")
_RUNLOCAL = flags.DEFINE_bool("runlocal", False, "Quick check: the runlocal config, digits, 8/16 bits, 1 seed.")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Processes running the study together "
                                      "(default: JAX_NUM_PROCESSES, else one).")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process, 0 .. num_processes - 1; process 0 writes "
                                   "(default: JAX_PROCESS_ID).")
_COORDINATOR_ADDRESS = flags.DEFINE_string("coordinator_address", None, "'host:port' of process 0 "
                                           "(default: JAX_COORDINATOR_ADDRESS).")

#: Protocol sizes per dataset (per class): queries, training items (from the database), validation.
PROTOCOLS = {
    "mnist_t10k": {"queries_per_class": 100, "train_per_class": 500, "val_per_class": 100},
    "digits": {"queries_per_class": 30, "train_per_class": 100, "val_per_class": 20},
}

#: The ``search`` part: named configurations on the validation split (``method``, ``bits`` and
#: ``score`` pick the argument of ``configs/lambdarank_knn.py:fixed_step``, the other keys override
#: its fields; 32 bits unless an entry sets ``bits``; the kNN error is always
#: evaluated with k = 3). Step sizes scale with the total |Delta S| weight per query: the count
#: scores put weight 1 on 22-31% of the pairs at the start, tie-aware AP about 0.01-0.05 on every
#: pair, the majority vote (eq. 6, ties scored 1/m) 0, 1/m or 1 on the few pairs whose swap changes
#: the vote. Every score's swap matrices come from its exact closed form
#: (``experiments.methods.nair.deltas_fn``): the majority vote costs about as much as the count score.
SEARCH = {
    "ranknet lr 20": {"method": "ranknet", "learning_rate": 20.0},
    "ranknet lr 50 (fixed-step default)": {"method": "ranknet", "learning_rate": 50.0},
    "ranknet lr 100": {"method": "ranknet", "learning_rate": 100.0},
    "ranknet lr 20 2000 steps": {"method": "ranknet", "learning_rate": 20.0, "num_steps": 2000},
    "ranknet lr 10 2000 steps": {"method": "ranknet", "learning_rate": 10.0, "num_steps": 2000},
    "ranknet lr 10 momentum 0.9": {"method": "ranknet", "learning_rate": 10.0, "momentum": 0.9},
    "ranknet lr 50 2000 steps": {"method": "ranknet", "learning_rate": 50.0, "num_steps": 2000},
    "ranknet lr 50 200 docs": {"method": "ranknet", "learning_rate": 50.0, "docs_per_query": 200},
    "ranknet lr 50 standardized": {"method": "ranknet", "learning_rate": 50.0, "standardize": True},
    "lambdarank knn_count lr 0.03 (fixed-step default)": {"method": "lambdarank"},
    "lambdarank knn_count all swaps lr 0.01": {"method": "lambdarank", "swap_bins": None, "top_bins": None,
                                               "learning_rate": 0.01},
    "lambdarank knn_count no top-k boundary": {"method": "lambdarank", "top_bins": None},
    "lambdarank ap lr 0.3": {"method": "lambdarank", "score": "ap", "learning_rate": 0.3},
    "lambdarank knn_majority lr 0.03": {"method": "lambdarank", "score": "knn_majority", "learning_rate": 0.03},
    "lambdarank knn_majority lr 0.1": {"method": "lambdarank", "score": "knn_majority", "learning_rate": 0.1},
    "lambdarank knn_majority lr 0.3": {"method": "lambdarank", "score": "knn_majority", "learning_rate": 0.3},
    "lambdarank knn_majority lr 1": {"method": "lambdarank", "score": "knn_majority", "learning_rate": 1.0},
    # 64 bits: steps 0.1 to 1 (configs/lambdarank_knn.py:bits=64 takes 1; 0.1 is the edge of the grid 0.003-0.1).
    "64 bits lambdarank knn_count lr 0.1": {"method": "lambdarank", "bits": 64, "learning_rate": 0.1},
    "64 bits lambdarank knn_count lr 0.3": {"method": "lambdarank", "bits": 64, "learning_rate": 0.3},
    "64 bits lambdarank knn_count lr 1 (default)": {"method": "lambdarank", "bits": 64, "learning_rate": 1.0},
    "64 bits lambdarank knn_count lr 3": {"method": "lambdarank", "bits": 64, "learning_rate": 3.0},
    "64 bits lambdarank ap lr 0.3": {"method": "lambdarank", "bits": 64, "score": "ap", "learning_rate": 0.3},
    "64 bits lambdarank ap lr 1": {"method": "lambdarank", "bits": 64, "score": "ap", "learning_rate": 1.0},
    "64 bits ranknet lr 20": {"method": "ranknet", "bits": 64, "learning_rate": 20.0},
    "64 bits ranknet lr 50 (default)": {"method": "ranknet", "bits": 64, "learning_rate": 50.0},
}


#: The ``metric`` part: PCA dimensions before the metric learners (the LMNN paper also reduces MNIST by PCA),
#: NCA's L-BFGS iterations at most, LMNN's gradient steps at most (it stops earlier once converged, see
#: :func:`hashjax.metric_learning.fit_lmnn`). Both learners keep all PCA dimensions; LMNN takes k = config.k
#: target neighbours and its defaults otherwise.
METRIC = {"pca_components": 50, "nca_iterations": 100, "lmnn_iterations": 1000}
#: The ``metric`` part's rows: key, printed name.
METRIC_ROWS = (("l2", "exact L2 3-NN, raw"), ("pca", "L2 3-NN, PCA"), ("nca", "NCA 3-NN"), ("lmnn", "LMNN 3-NN"))


#: The ``hierarchy`` part's runs: name -> (argument of ``configs/lambdarank_knn.py``, field overrides). The same
#: as ``python -m experiments.train --config=configs/lambdarank_knn.py:<argument> --config.<field>=<value>``
#: (``--config.seed=S`` beside): the first also scores the baselines, the others only their learned code.
HIERARCHY_RUNS = {
    "lambdarank-hierarchical": ("score=hierarchical", {"baselines": ("lsh", "itq", "sh")}),
    "lambdarank": ("", {"hierarchy": "average", "exact_l2": False, "baselines": ()}),
    "ranknet": ("method=ranknet", {"hierarchy": "average", "exact_l2": False, "baselines": ()}),
}
#: The ``hierarchy`` part's columns: result key, printed title, scale (100: percent).
HIERARCHY_KEYS = (("knn_error", "kNN err %", 100), ("tree_distance", "tree d", 1),
                  ("tree_distance_wrong", "d | wrong", 1), ("hierarchical_score", "S_Hier", 1),
                  ("neighbour_similarity", "mean F", 1))


#: Keys of a :data:`SEARCH` entry that go through the config's argument (they choose other values).
ARG_KEYS = ("method", "bits", "score")


def base_config(dataset: str, *, method: str = "lambdarank", bits: Optional[int] = None, model: str = "linear",
                score: str = "knn_count", fixed_step: bool = False,
                runlocal: bool = False) -> ml_collections.ConfigDict:
  """``configs/lambdarank_knn.py`` on ``dataset``'s protocol, no per-run baselines (the study runs them once).

  The argument names ``method``, ``bits`` (default: the config's), ``model``
  and ``score``; ``fixed_step`` (Nair's fixed step for 1,000 steps on the
  original images) also on every dataset but MNIST-10k, where the 32-bit
  recipe was chosen; ``runlocal``: the config's quick digits protocol.
  """
  arg = [f"method={method}", f"model={model}", f"score={score}"] + ([f"bits={bits}"] if bits else [])
  arg += (["fixed_step"] if fixed_step or dataset != "mnist_t10k" else []) + (["runlocal"] if runlocal else [])
  config = lambdarank_knn.get_config(",".join(arg))
  config.dataset = dataset
  if not runlocal:
    config.update(PROTOCOLS[dataset])
  config.baselines = ()
  config.exact_l2 = False
  config.eval_every = config.checkpoint_every = None  # one evaluation and checkpoint, at the end
  return config


def search_config(name: str, seed: int, *, runlocal: bool = False) -> ml_collections.ConfigDict:
  """The config of :data:`SEARCH` entry ``name`` at ``seed``, on the validation split, with Nair's fixed step."""
  overrides = SEARCH[name]
  config = base_config("digits" if runlocal else "mnist_t10k", fixed_step=True, runlocal=runlocal,
                       **{k: v for k, v in overrides.items() if k in ARG_KEYS})
  config.update({"seed": seed, "eval_split": "validation",
                 **{k: v for k, v in overrides.items() if k not in ARG_KEYS}})
  return config


def run(config: ml_collections.ConfigDict, workdir: str, *, processes: Optional[Dict] = None) -> Dict:
  """One training run, or its stored results when ``<workdir>/results.json`` exists (:func:`stored`).

  ``processes`` (:func:`process_settings`): the process settings the run's config records; the processes are
  joined before (:func:`start_processes`), and the run trains over the devices of all of them.
  """
  path = os.path.join(workdir, "results.json")
  if stored(path):
    return _read_json(path)
  if processes:
    config = copy.deepcopy(config)
    config.update(processes)
  start = time.perf_counter()
  results = methods.train_and_evaluate(config, workdir)
  logging.info("%s: kNN error %.4f, %.1f s", workdir, results["rows"][0]["knn_error"],
               time.perf_counter() - start)
  return results


def _read_json(path: str) -> Dict:
  with open(path) as f:
    return json.load(f)


def stored(path: str) -> bool:
  """Whether ``path`` exists as process 0 sees it: the same answer on every process of the study
  (:func:`jax.experimental.multihost_utils.broadcast_one_to_all`), so that all of them reuse or run the same
  work; one process: :func:`os.path.exists`."""
  here = os.path.exists(path)
  if jax.process_count() == 1:
    return here
  return bool(multihost_utils.broadcast_one_to_all(np.int32(here)))


def _store(path: str, obj: Dict) -> Dict:
  """``obj`` as read back from JSON; process 0 (of several) writes it to ``path`` (atomically)."""
  if jax.process_index() == 0:
    io.atomic_write_json(path, obj)
  return json.loads(json.dumps(obj, sort_keys=True))


def baseline_rows(config: ml_collections.ConfigDict, bits: Sequence[int], workdir: str) -> List[Dict]:
  """LSH, ITQ and SH at every length and exact L2 ``k``-NN: kNN error on ``config``'s split.

  ITQ is left out at lengths above the input dimension (digits: 64), where it is undefined.

  Stored per (seed, length) under ``workdir`` and reused, like the runs (:func:`stored`); of several processes,
  each computes the rows on its own devices and process 0 writes them.
  """
  task = None
  rows = []
  for b in list(bits) + ["exact"]:
    path = os.path.join(workdir, f"s{config.seed}_b{b}.json")
    if not stored(path):
      task = task or tasks.make_task(config)
      if b == "exact":
        new = [nair.exact_l2_row(config, task)]
      else:
        c = ml_collections.ConfigDict(config.to_dict())
        c.bits = b
        new = []
        for method in ("lsh", "itq", "sh"):
          if method == "itq" and b > task.features.shape[1]:  # ITQ needs b <= the input dimension
            continue
          q, db = fitting.baseline_words(method, task.features, task.train, task.query, task.database,
                                        num_bits=b, seed=config.seed, labels=task.labels)
          new.append({"method": method, "bits": b, **nair.evaluate(c, task, q, db)})
      rows.extend(_store(path, {"rows": new})["rows"])
    else:
      rows.extend(_read_json(path)["rows"])
  return rows


def mean_sd(values: Sequence[float]) -> Dict:
  """Mean and sample standard deviation (``ddof=1``; 0 for one value)."""
  v = np.asarray(values, np.float64)
  return {"mean": float(v.mean()), "sd": float(v.std(ddof=1)) if v.size > 1 else 0.0, "n": int(v.size)}


def compression(errors: Dict[str, Dict[int, float]], *, learner: str = "lambdarank") -> Dict[str, Dict]:
  """Sec. 5.4: bits ``learner`` needs to match each other method's best mean error, as a ratio.

  ``errors[method][bits]`` = mean kNN error. For every other method, its
  best error over its lengths (the shortest length on ties) and the bits at
  which ``learner`` reaches it, interpolated linearly in bits between the
  learner's lengths as the paper does (its first length when that is already
  as good; ``None`` when no length is); ``ratio`` = the other's bits at its
  best / the learner's bits.

  >>> compression({"lambdarank": {8: 0.3, 16: 0.1}, "lsh": {16: 0.4, 64: 0.2}})["lsh"]
  {'best_error': 0.2, 'best_bits': 64, 'learner_bits': 12.0, 'ratio': 5.333333333333333}
  """
  out = {}
  mine = sorted(errors[learner].items())
  for method, errs in errors.items():
    if method == learner or not errs:
      continue
    best_bits = min(errs, key=lambda b: (errs[b], b))
    best = errs[best_bits]
    bits = None
    if mine[0][1] <= best:
      bits = float(mine[0][0])
    for (b1, e1), (b2, e2) in zip(mine, mine[1:]):
      if bits is None and e1 > best >= e2:
        bits = b1 + (b2 - b1) * (e1 - best) / (e1 - e2)
    out[method] = {"best_error": best, "best_bits": best_bits, "learner_bits": bits,
                   "ratio": best_bits / bits if bits else None}
  return out


def _pct(x: Optional[float]) -> str:
  return "-" if x is None else f"{100 * x:.1f}%"


def _ms(stats: Dict) -> str:
  return f"{100 * stats['mean']:.1f}% ({100 * stats['sd']:.1f})"


def tables(datasets, bits, baseline_bits, learners, seeds, workdir, *, runlocal=False, model="linear",
           part="tables", processes: Optional[Dict] = None) -> Dict:
  """The ``tables`` (and ``mlp``) part: runs, baselines, printed tables; returns the summary. ``processes``:
  the process settings of every run (:func:`run`)."""
  summary = {}
  for dataset in datasets:
    per_seed: Dict[str, Dict[int, Dict[int, float]]] = {}  # method -> bits -> seed -> error
    times: Dict[str, List[float]] = {}
    for seed in seeds:
      for b in bits:
        for method in learners:
          config = base_config(dataset, method=method, bits=b, model=model, runlocal=runlocal)
          config.seed = seed
          name = method + ("" if config.model == "linear" else f"-{config.model}")
          res = run(config, os.path.join(workdir, part, dataset, f"{name}_b{b}_s{seed}"), processes=processes)
          per_seed.setdefault(name, {}).setdefault(b, {})[seed] = res["rows"][0]["knn_error"]
          times.setdefault(f"{name}_b{b}", []).append(res["summary"]["train_time"])
      config = base_config(dataset, runlocal=runlocal)
      config.seed = seed
      for r in baseline_rows(config, sorted(set(bits) | set(baseline_bits)),
                             os.path.join(workdir, "baselines", dataset)):
        b = r["bits"] if r["bits"] != "-" else 0
        per_seed.setdefault(r["method"], {}).setdefault(b, {})[seed] = r["knn_error"]
    stats = {m: {b: mean_sd(list(s.values())) for b, s in sorted(bb.items())} for m, bb in per_seed.items()}
    print(f"\n{part}: {dataset}, kNN error (relative threshold 3), test queries, seeds {list(seeds)}")
    lengths = sorted({b for bb in per_seed.values() for b in bb if b})
    print(f"{'method':<16}" + "".join(f"{b:>16}" for b in lengths) + f"{'exact':>16}")
    for m, bb in stats.items():
      cells = [_ms(bb[b]) if b in bb else "-" for b in lengths] + [_ms(bb[0]) if 0 in bb else ""]
      print(f"{m:<16}" + "".join(f"{c:>16}" for c in cells))
    for seed in seeds:
      print(f"  seed {seed}: " + "; ".join(
          f"{m} " + " / ".join(_pct(bb[b].get(seed)) for b in sorted(bb)) for m, bb in per_seed.items()))
    for key, t in times.items():
      print(f"  train time {key}: {np.mean(t):.1f} s (mean of {len(t)})")
    means = {m: {b: s["mean"] for b, s in bb.items() if b} for m, bb in stats.items()
             if m.startswith(("lambdarank", "ranknet", "lsh", "itq", "sh"))}
    comp = compression(means) if "lambdarank" in means else {}
    for m, c in comp.items():
      print(f"  compression vs {m}: its best {_pct(c['best_error'])} at {c['best_bits']} bits; LambdaRank "
            + (f"matches it at {c['learner_bits']:.1f} bits (interpolated): ratio {c['ratio']:.2f}" if c["ratio"]
               else "does not reach it at the lengths run"))
    summary[dataset] = {"per_seed": {m: {str(b): s for b, s in bb.items()} for m, bb in per_seed.items()},
                        "stats": {m: {str(b): s for b, s in bb.items()} for m, bb in stats.items()},
                        "compression": comp, "train_time": {k: float(np.mean(t)) for k, t in times.items()}}
  return summary


def search(seeds, workdir, *, names=None, runlocal=False, processes: Optional[Dict] = None) -> Dict:
  """The ``search`` part: the :data:`SEARCH` configurations (``names``, default all) on the validation split;
  ``processes``: the process settings of every run (:func:`run`)."""
  out = {}
  print(f"\nsearch: {'digits (runlocal)' if runlocal else 'MNIST-10k'} validation split, kNN error, "
        f"seeds {list(seeds)}")
  for name in names or SEARCH:
    if name not in SEARCH:
      raise app.UsageError(f"--search: expected names of nair_study.SEARCH {list(SEARCH)}, got {name!r}")
    overrides = SEARCH[name]
    errs, active, times = [], [], []
    for seed in seeds:
      config = search_config(name, seed, runlocal=runlocal)
      slug = "_".join(f"{k}={v}" for k, v in overrides.items())
      res = run(config, os.path.join(workdir, "search", f"{slug}_s{seed}"), processes=processes)
      errs.append(res["rows"][0]["knn_error"])
      times.append(res["summary"]["train_time"])
      # LambdaRank: the fraction of preference pairs with a non-zero |Delta S| weight, over the logs.
      active += [h["active_fraction"] for h in res["history"] if h["kind"] == "train" and "active_fraction" in h]
    out[name] = {"errors": errs, **mean_sd(errs), "train_time": times,
                 "active_fraction": float(np.mean(active)) if active else None}
    print(f"  {name:<44}{_ms(out[name]):>16}   " + " / ".join(_pct(e) for e in errs)
          + (f"   active pairs {100 * out[name]['active_fraction']:.0f}%" if active else "")
          + "   train " + " / ".join(f"{t:.0f}" for t in times) + " s", flush=True)
  return out


def hierarchy_config(name: str, seed: int, *, runlocal: bool = False) -> ml_collections.ConfigDict:
  """The config of :data:`HIERARCHY_RUNS` entry ``name`` at ``seed`` (``runlocal``: on digits, seconds)."""
  arg, overrides = HIERARCHY_RUNS[name]
  config = lambdarank_knn.get_config(",".join(a for a in (arg, "runlocal" if runlocal else "") if a))
  config.update({"seed": seed, **overrides})
  return config


def _num(x: Optional[float], scale: int) -> str:
  """A ``hierarchy`` cell: percent with one decimal (``scale`` 100), else four decimals; ``-`` for None."""
  return "-" if x is None else f"{scale * x:.{1 if scale == 100 else 4}f}"


def hierarchy(seeds, workdir, *, runlocal=False, processes: Optional[Dict] = None) -> Dict:
  """The ``hierarchy`` part: the :data:`HIERARCHY_RUNS` at every seed, run once into
  ``<workdir>/hierarchy/<name>_s<seed>`` and read back from there; prints each row's :data:`HIERARCHY_KEYS` as
  mean (sd) over the seeds, then per seed. ``processes``: the process settings of every run (:func:`run`)."""
  per_seed: Dict[str, Dict[str, List]] = {}  # row -> key -> value per seed
  times: Dict[str, List[float]] = {}
  for seed in seeds:
    for name in HIERARCHY_RUNS:
      config = hierarchy_config(name, seed, runlocal=runlocal)
      res = run(config, os.path.join(workdir, "hierarchy", f"{name}_s{seed}"), processes=processes)
      times.setdefault(name, []).append(res["summary"]["train_time"])
      for i, row in enumerate(res["rows"]):
        values = per_seed.setdefault(name if i == 0 else row["method"], {})
        for key, _, _ in HIERARCHY_KEYS:
          values.setdefault(key, []).append(row.get(key))
  stats = {m: {k: mean_sd(v) if None not in v else None for k, v in kv.items()} for m, kv in per_seed.items()}
  print(f"\nhierarchy: {'digits (runlocal)' if runlocal else 'MNIST-10k'}, {config.bits} bits, test queries, "
        f"mean (sd) over seeds {list(seeds)}")
  print(f"{'method':<26}" + "".join(f"{title:>20}" for _, title, _ in HIERARCHY_KEYS))
  for m, st in stats.items():
    cells = ["-" if st[k] is None else f"{_num(st[k]['mean'], scale)} ({_num(st[k]['sd'], scale)})"
             for k, _, scale in HIERARCHY_KEYS]
    print(f"{m:<26}" + "".join(f"{c:>20}" for c in cells))
  for i, seed in enumerate(seeds):
    print(f"  seed {seed}: " + "; ".join(
        f"{m} " + " / ".join(_num(kv[k][i], scale) for k, _, scale in HIERARCHY_KEYS) for m, kv in per_seed.items()))
  for name, t in times.items():
    print(f"  train time {name}: {np.mean(t):.1f} s (mean of {len(t)})")
  return {"per_seed": per_seed, "stats": stats, "train_time": {k: float(np.mean(t)) for k, t in times.items()}}


def metric_row(config: ml_collections.ConfigDict, task: tasks.Task, method: str, pca_features: np.ndarray) -> Dict:
  """One row of the ``metric`` part: ``method`` (a key of :data:`METRIC_ROWS`) fitted on the training items of
  ``pca_features`` (``"l2"``: the raw features, nothing fitted), scored by :func:`nair.exact_l2_row`."""
  from hashjax import metric_learning  # pylint: disable=g-import-not-at-top
  train_x, train_y = pca_features[task.train], task.labels[task.train]
  start = time.perf_counter()
  if method == "l2":
    features = task.features
  elif method == "pca":
    features = pca_features
  elif method == "nca":
    features = pca_features @ metric_learning.fit_nca(train_x, train_y, max_iterations=METRIC["nca_iterations"],
                                                      seed=config.seed)
  else:
    features = pca_features @ metric_learning.fit_lmnn(train_x, train_y, k=config.k,
                                                       max_iterations=METRIC["lmnn_iterations"])
  seconds = time.perf_counter() - start
  return {**nair.exact_l2_row(config, task._replace(features=features)), "method": method, "fit_seconds": seconds}


def metric(datasets, seeds, workdir, *, runlocal=False) -> Dict:
  """The ``metric`` part: exact 3-NN error with Euclidean, PCA, NCA and LMNN distances; returns the summary.

  Each (dataset, method, seed) is stored as ``<workdir>/metric/<dataset>/<method>_s<seed>/results.json`` and
  reused (:func:`stored`; of several processes, each fits on its own and process 0 writes). The PCA fit's
  seconds go with the ``pca`` row; NCA's and LMNN's exclude it.
  """
  from sklearn.decomposition import PCA  # pylint: disable=g-import-not-at-top
  summary = {}
  for dataset in datasets:
    per_seed: Dict[str, Dict[int, float]] = {}
    seconds: Dict[str, List[float]] = {}
    for seed in seeds:
      config = base_config(dataset, runlocal=runlocal)
      config.seed = seed
      task = pca_features = None
      for method, _ in METRIC_ROWS:
        path = os.path.join(workdir, "metric", dataset, f"{method}_s{seed}", "results.json")
        if not stored(path):
          if task is None:
            task = tasks.make_task(config)
            x = np.asarray(task.features, np.float64)
            start = time.perf_counter()
            pca = PCA(n_components=min(METRIC["pca_components"], x.shape[1], len(task.train)), svd_solver="full")
            pca_features = pca.fit(x[task.train]).transform(x)
            pca_seconds = time.perf_counter() - start
          row = metric_row(config, task, method, pca_features)
          if method == "pca":
            row["fit_seconds"] = pca_seconds
          row = _store(path, {"rows": [row], "options": {**METRIC, "k": config.k}, "dataset": dataset,
                              "seed": seed, "num_pca_components": int(pca_features.shape[1])})["rows"][0]
          logging.info("%s: %s 3-NN error %.4f, fit %.1f s", path, method, row["knn_error"], row["fit_seconds"])
        else:
          row = _read_json(path)["rows"][0]
        per_seed.setdefault(method, {})[seed] = row["knn_error"]
        seconds.setdefault(method, []).append(row["fit_seconds"])
    stats = {m: mean_sd(list(s.values())) for m, s in per_seed.items()}
    print(f"\nmetric: {dataset}, exact 3-NN error, test queries, seeds {list(seeds)}, "
          f"PCA to {METRIC['pca_components']} dimensions on the training items")
    for method, name in METRIC_ROWS:
      print(f"  {name:<22}{_ms(stats[method]):>14}   " + " / ".join(_pct(e) for e in per_seed[method].values())
            + f"   fit {np.mean(seconds[method]):.1f} s (mean)")
    summary[dataset] = {"per_seed": per_seed, "stats": stats,
                        "fit_seconds": {m: float(np.mean(t)) for m, t in seconds.items()}, "options": dict(METRIC)}
  return summary


def _ints(flag: str, values: Sequence[str], *, low: int) -> List[int]:
  try:
    out = [int(v) for v in values]
  except ValueError:
    raise checks.ConfigError(f"--{flag}: expected comma-separated integers, got {','.join(values)!r}") from None
  if not out or min(out) < low:
    raise checks.ConfigError(f"--{flag}: expected integers >= {low}, got {','.join(values)!r}")
  return out


def _names(flag: str, values: Sequence[str], options: Sequence[str]) -> List[str]:
  for v in values:
    if v not in options:
      raise checks.ConfigError(f"--{flag}: expected names from {list(options)}, got {v!r}")
  return list(values)


def process_settings(num_processes: Optional[int] = None, process_id: Optional[int] = None,
                     coordinator_address: Optional[str] = None) -> Dict:
  """``{"num_processes", "process_id", "coordinator_address"}``: the values of ``--num_processes``,
  ``--process_id`` and ``--coordinator_address`` (None: the ``JAX_*`` environment variable), checked as the
  configs' fields are; ConfigError, one line naming the flag, for a bad value."""
  try:
    _checks.check_int("--num_processes", num_processes, low=1, allow_none=True)
    _checks.check_int("--process_id", process_id, low=0, allow_none=True)
    if num_processes is not None and process_id is not None:
      _checks.check_int_at_most("--process_id", process_id, num_processes - 1, low=0,
                                what=f"--num_processes - 1 = {num_processes - 1}")
    if coordinator_address is not None:
      _checks.check_nonempty_str("--coordinator_address", coordinator_address, what="'host:port' of process 0")
  except ValueError as e:
    raise checks.ConfigError(str(e)) from None
  return {"num_processes": num_processes, "process_id": process_id, "coordinator_address": coordinator_address}


def start_processes(processes: Dict) -> int:
  """Joins the processes of ``processes`` (:func:`process_settings`) with
  :func:`experiments.fitting.start_processes`; returns their number (1: nothing started). ConfigError naming
  the flag for a setting it refuses (e.g. an address that is not ``host:port``, a bad ``JAX_*`` variable)."""
  try:
    return fitting.start_processes(ml_collections.ConfigDict(processes))
  except ValueError as e:
    message = str(e)
    raise checks.ConfigError("--" + (message[len("config."):] if message.startswith("config.") else message)) \
        from None


def check_devices(configs: Sequence[ml_collections.ConfigDict]) -> None:
  """Of several processes (joined), every config's batch must split over the devices of all of them
  (:func:`experiments.fitting.device_mesh`, as the run will call it); ConfigError naming ``--num_processes``
  otherwise, before any data loads."""
  if jax.process_count() == 1:
    return
  for config in configs:
    try:
      fitting.device_mesh(config, batch_rows=config.queries_per_batch, rows_from="config.queries_per_batch")
    except ValueError as e:
      raise checks.ConfigError(f"--num_processes: the study's runs train over all {jax.device_count()} devices "
                               f"of the {jax.process_count()} processes; {e}") from None


def study_configs(f: Dict) -> List[ml_collections.ConfigDict]:
  """Every config the study of flags ``f`` (:func:`study_flags`) will train, at its first seed, with the
  process settings ``f["processes"]``."""
  configs = []
  if "tables" in f["parts"]:
    configs += [base_config(d, method=m, bits=b, runlocal=f["runlocal"])
                for d in f["datasets"] for b in f["bits"] for m in f["methods"]]
  if "mlp" in f["parts"]:
    configs += [base_config("digits" if f["runlocal"] else "mnist_t10k", method=m, model="mlp",
                            bits=16 if f["runlocal"] else 32, runlocal=f["runlocal"]) for m in f["methods"]]
  if "search" in f["parts"]:
    configs += [search_config(n, f["seeds"][0], runlocal=f["runlocal"]) for n in f["search"] or SEARCH]
  if "hierarchy" in f["parts"]:
    configs += [hierarchy_config(n, f["seeds"][0], runlocal=f["runlocal"]) for n in HIERARCHY_RUNS]
  for config in configs:
    config.update(f["processes"])
  return configs


def study_flags() -> Dict:
  """The flags as the study reads them, and every config it will run checked (checks.check_run) first.

  Raises ConfigError (one line) for a bad flag value or a run that cannot go.
  """
  f = {"parts": _names("parts", _PARTS.value, ("tables", "mlp", "search", "metric", "hierarchy")),
       "datasets": _names("datasets", _DATASETS.value, list(PROTOCOLS)),
       "bits": _ints("bits", _BITS.value, low=1), "baseline_bits": _ints("baseline_bits", _BASELINE_BITS.value, low=1),
       "methods": _names("methods", _METHODS.value, nair.METHODS), "seeds": _ints("seeds", _SEEDS.value, low=0),
       "search": _names("search", _SEARCH.value or [], list(SEARCH)) or None, "runlocal": _RUNLOCAL.value,
       "processes": process_settings(_NUM_PROCESSES.value, _PROCESS_ID.value, _COORDINATOR_ADDRESS.value)}
  if f["runlocal"]:
    f.update(seeds=f["seeds"][:1], bits=[8, 16], baseline_bits=[], datasets=["digits"])
  for config in study_configs(f):
    checks.check_run(config)
  return f


def workdir() -> str:
  """``--workdir``, by default ``runs/nair_study`` (held by this process: :func:`experiments.cli.workdir`)."""
  return cli.workdir("runs/nair_study", launcher="experiments.nair_study")


def main():
  start = time.perf_counter()
  f = study_flags()
  start_processes(f["processes"])  # once, before any jax computation
  check_devices(study_configs(f))
  seeds, runlocal, processes = f["seeds"], f["runlocal"], f["processes"]
  study = {"flags": {k: f[k] for k in ("parts", "datasets", "bits", "baseline_bits", "methods", "seeds", "runlocal")}}
  for part in f["parts"]:
    if part == "tables":
      study["tables"] = tables(f["datasets"], f["bits"], f["baseline_bits"], f["methods"], seeds, workdir(),
                               runlocal=runlocal, processes=processes)
    elif part == "mlp":
      study["mlp"] = tables(["digits" if runlocal else "mnist_t10k"], [16 if runlocal else 32],
                            [], f["methods"], seeds, workdir(), runlocal=runlocal, model="mlp", part="mlp",
                            processes=processes)
    elif part == "metric":
      study["metric"] = metric(f["datasets"], seeds, workdir(), runlocal=runlocal)
    elif part == "hierarchy":
      study["hierarchy"] = hierarchy(seeds, workdir(), runlocal=runlocal, processes=processes)
    else:
      study["search"] = search(seeds, workdir(), names=f["search"], runlocal=runlocal, processes=processes)
  study["seconds"] = time.perf_counter() - start
  path = os.path.join(workdir(), "study.json")
  if jax.process_index() == 0:  # of several processes, the first writes
    merged = _read_json(path) if os.path.exists(path) else {}  # parts run separately accumulate
    for key, value in study.items():
      if key in ("tables", "mlp", "search", "metric") and isinstance(merged.get(key), dict):
        merged[key].update(value)  # per dataset / per search entry
      elif key != "flags":
        merged[key] = value
    merged.setdefault("flags", {})[",".join(f["parts"])] = study["flags"]
    io.atomic_write_json(path, merged)
  print(f"\n{study['seconds']:.0f} s; summary: {path}")


if __name__ == "__main__":
  cli.run(main, config=False, check=None)
