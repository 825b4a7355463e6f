"""LocalRank against direct numpy/scipy computations: eq. 5, the other cloud similarities, complete link, LSH,
the RankNet rankers, the ranking metrics (brute-force tie orders, LETOR 4.0's script) and the experiment."""

import importlib.util
import itertools
import math
import os
import pathlib

import numpy as np
import pytest
import scipy.optimize

from hashjax import localrank, ranking
from hashjax.objectives import ranknet as ranknet_lib

REPO = pathlib.Path(__file__).resolve().parent.parent
SHARED_DATA = pathlib.Path(os.environ.get("HASHJAX_SHARED_DATA", REPO.parent / "shared" / "data"))


def _clouds(rng, sizes, dim):
  """Clouds with distinct spreads per direction (no ties among eigenvalues)."""
  x = [rng.standard_normal((n, dim)) * rng.uniform(0.2, 3.0, dim) + rng.standard_normal(dim) for n in sizes]
  return np.concatenate(x), np.repeat(np.arange(len(sizes)) * 7 + 3, sizes)


# ----------------------------------------------------------------------------- similarities


def _direct_components(cloud, fraction, fixed):
  """Covariance eigendecomposition: directions with positive variance, descending, and P."""
  c = cloud - cloud.mean(axis=0)
  values, vectors = np.linalg.eigh(c.T @ c / len(c))
  values, vectors = values[::-1], vectors[:, ::-1]
  rank = int(np.sum(values > 1e-9 * max(values[0], 1e-300)))
  values, vectors = values[:rank], vectors[:, :rank]
  if fixed is not None:
    p = fixed
  else:
    p = next(i + 1 for i in range(rank) if values[:i + 1].sum() >= fraction * values.sum() - 1e-12)
  return vectors.T, p


def _direct_eq5(a, b, fraction=0.8, fixed=None):
  ua, pa = _direct_components(a, fraction, fixed)
  ub, pb = _direct_components(b, fraction, fixed)
  p = max(pa, pb)
  return sum(abs(ua[i] @ ub[i]) if i < len(ua) and i < len(ub) else 0.0 for i in range(p)) / p


@pytest.mark.parametrize("fixed", [None, 3])
def test_eq5_against_direct_eigendecomposition(fixed):
  rng = np.random.default_rng(0)
  sizes, dim = [3, 5, 9, 40, 12], 8  # clouds smaller and larger than the dimension (Gram and covariance paths)
  x, q = _clouds(rng, sizes, dim)
  s = localrank.cloud_summaries(x, q, num_components=fixed)
  got = localrank.pca_similarity(s, s)
  clouds = np.split(x, np.cumsum(sizes)[:-1])
  ref = np.array([[_direct_eq5(a, b, fixed=fixed) for b in clouds] for a in clouds])
  np.testing.assert_allclose(got, ref, atol=1e-9)
  assert s.query_ids.tolist() == [3, 10, 17, 24, 31]
  np.testing.assert_allclose(localrank.cloud_distances(s, s), 1 - ref, atol=1e-9)


def test_eq5_invariances_and_degenerate_clouds():
  rng = np.random.default_rng(1)
  x, q = _clouds(rng, [6, 15], 5)
  moved = x.copy()
  moved[q == q[-1]] = 2.5 * moved[q == q[-1]] + 4.0  # scale and shift the second cloud
  for data in (x, moved):
    s = localrank.cloud_summaries(data, q)
    sim = localrank.pca_similarity(s, s)
    np.testing.assert_allclose(np.diag(sim), 1.0)
  a, b = (localrank.pca_similarity(*(2 * [localrank.cloud_summaries(d, q)]))[0, 1] for d in (x, moved))
  assert a == pytest.approx(b, abs=1e-12)
  # one document, and identical documents: no direction, similarity 0 to everything (itself too)
  flat = np.concatenate([x, np.ones((1, 5)), np.full((3, 5), 2.0)])
  fq = np.concatenate([q, [99], [100, 100, 100]])
  s = localrank.cloud_summaries(flat, fq)
  assert s.num_components.tolist()[-2:] == [0, 0]
  sim = localrank.pca_similarity(s, s)
  assert np.all(sim[-2:] == 0) and np.all(sim[:, -2:] == 0)
  # a two-document cloud has rank 1: with a fixed P = 3 its missing directions add 0
  two = localrank.cloud_summaries(np.array([[0.0, 0, 0], [1, 1, 0], [0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]]),
                                  np.array([1, 1, 2, 2, 2, 2]), num_components=3)
  u = two.vectors[0]
  assert np.count_nonzero(np.any(u != 0, axis=1)) == 1
  assert localrank.pca_similarity(two, two)[0, 0] == pytest.approx(1 / 3)


