r"""How much the order of tied items moves AP (He et al. 2018, Sec. 3.2 and Fig. 1, right; Sec. 5.2).

  python -m experiments.tie_breaking --config=configs/tie_breaking.py
  python -m experiments.tie_breaking --config=configs/tie_breaking.py:runlocal

Each of ``config.trials`` trials draws a fresh split of the dataset (``config.queries_per_class`` queries
per class retrieved against the rest, seed ``config.seed + trial``) and fits every baseline of
``config.methods`` at every code length of ``config.bits`` with that seed (the paper: LSH, 1,000 test
images, 50 trials). Per trial, each mean over the queries of

* ``tie_aware_ap``: the expectation over all orders of the tied items (He et al. eqs. 3-4);
* ``optimistic_ap`` / ``pessimistic_ap``: relevant items first / last within every tie;
* ``random_ap``: the ordinary, tie-unaware AP of one ranking, ties in a uniformly random order of the
  database drawn for the trial (a random permutation of the retrieval set, then a stable sort: the common
  practice Sec. 5.2 describes);
* ``index_ap``: the ordinary AP with ties in the database's index order.

Printed: per method and code length, each variant's median, quartiles and range over the trials, the mean gap
between optimistic and pessimistic AP, and the largest difference between ``random_ap`` and ``tie_aware_ap``
in any trial. Everything goes to ``<workdir>/results.json``; with ``config.plots``, box plots to
``<workdir>/tie_breaking.png``. The work is :func:`train_and_evaluate`.
"""

from __future__ import annotations

import os
from typing import Dict, List

import ml_collections
import numpy as np

from experiments import cli, fitting, plots, reporting, tasks
from hashjax import codes, data, evaluate, io, metrics

#: The AP variants of every trial, in the order they are printed and plotted.
VARIANTS = ("tie_aware_ap", "random_ap", "index_ap", "optimistic_ap", "pessimistic_ap")
#: The figure's file name in the workdir.
FIGURE = "tie_breaking.png"


def trial_row(method: str, num_bits: int, trial: int, features: np.ndarray, labels: np.ndarray,
              config: ml_collections.ConfigDict) -> Dict:
  """The mean of every AP variant over the queries of one trial (split, baseline and tie order of seed
  ``config.seed + trial``)."""
  seed = config.seed + trial
  split = data.retrieval_split(labels, queries_per_class=config.queries_per_class,
                               train_per_class=config.train_per_class, seed=seed)
  query_words, db_words = fitting.baseline_words(method, features, split.train, split.query, split.database,
                                                 num_bits=num_bits, seed=seed, labels=labels)
  query_labels, db_labels = labels[split.query], labels[split.database]
  table = evaluate.evaluate_codes(query_words, db_words, num_bits=num_bits, query_labels=query_labels,
                                  db_labels=db_labels)
  distances = np.asarray(codes.hamming_distance(query_words, db_words))
  relevance = query_labels[:, None] == db_labels[None, :]
  order = np.random.default_rng(seed).permutation(len(split.database))  # the trial's random tie order
  row = {"method": method, "bits": num_bits, "trial": trial, "seed": seed,
         "random_ap": float(np.nanmean(metrics.ap(distances[:, order], relevance[:, order], num_bits=num_bits))),
         "index_ap": float(np.nanmean(metrics.ap(distances, relevance, num_bits=num_bits)))}
  row.update({k: float(table[k]) for k in ("tie_aware_ap", "optimistic_ap", "pessimistic_ap")})
  return row


def summarize(rows: List[Dict]) -> List[Dict]:
  """Per (method, bits): each variant's quartiles and range over the trials, the mean optimistic-pessimistic
  gap and the largest ``|random_ap - tie_aware_ap|`` of any trial."""
  out = []
  for key in dict.fromkeys((r["method"], r["bits"]) for r in rows):
    group = [r for r in rows if (r["method"], r["bits"]) == key]
    summary = {"method": key[0], "bits": key[1], "trials": len(group)}
    for v in VARIANTS:
      values = np.array([r[v] for r in group])
      summary[v] = dict(zip(("min", "q1", "median", "q3", "max"),
                            np.percentile(values, [0, 25, 50, 75, 100]).tolist()))
    summary["gap"] = float(np.mean([r["optimistic_ap"] - r["pessimistic_ap"] for r in group]))
    summary["random_vs_tie_aware"] = float(max(abs(r["random_ap"] - r["tie_aware_ap"]) for r in group))
    out.append(summary)
  return out


def format_summary(summary: List[Dict]) -> str:
  """The printed table: median [min, max] of every variant per (method, bits)."""
  head = ["method", "bits"] + list(VARIANTS) + ["O - P (mean)", "max |random - AP_T|"]
  lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
  for s in summary:
    cells = [s["method"], str(s["bits"])]
    cells += [f"{s[v]['median']:.4f} [{s[v]['min']:.4f}, {s[v]['max']:.4f}]" for v in VARIANTS]
    cells += [f"{s['gap']:.4f}", f"{s['random_vs_tie_aware']:.4f}"]
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines)


def plot_boxes(rows: List[Dict], path: str, *, title: str) -> str:
  """Box plots of every variant over the trials: one panel per method, one group of boxes per length."""
  methods = list(dict.fromkeys(r["method"] for r in rows))
  bits = sorted({r["bits"] for r in rows})
  fig = plots.new_figure(4.5 * len(methods), 3.6)
  axes = fig.subplots(1, len(methods), squeeze=False)[0]
  width = 0.8 / len(VARIANTS)
  for ax, method in zip(axes, methods):
    for j, v in enumerate(VARIANTS):
      groups = [[r[v] for r in rows if r["method"] == method and r["bits"] == b] for b in bits]
      boxes = ax.boxplot(groups, positions=np.arange(len(bits)) + (j - (len(VARIANTS) - 1) / 2) * width,
                         widths=width * 0.9, patch_artist=True, manage_ticks=False)
      for box in boxes["boxes"]:
        box.set_facecolor(f"C{j}")
      ax.plot([], [], color=f"C{j}", linewidth=6, label=v)
    ax.set_xticks(np.arange(len(bits)), [str(b) for b in bits])
    ax.set_xlabel("bits")
    ax.set_ylabel("mean AP over the queries")
    ax.set_title(f"{title}: {method}")
  axes[-1].legend(loc="best", fontsize="small")
  return plots.save_figure(fig, path)


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> Dict:
  """Runs every (method, bits, trial) of ``config``; writes ``<workdir>/results.json`` (and the figure)."""
  if config.plots:
    plots.require_matplotlib()
  features, labels = tasks.load_dataset(config.dataset)
  features, labels = np.asarray(features, np.float32), np.asarray(labels, np.int32)
  rows = [trial_row(method, num_bits, trial, features, labels, config)
          for method in config.methods for num_bits in config.bits for trial in range(config.trials)]
  results = {"config": config.to_dict(), "rows": rows, "summary": summarize(rows)}
  io.atomic_write_json(os.path.join(workdir, "results.json"), results)
  if config.plots:
    results["figure"] = plot_boxes(rows, os.path.join(workdir, FIGURE), title=config.dataset)
  return results


def main(config):
  workdir = cli.workdir(reporting.default_workdir(config.name), launcher="experiments.tie_breaking")
  results = train_and_evaluate(config, workdir)
  print(format_summary(results["summary"]))
  print(f"results: {os.path.join(workdir, 'results.json')}")


if __name__ == "__main__":
  cli.run(main)
