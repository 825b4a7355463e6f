"""Runs every notebook in ``colab/`` headless, with the small-data switch, and checks they are stripped.

Conventions for notebooks in ``colab/`` (checked here):

* committed with outputs stripped (no outputs, ``execution_count`` null) as
  valid nbformat 4;
* ``HASHJAX_NOTEBOOK_SMALL=1`` in the environment selects a small-data run
  (the test sets it in the kernel's environment; the kernel starts in the
  repository root with it on ``PYTHONPATH``);
* the notebook ends with its key results in a JSON-friendly dict ``RESULTS``,
  which a probe cell appended by the test prints.

For ``talr_quickstart.ipynb`` the reported numbers are also recomputed from
the learned codes with independent brute-force numpy references: Hamming
distances by comparing bits, the distance histogram by counting,
optimistic/pessimistic AP by sorting, and tie-aware AP by a Monte-Carlo
average of AP over random tie orders. The paper notebooks expose codes (or
scores) in ``RESULTS`` and the same kind of reference recomputes what they
report: the kNN error of ``nair_lambdarank.ipynb`` by a vote over the 3 nearest
non-empty bins, the plain and weighted tie-aware AP of ``bit_weights.ipynb``
(weighted distances summed bit by bit), the tie-aware AP and NDCG@k of
``colgen.ipynb``, and the global ranker's MAP in ``localrank.ipynb``.

``localrank.ipynb`` reads LETOR 4.0 MQ2008 from ``$HASHJAX_MQ2008`` (default
``../shared/data/letor4_mq2008`` from the repository root); without it the
notebook sets ``RESULTS = {"small": ..., "skipped": reason}`` and its tests
skip with that reason. One test runs it against an empty folder to check that
path.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
COLAB = REPO / "colab"
NOTEBOOKS = sorted(COLAB.glob("*.ipynb"))
QUICKSTART = COLAB / "talr_quickstart.ipynb"
NAIR = COLAB / "nair_lambdarank.ipynb"
BIT_WEIGHTS = COLAB / "bit_weights.ipynb"
COLGEN = COLAB / "colgen.ipynb"
LOCALRANK = COLAB / "localrank.ipynb"
CELL_TIMEOUT = 300  # seconds per cell (nbclient's timeout)
RESULTS_TAG = "RESULTS_JSON "

# Printed after the notebook's own cells: every notebook's RESULTS.
_RESULTS_PROBE = f"""
import json as _json
print({RESULTS_TAG!r} + _json.dumps(RESULTS))
"""

# Quickstart only: the learned codes of the longest length, as bits straight from the
# mapping's logits (code bit = logit > 0), with the labels and the notebook's histogram.
_QUICKSTART_PROBE = """
_mapping, _params = models[BITS[-1]]
np.savez({path!r},
         query_bits=np.asarray(mappings.apply(_mapping, _params, x_query)) > 0,
         db_bits=np.asarray(mappings.apply(_mapping, _params, x_db)) > 0,
         y_query=np.asarray(y_query), y_db=np.asarray(y_db), hist=np.asarray(hists["talr", BITS[-1]]))
"""


def _missing_runtime() -> str | None:
  for module in ("nbformat", "nbclient", "ipykernel", "jupyter_client"):
    if importlib.util.find_spec(module) is None:
      return f"{module} is not installed (pip install -e '.[test]')"
  from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
  try:
    KernelSpecManager().get_kernel_spec("python3")
  except NoSuchKernel:
    return "no 'python3' Jupyter kernel spec (python -m ipykernel install --user)"
  return None


def _kernel_env(extra: dict | None = None) -> dict:
  env = dict(os.environ)
  env.update(extra or {})
  env["HASHJAX_NOTEBOOK_SMALL"] = "1"
  env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in [env.get("PYTHONPATH")] if p])
  env.setdefault("JAX_PLATFORMS", "cpu")
  env.pop("MPLBACKEND", None)  # let the kernel use its inline backend, so figures become outputs
  return env


def _execute(path: pathlib.Path, workdir: pathlib.Path, env: dict | None = None):
  """Executes a copy of the notebook at ``path`` plus probe cells (files in ``workdir``), with ``env`` added
  to the kernel's environment."""
  import nbformat
  from nbclient import NotebookClient
  nb = nbformat.read(path, as_version=4)
  if path.name == QUICKSTART.name:
    nb.cells.append(nbformat.v4.new_code_cell(_QUICKSTART_PROBE.format(path=str(workdir / "codes.npz"))))
  nb.cells.append(nbformat.v4.new_code_cell(_RESULTS_PROBE))
  client = NotebookClient(nb, kernel_name="python3", timeout=CELL_TIMEOUT,
                          resources={"metadata": {"path": str(REPO)}})
  client.execute(env=_kernel_env(env))  # raises CellExecutionError naming the failing cell
  return nb


