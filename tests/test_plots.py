"""Tests of experiments.plots: curve data against brute force, the PNG files, the missing-matplotlib error."""

import json
import os
import sys

import numpy as np
import pytest

from hashjax.codes import pack_bits

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
  sys.path.insert(0, _ROOT)

from experiments import plots  # pylint: disable=g-import-not-at-top,wrong-import-position

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# ----------------------------------------------------------------------------
# Curve data.


def _brute_force_curves(query_bits, db_bits, relevant, weights=None):
  """Pair counts and mean precision / recall per radius by loops over queries and items; with ``weights``, the
  weighted distance and radius r the threshold r times the mean weight."""
  num_bits = query_bits.shape[1]
  w = [1.0] * num_bits if weights is None else list(weights)
  unit = sum(w) / num_bits
  rel_pairs, irr_pairs = [0] * (num_bits + 1), [0] * (num_bits + 1)
  dist = [[sum(wk for wk, a, b in zip(w, q, x) if a != b) / unit for x in db_bits] for q in query_bits]
  for qi, row in enumerate(dist):
    for i, d in enumerate(row):
      radius = min(r for r in range(num_bits + 1) if d <= r + 1e-9)
      if relevant[qi][i]:
        rel_pairs[radius] += 1
      else:
        irr_pairs[radius] += 1
  precision, recall = [], []
  for r in range(num_bits + 1):
    ps, rs = [], []
    for qi, row in enumerate(dist):
      total_relevant = sum(bool(v) for v in relevant[qi])
      if total_relevant == 0:
        continue
      retrieved = [i for i, d in enumerate(row) if d <= r + 1e-9]
      hits = sum(bool(relevant[qi][i]) for i in retrieved)
      rs.append(hits / total_relevant)
      if retrieved:
        ps.append(hits / len(retrieved))
    precision.append(sum(ps) / len(ps) if ps else None)
    recall.append(sum(rs) / len(rs) if rs else None)
  return rel_pairs, irr_pairs, precision, recall


def _assert_curves_equal(curves, reference):
  rel_pairs, irr_pairs, precision, recall = reference
  assert curves["relevant_pairs"] == rel_pairs and curves["irrelevant_pairs"] == irr_pairs
  for got, want in ((curves["precision"], precision), (curves["recall"], recall)):
    assert [g is None for g in got] == [w is None for w in want]
    np.testing.assert_allclose([g for g in got if g is not None], [w for w in want if w is not None], rtol=1e-12)


def test_curves_match_brute_force_with_labels_levels_and_bool_relevance():
  rng = np.random.default_rng(0)
  num_bits = 5  # 5 bits, 40 items: many ties at every distance
  query_bits = rng.integers(0, 2, (7, num_bits))
  db_bits = rng.integers(0, 2, (40, num_bits))
  db_labels = rng.integers(0, 3, 40)
  query_labels = np.array([0, 1, 2, 0, 1, 2, 9])  # the last query has no relevant item
  q, db = pack_bits(query_bits), pack_bits(db_bits)
  same = query_labels[:, None] == db_labels[None, :]
  curves = plots.distance_curves(q, db, num_bits=num_bits, query_labels=query_labels, db_labels=db_labels)
  _assert_curves_equal(curves, _brute_force_curves(query_bits, db_bits, same))
  assert curves["num_bits"] == num_bits and curves["num_queries"] == 7
  assert curves["num_queries_without_relevant"] == 1
  assert curves["recall"][-1] == 1.0  # radius b retrieves everything
  # Graded levels: every level >= 1 is relevant.
  levels = rng.integers(0, 4, (7, 40)).astype(np.int32)
  levels[2] = 0
  graded = plots.distance_curves(q, db, num_bits=num_bits, affinity=levels)
  _assert_curves_equal(graded, _brute_force_curves(query_bits, db_bits, levels > 0))
  assert graded["num_queries_without_relevant"] == 1
  as_bool = plots.distance_curves(q, db, num_bits=num_bits, affinity=same)
  assert as_bool == curves
  json.dumps(curves, allow_nan=False)  # plain JSON: lists of numbers and None, no NaN


