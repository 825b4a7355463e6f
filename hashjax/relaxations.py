"""Continuous relaxations for tie-aware learning to hash (He et al. 2018, Sec. 4).

The relaxed pipeline mirrors the discrete one in :mod:`hashjax.codes`::

  logits --relax--> codes in [-1, 1] --relaxed distance--> distances[..., Q, N]
         --soft_histogram--> hist[..., num_bits + 1, V] --relaxed_ap / relaxed_ndcg--> [..., Q]

Every function is pure and jit/vmap/grad-able; options are keyword-only; the
default dtype is float32 (float64 inputs stay float64 under
``jax.enable_x64``).

Notation (He et al. 2018, Sec. 3.2 and 4.1): ``c[d, v]`` is the (soft) count of
items at distance ``d`` with affinity level ``v``, ``c_d = sum_v c[d, v]``,
``C_d = sum_{i <= d} c_i`` and ``C_{d-1}`` the count strictly before bin ``d``.
For AP the levels are ``0`` (irrelevant, ``c^-``) and ``1`` (relevant,
``c^+``); for NDCG the level index is the affinity value, with gain
``G(v) = 2^v - 1``.

**Which relaxation is which.** Both exact tie-aware metrics (eqs. 3-4) sum a
function of the position ``t`` over the positions ``C_{d-1} + 1 .. C_d`` of a
tie. The paper replaces these sums by integrals over ``[C_{d-1} + 1, C_d]``
(eqs. 7-8, 10-12), an interval one position shorter than the tie: a bin holding
one item gets an empty integral (a lone relevant item in the first bin scores
0), and a bin with ``c_d < 1`` gets a *negative* one. ``harmonic="ln"`` and
``discount="li"`` are those printed forms. ``harmonic="digamma"`` (default) and
``discount="exact"`` (default) instead use the smooth interpolants of the
partial sums that are *exact at integer counts* (``psi(C_d + 1) -
psi(C_{d-1} + 1)`` for the harmonic sum and the analogous continuation of the
cumulative DCG discount, see :func:`cumulative_discount`), so that at hard
histograms they equal AP_T and DCG_T, and an empty bin contributes exactly 0.
``discount="simplified"`` is the form in the authors' released code: every item
of bin ``d`` gets the discount of the mean position, ``1 / log2(C_{d-1} +
(c_d + 1) / 2 + 1)``.

**Queries without relevant items.** AP and NDCG are undefined there. The
relaxed metrics return 0 with zero gradient for them; :func:`has_relevant`
gives the mask to average a loss over the queries that count.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks

Array = jax.Array

__all__ = [
    "relax", "relaxed_hamming", "nair_hamming", "squared_euclidean", "DISTANCES",
    "off_diagonal", "soft_histogram", "relaxed_ap", "relaxed_dcg", "relaxed_ndcg", "ideal_dcg",
    "has_relevant", "harmonic_number", "cumulative_discount", "HARMONICS", "DISCOUNTS",
]

#: Options of :func:`relaxed_ap`.
HARMONICS = ("digamma", "ln")
#: Options of :func:`relaxed_ndcg`, :func:`relaxed_dcg` and :func:`ideal_dcg`.
DISCOUNTS = ("exact", "li", "simplified")

_LN2 = math.log(2.0)
# Floor of the counts eqs. 7-8 divide by or take the log of (they diverge at 0).
_EPS = 1e-6
# Steps of the recurrences shifted before the asymptotic expansions take over:
# Stirling's series of psi (truncation error < 1e-11 relative) and the
# Euler-Maclaurin series of the cumulative discount (< 1e-10).
_SHIFT = 8
_F_SHIFT = 16
# Half-width of the window around c_d = 1 where the removable singularity of
# the digamma AP's slope term is bridged by quadratic interpolation, per dtype:
# wide enough that rounding divided by (c_d - 1) stays small, narrow enough
# that the interpolation error (~ tau^3) does.
_TAU = {np.dtype(np.float32): 0.125, np.dtype(np.float64): 0.01}
# Gauss-Legendre nodes/weights on [0, 1] for integrals of the discount in
# u = log(t + 1) (smooth integrands; 16 nodes reach float64 rounding).
_GL_X, _GL_W = np.polynomial.legendre.leggauss(16)
_GL_X = tuple(float(x) for x in (_GL_X + 1.0) / 2.0)
_GL_W = tuple(float(w) for w in _GL_W / 2.0)
_HIGHEST = jax.lax.Precision.HIGHEST


# --------------------------------------------------------------------------- checks


def _float_dtype(x) -> Any:
  return jnp.promote_types(x.dtype, jnp.float32)


def _check_real(name: str, x: Any, *, shape_doc: str, min_ndim: int = 1) -> None:
  if not hasattr(x, "dtype") or np.dtype(x.dtype) == np.bool_:
    raise ValueError(f"{name}: expected a real-valued array {shape_doc}, got "
                     + ("dtype bool" if hasattr(x, "dtype") else type(x).__name__))
  _checks.check_finite(name, x)
  if np.issubdtype(np.dtype(x.dtype), np.complexfloating):
    raise ValueError(f"{name}: expected a real-valued array {shape_doc}, "
                     f"got dtype {np.dtype(x.dtype).name}")
  if x.ndim < min_ndim:
    raise ValueError(f"{name}: expected at least {min_ndim} dimension(s) {shape_doc}, "
                     f"got shape {tuple(x.shape)}")


def _check_range(name: str, x: Any, low: float, high: float, what: str) -> None:
  if _checks.is_concrete(x) and x.size:
    arr = np.asarray(x)
    lo, hi = arr.min(), arr.max()
    if lo < low or hi > high:
      raise ValueError(f"{name}: expected {what} in [{low:g}, {high:g}], got values in [{lo:g}, {hi:g}]")


def _check_codes(query, items, *, low=None, high=None, what=""):
  for name, x, rows in (("query", query, "Q"), ("items", items, "N")):
    _check_real(name, x, shape_doc=f"[..., {rows}, num_bits]", min_ndim=2)
    if x.shape[-1] == 0:
      raise ValueError(f"{name}: expected shape [..., {rows}, num_bits] with num_bits >= 1, "
                       f"got {tuple(x.shape)}")
    if low is not None:
      _check_range(name, x, low, high, what)
  if query.shape[-1] != items.shape[-1]:
    raise ValueError(f"items: expected {query.shape[-1]} bits per code like query, "
                     f"got shape {tuple(items.shape)}")
  try:
    np.broadcast_shapes(tuple(query.shape[:-2]), tuple(items.shape[:-2]))
  except ValueError:
    raise ValueError(f"items: batch dimensions {tuple(items.shape[:-2])} do not broadcast with query's "
                     f"{tuple(query.shape[:-2])}") from None


def _check_hist(hist: Any, *, levels_doc: str) -> None:
  _check_real("hist", hist, shape_doc=f"[..., num_bits + 1, {levels_doc}]", min_ndim=2)
  if hist.shape[-2] == 0 or hist.shape[-1] == 0:
    raise ValueError(f"hist: expected shape [..., num_bits + 1, {levels_doc}] with no empty axis, "
                     f"got {tuple(hist.shape)}")
  _check_range("hist", hist, 0.0, np.inf, "non-negative (soft) counts")


def _check_option(name: str, value: Any, options) -> str:
  if not isinstance(value, str) or value not in options:
    raise ValueError(f"{name}: expected one of {list(options)}, got {value!r}")
  return value


def _check_positive_scalar(name: str, value: Any, *, allow_traced: bool) -> None:
  if isinstance(value, (bool, np.bool_)):
    raise ValueError(f"{name}: expected a positive finite number, got {value!r}")
  if isinstance(value, (int, float, np.integer, np.floating)):
    if not (math.isfinite(float(value)) and float(value) > 0):
      raise ValueError(f"{name}: expected a positive finite number, got {value!r}")
    return
  if allow_traced and hasattr(value, "dtype") and getattr(value, "ndim", None) == 0 \
      and np.issubdtype(np.dtype(value.dtype), np.floating):
    if _checks.is_concrete(value):
      v = float(np.asarray(value))
      if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name}: expected a positive finite number, got {v!r}")
    return
  raise ValueError(f"{name}: expected a positive finite number, got {value!r}")


# --------------------------------------------------------------------------- relaxed codes and distances


@jax.jit
def _relax(logits, alpha):
  x = logits.astype(_float_dtype(logits))
  return jnp.tanh(0.5 * alpha * x)


def relax(logits: Array, *, alpha: float) -> Array:
  """Relaxed hash codes: the sigmoid relaxation of ``sgn`` (He et al. eq. 6).

  .. math:: \\tilde\\phi_j = 2 \\sigma(\\alpha f_j) - 1 = \\tanh(\\alpha f_j / 2)

  Computed as the ``tanh`` form, which is exact in floating point for large
  ``|alpha f|`` (no ``1 - 1`` cancellation). As ``alpha -> inf`` the codes tend
  to ``sgn(f)``.

  Args:
    logits: real ``[..., num_bits]`` hash-mapping outputs ``f``.
    alpha: positive slope (a Python number, or a float scalar that may be traced
      so it can be annealed under jit).

  Returns:
    ``[..., num_bits]`` codes in ``[-1, 1]`` (float32 unless ``logits`` is float64).

  >>> import jax.numpy as jnp
  >>> relax(jnp.array([-2.0, 0.0, 2.0]), alpha=1.0).round(4).tolist()
  [-0.7616, 0.0, 0.7616]
  """
  _check_real("logits", logits, shape_doc="[..., num_bits]")
  _check_positive_scalar("alpha", alpha, allow_traced=True)
  return _relax(jnp.asarray(logits), alpha)


def _inner(query, items):
  dt = jnp.promote_types(_float_dtype(query), _float_dtype(items))
  q = query.astype(dt)
  x = items.astype(dt)
  return q, x, jnp.matmul(q, jnp.swapaxes(x, -1, -2), precision=_HIGHEST)


@jax.jit
def _relaxed_hamming(query, items):
  q, _, qx = _inner(query, items)
  return 0.5 * (q.shape[-1] - qx)


@jax.jit
def _nair_hamming(query, items):
  q, x, qx = _inner(query, items)
  return jnp.sum(q, -1)[..., :, None] + jnp.sum(x, -1)[..., None, :] - 2.0 * qx


@jax.jit
def _squared_euclidean(query, items):
  q, x, qx = _inner(query, items)
  sq = jnp.sum(q * q, -1)[..., :, None] + jnp.sum(x * x, -1)[..., None, :] - 2.0 * qx
  return jnp.maximum(sq, 0.0)


def relaxed_hamming(query: Array, items: Array) -> Array:
  """Relaxed Hamming distance between codes in ``[-1, 1]`` (He et al. eq. 5).

  .. math:: \\tilde d(q, i) = \\tfrac{1}{2} (b - \\tilde\\phi_q^\\top \\tilde\\phi_i)

  Equals the Hamming distance for ``±1`` codes and lies in ``[0, b]`` (up to
  rounding) for codes in ``[-1, 1]``. One ``[Q, b] x [b, N]`` matmul.

  Args:
    query: ``[..., Q, num_bits]`` codes in ``[-1, 1]`` (e.g. from :func:`relax`).
    items: ``[..., N, num_bits]`` codes in ``[-1, 1]``; batch dims broadcast
      with ``query``'s.

  Returns:
    ``[..., Q, N]`` float distances.

  >>> import jax.numpy as jnp
  >>> relaxed_hamming(jnp.array([[1.0, -1.0, 0.5]]), jnp.array([[1.0, 1.0, -0.5]])).tolist()
  [[1.625]]
  """
  _check_codes(query, items, low=-1.0, high=1.0, what="relaxed codes")
  return _relaxed_hamming(jnp.asarray(query), jnp.asarray(items))


def nair_hamming(query: Array, items: Array) -> Array:
  """Nair et al.'s relaxed Hamming score for sigmoid outputs (their eq. 2).

  .. math:: \\hat s(q, i) = \\sum_j h_{qj} (1 - h_{ij}) + (1 - h_{qj}) h_{ij}

  The expected Hamming distance between independent bits that are 1 with
  probabilities ``h``: equal to the Hamming distance for ``{0, 1}`` codes, but
  not zero for identical non-binary codes (``h = 0.5`` everywhere scores
  ``b / 2`` against itself). Computed as ``sum h_q + sum h_i - 2 h_q . h_i``.

  Args:
    query: ``[..., Q, num_bits]`` sigmoid outputs in ``[0, 1]``.
    items: ``[..., N, num_bits]`` sigmoid outputs in ``[0, 1]``.

  Returns:
    ``[..., Q, N]`` float scores in ``[0, num_bits]``.

  >>> import jax.numpy as jnp
  >>> nair_hamming(jnp.array([[1.0, 0.5]]), jnp.array([[0.0, 0.5], [1.0, 0.0]])).tolist()
  [[1.5, 0.5]]
  """
  _check_codes(query, items, low=0.0, high=1.0, what="sigmoid outputs")
  return _nair_hamming(jnp.asarray(query), jnp.asarray(items))


def squared_euclidean(query: Array, items: Array) -> Array:
  """Squared Euclidean distance between real codes.

  .. math:: \\|h_q - h_i\\|^2 = \\|h_q\\|^2 + \\|h_i\\|^2 - 2 h_q^\\top h_i

  Equals the Hamming distance for ``{0, 1}`` codes and 4 times it for ``±1``
  codes (scale ``width`` or the codes accordingly before
  :func:`soft_histogram`). Computed by one matmul; rounding can make the
  expansion dip below 0, so it is clipped at 0.

  Args:
    query: real ``[..., Q, num_bits]``.
    items: real ``[..., N, num_bits]``.

  Returns:
    ``[..., Q, N]`` float distances.

  >>> import jax.numpy as jnp
  >>> squared_euclidean(jnp.array([[1.0, 0.0]]), jnp.array([[0.0, 0.0], [1.0, 1.0]])).tolist()
  [[1.0, 1.0]]
  """
  _check_codes(query, items)
  return _squared_euclidean(jnp.asarray(query), jnp.asarray(items))


#: The relaxed distances by name; all share ``(query[..., Q, b], items[..., N, b]) -> [..., Q, N]``.
DISTANCES = {
    "relaxed_hamming": relaxed_hamming,
    "nair_hamming": nair_hamming,
    "squared_euclidean": squared_euclidean,
}


@jax.jit
def _off_diagonal(x):
  m = x.shape[-1]
  # Row r keeps columns 0..r-1 and r+1..m-1: column k of the result is k + (k >= r).
  cols = jnp.arange(m - 1)[None, :] + (jnp.arange(m - 1)[None, :] >= jnp.arange(m)[:, None])
  return jnp.take_along_axis(x, jnp.broadcast_to(cols, x.shape[:-1] + (m - 1,)), axis=-1)


def off_diagonal(x: Array) -> Array:
  """Drops the diagonal of square ``[..., M, M]`` matrices: query-vs-rest retrieval.

  In minibatch training every example is a query against the rest of the batch
  (He et al. Sec. 4.2); apply this to both ``distances`` and ``affinity`` before
  :func:`soft_histogram` so an example never retrieves itself.

  .. math:: y_{r, k} = x_{r, k + [k \\ge r]}, \\quad k < M - 1

  Args:
    x: ``[..., M, M]`` array (any dtype), ``M >= 2``.

  Returns:
    ``[..., M, M - 1]``: row ``r`` without its entry ``r``.

  >>> import numpy as np
  >>> off_diagonal(np.arange(9).reshape(3, 3)).tolist()
  [[1, 2], [3, 5], [6, 7]]
  """
  if not hasattr(x, "shape") or x.ndim < 2 or x.shape[-1] != x.shape[-2] or x.shape[-1] < 2:
    raise ValueError("x: expected square matrices [..., M, M] with M >= 2, got "
                     + (f"shape {tuple(x.shape)}" if hasattr(x, "shape") else type(x).__name__))
  return _off_diagonal(jnp.asarray(x))


# --------------------------------------------------------------------------- soft histograms


@functools.partial(jax.jit, static_argnames=("num_bits", "num_levels", "width"))
def _soft_histogram(distances, affinity, num_bits, num_levels, width):
  dt = _float_dtype(distances)
  x = distances.astype(dt)
  r = x[..., :, None] - jnp.arange(num_bits + 1, dtype=dt)  # [..., N, b + 1]
  # |r| as r * sign(r): its derivative at r = 0 is 0 (the symmetric subgradient
  # of the kernel's peak), where jnp.abs would give +1.
  a = r * jnp.sign(r)
  kernel = jnp.where(a < width, 1.0 - a / width, 0.0)
  onehot = jax.nn.one_hot(affinity, num_levels, dtype=dt)  # [..., N, V]
  return jnp.einsum("...nd,...nv->...dv", kernel, onehot, precision=_HIGHEST)


def soft_histogram(distances: Array, affinity: Array, *, num_bits: int, num_levels: int,
                   width: float = 1.0) -> Array:
  """Soft per-level histogram of real distances with a triangular kernel (He et al. eq. 14).

  .. math:: c_{d,v} = \\sum_{i: a_i = v} \\max\\Big(0, 1 - \\frac{|\\tilde d_i - d|}{\\Delta}\\Big),
            \\quad d = 0, \\dots, b

  With ``width=1`` an item at ``d <= x <= d + 1`` splits its unit mass
  linearly between bins ``d`` and ``d + 1`` (linear interpolation), so at
  integer distances this is exactly the counting histogram of
  :func:`hashjax.codes.distance_histogram`. For other widths the kernel is
  eq. 14 as printed: an item in ``[0, b]`` contributes total mass ``Delta``
  when ``Delta`` is an integer (not 1), and items farther than ``Delta``
  outside ``[0, b]`` contribute nothing.

  Gradients come by autodiff and equal eqs. 15-16 (``d delta / d x =
  -sgn(x - d) / Delta`` inside the kernel's support, 0 outside; at the kinks
  the subgradient 0 is taken, so at integer distances with ``width=1`` every
  bin's derivative is 0 and mass is conserved).

  Memory: the kernel is materialised as ``[..., N, num_bits + 1]`` (plus a
  ``[..., N, V]`` one-hot), i.e. ``4 Q N (b + 1)`` bytes in float32 for
  ``distances[Q, N]``: 17 MB for a 256-example minibatch at 64 bits. That is
  the intended scale (minibatch query-vs-rest training); for database-size
  ``N`` stream chunks of items and sum the histograms.

  Args:
    distances: real ``[..., N]`` relaxed distances (e.g. :func:`relaxed_hamming`).
    affinity: int ``[..., N]`` levels in ``[0, num_levels)``, same shape.
    num_bits: the code length ``b``; bins are ``0..b``.
    num_levels: ``V``.
    width: ``Delta > 0``, the kernel's half-width (support ``|x - d| < Delta``),
      a Python number.

  Returns:
    ``[..., num_bits + 1, num_levels]`` soft counts (float32 unless
    ``distances`` is float64).

  >>> import jax.numpy as jnp
  >>> soft_histogram(jnp.array([0.0, 1.25, 2.0]), jnp.array([1, 1, 0]),
  ...                num_bits=2, num_levels=2).tolist()
  [[0.0, 1.0], [0.0, 0.75], [1.0, 0.25]]
  """
  num_bits = _checks.check_num_bits(num_bits)
  if isinstance(num_levels, (bool, np.bool_)) or not isinstance(num_levels, (int, np.integer)) \
      or num_levels < 1:
    raise ValueError(f"num_levels: expected a positive int, got {num_levels!r}")
  _check_positive_scalar("width", width, allow_traced=False)
  _check_real("distances", distances, shape_doc="[..., N]")
  _checks.check_int_range("affinity", affinity, 0, int(num_levels) - 1, what="affinity levels")
  _checks.check_shape("affinity", affinity, distances.shape, like="distances")
  return _soft_histogram(jnp.asarray(distances), jnp.asarray(affinity), num_bits, int(num_levels),
                         float(width))


# --------------------------------------------------------------------------- special functions


def _safe_div(num, den, ok):
  """num / den where ``ok``, 0 elsewhere, with finite gradients on both branches."""
  return jnp.where(ok, num / jnp.where(ok, den, 1.0), 0.0)


def _log1p_over(v):
  """log1p(v) / v for v >= 0 (1 at v = 0), accurate and smooth at small v."""
  small = v < 1e-3
  vs = jnp.where(small, 1.0, v)
  series = 1.0 - v * (0.5 - v * (1.0 / 3.0 - v * 0.25))
  return jnp.where(small, series, jnp.log1p(vs) / vs)


def _one_minus_log1p_over(v):
  """1 - log1p(v) / v for v >= 0, without cancellation at small v."""
  small = v < 0.1
  vs = jnp.where(small, 1.0, v)
  series = jnp.zeros_like(v)
  for k in range(13, 1, -1):  # sum_{k>=2} (-1)^k v^(k-1) / k, truncation < 1e-13 at v < 0.1
    series = v * (1.0 / k - series)
  return jnp.where(small, series, 1.0 - jnp.log1p(vs) / vs)


def _stirling_tail(x, y):
  """(psi(y) - psi(x) - log y + log x) / (y - x) by Stirling's series, for x, y >= 8.

  Written in u = 1/x, w = 1/y: the series' powers of x y (up to (x y)^8) would
  overflow float32 once x y > 6.8e4, i.e. once about 253 items are ranked
  ahead of a bin, and turn the gradient into inf / inf = NaN.
  """
  u, w = 1.0 / x, 1.0 / y
  uw, u2, w2 = u * w, u * u, w * w
  common = uw * (u + w)  # (x + y) / (x y)^2
  t = 0.5 * uw + common / 12.0
  t = t - common * (u2 + w2) / 120.0
  t = t + common * (u2 * u2 + u2 * w2 + w2 * w2) / 252.0
  return t - common * (u2 + w2) * (u2 * u2 + w2 * w2) / 240.0


def _steps(x, num):
  """x[..., None] + [0, 1, ..., num - 1]: the shifted arguments of a recurrence."""
  return x[..., None] + jnp.arange(num, dtype=x.dtype)


def _harmonic_parts(s, n):
  """h1 = (psi(s + n) - psi(s)) / n and g = 1 - s h1, for s >= 1, n >= 0.

  h1 is psi'(s) at n = 0; for integer n it is the mean of 1/t over
  t = s .. s + n - 1. Every term is explicitly proportional to n (no
  cancellation): the recurrence psi(x) = psi(x + M) - sum_{j<M} 1/(x + j), then
  Stirling's series of psi at X = s + M >= 9 (truncation error < 1e-11
  relative). g reuses the same terms with 1 - s / X = M / X and the series of
  1 - log1p(v) / v cancelled analytically, so what cancels in g is O(M / s)
  terms, not O(1) ones.
  """
  s, n = jnp.broadcast_arrays(s, n)
  sj = _steps(s, _SHIFT)
  head = jnp.sum(1.0 / (sj * (sj + n[..., None])), -1)
  x = s + _SHIFT
  v = n / x
  tail = _stirling_tail(x, x + n)
  h1 = head + _log1p_over(v) / x + tail
  g = _SHIFT / x + (s / x) * _one_minus_log1p_over(v) - s * (tail + head)
  return h1, g


def _harmonic_divdiff(s, n):
  return _harmonic_parts(s, n)[0]


def _slope_at_one(s):
  """1 - s psi'(s + 1): the slope term h2(s, 1), see _digamma_terms."""
  z = s + (_SHIFT + 1)
  sj = _steps(s + 1.0, _SHIFT)
  tail = (0.5 / z ** 2 + 1.0 / (6.0 * z ** 3) - 1.0 / (30.0 * z ** 5) + 1.0 / (42.0 * z ** 7)
          - 1.0 / (30.0 * z ** 9))
  return (_SHIFT + 1) / z - s * jnp.sum(1.0 / (sj * sj), -1) - s * tail


