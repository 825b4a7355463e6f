"""RankNet / LambdaRank losses against loop-based references and finite differences."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hashjax import objectives as obj

# --------------------------------------------------------------------------- references (loops)


def sigmoid(x):
  return 1.0 / (1.0 + np.exp(-x))


def ref_scores(hq, hd):
  """Nair eq. 2 by loops: hq [b], hd [N, b] -> [N]."""
  return np.array([sum(hq[j] * (1 - h[j]) + (1 - hq[j]) * h[j] for j in range(len(hq))) for h in hd])


def ref_neighbors(d, k):
  kept = sorted(set(int(x) for x in d))[:k]
  return {i for i, x in enumerate(d) if int(x) in kept}


def ref_count(d, a, k):
  return float(sum(a[i] for i in ref_neighbors(d, k)))


def ref_majority(d, pairs, C, k):
  """Nair eq. 6 with ties="expected": 1/m when the query's class is among the m most voted."""
  votes = [0] * C
  for i in ref_neighbors(d, k):
    votes[int(pairs[i]) % C] += 1
  top = max(votes)
  winners = [c for c in range(C) if votes[c] == top]
  return 1.0 / len(winners) if int(pairs[0]) // C in winners else 0.0


def ref_delta(score, d, a, i, j):
  e = list(d)
  e[i], e[j] = e[j], e[i]
  return score(e, a) - score(list(d), a)


def ref_ranknet(hq, hd, pref, mask=None):
  total, count = 0.0, 0
  for q in range(len(hq)):
    s = ref_scores(hq[q], hd[q])
    for a in range(len(s)):
      for b in range(len(s)):
        if pref[q][a] > pref[q][b] and (mask is None or mask[q][a][b]):
          total += math.log1p(math.exp(s[a] - s[b]))
          count += 1
  return total / max(count, 1)


def ref_allowed(d, a, b, swap_bins, top_bins, threshold="relative"):
  if threshold == "relative":
    inside = lambda n: ref_neighbors(d, n)
  else:
    inside = lambda n: {i for i in range(len(d)) if d[i] < n}
  if swap_bins is not None and not (a in inside(swap_bins) and b in inside(swap_bins)):
    return False
  if top_bins is not None and ((a in inside(top_bins)) == (b in inside(top_bins))):
    return False
  return a != b


def ref_lambdarank_grad(W, Xq, Xd, affinity, score, swap_bins, top_bins):
  """(1/Q) sum_q sum_{a > b} |Delta S_ab| dC_ab/dW with eq. 1-4 differentiated by hand."""
  Q, N = affinity.shape
  grad = np.zeros_like(W)
  active = 0
  for q in range(Q):
    hq = sigmoid(Xq[q] @ W)
    hd = sigmoid(Xd[q] @ W)
    d = [int(np.sum((hq > 0.5) != (h > 0.5))) for h in hd]
    s = ref_scores(hq, hd)
    # d s_i / d W[:, j] = (1 - 2 h_ij) h_qj (1 - h_qj) x_q + (1 - 2 h_qj) h_ij (1 - h_ij) x_i
    ds = [np.outer(Xq[q], (1 - 2 * hd[i]) * hq * (1 - hq)) + np.outer(Xd[q][i], (1 - 2 * hq) * hd[i] * (1 - hd[i]))
          for i in range(N)]
    for a in range(N):
      for b in range(N):
        if affinity[q][a] > affinity[q][b] and ref_allowed(d, a, b, swap_bins, top_bins):
          w = abs(ref_delta(score, d, list(affinity[q]), a, b))
          active += w > 0
          # C = log(1 + exp(s_a - s_b)); dC/ds_a = sigmoid(s_a - s_b) = -dC/ds_b
          grad += w * sigmoid(s[a] - s[b]) * (ds[a] - ds[b])
  return grad / Q, active


# --------------------------------------------------------------------------- fixtures


