r"""Nair et al.'s regression task (eq. 11) on a real target: kNN regression by Hamming distance.

  python -m experiments.nair_regression --config=configs/lambdarank_regression.py
  python -m experiments.nair_regression --config=configs/lambdarank_regression.py:runlocal   # seconds

Data: scikit-learn's diabetes set (Efron et al. 2004; shipped with scikit-learn, so offline): 442 patients, 10
baseline measurements (standardised on the training items), and the target, a measure of disease progression one
year later (in units of the training targets' standard deviation). Each seed of ``config.seeds`` draws
``config.num_queries`` queries; the other patients are the database, which is also the training set.

For every length of ``config.bits`` and learner of ``config.learners``, Nair's linear hash (eq. 1) trains on
``config.queries_per_batch`` training queries per step, each against ``config.docs_per_query`` other training
items: ``"lambdarank"`` weighs each pair by ``|Delta S|`` of eq. 11 (:func:`hashjax.objectives.regression_deltas`,
``config.mode``: eq. 11 as printed, ``"pairs"``, or the kNN estimate's squared error, ``"prediction"``), over every
swap (no swap restriction); ``"ranknet"`` takes every pair whose targets lie at different distances from the
query's, the nearer preferred (``preference = -|t_i - t_q|``). Beside them, the codes of ``config.baselines``
(those of :data:`PCA_BOUND` only up to the 10 features' bits) and exact Euclidean ``k``-NN on the standardised
features, and least-squares linear regression (the paper's reference for its preliminary SARCOS run, Sec. 6).

Metric: the kNN regression error, the squared difference between a query's target and the mean target of the
database items in its ``config.k`` nearest non-empty Hamming bins (Euclidean: its ``k`` nearest items; linear
regression: its own estimate), averaged over the queries and divided by the variance of the query targets (1 is
no better than predicting their mean: the standardised mean squared error of the paper's Sec. 6).
Printed per seed and as mean (sd over seeds); everything goes to ``<workdir>/results.json``. The work is
:func:`train_and_evaluate`.
"""

from __future__ import annotations

import functools
import os
from typing import Callable, Dict, List

import jax
import ml_collections
import numpy as np
from sklearn import datasets, linear_model

from experiments import cli, fitting, reporting
from experiments.methods import checks
from hashjax import codes, io, mappings, objectives

#: Baselines that project onto ``num_bits`` principal directions: left out above the 10 features.
PCA_BOUND = ("itq", "pca", "iso")

def load_split(num_queries: int, seed: int) -> Dict[str, np.ndarray]:
  """Diabetes features standardised and targets scaled on the training items; ``query`` and ``train`` indices
  (the database is the training set)."""
  x, t = datasets.load_diabetes(return_X_y=True)
  order = np.random.default_rng(seed).permutation(len(t))
  query, train = np.sort(order[:num_queries]), np.sort(order[num_queries:])
  mean, std = x[train].mean(axis=0), x[train].std(axis=0)
  x = ((x - mean) / std).astype(np.float32)
  t = (t - t[train].mean()) / t[train].std()
  return {"features": x, "targets": t, "query": query, "train": train}


def regression_error(distances: np.ndarray, query_targets: np.ndarray, db_targets: np.ndarray, *, k: int) -> float:
  """Mean squared error of the kNN estimate over the ``k`` nearest non-empty bins, over the query targets' variance."""
  offsets = objectives.target_offsets(query_targets, db_targets)
  errors = objectives.regression_score(distances, offsets, k=k, mode="prediction")
  return float(np.mean(np.asarray(errors)) / np.var(query_targets))


def make_loss(config: ml_collections.ConfigDict, mapping, learner: str) -> Callable:
  """``loss_fn(params, batch, step)``: RankNet on the target-distance preferences, or LambdaRank with eq. 11."""
  deltas = functools.partial(objectives.regression_deltas, k=config.k, mode=config.mode)

  def loss_fn(params, batch, step):
    del step
    logits = mappings.apply(mapping, params, batch["features"])
    hq, hd = logits[batch["queries"]], logits[batch["docs"]]
    preference = -abs(batch["offsets"])
    if learner == "ranknet":
      return objectives.ranknet_loss(hq, hd, preference, from_logits=True), {}
    distances = objectives.hard_distances(jax.lax.stop_gradient(hq), jax.lax.stop_gradient(hd), from_logits=True)
    return objectives.lambdarank_loss(hq, hd, batch["offsets"], deltas_fn=deltas, distances=distances,
                                      preference=preference, from_logits=True, has_aux=True)

  return loss_fn


def make_batch_fn(config: ml_collections.ConfigDict, split: Dict, seed: int) -> Callable[[int], Dict]:
  """``batch_fn(step)``: ``queries_per_batch`` training queries, each with ``docs_per_query`` other training items
  drawn uniformly (a pure function of ``(seed, step)``), and their target offsets ``t_doc - t_query``."""
  x, t = split["features"][split["train"]], split["targets"][split["train"]]
  n, q, m = len(t), config.queries_per_batch, config.docs_per_query
  if q > n or m > n - 1:
    raise ValueError(f"config.queries_per_batch / docs_per_query: expected at most {n} / {n - 1} (training "
                     f"items), got {q} / {m}")
  features = jax.device_put(x)

  def batch_fn(step: int) -> Dict:
    rng = np.random.default_rng([seed, int(step)])
    queries = np.sort(rng.choice(n, size=q, replace=False)).astype(np.int32)
    keys = rng.random((q, n))
    keys[np.arange(q), queries] = -1.0  # never the query itself
    docs = np.argpartition(-keys, m - 1, axis=1)[:, :m].astype(np.int32)
    return {"features": features, "queries": queries, "docs": docs,
            "offsets": (t[docs] - t[queries][:, None]).astype(np.float32)}

  return batch_fn


