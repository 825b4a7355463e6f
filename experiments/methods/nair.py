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

Class hierarchy (``config.hierarchy``, a linkage of :data:`hashjax.data.LINKAGES`, or None): the
dendrogram of the training items' class means (:func:`class_tree`, never the queries), a grouping
by appearance derived from the training images, not a semantic taxonomy. The tree distance
``h(a, b)`` of two classes is the height of their lowest common ancestor over the root's
(:func:`hashjax.data.class_tree_distance`: 0 within a class, 1 for the classes joined last);
eq. 10's similarity is ``F = 1 - h`` (:func:`hashjax.objectives.tree_similarity`). ``score =
"hierarchical"`` trains LambdaRank on eq. 10 with that ``F``: ``|Delta S|`` from
:func:`hashjax.objectives.hierarchical_deltas`, and the pairs ordered by the graded relevance
``F(l_q, l_d)`` (a document of the query's class before one of a near class before one of a far
class). With a hierarchy, every row also reports the severity of the kNN mistakes
(:func:`hierarchy_metrics`: the mean tree distance between predicted and true class, over all
queries and over the misclassified ones) and the mean eq.-10 score of the queries.
"""

from __future__ import annotations

import functools
from typing import Callable, Dict, Optional

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from experiments import augment, fitting, reporting, tasks
from hashjax import _checks, codes, data, mappings, metrics, objectives

METHODS = ("ranknet", "lambdarank")
#: ``config.affinity`` values: same label (the kNN task) or the Euclidean neighbours (retrieval, Sec. 5.2).
AFFINITIES = ("label", "neighbors")
#: ``config.score``, each with the closed form of its swap deltas: relevant items in the ``k``
#: nearest non-empty bins (eq. 7), the majority vote there (eq. 6), S_R of eq. 8 (absolute
#: threshold ``radius``), tie-aware AP, eq. 10 with the class similarity of ``config.hierarchy``.
SCORES = ("knn_count", "knn_majority", "retrieval", "ap", "hierarchical")
#: Columns of the printed table (``reporting.format_table(rows, columns=COLUMNS)``).
COLUMNS = (("knn_error", "kNN err"), ("precision_at_radius", "P@r"), ("num_empty_at_radius", "empty@r"))
#: Columns added with ``config.hierarchy`` (:func:`hierarchy_metrics`).
HIERARCHY_COLUMNS = (("tree_distance", "tree d"), ("tree_distance_wrong", "d | wrong"),
                     ("hierarchical_score", "S_Hier"), ("neighbour_similarity", "mean F"))


def class_tree(config: ml_collections.ConfigDict, task: tasks.Task) -> Optional[np.ndarray]:
  """``float64[C, C]``: the tree distance of the classes in ``config.hierarchy``'s dendrogram of the class means of
  the training items (:func:`hashjax.data.class_tree_distance`), or None without a hierarchy."""
  if config.get("hierarchy") is None:
    if config.score == "hierarchical":
      raise ValueError("config.hierarchy: expected a linkage, one of "
                       f"{list(data.LINKAGES)}, for config.score='hierarchical', got None")
    return None
  if task.affinity != "label":
    raise ValueError(f"config.hierarchy: expected None for config.affinity={task.affinity!r} (a class hierarchy "
                     f"needs class relevance, 'label'), got {config.hierarchy!r}")
  return data.class_tree_distance(task.features[task.train], task.labels[task.train],
                                  num_classes=task.num_classes, linkage=config.hierarchy)


def make_batch_fn(config: ml_collections.ConfigDict, task: tasks.Task, *,
                  tree: Optional[np.ndarray] = None) -> Callable[[int], Dict]:
  """``batch_fn(step)``: a pure function of the step (resumable), see :mod:`hashjax.train`.

  The batch holds the training features (one device array, reused every
  step), ``queries`` ``int32[Q]`` and ``docs`` ``int32[Q, M]`` (indices into
  the training set, or with ``config.doc_pool`` into ``items`` ``int32[Q + P]``,
  the training items the loss maps this step), their ``relevance``
  ``int32[Q, M]`` and, for ``score="knn_majority"`` and ``"hierarchical"``, the label pairs
  ``q_label * num_classes + doc_label`` as ``affinity``; for ``"hierarchical"`` also the graded
  ``preference`` ``float32[Q, M]`` that orders the pairs, ``F(q_label, doc_label)`` (in the tree of
  :func:`class_tree`: ``tree``, computed when None).

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
  q = _checks.check_int("config.queries_per_batch", config.queries_per_batch)
  m = _checks.check_int("config.docs_per_query", config.docs_per_query)
  if q > n or m > n - 1:
    raise ValueError(f"config.queries_per_batch / docs_per_query: expected at most {n} / {n - 1} "
                     f"(training items), got {q} / {m}")
  pool = config.doc_pool
  if pool is not None:
    pool = _checks.check_int("config.doc_pool", pool)
    if m > pool or q + pool > n:
      raise ValueError(f"config.doc_pool: expected docs_per_query ({m}) <= doc_pool <= {n - q} "
                       f"(training items minus queries), got {pool}")
  train_x = np.asarray(task.features[task.train], np.float32)
  shift = augment.check_augment_shift(config, train_x)
  features = jax.device_put(train_x)
  labels = np.asarray(task.labels[task.train], np.int32)
  score = _checks.check_option("config.score", config.score, SCORES)
  pairs = score in ("knn_majority", "hierarchical")
  if score == "hierarchical":
    tree = class_tree(config, task) if tree is None else tree
    similarity = np.asarray(objectives.tree_similarity(tree), np.float32)
  else:
    similarity = None
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
    if pairs:
      batch["affinity"] = (labels[qi][:, None] * task.num_classes + labels[docs]).astype(np.int32)
    if similarity is not None:
      batch["preference"] = similarity[labels[qi][:, None], labels[docs]]
    return batch

  return batch_fn


