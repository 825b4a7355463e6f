"""experiments.methods.nair: Nair et al.'s RankNet / LambdaRank wired into the experiment launcher.

The runlocal configs train end to end (scikit-learn digits, seconds) and must
beat the untrained mapping; the pieces are checked against brute-force
references (sorting, loops over queries and neighbours).
"""

import os
import sys

import jax
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from configs import lambdarank_knn, lambdarank_retrieval  # noqa: E402
from experiments import fitting, tasks  # noqa: E402
from experiments.methods import nair  # noqa: E402
from hashjax import codes, mappings  # noqa: E402
from hashjax import train as train_lib  # noqa: E402


def _words(mapping, params, features):
  return mappings.encode(mapping, params, features)


def _train(config):
  """Trains through the lib's pieces and hashjax.train.train; returns (task, mapping, init, trained, history)."""
  task = tasks.make_task(config)
  mapping, params0 = fitting.make_mapping(config, task)
  params, history = train_lib.train(
      params=params0, loss_fn=nair.make_objective(config, mapping, task),
      optimizer=fitting.make_optimizer(config), batch_fn=nair.make_batch_fn(config, task),
      num_steps=config.num_steps, log_every=10, eval_at_start=False)
  return task, mapping, params0, params, history


def _eval(config, task, mapping, params):
  x = task.features
  return nair.evaluate(config, task, _words(mapping, params, x[task.query]),
                           _words(mapping, params, x[task.database]))


@pytest.mark.parametrize("method", ["lambdarank", "ranknet"])
def test_runlocal_knn_trains_and_beats_untrained(method):
  config = lambdarank_knn.get_config(f"runlocal,method={method}")
  task, mapping, params0, params, history = _train(config)
  losses = [h["loss"] for h in history if h["kind"] == "train"]
  assert losses and np.all(np.isfinite(losses))
  before = _eval(config, task, mapping, params0)
  after = _eval(config, task, mapping, params)
  assert after["knn_error"] < before["knn_error"], (before, after)
  if method == "lambdarank":
    aux = [h for h in history if h["kind"] == "train"][-1]
    assert 0 < aux["active_fraction"] <= 1


def test_runlocal_retrieval_trains_and_beats_untrained():
  config = lambdarank_retrieval.get_config("runlocal")
  task, mapping, params0, params, history = _train(config)
  losses = [h["loss"] for h in history if h["kind"] == "train"]
  assert losses and np.all(np.isfinite(losses))
  before = _eval(config, task, mapping, params0)
  after = _eval(config, task, mapping, params)
  assert after["precision_at_radius"] > before["precision_at_radius"], (before, after)


def test_euclidean_neighbors_matches_sorting():
  rng = np.random.default_rng(0)
  q, db = rng.normal(size=(7, 5)), rng.normal(size=(40, 5))
  rel = tasks.euclidean_neighbors(q, db, num_neighbors=6)
  for i in range(7):
    order = np.argsort([np.sum((q[i] - y) ** 2) for y in db])
    assert set(np.flatnonzero(rel[i])) == set(order[:6].tolist())
  rel = tasks.euclidean_neighbors(db, db, num_neighbors=3, exclude_self=True)
  for i in range(40):
    order = [j for j in np.argsort([np.sum((db[i] - y) ** 2) for y in db]) if j != i]
    assert set(np.flatnonzero(rel[i])) == set(order[:3])
  with pytest.raises(ValueError, match="num_neighbors"):
    tasks.euclidean_neighbors(q, db, num_neighbors=41)


def test_batch_fn_is_pure_and_matches_labels():
  config = lambdarank_knn.get_config("runlocal,score=knn_majority")
  task = tasks.make_task(config)
  batch_fn = nair.make_batch_fn(config, task)
  a, b, c = batch_fn(3), batch_fn(3), batch_fn(4)
  for key in ("queries", "docs", "relevance", "affinity"):
    np.testing.assert_array_equal(a[key], b[key])
  assert not np.array_equal(a["docs"], c["docs"])
  labels = task.labels[task.train]
  n = len(task.train)
  assert a["queries"].shape == (config.queries_per_batch,) and len(set(a["queries"].tolist())) == len(a["queries"])
  assert a["docs"].shape == (config.queries_per_batch, config.docs_per_query)
  for qi, row, rel, aff in zip(a["queries"], a["docs"], a["relevance"], a["affinity"]):
    assert qi not in row and len(set(row.tolist())) == len(row) and row.min() >= 0 and row.max() < n
    for d, r, f in zip(row, rel, aff):
      assert r == int(labels[d] == labels[qi])
      assert f == labels[qi] * task.num_classes + labels[d]


