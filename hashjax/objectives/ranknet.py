"""RankNet and LambdaRank losses for learning bit vectors (Nair et al. 2012, Secs. 3.4-4).

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
their *hard* Hamming distances (:func:`hashjax.objectives.swap_deltas`). As a
loss: ``sum_ab stop_gradient(|Delta S_ab|) C_ab``, whose gradient is exactly
that. Options of Sec. 4: swaps only among documents of the nearest
``ceil(b / 3)`` bins (``swap_bins``, :func:`paper_swap_bins`) and across the
top-``k`` boundary (``top_bins``); ``subsample_documents`` draws the per-query
lists (100 documents by default); losses average over the queries of a batch.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks
from hashjax import relaxations
from hashjax.objectives import scores as _scores
from hashjax.objectives import swap as _swap

Array = jax.Array

__all__ = [
    "ranknet_loss", "triplet_ranknet_loss", "lambdarank_loss", "lambdarank_weights",
    "preference_pairs", "swap_mask", "paper_swap_bins", "subsample_documents", "relaxed_scores",
    "hard_distances", "THRESHOLDS",
]

# Queries per step of lax.map for the histogram swap tables.
_MAP_BATCH = 10

#: Options of ``threshold=``: how ``swap_bins`` / ``top_bins`` count bins.
THRESHOLDS = ("relative", "absolute")


# --------------------------------------------------------------------------- checks


def _check_real(name: str, x: Any, shape_doc: str) -> None:
  if not hasattr(x, "dtype") or not hasattr(x, "ndim") or np.dtype(x.dtype) == np.bool_ \
      or not np.issubdtype(np.dtype(x.dtype), np.number) or np.issubdtype(np.dtype(x.dtype), np.complexfloating):
    raise ValueError(f"{name}: expected a real array {shape_doc}, got "
                     + (f"dtype {np.dtype(x.dtype).name}" if hasattr(x, "dtype") else type(x).__name__))
  _checks.check_finite(name, x)


def _check_codes(query_codes: Any, doc_codes: Any, from_logits: Any) -> None:
  if not isinstance(from_logits, bool):
    raise ValueError(f"from_logits: expected a bool, got {from_logits!r}")
  what = "logits" if from_logits else "sigmoid outputs in [0, 1]"
  _check_real("query_codes", query_codes, f"[Q, num_bits] of {what}")
  _check_real("doc_codes", doc_codes, f"[N, num_bits] or [Q, N, num_bits] of {what}")
  if query_codes.ndim != 2 or query_codes.shape[0] == 0 or query_codes.shape[1] == 0:
    raise ValueError(f"query_codes: expected shape [Q, num_bits] with Q, num_bits >= 1, got {tuple(query_codes.shape)}")
  if doc_codes.ndim not in (2, 3) or doc_codes.shape[-2] == 0:
    raise ValueError(f"doc_codes: expected shape [N, num_bits] or [Q, N, num_bits] with N >= 1, "
                     f"got {tuple(doc_codes.shape)}")
  if doc_codes.shape[-1] != query_codes.shape[-1]:
    raise ValueError(f"doc_codes: expected {query_codes.shape[-1]} bits per code like query_codes, "
                     f"got shape {tuple(doc_codes.shape)}")
  if doc_codes.ndim == 3 and doc_codes.shape[0] != query_codes.shape[0]:
    raise ValueError(f"doc_codes: expected one document list per query, [{query_codes.shape[0]}, N, "
                     f"{query_codes.shape[1]}], got {tuple(doc_codes.shape)}")
  if not from_logits:
    for name, x in (("query_codes", query_codes), ("doc_codes", doc_codes)):
      if _checks.is_concrete(x) and x.size:
        arr = np.asarray(x)
        if arr.min() < 0 or arr.max() > 1:
          raise ValueError(f"{name}: expected sigmoid outputs in [0, 1] (or pass from_logits=True), "
                           f"got values in [{arr.min():g}, {arr.max():g}]")


def _num_docs(query_codes, doc_codes):
  return query_codes.shape[0], doc_codes.shape[-2]


def _check_per_doc(name: str, x: Any, shape: tuple, *, what: str) -> None:
  _check_real(name, x, f"{list(shape)} of {what}")
  if tuple(x.shape) != tuple(shape):
    raise ValueError(f"{name}: expected shape {tuple(shape)} ([Q, N], one entry per query and document), "
                     f"got {tuple(x.shape)}")


def _check_pair_mask(pair_mask: Any, shape: tuple) -> None:
  if pair_mask is None:
    return
  if not hasattr(pair_mask, "dtype") or np.dtype(pair_mask.dtype) != np.bool_:
    raise ValueError("pair_mask: expected a bool array [Q, N, N], got "
                     + (f"dtype {np.dtype(pair_mask.dtype).name}" if hasattr(pair_mask, "dtype")
                        else type(pair_mask).__name__))
  if tuple(pair_mask.shape) != tuple(shape):
    raise ValueError(f"pair_mask: expected shape {tuple(shape)}, got {tuple(pair_mask.shape)}")


def _check_bins(name: str, value: Any) -> Optional[int]:
  if value is None:
    return None
  if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
    raise ValueError(f"{name}: expected None or an int >= 1 (a number of bins), got {value!r}")
  return int(value)


def _check_threshold(threshold: Any) -> str:
  if not isinstance(threshold, str) or threshold not in THRESHOLDS:
    raise ValueError(f"threshold: expected one of {list(THRESHOLDS)}, got {threshold!r}")
  return threshold


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
  """Nair's eq. 2 for each query's document list.

  .. math:: \\hat s_{qi} = \\sum_j h_{qj} (1 - h_{ij}) + (1 - h_{qj}) h_{ij}

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
  """Hamming distances of the rounded codes (``h > 0.5``, i.e. logit ``> 0``).

  .. math:: d_{qi} = \\sum_j [\\, [h_{qj} > 0.5] \\ne [h_{ij} > 0.5] \\,]

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
  """RankNet pairs of each query's list (Sec. 3.1): ``a`` should rank nearer than ``b``.

  .. math:: P_{ab} = [\\pi_a > \\pi_b]

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
  _check_real("preference", preference, "[..., N]")
  if preference.ndim < 1:
    raise ValueError(f"preference: expected at least one dimension [..., N], got shape {tuple(preference.shape)}")
  return _pairs(jnp.asarray(preference))


