r"""The figures a reader of the hashing papers looks at, as PNG files in a workdir.

  python -m experiments.plots runs/baselines   # re-draws the figures of a finished run from its results.json
  python -m experiments.plots --convergence=knn_error runs/lambdarank runs/ranknet --out=convergence.png

* ``ap_vs_bits.png``: tie-aware AP against code length, one line per method, with the band between
  pessimistic and optimistic AP shaded (He et al. 2018, Fig. 1: ties shrink as codes grow);
* ``pr_curves.png``: precision against recall over the Hamming radii ``0 .. b``, one panel per code length;
* ``distance_histograms.png``: the distribution of Hamming distances of relevant and of irrelevant pairs, one
  panel per (method, code length).

The curve data (:func:`distance_curves`, JSON-friendly lists) is computed when the codes exist and stored in
the result rows, so that the figures can be re-drawn from ``results.json`` alone (:func:`plots_from_results`).
matplotlib is an optional dependency (``pip install 'hashjax[plots]'``): it is imported only by the functions
that draw, which use the object API (``Figure`` + ``FigureCanvasAgg``), so no pyplot state or global backend
is touched. Launchers call :func:`require_matplotlib` before training, so a missing matplotlib fails the run
up front rather than after it.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence

import jax
import numpy as np

from hashjax import _checks, histograms, metrics
from hashjax import io as hashjax_io

#: The pip extra that installs matplotlib.
EXTRA = "hashjax[plots]"

#: The oldest matplotlib whose object API has what the figures use (``Axes.stairs``, legends placed outside).
MIN_MATPLOTLIB = (3, 7)

#: File names of the figures, by the function that draws them.
AP_VS_BITS, PR_CURVES, DISTANCE_HISTOGRAMS = "ap_vs_bits.png", "pr_curves.png", "distance_histograms.png"

_CURVE_KEYS = ("num_bits", "relevant_pairs", "irrelevant_pairs", "precision", "recall")
_AP_KEYS = ("tie_aware_ap", "optimistic_ap", "pessimistic_ap")
_DPI = 120
_MARKERS = "osD^v<>ph*"

# --------------------------------------------------------------------------- matplotlib, optional


def require_matplotlib() -> None:
  """Raises an ImportError naming the ``plots`` extra unless a recent enough matplotlib imports.

  Launchers call it before any work when ``config.plots`` is set, so that a run does not fail after training.
  """
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(f"plots: matplotlib is not installed; install it with pip install '{EXTRA}' "
                      "(or turn the plots off with --config.plots=False)") from e
  version = tuple(int(p) for p in matplotlib.__version__.split(".")[:2] if p.isdigit())
  if version < MIN_MATPLOTLIB:
    raise ImportError(f"plots: expected matplotlib >= {'.'.join(map(str, MIN_MATPLOTLIB))}, got "
                      f"{matplotlib.__version__}; upgrade it with pip install -U '{EXTRA}'")


def new_figure(width: float, height: float):
  """A Figure with an Agg canvas of its own (no pyplot, no global backend)."""
  require_matplotlib()
  from matplotlib.backends.backend_agg import FigureCanvasAgg  # pylint: disable=g-import-not-at-top
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  fig = Figure(figsize=(width, height), layout="constrained")
  FigureCanvasAgg(fig)
  return fig


def save_figure(fig, path: str) -> str:
  """Renders ``fig`` as PNG into memory, then writes it atomically (no half-written file on a crash)."""
  buf = io.BytesIO()
  fig.savefig(buf, format="png", dpi=_DPI)
  hashjax_io.atomic_write_bytes(path, buf.getvalue())
  return path


# --------------------------------------------------------------------------- curve data


def distance_curves(query_words, db_words, *, num_bits: int, query_labels=None, db_labels=None,
                    affinity=None) -> Dict[str, Any]:
  r"""Pair counts per Hamming distance and the precision-recall curve over radii, as JSON-friendly lists.

  .. math:: P(r) = \frac{N^+_{\le r}}{N_{\le r}}, \quad R(r) = \frac{N^+_{\le r}}{N^+}, \quad r = 0 .. b

  Relevance is label agreement (``query_labels`` with ``db_labels``) or ``affinity > 0`` (an int level
  matrix, or a bool relevance matrix). The histogram is counted by
  :func:`hashjax.histograms.hamming_histogram` (no ``[Q, N]`` distance matrix with labels); the curves are
  read from it by :func:`curves_from_histogram`, which states the averaging.

  Args:
    query_words: ``uint32[Q, W]`` packed query codes.
    db_words: ``uint32[N, W]`` packed database codes.
    num_bits: the code length ``b``.
    query_labels: ``int[Q]`` class labels, with ``db_labels``.
    db_labels: ``int[N]`` class labels.
    affinity: alternatively ``int[Q, N]`` levels ``>= 0`` or ``bool[Q, N]`` relevance.

  Returns:
    the dict of :func:`curves_from_histogram`.
  """
  labels_given = query_labels is not None or db_labels is not None
  if labels_given == (affinity is not None):
    raise ValueError("query_labels, db_labels, affinity: expected labels (both query_labels and db_labels) or "
                     f"an affinity matrix, got {'both' if labels_given else 'neither'}")
  if labels_given:
    hist = histograms.hamming_histogram(query_words, db_words, num_bits=num_bits, query_labels=query_labels,
                                        db_labels=db_labels)
  else:
    if hasattr(affinity, "dtype") and np.dtype(affinity.dtype) == np.bool_:
      affinity = np.asarray(affinity, np.int32)  # relevance: True is level 1
    hist = histograms.hamming_histogram(query_words, db_words, affinity, num_bits=num_bits)
  return curves_from_histogram(np.asarray(hist))


def curves_from_histogram(hist) -> Dict[str, Any]:
  r"""Pair counts and the precision-recall curve of a Hamming ranking from its histogram ``hist[Q, b+1, V]``.

  .. math:: \bar P(r) = \mathrm{mean}_{q : N^+_q > 0,\ N_{q, \le r} > 0} \frac{N^+_{q, \le r}}{N_{q, \le r}},
     \quad \bar R(r) = \mathrm{mean}_{q : N^+_q > 0} \frac{N^+_{q, \le r}}{N^+_q}

  Levels ``v >= 1`` are relevant. Radius ``r`` retrieves the items at distance ``<= r``, so ties need no
  breaking: a whole distance bin is in or out (the curve a Hamming ranking with ties traces, one point per
  radius). Averaging: the mean over the queries that have a relevant item (the queries AP is defined for);
  at each radius, precision leaves out the queries that retrieve nothing there. The pair counts are summed
  over all queries.

  Args:
    hist: ``int[Q, b + 1, V]`` counts (``V >= 2``), e.g. from :func:`hashjax.histograms.hamming_histogram`.

  Returns:
    dict of Python numbers and lists: ``num_bits``; ``relevant_pairs`` and ``irrelevant_pairs`` (``b + 1``
    ints, pairs at each distance); ``precision`` and ``recall`` (``b + 1`` floats, one per radius; None where
    no query counts); ``num_queries``; ``num_queries_without_relevant`` (left out of the curve).
  """
  hist = np.asarray(hist)
  if hist.ndim != 3 or hist.shape[1] < 2 or hist.shape[2] < 2 or not np.issubdtype(hist.dtype, np.integer):
    raise ValueError(f"hist: expected int counts of shape [Q, num_bits + 1, V] with num_bits >= 1 and V >= 2 "
                     f"(levels >= 1 relevant), got {_checks.desc(hist)}")
  if hist.size and hist.min() < 0:
    raise ValueError(f"hist: expected counts >= 0, got a minimum of {int(hist.min())}")
  relevant, irrelevant = hist[..., 1:].sum(-1, dtype=np.int64), hist[..., 0].astype(np.int64)  # [Q, b + 1]
  with jax.enable_x64(True):
    precision, recall = metrics.precision_recall_curve_from_histogram(hist, dtype=np.float64)
  precision, recall = np.asarray(precision), np.asarray(recall)  # [Q, b + 1]
  has_relevant = ~np.isnan(recall[:, -1])
  retrieved = np.cumsum(relevant + irrelevant, axis=1)[has_relevant]
  precision, recall = precision[has_relevant], recall[has_relevant]
  counted = (retrieved > 0).sum(axis=0)  # queries with a precision at each radius
  mean_precision = np.where(retrieved > 0, precision, 0.0).sum(axis=0) / np.maximum(counted, 1)
  mean_recall = recall.sum(axis=0) / max(len(recall), 1)
  as_list = lambda values, num: [float(v) if n > 0 else None for v, n in zip(values, num)]
  return {
      "num_bits": int(hist.shape[1] - 1),
      "relevant_pairs": [int(v) for v in relevant.sum(axis=0)],
      "irrelevant_pairs": [int(v) for v in irrelevant.sum(axis=0)],
      "precision": as_list(mean_precision, counted),
      "recall": as_list(mean_recall, [len(recall)] * len(counted)),
      "num_queries": int(hist.shape[0]),
      "num_queries_without_relevant": int(np.sum(~has_relevant)),
  }


def weighted_curves(distances, relevance, *, weights) -> Dict[str, Any]:
  r"""The curves of :func:`curves_from_histogram` for a weighted Hamming ranking, at the radii ``r`` mean weights.

  .. math:: \text{radius } r \text{ retrieves } \{i : d_w(q, i) \le r \bar w\}, \quad r = 0 .. b,
     \quad \bar w = \tfrac{1}{b} \textstyle\sum_k w_k

  So the curve has one point per radius like a Hamming one (with unit weights they are the same points), and
  radius ``b`` retrieves everything. An item's radius is ``ceil(d / w_bar)`` computed with a tolerance of
  ``1e-9`` radii, so that float rounding of a distance on a threshold does not move it a radius out.

  Args:
    distances: real ``[Q, N]`` weighted Hamming distances (:func:`hashjax.codes.weighted_hamming_distance`).
    relevance: ``[Q, N]`` relevance, ``> 0`` relevant.
    weights: the ``b`` bit weights (``>= 0``, not all 0) the distances were computed with.

  Returns:
    the dict of :func:`curves_from_histogram`.
  """
  d = np.asarray(distances, np.float64)
  w = np.asarray(weights, np.float64)
  _checks.check_real("weights", w, ndim=1, shape_doc="[num_bits] of non-negative weights", nonnegative="weights")
  if not np.any(w > 0):
    raise ValueError(f"weights: expected some weight > 0, got {_checks.desc(weights)}")
  _checks.check_shape("relevance", relevance, d.shape, like="distances")
  num_bits = w.size
  radius = np.clip(np.ceil(d / np.mean(w) - 1e-9), 0, num_bits).astype(np.int64)
  relevant = (np.asarray(relevance) > 0).astype(np.int64)
  hist = np.zeros((d.shape[0], num_bits + 1, 2), np.int64)
  np.add.at(hist, (np.arange(d.shape[0])[:, None], radius, relevant), 1)
  return curves_from_histogram(hist)


# --------------------------------------------------------------------------- entries


def _check_entries(entries) -> List[Mapping]:
  """The entries as a list of mappings; each one's ``method``, ``bits`` and curve data checked where used."""
  if isinstance(entries, (str, bytes, Mapping)) or not isinstance(entries, Sequence):
    raise ValueError(f"entries: expected a list of result rows (dicts), got {type(entries).__name__}")
  seen = set()
  for i, entry in enumerate(entries):
    if not isinstance(entry, Mapping):
      raise ValueError(f"entries[{i}]: expected a dict (a result row), got {type(entry).__name__}")
    if not _used(entry):
      continue
    if not isinstance(entry.get("method"), str):
      raise ValueError(f"entries[{i}].method: expected a str, got {entry.get('method')!r}")
    _checks.check_int(f"entries[{i}].bits", entry.get("bits"))
    key = (entry["method"], int(entry["bits"]))
    if key in seen:
      raise ValueError(f"entries[{i}]: expected one row per (method, bits), got {key} twice")
    seen.add(key)
    for name in _AP_KEYS:
      if name in entry and entry[name] is not None and not isinstance(entry[name], (int, float, np.number)):
        raise ValueError(f"entries[{i}].{name}: expected a number or None, got {entry[name]!r}")
    if entry.get("curves") is not None:
      _check_curves(f"entries[{i}].curves", entry["curves"], int(entry["bits"]))
  return list(entries)