def _kl(m1, s1, m2, s2):
  d = len(m1)
  inv2 = np.linalg.inv(s2)
  return 0.5 * (np.log(np.linalg.det(s2) / np.linalg.det(s1)) + np.trace(inv2 @ s1)
                + (m2 - m1) @ inv2 @ (m2 - m1) - d)


def _bhattacharyya_eq4(m1, s1, m2, s2):
  """The paper's eq. 4 with the inverses, as written."""
  i1, i2 = np.linalg.inv(s1), np.linalg.inv(s2)
  dagger = np.linalg.inv(0.5 * i1 + 0.5 * i2)
  mu = 0.5 * i1 @ m1 + 0.5 * i2 @ m2
  k = (np.linalg.det(s1) ** -0.25 * np.linalg.det(s2) ** -0.25 * np.linalg.det(dagger) ** 0.5
       * np.exp(-0.25 * m1 @ i1 @ m1 - 0.25 * m2 @ i2 @ m2 + 0.5 * mu @ dagger @ mu))
  return -np.log(k)


def test_aggregate_and_distribution_similarities_against_direct_formulas():
  rng = np.random.default_rng(2)
  sizes, dim, ridge = [4, 7, 20, 11], 5, 1e-2
  x, q = _clouds(rng, sizes, dim)
  clouds = np.split(x, np.cumsum(sizes)[:-1])
  means = [c.mean(0) for c in clouds]
  covs = [np.cov(c, rowvar=False, bias=True) + ridge * np.eye(dim) for c in clouds]
  skew = [((c - c.mean(0)) ** 3).mean(0) / c.std(0) ** 3 for c in clouds]
  refs = {
      "mean": [[np.linalg.norm(a - b) for b in means] for a in means],
      "variance": [[np.linalg.norm(a.var(0) - b.var(0)) for b in clouds] for a in clouds],
      "skew": [[np.linalg.norm(a - b) for b in skew] for a in skew],
      "kl": [[0.5 * (_kl(means[i], covs[i], means[j], covs[j]) + _kl(means[j], covs[j], means[i], covs[i]))
              for j in range(4)] for i in range(4)],
      "bhattacharyya": [[_bhattacharyya_eq4(means[i], covs[i], means[j], covs[j]) for j in range(4)]
                        for i in range(4)],
  }
  for name, ref in refs.items():
    s = localrank.cloud_summaries(x, q, similarity=name, ridge=ridge)
    np.testing.assert_allclose(localrank.cloud_distances(s, s), ref, rtol=1e-7, atol=1e-8, err_msg=name)


# ----------------------------------------------------------------------------- clustering


def _naive_complete_link(d, c):
  clusters = [[i] for i in range(len(d))]
  while len(clusters) > c:
    best = None
    for a, b in itertools.combinations(range(len(clusters)), 2):
      link = max(d[i, j] for i in clusters[a] for j in clusters[b])
      if best is None or link < best[0]:
        best = (link, a, b)
    _, a, b = best
    clusters[a] += clusters.pop(b)
  return sorted(sorted(x) for x in clusters)


def test_complete_link_against_naive_agglomeration():
  rng = np.random.default_rng(3)
  pts = rng.standard_normal((14, 3))
  d = np.linalg.norm(pts[:, None] - pts[None], axis=-1)
  for c in (1, 2, 3, 5, 14):
    labels = localrank.complete_link(d, num_clusters=c)
    got = sorted(sorted(np.flatnonzero(labels == k).tolist()) for k in range(c))
    assert got == _naive_complete_link(d, c)
    assert labels[0] == 0 and len(set(labels.tolist())) == c
  with pytest.raises(ValueError, match="num_clusters: expected at most the 14 training queries, got 15"):
    localrank.complete_link(d, num_clusters=15)
  with pytest.raises(ValueError, match="distances: expected a symmetric"):
    localrank.complete_link(d + np.triu(np.ones_like(d)), num_clusters=2)


