"""hashjax.metric_learning: LMNN's pieces against loops and finite differences, NCA and LMNN on a kNN problem."""

import itertools

import numpy as np
import pytest

from hashjax import metric_learning


def brute_force_targets(x, y, k):
  out = []
  for i in range(len(x)):
    cands = sorted((float(np.sum((x[i] - x[j]) ** 2)), j) for j in range(len(x)) if j != i and y[j] == y[i])
    out.append([j for _, j in cands[:k]])
  return np.array(out)


def loop_loss(m, x, y, targets, mu):
  """Weinberger & Saul eq. 13 over n k, one triplet at a time."""
  n, k = targets.shape
  d = lambda a, b: float(np.sum(((x[a] - x[b]) @ m) ** 2))  # noqa: E731
  pull = push = 0.0
  for i in range(n):
    for j in targets[i]:
      pull += d(i, j)
      for l in range(n):
        if y[l] != y[i]:
          push += max(0.0, 1.0 + d(i, j) - d(i, l))
  return ((1 - mu) * pull + mu * push) / (n * k)


def loop_grad(m, x, y, targets, mu):
  """The gradient written out: 2 / (n k) [(1 - mu) sum C_ij + mu sum_active (C_ij - C_il)] L."""
  n, k = targets.shape
  outer = lambda a, b: np.outer(x[a] - x[b], x[a] - x[b])  # noqa: E731
  d = lambda a, b: float(np.sum(((x[a] - x[b]) @ m) ** 2))  # noqa: E731
  g = np.zeros((x.shape[1], x.shape[1]))
  for i in range(n):
    for j in targets[i]:
      g += (1 - mu) * outer(i, j)
      for l in range(n):
        if y[l] != y[i] and 1.0 + d(i, j) - d(i, l) > 0:
          g += mu * (outer(i, j) - outer(i, l))
  return 2 * g @ m / (n * k)


def knn_error(train_x, train_y, test_x, test_y, k=3):
  """Majority of the k nearest (Euclidean), ties to the smallest label: a loop."""
  wrong = 0
  for q, label in zip(test_x, test_y):
    nearest = np.argsort(np.sum((train_x - q) ** 2, axis=1), kind="stable")[:k]
    votes = np.bincount(train_y[nearest], minlength=train_y.max() + 1)
    wrong += int(np.argmax(votes) != label)
  return wrong / len(test_y)


def noisy_problem(seed, n_per_class=50):
  """Three classes apart along two columns, plus three columns of large noise that mislead Euclidean kNN."""
  rng = np.random.default_rng(seed)
  y = np.repeat(np.arange(3), n_per_class)
  centres = np.array([[0.0, 0.0], [1.0, 0.0], [0.5, 0.9]])
  x = np.concatenate([centres[y] + 0.15 * rng.normal(size=(len(y), 2)), 2.0 * rng.normal(size=(len(y), 3))], axis=1)
  return x, y


def test_target_neighbors_match_a_brute_force_loop():
  rng = np.random.default_rng(0)
  x, y = rng.normal(size=(40, 4)), rng.integers(0, 3, 40)
  for k in (1, 3):
    np.testing.assert_array_equal(metric_learning.target_neighbors(x, y, k=k), brute_force_targets(x, y, k))


@pytest.mark.parametrize("mu", [0.5, 0.2])
def test_lmnn_loss_and_gradient_match_a_loop_over_triplets_and_finite_differences(mu):
  rng = np.random.default_rng(1)
  x, y = 0.6 * rng.normal(size=(14, 3)), np.repeat([0, 1, 2], [5, 5, 4])
  m = np.eye(3)[:, :2] + 0.3 * rng.normal(size=(3, 2))
  targets = brute_force_targets(x, y, 2)
  hinges = [1 + np.sum(((x[i] - x[j]) @ m) ** 2) - np.sum(((x[i] - x[l]) @ m) ** 2)
            for i in range(14) for j in targets[i] for l in range(14) if y[l] != y[i]]
  assert 0 < np.mean(np.array(hinges) > 0) < 1  # both active and inactive triplets
  loss, grad = metric_learning.lmnn_loss(m, x, y, targets, regularization=mu)
  assert loss == pytest.approx(loop_loss(m, x, y, targets, mu), rel=1e-12)
  np.testing.assert_allclose(grad, loop_grad(m, x, y, targets, mu), rtol=1e-10, atol=1e-12)
  eps = 1e-6
  numeric = np.zeros_like(m)
  for a, b in itertools.product(range(3), range(2)):
    e = np.zeros_like(m)
    e[a, b] = eps
    numeric[a, b] = (loop_loss(m + e, x, y, targets, mu) - loop_loss(m - e, x, y, targets, mu)) / (2 * eps)
  np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-7)


