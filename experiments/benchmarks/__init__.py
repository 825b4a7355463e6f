"""Benchmarks, each beside its peer in one process; what they share."""

import os
import sys
import time


def pin_threads(threads: int) -> int:
  """Restricts this process to its first ``threads`` CPUs (0: all of them) before jax starts; returns the count.

  XLA sizes its thread pool from the CPU affinity mask when jax starts, so jax must not be imported yet.
  """
  if "jax" in sys.modules:
    raise RuntimeError("jax must start after the CPU affinity is set; import it lazily")
  available = sorted(os.sched_getaffinity(0))
  threads = threads or len(available)
  if threads < len(available):
    os.sched_setaffinity(0, available[:threads])
  return threads


def best_time(fn, repeats: int) -> float:
  """The fewest seconds of ``repeats`` calls of ``fn()`` (wall clock)."""
  best = float("inf")
  for _ in range(repeats):
    t = time.perf_counter()
    fn()
    best = min(best, time.perf_counter() - t)
  return best
