"""Brute-force numpy references shared by the tests (no XLA, no hashjax kernels)."""

import math

import numpy as np

_POPCOUNT = np.array([bin(v).count("1") for v in range(256)], np.int64)


def ref_distances(q, x):
  """All-pairs Hamming distances of ``uint32[., W]`` codes by a byte popcount table."""
  xor = (q[:, None, :] ^ x[None, :, :]).astype("<u4")
  return _POPCOUNT[xor.view(np.uint8)].reshape(xor.shape[:2] + (-1,)).sum(-1)


def ref_radius(q, x, r):
  """Per query, ``(distances, indices)`` of the items within ``r`` (scalar or ``[Q]``), by (distance, index)."""
  d = ref_distances(q, x)
  r = np.broadcast_to(np.asarray(r), (q.shape[0],))
  rows = []
  for j in range(q.shape[0]):
    hit = np.nonzero(d[j] <= r[j])[0]
    hit = hit[np.lexsort((hit, d[j, hit]))]
    rows.append((d[j, hit], hit))
  return rows


def assert_ragged_equal(res, rows):
  """``res`` (a ``RaggedNeighbors``) holds exactly ``rows``, in order, with int32 arrays."""
  offsets = np.asarray(res.offsets)
  dist, ids = np.asarray(res.distances), np.asarray(res.indices)
  assert res.distances.dtype == np.int32 and res.indices.dtype == np.int32 and res.offsets.dtype == np.int32
  assert offsets.shape == (len(rows) + 1,) and offsets[0] == 0
  assert offsets[-1] == dist.shape[0] == ids.shape[0]
  np.testing.assert_array_equal(np.asarray(res.counts), [len(r[1]) for r in rows])
  for j, (ref_d, ref_i) in enumerate(rows):
    np.testing.assert_array_equal(dist[offsets[j]:offsets[j + 1]], ref_d, err_msg=f"query {j}")
    np.testing.assert_array_equal(ids[offsets[j]:offsets[j + 1]], ref_i, err_msg=f"query {j}")


# Tie-aware metrics of one histogram hist[B, V] (level 0 irrelevant), summed rank by rank with math.fsum:
# He et al.'s eqs. 3-4 as printed, for ranks beyond the reach of enumerating tie orders.


def eq3_direct(hist, k=None):
  """AP_T(@k) (eq. 3), normalised by min(N+, k); NaN without a relevant item."""
  hist = np.asarray(hist)
  n = hist.sum(-1)
  p = n - hist[:, 0]
  npos = p.sum()
  if npos == 0:
    return float("nan")
  k = int(n.sum()) if k is None else k
  a = np.cumsum(n) - n
  pb = np.cumsum(p) - p
  terms = []
  for d in range(len(n)):
    if p[d] == 0:
      continue
    r = (p[d] - 1) / (n[d] - 1) if n[d] > 1 else 0.0
    t = np.arange(a[d] + 1, min(a[d] + n[d], k) + 1, dtype=np.float64)
    terms.extend((p[d] / n[d]) * (pb[d] + 1 + (t - a[d] - 1) * r) / t)
  return math.fsum(terms) / min(npos, k)


def eq4_direct(hist, k=None):
  """NDCG_T(@k) (eq. 4) with gains 2^v - 1; NaN without positive gain."""
  hist = np.asarray(hist)
  n = hist.sum(-1)
  total = int(n.sum())
  k = total if k is None else k
  disc = 1.0 / np.log2(np.arange(2, total + 2, dtype=np.float64))  # D(t), t = 1..N
  gains = 2.0 ** np.arange(hist.shape[-1]) - 1.0
  a = np.cumsum(n) - n
  dcg = math.fsum((hist[d] * gains).sum() / n[d] * math.fsum(disc[a[d]:min(a[d] + n[d], k)])
                  for d in range(len(n)) if n[d])
  ideal_gains = np.repeat(gains[::-1], hist.sum(0)[::-1])[:k]
  ideal = math.fsum(ideal_gains * disc[:len(ideal_gains)])
  return float("nan") if ideal == 0 else dcg / ideal


def bound_ap_direct(hist, first):
  """AP with the relevant items of every tie first (``first``) or last; NaN without a relevant item."""
  hist = np.asarray(hist)
  n = hist.sum(-1)
  p = n - hist[:, 0]
  if p.sum() == 0:
    return float("nan")
  terms, seen, pos_seen = [], 0, 0
  for d in range(len(n)):
    start = seen if first else seen + n[d] - p[d]
    terms += [(pos_seen + j) / (start + j) for j in range(1, p[d] + 1)]
    seen, pos_seen = seen + n[d], pos_seen + p[d]
  return math.fsum(terms) / p.sum()


def precision_at_k_direct(hist, k):
  """Tie-aware precision@k: each tie's expected relevant items among the top k, over min(k, N)."""
  hist = np.asarray(hist)
  n = hist.sum(-1)
  p = n - hist[:, 0]
  a = np.cumsum(n) - n
  return math.fsum(p[d] * (min(max(k, a[d]), a[d] + n[d]) - a[d]) / n[d] for d in range(len(n)) if n[d]) \
      / min(k, n.sum())


def range_sums(a, b):
  """``(sum 1/t, sum (t - a - 1)/t, sum 1/log2(t + 1))`` over ``t = a+1 .. b`` by math.fsum of float64 terms."""
  t = np.arange(a + 1, b + 1, dtype=np.float64)
  return math.fsum(1.0 / t), math.fsum((t - a - 1) / t), math.fsum(1.0 / np.log2(t + 1))
