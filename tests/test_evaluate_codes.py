"""experiments/evaluate_codes.py: codes made elsewhere, the tie-aware table beside DeepHash-pytorch's mAP@k.

References: every tie order enumerated (the range of DeepHash's AP@k), a loop written after DeepHash-pytorch's
CalcTopMap (its argsort value), and hashjax.metrics on the full distance and relevance matrices (multi-hot).
"""

import io
import itertools
import json
import os
import sys
import zipfile

from absl import flags
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

from experiments import evaluate_codes as ec  # noqa: E402
from hashjax import codes, metrics  # noqa: E402

BITS, Q, N, TOPK = 6, 12, 60, 20


def _data(seed=0, *, multi_hot=False):
  """±1 float32 codes of 6 bits (7 distances for 60 items: many ties) and their labels."""
  rng = np.random.default_rng(seed)
  q = np.where(rng.random((Q, BITS)) < 0.5, -1, 1).astype(np.float32)
  x = np.where(rng.random((N, BITS)) < 0.5, -1, 1).astype(np.float32)
  if multi_hot:
    ql, xl = (rng.random((Q, 4)) < 0.3).astype(np.int8), (rng.random((N, 4)) < 0.3).astype(np.int8)
    ql[0] = 0  # a query without a relevant item
  else:
    ql, xl = rng.integers(0, 3, Q), rng.integers(0, 3, N)
  return {"query_codes": q, "db_codes": x, "query_labels": ql, "db_labels": xl}


def _save(tmp_path, name, data):
  path = str(tmp_path / f"{name}.npz")
  np.savez(path, **data)
  return path


def _calc_top_map(q, x, ql, xl, topk):
  """DeepHash-pytorch's CalcTopMap, rewritten as a loop (labels as one-hot / multi-hot rows)."""
  total = 0
  for i in range(len(q)):
    gnd = (np.dot(ql[i, :], xl.T) > 0).astype(np.float32)
    ind = np.argsort(0.5 * (x.shape[1] - np.dot(q[i, :], x.T)))
    top = gnd[ind][:topk]
    found = 0
    precisions = []
    for rank, rel in enumerate(top, start=1):
      if rel == 1:
        found += 1
        precisions.append(found / rank)
    if found:
      total = total + np.mean(np.array(precisions))
  return total / len(q)


def _ap_at_k(rel, k):
  """DeepHash's AP@k of one ranked relevance list: mean precision at the relevant ranks <= k, 0 when none."""
  hits, s = 0, 0.0
  for t, r in enumerate(rel[:k], start=1):
    if r:
      hits += 1
      s += hits / t
  return s / hits if hits else 0.0


def test_deephash_ap_ties_is_the_mean_max_and_min_over_every_tie_order():
  rng = np.random.default_rng(1)
  for _ in range(12):
    n = rng.integers(0, 5, size=4)
    p = np.array([rng.integers(0, m + 1) for m in n])
    hist = np.stack([n - p, p], -1)[None]
    for k in (1, 3, 5, int(n.sum()) + 2):
      # Every order of a tie gives each placement of its relevant items equally often.
      placements = [list(itertools.combinations(range(m), r)) for m, r in zip(n, p)]
      values = []
      for choice in itertools.product(*placements):
        rel = [int(j in c) for m, c in zip(n, choice) for j in range(m)]
        values.append(_ap_at_k(rel, k))
      mean, best, worst = (v[0] for v in ec.deephash_ap_ties(hist, k=k))
      np.testing.assert_allclose([mean, best, worst], [np.mean(values), max(values), min(values)], atol=1e-12)
      assert worst <= mean <= best


def _launch(argv, monkeypatch, capsys):
  """Runs the command in-process: (exit status, stdout, stderr)."""
  monkeypatch.setattr(sys, "argv", ["evaluate_codes", *argv])
  try:
    ec.launch()
    code = 0
  except SystemExit as e:
    code = e.code or 0
  finally:
    flags.FLAGS.unparse_flags()
  out = capsys.readouterr()
  return code, out.out, out.err