def problem(seed, *, Q=3, N=10, D=5, b=6, scale=1.5):
  rng = np.random.default_rng(seed)
  W = rng.normal(scale=scale, size=(D, b))
  Xq = rng.normal(size=(Q, D))
  Xd = rng.normal(size=(Q, N, D))
  rel = rng.integers(0, 2, size=(Q, N)).astype(np.int32)
  return W, Xq, Xd, rel


# --------------------------------------------------------------------------- RankNet


def test_relaxed_scores_and_hard_distances():
  rng = np.random.default_rng(0)
  hq = rng.uniform(size=(2, 5))
  hd = rng.uniform(size=(2, 4, 5))
  got = np.asarray(obj.relaxed_scores(hq, hd))
  for q in range(2):
    np.testing.assert_allclose(got[q], ref_scores(hq[q], hd[q]), rtol=1e-5)
  shared = np.asarray(obj.relaxed_scores(hq, hd[0]))
  np.testing.assert_allclose(shared[1], ref_scores(hq[1], hd[0]), rtol=1e-5)
  dist = np.asarray(obj.hard_distances(hq, hd))
  want = [[int(np.sum((hq[q] > 0.5) != (h > 0.5))) for h in hd[q]] for q in range(2)]
  assert dist.tolist() == want
  logits = np.log(hq / (1 - hq)), np.log(hd / (1 - hd))
  assert np.asarray(obj.hard_distances(*logits, from_logits=True)).tolist() == want


def test_ranknet_loss_matches_loops_and_mask():
  rng = np.random.default_rng(1)
  hq = rng.uniform(size=(3, 6))
  hd = rng.uniform(size=(3, 7, 6))
  pref = rng.integers(0, 3, size=(3, 7))
  assert float(obj.ranknet_loss(hq, hd, pref)) == pytest.approx(ref_ranknet(hq, hd, pref), rel=1e-5)
  mask = rng.uniform(size=(3, 7, 7)) < 0.5
  assert float(obj.ranknet_loss(hq, hd, pref, pair_mask=mask)) == pytest.approx(
      ref_ranknet(hq, hd, pref, mask), rel=1e-5)
  # Regression preference: closer target first.
  offsets = np.asarray(obj.target_offsets(rng.normal(size=3), rng.normal(size=(3, 7))))
  assert float(obj.ranknet_loss(hq, hd, -np.abs(offsets))) == pytest.approx(
      ref_ranknet(hq, hd, -np.abs(offsets)), rel=1e-5)
  # No pair at all: 0, not NaN.
  assert float(obj.ranknet_loss(hq, hd, np.zeros((3, 7)))) == 0.0


def test_triplet_ranknet_equals_two_document_lists():
  rng = np.random.default_rng(2)
  hq, hp, hn = (rng.uniform(size=(5, 4)) for _ in range(3))
  want = np.mean([math.log1p(math.exp(ref_scores(hq[t], hp[t:t + 1])[0] - ref_scores(hq[t], hn[t:t + 1])[0]))
                  for t in range(5)])
  assert float(obj.triplet_ranknet_loss(hq, hp, hn)) == pytest.approx(want, rel=1e-5)


def test_ranknet_gradient_finite_differences():
  W, Xq, Xd, rel = problem(3, Q=2, N=6, D=3, b=4)
  with jax.enable_x64(True):
    loss = lambda W_: obj.ranknet_loss(Xq @ W_, jnp.einsum("qnd,db->qnb", Xd, W_), rel, from_logits=True)
    g = np.asarray(jax.grad(loss)(jnp.asarray(W)))
    ref = lambda W_: ref_ranknet(sigmoid(Xq @ W_), sigmoid(np.einsum("qnd,db->qnb", Xd, W_)), rel)
    fd = np.zeros_like(W)
    eps = 1e-6
    for idx in np.ndindex(*W.shape):
      e = np.zeros_like(W)
      e[idx] = eps
      fd[idx] = (ref(W + e) - ref(W - e)) / (2 * eps)
    np.testing.assert_allclose(g, fd, atol=1e-7, rtol=1e-6)


