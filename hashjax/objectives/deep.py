r"""Deep supervised hashing objectives: pairwise, triplet, hash-centre and straight-through losses.

Each builder returns a pure ``loss_fn(params, batch, step) -> (loss, aux)``
of a hash mapping (:mod:`hashjax.mappings`), the signature of
:func:`hashjax.objectives.talr.query_vs_rest`, so any of them trains with
:func:`hashjax.train.train` in place of a TALR objective:

* :func:`dpsh` (Li, Wang, Kang, IJCAI 2016): pairwise label likelihood;
* :func:`dtsh` (Wang, Shi, Kitani, ACCV 2016): triplet label likelihood;
* :func:`hashnet` (Cao et al., ICCV 2017): weighted pairwise likelihood of
  ``tanh(beta z)`` codes, with a continuation schedule :func:`hashnet_beta`;
* :func:`csq` (Yuan et al., CVPR 2020): cross-entropy to class hash centres
  (:func:`hash_centers`);
* :func:`greedyhash` (Su et al., NeurIPS 2018): a classifier on ``sgn(h)``
  trained through the straight-through gradient (parameters from
  :func:`greedyhash_init`).

**Batches.** The pairwise and triplet losses read the batch of
:func:`~hashjax.objectives.talr.query_vs_rest`, ``{"features": [M, dim],
"affinity": int[M, M]}``, and use its ``M (M - 1)`` off-diagonal pairs; a pair
is similar (``s_ij = 1``) when its affinity is ``> 0``. The class-based losses
(:func:`csq`, :func:`greedyhash`) read ``{"features": [M, dim], "labels":
int[M]}`` with labels in ``[0, num_classes)`` (other keys are ignored).

**Notation.** ``u = f(x)[M, b]`` are the mapping's logits (the network
outputs), ``Theta_ij = u_i^T u_j / 2``, and ``sgn(0) = -1``, as in the codes
(:func:`hashjax.codes.binarize` maps 0 to bit 0).

**Quantisation terms** are means over the ``M b`` entries of ``| |v| - 1 |^p``.
For ``b = sgn(u)``, ``(b_k - u_k)^2 = (|u_k| - 1)^2`` for every ``u_k`` (0
included, by the convention above), so DPSH's and DTSH's ``eta sum_i ||b_i -
u_i||^2`` is this term with ``p = 2``, divided by ``M b``.

**aux** holds each loss's terms unweighted (e.g. ``"likelihood"`` and
``"quantization"``), so ``loss = main + weight * quantization``.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Union

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import scipy.linalg

from hashjax import _checks, _encode, mappings, relaxations

Array = jax.Array
Schedule = Union[float, Callable[[Array], Array]]

__all__ = ["dpsh", "dtsh", "hashnet", "hashnet_beta", "csq", "hash_centers", "greedyhash", "greedyhash_init"]


# --------------------------------------------------------------------------- checks at build time


def _check_mapping(mapping: Any, num_bits: Any) -> int:
  """``mapping`` a module of :func:`hashjax.mappings.make_mapping` and ``num_bits`` its code length (an int)."""
  mappings.check_mapping(mapping)
  if not _checks.is_int(num_bits) or num_bits != mapping.num_bits:
    raise ValueError(f"num_bits: expected the mapping's code length {mapping.num_bits}, got {num_bits!r}")
  return int(num_bits)


# --------------------------------------------------------------------------- batch entries (checked when traced)


def _entry(batch: Any, key: str, what: str) -> Any:
  """``batch[key]``, or a ValueError naming it (a missing key is known at trace time)."""
  if not isinstance(batch, Mapping) or key not in batch:
    keys = sorted(batch) if isinstance(batch, Mapping) else type(batch).__name__
    raise ValueError(f'batch["{key}"]: expected {what} in the batch, got a batch of {keys}')
  return batch[key]


def _logits(mapping: Any, params: Any, batch: Any) -> Array:
  return mappings.apply(mapping, params, _entry(batch, "features", "features [M, dim]"))


def _similar_pairs(batch: Any, num_rows: int) -> Array:
  """``s[M, M - 1]``: bool similarity of each item to the others (affinity ``> 0``), the diagonal dropped."""
  affinity = _entry(batch, "affinity", "an int affinity matrix [M, M]")
  _checks.check_int_range('batch["affinity"]', affinity, what="affinity levels", shape=(num_rows,) * 2, like="M x M")
  if num_rows < 2:
    raise ValueError(f'batch["features"]: expected at least 2 items to form pairs, got {num_rows}')
  return relaxations.off_diagonal(jnp.asarray(affinity) > 0)


def _labels(batch: Any, num_rows: int, num_classes: int) -> Array:
  labels = _entry(batch, "labels", f"int class labels [M] in [0, {num_classes})")
  _checks.check_int_range('batch["labels"]', labels, 0, num_classes - 1, what="class labels", shape=(num_rows,),
                          like='batch["features"][:, 0]')
  return jnp.asarray(labels)


# --------------------------------------------------------------------------- shared terms


def _quantization(v: Array, *, power: int) -> Array:
  """``mean(| |v| - 1 |^power)`` over every entry."""
  return jnp.mean(jnp.abs(jnp.abs(v) - 1.0) ** power)


def _inner(a: Array) -> Array:
  """``a a^T`` in full float32 precision."""
  return _encode.matmul(a, a.T)


def _pair_nll(theta: Array, similar: Array) -> Array:
  """Minus the log-likelihood of each pair's label under ``p(s = 1) = sigma(theta)``."""
  return jax.nn.softplus(theta) - jnp.where(similar, theta, 0.0)


