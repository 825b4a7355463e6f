r"""Encoding whose codes never depend on the batch or the backend's default precision.

Every function that turns features into codes (:func:`hashjax.mappings.encode`, the baselines' ``project`` and
``encode``, :func:`hashjax.colgen.features.hash_bits`, and :meth:`hashjax.models.Model.encode` through them) runs
its per-row computation through :func:`blockwise`, and computes its matrix products with :func:`matmul`:

* :func:`matmul` multiplies at ``jax.lax.Precision.HIGHEST``, full float32 (a GPU's default for float32
  products is TF32, whose 10-bit mantissa moves a logit near 0 to the other side);
* :func:`blockwise` feeds the rows to the computation in blocks of exactly :data:`BLOCK_ROWS` rows (the last one
  padded with zero rows), so every call runs the very same compiled program on the same shapes. A GPU picks its
  matrix-product kernel, and with it the order in which a row's sums accumulate, by the shapes; with one shape,
  a row's result depends on that row alone.

So the same features give bit-identical codes however they are batched (one row at a time, in any chunks, or
all at once). The guarantee holds for concrete inputs; under an outer ``jax.jit`` the caller's whole program
is compiled together and XLA may choose differently.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks

#: Rows of every block :func:`blockwise` computes.
BLOCK_ROWS = 256


def matmul(a: Any, b: Any) -> jax.Array:
  """``a @ b`` in full float32 (``Precision.HIGHEST``), whatever the backend's default precision."""
  return jnp.matmul(a, b, precision=jax.lax.Precision.HIGHEST)


def blockwise(block_fn: Callable[[Any], Any], features: Any) -> Any:
  r"""``block_fn`` applied to ``features[..., dim]`` in fixed blocks of :data:`BLOCK_ROWS` rows.

  .. math:: y_{n} = g(X_{[B \lfloor n / B \rfloor, \, B \lfloor n / B \rfloor + B)})_{n \bmod B}

  ``block_fn`` maps ``x[BLOCK_ROWS, dim]`` to ``y[BLOCK_ROWS, ...]`` row by row (a jitted jax function, or a
  numpy one). Concrete features are cut into blocks on the host (the last padded with zero rows) and each block
  is one call of ``block_fn``; traced features are padded and mapped block by block with ``jax.lax.map``.

  Returns:
    ``y[..., ...]``: the leading axes of ``features`` followed by the trailing axes of ``block_fn``'s output, a
    numpy array for concrete features (wrap it with ``_checks.as_jax`` for a jax one), a tracer otherwise.

  >>> blockwise(lambda x: x.sum(-1, keepdims=True), np.ones((2, 3, 4))).tolist()
  [[[4.0], [4.0], [4.0]], [[4.0], [4.0], [4.0]]]
  """
  lead, dim = tuple(features.shape[:-1]), features.shape[-1]
  n = int(np.prod(lead, dtype=np.int64))
  num_blocks = max(-(-n // BLOCK_ROWS), 1)
  pad = num_blocks * BLOCK_ROWS - n
  if not _checks.is_concrete(features):
    x = jnp.reshape(features, (n, dim))
    x = jnp.concatenate([x, jnp.zeros((pad, dim), x.dtype)]).reshape(num_blocks, BLOCK_ROWS, dim)
    y = jax.lax.map(block_fn, x)
    y = y.reshape((num_blocks * BLOCK_ROWS,) + y.shape[2:])[:n]
    return y.reshape(lead + y.shape[1:])
  x = np.asarray(features).reshape(n, dim)
  outs = []
  for start in range(0, num_blocks * BLOCK_ROWS, BLOCK_ROWS):
    block = x[start:start + BLOCK_ROWS]
    if block.shape[0] < BLOCK_ROWS:
      block = np.concatenate([block, np.zeros((BLOCK_ROWS - block.shape[0], dim), x.dtype)])
    outs.append(block_fn(block))
  y = np.concatenate([np.asarray(o) for o in jax.device_get(outs)])[:n]
  return y.reshape(lead + y.shape[1:])
