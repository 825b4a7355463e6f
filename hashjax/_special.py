r"""Harmonic and DCG-discount sums over the ranks of a tie, at integer and at real counts.

He et al.'s tie-aware metrics (eqs. 3-4) sum over the ranks ``a+1 .. b`` of a tie

* ``dH(a, b) = sum_t 1/t`` and ``S1(a, b) = sum_t (t - a - 1)/t`` (AP_T),
* ``Dsum(a, b) = sum_t 1/log2(t + 1)`` (NDCG_T),

and the relaxed metrics need the same sums continued to real (soft) counts.
Each sum has one asymptotic expansion, used above a split rank, and two front
ends below it:

* integer ranks (:func:`harmonic_range`, :func:`discount_range`: the metrics
  and the exact swap deltas): exact tables below rank 32 (harmonic) / 64
  (discount). Float32 results are within a few ulp of exact, float64 ~1e-15;
* real arguments (:func:`harmonic_number`, :func:`harmonic_slopes`,
  :func:`cumulative_discount`, :func:`discount_mean`: the relaxations): the
  recurrence ``psi(x) = psi(x + M) - sum_j 1/(x + j)`` (and its discount
  analogue) shifted ``M = 8`` / ``16`` steps. Smooth in the counts, exact at
  integers to ~1e-11 / ~1e-10 (float64).

Why two front ends: a table is exact and costs one lookup per range, but has no
derivative; the shifted recurrence is smooth, but at small integer ranks it
cancels in ``S1`` (a factor of about ``M / a``), which the float32 metrics
cannot afford (``S1(a, a + 1) = 0`` must come out 0). No sum is ever a
difference of large prefix sums: that cancels catastrophically in float32 once
``a >> b - a``.

Every function is written once against an array namespace ``xp``: numpy for
concrete inputs, jax.numpy when traced; :func:`apply_xp` picks it.
"""

from __future__ import annotations

import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks

_HARMONIC_SPLIT = 32
_DISCOUNT_SPLIT = 64
_HARMONIC_SHIFT = 8
_DISCOUNT_SHIFT = 16
_LN2 = math.log(2.0)
# Half-width of the window around n = 1 where the removable singularity of the
# slope term h2 (harmonic_slopes) is bridged by a quadratic, per dtype: wide
# enough that rounding divided by (n - 1) stays small, narrow enough that the
# interpolation error (~ tau^3) does.
_TAU = {np.dtype(np.float32): 0.125, np.dtype(np.float64): 0.01}


def apply_xp(fn, *arrays, **options):
  """``fn(*arrays, **options, xp=np)`` when every array is concrete, else ``fn(..., xp=jnp)`` (traced).

  The numpy run happens on the host with numpy's floating-point warnings off
  (NaN and inf results, as XLA gives them); its results come back as jax
  arrays through ``device_put``, so a call at a new shape compiles nothing.
  ``None`` entries of ``arrays`` pass through.
  """
  if all(_checks.is_concrete(a) for a in arrays if a is not None):
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
      out = fn(*[None if a is None else np.asarray(a) for a in arrays], **options, xp=np)
    return jax.tree_util.tree_map(_checks.as_jax, out)
  return fn(*[None if a is None else jnp.asarray(a) for a in arrays], **options, xp=jnp)


def _gauss_legendre(m: int):
  """Gauss-Legendre nodes and weights on ``[0, 1]``."""
  x, w = np.polynomial.legendre.leggauss(m)
  return (x + 1.0) / 2.0, w / 2.0


# Nodes of the discount's Euler-Maclaurin integral (_discount_em) per dtype. Its integrand has
# its one singularity at u = 0, at least 2.8 (ranks >= 17) below an interval of at most 19
# (ranks < 2^31): the error falls like rho^(-2m) with rho >= 2.1, below 1e-8 (float32,
# m = 12) and 1e-16 (float64, m = 24); from rank 65 on, below 1e-10 and 1e-19.
_DISCOUNT_NODES = {np.dtype(np.float32): _gauss_legendre(12), np.dtype(np.float64): _gauss_legendre(24)}
_EI_NODES = _gauss_legendre(16)