def test_lmnn_lowers_the_3nn_error_where_noisy_columns_mislead_euclidean_distance():
  x, y = noisy_problem(0)
  test_x, test_y = noisy_problem(1)
  before = knn_error(x, y, test_x, test_y)
  m = metric_learning.fit_lmnn(x, y, k=3)
  after = knn_error(x @ m, y, test_x @ m, test_y)
  assert before > 0.25  # Euclidean distance is led by the noise
  assert after < 0.1 and after < before / 3
  targets = brute_force_targets(x, y, 3)  # lmnn_loss is checked against loop_loss above
  assert metric_learning.lmnn_loss(m, x, y, targets)[0] < 0.5 * metric_learning.lmnn_loss(np.eye(5), x, y, targets)[0]


def test_lmnn_starts_from_the_principal_directions_below_full_rank():
  x, y = noisy_problem(2)
  m = metric_learning.fit_lmnn(x, y, num_components=2, max_iterations=0)
  centred = x - x.mean(axis=0)
  _, _, vt = np.linalg.svd(centred, full_matrices=False)
  assert m.shape == (5, 2)
  np.testing.assert_allclose(np.abs(m.T @ vt[:2].T), np.eye(2), atol=1e-10)  # the top two, up to sign
  np.testing.assert_array_equal(metric_learning.fit_lmnn(x, y, max_iterations=0), np.eye(5))


def test_nca_has_the_requested_shape_and_lowers_the_same_3nn_error():
  x, y = noisy_problem(0)
  test_x, test_y = noisy_problem(1)
  m = metric_learning.fit_nca(x, y)
  assert m.shape == (5, 5) and m.dtype == np.float64
  before = knn_error(x, y, test_x, test_y)
  assert knn_error(x @ m, y, test_x @ m, test_y) < before / 3
  assert metric_learning.fit_nca(x, y, num_components=2, max_iterations=5).shape == (5, 2)


@pytest.mark.parametrize("fit", [metric_learning.fit_lmnn, metric_learning.fit_nca, metric_learning.target_neighbors])
def test_bad_inputs_name_the_argument(fit):
  x, y = noisy_problem(0, n_per_class=4)
  with pytest.raises(ValueError, match=r"^labels: expected .*shape \(12,\)"):
    fit(x, y[:-1])
  with pytest.raises(ValueError, match="^labels: expected at least two classes"):
    fit(x, np.zeros(12, np.int64))
  with pytest.raises(ValueError, match="^labels: expected an integer array"):
    fit(x, y.astype(np.float32))
  bad = x.copy()
  bad[3, 1] = np.nan
  with pytest.raises(ValueError, match="^features: expected finite values"):
    fit(bad, y)
  with pytest.raises(ValueError, match="^features: expected a non-empty 2-D"):
    fit(x[0], y)
  if fit is not metric_learning.fit_nca:
    with pytest.raises(ValueError, match=r"^k: expected at most 3, the size of class 0 - 1, got 4$"):
      fit(x, y, k=4)
  if fit is not metric_learning.target_neighbors:
    with pytest.raises(ValueError, match="^num_components: expected at most the 5 columns"):
      fit(x, y, num_components=6)


def test_lmnn_options_are_checked():
  x, y = noisy_problem(0, n_per_class=4)
  with pytest.raises(ValueError, match=r"^regularization: expected a finite number in \[0, 1\]"):
    metric_learning.fit_lmnn(x, y, regularization=1.5)
  with pytest.raises(ValueError, match="^learning_rate: expected a finite number > 0"):
    metric_learning.fit_lmnn(x, y, learning_rate=0.0)
  targets = brute_force_targets(x, y, 2)
  targets[5, 0] = 0  # item 0 is of another class than item 5
  with pytest.raises(ValueError, match="^targets: expected items of the row's own class"):
    metric_learning.lmnn_loss(np.eye(5), x, y, targets)
  with pytest.raises(ValueError, match="^linear_map: expected 5 rows"):
    metric_learning.lmnn_loss(np.eye(2), x, y, brute_force_targets(x, y, 2))