def _masked_mean(x: Array, mask: Array) -> tuple:
  """The mean of ``x`` where ``mask`` (0 when none), and the count."""
  count = jnp.sum(mask)
  return jnp.sum(jnp.where(mask, x, 0.0)) / jnp.maximum(count, 1), count


# --------------------------------------------------------------------------- pairwise and triplet losses


def dpsh(mapping, *, num_bits: int, eta: float = 0.1) -> Callable:
  r"""DPSH (Li, Wang, Kang, IJCAI 2016): pairwise label likelihood with a quantisation penalty.

  .. math:: L = \frac{1}{|P|} \sum_{(i,j) \in P} \big(\log(1 + e^{\Theta_{ij}}) - s_{ij} \Theta_{ij}\big)
            + \frac{\eta}{M b} \sum_i \lVert b_i - u_i \rVert^2,
            \quad \Theta_{ij} = \tfrac12 u_i^T u_j, \quad b = \mathrm{sgn}(u)

  The paper sums over the pairs and the items; here the likelihood is averaged
  over the ``|P| = M (M - 1)`` off-diagonal pairs of the minibatch and the
  penalty over its ``M b`` entries, so neither scale grows with ``M`` (nor the
  penalty's with ``b``), and ``eta`` is relative to those means.

  Args:
    mapping: a module from :func:`hashjax.mappings.make_mapping`.
    num_bits: its code length ``b``.
    eta: weight ``>= 0`` of the quantisation penalty.

  Returns:
    ``loss_fn(params, batch, step) -> (loss, {"likelihood", "quantization"})`` with
    ``batch = {"features": [M, dim], "affinity": int[M, M]}`` (similar: affinity ``> 0``).

  >>> import jax, numpy as np
  >>> from hashjax import mappings
  >>> m = mappings.make_mapping("linear", num_bits=8)
  >>> x = np.random.default_rng(0).normal(size=(6, 5)).astype(np.float32)
  >>> params = mappings.init(jax.random.key(0), m, x)
  >>> aff = (np.arange(6)[:, None] % 2 == np.arange(6)[None] % 2).astype(np.int32)
  >>> loss, aux = dpsh(m, num_bits=8, eta=0.1)(params, {"features": x, "affinity": aff}, 0)
  >>> bool(np.isclose(loss, aux["likelihood"] + 0.1 * aux["quantization"]))
  True
  """
  num_bits = _check_mapping(mapping, num_bits)
  eta = _checks.check_number("eta", eta, low=0)

  def loss_fn(params, batch, step):
    del step
    u = _logits(mapping, params, batch)
    similar = _similar_pairs(batch, u.shape[0])
    likelihood = jnp.mean(_pair_nll(relaxations.off_diagonal(0.5 * _inner(u)), similar))
    quantization = _quantization(u, power=2)
    return likelihood + eta * quantization, {"likelihood": likelihood, "quantization": quantization}

  return loss_fn


