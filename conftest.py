"""Test-session setup shared by the suite's workers and the commands they start.

XLA's persistent compilation cache: the suite compiles the same programs in several processes (the two xdist
workers, and the README commands, command-line checks, notebook and experiments each run in a subprocess that
inherits this environment), so each program is compiled once per machine and read back elsewhere. The cache
is keyed by the program, the jax version and the flags, so a later run (or a changed program) never reads a
stale entry; a run of the suite writes about 100 MB. Set ``JAX_COMPILATION_CACHE_DIR`` yourself to move it.

The suite on a GPU: ``pytest --gpu`` runs every test on jax's CUDA backend (``JAX_PLATFORMS=cuda``, and
``XLA_PYTHON_CLIENT_PREALLOCATE=false`` so that the workers share the GPU's memory); it stops at once if jax
finds no GPU. Tests marked ``cpu_only(reason)`` hold only on the CPU backend and are skipped on
any other, with their reason. Subprocesses that force 8 CPU host devices set ``JAX_PLATFORMS=cpu`` themselves,
so they run on the CPU beside the GPU.
"""

import os
import tempfile

import pytest

os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(tempfile.gettempdir(), "hashjax-tests-xla-cache"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")


def pytest_addoption(parser):
  parser.addoption("--gpu", action="store_true", default=False,
                   help="run the tests on jax's CUDA backend (JAX_PLATFORMS=cuda, no memory preallocation)")


def pytest_configure(config):
  config.addinivalue_line("markers", "cpu_only(reason): holds only on jax's CPU backend; skipped on others")
  if config.getoption("gpu"):
    os.environ["JAX_PLATFORMS"] = "cuda"
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    import jax  # pylint: disable=g-import-not-at-top
    jax.config.update("jax_platforms", "cuda")  # in case jax was imported before the variable was set
    try:
      jax.devices("cuda")
    except (RuntimeError, AssertionError) as e:  # (jax asserts when no backend at all starts)
      raise pytest.UsageError(f"--gpu: jax's CUDA backend found no GPU (jax installed with CUDA support, as by "
                              f"`pip install jax[cuda12]`, and a GPU are needed) {e}".strip()) from None


def pytest_collection_modifyitems(config, items):
  del config
  marked = [item for item in items if item.get_closest_marker("cpu_only")]
  if not marked:
    return
  import jax  # pylint: disable=g-import-not-at-top
  backend = jax.default_backend()
  if backend == "cpu":
    return
  for item in marked:
    marker = item.get_closest_marker("cpu_only")
    reason = marker.kwargs.get("reason", marker.args[0] if marker.args else "")
    item.add_marker(pytest.mark.skip(reason=f"holds on the CPU backend only, not on {backend}: {reason}"))
