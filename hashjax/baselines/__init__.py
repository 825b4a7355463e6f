r"""Hashing baselines: the unsupervised LSH, PCA (PCAH), ITQ, spectral hashing, multidimensional spectral hashing,
IsoHash, spherical hashing, anchor graph hashing and self-taught hashing, and the supervised KSH, SDH, COSDISH,
FastHash, BRE, SPLH and MACHash.

Each method is a module with three pure functions,

* ``fit(features[N, dim], *, num_bits, key, [labels,] **options) -> params`` (a NamedTuple of arrays whose first
  field is the training ``mean``), on the host in float64 (through :func:`fit`, with one BLAS thread) so that
  codes do not depend on the thread count;
  the supervised methods (:data:`SUPERVISED`) take the training items' class ``labels[N]``,
* ``encode(params, features[..., dim]) -> bits uint8[..., num_bits]`` in ``{0, 1}`` (``bit = 1`` iff the
  real-valued output is ``> 0``, the convention of :func:`hashjax.codes.binarize`), and
* ``project(params, features[..., dim]) -> float[..., num_bits]``, the values whose signs are the bits,

and :data:`BASELINES` maps a short name to its module. PCA, SH, MDSH, IsoHash and STH are deterministic and ignore
``key``; LSH, ITQ, KSH, SDH, BRE and SPLH require one; COSDISH, FastHash, MACHash, spherical hashing and AGH use
``jax.random.key(0)`` when it is None. PCA, ITQ and IsoHash keep ``num_bits`` principal directions, so they need
``num_bits <= dim``.
"""

from __future__ import annotations

import inspect
from types import ModuleType
from typing import Any, Optional

import jax

from hashjax import _checks
from hashjax.baselines import _common
from hashjax.baselines import (agh, bre, cosdish, fasthash, isohash, itq, ksh, lsh, machash, mdsh, pca, sdh, spectral,
                               spherical, splh, sth)
from hashjax.baselines.agh import AGHParams
from hashjax.baselines.bre import BREParams
from hashjax.baselines.cosdish import CosdishParams
from hashjax.baselines.fasthash import FastHashParams
from hashjax.baselines.isohash import IsoHashParams
from hashjax.baselines.itq import ITQParams
from hashjax.baselines.ksh import KSHParams
from hashjax.baselines.lsh import LSHParams
from hashjax.baselines.machash import MACHashParams
from hashjax.baselines.mdsh import MDSHParams
from hashjax.baselines.pca import PCAParams
from hashjax.baselines.sdh import SDHParams
from hashjax.baselines.spectral import SpectralParams
from hashjax.baselines.spherical import SphericalParams
from hashjax.baselines.splh import SPLHParams
from hashjax.baselines.sth import STHParams

Array = jax.Array

#: Name -> module with ``fit`` and ``encode``.
BASELINES = {"lsh": lsh, "pca": pca, "itq": itq, "sh": spectral, "mdsh": mdsh, "iso": isohash, "sph": spherical,
             "agh": agh, "sth": sth, "ksh": ksh, "sdh": sdh, "cosdish": cosdish, "fasthash": fasthash, "bre": bre,
             "splh": splh, "machash": machash}

#: Name -> the training items its ``fit`` needs with its default anchors (one anchor per item at most).
MIN_TRAIN_ITEMS = {"agh": agh.DEFAULT_NUM_ANCHORS, "ksh": ksh.DEFAULT_NUM_ANCHORS, "sdh": sdh.DEFAULT_NUM_ANCHORS,
                   "cosdish": cosdish.DEFAULT_NUM_ANCHORS, "fasthash": fasthash.DEFAULT_NUM_ANCHORS,
                   "bre": bre.DEFAULT_NUM_ANCHORS, "machash": machash.DEFAULT_NUM_ANCHORS}

#: The methods whose ``fit`` learns from class labels (``labels=``).
SUPERVISED = ("ksh", "sdh", "cosdish", "fasthash", "bre", "splh", "machash")

