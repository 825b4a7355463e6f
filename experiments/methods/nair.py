r"""Nair et al. (2012): RankNet / LambdaRank bit vectors for kNN classification and retrieval.

``config.method = "ranknet"`` or ``"lambdarank"`` (``configs/lambdarank_knn.py``,
``configs/lambdarank_retrieval.py``). Eq. 1's hash (a linear map or MLP whose logits go
through the sigmoid inside the losses) trains on ``config.queries_per_batch`` training
queries per step, each with ``config.docs_per_query`` documents drawn from the rest of the
training set; RankNet on every relevant-irrelevant pair (eqs. 3-4), LambdaRank on the pairs
weighted by ``|Delta S|``, the change of the task score ``config.score`` when the two swap
(eq. 5), restricted to the swaps of Sec. 4 (``config.swap_bins``, ``config.top_bins``,
``config.threshold``: :func:`hashjax.objectives.swap_mask`). The codes are scored by the kNN
classification error (relative threshold ``config.k``, Sec. 5.1) and precision within Hamming
radius ``config.radius`` (``d <= radius``; Nair's "distance < 2" is radius 1), beside
``config.baselines`` and, with ``config.exact_l2``, exact Euclidean ``k``-NN. ``config.num_devices > 1``
trains data-parallel over that many devices (:func:`replicated_keys`).
"""

from __future__ import annotations

import functools
from typing import Callable, Dict

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from experiments import augment, fitting, reporting, tasks
from hashjax import _checks, codes, mappings, metrics, objectives

METHODS = ("ranknet", "lambdarank")
#: ``config.affinity`` values: same label (the kNN task) or the Euclidean neighbours (retrieval, Sec. 5.2).
AFFINITIES = ("label", "neighbors")
#: ``config.score``, each with the closed form of its swap deltas: relevant items in the ``k``
#: nearest non-empty bins (eq. 7), the majority vote there (eq. 6), S_R of eq. 8 (absolute
#: threshold ``radius``), tie-aware AP.
SCORES = ("knn_count", "knn_majority", "retrieval", "ap")
#: Columns of the printed table (``reporting.format_table(rows, columns=COLUMNS)``).
COLUMNS = (("knn_error", "kNN err"), ("precision_at_radius", "P@r"), ("num_empty_at_radius", "empty@r"))


def make_batch_fn(config: ml_collections.ConfigDict, task: tasks.Task) -> Callable[[int], Dict]:
  """``batch_fn(step)``: a pure function of the step (resumable), see :mod:`hashjax.train`.

  The batch holds the training features (one device array, reused every
  step), ``queries`` ``int32[Q]`` and ``docs`` ``int32[Q, M]`` (indices into
  the training set, or with ``config.doc_pool`` into ``items`` ``int32[Q + P]``,
  the training items the loss maps this step), their ``relevance``
  ``int32[Q, M]`` and, for ``score="knn_majority"``, the label pairs
  ``q_label * num_classes + doc_label`` as ``affinity``.

  ``config.doc_pool`` None (Nair Sec. 4): every query draws its ``M``
  documents uniformly from the whole training set, and the loss maps all of it.
  An int ``P``: each step draws ``P`` items apart from the queries and every
  query draws its ``M`` documents from them, so the loss maps ``Q + P`` items,
  not all ``n`` (what makes an MLP mapping affordable).

  ``config.augment_shift = s > 0``: every training image is translated by its
  own random ``(dy, dx)`` in ``[-s, s]^2`` each step, drawn from ``(seed, step)``
  on a stream apart from the queries' and documents' (which are those of the
  unshifted run); relevance is that of the original items. The batch then holds
  ``shifts`` ``int32[n, 2]`` beside the unshifted ``features``, and the loss
  shifts the images it maps on the device, so the training set is never copied per step.
  """
  _checks.check_option("config.affinity", task.affinity, AFFINITIES)
  n = len(task.train)
  q = _checks.check_positive_int("config.queries_per_batch", config.queries_per_batch)
  m = _checks.check_positive_int("config.docs_per_query", config.docs_per_query)
  if q > n or m > n - 1:
    raise ValueError(f"config.queries_per_batch / docs_per_query: expected at most {n} / {n - 1} "
                     f"(training items), got {q} / {m}")
  pool = config.doc_pool
  if pool is not None:
    pool = _checks.check_positive_int("config.doc_pool", pool)
    if m > pool or q + pool > n:
      raise ValueError(f"config.doc_pool: expected docs_per_query ({m}) <= doc_pool <= {n - q} "
                       f"(training items minus queries), got {pool}")
  train_x = np.asarray(task.features[task.train], np.float32)
  shift = augment.check_augment_shift(config, train_x)
  features = jax.device_put(train_x)
  labels = np.asarray(task.labels[task.train], np.int32)
  majority = _checks.check_option("config.score", config.score, SCORES) == "knn_majority"
  everything = np.arange(n, dtype=np.int32)

  def batch_fn(step: int) -> Dict:
    rng = np.random.default_rng([config.seed, int(step)])
    queries = np.sort(rng.choice(n, size=q, replace=False)).astype(np.int32)
    # The distribution of objectives.subsample_documents (the m largest of one uniform key per
    # document, the query's own key excluded), drawn in numpy: XLA's CPU top_k is slower here.
    if pool is None:
      items, local_queries = everything, queries  # no "items" in the batch: map all features
      u = rng.random((q, n))
      u[np.arange(q), queries] = -1.0
    else:
      rest = np.setdiff1d(everything, queries)
      items = np.concatenate([queries, np.sort(rng.choice(rest, size=pool, replace=False))]).astype(np.int32)
      local_queries = np.arange(q, dtype=np.int32)
      u = np.full((q, q + pool), -1.0)
      u[:, q:] = rng.random((q, pool))
    local_docs = np.argpartition(-u, m - 1, axis=1)[:, :m].astype(np.int32)
    qi, docs = items[local_queries], items[local_docs]
    if task.train_relevance is None:
      relevance = (labels[docs] == labels[qi][:, None]).astype(np.int32)
    else:
      relevance = task.train_relevance[qi[:, None], docs].astype(np.int32)
    batch = {"features": features, "queries": local_queries, "docs": local_docs, "relevance": relevance}
    if shift:  # a stream of its own: the queries and documents are those of the unshifted run
      rng_shift = np.random.default_rng([config.seed, int(step), 2])
      batch["shifts"] = rng_shift.integers(-shift, shift + 1, size=(n, 2)).astype(np.int32)
    if pool is not None:
      batch["items"] = items
    if majority:
      batch["affinity"] = (labels[qi][:, None] * task.num_classes + labels[docs]).astype(np.int32)
    return batch

  return batch_fn


