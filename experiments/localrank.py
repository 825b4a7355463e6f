r"""LocalRank (Banerjee et al.) on LETOR folds: local linear rankers against one global ranker, with controls.

  python -m experiments.localrank --config=configs/localrank.py
  python -m experiments.localrank --config=configs/localrank.py:runlocal

Per fold: RankNet pairs of the training subsets; the global linear ranker (``l2`` chosen on validation);
LocalRank for every similarity of ``config.similarities`` (eq. 5 with P by the 80% rule, and with each fixed P
of ``config.fixed_components``): the complete-link tree of the training queries, then for every ``C`` of
``config.cluster_grid`` and ``l2`` of ``config.l2_grid`` one ranker per cluster, each validation query ranked by
the cluster of its most similar training query; ``(C, l2)`` maximise the validation metric; the test numbers
come from ``hashjax.localrank.fit`` / ``score`` at that setting (timed). For LocalRank-PCA also: random clusters
of the chosen sizes, the clairvoyant cluster (per query and metric, the best of the ``C`` models: an upper
bound), LSH selection against the exhaustive one, and the test metrics of every ``C`` (the curve). With
``config.single_query``, the study of Sec. 3.1 (Figs. 4-5): one ranker per training query, each test query ranked
by its most similar query's and by the clairvoyant best one's, and where eq. 5 ranks the clairvoyant query.
``--config.plots=True`` draws the test metric against ``C`` with the clairvoyant bound (``clusters.png``, Figs.
6-8) and the clairvoyant query's ranks (``clairvoyant_ranks.png``, Fig. 5). Geng et
al.'s KNN (``K`` on validation) and D&K run per test query. The global baselines of ``config.ltr_baselines``
(:mod:`hashjax.localrank.baselines`): RankBoost (rounds ``T`` on validation, from the prefixes of one fit), SVM-MAP
(``c`` on validation) and LambdaMART through LightGBM (trees, learning rate and leaves on validation), each timed
at its chosen setting. Metrics: tie-aware AP and NDCG@1/5/10 over queries
with a relevant document, and LETOR 4.0's official conventions beside them (:mod:`hashjax.ranking`). The paired
bootstrap pools the test queries of all folds. Everything goes to ``<workdir>/results.json``; the tables to
stdout. The work is :func:`train_and_evaluate`.
"""

from __future__ import annotations

import os
import time
from typing import Dict, List, Optional

from absl import logging
import ml_collections
import numpy as np

from experiments import cli, plots, reporting
from experiments.methods import checks
from hashjax import data, io, localrank, ranking

#: Metrics of the tables, also the choices of ``config.select_by`` (``hashjax.ranking.query_metrics`` keys).
METRICS = checks.LOCALRANK_METRICS
CONVENTIONS = ranking.CONVENTIONS
#: ``config.ltr_baselines`` choices and their rows' names.
LTR_BASELINES = dict(zip(checks.LTR_BASELINES, ("RankBoost", "SVM-MAP", "LambdaMART (LightGBM)")))



def _evaluate(scores: np.ndarray, split: data.RankingData) -> Dict[str, Dict[str, np.ndarray]]:
  """Per-query metrics of ``scores`` under both conventions."""
  return {c: ranking.query_metrics(scores, split.affinity, split.query_ids, convention=c) for c in CONVENTIONS}


def _mean(per_query: Dict[str, np.ndarray], metric: str) -> float:
  values = per_query[metric]
  return float(np.nanmean(values)) if np.any(~np.isnan(values)) else float("nan")


def _cluster_scores(split: data.RankingData, weights: np.ndarray, clusters: np.ndarray,
                    nearest: np.ndarray) -> np.ndarray:
  """Scores of each document by the model of its query's cluster (query order of ``group_by_query``)."""
  groups = data.group_by_query(split.query_ids)
  chosen = clusters[nearest]
  out = np.empty(len(split.query_ids))
  x = split.features.astype(np.float64)
  for g, rows in enumerate(groups.indices):
    out[rows] = x[rows] @ weights[chosen[g]]
  return out


def _load() -> List[float]:
  return [round(v, 2) for v in os.getloadavg()]


def _timed(fn, *args, **kwargs):
  start = time.perf_counter()
  out = fn(*args, **kwargs)
  return out, time.perf_counter() - start