def _digamma_terms(s, n):
  """h1(s, n) (see _harmonic_parts) and h2(s, n) = (1 - s h1) / (n - 1) = -s psi[s, s + 1, s + n].

  For integer n >= 2, h2 = (1 / (n (n - 1))) sum_{k<n} k / (s + k), the mean
  of the interpolated within-tie position term of eq. 3. Its singularity at
  n = 1 is removable; within |n - 1| < tau it is bridged by the quadratic
  through n = 1 - tau, 1, 1 + tau (the middle value from psi'). One call
  evaluates the four abscissae n, n away from 1, 1 - tau and 1 + tau.
  """
  tau = _TAU.get(np.dtype(n.dtype), 0.125)
  s, n = jnp.broadcast_arrays(s, n)
  near = jnp.abs(n - 1.0) < tau
  m = jnp.stack([n, jnp.where(near, 1.0 + 2.0 * tau, n), jnp.full_like(n, 1.0 - tau),
                 jnp.full_like(n, 1.0 + tau)])
  h1, g = _harmonic_parts(jnp.broadcast_to(s, m.shape), m)
  far, lo, hi = g[1] / (m[1] - 1.0), g[2] / -tau, g[3] / tau
  mid = _slope_at_one(s)
  e = n - 1.0
  quad = mid + e * (hi - lo) / (2.0 * tau) + e * e * (hi - 2.0 * mid + lo) / (2.0 * tau ** 2)
  return h1[0], jnp.where(near, quad, far)


