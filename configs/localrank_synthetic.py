r"""Banerjee et al.'s illustrative experiment (Sec. 2.4, Figure 1): which cloud similarity agrees with ranking accuracy.

  python -m experiments.localrank_synthetic --config=configs/localrank_synthetic.py --workdir=runs/localrank_synthetic
  python -m experiments.localrank_synthetic --config=configs/localrank_synthetic.py:runlocal   # 3 seeds

Construction (one explicit choice; the paper only says q1 and q2 share a mean and q1 and q3 a variance). Per seed:
a random rotation ``R`` of ``dim`` features, per-axis standard deviations ``geomspace(max_std, min_std, dim)``
(``Sigma = R diag(s^2) R^T``), a random unit relevance direction ``v``, a random mean ``mu``. Query q1: relevant
documents from ``N(mu + (1 - pi) delta v, Sigma)``, non-relevant ones from ``N(mu - pi delta v, Sigma)``
(``pi`` the relevant fraction, ``delta = separation``), so the cloud's mean is ``mu``. q2 is q1's distribution
under ``x -> scale * x + eta`` (``|eta| = mean_shift``): translated and scaled, the same principal directions and the
same relevance direction. q3 is q1's distribution under ``x -> mu + D (x - mu)``, ``D`` a diagonal of ``+-1`` with
``flipped`` minus signs: q1's mean and per-feature variances exactly, but reflected principal directions and
relevance direction ``D v``. Each query's documents are drawn independently. The ranker (SVM-MAP, the paper's) is
trained on q1 and scored by tie-aware AP on q2 and q3; every measure of ``measures`` gives q1's distance to q2 and
q3 (``hashjax.localrank.cloud_distances``).

Expected (docs/results/localrank.md, "Illustrative experiment"), 20 seeds: q1's ranker scores higher on q2 on 20 of
20 seeds (mean AP 0.971 on q2, 0.392 on q3); the measures that agree (put q2 nearer) on how many seeds: pca 20,
skew 14, kl 0, bhattacharyya 0, mean 0, variance 0. About 2 s of work, 7 s with the imports, on a 2-core CPU.
"""

import ml_collections

from configs import common


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  arg = common.parse_arg(arg, runlocal=False)
  config = ml_collections.ConfigDict()
  config.name = "localrank_synthetic"
  config.seeds = tuple(range(20))  # each draws the rotation, directions, means and documents of q1, q2, q3
  config.table_seed = 0  # the seed whose table is printed like the paper's Figure 1
  config.dim = 10  # features d
  config.relevant_docs = 50  # per query
  config.nonrelevant_docs = 150  # per query
  config.max_std = 2.0  # per-axis standard deviations of the within-class covariance, geometric max..min
  config.min_std = 0.5
  config.separation = 3.0  # distance between the relevant and the non-relevant mean along v
  config.mean_shift = 5.0  # |eta|: q2's translation
  config.scale = 2.0  # q2's scale factor (> 0 keeps every linear ranking)
  config.flipped = 5  # q3: features reflected about q1's mean
  config.ranker = "svmmap"  # the paper's SVM-MAP, or "ranknet" (hashjax.localrank.fit_ranknet)
  config.svm_c = 1.0  # SVM-MAP's trade-off c
  config.l2 = 1e-3  # RankNet's L2 penalty
  config.measures = ("pca", "kl", "bhattacharyya", "mean", "variance", "skew")  # hashjax.localrank.SIMILARITIES
  config.variance_fraction = 0.8  # eq. 5's P: the paper's 80% rule
  config.ridge = 1e-3  # kl / bhattacharyya: added to each covariance's diagonal
  if arg.runlocal:
    config.seeds = (0, 1, 2)
  return config
