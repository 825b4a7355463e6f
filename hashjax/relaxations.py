"""Continuous relaxations for tie-aware learning to hash (He et al. 2018, Sec. 4).

The relaxed pipeline mirrors the discrete one (:mod:`hashjax.codes`, :mod:`hashjax.histograms`)::

  logits --relax--> codes in [-1, 1] --relaxed distance--> distances[..., Q, N]
         --soft_histogram--> hist[..., num_bits + 1, V] --relaxed_ap / relaxed_ndcg--> [..., Q]

Every function is pure and jit/vmap/grad-able; options are keyword-only; the
default dtype is float32 (float64 inputs stay float64 under
``jax.enable_x64``). The metrics of histograms (:func:`relaxed_ap`, ...) are
written once against an array namespace: numpy on the host for concrete
histograms (a call at a new shape compiles nothing), jax.numpy when traced
(inside a caller's ``jit``, ``vmap`` or ``grad``: the training step). Their
harmonic and discount sums are those of :mod:`hashjax._special`, shared with
the exact metrics.

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

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks
from hashjax import _special

Array = jax.Array

__all__ = [
    "relax", "relaxed_hamming", "nair_hamming", "squared_euclidean", "DISTANCES",
    "off_diagonal", "soft_histogram", "relaxed_ap", "relaxed_dcg", "relaxed_ndcg", "ideal_dcg",
    "has_relevant", "harmonic_number", "cumulative_discount", "HARMONICS", "DISCOUNTS", "smooth_ap",
]

#: Options of :func:`relaxed_ap`.
HARMONICS = ("digamma", "ln")
#: Options of :func:`relaxed_ndcg`, :func:`relaxed_dcg` and :func:`ideal_dcg`.
DISCOUNTS = ("exact", "li", "simplified")

_LN2 = math.log(2.0)
# Floor of the counts eqs. 7-8 divide by or take the log of (they diverge at 0).
_EPS = 1e-6
_HIGHEST = jax.lax.Precision.HIGHEST


# --------------------------------------------------------------------------- checks


def _float_dtype(x) -> Any:
  """The float dtype of results from ``x``: float32, or float64 for float64 inputs under x64."""
  return jax.dtypes.canonicalize_dtype(jnp.promote_types(x.dtype, jnp.float32))


def _check_codes(query, items, *, low=None, high=None, what=""):
  """Codes ``query[..., Q, b]`` and ``items[..., N, b]`` with broadcasting batch axes, in ``[low, high]`` (values
  checked when concrete) when ``low`` is given."""
  for name, x, rows in (("query", query, "Q"), ("items", items, "N")):
    _checks.check_real(name, x, shape_doc=f"[..., {rows}, num_bits]", min_ndim=2, nonempty="bit per code")
    if low is not None:
      _checks.check_within(name, x, low, high, what=what)
  _checks.check_columns("items", items, query.shape[-1], what="the bits per code of query")
  try:
    np.broadcast_shapes(tuple(query.shape[:-2]), tuple(items.shape[:-2]))
  except ValueError:
    raise ValueError(f"items: batch axes {items.shape[:-2]} do not broadcast with query's {query.shape[:-2]}") from None


def _check_metric(hist: Any, option: str, value: Any, options: tuple) -> str:
  """A relaxed metric's input ``hist[..., num_bits + 1, V]`` of non-negative (soft) counts, and its ``option``
  (one of ``options``), which is returned."""
  _checks.check_histogram("hist", hist, integer=False)
  return _checks.check_option(option, value, options)


def _check_alpha(alpha: Any) -> None:
  """A positive finite number, or a float scalar array (which may be traced: a slope annealed under jit)."""
  scalar = getattr(alpha, "ndim", None) == 0 and np.issubdtype(np.dtype(alpha.dtype), np.floating)
  if not scalar or _checks.is_concrete(alpha):
    _checks.check_number("alpha", float(np.asarray(alpha)) if scalar else alpha, low=0, low_open=True)


# --------------------------------------------------------------------------- relaxed codes and distances


def relax(logits: Array, *, alpha: float) -> Array:
  r"""Relaxed hash codes: the sigmoid relaxation of ``sgn`` (He et al. eq. 6).

  .. math:: \tilde\phi_j = 2 \sigma(\alpha f_j) - 1 = \tanh(\alpha f_j / 2)

  Computed as the ``tanh`` form, which is exact in floating point for large
  ``|alpha f|`` (no ``1 - 1`` cancellation). As ``alpha -> inf`` the codes tend
  to ``sgn(f)``.

  Args:
    logits: real ``[..., num_bits]`` hash-mapping outputs ``f``.
    alpha: positive slope (a Python number, or a float scalar that may be traced
      so it can be annealed under jit). A non-positive value is an error when
      concrete; a traced one cannot be checked here, so objectives check their
      slope where they are built (:func:`hashjax.objectives.talr.query_vs_rest`,
      :func:`hashjax.mappings.alpha_schedule`).

  Returns:
    ``[..., num_bits]`` codes in ``[-1, 1]`` (float32 unless ``logits`` is float64).

  >>> import jax.numpy as jnp
  >>> relax(jnp.array([-2.0, 0.0, 2.0]), alpha=1.0).round(4).tolist()
  [-0.7616, 0.0, 0.7616]
  """
  _checks.check_real("logits", logits, shape_doc="[..., num_bits]", min_ndim=1)
  _check_alpha(alpha)
  logits = jnp.asarray(logits)
  return jnp.tanh(0.5 * alpha * logits.astype(_float_dtype(logits)))


def _inner(query, items):
  """The codes in their common float dtype and their inner products ``[..., Q, N]``."""
  query, items = jnp.asarray(query), jnp.asarray(items)
  dt = jnp.promote_types(_float_dtype(query), _float_dtype(items))
  q, x = query.astype(dt), items.astype(dt)
  return q, x, jnp.matmul(q, jnp.swapaxes(x, -1, -2), precision=_HIGHEST)


def relaxed_hamming(query: Array, items: Array) -> Array:
  r"""Relaxed Hamming distance between codes in ``[-1, 1]`` (He et al. eq. 5).

  .. math:: \tilde d(q, i) = \tfrac{1}{2} (b - \tilde\phi_q^\top \tilde\phi_i)

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
  q, _, qx = _inner(query, items)
  return 0.5 * (q.shape[-1] - qx)