class _Fold:
  """One fold's data, pairs and the global ranker."""

  def __init__(self, config, fold: int):
    self.fold = fold
    split = data.load_letor_fold(config.data_dir, fold=fold, num_features=config.num_features,
                                 max_label=config.max_label)
    if config.standardize:  # z-scores with the training subsets' mean and spread (raw features, e.g. MSLR-WEB)
      mean, spread = split.train.features.mean(axis=0), split.train.features.std(axis=0)
      spread = np.where(spread > 0, spread, 1.0)
      split = data.RankingFold(*(part._replace(features=((part.features - mean) / spread).astype(np.float32))
                                 for part in split))
    self.split = split
    self.train, self.vali, self.test = self.split
    self.pairs = localrank.ranknet_pairs(self.train.features, self.train.affinity, self.train.query_ids)
    self.num_train = len(self.pairs.query_ids)
    self.num_test = len(data.group_by_query(self.test.query_ids).query_ids)


def _variants(config) -> List[Dict]:
  """The LocalRank rows: name, similarity, fixed P."""
  out = []
  for s in config.similarities:
    if s == "pca":
      out.append({"name": f"LocalRank pca (P {config.variance_fraction:.0%})", "similarity": "pca",
                  "num_components": None})
      out += [{"name": f"LocalRank pca (P = {p})", "similarity": "pca", "num_components": p}
              for p in config.fixed_components]
    else:
      out.append({"name": f"LocalRank {s}", "similarity": s, "num_components": None})
  return out


def _global(config, f: _Fold, record: Dict) -> Dict:
  """The global ranker: l2 on validation, then timed training and scoring."""
  val = {}
  for l2 in config.l2_grid:
    w = localrank.fit_ranknet_pairs(f.pairs, l2=l2)
    val[l2] = _mean(_evaluate(f.vali.features @ w, f.vali)["tie_aware"], config.select_by)
  l2 = max(config.l2_grid, key=lambda v: (val[v], -config.l2_grid.index(v)))
  w, train_s = _timed(localrank.fit_ranknet, f.train.features, f.train.affinity, f.train.query_ids, l2=l2)
  scores, test_s = _timed(lambda: f.test.features.astype(np.float64) @ w)
  record["Global linear"] = {"per_query": _evaluate(scores, f.test), "train_s": train_s,
                             "test_ms_per_query": 1e3 * test_s / f.num_test, "setting": {"l2": l2},
                             "load": _load()}
  return {"l2": l2, "weights": w}


def _localrank(config, f: _Fold, variant: Dict, record: Dict, curves: Dict, extras: Dict) -> None:
  """One similarity: validation grid over (C, l2), the timed model at the choice, and the PCA extras."""
  opts = {"similarity": variant["similarity"], "num_components": variant["num_components"],
          "variance_fraction": config.variance_fraction, "ridge": config.ridge}
  summary = lambda split: localrank.cloud_summaries(split.features, split.query_ids, **opts)
  train_sum = summary(f.train)
  tree = localrank.complete_link_tree(localrank.cloud_distances(train_sum, train_sum))
  near_val = localrank.nearest_training_query(localrank.cloud_distances(summary(f.vali), train_sum))
  near_test = localrank.nearest_training_query(localrank.cloud_distances(summary(f.test), train_sum))
  too_many = [c for c in config.cluster_grid if c > f.num_train]
  if too_many:
    raise ValueError(f"config.cluster_grid: expected numbers of clusters at most the fold's {f.num_train} training "
                     f"queries, got {too_many}")
  grid = {}
  for c in config.cluster_grid:
    clusters = localrank.cut_clusters(tree, num_queries=f.num_train, num_clusters=c)
    for l2 in config.l2_grid:
      w = localrank.fit_clusters(f.pairs, clusters, num_clusters=c, l2=l2)
      val = _mean(_evaluate(_cluster_scores(f.vali, w, clusters, near_val), f.vali)["tie_aware"], config.select_by)
      grid[(c, l2)] = {"val": val, "weights": w, "clusters": clusters}
  order = list(grid)
  c, l2 = max(order, key=lambda k: (grid[k]["val"], -order.index(k)))  # ties: the first (smaller C, l2)
  chosen = grid[(c, l2)]
  model, train_s = _timed(localrank.fit, f.train.features, f.train.affinity, f.train.query_ids, num_clusters=c,
                          seed=config.seed, l2=l2, lsh_bits=config.lsh_bits, lsh_tables=config.lsh_tables, **opts)
  scores, test_s = _timed(localrank.score, model, f.test.features, f.test.query_ids)
  check = _cluster_scores(f.test, chosen["weights"], chosen["clusters"], near_test)
  if not np.allclose(scores, check, rtol=1e-6, atol=1e-8):
    raise AssertionError(f"{variant['name']}: localrank.score differs from the grid's scores")
  sizes = np.bincount(chosen["clusters"], minlength=c).tolist()
  record[variant["name"]] = {"per_query": _evaluate(scores, f.test), "train_s": train_s,
                             "test_ms_per_query": 1e3 * test_s / f.num_test, "load": _load(),
                             "setting": {"C": c, "l2": l2, "cluster_sizes": sizes}}
  curve = {}
  for cc in sorted({k[0] for k in grid}):
    best = max([k for k in order if k[0] == cc], key=lambda k: (grid[k]["val"], -order.index(k)))
    g = grid[best]
    test = _evaluate(_cluster_scores(f.test, g["weights"], g["clusters"], near_test), f.test)["tie_aware"]
    curve[cc] = {"val_" + config.select_by: g["val"], **{m: _mean(test, m) for m in METRICS}}
    if variant["similarity"] == "pca":
      clair = _clairvoyant(f.test, g["weights"])
      curve[cc].update({"clairvoyant_" + m: _mean(clair, m) for m in ("ap", "ndcg@1")})
  curves[variant["name"]] = curve
  if variant["similarity"] == "pca" and variant["num_components"] is None:
    extras.update(_pca_extras(config, f, model, chosen, near_test, record, variant["name"], l2,
                              localrank.cut_clusters(tree, num_queries=f.num_train,
                                                     num_clusters=min(config.lsh_clusters, f.num_train))))


