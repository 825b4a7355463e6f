r"""Benchmarks LambdaRank's swap-delta matrices and a 32-bit training run (Nair et al. 2012).

  python -m experiments.benchmarks.swap                 # N = 100 documents, 32 bits, then the training run
  python -m experiments.benchmarks.swap --notrain       # the swap matrices only (about a minute)
  python -m experiments.benchmarks.swap --small         # N = 30, 16 bits, a 10-query batch, no training run
  python -m experiments.benchmarks.swap --num_docs=200 --bits=64 --repeats=500

Part 1, for every shipped score function: milliseconds to compute one
query's ``[N, N]`` swap matrix ``Delta S`` after compilation, by each path
that applies to it:

* ``generic``: :func:`hashjax.objectives.swap_deltas` (``vmap`` over the
  ``N (N - 1) / 2`` swapped rankings, any score function);
* ``closed``: the score's closed form (:func:`hashjax.objectives.knn_count_deltas`, ...);
* ``table`` / ``pairs`` / ``linear``: :func:`hashjax.objectives.histogram_swap_deltas`
  for the scores with a histogram form (``linear`` only where it is exact:
  the sums over neighbours);
* ``batch/q``: the same matrices for a batch of ``--batch`` queries inside
  :func:`hashjax.objectives.lambdarank_weights` (as training computes them,
  the path passed as its ``deltas_fn``), divided by the batch size.

Each figure is the median (and the best) of ``--repeats`` timed calls of the
``jax.jit``-compiled function on fixed inputs (``block_until_ready``), with
the first call's compile time beside it. Every path's matrix is checked
against the generic one before it is timed. Inputs: distances
``Binomial(bits, 1/2)`` (random codes), relevance ``[label_d = label_q]``
with 10 uniform classes, the label-pair codes of the label scores, Gaussian
target offsets for regression, ``k = 3`` nearest non-empty bins, radius 1.

Part 2 (``--train``, default on): ``configs/lambdarank_knn.py`` as shipped
(32 bits, MNIST-10k), timed by :mod:`hashjax.train` (training only, the
evaluation hooks excluded) and as the wall time of the whole
:func:`experiments.methods.train_and_evaluate`, with glibc's heap padding of
``experiments.train`` (:func:`experiments.process.pad_malloc_heaps`).
"""

from __future__ import annotations

import functools
import statistics
import tempfile
import time
from typing import Callable, Dict, List

from absl import app, flags
import jax
import numpy as np

from experiments import process
from hashjax import objectives

_NUM_DOCS = flags.DEFINE_integer("num_docs", 100, "Documents per query N.")
_BITS = flags.DEFINE_integer("bits", 32, "Code length b.")
_BATCH = flags.DEFINE_integer("batch", 100, "Queries per batch for the batched column (0: skip).")
_REPEATS = flags.DEFINE_integer("repeats", 200, "Timed calls per path.")
_TRAIN = flags.DEFINE_bool("train", True, "Also time a 32-bit training run (configs/lambdarank_knn.py).")
_SMALL = flags.DEFINE_bool("small", False, "Quick mode: N = 30, 16 bits, batch 10, 5 repeats, no training run.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the random inputs.")

NUM_CLASSES = 10
TARGET_MS = 1.0  # the target for one 100-document matrix at 32 bits
TARGET_TRAIN_S = 120.0


class Case:
  """A score: its function, its closed form, its histogram form (or None), the affinity each reads, the preference."""

  def __init__(self, name, score_fn, closed_fn, affinity, preference, hist_fn=None, hist_affinity=None,
               num_levels=None, linear=False):
    self.name, self.score_fn, self.closed_fn = name, score_fn, closed_fn
    self.affinity, self.preference = affinity, preference
    self.hist_fn, self.hist_affinity, self.num_levels, self.linear = hist_fn, hist_affinity, num_levels, linear