# ----------------------------------------------------------------------------- LSH


def _figure3(train, test, planes):
  """Figure 3 with dict hash tables: votes a_q of every training query for one test query."""
  p_max, m = planes.shape[:2]
  key = lambda r, u: tuple((r @ u >= 0).tolist())
  votes = np.zeros(len(train.query_ids), int)
  tables = [[{} for _ in range(m)] for _ in range(p_max)]
  for q in range(len(train.query_ids)):
    for p in range(p_max):
      if np.any(train.vectors[q, p] != 0):
        for j in range(m):
          tables[p][j].setdefault(key(planes[p, j], train.vectors[q, p]), []).append(q)
  for p in range(min(p_max, int(test.num_components[0]))):
    u = test.vectors[0, p]
    if not np.any(u != 0):
      continue
    cp, cm = np.zeros_like(votes), np.zeros_like(votes)
    for j in range(m):
      for q in tables[p][j].get(key(planes[p, j], u), []):
        cp[q] += 1
      for q in tables[p][j].get(key(planes[p, j], -u), []):
        cm[q] += 1
    votes += np.maximum(cp, cm)
  return votes


def test_lsh_against_dict_tables_of_figure3():
  rng = np.random.default_rng(4)
  x, q = _clouds(rng, [int(n) for n in rng.integers(3, 30, 40)], 6)
  train = localrank.cloud_summaries(x[q < 200], q[q < 200])
  test = localrank.cloud_summaries(x[q >= 200], q[q >= 200])
  tables = localrank.build_lsh(train, num_bits=3, num_tables=4, seed=5)
  nearest, fallback = localrank.lsh_nearest(tables, train, test, num_candidates=None)
  exact = localrank.pca_similarity(test, train)
  for t in range(len(test.query_ids)):
    one = test._replace(query_ids=test.query_ids[t:t + 1], vectors=test.vectors[t:t + 1],
                        num_components=test.num_components[t:t + 1])
    votes = _figure3(train, one, tables.planes)
    if votes.max() == 0:
      assert fallback[t] and nearest[t] == np.argmax(exact[t])
    else:
      voted = np.flatnonzero(votes > 0)
      assert not fallback[t] and nearest[t] == voted[np.argmax(exact[t, voted])]
  # a test query identical to a training query collides with it in every table: found
  same, _ = localrank.lsh_nearest(tables, train, train, num_candidates=2)
  np.testing.assert_array_equal(same, np.arange(len(train.query_ids)))


# ----------------------------------------------------------------------------- rankers


def test_ranknet_objective_is_hashjax_ranknet_per_query_and_gradient():
  rng = np.random.default_rng(6)
  x, y, q = rng.random((12, 3)), np.array([2, 0, 1, 0, 1, 1, 0, 0, 2, 1, 0, 0]), np.repeat([5, 9, 4], 4)
  pairs = localrank.ranknet_pairs(x, y, q)
  w = rng.standard_normal(3) * 0.3
  weights = np.concatenate([np.full(c, 1 / (c * 3)) for c in pairs.counts])
  objective = lambda v, l2: localrank.ranknet_objective(v, pairs.features, pairs.first, pairs.second, weights, l2)
  loss, grad = objective(w, 0.0)
  # hashjax's RankNet per query: one query, scores as distances 1 - s (one bit, query code 0), then the mean
  per_query = []
  for g in (5, 9, 4):
    s = x[q == g] @ w
    codes = (0.5 - s / 10)[:, None]  # in [0, 1]; distance = code, so softplus(d_a - d_b) = softplus((s_b - s_a)/10)
    per_query.append(float(ranknet_lib.ranknet_loss(np.zeros((1, 1)), codes, y[q == g][None].astype(float))))
  scaled, _ = objective(w / 10, 0.0)
  assert scaled == pytest.approx(np.mean(per_query), rel=1e-5)
  # direct loop over pairs
  direct = np.mean([np.mean([math.log1p(math.exp(-(x[a] - x[b]) @ w))
                             for a in np.flatnonzero(q == g) for b in np.flatnonzero(q == g) if y[a] > y[b]])
                    for g in (5, 9, 4)])
  assert loss == pytest.approx(direct, rel=1e-12)
  eps = 1e-6
  fd = [(objective(w + eps * e, 0.3)[0] - objective(w - eps * e, 0.3)[0]) / (2 * eps) for e in np.eye(3)]
  np.testing.assert_allclose(objective(w, 0.3)[1], fd, atol=1e-7)