def _clairvoyant(split: data.RankingData, weights: np.ndarray) -> Dict[str, np.ndarray]:
  """Per query and metric, the best of the cluster models (tie-aware convention): an upper bound."""
  per_model = [ranking.query_metrics(split.features.astype(np.float64) @ w, split.affinity, split.query_ids)
               for w in weights]
  out = {"query_ids": per_model[0]["query_ids"], "num_relevant": per_model[0]["num_relevant"]}
  for m in METRICS:
    out[m] = np.max(np.stack([p[m] for p in per_model]), axis=0)  # NaN stays NaN (no relevant document)
  return out


def _pca_extras(config, f: _Fold, model, chosen: Dict, near_test: np.ndarray, record: Dict, name: str,
                l2: float, fixed_clusters: np.ndarray) -> Dict:
  """Random clusters of the chosen sizes, the clairvoyant cluster, and LSH against exhaustive selection."""
  rng = np.random.default_rng(config.seed + f.fold)
  c = model.weights.shape[0]
  draws = []
  for _ in range(config.random_draws):
    clusters = rng.permutation(chosen["clusters"])
    w = localrank.fit_clusters(f.pairs, clusters, num_clusters=c, l2=l2)
    draws.append(_evaluate(_cluster_scores(f.test, w, clusters, near_test), f.test))
  averaged = {conv: {**draws[0][conv], **{m: np.mean([d[conv][m] for d in draws], axis=0) for m in METRICS}}
              for conv in CONVENTIONS}
  record["Random clusters (same sizes)"] = {"per_query": averaged, "train_s": float("nan"),
                                            "test_ms_per_query": float("nan"), "setting": {"C": c, "l2": l2}}
  clair = _clairvoyant(f.test, model.weights)
  record["Clairvoyant cluster (bound)"] = {"per_query": {"tie_aware": clair}, "train_s": float("nan"),
                                           "test_ms_per_query": float("nan"), "setting": {"C": c, "l2": l2}}
  exhaustive, ex_s = _timed(localrank.select, model, f.test.features, f.test.query_ids)
  lsh_rows = []
  for bits in config.lsh_sweep:
    tables = localrank.build_lsh(model.train, num_bits=bits, num_tables=config.lsh_tables, seed=config.seed)
    variant = model._replace(lsh=tables)
    for cand in (config.lsh_candidates, None):
      chosen_lsh, lsh_s = _timed(localrank.select, variant, f.test.features, f.test.query_ids, selection="lsh",
                                 num_candidates=cand)
      scores = localrank.score(variant, f.test.features, f.test.query_ids, selection="lsh", num_candidates=cand)
      lsh_rows.append({"bits": bits, "tables": config.lsh_tables, "candidates": cand or "all voted",
                       "same_query": float(np.mean(chosen_lsh.nearest == exhaustive.nearest)),
                       "same_cluster": float(np.mean(chosen_lsh.clusters == exhaustive.clusters)),
                       "same_cluster_fixed_c": float(np.mean(fixed_clusters[chosen_lsh.nearest]
                                                             == fixed_clusters[exhaustive.nearest])),
                       "fallback": int(chosen_lsh.fallback.sum()), "lsh_ms": 1e3 * lsh_s / f.num_test,
                       "exhaustive_ms": 1e3 * ex_s / f.num_test,
                       "ap": _mean(_evaluate(scores, f.test)["tie_aware"], "ap")})
      if bits == config.lsh_bits and cand == config.lsh_candidates:
        record["LocalRank pca, LSH selection"] = {
            "per_query": _evaluate(scores, f.test), "train_s": record[name]["train_s"],
            "test_ms_per_query": 1e3 * lsh_s / f.num_test, "setting": {"C": c, "l2": l2, "h": bits}}
  return {"lsh": lsh_rows}


