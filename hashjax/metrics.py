"""Tie-aware ranking metrics of Hamming rankings, all read from histograms.

A ranking by Hamming distance is fully described, for the metrics here, by the
per-query histogram ``hist[..., num_bits + 1, V]``: how many database items of
each affinity level ``v`` sit at each distance ``d`` (the counting sort of He
et al. 2018, Sec. 3.2; see :func:`hashjax.codes.distance_histogram` and
:func:`hashjax.codes.hamming_histogram`). Every metric below is one formula
over that histogram (``*_from_histogram``); the functions taking
``distances[..., N]`` only validate, build the histogram in ``O(N)`` per query,
and call the same formula. The cost per query is ``O(num_bits * V)`` after the
histogram, and nothing is sorted.

Conventions (one per idea, see ``hashjax.codes``):

* ``distances[..., N]`` int in ``[0, num_bits]``; ``relevance[..., N]`` in
  ``{0, 1}``; ``affinity[..., N]`` int ``>= 0`` (0 = irrelevant). A histogram
  level ``v >= 1`` counts as relevant for AP and precision.
* Ties: the tie-aware metrics are the expectation of the ordinary metric over
  all orders of tied items, uniformly (He et al. eqs. 3-4), in closed form.
  ``optimistic_ap`` / ``pessimistic_ap`` put the relevant items of every tie
  first / last; :func:`ap` breaks ties by ascending database index.
* Undefined values are NaN: AP, AP@k and recall of a query without a relevant
  item; NDCG of a query without an item of positive gain.
  :func:`mean_and_count` averages the defined values and counts the others.
* Cutoffs ``k``: AP@k is normalised by ``min(N+, k)`` (so a perfect ranking
  scores 1); precision@k divides by ``min(k, N)``; NDCG@k by the ideal DCG@k.
  A tie group straddling the cutoff contributes its expectation.
* Radius ``r`` retrieves every item with ``d <= r`` (so Nair et al.'s
  "Hamming distance < 2" is ``radius=1``; the hashing literature's "within
  Hamming radius 2" is ``radius=2``). A query that retrieves nothing has
  precision 0; :func:`retrieved_at_radius` lets callers count those queries.
* Precision: the results follow jax's x64 mode (float64 under
  ``jax.enable_x64(True)``, else float32) unless ``dtype=`` says otherwise.
  Harmonic and discount range sums are evaluated so that float32 results are
  within a few ulp of exact (exact tables for small ranks, asymptotic
  expansions written as sums of positive terms beyond; see ``_harmonic_pieces``
  and ``_discount_sum``), never as differences of large prefix sums.
* Where the formulas run: each is written once against an array namespace.
  A concrete histogram (a few numbers per query) is evaluated on the host with
  numpy, so a call at a new shape compiles nothing. Under ``jit`` or ``vmap``
  on the CPU, the same numpy code runs through ``jax.pure_callback`` (the
  caller's program compiles a call, not the formula); on other backends, for
  float inputs (differentiable) and inside the training objectives, the
  formula is traced with jax.numpy into the caller's program. Results are jax
  arrays either way.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
import operator
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks
from hashjax import _special
from hashjax import codes

Array = jax.Array

__all__ = [
    "MeanCount", "mean_and_count",
    "tie_aware_ap", "optimistic_ap", "pessimistic_ap", "ap", "tie_aware_ndcg",
    "tie_aware_precision_at_k", "precision_at_radius", "recall_at_radius", "retrieved_at_radius",
    "precision_recall_curve", "knn_classify", "error_rate", "evaluate_codes",
    "tie_aware_ap_from_histogram", "optimistic_ap_from_histogram", "pessimistic_ap_from_histogram",
    "tie_aware_ndcg_from_histogram", "tie_aware_precision_at_k_from_histogram",
    "precision_at_radius_from_histogram", "recall_at_radius_from_histogram",
    "retrieved_at_radius_from_histogram", "precision_recall_curve_from_histogram",
    "knn_classify_from_histogram",
]

#: Stand-in for "no cutoff": larger than any rank.
_NO_CUTOFF = np.iinfo(np.int32).max


class MeanCount(NamedTuple):
  """A mean over the defined (non-NaN) values and how many were undefined."""
  mean: Array
  num_undefined: Array


# --------------------------------------------------------------------------
# Float dtype policy.


def _float_dtype(dtype: Any) -> np.dtype:
  x64 = jax.dtypes.canonicalize_dtype(np.float64) == np.float64
  if dtype is None:
    return np.dtype(np.float64 if x64 else np.float32)
  try:
    dt = np.dtype(dtype)
  except TypeError:
    raise ValueError(f"dtype: expected None, float32 or float64, got {dtype!r}") from None
  if dt not in (np.float32, np.float64):
    raise ValueError(f"dtype: expected None, float32 or float64, got {dt.name}")
  if dt == np.float64 and not x64:
    raise ValueError("dtype: float64 needs jax x64 mode (use `with jax.enable_x64(True):`)")
  return dt


# --------------------------------------------------------------------------
# Input checks.


def _in_range_one_pass(x: Any, high: int) -> bool:
  """``True`` when a concrete integer ``x`` lies in ``[0, high]``, in one pass over memory.

  Signed values are read as unsigned (negatives become huge), so a single
  ``max`` replaces ``min`` and ``max``: the range check of a ``[Q, N]``
  matrix costs half. ``False`` means "not sure"; the caller then runs the
  full check for its message.
  """
  if not _checks.is_concrete(x) or not x.size:
    return False
  arr = np.asarray(x)
  kind = arr.dtype.kind
  if kind == "b":
    return high >= 1
  if kind not in "iu":
    return False
  if kind == "i":
    arr = arr.view(f"u{arr.dtype.itemsize}")
  return int(arr.max()) <= high


def _check_int_array(name: str, x: Any, low: int, high: int, *, what: str) -> None:
  if not hasattr(x, "dtype") or not hasattr(x, "shape"):
    raise ValueError(f"{name}: expected an integer array of {what}, got {type(x).__name__}")
  if np.issubdtype(np.dtype(x.dtype), np.inexact):
    _checks.check_finite(name, x)  # names NaN / inf first
  if low == 0 and _in_range_one_pass(x, high):
    return
  _checks.check_int_range(name, x, low, high, what=what)


def _check_distances(distances: Any, num_bits: Any) -> int:
  num_bits = _checks.check_num_bits(num_bits)
  _check_int_array("distances", distances, 0, num_bits, what="distances")
  if distances.ndim < 1 or distances.shape[-1] == 0:
    raise ValueError(f"distances: expected shape [..., N] with N >= 1, got {tuple(distances.shape)}")
  return num_bits


def _check_where(where: Any, distances: Any) -> None:
  if where is None:
    return
  if not hasattr(where, "dtype") or np.dtype(where.dtype) != np.bool_:
    got = np.dtype(where.dtype).name if hasattr(where, "dtype") else type(where).__name__
    raise ValueError(f"where: expected a bool mask of valid items, got {got}")
  _checks.check_shape("where", where, distances.shape, like="distances")


def _check_relevance(relevance: Any, distances: Any, name: str = "relevance") -> None:
  _check_int_array(name, relevance, 0, 1, what="relevance labels")
  _checks.check_shape(name, relevance, distances.shape, like="distances")


def _check_cutoff(k: Any, name: str = "k", *, allow_none: bool = True, low: int = 1) -> int:
  if k is None and allow_none:
    return _NO_CUTOFF
  if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)) or k < low:
    raise ValueError(f"{name}: expected an int >= {low}" + (" or None" if allow_none else "")
                     + f", got {k!r}")
  return int(min(k, _NO_CUTOFF))


def _check_hist(hist: Any, name: str = "hist") -> None:
  if not hasattr(hist, "dtype") or not hasattr(hist, "shape"):
    raise ValueError(f"{name}: expected an int array [..., num_bits + 1, V], got {type(hist).__name__}")
  if hist.ndim < 2 or hist.shape[-2] < 1 or hist.shape[-1] < 1:
    raise ValueError(f"{name}: expected shape [..., num_bits + 1, V], got {tuple(hist.shape)}")
  _check_int_array(name, hist, 0, np.iinfo(np.int32).max, what="counts")


def _histogram(distances, levels, num_bits: int, num_levels: int, where):
  return codes._bucketed_distance_histogram(distances, levels, num_bits, num_levels, where)


def _relevance_histogram(distances, relevance, num_bits, where):
  """Validates ``distances``, binary ``relevance`` and ``where``; returns ``hist[..., num_bits + 1, 2]``."""
  num_bits = _check_distances(distances, num_bits)
  _check_relevance(relevance, distances)
  _check_where(where, distances)
  return _histogram(distances, relevance, num_bits, 2, where)


#: numpy's error handling on the host path, as XLA's: NaN and inf results, no warnings.
_HOST_ERRSTATE = dict(divide="ignore", invalid="ignore", over="ignore")


#: Backends on which a traced formula of an integer histogram runs on the host too, through
#: ``jax.pure_callback``: compiled by XLA:CPU, AP takes 0.21 to 0.25 s and NDCG 0.18 to 0.23 s
#: per shape (a caller's ``jit``, 1,000 queries at 32 bits, medians of five shapes in six runs
#: of ``experiments/benchmark_metrics.py``), the callback about 0.02 s. On an accelerator the
#: formulas are compiled with the caller's program (a callback would stop the device for a
#: copy to the host).
_HOST_CALLBACK_BACKENDS = ("cpu",)

#: Set (by :func:`_compiled_formulas`) while library code traces formulas that must be compiled
#: into its program: the training objectives (``hashjax.objectives.scores``) evaluate them on
#: every swap of every step, where a host round trip per step would cost more than compiling.
_COMPILED = contextvars.ContextVar("hashjax_compiled_formulas", default=False)


@contextlib.contextmanager
def _compiled_formulas():
  """Within: traced formulas are compiled with jax.numpy on every backend (no host callback)."""
  token = _COMPILED.set(True)
  try:
    yield
  finally:
    _COMPILED.reset(token)


def _on_hist(kernel, hist, *args):
  """``kernel(hist, *args, xp)``: numpy on the host, or traced with jax.numpy.

  Concrete ``hist`` and array ``args``: numpy on the host. Traced (under
  ``jit``, ``vmap``, ...): an integer ``hist`` with no array ``args``, on the
  backends of :data:`_HOST_CALLBACK_BACKENDS` and outside
  :func:`_compiled_formulas`, runs the same numpy code through
  ``jax.pure_callback`` (:func:`_host_callback`); otherwise the formula is
  traced with jax.numpy into the caller's program (so a float input, such as
  :func:`mean_and_count`'s values, stays differentiable). The host paths
  return jax arrays of the dtypes the traced one gives.
  """
  if all(_checks.is_concrete(x) for x in (hist, *args)):
    args = [np.asarray(a) if isinstance(a, jax.Array) else a for a in args]
    with np.errstate(**_HOST_ERRSTATE):
      out = kernel(np.asarray(hist), *args, xp=np)
    return jax.tree_util.tree_map(_checks.as_jax, out)
  fixed_args = not any(isinstance(a, (jax.Array, jax.core.Tracer, np.ndarray)) for a in args)
  if (fixed_args and jnp.issubdtype(hist.dtype, jnp.integer) and not _COMPILED.get()
      and jax.default_backend() in _HOST_CALLBACK_BACKENDS):
    return _host_callback(kernel, hist, args)
  return kernel(jnp.asarray(hist), *args, xp=jnp)


def _host_callback(kernel, hist, args):
  """``kernel(hist, *args)`` of a traced integer ``hist[..., B, V]`` as a ``jax.pure_callback``
  of its numpy form; ``args`` are fixed (dtypes, flags, numpy scalars such as a cutoff).

  Every histogram formula maps the leading axes independently, so a ``vmap``
  hands the callback whole batches (``vmap_method="broadcast_all"``), and the
  result's shapes and dtypes come from a numpy run on one row of zeros. A
  program holding the callback cannot be serialised with ``jax.export``.
  """
  def run(h):
    with np.errstate(**_HOST_ERRSTATE):
      return kernel(h, *args, xp=np)

  lead = hist.ndim - 2
  row = run(np.zeros((1,) * lead + tuple(hist.shape[lead:]), np.dtype(hist.dtype)))
  spec = jax.tree_util.tree_map(
      lambda y: jax.ShapeDtypeStruct(tuple(hist.shape[:lead]) + np.shape(y)[lead:],
                                     jax.dtypes.canonicalize_dtype(np.asarray(y).dtype)), row)
  # 64-bit results travel as pairs of uint32 words: jax canonicalises a callback's outputs
  # under the x64 setting of the thread that runs it, which a `jax.enable_x64` context around
  # the call does not reach (float64 arrived as float32 and was refused: the traced x64 tests
  # in tests/test_metrics.py failed without the pairs).
  wide = lambda t: np.dtype(t.dtype).itemsize == 8
  carried = jax.tree_util.tree_map(
      lambda t: jax.ShapeDtypeStruct(t.shape + (2,), np.uint32) if wide(t) else t, spec)

  def host(h):
    return jax.tree_util.tree_map(
        lambda y, t: np.ascontiguousarray(y, t.dtype).view("<u4").reshape(np.shape(y) + (2,)) if wide(t)
        else np.asarray(y, t.dtype), run(np.asarray(h)), spec)

  out = jax.pure_callback(host, carried, hist, vmap_method="broadcast_all")
  return jax.tree_util.tree_map(lambda y, t: jax.lax.bitcast_convert_type(y, t.dtype) if wide(t) else y, out, spec)


# --------------------------------------------------------------------------
# Formulas on histograms, each written once against an array namespace ``xp``
# (numpy on the host, jax.numpy traced: see the module notes). Traced, they are
# shaped for XLA:CPU's compiler: the counts in one dot (:func:`_counts`), the
# sums in one variadic reduction (:func:`_row_sums`), flat table lookups. AP
# and NDCG each compile to a handful of kernels (0.2 s per shape against 0.3 to
# 0.5 s before; ``experiments/benchmark_metrics.py``).


def _sum(x, axis: int, xp=jnp):
  """``xp.sum(x, axis=axis)``, keeping ``x``'s dtype. A short axis (at most 8) is summed as
  slices: numpy reduces a short axis of a 3-D array about 20x slower than that (measured on
  a ``[1000, 33, 2]`` histogram: 0.6 ms against 0.02 ms), and traced, the slices fuse into
  their consumer where XLA:CPU would hand a reduction to a library kernel of its own."""
  if 0 < x.shape[axis] <= 8:
    at = lambda i: tuple(i if j == axis % x.ndim else slice(None) for j in range(x.ndim))
    return functools.reduce(operator.add, [x[at(i)] for i in range(x.shape[axis])])
  if xp is not np:
    return jnp.sum(x, axis=axis, dtype=x.dtype)
  return np.ascontiguousarray(np.moveaxis(x, axis, -1)).sum(-1, dtype=x.dtype)


def _row_sums(xs, xp=jnp):
  """Sums of the same-shape arrays ``xs`` along their last axis. Traced, one variadic reduction,
  so the elementwise work feeding every sum is one fused loop (separate sums of a shared value
  made XLA:CPU split it into several loops, each compiled on its own)."""
  if xp is np:
    return [x.sum(-1) for x in xs]
  zeros = [np.zeros((), x.dtype) for x in xs]
  return list(jax.lax.reduce(list(xs), zeros, lambda a, b: [u + v for u, v in zip(a, b)], (xs[0].ndim - 1,)))


def _cumsum(x, *, exclusive: bool = False, xp=jnp):
  """Cumulative sum of int32 ``x`` along its (short) last axis.

  With numpy, ``np.cumsum``. Traced, one matmul with the same values: on
  XLA:CPU ``jnp.cumsum`` lowers to a chain of reduce-window kernels, each
  compiled separately.
  """
  x = x.astype(xp.int32)
  if xp is np:
    out = np.cumsum(x, axis=-1, dtype=np.int32)
    return out - x if exclusive else out
  m = x.shape[-1]
  tri = np.triu(np.ones((m, m), np.int32), 1 if exclusive else 0)
  return jnp.dot(x, jnp.asarray(tri))


#: Entries of the constant matrix up to which :func:`_counts` is one matmul when traced: codes of
#: up to 64 bits (AP's matrix is ``[130, 325]`` there, NDCG's with 3 levels ``[195, 201]``). The
#: dot compiled faster than the sums and cumulative sums (medians of eight shapes in one
#: process, 32 / 64 bits: AP 0.25 / 0.27 against 0.33 / 0.30 s, NDCG 0.23 / 0.22 against 0.34 /
#: 0.30 s) but runs longer as the matrix grows as ``B^2 V`` (1,000 queries' AP: 1.0 / 3.0 / 8.4
#: ms against 0.6 / 1.4 / 2.9 ms at 32 / 64 / 128 bits; at 1,024 bits it took 27 s to compile).
_COUNT_MAP_ELEMENTS = 1 << 17


@functools.lru_cache(maxsize=None)
def _count_maps(num_bins: int, num_levels: int) -> dict:
  """The counts of :func:`_counts` as 0/1 matrices ``int32[B * V, m]`` of the flattened histogram."""
  bins, levels = np.eye(num_bins, dtype=np.int32), np.eye(num_levels, dtype=np.int32)
  before = np.triu(np.ones((num_bins, num_bins), np.int32), 1)  # column d sums the bins e < d
  n = np.kron(bins, np.ones((num_levels, 1), np.int32))
  p = np.kron(bins, (np.arange(num_levels) > 0).astype(np.int32)[:, None])
  # The ideal ranking lists the levels highest first: column j counts the items of level V-1-j.
  level = np.kron(np.ones((num_bins, 1), np.int32), levels[:, ::-1])
  higher = np.triu(np.ones((num_levels, num_levels), np.int32), 1)
  return {"n": n, "p": p, "before": n @ before, "p_before": p @ before, "through": n @ (before + bins),
          "p_through": p @ (before + bins), "npos": p.sum(1, keepdims=True),
          "level_start": level @ higher, "level_end": level @ (higher + levels)}


def _counts(hist, groups, xp=jnp):
  """Integer counts of ``hist[..., B, V]``, one ``int32`` array per entry of ``groups``.

  A group is a name or a tuple of names whose counts are joined along the last
  axis. Per bin ``d`` (``[..., B]``): ``n`` items, ``p`` relevant items (levels
  ``>= 1``), ``before`` / ``p_before`` items / relevant items in the bins
  before ``d``, ``through`` / ``p_through`` those up to ``d``; ``npos``
  (``[..., 1]``) relevant items in all; per level ``j`` of the ideal order
  (level ``V - 1 - j``, highest first; ``[..., V]``): ``level_start`` /
  ``level_end``, the items ranked before / through the level's block.

  numpy computes them by sums and cumulative sums. Traced, with a constant
  matrix of at most :data:`_COUNT_MAP_ELEMENTS` entries, all are one matmul of
  the flattened histogram with the 0/1 matrices of :func:`_count_maps`:
  XLA:CPU compiles one dot where the sums, the cumulative sums and the joins
  were kernels of their own. The matrix grows as ``B^2 V``, so longer codes
  take the sums and cumulative sums (triangular matmuls of ``[B, B]``).
  """
  hist = hist.astype(xp.int32)
  names = [(g,) if isinstance(g, str) else tuple(g) for g in groups]
  num_bins, num_levels = hist.shape[-2:]
  width = lambda name: 1 if name == "npos" else num_levels if name.startswith("level") else num_bins
  if xp is not np and num_bins * num_levels * sum(width(name) for g in names for name in g) <= _COUNT_MAP_ELEMENTS:
    maps = _count_maps(num_bins, num_levels)
    columns = [np.concatenate([maps[name] for name in group], 1) for group in names]
    flat = hist.reshape(hist.shape[:-2] + (-1,))
    out = jnp.dot(flat, jnp.asarray(np.concatenate(columns, 1)))
    ends = np.cumsum([c.shape[1] for c in columns])
    return [out[..., end - c.shape[1]:end] for end, c in zip(ends, columns)]
  n = _sum(hist, -1, xp)
  p = n - hist[..., 0]
  per_level = _sum(hist, -2, xp)[..., ::-1]
  count = {"n": lambda: n, "p": lambda: p,
           "before": lambda: _cumsum(n, exclusive=True, xp=xp), "p_before": lambda: _cumsum(p, exclusive=True, xp=xp),
           "through": lambda: _cumsum(n, xp=xp), "p_through": lambda: _cumsum(p, xp=xp),
           "npos": lambda: xp.sum(p, axis=-1, dtype=xp.int32)[..., None],
           "level_start": lambda: _cumsum(per_level, exclusive=True, xp=xp),
           "level_end": lambda: _cumsum(per_level, xp=xp)}
  return [count[g[0]]() if len(g) == 1 else xp.concatenate([count[name]() for name in g], -1) for g in names]


def _ap_core(hist, k, dtype, kinds, xp=jnp):
  """AP variants ``kinds`` (``"tie"``: eq. 3 at cutoff ``k``; ``"opt"``/``"pes"``: relevant items
  first/last in every tie), sharing one evaluation of the harmonic range sums.

  Every variant sums ``(N^+_{d-1} + j) / t`` over the ranks ``t`` of a tie; with
  the ranks ``a+1 .. b`` occupied (``a < b``) that is ``(N^+_{d-1} + 1) dH(a, b)
  + r S1(a, b)``, where ``r`` is the rate at which the relevant count grows
  along the ranks: ``(n^+ - 1) / (n - 1)`` in expectation (weighted by the
  chance ``n^+ / n`` that rank ``t`` is relevant), 1 for the bounds.
  """
  n, p, a, pb, through = _counts(hist, ("n", "p", "before", "p_before", "through"), xp)
  ranges = {"tie": (a, xp.maximum(a, xp.minimum(k, through))), "opt": (a, a + p), "pes": (through - p, through)}
  num_bins = n.shape[-1]
  dh, s1 = _special.harmonic_range(xp.concatenate([ranges[kind][0] for kind in kinds], axis=-1),
                            xp.concatenate([ranges[kind][1] for kind in kinds], axis=-1), dtype, xp)
  nf, pf, pb1 = n.astype(dtype), p.astype(dtype), (pb + 1).astype(dtype)
  terms = []
  for i, kind in enumerate(kinds):
    dh_i, s1_i = dh[..., i * num_bins:(i + 1) * num_bins], s1[..., i * num_bins:(i + 1) * num_bins]
    if kind == "tie":
      r = xp.where(n > 1, (pf - 1.0) / xp.maximum(nf - 1.0, 1.0), 0.0)
      terms.append(xp.where(p > 0, pf / xp.maximum(nf, 1.0) * (pb1 * dh_i + r * s1_i), 0.0))
    else:
      terms.append(xp.where(p > 0, pb1 * dh_i + s1_i, 0.0))
  *totals, npos = _row_sums(terms + [p], xp)
  norms = [xp.minimum(npos, k) if kind == "tie" else npos for kind in kinds]
  return [xp.where(npos > 0, total / xp.maximum(norm, 1).astype(dtype), xp.nan) for total, norm in zip(totals, norms)]


def _tie_aware_ap(hist, k, dtype, xp=jnp):
  return _ap_core(hist, k, dtype, ("tie",), xp)[0]


def _bound_ap(hist, dtype, first, xp=jnp):
  return _ap_core(hist, np.int32(_NO_CUTOFF), dtype, ("opt",) if first else ("pes",), xp)[0]


def _ndcg_discounts(hist, k, dtype, xp=jnp):
  """``(n[..., B], gains[V], disc[..., B + V])``: the bin totals, the gains ``G(v) = 2^v - 1`` (a
  numpy constant, exact up to ``v = 24`` in float32) and the discount sums over the rank ranges cut
  at ``k``: each bin's tie, then the ideal ranking's level blocks (highest level first)."""
  n, start, end = _counts(hist, ("n", ("before", "level_start"), ("through", "level_end")), xp)
  lo = xp.minimum(start, k)
  gains = np.exp2(np.arange(hist.shape[-1])).astype(dtype) - 1
  return n, gains, _special.discount_range(lo, xp.maximum(lo, xp.minimum(end, k)), dtype, xp)


def _ndcg_parts(hist, k, dtype, xp=jnp):
  """``(gains[V], w[..., B], ideal[...])`` with ``DCG_T = sum_d w_d sum_v gains_v n_{d,v}``.

  ``w_d`` is bin ``d``'s discount sum over the ranks it occupies (cut at
  ``k``) divided by its size: the expected discount of each of its items over
  the tie orders. It reads only the bin totals and ``ideal`` only the level
  totals, so the DCG is linear in the histogram among histograms that share
  both (what a swap of two items keeps; the exact swap deltas use this).
  """
  n, gains, disc = _ndcg_discounts(hist, k, dtype, xp)
  bins = n.shape[-1]
  w = xp.where(n > 0, disc[..., :bins] / xp.maximum(n, 1).astype(dtype), 0.0)
  return xp.asarray(gains), w, xp.sum(gains[::-1] * disc[..., bins:], axis=-1)


def _tie_aware_ndcg(hist, k, dtype, xp=jnp):
  """``DCG_T / ideal`` of :func:`_ndcg_parts`, both summed in one pass over the ranges of
  :func:`_ndcg_discounts`: each range's discount sum times the mean gain of the bin's items, or
  times the gain of the ideal block's level."""
  n, gains, disc = _ndcg_discounts(hist, k, dtype, xp)
  mean_gain = xp.where(n > 0, _sum(hist.astype(dtype) * gains, -1, xp) / xp.maximum(n, 1).astype(dtype), 0.0)
  levels = len(gains)
  padded = xp.pad(mean_gain, [(0, 0)] * (mean_gain.ndim - 1) + [(0, levels)])
  ideal_gain = np.concatenate([np.zeros(n.shape[-1], dtype), gains[::-1]])
  dcg, ideal = _row_sums([disc * padded, disc * ideal_gain], xp)
  return xp.where(ideal > 0, dcg / xp.where(ideal > 0, ideal, 1.0), xp.nan)


