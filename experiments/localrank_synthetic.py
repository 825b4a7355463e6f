r"""Banerjee et al.'s illustrative experiment (Sec. 2.4, Figure 1): does a cloud similarity agree with ranking accuracy?

  python -m experiments.localrank_synthetic --config=configs/localrank_synthetic.py --workdir=runs/localrank_synthetic
  python -m experiments.localrank_synthetic --config=configs/localrank_synthetic.py:runlocal   # 3 seeds

Three synthetic queries q1, q2, q3, each a cloud of relevant and non-relevant documents drawn from Gaussians
(:func:`make_queries`; the construction is in ``configs/localrank_synthetic.py``). A linear ranker
(``config.ranker``: SVM-MAP as in the paper, or RankNet) is trained on q1 and scored by tie-aware AP
(:func:`hashjax.ranking.query_metrics`) on q2 and q3: the query where it scores higher is the one "more similar from
the ranking point of view". Every measure of ``config.measures`` (:data:`hashjax.localrank.SIMILARITIES`) gives q1's
distance to q2 and to q3 (:func:`hashjax.localrank.cloud_distances`; eq. 5 as ``1 - sim``); a measure agrees on a
seed when it puts nearer the query with the higher AP. Printed: per measure, on how many seeds it agrees, disagrees
or ties (either side tied); then ``config.table_seed``'s table laid out like the paper's Figure 1, the paper's
numbers beside it. Everything goes to ``<workdir>/results.json``. The work is :func:`train_and_evaluate`.
"""

from __future__ import annotations

import os
import time
from typing import Dict, List

import ml_collections
import numpy as np

from experiments import cli, reporting
from experiments.methods import checks
from hashjax import io, localrank, ranking

#: ``config.ranker`` choices.
RANKERS = checks.SYNTHETIC_RANKERS
#: The paper's Figure 1 (its own synthetic data): MAP, then distances by PCA (eq. 5), symmetric KL, Bhattacharyya
#: and Geng et al.'s KNN query features (not a cloud similarity of hashjax.localrank.SIMILARITIES).
PAPER_FIGURE_1 = {"columns": ("MAP", "pca", "kl", "bhattacharyya", "knn"),
                  "q2": (1.000, 0.177, 84.584, 1.000, 95.941), "q3": (0.887, 0.810, 48.037, 0.917, 1.124)}


def _check(config: ml_collections.ConfigDict) -> None:
  """Relations between fields that the per-field rules do not see."""
  if config.table_seed not in config.seeds:
    raise ValueError(f"config.table_seed: expected one of config.seeds={list(config.seeds)}, got {config.table_seed}")
  if config.flipped > config.dim:
    raise ValueError(f"config.flipped: expected at most config.dim={config.dim} features, got {config.flipped}")
  if config.min_std > config.max_std:
    raise ValueError(f"config.min_std: expected at most config.max_std={config.max_std}, got {config.min_std}")


def _unit(rng: np.random.Generator, d: int) -> np.ndarray:
  v = rng.normal(size=d)
  return v / np.linalg.norm(v)


def make_queries(config: ml_collections.ConfigDict, seed: int) -> Dict[str, np.ndarray]:
  r"""The documents of q1, q2, q3 (query ids 1, 2, 3) and their population parameters.

  .. math:: x^{(1)} \sim \mathcal N(\mu + c_y \delta v, \Sigma), \quad x^{(2)} = \alpha x^{(1)} + \eta, \quad
     x^{(3)} = \mu + D (x^{(1)} - \mu)

  with ``c_+ = 1 - pi``, ``c_- = -pi`` (``pi`` the relevant fraction), each query drawn independently.

  Returns:
    ``features float64[3 n, d]``, ``labels int64[3 n]`` (1 relevant), ``query_ids int64[3 n]``, and per query
    (leading axis 3): ``class_means [3, 2, d]`` (relevant, non-relevant), ``within [3, d, d]`` (class covariance),
    ``means [3, d]`` and ``covariances [3, d, d]`` of the whole cloud (the mixture), ``relevance [3, d]``
    (the unit direction from the non-relevant to the relevant mean).
  """
  rng = np.random.default_rng(seed)
  d, n_rel, n_non = config.dim, config.relevant_docs, config.nonrelevant_docs
  rotation, _ = np.linalg.qr(rng.normal(size=(d, d)))
  stds = np.geomspace(config.max_std, config.min_std, d)
  sigma = (rotation * stds ** 2) @ rotation.T
  v, mu = _unit(rng, d), rng.normal(size=d)
  eta = config.mean_shift * _unit(rng, d)
  signs = np.ones(d)
  signs[rng.choice(d, config.flipped, replace=False)] = -1.0
  pi, delta = n_rel / (n_rel + n_non), config.separation
  class_means = np.stack([mu + (1 - pi) * delta * v, mu - pi * delta * v])  # [2, d]
  maps = [lambda x: x, lambda x: config.scale * x + eta, lambda x: mu + signs * (x - mu)]
  linear = [np.eye(d), config.scale * np.eye(d), np.diag(signs)]
  labels = np.concatenate([np.ones(n_rel, np.int64), np.zeros(n_non, np.int64)])
  feats = []
  for f in maps:  # each query: fresh documents of q1's distribution, then its map
    z = rng.normal(size=(n_rel + n_non, d)) * stds @ rotation.T
    feats.append(f(np.concatenate([class_means[0] + z[:n_rel], class_means[1] + z[n_rel:]])))
  mixture = sigma + pi * (1 - pi) * delta ** 2 * np.outer(v, v)
  return {
      "features": np.concatenate(feats), "labels": np.tile(labels, 3),
      "query_ids": np.repeat(np.arange(1, 4), len(labels)),
      "class_means": np.stack([np.stack([f(m) for m in class_means]) for f in maps]),
      "within": np.stack([a @ sigma @ a.T for a in linear]),
      "means": np.stack([f(mu) for f in maps]),
      "covariances": np.stack([a @ mixture @ a.T for a in linear]),
      "relevance": np.stack([a @ v / np.linalg.norm(a @ v) for a in linear]),
  }