def nair_hamming(query: Array, items: Array) -> Array:
  r"""Nair et al.'s relaxed Hamming score for sigmoid outputs (their eq. 2).

  .. math:: \hat s(q, i) = \sum_j h_{qj} (1 - h_{ij}) + (1 - h_{qj}) h_{ij}

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
  q, x, qx = _inner(query, items)
  return jnp.sum(q, -1)[..., :, None] + jnp.sum(x, -1)[..., None, :] - 2.0 * qx


def squared_euclidean(query: Array, items: Array) -> Array:
  r"""Squared Euclidean distance between real codes.

  .. math:: \|h_q - h_i\|^2 = \|h_q\|^2 + \|h_i\|^2 - 2 h_q^\top h_i

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
  q, x, qx = _inner(query, items)
  return jnp.maximum(jnp.sum(q * q, -1)[..., :, None] + jnp.sum(x * x, -1)[..., None, :] - 2.0 * qx, 0.0)


#: The relaxed distances by name; all share ``(query[..., Q, b], items[..., N, b]) -> [..., Q, N]``.
DISTANCES = {
    "relaxed_hamming": relaxed_hamming,
    "nair_hamming": nair_hamming,
    "squared_euclidean": squared_euclidean,
}


def off_diagonal(x: Array) -> Array:
  r"""Drops the diagonal of square ``[..., M, M]`` matrices: query-vs-rest retrieval.

  In minibatch training every example is a query against the rest of the batch
  (He et al. Sec. 4.2); apply this to both ``distances`` and ``affinity`` before
  :func:`soft_histogram` so an example never retrieves itself.

  .. math:: y_{r, k} = x_{r, k + [k \ge r]}, \quad k < M - 1

  Args:
    x: ``[..., M, M]`` array (any dtype), ``M >= 2``.

  Returns:
    ``[..., M, M - 1]``: row ``r`` without its entry ``r``.

  >>> import numpy as np
  >>> off_diagonal(np.arange(9).reshape(3, 3)).tolist()
  [[1, 2], [3, 5], [6, 7]]
  """
  if not hasattr(x, "shape") or x.ndim < 2 or x.shape[-1] != x.shape[-2] or x.shape[-1] < 2:
    raise ValueError(f"x: expected square matrices [..., M, M] with M >= 2, got {_checks.desc(x)}")
  x = jnp.asarray(x)
  m = x.shape[-1]
  # Row r keeps columns 0..r-1 and r+1..m-1: column k of the result is k + (k >= r).
  cols = jnp.arange(m - 1)[None, :] + (jnp.arange(m - 1)[None, :] >= jnp.arange(m)[:, None])
  return jnp.take_along_axis(x, jnp.broadcast_to(cols, x.shape[:-1] + (m - 1,)), axis=-1)


