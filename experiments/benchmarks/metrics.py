"""Benchmark: tie-aware AP + NDCG from Hamming histograms vs scikit-learn and numpy.

Workload: ``Q`` queries x ``N`` database items, 32-bit codes of 10 classes
(class prototype with 25% of the bits flipped), relevance = label agreement.
Every method gets the same inputs, built before any timer starts:

* ``sklearn``: per-query ``sklearn.metrics.average_precision_score(rel,
  -distances)`` (AP only; sklearn groups tied scores, so its value is the
  "precision at the end of each tie" AP, not the tie-aware one; the
  benchmark reproduces it from the histograms as a consistency check);
* ``numpy``: per-query ``np.bincount`` histogram + the same closed forms in
  float64 (harmonic / discount prefix-sum tables); written here, checked to
  agree with hashjax;
* ``numpy from codes``: the same, starting from the packed codes and labels
  (per-query XOR + ``np.bitwise_count``), the peer of hashjax's path from codes;
* ``hashjax`` from codes + labels (what ``evaluate.evaluate_codes`` runs):
  ``histograms.hamming_histogram(query_labels=..., db_labels=...)`` (the
  bit-sliced kernel for calls of at least 2^22 pairs) and the
  ``*_from_histogram`` formulas, means via ``mean_and_count``; also the whole
  ``evaluate_codes``, the streamed scatter-add from codes (what an affinity
  matrix takes), and the paths from a ``[Q, N]`` distance matrix
  (``histograms.distance_histogram``; the public two-call path).

Threads: numpy and scikit-learn run on one thread; XLA uses every CPU the
process may run on (``--threads`` pins it; XLA may split a large kernel over
its threads). Each table row says its thread count, and unless the
run is already single-threaded a child process repeats the headline rows on
one thread (``part=single_thread``), so both ratios are printed.

Timings are the minimum over interleaved repetitions (the machine is shared,
so only ratios measured within one run mean anything). Also reported: the
histogram variants considered (ns per item), float32 vs float64 error, and
compilation times: the formulas under a plain ``jax.jit`` and the kernels,
each at shapes new to the process. The last row checks the targets: hashjax
from codes at least 4x the numpy histograms and 100x scikit-learn, and at
most 1 s of compilation per new shape (the ratios at the full size only:
``--small`` calls are too small for them).

Usage::

  python -m experiments.benchmarks.metrics              # Q=1000, N=100000, all CPUs
  python -m experiments.benchmarks.metrics --threads=1  # everything on one thread
  python -m experiments.benchmarks.metrics --small      # a quick run
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from experiments import process
from hashjax import codes
from hashjax import evaluate
from hashjax import histograms
from hashjax import metrics

NUM_BITS = 32
NUM_CLASSES = 10


# ---------------------------------------------------------------------------
# Data.


def make_data(num_queries: int, num_db: int, seed: int = 0):
  rng = np.random.default_rng(seed)
  protos = rng.integers(0, 2, size=(NUM_CLASSES, NUM_BITS))
  ql = rng.integers(0, NUM_CLASSES, num_queries).astype(np.int32)
  xl = rng.integers(0, NUM_CLASSES, num_db).astype(np.int32)
  qb = protos[ql] ^ (rng.random((num_queries, NUM_BITS)) < 0.25)
  xb = protos[xl] ^ (rng.random((num_db, NUM_BITS)) < 0.25)
  qw, xw = codes.pack_bits(qb), codes.pack_bits(xb)
  dist = codes.hamming_distance(qw, xw)  # int32 [Q, N], stays a device array
  rel = jnp.asarray(ql[:, None] == xl[None, :])
  jax.block_until_ready((dist, rel))
  return dict(qw=qw, xw=xw, ql=ql, xl=xl, dist=dist, rel=rel,
              dist_np=np.asarray(dist), rel_np=np.asarray(rel))  # zero-copy numpy views


# ---------------------------------------------------------------------------
# References.


def _numpy_tables(n_items: int):
  t = np.arange(1, n_items + 1, dtype=np.float64)
  harmonic = np.concatenate([[0.0], np.cumsum(1.0 / t)])  # H(m)
  discount = np.concatenate([[0.0], np.cumsum(1.0 / np.log2(t + 1.0))])  # sum_{t<=m} D(t)
  return harmonic, discount


def _numpy_query(d, r, tables, num_bits: int = NUM_BITS):
  """He et al. eqs. 3-4 for one query from its bincount histogram (float64)."""
  harmonic, discount = tables
  hist = np.bincount(d * 2 + r, minlength=2 * (num_bits + 1)).reshape(num_bits + 1, 2)
  n = hist.sum(1)
  p = hist[:, 1]
  a = np.cumsum(n) - n
  pb = np.cumsum(p) - p
  dh = harmonic[a + n] - harmonic[a]
  s1 = n - (a + 1) * dh
  safe_n = np.maximum(n, 1)
  r_d = np.where(n > 1, (p - 1) / np.maximum(n - 1, 1), 0.0)
  npos = p.sum()
  if not npos:
    return np.nan, np.nan
  ap_t = np.sum(np.where(p > 0, p / safe_n * ((pb + 1) * dh + r_d * s1), 0.0)) / npos
  dcg = np.sum(p / safe_n * (discount[a + n] - discount[a]))  # binary gains: G = relevance
  return ap_t, dcg / discount[npos]


def numpy_reference(dist: np.ndarray, rel: np.ndarray, num_bits: int = NUM_BITS):
  """Per-query bincount + He et al. eqs. 3-4 in float64 numpy. Returns (AP_T[Q], NDCG_T[Q])."""
  tables = _numpy_tables(dist.shape[1])
  out = np.array([_numpy_query(dist[q], rel[q], tables, num_bits) for q in range(dist.shape[0])])
  return out[:, 0], out[:, 1]


def sklearn_ap(dist: np.ndarray, rel: np.ndarray):
  from sklearn.metrics import average_precision_score
  return np.array([average_precision_score(rel[q], -dist[q]) if rel[q].any() else np.nan
                   for q in range(dist.shape[0])])


@jax.jit
def _threshold_ap_from_histogram(hist):
  """sklearn's AP (ties enter together: precision at the end of each tie), from histograms."""
  n = hist.sum(-1)
  p = hist[..., 1]
  npos = p.sum(-1)
  prec_end = jnp.cumsum(p, -1) / jnp.maximum(jnp.cumsum(n, -1), 1)
  return jnp.sum(p * prec_end, -1) / npos


