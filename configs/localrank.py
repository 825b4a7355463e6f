r"""LocalRank (Banerjee et al.): clustered local linear rankers by query point-cloud similarity, LETOR 4.0 MQ2008.

  python -m experiments.localrank --config=configs/localrank.py
  python -m experiments.localrank --config=configs/localrank.py:runlocal    # fold 1, few settings, seconds
  python -m experiments.localrank --config=configs/localrank.py --config.data_dir=/data/MSLR-WEB10K \
      --config.num_features=136 --config.max_label=4 --config.knn_rank_feature=109 --config.standardize=True

Five folds (train on three subsets, choose every setting on the validation subset, report on the test subset):
the global linear RankNet ranker; LocalRank with the PCA similarity of eq. 5 (P by the 80% rule and a fixed P)
and with the other cloud similarities (mean, variance, skew, symmetric KL, Bhattacharyya); Geng et al.'s KNN;
D&K on ``config.dk_folds``; the global baselines RankBoost, SVM-MAP and LambdaMART (``config.ltr_baselines``);
the controls (random clusters of the same sizes, the clairvoyant cluster) and a
paired bootstrap 95% interval of each method minus the global ranker over the pooled test queries; LSH model
selection against the exhaustive one. Expected (docs/results/localrank.md): global MAP 0.659 and NDCG@10 0.697
(queries with a relevant document), LocalRank-PCA -0.009 MAP [-0.017, +0.000] against it, SVM-MAP +0.001
[-0.006, +0.008]; 22 minutes (1298 s) with the global baselines on 2 busy cores with one BLAS thread; runlocal
about 15 s.
"""

import ml_collections

from configs import common


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  arg = common.parse_arg(arg, runlocal=False)
  config = ml_collections.ConfigDict()
  config.name = "localrank"
  config.data_dir = "../shared/data/letor4_mq2008"  # S1..S5.txt (LETOR 4.0 fold table) or Fold<k>/{train,vali,test}.txt
  config.num_features = 46
  config.max_label = 2  # largest relevance label the files may hold
  config.standardize = False  # z-score features by the training subsets (for raw features such as MSLR-WEB's)
  config.folds = (1, 2, 3, 4, 5)
  config.seed = 0  # LSH hyperplanes, random clusters, bootstrap
  config.blas_threads = 1  # BLAS threads during the run (timings depend on it, the scores do not)
  config.l2_grid = (1e-3, 1e-2, 1e-1)  # L2 penalty of every linear ranker, chosen on validation
  config.cluster_grid = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)  # C, chosen on validation with l2
  config.similarities = ("pca", "mean", "variance", "skew", "kl", "bhattacharyya")
  config.fixed_components = (4,)  # eq. 5 with a fixed P, beside the 80% rule
  config.variance_fraction = 0.8  # the paper's rule for P
  config.ridge = 1e-3  # added to covariances for kl / bhattacharyya
  config.select_by = "ap"  # validation metric that chooses C and l2: ap, ndcg@1, ndcg@5 or ndcg@10
  config.random_draws = 3  # random clusterings of the chosen sizes, per-query metrics averaged over draws
  config.knn_neighbors = (25, 50, 100, 200)  # K of Geng et al.'s KNN, chosen on validation
  config.knn_rank_feature = 24  # 0-based column ranking a query's documents (LETOR 4.0: 25 = BM25 of the page)
  config.knn_top = 50  # query features: mean of the top documents by that column
  config.dk_folds = (1, 2, 3, 4, 5)  # folds that run D&K (it trains one model per test query)
  config.lsh_bits = 8  # h hyperplanes per table
  config.lsh_tables = 8  # m tables per principal component
  config.lsh_candidates = 16  # most voted candidates re-ranked by eq. 5
  config.lsh_sweep = (4, 6, 8, 12)  # h values of the LSH agreement table (with candidates 16 and all voted)
  config.lsh_clusters = 8  # the LSH table also reports cluster agreement at this C of the PCA tree
  config.bootstrap_samples = 10000
  config.single_query = True  # Sec. 3.1 (Figs. 4-5): one ranker per training query, clairvoyant and most similar
  config.plots = False  # True: the metric against C and the clairvoyant query's ranks as PNGs in the workdir
  # Global learning-to-rank baselines (hashjax.localrank.baselines), each setting chosen on validation by select_by
  config.ltr_baselines = ("rankboost", "svmmap", "lambdamart")  # lambdamart needs lightgbm: pip install 'hashjax[ltr]'
  config.rankboost_rounds = (50, 100, 200, 400)  # T (the first T rounds of one fit)
  config.rankboost_thresholds = 64  # candidate thresholds per feature (quantiles)
  config.svmmap_c = (0.1, 1.0, 10.0, 100.0)  # c of 1/2 |w|^2 + (c/n) sum_q xi_q
  config.svmmap_epsilon = 1e-3  # cutting-plane tolerance
  config.svmmap_max_iterations = 1000  # cutting planes at most
  config.lambdamart_trees = (50, 100, 200, 500)  # trees (the first of one fit per learning rate and leaves)
  config.lambdamart_learning_rates = (0.05, 0.1)
  config.lambdamart_leaves = (7, 31)
  config.lambdamart_min_data_in_leaf = 20
  config.lambdamart_threads = 1  # LightGBM's threads (deterministic either way; timings depend on it)
  if arg.runlocal:
    config.folds = (1,)
    config.l2_grid = (1e-2,)
    config.cluster_grid = (1, 2, 4)
    config.similarities = ("pca", "mean")
    config.fixed_components = ()
    config.random_draws = 1
    config.knn_neighbors = (50,)
    config.dk_folds = ()
    config.lsh_sweep = (6,)
    config.bootstrap_samples = 1000
    config.rankboost_rounds = (20, 50)
    config.svmmap_c = (1.0,)
    config.lambdamart_trees = (20, 50)
    config.lambdamart_learning_rates = (0.1,)
    config.lambdamart_leaves = (7,)
  return config