def _tie_aware_precision_at_k(hist, k, dtype, xp=jnp):
  n, p, a, through = _counts(hist, ("n", "p", "before", "through"), xp)
  inside = (xp.maximum(a, xp.minimum(k, through)) - a).astype(dtype)
  expected, total = _row_sums([xp.where(n > 0, p.astype(dtype) * inside / xp.maximum(n, 1).astype(dtype), 0.0),
                               n], xp)
  total = xp.minimum(total, k)
  return xp.where(total > 0, expected / xp.maximum(total, 1).astype(dtype), xp.nan)


def _cumulative_counts(hist, xp=jnp):
  retrieved, relevant, npos = _counts(hist, ("through", "p_through", "npos"), xp)
  return retrieved, relevant, npos[..., 0]


def _precision_recall(hist, dtype, xp=jnp):
  retrieved, relevant, npos = _cumulative_counts(hist, xp)
  precision = xp.where(retrieved > 0, relevant.astype(dtype) / xp.maximum(retrieved, 1).astype(dtype), 0.0)
  recall = xp.where(npos[..., None] > 0,
                     relevant.astype(dtype) / xp.maximum(npos, 1)[..., None].astype(dtype), xp.nan)
  return precision, recall


def _at_radius(curve, radius: int):
  return curve[..., min(radius, curve.shape[-1] - 1)]