def test_the_command_prints_the_table_and_the_deephash_range(tmp_path, monkeypatch, capsys):
  data = _data()
  path = _save(tmp_path, "codes", data)
  code, out, err = _launch([f"--codes={path}", f"--topk={TOPK}", f"--workdir={tmp_path / 'run'}"],
                           monkeypatch, capsys)
  assert code == 0, err
  assert "mAP@20 by DeepHash-pytorch's CalcTopMap formula" in out and "tie_aware_ap" in out
  with open(tmp_path / "run" / "results.json") as f:
    result = json.load(f)
  d, t = result["deephash"], result["tie_aware"]
  one_hot = lambda y: np.eye(3)[y]
  reference = _calc_top_map(data["query_codes"], data["db_codes"], one_hot(data["query_labels"]),
                            one_hot(data["db_labels"]), TOPK)
  assert d["argsort"] == pytest.approx(reference, abs=1e-12)
  assert d["pessimistic"] <= d["argsort"] <= d["optimistic"]
  assert d["pessimistic"] <= d["tie_aware"] <= d["optimistic"]
  assert d["optimistic"] - d["pessimistic"] > 0.05  # the ties matter here
  assert t["pessimistic_ap"] <= t["tie_aware_ap"] <= t["optimistic_ap"]
  code, out, err = _launch([f"--codes={path}", "--workdir="], monkeypatch, capsys)  # not "no workdir"
  assert (code, out, err.strip()) == (2, "", "error: --workdir: expected a directory, got an empty string (leave "
                                             "the flag out for the launcher's default)")


def test_pm1_01_packed_and_one_hot_inputs_give_the_same_results(tmp_path):
  data = _data()
  bits01 = (data["query_codes"] > 0).astype(np.int8), (data["db_codes"] > 0).astype(np.int8)
  words = np.asarray(codes.pack_bits(bits01[0])), np.asarray(codes.pack_bits(bits01[1]))
  variants = {
      "pm1": ({}, {}),
      "01": ({"query_codes": bits01[0], "db_codes": bits01[1].astype(bool)}, {}),
      "packed_key": ({"query_codes": words[0], "db_codes": words[1], "num_bits": np.int64(BITS)}, {}),
      "packed_flag": ({"query_codes": words[0], "db_codes": words[1]}, {"num_bits": BITS}),
      "one_hot": ({"query_labels": np.eye(3)[data["query_labels"]], "db_labels": np.eye(3)[data["db_labels"]]}, {}),
      # relevance is equality of classes: labels beyond int32 (and unsigned) give the same table
      "wide_labels": ({"query_labels": data["query_labels"] * 2**32 + 2**40,
                       "db_labels": data["db_labels"] * 2**32 + 2**40}, {}),
      "uint64_labels": ({"query_labels": data["query_labels"].astype(np.uint64) * 2**61,
                         "db_labels": data["db_labels"].astype(np.uint64) * 2**61}, {}),
  }
  results = {}
  for name, (change, options) in variants.items():
    result = ec.evaluate_file(_save(tmp_path, name, {**data, **change}), topk=TOPK, **options)
    results[name] = {key: value for key, value in result.items() if key not in ("codes", "labels")}
  for name in variants:
    assert results[name] == results["pm1"], name


def test_codes_of_only_ones_match_either_encoding(tmp_path):
  """A 1 is the same bit in {-1, 1} and {0, 1} codes: queries of only 1s go with either kind of database."""
  data = _data(4)
  data["query_codes"] = np.ones_like(data["query_codes"])
  pm1 = ec.evaluate_file(_save(tmp_path, "pm1", data), topk=TOPK)
  bits01 = ec.evaluate_file(_save(tmp_path, "01", {**data, "db_codes": (data["db_codes"] > 0).astype(np.int8)}),
                            topk=TOPK)
  assert {k: v for k, v in pm1.items() if k != "codes"} == {k: v for k, v in bits01.items() if k != "codes"}
  # every query is at distance (number of -1s) from an item: DeepHash's loop on the same codes
  reference = _calc_top_map(data["query_codes"], data["db_codes"], np.eye(3)[data["query_labels"]],
                            np.eye(3)[data["db_labels"]], TOPK)
  assert pm1["deephash"]["argsort"] == pytest.approx(reference, abs=1e-12)