def test_newton_and_lbfgs_reach_the_same_minimum():
  rng = np.random.default_rng(7)
  x = rng.random((80, 4))
  y = (x @ np.array([2.0, -1.0, 0.5, 0.0]) + 0.3 * rng.standard_normal(80) > 0.6).astype(int) + (x[:, 0] > 0.8)
  q = np.repeat(np.arange(10), 8)
  pairs = localrank.ranknet_pairs(x, y, q)
  a = localrank.fit_ranknet_pairs(pairs, l2=1e-2)
  b = localrank.fit_ranknet_pairs(pairs, l2=1e-2, solver="lbfgs", max_iterations=2000, tolerance=1e-10)
  np.testing.assert_allclose(a, b, atol=1e-5)
  weights = np.concatenate([np.full(c, 1 / (c * np.sum(pairs.counts > 0))) for c in pairs.counts if c])
  _, grad = localrank.ranknet_objective(a, pairs.features, pairs.first, pairs.second, weights, 1e-2)
  assert np.abs(grad).max() < 1e-7

  # A cluster whose queries hold no preference pair takes the ranker of all training queries.
  flat = np.where(np.isin(q, [8, 9]), 0, y)  # queries 8 and 9: every document equally relevant
  flat_pairs = localrank.ranknet_pairs(x, flat, q)
  w = localrank.fit_clusters(flat_pairs, np.array([0] * 8 + [1] * 2), num_clusters=2, l2=1e-2)
  np.testing.assert_allclose(w[1], localrank.fit_ranknet_pairs(flat_pairs, l2=1e-2))
  assert np.abs(w[1]).max() > 0


# ----------------------------------------------------------------------------- model


def _ranknet_reference(x, y, q, queries, l2):
  """RankNet of linear scores written out: the preference pairs of the query ids ``queries`` listed by a loop,
  each query's pairs averaged, then the queries that hold a pair, plus ``l2 / 2 |w|^2``; minimised by scipy's
  trust-region Newton method from 0."""
  lists = [[(a, b) for a in np.flatnonzero(q == g) for b in np.flatnonzero(q == g) if y[a] > y[b]] for g in queries]
  lists = [pairs for pairs in lists if pairs]
  diffs = np.array([x[a] - x[b] for pairs in lists for a, b in pairs], np.float64)
  omega = np.array([1.0 / (len(pairs) * len(lists)) for pairs in lists for _ in pairs])

  def value_and_grad(w):
    margin = diffs @ w
    return omega @ np.logaddexp(0.0, -margin) + 0.5 * l2 * w @ w, -diffs.T @ (omega / (1.0 + np.exp(margin))) + l2 * w

  def hessian(w):
    sigma = 1.0 / (1.0 + np.exp(-(diffs @ w)))
    return diffs.T @ (diffs * (omega * sigma * (1.0 - sigma))[:, None]) + l2 * np.eye(len(w))

  return scipy.optimize.minimize(value_and_grad, np.zeros(x.shape[1]), jac=True, hess=hessian, method="trust-exact",
                                 options={"gtol": 1e-13}).x


#: How far the library's Newton iterate may lie from the optimum at l2 = 0.1: it stops once the Newton decrement
#: g^T H^-1 g / 2 <= 1e-12, and H >= l2 I, so the remaining step is at most sqrt(2e-12 / l2) long (twice that here).
_NEWTON_ATOL = 2 * math.sqrt(2e-12 / 0.1)