def learned_error(config: ml_collections.ConfigDict, split: Dict, learner: str, bits: int, seed: int,
                  workdir: str) -> Dict:
  """Trains ``learner``'s hash of ``bits`` bits at ``seed``; its kNN regression error on the queries."""
  x, t = split["features"], split["targets"]
  mapping = mappings.make_mapping("linear", num_bits=bits, init=config.init)
  params = mappings.init(jax.random.key(seed), mapping, x[:2])
  encode = lambda p, rows: codes.pack_bits(mappings.apply(mapping, p, x[rows]) > 0)
  eval_fn = lambda p: {"knn_regression_error": regression_error(
      np.asarray(codes.hamming_distance(encode(p, split["query"]), encode(p, split["train"]))),
      t[split["query"]], t[split["train"]], k=config.k)}
  params, history = fitting.fit(config, workdir, params=params, loss_fn=make_loss(config, mapping, learner),
                                batch_fn=make_batch_fn(config, split, seed), eval_fn=eval_fn)
  return {"error": eval_fn(params)["knn_regression_error"], "history": history}


def baseline_error(config: ml_collections.ConfigDict, split: Dict, method: str, bits: int, seed: int) -> float:
  """The kNN regression error of baseline ``method``'s codes, fitted on the training items."""
  x, t = split["features"], split["targets"]
  model = fitting.baseline_model(method, x[split["train"]], num_bits=bits, seed=seed)
  distances = codes.hamming_distance(model.encode(x[split["query"]]), model.encode(x[split["train"]]))
  return regression_error(np.asarray(distances), t[split["query"]], t[split["train"]], k=config.k)


def exact_error(config: ml_collections.ConfigDict, split: Dict) -> float:
  """Exact Euclidean ``k``-NN on the standardised features: the mean target of the ``k`` nearest items."""
  x, t = split["features"].astype(np.float64), split["targets"]
  q, db = x[split["query"]], x[split["train"]]
  d2 = (q * q).sum(1)[:, None] - 2 * q @ db.T + (db * db).sum(1)[None]
  nearest = np.argsort(d2, axis=1, kind="stable")[:, :config.k]
  estimate = t[split["train"]][nearest].mean(axis=1)
  return float(np.mean((estimate - t[split["query"]]) ** 2) / np.var(t[split["query"]]))


def linear_error(split: Dict) -> float:
  """Least-squares linear regression on the training items (the paper's reference, Sec. 6), the same error."""
  x, t = split["features"].astype(np.float64), split["targets"]
  model = linear_model.LinearRegression().fit(x[split["train"]], t[split["train"]])
  estimate = model.predict(x[split["query"]])
  return float(np.mean((estimate - t[split["query"]]) ** 2) / np.var(t[split["query"]]))


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> Dict:
  """Every (method, length, seed) of ``config``; returns and writes ``<workdir>/results.json``."""
  checks.check_config(config)
  rows: List[Dict] = []
  for seed in config.seeds:
    split = load_split(config.num_queries, seed)
    for bits in config.bits:
      for learner in config.learners:
        out = learned_error(config, split, learner, bits, seed, os.path.join(workdir, f"{learner}-{bits}-s{seed}"))
        rows.append({"method": learner, "bits": bits, "seed": seed, "error": out["error"],
                     "evaluations": [{"step": h["step"], "error": h["knn_regression_error"]}
                                     for h in out["history"] if h.get("kind") == "eval"]})
      rows += [{"method": m, "bits": bits, "seed": seed, "error": baseline_error(config, split, m, bits, seed)}
               for m in config.baselines if not (m in PCA_BOUND and bits > split["features"].shape[1])]
    rows.append({"method": f"exact-l2-{config.k}nn", "bits": "-", "seed": seed, "error": exact_error(config, split)})
    rows.append({"method": "linear regression", "bits": "-", "seed": seed, "error": linear_error(split)})
  results = {"config": config.to_dict(), "rows": rows}
  io.atomic_write_json(os.path.join(workdir, "results.json"), results)
  return results


def format_table(rows: List[Dict]) -> str:
  """Mean (sd over seeds) of the relative kNN regression error per method and length, then each seed's."""
  lengths = list(dict.fromkeys(r["bits"] for r in rows if r["bits"] != "-"))
  methods = list(dict.fromkeys(r["method"] for r in rows))
  lines = [f"{'method':<16}" + "".join(f"{b:>16}" for b in lengths) + f"{'exact':>16}"]
  for m in methods:
    cells = []
    for b in lengths + ["-"]:
      v = np.array([r["error"] for r in rows if r["method"] == m and r["bits"] == b])
      cells.append(f"{v.mean():.3f} ({v.std(ddof=1) if v.size > 1 else 0.0:.3f})" if v.size else "")
    lines.append(f"{m:<16}" + "".join(f"{c:>16}" for c in cells))
  for seed in dict.fromkeys(r["seed"] for r in rows):
    lines.append(f"  seed {seed}: " + "; ".join(
        f"{m} " + " / ".join(f"{r['error']:.3f}" for r in rows if r["method"] == m and r["seed"] == seed)
        for m in methods))
  return "\n".join(lines)


def main(config):
  workdir = cli.workdir(reporting.default_workdir(config.name), launcher="experiments.nair_regression")
  results = train_and_evaluate(config, workdir)
  print("kNN regression error (mean squared error of the kNN estimate / variance of the query targets), "
        f"k = {config.k}, mean (sd over seeds {list(config.seeds)}):")
  print(format_table(results["rows"]))
  print(f"results: {os.path.join(workdir, 'results.json')}")


if __name__ == "__main__":
  cli.run(main, check=checks.check_config)