# --------------------------------------------------------------------------
# The shared asymptotic pieces.


def _log1p_ratios(n, c, xp):
  """``(log1p(y) / y, 1 - log1p(y) / y)`` for ``y = n / c >= 0`` (``(1, 0)`` at 0), each to a few ulp.

  With ``u = n / (2c + n)``, ``log1p(y) = 2 atanh(u) = 2u + 2u^3 s`` where
  ``s = sum_j u^(2j) / (2j + 3)``, so ``1 - log1p(y) / y = u (1 - u (1 - u) s)``
  (``y = 2u / (1 - u)``): no cancellation. Below ``u_max`` the series (17 /
  10 terms, the first left out < 1e-17 / 3e-9 relative) reaches float64 /
  float32 precision; above it (``y > 1`` / ``y > 1.64``) the direct forms lose
  at most a factor 2 / 2.5 to cancellation.
  """
  y = n / c
  u_max, terms = (1.0 / 3.0, 17) if np.dtype(y.dtype) == np.float64 else (0.45, 10)
  u = n / (2.0 * c + n)
  v = u * u
  s = xp.zeros_like(u)
  for j in reversed(range(terms)):  # Horner in u^2
    s = s * v + 1.0 / (2 * j + 3)
  series = u * (1.0 - u * (1.0 - u) * s)
  small = u < u_max
  y = xp.where(small, 1.0, y)  # the unused branch stays finite (and so does its gradient)
  direct = xp.log1p(y) / y
  return xp.where(small, 1.0 - series, direct), xp.where(small, series, 1.0 - direct)


def _psi_tail(x, y):
  """``(psi(y) - psi(x) - log(y / x)) / (y - x)`` for ``y >= x >= 9`` (``psi'(x) - 1/x`` at ``y = x``).

  Stirling's series ``psi(z) ~ log z - 1/2z - 1/12z^2 + 1/120z^4 - 1/252z^6 +
  1/240z^8`` (truncation < 1e-11 relative at ``x = 9``, < 1e-17 at 33); every
  difference ``x^-k - y^-k`` is ``(y - x)`` times a positive sum, so nothing
  cancels. Written in ``1/x`` and ``1/y``: powers of ``x y`` would overflow
  float32 once ``x y > 6.8e4``.
  """
  u, w = 1.0 / x, 1.0 / y
  uw, u2, w2 = u * w, u * u, w * w
  common = uw * (u + w)
  tail = 0.5 * uw + common / 12.0 - common * (u2 + w2) / 120.0
  return tail + common * (u2 * u2 + u2 * w2 + w2 * w2) / 252.0 - common * (u2 + w2) * (u2 * u2 + w2 * w2) / 240.0


def _discount_em(w2, h, xp):
  """The mean over ``u`` in ``[log w2 - h, log w2]`` of the Euler-Maclaurin integrand of ``D(t) = 1/log2(t + 1)``.

  ``sum_{t=x+1}^{x+n} D(t) = int_x^{x+n} (D + D'/2 + D''/12 - D''''/720) dt``
  up to ``(D^(5)(x + n) - D^(5)(x)) / 30240`` (< 1e-10 relative from ``x = 16``,
  < 1e-14 from 64); in ``u = log(t + 1)`` with ``w2 = x + n + 1``, ``h =
  log1p(n / (x + 1))`` the sum is ``h`` times this mean. Gauss-Legendre in
  ``tau = log w2 - u`` (nodes on the leading axis): ``e^u = w2 e^-tau`` keeps
  its relative precision where the integrand is largest, which ``exp(u)`` of a
  rounded ``u`` would not (float32: 20 ulp at ``u = 20``).
  """
  nodes, weights = _DISCOUNT_NODES[np.dtype(h.dtype)]
  column = (-1,) + (1,) * h.ndim
  tau = xp.asarray(nodes.reshape(column), h.dtype) * h
  u = xp.log(w2) - tau
  big = w2 * xp.exp(-tau)  # t + 1 = e^u
  iu = 1.0 / u
  iu3 = iu * iu * iu
  # ln2 (t + 1) (D + D'/2 + D''/12 - D''''/720) / ln2, with w = u and p = 1 / (t + 1):
  # D = 1/w, D' = -p/w^2, D'' = p^2 (w + 2)/w^3, D'''' = p^4 (6w^3 + 22w^2 + 36w + 24)/w^5.
  g = (big * iu - 0.5 * iu * iu + (u + 2.0) * iu3 / (12.0 * big)
       - (((6.0 * u + 22.0) * u + 36.0) * u + 24.0) * iu3 * iu * iu / (720.0 * big * big * big))
  return _LN2 * xp.sum(xp.asarray(weights.reshape(column), h.dtype) * g, axis=0)