# --------------------------------------------------------------------------- soft histograms


def soft_histogram(distances: Array, affinity: Array, *, num_bits: int, num_levels: int,
                   width: float = 1.0) -> Array:
  r"""Soft per-level histogram of real distances with a triangular kernel (He et al. eq. 14).

  .. math:: c_{d,v} = \sum_{i: a_i = v} \max\Big(0, 1 - \frac{|\tilde d_i - d|}{\Delta}\Big),
            \quad d = 0, \dots, b

  With ``width=1`` an item at ``d <= x <= d + 1`` splits its unit mass
  linearly between bins ``d`` and ``d + 1`` (linear interpolation), so at
  integer distances this is exactly the counting histogram of
  :func:`hashjax.histograms.distance_histogram`. For other widths the kernel is
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
  num_levels = _checks.check_int("num_levels", num_levels)
  width = _checks.check_number("width", width, low=0, low_open=True)
  _checks.check_real("distances", distances, shape_doc="[..., N]", min_ndim=1)
  _checks.check_nonnegative("affinity", affinity, what="affinity levels")
  _checks.check_int_range("affinity", affinity, 0, num_levels - 1, what="affinity levels", shape=distances.shape,
                          like="distances")
  distances = jnp.asarray(distances)
  dt = _float_dtype(distances)
  r = distances.astype(dt)[..., :, None] - jnp.arange(num_bits + 1, dtype=dt)  # [..., N, b + 1]
  # |r| as r * sign(r): its derivative at r = 0 is 0 (the symmetric subgradient
  # of the kernel's peak), where jnp.abs would give +1.
  a = r * jnp.sign(r)
  kernel = jnp.where(a < width, 1.0 - a / width, 0.0)
  onehot = jax.nn.one_hot(jnp.asarray(affinity), num_levels, dtype=dt)  # [..., N, V]
  return jnp.einsum("...nd,...nv->...dv", kernel, onehot, precision=_HIGHEST)


# --------------------------------------------------------------------------- continuations


def _continued(fn, x):
  """``fn(x, xp)``, a continuation of :mod:`hashjax._special`, of real ``x >= 0`` in the float dtype of ``x``."""
  _checks.check_real("x", x, shape_doc="[...]", nonnegative="values")
  dtype = _float_dtype(x)
  return _special.apply_xp(lambda x, xp: fn(x.astype(dtype), xp), x)


def harmonic_number(x: Array) -> Array:
  r"""The harmonic numbers continued to real ``x >= 0``: ``H(x) = psi(x + 1) + gamma``.

  .. math:: H(x) = \sum_{k \ge 1} \Big( \frac{1}{k} - \frac{1}{k + x} \Big),
            \qquad H(n) = \sum_{t=1}^{n} \frac{1}{t}

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
  return _continued(_special.harmonic_number, x)