def _discount_divdiff(u, n):
  """(D(u + n) - D(u)) / n for u >= 1, n >= 0, without cancellation."""
  return -_LN2 * _log1p_over(n / (u + 1.0)) / ((u + 1.0) * jnp.log1p(u) * jnp.log1p(u + n))


def _gl_nodes(lo, hi):
  """Gauss-Legendre abscissae on [lo, hi] along a new last axis."""
  return lo[..., None] + (hi - lo)[..., None] * jnp.asarray(_GL_X, lo.dtype)


def _gl_mean(values):
  return jnp.sum(values * jnp.asarray(_GL_W, values.dtype), -1)


def _ei_diff(u1, u2):
  """Ei(u2) - Ei(u1) for u1, u2 > 0: log(u2 / u1) + int (e^u - 1) / u du (entire integrand)."""
  u = _gl_nodes(u1, u2)
  return jnp.log(u2) - jnp.log(u1) + (u2 - u1) * _gl_mean(jnp.expm1(u) / u)


def _em_integrand(t):
  """D + D'/2 + D''/12 - D''''/720 at t, times dt/du = t + 1 (u = log(t + 1)).

  With w = log(t + 1) and p = 1 / (t + 1): D = ln2 / w, D' = -ln2 p / w^2,
  D'' = ln2 p^2 (w + 2) / w^3, D'''' = ln2 p^4 (6 w^3 + 22 w^2 + 36 w + 24) / w^5.
  """
  w = jnp.log1p(t)
  p = 1.0 / (t + 1.0)
  d4 = p ** 4 * (((6.0 * w + 22.0) * w + 36.0) * w + 24.0) / w ** 5
  return _LN2 * (t + 1.0) * (1.0 / w - 0.5 * p / w ** 2 + p * p * (w + 2.0) / (12.0 * w ** 3) - d4 / 720.0)