def _radius_metric(hist, radius, which, dtype, xp=jnp):
  """``which`` in precision / recall / retrieved (``int32`` counts) of the items with ``d <= radius``."""
  if which == "retrieved":
    return _at_radius(_cumulative_counts(hist, xp)[0], radius)
  precision, recall = _precision_recall(hist, dtype, xp)
  return _at_radius(precision if which == "precision" else recall, radius)


def _knn_votes(class_hist, k, relative, xp=jnp):
  class_hist = class_hist.astype(xp.int32)
  n = _sum(class_hist, -1, xp)
  if relative:
    nonempty = n > 0
    selected = nonempty & (_cumsum(nonempty.astype(xp.int32), xp=xp) <= k)
  else:
    selected = xp.broadcast_to(xp.arange(n.shape[-1]) <= k, n.shape)
  votes = _sum(xp.where(selected[..., None], class_hist, 0), -2, xp)
  # argmax returns the first maximum: ties in the vote go to the smallest label.
  return xp.where(xp.max(votes, axis=-1) > 0, xp.argmax(votes, axis=-1).astype(xp.int32), -1)


# --------------------------------------------------------------------------
# Histogram-level public API.


def tie_aware_ap_from_histogram(hist: Array, *, k: Optional[int] = None, dtype: Any = None) -> Array:
  """Tie-aware average precision (He et al. 2018, eq. 3), optionally at cutoff ``k``.

  For the tie at distance ``d`` (ranks ``N_{d-1}+1 .. N_d``, ``n_d`` items of
  which ``n_d^+`` relevant), with ``r_d = (n_d^+ - 1) / (n_d - 1)``:

  .. math:: \\mathrm{AP}_T = \\frac{1}{Z} \\sum_d \\frac{n_d^+}{n_d}
     \\sum_{t=N_{d-1}+1}^{\\min(N_d, k)} \\frac{N^+_{d-1} + 1 + (t - N_{d-1} - 1) r_d}{t},
     \\quad Z = \\min(N^+, k)

  which is the mean of AP (AP@k) over all orders of tied items. The inner sum
  is ``(N^+_{d-1} + 1) (H(b) - H(a)) + r_d S_1`` with harmonic differences
  evaluated without cancellation (see the module notes on precision).

  Args:
    hist: ``int[..., num_bits + 1, V]`` counts; levels ``v >= 1`` are relevant.
    k: rank cutoff (``None``: the whole ranking, ``Z = N^+``).
    dtype: result float dtype (``None``: float64 in x64 mode, else float32).

  Returns:
    ``float[...]`` values in ``[0, 1]``; NaN where no item is relevant.

  >>> import numpy as np
  >>> h = np.array([[[0, 1], [1, 1], [0, 0]]])  # d=0: one relevant; d=1: one of each
  >>> tie_aware_ap_from_histogram(h).tolist()   # (1 + (2/2 + 2/3) / 2) / 2
  [0.91667]
  """
  _check_hist(hist)
  k = _check_cutoff(k)
  return _on_hist(_tie_aware_ap, hist, np.int32(k), _float_dtype(dtype))