def replicated_keys(config: ml_collections.ConfigDict) -> tuple:
  """The batch keys copied to every device when training data-parallel (``config.num_devices > 1``): the
  items the loss maps and indexes into (``features``, ``shifts``, ``items``); the per-query ``queries``,
  ``docs``, ``relevance`` and ``affinity`` are split over the devices."""
  keys = ("features",) + (("shifts",) if config.augment_shift else ()) + (("items",) if config.doc_pool else ())
  return keys if config.get("num_devices", 1) not in (None, 1) else ()


def deltas_fn(config: ml_collections.ConfigDict, task: tasks.Task) -> Callable:
  """``config.score``'s exact swap deltas, ``deltas_fn(distances[N], affinity[N, ...]) -> [N, N]``."""
  score = _checks.check_option("config.score", config.score, SCORES)
  if score == "knn_count":
    return functools.partial(objectives.knn_count_deltas, k=config.k)
  if score == "knn_majority":
    return functools.partial(objectives.knn_majority_deltas, num_classes=task.num_classes, k=config.k)
  if score == "retrieval":
    return functools.partial(objectives.retrieval_deltas, radius=config.radius)
  return functools.partial(objectives.average_precision_deltas, num_bits=config.bits)


def make_objective(config: ml_collections.ConfigDict, mapping, task: tasks.Task) -> Callable:
  r"""``loss_fn(params, batch, step) -> (loss, aux)`` for :func:`hashjax.train.train`.

  .. math:: L_{RankNet} = \mathrm{mean}_{(q,a,b)} \log(1 + e^{\hat s_{qa} - \hat s_{qb}}), \quad
            L_{Lambda} = \frac{1}{Q} \sum_q \sum_{ab} |\Delta S_{qab}| M_{qab} \log(1 + e^{\hat s_{qa} - \hat s_{qb}})

  ``Delta S`` from :func:`deltas_fn` and ``M`` from
  :func:`hashjax.objectives.swap_mask` on the hard distances of the rounded codes.
  """
  method = _checks.check_option("config.method", config.method, METHODS)
  _checks.check_option("config.affinity", config.affinity, AFFINITIES)
  _checks.check_option("config.score", config.score, SCORES)
  shift = augment.check_augment_shift(config, task.features)  # bounds the batch's "shifts"
  deltas = deltas_fn(config, task) if method == "lambdarank" else None

  def loss_fn(params, batch, step):
    del step
    x = batch["features"] if "items" not in batch else batch["features"][batch["items"]]
    if "shifts" in batch:  # on the device: the training set is not copied every step
      shifts = batch["shifts"] if "items" not in batch else batch["shifts"][batch["items"]]
      x = augment.shift_images(x, shifts, max_shift=shift)
    logits = mappings.apply(mapping, params, x)
    hq = logits[batch["queries"]]
    hd = logits[batch["docs"]]
    if method == "ranknet":
      return objectives.ranknet_loss(hq, hd, batch["relevance"], from_logits=True), {}
    distances = objectives.hard_distances(jax.lax.stop_gradient(hq), jax.lax.stop_gradient(hd), from_logits=True)
    pair_mask = objectives.swap_mask(distances, swap_bins=config.swap_bins, top_bins=config.top_bins,
                                     threshold=config.threshold)
    return objectives.lambdarank_loss(hq, hd, batch.get("affinity", batch["relevance"]), deltas_fn=deltas,
                                      distances=distances, preference=batch["relevance"], pair_mask=pair_mask,
                                      from_logits=True, has_aux=True)

  return loss_fn


