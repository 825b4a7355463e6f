r"""Tie-aware learning to rank objectives (TALR, He et al. 2018, Sec. 4).

An objective is a pure ``loss_fn(params, batch, step) -> (loss, aux)`` built
from three parts passed in, so that swapping one is an argument, not a code
change:

* a hash mapping (:mod:`hashjax.mappings`) whose logits are relaxed to
  ``phi = 2 sigmoid(alpha f) - 1`` (eq. 6, :func:`hashjax.relaxations.relax`);
* a relaxed distance (``"relaxed_hamming"``, eq. 5; ``"nair_hamming"``, Nair
  et al. eq. 2; ``"squared_euclidean"``), each valued in ``[0, num_bits]``;
* a relaxed metric of a soft histogram ``hist[..., num_bits + 1, V] -> [...]``
  (:func:`hashjax.relaxations.relaxed_ap`, :func:`~hashjax.relaxations.relaxed_ndcg`,
  or any function of that signature).

The loss is minus the metric, averaged over the queries that have a relevant
item (a query with none has an undefined AP/NDCG and no gradient).

Two retrieval settings:

* :func:`query_vs_rest`: every item of a minibatch of ``M`` is a query against
  the other ``M - 1`` (He et al. Sec. 4.2); ``batch = {"features": [M, dim],
  "affinity": int[M, M]}``;
* :func:`query_vs_database`: queries against a sampled set of database items;
  ``batch = {"features": [M, dim], "db_features": [N, dim], "affinity": int[M, N]}``.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Union

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks, mappings, relaxations

Array = jax.Array
Schedule = Union[float, Callable[[Array], Array]]

#: Relaxed distances by name: ``(phi_query[Q, b], phi_items[N, b]) -> [Q, N]`` in ``[0, b]``,
#: for relaxed codes ``phi`` in ``[-1, 1]``. Nair's score and the squared Euclidean distance
#: read the ``[0, 1]`` codes ``h = (phi + 1) / 2 = sigmoid(alpha f)`` (Nair et al. eq. 1).
DISTANCES = {
    "relaxed_hamming": relaxations.relaxed_hamming,
    "nair_hamming": lambda q, x: relaxations.nair_hamming((q + 1) / 2, (x + 1) / 2),
    "squared_euclidean": lambda q, x: relaxations.squared_euclidean((q + 1) / 2, (x + 1) / 2),
}


def metric_fn(name: str, **options) -> Callable[[Array], Array]:
  r"""A relaxed metric by name: ``"ap"`` (options: ``harmonic``) or ``"ndcg"`` (``discount``).

  .. math:: m : \mathrm{hist}[\ldots, b + 1, V] \mapsto [\ldots]

  Args:
    name: ``"ap"`` (:func:`hashjax.relaxations.relaxed_ap`) or ``"ndcg"``
      (:func:`hashjax.relaxations.relaxed_ndcg`).
    **options: keyword options of that function, bound with ``functools.partial``.

  Returns:
    ``metric(hist[..., num_bits + 1, V]) -> [...]``.

  >>> import numpy as np
  >>> f = metric_fn("ap", harmonic="digamma")
  >>> round(float(f(np.array([[0., 1.], [1., 0.]]))), 6)
  1.0
  """
  if name == "ap":
    return functools.partial(relaxations.relaxed_ap, **options)
  if name == "ndcg":
    return functools.partial(relaxations.relaxed_ndcg, **options)
  raise ValueError(f"name: expected 'ap' or 'ndcg', got {name!r}")


def _distance(distance: Union[str, Callable]) -> Callable:
  if callable(distance):
    return distance
  if distance not in DISTANCES:
    raise ValueError(f"distance: expected one of {sorted(DISTANCES)} or a callable, got {distance!r}")
  return DISTANCES[distance]


def _alpha(alpha: Schedule, step: Array) -> Union[float, Array]:
  # A fixed slope stays a Python float, so relax() checks it even when the loss is traced.
  return alpha(step) if callable(alpha) else alpha


def _check_objective(metric: Any, num_bits: Any, num_levels: Any, alpha: Schedule, width: Any) -> tuple:
  """The options shared by the objectives, checked where the objective is built (the loss runs traced)."""
  _checks.check_callable("metric", metric, what="relaxed metric hist[..., num_bits + 1, V] -> [...]")
  num_bits = _checks.check_num_bits(num_bits)
  num_levels = _checks.check_int("num_levels", num_levels)
  alpha = _checks.check_schedule("alpha", alpha)
  width = _checks.check_number("width", width, low=0, low_open=True)
  return num_bits, num_levels, alpha, width


def ranking_loss(distances: Array, affinity: Array, *, metric: Callable[[Array], Array],
                 num_bits: int, num_levels: int, width: float = 1.0) -> tuple:
  r"""Minus the mean relaxed metric of real-valued distances, over queries with a relevant item.

  .. math:: L = -\frac{1}{|Q^+|} \sum_{q \in Q^+} m(\tilde h_q), \quad
            \tilde h_q = \mathrm{softhist}(\tilde d_q, a_q)

  Args:
    distances: real ``[Q, N]`` relaxed distances in ``[0, num_bits]``.
    affinity: int ``[Q, N]`` levels in ``[0, num_levels)``.
    metric: relaxed metric of a soft histogram, ``[Q, num_bits + 1, V] -> [Q]``.
    num_bits: code length.
    num_levels: ``V``.
    width: soft-histogram bin width (eq. 14's Delta).

  Returns:
    ``(loss, {"metric": mean relaxed metric, "queries": number of queries that count})``.

  >>> import numpy as np
  >>> loss, aux = ranking_loss(np.array([[0.0, 2.0]]), np.array([[1, 0]]),
  ...                          metric=metric_fn("ap"), num_bits=2, num_levels=2)
  >>> round(float(loss), 6), int(aux["queries"])
  (-1.0, 1)
  """
  hist = relaxations.soft_histogram(distances, affinity, num_bits=num_bits, num_levels=num_levels,
                                    width=width)
  return _minus_mean(metric(hist), relaxations.has_relevant(hist))


def _minus_mean(values: Array, counted: Array) -> tuple:
  """``(-mean, aux)``: minus the mean of ``values[Q]`` over the queries ``counted`` (those with a relevant item)."""
  counts = counted.astype(values.dtype)
  mean = jnp.sum(values * counts) / jnp.maximum(jnp.sum(counts), 1.0)
  return -mean, {"metric": mean, "queries": jnp.sum(counts)}


def query_vs_rest(mapping, *, metric: Callable[[Array], Array], num_bits: int, num_levels: int = 2,
                  distance: Union[str, Callable] = "relaxed_hamming", alpha: Schedule = 1.0,
                  width: float = 1.0) -> Callable:
  r"""Minibatch objective: each of ``M`` items is a query against the other ``M - 1``.

  .. math:: L(\theta) = -\frac{1}{|Q^+|} \sum_{q} m\big(\mathrm{softhist}(\{\tilde d(\phi_q, \phi_i)\}_{i \ne q})\big)

  Args:
    mapping: a module from :func:`hashjax.mappings.make_mapping`.
    metric: relaxed metric (see :func:`metric_fn`).
    num_bits: code length (the mapping's).
    num_levels: affinity levels ``V`` (2 for AP).
    distance: a name in :data:`DISTANCES` or a callable of the same signature.
    alpha: the relaxation's slope, a float ``> 0`` or a schedule ``step -> alpha``
      (e.g. :func:`hashjax.mappings.alpha_schedule` with its options bound), whose
      value at step 0 must be ``> 0``; later values run traced and are not checked.
    width: soft-histogram bin width ``> 0``.

  Raises:
    ValueError: naming the option, here rather than when the loss runs (traced
      under jit, where values cannot be checked).

  Returns:
    ``loss_fn(params, batch, step) -> (loss, aux)`` with ``batch = {"features": [M, dim],
    "affinity": int[M, M]}``.

  >>> import jax, numpy as np
  >>> from hashjax import mappings
  >>> m = mappings.make_mapping("linear", num_bits=8)
  >>> x = np.random.default_rng(0).normal(size=(6, 5)).astype(np.float32)
  >>> params = mappings.init(jax.random.key(0), m, x)
  >>> loss_fn = query_vs_rest(m, metric=metric_fn("ap"), num_bits=8)
  >>> aff = (np.arange(6)[:, None] % 2 == np.arange(6)[None] % 2).astype(np.int32)
  >>> loss, aux = loss_fn(params, {"features": x, "affinity": aff}, 0)
  >>> bool(-1.0 <= float(loss) <= 0.0)
  True
  """
  dist = _distance(distance)
  num_bits, num_levels, alpha, width = _check_objective(metric, num_bits, num_levels, alpha, width)

  def loss_fn(params, batch, step):
    phi = relaxations.relax(mappings.apply(mapping, params, batch["features"]),
                            alpha=_alpha(alpha, step))
    d = relaxations.off_diagonal(dist(phi, phi))
    a = relaxations.off_diagonal(batch["affinity"])
    return ranking_loss(d, a, metric=metric, num_bits=num_bits, num_levels=num_levels, width=width)

  return loss_fn


def query_vs_database(mapping, *, metric: Callable[[Array], Array], num_bits: int,
                      num_levels: int = 2, distance: Union[str, Callable] = "relaxed_hamming",
                      alpha: Schedule = 1.0, width: float = 1.0, cached: bool = False) -> Callable:
  r"""Objective of queries against a sampled set of database items (both through the mapping).

  .. math:: L(\theta) = -\frac{1}{|Q^+|} \sum_{q} m\big(\mathrm{softhist}(\{\tilde d(\phi_q, \phi_i)\}_{i \in S})\big)

  Args: as :func:`query_vs_rest`, and ``cached``: treat the database codes as
    constants (``stop_gradient``), as codes cached from the current parameters
    would be; the gradient then flows through the queries only.

  Returns:
    ``loss_fn(params, batch, step) -> (loss, aux)`` with ``batch = {"features": [M, dim],
    "db_features": [N, dim], "affinity": int[M, N]}``.

  >>> import jax, numpy as np
  >>> from hashjax import mappings
  >>> m = mappings.make_mapping("linear", num_bits=8)
  >>> rng = np.random.default_rng(0)
  >>> q, x = rng.normal(size=(3, 5)).astype(np.float32), rng.normal(size=(7, 5)).astype(np.float32)
  >>> params = mappings.init(jax.random.key(0), m, q)
  >>> loss_fn = query_vs_database(m, metric=metric_fn("ap"), num_bits=8)
  >>> aff = rng.integers(0, 2, size=(3, 7)).astype(np.int32)
  >>> bool(-1.0 <= float(loss_fn(params, {"features": q, "db_features": x, "affinity": aff}, 0)[0]) <= 0.0)
  True
  """
  dist = _distance(distance)
  num_bits, num_levels, alpha, width = _check_objective(metric, num_bits, num_levels, alpha, width)
  cached = _checks.check_bool("cached", cached)

  def loss_fn(params, batch, step):
    a = _alpha(alpha, step)
    phi_q = relaxations.relax(mappings.apply(mapping, params, batch["features"]), alpha=a)
    phi_x = relaxations.relax(mappings.apply(mapping, params, batch["db_features"]), alpha=a)
    if cached:
      phi_x = jax.lax.stop_gradient(phi_x)
    return ranking_loss(dist(phi_q, phi_x), batch["affinity"], metric=metric, num_bits=num_bits,
                        num_levels=num_levels, width=width)

  return loss_fn


def tie_unaware_ap(mapping, *, num_bits: int, temperature: float = 1.0,
                   distance: Union[str, Callable] = "relaxed_hamming", alpha: Schedule = 1.0) -> Callable:
  r"""Minibatch query-vs-rest objective on a tie-unaware relaxed AP: the control for TALR-AP.

  .. math:: L(\theta) = -\frac{1}{|Q^+|} \sum_{q \in Q^+}
            \mathrm{AP}_s\big(\{\tilde d(\phi_q, \phi_i)\}_{i \ne q}; \tau\big)

  The same mapping, relaxation and distance as :func:`query_vs_rest` with
  ``metric_fn("ap")``, but AP is relaxed by sigmoid ranks of the real distances
  (:func:`hashjax.relaxations.smooth_ap`) instead of a soft histogram over the
  Hamming bins: it trains for the order of the relaxed distances, blind to the
  ties the binary codes make. He et al. argue for tie-aware objectives; this
  is the objective their argument is against.

  Args:
    mapping: a module from :func:`hashjax.mappings.make_mapping`.
    num_bits: code length (the mapping's).
    temperature: the sigmoid's ``tau > 0``, in bits.
    distance: a name in :data:`DISTANCES` or a callable of the same signature.
    alpha: the relaxation's slope, as in :func:`query_vs_rest`.

  Returns:
    ``loss_fn(params, batch, step) -> (loss, aux)`` with ``batch = {"features": [M, dim],
    "affinity": int[M, M]}`` (relevant: affinity ``> 0``).

  >>> import jax, numpy as np
  >>> from hashjax import mappings
  >>> m = mappings.make_mapping("linear", num_bits=8)
  >>> x = np.random.default_rng(0).normal(size=(6, 5)).astype(np.float32)
  >>> params = mappings.init(jax.random.key(0), m, x)
  >>> aff = (np.arange(6)[:, None] % 2 == np.arange(6)[None] % 2).astype(np.int32)
  >>> loss, aux = tie_unaware_ap(m, num_bits=8)(params, {"features": x, "affinity": aff}, 0)
  >>> bool(-1.0 <= float(loss) <= 0.0), int(aux["queries"])
  (True, 6)
  """
  dist = _distance(distance)
  num_bits = _checks.check_num_bits(num_bits)
  temperature = _checks.check_number("temperature", temperature, low=0, low_open=True)
  alpha = _checks.check_schedule("alpha", alpha)

  def loss_fn(params, batch, step):
    phi = relaxations.relax(mappings.apply(mapping, params, batch["features"]), alpha=_alpha(alpha, step))
    d = relaxations.off_diagonal(dist(phi, phi))
    relevant = relaxations.off_diagonal(batch["affinity"]) > 0
    return _minus_mean(relaxations.smooth_ap(d, relevant, temperature=temperature), jnp.any(relevant, axis=-1))

  return loss_fn
