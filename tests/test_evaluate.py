"""hashjax.evaluate.evaluate_codes against pair loops and He et al.'s eqs. 3-4 summed rank by rank."""

import jax
import numpy as np
import pytest

from brute_force import bound_ap_direct, eq3_direct, eq4_direct, precision_at_k_direct
from hashjax import codes
from hashjax import evaluate
from hashjax import metrics

NAN = float("nan")


def _close(got, want, tol):
  return np.isnan(want) and np.isnan(got) or abs(got - want) <= tol


def _expected(d, rel, radius, k):
  """Every number of evaluate_codes from distances d[Q, N] and relevance rel[Q, N] (0/1)."""
  nq, num_bits = d.shape[0], int(d.max(initial=0))
  hist = np.stack([np.bincount(d[i] * 2 + rel[i], minlength=2 * (num_bits + 1)).reshape(-1, 2) for i in range(nq)])
  inside = [d[i] <= radius for i in range(nq)]
  return {
      "tie_aware_ap": np.nanmean([eq3_direct(h) for h in hist]),
      "tie_aware_ndcg": np.nanmean([eq4_direct(h) for h in hist]),
      "optimistic_ap": np.nanmean([bound_ap_direct(h, True) for h in hist]),
      "pessimistic_ap": np.nanmean([bound_ap_direct(h, False) for h in hist]),
      "precision_at_radius": np.mean([rel[i][inside[i]].mean() if inside[i].any() else 0.0 for i in range(nq)]),
      "num_empty_at_radius": int(sum(not inside[i].any() for i in range(nq))),
      "recall_at_radius": np.nanmean([rel[i][inside[i]].sum() / rel[i].sum() if rel[i].sum() else NAN
                                      for i in range(nq)]),
      "tie_aware_precision_at_k": np.mean([precision_at_k_direct(h, k) for h in hist]),
      "num_undefined_ap": int(sum(rel[i].sum() == 0 for i in range(nq))),
      "num_undefined_ndcg": int(sum(rel[i].sum() == 0 for i in range(nq))),
      "num_queries": nq, "num_db": d.shape[1], "radius": radius, "k": k,
  }


def test_evaluate_codes_matches_direct_formulas():
  rng = np.random.default_rng(8)
  num_bits, nq, ndb = 12, 9, 300
  ql, xl = rng.integers(0, 3, nq), rng.integers(0, 3, ndb)
  protos = rng.integers(0, 2, size=(3, num_bits))
  qb = protos[ql] ^ (rng.random((nq, num_bits)) < 0.2)
  xb = protos[xl] ^ (rng.random((ndb, num_bits)) < 0.2)
  qw, xw = codes.pack_bits(qb), codes.pack_bits(xb)
  ql[0] = 7  # no relevant item
  rel = (ql[:, None] == xl[None, :]).astype(int)
  d = np.array([[int((qb[i] != xb[j]).sum()) for j in range(ndb)] for i in range(nq)])  # pair loop
  want = _expected(d, rel, radius=2, k=50)
  assert want["num_undefined_ap"] == 1
  with jax.enable_x64(True):
    out = evaluate.evaluate_codes(qw, xw, num_bits=num_bits, query_labels=ql, db_labels=xl, radius=2, k=50)
    out_rel = evaluate.evaluate_codes(qw, xw, num_bits=num_bits, relevance=rel, radius=2, k=50, chunk_size=64)
  assert set(out) == set(want) == set(out_rel)
  for key, val in want.items():
    assert _close(out[key], val, 1e-12), key
    assert _close(out_rel[key], val, 1e-12), key
  # float32 (default mode) agrees to 1e-6.
  out32 = evaluate.evaluate_codes(qw, xw, num_bits=num_bits, query_labels=ql, db_labels=xl, radius=2, k=50)
  for key, val in want.items():
    assert abs(out32[key] - val) <= 1e-6, key
  # Multi-level affinity: NDCG uses the levels, AP counts levels >= 1 as relevant.
  aff = rng.integers(0, 3, size=(nq, ndb))
  hist3 = np.stack([np.bincount(d[i] * 3 + aff[i], minlength=3 * (num_bits + 1)).reshape(-1, 3)
                    for i in range(nq)])
  with jax.enable_x64(True):
    out_aff = evaluate.evaluate_codes(qw, xw, num_bits=num_bits, affinity=aff)
    out_at10 = evaluate.evaluate_codes(qw, xw, num_bits=num_bits, affinity=aff, ndcg_k=10)
  assert _close(out_aff["tie_aware_ndcg"], np.nanmean([eq4_direct(h) for h in hist3]), 1e-12)
  # ndcg_k: NDCG@10, the discounts of ranks 1..10 summed rank by rank.
  assert _close(out_at10["tie_aware_ndcg"], np.nanmean([eq4_direct(h, 10) for h in hist3]), 1e-12)
  assert abs(out_at10["tie_aware_ndcg"] - out_aff["tie_aware_ndcg"]) > 1e-3
  with pytest.raises(ValueError, match="ndcg_k"):
    evaluate.evaluate_codes(qw, xw, num_bits=num_bits, affinity=aff, ndcg_k=0)
  assert _close(out_aff["tie_aware_ap"], np.nanmean([eq3_direct(h) for h in hist3]), 1e-12)