def test_at_k_equal_to_n_deephash_ap_is_the_whole_ranking_ap_and_its_bounds(tmp_path):
  c = ec.load_codes(_save(tmp_path, "codes", _data(3)))
  d, t = ec.deephash_map(c, topk=N + 5), ec.tie_aware_table(c, k=N)  # topk clamped to N
  assert d["k"] == N
  for key, ours in (("tie_aware_ap", "tie_aware"), ("optimistic_ap", "optimistic"), ("pessimistic_ap", "pessimistic")):
    # Every query here has a relevant item: DeepHash's mean over all queries is the mean over defined ones.
    assert t["num_undefined_ap"] == 0 and d[ours] == pytest.approx(t[key], abs=1e-5), key


def test_multi_hot_labels_match_the_metrics_on_the_full_matrices(tmp_path):
  data = _data(2, multi_hot=True)
  c = ec.load_codes(_save(tmp_path, "multi", data))
  assert c.multi_hot
  table = ec.tie_aware_table(c, k=TOPK, block_cells=5 * N)  # blocks of 5 queries
  d = ec.deephash_map(c, topk=TOPK)
  bits = lambda a: (a > 0).astype(np.int64)
  dist = (bits(data["query_codes"])[:, None, :] != bits(data["db_codes"])[None, :, :]).sum(-1)
  rel = (data["query_labels"] @ data["db_labels"].T > 0).astype(np.int32)
  for key, fn in (("tie_aware_ap", metrics.tie_aware_ap), ("optimistic_ap", metrics.optimistic_ap),
                  ("pessimistic_ap", metrics.pessimistic_ap), ("tie_aware_ndcg", metrics.tie_aware_ndcg)):
    assert table[key] == pytest.approx(np.nanmean(np.asarray(fn(dist, rel, num_bits=BITS), np.float64)), abs=1e-5), key
  p_at_k = metrics.tie_aware_precision_at_k(dist, rel, num_bits=BITS, k=TOPK)
  assert table["tie_aware_precision_at_k"] == pytest.approx(float(np.mean(p_at_k)), abs=1e-5)
  assert table["num_undefined_ap"] == int(np.sum(rel.sum(1) == 0)) >= 1
  reference = _calc_top_map(data["query_codes"], data["db_codes"], data["query_labels"], data["db_labels"], TOPK)
  assert d["argsort"] == pytest.approx(reference, abs=1e-12)
  assert d["pessimistic"] <= d["tie_aware"] <= d["optimistic"]


def _bad(data):
  """Each bad input: (changes to the npz or None to drop a key, extra flags, words the error must hold)."""
  q, x = data["query_codes"], data["db_codes"]
  return {
      "missing_key": ({"db_labels": None}, [], ["no key db_labels", "expected keys"]),
      "widths": ({"db_codes": x[:, :4]}, [], ["db_codes", "expected 6 columns"]),
      "not_codes": ({"query_codes": q * 0.5}, [], ["query_codes", "got the value", "0.5"]),
      "mixed": ({"db_codes": np.where(x > 0, 1, 0).astype(np.int8)}, [], ["db_codes", "{-1, 1}", "got 0"]),
      "label_length": ({"query_labels": data["query_labels"][:-1]}, [], ["query_labels", "expected 12 labels",
                                                                        "(11,)"]),
      "packed_no_bits": ({"query_codes": np.asarray(codes.pack_bits((q > 0).astype(np.int8))),
                          "db_codes": np.asarray(codes.pack_bits((x > 0).astype(np.int8)))}, [],
                         ["--num_bits or a num_bits key"]),
      "topk": ({}, ["--topk=0"], ["--topk", "got 0"]),
      "uint64_labels": ({"db_labels": data["db_labels"].astype(np.uint64) + 2**63}, [],
                        ["db_labels", "within int64"]),
      "packed_db_only": ({"db_codes": np.asarray(codes.pack_bits((x > 0).astype(np.int8)))}, [f"--num_bits={BITS}"],
                         ["query_codes: expected packed uint32 words like db_codes", "float32"]),
      "object_array": ({"query_labels": np.array([[0]] * (Q - 1) + [[0, 1]], dtype=object)}, [],
                       ["query_labels", "object array"]),
      "sign_of_zero": ({"query_codes": np.where(np.arange(BITS) == 0, 0, q)}, [], ["query_codes", "a sign of 0"]),
      "no_relevant": ({"query_labels": data["query_labels"] + 7}, [], ["query_labels, db_labels",
                                                                     "at least one query with a relevant"]),
      "topk_negative": ({}, ["--topk=-2"], ["--topk", "or -1", "got -2"]),
      "int_not_packed": ({"query_codes": np.asarray(codes.pack_bits((q > 0).astype(np.int8))).astype(np.int64),
                          "db_codes": np.asarray(codes.pack_bits((x > 0).astype(np.int8))).astype(np.int64)}, [],
                         ["query_codes", "packed words must be uint32"]),
      "int_packed_with_bits": ({"query_codes": np.asarray(codes.pack_bits((q > 0).astype(np.int8))).astype(np.int32),
                                "db_codes": np.asarray(codes.pack_bits((x > 0).astype(np.int8))).astype(np.int32)},
                               [f"--num_bits={BITS}"], ["num_bits", "packed words must be uint32, not int32"]),
      "int_codes_wrong_bits": ({"query_codes": q.astype(np.int64), "db_codes": x.astype(np.int64)},
                               [f"--num_bits={BITS + 1}"], [f"num_bits: expected the codes' {BITS} columns, got "
                                                            f"{BITS + 1}"]),  # ±1 codes: no hint about words
  }


