r"""RankNet and LambdaRank losses for learning bit vectors (Nair et al. 2012, Secs. 3.4-4).

A query ``q`` and its documents have sigmoid codes ``h`` in ``[0, 1]`` (eq. 1,
or logits with ``from_logits=True``); documents are ranked by the relaxed
Hamming score of eq. 2 (:func:`hashjax.relaxations.nair_hamming`)::

  s_i = sum_j h_qj (1 - h_ij) + (1 - h_qj) h_ij

RankNet (eqs. 3-4) takes every pair ``(a, b)`` of a query's list where ``a``
should rank nearer (``preference[a] > preference[b]``: same label vs other
label, relevant vs irrelevant, closer regression target), i.e. the triplets of
Sec. 3.1, with target ``T = 1``::

  P(a > b) = 1 / (1 + exp(s_a - s_b)),   C_ab = -log P(a > b) = softplus(s_a - s_b)

LambdaRank (eq. 5, Figure 3) multiplies each pair's RankNet gradient by
``|Delta S_ab|``, the change of the task score when ``a`` and ``b`` exchange
their *hard* Hamming distances. The swap matrix comes from a function the
caller passes, ``deltas_fn(distances[N], affinity[N, ...]) -> [N, N]``
(vmapped over queries): a closed form of :mod:`hashjax.objectives.swap` such
as ``functools.partial(knn_count_deltas, k=3)``, or
``lambda d, a: swap_deltas(my_score, d, a)`` for any score. As a loss:
``sum_ab stop_gradient(|Delta S_ab|) C_ab``, whose gradient is exactly that.
Options of Sec. 4, as a ``pair_mask`` from :func:`swap_mask`: swaps only among
documents of the nearest ``ceil(b / 3)`` bins (``swap_bins``,
:func:`paper_swap_bins`) and across the top-``k`` boundary (``top_bins``);
``subsample_documents`` draws the per-query lists (100 documents by default);
losses average over the queries of a batch.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks
from hashjax import relaxations
from hashjax.objectives import scores

Array = jax.Array

__all__ = [
    "ranknet_loss", "triplet_ranknet_loss", "lambdarank_loss", "lambdarank_weights",
    "preference_pairs", "swap_mask", "paper_swap_bins", "subsample_documents", "relaxed_scores",
    "hard_distances", "THRESHOLDS",
]

#: Options of ``threshold=``: how ``swap_bins`` / ``top_bins`` count bins.
THRESHOLDS = ("relative", "absolute")


# --------------------------------------------------------------------------- checks


def _check_codes(query_codes: Any, doc_codes: Any, from_logits: Any, doc_name: str = "doc_codes") -> None:
  """``query_codes[Q, B]`` and ``doc_codes[N, B]`` or ``[Q, N, B]`` (named ``doc_name``): logits, or sigmoid outputs
  in [0, 1]."""
  _checks.check_bool("from_logits", from_logits)
  what = "logits" if from_logits else "sigmoid outputs in [0, 1]"
  _checks.check_real("query_codes", query_codes, shape_doc=f"[Q, num_bits] of {what}", ndim=2)
  _checks.check_real(doc_name, doc_codes, shape_doc=f"[N, num_bits] or [Q, N, num_bits] of {what}", min_ndim=2)
  q, b = query_codes.shape
  if doc_codes.shape[:-2] not in ((), (q,)) or doc_codes.shape[-1] != b or not doc_codes.shape[-2]:
    raise ValueError(f"{doc_name}: expected shape [N, {b}] or [{q}, N, {b}] (N >= 1), got {tuple(doc_codes.shape)}")
  if not from_logits:
    for name, x in (("query_codes", query_codes), (doc_name, doc_codes)):
      _checks.check_within(name, x, 0, 1, what="sigmoid outputs (or pass from_logits=True)")


def _num_docs(query_codes, doc_codes):
  return query_codes.shape[0], doc_codes.shape[-2]


def _check_per_doc(name: str, x: Any, shape: tuple, *, what: str) -> None:
  _checks.check_real(name, x, shape_doc=f"{list(shape)} of {what}", shape=shape, like="[Q, N], one per query and doc")


# --------------------------------------------------------------------------- scores and pairs


def _probs(codes, from_logits):
  codes = jnp.asarray(codes)
  codes = codes.astype(jnp.promote_types(codes.dtype, jnp.float32))
  return jax.nn.sigmoid(codes) if from_logits else codes


def _relaxed(query_codes, doc_codes, from_logits):
  hq = _probs(query_codes, from_logits)
  hd = _probs(doc_codes, from_logits)
  if hd.ndim == 2:
    return relaxations.nair_hamming(hq, hd)
  return relaxations.nair_hamming(hq[:, None, :], hd)[:, 0, :]


def relaxed_scores(query_codes: Array, doc_codes: Array, *, from_logits: bool = False) -> Array:
  r"""Nair's eq. 2 for each query's document list.

  .. math:: \hat s_{qi} = \sum_j h_{qj} (1 - h_{ij}) + (1 - h_{qj}) h_{ij}

  Args:
    query_codes: ``[Q, num_bits]`` sigmoid outputs (or logits).
    doc_codes: ``[N, num_bits]`` shared or ``[Q, N, num_bits]`` per-query documents.
    from_logits: apply the sigmoid first.

  Returns:
    float ``[Q, N]``.

  >>> import numpy as np
  >>> relaxed_scores(np.array([[1.0, 0.5]]), np.array([[0.0, 0.5], [1.0, 0.0]])).tolist()
  [[1.5, 0.5]]
  """
  _check_codes(query_codes, doc_codes, from_logits)
  return _relaxed(query_codes, doc_codes, from_logits)


def _hard(query_codes, doc_codes, from_logits):
  cut = 0.0 if from_logits else 0.5
  bq = jnp.asarray(query_codes) > cut
  bd = jnp.asarray(doc_codes) > cut
  if bd.ndim == 2:
    diff = bq[:, None, :] != bd[None, :, :]
  else:
    diff = bq[:, None, :] != bd
  return jnp.sum(diff, axis=-1, dtype=jnp.int32)


def hard_distances(query_codes: Array, doc_codes: Array, *, from_logits: bool = False) -> Array:
  r"""Hamming distances of the rounded codes (``h > 0.5``, i.e. logit ``> 0``).

  .. math:: d_{qi} = \sum_j [\, [h_{qj} > 0.5] \ne [h_{ij} > 0.5] \,]

  Args:
    query_codes: ``[Q, num_bits]`` sigmoid outputs (or logits).
    doc_codes: ``[N, num_bits]`` or ``[Q, N, num_bits]``.
    from_logits: threshold at 0 instead of 0.5.

  Returns:
    ``int32[Q, N]``.

  >>> import numpy as np
  >>> hard_distances(np.array([[0.9, 0.2]]), np.array([[0.1, 0.3], [0.8, 0.6]])).tolist()
  [[1, 1]]
  """
  _check_codes(query_codes, doc_codes, from_logits)
  return _hard(query_codes, doc_codes, from_logits)


def _pairs(preference):
  return preference[..., :, None] > preference[..., None, :]


def preference_pairs(preference: Array) -> Array:
  r"""RankNet pairs of each query's list (Sec. 3.1): ``a`` should rank nearer than ``b``.

  .. math:: P_{ab} = [\pi_a > \pi_b]

  Args:
    preference: real ``[..., N]``: relevance, same-label indicator
      (:func:`hashjax.objectives.pair_relevance`), or ``-|t_i - t_q|`` for
      regression.

  Returns:
    ``bool[..., N, N]``.

  >>> import numpy as np
  >>> preference_pairs(np.array([1, 0, 1])).astype(int).tolist()
  [[0, 1, 0], [0, 0, 0], [0, 1, 0]]
  """
  _checks.check_real("preference", preference, shape_doc="[..., N]", min_ndim=1)
  return _pairs(jnp.asarray(preference))


def _in_bins(distances, n, threshold):
  if threshold == "relative":
    return scores.nearest_bins_mask(distances, k=n)
  return distances < n


def _swap_mask(distances, swap_bins, top_bins, threshold):
  n = distances.shape[-1]
  eligible = jnp.ones(distances.shape, bool) if swap_bins is None else _in_bins(distances, swap_bins, threshold)
  mask = eligible[..., :, None] & eligible[..., None, :]
  if top_bins is not None:
    top = _in_bins(distances, top_bins, threshold)
    mask = mask & (top[..., :, None] != top[..., None, :])
  return mask & ~jnp.eye(n, dtype=bool)


def swap_mask(distances: Array, *, swap_bins: Optional[int] = None, top_bins: Optional[int] = None,
              threshold: str = "relative") -> Array:
  r"""Which swaps LambdaRank considers (Nair Sec. 4).

  .. math:: M_{ab} = e_a e_b \, [t_a \ne t_b], \quad e_i = [d_i \in \text{nearest swap\_bins bins}],
            \; t_i = [d_i \in \text{nearest top\_bins bins}]

  Args:
    distances: int ``[..., N]`` hard Hamming distances.
    swap_bins: only documents of the nearest ``swap_bins`` bins swap (the
      paper: ``ceil(num_bits / 3)``, :func:`paper_swap_bins`); ``None``: all.
    top_bins: only swaps between a document of the nearest ``top_bins`` bins
      and one outside them (the paper: the task's ``k``); ``None``: any.
    threshold: ``"relative"``: bins count the non-empty ones (the relative
      threshold of Sec. 3.5.1); ``"absolute"``: the nearest ``n`` bins are
      distances ``0 .. n - 1``.

  Returns:
    ``bool[..., N, N]`` (symmetric, zero diagonal).

  >>> import numpy as np
  >>> swap_mask(np.array([0, 5, 9, 9]), swap_bins=2, top_bins=1).astype(int).tolist()
  [[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
  """
  _checks.check_hamming_distances(distances)
  swap_bins = _checks.check_int("swap_bins", swap_bins, low=1, allow_none=True)
  top_bins = _checks.check_int("top_bins", top_bins, low=1, allow_none=True)
  threshold = _checks.check_option("threshold", threshold, THRESHOLDS)
  return _swap_mask(jnp.asarray(distances), swap_bins, top_bins, threshold)


def paper_swap_bins(num_bits: int) -> int:
  r"""Nair's swap restriction: one third of the number of bits, rounded up.

  .. math:: n_{swap} = \lceil b / 3 \rceil

  Args:
    num_bits: the code length ``b``.

  Returns:
    int.

  >>> paper_swap_bins(32)
  11
  """
  return math.ceil(_checks.check_num_bits(num_bits) / 3)


def subsample_documents(key: Array, num_queries: int, num_documents: int, *, num_samples: int = 100,
                        query_indices: Optional[Array] = None) -> Array:
  r"""Per-query document lists drawn uniformly without replacement (Nair Sec. 4).

  .. math:: L_q \sim \mathrm{Uniform}\{S \subset [N] \setminus \{q\} : |S| = m\}

  One uniform key per (query, document) and the ``num_samples`` largest:
  ``O(num_queries * num_documents)`` work.

  Args:
    key: a ``jax.random`` key.
    num_queries: ``Q``.
    num_documents: size of the document pool ``N``.
    num_samples: documents per query ``m`` (100 in the paper).
    query_indices: optional int ``[Q]``: each query's own index in the pool,
      never drawn for it.

  Returns:
    ``int32[Q, num_samples]`` indices into the pool, distinct within a row.

  >>> import jax
  >>> idx = subsample_documents(jax.random.key(0), 2, 5, num_samples=4, query_indices=jax.numpy.array([0, 1]))
  >>> [sorted(r) for r in idx.tolist()]
  [[1, 2, 3, 4], [0, 2, 3, 4]]
  """
  _checks.check_key(key)
  for name, v in (("num_queries", num_queries), ("num_documents", num_documents)):
    _checks.check_int(name, v)
  available = num_documents - (0 if query_indices is None else 1)
  _checks.check_int_at_most("num_samples", num_samples, available, what=f"the {available} documents available")
  if query_indices is not None:
    _checks.check_int_range("query_indices", query_indices, 0, num_documents - 1, what="pool indices",
                            shape=(num_queries,), like="one pool index per query")
  return _subsample(key, int(num_queries), int(num_documents), int(num_samples),
                    None if query_indices is None else jnp.asarray(query_indices))


def _subsample(key, num_queries, num_documents, num_samples, query_indices):
  u = jax.random.uniform(key, (num_queries, num_documents))
  if query_indices is not None:
    u = u.at[jnp.arange(num_queries), query_indices].set(-1.0)
  return jax.lax.top_k(u, num_samples)[1].astype(jnp.int32)


# --------------------------------------------------------------------------- RankNet


def _pair_costs(s):
  """C_ab = -log P(a > b) = softplus(s_a - s_b), [..., N, N]."""
  return jax.nn.softplus(s[..., :, None] - s[..., None, :])


def ranknet_loss(query_codes: Array, doc_codes: Array, preference: Array, *,
                 pair_mask: Optional[Array] = None, from_logits: bool = False) -> Array:
  r"""RankNet (Nair eqs. 3-4) averaged over all preference pairs of each query's list.

  .. math:: L = \frac{1}{|\mathcal P|} \sum_{(q, a, b) \in \mathcal P}
            \log\big(1 + e^{\hat s_{qa} - \hat s_{qb}}\big), \quad
            \mathcal P = \{(q, a, b) : \pi_{qa} > \pi_{qb}\}

  Every pair is a (query, better, worse) triplet with target ``T = 1``; the
  mean runs over all triplets of the batch (0 when there is none).

  Args:
    query_codes: ``[Q, num_bits]`` sigmoid outputs (or logits).
    doc_codes: ``[N, num_bits]`` shared or ``[Q, N, num_bits]`` per-query documents.
    preference: real ``[Q, N]`` (see :func:`preference_pairs`). Only its order
      within a query matters, so negative values are valid (e.g. ``-|t_i - t_q|``).
    pair_mask: optional ``bool[Q, N, N]`` restricting the pairs.
    from_logits: codes are logits; the sigmoid is applied first.

  Returns:
    float scalar.

  >>> import numpy as np
  >>> q = np.array([[1.0, 1.0]]); x = np.array([[1.0, 1.0], [0.0, 0.0]])
  >>> round(float(ranknet_loss(q, x, np.array([[1, 0]]))), 4)  # log(1 + e^(0 - 2))
  0.1269
  """
  _check_codes(query_codes, doc_codes, from_logits)
  q, n = _num_docs(query_codes, doc_codes)
  _check_per_doc("preference", preference, (q, n), what="preferences")
  _checks.check_mask("pair_mask", pair_mask, (q, n, n), like="[Q, N, N]")
  return _ranknet(query_codes, doc_codes, jnp.asarray(preference),
                  None if pair_mask is None else jnp.asarray(pair_mask), from_logits)


def _ranknet(query_codes, doc_codes, preference, pair_mask, from_logits):
  s = _relaxed(query_codes, doc_codes, from_logits)
  pairs = _pairs(preference)
  if pair_mask is not None:
    pairs = pairs & pair_mask
  total = jnp.sum(jnp.where(pairs, _pair_costs(s), 0))
  return total / jnp.maximum(jnp.sum(pairs), 1)


def triplet_ranknet_loss(query_codes: Array, better_codes: Array, worse_codes: Array, *,
                         from_logits: bool = False) -> Array:
  r"""RankNet on explicit (query, better, worse) triplets (Nair eqs. 3-4, Sec. 3.1).

  .. math:: L = \frac{1}{T} \sum_t \log\big(1 + e^{\hat s(q_t, x^+_t) - \hat s(q_t, x^-_t)}\big)

  Args:
    query_codes: ``[T, num_bits]`` sigmoid outputs (or logits).
    better_codes: ``[T, num_bits]``: the document to rank nearer.
    worse_codes: ``[T, num_bits]``.
    from_logits: codes are logits.

  Returns:
    float scalar.

  >>> import numpy as np
  >>> round(float(triplet_ranknet_loss(np.array([[1.0, 1.0]]), np.array([[1.0, 1.0]]), np.array([[0.0, 0.0]]))), 4)
  0.1269
  """
  for name, x in (("better_codes", better_codes), ("worse_codes", worse_codes)):
    _check_codes(query_codes, x, from_logits, name)
    _checks.check_shape(name, x, query_codes.shape, like="query_codes, one per triplet")
  hq = _probs(query_codes, from_logits)
  docs = jnp.stack([_probs(better_codes, from_logits), _probs(worse_codes, from_logits)], axis=1)
  s = relaxations.nair_hamming(hq[:, None, :], docs)[:, 0, :]
  return jnp.mean(jax.nn.softplus(s[:, 0] - s[:, 1]))


# --------------------------------------------------------------------------- LambdaRank


def _check_lambdarank(distances: Any, affinity: Any, deltas_fn: Any, preference: Any, pair_mask: Any, *,
                      num_bits: Optional[int] = None, shape: Optional[tuple] = None) -> None:
  """The arguments of :func:`lambdarank_weights` (and :func:`lambdarank_loss`, whose codes give ``shape``)."""
  _checks.check_callable("deltas_fn", deltas_fn, what="function deltas_fn(distances[N], affinity[N, ...]) -> [N, N]")
  _checks.check_hamming_distances(distances, num_bits)
  _checks.check_array("distances", distances, ndim=2, shape_doc="[Q, N]", kinds="iu", shape=shape, like="the codes")
  _checks.check_real("affinity", affinity, shape_doc="[Q, N, ...] (what deltas_fn reads)", min_ndim=2,
                     shape=tuple(distances.shape) + np.shape(affinity)[2:], like="distances, then what deltas_fn reads")
  if preference is None and affinity.ndim != 2:
    raise ValueError(f"preference: required when affinity is not [Q, N]; got affinity of shape {tuple(affinity.shape)}")
  if preference is not None:
    _check_per_doc("preference", preference, tuple(distances.shape), what="preferences")
  _checks.check_mask("pair_mask", pair_mask, tuple(distances.shape) + (distances.shape[-1],), like="[Q, N, N]")


def _weights(distances, affinity, deltas_fn, preference, pair_mask):
  """``(w[Q, N, N], pairs[Q, N, N])``: ``|Delta S|`` on the preferred pairs within the mask, and those pairs."""
  delta = jax.vmap(deltas_fn)(distances, affinity)
  shape = tuple(distances.shape) + (distances.shape[-1],)
  _checks.check_array("deltas_fn", delta, ndim=3, shape_doc="[Q, N, N] (a real [N, N] swap matrix per query)",
                      kinds="iuf", what="output", shape=shape, like="an [N, N] swap matrix per query")
  dt = jnp.promote_types(delta.dtype, jnp.float32)
  pairs = _pairs(preference)
  allowed = pairs if pair_mask is None else pairs & pair_mask
  return jnp.where(allowed, jnp.abs(delta.astype(dt)), 0), pairs


def lambdarank_weights(distances: Array, affinity: Array, *, deltas_fn: Callable[[Array, Array], Array],
                       preference: Optional[Array] = None, pair_mask: Optional[Array] = None) -> Array:
  r"""LambdaRank's pair weights ``|Delta S_ab|`` on the preference pairs it swaps.

  .. math:: w_{qab} = |\Delta S_{qab}| \, [\pi_{qa} > \pi_{qb}] \, M_{qab}

  ``Delta S_q = deltas_fn(distances[q], affinity[q])``, vmapped over the
  queries; ``M`` is ``pair_mask`` (all pairs when ``None``), e.g. from
  :func:`swap_mask`.

  Args:
    distances: int ``[Q, N]`` hard Hamming distances.
    affinity: real ``[Q, N, ...]``: what ``deltas_fn`` reads for each
      document, passed to it as it is (``deltas_fn`` runs vmapped on traced
      rows, so what it reads is its caller's to supply: non-negative
      relevance levels for the closed forms that read relevance, signed
      target offsets for :func:`~hashjax.objectives.regression_deltas`).
    deltas_fn: ``deltas_fn(distances[N], affinity[N, ...]) -> [N, N]``, the
      swap matrix of one query: a closed form of
      :mod:`hashjax.objectives.swap` with its options bound (e.g.
      ``functools.partial(knn_count_deltas, k=3)``),
      ``lambda d, a: swap_deltas(my_score, d, a)`` for any score, or
      ``lambda d, a: histogram_swap_deltas(g, d, a, num_bits=b, num_levels=V)``.
    preference: real ``[Q, N]`` defining the pairs; default ``affinity``.
    pair_mask: optional ``bool[Q, N, N]``: the swaps considered.

  Returns:
    float ``[Q, N, N]``, zero except on pairs ``(a, b)`` with ``a`` preferred.

  >>> import functools
  >>> import numpy as np
  >>> from hashjax.objectives.swap import knn_count_deltas
  >>> lambdarank_weights(np.array([[0, 1, 2]]), np.array([[0, 1, 1]]),
  ...                    deltas_fn=functools.partial(knn_count_deltas, k=1)).tolist()
  [[[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]]
  """
  _check_lambdarank(distances, affinity, deltas_fn, preference, pair_mask)
  pref = jnp.asarray(affinity if preference is None else preference)
  w, _ = _weights(jnp.asarray(distances).astype(jnp.int32), jnp.asarray(affinity), deltas_fn, pref,
                  None if pair_mask is None else jnp.asarray(pair_mask))
  return w


def lambdarank_loss(query_codes: Array, doc_codes: Array, affinity: Array, *,
                    deltas_fn: Callable[[Array, Array], Array], distances: Optional[Array] = None,
                    preference: Optional[Array] = None, pair_mask: Optional[Array] = None,
                    from_logits: bool = False, has_aux: bool = False):
  r"""LambdaRank (Nair eq. 5, Figure 3) as a loss whose gradient is ``sum |Delta S| x`` RankNet's.

  .. math:: L = \frac{1}{Q} \sum_q \sum_{a, b} \mathrm{sg}(w_{qab})
            \log\big(1 + e^{\hat s_{qa} - \hat s_{qb}}\big)

  with ``w`` from :func:`lambdarank_weights` on the hard distances (``sg`` =
  stop-gradient), so ``grad L = (1/Q) sum_q sum_ab |Delta S_qab| grad C_qab``:
  per-query sums (not normalised by the number of pairs, as Nair's ``S_R``
  is not normalised by ``L``), averaged over the batch of queries.

  Args:
    query_codes: ``[Q, num_bits]`` sigmoid outputs (or logits).
    doc_codes: ``[N, num_bits]`` shared or ``[Q, N, num_bits]`` per-query documents.
    affinity: real ``[Q, N, ...]``: what ``deltas_fn`` reads (see
      :func:`lambdarank_weights`).
    deltas_fn: ``deltas_fn(distances[N], affinity[N, ...]) -> [N, N]``, vmapped
      over queries (see :func:`lambdarank_weights`).
    distances: optional int ``[Q, N]`` hard distances; default: the Hamming
      distances of the rounded codes (:func:`hard_distances`).
    preference: real ``[Q, N]`` defining the pairs; default ``affinity``.
    pair_mask: optional ``bool[Q, N, N]`` of the swaps considered, e.g.
      ``swap_mask(distances, swap_bins=.., top_bins=..)``.
    from_logits: codes are logits.
    has_aux: also return ``{"active_pairs", "preference_pairs", "active_fraction"}``:
      how many preference pairs got a non-zero weight.

  Returns:
    float scalar, or ``(loss, aux)`` with ``has_aux=True``.

  >>> import functools
  >>> import numpy as np
  >>> from hashjax.objectives.swap import knn_count_deltas
  >>> q = np.array([[1.0, 1.0]]); x = np.array([[0.0, 0.0], [1.0, 1.0]])
  >>> loss = lambdarank_loss(q, x, np.array([[1, 0]]), deltas_fn=functools.partial(knn_count_deltas, k=1))
  >>> round(float(loss), 4)  # |Delta S| = 1 times log(1 + e^(2 - 0))
  2.1269
  """
  _check_codes(query_codes, doc_codes, from_logits)
  _checks.check_bool("has_aux", has_aux)
  if distances is None:
    distances = jax.lax.stop_gradient(_hard(query_codes, doc_codes, from_logits))
  (q, n), b = _num_docs(query_codes, doc_codes), query_codes.shape[-1]
  _check_lambdarank(distances, affinity, deltas_fn, preference, pair_mask, num_bits=b, shape=(q, n))
  pref = jnp.asarray(affinity if preference is None else preference)
  w, pairs = _weights(jnp.asarray(distances).astype(jnp.int32), jnp.asarray(affinity), deltas_fn, pref,
                      None if pair_mask is None else jnp.asarray(pair_mask))
  w = jax.lax.stop_gradient(w)
  loss = jnp.sum(w * _pair_costs(_relaxed(query_codes, doc_codes, from_logits))) / q
  if not has_aux:
    return loss
  active = jnp.sum(w > 0)
  total = jnp.sum(pairs)
  return loss, {"active_pairs": active, "preference_pairs": total,
                "active_fraction": active / jnp.maximum(total, 1)}
