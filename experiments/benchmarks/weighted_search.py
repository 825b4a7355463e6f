r"""Benchmarks weighted k-NN over packed codes: hashjax.search.knn with weights= against the unweighted search
and against numpy's unpack-and-dot, on the same data, in one process.

  python -m experiments.benchmarks.weighted_search                  # N = 10^6, 64 bits, 1000 queries, k = 100
  python -m experiments.benchmarks.weighted_search --threads=1      # one thread (XLA's pool via the affinity)
  python -m experiments.benchmarks.weighted_search --small          # a quick check (N = 2 * 10^5, 256 queries)
  python -m experiments.benchmarks.weighted_search --weights=spread --bits=128

``N`` random database codes, ``Q`` random queries and random weights (seeded numpy ``Generator``; ``--weights``:
``uniform`` on [0, 1), ``spread`` on [0.5, 1.5), ``exponential``, ``sparse``: 40% zeros, the rest uniform).
Rows, each in queries per second, best of ``--repeats`` runs with the methods alternating (a busy machine slows
all alike; compare the ratios):

* ``hamming``: :func:`hashjax.search.knn` without weights;
* ``weighted``: ``knn(q, x, k, weights=w)`` on concrete arrays (on the CPU backend over at least
  ``search.PRUNE_MIN_ITEMS`` items: the pruned scan);
* ``weighted jit``: the same under ``jax.jit`` (the exact scan);
* ``numpy``: per query ``np.unpackbits`` of the XOR, ``@ w``, then the k smallest by (distance, index), timed
  on ``--numpy_queries`` queries.

``ratio`` is each row's throughput over ``hamming``'s (over ``numpy``'s in the last column). ``first_s`` is the
first call's wall time (compilation included). Checks: the two weighted rows give the same bits; against a
float64 numpy scan of ``--check_queries`` queries, the distances agree within float32 rounding, each row is
ordered by (distance, index), and no item left out is nearer than the k-th.
"""

from __future__ import annotations

import os
import time

from absl import app, flags

from experiments import benchmarks

_SMALL = flags.DEFINE_bool("small", False, "Quick mode: N = 200000, 256 queries, 2 repeats.")
_NUM_DB = flags.DEFINE_integer("num_db", 1_000_000, "Database size N.")
_NUM_QUERIES = flags.DEFINE_integer("num_queries", 1000, "Number of queries Q.")
_K = flags.DEFINE_integer("k", 100, "Neighbours per query.")
_BITS = flags.DEFINE_integer("bits", 64, "Code length (a multiple of 32).")
_WEIGHTS = flags.DEFINE_enum("weights", "uniform", ["uniform", "spread", "exponential", "sparse"],
                             "Distribution of the random weights.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed runs per method (the best is kept).")
_THREADS = flags.DEFINE_integer("threads", 0, "Threads for XLA (0: all allowed CPUs).")
_NUMPY_QUERIES = flags.DEFINE_integer("numpy_queries", 20, "Queries timed for the numpy baseline.")
_CHECK_QUERIES = flags.DEFINE_integer("check_queries", 10, "Queries checked against a float64 numpy scan.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the random codes and weights.")


def _random_weights(rng, num_bits: int, kind: str):
  import numpy as np  # pylint: disable=g-import-not-at-top
  if kind == "uniform":
    return rng.random(num_bits).astype(np.float32)
  if kind == "spread":
    return (0.5 + rng.random(num_bits)).astype(np.float32)
  if kind == "exponential":
    return rng.exponential(size=num_bits).astype(np.float32)
  return np.where(rng.random(num_bits) < 0.4, 0.0, rng.random(num_bits)).astype(np.float32)