def optimistic_ap_from_histogram(hist: Array, *, dtype: Any = None) -> Array:
  """AP when every tie lists its relevant items first (the upper bound of AP over tie orders).

  .. math:: \\mathrm{AP}_{opt} = \\frac{1}{N^+} \\sum_d \\sum_{j=1}^{n_d^+}
     \\frac{N^+_{d-1} + j}{N_{d-1} + j}

  Args:
    hist: ``int[..., num_bits + 1, V]`` counts; levels ``v >= 1`` are relevant.
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``float[...]``; NaN where no item is relevant.

  >>> import numpy as np
  >>> optimistic_ap_from_histogram(np.array([[0, 1], [1, 1], [0, 0]])).tolist()
  1.0
  """
  _check_hist(hist)
  return _on_hist(_bound_ap, hist, _float_dtype(dtype), True)


def pessimistic_ap_from_histogram(hist: Array, *, dtype: Any = None) -> Array:
  """AP when every tie lists its relevant items last (the lower bound of AP over tie orders).

  .. math:: \\mathrm{AP}_{pes} = \\frac{1}{N^+} \\sum_d \\sum_{j=1}^{n_d^+}
     \\frac{N^+_{d-1} + j}{N_d - n_d^+ + j}

  Args:
    hist: ``int[..., num_bits + 1, V]`` counts; levels ``v >= 1`` are relevant.
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``float[...]``; NaN where no item is relevant.

  >>> import numpy as np
  >>> pessimistic_ap_from_histogram(np.array([[0, 1], [1, 1], [0, 0]])).tolist()  # (1 + 2/3) / 2
  0.83333
  """
  _check_hist(hist)
  return _on_hist(_bound_ap, hist, _float_dtype(dtype), False)


def tie_aware_ndcg_from_histogram(hist: Array, *, k: Optional[int] = None, dtype: Any = None) -> Array:
  """Tie-aware NDCG (He et al. 2018, eq. 4), optionally at cutoff ``k``.

  Gain ``G(v) = 2^v - 1``, discount ``D(t) = 1 / log2(t + 1)``; each tie
  spreads its mean gain over its ranks (clipped at ``k``), and the normaliser
  is the ideal DCG(@k), which ties do not affect:

  .. math:: \\mathrm{NDCG}_T = \\frac{1}{\\mathrm{IDCG}} \\sum_d \\sum_v
     \\frac{G(v) n_{d,v}}{n_d} \\sum_{t=N_{d-1}+1}^{\\min(N_d, k)} D(t)

  Args:
    hist: ``int[..., num_bits + 1, V]`` counts per affinity level.
    k: rank cutoff (``None``: the whole ranking).
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``float[...]`` in ``[0, 1]``; NaN where no item has positive gain.

  >>> import numpy as np
  >>> h = np.array([[0, 0, 1], [1, 1, 0]])  # d=0: level 2; d=1: levels 0 and 1
  >>> ideal = 3 + 1 / np.log2(3)
  >>> dcg = 3 + 0.5 * (1 / np.log2(3) + 1 / np.log2(4))
  >>> bool(np.isclose(tie_aware_ndcg_from_histogram(h), dcg / ideal))
  True
  """
  _check_hist(hist)
  k = _check_cutoff(k)
  return _on_hist(_tie_aware_ndcg, hist, np.int32(k), _float_dtype(dtype))


def tie_aware_precision_at_k_from_histogram(hist: Array, *, k: int, dtype: Any = None) -> Array:
  """Tie-aware precision at ``k``: expected relevant items in the top ``k`` over all tie orders.

  .. math:: P_T@k = \\frac{1}{\\min(k, N)} \\sum_d n_d^+
     \\frac{\\min(\\max(k, N_{d-1}), N_d) - N_{d-1}}{n_d}

  Args:
    hist: ``int[..., num_bits + 1, V]`` counts; levels ``v >= 1`` are relevant.
    k: the cutoff (int >= 1).
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``float[...]`` in ``[0, 1]``.

  >>> import numpy as np
  >>> tie_aware_precision_at_k_from_histogram(np.array([[0, 1], [1, 1], [0, 0]]), k=2).tolist()
  0.75
  """
  _check_hist(hist)
  k = _check_cutoff(k, allow_none=False)
  return _on_hist(_tie_aware_precision_at_k, hist, np.int32(k), _float_dtype(dtype))