# ---------------------------------------------------------------------------
# hashjax pipelines.


def hashjax_one_histogram(dist, rel, dtype=None):
  hist = histograms.distance_histogram(dist, rel, num_bits=NUM_BITS, num_levels=2)
  ap_t = metrics.tie_aware_ap_from_histogram(hist, dtype=dtype)
  ndcg_t = metrics.tie_aware_ndcg_from_histogram(hist, dtype=dtype)
  return metrics.mean_and_count(ap_t), metrics.mean_and_count(ndcg_t), ap_t, ndcg_t


def hashjax_two_calls(dist, rel):
  ap_t = metrics.tie_aware_ap(dist, rel, num_bits=NUM_BITS)
  ndcg_t = metrics.tie_aware_ndcg(dist, rel, num_bits=NUM_BITS, num_levels=2)
  return metrics.mean_and_count(ap_t), metrics.mean_and_count(ndcg_t)


def hashjax_from_codes(qw, xw, ql, xl):
  """evaluate_codes' path: codes + labels -> Hamming histogram -> AP_T + NDCG_T means."""
  hist = histograms.hamming_histogram(qw, xw, num_bits=NUM_BITS, query_labels=ql, db_labels=xl)
  return (metrics.mean_and_count(metrics.tie_aware_ap_from_histogram(hist)),
          metrics.mean_and_count(metrics.tie_aware_ndcg_from_histogram(hist)))


def hashjax_scatter_from_codes(qw, xw, rel):
  """The streamed scatter-add from codes (affinity matrices, codes over 128 bits, small calls)."""
  hist = histograms.hamming_histogram(qw, xw, rel, num_bits=NUM_BITS, num_levels=2)
  return (metrics.mean_and_count(metrics.tie_aware_ap_from_histogram(hist)),
          metrics.mean_and_count(metrics.tie_aware_ndcg_from_histogram(hist)))