def test_weighted_curves_match_brute_force_and_unit_weights_give_the_hamming_curves():
  rng = np.random.default_rng(1)
  num_bits = 4
  query_bits, db_bits = rng.integers(0, 2, (5, num_bits)), rng.integers(0, 2, (30, num_bits))
  relevant = rng.random((5, 30)) < 0.3
  relevant[4] = False
  d_hamming = (query_bits[:, None, :] != db_bits[None]).sum(-1)
  unit = plots.weighted_curves(d_hamming, relevant, weights=np.ones(num_bits))
  assert unit == plots.distance_curves(pack_bits(query_bits), pack_bits(db_bits), num_bits=num_bits,
                                       affinity=relevant)
  w = np.array([0.5, 2.0, 0.25, 1.25])  # mean 1: radius r keeps weighted distances <= r
  d_weighted = ((query_bits[:, None, :] != db_bits[None]) * w).sum(-1)
  curves = plots.weighted_curves(d_weighted, relevant, weights=w)
  _assert_curves_equal(curves, _brute_force_curves(query_bits, db_bits, relevant, weights=w))
  assert plots.weighted_curves(3 * d_weighted, relevant, weights=3 * w) == curves  # only the weights' ratios count
  with pytest.raises(ValueError, match="weights"):
    plots.weighted_curves(d_weighted, relevant, weights=np.zeros(num_bits))
  with pytest.raises(ValueError, match="relevance"):
    plots.weighted_curves(d_weighted, relevant[:, :5], weights=w)


def test_curves_by_hand_with_a_radius_that_retrieves_nothing():
  # Query 00 (class 0) against 11 (class 0, distance 2) and 01 (class 1, distance 1).
  curves = plots.distance_curves(pack_bits(np.array([[0, 0]])), pack_bits(np.array([[1, 1], [0, 1]])),
                                 num_bits=2, query_labels=np.array([0]), db_labels=np.array([0, 1]))
  assert curves["relevant_pairs"] == [0, 0, 1] and curves["irrelevant_pairs"] == [0, 1, 0]
  assert curves["precision"] == [None, 0.0, 0.5]
  assert curves["recall"] == [0.0, 0.0, 1.0]


def test_curve_inputs_are_checked():
  q, db = pack_bits(np.array([[0, 1]])), pack_bits(np.array([[1, 1]]))
  with pytest.raises(ValueError, match="query_labels, db_labels, affinity: .*neither"):
    plots.distance_curves(q, db, num_bits=2)
  with pytest.raises(ValueError, match="both"):
    plots.distance_curves(q, db, num_bits=2, query_labels=np.array([0]), db_labels=np.array([0]),
                          affinity=np.ones((1, 1), np.int32))
  with pytest.raises(ValueError, match="affinity"):
    plots.distance_curves(q, db, num_bits=2, affinity=-np.ones((1, 1), np.int32))
  with pytest.raises(ValueError, match=r"hist: expected int counts of shape \[Q, num_bits \+ 1, V\]"):
    plots.curves_from_histogram(np.zeros((2, 3, 1), np.int32))  # one level: no relevance
  with pytest.raises(ValueError, match="hist: expected counts >= 0"):
    plots.curves_from_histogram(-np.ones((1, 3, 2), np.int32))


# ----------------------------------------------------------------------------
# Figures.


def _entries():
  """Result rows of two methods at two code lengths, with curves, plus a row no figure uses."""
  rng = np.random.default_rng(1)
  labels = rng.integers(0, 3, 30)
  rows = []
  for bits in (4, 8):
    for method, ap in (("lsh", 0.3), ("itq", 0.5)):
      q, db = (pack_bits(rng.integers(0, 2, (n, bits))) for n in (6, 30))
      curves = plots.distance_curves(q, db, num_bits=bits, query_labels=labels[:6], db_labels=labels)
      rows.append({"method": method, "bits": bits, "tie_aware_ap": ap + bits / 100,
                   "optimistic_ap": ap + 0.1, "pessimistic_ap": ap - 0.05, "curves": curves})
  rows.append({"method": "exact-l2-3nn", "bits": "-", "knn_error": 0.1})
  return rows


def _check_png(path):
  from matplotlib import image  # pylint: disable=g-import-not-at-top
  with open(path, "rb") as f:
    assert f.read(8) == _PNG_SIGNATURE
  pixels = image.imread(path)
  assert pixels.ndim == 3 and pixels.shape[2] in (3, 4) and min(pixels.shape[:2]) >= 300
  assert pixels[..., :3].std() > 0.05  # something is drawn, not a blank canvas


def test_write_plots_from_results_json_writes_readable_pngs_and_nothing_else(tmp_path):
  pytest.importorskip("matplotlib", reason="the figures need matplotlib (pip install 'hashjax[plots]')")
  workdir = tmp_path / "run"
  workdir.mkdir()
  with open(workdir / "results.json", "w", encoding="utf-8") as f:
    json.dump({"dataset": "tiny", "rows": _entries()}, f)  # the curves survive the JSON round trip
  paths = plots.plots_from_results(str(workdir))  # write_plots of the rows, titled with the dataset
  names = ["ap_vs_bits.png", "pr_curves.png", "distance_histograms.png"]
  assert paths == [os.path.join(str(workdir), n) for n in names]
  assert sorted(os.listdir(workdir)) == sorted(names + ["results.json"])  # no temporary file left behind
  for path in paths:
    _check_png(path)
  with pytest.raises(ValueError, match="results.json: expected a results.json"):
    plots.plots_from_results(str(tmp_path / "missing"))


