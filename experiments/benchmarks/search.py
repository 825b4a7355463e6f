r"""Benchmarks exact Hamming search: hashjax.search against faiss, on the same data.

  python -m experiments.benchmarks.search                   # N = 10^6, 1000 queries, k = 100
  python -m experiments.benchmarks.search --threads=1       # both libraries on one thread
  python -m experiments.benchmarks.search --small           # a quick check (N = 20000)
  python -m experiments.benchmarks.search --num_db=100000 --bits=64 --repeats=5

For each code length: ``N`` random database codes and ``Q`` random queries
(seeded numpy ``Generator``), then

* k nearest neighbours: :func:`hashjax.search.knn` against faiss
  ``IndexBinaryFlat.search``;
* radius search (``d <= r``): :func:`hashjax.search.radius_search` against
  faiss ``IndexBinaryFlat.range_search`` with radius ``r + 1`` (faiss keeps
  ``d < radius``).

faiss gets the very same codes: the ``uint32`` words viewed as little-endian
bytes give the same Hamming distance. Both libraries use the same number of
threads: ``--threads`` (default: every CPU this process may run on) sets
faiss's OpenMP threads (``faiss.omp_set_num_threads``) and, since XLA sizes its
CPU thread pool from the process's CPU affinity, the affinity mask
(``os.sched_setaffinity``) before jax starts.

Each timing is the best of ``--repeats`` runs, hashjax and faiss alternating,
so a busy machine slows both alike; compare the ratios. ``compile_s`` is the
wall time jax spent tracing, lowering and compiling during hashjax's first
call (measured with ``jax.monitoring``), after a warm-up search at another
code length has paid jax's once-per-process start (printed first; the garbage
collector is then frozen, :func:`experiments.process.freeze_gc`); on a loaded
machine it stretches with the wait for a core, so ``first_cpu_s`` gives the
CPU time the first call spent beyond the fastest later call (compilation plus
one-off work), which waiting does not inflate. ``N-777`` is the compile time
of a call on a database 777 items smaller: 0 where it spans as many chunks of
65,536 items (as at the default ``N``), a new program's otherwise. For knn,
the last column gives the compile time of first calls with 32, 64 and 128
queries (each a new number of queries per scan: new shapes of the program).
The load average is printed with each row. Results are
checked: faiss's distances must equal hashjax's, and hashjax's indices must
follow the tie rule (ascending distance, then ascending index), checked
against a numpy brute-force scan for ``--check_queries`` queries.
"""

from __future__ import annotations

import os
import time
from typing import Dict, List

from absl import app, flags

from experiments import benchmarks

_SMALL = flags.DEFINE_bool("small", False, "Quick mode: N = 20000, 100 queries, 2 repeats.")
_NUM_DB = flags.DEFINE_integer("num_db", 1_000_000, "Database size N.")
_NUM_QUERIES = flags.DEFINE_integer("num_queries", 1000, "Number of queries Q.")
_K = flags.DEFINE_integer("k", 100, "Neighbours per query.")
_RADIUS = flags.DEFINE_integer("radius", 2, "Hamming radius r (items with d <= r).")
_BITS = flags.DEFINE_list("bits", ["32", "64", "128"], "Code lengths (multiples of 8).")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed runs per method (the best is kept).")
_THREADS = flags.DEFINE_integer("threads", 0, "Threads for both libraries (0: all allowed CPUs).")
_CHECK_QUERIES = flags.DEFINE_integer("check_queries", 20, "Queries checked against numpy brute force.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the random codes.")


def _popcount(x):
  import numpy as np  # pylint: disable=g-import-not-at-top
  if hasattr(np, "bitwise_count"):
    return np.bitwise_count(x)
  table = np.array([bin(v).count("1") for v in range(256)], np.uint8)
  return table[x.view(np.uint8)].reshape(x.shape + (4,)).sum(-1)