#: Name -> the params NamedTuple of its ``fit``.
PARAMS = {"lsh": LSHParams, "pca": PCAParams, "itq": ITQParams, "sh": SpectralParams, "mdsh": MDSHParams,
          "iso": IsoHashParams, "sph": SphericalParams, "agh": AGHParams, "sth": STHParams, "ksh": KSHParams,
          "sdh": SDHParams, "cosdish": CosdishParams, "fasthash": FastHashParams, "bre": BREParams,
          "splh": SPLHParams, "machash": MACHashParams}

__all__ = ["BASELINES", "SUPERVISED", "PARAMS", "MIN_TRAIN_ITEMS", "fit", "encode", "project", "lsh", "pca", "itq",
           "spectral", "mdsh", "isohash", "spherical", "agh", "sth", "ksh", "sdh", "cosdish", "fasthash", "bre",
           "splh", "machash", "LSHParams", "PCAParams", "ITQParams", "SpectralParams", "MDSHParams", "IsoHashParams",
           "SphericalParams", "AGHParams", "STHParams", "KSHParams", "SDHParams", "CosdishParams", "FastHashParams",
           "BREParams", "SPLHParams", "MACHashParams"]


def _module(method: Any) -> ModuleType:
  return BASELINES[_checks.check_option("method", method, sorted(BASELINES))]


def fit(method: str, features: Array, *, num_bits: int, key: Optional[Any] = None, labels: Optional[Any] = None,
        **options: Any):
  r"""Fits the baseline named ``method`` (a key of :data:`BASELINES`).

  .. math:: \theta = \mathrm{fit}_{method}(X; b, key[, y])

  The fit runs with one BLAS thread (:func:`hashjax.baselines._common.single_threaded_blas`), so its codes do
  not depend on the thread count.

  Args:
    method: a key of :data:`BASELINES`.
    features: ``[N, dim]`` finite training features.
    num_bits: code length.
    key: a ``jax.random`` key (required by LSH, ITQ, KSH, SDH, BRE and SPLH).
    labels: ``int[N]`` class labels of the training items: required by the supervised methods
      (:data:`SUPERVISED`), refused by the others.
    **options: extra keyword options of that method (e.g. ``num_iters`` for
      ITQ, ``solver`` for IsoHash).

  Returns:
    The method's params NamedTuple.

  >>> import jax, numpy as np
  >>> x = np.random.default_rng(0).normal(size=(50, 6)).astype(np.float32)
  >>> type(fit("itq", x, num_bits=4, key=jax.random.key(0))).__name__
  'ITQParams'
  """
  module = _module(method)
  if method not in SUPERVISED and labels is not None:
    raise ValueError(f"labels: {method!r} is unsupervised and takes no labels (supervised: {list(SUPERVISED)}), "
                     f"got {_checks.desc(labels)}")
  known = [p for p in inspect.signature(module.fit).parameters if p not in ("features", "num_bits", "key", "labels")]
  unknown = sorted(set(options) - set(known))
  if unknown:
    raise ValueError(f"options: {method!r} has no option {', '.join(unknown)} (its options: {', '.join(known)})")
  supervision = {"labels": labels} if method in SUPERVISED else {}
  with _common.single_threaded_blas():
    return module.fit(features, num_bits=num_bits, key=key, **supervision, **options)


def encode(method: str, params: Any, features: Array) -> Array:
  r"""Encodes ``features`` with the baseline named ``method``.

  .. math:: b = \mathrm{encode}_{method}(\theta, x) \in \{0, 1\}^{b}

  The rows are computed in fixed blocks in full float32 (as :func:`project`), so the same features give the
  same bits in any batch, one row at a time or all at once, on a CPU or a GPU.

  Args:
    method: a key of :data:`BASELINES`.
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
    method: a key of :data:`BASELINES`.
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