def test_evaluate_codes_of_a_large_call_matches_direct_formulas():
  # Over 2^22 query-item pairs with labels: whichever kernel the library picks for a large call.
  rng = np.random.default_rng(3)
  num_bits, nq, ndb = 32, 64, 66000
  ql, xl = rng.integers(0, 10, nq), rng.integers(0, 10, ndb)
  protos = rng.integers(0, 2, size=(10, num_bits))
  qb = protos[ql] ^ (rng.random((nq, num_bits)) < 0.25)
  xb = protos[xl] ^ (rng.random((ndb, num_bits)) < 0.25)
  qw, xw = codes.pack_bits(qb), codes.pack_bits(xb)
  ql[:2] = 11  # no relevant item
  d = np.bitwise_count(np.asarray(qw)[:, None, 0] ^ np.asarray(xw)[None, :, 0]).astype(np.int64)
  want = _expected(d, (ql[:, None] == xl[None, :]).astype(np.int64), radius=3, k=500)
  with jax.enable_x64(True):
    out = evaluate.evaluate_codes(qw, xw, num_bits=num_bits, query_labels=ql, db_labels=xl, radius=3, k=500)
  for key, val in want.items():
    assert _close(out[key], val, 1e-12), key


def test_evaluate_codes_counts_only_the_first_num_db_rows():
  # The rows past num_db copy the queries (distance 0, the first query's label): counted, they would change
  # every metric; left out, the numbers are those of the real rows.
  rng = np.random.default_rng(5)
  num_bits, nq, ndb, pad = 40, 6, 50, 3
  qb, xb = rng.integers(0, 2, (nq, num_bits)), rng.integers(0, 2, (ndb, num_bits))
  ql, xl = rng.integers(0, 3, nq), rng.integers(0, 3, ndb)
  qw, xw = codes.pack_bits(qb), codes.pack_bits(np.concatenate([xb, qb[:pad]]))
  rel = (ql[:, None] == xl[None, :]).astype(int)
  d = np.array([[int((qb[i] != xb[j]).sum()) for j in range(ndb)] for i in range(nq)])  # pair loop
  want = _expected(d, rel, radius=8, k=10)
  with jax.enable_x64(True):
    by_labels = evaluate.evaluate_codes(qw, xw, num_bits=num_bits, query_labels=ql, db_labels=xl, radius=8, k=10,
                                        num_db=ndb)
    by_relevance = evaluate.evaluate_codes(qw, xw, num_bits=num_bits, relevance=rel, radius=8, k=10, num_db=ndb)
    padded = evaluate.evaluate_codes(qw, xw, num_bits=num_bits, query_labels=ql,
                                     db_labels=np.concatenate([xl, ql[:pad]]), radius=8, k=10)
  for key, val in want.items():
    assert _close(by_labels[key], val, 1e-12), key
    assert _close(by_relevance[key], val, 1e-12), key
  assert by_labels["num_db"] == ndb and padded["num_db"] == ndb + pad
  assert padded["tie_aware_ap"] > by_labels["tie_aware_ap"] + 1e-3  # the copies would count
  with pytest.raises(ValueError, match=r"db_labels.*\[num_db\]"):
    evaluate.evaluate_codes(qw, xw, num_bits=num_bits, query_labels=ql, db_labels=np.concatenate([xl, ql[:pad]]),
                            num_db=ndb)


_Q4 = codes.pack_bits(np.ones((2, 4)))
_X4 = codes.pack_bits(np.ones((3, 4)))


@pytest.mark.parametrize("call,argname", [
    (lambda: evaluate.evaluate_codes(_Q4, np.full((3, 1), 255, np.uint32), num_bits=4,
                                     query_labels=np.zeros(2, int), db_labels=np.zeros(3, int)), "db_words"),
    (lambda: evaluate.evaluate_codes(_Q4, _X4, num_bits=4), "relevance"),
    (lambda: evaluate.evaluate_codes(_Q4, _X4, num_bits=4, query_labels=np.array([0, 1])), "db_labels"),
    (lambda: evaluate.evaluate_codes(_Q4, _X4, num_bits=4, query_labels=np.array([0, 1]),
                                     db_labels=np.array([0, 1])), "db_labels"),
    (lambda: evaluate.evaluate_codes(_Q4, _X4, num_bits=4, relevance=np.full((2, 3), 2)), "relevance"),
    (lambda: evaluate.evaluate_codes(_Q4, _X4, num_bits=4, affinity=-np.ones((2, 3), int)), "affinity"),
    (lambda: evaluate.evaluate_codes(_Q4, _X4, num_bits=40, relevance=np.ones((2, 3), int)), "num_bits"),
    (lambda: evaluate.evaluate_codes(_Q4, _X4, num_bits=4, relevance=np.ones((2, 3), int), radius=-1), "radius"),
    (lambda: evaluate.evaluate_codes(_Q4, _X4, num_bits=4, relevance=np.ones((2, 3), int), k=0), "k"),
    (lambda: evaluate.evaluate_codes(_Q4, _X4, num_bits=4, relevance=np.ones((2, 3), int), chunk_size=0),
     "chunk_size"),
    (lambda: evaluate.evaluate_codes(_Q4, _X4, num_bits=4, relevance=np.ones((2, 3), int), dtype=np.int32), "dtype"),
    (lambda: evaluate.evaluate_codes(_Q4.astype(np.int32), _X4, num_bits=4, relevance=np.ones((2, 3), int)),
     "query_words"),
    (lambda: evaluate.evaluate_codes(_Q4, _X4, num_bits=4, relevance=np.ones((2, 3), int), num_db=4), "num_db"),
    (lambda: evaluate.evaluate_codes(_Q4, _X4, num_bits=4, relevance=np.ones((2, 3), int), num_db=0), "num_db"),
])
def test_bad_input_raises_naming_the_argument(call, argname):
  with pytest.raises(ValueError, match=argname):
    call()