# --------------------------------------------------------------------------
# Integer ranks: exact tables below the split, the expansions above.


def _harmonic_tables():
  dh = np.zeros((_HARMONIC_SPLIT + 1, _HARMONIC_SPLIT + 1))
  s1 = np.zeros_like(dh)
  for a in range(_HARMONIC_SPLIT + 1):
    h, s = Fraction(0), Fraction(0)
    for t in range(a + 1, _HARMONIC_SPLIT + 1):
      h += Fraction(1, t)
      s += Fraction(t - a - 1, t)
      dh[a, t], s1[a, t] = float(h), float(s)
  return dh.ravel(), s1.ravel()


def _discount_table():
  table = np.zeros((_DISCOUNT_SPLIT + 1, _DISCOUNT_SPLIT + 1))
  terms = [0.0] + [_LN2 / math.log(t + 1.0) for t in range(1, _DISCOUNT_SPLIT + 1)]
  for a in range(_DISCOUNT_SPLIT + 1):
    for t in range(a + 1, _DISCOUNT_SPLIT + 1):
      table[a, t] = math.fsum(terms[a + 1:t + 1])
  return table.ravel()


_DH_TABLE, _S1_TABLE = _harmonic_tables()
_DISCOUNT_TABLE = _discount_table()


def harmonic_range(a, b, dtype, xp=jnp):
  """``dH(a, b) = sum_{t=a+1}^b 1/t`` and ``S1(a, b) = sum_{t=a+1}^b (t-a-1)/t`` for ints ``0 <= a <= b``.

  Ranks ``t <= 32`` come from exact tables; above, with ``c = a + 1``, ``e =
  b + 1``, ``n = b - a``: ``dH = log1p(n/c) + n T`` and ``S1 = n (1 - log1p(y)/y
  - c T)`` (``y = n/c``, ``T`` = :func:`_psi_tail` ``(c, e)``: ``S1 = n - c dH``
  without its cancellation). Both parts are non-negative, so the sum keeps
  their relative accuracy (float32: <= 4.5 ulp measured; float64: <= 3e-15).
  Returns two ``dtype`` arrays of the broadcast shape of ``a`` and ``b``.
  """
  a0, b0 = xp.minimum(a, _HARMONIC_SPLIT), xp.minimum(b, _HARMONIC_SPLIT)
  a1, b1 = xp.maximum(a, _HARMONIC_SPLIT), xp.maximum(b, _HARMONIC_SPLIT)
  at = a0 * (_HARMONIC_SPLIT + 1) + b0
  dh_low = xp.asarray(_DH_TABLE, dtype)[at]
  s1_low = xp.asarray(_S1_TABLE, dtype)[at]
  n, c, e = (b1 - a1).astype(dtype), (a1 + 1).astype(dtype), (b1 + 1).astype(dtype)
  tail = _psi_tail(c, e)
  dh_high = xp.log1p(n / c) + n * tail
  s1_high = xp.where(n > 1, xp.maximum(n * (_log1p_ratios(n, c, xp)[1] - c * tail), 0.0), 0.0)
  # Above the split, (t - a - 1) = (t - a1 - 1) + (a1 - a).
  return dh_low + dh_high, s1_low + s1_high + (a1 - a).astype(dtype) * dh_high