def _curve_rows(entries) -> tuple:
  """``(entries, rows)``: the checked entries, and those of them that hold curve data."""
  entries = _check_entries(entries)
  return entries, [e for e in entries if e.get("curves") is not None]


def _used(entry: Mapping) -> bool:
  """Whether a figure draws this row: it holds the AP columns or curve data (others, e.g. an exact-search
  reference row without a code length, are passed over)."""
  return all(k in entry for k in _AP_KEYS) or entry.get("curves") is not None


def _check_curves(name: str, curves, num_bits: int) -> None:
  if not isinstance(curves, Mapping) or any(k not in curves for k in _CURVE_KEYS):
    raise ValueError(f"{name}: expected the dict of distance_curves with keys {list(_CURVE_KEYS)}, got "
                     f"{sorted(curves) if isinstance(curves, Mapping) else type(curves).__name__}")
  if curves["num_bits"] != num_bits:
    raise ValueError(f"{name}.num_bits: expected the row's bits {num_bits}, got {curves['num_bits']!r}")
  for key in _CURVE_KEYS[1:]:
    values = curves[key]
    if not isinstance(values, Sequence) or len(values) != num_bits + 1:
      raise ValueError(f"{name}.{key}: expected a list of num_bits + 1 = {num_bits + 1} values, got "
                       f"{len(values) if isinstance(values, Sequence) else type(values).__name__}")