def _check_radius(radius: Any) -> int:
  if isinstance(radius, (bool, np.bool_)) or not isinstance(radius, (int, np.integer)) or radius < 0:
    raise ValueError(f"radius: expected an int >= 0, got {radius!r}")
  return int(radius)


def precision_at_radius_from_histogram(hist: Array, *, radius: int, dtype: Any = None) -> Array:
  """Precision of the items within Hamming radius ``radius`` (``d <= radius``); 0 if none.

  .. math:: P(r) = \\frac{\\sum_{d \\le r} n_d^+}{\\sum_{d \\le r} n_d}

  Args:
    hist: ``int[..., num_bits + 1, V]`` counts; levels ``v >= 1`` are relevant.
    radius: int ``>= 0``; radii beyond ``num_bits`` retrieve everything.
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``float[...]``; 0 for a query that retrieves nothing (count those with
    :func:`retrieved_at_radius_from_histogram`).

  >>> import numpy as np
  >>> precision_at_radius_from_histogram(np.array([[0, 1], [1, 1], [0, 0]]), radius=1).tolist()
  0.66667
  """
  _check_hist(hist)
  return _on_hist(_radius_metric, hist, _check_radius(radius), "precision", _float_dtype(dtype))


def recall_at_radius_from_histogram(hist: Array, *, radius: int, dtype: Any = None) -> Array:
  """Recall of the items within Hamming radius ``radius`` (``d <= radius``).

  .. math:: R(r) = \\frac{1}{N^+} \\sum_{d \\le r} n_d^+

  Args:
    hist: ``int[..., num_bits + 1, V]`` counts; levels ``v >= 1`` are relevant.
    radius: int ``>= 0``.
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``float[...]``; NaN where no item is relevant.

  >>> import numpy as np
  >>> recall_at_radius_from_histogram(np.array([[0, 1], [1, 1], [0, 2]]), radius=1).tolist()
  0.5
  """
  _check_hist(hist)
  return _on_hist(_radius_metric, hist, _check_radius(radius), "recall", _float_dtype(dtype))


def retrieved_at_radius_from_histogram(hist: Array, *, radius: int) -> Array:
  """Number of items within Hamming radius ``radius`` (``d <= radius``).

  .. math:: |\\{i : d_i \\le r\\}| = \\sum_{d \\le r} n_d

  Args:
    hist: ``int[..., num_bits + 1, V]`` counts.
    radius: int ``>= 0``.

  Returns:
    ``int32[...]`` counts (0 marks a query whose precision at this radius is set to 0).

  >>> import numpy as np
  >>> retrieved_at_radius_from_histogram(np.array([[0, 0], [1, 1], [0, 2]]), radius=0).tolist()
  0
  """
  _check_hist(hist)
  return _on_hist(_radius_metric, hist, _check_radius(radius), "retrieved", None)


def precision_recall_curve_from_histogram(hist: Array, *, dtype: Any = None) -> tuple[Array, Array]:
  """Precision and recall at every Hamming radius ``0 .. num_bits``.

  .. math:: P(r) = \\frac{N^+_r}{N_r}, \\quad R(r) = \\frac{N^+_r}{N^+}

  Args:
    hist: ``int[..., num_bits + 1, V]`` counts; levels ``v >= 1`` are relevant.
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``(precision, recall)``, each ``float[..., num_bits + 1]``: precision 0
    where nothing is retrieved yet, recall NaN where no item is relevant.

  >>> import numpy as np
  >>> p, r = precision_recall_curve_from_histogram(np.array([[0, 1], [1, 1], [0, 0]]))
  >>> p.tolist(), r.tolist()
  ([1.0, 0.66667, 0.66667], [0.5, 1.0, 1.0])
  """
  _check_hist(hist)
  return _on_hist(_precision_recall, hist, _float_dtype(dtype))


def _check_threshold(threshold: Any) -> bool:
  if threshold not in ("relative", "absolute"):
    raise ValueError(f"threshold: expected 'relative' or 'absolute', got {threshold!r}")
  return threshold == "relative"


def knn_classify_from_histogram(class_hist: Array, *, k: int, threshold: str = "relative") -> Array:
  """Nair et al.'s Hamming kNN classifier: majority vote of every item in the selected bins.

  ``threshold="relative"`` selects the ``k`` nearest non-empty distance bins
  (never empty); ``"absolute"`` selects every bin ``d <= k``. Ties are not
  broken inside bins: all their items vote (Nair et al. Sec. 3.5.1).

  .. math:: \\hat y = \\arg\\max_c \\sum_{d \\in \\mathrm{sel}(k)} n_{d,c}

  A tie in the vote goes to the smallest label; with an absolute threshold
  and no item within ``k`` the prediction is ``-1`` (abstain; counted as an
  error by :func:`error_rate`).

  Args:
    class_hist: ``int[..., num_bits + 1, C]``: counts of database items per
      distance and class label.
    k: number of non-empty bins (relative, ``>= 1``) or the radius (absolute, ``>= 0``).
    threshold: ``"relative"`` or ``"absolute"``.

  Returns:
    ``int32[...]`` predicted labels in ``[0, C)``, or ``-1``.

  >>> import numpy as np
  >>> h = np.array([[0, 0], [0, 1], [0, 0], [2, 0]])  # d=1: one of class 1; d=3: two of class 0
  >>> knn_classify_from_histogram(h, k=1).tolist(), knn_classify_from_histogram(h, k=2).tolist()
  (1, 0)
  """
  _check_hist(class_hist, "class_hist")
  relative = _check_threshold(threshold)
  k = _check_cutoff(k, allow_none=False, low=1 if relative else 0)
  return _on_hist(_knn_votes, class_hist, np.int32(k), relative)


# --------------------------------------------------------------------------
# Distance-level public API: validate, histogram (O(N) per query), formula.


def tie_aware_ap(distances: Array, relevance: Array, *, num_bits: int, k: Optional[int] = None,
                 where: Optional[Array] = None, dtype: Any = None) -> Array:
  """Tie-aware average precision of Hamming rankings (He et al. 2018, eq. 3).

  The mean of AP (or AP@k, normalised by ``min(N+, k)``) over all orders of
  tied items, computed exactly from the distance histogram in ``O(N)`` per query.

  .. math:: \\mathrm{AP}_T = \\mathbb{E}_{\\text{tie orders}}\\Big[\\frac{1}{Z}
     \\sum_{t \\le k} \\mathrm{rel}(R_t)\\, \\mathrm{Prec@}t\\Big]

  Args:
    distances: ``int[..., N]`` Hamming distances in ``[0, num_bits]``.
    relevance: ``{0, 1}`` (or bool) ``[..., N]``, same shape.
    num_bits: the code length.
    k: optional rank cutoff.
    where: optional bool ``[..., N]`` mask; ``False`` items are left out.
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``float[...]``; NaN for a query without a relevant item.

  >>> import numpy as np
  >>> d, rel = np.array([[0, 1, 1, 2]]), np.array([[1, 0, 1, 0]])
  >>> tie_aware_ap(d, rel, num_bits=2).tolist()
  [0.91667]
  """
  k = _check_cutoff(k)
  hist = _relevance_histogram(distances, relevance, num_bits, where)
  return _on_hist(_tie_aware_ap, hist, np.int32(k), _float_dtype(dtype))


def optimistic_ap(distances: Array, relevance: Array, *, num_bits: int, where: Optional[Array] = None,
                  dtype: Any = None) -> Array:
  """AP with relevant items first within each tie (upper bound over tie orders).

  .. math:: \\mathrm{AP}_{opt} = \\max_{\\text{tie orders}} \\mathrm{AP}

  Args:
    distances: ``int[..., N]`` Hamming distances in ``[0, num_bits]``.
    relevance: ``{0, 1}`` ``[..., N]``, same shape.
    num_bits: the code length.
    where: optional bool ``[..., N]`` mask of valid items.
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``float[...]``; NaN for a query without a relevant item.

  >>> import numpy as np
  >>> optimistic_ap(np.array([[0, 1, 1, 2]]), np.array([[1, 0, 1, 0]]), num_bits=2).tolist()
  [1.0]
  """
  hist = _relevance_histogram(distances, relevance, num_bits, where)
  return _on_hist(_bound_ap, hist, _float_dtype(dtype), True)


def pessimistic_ap(distances: Array, relevance: Array, *, num_bits: int, where: Optional[Array] = None,
                   dtype: Any = None) -> Array:
  """AP with relevant items last within each tie (lower bound over tie orders).

  .. math:: \\mathrm{AP}_{pes} = \\min_{\\text{tie orders}} \\mathrm{AP}

  Args:
    distances: ``int[..., N]`` Hamming distances in ``[0, num_bits]``.
    relevance: ``{0, 1}`` ``[..., N]``, same shape.
    num_bits: the code length.
    where: optional bool ``[..., N]`` mask of valid items.
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``float[...]``; NaN for a query without a relevant item.

  >>> import numpy as np
  >>> pessimistic_ap(np.array([[0, 1, 1, 2]]), np.array([[1, 0, 1, 0]]), num_bits=2).tolist()
  [0.83333]
  """
  hist = _relevance_histogram(distances, relevance, num_bits, where)
  return _on_hist(_bound_ap, hist, _float_dtype(dtype), False)


