"""Process set-up of the launchers and benchmarks: quiet library logs, glibc's malloc heaps, the garbage collector."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc


class _DropLibraryInfo:
  """absl-log filter: drops INFO records emitted from inside orbax (per-save chatter)."""

  def filter(self, record) -> bool:
    import logging as pylogging
    return record.levelno > pylogging.INFO or "/orbax/" not in record.pathname.replace("\\", "/")


def quiet_library_logs() -> None:
  """Keeps experiment logs readable: orbax's per-checkpoint INFO lines are dropped."""
  from absl import logging as absl_logging
  absl_logging.get_absl_handler().addFilter(_DropLibraryInfo())


#: Bytes glibc's malloc keeps at the top of a heap when it grows or trims one (M_TOP_PAD).
MALLOC_TOP_PAD = 256 << 20


def pad_malloc_heaps(top_pad: int = MALLOC_TOP_PAD) -> bool:
  """Lets glibc keep freed memory in its heaps rather than return it to the OS after every step.

  XLA's CPU runtime allocates each execution's temporaries (megabytes for
  LambdaRank's ``[Q, M, M]`` pairs) and frees them at the end; with glibc's
  default pad of 128 KB the heaps of its worker threads shrink and grow again
  every step, and the pages fault back in, which makes training markedly slower
  (docs/performance.md). Setting ``MALLOC_TOP_PAD_`` in the environment has the
  same effect. Setting the pad also freezes glibc's dynamic mmap threshold at
  128 KB, which is left alone (raising it made training slower). Returns False
  (and changes nothing) where the C library has no ``mallopt``.
  """
  try:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    return bool(libc.mallopt(-2, int(top_pad)))  # -2: M_TOP_PAD in glibc's malloc.h
  except (OSError, AttributeError):
    return False


def freeze_gc() -> None:
  """Takes every object alive now out of the garbage collector's scans (``gc.freeze``); call after setup.

  With jax, numpy and the data loaded, each of Python's full collections scans
  all of them, at moments set by allocation counts, so some fall inside first
  calls and would count as compilation. Objects created later are collected as
  usual; the benchmarks call this so that their compile figures time compilation.
  """
  gc.collect()
  gc.freeze()