def _single_query(config, f: _Fold, glob: Dict, record: Dict) -> Dict:
  """Sec. 3.1, Figs. 4-5: one ranker per training query (the global ranker's ``l2``); per test query the global
  model's metrics, the most similar training query's model's (eq. 5, P by the 80% rule) and the clairvoyant best
  single-query model's, and the clairvoyant query's rank in the eq. 5 similarity order (1: the most similar;
  among several best models, the most similar of them), with the per-query APs of both choices (test queries with a
  relevant document, in order). Training queries without a preference pair (every document equally relevant) have
  no ranker of their own and are left out."""
  opts = {"similarity": "pca", "num_components": None, "variance_fraction": config.variance_fraction,
          "ridge": config.ridge}
  own = np.flatnonzero(f.pairs.counts > 0)  # the training queries that can train a ranker
  train_sum = localrank.cloud_summaries(f.train.features, f.train.query_ids, **opts)
  distances = localrank.cloud_distances(localrank.cloud_summaries(f.test.features, f.test.query_ids, **opts),
                                        train_sum)[:, own]  # [test queries, training queries with a ranker]
  weights = localrank.fit_clusters(f.pairs, np.arange(f.num_train), num_clusters=f.num_train, l2=glob["l2"])[own]
  scores = f.test.features.astype(np.float64) @ weights.T  # [documents, models]
  each = [ranking.query_metrics(scores[:, j], f.test.affinity, f.test.query_ids, ks=(1,)) for j in range(len(own))]
  per_model = {m: np.stack([e[m] for e in each], axis=1) for m in ("ap", "ndcg@1")}  # [test queries, models]
  nearest = localrank.nearest_training_query(distances)
  rows = np.arange(len(nearest))
  order = np.argsort(distances, axis=1, kind="stable")  # most similar first
  position = np.empty_like(order)
  position[rows[:, None], order] = np.arange(len(own))[None, :] + 1
  defined = ~np.isnan(per_model["ap"][:, 0])  # test queries with a relevant document
  ap = per_model["ap"][defined]
  clair_rank = np.min(np.where(ap == ap.max(axis=1, keepdims=True), position[defined], len(own) + 1), axis=1)
  glob_metrics = record["Global linear"]["per_query"]["tie_aware"]
  out = {"num_train_queries": len(own), "clairvoyant_rank": clair_rank.tolist(),
         "clairvoyant_ap": ap.max(axis=1).tolist(), "most_similar_ap": per_model["ap"][rows, nearest][defined].tolist()}
  for m in ("ap", "ndcg@1"):
    out[m] = {"global": float(np.nanmean(glob_metrics[m])),
              "most_similar": float(np.nanmean(per_model[m][rows, nearest])),
              "clairvoyant": float(np.mean(np.max(per_model[m][defined], axis=1)))}
  return out