def _fit(config: ml_collections.ConfigDict, x: np.ndarray, y: np.ndarray, q: np.ndarray) -> np.ndarray:
  if config.ranker == "svmmap":
    return localrank.fit_svmmap(x, y, q, c=config.svm_c)
  return localrank.fit_ranknet(x, y, q, l2=config.l2)


def _prefers(value_2: float, value_3: float, *, higher: bool) -> str:
  """``"q2"``, ``"q3"`` or ``"tie"``: the query that ``value`` (higher or lower better) puts first."""
  if value_2 == value_3:
    return "tie"
  return "q2" if (value_2 > value_3) == higher else "q3"


def run_seed(config: ml_collections.ConfigDict, seed: int) -> Dict:
  """One seed: the ranker's AP on q1 (training), q2, q3 and every measure's distances from q1."""
  qs = make_queries(config, seed)
  x, y, q = qs["features"], qs["labels"], qs["query_ids"]
  first = q == 1
  w = _fit(config, x[first], y[first], q[first])
  ap = ranking.query_metrics(x @ w, y, q)["ap"]  # queries 1, 2, 3 in order of first appearance
  row = {"seed": seed, "ap": {"q1": float(ap[0]), "q2": float(ap[1]), "q3": float(ap[2])}, "distance": {}}
  row["ranking_prefers"] = _prefers(row["ap"]["q2"], row["ap"]["q3"], higher=True)
  row["measure_prefers"] = {}
  for m in config.measures:
    s = localrank.cloud_summaries(x, q, similarity=m, variance_fraction=config.variance_fraction, ridge=config.ridge)
    dist = localrank.cloud_distances(s, s)[0]
    row["distance"][m] = {"q2": float(dist[1]), "q3": float(dist[2])}
    row["measure_prefers"][m] = _prefers(float(dist[1]), float(dist[2]), higher=False)
  return row


def agreement(rows: List[Dict], measures) -> Dict[str, Dict[str, int]]:
  """Per measure: seeds where it puts nearer the query of higher AP (agree), the other one (disagree), or where
  either the APs or the distances tie (tie)."""
  out = {}
  for m in measures:
    counts = {"agree": 0, "disagree": 0, "tie": 0}
    for r in rows:
      a, b = r["ranking_prefers"], r["measure_prefers"][m]
      counts["tie" if "tie" in (a, b) else "agree" if a == b else "disagree"] += 1
    out[m] = counts
  return out


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> Dict:
  """Every seed of ``config``; returns and writes ``<workdir>/results.json``."""
  _check(config)
  start = time.perf_counter()
  rows = [run_seed(config, s) for s in config.seeds]
  results = {"config": config.to_dict(), "rows": rows, "agreement": agreement(rows, config.measures),
             "paper_figure_1": PAPER_FIGURE_1, "seconds": time.perf_counter() - start}
  io.atomic_write_json(os.path.join(workdir, "results.json"), results)
  return results


def format_tables(results: Dict) -> str:
  """The agreement counts, then the table seed's Figure-1 layout beside the paper's numbers."""
  config, rows = results["config"], results["rows"]
  measures, n = config["measures"], len(rows)
  ap = {k: np.array([r["ap"][k] for r in rows]) for k in ("q1", "q2", "q3")}
  prefers = [r["ranking_prefers"] for r in rows]
  lines = [f"ranker {config['ranker']} trained on q1; tie-aware AP over {n} seeds, mean (min, max): "
           + "; ".join(f"{k} {v.mean():.3f} ({v.min():.3f}, {v.max():.3f})" for k, v in ap.items()),
           f"higher AP on q2: {prefers.count('q2')}, on q3: {prefers.count('q3')}, tied: {prefers.count('tie')}",
           f"{'measure':<15}{'agree':>7}{'disagree':>10}{'tie':>5}{'q2 nearer':>11}"]
  for m in measures:
    c = results["agreement"][m]
    nearer = sum(r["measure_prefers"][m] == "q2" for r in rows)
    lines.append(f"{m:<15}{c['agree']:>7}{c['disagree']:>10}{c['tie']:>5}{nearer:>11}")
  row = next(r for r in rows if r["seed"] == config["table_seed"])
  lines.append(f"seed {row['seed']} (Figure 1 layout: AP of q1's ranker, distances from q1):")
  lines.append(f"{'':<4}{'MAP':>9}" + "".join(f"{m:>15}" for m in measures))
  for k in ("q2", "q3"):
    lines.append(f"{k:<4}{row['ap'][k]:>9.3f}" + "".join(f"{row['distance'][m][k]:>15.3f}" for m in measures))
  paper = results["paper_figure_1"]
  lines.append("paper's Figure 1 (not comparable: different synthetic data; knn: Geng et al.'s query features):")
  lines.append(f"{'':<4}" + "".join(f"{c:>15}" for c in paper["columns"]))
  for k in ("q2", "q3"):
    lines.append(f"{k:<4}" + "".join(f"{v:>15.3f}" for v in paper[k]))
  return "\n".join(lines)


def main(config):
  workdir = cli.workdir(reporting.default_workdir(config.name), launcher="experiments.localrank_synthetic")
  results = train_and_evaluate(config, workdir)
  print(format_tables(results))
  print(f"{results['seconds']:.1f} s; results: {os.path.join(workdir, 'results.json')}")


if __name__ == "__main__":
  cli.run(main, check=checks.check_config)