def cumulative_discount(x: Array) -> Array:
  r"""Cumulative DCG discount continued to real ``x >= 0`` (exact at integers).

  .. math:: F(x) = \sum_{k \ge 1} \big( D(k) - D(k + x) \big), \quad
            D(t) = \frac{1}{\log_2(t + 1)}, \qquad F(n) = \sum_{t=1}^{n} D(t)

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
  return _continued(_special.cumulative_discount, x)


# --------------------------------------------------------------------------- relaxed AP


def _safe_div(num, den, ok, xp):
  """num / den where ``ok``, 0 elsewhere, with finite gradients on both branches."""
  return xp.where(ok, num / xp.where(ok, den, 1.0), 0.0)


def _exclusive_cumsum(x, xp):
  """Sums of ``x`` over the bins before each bin (last axis)."""
  return xp.concatenate([xp.zeros_like(x[..., :1]), xp.cumsum(x, axis=-1)[..., :-1]], axis=-1)


def _relaxed_ap(hist, harmonic, dtype, xp):
  hist = hist.astype(dtype)
  cpos = hist[..., 1]
  c = hist[..., 0] + cpos
  before, pos_before = _exclusive_cumsum(c, xp), _exclusive_cumsum(cpos, xp)
  if harmonic == "digamma":
    h1, h2 = _special.harmonic_slopes(before + 1.0, c, xp)
    bins = cpos * ((pos_before + 1.0) * h1 + (cpos - 1.0) * h2)
  else:
    at_one = c == 1.0
    slope = xp.where(at_one, 0.0, xp.clip((cpos - 1.0) / xp.where(at_one, 1.0, c - 1.0), 0.0, 1.0))
    log_term = xp.log(xp.maximum(before + c, _EPS)) - xp.log1p(before)
    bins = cpos * slope + cpos / xp.maximum(c, _EPS) * (pos_before + 1.0 - slope * (before + 1.0)) * log_term
  total = xp.sum(cpos, axis=-1)
  # Flooring the normaliser keeps the gradient finite when leaked soft mass
  # makes the relevant total tiny but non-zero (1 / total^2 would overflow).
  return _safe_div(xp.sum(bins, axis=-1), xp.maximum(total, _EPS), total > 0, xp)


def relaxed_ap(hist: Array, *, harmonic: str = "digamma") -> Array:
  r"""Relaxed tie-aware AP from a (soft) two-level histogram (He et al. eq. 7).

  .. math:: \mathrm{AP}_r = \frac{1}{C^+_b} \sum_{d=0}^{b} c_d^+ \Big[
            (C^+_{d-1} + 1) \frac{S_d}{c_d}
            + (c_d^+ - 1) \frac{c_d - (C_{d-1} + 1) S_d}{c_d (c_d - 1)} \Big]

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
      :func:`hashjax.histograms.distance_histogram`).
    harmonic: ``"digamma"`` or ``"ln"``.

  Returns:
    ``[...]`` relaxed AP per query; 0 (with zero gradient) for a query with no
    relevant mass, see :func:`has_relevant`. The normaliser ``C^+_b`` is
    floored at ``1e-6`` so leaked soft mass cannot overflow the gradient.

  >>> import numpy as np
  >>> hist = np.array([[0., 1.], [2., 2.]])  # 1 relevant at d=0; 2 relevant + 2 not tied at d=1
  >>> # AP_T (eq. 3): precision 1 at rank 1; the tie at ranks t = 2..5 holds a relevant item with probability
  >>> # 2/4 and interpolates the precision, (2 + (t - 2) / 3) / t: 2/2, (7/3)/3, (8/3)/4, 3/5.
  >>> ap_t = (1 + 2 / 4 * (2 / 2 + 7 / 3 / 3 + 8 / 3 / 4 + 3 / 5)) / 3   # = 227/270
  >>> bool(np.isclose(float(relaxed_ap(hist)), ap_t, rtol=1e-6))
  True
  >>> # eq. 7: S_0 = ln(1/1) = 0 (the lone item scores 0); the tie (C = C^+ = 1 before it, S_1 = ln(5/2)) gives
  >>> # 2 (2 S_1 / 4 + (4 - 2 S_1) / 12) = (2/3)(1 + S_1) by the formula above; over C^+_b = 3.
  >>> bool(np.isclose(float(relaxed_ap(hist, harmonic="ln")), 2 / 9 * (1 + np.log(2.5)), rtol=1e-6))
  True
  """
  harmonic = _check_metric(hist, "harmonic", harmonic, HARMONICS)
  _checks.check_columns("hist", hist, 2, what="levels: irrelevant and relevant")
  return _special.apply_xp(_relaxed_ap, hist, harmonic=harmonic, dtype=_float_dtype(hist))


# --------------------------------------------------------------------------- relaxed DCG / NDCG


def _mean_discount(before, count, discount, xp):
  """Average discount per item of a tie at positions before + 1 .. before + count."""
  if discount == "exact":
    return _special.discount_mean(before, count, xp)
  if discount == "simplified":
    return _LN2 / xp.log(before + 0.5 * (count + 1.0) + 1.0)
  # "li": eq. 8, ln 2 (Li(C_d + 1) - Li(C_{d-1} + 2)) / c_d with Li(x) = Ei(ln x).
  li = _special.ei_difference(xp.log(before + 2.0), xp.log1p(xp.maximum(before + count, _EPS)), xp)
  return _LN2 * li / xp.maximum(count, _EPS)


def _relaxed_dcg(hist, discount, dtype, xp):
  hist = hist.astype(dtype)
  gains = np.exp2(np.arange(hist.shape[-1])).astype(dtype) - 1.0
  count = xp.sum(hist, axis=-1)
  before = _exclusive_cumsum(count, xp)
  return xp.sum(xp.sum(hist * gains, axis=-1) * _mean_discount(before, count, discount, xp), axis=-1)


def _ideal_dcg(level_totals, discount, dtype, xp):
  # Counting sort over levels: the ideal ranking puts each level in its own
  # tie, highest gain first.
  count = level_totals.astype(dtype)[..., ::-1]
  gains = np.exp2(np.arange(count.shape[-1])[::-1]).astype(dtype) - 1.0
  return xp.sum(gains * count * _mean_discount(_exclusive_cumsum(count, xp), count, discount, xp), axis=-1)


def _has_relevant(hist, xp):
  return xp.sum(hist[..., 1:], axis=(-2, -1)) > 0


def _relaxed_ndcg(hist, discount, dtype, xp):
  hist = hist.astype(dtype)
  ideal = _ideal_dcg(xp.sum(hist, axis=-2), discount, dtype, xp)
  ok = (ideal > 0) & _has_relevant(hist, xp)
  return _safe_div(_relaxed_dcg(hist, discount, dtype, xp), xp.maximum(ideal, _EPS), ok, xp)


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
  r"""Relaxed tie-aware DCG from a (soft) multi-level histogram (He et al. eq. 8).

  .. math:: \mathrm{DCG}_r = \sum_{d=0}^{b} \Big( \sum_v G(v) c_{d,v} \Big) W_d,
            \qquad G(v) = 2^v - 1

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
  discount = _check_metric(hist, "discount", discount, DISCOUNTS)
  return _special.apply_xp(_relaxed_dcg, hist, discount=discount, dtype=_float_dtype(hist))