def _cumulative_discount_divdiff(a, n):
  """(F(a + n) - F(a)) / n, F the continuation of sum_{t <= x} D(t); F'(a) at n = 0.

  F(x) = F(x + M) - sum_{j=1..M} D(x + j) with M = 16, then the
  Euler-Maclaurin expansion F(X) = K + int^X (D + D'/2 + D''/12 - D''''/720)
  at X = a + M, whose divided difference needs no K (the next term changes it
  by < 1e-10). Its mean over [X, X + n] is taken by Gauss-Legendre in
  u = log(t + 1), where the integrand is smooth over any interval length; the
  Jacobian (u2 - u1) / n = log1p(n / (X + 1)) / n stays accurate as n -> 0.
  """
  a, n = jnp.broadcast_arrays(a, n)
  aj = _steps(a + 1.0, _F_SHIFT)
  acc = -jnp.sum(_discount_divdiff(aj, n[..., None]), -1)
  x = a + _F_SHIFT
  u1 = jnp.log1p(x)
  u2 = jnp.log1p(x + n)
  t = jnp.expm1(_gl_nodes(u1, u2))
  return acc + _log1p_over(n / (x + 1.0)) / (x + 1.0) * _gl_mean(_em_integrand(t))


@jax.jit
def _harmonic_number(x):
  x = x.astype(_float_dtype(x))
  return x * _harmonic_divdiff(jnp.ones_like(x), x)