@pytest.fixture(scope="module")
def run_notebook(tmp_path_factory):
  """``run(path, **env) -> (executed notebook, its probe directory)``, each (notebook, env) executed once."""
  reason = _missing_runtime()
  if reason:
    pytest.skip(reason)
  done = {}

  def run(path: pathlib.Path, **env: str):
    key = (path, tuple(sorted(env.items())))
    if key not in done:
      try:
        workdir = tmp_path_factory.mktemp(path.stem)
        done[key] = ("ok", (_execute(path, workdir, env), workdir))
      except Exception as e:  # pylint: disable=broad-except
        done[key] = ("error", e)
    status, value = done[key]
    if status == "error":
      raise value
    return value

  return run


def _outputs(nb, output_type=None):
  return [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])
          if output_type is None or o["output_type"] == output_type]


def _results(nb) -> dict:
  lines = [line for o in _outputs(nb, "stream") for line in o["text"].splitlines()
           if line.startswith(RESULTS_TAG)]
  assert len(lines) == 1, f"expected one {RESULTS_TAG.strip()} line, got {len(lines)}"
  return json.loads(lines[0][len(RESULTS_TAG):])


def _ids(paths):
  return [p.name for p in paths]


def _images(nb):
  return [o for o in _outputs(nb) if "image/png" in o.get("data", {})]


def test_colab_has_the_quickstart_and_paper_notebooks():
  for path in (QUICKSTART, NAIR, BIT_WEIGHTS, COLGEN, LOCALRANK):
    assert path in NOTEBOOKS, f"{path} is missing; found {_ids(NOTEBOOKS)}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_committed_notebook_is_stripped(path):
  raw = json.loads(path.read_text(encoding="utf-8"))
  assert raw["nbformat"] == 4, raw["nbformat"]
  code_cells = [c for c in raw["cells"] if c["cell_type"] == "code"]
  assert code_cells, f"{path.name}: no code cell"
  for i, cell in enumerate(code_cells):
    assert cell["outputs"] == [], f"{path.name}: code cell {i} has outputs"
    assert cell["execution_count"] is None, f"{path.name}: code cell {i} has an execution_count"
    assert "execution" not in cell.get("metadata", {}), f"{path.name}: code cell {i} has execution timings"
  assert raw["metadata"].get("kernelspec", {}).get("name") == "python3", raw["metadata"]
  if importlib.util.find_spec("nbformat") is not None:
    import nbformat
    nbformat.validate(nbformat.reads(path.read_text(encoding="utf-8"), as_version=4))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_runs_headless_in_small_mode(run_notebook, path):
  nb, _ = run_notebook(path)
  errors = _outputs(nb, "error")
  assert not errors, [f"{e['ename']}: {e['evalue']}" for e in errors]
  results = _results(nb)
  assert isinstance(results, dict) and results, results
  assert results.get("small") is True, "HASHJAX_NOTEBOOK_SMALL=1 did not reach the kernel"
  if "skipped" in results:  # data the notebook needs is absent (it says why)
    pytest.skip(results["skipped"])


def test_quickstart_results_and_figures(run_notebook):
  nb, _ = run_notebook(QUICKSTART)
  results = _results(nb)
  lengths = results["bits"]
  assert lengths == [16, 32], lengths
  rows = results["rows"]
  assert sorted((r["method"], r["bits"]) for r in rows) == sorted(
      (m, b) for m in ("talr", "itq", "lsh") for b in lengths)
  for r in rows:
    assert 0.0 < r["pessimistic_ap"] <= r["tie_aware_ap"] + 1e-6, r
    assert r["tie_aware_ap"] <= r["optimistic_ap"] + 1e-6 and r["optimistic_ap"] <= 1.0 + 1e-6, r
  # Two figures (AP against bits; distance histograms) rendered inline.
  images = [o for o in _outputs(nb) if "image/png" in o.get("data", {})]
  assert len(images) >= 2, f"expected 2 figures, got {len(images)}"
  # The toy example's enumeration over tie orders printed its range.
  assert any("rankings consistent with the distances" in o["text"] for o in _outputs(nb, "stream"))


def _brute_ap(distances, relevance, tie_keys):
  """Mean AP over queries of the ranking by (distance, tie_key); plain numpy sorting."""
  order = np.lexsort((tie_keys, distances), axis=-1)
  rel = np.take_along_axis(relevance, order, axis=-1).astype(np.float64)
  ranks = np.arange(1, rel.shape[-1] + 1)
  ap = np.sum(rel * np.cumsum(rel, axis=-1) / ranks, axis=-1) / rel.sum(-1)
  return ap


