r"""Multi-index hashing's search of one query after another, compiled by numba (used by :mod:`hashjax.index.multi`).

:func:`probe` takes a query through the steps ``(r, j)`` of
:mod:`hashjax.index.multi` (table ``j`` at substring radius ``r``) in one
compiled loop. A step's probes go in groups of :data:`GROUP`: their buckets
are looked up and every cache line of their entries prefetched
(:func:`_group`), so that the reads of many buckets overlap; the entries are
then read in order, and a candidate is kept unless its fingerprint puts it
past the query's limit (:func:`_keep`, branch-free); the codes of
:data:`BATCH` kept candidates are prefetched together, then XORed and counted
against the query's, and the first-probe rule's masked popcounts decide
those within the limit (:func:`_verify`). The step's pricing
(``method="auto"``) and the stopping rule are scalar work per query. A numpy
formulation spends most of a query in passes over small arrays between the
reads (``docs/performance.md``).

The loops that run per entry hold no array that they may replace (the finds
grow in :func:`_verify`, before its loop): numba counts the references to
such an array at every pass, atomically, which took half of a query's time
(``docs/performance.md``). The kernel releases the GIL, so
:mod:`hashjax.index.multi` runs chunks of queries on several threads.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils
from numba.extending import intrinsic

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


#: Probes of a step whose buckets are prefetched together before they are read.
GROUP = 64
#: Candidates kept by their fingerprints whose codes are read together.
BATCH = 64


@intrinsic
def _prefetch(typingctx, array, i):  # pylint: disable=unused-argument
  """Asks the CPU to bring the cache line of ``array``'s element ``i``, in memory order, into its caches (LLVM's
  ``llvm.prefetch``: no load to wait for, no result; ``array`` C-contiguous)."""
  if not (isinstance(array, numba.types.Array) and array.layout == "C" and isinstance(i, numba.types.Integer)):
    return None

  def codegen(context, builder, signature, args):
    data = context.make_array(signature.args[0])(context, builder, args[0]).data
    byte = ir.IntType(8).as_pointer()
    address = builder.bitcast(builder.gep(data, [args[1]]), byte)
    i32 = ir.IntType(32)
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [byte, i32, i32, i32]),
                                        "llvm.prefetch.p0i8")
    builder.call(fn, [address, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])  # read, keep, data
    return context.get_dummy_value()

  return numba.types.void(array, numba.types.int64), codegen


@numba.njit(inline="always")
def _prefetch_range(array, lo, hi):
  """Prefetches elements ``lo .. hi - 1``, in memory order, of the C-contiguous ``array``: every cache line they
  touch."""
  for i in range(lo, hi, max(1, 64 // array.itemsize)):
    _prefetch(array, i)
  if hi > lo:
    _prefetch(array, hi - 1)


@numba.njit(inline="always")
def _entry(entries, j, p):
  """Entry ``p`` of table ``j``: its 7 bytes as a little-endian ``uint64``."""
  return (np.uint64(entries[j, p, 0]) | (np.uint64(entries[j, p, 1]) << np.uint64(8))
          | (np.uint64(entries[j, p, 2]) << np.uint64(16)) | (np.uint64(entries[j, p, 3]) << np.uint64(24))
          | (np.uint64(entries[j, p, 4]) << np.uint64(32)) | (np.uint64(entries[j, p, 5]) << np.uint64(40))
          | (np.uint64(entries[j, p, 6]) << np.uint64(48)))


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
def _after(rest, q, rest_probes, probe_cost, t, radius, mean, step, target, m):
  """The modelled work of query ``q``'s steps ``t`` up to its ``target`` (the steps' items priced as
  :mod:`hashjax.index.multi`'s docstring says), seen from step ``step``: ``rest[q, t]`` is the query's modelled work
  of steps ``t, t + 1, ...``, and the steps at ``radius``, the query's last, cost at least their probes times
  ``probe_cost`` plus the last step's candidates per probe ``mean``. The target counts only from step ``m`` on
  (every table probed)."""
  last = rest.shape[1] - 1
  tgt = target if (target >= 0 and step >= m) else t
  end = min(max(tgt, t - 1), last - 1) + 1
  t = min(t, last)
  same = min(max(m * (radius + 1), t), end)
  near = max(rest[q, t] - rest[q, same], (rest_probes[t] - rest_probes[same]) * (probe_cost + mean))
  return near + rest[q, same] - rest[q, end]


@numba.njit
def _candidates(keys, offsets, sub, r, count):
  """The entries of the ``count`` buckets of substrings at distance ``r`` from ``sub`` in one table."""
  total = 0
  mask = (np.int64(1) << r) - 1
  for _ in range(count):
    lo, hi = _bucket(keys, offsets, sub ^ mask)
    total += hi - lo
    if r:
      mask = _next_mask(mask)
  return total


@numba.njit
def _group(keys, offsets, sub, r, mask, lo, hi, entries, j, lanes, in_order):
  """The buckets ``lo[g] .. hi[g] - 1`` of the next ``lo.shape[0]`` substrings at distance ``r`` from ``sub`` in
  table ``j``, from ``sub ^ mask`` on, and their entries (``in_order``: their rows of ``lanes``) prefetched. Returns
  the mask after them."""
  num_db, entry_bytes = entries.shape[1], entries.shape[2]
  num_lanes = lanes.shape[1]
  for g in range(lo.shape[0]):
    lo[g], hi[g] = _bucket(keys, offsets, sub ^ mask)
    if r:
      mask = _next_mask(mask)
    if in_order:
      _prefetch_range(lanes, lo[g] * num_lanes, hi[g] * num_lanes)
    else:
      _prefetch_range(entries, (j * num_db + lo[g]) * entry_bytes, (j * num_db + hi[g]) * entry_bytes)
  return mask


@numba.njit
def _keep(entries, j, lo, hi, g, p, in_order, fp_q, r, limit, id_bits, rows, num_rows):
  """Appends to ``rows[num_rows:]``, until it is full, the rows of table ``j``'s entries from entry ``p`` of bucket
  ``g`` to the end of bucket ``lo.shape[0] - 1`` (buckets ``lo[g] .. hi[g] - 1``): their items (``in_order``: the
  entries' positions) except those whose fingerprints put them past ``limit`` at substring radius ``r``. Returns
  ``(g, p, num_rows)``: where it stopped and the rows held. Branch-free: a dropped entry's row is written and then
  overwritten."""
  mask = (np.uint64(1) << np.uint64(id_bits)) - np.uint64(1)
  while g < lo.shape[0]:
    while p < hi[g] and num_rows < rows.shape[0]:
      if in_order:
        rows[num_rows] = p
        num_rows += 1
      else:
        entry = _entry(entries, j, p)
        rows[num_rows] = np.int64(entry & mask)
        num_rows += r + _popcount((entry >> np.uint64(id_bits)) ^ fp_q) <= limit
      p += 1
    if num_rows == rows.shape[0]:
      return g, p, num_rows
    g += 1
    if g < lo.shape[0]:
      p = lo[g]
  return g, p, num_rows


@numba.njit(inline="always")
def _verify(rows, num_rows, q_lanes, q, lanes, lane_masks, xor, j, r, k, limit, hist, num_found, find_d, find_row):
  """Reads the codes of ``rows[:num_rows]``, candidates of step ``(r, j)`` (all prefetched first, so that their reads
  overlap), and records those within ``limit`` that the step finds first; k-NN (``k > 0``) lowers ``limit`` to the
  ``k``-th distance found. Returns ``(num_found, limit, find_d, find_row)``."""
  m, num_lanes = lane_masks.shape
  if num_found + num_rows > find_d.shape[0]:  # grown here, not in the loop: its arrays' references stay put
    grow = max(find_d.shape[0], num_rows)
    find_d = np.concatenate((find_d, np.empty(grow, np.int64)))
    find_row = np.concatenate((find_row, np.empty(grow, np.int64)))
  for f in range(num_rows):
    _prefetch_range(lanes, rows[f] * num_lanes, (rows[f] + 1) * num_lanes)
  for f in range(num_rows):
    row = rows[f]
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
  return num_found, limit, find_d, find_row


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
    entries: ``uint8[m, N, 7]`` (C-contiguous) each table's entries, 56-bit little-endian integers: the item (a row
      of ``lanes``) in the low ``id_bits`` bits, its fingerprint for that table above them; with ``reordered``, table
      ``m - 1``'s bucket is its rows of ``lanes`` and its entries hold the database index of each row instead.
    id_bits: bits of an entry's item.
    lanes: ``[N, L]`` (C-contiguous) the codes the candidates are read from.
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
  id_mask = (np.uint64(1) << np.uint64(id_bits)) - np.uint64(1)
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
  group_lo = np.empty(GROUP, np.int64)
  group_hi = np.empty(GROUP, np.int64)
  batch = np.empty(BATCH, np.int64)
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
            after = _after(rest, q, rest_probes, probe_cost, t, last_radius, last_mean, t, target, m)
            if after > budget or count > max_probes:
              need[q], gone = after, True
              break
          elif count > max_probes:
            status[0], status[1], status[2] = count, r, size
            return counts, out_d[:0], out_i[:0], handed, need, reach, status
          keys_j, offsets_j = keys[j], offsets[j]
          sub = np.int64(q_sub[q, j])
          fp_q = q_fp[q, j]
          candidates = _candidates(keys_j, offsets_j, sub, r, count)
          mean = candidates / count
          reach[q] = r
          if budget >= 0:
            spent = probe_cost * count + candidates
            after = spent + _after(rest, q, rest_probes, probe_cost, t + 1, r, mean, t, target, m)
            if after > budget or work + spent > budget:
              need[q], gone = after, True
              break
            work += spent
          last_mean, last_radius = mean, r
          in_order = reordered and j == m - 1  # the bucket's codes are rows lo .. hi - 1 of lanes, read in order
          mask = (np.int64(1) << r) - 1
          num_batch = 0
          for start in range(0, count, GROUP):  # a group's buckets prefetched, then read
            size_g = min(GROUP, count - start)
            mask = _group(keys_j, offsets_j, sub, r, mask, group_lo[:size_g], group_hi[:size_g], entries, j, lanes,
                          in_order)
            g, p = 0, group_lo[0]
            while g < size_g:
              g, p, num_batch = _keep(entries, j, group_lo[:size_g], group_hi[:size_g], g, p, in_order, fp_q, r, limit,
                                      id_bits, batch, num_batch)
              if num_batch == BATCH:
                num_found, limit, find_d, find_row = _verify(batch, num_batch, q_lanes, q, lanes, lane_masks, xor, j, r,
                                                             k, limit, hist, num_found, find_d, find_row)
                num_batch = 0
          num_found, limit, find_d, find_row = _verify(batch, num_batch, q_lanes, q, lanes, lane_masks, xor, j, r, k,
                                                       limit, hist, num_found, find_d, find_row)
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
