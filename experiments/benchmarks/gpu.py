r"""Benchmarks hashjax on an accelerator (or any jax backend) in (query, item) pairs per second, beside naive
``jax.numpy`` programs run in the same process on the same data.

  python -m experiments.benchmarks.gpu                 # N = 10^6, 1000 queries, k = 100, on the default backend
  python -m experiments.benchmarks.gpu --small         # a quick check (N = 20000, 100 queries)
  JAX_PLATFORMS=cpu python -m experiments.benchmarks.gpu --small --threads=2

``N`` random database codes, ``Q`` random queries, labels of ``--classes`` classes and random weights (seeded numpy
``Generator``). Rows, each the best of ``--repeats`` runs after a first (compiling) call, hashjax and its naive
peer alternating:

* ``knn``: :func:`hashjax.search.knn` at each of ``--bits``, against a jitted popcount of the ``[Q, N]``
  distances (``--naive_rows`` queries at a time) and ``lax.top_k``;
* ``weighted knn``: ``knn(..., weights=w)`` at ``--weighted_bits``; its peer is hashjax's unweighted ``knn``
  (the target: at least 0.5 on a GPU);
* ``radius``: :func:`hashjax.search.radius_search` at ``--radius`` against the naive popcount and a count of the
  items within the radius (the naive program returns counts, not the items);
* ``histogram``: :func:`hashjax.histograms.hamming_histogram` with labels against the naive compare-and-count
  ``sum(d[:, :, None] == arange(b + 1), axis=1)``, plain and masked by label agreement;
* ``evaluate``: :func:`hashjax.evaluate.evaluate_codes` with labels (histograms and every metric), against the
  same naive histograms.

``G pairs/s`` is ``Q N`` over the best time, in billions. ``check`` compares each result with its naive peer:
k-NN distances, radius result counts, histograms cell by cell; for weighted k-NN and evaluation (whose
histograms are those of the histogram row), that the distances and metrics are finite.
"""

from __future__ import annotations

import time

from absl import app, flags

from experiments import benchmarks

_SMALL = flags.DEFINE_bool("small", False, "Quick mode: N = 20000, 100 queries, 2 repeats.")
_NUM_DB = flags.DEFINE_integer("num_db", 1_000_000, "Database size N.")
_NUM_QUERIES = flags.DEFINE_integer("num_queries", 1000, "Number of queries Q.")
_K = flags.DEFINE_integer("k", 100, "Neighbours per query.")
_RADIUS = flags.DEFINE_integer("radius", 2, "Hamming radius r (items with d <= r).")
_BITS = flags.DEFINE_list("bits", ["32", "64", "128"], "Code lengths of k-NN (multiples of 32).")
_WEIGHTED_BITS = flags.DEFINE_integer("weighted_bits", 64, "Code length of weighted k-NN.")
_HIST_BITS = flags.DEFINE_integer("hist_bits", 32, "Code length of radius search, histograms and evaluation.")
_CLASSES = flags.DEFINE_integer("classes", 10, "Classes of the labels.")
_NAIVE_ROWS = flags.DEFINE_integer("naive_rows", 100, "Queries per step of the naive programs.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed runs per method (the best is kept).")
_THREADS = flags.DEFINE_integer("threads", 0, "CPU threads for XLA's CPU backend (0: all allowed CPUs).")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the random codes, labels and weights.")