def _check_knn(q, db, dist, ids, faiss_dist, num_check) -> str:
  """'ok' or what differs. Distances against faiss; indices against the tie rule."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  if not np.array_equal(dist, faiss_dist.astype(np.int64)):
    return "distances differ from faiss"
  recomputed = _popcount(q[:, None, :] ^ db[ids]).sum(-1)
  if not np.array_equal(recomputed, dist):
    return "returned distances do not match the returned indices"
  order_ok = (np.diff(dist, axis=1) > 0) | ((np.diff(dist, axis=1) == 0) & (np.diff(ids, axis=1) > 0))
  if not order_ok.all():
    return "rows not ordered by (distance, index)"
  k = dist.shape[1]
  for j in range(min(num_check, q.shape[0])):
    d = _popcount(q[j] ^ db).sum(-1)
    ref = np.lexsort((np.arange(d.shape[0]), d))[:k]
    if not np.array_equal(ref, ids[j]):
      return f"query {j}: indices differ from the numpy tie-rule reference"
  return "ok"


def _check_radius(q, db, res, lims, faiss_d, faiss_i, radius, num_check) -> str:
  import numpy as np  # pylint: disable=g-import-not-at-top
  offsets = np.asarray(res.offsets)
  dist = np.asarray(res.distances)
  ids = np.asarray(res.indices)
  if not np.array_equal(offsets, lims.astype(np.int64)):
    return "result counts differ from faiss"
  for j in range(q.shape[0]):
    lo, hi = lims[j], lims[j + 1]
    order = np.lexsort((faiss_i[lo:hi], faiss_d[lo:hi]))
    if not (np.array_equal(dist[lo:hi], faiss_d[lo:hi][order])
            and np.array_equal(ids[lo:hi], faiss_i[lo:hi][order])):
      return f"query {j}: results differ from faiss"
  for j in range(min(num_check, q.shape[0])):
    d = _popcount(q[j] ^ db).sum(-1)
    ref = np.nonzero(d <= radius)[0]
    ref = ref[np.lexsort((ref, d[ref]))]
    if not np.array_equal(ref, ids[offsets[j]:offsets[j + 1]]):
      return f"query {j}: indices differ from the numpy reference"
  return "ok"


def run_benchmark(*, num_db: int, num_queries: int, k: int, radius: int, bits: List[int],
                  repeats: int, threads: int, check_queries: int, seed: int) -> List[Dict]:
  """Runs every comparison; returns one row per (bits, operation)."""
  import faiss  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from hashjax import search  # pylint: disable=g-import-not-at-top
  from experiments import process  # pylint: disable=g-import-not-at-top

  faiss.omp_set_num_threads(threads)
  compile_seconds = [0.0]

  def listener(event, duration, **kwargs):
    del kwargs
    if event.startswith("/jax/core/compile/"):
      compile_seconds[0] += duration

  jax.monitoring.register_event_duration_secs_listener(listener)
  rng = np.random.default_rng(seed)
  # Once per process, jax starts its CPU client and fills caches on its first traces and
  # compilations; a small search at another code length (160 bits) pays that here, so each
  # row's compile_s is what its own shape costs.
  t = time.perf_counter()
  warm_q = rng.integers(0, 2**32, size=(8, 5), dtype=np.uint32)
  warm_db = rng.integers(0, 2**32, size=(5000, 5), dtype=np.uint32)
  search.knn(warm_q, warm_db, 10)[0].block_until_ready()
  jax.block_until_ready(search.radius_search(warm_q, warm_db, 1))
  print(f"process warm-up (knn and radius search at 160 bits, N = 5000): {time.perf_counter() - t:.3f} s, "
        f"of which compile {compile_seconds[0]:.3f} s", flush=True)
  process.freeze_gc()  # full garbage collections would otherwise land inside some first calls
  rows = []
  for num_bits in bits:
    if num_bits % 32:
      raise ValueError(f"--bits: expected multiples of 32 (whole uint32 words), got {num_bits}")
    words = num_bits // 32
    db = rng.integers(0, 2**32, size=(num_db, words), dtype=np.uint32)
    q = rng.integers(0, 2**32, size=(num_queries, words), dtype=np.uint32)
    db_bytes = db.view(np.uint8)  # little-endian: same Hamming distance
    q_bytes = q.view(np.uint8)
    index = faiss.IndexBinaryFlat(num_bits)
    index.add(db_bytes)

    def hj_knn():
      d, i = search.knn(q, db, k)
      return np.asarray(d), np.asarray(i)

    def hj_radius():
      res = search.radius_search(q, db, radius)
      jax.block_until_ready(res)
      return res

    ops = (
        ("knn", hj_knn, lambda: index.search(q_bytes, k)),
        (f"radius<={radius}", hj_radius, lambda: index.range_search(q_bytes, radius + 1)),
    )
    for name, hj, fs in ops:
      compile_seconds[0] = 0.0
      t, cpu = time.perf_counter(), time.process_time()
      hj_out = hj()
      first, first_cpu = time.perf_counter() - t, time.process_time() - cpu
      compiled = compile_seconds[0]
      hj_times, hj_cpu, fs_times = [], [], []
      for _ in range(repeats):
        t, cpu = time.perf_counter(), time.process_time()
        hj_out = hj()
        hj_times.append(time.perf_counter() - t)
        hj_cpu.append(time.process_time() - cpu)
        t = time.perf_counter()
        fs_out = fs()
        fs_times.append(time.perf_counter() - t)
      if name == "knn":
        check = _check_knn(q, db, hj_out[0].astype(np.int64), hj_out[1], fs_out[0], check_queries)
      else:
        lims, fd, fi = fs_out
        check = _check_radius(q, db, hj_out, lims, fd.astype(np.int64), fi.astype(np.int64), radius,
                              check_queries)
      # A database 777 items smaller: nothing to compile where it spans as many chunks.
      compile_seconds[0] = 0.0
      if name == "knn":
        search.knn(q, db[:-777], k)[0].block_until_ready()
      else:
        jax.block_until_ready(search.radius_search(q, db[:-777], radius))
      recompiled = compile_seconds[0]
      # knn's first calls with other numbers of queries per scan: each compiles the program anew, more
      # samples of what a new shape costs.
      others = []
      if name == "knn":
        for count in (32, 64, 128):
          if count < num_queries:
            compile_seconds[0] = 0.0
            search.knn(q[:count], db, k)[0].block_until_ready()
            others.append(compile_seconds[0])
      hj_qps = num_queries / min(hj_times)
      fs_qps = num_queries / min(fs_times)
      rows.append(dict(bits=num_bits, op=name, hashjax_qps=hj_qps, faiss_qps=fs_qps,
                       ratio=hj_qps / fs_qps, compile_s=compiled, first_call_s=first,
                       first_cpu_s=max(0.0, first_cpu - min(hj_cpu)), recompile_s=recompiled,
                       other_shapes_compile_s=others,
                       load=os.getloadavg()[0],
                       check=check))
      print(_format_row(rows[-1]), flush=True)
  return rows


_HEADER = (f"{'bits':>5} {'op':<11}{'hashjax q/s':>13}{'faiss q/s':>12}{'ratio':>8}"
           f"{'compile_s':>11}{'first_s':>9}{'first_cpu_s':>13}{'N-777':>7}{'load':>6}  check"
           "  compile_s with 32, 64, 128 queries")


def _format_row(row: Dict) -> str:
  others = " ".join(f"{s:.3f}" for s in row["other_shapes_compile_s"])
  return (f"{row['bits']:>5} {row['op']:<11}{row['hashjax_qps']:>13.0f}{row['faiss_qps']:>12.0f}"
          f"{row['ratio']:>8.2f}{row['compile_s']:>11.3f}{row['first_call_s']:>9.3f}"
          f"{row['first_cpu_s']:>13.3f}{row['recompile_s']:>7.3f}{row['load']:>6.1f}  {row['check']}"
          f"{'  ' + others if others else ''}")


def main(argv):
  del argv
  threads = benchmarks.pin_threads(_THREADS.value)
  small = _SMALL.value
  num_db = 20_000 if small else _NUM_DB.value
  num_queries = 100 if small else _NUM_QUERIES.value
  repeats = 2 if small else _REPEATS.value
  print(f"N = {num_db}, Q = {num_queries}, k = {_K.value}, r = {_RADIUS.value}, "
        f"threads = {threads} (faiss OpenMP and XLA), best of {repeats}")
  print(_HEADER)
  run_benchmark(num_db=num_db, num_queries=num_queries, k=_K.value, radius=_RADIUS.value,
                bits=[int(b) for b in _BITS.value], repeats=repeats, threads=threads,
                check_queries=_CHECK_QUERIES.value, seed=_SEED.value)


if __name__ == "__main__":
  app.run(main)