def _knn(config, f: _Fold, l2: float, record: Dict) -> None:
  """Geng et al.'s KNN: K on validation, then the timed test pass (one model per test query)."""
  kw = {"rank_feature": config.knn_rank_feature, "top": config.knn_top, "l2": l2}
  train_q = localrank.query_features(f.train.features, f.train.query_ids, rank_feature=config.knn_rank_feature,
                                     top=config.knn_top)
  grid = [k for k in config.knn_neighbors if k <= f.num_train] or [f.num_train]
  val = {k: _mean(_evaluate(localrank.knn_scores(f.pairs, train_q, f.vali.features, f.vali.query_ids,
                                                 num_neighbors=k, **kw), f.vali)["tie_aware"], config.select_by)
         for k in grid} if len(grid) > 1 else {grid[0]: 0.0}  # one K: nothing to choose
  k = max(grid, key=lambda v: (val[v], -grid.index(v)))
  (train_q, train_s) = _timed(localrank.query_features, f.train.features, f.train.query_ids,
                              rank_feature=config.knn_rank_feature, top=config.knn_top)
  scores, test_s = _timed(localrank.knn_scores, f.pairs, train_q, f.test.features, f.test.query_ids,
                          num_neighbors=k, **kw)
  record["KNN (Geng et al.)"] = {"per_query": _evaluate(scores, f.test), "train_s": train_s,
                                 "test_ms_per_query": 1e3 * test_s / f.num_test, "setting": {"K": k, "l2": l2},
                                 "load": _load()}


def _dk(config, f: _Fold, l2: float, record: Dict) -> None:
  scores, test_s = _timed(localrank.dk_scores, f.pairs, f.test.features, f.test.query_ids,
                          variance_fraction=config.variance_fraction, l2=l2)
  record["D&K (test-time PCA)"] = {"per_query": _evaluate(scores, f.test), "train_s": 0.0,
                                   "test_ms_per_query": 1e3 * test_s / f.num_test, "setting": {"l2": l2},
                                   "load": _load()}


def _choose(val: Dict, order: List) -> object:
  """The setting of the highest validation value; ties: the first in grid order."""
  return max(order, key=lambda k: (val[k], -order.index(k)))


def _rankboost(config, f: _Fold, record: Dict) -> None:
  """RankBoost: the rounds T on validation (the first T rounds of one fit), then the timed fit at T."""
  opts = {"num_thresholds": config.rankboost_thresholds}
  grid = list(config.rankboost_rounds)
  full = localrank.fit_rankboost(f.train.features, f.train.affinity, f.train.query_ids, num_rounds=max(grid), **opts)
  prefix = lambda t: localrank.RankBoostModel(*(a[:t] for a in full))
  val = {t: _mean(_evaluate(localrank.rankboost_scores(prefix(t), f.vali.features), f.vali)["tie_aware"],
                  config.select_by) for t in grid}
  t = _choose(val, grid)
  model, train_s = _timed(localrank.fit_rankboost, f.train.features, f.train.affinity, f.train.query_ids,
                          num_rounds=t, **opts)
  if not all(np.array_equal(a, b) for a, b in zip(model, prefix(t))):
    raise AssertionError("RankBoost: the fit of T rounds differs from the first T rounds of the longer fit")
  scores, test_s = _timed(localrank.rankboost_scores, model, f.test.features)
  record[LTR_BASELINES["rankboost"]] = {"per_query": _evaluate(scores, f.test), "train_s": train_s,
                                        "test_ms_per_query": 1e3 * test_s / f.num_test, "load": _load(),
                                        "setting": {"T": int(len(model.alphas))}}


def _svmmap(config, f: _Fold, record: Dict) -> None:
  """SVM-MAP: c on validation; each fit is timed, the chosen one's time reported."""
  fits, val = {}, {}
  for c in config.svmmap_c:
    fits[c] = _timed(localrank.fit_svmmap, f.train.features, f.train.affinity, f.train.query_ids, c=c,
                     epsilon=config.svmmap_epsilon, max_iterations=config.svmmap_max_iterations)
    val[c] = _mean(_evaluate(f.vali.features @ fits[c][0], f.vali)["tie_aware"], config.select_by)
  c = _choose(val, list(config.svmmap_c))
  w, train_s = fits[c]
  scores, test_s = _timed(lambda: f.test.features.astype(np.float64) @ w)
  record[LTR_BASELINES["svmmap"]] = {"per_query": _evaluate(scores, f.test), "train_s": train_s,
                                     "test_ms_per_query": 1e3 * test_s / f.num_test, "load": _load(),
                                     "setting": {"c": c}}


