"""Test-session setup shared by the suite's workers and the commands they start.

XLA's persistent compilation cache: the suite compiles the same programs in several processes (the two xdist
workers, and the README commands, command-line checks, notebook and experiments each run in a subprocess that
inherits this environment), so each program is compiled once per machine and read back elsewhere. The cache
is keyed by the program, the jax version and the flags, so a later run (or a changed program) never reads a
stale entry; a run of the suite writes about 100 MB. Set ``JAX_COMPILATION_CACHE_DIR`` yourself to move it.
"""

import os
import tempfile

os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(tempfile.gettempdir(), "hashjax-tests-xla-cache"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
