r"""Learned bit weights for a weighted Hamming ranking (Feng, Liu & Wang, "Learning to Rank Binary Codes").

The base codes stay fixed; one non-negative weight per bit turns the Hamming distance into
:math:`d_w(q, x) = w^\top a_{qx}`, where the absolute code difference vector (ACDV) :math:`a_{qx} = b(q) \oplus
b(x) \in \{0, 1\}^B` marks the bits on which the two codes differ.

**The objective (a reconstruction).** The copy of the paper lost its equations. From the prose (a
Ranking SVM whose constraints ask a dissimilar item to sit farther from the query than a similar one by a margin,
and similar items to sit at similar distances; slack penalised squared and moved into the objective; ``w >= 0``)
this module minimises, over training tuples :math:`t = (q, s, s', d)` with :math:`s, s'` of the query's class
and :math:`d` of another,

.. math:: L(w) = \frac{\lambda}{2}\|w\|^2 + \frac{1}{T}\sum_t \max(0,\ 1 - w^\top x_t)^2
   + \frac{\mu}{T}\sum_t (w^\top c_t)^2, \quad w \ge 0,

with :math:`x_t = a_{qd} - a_{qs}` (the ranking constraint, eq. 4 in the paper's numbering) and
:math:`c_t = a_{qs} - a_{qs'}` (intra-class proximity, eq. 5). :math:`\lambda` stands for the paper's
:math:`1/C`. The problem is convex (strongly convex for :math:`\lambda > 0`).

**Solvers**, one function per family, each with its own options (:func:`fit` runs any of the first three with
the defaults, by name):

* :func:`fit_batch`: exponentiated gradient (``"egd"``), :math:`w_k \leftarrow w_k e^{-\eta g_k}` (eq. 8), or
  projected gradient (``"pgd"``), :math:`w \leftarrow \max(0, w - \eta g)`;
* :func:`fit_online`: one pass of passive-aggressive mini-batch updates (eq. 9 reconstructed), giving the average
  (``"online"``) and the last iterate (``"online_last"``);
* :func:`closed_form`: :math:`w_k = \max(0, \frac{1}{T}\sum_t x_{t,k})`, the direction of the large-:math:`\lambda`
  limit (:math:`\lambda w^\star \to 2 \max(0, \bar x)` as :math:`\lambda \to \infty`: every hinge is active and the
  quadratic terms vanish at that scale);
* :func:`whrank`: Zhang et al.'s data-adaptive WhRank weights from real-valued projections.

EGD and PGD are one compiled kernel each (``lax.while_loop``); the code difference vectors are formed inside it
from the packed words of each tuple's items (XOR, then unpack), so the caller stores only ``int32[T, 4]`` index
tuples. The step is chosen by backtracking (Armijo: halved until the objective falls by at least
:math:`10^{-4}` of the first-order prediction, doubled after each accepted step), so no learning rate needs
tuning. **Stopping rule:** for :math:`\lambda > 0` the objective is :math:`\lambda`-strongly convex, so at any
:math:`w` with gradient :math:`g`

.. math:: L(w) - L^\star \le G(w) = -\min_{v \ge 0}\ [g^\top (v - w) + \tfrac{\lambda}{2}\|v - w\|^2],
   \qquad \|w - w^\star\|^2 \le 2 G(w) / \lambda;

iteration stops once this certifies :math:`\|w - w^\star\| \le \mathrm{tol}\,\|w\|` (``converged``), when 40
halvings of the step in a row do not lower the objective (float32 precision reached), or after ``max_iters``
accepted steps. With :math:`\lambda = 0` there is no certificate and only the last two rules apply.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from hashjax import _checks, codes

Array = jax.Array
Seed = _checks.Seed

#: Solver names accepted by :func:`fit` (WhRank, which reads real-valued projections, is :func:`whrank`).
SOLVERS = ("egd", "pgd", "online", "online_last", "closed_form")

#: Defaults of :func:`fit`, chosen on a validation split of the MNIST-10k training set (see ``docs/design.md``).
DEFAULT_LAM = 1.0
DEFAULT_MU = 0.0
DEFAULT_NUM_TUPLES = 20000
DEFAULT_MAX_ITERS = 500
DEFAULT_TOL = 1e-3
#: The online aggressiveness for the average of the iterates (``"online"``), and for the last iterate
#: (``"online_last"``), which gains from smaller steps.
DEFAULT_STEP = 1.0
DEFAULT_LAST_STEP = 0.003
DEFAULT_BATCH_SIZE = 10
DEFAULT_INNER_STEPS = 3

_ARMIJO = 1e-4  # sufficient-decrease fraction of the first-order prediction
_MAX_HALVINGS = 40  # a step 2^-40 of the first one that still does not lower the objective: float32 precision
_BIG_POPULATION = 2 ** 62  # tuple counts above this cannot be drawn as int64 codes


# ----------------------------------------------------------------------------
# Validation.


def _check_bits(bits: Any) -> np.ndarray:
  """``bits[n, num_bits]`` as bool, {0, 1} or ±1; returns {0, 1} ``uint8`` on the host."""
  _checks.check_array("bits", bits, ndim=2, shape_doc="[n, num_bits]", what="array of bool, {0, 1} or ±1 bits")
  _checks.check_concrete("bits", bits, why="the solvers run on the host")
  _checks.check_bits("bits", bits)
  return (np.asarray(bits) > 0).astype(np.uint8)


def _check_labels(labels: Any, n: Optional[int]) -> np.ndarray:
  """``int[n]`` class labels (any length when ``n`` is None)."""
  _checks.check_array("labels", labels, ndim=1, shape_doc="[n]", kinds="iu", what="array of integer class labels",
                      shape=None if n is None else (n,), like="one label per row of bits")
  return np.asarray(labels)


def _check_training(bits: Any, labels: Any) -> tuple:
  """:func:`_check_bits` of ``bits`` and :func:`_check_labels` of ``labels``, one per row of bits."""
  bits = _check_bits(bits)
  return bits, _check_labels(labels, bits.shape[0])


def _check_penalties(**numbers: Any) -> tuple:
  """Each keyword (the objective's penalty weights ``lam`` and ``mu``, a solver's ``tol``) a finite number ``>= 0``;
  returns them as floats, in order."""
  return tuple(_checks.check_number(name, value, low=0) for name, value in numbers.items())


def _check_tuples(tuples: Any, labels: Optional[np.ndarray], n: int) -> np.ndarray:
  """``int[T, 4]`` tuples ``(q, s, s', d)`` indexing ``n`` items, consistent with ``labels`` when given."""
  _checks.check_int_range("tuples", tuples, 0, n - 1, what="item indices", ndim=2, shape_doc="[T, 4] of (q, s, s', d)")
  _checks.check_shape("tuples", tuples, (len(tuples), 4), like="(q, s, s', d) rows")
  t = np.asarray(tuples, np.int64)
  if labels is not None:
    y = labels[t]
    bad = ~((y[:, 0] == y[:, 1]) & (y[:, 0] == y[:, 2]) & (y[:, 0] != y[:, 3]))
    i = int(np.argmax(bad))  # the first bad row, if any
    if bad[i]:
      raise ValueError(f"tuples: expected s, s' of q's class and d of another, got labels {y[i].tolist()} at row {i}")
  return t.astype(np.int32)


def _training_tuples(labels: np.ndarray, tuples: Any, num_tuples: int, seed: _checks.Seed) -> np.ndarray:
  """The given ``tuples`` checked against ``labels``, or ``num_tuples`` of them sampled with ``seed``."""
  if tuples is None:
    return sample_tuples(labels, num_tuples=num_tuples, seed=seed)
  return _check_tuples(tuples, labels, labels.shape[0])


# ----------------------------------------------------------------------------
# Training tuples.


def _allocate(num_tuples: int, sizes: np.ndarray) -> np.ndarray:
  """Largest-remainder split of ``num_tuples`` in proportion to ``sizes`` (ties to the earlier class)."""
  exact = num_tuples * sizes / sizes.sum()
  counts = np.floor(exact).astype(np.int64)
  order = np.argsort(-(exact - counts), kind="stable")
  counts[order[:num_tuples - counts.sum()]] += 1
  return counts


def _decode(codes_: np.ndarray, members: np.ndarray, others: np.ndarray) -> np.ndarray:
  """Mixed-radix tuple codes in ``[0, m (m-1) (m-2) |others|)`` to ``(q, s, s', d)`` item indices."""
  m = members.size
  rest, di = np.divmod(codes_, others.size)
  rest, s2 = np.divmod(rest, m - 2)
  qi, si = np.divmod(rest, m - 1)
  si = si + (si >= qi)  # the position among the class members other than q
  lo, hi = np.minimum(qi, si), np.maximum(qi, si)
  s2 = s2 + (s2 >= lo)
  s2 = s2 + (s2 >= hi)
  return np.stack([members[qi], members[si], members[s2], others[di]], axis=1)


def _draw_distinct(rng: np.random.Generator, count: int, members: np.ndarray, others: np.ndarray) -> np.ndarray:
  """``count`` distinct tuples drawn uniformly from one class (members) and the rest (others)."""
  m = members.size
  population = m * (m - 1) * (m - 2) * others.size  # Python ints: exact
  if population <= _BIG_POPULATION:
    return _decode(rng.choice(population, size=count, replace=False), members, others)
  # Too many tuples to number in int64: independent draws, redrawn until distinct (repeats are rare here).
  out = np.empty((0, 4), np.int64)
  while out.shape[0] < count:
    k = count - out.shape[0]
    q = rng.integers(0, m, k)
    s = (q + rng.integers(1, m, k)) % m
    s2 = rng.integers(0, m - 2, k)
    lo, hi = np.minimum(q, s), np.maximum(q, s)
    s2 = s2 + (s2 >= lo)
    s2 = s2 + (s2 >= hi)
    new = np.stack([members[q], members[s], members[s2], others[rng.integers(0, others.size, k)]], axis=1)
    both = np.concatenate([out, new])
    _, first = np.unique(both, axis=0, return_index=True)
    out = both[np.sort(first)]
  return out


def sample_tuples(labels: Array, *, num_tuples: int = DEFAULT_NUM_TUPLES, seed: Seed = 0) -> np.ndarray:
  r"""Draws distinct training tuples ``(q, s, s', d)``: ``s, s'`` of the query's class, ``d`` of another.

  Stratified by class (the paper's multinomial over class ratios, made exact): the queries of
  ``num_tuples * n_c / n`` tuples (largest remainders) come from class ``c``. Within a class, a tuple is uniform
  over the ordered tuples with ``q, s, s'`` three distinct items of the class and ``d`` any item outside it, drawn
  without replacement (no tuple twice, as the paper asks). The rows come in random order, the order in which the
  online solver sees them.

  .. math:: t = (q, s, s', d),\quad y_q = y_s = y_{s'} \ne y_d,\quad |\{q, s, s'\}| = 3

  Args:
    labels: ``int[n]`` class labels of the training items.
    num_tuples: ``T``, the number of tuples.
    seed: int or ``numpy.random.Generator``; the same seed gives the same tuples.

  Returns:
    ``int32[T, 4]`` indices into the ``n`` items, columns ``(q, s, s', d)``.

  Raises:
    ValueError: a class with fewer than 3 items, a single class, or a class whose share of ``num_tuples`` is
      more than its distinct tuples.

  >>> import numpy as np
  >>> t = sample_tuples(np.array([0, 0, 0, 1, 1, 1]), num_tuples=4, seed=0)
  >>> t.shape, bool(np.all(t[:, 0] // 3 == t[:, 1] // 3)), bool(np.all(t[:, 0] // 3 != t[:, 3] // 3))
  ((4, 4), True, True)
  """
  labels = _check_labels(labels, None)
  num_tuples = _checks.check_int("num_tuples", num_tuples)
  rng = _checks.check_rng(seed)
  classes, inverse, sizes = np.unique(labels, return_inverse=True, return_counts=True)
  if classes.size < 2:
    raise ValueError(f"labels: expected 2 or more classes (d comes from another class), got {classes.tolist()}")
  if sizes.min() < 3:
    c = int(np.argmin(sizes))
    raise ValueError(f"labels: class {classes[c]} has {sizes[c]} item(s); each needs 3 or more (q, s and s')")
  n = labels.size
  counts = _allocate(num_tuples, sizes)
  for c, (m, k) in enumerate(zip(sizes.tolist(), counts.tolist())):
    allowed = m * (m - 1) * (m - 2) * (n - m)
    if k > allowed:
      raise ValueError(f"num_tuples: {num_tuples} give class {classes[c]} ({m} items) {k}, over its {allowed} tuples")
  parts = [_draw_distinct(rng, k, np.flatnonzero(inverse == c), np.flatnonzero(inverse != c))
           for c, k in enumerate(counts.tolist()) if k]
  tuples = np.concatenate(parts)
  return tuples[rng.permutation(tuples.shape[0])].astype(np.int32)


# ----------------------------------------------------------------------------
# Code difference vectors and the objective (jax).


def _unpacked_xor(a: Array, b: Array, num_bits: int) -> Array:
  """``a_xy`` as float32 ``[..., num_bits]`` from the packed words of ``x`` and ``y``."""
  return codes.unpack_bits(jnp.bitwise_xor(a, b), num_bits).astype(jnp.float32)


def _differences(words: Array, tuples: Array, num_bits: int):
  """``(x, c)``: ``a_qd - a_qs`` and ``a_qs - a_qs'``, float32 ``[T, num_bits]``, from packed words."""
  q, s, s2, d = (words[tuples[:, i]] for i in range(4))
  a_qs = _unpacked_xor(q, s, num_bits)
  return _unpacked_xor(q, d, num_bits) - a_qs, a_qs - _unpacked_xor(q, s2, num_bits)


_differences_kernel = jax.jit(_differences, static_argnums=2)


def _dot(a: Array, b: Array) -> Array:
  return jnp.matmul(a, b, precision=jax.lax.Precision.HIGHEST)


@functools.partial(jax.jit, static_argnames=("num_bits",))
def _objective_kernel(weights, words, tuples, lam, mu, *, num_bits):
  x, c = _differences(words, tuples, num_bits)
  hinge = jnp.maximum(0.0, 1.0 - _dot(x, weights))
  return 0.5 * lam * jnp.sum(weights * weights) + jnp.mean(hinge * hinge) + mu * jnp.mean(_dot(c, weights) ** 2)


def code_differences(words: Array, tuples: Array, *, num_bits: int) -> tuple:
  r"""The code difference vectors of training tuples, formed from packed words.

  .. math:: x_t = a_{qd} - a_{qs},\quad c_t = a_{qs} - a_{qs'},\quad a_{uv} = b(u) \oplus b(v)

  The solvers form these inside their compiled kernels; this function exposes them for inspection.

  Args:
    words: ``uint32[n, ceil(num_bits / 32)]`` packed codes (:func:`hashjax.codes.pack_bits`).
    tuples: ``int[T, 4]`` ``(q, s, s', d)`` indices into ``words`` (:func:`sample_tuples`).
    num_bits: the code length.

  Returns:
    ``(x, c)``, both ``int8[T, num_bits]`` with values in ``{-1, 0, 1}``.

  >>> import numpy as np
  >>> from hashjax.codes import pack_bits
  >>> w = pack_bits(np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 1]]))
  >>> x, c = code_differences(w, np.array([[0, 1, 2, 3]]), num_bits=3)
  >>> x.tolist(), c.tolist()
  ([[0, 1, 1]], [[1, -1, 0]])
  """
  num_bits = _checks.check_codes("words", words, num_bits)
  tuples = _check_tuples(tuples, None, words.shape[0])
  x, c = _differences_kernel(_checks.as_jax(words), jax.device_put(tuples), num_bits)
  return np.asarray(x).astype(np.int8), np.asarray(c).astype(np.int8)


def objective(weights: Array, bits: Array, tuples: Array, *, lam: float = DEFAULT_LAM,
              mu: float = DEFAULT_MU) -> float:
  r"""The training objective of :func:`fit` at ``weights`` (the reconstruction in the module docstring).

  .. math:: L(w) = \frac{\lambda}{2}\|w\|^2 + \frac{1}{T}\sum_t \max(0, 1 - w^\top(a_{qd} - a_{qs}))^2
     + \frac{\mu}{T}\sum_t (w^\top(a_{qs} - a_{qs'}))^2

  Args:
    weights: ``float[num_bits]`` non-negative, finite weights.
    bits: ``[n, num_bits]`` codes of the training items (bool, ``{0, 1}`` or ``±1``).
    tuples: ``int[T, 4]`` ``(q, s, s', d)`` indices into ``bits`` (:func:`sample_tuples`).
    lam: :math:`\lambda \ge 0`.
    mu: :math:`\mu \ge 0`.

  Returns:
    The objective as a Python float (computed in float32).

  >>> import numpy as np
  >>> bits = np.array([[0, 0], [0, 1], [1, 0], [1, 1]])
  >>> round(objective(np.array([1.0, 0.5]), bits, np.array([[0, 1, 2, 3]]), lam=0.0, mu=1.0), 4)
  0.25
  """
  bits = _check_bits(bits)
  n, num_bits = bits.shape
  _checks.check_real("weights", weights, shape_doc=f"[{num_bits}]", shape=(num_bits,), like="one weight per bit",
                     nonnegative="weights")
  weights = np.asarray(weights, np.float32)
  tuples = _check_tuples(tuples, None, n)
  lam, mu = _check_penalties(lam=lam, mu=mu)
  return float(_objective_kernel(jax.device_put(weights), codes.pack_bits(bits), jax.device_put(tuples),
                                 np.float32(lam), np.float32(mu), num_bits=num_bits))


# ----------------------------------------------------------------------------
# Batch solvers: one compiled kernel each.


def _initial_weights(mean: Array) -> Array:
  """The closed form ``max(0, mean)``, floored at 1% of its largest entry (EGD cannot move a zero weight) and
  scaled to a mean margin of 1; all ones if no bit separates on average."""
  top = jnp.max(mean)
  w = jnp.maximum(mean, 0.01 * top)
  return jnp.where(top > 0, w / jnp.dot(w, mean), jnp.ones_like(mean))


@functools.partial(jax.jit, static_argnames=("num_bits", "log_size", "method"))
def _batch_kernel(words, tuples, lam, mu, tol, max_iters, *, num_bits, log_size, method):
  """EGD or PGD with backtracking in one flat loop: each trip tries one step, accepted (the next try doubles
  the step) or not (halves it). Returns ``(w, accepted steps, objective log [log_size], certified)``."""
  x, c = _differences(words, tuples, num_bits)
  num = x.shape[0]
  gram = _dot(c.T, c) / num  # the mu term is w^T gram w

  def grad(w, margins):
    return lam * w - (2.0 / num) * _dot(jnp.maximum(0.0, 1.0 - margins), x) + 2.0 * mu * _dot(gram, w)

  def change(w, margins, dw, dm):
    # L(w + dw) - L(w) term by term as (a - b)(a + b), with the hinges' change taken from dm itself where both
    # hinges are active: the difference of two rounded totals, or of two rounded hinges, would lose it once the
    # steps are small.
    u = 1.0 - margins
    dh = jnp.where((u > 0) & (u - dm > 0), -dm, jnp.maximum(0.0, u - dm) - jnp.maximum(0.0, u))
    sw = 2.0 * w + dw
    return (0.5 * lam * jnp.dot(dw, sw) + jnp.mean(dh * (2.0 * jnp.maximum(0.0, u) + dh))
            + mu * jnp.dot(dw, _dot(gram, sw)))

  if method == "egd":
    update = lambda w, g, eta: w * jnp.exp(-eta * g)
  else:
    update = lambda w, g, eta: jnp.maximum(0.0, w - eta * g)

  def certified(w, g):
    # Strong convexity: L(v) >= L(w) + g.(v - w) + lam/2 |v - w|^2, so L(w) - L* <= gap, the negative minimum
    # of the right side's last two terms over v >= 0, and |w - w*|^2 <= 2 gap / lam.
    safe = jnp.maximum(lam, jnp.finfo(jnp.float32).tiny)
    d = jnp.maximum(0.0, w - g / safe) - w
    gap = -jnp.sum(g * d + 0.5 * safe * d * d)
    return (lam > 0) & (2.0 * gap <= safe * (tol * tol) * jnp.dot(w, w))

  def body(state):
    w, g, margins, f, eta, it, fails, log, _ = state
    dw = update(w, g, eta) - w
    dm = _dot(x, dw)
    decrease = change(w, margins, dw, dm)
    ok = decrease <= _ARMIJO * jnp.dot(g, dw)  # False for NaN or inf

    def accept(_):
      # Margins afresh (not margins + dm): accumulated rounding would swamp them as w shrinks.
      margins_new = _dot(x, w + dw)
      return w + dw, grad(w + dw, margins_new), margins_new, f + decrease

    w, g, margins, f = jax.lax.cond(ok, accept, lambda _: (w, g, margins, f), None)
    it = it + ok
    fails = jnp.where(ok, 0, fails + 1)
    log = log.at[it].set(f)
    done = certified(w, g) | (fails >= _MAX_HALVINGS) | (it >= max_iters)
    return w, g, margins, f, eta * jnp.where(ok, 2.0, 0.5), it, fails, log, done

  w0 = _initial_weights(jnp.mean(x, axis=0))
  m0 = _dot(x, w0)
  h0 = jnp.maximum(0.0, 1.0 - m0)
  f0 = 0.5 * lam * jnp.dot(w0, w0) + jnp.mean(h0 * h0) + mu * jnp.dot(w0, _dot(gram, w0))
  g0 = grad(w0, m0)
  # First step: an exponent of at most 1/4 (EGD) or a move of at most a quarter of the largest weight (PGD).
  top = jnp.max(jnp.abs(g0))
  eta0 = jnp.where(top > 0, 0.25 * (1.0 if method == "egd" else jnp.max(w0)) / top, 1.0)
  log = jnp.full((log_size,), jnp.nan, jnp.float32).at[0].set(f0)
  state = (w0, g0, m0, f0, eta0, jnp.int32(0), jnp.int32(0), log, certified(w0, g0) | (max_iters <= 0))
  w, g, _, _, _, it, _, log, _ = jax.lax.while_loop(lambda state: ~state[-1], body, state)
  return w, it, log, certified(w, g)


@functools.partial(jax.jit, static_argnames=("num_bits",))
def _mean_difference(words, tuples, *, num_bits):
  x, _ = _differences(words, tuples, num_bits)
  return jnp.mean(x, axis=0)


def _batch(bits: np.ndarray, tuples: np.ndarray, method: str, lam: float, mu: float, max_iters: int,
           tol: float) -> "BatchFit":
  log_size = 1 << max_iters.bit_length()  # at least max_iters + 1; a power of two, so few sizes compile
  w, iterations, log, certified = _batch_kernel(
      codes.pack_bits(bits), jax.device_put(tuples), np.float32(lam), np.float32(mu), np.float32(tol),
      np.int32(max_iters), num_bits=bits.shape[1], log_size=log_size, method=method)
  iterations = int(iterations)
  return BatchFit(np.asarray(w, np.float32), np.asarray(log)[:iterations + 1].astype(np.float64), iterations,
                  bool(certified))


def _closed_form(bits: np.ndarray, tuples: np.ndarray) -> np.ndarray:
  mean = _mean_difference(codes.pack_bits(bits), jax.device_put(tuples), num_bits=bits.shape[1])
  return np.maximum(np.asarray(mean), 0.0).astype(np.float32)


# ----------------------------------------------------------------------------
# Online passive-aggressive mini-batches.


@functools.partial(jax.jit, static_argnames=("num_bits", "inner_steps"))
def _online_kernel(words, batches, mask, w0, lam, mu, step, *, num_bits, inner_steps):
  def one_batch(carry, inputs):
    w, total = carry
    tuples, keep = inputs
    x, c = _differences(words, tuples, num_bits)
    count = jnp.maximum(jnp.sum(keep), 1.0)
    # The proximal subproblem is 1 + step * (lam + 2 (|x|^2 + mu |c|^2) / count)-smooth (a Frobenius bound).
    smooth = 1.0 + step * (lam + 2.0 * jnp.sum(keep * (jnp.sum(x * x, 1) + mu * jnp.sum(c * c, 1))) / count)
    w_prev = w

    def inner(_, v):
      hinge = keep * jnp.maximum(0.0, 1.0 - _dot(x, v))
      g = (v - w_prev) + step * (lam * v - (2.0 / count) * _dot(hinge, x)
                                 + (2.0 * mu / count) * _dot(keep * _dot(c, v), c))
      # Exponentiated gradient with the step a smooth function allows at the current scale of v.
      return v * jnp.exp(-g / (smooth * jnp.maximum(jnp.max(v), 1e-30)))

    w = jax.lax.fori_loop(0, inner_steps, inner, w)
    return (w, total + w), None

  (w, total), _ = jax.lax.scan(one_batch, (w0, jnp.zeros_like(w0)), (batches, mask))
  return w, total / batches.shape[0]


def _online(bits: np.ndarray, tuples: np.ndarray, lam: float, mu: float, step: float, batch_size: int,
            inner_steps: int) -> "OnlineFit":
  num, num_bits = tuples.shape[0], bits.shape[1]
  num_batches = -(-num // batch_size)
  padded = np.zeros((num_batches * batch_size, 4), np.int32)
  padded[:num] = tuples
  keep = np.zeros(num_batches * batch_size, np.float32)
  keep[:num] = 1.0
  last, average = _online_kernel(codes.pack_bits(bits), jax.device_put(padded.reshape(num_batches, batch_size, 4)),
                                 jax.device_put(keep.reshape(num_batches, batch_size)),
                                 jnp.ones(num_bits, jnp.float32), np.float32(lam), np.float32(mu),
                                 np.float32(step), num_bits=num_bits, inner_steps=inner_steps)
  return OnlineFit(np.asarray(average, np.float32), np.asarray(last, np.float32), num_batches)


# ----------------------------------------------------------------------------
# WhRank.


def _whrank(projections: np.ndarray, tuples: np.ndarray) -> np.ndarray:
  """Ratio of the spread of projection differences over all pairs to that over same-class pairs, per bit."""
  p = projections.astype(np.float64)
  spread_all = np.sqrt(2.0) * p.std(axis=0)  # RMS difference of two independent items
  diff = p[tuples[:, 0]] - p[tuples[:, 1]]
  spread_same = np.sqrt(np.mean(diff * diff, axis=0))
  regular = spread_same > 0
  w = np.zeros(p.shape[1])
  w[regular] = spread_all[regular] / spread_same[regular]
  # Same-class pairs never differ on these bits: the largest regular weight (a ratio would be infinite).
  w[~regular & (spread_all > 0)] = w[regular].max(initial=1.0)
  return w.astype(np.float32)




# ----------------------------------------------------------------------------
# Entry points: one per solver family, each with its own options, and fit with the defaults of every solver.


class BatchFit(NamedTuple):
  r"""What :func:`fit_batch` returns.

  Attributes:
    weights: ``float32[num_bits]`` non-negative finite weights.
    objective: ``float64[iterations + 1]``, the objective at the start and after every accepted step.
    iterations: the accepted steps.
    converged: the stopping rule's certificate holds (:math:`\|w - w^\star\| \le \mathrm{tol}\,\|w\|`).
  """
  weights: np.ndarray
  objective: np.ndarray
  iterations: int
  converged: bool


class OnlineFit(NamedTuple):
  """What :func:`fit_online` returns: ``float32[num_bits]`` weights ``average`` (of the iterates after each
  mini-batch) and ``last`` (the last iterate), and the number of mini-batches ``batches``."""
  average: np.ndarray
  last: np.ndarray
  batches: int


def fit_batch(bits: Array, labels: Array, *, method: str = "egd", seed: Seed = 0,
              num_tuples: int = DEFAULT_NUM_TUPLES, tuples: Optional[Array] = None, lam: float = DEFAULT_LAM,
              mu: float = DEFAULT_MU, max_iters: int = DEFAULT_MAX_ITERS, tol: float = DEFAULT_TOL) -> BatchFit:
  r"""Bit weights by exponentiated (``"egd"``) or projected (``"pgd"``) gradient descent on the objective.

  .. math:: w \leftarrow w \odot e^{-\eta g} \ (\text{egd}), \qquad w \leftarrow \max(0, w - \eta g)
     \ (\text{pgd}), \qquad g = \nabla L(w)

  Both start from the closed form (floored at 1% of its largest entry so EGD can move every weight, scaled to a
  mean margin of 1), choose :math:`\eta` by backtracking (first try: an exponent of at most 1/4 for EGD, a move of
  at most a quarter of the largest weight for PGD) and stop by the rule of the module docstring; both reach the
  same optimum.

  Args:
    bits: ``[n, num_bits]`` codes of the training items (bool, ``{0, 1}`` or ``±1``).
    labels: ``int[n]`` their class labels.
    method: ``"egd"`` or ``"pgd"``.
    seed: int or ``numpy.random.Generator`` for :func:`sample_tuples`.
    num_tuples: ``T`` tuples to sample (not used when ``tuples`` is given).
    tuples: optional ``int[T, 4]`` ``(q, s, s', d)`` tuples to use instead of sampling.
    lam: :math:`\lambda \ge 0`.
    mu: :math:`\mu \ge 0`.
    max_iters: most accepted steps.
    tol: stop once strong convexity certifies :math:`\|w - w^\star\| \le \mathrm{tol}\,\|w\|`.

  Returns:
    :class:`BatchFit` ``(weights, objective, iterations, converged)``.

  >>> import numpy as np
  >>> labels = np.repeat(np.arange(2), 20)
  >>> bits = np.random.default_rng(0).integers(0, 2, (40, 4))
  >>> bits[:, 0] = labels
  >>> result = fit_batch(bits, labels, num_tuples=200)
  >>> int(np.argmax(result.weights)), result.converged, len(result.objective) == result.iterations + 1
  (0, True, True)
  """
  bits, labels = _check_training(bits, labels)
  method = _checks.check_option("method", method, ("egd", "pgd"))
  lam, mu, tol = _check_penalties(lam=lam, mu=mu, tol=tol)
  max_iters = _checks.check_int("max_iters", max_iters)
  return _batch(bits, _training_tuples(labels, tuples, num_tuples, seed), method, lam, mu, max_iters, tol)


def fit_online(bits: Array, labels: Array, *, seed: Seed = 0, num_tuples: int = DEFAULT_NUM_TUPLES,
               tuples: Optional[Array] = None, lam: float = DEFAULT_LAM, mu: float = DEFAULT_MU,
               step: float = DEFAULT_STEP, batch_size: int = DEFAULT_BATCH_SIZE,
               inner_steps: int = DEFAULT_INNER_STEPS) -> OnlineFit:
  r"""Bit weights by one pass of passive-aggressive mini-batch updates over the tuples (eq. 9 reconstructed).

  .. math:: w_{b+1} = \arg\min_{w \ge 0} \frac12\|w - w_b\|^2 + \gamma\,\Big[\frac{\lambda}{2}\|w\|^2
     + \frac{1}{|B|}\sum_{t \in B} \big(\max(0, 1 - w^\top x_t)^2 + \mu (w^\top c_t)^2\big)\Big]

  Each mini-batch :math:`B` of ``batch_size`` tuples (in the order of the tuples) solves this step approximately
  with ``inner_steps`` exponentiated gradient steps :math:`v \leftarrow v \odot e^{-h / (S \max_k v_k)}` from
  :math:`v = w_b`, where :math:`h` is the gradient of the bracketed step objective at :math:`v` and :math:`S = 1 +
  \gamma (\lambda + \frac{2}{|B|} \sum_{t \in B} (\|x_t\|^2 + \mu \|c_t\|^2))` bounds its curvature. The pass
  starts from :math:`w_0 = 1` (plain Hamming). :math:`\gamma` is ``step`` (PA's aggressiveness):
  :data:`DEFAULT_STEP` suits the average, :data:`DEFAULT_LAST_STEP` the last iterate.

  Args:
    bits: ``[n, num_bits]`` codes of the training items (bool, ``{0, 1}`` or ``±1``).
    labels: ``int[n]`` their class labels.
    seed: int or ``numpy.random.Generator`` for :func:`sample_tuples`.
    num_tuples: ``T`` tuples to sample (not used when ``tuples`` is given).
    tuples: optional ``int[T, 4]`` ``(q, s, s', d)`` tuples to use instead of sampling.
    lam: :math:`\lambda \ge 0`.
    mu: :math:`\mu \ge 0`.
    step: :math:`\gamma > 0`.
    batch_size: tuples per mini-batch (the last one may hold fewer).
    inner_steps: exponentiated gradient steps per mini-batch.

  Returns:
    :class:`OnlineFit` ``(average, last, batches)``.

  >>> import numpy as np
  >>> labels = np.repeat(np.arange(2), 20)
  >>> bits = np.random.default_rng(0).integers(0, 2, (40, 4))
  >>> bits[:, 0] = labels
  >>> result = fit_online(bits, labels, num_tuples=200)
  >>> int(np.argmax(result.average)), result.batches
  (0, 20)
  """
  bits, labels = _check_training(bits, labels)
  lam, mu = _check_penalties(lam=lam, mu=mu)
  step = _checks.check_number("step", step, low=0, low_open=True)
  batch_size = _checks.check_int("batch_size", batch_size)
  inner_steps = _checks.check_int("inner_steps", inner_steps)
  return _online(bits, _training_tuples(labels, tuples, num_tuples, seed), lam, mu, step, batch_size, inner_steps)


def closed_form(bits: Array, labels: Array, *, seed: Seed = 0, num_tuples: int = DEFAULT_NUM_TUPLES,
                tuples: Optional[Array] = None) -> np.ndarray:
  r"""The clipped mean code difference: the direction of the large-:math:`\lambda` limit of the objective.

  .. math:: w_k = \max\Big(0, \frac{1}{T}\sum_t x_{t,k}\Big)

  Args:
    bits: ``[n, num_bits]`` codes of the training items (bool, ``{0, 1}`` or ``±1``).
    labels: ``int[n]`` their class labels.
    seed: int or ``numpy.random.Generator`` for :func:`sample_tuples`.
    num_tuples: ``T`` tuples to sample (not used when ``tuples`` is given).
    tuples: optional ``int[T, 4]`` ``(q, s, s', d)`` tuples to use instead of sampling.

  Returns:
    ``numpy.float32[num_bits]`` non-negative weights.

  >>> import numpy as np
  >>> bits = np.array([[0, 0], [0, 1], [0, 0], [1, 1], [1, 0], [1, 1]])
  >>> closed_form(bits, np.array([0, 0, 0, 1, 1, 1]), num_tuples=12).tolist()
  [1.0, 0.0]
  """
  bits, labels = _check_training(bits, labels)
  return _closed_form(bits, _training_tuples(labels, tuples, num_tuples, seed))


def whrank(projections: Array, labels: Array, *, seed: Seed = 0, num_tuples: int = DEFAULT_NUM_TUPLES,
           tuples: Optional[Array] = None) -> np.ndarray:
  r"""The data-adaptive part of Zhang et al.'s WhRank weights, from the real-valued projections whose signs are
  the bits.

  .. math:: w_k = \sqrt{2}\,\mathrm{sd}(f_k) \Big/ \sqrt{\tfrac{1}{T}\textstyle\sum_t (f_k(q) - f_k(s))^2}

  The spread of the projection difference of two random items over that of two same-class items (from the
  tuples' ``(q, s)`` pairs), so a bit that does not tell classes apart gets weight 1. What the paper leaves open
  and this takes as given: its neighbour pairs are same-class pairs here, the spread is a root mean square (no
  distribution is fitted), and the query-sensitive factor (a weight per query from :math:`|f_k(q)|`) is left
  out, so one weight vector serves every query like the other solvers'. A bit whose same-class difference is
  always 0 gets the largest weight of the other bits; a constant projection gets 0.

  Args:
    projections: ``float[n, num_bits]`` real-valued hash outputs of the training items.
    labels: ``int[n]`` their class labels.
    seed: int or ``numpy.random.Generator`` for :func:`sample_tuples`.
    num_tuples: ``T`` tuples to sample (not used when ``tuples`` is given).
    tuples: optional ``int[T, 4]`` ``(q, s, s', d)`` tuples to use instead of sampling.

  Returns:
    ``numpy.float32[num_bits]`` non-negative weights.

  >>> import numpy as np
  >>> labels = np.repeat(np.arange(2), 20)
  >>> f = np.random.default_rng(0).normal(size=(40, 3))
  >>> f[:, 0] += 4 * labels  # a projection that follows the class
  >>> w = whrank(f, labels, num_tuples=500)
  >>> int(np.argmax(w)), w.shape
  (0, (3,))
  """
  _checks.check_real("projections", projections, shape_doc="[n, num_bits]", ndim=2)
  labels = _check_labels(labels, projections.shape[0])
  return _whrank(np.asarray(projections), _training_tuples(labels, tuples, num_tuples, seed))


def fit(bits: Array, labels: Array, *, solver: str = "egd", seed: Seed = 0) -> np.ndarray:
  r"""Learns one non-negative weight per bit so that the weighted Hamming distance ranks same-class items first.

  .. math:: w^\star = \arg\min_{w \ge 0} \frac{\lambda}{2}\|w\|^2 + \frac{1}{T}\sum_t \max(0, 1 - w^\top x_t)^2
     + \frac{\mu}{T}\sum_t (w^\top c_t)^2

  (the reconstructed objective of the module docstring) over :data:`DEFAULT_NUM_TUPLES` tuples of
  :func:`sample_tuples`, with the defaults of every option (:math:`\lambda = 1`, :math:`\mu = 0`). They gave the
  best tie-aware AP on a validation split of the MNIST-10k training set over LSH, ITQ and PCA codes of 16, 32 and
  64 bits; :math:`\mu > 0` lowered it at every :math:`\lambda` tried, so the intra-class term is off. For other
  options call the solver's own function:

  * ``"egd"`` / ``"pgd"``: :func:`fit_batch` (``method``), its weights;
  * ``"online"`` / ``"online_last"``: :func:`fit_online` with :data:`DEFAULT_STEP` / :data:`DEFAULT_LAST_STEP`,
    the average / the last iterate;
  * ``"closed_form"``: :func:`closed_form`.

  WhRank reads real-valued projections, not bits: :func:`whrank`.

  Args:
    bits: ``[n, num_bits]`` codes of the training items (bool, ``{0, 1}`` or ``±1``).
    labels: ``int[n]`` their class labels.
    solver: one of :data:`SOLVERS`.
    seed: int or ``numpy.random.Generator`` for :func:`sample_tuples`.

  Returns:
    ``numpy.float32[num_bits]`` non-negative finite weights.

  >>> import numpy as np
  >>> rng = np.random.default_rng(0)
  >>> labels = np.repeat(np.arange(2), 20)
  >>> bits = rng.integers(0, 2, (40, 4)).astype(np.uint8)
  >>> bits[:, 0] = labels  # bit 0 is the class: it earns the largest weight
  >>> w = fit(bits, labels)
  >>> w.shape, w.dtype, int(np.argmax(w))
  ((4,), dtype('float32'), 0)
  """
  bits, labels = _check_training(bits, labels)
  solver = _checks.check_option("solver", solver, SOLVERS)
  tuples = sample_tuples(labels, num_tuples=DEFAULT_NUM_TUPLES, seed=seed)
  if solver in ("egd", "pgd"):
    return _batch(bits, tuples, solver, DEFAULT_LAM, DEFAULT_MU, DEFAULT_MAX_ITERS, DEFAULT_TOL).weights
  if solver == "online":
    return _online(bits, tuples, DEFAULT_LAM, DEFAULT_MU, DEFAULT_STEP, DEFAULT_BATCH_SIZE,
                   DEFAULT_INNER_STEPS).average
  if solver == "online_last":
    return _online(bits, tuples, DEFAULT_LAM, DEFAULT_MU, DEFAULT_LAST_STEP, DEFAULT_BATCH_SIZE,
                   DEFAULT_INNER_STEPS).last
  return _closed_form(bits, tuples)