def _lambdamart(config, f: _Fold, record: Dict) -> None:
  """LambdaMART: (learning rate, leaves, trees) on validation (the trees as prefixes of one fit per pair), then
  the timed fit at the choice."""
  opts = {"min_data_in_leaf": config.lambdamart_min_data_in_leaf, "seed": config.seed,
          "num_threads": config.lambdamart_threads}
  val, order = {}, []
  for lr in config.lambdamart_learning_rates:
    for leaves in config.lambdamart_leaves:
      booster = localrank.fit_lambdamart(f.train.features, f.train.affinity, f.train.query_ids,
                                         num_trees=max(config.lambdamart_trees), learning_rate=lr,
                                         num_leaves=leaves, **opts)
      for trees in config.lambdamart_trees:
        scores = localrank.lambdamart_scores(booster, f.vali.features, num_trees=trees)
        val[(lr, leaves, trees)] = _mean(_evaluate(scores, f.vali)["tie_aware"], config.select_by)
        order.append((lr, leaves, trees))
  lr, leaves, trees = _choose(val, order)
  booster, train_s = _timed(localrank.fit_lambdamart, f.train.features, f.train.affinity, f.train.query_ids,
                            num_trees=trees, learning_rate=lr, num_leaves=leaves, **opts)
  scores, test_s = _timed(localrank.lambdamart_scores, booster, f.test.features)
  record[LTR_BASELINES["lambdamart"]] = {"per_query": _evaluate(scores, f.test), "train_s": train_s,
                                         "test_ms_per_query": 1e3 * test_s / f.num_test, "load": _load(),
                                         "setting": {"trees": trees, "lr": lr, "leaves": leaves}}


def run_fold(config: ml_collections.ConfigDict, fold: int) -> Dict:
  """Every method on one fold: ``{"methods": {name: ...}, "curves": ..., "lsh": ...}``."""
  f = _Fold(config, fold)
  record, curves, extras = {}, {}, {}
  glob = _global(config, f, record)
  for variant in _variants(config):
    _localrank(config, f, variant, record, curves, extras)
    logging.info("fold %d %s: %s", fold, variant["name"], record[variant["name"]]["setting"])
  if config.single_query:
    extras["single_query"] = _single_query(config, f, glob, record)
  _knn(config, f, glob["l2"], record)
  if fold in config.dk_folds:
    _dk(config, f, glob["l2"], record)
  for name in config.get("ltr_baselines", ()):
    {"rankboost": _rankboost, "svmmap": _svmmap, "lambdamart": _lambdamart}[name](config, f, record)
    logging.info("fold %d %s: %s", fold, LTR_BASELINES[name], record[LTR_BASELINES[name]]["setting"])
  return {"fold": fold, "methods": record, "curves": curves, **extras,
          "num_train_queries": f.num_train, "num_test_queries": f.num_test}


# --------------------------------------------------------------------------- summary


def _pooled(folds: List[Dict], name: str, convention: str, metric: str) -> Optional[np.ndarray]:
  parts = [f["methods"][name]["per_query"][convention][metric] for f in folds
           if name in f["methods"] and convention in f["methods"][name]["per_query"]]
  return np.concatenate(parts) if parts else None


def summarize(config: ml_collections.ConfigDict, folds: List[Dict]) -> List[Dict]:
  """One row per method: fold-averaged metrics (both conventions), times, settings, bootstrap intervals."""
  names = list(dict.fromkeys(n for f in folds for n in f["methods"]))
  rows = []
  for name in names:
    present = [f for f in folds if name in f["methods"]]
    row = {"method": name, "folds": [f["fold"] for f in present]}
    for conv in CONVENTIONS:
      for m in METRICS:
        vals = [_mean(f["methods"][name]["per_query"][conv], m) for f in present
                if conv in f["methods"][name]["per_query"]]
        row[f"{conv}:{m}"] = float(np.mean(vals)) if vals else float("nan")
    row["train_s"] = float(np.mean([f["methods"][name]["train_s"] for f in present]))
    row["test_ms_per_query"] = float(np.mean([f["methods"][name]["test_ms_per_query"] for f in present]))
    row["settings"] = [f["methods"][name]["setting"] for f in present]
    if name != "Global linear":
      for m in METRICS:
        mine = _pooled(present, name, "tie_aware", m)
        base = np.concatenate([f["methods"]["Global linear"]["per_query"]["tie_aware"][m] for f in present])
        ci = ranking.paired_bootstrap(mine, base, num_samples=config.bootstrap_samples, seed=config.seed)
        row[f"delta:{m}"] = ci._asdict()
    rows.append(row)
  return rows


