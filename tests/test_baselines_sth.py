"""Tests for hashjax.baselines.sth (self-taught hashing) against references written here in numpy and scipy.

The graph against a brute-force k-nearest-neighbour union (and, for a disconnected one, the closest pairs joining
its components, worked out by hand); the eigenmap against LAPACK's dense eigenvectors of I - D^-1/2 W D^-1/2
mapped back by D^-1/2, with the documented sign convention, and against the generalised equation
(D - W) y = lambda D y itself, on the dense path and on ARPACK's; the SVM stage against the training bits it learns
and against numpy's evaluation of its own hyperplanes.
"""

import functools

import jax
import numpy as np
import pytest
import scipy.linalg
import scipy.sparse.csgraph
from sklearn.datasets import load_digits

from hashjax import baselines, codes, load_model, models
from hashjax.baselines import sth

KEY = jax.random.key(0)


@functools.lru_cache(maxsize=None)
def _digits():
  data = load_digits()
  return data.data.astype(np.float64), data.target


def _gaussian(n=60, d=5, seed=0):
  return np.random.default_rng(seed).normal(size=(n, d)) + 0.5


def _reference_graph(x, k, metric):
  """Dense 0/1 union of each row's k nearest other rows (brute force)."""
  if metric == "cosine":
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    dist = 1.0 - u @ u.T
  else:
    dist = np.sum((x[:, None, :] - x[None, :, :]) ** 2, axis=-1)
  np.fill_diagonal(dist, np.inf)
  near = np.argsort(dist, axis=1, kind="stable")[:, :k]
  w = np.zeros(dist.shape)
  w[np.repeat(np.arange(len(x)), k), near.ravel()] = 1.0
  return np.maximum(w, w.T)


def _reference_eigenmap(w, num_bits):
  """Dense generalised eigenvectors of (D - W) y = lambda D y, the trivial one dropped, largest |entry| positive.

  D is diagonal, so they are D^-1/2 times the eigenvectors of I - D^-1/2 W D^-1/2 (LAPACK's dense solver; the
  first, lambda = 0, is the trivial one); the tests check the generalised equation itself on the result."""
  root = np.sqrt(w.sum(1))
  vals, vecs = scipy.linalg.eigh(np.eye(len(w)) - w / root[:, None] / root[None, :], subset_by_index=[0, num_bits])
  vals, vecs = vals[1:], vecs[:, 1:] / root[:, None]
  peak = np.argmax(np.abs(vecs), axis=0)
  vecs = vecs * np.sign(vecs[peak, np.arange(num_bits)])
  return vals, vecs, (vecs > np.median(vecs, axis=0)).astype(np.uint8)


# ----------------------------------------------------------------------------- the graph

@pytest.mark.parametrize("metric", sth.METRICS)
def test_graph_is_the_symmetric_knn_union(metric):
  x = _gaussian()
  ref = _reference_graph(x, 6, metric)
  assert scipy.sparse.csgraph.connected_components(ref)[0] == 1  # nothing to join
  graph = sth.knn_graph(x, num_neighbors=6, metric=metric)
  np.testing.assert_array_equal(graph.toarray(), ref)
  assert ref.sum(1).min() >= 6 and ref.sum() > 6 * len(x)  # symmetrised: some rows gained edges


def test_cosine_ignores_row_scale_and_euclidean_does_not():
  x = _gaussian()
  scaled = x * np.random.default_rng(1).uniform(0.1, 10.0, size=(len(x), 1))
  cos = [sth.knn_graph(a, num_neighbors=5).toarray() for a in (x, scaled)]
  np.testing.assert_array_equal(cos[0], cos[1])
  euc = [sth.knn_graph(a, num_neighbors=5, metric="euclidean").toarray() for a in (x, scaled)]
  assert np.any(euc[0] != euc[1])


