r"""Tie groups of real-valued distances, counted like Hamming bins: ``hist[..., G, V]``.

Sorting one query's distances puts equal values side by side. Group ``g`` is
its ``g``-th distinct value in ascending order, and ``hist[..., g, v]`` counts
the items of level ``v`` at that value: the histogram of a Hamming ranking
with the bins of the tie groups in place of the distances ``0 .. num_bits``.
Groups past a query's last are empty, and every formula of
:mod:`hashjax.metrics` skips empty bins, so one formula per metric serves both
(the same values, up to the order of a float sum).

* Ties are exactly equal values (``-0.0`` ties ``0.0``); ``+inf`` ranks after
  every finite distance and ``-inf`` before, equal infinities tie; NaN is
  refused when concrete (traced, NaN sorts last and each NaN is its own group).
* Two paths: concrete inputs are grouped on the host by numpy (rows in blocks,
  ``G`` the most groups of a row in the block), traced ones by ``lax.sort``, a
  cumulative sum of the group starts and a scatter-add into ``int32[R, N, V]``.
  The host also merges adjacent groups that hold only level-0 items: no metric
  reads the order of items without gain, and with few relevant items most
  groups of distinct real values are such, so ``G`` falls to about ``2 N^+``.
"""

from __future__ import annotations

from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks

Array = jax.Array

#: Cells per block of rows on the host: the block's histogram and the formulas' temporaries stay ~100 MB.
_HOST_BLOCK_CELLS = 1 << 21


def _host_groups(d: np.ndarray, levels: Optional[np.ndarray], where: Optional[np.ndarray],
                 num_levels: int) -> np.ndarray:
  """``int32[R, G, V]`` of the rows ``d[R, N]``; ``G`` is the most groups of one row (1 when ``R = 0``)."""
  rows, n = d.shape
  order = np.argsort(d, axis=-1)
  ranked = np.take_along_axis(d, order, axis=-1)
  levels = np.zeros((rows, n), np.int64) if levels is None else np.take_along_axis(levels, order, -1).astype(np.int64)
  where = None if where is None else np.take_along_axis(where, order, axis=-1)
  change = ranked[:, 1:] != ranked[:, :-1]
  group = np.zeros((rows, n), np.int64)
  np.cumsum(change, axis=-1, out=group[:, 1:])
  # Adjacent groups of level-0 items only are merged: no metric reads the order of items that have no gain,
  # and at a few per cent relevant items most groups of distinct real values are such (G falls ~N / N+ fold).
  row_start = np.arange(rows, dtype=np.int64)[:, None] * n
  relevant = (levels > 0) if where is None else (levels > 0) & where
  has_relevant = np.bincount((row_start + group)[relevant], minlength=rows * n) > 0
  item_has = has_relevant[row_start + group]
  group[:, 1:] = np.cumsum(change & (item_has[:, 1:] | item_has[:, :-1]), axis=-1)
  g = int(group[:, -1].max(initial=0)) + 1
  key = (np.arange(rows, dtype=np.int64)[:, None] * g + group) * num_levels + levels
  cells = rows * g * num_levels
  if where is not None:  # masked items go to one extra cell, dropped below
    key = np.where(where, key, cells)
  return np.bincount(key.ravel(), minlength=cells + 1)[:cells].astype(np.int32).reshape(rows, g, num_levels)


def _traced_groups(d: Array, levels: Optional[Array], where: Optional[Array], num_levels: int) -> Array:
  """``int32[R, N, V]`` of the rows ``d[R, N]`` (static shapes: ``N`` groups, the unused ones empty)."""
  rows, n = d.shape
  levels = jnp.zeros(d.shape, jnp.int32) if levels is None else levels.astype(jnp.int32)
  weight = jnp.ones(d.shape, jnp.int32) if where is None else where.astype(jnp.int32)
  ranked, levels, weight = jax.lax.sort((d, levels, weight), dimension=1, num_keys=1, is_stable=False)
  starts = (ranked[:, 1:] != ranked[:, :-1]).astype(jnp.int32)
  group = jnp.concatenate([jnp.zeros((rows, 1), jnp.int32), jnp.cumsum(starts, axis=1, dtype=jnp.int32)], axis=1)
  hist = jnp.zeros((rows, n, num_levels), jnp.int32)
  return hist.at[jnp.arange(rows)[:, None], group, levels].add(weight, mode="drop")