def _curve_rows(folds: List[Dict]) -> List[Dict]:
  out = []
  for name in folds[0]["curves"]:
    cs = sorted({c for f in folds for c in f["curves"].get(name, {})})
    for c in cs:
      vals = [f["curves"][name][c] for f in folds if c in f["curves"].get(name, {})]
      out.append({"method": name, "C": c, **{k: float(np.mean([v[k] for v in vals])) for k in vals[0]}})
  return out


def _lsh_rows(folds: List[Dict]) -> List[Dict]:
  if not folds[0].get("lsh"):
    return []
  out = []
  for i, row in enumerate(folds[0]["lsh"]):
    vals = [f["lsh"][i] for f in folds]
    out.append({**{k: row[k] for k in ("bits", "tables", "candidates")},
                **{k: float(np.mean([v[k] for v in vals])) for k in ("same_query", "same_cluster",
                                                                      "same_cluster_fixed_c", "fallback", "lsh_ms",
                                                                      "exhaustive_ms", "ap")}})
  return out


def _single_query_summary(folds: List[Dict]) -> Optional[Dict]:
  """Fold means of the single-query study, and where the clairvoyant query ranks (pooled over the folds' test
  queries): at the top, within the top 5 and the top 10% of the training queries, and the median rank."""
  parts = [f["single_query"] for f in folds if f.get("single_query")]
  if not parts:
    return None
  out = {m: {k: float(np.mean([p[m][k] for p in parts])) for k in ("global", "most_similar", "clairvoyant")}
         for m in ("ap", "ndcg@1")}
  ranks = np.concatenate([np.asarray(p["clairvoyant_rank"], np.float64) for p in parts])
  sizes = np.concatenate([np.full(len(p["clairvoyant_rank"]), p["num_train_queries"]) for p in parts])
  out["clairvoyant_rank"] = {"top_1": float(np.mean(ranks == 1)), "top_5": float(np.mean(ranks <= 5)),
                             "top_10_percent": float(np.mean(ranks <= 0.1 * sizes)),
                             "median": float(np.median(ranks)), "median_training_queries": float(np.median(sizes)),
                             "test_queries": int(ranks.size)}
  return out