def replicated_keys(config: ml_collections.ConfigDict, mesh) -> tuple:
  """The batch keys copied to every device of ``mesh`` when training data-parallel (None: no mesh, nothing
  is split): the items the loss maps and indexes into (``features``, ``shifts``, ``items``); the per-query
  ``queries``, ``docs``, ``relevance``, ``affinity`` and ``preference`` are split over the devices."""
  keys = ("features",) + (("shifts",) if config.augment_shift else ()) + (("items",) if config.doc_pool else ())
  return keys if mesh is not None else ()


def deltas_fn(config: ml_collections.ConfigDict, task: tasks.Task, *, tree: Optional[np.ndarray] = None) -> Callable:
  """``config.score``'s exact swap deltas, ``deltas_fn(distances[N], affinity[N, ...]) -> [N, N]`` (``"hierarchical"``:
  in the tree of :func:`class_tree`, ``tree``, computed when None)."""
  score = _checks.check_option("config.score", config.score, SCORES)
  if score == "knn_count":
    return functools.partial(objectives.knn_count_deltas, k=config.k)
  if score == "knn_majority":
    return functools.partial(objectives.knn_majority_deltas, num_classes=task.num_classes, k=config.k)
  if score == "retrieval":
    return functools.partial(objectives.retrieval_deltas, radius=config.radius)
  if score == "hierarchical":
    similarity = objectives.tree_similarity(class_tree(config, task) if tree is None else tree)
    return functools.partial(objectives.hierarchical_deltas, similarity=similarity, k=config.k)
  return functools.partial(objectives.average_precision_deltas, num_bits=config.bits)


def make_objective(config: ml_collections.ConfigDict, mapping, task: tasks.Task, *,
                   tree: Optional[np.ndarray] = None) -> Callable:
  r"""``loss_fn(params, batch, step) -> (loss, aux)`` for :func:`hashjax.train.train`.

  .. math:: L_{RankNet} = \mathrm{mean}_{(q,a,b)} \log(1 + e^{\hat s_{qa} - \hat s_{qb}}), \quad
            L_{Lambda} = \frac{1}{Q} \sum_q \sum_{ab} |\Delta S_{qab}| M_{qab} \log(1 + e^{\hat s_{qa} - \hat s_{qb}})

  ``Delta S`` from :func:`deltas_fn` (in the tree ``tree``, computed when None) and ``M`` from
  :func:`hashjax.objectives.swap_mask` on the hard distances of the rounded codes; the pairs
  ``(a, b)`` are those with ``a`` preferred: more relevant, or with ``score="hierarchical"``
  of a class more similar to the query's (the batch's ``preference``).
  """
  method = _checks.check_option("config.method", config.method, METHODS)
  _checks.check_option("config.affinity", config.affinity, AFFINITIES)
  _checks.check_option("config.score", config.score, SCORES)
  shift = augment.check_augment_shift(config, task.features)  # bounds the batch's "shifts"
  deltas = deltas_fn(config, task, tree=tree) if method == "lambdarank" else None

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
                                      distances=distances, preference=batch.get("preference", batch["relevance"]),
                                      pair_mask=pair_mask, from_logits=True, has_aux=True)

  return loss_fn


