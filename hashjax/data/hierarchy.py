r"""Class hierarchies derived from data, for scores that weigh how far apart two classes are.

Nair et al.'s hierarchical classification score (eq. 10, :func:`hashjax.objectives.hierarchical_score`)
needs a similarity ``F(a, b)`` of classes that decreases with the height of their lowest common
ancestor (LCA) in a class hierarchy. Where a dataset has no published taxonomy, one can be built
from its training items: :func:`class_tree_distance` clusters the class means agglomeratively and
returns the LCA height of every two classes, a grouping by appearance (not a semantic taxonomy);
:func:`hashjax.objectives.tree_similarity` turns it into ``F``.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import scipy.cluster.hierarchy
import scipy.spatial.distance

from hashjax import _checks

__all__ = ["LINKAGES", "class_tree_distance"]

#: ``linkage=`` options of :func:`class_tree_distance` (scipy.cluster.hierarchy's methods whose merge heights never
#: decrease, so that every node is at least as high as its children).
LINKAGES = ("average", "complete", "single")


def class_tree_distance(features: np.ndarray, labels: np.ndarray, *, num_classes: Optional[int] = None,
                        linkage: str = "average") -> np.ndarray:
  r"""Tree distance of every two classes: the height of their LCA in a dendrogram of the class means.

  .. math:: h(a, b) = \frac{\mathrm{height}(\mathrm{LCA}(a, b))}{\mathrm{height}(\mathrm{root})}, \qquad
            \mu_c = \frac{1}{|\{i : y_i = c\}|} \sum_{i : y_i = c} x_i

  The dendrogram is scipy's agglomerative clustering of the class means
  ``mu_c`` under the Euclidean distance with the given ``linkage`` (``"average"``:
  UPGMA); the height of a node is the linkage distance at which its two children
  merged, so ``h(a, b)`` is the cophenetic distance of ``a`` and ``b`` over the
  root's height: 0 for ``a == b``, 1 for two classes that join only at the root.
  Built from the items it is given, so pass the training items alone when the
  hierarchy is to judge held-out queries.

  Args:
    features: real ``[n, d]`` items.
    labels: int ``[n]`` class labels in ``[0, num_classes)``; every class must occur.
    num_classes: ``C``; default ``labels.max() + 1``.
    linkage: one of :data:`LINKAGES`.

  Returns:
    ``float64[C, C]`` (numpy): symmetric, zero on the diagonal, in ``[0, 1]``
    (all zero when ``C == 1`` or every class mean is the same).

  >>> import numpy as np
  >>> x = np.array([[0.0], [1.0], [5.0], [6.0], [20.0]])  # class means 0, 1, 5, 6, 20
  >>> class_tree_distance(x, np.array([0, 1, 2, 3, 4])).round(3).tolist()[0]  # ((0 1) (2 3)) merge at 5, 4 at 17
  [0.0, 0.059, 0.294, 0.294, 1.0]
  """
  _checks.check_real("features", features, shape_doc="[n, d]", ndim=2)
  n = features.shape[0]
  num_classes = _checks.check_int("num_classes", num_classes, allow_none=True)
  _checks.check_int_range("labels", labels, 0, _checks.INT32_MAX if num_classes is None else num_classes - 1,
                          what="class labels", ndim=1, shape_doc="[n]", shape=(n,), like="features' rows")
  linkage = _checks.check_option("linkage", linkage, LINKAGES)
  x, y = np.asarray(features, np.float64), np.asarray(labels).astype(np.int64)
  num_classes = int(y.max()) + 1 if num_classes is None else num_classes
  counts = np.bincount(y, minlength=num_classes)
  if (counts == 0).any():
    raise ValueError(f"labels: expected every class 0 .. {num_classes - 1}, got none of {np.flatnonzero(counts == 0)}")
  if num_classes == 1:
    return np.zeros((1, 1))
  means = np.zeros((num_classes, x.shape[1]))
  np.add.at(means, y, x)
  means /= counts[:, None]
  tree = scipy.cluster.hierarchy.linkage(means, method=linkage, metric="euclidean")
  heights = scipy.spatial.distance.squareform(scipy.cluster.hierarchy.cophenet(tree))
  top = heights.max()
  return heights / top if top > 0 else np.zeros_like(heights)
