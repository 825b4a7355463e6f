"""Which XLA programs a block of code compiles, read from jax's monitoring events (for the compile tests)."""

import contextlib

import jax


@contextlib.contextmanager
def compiled_programs():
  """Yields a list that collects the name (``jit(f)``) of every program compiled inside the block."""
  names = []

  def listener(event, duration, **kwargs):
    del duration
    if event.endswith("backend_compile_duration"):
      names.append(kwargs.get("fun_name"))

  jax.monitoring.register_event_duration_secs_listener(listener)
  try:
    yield names
  finally:
    jax.monitoring.unregister_event_duration_listener(listener)