def _index_order_ap(distances, relevance, where, k, num_bits: int, dtype, xp=jnp):
  """AP(@k) of ``[..., N]`` rows ranked by a stable sort of the distances (ties: ascending index).

  numpy sorts the distances stably by a radix sort of small unsigned keys
  (``O(N)`` per row; codes of 65,535 bits or more sort int32 keys) and sums in
  float64 (the result is cast to ``dtype``); traced, XLA's stable sort, summing
  in ``dtype``.
  """
  d = distances.astype(xp.int32)
  r = relevance.astype(xp.int32)
  if where is not None:  # masked items sort last and count as irrelevant
    d = xp.where(where, d, num_bits + 1)
    r = xp.where(where, r, 0)
  if xp is np:
    key = np.uint8 if num_bits < 255 else np.uint16 if num_bits < 65535 else None  # num_bits + 1 fits
    order = np.argsort(d if key is None else d.astype(key), axis=-1, kind="stable")
  else:
    order = jnp.argsort(d, axis=-1, stable=True)
  ranked = xp.take_along_axis(r, order, axis=-1)
  hits = xp.cumsum(ranked, axis=-1)
  rank = xp.arange(1, d.shape[-1] + 1)
  acc = np.float64 if xp is np else dtype
  terms = xp.where((ranked > 0) & (rank <= k), hits.astype(acc) / rank.astype(acc), 0.0)
  npos = xp.sum(r, axis=-1)
  norm = xp.minimum(npos, k).astype(acc)
  return xp.where(npos > 0, xp.sum(terms, axis=-1) / xp.maximum(norm, 1.0), xp.nan).astype(dtype)


_traced_index_order_ap = jax.jit(functools.partial(_index_order_ap, xp=jnp), static_argnames=("num_bits", "dtype"))

#: Elements per block of rows of :func:`ap`'s host path (its temporaries: about 100 MB).
_HOST_BLOCK_ELEMENTS = 1 << 21


