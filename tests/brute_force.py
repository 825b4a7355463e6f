"""Brute-force numpy references shared by the search and index tests (no XLA, no hashjax kernels)."""

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