def dtsh(mapping, *, num_bits: int, alpha: float = 5.0, eta: float = 0.1) -> Callable:
  r"""DTSH (Wang, Shi, Kitani, ACCV 2016): triplet label likelihood with a quantisation penalty.

  .. math:: L = -\frac{1}{|T|} \sum_{(i,j,k) \in T} \log \sigma(\Theta_{ij} - \Theta_{ik} - \alpha)
            + \frac{\eta}{M b} \sum_i \lVert b_i - u_i \rVert^2,
            \quad \Theta_{ij} = \tfrac12 u_i^T u_j, \quad b = \mathrm{sgn}(u)

  ``T`` is every triplet of the minibatch with an anchor ``i``, a similar item
  ``j != i`` and a dissimilar item ``k != i`` (``[M, M - 1, M - 1]`` terms and
  memory). The paper sums over the triplets and items; here the likelihood is
  averaged over ``|T|`` (0 when the batch has none) and the penalty over the
  ``M b`` entries. The paper's weight decay is left to the optimizer.

  Args:
    mapping: a module from :func:`hashjax.mappings.make_mapping`.
    num_bits: its code length ``b``.
    alpha: margin ``>= 0``: ``Theta_ij - Theta_ik = d_H(i, k) - d_H(i, j)`` for binary codes, so the
      likelihood asks the dissimilar item to be ``alpha`` bits farther than the similar one.
    eta: weight ``>= 0`` of the quantisation penalty.

  Returns:
    ``loss_fn(params, batch, step) -> (loss, {"triplet", "quantization", "triplets"})`` (``"triplets"``:
    ``|T|``) with ``batch = {"features": [M, dim], "affinity": int[M, M]}``.

  >>> import jax, numpy as np
  >>> from hashjax import mappings
  >>> m = mappings.make_mapping("linear", num_bits=8)
  >>> x = np.random.default_rng(0).normal(size=(6, 5)).astype(np.float32)
  >>> params = mappings.init(jax.random.key(0), m, x)
  >>> aff = (np.arange(6)[:, None] % 2 == np.arange(6)[None] % 2).astype(np.int32)
  >>> loss, aux = dtsh(m, num_bits=8)(params, {"features": x, "affinity": aff}, 0)
  >>> int(aux["triplets"])  # 6 anchors, 2 similar, 3 dissimilar each
  36
  """
  num_bits = _check_mapping(mapping, num_bits)
  alpha, eta = (_checks.check_number(name, value, low=0) for name, value in (("alpha", alpha), ("eta", eta)))

  def loss_fn(params, batch, step):
    del step
    u = _logits(mapping, params, batch)
    similar = _similar_pairs(batch, u.shape[0])
    theta = relaxations.off_diagonal(0.5 * _inner(u))
    margins = theta[:, :, None] - theta[:, None, :] - alpha  # [anchor, similar j, dissimilar k]
    valid = similar[:, :, None] & ~similar[:, None, :]
    triplet, count = _masked_mean(jax.nn.softplus(-margins), valid)
    quantization = _quantization(u, power=2)
    return triplet + eta * quantization, {"triplet": triplet, "quantization": quantization, "triplets": count}

  return loss_fn