def hierarchy_metrics(tree: np.ndarray, predicted, query_labels, neighbour_similarity=None) -> Dict:
  r"""The severity of kNN mistakes in a class hierarchy, and eq. 10 of the queries.

  .. math:: \bar h = \frac{1}{Q} \sum_q h(\hat y_q, y_q), \qquad
            \bar h_{wrong} = \frac{1}{|\{q : \hat y_q \ne y_q\}|} \sum_{q : \hat y_q \ne y_q} h(\hat y_q, y_q)

  Args:
    tree: ``[C, C]`` tree distances ``h`` (:func:`class_tree`).
    predicted: int ``[Q]`` predicted classes.
    query_labels: int ``[Q]`` true classes.
    neighbour_similarity: optional ``(S[Q], n[Q])``: each query's eq.-10 score ``S`` (the sum of ``F =
      1 - h`` over its neighbours) and its number of neighbours ``n``.

  Returns:
    ``tree_distance`` (0 for a correct query), ``tree_distance_wrong`` (None when no query is wrong)
    and, with ``neighbour_similarity``, ``hierarchical_score`` (mean ``S``) and ``neighbour_similarity``
    (mean over queries of ``S / n``, the mean ``F`` of a query's neighbours).

  >>> import numpy as np
  >>> h = np.array([[0.0, 0.5, 1.0], [0.5, 0.0, 1.0], [1.0, 1.0, 0.0]])
  >>> hierarchy_metrics(h, np.array([0, 1, 2, 2]), np.array([0, 0, 2, 1]))
  {'tree_distance': 0.375, 'tree_distance_wrong': 0.75}
  """
  h = np.asarray(tree, np.float64)[np.asarray(predicted), np.asarray(query_labels)]
  wrong = np.asarray(predicted) != np.asarray(query_labels)
  out = {"tree_distance": float(h.mean()), "tree_distance_wrong": float(h[wrong].mean()) if wrong.any() else None}
  if neighbour_similarity is not None:
    score, count = (np.asarray(v, np.float64) for v in neighbour_similarity)
    out.update({"hierarchical_score": float(score.mean()), "neighbour_similarity": float(np.mean(score / count))})
  return out


def evaluate(config: ml_collections.ConfigDict, task: tasks.Task, query_words, db_words, *,
             tree: Optional[np.ndarray] = None) -> Dict:
  """kNN classification error (relative threshold ``config.k``) and precision at ``config.radius``.

  Returns a dict of Python numbers: ``knn_error`` (queries' labels
  predicted by the majority of the database items in their ``k`` nearest
  non-empty bins, :func:`hashjax.metrics.knn_classify`),
  ``precision_at_radius`` (mean over queries, 0 where none is retrieved;
  relevance = the task's: label agreement or the Euclidean neighbours) and
  ``num_empty_at_radius``. With ``config.hierarchy`` also :func:`hierarchy_metrics` in the tree of
  :func:`class_tree` (``tree``, computed when None), the neighbours being the database items in the
  query's ``k`` nearest non-empty bins, scored by :func:`hashjax.objectives.hierarchical_score`.
  """
  distances = codes.hamming_distance(query_words, db_words)
  db_labels, query_labels = task.labels[task.database], task.labels[task.query]
  pred = metrics.knn_classify(distances, db_labels, num_classes=task.num_classes,
                              num_bits=config.bits, k=config.k, threshold="relative")
  precision = metrics.precision_at_radius(distances, tasks.eval_affinity(task), num_bits=config.bits,
                                          radius=config.radius)
  retrieved = metrics.retrieved_at_radius(distances, num_bits=config.bits, radius=config.radius)
  out = {"knn_error": float(metrics.error_rate(pred, query_labels)),
         "precision_at_radius": float(jnp.mean(precision)),
         "num_empty_at_radius": int(jnp.sum(retrieved == 0))}
  tree = class_tree(config, task) if tree is None else tree
  if tree is not None:
    pairs = objectives.label_pairs(query_labels, db_labels, num_classes=task.num_classes)
    score = objectives.hierarchical_score(distances, pairs, similarity=objectives.tree_similarity(tree), k=config.k)
    count = jnp.sum(objectives.nearest_bins_mask(distances, k=config.k), axis=-1)
    out.update(hierarchy_metrics(tree, np.asarray(pred), query_labels, (score, count)))
  return out