def discount_range(a, b, dtype, xp=jnp):
  """``sum_{t=a+1}^b 1 / log2(t + 1)`` for ints ``0 <= a <= b`` (float32: <= 5 ulp measured).

  Ranks ``t <= 64`` from an exact table, above by :func:`_discount_em`.
  """
  a0, b0 = xp.minimum(a, _DISCOUNT_SPLIT), xp.minimum(b, _DISCOUNT_SPLIT)
  a1, b1 = xp.maximum(a, _DISCOUNT_SPLIT), xp.maximum(b, _DISCOUNT_SPLIT)
  low = xp.asarray(_DISCOUNT_TABLE, dtype)[a0 * (_DISCOUNT_SPLIT + 1) + b0]
  n, w1, w2 = (b1 - a1).astype(dtype), (a1 + 1).astype(dtype), (b1 + 1).astype(dtype)
  h = xp.log1p(n / w1)
  return low + h * _discount_em(w2, h, xp)


# --------------------------------------------------------------------------
# Real arguments: the recurrences shifted past the split, then the same expansions.


def _harmonic_divdiff(s, n, xp):
  """``h = (psi(s + n) - psi(s)) / n`` (``psi'(s)`` at ``n = 0``) and ``g = 1 - s h``, for ``s >= 1``, ``n >= 0``.

  For integer ``n``, ``h`` is the mean of ``1/t`` over ``t = s .. s + n - 1``.
  The recurrence ``psi(x) = psi(x + M) - sum_{j<M} 1/(x + j)``, ``M = 8``, then
  :func:`_psi_tail` at ``X = s + M >= 9``; every term of ``h`` is explicitly
  proportional to ``n`` (no cancellation), and ``g`` reuses them with ``1 - s/X
  = M/X``, so what cancels in ``g`` is ``O(M / s)`` terms, not ``O(1)`` ones.
  """
  s, n = xp.broadcast_arrays(s, n)
  steps = s[..., None] + xp.arange(_HARMONIC_SHIFT, dtype=s.dtype)
  head = xp.sum(1.0 / (steps * (steps + n[..., None])), axis=-1)
  x = s + _HARMONIC_SHIFT
  ratio, rest = _log1p_ratios(n, x, xp)
  tail = _psi_tail(x, x + n)
  return head + ratio / x + tail, _HARMONIC_SHIFT / x + (s / x) * rest - s * (tail + head)


def _slope_at_one(s, xp):
  """``1 - s psi'(s + 1)``: the slope term ``h2(s, 1)`` of :func:`harmonic_slopes`."""
  z = s + (_HARMONIC_SHIFT + 1)
  steps = (s + 1.0)[..., None] + xp.arange(_HARMONIC_SHIFT, dtype=s.dtype)
  tail = (0.5 / z ** 2 + 1.0 / (6.0 * z ** 3) - 1.0 / (30.0 * z ** 5) + 1.0 / (42.0 * z ** 7)
          - 1.0 / (30.0 * z ** 9))
  return (_HARMONIC_SHIFT + 1) / z - s * xp.sum(1.0 / (steps * steps), axis=-1) - s * tail