def test_fit_and_score_pick_the_cluster_of_the_most_similar_training_query():
  rng = np.random.default_rng(8)
  x, q = _clouds(rng, [int(n) for n in rng.integers(4, 15, 16)], 4)
  y = rng.integers(0, 3, len(q))
  model = localrank.fit(x, y, q, num_clusters=3, l2=0.1)
  train = localrank.cloud_summaries(x, q)
  expected = localrank.complete_link(1 - localrank.pca_similarity(train, train), num_clusters=3)
  np.testing.assert_array_equal(model.clusters, expected)
  for c in range(3):
    want = _ranknet_reference(x, y, q, np.unique(q)[expected == c], 0.1)
    np.testing.assert_allclose(model.weights[c], want, rtol=0, atol=_NEWTON_ATOL)
  xt, qt = _clouds(np.random.default_rng(9), [5, 9, 3], 4)
  scores = localrank.score(model, xt, qt)
  sim = localrank.pca_similarity(localrank.cloud_summaries(xt, qt), train)
  for i, g in enumerate(np.unique(qt)):
    w = model.weights[expected[np.argmax(sim[i])]]
    np.testing.assert_allclose(scores[qt == g], xt[qt == g] @ w)
  one = localrank.fit(x, y, q, num_clusters=1, similarity="mean", l2=0.1)
  np.testing.assert_allclose(localrank.score(one, xt, qt), xt @ _ranknet_reference(x, y, q, np.unique(q), 0.1),
                             rtol=0, atol=_NEWTON_ATOL * np.abs(xt).sum(axis=1).max())
  with pytest.raises(ValueError, match="num_clusters: expected at most the 16 training queries, got 17"):
    localrank.fit(x, y, q, num_clusters=17)
  with pytest.raises(ValueError, match="similarity"):
    localrank.fit(x, y, q, num_clusters=2, similarity="cosine")
  with pytest.raises(ValueError, match="selection: 'lsh' needs a 'pca' model"):
    localrank.score(one, xt, qt, selection="lsh")
  with pytest.raises(ValueError, match="labels"):
    localrank.fit(x, -y, q, num_clusters=2)
  for fn in (localrank.score, localrank.select):  # not an array: a ValueError naming it, before any work
    with pytest.raises(ValueError, match=r"features: expected a real array \[n, d\], got list"):
      fn(model, xt.tolist(), qt)


def test_knn_and_dk_against_direct_training():
  rng = np.random.default_rng(10)
  x, q = _clouds(rng, [int(n) for n in rng.integers(4, 12, 8)], 3)
  y = rng.integers(0, 2, len(q))
  pairs = localrank.ranknet_pairs(x, y, q)
  z = localrank.query_features(x, q)
  xt, qt = x[q == q[0]] + 0.01, q[q == q[0]]
  got = localrank.knn_scores(pairs, z, xt, qt, num_neighbors=3, l2=0.1)
  near = np.argsort(np.linalg.norm(z - xt.mean(0), axis=1), kind="stable")[:3]
  bound = _NEWTON_ATOL * np.abs(xt).sum(axis=1).max()
  np.testing.assert_allclose(got, xt @ _ranknet_reference(x, y, q, np.unique(q)[near], 0.1), rtol=0, atol=bound)
  dk = localrank.dk_scores(pairs, xt, qt, num_components=2, l2=0.1)
  u = _direct_components(xt, 0.8, 2)[0][:2]
  v = _ranknet_reference(x @ u.T, y, q, np.unique(q), 0.1)
  np.testing.assert_allclose(dk, xt @ u.T @ v, rtol=0, atol=_NEWTON_ATOL * np.abs(xt @ u.T).sum(axis=1).max())


# ----------------------------------------------------------------------------- metrics


def _ap(labels):
  hits, total = 0, 0.0
  for r, lab in enumerate(labels, 1):
    if lab >= 1:
      hits += 1
      total += hits / r
  return total / hits if hits else float("nan")


def _ndcg(labels, k, discount):
  dcg = sum((2 ** lab - 1) * discount(r) for r, lab in enumerate(labels[:k], 1))
  ideal = sum((2 ** lab - 1) * discount(r) for r, lab in enumerate(sorted(labels, reverse=True)[:k], 1))
  return dcg / ideal if ideal > 0 else float("nan")