@jax.jit
def _cumulative_discount(x):
  x = x.astype(_float_dtype(x))
  return x * _cumulative_discount_divdiff(jnp.zeros_like(x), x)


def harmonic_number(x: Array) -> Array:
  """The harmonic numbers continued to real ``x >= 0``: ``H(x) = psi(x + 1) + gamma``.

  .. math:: H(x) = \\sum_{k \\ge 1} \\Big( \\frac{1}{k} - \\frac{1}{k + x} \\Big),
            \\qquad H(n) = \\sum_{t=1}^{n} \\frac{1}{t}

  The interpolant behind ``harmonic="digamma"``: the partial harmonic sum of a
  tie is ``H(C_d) - H(C_{d-1}) = psi(C_d + 1) - psi(C_{d-1} + 1)``.

  Args:
    x: real ``[...]`` values ``>= 0``.

  Returns:
    ``[...]`` float values.

  >>> import jax.numpy as jnp
  >>> harmonic_number(jnp.array([0.0, 1.0, 3.0, 0.5])).round(5).tolist()
  [0.0, 1.0, 1.83333, 0.61371]
  """
  _check_real("x", x, shape_doc="[...]", min_ndim=0)
  _check_range("x", x, 0.0, np.inf, "non-negative values")
  return _harmonic_number(jnp.asarray(x))


