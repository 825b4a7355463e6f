r"""Learning-to-rank metrics of real-valued document scores grouped by query, and a paired bootstrap.

A ranker gives each document a score (higher ranks first); documents belong
to queries (``query_ids[n]``) and carry graded labels (0 = irrelevant). Two
conventions, side by side:

* ``"tie_aware"`` (the default): the tie-aware AP and NDCG@k of
  :mod:`hashjax.metrics` on ``distances = -scores`` (the mean over all orders
  of equal scores, He et al. 2018), relevant = label >= 1, NDCG gain
  ``2^l - 1`` and discount ``1 / log2(r + 1)``, cut at ``k`` (a query with
  fewer than ``k`` documents ranks them all). Queries without a relevant
  document are undefined (NaN) and left out of the means.
* ``"letor4"``: LETOR 4.0's official ``Eval-Score-4.0.pl``: ties in file
  order (its stable sort by score), AP and NDCG 0 for a query without a
  relevant document, gain ``2^l - 1``, discount 1 at ranks 1 and 2 and
  ``1 / log2(r)`` from rank 3, and NDCG@k = 0 for a query with fewer than
  ``k`` documents (the script leaves it undefined and sums it as 0). Every
  query counts.

:func:`paired_bootstrap` gives a percentile confidence interval of the mean
per-query difference of two rankers on the same queries.
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Sequence

import numpy as np

from hashjax import _checks
from hashjax import metrics
from hashjax.data import letor

__all__ = ["CONVENTIONS", "query_metrics", "mean_metrics", "BootstrapInterval", "paired_bootstrap"]

#: ``convention=`` of :func:`query_metrics`.
CONVENTIONS = ("tie_aware", "letor4")


def _padded(scores: np.ndarray, labels: np.ndarray, query_ids: np.ndarray):
  """``(ids[G], s[G, M], l[G, M], mask[G, M])``: each query's documents in file order, left-aligned."""
  groups = letor.group_by_query(query_ids)
  sizes = np.array([len(i) for i in groups.indices])
  mask = np.arange(sizes.max())[None, :] < sizes[:, None]
  rows = np.concatenate(groups.indices)
  s = np.full(mask.shape, -np.inf)
  lab = np.zeros(mask.shape, np.int64)
  s[mask] = scores[rows]
  lab[mask] = labels[rows]
  return groups.query_ids, s, lab, mask


def _letor4(s: np.ndarray, lab: np.ndarray, mask: np.ndarray, ks: Sequence[int]) -> Dict[str, np.ndarray]:
  """Eval-Score-4.0 per query: file order within ties, AP and NDCG 0 without relevant documents."""
  order = np.argsort(-s, axis=1, kind="stable")
  ranked = np.take_along_axis(lab, order, axis=1)
  valid = np.take_along_axis(mask, order, axis=1)
  rank = np.arange(1, s.shape[1] + 1)
  rel = (ranked >= 1) & valid
  hits = np.cumsum(rel, axis=1)
  num_rel = hits[:, -1]
  ap = np.where(num_rel > 0, np.sum(np.where(rel, hits / rank, 0.0), axis=1) / np.maximum(num_rel, 1), 0.0)
  discount = 1.0 / np.log2(np.maximum(rank, 2))
  gains = np.where(valid, np.exp2(ranked) - 1.0, 0.0)
  ideal = -np.sort(-np.where(mask, np.exp2(lab) - 1.0, 0.0), axis=1)
  sizes = mask.sum(axis=1)
  out = {"ap": ap}
  for k in ks:
    dcg = np.sum((gains * discount)[:, :k], axis=1)
    best = np.sum((ideal * discount)[:, :k], axis=1)
    out[f"ndcg@{k}"] = np.where((best > 0) & (sizes >= k), dcg / np.where(best > 0, best, 1.0), 0.0)
  return out


def query_metrics(scores: np.ndarray, labels: np.ndarray, query_ids: np.ndarray, *, ks: Sequence[int] = (1, 5, 10),
                  convention: str = "tie_aware") -> Dict[str, np.ndarray]:
  r"""Per-query AP and NDCG@k of real-valued scores (higher ranks first).

  Ties: ``"tie_aware"``, the mean over all orders of equal scores;
  ``"letor4"``, file order (the official script's stable sort). The module
  docstring lists both conventions.

  .. math:: \mathrm{AP}_q = \frac{1}{N^+_q} \sum_{r : l_{(r)} \ge 1} \frac{|\{r' \le r : l_{(r')} \ge 1\}|}{r},
     \quad \mathrm{NDCG}@k_q = \frac{\sum_{r \le k} (2^{l_{(r)}} - 1) D(r)}{\max_\pi \sum_{r \le k}
     (2^{l_{\pi(r)}} - 1) D(r)}

  with ``D(r) = 1 / log2(r + 1)`` (tie-aware) or ``1 / log2(max(r, 2))`` (letor4).

  Args:
    scores: real ``[n]`` document scores.
    labels: ``int[n]`` graded relevance ``>= 0``.
    query_ids: ``int[n]`` query of each document (a query's documents need not be contiguous).
    ks: NDCG cutoffs.
    convention: one of :data:`CONVENTIONS`.

  Returns:
    dict of numpy arrays over the ``G`` queries in order of first
    appearance: ``query_ids int64[G]``, ``num_relevant int64[G]``,
    ``ap float64[G]`` and ``ndcg@<k> float64[G]`` (NaN where undefined,
    tie-aware only).

  >>> import numpy as np
  >>> out = query_metrics(np.array([0.9, 0.1, 0.5, 0.2, 0.2]), np.array([0, 2, 1, 0, 0]), np.array([1, 1, 1, 2, 2]),
  ...                     ks=(1,))
  >>> out["ap"].round(4).tolist(), out["ndcg@1"].tolist()  # ranks 2 and 3: (1/2 + 2/3) / 2; query 2: none relevant
  ([0.5833, nan], [0.0, nan])
  """
  _checks.check_ranking_data("scores", scores, labels, query_ids, ndim=1, shape_doc="[n] (higher ranks first)")
  convention = _checks.check_option("convention", convention, CONVENTIONS)
  if isinstance(ks, (int, np.integer)) or not len(ks):
    raise ValueError(f"ks: expected a non-empty sequence of cutoffs >= 1, got {ks!r}")
  ks = [_checks.check_cutoff(k, "ks", allow_none=False) for k in ks]
  ids, s, lab, mask = _padded(np.asarray(scores, np.float64), np.asarray(labels), np.asarray(query_ids))
  num_relevant = np.sum((lab >= 1) & mask, axis=1)
  out = {"query_ids": ids, "num_relevant": num_relevant}
  if convention == "letor4":
    out.update(_letor4(s, lab, mask, ks))
    return out
  d = -s  # padding: -inf scores, +inf distances, masked out
  rel = ((lab >= 1) & mask).astype(np.int32)
  out["ap"] = np.asarray(metrics.tie_aware_ap(d, rel, where=mask), np.float64)
  for k in ks:
    out[f"ndcg@{k}"] = np.asarray(metrics.tie_aware_ndcg(d, lab.astype(np.int32), k=k, where=mask), np.float64)
  return out