def _number(value) -> float:
  """A value as float; None and NaN as NaN (a point the figure leaves out)."""
  return math.nan if value is None else float(value)


def _styles(entries: Sequence[Mapping]) -> Dict[str, dict]:
  """One colour and marker per method, in order of first appearance, the same in every figure."""
  methods = list(dict.fromkeys(e["method"] for e in entries if _used(e)))
  return {m: {"color": f"C{i % 10}", "marker": _MARKERS[i % len(_MARKERS)]} for i, m in enumerate(methods)}


def _title(text: str, title: Optional[str]) -> str:
  return f"{title}: {text}" if title else text


def _grid(num: int):
  """``(rows, columns)`` of a wrapped grid of ``num`` panels: at most 3 columns, 2 x 2 for 4."""
  columns = 2 if num == 4 else min(num, 3)
  return -(-num // columns), columns


# --------------------------------------------------------------------------- figures


def plot_ap_vs_bits(entries: Sequence[Mapping], path: str, *, title: Optional[str] = None) -> Optional[str]:
  """Draws tie-aware AP against code length with the pessimistic-optimistic band; None with one length.

  Args:
    entries: result rows with ``method``, ``bits``, ``tie_aware_ap``, ``optimistic_ap``, ``pessimistic_ap``
      (the keys of :func:`hashjax.evaluate_codes`); rows without them are passed over.
    path: the PNG file to write.
    title: an optional prefix of the figure's title (e.g. the dataset).

  Returns:
    ``path``, or None when the rows hold fewer than two code lengths (nothing to draw against).
  """
  entries = _check_entries(entries)
  rows = [e for e in entries if all(k in e for k in _AP_KEYS)]
  lengths = sorted({int(e["bits"]) for e in rows})
  if len(lengths) < 2:
    return None
  styles = _styles(entries)
  fig = new_figure(7.6, 4.4)
  ax = fig.add_subplot()
  for method in dict.fromkeys(e["method"] for e in rows):
    points = sorted((int(e["bits"]), *(_number(e[k]) for k in _AP_KEYS)) for e in rows if e["method"] == method)
    bits, ap, optimistic, pessimistic = (np.array(v) for v in zip(*points))
    style = styles[method]
    ax.fill_between(bits, pessimistic, optimistic, color=style["color"], alpha=0.15, linewidth=0)
    for bound in (pessimistic, optimistic):  # edges, so that overlapping bands stay readable
      ax.plot(bits, bound, color=style["color"], linewidth=0.8, linestyle=":")
    ax.plot(bits, ap, color=style["color"], marker=style["marker"], label=method)
    if len(bits) == 1:  # no band to shade: the bounds as an error bar
      ax.errorbar(bits, ap, yerr=[ap - pessimistic, optimistic - ap], color=style["color"], capsize=4)
  ax.set_xscale("log", base=2)
  ax.set_xticks(lengths, [str(b) for b in lengths])
  ax.minorticks_off()
  ax.set_xlabel("code length (bits)")
  ax.set_ylabel("tie-aware AP")
  ax.grid(True, alpha=0.3)
  from matplotlib.patches import Patch  # pylint: disable=g-import-not-at-top
  handles, labels = ax.get_legend_handles_labels()
  handles.append(Patch(color="0.5", alpha=0.3, linewidth=0))
  labels.append("pessimistic to optimistic AP")
  fig.legend(handles, labels, loc="outside right upper", fontsize="small")
  ax.set_title(_title("tie-aware AP against code length", title))
  return save_figure(fig, path)


def plot_pr_curves(entries: Sequence[Mapping], path: str, *, title: Optional[str] = None) -> Optional[str]:
  """Draws precision against recall over the Hamming radii, one panel per code length, one line per method.

  Args:
    entries: result rows with ``method``, ``bits`` and ``curves`` (:func:`distance_curves`); rows without
      ``curves`` are passed over.
    path: the PNG file to write.
    title: an optional prefix of the figure's title.

  Returns:
    ``path``, or None when no row holds curve data.
  """
  entries, rows = _curve_rows(entries)
  if not rows:
    return None
  styles = _styles(entries)
  lengths = sorted({int(e["bits"]) for e in rows})
  num_rows, num_cols = _grid(len(lengths))
  fig = new_figure(1.0 + 3.6 * num_cols, 0.6 + 3.4 * num_rows)
  axes = fig.subplots(num_rows, num_cols, squeeze=False, sharey=True)
  for ax in axes.flat[len(lengths):]:
    ax.set_visible(False)
  for i, (ax, bits) in enumerate(zip(axes.flat, lengths)):
    for e in rows:
      if int(e["bits"]) != bits:
        continue
      recall = np.array([_number(v) for v in e["curves"]["recall"]])
      precision = np.array([_number(v) for v in e["curves"]["precision"]])
      keep = ~(np.isnan(recall) | np.isnan(precision))
      style = styles[e["method"]]
      ax.plot(recall[keep], precision[keep], color=style["color"], marker=style["marker"], markersize=3,
              linewidth=1.3, label=e["method"])
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(True, alpha=0.3)
    ax.set_title(f"{bits} bits")
    ax.set_xlabel("recall")
    if i % num_cols == 0:
      ax.set_ylabel("precision")
    ax.legend(fontsize="small")
  fig.suptitle(_title("precision-recall over Hamming radii 0..b", title))
  return save_figure(fig, path)


def plot_distance_histograms(entries: Sequence[Mapping], path: str, *,
                             title: Optional[str] = None) -> Optional[str]:
  """Draws the Hamming distances of relevant and of irrelevant pairs (fractions of each kind), one panel per
  (method, bits): rows are methods and columns code lengths, or a wrapped grid with one code length.

  Args:
    entries: result rows with ``method``, ``bits`` and ``curves`` (:func:`distance_curves`); rows without
      ``curves`` are passed over.
    path: the PNG file to write.
    title: an optional prefix of the figure's title.

  Returns:
    ``path``, or None when no row holds curve data.
  """
  entries, rows = _curve_rows(entries)
  if not rows:
    return None
  methods = list(dict.fromkeys(e["method"] for e in rows))
  lengths = sorted({int(e["bits"]) for e in rows})
  if len(lengths) > 1:
    num_rows, num_cols = len(methods), len(lengths)
    place = {(m, b): i * num_cols + j for i, m in enumerate(methods) for j, b in enumerate(lengths)}
  else:
    num_rows, num_cols = _grid(len(methods))
    place = {(m, lengths[0]): i for i, m in enumerate(methods)}
  fig = new_figure(0.6 + 3.4 * num_cols, 0.8 + 2.5 * num_rows)
  from matplotlib.ticker import MaxNLocator  # pylint: disable=g-import-not-at-top
  axes = fig.subplots(num_rows, num_cols, squeeze=False).flat
  used = set()
  for e in rows:
    i = place[(e["method"], int(e["bits"]))]
    used.add(i)
    ax, curves, bits = axes[i], e["curves"], int(e["bits"])
    edges = np.arange(bits + 2) - 0.5
    for key, label, color in (("relevant_pairs", "relevant pairs", "tab:blue"),
                              ("irrelevant_pairs", "irrelevant pairs", "tab:orange")):
      counts = np.asarray(curves[key], np.float64)
      fractions = counts / counts.sum() if counts.sum() > 0 else counts
      ax.stairs(fractions, edges, fill=True, alpha=0.35, color=color, label=label)
      ax.stairs(fractions, edges, color=color, linewidth=1.2)
    ax.set_xlim(edges[0], edges[-1])
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(f"{e['method']}, {bits} bits", fontsize="medium")
    ax.set_xlabel("Hamming distance")
    if i % num_cols == 0:
      ax.set_ylabel("fraction of pairs")
    ax.grid(True, alpha=0.3)
  for i, ax in enumerate(axes):
    ax.set_visible(i in used)
  handles, labels = axes[min(used)].get_legend_handles_labels()
  fig.legend(handles, labels, loc="outside lower center", ncols=2)
  fig.suptitle(_title("Hamming distances of relevant and irrelevant pairs", title))
  return save_figure(fig, path)


def plot_convergence(histories: Mapping[str, Sequence[Mapping]], path: str, *, metric: str,
                     title: Optional[str] = None) -> str:
  """Draws ``metric`` of each run's periodic evaluations against the training step (Nair et al. Fig. 4).

  Args:
    histories: ``{label: history}``, a history being a run's ``results.json`` ``"history"``: records with
      ``kind``, ``step`` and the evaluation's metrics (those of ``kind == "eval"`` are drawn).
    path: the PNG file to write.
    metric: the key drawn, e.g. ``"knn_error"`` or ``"tie_aware_ap"``.
    title: an optional prefix of the figure's title.

  Returns:
    ``path``.
  """
  if not isinstance(histories, Mapping) or not histories:
    raise ValueError(f"histories: expected a non-empty dict of label -> history, got {type(histories).__name__}")
  curves = {}
  for label, history in histories.items():
    points = sorted((int(r["step"]), float(r[metric])) for r in history
                    if isinstance(r, Mapping) and r.get("kind") == "eval" and r.get(metric) is not None)
    if len(points) < 2:
      raise ValueError(f"histories[{label!r}]: expected at least two evaluations with {metric!r}, got "
                       f"{len(points)} (train with --config.eval_every > 0)")
    curves[label] = np.array(points)
  fig = new_figure(6.4, 4.0)
  ax = fig.add_subplot()
  for i, (label, points) in enumerate(curves.items()):
    ax.plot(points[:, 0], points[:, 1], color=f"C{i % 10}", marker=_MARKERS[i % len(_MARKERS)], markersize=3,
            label=label)
  ax.set_xlabel("training step")
  ax.set_ylabel(metric)
  ax.grid(True, alpha=0.3)
  ax.legend(fontsize="small")
  ax.set_title(_title(f"{metric} during training", title))
  return save_figure(fig, path)


def plot_clusters(curves: Sequence[Mapping], path: str, *, metric: str = "ap", title: Optional[str] = None) -> str:
  """Draws a test metric against the number of clusters ``C`` (Banerjee et al. Figs. 6-8), one line per method,
  with its clairvoyant bound dashed where the rows hold one.

  Args:
    curves: rows with ``method``, ``C``, ``metric`` and optionally ``"clairvoyant_" + metric`` (the ``curves`` of
      ``experiments.localrank``'s results).
    path: the PNG file to write.
    metric: the key drawn (``"ap"``, ``"ndcg@1"``, ...).
    title: an optional prefix of the figure's title.

  Returns:
    ``path``.
  """
  methods = list(dict.fromkeys(r["method"] for r in curves if r.get(metric) is not None))
  if not methods:
    raise ValueError(f"curves: expected rows with 'method', 'C' and {metric!r}, got none")
  fig = new_figure(7.2, 4.2)
  ax = fig.add_subplot()
  for i, method in enumerate(methods):
    rows = sorted((r for r in curves if r["method"] == method), key=lambda r: r["C"])
    c = [r["C"] for r in rows]
    ax.plot(c, [_number(r[metric]) for r in rows], color=f"C{i % 10}", marker=_MARKERS[i % len(_MARKERS)],
            label=method)
    bound = [_number(r.get("clairvoyant_" + metric)) for r in rows]
    if not all(math.isnan(v) for v in bound):
      ax.plot(c, bound, color=f"C{i % 10}", linestyle="--", label=f"{method}: clairvoyant cluster")
  ax.set_xscale("log", base=2)
  sizes = sorted({r["C"] for r in curves})
  ax.set_xticks(sizes, [str(c) for c in sizes])
  ax.minorticks_off()
  ax.set_xlabel("clusters C (C = 1: the global ranker)")
  ax.set_ylabel(f"test {metric}")
  ax.grid(True, alpha=0.3)
  fig.legend(loc="outside lower center", ncols=2, fontsize="small")
  ax.set_title(_title(f"test {metric} against the number of clusters", title))
  return save_figure(fig, path)


def plot_rank_histogram(ranks: Sequence[int], path: str, *, max_rank: int = 30, title: Optional[str] = None) -> str:
  """Draws the fraction of test queries whose clairvoyant training query has each similarity rank (Banerjee et al.
  Fig. 5): ranks ``1 .. max_rank`` and one bar for every rank beyond.

  Args:
    ranks: the ranks (``>= 1``), one per test query.
    path: the PNG file to write.
    max_rank: the last rank with a bar of its own.
    title: an optional prefix of the figure's title.

  Returns:
    ``path``.
  """
  r = np.asarray(ranks)
  if r.ndim != 1 or not r.size or not np.issubdtype(r.dtype, np.integer) or r.min() < 1:
    raise ValueError(f"ranks: expected a non-empty list of ints >= 1, got {_checks.desc(r)}")
  counts = np.bincount(np.minimum(r, max_rank + 1), minlength=max_rank + 2)[1:] / r.size
  fig = new_figure(7.2, 3.6)
  ax = fig.add_subplot()
  ax.bar(np.arange(1, max_rank + 2), counts, color="C0")
  ticks = [v for v in (1, 5, 10, 20, 30, 40, 50) if v <= max_rank - 3]  # room for the last bar's label
  ax.set_xticks(ticks + [max_rank + 1], [str(v) for v in ticks] + [f">{max_rank}"])
  ax.set_xlabel("rank of the clairvoyant training query by eq. 5 similarity")
  ax.set_ylabel("fraction of test queries")
  ax.grid(True, axis="y", alpha=0.3)
  ax.set_title(_title("where the similarity ranks the best single-query model", title))
  return save_figure(fig, path)


def write_plots(workdir: str, entries: Sequence[Mapping], *, title: Optional[str] = None) -> List[str]:
  """Writes every figure the rows allow into ``workdir``; returns the paths written.

  ``ap_vs_bits.png`` needs rows with the AP columns at two code lengths or more; ``pr_curves.png`` and
  ``distance_histograms.png`` need rows with ``curves`` (:func:`distance_curves`). Rows that hold neither
  are passed over. Each file is written atomically.

  Args:
    workdir: the directory (created if missing).
    entries: result rows (dicts with ``method``, ``bits``, the AP columns, optional ``curves``).
    title: an optional prefix of the figures' titles (e.g. the dataset).

  Returns:
    the paths written, in the order ``ap_vs_bits``, ``pr_curves``, ``distance_histograms``.
  """
  entries = _check_entries(entries)
  if not isinstance(workdir, (str, os.PathLike)):
    raise ValueError(f"workdir: expected a directory path, got {type(workdir).__name__}")
  if title is not None and not isinstance(title, str):
    raise ValueError(f"title: expected a str or None, got {type(title).__name__}")
  require_matplotlib()
  written = []
  for draw, name in ((plot_ap_vs_bits, AP_VS_BITS), (plot_pr_curves, PR_CURVES),
                     (plot_distance_histograms, DISTANCE_HISTOGRAMS)):
    path = draw(entries, os.path.join(workdir, name), title=title)
    if path is not None:
      written.append(path)
  return written


def _read_results(workdir: str) -> Dict:
  """``<workdir>/results.json`` as a dict with a list of ``rows``, or a ValueError naming the file."""
  path = os.path.join(workdir, "results.json")
  try:
    with open(path, encoding="utf-8") as f:
      results = json.load(f)
  except (OSError, ValueError) as e:
    raise ValueError(f"{path}: expected a results.json written by an experiment, could not read it: {e}") from e
  if not isinstance(results, dict) or not isinstance(results.get("rows"), list):
    raise ValueError(f"{path}: expected a JSON object with a list of 'rows', got {type(results).__name__}")
  return results


def plots_from_results(workdir: str) -> List[str]:
  """Re-draws the figures of a finished run from ``<workdir>/results.json`` (its ``rows``); returns the paths."""
  results = _read_results(workdir)
  title = results.get("dataset") or (results.get("config") or {}).get("name")
  return write_plots(workdir, results["rows"], title=title)


def main(argv: Optional[Sequence[str]] = None) -> None:
  parser = argparse.ArgumentParser(prog="python -m experiments.plots",
                                   description="Re-draws the PNG figures of a run from <workdir>/results.json; "
                                   "with --convergence, one metric of several runs against the training step.")
  parser.add_argument("workdirs", nargs="+", metavar="workdir", help="a run's output directory (holding results.json)")
  parser.add_argument("--convergence", metavar="METRIC",
                      help="draw METRIC (e.g. knn_error) of every run's periodic evaluations into --out")
  parser.add_argument("--out", help="--convergence's PNG file (default: <first workdir>/convergence.png)")
  args = parser.parse_args(argv)
  if not args.convergence and (len(args.workdirs) > 1 or args.out):
    parser.exit(2, "error: several workdirs and --out go with --convergence\n")
  try:
    if args.convergence:
      histories = {os.path.basename(os.path.normpath(w)): _read_results(w).get("history") or [] for w in args.workdirs}
      out = args.out or os.path.join(args.workdirs[0], "convergence.png")
      paths = [plot_convergence(histories, out, metric=args.convergence)]
    else:
      paths = plots_from_results(args.workdirs[0])
  except (ImportError, ValueError) as e:
    parser.exit(1, f"error: {e}\n")
  for path in paths:
    print(path)
  if not paths:
    print(f"no figure to draw: the rows of {args.workdirs[0]}/results.json hold no curve data and fewer than "
          "two code lengths")


if __name__ == "__main__":
  main()