def _tie_aware_ap_loop(scores, labels):
  """One query's AP (relevant: label >= 1) averaged over the orders of tied scores, by a loop over the groups of
  tied documents (higher scores first) and the positions within each: a relevant document equally likely at each
  position of its group finds the other relevant documents of the group before it in proportion."""
  total, before, hits_before = 0.0, 0, 0
  for value in sorted(set(scores.tolist()), reverse=True):
    group = labels[scores == value] >= 1
    size, hits = len(group), int(group.sum())
    for position in range(1, size + 1):
      others = (hits - 1) * (position - 1) / (size - 1) if size > 1 else 0.0
      total += hits / size * (hits_before + 1 + others) / (before + position)
    before, hits_before = before + size, hits_before + hits
  return total / hits_before if hits_before else float("nan")


def test_tie_aware_metrics_against_enumerated_tie_orders():
  rng = np.random.default_rng(11)
  scores, labels, qids = [], [], []
  for g in range(6):
    n = int(rng.integers(2, 7))
    scores.append(rng.integers(0, 3, n).astype(float))  # many ties
    labels.append(rng.integers(0, 3, n))
    qids.append(np.full(n, 40 - g))
  got = ranking.query_metrics(np.concatenate(scores), np.concatenate(labels), np.concatenate(qids), ks=(1, 3, 10))
  for g in range(6):
    s, lab = scores[g], labels[g]
    orders = [p for p in itertools.permutations(range(len(s))) if all(s[p[i]] >= s[p[i + 1]]
                                                                      for i in range(len(p) - 1))]
    ranked = [[int(lab[i]) for i in p] for p in orders]
    ref_ap = np.mean([_ap(r) for r in ranked])
    np.testing.assert_allclose(_tie_aware_ap_loop(s, lab), ref_ap, rtol=1e-12, equal_nan=True)  # the loop below
    assert got["query_ids"][g] == 40 - g
    np.testing.assert_allclose(got["ap"][g], ref_ap, rtol=1e-5, equal_nan=True)
    for k in (1, 3, 10):
      ref = np.mean([_ndcg(r, k, lambda t: 1 / math.log2(t + 1)) for r in ranked])
      np.testing.assert_allclose(got[f"ndcg@{k}"][g], ref, rtol=1e-5, equal_nan=True)


def _eval_score_4(scores, labels, k):
  """A transcription of Eval-Score-4.0.pl for one query: file order within ties, 0 when undefined."""
  order = sorted(range(len(scores)), key=lambda i: -scores[i])  # Python's sort is stable, as Perl's merge sort
  rates = [int(labels[i]) for i in order]
  hits, ap = 0, 0.0
  for pos, r in enumerate(rates):
    if r >= 1:
      hits += 1
      ap += hits / (pos + 1)
  ap = ap / hits if hits else 0.0

  def dcg(rs):
    out = [2 ** rs[0] - 1]
    for pos in range(1, len(rs)):
      gain = 2 ** rs[pos] - 1
      out.append(out[-1] + (gain if pos < 2 else gain * math.log(2) / math.log(pos + 1)))
    return out
  d, best = dcg(rates), dcg(sorted(rates, reverse=True))
  ndcg = [d[i] / best[i] if best[i] else 0.0 for i in range(len(rates))]
  return ap, (ndcg[k - 1] if k <= len(ndcg) else 0.0)


def test_letor4_convention_against_the_official_script():
  rng = np.random.default_rng(12)
  scores, labels, qids = [], [], []
  for g in range(8):
    n = int(rng.integers(1, 14))
    scores.append(rng.integers(0, 4, n).astype(float))
    labels.append(rng.integers(0, 3, n) * (g != 3))  # query 3: no relevant document
    qids.append(np.full(n, g))
  got = ranking.query_metrics(np.concatenate(scores), np.concatenate(labels), np.concatenate(qids), ks=(1, 5, 10),
                              convention="letor4")
  for g in range(8):
    for k in (1, 5, 10):
      ap, ndcg = _eval_score_4(scores[g], labels[g], k)
      assert got["ap"][g] == pytest.approx(ap) and got[f"ndcg@{k}"][g] == pytest.approx(ndcg)
  assert got["ap"][3] == 0.0 and not np.isnan(got["ndcg@10"]).any()
  means = ranking.mean_metrics(got)
  assert means["num_queries"] == 8 and means["ap"] == pytest.approx(np.mean(got["ap"]))


