"""Helpers shared by the index kinds: XOR masks of bounded weight, and CSR range expansion."""

from __future__ import annotations

import functools
from typing import Tuple

import numpy as np


def expand(starts: np.ndarray, lengths: np.ndarray, *, dtype=np.int64) -> np.ndarray:
  """Concatenation of ``arange(s, s + l)`` over ``(s, l)`` pairs, vectorised, in ``dtype`` (``int32`` halves the
  memory traffic where the total and every ``s + l`` fit in it)."""
  total = int(lengths.sum())
  if total == 0:
    return np.zeros((0,), dtype)
  ends = np.cumsum(lengths, dtype=dtype)
  out = np.repeat((starts - ends + lengths).astype(dtype, copy=False), lengths)
  out += np.arange(total, dtype=dtype)
  return out


@functools.lru_cache(maxsize=32)
def masks(num_bits: int, radius: int) -> Tuple[np.ndarray, np.ndarray]:
  """``uint32[P]`` XOR masks of weight ``<= radius`` over ``num_bits`` bits,
  ordered by (weight, value), and their ``int64[P]`` weights (read-only)."""
  levels = [np.zeros((1,), np.uint32)]
  highest = [np.full((1,), -1, np.int64)]  # index of the highest set bit
  for _ in range(min(radius, num_bits)):
    prev, prev_hi = levels[-1], highest[-1]
    new, new_hi = [], []
    for bit in range(num_bits):
      sel = prev[prev_hi < bit]
      new.append(sel | np.uint32(1 << bit))
      new_hi.append(np.full(sel.shape, bit, np.int64))
    new, new_hi = np.concatenate(new), np.concatenate(new_hi)
    perm = np.argsort(new, kind="stable")
    levels.append(new[perm])
    highest.append(new_hi[perm])
  out = np.concatenate(levels)
  weights = np.concatenate([np.full(lv.shape, j, np.int64) for j, lv in enumerate(levels)])
  out.flags.writeable = False
  weights.flags.writeable = False
  return out, weights