def hashnet_beta(step: Any, *, gamma: float = 0.005, power: float = 0.5) -> Array:
  r"""HashNet's continuation schedule of the ``tanh`` scale (Cao et al. 2017, Sec. 3.3).

  .. math:: \beta(t) = (1 + \gamma t)^{p}

  Jit-able in ``step``; bind the options with ``functools.partial`` to pass it
  as :func:`hashnet`'s ``beta``.

  Args:
    step: training step ``t >= 0`` (int scalar, may be traced).
    gamma: growth rate ``>= 0``.
    power: exponent ``p >= 0``.

  Returns:
    float scalar ``beta >= 1``.

  >>> [round(float(hashnet_beta(t)), 4) for t in (0, 200, 600)]
  [1.0, 1.4142, 2.0]
  """
  gamma, power = (_checks.check_number(name, value, low=0) for name, value in (("gamma", gamma), ("power", power)))
  _checks.check_step(step)
  return (1.0 + gamma * jnp.asarray(step)) ** power


def hashnet(mapping, *, num_bits: int, alpha: Optional[float] = None, beta: Schedule = 1.0) -> Callable:
  r"""HashNet (Cao et al., ICCV 2017): weighted pairwise likelihood of ``tanh(beta z)`` codes.

  .. math:: L = \frac{1}{|S|} \sum_{(i,j) \in S} w_{ij} \big(\log(1 + e^{\alpha \langle h_i, h_j \rangle})
            - \alpha s_{ij} \langle h_i, h_j \rangle\big), \quad h = \tanh(\beta z),
            \quad w_{ij} = \frac{|S|}{|S_{s_{ij}}|}

  ``S`` holds the ``M (M - 1)`` off-diagonal pairs of the minibatch, ``S_1``
  the similar and ``S_0`` the dissimilar ones, so the loss is the mean over
  ``S_1`` plus the mean over ``S_0`` (a class without pairs contributes 0).
  The paper sums over the pairs (its weights make that sum ``|S|`` times this
  mean); the authors' code replaces the log term by its linear asymptote past
  a threshold, which ``softplus`` makes unnecessary. The continuation raises
  ``beta`` over the steps (:func:`hashnet_beta`) so the codes approach
  ``sgn(z)``; there is no quantisation term in the loss: ``aux["quantization"]``,
  ``mean((|h| - 1)^2)``, is reported only.

  Args:
    mapping: a module from :func:`hashjax.mappings.make_mapping`.
    num_bits: its code length ``b``.
    alpha: the likelihood's inner-product scale ``> 0``; default ``10 / b`` (the authors' code).
    beta: the ``tanh`` scale, a float ``> 0`` or a schedule ``step -> beta`` (e.g.
      :func:`hashnet_beta`) whose value at step 0 must be ``> 0``; later values run traced and are not checked.

  Returns:
    ``loss_fn(params, batch, step) -> (loss, {"likelihood", "quantization", "beta"})`` with
    ``batch = {"features": [M, dim], "affinity": int[M, M]}`` (similar: affinity ``> 0``).

  >>> import jax, numpy as np
  >>> from hashjax import mappings
  >>> m = mappings.make_mapping("linear", num_bits=8)
  >>> x = np.random.default_rng(0).normal(size=(6, 5)).astype(np.float32)
  >>> params = mappings.init(jax.random.key(0), m, x)
  >>> aff = (np.arange(6)[:, None] % 2 == np.arange(6)[None] % 2).astype(np.int32)
  >>> loss_fn = hashnet(m, num_bits=8, beta=hashnet_beta)
  >>> loss, aux = loss_fn(params, {"features": x, "affinity": aff}, 600)
  >>> round(float(aux["beta"]), 4)
  2.0
  """
  num_bits = _check_mapping(mapping, num_bits)
  alpha = 10.0 / num_bits if alpha is None else _checks.check_number("alpha", alpha, low=0, low_open=True)
  beta = _checks.check_schedule("beta", beta)

  def loss_fn(params, batch, step):
    z = _logits(mapping, params, batch)
    similar = _similar_pairs(batch, z.shape[0])
    scale = beta(step) if callable(beta) else beta
    h = jnp.tanh(scale * z)
    nll = _pair_nll(relaxations.off_diagonal(alpha * _inner(h)), similar)
    likelihood = _masked_mean(nll, similar)[0] + _masked_mean(nll, ~similar)[0]
    return likelihood, {"likelihood": likelihood, "quantization": _quantization(h, power=2),
                        "beta": jnp.asarray(scale, h.dtype)}

  return loss_fn