def harmonic_slopes(s, n, xp=jnp):
  """``h1 = (psi(s + n) - psi(s)) / n`` and ``h2 = (1 - s h1) / (n - 1)`` for real ``s >= 1``, ``n >= 0``.

  ``h2 = -s psi[s, s + 1, s + n]`` (a second divided difference); for integer
  ``n >= 2`` it is ``(1 / (n (n - 1))) sum_{k<n} k / (s + k)``, the mean of the
  within-tie position term of He et al.'s eq. 3. Its singularity at ``n = 1``
  is removable; within ``|n - 1| < tau`` it is bridged by the quadratic through
  ``n = 1 - tau, 1, 1 + tau`` (the middle value from ``psi'``). One call
  evaluates the four abscissae ``n``, ``n`` away from 1, ``1 - tau`` and
  ``1 + tau``.
  """
  tau = _TAU.get(np.dtype(n.dtype), 0.125)
  s, n = xp.broadcast_arrays(s, n)
  near = xp.abs(n - 1.0) < tau
  m = xp.stack([n, xp.where(near, 1.0 + 2.0 * tau, n), xp.full_like(n, 1.0 - tau), xp.full_like(n, 1.0 + tau)])
  h1, g = _harmonic_divdiff(xp.broadcast_to(s, m.shape), m, xp)
  far, lo, hi = g[1] / (m[1] - 1.0), g[2] / -tau, g[3] / tau
  mid = _slope_at_one(s, xp)
  e = n - 1.0
  quad = mid + e * (hi - lo) / (2.0 * tau) + e * e * (hi - 2.0 * mid + lo) / (2.0 * tau ** 2)
  return h1[0], xp.where(near, quad, far)


def harmonic_number(x, xp=jnp):
  """``H(x) = psi(x + 1) + gamma`` for real ``x >= 0``: ``sum_{t=1}^x 1/t`` at integers."""
  return x * _harmonic_divdiff(xp.ones_like(x), x, xp)[0]


def _discount_divdiff(u, n, xp):
  """``(D(u + n) - D(u)) / n`` for ``u >= 1``, ``n >= 0``, ``D(t) = 1/log2(t + 1)``, without cancellation."""
  ratio = _log1p_ratios(n, u + 1.0, xp)[0]
  return -_LN2 * ratio / ((u + 1.0) * xp.log1p(u) * xp.log1p(u + n))


def discount_mean(a, n, xp=jnp):
  """``(F(a + n) - F(a)) / n`` (``F'(a)`` at ``n = 0``) for real ``a, n >= 0``; ``F`` continues ``sum_{t<=x} D(t)``.

  For integer ``a`` and ``n`` the mean of ``D(t) = 1/log2(t + 1)`` over the
  ranks ``a+1 .. a+n``. ``F(x) = F(x + M) - sum_{j=1}^M D(x + j)``, ``M = 16``,
  then :func:`_discount_em` at ``X = a + M``, whose divided difference needs no
  constant; its Jacobian ``log1p(n / (X + 1)) / n`` stays accurate as ``n -> 0``.
  """
  a, n = xp.broadcast_arrays(a, n)
  steps = a[..., None] + xp.arange(1, _DISCOUNT_SHIFT + 1, dtype=a.dtype)
  head = -xp.sum(_discount_divdiff(steps, n[..., None], xp), axis=-1)
  x = a + _DISCOUNT_SHIFT
  w1, w2 = x + 1.0, x + n + 1.0
  ratio = _log1p_ratios(n, w1, xp)[0]
  return head + ratio / w1 * _discount_em(w2, xp.log1p(n / w1), xp)


def cumulative_discount(x, xp=jnp):
  """``F(x) = sum_{k>=1} (D(k) - D(k + x))`` for real ``x >= 0``: ``sum_{t=1}^x D(t)`` at integers."""
  return x * discount_mean(xp.zeros_like(x), x, xp)


def ei_difference(u1, u2, xp=jnp):
  """``Ei(u2) - Ei(u1)`` for ``u1, u2 > 0``: ``log(u2 / u1) + int (e^u - 1) / u du`` (an entire integrand)."""
  nodes, weights = _EI_NODES
  u = u1[..., None] + (u2 - u1)[..., None] * xp.asarray(nodes, u1.dtype)
  mean = xp.sum(xp.expm1(u) / u * xp.asarray(weights, u1.dtype), axis=-1)
  return xp.log(u2) - xp.log(u1) + (u2 - u1) * mean