def cumulative_discount(x: Array) -> Array:
  """Cumulative DCG discount continued to real ``x >= 0`` (exact at integers).

  .. math:: F(x) = \\sum_{k \\ge 1} \\big( D(k) - D(k + x) \\big), \\quad
            D(t) = \\frac{1}{\\log_2(t + 1)}, \\qquad F(n) = \\sum_{t=1}^{n} D(t)

  The DCG analogue of :func:`harmonic_number` and the interpolant behind
  ``discount="exact"``: the discount sum of a tie, ``sum_{t = C_{d-1}+1}^{C_d}
  D(t)`` in eq. 4, becomes ``F(C_d) - F(C_{d-1})``.

  Why this one. ``F`` solves ``F(x) - F(x - 1) = D(x)``, ``F(0) = 0`` (the
  series telescopes because ``D(k) -> 0``), so it is exact at every integer;
  it is smooth, increasing (``F' > 0``) and concave, since ``D`` is positive,
  decreasing and convex. It is the same limit that continues ``1/t``'s partial
  sums to ``psi(x + 1) + gamma``, and by the Bohr-Mollerup-Krull theorem
  (e.g. Marichal & Zenaidi 2022) it is the only solution of that recurrence
  that is concave for large ``x``; any other exact-at-integers interpolant
  adds a 1-periodic wiggle ``p(x)`` with ``p(n) = 0``. Unlike eq. 8's
  ``ln 2 (Li(C_d + 1) - Li(C_{d-1} + 2))``, which integrates over an interval
  one position short, an empty bin gets ``F(a) - F(a) = 0`` and a single item
  gets its exact ``D(a + 1)``. Evaluated by the recurrence shifted 16 steps
  and the Euler-Maclaurin expansion, its integral by Gauss-Legendre in
  ``log(t + 1)``: relative error < 1e-10 in float64, ~2e-7 in float32.

  Args:
    x: real ``[...]`` values ``>= 0``.

  Returns:
    ``[...]`` float values.

  >>> import jax.numpy as jnp
  >>> cumulative_discount(jnp.array([0.0, 1.0, 2.0, 1.5])).round(5).tolist()
  [0.0, 1.0, 1.63093, 1.33877]
  """
  _check_real("x", x, shape_doc="[...]", min_ndim=0)
  _check_range("x", x, 0.0, np.inf, "non-negative values")
  return _cumulative_discount(jnp.asarray(x))


# --------------------------------------------------------------------------- relaxed AP


def _exclusive_cumsum(x, axis):
  c = jnp.cumsum(x, axis=axis)
  zero = jnp.zeros_like(jax.lax.slice_in_dim(x, 0, 1, axis=axis))
  return jnp.concatenate([zero, jax.lax.slice_in_dim(c, 0, x.shape[axis] - 1, axis=axis)], axis=axis)


def _ap_bins_digamma(cpos, c, pos_before, before):
  h1, h2 = _digamma_terms(before + 1.0, c)
  return cpos * ((pos_before + 1.0) * h1 + (cpos - 1.0) * h2)


def _ap_bins_ln(cpos, c, pos_before, before):
  s = before + 1.0
  at_one = c == 1.0
  ratio = (cpos - 1.0) / jnp.where(at_one, 1.0, c - 1.0)
  slope = jnp.where(at_one, 0.0, jnp.clip(ratio, 0.0, 1.0))
  log_term = jnp.log(jnp.maximum(before + c, _EPS)) - jnp.log1p(before)
  frac = cpos / jnp.maximum(c, _EPS)
  return cpos * slope + frac * (pos_before + 1.0 - slope * s) * log_term


@functools.partial(jax.jit, static_argnames="harmonic")
def _relaxed_ap(hist, harmonic):
  hist = hist.astype(_float_dtype(hist))
  cneg, cpos = hist[..., 0], hist[..., 1]
  c = cneg + cpos
  before = _exclusive_cumsum(c, -1)
  pos_before = _exclusive_cumsum(cpos, -1)
  bins = (_ap_bins_digamma if harmonic == "digamma" else _ap_bins_ln)(cpos, c, pos_before, before)
  total = jnp.sum(cpos, -1)
  # Flooring the normaliser keeps the gradient finite when leaked soft mass
  # makes the relevant total tiny but non-zero (1 / total^2 would overflow).
  return _safe_div(jnp.sum(bins, -1), jnp.maximum(total, _EPS), total > 0)