def numpy_from_codes(qw, xw, ql, xl, num_bits: int = NUM_BITS):
  """The numpy reference starting from packed codes: per-query XOR/popcount, then as above."""
  qw, xw = np.asarray(qw)[:, 0], np.asarray(xw)[:, 0]
  tables = _numpy_tables(len(xw))
  return [_numpy_query(np.bitwise_count(xw ^ qw[q]).astype(np.intp), xl == ql[q], tables, num_bits)
          for q in range(len(qw))]


# ---------------------------------------------------------------------------
# Histogram variants (the bottleneck), each [Q, N] int32 distances + bool relevance -> hist.


def _streamed(body, step):
  @jax.jit
  def f(dist, rel):
    num_q, n = dist.shape
    init = jnp.zeros((num_q, 2 * (NUM_BITS + 1)), jnp.int32)

    def loop(i, total):
      d = jax.lax.dynamic_slice_in_dim(dist, i * step, step, 1)
      r = jax.lax.dynamic_slice_in_dim(rel, i * step, step, 1)
      return total + body(d, r)

    return jax.lax.fori_loop(0, n // step, loop, init)
  return f


def _flat_scatter(d, r):
  length = 2 * (NUM_BITS + 1)
  flat = d * 2 + r.astype(jnp.int32) + (jnp.arange(d.shape[0]) * length)[:, None]
  counts = jnp.zeros((d.shape[0] * length,), jnp.int32).at[flat.reshape(-1)].add(1, mode="promise_in_bounds")
  return counts.reshape(d.shape[0], length)


def _vmapped_scatter(d, r):
  keys = d * 2 + r.astype(jnp.int32)
  return jax.vmap(lambda k: jnp.zeros((2 * (NUM_BITS + 1),), jnp.int32).at[k].add(1))(keys)


def _interleaved_scatter(d, r, copies=4):
  """Item j adds to copy j % copies of the row: consecutive updates never share an address."""
  length = 2 * (NUM_BITS + 1)
  keys = d * 2 + r.astype(jnp.int32) + (jnp.arange(d.shape[1]) % copies * length)[None, :]
  flat = keys + (jnp.arange(d.shape[0]) * copies * length)[:, None]
  counts = jnp.zeros((d.shape[0] * copies * length,), jnp.int32).at[flat.reshape(-1)].add(
      1, mode="promise_in_bounds")
  return counts.reshape(d.shape[0], copies, length).sum(1)


def _onehot(d, r):
  keys = d * 2 + r.astype(jnp.int32)
  return jnp.sum((keys[:, :, None] == jnp.arange(2 * (NUM_BITS + 1))).astype(jnp.int32), axis=1)


def _cumulative(d, r):
  thresholds = jnp.arange(NUM_BITS + 1)
  le = d[:, :, None] <= thresholds
  tot = jnp.sum(le, axis=1, dtype=jnp.int32)
  pos = jnp.sum(le & r[:, :, None], axis=1, dtype=jnp.int32)
  tot, pos = jnp.diff(tot, axis=1, prepend=0), jnp.diff(pos, axis=1, prepend=0)
  return jnp.stack([tot - pos, pos], axis=-1).reshape(d.shape[0], -1)


@jax.jit
def _sort_searchsorted(dist, rel):
  keys = jnp.sort(dist * 2 + rel.astype(jnp.int32), axis=1)
  edges = jax.vmap(lambda k: jnp.searchsorted(k, jnp.arange(2 * (NUM_BITS + 1) + 1)))(keys)
  return jnp.diff(edges, axis=1)


@jax.jit
def _unstreamed_scatter(dist, rel):  # the original histogram: one [Q, N] key matrix
  keys = dist * 2 + rel.astype(jnp.int32)
  return jax.vmap(lambda k: jnp.zeros((2 * (NUM_BITS + 1),), jnp.int32).at[k].add(1))(keys)


def histogram_variants(data, num_queries: int, reps: int):
  """ns per (query, item) of each histogram variant on the first ``num_queries`` queries."""
  dist, rel = data["dist"][:num_queries], data["rel"][:num_queries]
  n = dist.shape[1]
  want = np.asarray(histograms.distance_histogram(dist, rel, num_bits=NUM_BITS, num_levels=2)).reshape(num_queries, -1)
  dist8 = dist.astype(jnp.uint8)
  step = max(8, 65536 // num_queries)
  while n % step:
    step -= 1
  qw, ql, rel_np = np.asarray(data["qw"])[:num_queries], data["ql"][:num_queries], data["rel_np"][:num_queries]
  variants = {
      "hamming_histogram from codes + labels (bit-sliced from 2^22 pairs)": lambda: histograms.hamming_histogram(
          qw, data["xw"], num_bits=NUM_BITS, query_labels=ql, db_labels=data["xl"]),
      "distance_histogram of [Q, N] distances": lambda: histograms.distance_histogram(
          dist, rel, num_bits=NUM_BITS, num_levels=2),
      "distance_histogram of uint8 distances": lambda: histograms.distance_histogram(
          dist8, rel, num_bits=NUM_BITS, num_levels=2),
      "all rows per block [Q, 65536/Q], flat scatter-add": functools.partial(_streamed(_flat_scatter, step),
                                                                            dist, rel),
      "all rows per block, vmapped per-row scatter": functools.partial(_streamed(_vmapped_scatter, step), dist, rel),
      "all rows per block, 4 interleaved histogram copies": functools.partial(
          _streamed(_interleaved_scatter, step), dist, rel),
      "unstreamed scatter ([Q, N] keys at once)": functools.partial(_unstreamed_scatter, dist, rel),
      "hamming_histogram from codes + a relevance matrix (streamed scatter-add)": lambda: (
          histograms.hamming_histogram(qw, data["xw"], rel_np, num_bits=NUM_BITS, num_levels=2)),
  }
  slow = {  # orders of magnitude slower on XLA:CPU: measured on fewer queries
      "all rows per block, one-hot compare-and-sum (66 bins)": _streamed(_onehot, step),
      "all rows per block, cumulative counts sum(d <= t)": _streamed(_cumulative, step),
      "sort + searchsorted": _sort_searchsorted,
  }
  rows = []
  for name, fn in variants.items():
    got = np.asarray(fn()).reshape(num_queries, -1)
    assert np.array_equal(got, want), name
  best = _bench(variants, reps)
  for name, sec in best.items():
    rows.append(dict(part="histogram", name=name, seconds=sec, ns_per_item=1e9 * sec / (num_queries * n)))
  few = max(1, num_queries // 20)
  for name, fn in slow.items():
    got = np.asarray(fn(dist[:few], rel[:few])).reshape(few, -1)
    assert np.array_equal(got, want[:few]), name
    sec = _bench({name: functools.partial(fn, dist[:few], rel[:few])}, 1)[name]
    rows.append(dict(part="histogram", name=name + f" [{few} queries]", seconds=sec,
                     ns_per_item=1e9 * sec / (few * n)))
  return rows


# ---------------------------------------------------------------------------
# Timing helpers.


def _bench(fns, reps):
  """Minimum wall time per callable, repetitions interleaved (load changes hit all alike)."""
  for f in fns.values():
    jax.block_until_ready(f())
  best = {k: float("inf") for k in fns}
  for _ in range(reps):
    for k, f in fns.items():
      t0 = time.perf_counter()
      jax.block_until_ready(f())
      best[k] = min(best[k], time.perf_counter() - t0)
  return best


def _compile_seconds(fn, *args, **kwargs):
  t0 = time.perf_counter()
  fn.lower(*args, **kwargs).compile()
  return time.perf_counter() - t0


class _CompileEvents:
  """Seconds jax spends tracing, lowering and compiling (its monitoring events), and programs compiled."""

  def __init__(self):
    self.seconds, self.programs = 0.0, 0
    jax.monitoring.register_event_duration_secs_listener(self._listen)

  def _listen(self, event, duration, **kwargs):
    del kwargs
    if event.startswith("/jax/core/compile/"):
      self.seconds += duration
      self.programs += event.endswith("backend_compile_duration")

  def during(self, fn):
    """``(compile seconds, programs compiled)`` during one call of ``fn``."""
    self.seconds, self.programs = 0.0, 0
    jax.block_until_ready(fn())
    return self.seconds, self.programs


def compile_times(data):
  """Compilation for shapes not seen before in this process.

  The public calls (``first call`` rows) count everything jax traces, lowers
  and compiles during the call: the histogram kernels, and nothing for the
  formulas, which run on the host for concrete histograms. The formulas'
  traced path (what a caller's ``jax.jit`` compiles them into) is timed on its
  own, at five new shapes. Python's full garbage collections are kept out of
  the figures (:func:`experiments.process.freeze_gc`).
  """
  process.freeze_gc()
  events = _CompileEvents()
  num_q = data["dist"].shape[0] + 1  # fresh shapes: nothing cached
  hist = np.random.default_rng(0).integers(0, 100, size=(num_q, NUM_BITS + 1, 2)).astype(np.int32)
  rows = [("yardstick: jit(lambda a, b: a + b)", _compile_seconds(jax.jit(lambda a, b: a + b), hist, hist))]
  for name, fn in (("tie_aware_ap_from_histogram", metrics.tie_aware_ap_from_histogram),
                   ("tie_aware_ndcg_from_histogram", metrics.tie_aware_ndcg_from_histogram)):
    sec, programs = events.during(lambda: fn(hist))
    rows.append((f"{name}, first call (host numpy; programs compiled: {programs})", sec))
    seconds = [_compile_seconds(jax.jit(fn), hist[c:]) for c in range(1, 6)]
    rows.append((f"{name}, traced: jax.jit of the formula, first shape", seconds[0]))
    rows.append((f"{name}, the same, median of 5 new shapes", float(np.median(seconds))))
    rows.append((f"{name}, the same, maximum of the 5", float(np.max(seconds))))
  n = data["xw"].shape[0]
  # A new number of queries: the bit-sliced kernel runs on chunks of queries (a new number above a chunk
  # compiles nothing); the scatter-add paths compile per shape.
  sub = int(np.asarray(data["qw"]).shape[0] * 0.7)
  qw, xw, ql, xl = np.asarray(data["qw"])[:sub], data["xw"], data["ql"][:sub], data["xl"]
  dist, rel = jax.block_until_ready((data["dist"][1:], data["rel"][1:]))  # sliced outside the measurement
  rel_sub = data["rel_np"][:sub]
  half_x, half_l = np.asarray(data["xw"])[:n // 2], np.asarray(data["xl"])[:n // 2]
  for name, fn in (
      ("evaluate_codes, first call with a new number of queries", lambda: evaluate.evaluate_codes(
          qw, xw, num_bits=NUM_BITS, query_labels=ql, db_labels=xl)),
      ("evaluate_codes, first call with a new database size (N / 2): the kernel",
       lambda: evaluate.evaluate_codes(data["qw"], half_x, num_bits=NUM_BITS, query_labels=data["ql"],
                                       db_labels=half_l)),
      ("distance histogram [Q, N], first call", lambda: histograms.distance_histogram(
          dist, rel, num_bits=NUM_BITS, num_levels=2)),
      ("codes histogram with a relevance matrix (scatter-add), first call", lambda: histograms.hamming_histogram(
          qw, xw, rel_sub, num_bits=NUM_BITS, num_levels=2)),
      ("ap (index order; host radix sort), first call, 50 queries", lambda: metrics.ap(
          data["dist_np"][1:51], data["rel_np"][1:51], num_bits=NUM_BITS))):
    sec, programs = events.during(fn)
    rows.append((f"{name} (programs compiled: {programs})", sec))
  # The codes kernel at new code lengths (every length is a new program), on at least 2^22 pairs with
  # labels, so the bit-sliced kernel where the call is large enough (not with --small).
  rng = np.random.default_rng(1)
  num_db = max(n, (1 << 22) // 64 + 1)
  labels_q, labels_x = rng.integers(0, 10, 64), rng.integers(0, 10, num_db)
  for bits in (8, 24, 64, 128):
    codes_q = codes.pack_bits(rng.integers(0, 2, size=(64, bits)))
    codes_x = codes.pack_bits(rng.integers(0, 2, size=(num_db, bits)))
    sec, programs = events.during(lambda: histograms.hamming_histogram(
        codes_q, codes_x, num_bits=bits, query_labels=labels_q, db_labels=labels_x))
    rows.append((f"hamming_histogram with labels, 64 x {num_db} pairs, first call at {bits} bits "
                 f"(programs compiled: {programs})", sec))
  # A new database size (sliced on the host: slicing a jax array would compile a program of its own).
  xw_np, xl_np = np.asarray(data["xw"]), np.asarray(data["xl"])
  dist_np, rel_np = data["dist_np"], data["rel_np"]
  for name, fn in (
      ("codes histogram with a relevance matrix, N - 777", lambda: histograms.hamming_histogram(
          data["qw"], xw_np[:n - 777], rel_np[:, :n - 777], num_bits=NUM_BITS, num_levels=2)),
      ("evaluate_codes, N - 777", lambda: evaluate.evaluate_codes(
          data["qw"], xw_np[:n - 777], num_bits=NUM_BITS, query_labels=data["ql"], db_labels=xl_np[:n - 777])),
      ("distance histogram [Q, N] of numpy distances, N - 777", lambda: histograms.distance_histogram(
          dist_np[:, :n - 777], rel_np[:, :n - 777], num_bits=NUM_BITS, num_levels=2))):
    sec, programs = events.during(fn)
    rows.append((f"{name} (programs compiled: {programs})", sec))
  return [dict(part="compile", name=name, seconds=sec) for name, sec in rows]


# ---------------------------------------------------------------------------


def _threads() -> int:
  """CPUs XLA may use (it sizes its thread pool from the affinity mask)."""
  return len(os.sched_getaffinity(0))


def _headline_timings(data, reps: int, sk_queries: int):
  """Seconds for all queries: hashjax from codes, numpy from distances and from codes, scikit-learn."""
  num_q = data["dist"].shape[0]
  best = _bench({
      "hashjax": lambda: hashjax_from_codes(data["qw"], data["xw"], data["ql"], data["xl"]),
      "numpy": lambda: numpy_reference(data["dist_np"], data["rel_np"]),
  }, reps)
  sklearn_ap(data["dist_np"][:1], data["rel_np"][:1])  # imports scikit-learn outside the timer
  t0 = time.perf_counter()
  sklearn_ap(data["dist_np"][:sk_queries], data["rel_np"][:sk_queries])
  best["sklearn"] = (time.perf_counter() - t0) / sk_queries * num_q
  sub = max(1, num_q // 5)
  t0 = time.perf_counter()
  numpy_from_codes(np.asarray(data["qw"])[:sub], np.asarray(data["xw"]), data["ql"][:sub], data["xl"])
  best["numpy_from_codes"] = (time.perf_counter() - t0) / sub * num_q
  return best


def _single_thread_rows(small: bool) -> list[dict]:
  """The headline rows measured again in a child process pinned to one CPU."""
  cmd = [sys.executable, "-m", "experiments.benchmarks.metrics", "--threads=1", "--headline"]
  cmd += ["--small"] if small else []
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  out = subprocess.run(cmd, cwd=root, capture_output=True, text=True, check=True).stdout
  return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def _sizes(small: bool):
  num_q, num_db = (60, 5000) if small else (1000, 100_000)
  return num_q, num_db, (2 if small else 3), (num_q if small else 200)


def run_headline(small: bool) -> list[dict]:
  """Only the headline timings (hashjax from codes vs numpy and scikit-learn), on this process's threads."""
  num_q, num_db, reps, sk_queries = _sizes(small)
  best = _headline_timings(make_data(num_q, num_db), reps + 4, max(20, sk_queries // 4))
  return [dict(part="single_thread" if _threads() == 1 else "headline", threads=_threads(),
               hashjax_from_codes_seconds=best["hashjax"], numpy_seconds=best["numpy"],
               numpy_from_codes_seconds=best["numpy_from_codes"], sklearn_seconds=best["sklearn"],
               speedup_vs_sklearn=best["sklearn"] / best["hashjax"],
               speedup_vs_numpy=best["numpy"] / best["hashjax"],
               speedup_vs_numpy_from_codes=best["numpy_from_codes"] / best["hashjax"])]


def run(small: bool, single_thread: bool = True) -> list[dict]:
  """Runs every comparison; returns one dict per measured row.

  With ``single_thread`` and more than one CPU, the headline is also measured
  in a child process on one CPU (rows with ``part="single_thread"``).
  """
  num_q, num_db, reps, sk_queries = _sizes(small)
  threads = _threads()
  data = make_data(num_q, num_db)
  dist, rel, dist_np, rel_np = data["dist"], data["rel"], data["dist_np"], data["rel_np"]
  rows = []

  # --- agreement ----------------------------------------------------------
  ref_ap, ref_ndcg = numpy_reference(dist_np, rel_np)
  (_, _, ap32, ndcg32) = hashjax_one_histogram(dist, rel, dtype=np.float32)
  with jax.enable_x64(True):
    (_, _, ap64, ndcg64) = hashjax_one_histogram(dist, rel, dtype=np.float64)
    ap64, ndcg64 = np.asarray(ap64), np.asarray(ndcg64)
  ap32, ndcg32 = np.asarray(ap32), np.asarray(ndcg32)
  sk = sklearn_ap(dist_np[:sk_queries], rel_np[:sk_queries])
  hist = histograms.distance_histogram(dist[:sk_queries], rel[:sk_queries], num_bits=NUM_BITS, num_levels=2)
  sk_from_hist = np.asarray(_threshold_ap_from_histogram(hist))
  # Every histogram path gives the same counts, so the errors below hold for each of them.
  from_dist = np.asarray(histograms.distance_histogram(dist, rel, num_bits=NUM_BITS, num_levels=2))
  sliced = np.asarray(histograms.hamming_histogram(data["qw"], data["xw"], num_bits=NUM_BITS, query_labels=data["ql"],
                                                   db_labels=data["xl"]))
  assert np.array_equal(sliced, from_dist), "the codes histogram differs from the distance histogram"
  rows.append(dict(
      part="accuracy",
      max_abs_f64_vs_numpy_ap=float(np.nanmax(np.abs(ap64 - ref_ap))),
      max_abs_f64_vs_numpy_ndcg=float(np.nanmax(np.abs(ndcg64 - ref_ndcg))),
      max_abs_f32_vs_f64_ap=float(np.nanmax(np.abs(ap32 - ap64))),
      max_abs_f32_vs_f64_ndcg=float(np.nanmax(np.abs(ndcg32 - ndcg64))),
      abs_f32_vs_f64_mean_ap=float(abs(np.nanmean(ap32.astype(np.float64)) - np.nanmean(ap64))),
      max_abs_sklearn_vs_its_histogram_formula=float(np.nanmax(np.abs(sk - sk_from_hist))),
      mean_tie_aware_ap=float(np.nanmean(ap64)), mean_sklearn_ap=float(np.nanmean(sk)),
      mean_tie_aware_ndcg=float(np.nanmean(ndcg64)),
      histograms_identical="codes path == scatter-add from distances",
  ))

  # --- end-to-end timing ----------------------------------------------------
  qw, xw, ql, xl = data["qw"], data["xw"], data["ql"], data["xl"]
  # hamming_histogram's rule: the bit-sliced kernel from 2^22 (query, item) pairs, the scatter-add below.
  kernel = "bit-sliced" if qw.shape[0] * xw.shape[0] >= 1 << 22 else "scatter-add (small call)"
  headline = f"hashjax: codes + labels -> {kernel} histogram -> AP_T + NDCG_T (float32)"
  timed = {
      headline: lambda: hashjax_from_codes(qw, xw, ql, xl),
      "hashjax: evaluate_codes, every metric (codes + labels)":
          lambda: evaluate.evaluate_codes(qw, xw, num_bits=NUM_BITS, query_labels=ql, db_labels=xl),
      "hashjax: codes + relevance matrix -> streamed scatter-add histogram -> AP_T + NDCG_T":
          lambda: hashjax_scatter_from_codes(qw, xw, rel_np),
      "hashjax: [Q, N] distances -> one histogram -> AP_T + NDCG_T (float32)":
          lambda: hashjax_one_histogram(dist, rel)[:2],
      "hashjax: tie_aware_ap + tie_aware_ndcg from distances (two histograms)":
          lambda: hashjax_two_calls(dist, rel),
      "hashjax: one histogram from numpy distances (row tiles to device)":
          lambda: hashjax_one_histogram(dist_np, rel_np)[:2],
      "numpy: per-query bincount from distances, same formulas (float64)":
          lambda: numpy_reference(dist_np, rel_np),
  }
  best = _bench(timed, reps)
  t0 = time.perf_counter()
  sklearn_ap(dist_np[:sk_queries], rel_np[:sk_queries])
  sk_per_query = (time.perf_counter() - t0) / sk_queries
  # The numpy reference from codes (XOR/popcount per query) on a subset, as the codes paths' peer.
  sub = max(1, num_q // 5)
  qw_np, xw_np = np.asarray(qw)[:sub], np.asarray(xw)
  t0 = time.perf_counter()
  numpy_from_codes(qw_np, xw_np, ql[:sub], xl)
  np_codes_per_query = (time.perf_counter() - t0) / sub
  np_per_query = best["numpy: per-query bincount from distances, same formulas (float64)"] / num_q
  for name, sec in best.items():
    rows.append(dict(part="end_to_end", name=name, threads=1 if name.startswith("numpy") else threads,
                     queries=num_q, db=num_db, seconds=sec,
                     speedup_vs_sklearn=sk_per_query * num_q / sec,
                     speedup_vs_numpy=np_per_query * num_q / sec,
                     speedup_vs_numpy_from_codes=np_codes_per_query * num_q / sec))
  rows.append(dict(part="end_to_end", name=f"sklearn: average_precision_score per query ({sk_queries} timed)",
                   threads=1, queries=num_q, db=num_db, seconds=sk_per_query * num_q))
  rows.append(dict(part="end_to_end", name=f"numpy from codes: XOR/popcount + bincount per query ({sub} timed)",
                   threads=1, queries=num_q, db=num_db, seconds=np_codes_per_query * num_q))

  # --- the histogram step and compilation ------------------------------------
  rows += histogram_variants(data, num_q if small else 200, reps)
  compiled = compile_times(data)
  rows += compiled
  if single_thread and threads > 1:
    rows += _single_thread_rows(small)
  head = next(row for row in rows if row.get("name") == headline)
  slowest = max(compiled[1:], key=lambda row: row["seconds"])  # every row but the yardstick
  rows.append(dict(part="targets", full_size=not small, speedup_vs_numpy=head["speedup_vs_numpy"],
                   at_least_4x_numpy=head["speedup_vs_numpy"] >= 4, speedup_vs_sklearn=head["speedup_vs_sklearn"],
                   at_least_100x_sklearn=head["speedup_vs_sklearn"] >= 100, slowest_compile_seconds=slowest["seconds"],
                   slowest_compile=slowest["name"], at_most_1s_compile=slowest["seconds"] <= 1.0))
  return rows


def _print(rows):
  for row in rows:
    part = row.pop("part")
    items = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items())
    print(f"[{part}] {items}")


if __name__ == "__main__":
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--small", action="store_true", help="a quick run (60 x 5000)")
  parser.add_argument("--threads", type=int, default=0, help="CPUs for XLA (0: every allowed CPU)")
  parser.add_argument("--headline", action="store_true",
                      help="only the headline timings, one JSON line per row (used for the single-thread rows)")
  args = parser.parse_args()
  if args.threads:
    allowed = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, allowed[:args.threads])  # before XLA starts: it sizes its pool from this mask
  if args.headline:
    for row in run_headline(args.small):
      print(json.dumps(row))
  else:
    _print(run(args.small))