def exact_l2_row(config: ml_collections.ConfigDict, task: tasks.Task, *, tree: Optional[np.ndarray] = None) -> Dict:
  """Exact Euclidean ``k``-NN classification error (majority of the ``k`` nearest, scikit-learn); with
  ``config.hierarchy`` also :func:`hierarchy_metrics`, the neighbours being the ``k`` nearest (``tree``: as
  :func:`evaluate`'s)."""
  from sklearn.neighbors import KNeighborsClassifier  # pylint: disable=g-import-not-at-top
  x = task.features
  db_labels, query_labels = task.labels[task.database], task.labels[task.query]
  clf = KNeighborsClassifier(n_neighbors=config.k, algorithm="brute").fit(x[task.database], db_labels)
  pred = clf.predict(x[task.query])
  row = {"method": f"exact-l2-{config.k}nn", "bits": "-", "knn_error": float(np.mean(pred != query_labels))}
  tree = class_tree(config, task) if tree is None else tree
  if tree is not None:
    nearest = clf.kneighbors(x[task.query], return_distance=False)
    similarity = np.asarray(objectives.tree_similarity(tree))
    score = similarity[query_labels[:, None], db_labels[nearest]].sum(axis=1)
    row.update(hierarchy_metrics(tree, pred, query_labels, (score, np.full(len(score), config.k))))
  return row


def resolved_options(config: ml_collections.ConfigDict, task: tasks.Task) -> Dict:
  """Config fields whose value this run derives, recorded in place of their placeholders.

  ``doc_pool`` None: ``"all"`` (documents drawn from the whole training set);
  ``swap_bins`` None: ``bits + 1`` (every bin swaps); ``top_bins`` None:
  ``"any"`` (swaps across any boundary); with RankNet, which restricts no swaps,
  ``swap_bins`` and ``top_bins`` None are ``"unused"``;
  ``train_neighbors`` (``"neighbors"`` relevance): the count it resolved to; ``hierarchy`` None:
  ``"none"`` (no class hierarchy).
  """
  resolved = {} if config.get("hierarchy") is not None else {"hierarchy": "none"}
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
  tree = class_tree(config, task)
  score = functools.partial(evaluate, config, task, tree=tree)

  def words(p):
    return mappings.encode(mapping, p, x[task.query]), mappings.encode(mapping, p, x[task.database])

  def eval_fn(p):
    r = score(*words(p))
    return {"knn_error": r["knn_error"], "precision_at_radius": r["precision_at_radius"]}

  mesh = fitting.device_mesh(config, batch_rows=config.queries_per_batch, rows_from="config.queries_per_batch")
  loss_fn = make_objective(config, mapping, task, tree=tree)
  params, history = fitting.fit(config, workdir, params=params, loss_fn=loss_fn,
                               batch_fn=make_batch_fn(config, task, tree=tree), eval_fn=eval_fn,
                               batch_size=config.queries_per_batch, mesh=mesh, replicated=replicated_keys(config, mesh))
  record = reporting.recorded_config(config, resolved_options(config, task))
  model = reporting.save_model(workdir, mapping, params, task, record)
  name = config.method + ("" if config.model == "linear" else f"-{config.model}")
  rows = reporting.result_rows(config, task, name=name, learned_words=lambda: reporting.model_words(model, task),
                               evaluate=score, workdir=workdir)
  if config.exact_l2:
    rows.append(exact_l2_row(config, task, tree=tree))
  columns = COLUMNS + (HIERARCHY_COLUMNS if tree is not None else ())
  return reporting.write_results(workdir, record, rows, history, columns=columns)