def test_retrieval_relevance_is_euclidean_neighbours():
  config = lambdarank_retrieval.get_config("runlocal")
  task = tasks.make_task(config)
  x = task.features
  for i in (0, 5, len(task.query) - 1):
    d = np.sum((x[task.database] - x[task.query[i]]) ** 2, axis=1)
    assert set(np.flatnonzero(task.eval_relevance[i])) == set(np.argsort(d)[:config.num_neighbors].tolist())
  batch = nair.make_batch_fn(config, task)(0)
  xt = x[task.train]
  # train_neighbors="scaled": the same fraction of the training set as of the database
  k_train = max(1, round(config.num_neighbors * (len(task.train) - 1) / len(task.database)))
  assert task.train_relevance.sum(axis=1).tolist() == [k_train] * len(task.train)
  for qi, row, rel in zip(batch["queries"][:3], batch["docs"][:3], batch["relevance"][:3]):
    d = np.sum((xt - xt[qi]) ** 2, axis=1)
    d[qi] = np.inf
    nearest = set(np.argsort(d)[:k_train].tolist())
    assert [int(j in nearest) for j in row] == rel.tolist()


def _knn_error_reference(distances, db_labels, query_labels, k):
  wrong = 0
  for q in range(distances.shape[0]):
    bins = sorted(set(distances[q].tolist()))[:k]
    votes = {}
    for i in range(distances.shape[1]):
      if distances[q, i] in bins:
        votes[db_labels[i]] = votes.get(db_labels[i], 0) + 1
    best = max(votes.values())
    wrong += min(c for c, v in votes.items() if v == best) != query_labels[q]
  return wrong / distances.shape[0]


def test_evaluate_matches_brute_force():
  config = lambdarank_knn.get_config("runlocal")
  config.bits = 8
  task = tasks.make_task(config)
  rng = np.random.default_rng(1)
  qb = rng.integers(0, 2, (len(task.query), 8))
  db = rng.integers(0, 2, (len(task.database), 8))
  out = nair.evaluate(config, task, codes.pack_bits(qb), codes.pack_bits(db))
  dist = np.sum(qb[:, None, :] != db[None, :, :], axis=-1)
  ql, dl = task.labels[task.query], task.labels[task.database]
  assert out["knn_error"] == pytest.approx(_knn_error_reference(dist, dl, ql, 3), abs=1e-6)
  precisions, empty = [], 0
  for q in range(len(ql)):
    hit = dist[q] <= config.radius
    empty += not hit.any()
    precisions.append(np.mean(dl[hit] == ql[q]) if hit.any() else 0.0)
  assert out["precision_at_radius"] == pytest.approx(np.mean(precisions), abs=1e-5)
  assert out["num_empty_at_radius"] == empty


def test_exact_l2_row_matches_brute_force():
  config = lambdarank_knn.get_config("runlocal")
  task = tasks.make_task(config)
  x, ql, dl = task.features, task.labels[task.query], task.labels[task.database]
  wrong = 0
  for i, q in enumerate(task.query):
    nearest = np.argsort(np.sum((x[task.database] - x[q]) ** 2, axis=1))[:3]
    counts = np.bincount(dl[nearest], minlength=task.num_classes)
    wrong += int(np.argmax(counts)) != ql[i]
  assert nair.exact_l2_row(config, task)["knn_error"] == pytest.approx(wrong / len(ql))


@pytest.mark.parametrize("field, value", [("method", "lambda"), ("affinity", "classify"), ("score", "ndcg")])
def test_bad_config_names_the_field(field, value):
  config = lambdarank_knn.get_config("runlocal")
  config[field] = value
  task = tasks.make_task(config) if field != "affinity" else None
  with pytest.raises(ValueError, match=field):
    if field == "affinity":
      tasks.make_task(config)
    else:
      mapping, _ = fitting.make_mapping(config, task)
      nair.make_objective(config, mapping, task)


def test_bad_batch_sizes_name_the_field():
  config = lambdarank_knn.get_config("runlocal")
  task = tasks.make_task(config)
  config.docs_per_query = len(task.train)
  with pytest.raises(ValueError, match="docs_per_query"):
    nair.make_batch_fn(config, task)
  config.docs_per_query = 0
  with pytest.raises(ValueError, match="docs_per_query"):
    nair.make_batch_fn(config, task)


def test_bad_config_argument():
  with pytest.raises(ValueError, match="config argument"):
    lambdarank_knn.get_config("fast")
  with pytest.raises(ValueError, match="config argument"):
    lambdarank_retrieval.get_config("fast")


@pytest.mark.parametrize("score", ["knn_count", "knn_majority", "retrieval", "ap", "hierarchical"])
def test_every_score_gives_a_finite_loss_and_gradient(score):
  config = lambdarank_knn.get_config(f"runlocal,score={score}")
  config.queries_per_batch = 8
  config.docs_per_query = 20
  task = tasks.make_task(config)
  mapping, params = fitting.make_mapping(config, task)
  loss_fn = nair.make_objective(config, mapping, task)
  (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, nair.make_batch_fn(config, task)(0), 0)
  assert np.isfinite(float(loss)) and float(loss) >= 0
  assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))
  assert 0 <= float(aux["active_fraction"]) <= 1