def ideal_dcg(level_totals: Array, *, discount: str = "exact") -> Array:
  r"""Relaxed ideal DCG from (soft) level totals: the counting sort over levels.

  .. math:: \mathrm{IDCG}_r = \sum_{v} G(v)\, m_v\, W(M_{>v}, m_v), \qquad
            M_{>v} = \sum_{u > v} m_u

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
  >>> # level 2 (gain 3) at rank 1, level 1 (gain 1) at rank 2, level 0 (gain 0) last; D(r) = 1 / log2(r + 1)
  >>> bool(np.isclose(float(ideal_dcg(np.array([1., 1., 1.]))), 3 + 1 / np.log2(3), rtol=1e-6))
  True
  """
  _checks.check_real("level_totals", level_totals, shape_doc="[..., V]", nonempty="level", nonnegative="(soft) counts")
  discount = _checks.check_option("discount", discount, DISCOUNTS)
  return _special.apply_xp(_ideal_dcg, level_totals, discount=discount, dtype=_float_dtype(level_totals))


def relaxed_ndcg(hist: Array, *, discount: str = "exact") -> Array:
  r"""Relaxed tie-aware NDCG: relaxed DCG over the relaxed ideal DCG (He et al. eq. 8).

  .. math:: \mathrm{NDCG}_r = \mathrm{DCG}_r / \mathrm{IDCG}_r

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
  >>> hist = np.array([[0., 1., 0.], [1., 0., 1.]])  # level 1 at d=0; levels 0 and 2 tied at d=1 (ranks 2, 3)
  >>> # exact: the tie's items share the mean discount (D(2) + D(3)) / 2; ideal: 3 D(1) + 1 D(2)
  >>> dcg = 1 + 3 * (1 / np.log2(3) + 1 / 2) / 2
  >>> bool(np.isclose(float(relaxed_ndcg(hist)), dcg / (3 + 1 / np.log2(3)), rtol=1e-6))
  True
  >>> # simplified: a tie of n after C items has discount ln 2 / ln(C + (n + 1) / 2 + 1): ln 2 / ln 3.5 here
  >>> dcg = 1 + 3 * np.log(2) / np.log(3.5)
  >>> bool(np.isclose(float(relaxed_ndcg(hist, discount="simplified")), dcg / (3 + 1 / np.log2(3)), rtol=1e-6))
  True
  """
  discount = _check_metric(hist, "discount", discount, DISCOUNTS)
  return _special.apply_xp(_relaxed_ndcg, hist, discount=discount, dtype=_float_dtype(hist))