# --------------------------------------------------------------------------- LambdaRank


def _mask(d, swap_bins, top_bins, threshold="relative"):
  """``swap_mask`` of the hard distances, or None when neither restriction is asked for."""
  if swap_bins is None and top_bins is None:
    return None
  return obj.swap_mask(d, swap_bins=swap_bins, top_bins=top_bins, threshold=threshold)


@pytest.mark.parametrize("swap_bins,top_bins", [(None, None), (3, 1), (None, 2)])
@pytest.mark.parametrize("path", ["closed", "generic"])
def test_lambdarank_gradient_is_delta_weighted_ranknet(swap_bins, top_bins, path):
  W, Xq, Xd, _ = problem(4)
  # Graded levels, so |Delta S| takes several values (1, 2, 3), not only 0/1.
  rel = np.random.default_rng(40).integers(0, 4, size=(3, 10)).astype(np.int32)
  k = 2
  if path == "closed":
    deltas_fn = functools.partial(obj.knn_count_deltas, k=k)
  else:
    deltas_fn = lambda d, a: obj.swap_deltas(functools.partial(obj.knn_count_score, k=k), d, a)
  with jax.enable_x64(True):
    def loss(W_, from_logits):
      lq, ld = Xq @ W_, jnp.einsum("qnd,db->qnb", Xd, W_)
      if not from_logits:
        lq, ld = jax.nn.sigmoid(lq), jax.nn.sigmoid(ld)
      d = obj.hard_distances(lq, ld, from_logits=from_logits)
      return obj.lambdarank_loss(lq, ld, rel, deltas_fn=deltas_fn, distances=d,
                                 pair_mask=_mask(d, swap_bins, top_bins), from_logits=from_logits, has_aux=True)
    want, active = ref_lambdarank_grad(W, Xq, Xd, rel, lambda e, a: ref_count(e, a, k), swap_bins, top_bins)
    assert active > 0
    grad = jax.jit(jax.grad(loss, has_aux=True), static_argnums=1)
    for from_logits in (False, True):
      g, aux = grad(jnp.asarray(W), from_logits)
      np.testing.assert_allclose(np.asarray(g), want, atol=1e-10, rtol=1e-8)
      assert int(aux["active_pairs"]) == active
      assert int(aux["preference_pairs"]) == sum(int(np.sum(r[:, None] > r[None, :])) for r in rel)


def _assert_same_positive_loss_and_grads(f1, f2, hq, hd, *, rel, rtol, atol):
  """``f1`` and ``f2`` give the same positive loss (to ``rel``) and gradients in both arguments."""
  v1, g1 = jax.jit(jax.value_and_grad(f1, argnums=(0, 1)))(hq, hd)
  v2, g2 = jax.jit(jax.value_and_grad(f2, argnums=(0, 1)))(hq, hd)
  assert float(v1) > 0
  assert float(v1) == pytest.approx(float(v2), rel=rel)
  for a, b in zip(g1, g2):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


