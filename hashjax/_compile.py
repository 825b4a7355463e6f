"""``jit`` for the search and histogram kernels: ``jax.jit`` with cheaper XLA:CPU compilation.

XLA:CPU emits each fused kernel with its MLIR fusion emitters by default. For
the knn scan and selection, the radius prefilter, the bit planes and the
bit-sliced histogram kernel, the classic loop emitters
(``xla_cpu_use_fusion_emitters=False``) compile in less time (measured on this
project's 2-core machine, one process, the two variants alternating: knn at 32
/ 64 / 128 bits ran in 0.223 / 0.335 / 0.705 s against 0.225 / 0.356 / 0.732 s
best of 5, and compiling its selection took 0.145 against 0.168 s). The
bit-sliced histogram kernel (a chunk of 32 queries against 100,000 labelled
items) compiled in 0.18 / 0.25 / 0.25 s against 0.25 / 0.25 / 0.33 s at 32 /
64 / 128 bits, and 1,024 queries ran 1.0x to 1.3x slower (33 / 94 / 181 ms
against 26 / 90 / 139 ms): a trade taken for the compile-time target. The
options are per function, so nothing else in the caller's process changes,
and they apply only when jax's default backend is the CPU (other backends
compile these functions with plain ``jax.jit``). A jaxlib that does not know
them rejects the first compilation, after which every function here compiles
without them. Only kernels measured both ways use them: the scatter-add
histograms (one loop of one query or row per block) compiled in 40 to 55%
less time with the classic emitters but ran 1.5x to 2.3x slower (from
distances: 2.6 to 2.8 against 1.1 to 1.9 ns per pair; fused from codes: 2.9
to 3.5 against 1.5 to 1.7; one core, three alternating rounds), so they keep
``jax.jit``.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax

try:  # True outside any trace: compiler options apply to top-level jits only
  from jax._src.core import trace_state_clean as _top_level  # pylint: disable=g-import-not-at-top
except ImportError:  # pragma: no cover (other jax versions)
  _top_level = None

_OPTIONS = {"xla_cpu_use_fusion_emitters": False}
_rejected = [False]  # set once a jaxlib refuses the option


def _nested(args, kwargs) -> bool:
  """True inside a trace (a caller's ``jit``, ``vmap``, ...)."""
  if _top_level is not None:
    return not _top_level()
  return any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves((args, kwargs)))


def _is_rejection(error: Exception) -> bool:
  return "No such compile option" in str(error)


def _options_apply() -> bool:
  """The options are for XLA:CPU (``xla_backend_optimization_level`` would also reach a GPU's LLVM)."""
  return not _rejected[0] and jax.default_backend() == "cpu"


class _Jitted:
  """A jitted function compiled with its options on XLA:CPU while the jaxlib accepts them."""

  def __init__(self, fun: Callable, jit_kwargs: dict, options: dict):
    self._fast = jax.jit(fun, compiler_options=options, **jit_kwargs)
    self._plain = jax.jit(fun, **jit_kwargs)
    functools.update_wrapper(self, fun)

  def _active(self):
    return self._fast if _options_apply() else self._plain

  def _with_options(self, use: Callable[[Any], Any]):
    """``use(jitted)`` with the options while the jaxlib accepts them, else with plain ``jax.jit``."""
    if _options_apply():
      try:
        return use(self._fast)
      except Exception as e:  # pylint: disable=broad-except
        if not _is_rejection(e):
          raise
        _rejected[0] = True
    return use(self._plain)

  def __call__(self, *args, **kwargs):
    if _nested(args, kwargs):  # inlined into the caller's program, compiled with the caller's options
      return self._plain(*args, **kwargs)
    return self._with_options(lambda f: f(*args, **kwargs))

  def precompile(self, *args, **kwargs) -> None:
    """Compiles for these arguments now, as their first call would, without running anything.

    jax shares the compilation with a later call whose arguments match exactly:
    the same shapes and dtypes, weak types (a Python ``int`` is not an
    ``np.int32``), committed placement (``jax.device_put(x, device)`` is not
    ``jax.device_put(x)`` or a numpy array) and x64 mode; otherwise that call
    compiles again. A caller that dispatches other work before its first call
    can compile first, so that the compilation does not compete for the CPU
    with that work (see :func:`hashjax.search.knn`). Inside a trace it does
    nothing: the function is inlined into the caller's program.
    """
    if not _nested(args, kwargs):
      self._with_options(lambda f: f.lower(*args, **kwargs).compile())

  def lower(self, *args, **kwargs):
    return self._active().lower(*args, **kwargs)

  def trace(self, *args, **kwargs):
    return self._active().trace(*args, **kwargs)

  def _cache_size(self) -> int:
    return self._active()._cache_size()  # pylint: disable=protected-access


def jit(fun: Callable = None, *, optimize: bool = True, **jit_kwargs: Any):
  """``jax.jit(fun, **jit_kwargs)`` compiled with :data:`_OPTIONS`; also a decorator factory.

  ``optimize=False`` also turns off LLVM's optimisation passes
  (``xla_backend_optimization_level=0``): for programs of small arrays whose
  compilation costs more than they run (the knn selection: 0.045 to 0.065 s
  against 0.076 to 0.097 s to compile, knn 6 to 12% slower).

  >>> import jax.numpy as jnp
  >>> double = jit(lambda x: 2 * x)
  >>> double(jnp.arange(3)).tolist()
  [0, 2, 4]
  """
  options = dict(_OPTIONS) if optimize else dict(_OPTIONS, xla_backend_optimization_level=0)
  if fun is None:
    return lambda f: _Jitted(f, jit_kwargs, options)
  return _Jitted(fun, jit_kwargs, options)
