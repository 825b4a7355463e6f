"""Checked inputs of :mod:`hashjax.metrics`: a histogram, or distances and labels to be counted into one.

Each public function of :mod:`hashjax.metrics.histogram` applies its formula
through :func:`evaluate`, which checks the formula's options (:func:`check_options`, each rule once) and the
histogram ``hist[..., B, V]``, or takes the :class:`Counting` that :func:`counting` returns once it has checked
the inputs of a function of :mod:`hashjax.metrics.distances`: Hamming distances are counted into their
histogram, real-valued ones into their tie groups.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple, Optional

import jax.numpy as jnp
import numpy as np

from hashjax import _checks
from hashjax import _special
from hashjax import _ties
from hashjax import histograms


class Counting(NamedTuple):
  """Validated inputs of a distance-level metric, counted into ``hist`` once its options are checked."""
  distances: Any
  levels: Any
  num_bits: Optional[int]
  num_levels: Optional[int]
  where: Any


#: The rule of each option the formulas share, by name: a rank cutoff ``k`` (an int >= 1, or None: none), the
#: result ``dtype`` and a Hamming ``radius`` (an int >= 0). Options not named here are the formulas' own.
_OPTIONS = {"k": _checks.check_cutoff, "dtype": _checks.check_float_dtype,
            "radius": functools.partial(_checks.check_int, "radius", low=0)}


def check_options(**options) -> dict:
  """``options`` with those :data:`_OPTIONS` names checked and converted by its rule."""
  return {name: _OPTIONS[name](value) if name in _OPTIONS else value for name, value in options.items()}


def evaluate(formula, hist, name="hist", **options):
  """``formula(hist, **options)`` of checked options and a checked histogram (or of the one a :class:`Counting`
  counts)."""
  options = check_options(**options)
  if isinstance(hist, Counting) and hist.num_bits is None:
    return _ties.apply_to_groups(formula, hist.distances, hist.levels, hist.where, num_levels=hist.num_levels,
                                 **options)
  if isinstance(hist, Counting):
    hist = histograms.distance_histogram(hist.distances, hist.levels, num_bits=hist.num_bits,
                                         num_levels=hist.num_levels, where=hist.where)
  else:
    _checks.check_histogram(name, hist)
  return _special.apply_xp(formula, hist, **options)


def counting(kind, distances, labels, *, num_bits, where, option=None, real=False) -> Counting:
  """Validates a distance-level metric's inputs; ``kind`` names what ``labels`` hold (``"relevance"``,
  ``"affinity"`` with ``option`` = ``num_levels``, ``"db_labels"`` with ``option`` = ``num_classes``, or None).
  With ``real`` and ``num_bits=None``, ``distances`` are real values whose tie groups are the bins."""
  if real and num_bits is None:
    _checks.check_real_distances(distances)
  else:
    num_bits = _checks.check_hamming_distances(distances, _checks.check_num_bits(num_bits))
  num_levels = None
  if kind == "relevance":
    _checks.check_int_range("relevance", labels, 0, 1, what="relevance labels", shape=distances.shape, like="distances")
    num_levels = 2
  elif kind == "affinity":
    num_levels = _checks.check_gain_levels(histograms.num_levels_of(labels, option))
    _checks.check_shape("affinity", labels, distances.shape, like="distances")
  elif kind == "db_labels":
    num_levels = _checks.check_int("num_classes", option)
    _checks.check_int_range("db_labels", labels, 0, num_levels - 1, what="class labels")
    _checks.check_shape("db_labels", labels, distances.shape[-1:], like="the last axis of distances")
    xp = np if _checks.is_concrete(labels) and _checks.is_concrete(distances) else jnp
    labels = xp.broadcast_to(xp.asarray(labels, np.int32), distances.shape)  # every query's row
  _checks.check_mask("where", where, distances.shape, like="distances")
  return Counting(distances, labels, num_bits, num_levels, where)