def test_metric_and_bootstrap_errors_and_values():
  with pytest.raises(ValueError, match="convention"):
    ranking.query_metrics(np.zeros(2), np.zeros(2, int), np.zeros(2, int), convention="trec")
  with pytest.raises(ValueError, match="scores: expected finite"):
    ranking.query_metrics(np.array([np.nan, 0.0]), np.zeros(2, int), np.zeros(2, int))
  with pytest.raises(ValueError, match="labels"):
    ranking.query_metrics(np.zeros(2), np.array([0, -1]), np.zeros(2, int))
  out = ranking.paired_bootstrap(np.array([0.6, 0.7, np.nan, 0.9]), np.array([0.5, 0.6, 0.1, 0.8]),
                                 num_samples=500)
  assert out.num_queries == 3 and out.mean == pytest.approx(0.1) and out.low == pytest.approx(0.1)
  rng = np.random.default_rng(13)
  a, b = rng.random(200), rng.random(200)
  out = ranking.paired_bootstrap(a, b, num_samples=4000, seed=1)
  se = np.std(a - b, ddof=1) / np.sqrt(200)
  assert out.low < out.mean < out.high
  assert (out.high - out.low) / (2 * 1.96 * se) == pytest.approx(1.0, abs=0.1)


# ----------------------------------------------------------------------------- experiment