def group_histogram(distances: Array, levels: Optional[Array] = None, *, num_levels: int = 1,
                    where: Optional[Array] = None) -> Array:
  r"""Counts of each tie group of ``distances`` per level: ``hist[..., G, V]``, groups by ascending value.

  Concrete, adjacent groups of level-0 items only are merged into one (the metrics cannot tell them apart).

  .. math:: n_{g,v} = |\{ i : d_i = u_g,\ a_i = v,\ \mathrm{where}_i \}|, \quad u_0 < u_1 < \dots
     \ \text{the distinct values of } d

  Inputs are checked by the caller (:func:`hashjax._checks.check_real_distances`; ``levels`` in
  ``[0, num_levels)``).

  Args:
    distances: real ``[..., N]``, smaller is closer.
    levels: optional ``int[..., N]`` (or bool) levels; None counts every item at level 0.
    num_levels: ``V``.
    where: optional ``bool[..., N]``: only the ``True`` items are counted (the others may still split a group,
      which leaves an empty group).

  Returns:
    ``int32[..., G, V]``: concrete, ``G`` is the most groups of a row; traced, ``G = N``.

  >>> import numpy as np
  >>> d, levels = np.array([[0.5, 0.25, 0.5, 2.0, 4.0, 3.0]]), np.array([[1, 0, 0, 1, 0, 0]])
  >>> group_histogram(d, levels, num_levels=2).tolist()  # 3.0 and 4.0: one group of level 0
  [[[1, 0], [1, 1], [0, 1], [2, 0]]]
  """
  n, lead = distances.shape[-1], distances.shape[:-1]
  if all(_checks.is_concrete(x) for x in (distances, levels, where)):
    flat = lambda x: None if x is None else np.asarray(x).reshape(-1, n)
    hist = _host_groups(flat(distances), flat(levels), flat(where), num_levels)
    return _checks.as_jax(hist.reshape(*lead, *hist.shape[1:]))
  flat = lambda x: None if x is None else jnp.asarray(x).reshape(-1, n)
  return _traced_groups(flat(distances), flat(levels), flat(where), num_levels).reshape(*lead, n, num_levels)


def apply_to_groups(formula: Callable, distances: Array, levels: Optional[Array], where: Optional[Array], *,
                    num_levels: int, **options) -> Array:
  """``formula(hist, **options, xp)`` of the group histogram of ``distances[..., N]``: ``[...]`` values.

  Concrete inputs run on the host in blocks of rows (numpy, results copied back as a jax array, nothing
  compiled); traced ones through jax.numpy on ``hist[R, N, V]``. ``formula`` maps ``[R, G, V]`` to ``[R]``.
  """
  if not all(_checks.is_concrete(x) for x in (distances, levels, where)):
    return formula(group_histogram(distances, levels, num_levels=num_levels, where=where), **options, xp=jnp)
  n, lead = distances.shape[-1], distances.shape[:-1]
  flat = lambda x: None if x is None else np.asarray(x).reshape(-1, n)
  d, lev, w = flat(distances), flat(levels), flat(where)
  step = max(1, _HOST_BLOCK_CELLS // (n * num_levels))
  block = lambda x, i: None if x is None else x[i:i + step]
  with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
    out = [formula(_host_groups(d[i:i + step], block(lev, i), block(w, i), num_levels), **options, xp=np)
           for i in range(0, max(len(d), 1), step)]  # one call at least: no rows still give the result's dtype
  return _checks.as_jax(np.concatenate(out).reshape(lead))
