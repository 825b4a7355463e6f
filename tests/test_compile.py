"""hashjax._compile: the kernels' jit wrapper (compiler options, nesting, fallback)."""

import jax
import jax.numpy as jnp
import numpy as np

from compile_events import compiled_programs
from hashjax import _compile


def test_top_level_and_nested_calls_give_jax_jit_results():
  f = _compile.jit(lambda x, n: x * n, static_argnames="n")
  x = np.arange(5, dtype=np.int32)
  np.testing.assert_array_equal(np.asarray(f(x, n=3)), x * 3)
  outer = jax.jit(lambda x: f(x, n=2) + 1)  # nested: inlined, no options of its own
  np.testing.assert_array_equal(np.asarray(outer(x)), x * 2 + 1)
  np.testing.assert_array_equal(np.asarray(jax.vmap(lambda v: f(v, n=4))(x)), x * 4)
  assert f._cache_size() == 1
  assert f.lower(x, n=3).compile()(x).tolist() == (x * 3).tolist()


def test_a_jaxlib_rejecting_the_option_gets_plain_jit(monkeypatch):
  monkeypatch.setattr(_compile, "_OPTIONS", {"xla_hashjax_no_such_option": True})
  monkeypatch.setattr(_compile, "_rejected", [False])
  f = _compile.jit(lambda x: x + 1)
  assert f(jnp.int32(1)) == 2
  assert _compile._rejected[0]
  g = _compile.jit(lambda x: x - 1)  # later functions skip the option at once
  assert g(jnp.int32(1)) == 0


def test_other_errors_propagate(monkeypatch):
  monkeypatch.setattr(_compile, "_rejected", [False])
  f = _compile.jit(lambda x: x.reshape(7))
  try:
    f(jnp.zeros(3))
  except TypeError as e:
    assert "reshape" in str(e)
  else:
    raise AssertionError("expected the reshape error")
  assert not _compile._rejected[0]


def test_other_backends_compile_without_the_options(monkeypatch):
  monkeypatch.setattr(_compile, "_rejected", [False])
  f = _compile.jit(lambda x: x * 3, optimize=False)
  assert f._active() is f._fast  # this machine: the CPU
  monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
  assert f._active() is f._plain
  assert f(jnp.int32(2)) == 6
  assert f._fast._cache_size() == 0 and f._plain._cache_size() == 1


def test_precompile_shares_the_compilation_with_the_call():
  f = _compile.jit(lambda x, n: x * n + 1, static_argnames="n")
  x = np.arange(7, dtype=np.int32)
  with compiled_programs() as compiled:
    f.precompile(x, n=5)
    assert len(compiled) == 1
    np.testing.assert_array_equal(np.asarray(f(x, n=5)), x * 5 + 1)
    assert len(compiled) == 1  # the call found the program compiled
    jax.jit(lambda v: f.precompile(v, n=5) or v)(x)  # inside a trace: nothing of its own
    assert len(compiled) == 2  # (the outer jit's program only)


def test_precompile_falls_back_to_plain_jit(monkeypatch):
  monkeypatch.setattr(_compile, "_OPTIONS", {"xla_hashjax_no_such_option": True})
  monkeypatch.setattr(_compile, "_rejected", [False])
  f = _compile.jit(lambda x: x + 2)
  with compiled_programs() as compiled:
    f.precompile(jnp.int32(1))
    assert _compile._rejected[0]
    done = len(compiled)
    assert f(jnp.int32(1)) == 3
    assert len(compiled) == done  # the plain jit's compilation, shared with the call