def test_doc_pool_batches_draw_documents_from_the_pool():
  config = lambdarank_knn.get_config("runlocal")
  config.doc_pool = 120
  task = tasks.make_task(config)
  batch_fn = nair.make_batch_fn(config, task)
  a, b = batch_fn(2), batch_fn(2)
  for key in ("items", "queries", "docs", "relevance"):
    np.testing.assert_array_equal(a[key], b[key])
  items, q, m = a["items"], config.queries_per_batch, config.docs_per_query
  labels = task.labels[task.train]
  assert items.shape == (q + config.doc_pool,) and len(set(items.tolist())) == len(items)
  assert a["queries"].tolist() == list(range(q)) and a["docs"].shape == (q, m)
  for qi, row, rel in zip(a["queries"], a["docs"], a["relevance"]):
    assert row.min() >= q and row.max() < len(items) and len(set(row.tolist())) == m
    assert rel.tolist() == [int(labels[items[d]] == labels[items[qi]]) for d in row]
  config.doc_pool = config.docs_per_query - 1
  with pytest.raises(ValueError, match="doc_pool"):
    nair.make_batch_fn(config, task)


def test_doc_pool_loss_equals_the_loss_on_all_features():
  """Mapping only the pooled items gives the loss of mapping everything and indexing the same items."""
  config = lambdarank_knn.get_config("runlocal")
  config.doc_pool = 100
  task = tasks.make_task(config)
  mapping, params = fitting.make_mapping(config, task)
  batch = nair.make_batch_fn(config, task)(0)
  loss_fn = nair.make_objective(config, mapping, task)
  full = {"features": batch["features"], "queries": batch["items"][batch["queries"]],
          "docs": batch["items"][batch["docs"]], "relevance": batch["relevance"]}
  (a, _), (b, _) = loss_fn(params, batch, 0), loss_fn(params, full, 0)
  np.testing.assert_allclose(float(a), float(b), rtol=1e-5)


@pytest.mark.parametrize("bits, expected", [(8, 4), (9, 4), (16, 6), (32, 11), (64, 22)])
def test_paper_swap_bins_leave_swaps_across_the_top_boundary(bits, expected):
  """ceil(b / 3) bins, but never only the top k = 3 bins (which would leave no swap at 8 bits)."""
  config = lambdarank_knn.get_config(f"bits={bits}")
  assert config.top_bins == 3 and config.swap_bins == expected and config.threshold == "relative"
  retrieval = lambdarank_knn.get_config(f"bits={bits},score=retrieval")  # swaps across d <= radius
  assert retrieval.top_bins == config.radius + 1 and retrieval.threshold == "absolute"
  assert lambdarank_knn.get_config(f"bits={bits},score=ap").top_bins is None


def test_step_size_by_method_and_length():
  # The step sizes chosen on validation splits (README): the 32-bit recipe (warmup + cosine over
  # 3,000 steps) for the linear hash, else Nair's fixed step for 1,000 steps.
  chosen = {("lambdarank", 32): (0.03, "cosine", 50, 3000), ("lambdarank", 64): (1.0, "constant", 0, 1000),
            ("ranknet", 32): (20.0, "cosine", 50, 3000), ("ranknet", 64): (50.0, "constant", 0, 1000),
            ("ranknet", 16): (20.0, "constant", 0, 1000)}
  for (method, bits), (lr, kind, warmup, num_steps) in chosen.items():
    config = lambdarank_knn.get_config(f"method={method},bits={bits}")
    assert (config.learning_rate, config.lr_schedule, config.warmup_steps, config.num_steps) == \
        (lr, kind, warmup, num_steps)
    schedule = train_lib.learning_rate_schedule(lr, num_steps=num_steps, kind=kind, warmup_steps=warmup)
    opt = fitting.make_optimizer(config)
    params = {"w": np.ones(2, np.float32)}
    state = opt.init(params)
    trace = 0.0  # SGD momentum on a constant gradient of 1: trace_t = 1 + m trace_{t-1}
    for t in range(80):
      updates, state = opt.update({"w": np.ones(2, np.float32)}, state, params)
      trace = 1.0 + config.momentum * trace
      np.testing.assert_allclose(np.asarray(updates["w"]), -float(schedule(t)) * trace * np.ones(2), rtol=1e-5)
    if kind == "constant":  # Nair's fixed step
      assert float(schedule(0)) == lr
  config = lambdarank_knn.get_config("method=ranknet,bits=16")
  config.learning_rate = 0.5
  updates, _ = fitting.make_optimizer(config).update({"w": np.ones(2)}, fitting.make_optimizer(config).init(
      {"w": np.ones(2)}), {"w": np.ones(2)})
  np.testing.assert_allclose(np.asarray(updates["w"]), -0.5 * np.ones(2), rtol=1e-6)