# --------------------------------------------------------------------------- class-based losses


def hash_centers(num_classes: int, num_bits: int, *, seed: _checks.Seed = 0) -> np.ndarray:
  r"""CSQ's hash centres: one ``{-1, +1}`` code per class, far apart (Yuan et al. 2020, Sec. 3.2).

  .. math:: C = [H_b; -H_b]_{1..K} \ \text{if } b = 2^n,\ K \le 2b; \quad
            \text{else } C_{kj} \sim \pm 1 \text{ with probability } \tfrac12

  When ``num_bits`` is a power of two and ``num_classes <= 2 num_bits``, the
  centres are the first ``num_classes`` rows of ``[H; -H]``, ``H`` the
  Sylvester Hadamard matrix (``scipy.linalg.hadamard``): any two are at Hamming
  distance ``b / 2`` (``b`` for a row of ``H`` and its negation). Otherwise
  (more classes, or another code length) each bit is an independent fair coin
  drawn with ``numpy.random.default_rng(seed)`` (expected distance ``b / 2``),
  rows drawn again while two coincide; that needs ``num_classes <= 2^num_bits``.

  Args:
    num_classes: ``K >= 1``.
    num_bits: ``b >= 1``.
    seed: int or ``numpy.random.Generator``, for the random centres only.

  Returns:
    ``float32[num_classes, num_bits]`` of ``{-1, +1}``, distinct rows.

  >>> hash_centers(3, 4).astype(int).tolist()
  [[1, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1]]
  """
  num_classes = _checks.check_int("num_classes", num_classes)
  num_bits = _checks.check_num_bits(num_bits)
  rng = _checks.check_rng(seed)
  if num_bits & (num_bits - 1) == 0 and num_classes <= 2 * num_bits:
    hadamard = scipy.linalg.hadamard(num_bits)
    return np.concatenate([hadamard, -hadamard])[:num_classes].astype(np.float32)
  if num_bits < 63:
    _checks.check_int_at_most("num_classes", num_classes, 2 ** num_bits,
                              what=f"2**num_bits = {2 ** num_bits} distinct centres of {num_bits} bits")
  centers = rng.integers(0, 2, size=(num_classes, num_bits))
  while True:
    repeated = np.setdiff1d(np.arange(num_classes), np.unique(centers, axis=0, return_index=True)[1])
    if not repeated.size:
      return (2 * centers - 1).astype(np.float32)
    centers[repeated] = rng.integers(0, 2, size=(repeated.size, num_bits))