def test_lambdarank_histogram_path_equals_generic_path():
  W, Xq, Xd, rel = problem(5, Q=4, N=12, b=8)
  hq = jax.nn.sigmoid(Xq @ W)
  hd = jax.nn.sigmoid(np.einsum("qnd,db->qnb", Xd, W))
  d = obj.hard_distances(hq, hd)
  mask = obj.swap_mask(d, swap_bins=4)
  # A user's own wrapper of a shipped score through swap_deltas, the histogram path and the closed form.
  generic = lambda x, a: obj.swap_deltas(lambda e, r: obj.average_precision_score(e, r, num_bits=8), x, a)
  fast = lambda x, a: obj.histogram_swap_deltas(obj.average_precision_from_histogram, x, a, num_bits=8, num_levels=2)
  closed = functools.partial(obj.average_precision_deltas, num_bits=8)
  f_generic = lambda a, b: obj.lambdarank_loss(a, b, rel, deltas_fn=generic, distances=d, pair_mask=mask)
  for other in (fast, closed):
    f_other = lambda a, b, f=other: obj.lambdarank_loss(a, b, rel, deltas_fn=f, distances=d, pair_mask=mask)
    _assert_same_positive_loss_and_grads(f_generic, f_other, hq, hd, rel=1e-5, rtol=1e-4, atol=1e-6)
  # The linear swap method for a kNN count: same as the generic path.
  count = lambda x, a: obj.swap_deltas(lambda e, r: obj.knn_count_score(e, r, k=3), x, a)
  count_hist = functools.partial(obj.knn_count_from_histogram, k=3)
  linear = lambda x, a: obj.histogram_swap_deltas(count_hist, x, a, num_bits=8, num_levels=2, method="linear")
  top = obj.swap_mask(d, top_bins=3)
  f_generic = lambda a, b: obj.lambdarank_loss(a, b, rel, deltas_fn=count, pair_mask=top)
  f_linear = lambda a, b: obj.lambdarank_loss(a, b, rel, deltas_fn=linear, pair_mask=top)
  _assert_same_positive_loss_and_grads(f_generic, f_linear, hq, hd, rel=1e-6, rtol=1e-5, atol=1e-7)


def ref_weights(d, affinity, pref, mask, score):
  """w[q, a, b] = |Delta S_qab| on preferred pairs within the mask, by explicit swaps."""
  Q, N = d.shape
  w = np.zeros((Q, N, N))
  for q in range(Q):
    for a in range(N):
      for b in range(N):
        if pref[q][a] > pref[q][b] and (mask is None or mask[q][a][b]):
          w[q, a, b] = abs(ref_delta(score, list(d[q]), list(affinity[q]), a, b))
  return w


