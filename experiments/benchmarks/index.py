r"""Benchmarks the inverted index (Nair et al. 2012, Sec. 5.6) and the cascade (Sec. 6).

  python -m experiments.benchmarks.index            # N = 10^6, 1000 queries, 32/24/20/16 bits, r = 0, 1, 2
  python -m experiments.benchmarks.index --small    # a quick check (N = 20000, 100 queries)
  python -m experiments.benchmarks.index --bits=32 --radii=0,1,2,3 --data=random

Three parts.

1. **Probe costs** (the measurements behind the layout in :mod:`hashjax.index.inverted`):
   nanoseconds per probe of ``np.searchsorted`` over ``U`` sorted random 32-bit
   keys, of one random ``np.take`` from a 2 MiB and from an 8 MiB bitmap, of the
   index's lookup by enumeration (radius 2), and nanoseconds per code of the
   scan of ``U`` codes.
2. **Radius search**: :func:`hashjax.index.lookup` (build once, then radius
   ``r`` lookups) against the linear scan :func:`hashjax.search.radius_search`
   on the same codes, per code length and radius, in microseconds per query.
   Every result is checked to be identical (distances, indices, offsets).
   Data (``--data``): ``random``: ``N`` uniform codes, queries are database
   codes with 0-2 random bits flipped (uniform 32-bit queries would find
   nothing: 10^6 random 32-bit codes are nearly all distinct); ``itq``: ITQ codes
   (fitted on 10^4 points) of ``N`` points of a 64-dimensional mixture of 1000
   Gaussians, queries are fresh points of the mixture: clustered codes with
   many duplicates and long result lists.
3. **Cascade** (:mod:`experiments.cascade`) on MNIST-10k with ITQ codes as the
   stand-in for learned codes: ``retrieval_split`` (1000 queries, 9000 database items, 5000 training items),
   ITQ fitted on the training items (key ``fold_in(key(seed), bits)``), an
   8-bit code shortlists and a 64-bit code classifies (Nair's relative
   threshold, ``k = 3`` bins). Prints the error of the 64-bit code alone and of
   the cascade for several shortlists, with the shortlist sizes.

Timings are the best of ``--repeats`` runs. The index runs in numpy on one
core; ``radius_search`` runs XLA on every core this process may use. Nair et
al. report 13.7 us per query for 1.46M items with 32-bit codes and an inverted
index on one core of a 2.33 GHz Xeon (radius not stated; their retrieval
metric, precision at Hamming distance < 2, needs r = 1), printed beside ours.
"""

from __future__ import annotations

import time
from typing import Dict, List

from absl import app, flags
import numpy as np

from experiments import benchmarks

_SMALL = flags.DEFINE_bool("small", False, "Quick mode: N = 20000, 100 queries, 2 repeats.")
_NUM_DB = flags.DEFINE_integer("num_db", 1_000_000, "Database size N.")
_NUM_QUERIES = flags.DEFINE_integer("num_queries", 1000, "Number of queries Q.")
_BITS = flags.DEFINE_list("bits", ["32", "24", "20", "16"], "Code lengths (<= 32).")
_RADII = flags.DEFINE_list("radii", ["0", "1", "2"], "Hamming radii r (items with d <= r).")
_DATA = flags.DEFINE_list("data", ["random", "itq"], "Datasets: random and/or itq.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed runs per method (the best is kept).")
_CASCADE = flags.DEFINE_bool("cascade", True, "Run the MNIST-10k cascade part.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the data, splits and ITQ keys.")

PAPER_US_PER_QUERY = 13.7  # Nair et al. 2012, Sec. 5.6: 1.46M items, 32 bits, one 2.33 GHz core




# ----------------------------------------------------------------------------
# 1. Probe costs.


