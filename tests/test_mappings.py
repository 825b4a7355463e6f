"""Tests of hashjax.mappings against independent numpy references."""

import math

import jax
from jax import flatten_util
import jax.numpy as jnp
import numpy as np
import pytest

from hashjax import codes
from hashjax import mappings


def _features(n, dim, seed=0, dtype=np.float32):
  return np.random.default_rng(seed).normal(size=(n, dim)).astype(dtype)


def _np_pack(bits):
  """Reference packing: bit j -> word j // 32, position j % 32 (loops, numpy only)."""
  bits = np.asarray(bits)
  num_words = (bits.shape[-1] + 31) // 32
  flat = bits.reshape(-1, bits.shape[-1])
  out = np.zeros((flat.shape[0], num_words), np.uint64)
  for r in range(flat.shape[0]):
    for j in range(flat.shape[1]):
      if flat[r, j]:
        out[r, j // 32] += np.uint64(1) << np.uint64(j % 32)
  return out.astype(np.uint32).reshape(bits.shape[:-1] + (num_words,))


def _np_mlp(params, x, act):
  h = x.astype(np.float64)
  i = 0
  while f"hidden_{i}" in params:
    layer = params[f"hidden_{i}"]
    h = act(h @ np.asarray(layer["kernel"], np.float64) + np.asarray(layer["bias"], np.float64))
    i += 1
  return h @ np.asarray(params["output"]["kernel"], np.float64) + np.asarray(params["output"]["bias"], np.float64)


# ----------------------------------------------------------------------------
# Shapes and forward values.


@pytest.mark.parametrize("name,hidden", [("linear", None), ("mlp", (8, 12))])
def test_logit_shapes(name, hidden):
  m = mappings.make_mapping(name, num_bits=40, hidden=hidden)
  params = mappings.init(jax.random.key(0), m, _features(3, 7))
  for lead in [(), (2, 3)]:
    x = np.random.default_rng(1).normal(size=lead + (7,)).astype(np.float32)
    logits = mappings.apply(m, params, x)
    assert logits.shape == lead + (40,)
    assert logits.dtype == jnp.float32
    words = mappings.encode(m, params, x)
    assert words.shape == lead + (2,) and words.dtype == jnp.uint32


# apply promises float32 accuracy on every backend (its products run at Precision.HIGHEST, not a GPU's TF32),
# so the float32 logits match a float64 reference to float32 rounding: rtol=1e-5 below.


def test_linear_matches_numpy():
  m = mappings.make_mapping("linear", num_bits=9)
  params = mappings.init(jax.random.key(3), m, _features(2, 6))
  assert sorted(params) == ["bias", "kernel"]
  params = {"kernel": params["kernel"], "bias": np.arange(9, dtype=np.float32) / 10}
  x = _features(20, 6, seed=4)
  ref = x.astype(np.float64) @ np.asarray(params["kernel"], np.float64) + np.arange(9) / 10
  np.testing.assert_allclose(np.asarray(mappings.apply(m, params, x)), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("activation,act", [
    ("relu", lambda h: np.maximum(h, 0)),
    ("tanh", np.tanh),
    ("sigmoid", lambda h: 1 / (1 + np.exp(-h))),
    ("softplus", lambda h: np.log1p(np.exp(h))),
])
def test_mlp_matches_numpy(activation, act):
  m = mappings.make_mapping("mlp", num_bits=5, hidden=(7, 4), activation=activation)
  params = mappings.init(jax.random.key(1), m, _features(2, 3))
  assert sorted(params) == ["hidden_0", "hidden_1", "output"]
  # Non-zero biases so that their placement is exercised.
  params = jax.tree.map(lambda p: np.asarray(p) + np.float32(0.1), params)
  x = _features(11, 3, seed=2)
  np.testing.assert_allclose(np.asarray(mappings.apply(m, params, x)), _np_mlp(params, x, act),
                             rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["linear", "mlp"])
def test_standardisation_is_a_constant_not_a_parameter(name):
  rng = np.random.default_rng(5)
  train = (rng.normal(size=(100, 4)) * [1.0, 10.0, 0.1, 3.0] + [5.0, -2.0, 0.0, 1.0]).astype(np.float32)
  mean, scale = mappings.feature_stats(train)
  m = mappings.make_mapping(name, num_bits=6, hidden=(8,) if name == "mlp" else None,
                            mean=mean, scale=scale)
  plain = mappings.make_mapping(name, num_bits=6, hidden=(8,) if name == "mlp" else None)
  params = mappings.init(jax.random.key(0), m, train)
  # Same parameter tree as without standardisation: nothing learnable was added.
  plain_params = mappings.init(jax.random.key(0), plain, train)
  assert jax.tree.structure(params) == jax.tree.structure(plain_params)
  x = train[:10]
  z = ((x.astype(np.float64) - train.mean(0)) / train.std(0)).astype(np.float32)
  np.testing.assert_allclose(np.asarray(mappings.apply(m, params, x)),
                             np.asarray(mappings.apply(plain, params, z)), rtol=1e-4, atol=1e-5)
  # Centring only.
  mc = mappings.make_mapping(name, num_bits=6, hidden=(8,) if name == "mlp" else None, mean=mean)
  np.testing.assert_allclose(np.asarray(mappings.apply(mc, params, x)),
                             np.asarray(mappings.apply(plain, params, x - train.mean(0))),
                             rtol=1e-4, atol=1e-5)


def test_modules_with_different_statistics_do_not_share_a_compilation():
  # Modules are jit static arguments hashed by value: different means must give different results.
  x = _features(8, 3)
  m1 = mappings.make_mapping("linear", num_bits=4, mean=np.zeros(3, np.float32))
  m2 = mappings.make_mapping("linear", num_bits=4, mean=np.full(3, 2.0, np.float32))
  assert m1 != m2 and hash(m1) != hash(m2)
  assert m1 == mappings.make_mapping("linear", num_bits=4, mean=np.zeros(3, np.float32))
  params = {"kernel": jnp.ones((3, 4)), "bias": jnp.zeros(4)}
  out1 = np.asarray(mappings.apply(m1, params, x))
  out2 = np.asarray(mappings.apply(m2, params, x))
  ref1 = np.repeat(x.sum(1, keepdims=True), 4, axis=1)
  np.testing.assert_allclose(out1, ref1, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(out2, ref1 - 6.0, rtol=1e-5, atol=1e-5)


def test_integer_features_become_float32():
  x = np.random.default_rng(0).integers(0, 256, size=(6, 5)).astype(np.uint8)
  m = mappings.make_mapping("linear", num_bits=3)
  params = mappings.init(jax.random.key(0), m, x)
  np.testing.assert_array_equal(np.asarray(mappings.apply(m, params, x)),
                                np.asarray(mappings.apply(m, params, x.astype(np.float32))))


# ----------------------------------------------------------------------------
# Initialisation.


def test_nair_init_variance_linear():
  m = mappings.make_mapping("linear", num_bits=64, init="nair")
  params = mappings.init(jax.random.key(7), m, _features(1, 500))
  w = np.asarray(params["kernel"], np.float64).ravel()  # 32000 draws
  # Sample variance of n Gaussian draws has relative std sqrt(2/n) = 0.8%: allow 5%.
  assert abs(w.var() / 1e-3 - 1) < 0.05, w.var()
  assert abs(w.mean()) < 4 * math.sqrt(1e-3 / w.size)
  np.testing.assert_array_equal(np.asarray(params["bias"]), np.zeros(64))
  # Gaussian, not truncated: the tails beyond 3 sigma hold ~0.27% of the mass.
  tail = np.mean(np.abs(w) > 3 * math.sqrt(1e-3))
  assert 0.0015 < tail < 0.004, tail


def test_nair_init_variance_mlp_and_lecun_default():
  m = mappings.make_mapping("mlp", num_bits=64, hidden=(64,), init="nair")
  params = mappings.init(jax.random.key(8), m, _features(1, 500))
  # 32000 and 4096 draws: relative std of the sample variance 0.8% and 2.2%.
  for layer, tol in (("hidden_0", 0.05), ("output", 0.1)):
    w = np.asarray(params[layer]["kernel"], np.float64)
    assert abs(w.var() / 1e-3 - 1) < tol, (layer, w.var())
    np.testing.assert_array_equal(np.asarray(params[layer]["bias"]), 0)
  lecun = mappings.init(jax.random.key(8), mappings.make_mapping("linear", num_bits=64), _features(1, 500))
  w = np.asarray(lecun["kernel"], np.float64)
  assert abs(w.var() * 500 - 1) < 0.05, w.var() * 500  # variance 1 / fan_in


def test_init_is_a_function_of_the_key():
  m = mappings.make_mapping("mlp", num_bits=8, hidden=(4,))
  x = _features(2, 3)
  a = mappings.init(jax.random.key(0), m, x)
  b = mappings.init(jax.random.key(0), m, x)
  c = mappings.init(jax.random.key(1), m, x)
  assert all(np.array_equal(u, v) for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
  assert not np.array_equal(a["output"]["kernel"], c["output"]["kernel"])
  raw = mappings.init(jax.random.PRNGKey(0), m, x)  # raw uint32 keys work too
  assert jax.tree.structure(raw) == jax.tree.structure(a)


# ----------------------------------------------------------------------------
# Transformations.


@pytest.mark.parametrize("name", ["linear", "mlp"])
def test_jit_and_vmap(name):
  m = mappings.make_mapping(name, num_bits=10, hidden=(6,) if name == "mlp" else None)
  x = _features(7, 4)
  per_key = [mappings.init(jax.random.key(i), m, x) for i in range(3)]
  stacked = jax.tree.map(lambda *leaves: np.stack(leaves), *per_key)
  out = jax.vmap(lambda p: mappings.apply(m, p, x))(stacked)
  jitted = jax.jit(lambda p, f: mappings.apply(m, p, f))
  rows = jax.vmap(lambda f: mappings.apply(m, per_key[0], f))(x)  # vmap over feature rows
  for i in range(3):
    ref = mappings.apply(m, per_key[i], x)
    np.testing.assert_allclose(np.asarray(out[i]), np.asarray(ref), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(jitted(per_key[i], x)), np.asarray(ref), rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(np.asarray(rows), np.asarray(mappings.apply(m, per_key[0], x)),
                             rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["linear", "mlp"])
def test_grad_matches_finite_differences(name):
  with jax.enable_x64(True):
    m = mappings.make_mapping(name, num_bits=5, hidden=(4,) if name == "mlp" else None,
                              activation="tanh" if name == "mlp" else None, param_dtype=jnp.float64,
                              mean=np.full(3, 0.5), scale=np.array([1.0, 2.0, 0.5]))
    x = _features(6, 3, dtype=np.float64)
    params = mappings.init(jax.random.key(2), m, x)
    params = jax.tree.map(lambda p: np.asarray(p) + 0.05, params)

    def objective(p):
      return jnp.sum(jnp.tanh(0.7 * mappings.apply(m, p, x)) * jnp.arange(5.0))

    grads = jax.grad(objective)(params)
    flat, unravel = flatten_util.ravel_pytree(params)
    assert flat.dtype == jnp.float64
    g_flat = np.asarray(flatten_util.ravel_pytree(grads)[0])
    objective_flat = jax.jit(lambda f: objective(unravel(f)))
    flat = np.asarray(flat)
    eps = 1e-6
    fd = np.empty_like(flat)
    for i in range(flat.shape[0]):
      e = np.zeros_like(flat)
      e[i] = eps
      fd[i] = (float(objective_flat(flat + e)) - float(objective_flat(flat - e))) / (2 * eps)
    np.testing.assert_allclose(g_flat, fd, rtol=1e-6, atol=1e-7)


# ----------------------------------------------------------------------------
# encode.


@pytest.mark.parametrize("num_bits", [5, 40])
def test_encode_matches_hand_packing(num_bits):
  m = mappings.make_mapping("mlp", num_bits=num_bits, hidden=(8,))
  x = _features(50, 4, seed=num_bits)
  params = mappings.init(jax.random.key(num_bits), m, x)
  logits = np.asarray(mappings.apply(m, params, x))
  expected = _np_pack(logits > 0)
  assert 0 < (logits > 0).mean() < 1
  np.testing.assert_array_equal(np.asarray(codes.pack_bits(codes.binarize(mappings.apply(m, params, x)))),
                                expected)
  words = mappings.encode(m, params, x)
  np.testing.assert_array_equal(np.asarray(words), expected)
  # Leading dimensions are kept.
  w3 = mappings.encode(m, params, x.reshape(5, 10, 4))
  np.testing.assert_array_equal(np.asarray(w3), expected.reshape(5, 10, -1))


def test_encode_empty_and_jax_input():
  m = mappings.make_mapping("linear", num_bits=33)
  params = mappings.init(jax.random.key(0), m, _features(1, 3))
  assert mappings.encode(m, params, np.zeros((0, 3), np.float32)).shape == (0, 2)
  x = _features(9, 3)
  np.testing.assert_array_equal(np.asarray(mappings.encode(m, params, jnp.asarray(x))),
                                np.asarray(mappings.encode(m, params, x)))
  traced = jax.jit(lambda f: mappings.encode(m, params, f))(jnp.asarray(x))
  np.testing.assert_array_equal(np.asarray(traced), np.asarray(mappings.encode(m, params, x)))


def test_codes_do_not_depend_on_the_batch():
  # Every encode path gives the same words for a row one at a time, in chunks of 7 or 15, and in one call of
  # every row (two blocks, the last padded): the projections run in fixed blocks at full float32 precision.
  from hashjax import _encode, baselines, models  # pylint: disable=import-outside-toplevel
  from hashjax.colgen import features as colgen_features  # pylint: disable=import-outside-toplevel
  x = _features(_encode.BLOCK_ROWS + 9, 12, seed=7)
  lin = mappings.make_mapping("linear", num_bits=48, mean=x.mean(0))
  mlp = mappings.make_mapping("mlp", num_bits=15, hidden=(16,))
  lin_params, mlp_params = mappings.init(jax.random.key(1), lin, x), mappings.init(jax.random.key(2), mlp, x)
  itq = baselines.fit("itq", x, num_bits=8, key=jax.random.key(3))
  cg = colgen_features.fit_feature_map(x, kind="rbf", num_anchors=10, seed=4)
  cg = cg._replace(projection=np.random.default_rng(5).normal(size=(10, 6)), bias=np.zeros(6))
  encoders = {
      "linear": lambda f: mappings.encode(lin, lin_params, f),
      "mlp": lambda f: mappings.encode(mlp, mlp_params, f),
      "itq": lambda f: codes.pack_bits(baselines.encode("itq", itq, f)),
      "colgen": lambda f: codes.pack_bits(colgen_features.hash_bits(cg, jnp.asarray(f))),
      "colgen on the host": lambda f: colgen_features.hash_bits(cg, f),
      "linear model": models.from_mapping(lin, lin_params, train_features=x).encode,
      "mlp model": models.from_mapping(mlp, mlp_params, train_features=x).encode,
      "itq model": models.from_baseline("itq", itq, train_features=x).encode,
      "colgen model": models.from_colgen(cg, np.ones(6), train_features=x).encode,
  }
  rows = np.r_[0:12, len(x) - 9:len(x)]  # rows of the first block and of the padded last one
  for name, encode in encoders.items():
    whole = np.asarray(encode(x))
    assert len(np.unique(whole, axis=0)) > 1, name
    for size in (1, 7, 15):
      parts = [np.asarray(encode(x[rows[i:i + size]])) for i in range(0, len(rows), size)]
      np.testing.assert_array_equal(np.concatenate(parts), whole[rows], err_msg=f"{name}, batches of {size}")


# ----------------------------------------------------------------------------
# feature_stats and alpha_schedule.


def test_feature_stats_matches_numpy():
  x = _features(30, 4, dtype=np.float64)
  x[:, 2] = 3.0  # constant column: scale 1
  mean, scale = mappings.feature_stats(x)
  np.testing.assert_allclose(mean, x.mean(0), rtol=1e-12)
  ref = x.std(0)
  ref[2] = 1.0
  np.testing.assert_allclose(scale, ref, rtol=1e-12)
  assert mean.dtype == np.float64
  m8, s8 = mappings.feature_stats(np.array([[0, 10], [2, 10]], np.uint8))
  assert m8.dtype == np.float32 and m8.tolist() == [1.0, 10.0] and s8.tolist() == [1.0, 1.0]


def test_alpha_schedule_matches_formula():
  for t in [0, 1, 5, 10, 11, 1000]:
    ref = 2.0 + (20.0 - 2.0) * min(t / 10, 1.0)
    assert abs(float(mappings.alpha_schedule(t, init=2.0, final=20.0, steps=10)) - ref) < 1e-5
  traced = jax.jit(lambda t: mappings.alpha_schedule(t, init=2.0, final=20.0, steps=10))
  np.testing.assert_allclose(float(traced(jnp.int32(5))), 11.0, rtol=1e-6)
  # Decreasing schedules are allowed too.
  assert float(mappings.alpha_schedule(4, init=4.0, final=1.0, steps=4)) == 1.0


# ----------------------------------------------------------------------------
# Bad inputs.


@pytest.mark.parametrize("kwargs,argname", [
    (dict(name="conv", num_bits=8), "name"),
    (dict(name="linear", num_bits=0), "num_bits"),
    (dict(name="linear", num_bits=8.0), "num_bits"),
    (dict(name="linear", num_bits=8, hidden=(4,)), "hidden"),
    (dict(name="linear", num_bits=8, activation="tanh"), "activation"),
    (dict(name="mlp", num_bits=8, hidden=(0,)), "hidden"),
    (dict(name="mlp", num_bits=8, hidden=()), "hidden"),
    (dict(name="mlp", num_bits=8, hidden=(4.0,)), "hidden"),
    (dict(name="mlp", num_bits=8, hidden=5), "hidden"),
    (dict(name="mlp", num_bits=8, activation="swish!"), "activation"),
    (dict(name="mlp", num_bits=8, init="xavier"), "init"),
    (dict(name="linear", num_bits=8, mean=np.zeros((2, 3))), "mean"),
    (dict(name="linear", num_bits=8, mean=np.array([0.0, np.nan])), "mean"),
    (dict(name="linear", num_bits=8, scale=np.array([1.0, 0.0])), "scale"),
    (dict(name="linear", num_bits=8, mean=np.zeros(3), scale=np.ones(2)), "scale"),
    (dict(name="linear", num_bits=8, param_dtype=jnp.int32), "param_dtype"),
])
def test_make_mapping_bad_options(kwargs, argname):
  name = kwargs.pop("name")
  with pytest.raises(ValueError, match=argname):
    mappings.make_mapping(name, **kwargs)


def test_bad_call_inputs():
  m = mappings.make_mapping("linear", num_bits=4, mean=np.zeros(3))
  x = _features(2, 3)
  params = mappings.init(jax.random.key(0), m, x)
  with pytest.raises(ValueError, match="key"):
    mappings.init(0, m, x)
  with pytest.raises(ValueError, match="key"):
    mappings.init(jnp.zeros((2,), jnp.float32), m, x)
  with pytest.raises(ValueError, match="mapping"):
    mappings.init(jax.random.key(0), "linear", x)
  with pytest.raises(ValueError, match="example_features"):
    mappings.init(jax.random.key(0), m, _features(2, 5))  # width differs from the mean's
  with pytest.raises(ValueError, match="features"):
    mappings.apply(m, params, _features(2, 5))
  bad = x.copy()
  bad[1, 2] = np.inf
  with pytest.raises(ValueError, match="features"):
    mappings.apply(m, params, bad)
  with pytest.raises(ValueError, match="features"):
    mappings.encode(m, params, x > 0)
  with pytest.raises(ValueError, match="features"):
    mappings.apply(m, params, np.float32(1.0))
  with pytest.raises(ValueError, match="params"):
    mappings.apply(m, {"w": jnp.ones((3, 4))}, x)
  with pytest.raises(ValueError, match="features"):
    mappings.feature_stats(np.zeros((0, 3)))
  with pytest.raises(ValueError, match="min_scale"):
    mappings.feature_stats(x, min_scale=-1.0)


@pytest.mark.parametrize("kwargs,argname", [
    (dict(init=0.0, final=1.0, steps=3), "init"),
    (dict(init=1.0, final=float("inf"), steps=3), "final"),
    (dict(init=1.0, final=2.0, steps=0), "steps"),
    (dict(init=1.0, final=2.0, steps=2.5), "steps"),
])
def test_alpha_schedule_bad_options(kwargs, argname):
  with pytest.raises(ValueError, match=argname):
    mappings.alpha_schedule(0, **kwargs)


def test_alpha_schedule_bad_step():
  with pytest.raises(ValueError, match="step"):
    mappings.alpha_schedule(1.5, init=1.0, final=2.0, steps=3)
  with pytest.raises(ValueError, match="step"):
    mappings.alpha_schedule(jnp.zeros(2, jnp.int32), init=1.0, final=2.0, steps=3)
