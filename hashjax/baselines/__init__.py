r"""Unsupervised hashing baselines: LSH, PCA (PCAH), ITQ, spectral hashing and isotropic hashing (IsoHash).

Each method is a module with two pure functions,

* ``fit(features[N, dim], *, num_bits, key) -> params`` (a NamedTuple of
  arrays, including the training ``mean`` used for centring), and
* ``encode(params, features[..., dim]) -> bits uint8[..., num_bits]`` in
  ``{0, 1}`` (``bit = 1`` iff the real-valued output is ``> 0``, the
  convention of :func:`hashjax.codes.binarize`),

and :data:`BASELINES` maps a short name to its module. PCA, SH and IsoHash
are deterministic and ignore ``key``; LSH and ITQ require one. PCA, ITQ and
IsoHash keep ``num_bits`` principal directions, so they need
``num_bits <= dim``.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Optional

import jax

from hashjax.baselines import isohash, itq, lsh, pca, spectral
from hashjax.baselines.isohash import IsoHashParams
from hashjax.baselines.itq import ITQParams
from hashjax.baselines.lsh import LSHParams
from hashjax.baselines.pca import PCAParams
from hashjax.baselines.spectral import SpectralParams

Array = jax.Array

#: Name -> module with ``fit`` and ``encode``.
BASELINES = {"lsh": lsh, "pca": pca, "itq": itq, "sh": spectral, "iso": isohash}

__all__ = ["BASELINES", "fit", "encode", "project", "lsh", "pca", "itq", "spectral", "isohash",
           "LSHParams", "PCAParams", "ITQParams", "SpectralParams", "IsoHashParams"]


def _module(method: Any) -> ModuleType:
  if not isinstance(method, str) or method not in BASELINES:
    raise ValueError(f"method: expected one of {sorted(BASELINES)}, got {method!r}")
  return BASELINES[method]


def fit(method: str, features: Array, *, num_bits: int, key: Optional[Any] = None, **options: Any):
  r"""Fits the baseline named ``method`` (a key of :data:`BASELINES`).

  .. math:: \theta = \mathrm{fit}_{method}(X; b, key)

  Args:
    method: ``"lsh"``, ``"pca"``, ``"itq"``, ``"sh"`` or ``"iso"``.
    features: ``[N, dim]`` finite training features.
    num_bits: code length.
    key: a ``jax.random`` key (required by ``"lsh"`` and ``"itq"``).
    **options: extra keyword options of that method (e.g. ``num_iters`` for
      ITQ, ``solver`` for IsoHash).

  Returns:
    The method's params NamedTuple.

  >>> import jax, numpy as np
  >>> x = np.random.default_rng(0).normal(size=(50, 6)).astype(np.float32)
  >>> type(fit("itq", x, num_bits=4, key=jax.random.key(0))).__name__
  'ITQParams'
  """
  return _module(method).fit(features, num_bits=num_bits, key=key, **options)


def encode(method: str, params: Any, features: Array) -> Array:
  r"""Encodes ``features`` with the baseline named ``method``.

  .. math:: b = \mathrm{encode}_{method}(\theta, x) \in \{0, 1\}^{b}

  The rows are computed in fixed blocks in full float32 (as :func:`project`), so the same features give the
  same bits in any batch, one row at a time or all at once, on a CPU or a GPU.

  Args:
    method: ``"lsh"``, ``"pca"``, ``"itq"``, ``"sh"`` or ``"iso"``.
    params: params from :func:`fit` with the same ``method``.
    features: ``[..., dim]`` finite features.

  Returns:
    ``uint8[..., num_bits]`` bits in ``{0, 1}``.

  >>> import jax, numpy as np
  >>> x = np.random.default_rng(0).normal(size=(50, 6)).astype(np.float32)
  >>> params = fit("sh", x, num_bits=12)
  >>> encode("sh", params, x).shape
  (50, 12)
  """
  return _module(method).encode(params, features)


def project(method: str, params: Any, features: Array) -> Array:
  r"""The real values whose signs are the bits of :func:`encode` (WhRank reads their spread).

  .. math:: v = \mathrm{project}_{method}(\theta, x), \qquad b = [v > 0]

  Args:
    method: ``"lsh"``, ``"pca"``, ``"itq"``, ``"sh"`` or ``"iso"``.
    params: params from :func:`fit` with the same ``method``.
    features: ``[..., dim]`` finite features.

  Returns:
    ``float[..., num_bits]``.

  >>> import jax, numpy as np
  >>> x = np.random.default_rng(0).normal(size=(50, 6)).astype(np.float32)
  >>> params = fit("itq", x, num_bits=4, key=jax.random.key(0))
  >>> bool(np.array_equal(np.asarray(project("itq", params, x)) > 0, np.asarray(encode("itq", params, x)) == 1))
  True
  """
  return _module(method).project(params, features)