def test_quickstart_numbers_match_brute_force(run_notebook):
  nb, workdir = run_notebook(QUICKSTART)
  row = next(r for r in _results(nb)["rows"] if r["method"] == "talr" and r["bits"] == 32)
  f = np.load(workdir / "codes.npz")
  qb, db = f["query_bits"], f["db_bits"]
  assert qb.shape[1] == db.shape[1] == 32
  distances = (qb[:, None, :] != db[None, :, :]).sum(-1)  # [Q, N]
  relevance = (f["y_query"][:, None] == f["y_db"][None, :]).astype(np.int64)

  # The notebook's streamed histogram, by counting pairs.
  hist = np.zeros((len(qb), 33, 2), np.int64)
  for q in range(len(qb)):
    for v in (0, 1):
      hist[q, :, v] = np.bincount(distances[q][relevance[q] == v], minlength=33)
  np.testing.assert_array_equal(f["hist"], hist)

  # Relevant first (key -relevance) / last (key relevance) within each tie.
  np.testing.assert_allclose(row["optimistic_ap"], _brute_ap(distances, relevance, -relevance).mean(),
                             rtol=0, atol=2e-5)
  np.testing.assert_allclose(row["pessimistic_ap"], _brute_ap(distances, relevance, relevance).mean(),
                             rtol=0, atol=2e-5)

  # Tie-aware AP is the expectation over uniformly random tie orders: Monte Carlo.
  rng = np.random.default_rng(0)
  samples = np.array([_brute_ap(distances, relevance, rng.random(distances.shape)).mean()
                      for _ in range(64)])
  stderr = samples.std(ddof=1) / np.sqrt(len(samples))
  assert abs(row["tie_aware_ap"] - samples.mean()) <= 5 * stderr + 2e-5, (row, samples.mean(), stderr)
  # The check can tell tie-aware AP from its bounds here (ties do move AP at 32 bits).
  assert row["optimistic_ap"] - row["pessimistic_ap"] > 20 * stderr


# --------------------------------------------------------------------------- the paper notebooks