def _json_ready(x):
  if isinstance(x, dict):
    return {str(k): _json_ready(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [_json_ready(v) for v in x]
  if isinstance(x, np.ndarray):
    return [None if isinstance(v, float) and np.isnan(v) else v for v in x.tolist()]
  if isinstance(x, (np.floating, float)):
    return None if np.isnan(x) else float(x)
  if isinstance(x, np.integer):
    return int(x)
  return x


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> Dict:
  """Every fold of ``config``; returns and writes ``<workdir>/results.json`` (rows, curves, LSH, per fold)."""
  checks.check_config(config)
  if config.plots:
    plots.require_matplotlib()  # before any work: a missing matplotlib fails the run up front
  from threadpoolctl import threadpool_limits  # pylint: disable=g-import-not-at-top
  start = time.perf_counter()
  with threadpool_limits(limits=config.blas_threads):
    folds = [run_fold(config, fold) for fold in config.folds]
    rows = summarize(config, folds)
  results = {"config": config.to_dict(), "rows": rows, "curves": _curve_rows(folds), "lsh": _lsh_rows(folds),
             "single_query": _single_query_summary(folds), "folds": folds, "seconds": time.perf_counter() - start,
             "load_at_end": _load()}
  results = _json_ready(results)
  io.atomic_write_json(os.path.join(workdir, "results.json"), results)
  if config.plots:
    paths = [plots.plot_clusters(results["curves"], os.path.join(workdir, "clusters.png"), metric=config.select_by)]
    if results["single_query"]:
      ranks = [r for f in folds if f.get("single_query") for r in f["single_query"]["clairvoyant_rank"]]
      paths.append(plots.plot_rank_histogram(ranks, os.path.join(workdir, "clairvoyant_ranks.png")))
    for path in paths:
      logging.info("figure: %s", path)
  return results


def _f(v, digits=4) -> str:
  return "   -  " if v is None or (isinstance(v, float) and np.isnan(v)) else f"{v:.{digits}f}"


def format_tables(results: Dict) -> str:
  """The method table (tie-aware, with bootstrap intervals), the LETOR 4.0 table, the C curve and LSH."""
  lines = [f"{'method':<32}{'MAP':>8}{'N@1':>8}{'N@5':>8}{'N@10':>8}{'train s':>9}{'test ms/q':>10}  "
           f"{'dMAP [95% CI]':<28}{'dN@1 [95% CI]':<28}{'dN@10 [95% CI]':<28}setting (per fold)"]
  lines.append("-" * len(lines[0]))
  for r in results["rows"]:
    cis = []
    for m in ("ap", "ndcg@1", "ndcg@10"):
      d = r.get(f"delta:{m}")
      cis.append(f"{d['mean']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}]" if d else "")
    setting = "; ".join(",".join(f"{k}={v}" for k, v in s.items() if k != "cluster_sizes") for s in r["settings"])
    lines.append(f"{r['method']:<32}" + "".join(f"{_f(r['tie_aware:' + m]):>8}" for m in METRICS)
                 + f"{_f(r['train_s'], 3):>9}{_f(r['test_ms_per_query'], 3):>10}  "
                 + "".join(f"{c:<28}" for c in cis) + setting)
  lines += ["", "LETOR 4.0 official conventions (Eval-Score-4.0: every query, file-order ties):",
            f"{'method':<32}{'MAP':>8}{'N@1':>8}{'N@5':>8}{'N@10':>8}"]
  for r in results["rows"]:
    if r.get("letor4:ap") is not None:
      lines.append(f"{r['method']:<32}" + "".join(f"{_f(r['letor4:' + m]):>8}" for m in METRICS))
  if results["curves"]:
    lines += ["", "Test metrics by C (l2 chosen on validation for each C), fold means:",
              f"{'method':<32}{'C':>4}{'val':>8}{'MAP':>8}{'N@1':>8}{'N@10':>8}{'clair MAP':>10}{'clair N@1':>10}"]
    for r in results["curves"]:
      val = next(v for k, v in r.items() if k.startswith("val_"))
      lines.append(f"{r['method']:<32}{r['C']:>4}{_f(val):>8}{_f(r['ap']):>8}{_f(r['ndcg@1']):>8}"
                   f"{_f(r['ndcg@10']):>8}{_f(r.get('clairvoyant_ap')):>10}{_f(r.get('clairvoyant_ndcg@1')):>10}")
  if results["lsh"]:
    fixed = results["config"]["lsh_clusters"]
    lines += ["", "LSH selection against exhaustive (LocalRank pca, 80% rule), fold means:",
              f"{'h':>4}{'m':>4}{'candidates':>12}{'same query':>12}{'same cluster':>14}{f'same (C={fixed})':>14}"
              f"{'fallback':>10}{'LSH ms/q':>10}{'exh. ms/q':>11}{'MAP':>8}"]
    for r in results["lsh"]:
      lines.append(f"{r['bits']:>4}{r['tables']:>4}{str(r['candidates']):>12}{_f(r['same_query'], 3):>12}"
                   f"{_f(r['same_cluster'], 3):>14}{_f(r['same_cluster_fixed_c'], 3):>14}{_f(r['fallback'], 1):>10}"
                   f"{_f(r['lsh_ms'], 3):>10}{_f(r['exhaustive_ms'], 3):>11}{_f(r['ap']):>8}")
  single = results.get("single_query")
  if single:
    r = single["clairvoyant_rank"]
    lines += ["", "One ranker per training query (Sec. 3.1, Figs. 4-5), fold means:",
              f"{'model for each test query':<32}{'MAP':>8}{'N@1':>8}"]
    for key, label in (("global", "global ranker"), ("most_similar", "most similar query's (eq. 5)"),
                       ("clairvoyant", "clairvoyant query's (bound)")):
      lines.append(f"{label:<32}{_f(single['ap'][key]):>8}{_f(single['ndcg@1'][key]):>8}")
    lines.append(f"clairvoyant query's rank by eq. 5 among about {r['median_training_queries']:.0f} training queries "
                 f"({r['test_queries']} test queries): first {r['top_1']:.1%}, top 5 {r['top_5']:.1%}, top 10% "
                 f"{r['top_10_percent']:.1%}, median {r['median']:.0f}")
  lines.append(f"\n{results['seconds']:.0f} s; load average at the end {results['load_at_end']}")
  return "\n".join(lines)


def main(config):
  workdir = cli.workdir(reporting.default_workdir(config.name), launcher="experiments.localrank")
  results = train_and_evaluate(config, workdir)
  print(format_tables(results))
  print(f"results: {os.path.join(workdir, 'results.json')}")


if __name__ == "__main__":
  cli.run(main, check=checks.check_config)