@pytest.mark.parametrize("case", list(_bad(_data())))
def test_each_bad_input_is_one_error_line_with_status_2(case, tmp_path, monkeypatch, capsys):
  data = _data()
  change, extra, words = _bad(data)[case]
  data = {k: v for k, v in {**data, **change}.items() if v is not None}
  code, out, err = _launch([f"--codes={_save(tmp_path, case, data)}", *extra], monkeypatch, capsys)
  lines = [line for line in err.splitlines() if line.strip()]
  assert code == 2 and "Traceback" not in err + out, err
  assert len(lines) == 1 and lines[0].startswith("error: "), err
  for word in words:
    assert word in lines[0], (word, lines[0])


def test_a_file_that_is_not_an_npz_of_arrays_is_one_error_line(tmp_path, monkeypatch, capsys):
  good = _save(tmp_path, "good", _data())
  with open(good, "rb") as f:
    body = f.read()
  files = {"empty": b"", "truncated": body[:100], "corrupt": body[:200] + bytes([body[200] ^ 0xFF]) + body[201:]}
  paths = {}
  for name, content in files.items():
    paths[name] = str(tmp_path / f"{name}.npz")
    with open(paths[name], "wb") as f:
      f.write(content)
  data = _data()
  np.savez_compressed(tmp_path / "packed.npz", **data)
  with open(tmp_path / "packed.npz", "rb") as f:
    packed = bytearray(f.read())
  packed[120] ^= 0xFF  # inside the first member's compressed data
  for name, change in (("not_npy", lambda b: b"garbage" + b[7:]), ("short", lambda b: b[:-40])):
    paths[name] = str(tmp_path / f"{name}.npz")
    with zipfile.ZipFile(paths[name], "w") as z:
      for key, value in data.items():
        buffer = io.BytesIO()
        np.save(buffer, value)
        z.writestr(key + ".npy", change(buffer.getvalue()) if key == "db_labels" else buffer.getvalue())
  paths["compressed"] = str(tmp_path / "compressed.npz")
  with open(paths["compressed"], "wb") as f:
    f.write(bytes(packed))
  paths["npy"] = str(tmp_path / "array.npy")
  np.save(paths["npy"], np.array([[1, 2], [3, 4]]))
  paths["directory"] = str(tmp_path)
  for name, path in paths.items():
    code, out, err = _launch([f"--codes={path}"], monkeypatch, capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and "Traceback" not in err + out, (name, err)
    assert len(lines) == 1 and lines[0].startswith(f"error: --codes={path}: "), (name, err)
  assert "got a directory" in lines[0]


def test_topk_minus_one_is_deephash_pytorchs_every_item_but_the_last(tmp_path):
  data = _data(5)
  result = ec.evaluate_file(_save(tmp_path, "codes", data), topk=-1)
  assert result["deephash"]["k"] == result["tie_aware"]["k"] == N - 1
  one_hot = lambda y: np.eye(3)[y]
  reference = _calc_top_map(data["query_codes"], data["db_codes"], one_hot(data["query_labels"]),
                            one_hot(data["db_labels"]), -1)  # DeepHash's own slice [0:-1]
  assert result["deephash"]["argsort"] == pytest.approx(reference, abs=1e-12)