def test_experiment_runlocal_fold1(tmp_path):
  folder = SHARED_DATA / "letor4_mq2008"
  if not folder.is_dir():
    pytest.skip(f"shared data folder {folder} is absent (set HASHJAX_SHARED_DATA)")
  from configs import localrank as localrank_config
  from experiments import localrank as experiment
  from experiments.methods import checks
  config = localrank_config.get_config("runlocal")
  config.data_dir = str(folder)
  config.cluster_grid, config.similarities = (1, 2), ("pca",)
  config.knn_neighbors = (20,)
  config.lsh_sweep = ()
  config.rankboost_rounds, config.lambdamart_trees = (5, 20), (10, 20)
  config.plots = importlib.util.find_spec("matplotlib") is not None  # the plots extra
  if importlib.util.find_spec("lightgbm") is None:  # the ltr extra; its own tests skip then too
    config.ltr_baselines = ("rankboost", "svmmap")
  results = experiment.train_and_evaluate(config, str(tmp_path))
  rows = {r["method"]: r for r in results["rows"]}
  glob = rows["Global linear"]
  # The global ranker's AP, each test query's by the loop over its documents, from the l2 the run chose.
  from hashjax import data
  assert config.folds == (1,) and not config.standardize
  train, _, test = data.load_letor_fold(folder, fold=1, num_features=config.num_features, max_label=config.max_label)
  l2 = results["folds"][0]["methods"]["Global linear"]["setting"]["l2"]
  scores = test.features.astype(np.float64) @ localrank.fit_ranknet(train.features, train.affinity, train.query_ids,
                                                                    l2=l2)
  per_query = [_tie_aware_ap_loop(scores[test.query_ids == g], test.affinity[test.query_ids == g])
               for g in np.unique(test.query_ids)]
  assert glob["tie_aware:ap"] == pytest.approx(np.nanmean(per_query), rel=1e-6)  # float32 metrics
  assert glob["letor4:ap"] < glob["tie_aware:ap"]
  assert rows["Clairvoyant cluster (bound)"]["tie_aware:ap"] >= rows["LocalRank pca (P 80%)"]["tie_aware:ap"]
  assert (tmp_path / "results.json").is_file() and "KNN (Geng et al.)" in rows
  assert "Global linear" in experiment.format_tables(results)
  # The global baselines: every row of config.ltr_baselines, settings from their grids, and SVM-MAP's test AP by
  # the loop over each query's documents from the c the run chose.
  settings = {name: results["folds"][0]["methods"][name]["setting"] for name in
              (experiment.LTR_BASELINES[b] for b in config.ltr_baselines)}
  assert settings["RankBoost"]["T"] in (5, 20) and settings["SVM-MAP"]["c"] in config.svmmap_c
  if "lambdamart" in config.ltr_baselines:
    assert settings["LambdaMART (LightGBM)"]["trees"] in (10, 20)
    assert rows["LambdaMART (LightGBM)"]["letor4:ap"] < rows["LambdaMART (LightGBM)"]["tie_aware:ap"]
  w = localrank.fit_svmmap(train.features, train.affinity, train.query_ids, c=settings["SVM-MAP"]["c"],
                           epsilon=config.svmmap_epsilon, max_iterations=config.svmmap_max_iterations)
  scores = test.features.astype(np.float64) @ w
  per_query = [_tie_aware_ap_loop(scores[test.query_ids == g], test.affinity[test.query_ids == g])
               for g in np.unique(test.query_ids)]
  assert rows["SVM-MAP"]["tie_aware:ap"] == pytest.approx(np.nanmean(per_query), rel=1e-6)
  assert "delta:ap" in rows["RankBoost"] and "SVM-MAP" in experiment.format_tables(results)
  # The single-query study (Sec. 3.1): a ranker per training query by fit_ranknet on its documents alone, each test
  # query's AP under every one of them by the loop, the clairvoyant best and its rank in the eq. 5 order.
  train_groups, test_groups = data.group_by_query(train.query_ids), data.group_by_query(test.query_ids)
  own = [j for j, r in enumerate(train_groups.indices) if len(np.unique(train.affinity[r])) > 1]  # has pairs
  models = np.stack([localrank.fit_ranknet(train.features[r], train.affinity[r], train.query_ids[r], l2=l2)
                     for r in (train_groups.indices[j] for j in own)])
  opts = dict(similarity="pca", num_components=None, variance_fraction=config.variance_fraction, ridge=config.ridge)
  distances = localrank.cloud_distances(localrank.cloud_summaries(test.features, test.query_ids, **opts),
                                        localrank.cloud_summaries(train.features, train.query_ids, **opts))[:, own]
  fold = results["folds"][0]["single_query"]
  checked = 0
  for t, r in enumerate(test_groups.indices):  # the first 12 test queries with a relevant document
    if test.affinity[r].max() == 0:
      continue
    if checked == 12:
      break
    aps = np.array([_tie_aware_ap_loop(test.features[r].astype(np.float64) @ w, test.affinity[r]) for w in models])
    best = np.flatnonzero(np.abs(aps - aps.max()) < 1e-9)
    assert fold["clairvoyant_ap"][checked] == pytest.approx(aps.max(), abs=1e-5)
    assert fold["most_similar_ap"][checked] == pytest.approx(aps[np.argmin(distances[t])], abs=1e-5)
    assert fold["clairvoyant_rank"][checked] == min(1 + int(np.sum(distances[t] < distances[t, j])) for j in best)
    checked += 1
  single = results["single_query"]
  assert single["ap"]["clairvoyant"] == pytest.approx(np.mean(fold["clairvoyant_ap"]))
  assert single["ap"]["global"] == pytest.approx(glob["tie_aware:ap"])
  assert single["clairvoyant_rank"]["top_1"] == pytest.approx(np.mean(np.array(fold["clairvoyant_rank"]) == 1))
  assert "One ranker per training query" in experiment.format_tables(results)
  if config.plots:
    assert (tmp_path / "clusters.png").stat().st_size > 0 and (tmp_path / "clairvoyant_ranks.png").stat().st_size > 0
  for field, value in (("ltr_baselines", ("svm",)), ("svmmap_c", ()), ("rankboost_rounds", (0,))):
    bad = localrank_config.get_config("runlocal")
    bad.data_dir = str(folder)
    bad[field] = value
    with pytest.raises(checks.ConfigError, match=rf"^config.{field}: expected"):
      experiment.train_and_evaluate(bad, str(tmp_path))
  config.cluster_grid = (2, 3)
  with pytest.raises(checks.ConfigError, match=r"config.cluster_grid: expected a list holding 1"):
    checks.check_config(config)
  config.cluster_grid, config.similarities = (1,), ("cosine",)
  with pytest.raises(checks.ConfigError, match=r"config.similarities"):
    checks.check_config(config)
