"""hashjax._special against float64 loops (math.fsum of every term), exact fractions and quadrature.

Each function runs on both of its paths: numpy (concrete) and jax.numpy (under
jax.jit), in float32 and float64.
"""

import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from brute_force import range_sums
from hashjax import _special

ULP32 = 2.0 ** -24


def _run(fn, xp, *args):
  """``fn(*args, xp)`` with numpy, or jitted with jax.numpy; numpy results."""
  if xp is np:
    with np.errstate(all="ignore"):
      out = fn(*args, np)
  else:
    out = jax.jit(lambda *a: fn(*a, jnp))(*args)
  return jax.tree_util.tree_map(np.asarray, out)


def _ranges():
  rng = np.random.default_rng(0)
  a = np.concatenate([[0, 0, 31, 32, 33, 63, 64, 65, 1000, 99999, 0, 5, 64], rng.integers(0, 300000, 30),
                      rng.integers(0, 80, 30)])
  b = a + np.concatenate([[0, 5, 2, 1, 2, 3, 1, 40, 1, 1, 1, 100000, 0], rng.integers(0, 300000, 30),
                          rng.integers(0, 40, 30)])
  return a.astype(np.int32), b.astype(np.int32)


@pytest.mark.parametrize("xp", [np, jnp], ids=["numpy", "jit"])
def test_integer_range_sums_match_fsum(xp):
  a, b = _ranges()
  sums = lambda a, b, dtype, xp: _special.harmonic_range(a, b, dtype, xp) + (_special.discount_range(a, b, dtype, xp),)
  with jax.enable_x64(True):
    got64 = _run(lambda a, b, xp: sums(a, b, np.float64, xp), xp, a, b)
  got32 = _run(lambda a, b, xp: sums(a, b, np.float32, xp), xp, a, b)
  assert all(g.dtype == np.float64 for g in got64) and all(g.dtype == np.float32 for g in got32)
  for i in range(len(a)):
    for got, got32_, want in zip((g[i] for g in got64), (g[i] for g in got32), range_sums(a[i], b[i])):
      assert abs(got - want) <= 1e-13 * want, (a[i], b[i], got, want)
      assert abs(got32_ - want) <= 8 * ULP32 * want, (a[i], b[i], got32_, want)  # <= 8 ulp


@pytest.mark.parametrize("xp", [np, jnp], ids=["numpy", "jit"])
def test_integer_range_sums_exact_at_small_ranks(xp):
  # Below the split ranks the tables are exact: every sum over ranks <= 32 rounds its exact fraction.
  a, b = np.meshgrid(np.arange(33), np.arange(33), indexing="ij")
  a, b = a[a <= b].astype(np.int32), b[a <= b].astype(np.int32)
  with jax.enable_x64(True):
    dh, s1 = _run(lambda a, b, xp: _special.harmonic_range(a, b, np.float64, xp), xp, a, b)
  for ai, bi, h, s in zip(a.tolist(), b.tolist(), dh, s1):
    assert h == float(sum(Fraction(1, t) for t in range(ai + 1, bi + 1)))
    assert s == float(sum(Fraction(t - ai - 1, t) for t in range(ai + 1, bi + 1)))
  # S1 of a single rank is 0 at every rank, also above the split.
  a = np.array([0, 31, 32, 33, 1000, 2 ** 30], np.int32)
  for dtype in (np.float32, np.float64):
    with jax.enable_x64(dtype == np.float64):
      _, s1 = _run(lambda a, b, xp: _special.harmonic_range(a, b, dtype, xp), xp, a, a + 1)
    assert np.all(s1 == 0.0)


def _psi_prime(x, terms=200000):
  """psi'(x) = sum_k 1/(x + k)^2, the tail beyond ``terms`` by its integral and Euler-Maclaurin corrections."""
  k = np.arange(terms, dtype=np.float64)
  z = x + terms
  return math.fsum(1.0 / (x + k) ** 2) + 1.0 / z + 0.5 / z ** 2 + 1.0 / (6 * z ** 3)