def probe_costs(num_codes: int, repeats: int, seed: int) -> Dict[str, float]:
  """Nanoseconds per probe (or per scanned code) of the lookup's building blocks."""
  from hashjax import index  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  db = rng.integers(0, 2**32, (num_codes, 1), dtype=np.uint32)
  idx = index.build_inverted_index(db, num_bits=32)
  ones = np.uint32(1) << np.arange(32, dtype=np.uint32)
  masks = np.concatenate([[0], ones, (ones[:, None] | ones[None, :])[np.triu_indices(32, 1)]])  # weight <= 2
  queries = db[rng.integers(0, num_codes, max(1, (1 << 19) // masks.size)), 0]
  probes = (queries[:, None] ^ masks[None, :]).reshape(-1)
  n = probes.size
  out = {"probes": float(n), "U": float(idx.codes.shape[0])}
  keys = np.sort(np.unique(db[:, 0]))
  out["searchsorted_ns"] = benchmarks.best_time(lambda: np.searchsorted(keys, probes), repeats) / n * 1e9
  for mib in (2, 8):
    table = rng.integers(0, 256, mib << 20, dtype=np.uint8)  # random bytes: no shared zero page
    pos = probes >> np.uint32(32 - (20 + mib.bit_length() - 1))
    out[f"take_{mib}MiB_ns"] = benchmarks.best_time(lambda: np.take(table, pos), repeats) / n * 1e9
  # The whole lookup by enumeration: filters, rank and the few results (most probes miss).
  lookup_s = benchmarks.best_time(lambda: index.lookup(idx, queries[:, None], 2, method="enumerate"), repeats)
  out["index_probe_ns"] = lookup_s / n * 1e9
  few = db[:max(1, (1 << 19) // num_codes + 1)]
  scan_s = benchmarks.best_time(lambda: index.lookup(idx, few, 2, method="scan"), repeats)
  out["scan_ns_per_code"] = scan_s / (few.shape[0] * idx.codes.shape[0]) * 1e9
  return out


# ----------------------------------------------------------------------------
# 2. Radius search.


def _random_codes(rng, num_db: int, num_queries: int, num_bits: int):
  mask = np.uint32((1 << num_bits) - 1) if num_bits < 32 else np.uint32(0xFFFFFFFF)
  db = rng.integers(0, 2**32, (num_db, 1), dtype=np.uint32) & mask
  q = db[rng.integers(0, num_db, num_queries), 0].copy()
  for _ in range(2):  # flip 0-2 random bits (a flip may repeat and cancel)
    flip = rng.random(num_queries) < 0.5
    q[flip] ^= np.left_shift(np.uint32(1), rng.integers(0, num_bits, int(flip.sum())).astype(np.uint32))
  return db, q[:, None]


def _mixture(rng, n: int, centers: np.ndarray) -> np.ndarray:
  pick = rng.integers(0, centers.shape[0], n)
  return (centers[pick] + 0.5 * rng.standard_normal((n, centers.shape[1]))).astype(np.float32)


def _itq_codes(rng, num_db: int, num_queries: int, num_bits: int, seed: int):
  import jax  # pylint: disable=g-import-not-at-top
  from hashjax import baselines, codes  # pylint: disable=g-import-not-at-top
  centers = rng.standard_normal((1000, 64)).astype(np.float32) * 2.0
  train = _mixture(rng, 10_000, centers)
  params = baselines.fit("itq", train, num_bits=num_bits, key=jax.random.fold_in(jax.random.key(seed), num_bits))

  def encode(x):
    parts = [np.asarray(codes.pack_bits(baselines.encode("itq", params, x[s:s + 100_000])))
             for s in range(0, x.shape[0], 100_000)]
    return np.concatenate(parts)

  return encode(_mixture(rng, num_db, centers)), encode(_mixture(rng, num_queries, centers))


def _same(a, b) -> bool:
  return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(a, b))


def radius_benchmark(*, data: str, num_db: int, num_queries: int, bits: List[int], radii: List[int],
                     repeats: int, seed: int) -> List[Dict]:
  """One row per (bits, radius): index and linear-scan microseconds per query."""
  import jax  # pylint: disable=g-import-not-at-top
  from hashjax import index, search  # pylint: disable=g-import-not-at-top
  rows = []
  for num_bits in bits:
    rng = np.random.default_rng([seed, num_bits])
    if data == "random":
      db, q = _random_codes(rng, num_db, num_queries, num_bits)
    else:
      db, q = _itq_codes(rng, num_db, num_queries, num_bits, seed)
    t = time.perf_counter()
    idx = index.build_inverted_index(db, num_bits=num_bits)
    build_s = time.perf_counter() - t
    for r in radii:
      def run_index():
        return jax.block_until_ready(index.lookup(idx, q, r))

      def run_scan():
        return jax.block_until_ready(search.radius_search(q, db, r))

      ours, scan = run_index(), run_scan()  # warm-up (compiles the scan's kernels)
      index_s, scan_s = benchmarks.best_time(run_index, repeats), benchmarks.best_time(run_scan, repeats)
      rows.append(dict(data=data, bits=num_bits, r=r, U=int(idx.codes.shape[0]),
                       results=int(np.asarray(ours.offsets)[-1]) / num_queries,
                       method=index.choose_method(idx, r), build_s=build_s,
                       index_us=index_s / num_queries * 1e6, scan_us=scan_s / num_queries * 1e6,
                       check="ok" if _same(ours, scan) else "DIFFERENT"))
      print(_format_row(rows[-1]), flush=True)
  return rows


_HEADER = (f"{'data':<7}{'bits':>5}{'r':>3}{'distinct U':>11}{'res/q':>9}{'method':>10}{'build_s':>8}"
           f"{'index us/q':>11}{'scan us/q':>10}{'scan/index':>11}  check")


def _format_row(row: Dict) -> str:
  return (f"{row['data']:<7}{row['bits']:>5}{row['r']:>3}{row['U']:>11}{row['results']:>9.1f}"
          f"{row['method']:>10}{row['build_s']:>8.2f}{row['index_us']:>11.2f}{row['scan_us']:>10.1f}"
          f"{row['scan_us'] / row['index_us']:>11.1f}  {row['check']}")


# ----------------------------------------------------------------------------
# 3. Cascade.


def cascade_benchmark(seed: int, short_bits: int = 8, long_bits: int = 64, k: int = 3) -> List[Dict]:
  """MNIST-10k, ITQ codes: the long code alone against short-code shortlists."""
  import jax  # pylint: disable=g-import-not-at-top
  from hashjax import baselines, codes, data, metrics  # pylint: disable=g-import-not-at-top
  from experiments import cascade  # pylint: disable=g-import-not-at-top
  features, labels = data.load_mnist_t10k()
  split = data.retrieval_split(labels, seed=seed)
  words = {}
  for num_bits in (short_bits, long_bits):
    params = baselines.fit("itq", features[split.train], num_bits=num_bits,
                           key=jax.random.fold_in(jax.random.key(seed), num_bits))
    words[num_bits] = [np.asarray(codes.pack_bits(baselines.encode("itq", params, features[part])))
                       for part in (split.query, split.database)]
  (sq, sx), (lq, lx) = words[short_bits], words[long_bits]
  q_labels, db_labels = labels[split.query], labels[split.database]
  num_db = len(split.database)
  rows = []

  def add(name, preds, sizes):
    sizes = np.asarray(sizes)
    rows.append(dict(stage=name, error=float(metrics.error_rate(np.asarray(preds), q_labels)),
                     mean_size=float(sizes.mean()), median_size=float(np.median(sizes)),
                     fraction=float(sizes.mean()) / num_db))
    r = rows[-1]
    print(f"  {r['stage']:<34}{100 * r['error']:>8.2f}{r['mean_size']:>12.1f}{r['median_size']:>12.0f}"
          f"{100 * r['fraction']:>11.1f}%", flush=True)

  print(f"\nCascade (Nair Sec. 6) on MNIST-10k, ITQ codes: {len(split.query)} queries, {num_db} database "
        f"items; kNN with relative threshold k = {k} bins")
  print(f"  {'stage':<34}{'error %':>8}{'mean size':>12}{'median size':>12}{'of db':>12}")
  for num_bits, (qw, xw) in ((short_bits, (sq, sx)), (long_bits, (lq, lx))):
    preds = metrics.knn_classify(codes.hamming_distance(qw, xw), db_labels, num_classes=10,
                                 num_bits=num_bits, k=k)
    add(f"{num_bits}-bit ITQ alone", preds, np.full(len(split.query), num_db))
  for kw in ({"shortlist_bins": 1}, {"shortlist_bins": 2}, {"shortlist_bins": 3}, {"shortlist_bins": 4},
             {"shortlist_radius": 1}, {"shortlist_radius": 2}, {"shortlist_radius": 3}):
    out = cascade.cascade_knn_classify(sq, sx, lq, lx, db_labels, short_bits=short_bits, long_bits=long_bits,
                                     k=k, num_classes=10, **kw)
    name = ", ".join(f"{key.replace('shortlist_', '')} {v}" for key, v in kw.items())
    add(f"cascade {short_bits}->{long_bits}, {name}", out.predictions, out.shortlist_sizes)
  return rows


def main(argv):
  del argv
  small = _SMALL.value
  num_db = 20_000 if small else _NUM_DB.value
  num_queries = 100 if small else _NUM_QUERIES.value
  repeats = 2 if small else _REPEATS.value
  bits = [int(b) for b in _BITS.value]
  radii = [int(r) for r in _RADII.value]
  costs = probe_costs(num_db, repeats, _SEED.value)
  print(f"Probe costs (U = {int(costs['U'])} random 32-bit codes, {int(costs['probes'])} probes of radius 2):")
  print(f"  np.searchsorted over the sorted codes: {costs['searchsorted_ns']:.1f} ns/probe")
  print(f"  np.take from a 2 MiB table: {costs['take_2MiB_ns']:.1f} ns/probe, from 8 MiB: "
        f"{costs['take_8MiB_ns']:.1f} ns/probe")
  print(f"  hashjax.index lookup by enumeration (filters, rank, results): {costs['index_probe_ns']:.1f} ns/probe; "
        f"scan: {costs['scan_ns_per_code']:.1f} ns per distinct code")
  print(f"\nRadius search, N = {num_db}, Q = {num_queries}, best of {repeats}; results identical to "
        "hashjax.search.radius_search in every row ('check')")
  print(f"paper (Nair et al. Sec. 5.6): {PAPER_US_PER_QUERY} us/query, 1.46M items, 32 bits, inverted index, "
        "one 2.33 GHz core")
  print(_HEADER)
  for data in _DATA.value:
    if data not in ("random", "itq"):
      raise app.UsageError(f"--data: expected random or itq, got {data!r}")
    radius_benchmark(data=data, num_db=num_db, num_queries=num_queries, bits=bits, radii=radii,
                     repeats=repeats, seed=_SEED.value)
  if _CASCADE.value:
    cascade_benchmark(_SEED.value)


if __name__ == "__main__":
  app.run(main)
