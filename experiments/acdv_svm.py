r"""Can a linear classifier tell same-class from different-class code pairs? (Feng, Liu, Wang, Sec. 3.1, Table 1).

  python -m experiments.acdv_svm --config=configs/acdv_svm.py
  python -m experiments.acdv_svm --config=configs/acdv_svm.py:runlocal

The paper's proof of concept for bit weights: on a subset of MNIST (1,000 images per class, 70% of each class for
training, 30% for testing) it codes the images with LSH, SH and ITQ at 64 bits, takes the *absolute code
difference vector* (ACDV) of pairs of codes,

.. math:: a_{ij} = |b_i - b_j| \in \{0, 1\}^b,

labelled positive for two images of the same class and negative for two of different classes, trains a linear SVM
on the training pairs and reports its accuracy on the test pairs (Table 1: 71.3%, 83.5%, 85.7%). A linear
classifier of ACDVs is a weighted Hamming distance with a threshold, so its accuracy over the threshold alone on
plain Hamming distance (all weights equal) is what learned weights can add.

Here, per base code of ``config.methods`` at each length of ``config.bits``: each class's first
``config.per_class`` images (shuffled by ``config.seed``) split ``config.train_fraction`` / rest; the code fitted
on the training images (:func:`experiments.fitting.baseline_model`); ``config.pairs`` pairs drawn on each side,
half of one class and half of two different classes (the paper does not say how many, or in what proportion);
scikit-learn's ``LinearSVC`` (squared hinge, C = ``config.C``, fixed, not tuned) on the training ACDVs. Printed:
its test accuracy, the paper's figure, and the accuracy of the best threshold on the plain Hamming distance of the
training pairs, applied to the test pairs. Everything goes to ``<workdir>/results.json``; the work is
:func:`train_and_evaluate`.
"""

from __future__ import annotations

import os
from typing import Dict, List, Tuple

import ml_collections
import numpy as np
from sklearn import svm

from experiments import cli, fitting, reporting, tasks
from experiments.methods import checks
from hashjax import codes, io

#: Table 1 of the paper: linear-SVM accuracy on ACDVs of 64-bit codes of an MNIST subset.
PAPER = {"lsh": 0.713, "sh": 0.835, "itq": 0.857}


def split_by_class(labels: np.ndarray, *, per_class: int, train_fraction: float,
                   seed: int) -> Tuple[np.ndarray, np.ndarray]:
  """``(train, test)`` indices: of each class, ``per_class`` images (all if fewer) in a random order, the first
  ``round(train_fraction * n)`` for training, the rest for testing."""
  rng = np.random.default_rng(seed)
  train, test = [], []
  for c in np.unique(labels):
    members = rng.permutation(np.flatnonzero(labels == c))[:per_class]
    cut = int(round(train_fraction * len(members)))
    train.append(members[:cut])
    test.append(members[cut:])
  return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


def pairs(labels: np.ndarray, count: int, rng: np.random.Generator) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
  """``(first, second, same)``: ``count // 2`` pairs of two distinct items of one class and ``count - count // 2``
  of two classes, drawn uniformly; ``same`` is 1 for the first kind."""
  classes = np.unique(labels)
  members = [np.flatnonzero(labels == c) for c in classes]
  num_same = count // 2
  first, second = [], []
  for c in rng.choice(len(classes), num_same):  # a class, then two distinct members
    i, j = rng.choice(members[c], 2, replace=False)
    first.append(i)
    second.append(j)
  while len(first) < count:  # two items, kept if their classes differ
    i, j = rng.choice(len(labels), 2)
    if labels[i] != labels[j]:
      first.append(i)
      second.append(j)
  same = np.r_[np.ones(num_same, np.int32), np.zeros(count - num_same, np.int32)]
  return np.array(first), np.array(second), same


def best_threshold_accuracy(train_distances: np.ndarray, train_same: np.ndarray, test_distances: np.ndarray,
                            test_same: np.ndarray) -> float:
  """Test accuracy of "same class iff distance <= t", with ``t`` the training pairs' most accurate threshold
  (the smallest such ``t``)."""
  thresholds = np.arange(-1, int(train_distances.max()) + 1)
  accuracy = [np.mean((train_distances <= t) == train_same) for t in thresholds]
  t = thresholds[int(np.argmax(accuracy))]
  return float(np.mean((test_distances <= t) == test_same))


def row(method: str, num_bits: int, features: np.ndarray, labels: np.ndarray, train: np.ndarray,
        test: np.ndarray, config: ml_collections.ConfigDict) -> Dict:
  """One base code's SVM and plain-Hamming accuracies."""
  model = fitting.baseline_model(method, features[train], num_bits=num_bits, seed=config.seed,
                                 train_labels=labels[train])
  rng = np.random.default_rng(config.seed)
  out = {"method": method, "bits": num_bits, "paper": PAPER.get(method) if num_bits == 64 else None}
  sides = {}
  for name, items in (("train", train), ("test", test)):
    bits = np.asarray(codes.unpack_bits(model.encode(features[items]), num_bits), np.int8)
    i, j, same = pairs(labels[items], config.pairs, rng)
    acdv = np.abs(bits[i] - bits[j])
    sides[name] = (acdv, same)
  classifier = svm.LinearSVC(C=config.C, random_state=config.seed).fit(*sides["train"])
  out["svm_accuracy"] = float(classifier.score(*sides["test"]))
  out["svm_train_accuracy"] = float(classifier.score(*sides["train"]))
  out["hamming_accuracy"] = best_threshold_accuracy(sides["train"][0].sum(1), sides["train"][1],
                                                    sides["test"][0].sum(1), sides["test"][1])
  return out


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> Dict:
  """Every (method, bits) row of ``config``; writes ``<workdir>/results.json``."""
  features, labels = tasks.load_dataset(config.dataset)
  features, labels = np.asarray(features, np.float32), np.asarray(labels, np.int32)
  train, test = split_by_class(labels, per_class=config.per_class, train_fraction=config.train_fraction,
                               seed=config.seed)
  rows = [row(method, num_bits, features, labels, train, test, config)
          for method in config.methods for num_bits in config.bits]
  results = {"config": config.to_dict(), "num_train": int(len(train)), "num_test": int(len(test)), "rows": rows}
  io.atomic_write_json(os.path.join(workdir, "results.json"), results)
  return results


def format_table(rows: List[Dict]) -> str:
  """The printed table, one row per (method, bits)."""
  lines = ["| code | bits | linear SVM on ACDVs | paper (Table 1) | threshold on plain Hamming |",
           "| --- | --- | --- | --- | --- |"]
  for r in rows:
    paper = "" if r["paper"] is None else f"{r['paper']:.1%}"
    lines.append(f"| {r['method']} | {r['bits']} | {r['svm_accuracy']:.1%} | {paper} | {r['hamming_accuracy']:.1%} |")
  return "\n".join(lines)


def main(config):
  workdir = cli.workdir(reporting.default_workdir(config.name), launcher="experiments.acdv_svm")
  results = train_and_evaluate(config, workdir)
  print(f"{results['num_train']} training and {results['num_test']} test images")
  print(format_table(results["rows"]))
  print(f"results: {os.path.join(workdir, 'results.json')}")


if __name__ == "__main__":
  cli.run(main, check=checks.check_config)