def _naive_programs(num_bits: int, k: int, radius: int, rows: int):
  """Jitted naive programs over ``rows`` queries at a time: k-NN, radius counts and labelled histograms."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from jax import lax  # pylint: disable=g-import-not-at-top

  def distances(q, db):
    return lax.population_count(q[:, None, :] ^ db[None]).astype(jnp.int32).sum(-1)

  def batched(fn, q, *rest):
    out = lax.map(lambda args: fn(*args), (q.reshape(-1, rows, q.shape[1]),) + rest)
    return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), out)

  @jax.jit
  def knn(q, db):
    def one(qb):
      neg, ids = lax.top_k(-distances(qb, db), k)
      return -neg, ids
    return batched(one, q)

  @jax.jit
  def radius_counts(q, db):
    return batched(lambda qb: jnp.sum(distances(qb, db) <= radius, axis=1, dtype=jnp.int32), q)

  @jax.jit
  def histogram(q, db, ql, dbl):
    def one(qb, lb):
      hit = distances(qb, db)[:, :, None] == jnp.arange(num_bits + 1, dtype=jnp.int32)
      total = jnp.sum(hit, axis=1, dtype=jnp.int32)
      relevant = jnp.sum(hit & (lb[:, None] == dbl)[:, :, None], axis=1, dtype=jnp.int32)
      return jnp.stack([total - relevant, relevant], -1)
    return batched(one, q, ql.reshape(-1, rows))

  return knn, radius_counts, histogram


def _first(fn):
  """``(result of the first call, its seconds)``: the call that compiles."""
  import jax  # pylint: disable=g-import-not-at-top
  t = time.perf_counter()
  out = jax.block_until_ready(fn())
  return out, time.perf_counter() - t


def run_benchmark(*, num_db: int, num_queries: int, k: int, radius: int, bits: list, weighted_bits: int,
                  hist_bits: int, classes: int, naive_rows: int, repeats: int, seed: int) -> list:
  """Runs every comparison; returns one row per (operation, bits)."""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from hashjax import evaluate, histograms, search  # pylint: disable=g-import-not-at-top

  rng = np.random.default_rng(seed)
  naive_rows = min(naive_rows, num_queries)
  if num_queries % naive_rows:
    raise ValueError(f"--naive_rows: expected a divisor of the {num_queries} queries, got {naive_rows}")
  pairs = num_queries * num_db
  ql = jax.device_put(rng.integers(0, classes, num_queries).astype(np.int32))
  dbl = jax.device_put(rng.integers(0, classes, num_db).astype(np.int32))
  rows = []

  def codes(num_bits):
    words = num_bits // 32
    return (jax.device_put(rng.integers(0, 2**32, (num_queries, words), dtype=np.uint32)),
            jax.device_put(rng.integers(0, 2**32, (num_db, words), dtype=np.uint32)))

  def record(op, num_bits, ours, peer, peer_name, check):
    out, first = _first(ours)
    peer_out, peer_first = _first(peer)
    ours_s, peer_s = float("inf"), float("inf")
    for _ in range(repeats):
      ours_s = min(ours_s, benchmarks.best_time(lambda: jax.block_until_ready(ours()), 1))
      peer_s = min(peer_s, benchmarks.best_time(lambda: jax.block_until_ready(peer()), 1))
    row = dict(op=op, bits=num_bits, gpairs=pairs / ours_s / 1e9, peer=peer_name,
               peer_gpairs=pairs / peer_s / 1e9, ratio=peer_s / ours_s, first_s=first, peer_first_s=peer_first,
               check=check(out, peer_out))
    rows.append(row)
    print(_format_row(row), flush=True)

  same = lambda a, b: "ok" if np.array_equal(np.asarray(a), np.asarray(b)) else "DIFFERS"
  for num_bits in bits:
    q, db = codes(num_bits)
    naive_knn, _, _ = _naive_programs(num_bits, k, radius, naive_rows)
    record("knn", num_bits, lambda: search.knn(q, db, k), lambda: naive_knn(q, db), "naive top_k",
           lambda a, b: same(a[0], b[0]))
  q, db = codes(weighted_bits)
  w = rng.random(weighted_bits).astype(np.float32)
  record("weighted knn", weighted_bits, lambda: search.knn(q, db, k, weights=w), lambda: search.knn(q, db, k),
         "hashjax knn", lambda a, b: "ok" if np.all(np.isfinite(np.asarray(a[0]))) else "not finite")
  q, db = codes(hist_bits)
  _, naive_radius, naive_hist = _naive_programs(hist_bits, k, radius, naive_rows)
  record(f"radius<={radius}", hist_bits, lambda: search.radius_search(q, db, radius), lambda: naive_radius(q, db),
         "naive count", lambda a, b: same(np.diff(np.asarray(a.offsets)), b))
  hist = lambda: histograms.hamming_histogram(q, db, num_bits=hist_bits, query_labels=ql, db_labels=dbl)
  record("histogram", hist_bits, hist, lambda: naive_hist(q, db, ql, dbl), "naive compare", same)
  finite = lambda a, b: "ok" if all(np.isfinite(a[key]) for key in ("tie_aware_ap", "tie_aware_ndcg")) else "NaN"
  record("evaluate", hist_bits,
         lambda: evaluate.evaluate_codes(q, db, num_bits=hist_bits, query_labels=ql, db_labels=dbl, k=k),
         lambda: naive_hist(q, db, ql, dbl), "naive compare", finite)
  return rows


_HEADER = f"{'op':<13}{'bits':>5}{'G pairs/s':>11}  {'peer':<14}{'G pairs/s':>10}{'ratio':>8}{'first_s':>9}  check"


def _format_row(row: dict) -> str:
  return (f"{row['op']:<13}{row['bits']:>5}{row['gpairs']:>11.3f}  {row['peer']:<14}{row['peer_gpairs']:>10.3f}"
          f"{row['ratio']:>8.2f}{row['first_s']:>9.2f}  {row['check']}")


def main(argv):
  del argv
  threads = benchmarks.pin_threads(_THREADS.value)
  import jax  # pylint: disable=g-import-not-at-top
  small = _SMALL.value
  num_db = 20_000 if small else _NUM_DB.value
  num_queries = 100 if small else _NUM_QUERIES.value
  repeats = 2 if small else _REPEATS.value
  device = jax.devices()[0]
  print(f"device: {device.platform} {device.device_kind} (jax {jax.__version__}; {threads} CPU threads allowed)")
  print(f"N = {num_db}, Q = {num_queries}, k = {_K.value}, r = {_RADIUS.value}, {_CLASSES.value} classes, "
        f"best of {repeats}; ratio: hashjax's pairs/s over its peer's")
  print(_HEADER)
  run_benchmark(num_db=num_db, num_queries=num_queries, k=_K.value, radius=_RADIUS.value,
                bits=[int(b) for b in _BITS.value], weighted_bits=_WEIGHTED_BITS.value, hist_bits=_HIST_BITS.value,
                classes=_CLASSES.value, naive_rows=_NAIVE_ROWS.value, repeats=repeats, seed=_SEED.value)


if __name__ == "__main__":
  app.run(main)