def relaxed_ap(hist: Array, *, harmonic: str = "digamma") -> Array:
  """Relaxed tie-aware AP from a (soft) two-level histogram (He et al. eq. 7).

  .. math:: \\mathrm{AP}_r = \\frac{1}{C^+_b} \\sum_{d=0}^{b} c_d^+ \\Big[
            (C^+_{d-1} + 1) \\frac{S_d}{c_d}
            + (c_d^+ - 1) \\frac{c_d - (C_{d-1} + 1) S_d}{c_d (c_d - 1)} \\Big]

  This is eq. 3 summed in closed form: within a tie the interpolated precision
  is ``beta_d(t) = A + B / t`` (eq. 9) with ``A = (c_d^+ - 1) / (c_d - 1)``,
  ``B = C^+_{d-1} + 1 - A (C_{d-1} + 1)``, so the tie contributes
  ``(c_d^+ / c_d)(c_d A + B S_d)`` with ``S_d`` the harmonic sum
  ``sum_{t = C_{d-1}+1}^{C_d} 1/t``. The options differ only in ``S_d``:

  * ``"digamma"`` (default): ``S_d = psi(C_d + 1) - psi(C_{d-1} + 1)``, exact
    at integers. **At integer histograms this equals AP_T (eq. 3) exactly**,
    up to rounding (measured: < 1e-13 in float64, < 2e-7 in float32): eq. 3's
    per-position interpolation is affine in ``t`` over ``t``, so its sum has
    this closed form; at ``n_d = 1`` the
    slope term's coefficient ``c_d - (C_{d-1} + 1) S_d`` is exactly 0, so the
    value of ``A`` there does not matter, as in eq. 3. The formula is
    evaluated in the displayed form, with both fractions computed as divided
    differences of ``psi`` (finite and smooth at ``c_d = 0`` and ``c_d = 1``,
    their removable singularities), so an empty bin contributes exactly 0 and
    a perfectly separated soft histogram scores 1.
  * ``"ln"``: eq. 7 as printed, ``S_d = ln(C_d / (C_{d-1} + 1))`` (eq. 10),
    the integral over a range one position shorter than the tie. It
    undervalues ties most at the top of the ranking: a lone item scores 0
    (``ln 1``), and a bin with ``c_d < 1`` gets a negative ``S_d``. Eq. 7
    has a pole at ``c_d = 1`` (its ``A``) and divides by ``c_d``; to stay
    finite, ``A`` is clipped to ``[0, 1]`` (the range of ``(n^+ - 1)/(n - 1)``
    as a probability, where it is unchanged at integer histograms) and taken
    as 0 at ``c_d = 1`` exactly (eq. 3's convention: the slope term is absent
    for a single item), and ``c_d`` and ``C_d`` are floored at ``1e-6`` in
    the ratio and the log. Gradients stay finite but can be large near
    ``c_d = 1`` and ``c_d = 0``. At integer histograms
    ``AP_T - AP_r = (1 / N^+) sum_d (n_d^+ / n_d) B_d (H_d - S_d)`` with
    ``1 / N_d <= H_d - S_d <= 1 / (N_{d-1} + 1)`` (``H_d`` the exact harmonic
    sum): the gap is ``O(#bins / N^+)`` and vanishes as counts grow.

  Args:
    hist: ``[..., num_bits + 1, 2]`` non-negative (soft) counts, level 0
      irrelevant, level 1 relevant (from :func:`soft_histogram` or
      :func:`hashjax.codes.distance_histogram`).
    harmonic: ``"digamma"`` or ``"ln"``.

  Returns:
    ``[...]`` relaxed AP per query; 0 (with zero gradient) for a query with no
    relevant mass, see :func:`has_relevant`. The normaliser ``C^+_b`` is
    floored at ``1e-6`` so leaked soft mass cannot overflow the gradient.

  >>> import numpy as np
  >>> hist = np.array([[0., 1.], [2., 2.]])  # 1 relevant at d=0; 2 relevant + 2 not tied at d=1
  >>> round(float(relaxed_ap(hist)), 6)       # = AP_T (eq. 3)
  0.840741
  >>> round(float(relaxed_ap(hist, harmonic="ln")), 6)  # eq. 7: the lone item at d=0 scores 0
  0.425842
  """
  _check_hist(hist, levels_doc="2")
  if hist.shape[-1] != 2:
    raise ValueError(f"hist: expected 2 levels [..., num_bits + 1, 2] (irrelevant, relevant), "
                     f"got shape {tuple(hist.shape)}")
  harmonic = _check_option("harmonic", harmonic, HARMONICS)
  return _relaxed_ap(jnp.asarray(hist), harmonic)


# --------------------------------------------------------------------------- relaxed DCG / NDCG


def _mean_discount(before, count, discount):
  """Average discount per item of a tie at positions before + 1 .. before + count."""
  if discount == "exact":
    return _cumulative_discount_divdiff(before, count)
  if discount == "simplified":
    return _LN2 / jnp.log(before + 0.5 * (count + 1.0) + 1.0)
  # "li": eq. 8, ln 2 (Li(C_d + 1) - Li(C_{d-1} + 2)) / c_d with Li(x) = Ei(ln x).
  li = _ei_diff(jnp.log(before + 2.0), jnp.log1p(jnp.maximum(before + count, _EPS)))
  return _LN2 * li / jnp.maximum(count, _EPS)


def _gains(num_levels, dtype):
  return jnp.exp2(jnp.arange(num_levels, dtype=dtype)) - 1.0


def _dcg(hist, discount):
  gains = _gains(hist.shape[-1], hist.dtype)
  count = jnp.sum(hist, -1)
  gained = jnp.sum(hist * gains, -1)
  return jnp.sum(gained * _mean_discount(_exclusive_cumsum(count, -1), count, discount), -1)


def _ideal(totals, discount):
  # Counting sort over levels: the ideal ranking puts each level in its own
  # tie, highest gain first.
  gains = _gains(totals.shape[-1], totals.dtype)[::-1]
  count = totals[..., ::-1]
  return jnp.sum(gains * count * _mean_discount(_exclusive_cumsum(count, -1), count, discount), -1)


@functools.partial(jax.jit, static_argnames="discount")
def _relaxed_dcg(hist, discount):
  return _dcg(hist.astype(_float_dtype(hist)), discount)


@functools.partial(jax.jit, static_argnames="discount")
def _ideal_dcg(totals, discount):
  return _ideal(totals.astype(_float_dtype(totals)), discount)


@functools.partial(jax.jit, static_argnames="discount")
def _relaxed_ndcg(hist, discount):
  hist = hist.astype(_float_dtype(hist))
  dcg = _dcg(hist, discount)
  ideal = _ideal(jnp.sum(hist, -2), discount)
  ok = (ideal > 0) & _has_relevant(hist)
  return _safe_div(dcg, jnp.maximum(ideal, _EPS), ok)


_DCG_FORMS = """\
  The options differ only in the average discount ``W_d`` of the items of bin
  ``d`` (the discount sum of the tie divided by ``c_d``, as in eq. 4):

  * ``"exact"`` (default): ``W_d = (F(C_d) - F(C_{d-1})) / c_d`` with ``F``
    the continuation of the cumulative discount (:func:`cumulative_discount`);
    equals DCG_T (eq. 4) exactly at integer histograms, is smooth in the
    counts, an empty bin contributes 0, and splitting a tie into consecutive
    ties of the same composition leaves it unchanged.
  * ``"li"``: eq. 8 as printed, ``W_d = ln 2 (Li(C_d + 1) - Li(C_{d-1} + 2)) / c_d``,
    the integral over a range one position shorter than the tie. At integer
    histograms it is below DCG_T by between ``sum_d Gbar_d D(N_d)`` and
    ``sum_d Gbar_d D(N_{d-1} + 1)`` (``Gbar_d`` the mean gain of the tie); a
    single item scores 0, bins with ``c_d < 1`` score negative, and ``Li``
    diverges at ``C_d -> 0``: ``C_d`` and ``c_d`` are floored at ``1e-6``
    (finite but large values and gradients there).
  * ``"simplified"``: the authors' released code, every item at the mean
    position: ``W_d = 1 / log2(C_{d-1} + (c_d + 1) / 2 + 1)``. Since ``D`` is
    convex this is at most DCG_T at integer histograms (Jensen), with equality
    when every tie has at most one item.
"""


