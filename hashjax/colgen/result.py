r"""What column generation returns: the hash functions, their weights after every bit, and the per-bit record.

Column generation adds one bit per iteration and re-solves the weights, so the model after ``r`` bits is the
first ``r`` hash functions with the weights of iteration ``r``: :func:`prefix` cuts a longer run down to it (a
64-bit run also gives its 16- and 32-bit models, exactly as a 16-bit run would have).
"""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple

import numpy as np

from hashjax import _checks
from hashjax.colgen.features import HashParams

__all__ = ["ColgenResult", "prefix"]


class ColgenResult(NamedTuple):
  """A trained column-generation hash: ``params`` (:class:`~hashjax.colgen.features.HashParams` of ``b`` bits),
  ``bit_weights float64[b] >= 0``, ``weight_path`` (``b`` arrays: the weights after bit 1, 2, ..., ``b``),
  ``train_bits uint8[n, b]``, ``history`` (one dict per bit: timings, violation, iterations), ``stop_reason``
  (``"num_bits"``, ``"no violation"`` or ``"degenerate"``) and ``info`` (settings and sizes)."""
  params: HashParams
  bit_weights: np.ndarray
  weight_path: List[np.ndarray]
  train_bits: np.ndarray
  history: List[Dict[str, Any]]
  stop_reason: str
  info: Dict[str, Any]

  @property
  def num_bits(self) -> int:
    """The bits learned."""
    return int(self.bit_weights.shape[0])


def prefix(result: ColgenResult, num_bits: int) -> ColgenResult:
  r"""The model of the first ``num_bits`` iterations of ``result``.

  .. math:: (h_1, \dots, h_r;\ w^{(r)})

  Raises a ValueError naming ``num_bits`` when the run learned fewer bits.

  >>> from hashjax.colgen.features import fit_feature_map
  >>> p = fit_feature_map(np.zeros((3, 2)))._replace(projection=np.ones((2, 2)), bias=np.zeros(2))
  >>> r = ColgenResult(p, np.array([1.0, 2.0]), [np.array([3.0]), np.array([1.0, 2.0])], np.zeros((3, 2), np.uint8),
  ...                  [{}, {}], "num_bits", {})
  >>> prefix(r, 1).bit_weights.tolist()
  [3.0]
  """
  r = _checks.check_int_at_most("num_bits", num_bits, result.num_bits,
                                what=f"{result.num_bits} (the bits this run learned; it stopped: {result.stop_reason})")
  params = result.params._replace(projection=result.params.projection[:, :r], bias=result.params.bias[:r])
  return result._replace(params=params, bit_weights=np.asarray(result.weight_path[r - 1], np.float64).copy(),
                         weight_path=result.weight_path[:r], train_bits=result.train_bits[:, :r],
                         history=result.history[:r], stop_reason="num_bits" if r < result.num_bits
                         else result.stop_reason)