def csq(mapping, *, num_bits: int, num_classes: int, lam: float = 1e-4, centers: Any = None,
        seed: _checks.Seed = 0) -> Callable:
  r"""CSQ (Yuan et al., CVPR 2020): binary cross-entropy of the relaxed codes to their class's hash centre.

  .. math:: L = -\frac{1}{M b} \sum_{i, k} \big(t_{ik} \log p_{ik} + (1 - t_{ik}) \log(1 - p_{ik})\big)
            + \frac{\lambda}{M b} \sum_{i, k} (|h_{ik}| - 1)^2,
            \quad h = \tanh(z), \ p = \tfrac{h + 1}{2}, \ t = \tfrac{c_{y_i} + 1}{2}

  ``log p = log sigma(2 z)`` and ``log(1 - p) = log sigma(-2 z)`` are computed
  in that stable form. Single-label classes (the paper's multi-label centroids
  are not built).

  Args:
    mapping: a module from :func:`hashjax.mappings.make_mapping`.
    num_bits: its code length ``b``.
    num_classes: ``K >= 1``.
    lam: weight ``>= 0`` of the quantisation term.
    centers: ``[num_classes, num_bits]`` of ``{-1, +1}``; default
      :func:`hash_centers` ``(num_classes, num_bits, seed=seed)`` (Hadamard rows
      when ``b`` is a power of two and ``K <= 2 b``, else random).
    seed: int or ``numpy.random.Generator`` of the random centres.

  Returns:
    ``loss_fn(params, batch, step) -> (loss, {"center", "quantization"})`` with
    ``batch = {"features": [M, dim], "labels": int[M]}``; a batch without
    ``"labels"`` raises ``ValueError`` naming ``batch["labels"]``.

  >>> import jax, numpy as np
  >>> from hashjax import mappings
  >>> m = mappings.make_mapping("linear", num_bits=8)
  >>> x = np.random.default_rng(0).normal(size=(6, 5)).astype(np.float32)
  >>> params = mappings.init(jax.random.key(0), m, x)
  >>> loss_fn = csq(m, num_bits=8, num_classes=3)
  >>> loss, aux = loss_fn(params, {"features": x, "labels": np.arange(6, dtype=np.int32) % 3}, 0)
  >>> bool(aux["center"] > 0)
  True
  """
  num_bits = _check_mapping(mapping, num_bits)
  num_classes = _checks.check_int("num_classes", num_classes)
  lam = _checks.check_number("lam", lam, low=0)
  if centers is None:
    centers = hash_centers(num_classes, num_bits, seed=seed)
  else:
    _checks.check_real("centers", centers, shape=(num_classes, num_bits), like="(num_classes, num_bits)")
    if not np.all(np.abs(np.asarray(centers)) == 1):
      raise ValueError(f"centers: expected values in {{-1, +1}}, got {np.unique(np.asarray(centers))[:4].tolist()}")
    centers = np.asarray(centers, np.float32)

  def loss_fn(params, batch, step):
    del step
    z = _logits(mapping, params, batch)
    targets = (jnp.asarray(centers, z.dtype)[_labels(batch, z.shape[0], num_classes)] + 1.0) / 2.0
    center = -jnp.mean(targets * jax.nn.log_sigmoid(2.0 * z) + (1.0 - targets) * jax.nn.log_sigmoid(-2.0 * z))
    quantization = _quantization(jnp.tanh(z), power=2)
    return center + lam * quantization, {"center": center, "quantization": quantization}

  return loss_fn


def greedyhash_init(key: Any, mapping, features: Any, *, num_classes: int) -> dict:
  r"""Parameters of :func:`greedyhash`: the mapping's and a linear classifier's on the codes.

  .. math:: \theta = \{\theta_f,\ W \in \mathbb{R}^{b \times K},\ c \in \mathbb{R}^{K}\}

  Args:
    key: a ``jax.random`` key.
    mapping: a module from :func:`hashjax.mappings.make_mapping`.
    features: ``[..., dim]`` example features (as :func:`hashjax.mappings.init`).
    num_classes: ``K >= 1``.

  Returns:
    ``{"mapping": mappings.init(...), "classifier": {"kernel": [num_bits, K], "bias": [K]}}``;
    the kernel is LeCun-normal, the bias zero, in the mapping's parameter dtype.

  >>> import jax, numpy as np
  >>> from hashjax import mappings
  >>> m = mappings.make_mapping("linear", num_bits=8)
  >>> params = greedyhash_init(jax.random.key(0), m, np.zeros((1, 5), np.float32), num_classes=3)
  >>> jax.tree.map(np.shape, params["classifier"])
  {'bias': (3,), 'kernel': (8, 3)}
  """
  num_classes = _checks.check_int("num_classes", num_classes)
  _checks.check_key(key)
  key_mapping, key_classifier = jax.random.split(key)
  params = mappings.init(key_mapping, mapping, features)
  kernel = nn.initializers.lecun_normal()(key_classifier, (mapping.num_bits, num_classes), mapping.param_dtype)
  return {"mapping": params,
          "classifier": {"kernel": kernel, "bias": jnp.zeros((num_classes,), mapping.param_dtype)}}