def mean_metrics(per_query: Dict[str, np.ndarray]) -> Dict[str, float]:
  r"""Means of :func:`query_metrics` over the queries where each is defined, and how many were.

  .. math:: \bar m = \frac{1}{|\{q : m_q \ne \mathrm{NaN}\}|} \sum_{q : m_q \ne \mathrm{NaN}} m_q

  Args:
    per_query: the dict of :func:`query_metrics`.

  Returns:
    ``{"ap": .., "ndcg@k": .., "num_queries": G, "num_defined": ..}`` (Python numbers).

  >>> import numpy as np
  >>> mean_metrics({"query_ids": np.array([1, 2]), "ap": np.array([0.5, np.nan])})
  {'ap': 0.5, 'num_queries': 2, 'num_defined': 1}
  """
  if not isinstance(per_query, dict) or "query_ids" not in per_query:
    raise ValueError(f"per_query: expected the dict of query_metrics, got {type(per_query).__name__}")
  out = {}
  defined = 0
  for name, values in per_query.items():
    if name in ("query_ids", "num_relevant"):
      continue
    values = np.asarray(values, np.float64)
    out[name] = float(metrics.mean_and_count(values).mean)
    defined = max(defined, int(np.sum(~np.isnan(values))))
  out["num_queries"] = int(len(per_query["query_ids"]))
  out["num_defined"] = defined
  return out


class BootstrapInterval(NamedTuple):
  """Mean per-query difference and its percentile confidence interval."""
  mean: float
  low: float
  high: float
  num_queries: int


def paired_bootstrap(values: np.ndarray, baseline: np.ndarray, *, num_samples: int = 10000, level: float = 0.95,
                     seed: _checks.Seed = 0) -> BootstrapInterval:
  r"""Paired bootstrap of the mean difference of two per-query metrics on the same queries.

  Queries where either value is NaN are left out. Queries are drawn with
  replacement ``num_samples`` times; the interval holds the central ``level``
  of the resampled means (percentile bootstrap).

  .. math:: \bar\delta^{(b)} = \frac{1}{Q} \sum_{i=1}^{Q} (v_{q_i^{(b)}} - u_{q_i^{(b)}}), \quad
     q_i^{(b)} \sim \mathrm{Uniform}\{1..Q\}

  Args:
    values: ``float[Q]`` per-query metric of a method.
    baseline: ``float[Q]`` the same queries' metric of the baseline.
    num_samples: bootstrap resamples.
    level: coverage of the interval in ``(0, 1)``.
    seed: the numpy generator's seed (an int >= 0 or a ``np.random.Generator``).

  Returns:
    :class:`BootstrapInterval` ``(mean, low, high, num_queries)``.

  >>> import numpy as np
  >>> out = paired_bootstrap(np.array([0.5, 0.7, 0.9]), np.array([0.5, 0.5, 0.5]), num_samples=2000)
  >>> round(out.mean, 4), out.low >= 0.0, out.high <= 0.4 + 1e-12, out.num_queries
  (0.2, True, True, 3)
  """
  for name, x in (("values", values), ("baseline", baseline)):
    _checks.check_array(name, x, ndim=1, shape_doc="[Q] (NaN = undefined)", kinds="iuf", what="real array")
    if np.isinf(np.asarray(x, np.float64)).any():
      raise ValueError(f"{name}: expected finite values or NaN, got inf")
  _checks.check_shape("baseline", baseline, values.shape, like="values")
  num_samples = _checks.check_int("num_samples", num_samples)
  level = _checks.check_number("level", level, low=0, high=1, low_open=True, high_open=True)
  diff = np.asarray(values, np.float64) - np.asarray(baseline, np.float64)
  diff = diff[~np.isnan(diff)]
  if diff.size == 0:
    raise ValueError("values, baseline: expected at least one query where both are defined, got none")
  rng = _checks.check_rng(seed)
  means = np.empty(num_samples)
  step = max(1, (1 << 22) // diff.size)
  for start in range(0, num_samples, step):
    count = min(step, num_samples - start)
    means[start:start + count] = diff[rng.integers(0, diff.size, (count, diff.size))].mean(axis=1)
  tail = (1.0 - level) / 2.0
  low, high = np.quantile(means, [tail, 1.0 - tail])
  return BootstrapInterval(float(diff.mean()), float(low), float(high), int(diff.size))