relaxed_dcg.__doc__ = relaxed_dcg.__doc__.replace("{forms}", _DCG_FORMS.strip("\n").lstrip())
relaxed_ndcg.__doc__ = relaxed_ndcg.__doc__.replace("{forms}", _DCG_FORMS.strip("\n").lstrip())


def has_relevant(hist: Array) -> Array:
  r"""Mask of queries with relevant mass: where relaxed AP/NDCG are defined.

  .. math:: m = \Big[ \sum_{d} \sum_{v \ge 1} c_{d,v} > 0 \Big]

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
  _checks.check_histogram("hist", hist, integer=False)
  return _special.apply_xp(_has_relevant, hist)


# --------------------------------------------------------------------------- a tie-unaware relaxation


def smooth_ap(distances: Array, relevance: Array, *, temperature: float) -> Array:
  r"""Relaxed AP that ranks by the real distances themselves: tie-unaware (Smooth-AP, Brown et al. 2020).

  .. math:: \mathrm{AP}_s = \frac{1}{|P|} \sum_{i \in P}
            \frac{1 + \sum_{j \in P, j \ne i} \sigma\big((\tilde d_i - \tilde d_j) / \tau\big)}
                 {1 + \sum_{j \ne i} \sigma\big((\tilde d_i - \tilde d_j) / \tau\big)}

  The rank of item ``i`` is one plus the items before it, each counted by a sigmoid of the distance
  difference; as ``tau -> 0`` with distinct distances this is the AP of the order the relaxed distances give.
  Unlike :func:`relaxed_ap` it has no histogram: items at equal relaxed distance count half before each other,
  and items at equal *Hamming* distance after rounding are ordered by their real-valued relaxed distances,
  which the codes do not keep, so it optimises the ranking a tie-unaware evaluation of the relaxed codes sees.
  It is the tie-unaware counterpart of TALR-AP for comparing the two as training objectives. Memory: ``[..., N, N]``.

  Args:
    distances: real ``[..., N]`` relaxed distances (lower ranks first).
    relevance: ``[..., N]`` relevance, ``> 0`` relevant (bool or numbers), same shape.
    temperature: ``tau > 0``, in the distances' units (bits for :func:`relaxed_hamming`).

  Returns:
    ``[...]`` smoothed AP; 0 with zero gradient where a row has no relevant item.

  >>> import numpy as np
  >>> round(float(smooth_ap(np.array([0.0, 4.0, 8.0]), np.array([1, 0, 1]), temperature=0.01)), 4)
  0.8333
  """
  _checks.check_real("distances", distances, shape_doc="[..., N]", min_ndim=1)
  _checks.check_shape("relevance", relevance, distances.shape, like="distances")
  tau = _checks.check_number("temperature", temperature, low=0, low_open=True)
  d = jnp.asarray(distances)
  d = d.astype(_float_dtype(d))
  rel = (jnp.asarray(relevance) > 0).astype(d.dtype)
  # before[..., i, j] = sigma((d_i - d_j) / tau): how much j ranks before i; the j = i terms are sigma(0) = 1/2.
  before = jax.nn.sigmoid((d[..., :, None] - d[..., None, :]) / tau)
  rank_all = 0.5 + jnp.sum(before, axis=-1)
  # A sum, not a matmul: XLA fuses it with the sigmoids instead of materialising them (3.5x faster with its gradient).
  rank_pos = 1.0 - 0.5 * rel + jnp.sum(before * rel[..., None, :], axis=-1)
  count = jnp.sum(rel, axis=-1)
  return jnp.sum(rel * rank_pos / rank_all, axis=-1) / jnp.maximum(count, 1.0)
