r"""Multi-index hashing's search of one query after another, compiled by numba (used by :mod:`hashjax.index.multi`).

:func:`probe` takes a query through the steps ``(r, j)`` of
:mod:`hashjax.index.multi` (table ``j`` at substring radius ``r``) in one
compiled loop: per candidate the read of its table entry and a popcount of
its fingerprint against the query's; for those the fingerprint keeps within
the query's limit, one read of its code, an XOR and a popcount; and for the
few still within it the masked popcounts of the first-probe rule; the
step's pricing (``method="auto"``) and the stopping rule are scalar work per
query. A numpy formulation spends most of a query
in passes over small arrays between the reads (``docs/performance.md``).
The kernel releases the GIL, so :mod:`hashjax.index.multi` runs chunks of
queries on several threads.
"""

from __future__ import annotations

import numba
import numpy as np

_M1 = np.uint64(0x5555555555555555)
_M2 = np.uint64(0x3333333333333333)
_M4 = np.uint64(0x0F0F0F0F0F0F0F0F)
_H01 = np.uint64(0x0101010101010101)


@numba.njit(inline="always")
def _popcount(x):
  """Set bits of a ``uint64`` (LLVM lowers this to the CPU's popcount instruction)."""
  x = x - ((x >> np.uint64(1)) & _M1)
  x = (x & _M2) + ((x >> np.uint64(2)) & _M2)
  x = (x + (x >> np.uint64(4))) & _M4
  return np.int64((x * _H01) >> np.uint64(56))


@numba.njit(inline="always")
def _entry(entries, j, p):
  """Entry ``p`` of table ``j``: its 7 bytes as a little-endian ``uint64``."""
  e = entries[j, p]
  return (np.uint64(e[0]) | (np.uint64(e[1]) << np.uint64(8)) | (np.uint64(e[2]) << np.uint64(16))
          | (np.uint64(e[3]) << np.uint64(24)) | (np.uint64(e[4]) << np.uint64(32)) | (np.uint64(e[5]) << np.uint64(40))
          | (np.uint64(e[6]) << np.uint64(48)))