def evaluate(config: ml_collections.ConfigDict, task: tasks.Task, query_words, db_words) -> Dict:
  """kNN classification error (relative threshold ``config.k``) and precision at ``config.radius``.

  Returns a dict of Python numbers: ``knn_error`` (queries' labels
  predicted by the majority of the database items in their ``k`` nearest
  non-empty bins, :func:`hashjax.metrics.knn_classify`),
  ``precision_at_radius`` (mean over queries, 0 where none is retrieved;
  relevance = the task's: label agreement or the Euclidean neighbours) and
  ``num_empty_at_radius``.
  """
  distances = codes.hamming_distance(query_words, db_words)
  pred = metrics.knn_classify(distances, task.labels[task.database], num_classes=task.num_classes,
                              num_bits=config.bits, k=config.k, threshold="relative")
  precision = metrics.precision_at_radius(distances, tasks.eval_affinity(task), num_bits=config.bits,
                                          radius=config.radius)
  retrieved = metrics.retrieved_at_radius(distances, num_bits=config.bits, radius=config.radius)
  return {"knn_error": float(metrics.error_rate(pred, task.labels[task.query])),
          "precision_at_radius": float(jnp.mean(precision)),
          "num_empty_at_radius": int(jnp.sum(retrieved == 0))}


def exact_l2_row(config: ml_collections.ConfigDict, task: tasks.Task) -> Dict:
  """Exact Euclidean ``k``-NN classification error (majority of the ``k`` nearest, scikit-learn)."""
  from sklearn.neighbors import KNeighborsClassifier  # pylint: disable=g-import-not-at-top
  x = task.features
  clf = KNeighborsClassifier(n_neighbors=config.k, algorithm="brute").fit(x[task.database],
                                                                        task.labels[task.database])
  err = float(np.mean(clf.predict(x[task.query]) != task.labels[task.query]))
  return {"method": f"exact-l2-{config.k}nn", "bits": "-", "knn_error": err}


def resolved_options(config: ml_collections.ConfigDict, task: tasks.Task) -> Dict:
  """Config fields whose value this run derives, recorded in place of their placeholders.

  ``doc_pool`` None: ``"all"`` (documents drawn from the whole training set);
  ``swap_bins`` None: ``bits + 1`` (every bin swaps); ``top_bins`` None:
  ``"any"`` (swaps across any boundary); with RankNet, which restricts no swaps,
  ``swap_bins`` and ``top_bins`` None are ``"unused"``;
  ``train_neighbors`` (``"neighbors"`` relevance): the count it resolved to.
  """
  resolved = {}
  if config.doc_pool is None:
    resolved["doc_pool"] = "all"
  if config.method == "ranknet":
    resolved.update({k: "unused" for k in ("swap_bins", "top_bins") if config[k] is None})
  else:
    if config.swap_bins is None:
      resolved["swap_bins"] = config.bits + 1
    if config.top_bins is None:
      resolved["top_bins"] = "any"
  if task.train_neighbors is not None:
    resolved["train_neighbors"] = task.train_neighbors
  return resolved


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> Dict:
  """Trains, checkpoints and evaluates as ``config`` says; writes ``<workdir>/model`` and returns (and writes)
  the results dict."""
  task = tasks.make_task(config)
  mapping, params = fitting.make_mapping(config, task)
  x = task.features
  score = functools.partial(evaluate, config, task)

  def words(p):
    return mappings.encode(mapping, p, x[task.query]), mappings.encode(mapping, p, x[task.database])

  def eval_fn(p):
    r = score(*words(p))
    return {"knn_error": r["knn_error"], "precision_at_radius": r["precision_at_radius"]}

  mesh = fitting.device_mesh(config, batch_rows=config.queries_per_batch, rows_from="config.queries_per_batch")
  params, history = fitting.fit(config, workdir, params=params, loss_fn=make_objective(config, mapping, task),
                               batch_fn=make_batch_fn(config, task), eval_fn=eval_fn,
                               batch_size=config.queries_per_batch, mesh=mesh, replicated=replicated_keys(config))
  record = reporting.recorded_config(config, resolved_options(config, task))
  model = reporting.save_model(workdir, mapping, params, task, record)
  name = config.method + ("" if config.model == "linear" else f"-{config.model}")
  rows = reporting.result_rows(config, task, name=name, learned_words=lambda: reporting.model_words(model, task),
                            evaluate=score)
  if config.exact_l2:
    rows.append(exact_l2_row(config, task))
  return reporting.write_results(workdir, record, rows, history, columns=COLUMNS)