def numpy_knn(q, db, w, k: int):
  """numpy's unpack-and-dot: ``(float32[Q, k], int64[Q, k])`` by (distance, index)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  num_bits = w.shape[0]
  dists, ids = [], []
  for row in q:
    bits = np.unpackbits((db ^ row).view(np.uint8), axis=1, bitorder="little")[:, :num_bits]
    d = bits @ w
    part = np.argpartition(d, k - 1)[:k]
    kth = d[part].max()
    cand = np.nonzero(d <= kth)[0]  # the whole tie group of the k-th distance, then the tie rule
    cand = cand[np.lexsort((cand, d[cand]))][:k]
    dists.append(d[cand])
    ids.append(cand)
  return np.stack(dists), np.stack(ids)


def _check(q, db, w, dist, ids, num_check: int) -> str:
  """'ok' or what differs, against a float64 scan."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  num_bits = w.shape[0]
  order_ok = (np.diff(dist, axis=1) > 0) | ((np.diff(dist, axis=1) == 0) & (np.diff(ids, axis=1) > 0))
  if not order_ok.all():
    return "rows not ordered by (distance, index)"
  tol = 2 * num_bits * 2.0**-24
  for j in range(min(num_check, q.shape[0])):
    bits = np.unpackbits((db ^ q[j]).view(np.uint8), axis=1, bitorder="little")[:, :num_bits]
    d64 = bits @ w.astype(np.float64)
    if np.any(np.abs(dist[j] - d64[ids[j]]) > tol * d64[ids[j]]):
      return f"query {j}: distances differ from float64 beyond float32 rounding"
    left_out = np.ones(db.shape[0], bool)
    left_out[ids[j]] = False
    if np.any(d64[left_out] < dist[j, -1] * (1 - tol)):
      return f"query {j}: an item left out is nearer than the k-th"
  return "ok"


def run_benchmark(*, num_db: int, num_queries: int, k: int, num_bits: int, weights: str, repeats: int,
                  numpy_queries: int, check_queries: int, seed: int):
  """Runs the comparison; prints one row per method and returns ``{method: queries per second}``."""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from hashjax import search  # pylint: disable=g-import-not-at-top

  if num_bits % 32:
    raise ValueError(f"--bits: expected a multiple of 32 (whole uint32 words), got {num_bits}")
  rng = np.random.default_rng(seed)
  words = num_bits // 32
  db = rng.integers(0, 2**32, size=(num_db, words), dtype=np.uint32)
  q = rng.integers(0, 2**32, size=(num_queries, words), dtype=np.uint32)
  w = _random_weights(rng, num_bits, weights)
  jitted = jax.jit(lambda a, b, c: search.knn(a, b, k, weights=c))
  qj, dbj, wj = (jax.device_put(a) for a in (q, db, w))
  methods = {
      "hamming": lambda: search.knn(q, db, k),
      "weighted": lambda: search.knn(q, db, k, weights=w),
      "weighted jit": lambda: jitted(qj, dbj, wj),
      "numpy": lambda: numpy_knn(q[:numpy_queries], db, w, k),
  }
  counts = {name: num_queries for name in methods}
  counts["numpy"] = min(numpy_queries, num_queries)
  first, outputs, times = {}, {}, {name: [] for name in methods}
  for name, fn in methods.items():
    t = time.perf_counter()
    outputs[name] = jax.block_until_ready(fn())
    first[name] = time.perf_counter() - t
  for _ in range(repeats):
    for name, fn in methods.items():
      t = time.perf_counter()
      jax.block_until_ready(fn())
      times[name].append(time.perf_counter() - t)
  qps = {name: counts[name] / min(times[name]) for name in methods}
  d, i = (np.asarray(a) for a in outputs["weighted"])
  dj, ij = (np.asarray(a) for a in outputs["weighted jit"])
  same = "same bits" if np.array_equal(d, dj) and np.array_equal(i, ij) else "the two weighted rows differ"
  check = _check(q, db, w, d, i, check_queries)
  print(f"{'method':<14}{'q/s':>10}{'ratio':>8}{'first_s':>9}{'vs numpy':>10}")
  for name in methods:
    print(f"{name:<14}{qps[name]:>10.0f}{qps[name] / qps['hamming']:>8.3f}{first[name]:>9.2f}"
          f"{qps[name] / qps['numpy']:>10.1f}")
  print(f"checks: {same}; against float64: {check}; load {os.getloadavg()[0]:.1f}")
  return qps


def main(argv):
  del argv
  threads = benchmarks.pin_threads(_THREADS.value)
  small = _SMALL.value
  num_db = 200_000 if small else _NUM_DB.value
  num_queries = 256 if small else _NUM_QUERIES.value
  repeats = 2 if small else _REPEATS.value
  print(f"N = {num_db}, Q = {num_queries}, k = {_K.value}, {_BITS.value} bits, {_WEIGHTS.value} weights, "
        f"threads = {threads}, best of {repeats} (numpy: {min(_NUMPY_QUERIES.value, num_queries)} queries)")
  run_benchmark(num_db=num_db, num_queries=num_queries, k=_K.value, num_bits=_BITS.value, weights=_WEIGHTS.value,
                repeats=repeats, numpy_queries=_NUMPY_QUERIES.value, check_queries=_CHECK_QUERIES.value,
                seed=_SEED.value)


if __name__ == "__main__":
  app.run(main)