def _in_bins(distances, n, threshold):
  if threshold == "relative":
    return _scores._nearest_bins(distances, n)
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
  """Which swaps LambdaRank considers (Nair Sec. 4).

  .. math:: M_{ab} = e_a e_b \\, [t_a \\ne t_b], \\quad e_i = [d_i \\in \\text{nearest swap\\_bins bins}],
            \\; t_i = [d_i \\in \\text{nearest top\\_bins bins}]

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
  _scores.check_distances(distances)
  swap_bins = _check_bins("swap_bins", swap_bins)
  top_bins = _check_bins("top_bins", top_bins)
  threshold = _check_threshold(threshold)
  return _swap_mask(jnp.asarray(distances), swap_bins, top_bins, threshold)


def paper_swap_bins(num_bits: int) -> int:
  """Nair's swap restriction: one third of the number of bits, rounded up.

  .. math:: n_{swap} = \\lceil b / 3 \\rceil

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
  """Per-query document lists drawn uniformly without replacement (Nair Sec. 4).

  .. math:: L_q \\sim \\mathrm{Uniform}\\{S \\subset [N] \\setminus \\{q\\} : |S| = m\\}

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
  if not hasattr(key, "dtype") or not (jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
                                       or (key.dtype == jnp.uint32 and tuple(key.shape) == (2,))):
    raise ValueError(f"key: expected a jax.random key, got {getattr(key, 'dtype', type(key).__name__)}")
  for name, v in (("num_queries", num_queries), ("num_documents", num_documents), ("num_samples", num_samples)):
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 1:
      raise ValueError(f"{name}: expected a positive int, got {v!r}")
  available = num_documents - (0 if query_indices is None else 1)
  if num_samples > available:
    raise ValueError(f"num_samples: expected at most {available} (documents available per query), got {num_samples}")
  if query_indices is not None:
    if not hasattr(query_indices, "shape") or tuple(query_indices.shape) != (num_queries,):
      raise ValueError(f"query_indices: expected an int array of shape ({num_queries},), got "
                       + (f"shape {tuple(query_indices.shape)}" if hasattr(query_indices, "shape")
                          else type(query_indices).__name__))
    _checks.check_int_range("query_indices", query_indices, 0, num_documents - 1, what="pool indices")
  return _subsample(key, int(num_queries), int(num_documents), int(num_samples),
                    None if query_indices is None else jnp.asarray(query_indices))


def _subsample(key, num_queries, num_documents, num_samples, query_indices):
  u = jax.random.uniform(key, (num_queries, num_documents))
  if query_indices is not None:
    u = u.at[jnp.arange(num_queries), query_indices].set(-1.0)
  return jax.lax.top_k(u, num_samples)[1].astype(jnp.int32)


# --------------------------------------------------------------------------- RankNet


def _pair_costs(scores):
  """C_ab = -log P(a > b) = softplus(s_a - s_b), [..., N, N]."""
  return jax.nn.softplus(scores[..., :, None] - scores[..., None, :])


def ranknet_loss(query_codes: Array, doc_codes: Array, preference: Array, *,
                 pair_mask: Optional[Array] = None, from_logits: bool = False) -> Array:
  """RankNet (Nair eqs. 3-4) averaged over all preference pairs of each query's list.

  .. math:: L = \\frac{1}{|\\mathcal P|} \\sum_{(q, a, b) \\in \\mathcal P}
            \\log\\big(1 + e^{\\hat s_{qa} - \\hat s_{qb}}\\big), \\quad
            \\mathcal P = \\{(q, a, b) : \\pi_{qa} > \\pi_{qb}\\}

  Every pair is a (query, better, worse) triplet with target ``T = 1``; the
  mean runs over all triplets of the batch (0 when there is none).

  Args:
    query_codes: ``[Q, num_bits]`` sigmoid outputs (or logits).
    doc_codes: ``[N, num_bits]`` shared or ``[Q, N, num_bits]`` per-query documents.
    preference: real ``[Q, N]`` (see :func:`preference_pairs`).
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
  _check_pair_mask(pair_mask, (q, n, n))
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
  """RankNet on explicit (query, better, worse) triplets (Nair eqs. 3-4, Sec. 3.1).

  .. math:: L = \\frac{1}{T} \\sum_t \\log\\big(1 + e^{\\hat s(q_t, x^+_t) - \\hat s(q_t, x^-_t)}\\big)

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
    _check_codes(query_codes, x, from_logits)
    if tuple(x.shape) != tuple(query_codes.shape):
      raise ValueError(f"{name}: expected shape {tuple(query_codes.shape)} like query_codes (one per triplet), "
                       f"got {tuple(x.shape)}")
  hq = _probs(query_codes, from_logits)
  docs = jnp.stack([_probs(better_codes, from_logits), _probs(worse_codes, from_logits)], axis=1)
  s = relaxations.nair_hamming(hq[:, None, :], docs)[:, 0, :]
  return jnp.mean(jax.nn.softplus(s[:, 0] - s[:, 1]))


# --------------------------------------------------------------------------- LambdaRank


def _deltas(distances, affinity, score_fn, hist_score_fn, num_bits, num_levels, swap_method):
  if score_fn is not None:
    return jax.vmap(lambda d, a: _swap._score_swaps(score_fn, d, a, "auto"))(distances, affinity)
  one = lambda x: _swap._hist_swaps(hist_score_fn, x[0], x[1], num_bits, num_levels, swap_method)
  if swap_method == "linear":
    return jax.vmap(lambda d, a: one((d, a)))(distances, affinity)
  # The per-query tables are large ([cell pairs, b + 1, V]); a few queries at a time keeps
  # them in cache (measured 6x faster than vmap over 100 queries at 32 bits on 2 cores).
  return jax.lax.map(one, (distances, affinity), batch_size=min(_MAP_BATCH, distances.shape[0]))


def _weights(distances, affinity, preference, score_fn, hist_score_fn, num_bits, num_levels,
             swap_method, swap_bins, top_bins, threshold):
  delta = _deltas(distances, affinity, score_fn, hist_score_fn, num_bits, num_levels, swap_method)
  dt = jnp.promote_types(delta.dtype, jnp.float32)
  pairs = _pairs(preference)
  allowed = pairs & _swap_mask(distances, swap_bins, top_bins, threshold)
  return jnp.where(allowed, jnp.abs(delta.astype(dt)), 0), pairs


def _check_lambdarank_options(distances, affinity, preference, score_fn, hist_score_fn, num_bits,
                              num_levels, swap_method, swap_bins, top_bins, threshold):
  if not isinstance(swap_method, str) or swap_method not in _swap.SWAP_METHODS:
    raise ValueError(f"swap_method: expected one of {list(_swap.SWAP_METHODS)}, got {swap_method!r}")
  if (score_fn is None) == (hist_score_fn is None):
    raise ValueError("score_fn: pass exactly one of score_fn (generic swap_deltas) and hist_score_fn "
                     f"(histogram_swap_deltas), got score_fn={score_fn!r}, hist_score_fn={hist_score_fn!r}")
  if score_fn is not None:
    _swap._check_callable("score_fn", score_fn)
  else:
    _swap._check_callable("hist_score_fn", hist_score_fn)
    if isinstance(num_levels, (bool, np.bool_)) or not isinstance(num_levels, (int, np.integer)) \
        or num_levels < 1:
      raise ValueError(f"num_levels: expected a positive int with hist_score_fn, got {num_levels!r}")
  _scores.check_distances(distances, num_bits=num_bits)
  if distances.ndim != 2:
    raise ValueError(f"distances: expected [Q, N] hard distances, got shape {tuple(distances.shape)}")
  if not hasattr(affinity, "shape") or tuple(affinity.shape[:2]) != tuple(distances.shape):
    raise ValueError(f"affinity: expected a per-document array [Q, N, ...] = {tuple(distances.shape)}, got "
                     + (f"shape {tuple(affinity.shape)}" if hasattr(affinity, "shape") else type(affinity).__name__))
  if hist_score_fn is not None:
    if tuple(affinity.shape) != tuple(distances.shape):
      raise ValueError(f"affinity: expected int levels [Q, N] = {tuple(distances.shape)} with hist_score_fn, "
                       f"got {tuple(affinity.shape)}")
    _checks.check_int_range("affinity", affinity, 0, int(num_levels) - 1, what="affinity levels")
  if preference is not None:
    _check_per_doc("preference", preference, tuple(distances.shape), what="preferences")
  else:
    if tuple(affinity.shape) != tuple(distances.shape):
      raise ValueError("preference: required when affinity is not [Q, N]; got affinity of shape "
                       f"{tuple(affinity.shape)}")
    _check_real("affinity", affinity, "[Q, N] (used as the preference)")
  return (swap_method, _check_bins("swap_bins", swap_bins), _check_bins("top_bins", top_bins),
          _check_threshold(threshold))


def lambdarank_weights(distances: Array, affinity: Array, *, score_fn: Optional[Callable] = None,
                       hist_score_fn: Optional[Callable] = None, num_bits: Optional[int] = None,
                       num_levels: Optional[int] = None, swap_method: str = "auto",
                       preference: Optional[Array] = None, swap_bins: Optional[int] = None,
                       top_bins: Optional[int] = None, threshold: str = "relative") -> Array:
  """LambdaRank's pair weights ``|Delta S_ab|`` on the preference pairs it swaps.

  .. math:: w_{qab} = |\\Delta S_{qab}| \\, [\\pi_{qa} > \\pi_{qb}] \\, M_{qab}

  ``Delta S`` from :func:`~hashjax.objectives.swap_deltas` (``score_fn``) or
  :func:`~hashjax.objectives.histogram_swap_deltas` (``hist_score_fn``,
  needs ``num_bits`` and ``num_levels``), ``M`` from :func:`swap_mask`.

  Args:
    distances: int ``[Q, N]`` hard Hamming distances.
    affinity: ``[Q, N, ...]``: what the score reads for each document.
    score_fn: ``score_fn(distances[N], affinity[N]) -> scalar``.
    hist_score_fn: ``g(hist[num_bits + 1, num_levels]) -> scalar`` instead.
    num_bits: code length (required with ``hist_score_fn``).
    num_levels: affinity levels (required with ``hist_score_fn``).
    swap_method: ``method`` of :func:`~hashjax.objectives.histogram_swap_deltas`
      with ``hist_score_fn``; ``"linear"`` is exact and fastest (``O(N^2)`` per
      query) for the scores that are sums over neighbours (kNN count,
      retrieval, hierarchical), wrong for AP and the majority vote.
    preference: real ``[Q, N]`` defining the pairs; default ``affinity``.
    swap_bins, top_bins, threshold: see :func:`swap_mask`.

  Returns:
    float ``[Q, N, N]``, zero except on pairs ``(a, b)`` with ``a`` preferred.

  >>> import functools
  >>> import numpy as np
  >>> from hashjax.objectives.scores import knn_count_score
  >>> lambdarank_weights(np.array([[0, 1, 2]]), np.array([[0, 1, 1]]),
  ...                    score_fn=functools.partial(knn_count_score, k=1)).tolist()
  [[[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]]
  """
  if hist_score_fn is not None:
    num_bits = _checks.check_num_bits(num_bits)
  opts = _check_lambdarank_options(distances, affinity, preference, score_fn, hist_score_fn, num_bits,
                                   num_levels, swap_method, swap_bins, top_bins, threshold)
  pref = jnp.asarray(affinity if preference is None else preference)
  w, _ = _weights(jnp.asarray(distances).astype(jnp.int32), jnp.asarray(affinity), pref, score_fn,
                  hist_score_fn, num_bits, None if num_levels is None else int(num_levels), *opts)
  return w


def lambdarank_loss(query_codes: Array, doc_codes: Array, affinity: Array, distances: Optional[Array] = None, *,
                    score_fn: Optional[Callable] = None, hist_score_fn: Optional[Callable] = None,
                    num_levels: Optional[int] = None, swap_method: str = "auto",
                    preference: Optional[Array] = None, swap_bins: Optional[int] = None,
                    top_bins: Optional[int] = None, threshold: str = "relative", from_logits: bool = False,
                    has_aux: bool = False):
  """LambdaRank (Nair eq. 5, Figure 3) as a loss whose gradient is ``sum |Delta S| x`` RankNet's.

  .. math:: L = \\frac{1}{Q} \\sum_q \\sum_{a, b} \\mathrm{sg}(w_{qab})
            \\log\\big(1 + e^{\\hat s_{qa} - \\hat s_{qb}}\\big)

  with ``w`` from :func:`lambdarank_weights` on the hard distances (``sg`` =
  stop-gradient), so ``grad L = (1/Q) sum_q sum_ab |Delta S_qab| grad C_qab``:
  per-query sums (not normalised by the number of pairs, as Nair's ``S_R``
  is not normalised by ``L``), averaged over the batch of queries.

  Args:
    query_codes: ``[Q, num_bits]`` sigmoid outputs (or logits).
    doc_codes: ``[N, num_bits]`` shared or ``[Q, N, num_bits]`` per-query documents.
    affinity: ``[Q, N, ...]``: what the score function reads.
    distances: optional int ``[Q, N]`` hard distances; default: the Hamming
      distances of the rounded codes (:func:`hard_distances`).
    score_fn, hist_score_fn, num_levels, swap_method, preference, swap_bins,
      top_bins, threshold: see :func:`lambdarank_weights` (``num_bits`` is the
      code length).
    from_logits: codes are logits.
    has_aux: also return ``{"active_pairs", "preference_pairs", "active_fraction"}``:
      how many preference pairs got a non-zero weight.

  Returns:
    float scalar, or ``(loss, aux)`` with ``has_aux=True``.

  >>> import functools
  >>> import numpy as np
  >>> from hashjax.objectives.scores import knn_count_score
  >>> q = np.array([[1.0, 1.0]]); x = np.array([[0.0, 0.0], [1.0, 1.0]])
  >>> loss = lambdarank_loss(q, x, np.array([[1, 0]]), score_fn=functools.partial(knn_count_score, k=1))
  >>> round(float(loss), 4)  # |Delta S| = 1 times log(1 + e^(2 - 0))
  2.1269
  """
  _check_codes(query_codes, doc_codes, from_logits)
  if not isinstance(has_aux, bool):
    raise ValueError(f"has_aux: expected a bool, got {has_aux!r}")
  num_bits = query_codes.shape[-1]
  if distances is None:
    distances = jax.lax.stop_gradient(_hard(query_codes, doc_codes, from_logits))
  q, n = _num_docs(query_codes, doc_codes)
  if tuple(distances.shape) != (q, n):
    raise ValueError(f"distances: expected shape {(q, n)} ([Q, N] like the codes), got {tuple(distances.shape)}")
  opts = _check_lambdarank_options(distances, affinity, preference, score_fn, hist_score_fn, num_bits,
                                   num_levels, swap_method, swap_bins, top_bins, threshold)
  pref = jnp.asarray(affinity if preference is None else preference)
  w, pairs = _weights(jnp.asarray(distances).astype(jnp.int32), jnp.asarray(affinity), pref, score_fn,
                      hist_score_fn, num_bits, None if num_levels is None else int(num_levels), *opts)
  w = jax.lax.stop_gradient(w)
  s = _relaxed(query_codes, doc_codes, from_logits)
  loss = jnp.sum(w * _pair_costs(s)) / q
  if not has_aux:
    return loss
  active = jnp.sum(w > 0)
  total = jnp.sum(pairs)
  return loss, {"active_pairs": active, "preference_pairs": total,
                "active_fraction": active / jnp.maximum(total, 1)}