def make_cases(*, bits: int, num_docs: int, num_queries: int, seed: int):
  """Distances ``[Q, N]`` and one :class:`Case` per shipped score (affinities ``[Q, N]``)."""
  rng = np.random.default_rng(seed)
  q, n = num_queries, num_docs
  distances = rng.binomial(bits, 0.5, (q, n)).astype(np.int32)
  ql = rng.integers(0, NUM_CLASSES, q)
  dl = rng.integers(0, NUM_CLASSES, (q, n))
  rel = (dl == ql[:, None]).astype(np.int32)
  pairs = np.asarray(objectives.label_pairs(ql, dl, num_classes=NUM_CLASSES))
  levels = rng.integers(0, 4, (q, n)).astype(np.int32)
  offsets = rng.normal(size=(q, n)).astype(np.float32)
  sim = (0.5 * np.eye(NUM_CLASSES) + 0.5 * (np.arange(NUM_CLASSES)[:, None] // 5
                                            == np.arange(NUM_CLASSES)[None] // 5)).astype(np.float32)
  # Histogram forms of the label scores read a histogram over document labels with the query's
  # label bound: for the benchmark one fixed query label (its matrices are query-specific).
  q0 = int(ql[0])
  p = functools.partial
  o = objectives
  cases = [
      Case("knn_count (eq. 7)", p(o.knn_count_score, k=3), p(o.knn_count_deltas, k=3), rel, rel,
           p(o.knn_count_from_histogram, k=3), rel, 2, linear=True),
      Case("knn_majority (eq. 6)", p(o.knn_majority_score, num_classes=NUM_CLASSES, k=3),
           p(o.knn_majority_deltas, num_classes=NUM_CLASSES, k=3), pairs, rel,
           p(o.knn_majority_from_histogram, query_label=q0, k=3), dl.astype(np.int32), NUM_CLASSES),
      Case("hierarchical (eq. 10)", p(o.hierarchical_score, similarity=sim, k=3),
           p(o.hierarchical_deltas, similarity=sim, k=3), pairs, rel,
           p(o.hierarchical_from_histogram, query_label=q0, similarity=sim, k=3),
           dl.astype(np.int32), NUM_CLASSES, linear=True),
      Case("retrieval (eq. 8)", p(o.retrieval_score, radius=1), p(o.retrieval_deltas, radius=1), rel, rel,
           p(o.retrieval_from_histogram, radius=1), rel, 2, linear=True),
      Case("regression (eq. 11)", p(o.regression_score, k=3), p(o.regression_deltas, k=3), offsets,
           -np.abs(offsets)),
      Case("tie-aware AP", p(o.average_precision_score, num_bits=bits), p(o.average_precision_deltas, num_bits=bits),
           rel, rel, o.average_precision_from_histogram, rel, 2),
      Case("tie-aware NDCG", p(o.ndcg_score, num_bits=bits, num_levels=4),
           p(o.ndcg_deltas, num_bits=bits, num_levels=4), levels, levels, o.ndcg_from_histogram, levels, 4),
  ]
  return distances, cases


def _first_call(fn: Callable, args):
  """``(result, seconds)`` of the first call of a fresh ``jax.jit`` function: compilation and one run."""
  t = time.perf_counter()
  out = jax.block_until_ready(fn(*args))
  return out, time.perf_counter() - t


def time_fn(fn: Callable, args, repeats: int) -> Dict[str, float]:
  """Median and best milliseconds of ``repeats`` calls of a compiled function."""
  times = []
  for _ in range(repeats):
    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - t)
  return {"median_ms": 1e3 * statistics.median(times), "best_ms": 1e3 * min(times)}


def _auto_picks_table(bits: int, num_levels: int, num_docs: int) -> bool:
  """``histogram_swap_deltas(method="auto")``'s choice: the table when it needs fewer evaluations."""
  return bits * (bits + 1) * num_levels * (num_levels - 1) < num_docs * (num_docs - 1)


def _check_same(name: str, path: str, got, reference) -> None:
  if not np.allclose(np.asarray(got), np.asarray(reference), atol=1e-5):
    raise AssertionError(f"{name} / {path}: differs from the generic swap matrix by "
                         f"{np.max(np.abs(np.asarray(got) - np.asarray(reference))):.3g}")


def bench_swaps(*, bits: int, num_docs: int, batch: int, repeats: int, seed: int) -> List[Dict]:
  """One row per (score, path): ``median_ms``, ``best_ms``, ``compile_s`` and ``batch_ms_per_query``.

  The ``table`` path is skipped where ``method="auto"`` would not pick it
  (the 10-class label histograms: 47,520 table entries against 4,950 pairs).
  """
  distances, cases = make_cases(bits=bits, num_docs=num_docs, num_queries=max(batch, 1), seed=seed)
  rows = []
  for case in cases:
    d0 = distances[0]
    generic_fn = lambda d, a, f=case.score_fn: objectives.swap_deltas(f, d, a)
    generic = jax.jit(generic_fn)
    reference, compile_s = _first_call(generic, (d0, case.affinity[0]))
    paths = [("generic", generic, case.affinity, compile_s, generic_fn)]
    closed = jax.jit(case.closed_fn)
    got, compile_s = _first_call(closed, (d0, case.affinity[0]))
    _check_same(case.name, "closed", got, reference)
    paths.append(("closed", closed, case.affinity, compile_s, case.closed_fn))
    if case.hist_fn is not None:
      methods = (("table",) if _auto_picks_table(bits, case.num_levels, num_docs) else ()) + ("pairs",) \
                + (("linear",) if case.linear else ())
      for method in methods:
        hist_fn = functools.partial(objectives.histogram_swap_deltas, case.hist_fn, num_bits=bits,
                                    num_levels=case.num_levels, method=method)
        fn = jax.jit(hist_fn)
        got, compile_s = _first_call(fn, (d0, case.hist_affinity[0]))
        _check_same(case.name, method, got, reference)
        paths.append((method, fn, case.hist_affinity, compile_s, hist_fn))
    for method, fn, affinity, compile_s, deltas_fn in paths:
      row = {"score": case.name, "path": method, "compile_s": compile_s, **time_fn(fn, (d0, affinity[0]), repeats)}
      # The label scores' histogram forms bind one query's label: no batch of queries for them.
      if batch and not (method not in ("generic", "closed") and case.num_levels == NUM_CLASSES):
        weights = jax.jit(lambda d, a, pref, f=deltas_fn: objectives.lambdarank_weights(d, a, deltas_fn=f,
                                                                                        preference=pref))
        args = (distances[:batch], affinity[:batch], case.preference[:batch])
        _first_call(weights, args)
        row["batch_ms_per_query"] = time_fn(weights, args, max(3, repeats // 20))["median_ms"] / batch
      rows.append(row)
      print(f"{row['score']:<22}{row['path']:>8}{row['median_ms']:>10.3f}{row['best_ms']:>9.3f}"
            + (f"{row['batch_ms_per_query']:>10.3f}" if "batch_ms_per_query" in row else f"{'-':>10}")
            + f"{row['compile_s']:>10.2f}", flush=True)
  return rows


def bench_training() -> Dict[str, float]:
  """``configs/lambdarank_knn.py`` as shipped: training seconds and wall seconds of the whole run."""
  from configs import lambdarank_knn  # pylint: disable=g-import-not-at-top
  from experiments import methods  # pylint: disable=g-import-not-at-top
  config = lambdarank_knn.get_config()
  with tempfile.TemporaryDirectory() as workdir:
    t = time.perf_counter()
    results = methods.train_and_evaluate(config, workdir)
    wall = time.perf_counter() - t
  return {"train_s": results["summary"]["train_time"], "wall_s": wall,
          "knn_error": results["rows"][0]["knn_error"], "num_steps": results["config"]["num_steps"]}


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  small = _SMALL.value
  bits, n = (16, 30) if small else (_BITS.value, _NUM_DOCS.value)
  batch, repeats = (10, 5) if small else (_BATCH.value, _REPEATS.value)
  print(f"swap-delta matrix, N = {n} documents, {bits} bits, jax {jax.__version__} on "
        f"{jax.devices()[0].platform} ({jax.device_count()} device): ms per query (median / best of "
        f"{repeats}), batch/q = one query's share of a {batch}-query lambdarank_weights call")
  print(f"{'score':<22}{'path':>8}{'median':>10}{'best':>9}{'batch/q':>10}{'compile s':>10}")
  rows = bench_swaps(bits=bits, num_docs=n, batch=batch, repeats=repeats, seed=_SEED.value)
  fastest: Dict[str, float] = {}
  for r in rows:
    fastest[r["score"]] = min(fastest.get(r["score"], np.inf), r["median_ms"])
  met = [s for s, ms in fastest.items() if ms < TARGET_MS]
  print(f"fastest path under {TARGET_MS} ms (median): {len(met)} of {len(fastest)} scores"
        + ("" if len(met) == len(fastest) else
           f"; over: {', '.join(f'{s} {ms:.2f} ms' for s, ms in fastest.items() if s not in met)}"))
  if _TRAIN.value and not small:
    process.pad_malloc_heaps()
    t = bench_training()
    print(f"training run (configs/lambdarank_knn.py, 32 bits, {t['num_steps']:,} steps): "
          f"{t['train_s']:.1f} s of training, "
          f"{t['wall_s']:.1f} s wall with evaluation (target {TARGET_TRAIN_S:.0f} s); "
          f"test kNN error {100 * t['knn_error']:.1f}%")


if __name__ == "__main__":
  app.run(main)
