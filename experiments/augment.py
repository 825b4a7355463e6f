"""Image shifts: translations of flattened square images, the augmentation ``config.augment_shift`` asks for."""

from __future__ import annotations

import functools
from typing import Optional

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from hashjax import _checks


def check_augment_shift(config: ml_collections.ConfigDict, features: np.ndarray) -> int:
  """``config.augment_shift`` as an int ``>= 0``; a positive one needs square images (:func:`image_side`)."""
  shift = _checks.check_int("config.augment_shift", config.augment_shift, low=0)
  if shift:
    image_side(features.shape[1])
  return shift


def image_side(dim: int) -> int:
  """The side of flattened square images of ``dim`` pixels; a ValueError for other features."""
  side = int(round(dim ** 0.5))
  if side * side != dim:
    raise ValueError(f"images: expected flattened square images (for config.augment_shift > 0; set it to 0 "
                     f"for other features), got dimension {dim}")
  return side


def shift_images(images, shifts, *, max_shift: Optional[int] = None) -> jax.Array:
  """Translates square images (flattened rows) by integer ``(dy, dx)`` each, filling with 0.

  Jit-able (Nair's loss shifts inside the loss, so the training set stays
  on the device): each image is padded by ``max_shift`` pixels and a window
  cut at its offset. ``max_shift`` (static) bounds every ``|dy|, |dx|``: None
  reads it from concrete ``shifts``, concrete shifts beyond it raise, and
  traced ones are clipped to it.

  >>> x = np.arange(9, dtype=np.float32).reshape(1, 9)  # one 3 x 3 image
  >>> np.asarray(shift_images(x, np.array([[1, -1]]))).reshape(3, 3).tolist()
  [[0.0, 0.0, 0.0], [1.0, 2.0, 0.0], [4.0, 5.0, 0.0]]
  """
  side = image_side(images.shape[1])
  if max_shift is None or _checks.is_concrete(shifts):
    shifts = np.asarray(shifts)
    largest = int(np.abs(shifts).max(initial=0))
    if max_shift is not None and largest > max_shift:
      raise ValueError(f"shifts: expected offsets in [-{max_shift}, {max_shift}] (max_shift), got {largest}")
    max_shift = largest if max_shift is None else max_shift
  return _shift_images(images, shifts, int(max_shift), side)


@functools.partial(jax.jit, static_argnums=(2, 3))
def _shift_images(images, shifts, pad: int, side: int):
  padded = jnp.pad(images.reshape(-1, side, side), ((0, 0), (pad, pad), (pad, pad)))
  # Traced offsets beyond the bound become the bound, not a wrapped index.
  shifts = jnp.clip(shifts.astype(jnp.int32).reshape(images.shape[0], 2), -pad, pad)
  window = lambda img, d: jax.lax.dynamic_slice(img, (pad - d[0], pad - d[1]), (side, side))
  return jax.vmap(window)(padded, shifts).reshape(images.shape)
