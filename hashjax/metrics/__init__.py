r"""Tie-aware ranking metrics of Hamming rankings, each one formula over histograms.

For these metrics a ranking by Hamming distance is fully described by the
per-query histogram ``hist[..., num_bits + 1, V]`` (items of each affinity
level ``v`` at each distance ``d``; He et al. 2018, Sec. 3.2;
:mod:`hashjax.histograms`). Each metric is one formula over it
(``*_from_histogram``, ``O(num_bits * V)`` per query, nothing sorted); the
functions of ``distances[..., N]`` validate, count the histogram and apply it.

* Inputs: ``distances`` int in ``[0, num_bits]``; ``relevance`` in ``{0, 1}``;
  ``affinity`` int ``>= 0`` (0 = irrelevant; levels ``v >= 1`` are relevant for
  AP and precision).
* Real-valued ``distances`` (any int or float, ``num_bits`` left out): tie-aware
  AP, NDCG, precision@k and the AP bounds read each query's tie groups (equal
  values, by sorting) as the bins, by the same formulas (:mod:`hashjax._ties`).
* Ties: each docstring states its policy. Tie-aware = the expectation over all
  orders of tied items (He et al. eqs. 3-4) in closed form; optimistic /
  pessimistic = relevant items first / last; :func:`ap`, :func:`ndcg`: ascending index;
  :func:`interpolated_ap` (PASCAL VOC's eleven points): each tie group is one point of the curve.
* Undefined values are NaN (AP and recall without a relevant item, NDCG without
  positive gain); :func:`mean_and_count` averages the others and counts them.
* Cutoffs: AP@k is normalised by ``min(N+, k)``, precision@k by ``min(k, N)``,
  NDCG@k by the ideal DCG@k. Radius ``r`` retrieves ``d <= r`` (Nair et al.'s
  "distance < 2" is ``radius=1``); retrieving nothing gives precision 0.
* Precision: float64 under ``jax.enable_x64(True)``, else float32, unless
  ``dtype=`` says otherwise; the range sums (:mod:`hashjax._special`) keep
  float32 within a few ulp of exact.
* Two paths, one formula written against an array namespace: numpy on the host
  for concrete histograms (nothing compiled at a new shape), jax.numpy when
  traced in a caller's ``jit``, ``vmap`` or ``grad``. Results are jax arrays.

Two modules: :mod:`hashjax.metrics.histogram` holds the formulas (``*_from_histogram``)
and the per-bin pieces other modules share (:func:`ap_bin_pieces`, :func:`dcg_weights`,
:func:`nearest_bins_mask`, :func:`vote_winners`); :mod:`hashjax.metrics.distances` the
functions of ``distances[..., N]``, :func:`ap`, :func:`ndcg`, :func:`error_rate` and
:func:`mean_and_count`. Every public name is importable from :mod:`hashjax.metrics`.

:func:`hashjax.evaluate.evaluate_codes` evaluates packed codes with all of them,
:func:`hashjax.evaluate.evaluate_distances` a real ``distances[Q, N]``.
"""

from hashjax.metrics.distances import MeanCount, ap, error_rate, interpolated_ap, knn_classify, mean_and_count, ndcg
from hashjax.metrics.distances import optimistic_ap
from hashjax.metrics.distances import pessimistic_ap, precision_at_radius, precision_recall_curve
from hashjax.metrics.distances import recall_at_radius, retrieved_at_radius, tie_aware_ap, tie_aware_ndcg
from hashjax.metrics.distances import tie_aware_precision_at_k
from hashjax.metrics.histogram import APBins, DCGWeights, ap_bin_pieces, dcg_weights, knn_classify_from_histogram
from hashjax.metrics.histogram import interpolated_ap_from_histogram
from hashjax.metrics.histogram import nearest_bins_mask, optimistic_ap_from_histogram, pessimistic_ap_from_histogram
from hashjax.metrics.histogram import precision_at_radius_from_histogram, precision_recall_curve_from_histogram
from hashjax.metrics.histogram import recall_at_radius_from_histogram, retrieved_at_radius_from_histogram
from hashjax.metrics.histogram import tie_aware_ap_from_histogram, tie_aware_ndcg_from_histogram
from hashjax.metrics.histogram import tie_aware_precision_at_k_from_histogram, vote_winners

__all__ = [
    "MeanCount", "mean_and_count",
    "tie_aware_ap", "optimistic_ap", "pessimistic_ap", "ap", "interpolated_ap", "tie_aware_ndcg", "ndcg",
    "tie_aware_precision_at_k", "precision_at_radius", "recall_at_radius", "retrieved_at_radius",
    "precision_recall_curve", "knn_classify", "error_rate",
    "tie_aware_ap_from_histogram", "optimistic_ap_from_histogram", "pessimistic_ap_from_histogram",
    "interpolated_ap_from_histogram",
    "tie_aware_ndcg_from_histogram", "tie_aware_precision_at_k_from_histogram",
    "precision_at_radius_from_histogram", "recall_at_radius_from_histogram",
    "retrieved_at_radius_from_histogram", "precision_recall_curve_from_histogram",
    "knn_classify_from_histogram", "nearest_bins_mask", "vote_winners", "APBins", "ap_bin_pieces", "DCGWeights",
    "dcg_weights",
]