def relaxed_dcg(hist: Array, *, discount: str = "exact") -> Array:
  """Relaxed tie-aware DCG from a (soft) multi-level histogram (He et al. eq. 8).

  .. math:: \\mathrm{DCG}_r = \\sum_{d=0}^{b} \\Big( \\sum_v G(v) c_{d,v} \\Big) W_d,
            \\qquad G(v) = 2^v - 1

  {forms}
  Args:
    hist: ``[..., num_bits + 1, V]`` non-negative (soft) counts, level index =
      affinity value.
    discount: ``"exact"``, ``"li"`` or ``"simplified"``.

  Returns:
    ``[...]`` relaxed DCG per query (not normalised).

  >>> import numpy as np
  >>> hist = np.array([[0., 1., 0.], [1., 0., 1.]])  # level 1 at d=0; levels 0 and 2 tied at d=1
  >>> round(float(relaxed_dcg(hist)), 6)             # 1 * D(1) + 3 * (D(2) + D(3)) / 2
  2.696394
  """
  _check_hist(hist, levels_doc="V")
  discount = _check_option("discount", discount, DISCOUNTS)
  return _relaxed_dcg(jnp.asarray(hist), discount)


def ideal_dcg(level_totals: Array, *, discount: str = "exact") -> Array:
  """Relaxed ideal DCG from (soft) level totals: the counting sort over levels.

  .. math:: \\mathrm{IDCG}_r = \\sum_{v} G(v)\\, m_v\\, W(M_{>v}, m_v), \\qquad
            M_{>v} = \\sum_{u > v} m_u

  The ideal ranking of He et al. Sec. 3.2 puts all items of the highest level
  first, then the next, ...: a histogram whose ties are the levels. It is
  evaluated with the same average discount ``W`` as :func:`relaxed_dcg` (see
  there), so a (soft) histogram whose bins hold one level each, in decreasing
  order, has relaxed NDCG exactly 1. With ``"exact"`` this holds however the
  levels are split over bins, since ``F(C_d) - F(C_{d-1})`` adds up over
  consecutive ties (the other two forms are not additive: splitting a level
  over several bins changes them), and at integer totals it is the exact
  ideal DCG. (The authors' code divides its simplified DCG by the exact
  integer ideal instead.)

  Args:
    level_totals: ``[..., V]`` non-negative (soft) item counts per level
      (``hist.sum(-2)``).
    discount: ``"exact"``, ``"li"`` or ``"simplified"``.

  Returns:
    ``[...]`` ideal DCG per query.

  >>> import numpy as np
  >>> round(float(ideal_dcg(np.array([1., 1., 1.]))), 6)   # 3 D(1) + 1 D(2)
  3.63093
  """
  _check_real("level_totals", level_totals, shape_doc="[..., V]")
  if level_totals.shape[-1] == 0:
    raise ValueError(f"level_totals: expected at least one level, got shape {tuple(level_totals.shape)}")
  _check_range("level_totals", level_totals, 0.0, np.inf, "non-negative (soft) counts")
  discount = _check_option("discount", discount, DISCOUNTS)
  return _ideal_dcg(jnp.asarray(level_totals), discount)


def relaxed_ndcg(hist: Array, *, discount: str = "exact") -> Array:
  """Relaxed tie-aware NDCG: relaxed DCG over the relaxed ideal DCG (He et al. eq. 8).

  .. math:: \\mathrm{NDCG}_r = \\mathrm{DCG}_r / \\mathrm{IDCG}_r

  Numerator :func:`relaxed_dcg`, denominator :func:`ideal_dcg` of the level
  totals ``hist.sum(-2)``, both with the same ``discount``.

  {forms}
  At integer histograms ``"exact"`` equals NDCG_T. A query with no relevant
  mass (or, for ``"li"``, a non-positive ideal, e.g. a single relevant item,
  whose eq.-8 ideal is 0) gets 0 with zero gradient; mask it with
  :func:`has_relevant`.

  Args:
    hist: ``[..., num_bits + 1, V]`` non-negative (soft) counts, level index =
      affinity value (gain ``2^v - 1``).
    discount: ``"exact"``, ``"li"`` or ``"simplified"``.

  Returns:
    ``[...]`` relaxed NDCG per query.

  >>> import numpy as np
  >>> hist = np.array([[0., 1., 0.], [1., 0., 1.]])
  >>> round(float(relaxed_ndcg(hist)), 6)                 # 2.696394 / 3.63093
  0.742618
  >>> round(float(relaxed_ndcg(hist, discount="simplified")), 6)  # 2.659884 / 3.63093
  0.732563
  """
  _check_hist(hist, levels_doc="V")
  discount = _check_option("discount", discount, DISCOUNTS)
  return _relaxed_ndcg(jnp.asarray(hist), discount)


relaxed_dcg.__doc__ = relaxed_dcg.__doc__.replace("{forms}", _DCG_FORMS.strip("\n").lstrip())
relaxed_ndcg.__doc__ = relaxed_ndcg.__doc__.replace("{forms}", _DCG_FORMS.strip("\n").lstrip())


def _has_relevant(hist):
  return jnp.sum(hist[..., 1:], axis=(-2, -1)) > 0


_has_relevant_jit = jax.jit(_has_relevant)


def has_relevant(hist: Array) -> Array:
  """Mask of queries with relevant mass: where relaxed AP/NDCG are defined.

  .. math:: m = \\Big[ \\sum_{d} \\sum_{v \\ge 1} c_{d,v} > 0 \\Big]

  Use it to average a training loss over the queries that count, e.g.
  ``-(m * relaxed_ap(hist)).sum() / jnp.maximum(m.sum(), 1)``.

  Args:
    hist: ``[..., num_bits + 1, V]`` non-negative (soft) counts.

  Returns:
    ``bool[...]``.

  >>> import numpy as np
  >>> has_relevant(np.array([[[1., 0.], [2., 0.]], [[0., 1.], [0., 0.]]])).tolist()
  [False, True]
  """
  _check_hist(hist, levels_doc="V")
  return _has_relevant_jit(jnp.asarray(hist))