@numba.njit(inline="always")
def _next_mask(v):
  """The next larger integer with as many set bits as ``v > 0`` (Gosper's hack)."""
  c = v & -v
  s = v + c
  return (((s ^ v) >> 2) // c) | s


@numba.njit(inline="always")
def _bucket(keys, offsets, u):
  """``(lo, hi)``: the bucket of substring ``u`` in a dense (``keys`` empty) or sparse table."""
  if keys.shape[0] == 0:
    return offsets[u], offsets[u + 1]
  i = np.searchsorted(keys, np.uint32(u))
  if i < keys.shape[0] and keys[i] == u:
    return offsets[i], offsets[i + 1]
  return 0, 0


@numba.njit(inline="always")
def _after(rest, rest_probes, probe_cost, t, radius, mean, step, target, m):
  """The modelled work of steps ``t`` up to the query's ``target`` (the steps' items priced as
  :mod:`hashjax.index.multi`'s docstring says), seen from step ``step``: ``rest[t]`` is the query's modelled work of
  steps ``t, t + 1, ...``, and the steps at ``radius``, the query's last, cost at least their probes times
  ``probe_cost`` plus the last step's candidates per probe ``mean``. The target counts only from step ``m`` on
  (every table probed)."""
  last = rest.shape[0] - 1
  tgt = target if (target >= 0 and step >= m) else t
  end = min(max(tgt, t - 1), last - 1) + 1
  t = min(t, last)
  same = min(max(m * (radius + 1), t), end)
  near = max(rest[t] - rest[same], (rest_probes[t] - rest_probes[same]) * (probe_cost + mean))
  return near + rest[same] - rest[end]


@numba.njit(nogil=True, cache=True)
def probe(q_sub, q_fp, q_lanes, k, radius, budget, probe_cost, max_probes, rest, rest_probes, found, keys, offsets,
          entries, id_bits, lanes, reordered, lane_masks, sizes):
  """Searches each query by multi-index hashing (:mod:`hashjax.index.multi`), or hands it over.

  Args:
    q_sub: ``uint32[Q, m]`` the queries' substrings.
    q_fp: ``uint64[Q, m]`` the queries' fingerprints, one per table (:mod:`hashjax.index.multi`).
    q_lanes: ``[Q, L]`` the queries' codes as lanes (the dtype of ``lanes``).
    k: k-NN: ``k >= 1``; radius search: 0.
    radius: ``int64[Q]`` radius search: each query's radius (at most ``b``); k-NN: unused.
    budget: the work (candidates plus ``probe_cost`` per probe) past which a query is handed over; -1: never.
    probe_cost: the work of a probe, in candidates.
    max_probes: a step of more probes is handed over (with a budget) or refused (status, without).
    rest: ``float64[Q, T + 1]`` each query's modelled work of steps ``t, ..., T - 1`` (with a budget).
    rest_probes: ``float64[T + 1]`` the probes of steps ``t, ..., T - 1``.
    found: ``float64[T, b + 1]`` the probability that steps ``0..t`` find an item at distance ``d``.
    keys, offsets: typed lists of each table's ``uint32`` keys (empty: dense) and ``int32`` offsets.
    entries: ``uint8[m, N, 7]`` each table's entries, 56-bit little-endian integers: the item (a row of ``lanes``)
      in the low ``id_bits`` bits, its fingerprint for that table above them; with ``reordered``, table ``m - 1``'s
      bucket is its rows of ``lanes`` and its entries hold the database index of each row instead.
    id_bits: bits of an entry's item.
    lanes: ``[N, L]`` the codes the candidates are read from.
    reordered: whether ``lanes`` are the codes sorted by value.
    lane_masks: ``[m, L]`` each table's bits within the lanes.
    sizes: ``int64[m]`` the substrings' lengths.

  Returns:
    ``(counts[Q], distances, indices, handed[Q], need[Q], reach[Q], status[3])``: the answers of the queries not
    handed over, query after query, each sorted by (distance, index) (k-NN: the first ``k``; radius search: all
    within the radius); which queries were handed over and their modelled remaining work; the largest substring
    radius whose buckets each query looked up (-1: none); ``status``: zeros, or ``(probes, r, size)`` of the step
    refused.
  """
  num_q, m = q_sub.shape
  num_lanes = lanes.shape[1]
  num_db = lanes.shape[0]
  id_shift = np.uint64(id_bits)
  id_mask = (np.uint64(1) << id_shift) - np.uint64(1)
  num_bits = found.shape[1] - 1
  counts = np.zeros(num_q, np.int64)
  handed = np.zeros(num_q, np.bool_)
  need = np.zeros(num_q, np.float64)
  reach = np.full(num_q, -1, np.int64)
  status = np.zeros(3, np.int64)
  out_d = np.empty(min(max(16, num_q * max(k, 1)), 1 << 16), np.int64)  # grown as needed
  out_i = np.empty_like(out_d)
  num_out = 0
  hist = np.zeros(num_bits + 1, np.int64)
  xor = np.empty(num_lanes, lanes.dtype)
  find_d = np.empty(1024, np.int64)
  find_row = np.empty(1024, np.int64)
  for q in range(num_q):
    hist[:] = 0
    num_found = 0  # finds, each within the limit at the time
    limit = num_bits if k > 0 else min(radius[q], num_bits)
    target = -1 if k > 0 else radius[q]
    work = 0.0
    last_mean = 0.0
    last_radius = -1
    gone = False
    done = False
    r = 0
    while not done and not gone:
      for j in range(m):
        size = sizes[j]
        if r <= size:
          t = m * r + j
          count = np.int64(rest_probes[t] - rest_probes[t + 1])  # binom(size, r), an exact float sum
          if budget >= 0:
            after = _after(rest[q], rest_probes, probe_cost, t, last_radius, last_mean, t, target, m)
            if after > budget or count > max_probes:
              need[q], gone = after, True
              break
          elif count > max_probes:
            status[0], status[1], status[2] = count, r, size
            return counts, out_d[:0], out_i[:0], handed, need, reach, status
          keys_j, offsets_j = keys[j], offsets[j]
          sub = np.int64(q_sub[q, j])
          fp_q = q_fp[q, j]
          candidates = 0
          mask = (np.int64(1) << r) - 1
          for _ in range(count):
            lo, hi = _bucket(keys_j, offsets_j, sub ^ mask)
            candidates += hi - lo
            if r:
              mask = _next_mask(mask)
          mean = candidates / count
          reach[q] = r
          if budget >= 0:
            spent = probe_cost * count + candidates
            after = spent + _after(rest[q], rest_probes, probe_cost, t + 1, r, mean, t, target, m)
            if after > budget or work + spent > budget:
              need[q], gone = after, True
              break
            work += spent
          last_mean, last_radius = mean, r
          mask = (np.int64(1) << r) - 1
          for _ in range(count):
            lo, hi = _bucket(keys_j, offsets_j, sub ^ mask)
            if r:
              mask = _next_mask(mask)
            for p in range(lo, hi):
              if reordered and j == m - 1:  # the bucket's codes are rows lo .. hi - 1, read in order
                row = p
              else:
                entry = _entry(entries, j, p)
                if r + _popcount((entry >> id_shift) ^ fp_q) > limit:  # the fingerprint puts it past the limit
                  continue
                row = np.int64(entry & id_mask)
              d = 0
              for lane in range(num_lanes):
                xor[lane] = lanes[row, lane] ^ q_lanes[q, lane]
                d += _popcount(np.uint64(xor[lane]))
              if d > limit:
                continue
              first = True  # counted at its first probe: substring distances > r before table j, >= r after
              for i in range(m):
                if i == j or (i > j and r == 0):
                  continue
                d_i = 0
                for lane in range(num_lanes):
                  d_i += _popcount(np.uint64(xor[lane] & lane_masks[i, lane]))
                if (i < j and d_i <= r) or (i > j and d_i < r):
                  first = False
                  break
              if not first:
                continue
              if num_found == find_d.shape[0]:
                find_d = np.concatenate((find_d, np.empty_like(find_d)))
                find_row = np.concatenate((find_row, np.empty_like(find_row)))
              find_d[num_found], find_row[num_found] = d, row
              num_found += 1
              hist[d] += 1
              if k > 0 and num_found >= k:  # the k-th distance found so far bounds what can still count
                below = 0
                for e in range(limit + 1):
                  below += hist[e]
                  if below >= k:
                    limit = e
                    break
        bound = m * r + j
        if k > 0:
          if num_found >= k:  # the k-th distance estimated from the finds, each weighted by 1 / P(found)
            weighted = 0.0
            estimate = 0
            for e in range(num_bits + 1):
              if found[bound, e] > 0:
                weighted += hist[e] / found[bound, e]
              if weighted >= k:
                estimate = e
                break
            target = min(max(estimate, bound + 1), limit)
          done = limit <= bound
        else:
          done = bound >= radius[q]
        if done:
          break
      r += 1
    if gone:
      handed[q] = True
      continue
    keep = 0
    for f in range(num_found):  # within the final limit, as (distance, database index) keys
      if find_d[f] <= limit:
        row = find_row[f]
        find_row[keep] = find_d[f] * num_db + (np.int64(_entry(entries, m - 1, row) & id_mask) if reordered else row)
        keep += 1
    ordered = np.sort(find_row[:keep])
    if k > 0:
      ordered = ordered[:k]
    if num_out + ordered.shape[0] > out_d.shape[0]:
      grow = max(out_d.shape[0], ordered.shape[0])
      out_d = np.concatenate((out_d, np.empty(grow, np.int64)))
      out_i = np.concatenate((out_i, np.empty(grow, np.int64)))
    for f in range(ordered.shape[0]):
      out_d[num_out + f] = ordered[f] // num_db
      out_i[num_out + f] = ordered[f] % num_db
    num_out += ordered.shape[0]
    counts[q] = ordered.shape[0]
  return counts, out_d[:num_out], out_i[:num_out], handed, need, reach, status