def _bits(words, num_bits):
  """``uint8[n, num_bits]`` from packed ``uint32`` words (bit j: word j // 32, shift j % 32), one bit at a time."""
  words = np.asarray(words, np.uint64)
  return np.stack([(words[:, j // 32] >> np.uint64(j % 32)) & np.uint64(1) for j in range(num_bits)],
                  axis=-1).astype(np.uint8)


def _hamming(query_bits, db_bits):
  return (query_bits[:, None, :] != db_bits[None, :, :]).sum(-1)


def _relevance(query_labels, db_labels):
  return (np.asarray(query_labels)[:, None] == np.asarray(db_labels)[None, :]).astype(np.int64)


def _brute_ndcg(distances, relevance, tie_keys, k):
  """NDCG@k of the ranking by (distance, tie_key) per query, gain 2^rel - 1, discount 1 / log2(1 + rank)."""
  order = np.lexsort((tie_keys, distances), axis=-1)
  gains = 2.0 ** np.take_along_axis(relevance, order, axis=-1).astype(np.float64) - 1.0
  discount = 1.0 / np.log2(np.arange(2, relevance.shape[-1] + 2))
  dcg = np.sum((gains * discount)[:, :k], axis=-1)
  ideal = np.sum((-np.sort(-(2.0 ** relevance.astype(np.float64) - 1.0), axis=-1) * discount)[:, :k], axis=-1)
  return dcg / ideal


def _assert_tie_aware(reported, metric, distances, relevance, *, samples=64, atol=2e-5, seed=0):
  """``reported`` is the expectation over uniformly random tie orders of ``metric(distances, relevance, keys)``,
  a mean over the queries with a relevant item: checked against a Monte-Carlo average."""
  defined = relevance.sum(-1) > 0
  d, rel = distances[defined], relevance[defined]
  rng = np.random.default_rng(seed)
  values = np.array([metric(d, rel, rng.random(d.shape)).mean() for _ in range(samples)])
  stderr = values.std(ddof=1) / np.sqrt(samples)
  assert abs(reported - values.mean()) <= 5 * stderr + atol, (reported, values.mean(), stderr)


def _brute_knn_error(distances, query_labels, db_labels, *, k):
  """Nair's relative-threshold kNN: every item in the k nearest non-empty bins votes; ties to the smallest label."""
  wrong = 0
  for q in range(len(distances)):
    cut = np.unique(distances[q])[:k][-1]
    votes = np.bincount(np.asarray(db_labels)[distances[q] <= cut], minlength=10)
    wrong += int(np.argmax(votes) != query_labels[q])
  return wrong / len(distances)


def test_nair_numbers_match_brute_force(run_notebook):
  nb, _ = run_notebook(NAIR)
  results = _results(nb)
  rows = {r["method"]: r for r in results["rows"]}
  assert set(rows) == {"lambdarank-knn", "lambdarank-ap", "ranknet", "itq", "lsh"}, sorted(rows)
  assert len(_images(nb)) >= 2, "expected the swap-delta and the error figures"
  c = results["codes"]
  bits, k = results["bits"], results["k"]
  qb, db = _bits(c["query_words"], bits), _bits(c["db_words"], bits)
  assert qb.shape[1] == bits and len(c["query_labels"]) == len(qb) and len(c["db_labels"]) == len(db)
  distances = _hamming(qb, db)
  row = rows[c["method"]]
  assert abs(row["knn_error"] - _brute_knn_error(distances, c["query_labels"], c["db_labels"], k=k)) < 1e-6, row
  _assert_tie_aware(row["tie_aware_ap"], _brute_ap, distances, _relevance(c["query_labels"], c["db_labels"]))


def test_bit_weights_numbers_match_brute_force(run_notebook):
  nb, _ = run_notebook(BIT_WEIGHTS)
  results = _results(nb)
  assert len(_images(nb)) >= 1
  check = results["check"]
  bits = check["bits"]
  w = np.asarray(check["weights"], np.float64)
  assert w.shape == (bits,) and np.all(w >= 0) and np.any(w > 0), w
  qb, db = _bits(check["query_words"], bits), _bits(check["db_words"], bits)
  relevance = _relevance(check["query_labels"], check["db_labels"])
  _assert_tie_aware(check["plain_ap"], _brute_ap, _hamming(qb, db), relevance)
  weighted = np.zeros((len(qb), len(db)))
  for j in range(bits):  # the weights of the bits where the two codes differ
    weighted += w[j] * (qb[:, None, j] != db[None, :, j])
  _assert_tie_aware(check["weighted_ap"], _brute_ap, weighted, relevance, atol=2e-4)
  assert check["weighted_ap"] > check["plain_ap"], check["weighted_ap"]


def test_colgen_numbers_match_brute_force(run_notebook):
  nb, _ = run_notebook(COLGEN)
  results = _results(nb)
  assert len(_images(nb)) >= 1
  assert {(r["method"], r["bits"]) for r in results["rows"]} == {
      (m, b) for m in ("cghash", "structhash", "itq") for b in results["bits"]}
  check = results["check"]
  qb, db = _bits(check["query_words"], check["bits"]), _bits(check["db_words"], check["bits"])
  distances, relevance = _hamming(qb, db), _relevance(check["query_labels"], check["db_labels"])
  _assert_tie_aware(check["ap"], _brute_ap, distances, relevance)
  _assert_tie_aware(check["ndcg"], lambda d, r, t: _brute_ndcg(d, r, t, check["k"]), distances, relevance)


def test_localrank_numbers_match_brute_force(run_notebook):
  nb, _ = run_notebook(LOCALRANK)
  results = _results(nb)
  if "skipped" in results:
    pytest.skip(results["skipped"])
  assert len(_images(nb)) >= 1
  check = results["check"]
  scores, labels, query_ids = (np.asarray(check[key]) for key in ("scores", "labels", "query_ids"))
  rng = np.random.default_rng(0)
  samples = []
  for _ in range(64):  # MAP over queries with a relevant document, each ranked with random tie orders
    keys = rng.random(len(scores))
    aps = []
    for q in np.unique(query_ids):
      rows = query_ids == q
      if np.any(labels[rows] >= 1):
        aps.append(_brute_ap(-scores[rows][None], (labels[rows] >= 1)[None].astype(np.int64), keys[rows][None])[0])
    samples.append(np.mean(aps))
  stderr = np.std(samples, ddof=1) / np.sqrt(len(samples))
  assert abs(check["global_map"] - np.mean(samples)) <= 5 * stderr + 2e-5, (check["global_map"], np.mean(samples))
  gap = results["localrank_minus_global_ap"]
  assert gap["low"] <= gap["mean"] <= gap["high"], gap


def test_localrank_without_data_says_why(run_notebook, tmp_path):
  nb, _ = run_notebook(LOCALRANK, HASHJAX_MQ2008=str(tmp_path))
  errors = _outputs(nb, "error")
  assert not errors, [f"{e['ename']}: {e['evalue']}" for e in errors]
  results = _results(nb)
  assert set(results) == {"small", "skipped"}, results
  assert str(tmp_path) in results["skipped"] and "S1.txt" in results["skipped"], results
  assert any("MQ2008 not found" in o["text"] for o in _outputs(nb, "stream"))