def test_convergence_figure_from_the_runs_histories(tmp_path, capsys):
  pytest.importorskip("matplotlib", reason="the figures need matplotlib (pip install 'hashjax[plots]')")
  for name, errors in (("lambdarank", [0.9, 0.2, 0.1]), ("ranknet", [0.9, 0.3, 0.12])):
    (tmp_path / name).mkdir()
    history = [{"kind": "eval", "step": 100 * i, "knn_error": e} for i, e in enumerate(errors)]
    history.insert(1, {"kind": "train", "step": 50, "loss": 1.0})  # training records are passed over
    with open(tmp_path / name / "results.json", "w", encoding="utf-8") as f:
      json.dump({"rows": [], "history": history}, f)
  out = tmp_path / "convergence.png"
  plots.main(["--convergence=knn_error", str(tmp_path / "lambdarank"), str(tmp_path / "ranknet"), f"--out={out}"])
  assert capsys.readouterr().out.strip() == str(out)
  _check_png(str(out))
  with pytest.raises(ValueError, match=r"histories\['x'\]: expected at least two evaluations with 'knn_error', got 1"):
    plots.plot_convergence({"x": [{"kind": "eval", "step": 0, "knn_error": 0.5}]}, str(out), metric="knn_error")
  with pytest.raises(SystemExit):  # several workdirs without --convergence
    plots.main([str(tmp_path / "lambdarank"), str(tmp_path / "ranknet")])


def test_cluster_and_rank_figures(tmp_path):
  pytest.importorskip("matplotlib", reason="the figures need matplotlib (pip install 'hashjax[plots]')")
  curves = [{"method": "pca", "C": c, "ap": 0.6 - 0.01 * c, "clairvoyant_ap": 0.6 + 0.02 * c} for c in (1, 2, 4)]
  curves += [{"method": "mean", "C": c, "ap": 0.59} for c in (1, 2, 4)]  # no bound: no dashed line
  _check_png(plots.plot_clusters(curves, str(tmp_path / "clusters.png"), metric="ap"))
  _check_png(plots.plot_rank_histogram([1, 1, 2, 7, 45], str(tmp_path / "ranks.png"), max_rank=10))
  with pytest.raises(ValueError, match="curves: expected rows with 'method', 'C' and 'ndcg@1'"):
    plots.plot_clusters(curves, str(tmp_path / "x.png"), metric="ndcg@1")
  with pytest.raises(ValueError, match="ranks: expected a non-empty list of ints >= 1"):
    plots.plot_rank_histogram([0, 2], str(tmp_path / "x.png"))
  assert not (tmp_path / "x.png").exists()


def test_figures_without_their_data_are_skipped(tmp_path):
  pytest.importorskip("matplotlib", reason="the figures need matplotlib (pip install 'hashjax[plots]')")
  rows = _entries()
  path = str(tmp_path / "x.png")
  assert plots.plot_ap_vs_bits([r for r in rows if r["bits"] == 8], path) is None  # one code length
  without_curves = [{k: v for k, v in r.items() if k != "curves"} for r in rows]
  assert plots.plot_pr_curves(without_curves, path) is None
  assert plots.plot_distance_histograms(without_curves, path) is None
  assert plots.write_plots(str(tmp_path), [rows[-1]]) == []  # a row no figure uses
  assert os.listdir(tmp_path) == []


def test_bad_entries_are_refused_before_anything_is_written(tmp_path):
  rows = _entries()
  rows[1]["curves"] = dict(rows[1]["curves"], precision=[0.5])
  with pytest.raises(ValueError, match=r"entries\[1\].curves.precision: expected a list of num_bits \+ 1 = 5"):
    plots.write_plots(str(tmp_path), rows)
  rows = _entries()
  rows[3]["method"] = "lsh"  # lsh at 8 bits twice
  with pytest.raises(ValueError, match=r"entries\[3\]: expected one row per \(method, bits\)"):
    plots.write_plots(str(tmp_path), rows)
  with pytest.raises(ValueError, match="entries: expected a list of result rows"):
    plots.write_plots(str(tmp_path), {"method": "lsh"})
  assert os.listdir(tmp_path) == []


def test_missing_matplotlib_names_the_extra(tmp_path, monkeypatch):
  monkeypatch.setitem(sys.modules, "matplotlib", None)  # what an environment without matplotlib sees
  with pytest.raises(ImportError, match=r"pip install 'hashjax\[plots\]'"):
    plots.require_matplotlib()
  with pytest.raises(ImportError, match=r"hashjax\[plots\]"):
    plots.write_plots(str(tmp_path), _entries())
  assert os.listdir(tmp_path) == []
