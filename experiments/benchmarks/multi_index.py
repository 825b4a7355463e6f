r"""Benchmarks exact k-NN and radius search by multi-index hashing (hashjax.index) against the scan and faiss.

  python -m experiments.benchmarks.multi_index                 # N = 10^7 codes of 64 bits, 1000 queries, k = 10, 100
  python -m experiments.benchmarks.multi_index --small         # a quick check (N = 2 * 10^6, 200 queries)
  python -m experiments.benchmarks.multi_index --threads=1     # every method on one thread
  python -m experiments.benchmarks.multi_index --generators=uniform --ks=10
  python -m experiments.benchmarks.multi_index --generators=dense --dense_centres=1000 --flip=0.05
  python -m experiments.benchmarks.multi_index --generators=skewed --skew=0.3 --nofaiss
  python -m experiments.benchmarks.multi_index --generators=uniform --ks= --radii=8,12,16 --nofaiss  # radius search
  python -m experiments.benchmarks.multi_index --num_db=100000000 --generators=dense --dense_centres=10000 \
      --flip=0.1 --ks=10 --mmap --nofaiss --repeats=2     # 10^8 codes, searched memory-mapped

Four code generators (seeded numpy ``Generator`` and ``jax.random`` key):

* ``clustered``: LSH codes of clustered data. A Gaussian mixture in ``--dim`` dimensions: ``--clusters``
  centres drawn from ``N(0, I)``, each point a uniformly chosen centre plus ``--sigma`` times ``N(0, I)`` noise;
  coded by ``hashjax.baselines`` LSH (``--bits`` random hyperplanes through the mean of the first 10^5 points);
  queries are fresh points of the same mixture.
* ``dense``: tight, dense clusters of codes: ``--dense_centres`` uniformly random codes, each item (and query)
  a uniformly chosen centre with every bit flipped with probability ``--flip`` (so thousands of candidates
  share a query's buckets).
* ``skewed``: independent bits, not uniform: bit ``i`` is 1 with its own probability, drawn uniformly from
  ``[0.5 - --skew, 0.5 + --skew]`` (no clusters, but a query's near buckets are fuller than the mean).
* ``uniform``: uniformly random codes and queries, multi-index hashing's worst case (neighbours are far away,
  so the probes per substring grow as ``C(s, r)``).

Rows, each in milliseconds per query, best of ``--repeats`` runs with the methods alternating (a busy machine
slows all alike; compare the ratios):

* ``scan``: :func:`hashjax.search.knn` (exact; XLA on every allowed CPU);
* ``mih``: :func:`hashjax.index.multi_index_knn` with its default ``method="auto"`` (exact; its compiled search
  on a thread per allowed CPU);
  ``ratio`` is ``scan / mih``, the target being at least 20 on codes with structure;
* with ``--radii``, ``r=R scan`` and ``r=R mih``: :func:`hashjax.search.radius_search` and
  :func:`hashjax.index.multi_index_radius` at radius ``R`` (the items within it per query printed below);
* ``faiss flat``: faiss ``IndexBinaryFlat.search`` (exact), whose distances must equal ours;
* ``faiss mih nflip=f``: faiss ``IndexBinaryMultiHash`` with ``m`` tables of ``floor(b / m)`` bits (the same
  ``m`` as ours) probing substrings within ``f`` bits: approximate, so its ``recall`` is printed: the fraction
  of ranks ``1..k`` at which it returns an item at the exact k-NN's distance (1 = a correct k-NN up to ties).

With ``--mmap`` the index is saved (:func:`hashjax.index.save`, into a temporary folder under ``--tmpdir``),
the codes in memory are dropped and both the scan and multi-index hashing search the index loaded
memory-mapped (:func:`hashjax.index.load` with ``mmap=True``): the codes are read from the page cache, never
copied whole. ``--nofaiss`` leaves out the faiss rows (their indexes copy the codes).

Also printed: the build time of the index, its bytes (tables: entries and offsets, and the copy of the codes
sorted by value it reads candidates from where it keeps one, not the database codes it refers to) against the
packed codes', and
``uptime``'s load. Checks: ``mih`` returns exactly ``scan``'s
distances and indices for every query.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import tempfile
import time
from typing import Dict, List, Optional, Sequence

from absl import app, flags

from experiments import benchmarks

_SMALL = flags.DEFINE_bool("small", False, "Quick mode: N = 2000000 (above SCAN_BELOW_WORDS), 200 queries, 1 repeat.")
_NUM_DB = flags.DEFINE_integer("num_db", 10_000_000, "Database size N.")
_NUM_QUERIES = flags.DEFINE_integer("num_queries", 1000, "Number of queries Q.")
_KS = flags.DEFINE_list("ks", ["10", "100"], "Neighbours per query.")
_RADII = flags.DEFINE_list("radii", [], "Also time radius search at these radii (multi_index_radius against "
                           "search.radius_search).")
_BITS = flags.DEFINE_integer("bits", 64, "Code length.")
_GENERATORS = flags.DEFINE_list("generators", ["clustered", "dense", "skewed", "uniform"],
                                "Code generators (clustered, dense, skewed, uniform).")
_CLUSTERS = flags.DEFINE_integer("clusters", 10_000, "Gaussian mixture: number of centres.")
_DIM = flags.DEFINE_integer("dim", 32, "Gaussian mixture: dimension.")
_SIGMA = flags.DEFINE_float("sigma", 0.3, "Gaussian mixture: noise scale around a centre (centres ~ N(0, I)).")
_DENSE_CENTRES = flags.DEFINE_integer("dense_centres", 1000, "Dense clusters: number of centre codes.")
_FLIP = flags.DEFINE_float("flip", 0.05, "Dense clusters: probability of flipping each bit of the centre.")
_SKEW = flags.DEFINE_float("skew", 0.3, "Skewed bits: each bit's probability of a 1 is uniform in 0.5 +- skew.")
_NFLIPS = flags.DEFINE_list("nflips", ["0", "1", "2"], "faiss IndexBinaryMultiHash nflip values.")
_MMAP = flags.DEFINE_bool("mmap", False, "Search the index saved and loaded memory-mapped (index.load(mmap=True)).")
_TMPDIR = flags.DEFINE_string("tmpdir", None, "Where --mmap saves the index (a temporary folder; None: the system's).")
_FAISS = flags.DEFINE_bool("faiss", True, "Also time faiss IndexBinaryFlat and IndexBinaryMultiHash.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed runs per method (the best is kept).")
_THREADS = flags.DEFINE_integer("threads", 0,
                                "Threads (CPUs) for XLA, faiss and multi-index hashing (0: all allowed CPUs).")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the data.")


def _uptime() -> str:
  try:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
  except OSError:
    return "load average: " + ", ".join(f"{v:.2f}" for v in os.getloadavg())


def _codes(generator: str, num_db: int, num_queries: int, num_bits: int, seed: int):
  """``(db uint32[N, W], queries uint32[Q, W])`` of the generator (module docstring)."""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from hashjax import baselines, codes  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  num_words = -(-num_bits // 32)
  if generator == "uniform":
    def draw(n):
      words = rng.integers(0, 2**32, (n, num_words), dtype=np.uint32)
      if num_bits % 32:
        words[:, -1] &= np.uint32((1 << (num_bits % 32)) - 1)
      return words
    return draw(num_db), draw(num_queries)
  if generator == "dense":
    centres = rng.integers(0, 2, (_DENSE_CENTRES.value, num_bits), dtype=np.uint8)

    def dense(n):
      step = 1 << 20
      return np.concatenate([np.asarray(codes.pack_bits(
          centres[rng.integers(0, centres.shape[0], min(step, n - s))]
          ^ (rng.random((min(step, n - s), num_bits), dtype=np.float32) < _FLIP.value)))
          for s in range(0, n, step)])
    return dense(num_db), dense(num_queries)
  if generator == "skewed":
    if not 0 <= _SKEW.value <= 0.5:
      raise ValueError(f"--skew: expected a value in [0, 0.5] (probabilities of a 1 in 0.5 +- skew), got {_SKEW.value}")
    ones = rng.uniform(0.5 - _SKEW.value, 0.5 + _SKEW.value, num_bits).astype(np.float32)

    def skewed(n):
      step = 1 << 20
      return np.concatenate([np.asarray(codes.pack_bits(
          rng.random((min(step, n - s), num_bits), dtype=np.float32) < ones)) for s in range(0, n, step)])
    return skewed(num_db), skewed(num_queries)
  if generator != "clustered":
    raise ValueError(f"--generators: expected clustered, dense, skewed or uniform, got {generator!r}")
  centres = rng.standard_normal((_CLUSTERS.value, _DIM.value)).astype(np.float32)

  def points(n):
    noise = rng.standard_normal((n, _DIM.value), dtype=np.float32)
    return centres[rng.integers(0, centres.shape[0], n)] + np.float32(_SIGMA.value) * noise

  first = points(min(num_db, 100_000))
  params = baselines.fit("lsh", first, num_bits=num_bits, key=jax.random.key(seed))
  step = 1 << 20

  def encode(x):
    return np.concatenate([np.asarray(codes.pack_bits(baselines.encode("lsh", params, x[s:s + step])))
                           for s in range(0, x.shape[0], step)])

  parts = [encode(first)]
  for s in range(first.shape[0], num_db, step):
    parts.append(encode(points(min(step, num_db - s))))
  return np.concatenate(parts), encode(points(num_queries))




def _alternating(scan, multi, repeats: int, num_queries: int) -> Dict[str, float]:
  """Milliseconds per query of ``scan`` and ``multi``, each the best of ``repeats`` runs, the two alternating."""
  times = {"scan": float("inf"), "mih": float("inf")}
  for _ in range(repeats):
    times["scan"] = min(times["scan"], benchmarks.best_time(scan, 1))
    times["mih"] = min(times["mih"], benchmarks.best_time(multi, 1))
  return {name: s / num_queries * 1e3 for name, s in times.items()}


def _peak_rss_gib() -> float:
  """This process's peak resident memory so far, GiB (Linux reports ``ru_maxrss`` in KiB)."""
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def run_benchmark(*, num_db: int, num_queries: int, ks: List[int], num_bits: int, generators: List[str],
                  nflips: List[int], repeats: int, threads: int, seed: int, mmap: bool = False,
                  tmpdir: Optional[str] = None, use_faiss: bool = True, radii: Sequence[int] = ()) -> List[Dict]:
  """Runs every comparison; returns one row per (generator, k or radius, method)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from hashjax import index, search  # pylint: disable=g-import-not-at-top
  from experiments import process  # pylint: disable=g-import-not-at-top

  if use_faiss:
    import faiss  # pylint: disable=g-import-not-at-top
    faiss.omp_set_num_threads(threads)
  rows = []
  for generator in generators:
    t = time.perf_counter()
    db, q = _codes(generator, num_db, num_queries, num_bits, seed)
    print(f"\n[{generator}] N = {db.shape[0]}, Q = {q.shape[0]}, {num_bits} bits: codes made in "
          f"{time.perf_counter() - t:.1f} s", flush=True)
    process.freeze_gc()
    t = time.perf_counter()
    mih = index.build_multi_index(db, num_bits=num_bits)
    build_s = time.perf_counter() - t
    copy = "with" if mih.sorted_words is not None else "without"
    print(f"  multi-index build: {build_s:.2f} s, m = {mih.num_tables} tables of "
          f"{np.diff(mih.bounds).tolist()} bits, {copy} the sorted codes: {mih.nbytes / 2**20:.1f} MiB = "
          f"{mih.nbytes / db.nbytes:.2f}x the packed codes ({db.nbytes / 2**20:.1f} MiB; "
          f"{(mih.nbytes + db.nbytes) / db.nbytes:.2f}x with them)", flush=True)
    print(f"  peak memory so far: {_peak_rss_gib():.2f} GiB", flush=True)
    if mmap:  # search the saved index, loaded memory-mapped: the codes in memory are dropped
      folder = tempfile.mkdtemp(prefix="multi-index-", dir=tmpdir)
      t = time.perf_counter()
      index.save(mih, folder)
      save_s = time.perf_counter() - t
      del mih, db
      t = time.perf_counter()
      mih = index.load(folder, mmap=True)
      db = mih.db_words
      print(f"  saved in {save_s:.1f} s, loaded memory-mapped in {time.perf_counter() - t:.1f} s ({folder})",
            flush=True)
    if use_faiss:
      q_bytes = index.to_faiss_codes(q, num_bits=num_bits)
      flat = index.to_faiss(db, num_bits=num_bits)
      sub_bits = num_bits // mih.num_tables
      t = time.perf_counter()
      fmih = faiss.IndexBinaryMultiHash(flat.d, mih.num_tables, sub_bits)
      fmih.add(index.to_faiss_codes(db, num_bits=num_bits))
      print(f"  faiss IndexBinaryMultiHash({flat.d}, nhash={mih.num_tables}, b={sub_bits}) build: "
            f"{time.perf_counter() - t:.2f} s", flush=True)
    print(f"  {'k':>4} {'method':<20}{'ms/query':>10}{'ratio':>8}{'recall':>8}  check", flush=True)
    for k in ks:
      out = {}

      def scan():
        d, i = search.knn(q, db, k)
        out["scan"] = (np.asarray(d), np.asarray(i))

      def multi():
        d, i = index.multi_index_knn(mih, q, k)
        out["mih"] = (np.asarray(d), np.asarray(i))

      scan()  # untimed: compiles the scan's shapes (also those of the queries handed over)
      multi()
      per_q = _alternating(scan, multi, repeats, q.shape[0])
      exact = all(np.array_equal(a, b) for a, b in zip(out["scan"], out["mih"]))
      ref_d = out["scan"][0]
      load = os.getloadavg()[0]
      result = [("scan", per_q["scan"], 1.0, 1.0, "exact"),
                ("mih", per_q["mih"], per_q["scan"] / per_q["mih"], 1.0,
                 "equals scan" if exact else "DIFFERS FROM SCAN")]
      if use_faiss:
        flat_s = benchmarks.best_time(lambda: out.__setitem__("flat", flat.search(q_bytes, k)), repeats)
        flat_ok = np.array_equal(out["flat"][0].astype(np.int64), ref_d)
        result.append(("faiss flat", flat_s / q.shape[0] * 1e3, per_q["scan"] / (flat_s / q.shape[0] * 1e3), 1.0,
                       "distances equal" if flat_ok else "DISTANCES DIFFER"))
      for nflip in (nflips if use_faiss else ()):
        fmih.nflip = nflip
        fs = benchmarks.best_time(lambda: out.__setitem__("fmih", fmih.search(q_bytes, k)), repeats)
        d, i = out["fmih"]
        recall = float(np.mean((d.astype(np.int64) == ref_d) & (i >= 0)))
        result.append((f"faiss mih nflip={nflip}", fs / q.shape[0] * 1e3, per_q["scan"] / (fs / q.shape[0] * 1e3),
                       recall, "approximate"))
      kth = float(np.median(ref_d[:, -1]))
      for name, ms, ratio, recall, check in result:
        rows.append(dict(generator=generator, k=k, method=name, ms_per_query=ms, ratio=ratio, recall=recall,
                         check=check, build_s=build_s, index_bytes=mih.nbytes, codes_bytes=db.nbytes,
                         kth_median=kth, load=load))
        print(f"  {k:>4} {name:<20}{ms:>10.3f}{ratio:>8.1f}{recall:>8.3f}  {check}", flush=True)
      print(f"       median k-th distance {kth:g}; load {load:.1f}; peak memory {_peak_rss_gib():.2f} GiB",
            flush=True)
    for r in radii:
      out = {}

      def scan_radius():
        out["scan"] = search.radius_search(q, db, r)

      def multi_radius():
        out["mih"] = index.multi_index_radius(mih, q, r)

      scan_radius()
      multi_radius()
      per_q = _alternating(scan_radius, multi_radius, repeats, q.shape[0])
      exact = all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(out["scan"], out["mih"]))
      found = int(np.asarray(out["scan"].offsets)[-1]) / q.shape[0]
      for name, check in (("scan", "exact"), ("mih", "equals scan" if exact else "DIFFERS FROM SCAN")):
        rows.append(dict(generator=generator, radius=r, method=name, ms_per_query=per_q[name],
                         ratio=per_q["scan"] / per_q[name], found=found, check=check))
        print(f"  {'r=' + str(r):>4} {name:<20}{per_q[name]:>10.3f}{per_q['scan'] / per_q[name]:>8.1f}{'':>8}  {check}",
              flush=True)
      print(f"       {found:g} items per query within the radius", flush=True)
    if mmap:
      del mih, db
      shutil.rmtree(folder)
  return rows


def main(argv):
  del argv
  threads = benchmarks.pin_threads(_THREADS.value)
  small = _SMALL.value
  num_db = 2_000_000 if small else _NUM_DB.value
  num_queries = 200 if small else _NUM_QUERIES.value
  repeats = 1 if small else _REPEATS.value
  print(_uptime())
  print(f"N = {num_db}, Q = {num_queries}, ks = {_KS.value}, {_BITS.value} bits, threads = {threads} (XLA and "
        f"faiss, and multi-index hashing), best of {repeats}; clustered: {_CLUSTERS.value} centres "
        f"in {_DIM.value} dimensions, sigma = {_SIGMA.value}, LSH; dense: {_DENSE_CENTRES.value} centres, flip "
        f"{_FLIP.value}; skewed: 0.5 +- {_SKEW.value}")
  run_benchmark(num_db=num_db, num_queries=num_queries, ks=[int(k) for k in _KS.value], num_bits=_BITS.value,
                generators=list(_GENERATORS.value), nflips=[int(f) for f in _NFLIPS.value], repeats=repeats,
                threads=threads, seed=_SEED.value, mmap=_MMAP.value, tmpdir=_TMPDIR.value, use_faiss=_FAISS.value,
                radii=[int(r) for r in _RADII.value])
  print(_uptime())


if __name__ == "__main__":
  app.run(main)