def test_disconnected_graph_is_joined_by_closest_pairs_until_connected():
  # Four clusters of 8 points on a line, neighbours ~0.1 apart (no two gaps equal); with k = 2 each cluster is
  # its own component. Round 1 joins A-B and C-D (each pair's closest points), round 2 joins AB to CD by their
  # closest pair, B's last point and C's first.
  gaps = 0.1 + 0.001 * np.random.default_rng(0).permutation(28).reshape(4, 7)
  line = np.concatenate([start + np.r_[0.0, np.cumsum(g)] for start, g in zip((0.0, 2.0, 20.0, 22.0), gaps)])
  x = np.stack([line, np.zeros_like(line)], axis=1)
  ref = _reference_graph(x, 2, "euclidean")
  assert scipy.sparse.csgraph.connected_components(ref)[0] == 4
  for a, b in ((7, 8), (23, 24), (15, 16)):
    ref[a, b] = ref[b, a] = 1.0
  np.testing.assert_array_equal(sth.knn_graph(x, num_neighbors=2, metric="euclidean").toarray(), ref)
  eig = sth.laplacian_eigenmap(x, num_bits=3, num_neighbors=2, metric="euclidean")
  assert np.all(eig.values > 1e-9)  # connected: only the trivial eigenvalue is 0
  # the first bit cuts the link between the two halves: AB against CD
  assert eig.bits[:, 0].tolist() in (np.repeat([1, 0], 16).tolist(), np.repeat([0, 1], 16).tolist())


# ----------------------------------------------------------------------------- the eigenmap