@pytest.mark.parametrize("xp", [np, jnp], ids=["numpy", "jit"])
def test_continuations_at_integers_equal_the_sums(xp):
  x = np.array([0, 1, 2, 3, 7, 50, 1000, 20000], np.float64)
  with jax.enable_x64(True):
    h, f = _run(lambda x, xp: (_special.harmonic_number(x, xp), _special.cumulative_discount(x, xp)), xp, x)
    s = np.array([1.0, 2.5, 17.0, 40.0, 300.0])[:, None] * np.ones((1, 4))
    n = np.array([0.0, 1.0, 2.0, 9.0])[None, :] * np.ones((5, 1))
    h1, h2 = _run(lambda s, n, xp: _special.harmonic_slopes(s, n, xp), xp, s, n)
    mean_d = _run(lambda a, n, xp: _special.discount_mean(a, n, xp), xp, np.floor(s), n)
  for xi, hv, fv in zip(x.astype(int), h, f):
    want_h, _, want_f = range_sums(0, xi)
    assert hv == pytest.approx(want_h, rel=1e-10, abs=1e-12)
    assert fv == pytest.approx(want_f, rel=1e-9, abs=1e-12)
  # h1 = mean of 1/t over t = s .. s + n - 1 (psi'(s) at n = 0); h2 = (1 / (n (n - 1))) sum_{k<n} k / (s + k),
  # and 1 - s psi'(s + 1) at n = 1 (its removable singularity); the mean discount over ranks a+1 .. a+n.
  for i, j in np.ndindex(s.shape):
    si, ni = s[i, j], int(n[i, j])
    terms = si + np.arange(ni)
    want_h1 = _psi_prime(si) if ni == 0 else math.fsum(1.0 / terms) / ni
    want_h2 = (1.0 - si * _psi_prime(si + 1.0) if ni == 1 else
               math.fsum(np.arange(ni) / terms) / (ni * (ni - 1)) if ni > 1 else None)
    assert h1[i, j] == pytest.approx(want_h1, rel=1e-10), (si, ni)
    if want_h2 is not None:
      assert h2[i, j] == pytest.approx(want_h2, rel=1e-7, abs=1e-12), (si, ni)
    a = int(np.floor(si))
    if ni == 0:  # F'(a), the derivative of the continuation: a central difference of F
      f_near = _run(lambda x, xp: _special.cumulative_discount(x, xp), np, np.array([a - 1e-4, a + 1e-4]))
      assert mean_d[i, j] == pytest.approx((f_near[1] - f_near[0]) / 2e-4, rel=1e-6), a
    else:
      assert mean_d[i, j] == pytest.approx(range_sums(a, a + ni)[2] / ni, rel=1e-9), (a, ni)


@pytest.mark.parametrize("xp", [np, jnp], ids=["numpy", "jit"])
def test_continuations_match_the_integer_sums_in_float32(xp):
  # The two front ends share the asymptotic expansions: at integer arguments the continuations give the
  # integer range sums to float32 precision.
  a, b = _ranges()
  keep = (b - a) < 50000
  a, b = a[keep], b[keep]
  af, nf = a.astype(np.float32), (b - a).astype(np.float32)
  h1, _ = _run(lambda s, n, xp: _special.harmonic_slopes(s, n, xp), xp, af + 1, nf)
  md = _run(lambda a, n, xp: _special.discount_mean(a, n, xp), xp, af, nf)
  dh, _ = _run(lambda a, b, xp: _special.harmonic_range(a, b, np.float32, xp), np, a, b)
  ds = _run(lambda a, b, xp: _special.discount_range(a, b, np.float32, xp), np, a, b)
  np.testing.assert_allclose(h1 * nf, dh, rtol=2e-6, atol=1e-30)
  np.testing.assert_allclose(md * nf, ds, rtol=2e-6, atol=1e-30)


@pytest.mark.parametrize("xp", [np, jnp], ids=["numpy", "jit"])
def test_ei_difference_matches_quadrature(xp):
  u1 = np.array([0.5, 1.0, 2.0, 3.0, 7.0, 0.7])
  u2 = np.array([0.5, 1.3, 5.0, 3.0001, 12.0, 0.2])
  with jax.enable_x64(True):
    got = _run(lambda u1, u2, xp: _special.ei_difference(u1, u2, xp), xp, u1, u2)
  for lo, hi, g in zip(u1, u2, got):
    u = np.linspace(lo, hi, 200001)  # Simpson's rule of e^u / u
    f = np.exp(u) / u
    want = (hi - lo) / 200000 / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())
    assert g == pytest.approx(want, rel=1e-10, abs=1e-14), (lo, hi)


def test_apply_xp_runs_numpy_on_concrete_inputs_and_jax_when_traced():
  seen = []

  def fn(x, y, *, scale, xp):
    seen.append(xp)
    return x * scale + (0 if y is None else y), xp.sum(x)

  out = _special.apply_xp(fn, np.arange(3.0), None, scale=2.0)
  assert seen == [np] and all(isinstance(o, jax.Array) for o in out)
  np.testing.assert_array_equal(np.asarray(out[0]), [0.0, 2.0, 4.0])
  traced = jax.jit(lambda x, y: _special.apply_xp(fn, x, y, scale=2.0))(jnp.arange(3.0), jnp.ones(3))
  assert seen[-1] is jnp
  np.testing.assert_array_equal(np.asarray(traced[0]), [1.0, 3.0, 5.0])
  grad = jax.grad(lambda x: _special.apply_xp(fn, x, None, scale=2.0)[1])(jnp.arange(3.0))
  np.testing.assert_array_equal(np.asarray(grad), [1.0, 1.0, 1.0])