def greedyhash(mapping, *, num_bits: int, num_classes: int, alpha: float = 0.1) -> Callable:
  r"""GreedyHash (Su et al., NeurIPS 2018): classify ``sgn(h)``, trained by the straight-through gradient.

  .. math:: L = -\frac1M \sum_i \log \mathrm{softmax}(W^T b_i + c)_{y_i}
            + \frac{\alpha}{M b} \sum_{i,k} \big| |h_{ik}| - 1 \big|^3, \quad
            b = h + \mathrm{sg}(\mathrm{sgn}(h) - h)

  The forward pass uses ``b = sgn(h)`` (the codes), the backward pass the
  identity (``sg``: ``jax.lax.stop_gradient``), so ``dL/dh = dL/db`` at
  ``b = sgn(h)``, plus the penalty's own gradient.

  The classifier ``(W, c)`` is trained with the mapping: ``params`` are
  :func:`greedyhash_init`'s ``{"mapping": ..., "classifier": ...}``. The
  model to save and encode with is ``params["mapping"]``
  (``mappings.encode(mapping, params["mapping"], x)``); the classifier is only
  a training device.

  Args:
    mapping: a module from :func:`hashjax.mappings.make_mapping`; ``h`` are its logits.
    num_bits: its code length ``b``.
    num_classes: ``K >= 1``.
    alpha: weight ``>= 0`` of the cubic penalty.

  Returns:
    ``loss_fn(params, batch, step) -> (loss, {"classification", "quantization"})`` with
    ``batch = {"features": [M, dim], "labels": int[M]}``; a batch without
    ``"labels"`` raises ``ValueError`` naming ``batch["labels"]``.

  >>> import jax, numpy as np
  >>> from hashjax import mappings
  >>> m = mappings.make_mapping("linear", num_bits=8)
  >>> x = np.random.default_rng(0).normal(size=(6, 5)).astype(np.float32)
  >>> params = greedyhash_init(jax.random.key(0), m, x, num_classes=3)
  >>> loss_fn = greedyhash(m, num_bits=8, num_classes=3)
  >>> loss, aux = loss_fn(params, {"features": x, "labels": np.arange(6, dtype=np.int32) % 3}, 0)
  >>> bool(np.isclose(loss, aux["classification"] + 0.1 * aux["quantization"]))
  True
  """
  num_bits = _check_mapping(mapping, num_bits)
  num_classes = _checks.check_int("num_classes", num_classes)
  alpha = _checks.check_number("alpha", alpha, low=0)

  def loss_fn(params, batch, step):
    del step
    if not (isinstance(params, dict) and {"mapping", "classifier"} <= set(params)):
      raise ValueError(f'params: expected greedyhash_init\'s {{"mapping": ..., "classifier": ...}}, got '
                       f"{sorted(params) if isinstance(params, dict) else type(params).__name__}")
    h = _logits(mapping, params["mapping"], batch)
    labels = _labels(batch, h.shape[0], num_classes)
    codes = h + jax.lax.stop_gradient(jnp.where(h > 0, 1.0, -1.0).astype(h.dtype) - h)
    scores = _encode.matmul(codes, params["classifier"]["kernel"]) + params["classifier"]["bias"]
    classification = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(scores, labels))
    quantization = _quantization(h, power=3)
    return classification + alpha * quantization, {"classification": classification, "quantization": quantization}

  return loss_fn