@pytest.mark.parametrize("data,k,num_bits", [("gaussian", 6, 8), ("digits", 10, 16)])
def test_eigenmap_matches_a_dense_generalised_eigensolve(data, k, num_bits):
  x = _gaussian(n=200, d=6) if data == "gaussian" else _digits()[0]
  assert (len(x) <= sth.DENSE_MAX_ROWS) == (data == "gaussian")  # the dense path, then ARPACK's
  w = _reference_graph(x, k, "cosine")
  vals, vecs, bits = _reference_eigenmap(w, num_bits)
  assert np.min(np.diff(vals)) > 1e-6  # distinct eigenvalues: the eigenvectors are unique up to sign
  eig = sth.laplacian_eigenmap(x, num_bits=num_bits, num_neighbors=k)
  np.testing.assert_allclose(eig.values, vals, atol=1e-10)
  np.testing.assert_allclose(eig.vectors, vecs, atol=1e-8)
  np.testing.assert_array_equal(eig.bits, bits)
  np.testing.assert_array_equal(eig.bits.sum(0), np.full(num_bits, len(x) // 2))  # the median halves each bit
  d = w.sum(1)
  np.testing.assert_allclose(eig.vectors.T @ (d[:, None] * eig.vectors), np.eye(num_bits), atol=1e-8)
  # the generalised equation L y = lambda D y, and D-orthogonality to the trivial y = 1
  np.testing.assert_allclose((np.diag(d) - w) @ eig.vectors, d[:, None] * eig.vectors * eig.values, atol=1e-9)
  np.testing.assert_allclose(d @ eig.vectors, 0.0, atol=1e-9)


def test_eigenmap_bits_reach_every_nontrivial_eigenvector():
  x = _gaussian(n=12, d=3, seed=2)  # a connected graph with 11 distinct non-trivial eigenvalues
  eig = sth.laplacian_eigenmap(x, num_bits=11, num_neighbors=3)
  vals, vecs, bits = _reference_eigenmap(_reference_graph(x, 3, "cosine"), 11)
  assert np.min(np.diff(vals)) > 1e-3
  np.testing.assert_allclose(eig.values, vals, atol=1e-10)
  np.testing.assert_array_equal(eig.bits, bits)


# ----------------------------------------------------------------------------- the hash functions

def test_svms_reproduce_most_training_bits():
  x, _ = _digits()
  params = sth.fit(x, num_bits=16, num_neighbors=10, svm_c=0.3)
  target = sth.laplacian_eigenmap(x, num_bits=16, num_neighbors=10).bits
  bits = np.asarray(sth.encode(params, x.astype(np.float32)))
  agree = np.mean(bits == target, axis=0)
  assert agree.mean() > 0.8 and agree[:4].min() > 0.85, agree
  mean, w, c = (np.asarray(a, np.float64) for a in params)
  np.testing.assert_allclose(mean, x.mean(0), rtol=1e-6)
  logits = (x - mean) @ w + c
  clear = np.abs(logits) > 1e-4
  assert clear.mean() > 0.99
  np.testing.assert_array_equal(bits[clear], (logits > 0)[clear])


def test_encode_is_project_positive_in_any_batch_and_under_jit():
  x = _digits()[0].astype(np.float32)
  params = baselines.fit("sth", x, num_bits=12, num_neighbors=10)
  values, bits = np.asarray(sth.project(params, x)), np.asarray(sth.encode(params, x))
  assert bits.dtype == np.uint8 and bits.shape == (len(x), 12) and values.shape == (len(x), 12)
  np.testing.assert_array_equal(bits, (values > 0).astype(np.uint8))
  np.testing.assert_array_equal(np.asarray(jax.jit(sth.encode)(params, x)), bits)
  np.testing.assert_array_equal(np.asarray(sth.encode(params, x[:12].reshape(3, 4, 64))).reshape(12, 12), bits[:12])
  assert all(a.dtype == np.float32 for a in params)


def test_deterministic_and_key_ignored():
  x = _gaussian(n=150, d=8)
  fits = [baselines.fit("sth", x, num_bits=6, key=key, num_neighbors=8) for key in (KEY, KEY, jax.random.key(3))]
  fits.append(sth.fit(x, num_bits=6, num_neighbors=8))
  for params in fits[1:]:
    for a, b in zip(params, fits[0]):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_constant_training_bit_gets_a_constant_hash_function(monkeypatch):
  # Median thresholds give a constant bit only when most of an eigenvector's entries tie, which rounding breaks
  # in any real graph: the eigenmap's bits are forced here instead.
  real = sth._eigenmap

  def one_constant(graph, num_bits):
    eig = real(graph, num_bits)
    bits = eig.bits.copy()
    bits[:, 1] = 0
    return eig._replace(bits=bits)

  monkeypatch.setattr(sth, "_eigenmap", one_constant)
  x = _gaussian(n=40, d=4)
  params = sth.fit(x, num_bits=3, num_neighbors=5)
  np.testing.assert_array_equal(np.asarray(params.projection)[:, 1], 0.0)
  assert float(params.bias[1]) == -1.0
  bits = np.asarray(sth.encode(params, x.astype(np.float32)))
  np.testing.assert_array_equal(bits[:, 1], 0)
  assert bits[:, 0].min() == 0 and bits[:, 0].max() == 1


# ----------------------------------------------------------------------------- registry and saved models

def test_registry():
  assert baselines.BASELINES["sth"] is sth and baselines.PARAMS["sth"] is sth.STHParams
  assert "sth" not in baselines.SUPERVISED and "sth" in baselines.__all__ and "STHParams" in baselines.__all__
  x = _gaussian()
  with pytest.raises(ValueError, match="labels: 'sth' is unsupervised"):
    baselines.fit("sth", x, num_bits=3, labels=np.arange(60) % 2)


def test_model_saves_loads_and_encodes_the_same_words(tmp_path):
  x = _digits()[0].astype(np.float32)
  params = baselines.fit("sth", x[:1000], num_bits=20, num_neighbors=10)
  path = models.from_baseline("sth", params, train_features=x[:1000]).save(tmp_path / "sth-20")
  loaded = load_model(path)
  assert (loaded.kind, loaded.num_bits, loaded.dim) == ("sth", 20, 64)
  assert type(loaded.params) is sth.STHParams
  np.testing.assert_array_equal(np.asarray(loaded.encode(x[1000:])),
                                np.asarray(codes.pack_bits(sth.encode(params, x[1000:]))))


# ----------------------------------------------------------------------------- bad input

def test_bad_fit_inputs():
  x = _gaussian(n=20, d=5)
  y = x.copy()
  y[3, 2] = np.nan
  for bad in (y, x[0], np.zeros((0, 5)), x.astype(np.complex64), x[:1]):
    with pytest.raises(ValueError, match="features"):
      sth.fit(bad, num_bits=2, num_neighbors=1)
  zero = x.copy()
  zero[4] = 0.0
  with pytest.raises(ValueError, match="features: metric 'cosine' needs rows of non-zero norm.*row 4"):
    sth.fit(zero, num_bits=2, num_neighbors=3)
  sth.fit(zero, num_bits=2, num_neighbors=3, metric="euclidean")  # no norm needed
  for bad in (0, -1, 4.0, True, None, np.array(4)):
    with pytest.raises(ValueError, match="num_bits: expected a positive int"):
      sth.fit(x, num_bits=bad, num_neighbors=3)
  with pytest.raises(ValueError, match="num_bits: expected at most 19, the graph's non-trivial eigenvectors, got 20"):
    sth.fit(x, num_bits=20, num_neighbors=3)
  with pytest.raises(ValueError, match="num_neighbors: expected at most the 19 other items, got 20"):
    sth.fit(x, num_bits=2, num_neighbors=20)
  for bad in (0, 2.5, None, True):
    with pytest.raises(ValueError, match="num_neighbors: expected an int >= 1"):
      sth.fit(x, num_bits=2, num_neighbors=bad)
  for bad in ("manhattan", None, "Cosine"):
    with pytest.raises(ValueError, match=r"metric: expected one of \['cosine', 'euclidean'\]"):
      sth.fit(x, num_bits=2, num_neighbors=3, metric=bad)
  for bad in (0, -1.0, np.nan, np.inf, "1", True):
    with pytest.raises(ValueError, match="svm_c: expected a finite number > 0"):
      sth.fit(x, num_bits=2, num_neighbors=3, svm_c=bad)
  for bad in (0, np.zeros(2, np.float32), jax.random.split(KEY, 2)):
    with pytest.raises(ValueError, match="key"):
      sth.fit(x, num_bits=2, num_neighbors=3, key=bad)
  with pytest.raises(ValueError, match="features: .*outside jax.jit"):
    jax.jit(lambda a: sth.fit(a, num_bits=2, num_neighbors=3))(x)
  with pytest.raises(ValueError, match="num_bits: expected at most 19"):
    sth.laplacian_eigenmap(x, num_bits=20, num_neighbors=3)
  with pytest.raises(ValueError, match="num_neighbors: expected at most"):
    sth.knn_graph(x, num_neighbors=20)
  # Every item linked to every other: any basis of the one repeated eigenvalue would do, so no codes are learned.
  assert sth.knn_graph(x, num_neighbors=19).nnz == 20 * 19
  for fit in (lambda: sth.fit(x, num_bits=10, num_neighbors=19),
              lambda: sth.laplacian_eigenmap(x, num_bits=2, num_neighbors=19)):
    with pytest.raises(ValueError, match=r"^num_neighbors: expected a graph in which some items are not linked, got "
                                         r"one that links each of the 20 items to every other \(a complete graph"):
      fit()


def test_bad_encode_inputs():
  x = _gaussian(n=20, d=5).astype(np.float32)
  params = sth.fit(x, num_bits=3, num_neighbors=4)
  for bad in (x[:, :4], np.float32(1.0), x.astype(np.complex64)):
    with pytest.raises(ValueError, match="features"):
      sth.encode(params, bad)
  y = x.copy()
  y[0, 0] = np.inf
  with pytest.raises(ValueError, match="features"):
    sth.project(params, y)
  with pytest.raises(ValueError, match="params: expected STHParams from hashjax.baselines.sth.fit"):
    sth.encode(baselines.fit("pca", x, num_bits=3), x)
