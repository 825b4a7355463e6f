r"""Deep supervised hashing (DPSH, DTSH, HashNet, CSQ, GreedyHash): TALR's run with another loss.

``config.method = "deep"`` (``configs/deep_hashing.py``) with ``config.objective`` one of
:data:`OBJECTIVES`, the losses of :mod:`hashjax.objectives.deep`. Everything else is TALR's run
(:mod:`experiments.methods.talr`): ``config.model`` trains on class-balanced minibatches
(``config.batch_per_class`` per class, each item against the others, images shifted by up to
``config.augment_shift`` pixels), logs periodic tie-aware AP and NDCG on the evaluation queries and
ends with the tie-aware table of the learned codes beside ``config.baselines``.

Each objective's options, the papers' values by default (as :mod:`hashjax.objectives.deep` scales them):
``config.eta`` (the quantisation weight of DPSH and DTSH), ``config.dtsh_alpha`` (DTSH's margin in bits),
``config.hashnet_alpha`` (HashNet's inner-product scale; None: ``10 / bits``, recorded as resolved),
``config.hashnet_gamma`` (the growth of HashNet's ``tanh`` scale ``beta = (1 + gamma t)^0.5``,
:func:`hashjax.objectives.deep.hashnet_beta`), ``config.csq_lambda`` (CSQ's quantisation weight; its
hash centres are Hadamard rows, or random ones drawn from ``config.seed``) and ``config.greedy_alpha``
(GreedyHash's cubic penalty). CSQ and GreedyHash read the minibatch's class labels; GreedyHash also
trains a linear classifier on the codes, a training device only: the saved model is the mapping.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict

import jax
import ml_collections

from experiments import fitting, reporting, tasks
from experiments.methods import talr
from hashjax.objectives import deep as deep_lib

#: ``config.objective`` of ``config.method = "deep"``.
OBJECTIVES = ("dpsh", "dtsh", "hashnet", "csq", "greedyhash")
#: The objectives that read class labels (``batch["labels"]``) rather than pair affinities.
CLASS_OBJECTIVES = ("csq", "greedyhash")


def hashnet_alpha(config: ml_collections.ConfigDict) -> float:
  """``config.hashnet_alpha``, or ``10 / config.bits`` (the HashNet authors' code) when it is None; a config
  holds the options of its own objective only."""
  return 10.0 / config.bits if config.hashnet_alpha is None else float(config.hashnet_alpha)


def make_objective(config: ml_collections.ConfigDict, mapping, task: tasks.Task) -> Callable:
  """``loss_fn(params, batch, step) -> (loss, aux)`` of ``config.objective`` with its config options."""
  bits, objective = config.bits, config.objective
  if objective == "dpsh":
    return deep_lib.dpsh(mapping, num_bits=bits, eta=config.eta)
  if objective == "dtsh":
    return deep_lib.dtsh(mapping, num_bits=bits, alpha=config.dtsh_alpha, eta=config.eta)
  if objective == "hashnet":
    beta = functools.partial(deep_lib.hashnet_beta, gamma=config.hashnet_gamma)
    return deep_lib.hashnet(mapping, num_bits=bits, alpha=hashnet_alpha(config), beta=beta)
  if objective == "csq":
    return deep_lib.csq(mapping, num_bits=bits, num_classes=task.num_classes, lam=config.csq_lambda,
                        seed=config.seed)
  if objective == "greedyhash":
    return deep_lib.greedyhash(mapping, num_bits=bits, num_classes=task.num_classes, alpha=config.greedy_alpha)
  raise ValueError(f"config.objective: expected one of {list(OBJECTIVES)}, got {objective!r}")


def init_params(config: ml_collections.ConfigDict, mapping, params, task: tasks.Task):
  """The parameters training starts from: the mapping's ``params``, or for GreedyHash
  :func:`hashjax.objectives.deep.greedyhash_init`'s ``{"mapping", "classifier"}`` drawn from ``config.seed``."""
  if config.objective != "greedyhash":
    return params
  return deep_lib.greedyhash_init(jax.random.key(config.seed), mapping, task.features[task.train[:2]],
                                  num_classes=task.num_classes)


def mapping_params(config: ml_collections.ConfigDict, params) -> Any:
  """The hash mapping's part of the trained ``params``: GreedyHash's ``params["mapping"]``, else all of them."""
  return params["mapping"] if config.objective == "greedyhash" else params


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> Dict:
  """Trains, checkpoints and evaluates as ``config`` says; writes ``<workdir>/model`` (the mapping alone) and
  returns (and writes) the results dict."""
  task = tasks.make_task(config)
  mapping, params = fitting.make_mapping(config, task)
  params = init_params(config, mapping, params, task)
  mesh = fitting.device_mesh(config, batch_rows=config.batch_per_class * task.num_classes,
                            rows_from=f"config.batch_per_class x {task.num_classes} classes")
  mapping_eval = talr.make_eval_fn(config, task, mapping, mesh)
  params, history = fitting.fit(
      config, workdir, params=params, loss_fn=make_objective(config, mapping, task),
      batch_fn=talr.make_batch_fn(config, task, labels=config.objective in CLASS_OBJECTIVES),
      eval_fn=lambda p: mapping_eval(mapping_params(config, p)), mesh=mesh)
  record = reporting.recorded_config(config, {"hashnet_alpha": hashnet_alpha(config)}
                                     if config.objective == "hashnet" else {})
  model = reporting.save_model(workdir, mapping, mapping_params(config, params), task, record)
  rows = reporting.result_rows(config, task, name=f"{config.objective}-{config.model}",
                               learned_words=lambda: reporting.model_words(model, task, mesh),
                               evaluate=functools.partial(talr.evaluate, config, task), mesh=mesh,
                               workdir=workdir)
  return reporting.write_results(workdir, record, rows, history)