def test_lambdarank_weights_brute_force_majority_and_threshold_modes():
  rng = np.random.default_rng(6)
  Q, N, C = 2, 9, 3
  d = rng.integers(0, 5, size=(Q, N)).astype(np.int32)
  labels = rng.integers(0, C, size=(Q, N))
  pairs = np.asarray(obj.label_pairs(np.array([0, 2]), labels, num_classes=C))
  pref = np.asarray(obj.pair_relevance(pairs, num_classes=C))
  F = rng.uniform(size=(C, C))

  def ref(e, a):
    return float(sum(F[int(a[i]) // C, int(a[i]) % C] for i in ref_neighbors(e, 2)))

  for threshold in ("relative", "absolute"):
    mask = obj.swap_mask(d, swap_bins=3, top_bins=1, threshold=threshold)
    for deltas_fn in (functools.partial(obj.hierarchical_deltas, similarity=F, k=2),
                      lambda x, a: obj.swap_deltas(functools.partial(obj.hierarchical_score, similarity=F, k=2), x, a)):
      w = np.asarray(obj.lambdarank_weights(d, pairs, deltas_fn=deltas_fn, preference=pref, pair_mask=mask))
      for q in range(Q):
        for a in range(N):
          for b in range(N):
            want = 0.0
            if pref[q, a] > pref[q, b] and ref_allowed(list(d[q]), a, b, 3, 1, threshold):
              want = abs(ref_delta(ref, list(d[q]), list(pairs[q]), a, b))
            assert w[q, a, b] == pytest.approx(want, abs=1e-6), (threshold, q, a, b)


def test_lambdarank_weights_every_closed_form_brute_force():
  # w_ab = |Delta S_ab| on the preferred pairs within the mask, for each shipped score's closed form.
  rng = np.random.default_rng(9)
  Q, N, C, b = 2, 8, 3, 6
  d = rng.integers(0, b + 1, size=(Q, N)).astype(np.int32)
  rel = rng.integers(0, 2, size=(Q, N)).astype(np.int32)
  levels = rng.integers(0, 3, size=(Q, N)).astype(np.int32)
  pairs = np.asarray(obj.label_pairs(np.array([0, 1]), rng.integers(0, C, size=(Q, N)), num_classes=C))
  offsets = rng.normal(size=(Q, N))
  mask = rng.uniform(size=(Q, N, N)) < 0.7
  P = functools.partial
  cases = [  # (deltas_fn, reference score, affinity, preference)
      (P(obj.knn_count_deltas, k=2), lambda e, a: ref_count(e, a, 2), levels, levels),
      (P(obj.retrieval_deltas, radius=2), lambda e, a: sum(a[i] for i in range(len(e)) if e[i] <= 2), rel, rel),
      (P(obj.knn_majority_deltas, num_classes=C, k=2), lambda e, a: ref_majority(e, a, C, 2), pairs,
       np.asarray(obj.pair_relevance(pairs, num_classes=C))),
      (P(obj.regression_deltas, k=2), lambda e, a: np.mean([a[i] ** 2 for i in ref_neighbors(e, 2)]), offsets,
       -np.abs(offsets)),
  ]
  for deltas_fn, score, affinity, pref in cases:
    w = np.asarray(jax.jit(lambda x, a, p, m, f=deltas_fn: obj.lambdarank_weights(x, a, deltas_fn=f, preference=p,
                                                                                   pair_mask=m))(d, affinity, pref, mask))
    want = ref_weights(d, affinity, pref, mask, score)
    assert np.count_nonzero(want) > 0, deltas_fn.func.__name__
    np.testing.assert_allclose(w, want, atol=1e-5, rtol=0, err_msg=deltas_fn.func.__name__)


def test_swap_mask_and_pairs_brute_force():
  rng = np.random.default_rng(7)
  d = rng.integers(0, 8, size=(3, 11))
  for swap_bins, top_bins, threshold in [(None, None, "relative"), (2, None, "relative"), (4, 2, "relative"),
                                         (5, 3, "absolute"), (None, 1, "absolute")]:
    m = np.asarray(obj.swap_mask(d, swap_bins=swap_bins, top_bins=top_bins, threshold=threshold))
    for q in range(3):
      want = [[ref_allowed(list(d[q]), a, b, swap_bins, top_bins, threshold) for b in range(11)] for a in range(11)]
      assert m[q].tolist() == want
  pref = rng.normal(size=(2, 6))
  p = np.asarray(obj.preference_pairs(pref))
  assert p.tolist() == [[[pref[q, a] > pref[q, b] for b in range(6)] for a in range(6)] for q in range(2)]
  assert obj.paper_swap_bins(32) == 11 and obj.paper_swap_bins(8) == 3 and obj.paper_swap_bins(64) == 22


def test_lambdarank_default_distances_and_shared_documents():
  W, Xq, Xd, rel = problem(8, Q=2, N=8)
  hq = sigmoid(Xq @ W)
  hd = sigmoid(Xd[0] @ W)  # shared documents [N, b]
  rel_shared = np.broadcast_to(rel[0], (2, 8))
  score = functools.partial(obj.knn_count_deltas, k=1)
  d = [[int(np.sum((hq[q] > 0.5) != (h > 0.5))) for h in hd] for q in range(2)]
  explicit = obj.lambdarank_loss(hq, hd, rel_shared, deltas_fn=score, distances=np.array(d, np.int32))
  implicit = obj.lambdarank_loss(hq, hd, rel_shared, deltas_fn=score)
  assert float(explicit) == pytest.approx(float(implicit))
  # Reference value by loops.
  total = 0.0
  for q in range(2):
    s = ref_scores(hq[q], hd)
    for a in range(8):
      for b in range(8):
        if rel_shared[q, a] > rel_shared[q, b]:
          total += abs(ref_delta(lambda e, r: ref_count(e, r, 1), d[q], list(rel_shared[q]), a, b)) \
              * math.log1p(math.exp(s[a] - s[b]))
  assert float(implicit) == pytest.approx(total / 2, rel=1e-5)


def test_subsample_documents():
  key = jax.random.key(0)
  qi = jnp.arange(400) % 20
  idx = np.asarray(obj.subsample_documents(key, 400, 20, num_samples=5, query_indices=qi))
  assert idx.shape == (400, 5) and idx.dtype == np.int32
  assert all(len(set(r)) == 5 for r in idx.tolist())
  assert all(int(q) not in r for q, r in zip(np.asarray(qi), idx.tolist()))
  # Uniform over the 19 allowed documents: each drawn 400 * 5 / 19 ~ 105 times in expectation
  # (binomial sd ~ 10); a fixed key, so deterministic.
  counts = np.bincount(idx.ravel(), minlength=20)
  assert np.all(np.abs(counts - 2000 / 20) < 50)
  again = np.asarray(obj.subsample_documents(key, 400, 20, num_samples=5, query_indices=qi))
  np.testing.assert_array_equal(idx, again)
  other = np.asarray(obj.subsample_documents(jax.random.key(1), 400, 20, num_samples=5, query_indices=qi))
  assert not np.array_equal(idx, other)


# --------------------------------------------------------------------------- bad inputs


def test_bad_inputs():
  hq = np.full((2, 4), 0.5)
  hd = np.full((2, 3, 4), 0.5)
  rel = np.zeros((2, 3), np.int32)
  deltas = functools.partial(obj.knn_count_deltas, k=1)
  with pytest.raises(ValueError, match="query_codes"):
    obj.ranknet_loss(np.full((2, 4), 1.5), hd, rel)
  with pytest.raises(ValueError, match="query_codes"):
    obj.ranknet_loss(np.full((4,), 0.5), hd, rel)
  with pytest.raises(ValueError, match="doc_codes"):
    obj.ranknet_loss(hq, np.full((2, 3, 5), 0.5), rel)
  with pytest.raises(ValueError, match="doc_codes"):
    obj.ranknet_loss(hq, np.full((3, 3, 4), 0.5), rel)
  with pytest.raises(ValueError, match="doc_codes"):
    obj.ranknet_loss(hq, np.full((2, 3, 4), np.nan), rel)
  with pytest.raises(ValueError, match="preference"):
    obj.ranknet_loss(hq, hd, np.zeros((2, 4)))
  with pytest.raises(ValueError, match="pair_mask"):
    obj.ranknet_loss(hq, hd, rel, pair_mask=np.ones((2, 3, 3), np.int32))
  with pytest.raises(ValueError, match="from_logits"):
    obj.ranknet_loss(hq, hd, rel, from_logits=1)
  with pytest.raises(ValueError, match="worse_codes"):
    obj.triplet_ranknet_loss(hq, hq, np.full((3, 4), 0.5))
  with pytest.raises(ValueError, match="deltas_fn"):
    obj.lambdarank_loss(hq, hd, rel, deltas_fn=None)
  with pytest.raises(ValueError, match="deltas_fn"):
    obj.lambdarank_weights(np.zeros((2, 3), np.int32), rel, deltas_fn="knn_count")
  with pytest.raises(ValueError, match="deltas_fn"):  # not a [N, N] matrix per query
    obj.lambdarank_loss(hq, hd, rel, deltas_fn=lambda d, a: d.astype(float))
  with pytest.raises(ValueError, match="affinity"):
    obj.lambdarank_loss(hq, hd, np.zeros((2, 4), np.int32), deltas_fn=deltas)
  with pytest.raises(ValueError, match="distances"):
    obj.lambdarank_loss(hq, hd, rel, deltas_fn=deltas, distances=np.full((2, 3), 5))
  with pytest.raises(ValueError, match="distances"):
    obj.lambdarank_loss(hq, hd, rel, deltas_fn=deltas, distances=np.zeros((2, 2), np.int32))
  with pytest.raises(ValueError, match="distances"):
    obj.lambdarank_weights(np.zeros((3,), np.int32), np.zeros((3,), np.int32), deltas_fn=deltas)
  with pytest.raises(ValueError, match="preference"):
    obj.lambdarank_loss(hq, hd, np.zeros((2, 3, 2)), deltas_fn=deltas)
  with pytest.raises(ValueError, match="pair_mask"):
    obj.lambdarank_loss(hq, hd, rel, deltas_fn=deltas, pair_mask=np.ones((2, 3, 3), np.int32))
  with pytest.raises(ValueError, match="pair_mask"):
    obj.lambdarank_weights(np.zeros((2, 3), np.int32), rel, deltas_fn=deltas, pair_mask=np.ones((2, 3), bool))
  with pytest.raises(ValueError, match="swap_bins"):
    obj.swap_mask(np.zeros((2, 3), np.int32), swap_bins=0)
  with pytest.raises(ValueError, match="top_bins"):
    obj.swap_mask(np.zeros((2, 3), np.int32), top_bins=1.5)
  with pytest.raises(ValueError, match="threshold"):
    obj.swap_mask(np.zeros((2, 3), np.int32), threshold="fixed")
  with pytest.raises(ValueError, match="method"):  # a deltas_fn's own checks reach the caller
    obj.lambdarank_loss(hq, hd, rel, deltas_fn=lambda d, a: obj.histogram_swap_deltas(
        obj.average_precision_from_histogram, d, a, num_bits=4, num_levels=2, method="fast"))
  with pytest.raises(ValueError, match="has_aux"):
    obj.lambdarank_loss(hq, hd, rel, deltas_fn=deltas, has_aux="yes")
  with pytest.raises(ValueError, match="num_bits"):
    obj.paper_swap_bins(0)
  with pytest.raises(ValueError, match="preference"):
    obj.preference_pairs(np.array(["a", "b"]))
  key = jax.random.key(0)
  with pytest.raises(ValueError, match="key"):
    obj.subsample_documents(0, 2, 5)
  with pytest.raises(ValueError, match="num_samples"):
    obj.subsample_documents(key, 2, 5, num_samples=5, query_indices=np.array([0, 1]))
  with pytest.raises(ValueError, match="query_indices"):
    obj.subsample_documents(key, 2, 5, num_samples=2, query_indices=np.array([0, 9]))
  with pytest.raises(ValueError, match="num_queries"):
    obj.subsample_documents(key, 0, 5, num_samples=2)


def test_lambdarank_takes_signed_offsets():
  rng = np.random.default_rng(4)
  Q, N, b = 3, 6, 5
  d = rng.integers(0, b + 1, size=(Q, N)).astype(np.int32)
  # Target offsets are signed: the same weights as the jitted call (where affinity is traced), and as by hand.
  offsets = rng.normal(size=(Q, N))
  assert offsets.min() < 0
  fn = functools.partial(obj.regression_deltas, k=2)
  eager = np.asarray(obj.lambdarank_weights(d, offsets, deltas_fn=fn, preference=-np.abs(offsets)))
  jitted = np.asarray(jax.jit(lambda x, a, p: obj.lambdarank_weights(x, a, deltas_fn=fn, preference=p))(
      d, offsets, -np.abs(offsets)))
  np.testing.assert_allclose(eager, jitted, atol=1e-6)
  want = ref_weights(d, offsets, -np.abs(offsets), np.ones((Q, N, N), bool),
                     lambda e, a: np.mean([a[i] ** 2 for i in ref_neighbors(e, 2)]))
  np.testing.assert_allclose(eager, want, atol=1e-5)