def ap(distances: Array, relevance: Array, *, num_bits: int, k: Optional[int] = None,
       where: Optional[Array] = None, dtype: Any = None) -> Array:
  """Ordinary AP(@k) with ties broken by ascending database index (a stable sort).

  For comparison with results that use one fixed tie order; prefer
  :func:`tie_aware_ap`. Concrete inputs are ranked on the host by numpy's
  stable radix sort of the distances (``O(N)`` per query, sums in float64,
  nothing compiled; device arrays are copied to the host); traced inputs by
  XLA's stable sort (``O(N log N)``).

  .. math:: \\mathrm{AP} = \\frac{1}{\\min(N^+, k)} \\sum_{t \\le k} \\mathrm{rel}(R_t)
     \\frac{1}{t} \\sum_{j \\le t} \\mathrm{rel}(R_j), \\quad R = \\mathrm{argsort_{stable}}(d)

  Args:
    distances: ``int[..., N]`` Hamming distances in ``[0, num_bits]``.
    relevance: ``{0, 1}`` ``[..., N]``, same shape.
    num_bits: the code length.
    k: optional rank cutoff.
    where: optional bool ``[..., N]`` mask of valid items.
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``float[...]``; NaN for a query without a relevant item.

  >>> import numpy as np
  >>> ap(np.array([[0, 1, 1, 2]]), np.array([[1, 0, 1, 0]]), num_bits=2).tolist()  # ranks 1, 3
  [0.83333]
  """
  num_bits = _check_distances(distances, num_bits)
  _check_relevance(relevance, distances)
  _check_where(where, distances)
  k = _check_cutoff(k)
  dtype = _float_dtype(dtype)
  if not all(_checks.is_concrete(x) for x in (distances, relevance, where) if x is not None):
    return _traced_index_order_ap(distances, relevance, where, np.int32(k), num_bits, dtype)
  # Concrete inputs: numpy on the host, in blocks of rows. Jitted, XLA's sort compiled in 0.33 to
  # 0.40 s per shape, and 1,000 x 10^5 distances took 27 to 32 s against 3.1 to 3.4 s here.
  n = distances.shape[-1]
  flat = lambda x: None if x is None else np.asarray(x).reshape(-1, n)
  d, r, w = flat(distances), flat(relevance), flat(where)
  step = max(1, _HOST_BLOCK_ELEMENTS // max(n, 1))
  with np.errstate(**_HOST_ERRSTATE):
    out = np.concatenate([_index_order_ap(d[i:i + step], r[i:i + step], None if w is None else w[i:i + step],
                                          k, num_bits, dtype, np) for i in range(0, len(d), step)] or
                         [np.zeros(0, dtype)])
  return _checks.as_jax(out.reshape(distances.shape[:-1]))


def tie_aware_ndcg(distances: Array, affinity: Array, *, num_bits: int, k: Optional[int] = None,
                   num_levels: Optional[int] = None, where: Optional[Array] = None,
                   dtype: Any = None) -> Array:
  """Tie-aware NDCG(@k) of Hamming rankings (He et al. 2018, eq. 4), multi-level affinities.

  .. math:: \\mathrm{NDCG}_T = \\frac{1}{\\mathrm{IDCG}} \\mathbb{E}_{\\text{tie orders}}
     \\Big[\\sum_{t \\le k} \\frac{2^{a(R_t)} - 1}{\\log_2(t + 1)}\\Big]

  Args:
    distances: ``int[..., N]`` Hamming distances in ``[0, num_bits]``.
    affinity: ``int[..., N]`` levels ``>= 0`` (0 = irrelevant), same shape.
    num_bits: the code length.
    k: optional rank cutoff.
    num_levels: number of levels ``V`` (inferred from concrete ``affinity``;
      needed under jit).
    where: optional bool ``[..., N]`` mask of valid items.
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``float[...]``; NaN for a query without an item of positive gain.

  >>> import numpy as np
  >>> d, a = np.array([[0, 1, 1]]), np.array([[2, 0, 1]])
  >>> ideal = 3 + 1 / np.log2(3)
  >>> dcg = 3 + 0.5 * (1 / np.log2(3) + 1 / np.log2(4))
  >>> bool(np.isclose(tie_aware_ndcg(d, a, num_bits=1)[0], dcg / ideal))
  True
  """
  num_bits = _check_distances(distances, num_bits)
  _check_int_array("affinity", affinity, 0, np.iinfo(np.int32).max, what="affinity levels")
  _checks.check_shape("affinity", affinity, distances.shape, like="distances")
  num_levels = codes._levels(affinity, num_levels)
  if num_levels > 64:
    raise ValueError(f"affinity: expected at most 64 levels (gain 2^v - 1), got {num_levels}")
  _check_where(where, distances)
  k = _check_cutoff(k)
  hist = _histogram(distances, affinity, num_bits, num_levels, where)
  return _on_hist(_tie_aware_ndcg, hist, np.int32(k), _float_dtype(dtype))


def tie_aware_precision_at_k(distances: Array, relevance: Array, *, num_bits: int, k: int,
                             where: Optional[Array] = None, dtype: Any = None) -> Array:
  """Tie-aware precision@k: a tie straddling rank ``k`` contributes its expected relevant count.

  .. math:: P_T@k = \\frac{1}{\\min(k, N)} \\mathbb{E}_{\\text{tie orders}}
     \\Big[\\sum_{t \\le k} \\mathrm{rel}(R_t)\\Big]

  Args:
    distances: ``int[..., N]`` Hamming distances in ``[0, num_bits]``.
    relevance: ``{0, 1}`` ``[..., N]``, same shape.
    num_bits: the code length.
    k: the cutoff (int >= 1).
    where: optional bool ``[..., N]`` mask of valid items.
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``float[...]`` in ``[0, 1]``.

  >>> import numpy as np
  >>> tie_aware_precision_at_k(np.array([[0, 1, 1, 2]]), np.array([[1, 0, 1, 0]]), num_bits=2,
  ...                          k=2).tolist()
  [0.75]
  """
  k = _check_cutoff(k, allow_none=False)
  hist = _relevance_histogram(distances, relevance, num_bits, where)
  return _on_hist(_tie_aware_precision_at_k, hist, np.int32(k), _float_dtype(dtype))


def precision_at_radius(distances: Array, relevance: Array, *, num_bits: int, radius: int,
                        where: Optional[Array] = None, dtype: Any = None) -> Array:
  """Precision of the items within Hamming radius ``radius`` (``d <= radius``), 0 if none.

  Nair et al. (2012, Sec. 5.1, eq. 9) report this with "distance < 2", i.e.
  ``radius=1``; "precision within Hamming radius 2" is ``radius=2``.

  .. math:: P(r) = \\frac{|\\{i : d_i \\le r, \\mathrm{rel}_i = 1\\}|}{|\\{i : d_i \\le r\\}|}

  Args:
    distances: ``int[..., N]`` Hamming distances in ``[0, num_bits]``.
    relevance: ``{0, 1}`` ``[..., N]``, same shape.
    num_bits: the code length.
    radius: int ``>= 0``.
    where: optional bool ``[..., N]`` mask of valid items.
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``float[...]``; 0 where nothing is retrieved (see :func:`retrieved_at_radius`).

  >>> import numpy as np
  >>> precision_at_radius(np.array([[0, 1, 1, 2], [2, 2, 2, 2]]), np.array([[1, 0, 1, 0], [1, 0, 0, 0]]),
  ...                     num_bits=2, radius=1).tolist()
  [0.66667, 0.0]
  """
  radius = _check_radius(radius)
  hist = _relevance_histogram(distances, relevance, num_bits, where)
  return _on_hist(_radius_metric, hist, radius, "precision", _float_dtype(dtype))


def recall_at_radius(distances: Array, relevance: Array, *, num_bits: int, radius: int,
                     where: Optional[Array] = None, dtype: Any = None) -> Array:
  """Recall of the items within Hamming radius ``radius`` (``d <= radius``).

  .. math:: R(r) = \\frac{|\\{i : d_i \\le r, \\mathrm{rel}_i = 1\\}|}{N^+}

  Args:
    distances: ``int[..., N]`` Hamming distances in ``[0, num_bits]``.
    relevance: ``{0, 1}`` ``[..., N]``, same shape.
    num_bits: the code length.
    radius: int ``>= 0``.
    where: optional bool ``[..., N]`` mask of valid items.
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``float[...]``; NaN for a query without a relevant item.

  >>> import numpy as np
  >>> recall_at_radius(np.array([[0, 1, 1, 2]]), np.array([[1, 0, 1, 1]]), num_bits=2, radius=1).tolist()
  [0.66667]
  """
  radius = _check_radius(radius)
  hist = _relevance_histogram(distances, relevance, num_bits, where)
  return _on_hist(_radius_metric, hist, radius, "recall", _float_dtype(dtype))


def retrieved_at_radius(distances: Array, *, num_bits: int, radius: int,
                        where: Optional[Array] = None) -> Array:
  """Number of items within Hamming radius ``radius`` (``d <= radius``) per query.

  .. math:: |\\{i : d_i \\le r\\}|

  Args:
    distances: ``int[..., N]`` Hamming distances in ``[0, num_bits]``.
    num_bits: the code length.
    radius: int ``>= 0``.
    where: optional bool ``[..., N]`` mask of valid items.

  Returns:
    ``int32[...]`` counts.

  >>> import numpy as np
  >>> retrieved_at_radius(np.array([[0, 1, 1, 2], [2, 2, 2, 2]]), num_bits=2, radius=1).tolist()
  [3, 0]
  """
  num_bits = _check_distances(distances, num_bits)
  _check_where(where, distances)
  radius = _check_radius(radius)
  return _on_hist(_radius_metric, _histogram(distances, None, num_bits, 1, where), radius, "retrieved", None)


def precision_recall_curve(distances: Array, relevance: Array, *, num_bits: int,
                           where: Optional[Array] = None, dtype: Any = None) -> tuple[Array, Array]:
  """Precision and recall at every Hamming radius ``r = 0 .. num_bits``.

  .. math:: \\big(P(r), R(r)\\big)_{r=0}^{b}

  Args:
    distances: ``int[..., N]`` Hamming distances in ``[0, num_bits]``.
    relevance: ``{0, 1}`` ``[..., N]``, same shape.
    num_bits: the code length.
    where: optional bool ``[..., N]`` mask of valid items.
    dtype: result float dtype (``None``: follow x64 mode).

  Returns:
    ``(precision, recall)``, each ``float[..., num_bits + 1]`` (precision 0
    before anything is retrieved; recall NaN without relevant items).

  >>> import numpy as np
  >>> p, r = precision_recall_curve(np.array([0, 1, 1, 2]), np.array([1, 0, 1, 0]), num_bits=2)
  >>> p.tolist(), r.tolist()
  ([1.0, 0.66667, 0.5], [0.5, 1.0, 1.0])
  """
  return _on_hist(_precision_recall, _relevance_histogram(distances, relevance, num_bits, where),
                  _float_dtype(dtype))


def knn_classify(distances: Array, db_labels: Array, *, num_classes: int, num_bits: int, k: int,
                 threshold: str = "relative", where: Optional[Array] = None) -> Array:
  """Nair et al.'s Hamming nearest-neighbour classifier (Sec. 3.5.1, 5.1).

  Neighbours are all items in the ``k`` nearest non-empty distance bins
  (``threshold="relative"``) or within distance ``k`` (``"absolute"``); ties
  inside bins are not broken, every neighbour votes. Vote ties go to the
  smallest label; no neighbour (absolute threshold only) gives ``-1``.

  .. math:: \\hat y_q = \\arg\\max_c |\\{i \\in \\mathrm{nbr}_k(q) : y_i = c\\}|

  Args:
    distances: ``int[Q, N]`` (or ``[..., N]``) Hamming distances in ``[0, num_bits]``.
    db_labels: ``int[N]`` database labels in ``[0, num_classes)``.
    num_classes: number of classes ``C``.
    num_bits: the code length.
    k: bins (relative, ``>= 1``) or radius (absolute, ``>= 0``).
    threshold: ``"relative"`` or ``"absolute"``.
    where: optional bool ``[..., N]`` mask of valid database items.

  Returns:
    ``int32[...]`` predicted labels (or ``-1``).

  >>> import numpy as np
  >>> knn_classify(np.array([[1, 3, 3], [0, 0, 2]]), np.array([1, 0, 0]), num_classes=2, num_bits=3,
  ...              k=1).tolist()
  [1, 0]
  """
  num_bits = _check_distances(distances, num_bits)
  if isinstance(num_classes, (bool, np.bool_)) or not isinstance(num_classes, (int, np.integer)) \
      or num_classes < 1:
    raise ValueError(f"num_classes: expected a positive int, got {num_classes!r}")
  _check_int_array("db_labels", db_labels, 0, int(num_classes) - 1, what="class labels")
  if db_labels.ndim != 1 or db_labels.shape[0] != distances.shape[-1]:
    raise ValueError(f"db_labels: expected shape ({distances.shape[-1]},) (the last axis of distances), "
                     f"got {tuple(db_labels.shape)}")
  _check_where(where, distances)
  relative = _check_threshold(threshold)
  k = _check_cutoff(k, allow_none=False, low=1 if relative else 0)
  class_hist = _histogram(distances, db_labels, num_bits, int(num_classes), where)
  return _on_hist(_knn_votes, class_hist, np.int32(k), relative)


def error_rate(predictions: Array, labels: Array) -> Array:
  """Fraction of wrong predictions (an abstention ``-1`` counts as wrong).

  .. math:: \\mathrm{err} = \\frac{1}{Q} \\sum_q [\\hat y_q \\ne y_q]

  Args:
    predictions: ``int[...]`` predicted labels (``-1`` = no prediction).
    labels: ``int[...]`` true labels, same shape.

  Returns:
    float scalar in ``[0, 1]`` (float32 unless x64 mode).

  >>> import numpy as np
  >>> error_rate(np.array([1, 0, -1, 2]), np.array([1, 1, 0, 2])).tolist()
  0.5
  """
  for name, x in (("predictions", predictions), ("labels", labels)):
    _check_int_array(name, x, np.iinfo(np.int32).min, np.iinfo(np.int32).max, what="labels")
  _checks.check_shape("labels", labels, predictions.shape, like="predictions")
  _checks.check_nonempty("predictions", predictions.reshape(-1), what="prediction")
  return jnp.mean((jnp.asarray(predictions) != jnp.asarray(labels)).astype(_float_dtype(None)))


def _mean_and_count(values, where, xp=jnp):
  nan = xp.isnan(values)
  counted = xp.ones_like(nan) if where is None else where
  defined = counted & ~nan
  num = xp.sum(defined)
  total = xp.sum(xp.where(defined, values, 0.0))
  mean = xp.where(num > 0, total / xp.maximum(num, 1).astype(values.dtype), xp.nan)
  return MeanCount(mean, xp.sum(counted & nan).astype(xp.int32))


def mean_and_count(values: Array, *, where: Optional[Array] = None) -> MeanCount:
  """Mean of the defined (non-NaN) values, and the number of undefined ones.

  The policy for queries whose metric is undefined (e.g. AP without a
  relevant item): they are left out of the mean and reported as a count.

  .. math:: \\bar m = \\frac{\\sum_{q : m_q \\ne \\mathrm{NaN}} m_q}{|\\{q : m_q \\ne \\mathrm{NaN}\\}|}

  Args:
    values: ``float[...]`` per-query values, NaN where undefined.
    where: optional bool mask of the same shape; ``False`` entries are ignored.

  Returns:
    :class:`MeanCount` ``(mean, num_undefined)``; ``mean`` is NaN when no
    value is defined.

  >>> import numpy as np
  >>> m = mean_and_count(np.array([0.5, np.nan, 1.0]))
  >>> float(m.mean), int(m.num_undefined)
  (0.75, 1)
  """
  if not hasattr(values, "dtype") or not np.issubdtype(np.dtype(values.dtype), np.floating):
    got = np.dtype(values.dtype).name if hasattr(values, "dtype") else type(values).__name__
    raise ValueError(f"values: expected a float array (NaN = undefined), got {got}")
  if where is not None:
    if not hasattr(where, "dtype") or np.dtype(where.dtype) != np.bool_:
      raise ValueError("where: expected a bool mask")
    _checks.check_shape("where", where, values.shape, like="values")
  return _on_hist(_mean_and_count, values, where)


# --------------------------------------------------------------------------
# One-call evaluation.


def evaluate_codes(query_words: Array, db_words: Array, *, num_bits: int,
                   query_labels: Optional[Array] = None, db_labels: Optional[Array] = None,
                   relevance: Optional[Array] = None, affinity: Optional[Array] = None,
                   radius: int = 2, k: int = 100, chunk_size: int = codes.DEFAULT_CHUNK_SIZE,
                   dtype: Any = None) -> dict:
  """Evaluates packed codes in one pass: streamed histograms, then every metric.

  Builds ``hist[Q, num_bits + 1, V]`` with :func:`hashjax.codes.hamming_histogram`
  (XOR/popcount fused with the counting), then reads the metrics from it.
  With labels no ``[Q, N]`` matrix exists: large calls with codes of at most
  128 bits count bit-sliced (the database laid out in runs of one class each,
  see :func:`hashjax.codes.hamming_histogram`); the others form relevance
  ``[query_labels[q] == db_labels[i]]`` per streamed block.

  .. math:: \\mathrm{hist}_{q,d,v} \\to (\\overline{\\mathrm{AP}_T}, \\overline{\\mathrm{NDCG}_T},
     \\overline{\\mathrm{AP}_{opt}}, \\overline{\\mathrm{AP}_{pes}}, \\overline{P(r)}, \\overline{P_T@k})

  Args:
    query_words: ``uint32[Q, W]`` packed query codes.
    db_words: ``uint32[N, W]`` packed database codes.
    num_bits: the code length.
    query_labels: ``int[Q]`` class labels (with ``db_labels``; relevance =
      label agreement).
    db_labels: ``int[N]`` class labels.
    relevance: alternatively ``{0, 1}[Q, N]``.
    affinity: alternatively ``int[Q, N]`` levels ``>= 0`` (NDCG uses the
      levels; AP and precision count levels ``>= 1`` as relevant).
    radius: Hamming radius for precision/recall (``d <= radius``).
    k: cutoff of the tie-aware precision@k.
    chunk_size: cap on database items per streamed step.
    dtype: float dtype of the computation (``None``: follow x64 mode).

  Returns:
    dict of Python numbers: ``tie_aware_ap``, ``tie_aware_ndcg``,
    ``optimistic_ap``, ``pessimistic_ap`` (means over queries with a
    relevant item), ``precision_at_radius`` (queries retrieving nothing count
    as 0), ``num_empty_at_radius``, ``recall_at_radius``,
    ``tie_aware_precision_at_k``, ``num_undefined_ap`` (queries without a
    relevant item), ``num_undefined_ndcg``, ``radius``, ``k``,
    ``num_queries``, ``num_db``.

  >>> import numpy as np
  >>> from hashjax.codes import pack_bits
  >>> q = pack_bits(np.array([[0, 0], [1, 1]]))
  >>> x = pack_bits(np.array([[0, 0], [0, 1], [1, 1]]))
  >>> out = evaluate_codes(q, x, num_bits=2, query_labels=np.array([0, 1]), db_labels=np.array([0, 0, 1]),
  ...                      radius=1)
  >>> out["tie_aware_ap"], out["num_undefined_ap"], out["precision_at_radius"]  # radius 1: 2/2 and 1/2
  (1.0, 0, 0.75)
  """
  codes._check_pair(query_words, db_words)
  num_bits = _checks.check_num_bits(num_bits, words=query_words, words_name="query_words")
  _checks.check_padding_bits("query_words", query_words, num_bits)
  _checks.check_padding_bits("db_words", db_words, num_bits)
  num_q, num_db = query_words.shape[0], db_words.shape[0]
  labels_given = query_labels is not None or db_labels is not None
  given = [name for name, used in (("query_labels/db_labels", labels_given), ("relevance", relevance is not None),
                                   ("affinity", affinity is not None)) if used]
  if len(given) != 1:
    raise ValueError("query_labels, db_labels, relevance, affinity: expected exactly one of labels "
                     f"(both query_labels and db_labels), relevance or affinity, got {given or 'none'}")
  radius = _check_radius(radius)
  k = _check_cutoff(k, allow_none=False)
  dt = _float_dtype(dtype)
  if isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
    raise ValueError(f"chunk_size: expected a positive int, got {chunk_size!r}")
  if labels_given:
    for name, lab, n in (("query_labels", query_labels, num_q), ("db_labels", db_labels, num_db)):
      if lab is None:
        raise ValueError(f"{name}: expected int labels of shape ({n},) together with the other labels, got None")
      _check_int_array(name, lab, np.iinfo(np.int32).min, np.iinfo(np.int32).max, what="class labels")
      if lab.ndim != 1 or lab.shape[0] != n:
        raise ValueError(f"{name}: expected shape ({n},), got {tuple(lab.shape)}")
    hist = codes._label_histogram(query_words, db_words, query_labels, db_labels, num_bits=num_bits,
                                  chunk_size=int(chunk_size))
  elif relevance is not None:
    _check_int_array("relevance", relevance, 0, 1, what="relevance labels")
    hist = codes.hamming_histogram(query_words, db_words, relevance, num_bits=num_bits, num_levels=2,
                                   chunk_size=int(chunk_size))
  else:
    _check_int_array("affinity", affinity, 0, np.iinfo(np.int32).max, what="affinity levels")
    hist = codes.hamming_histogram(query_words, db_words, affinity, num_bits=num_bits,
                                   chunk_size=int(chunk_size))
  return _evaluate_histogram(hist, radius=radius, k=k, dtype=dt, num_db=num_db)


def _evaluate_histogram(hist, *, radius: int, k: int, dtype, num_db: int) -> dict:
  """Every summary of :func:`evaluate_codes` from a concrete ``hist[Q, B, V]``, on the host."""
  h = np.asarray(hist)
  no_cut = np.int32(_NO_CUTOFF)
  with np.errstate(**_HOST_ERRSTATE):
    tie, opt, pes = _ap_core(h, no_cut, dtype, ("tie", "opt", "pes"), np)
    ndcg = _tie_aware_ndcg(h, no_cut, dtype, np)
    precision, recall = _precision_recall(h, dtype, np)
    retrieved = _cumulative_counts(h, np)[0]
    means = {name: _mean_and_count(v, None, np) for name, v in (
        ("tie_aware_ap", tie), ("tie_aware_ndcg", ndcg), ("optimistic_ap", opt), ("pessimistic_ap", pes),
        ("recall_at_radius", _at_radius(recall, radius)),
        ("tie_aware_precision_at_k", _tie_aware_precision_at_k(h, np.int32(k), dtype, np)))}
  mean = lambda name: float(means[name].mean)
  return {
      "tie_aware_ap": mean("tie_aware_ap"),
      "tie_aware_ndcg": mean("tie_aware_ndcg"),
      "optimistic_ap": mean("optimistic_ap"),
      "pessimistic_ap": mean("pessimistic_ap"),
      "precision_at_radius": float(np.mean(_at_radius(precision, radius), dtype=dtype)),
      "num_empty_at_radius": int(np.sum(_at_radius(retrieved, radius) == 0)),
      "recall_at_radius": mean("recall_at_radius"),
      "tie_aware_precision_at_k": mean("tie_aware_precision_at_k"),
      "num_undefined_ap": int(means["tie_aware_ap"].num_undefined),
      "num_undefined_ndcg": int(means["tie_aware_ndcg"].num_undefined),
      "radius": radius, "k": k, "num_queries": h.shape[0], "num_db": int(num_db),
  }
