r"""FastHash (Lin, Shen, Shi, van den Hengel & Suter, CVPR 2014): two-step supervised hashing, bit by bit.

Supervised: class labels give :math:`y_{ij} = +1` for items of the same class and :math:`-1` otherwise, and the
codes minimise the KSH loss :math:`\sum_{ij} (b\, y_{ij} - \mathbf{b}_i^\top \mathbf{b}_j)^2`. Bits are learned
one after another; for bit :math:`r`, with the hash-function outputs :math:`H` of the bits before it,

1. binary code inference: the training bits :math:`z \in \{\pm 1\}^N` maximise

   .. math:: z^\top M z, \qquad M = b\, Y - H H^\top,

   started from the sign of the leading eigenvector of :math:`M` (exact, as :math:`M` has rank at most
   ``classes + 1 + r``), then improved block by block. A block is a random group of at most ``block_size`` items
   of one class; their pairwise terms are all attractive (:math:`M_{ij} > 0`), the submodular case the paper
   solves by graph cuts. Here a block is moved as a whole, to the sign of its aggregated linear term (the field
   of the rest of the items summed over the block), when that raises :math:`z^\top M z`; ``num_sweeps`` passes
   over the blocks in random order. Each move can only raise the objective.
2. hash function learning: the paper fits boosted decision trees to the bits. Encoding here runs in jax in
   fixed row blocks, so the classifier is one that jax evaluates as one matrix product: ridge regression on RBF
   responses to ``num_anchors`` training points (:mod:`hashjax.baselines._anchors`),
   :math:`h_r(x) = \mathrm{sgn}(w_r^\top (\phi(x) - \bar\phi) + c_r)`, the kernel hash family of KSH. As in the
   paper, the bit's training codes are then replaced by the classifier's outputs, so later bits see (and
   correct) its errors.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks
from hashjax.baselines import _anchors
from hashjax.baselines import _common

Array = jax.Array

#: Anchors of the RBF features when ``fit`` is not told (a fit needs at least as many training items).
DEFAULT_NUM_ANCHORS = 1000


class FastHashParams(NamedTuple):
  """``mean[dim]``, ``anchors[A, dim]`` (centred by ``mean``), RBF ``scale[]``, per-bit classifier ``weights[A,
  num_bits]`` and ``bias[num_bits]``."""
  mean: Array
  anchors: Array
  scale: Array
  weights: Array
  bias: Array


def infer_bit(onehot: np.ndarray, previous: np.ndarray, num_bits: int, rng: np.random.Generator, *,
              block_size: int, num_sweeps: int) -> np.ndarray:
  r"""``float64[N]`` training bits in ``{-1, +1}`` of FastHash's step 1 for the next bit.

  .. math:: \max_{z \in \{\pm 1\}^N} z^\top (b\, Y - H H^\top) z, \qquad Y = 2 L L^\top - \mathbf{1}\mathbf{1}^\top

  Args:
    onehot: ``{0, 1}[N, classes]`` one-hot class matrix ``L`` (trusted).
    previous: ``{-1, +1}[N, r]`` outputs ``H`` of the bits before.
    num_bits: code length ``b``.
    rng: numpy ``Generator`` for the blocks and their order.
    block_size: most items of one class in a block.
    num_sweeps: passes over the blocks.

  >>> onehot = np.repeat(np.eye(2), 3, axis=0)
  >>> z = infer_bit(onehot, np.zeros((6, 0)), 4, np.random.default_rng(0), block_size=2, num_sweeps=1)
  >>> bool(z[0] == z[1] == z[2] == -z[3] == -z[4] == -z[5])
  True
  """
  num_classes = onehot.shape[1]
  z = _common.spectral_sign(onehot, previous, num_bits)
  label = np.argmax(onehot, axis=1)
  blocks = []
  for c in range(num_classes):
    members = rng.permutation(np.flatnonzero(label == c))
    blocks += [(c, members[i:i + block_size]) for i in range(0, members.size, block_size)]
  per_class, total, along = onehot.T @ z, z.sum(), previous.T @ z
  for _ in range(num_sweeps):
    for b in rng.permutation(len(blocks)):
      c, idx = blocks[b]
      z_b, h_b = z[idx], previous[idx]
      inner = num_bits * z_b.sum() - h_b @ (h_b.T @ z_b)  # M_BB z_B: every pair in a block is similar
      field = num_bits * (2.0 * per_class[c] - total) - h_b @ along - inner  # from the items outside the block
      s = 1.0 if field.sum() >= 0 else -1.0  # a sum of 0: both signs gain alike
      ones_sum = h_b.sum(0)
      gain = (num_bits * idx.size ** 2 - ones_sum @ ones_sum + 2.0 * s * field.sum()) - (z_b @ inner
                                                                                         + 2.0 * field @ z_b)
      if gain > 0:
        delta = s - z_b
        per_class[c] += delta.sum()
        total += delta.sum()
        along += h_b.T @ delta
        z[idx] = s
  return z


def objective(codes: np.ndarray, labels: np.ndarray) -> float:
  r"""FastHash's (KSH's) training loss of ``codes[N, b]`` in ``{-1, +1}`` on class ``labels[N]``.

  .. math:: \sum_{i, j} (b\, y_{ij} - \mathbf{b}_i^\top \mathbf{b}_j)^2 = \|B^\top B\|_F^2
     - 2 b\, (2 \|L^\top B\|_F^2 - \|\mathbf{1}^\top B\|^2) + b^2 N^2

  >>> objective(np.array([[1.0], [1.0], [-1.0]]), np.array([0, 0, 1]))
  0.0
  """
  n, b = codes.shape
  onehot = (labels[:, None] == np.unique(labels)[None, :]).astype(np.float64)
  cross = 2.0 * np.sum((onehot.T @ codes) ** 2) - np.sum(codes.sum(0) ** 2)
  return float(np.sum((codes.T @ codes) ** 2) - 2.0 * b * cross + b * b * n * n)


def fit(features: Array, *, num_bits: int, key: Optional[Any] = None, labels: Any = None,
        num_anchors: int = DEFAULT_NUM_ANCHORS, regularization: float = 1e-7, block_size: int = 50,
        num_sweeps: int = 2) -> FastHashParams:
  r"""Learns FastHash's bits one by one: block-wise code inference, then a kernel classifier per bit.

  .. math:: \min_{B} \sum_{i, j} (b\, y_{ij} - \mathbf{b}_i^\top \mathbf{b}_j)^2, \qquad
     w_r = (\Phi_c^\top \Phi_c + \lambda N I)^{-1} \Phi_c^\top z_r

  Args:
    features: ``[N, dim]`` finite training features, ``N >= 2``.
    num_bits: code length ``1 <= b <= A``: one classifier per bit on the ``A`` anchor responses.
    key: a ``jax.random`` key for the anchors and the blocks (None: ``jax.random.key(0)``).
    labels: ``int[N]`` class labels, at least two classes (required).
    num_anchors: RBF anchors ``1 <= A <= N`` drawn from the training points.
    regularization: ridge weight :math:`\lambda > 0`, per training item.
    block_size: most items of one class updated together in step 1.
    num_sweeps: passes over the blocks per bit (``0``: the spectral start only).

  Returns:
    :class:`FastHashParams`.

  >>> import numpy as np
  >>> x = np.random.default_rng(0).normal(size=(60, 5)) + np.repeat(np.eye(5)[:3] * 6, 20, axis=0)
  >>> params = fit(x, num_bits=8, labels=np.repeat([0, 1, 2], 20), num_anchors=20)
  >>> params.weights.shape
  (20, 8)
  """
  _common.check_fit_features(features, min_rows=2)
  n = features.shape[0]
  num_bits = _checks.check_num_bits(num_bits)
  labels = _checks.check_class_labels(labels, n)
  num_anchors = _checks.check_int_at_most("num_anchors", num_anchors, n, what=f"the {n} training points")
  _checks.check_int_at_most("num_bits", num_bits, num_anchors, what=f"num_anchors = {num_anchors}")
  regularization = _checks.check_number("regularization", regularization, low=0, low_open=True)
  block_size = _checks.check_int("block_size", block_size)
  num_sweeps = _checks.check_int("num_sweeps", num_sweeps, low=0)
  rng = _checks.check_key_rng(jax.random.key(0) if key is None else key)
  x, dtype = _common.host_features(features)
  mean = x.mean(axis=0)
  x = x - mean
  anchors, scale = _anchors.fit(x, num_anchors, rng, dtype=dtype)
  phi = _anchors.rbf(anchors, scale, x)
  centre = phi.mean(axis=0)
  phi -= centre
  ridge = np.linalg.solve(phi.T @ phi + regularization * n * np.eye(num_anchors), phi.T)
  onehot = (labels[:, None] == np.unique(labels)[None, :]).astype(np.float64)
  outputs = np.zeros((n, 0))
  weights, bias = np.zeros((num_anchors, num_bits)), np.zeros(num_bits)
  for r in range(num_bits):
    z = infer_bit(onehot, outputs, num_bits, rng, block_size=block_size, num_sweeps=num_sweeps)
    weights[:, r] = ridge @ z
    bias[r] = z.mean() - centre @ weights[:, r]
    # The bit's training codes become the classifier's outputs (phi is centred: the offset is z's mean).
    outputs = np.concatenate([outputs, np.where(phi @ weights[:, r] + z.mean() > 0, 1.0, -1.0)[:, None]], axis=1)
  return FastHashParams(*(jnp.asarray(a, dtype) for a in (mean, anchors, scale, weights, bias)))


def _values(params: FastHashParams, features: Array) -> Array:
  return _anchors.kernel_values(features, params.mean, params.anchors, params.scale, params.weights, params.bias)


def project(params: FastHashParams, features: Array) -> Array:
  r"""The classifier outputs whose signs are the bits of :func:`encode` (``binarize(project(...))``).

  .. math:: v_r(x) = w_r^\top \phi(x - \mu) + c_r

  Args:
    params: :class:`FastHashParams` from :func:`fit`.
    features: ``[..., dim]`` finite features, ``dim`` as in :func:`fit`.

  Returns:
    ``float[..., num_bits]``: bit ``r`` is 1 where value ``r`` is ``> 0``.

  >>> import numpy as np
  >>> x = np.random.default_rng(0).normal(size=(40, 4))
  >>> params = fit(x, num_bits=4, labels=np.arange(40) % 2, num_anchors=10)
  >>> bool(np.array_equal(np.asarray(project(params, x)) > 0, np.asarray(encode(params, x)) == 1))
  True
  """
  return _common.encoded(params, features, _values, cls=FastHashParams, module="fasthash", binary=False)


def encode(params: FastHashParams, features: Array) -> Array:
  r"""Hashes ``features`` by the signs of the per-bit kernel classifiers.

  .. math:: b_r(x) = [w_r^\top \phi(x - \mu) + c_r > 0]

  Args:
    params: :class:`FastHashParams` from :func:`fit`.
    features: ``[..., dim]`` finite features, ``dim`` as in :func:`fit`.

  Returns:
    ``uint8[..., num_bits]`` bits in ``{0, 1}``.

  >>> import numpy as np
  >>> x = np.random.default_rng(0).normal(size=(40, 4))
  >>> bits = encode(fit(x, num_bits=6, labels=np.arange(40) % 2, num_anchors=10), x)
  >>> bits.shape, bits.dtype
  ((40, 6), dtype('uint8'))
  """
  return _common.encoded(params, features, _values, cls=FastHashParams, module="fasthash", binary=True)
