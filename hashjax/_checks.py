"""Input validation shared by every module.

Each check raises ``ValueError`` naming the argument, what was expected and
what came. Checks run on concrete arrays before any jit trace; on tracers they
check only what the abstract value tells (shape and dtype), so every public
function stays jit-able.
"""

from __future__ import annotations

import os
from typing import Any, Union

import jax
import numpy as np


def is_concrete(x: Any) -> bool:
  """True when ``x`` holds values (not a tracer under jit/vmap/grad)."""
  return not isinstance(x, jax.core.Tracer)


def as_jax(x: Any) -> Any:
  """``x`` as a jax array, compiling nothing: jax arrays and tracers unchanged, others via ``device_put``.

  (``jnp.asarray`` of a numpy array compiles a small staging program for each
  new shape in jax 0.10; ``device_put`` copies the data and canonicalises the
  dtype the same way.) ``None`` stays ``None``.
  """
  if x is None or isinstance(x, (jax.Array, jax.core.Tracer)):
    return x
  return jax.device_put(np.asarray(x))


#: Stand-in for "no cutoff": larger than any rank.
NO_CUTOFF = np.iinfo(np.int32).max


def desc(x: Any) -> str:
  """``"dtype float32 and shape (3, 4)"`` for an array, the type's name for anything else."""
  if hasattr(x, "dtype") and hasattr(x, "shape"):
    return f"dtype {np.dtype(x.dtype).name} and shape {tuple(x.shape)}"
  return "None" if x is None else type(x).__name__



def is_int(x: Any) -> bool:
  """A Python or numpy integer, not a bool."""
  return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def check_int(name: str, value: Any, *, low: int = 1, allow_none: bool = False) -> Any:
  """``value`` must be an int ``>= low`` (not a bool), or None when ``allow_none``; returns it as int."""
  if value is None and allow_none:
    return None
  if not is_int(value) or value < low:
    raise ValueError(f"{name}: expected an int >= {low}{' or None' if allow_none else ''}, got {value!r}")
  return int(value)


def check_option(name: str, value: Any, options) -> str:
  """``value`` must be one of the strings ``options``."""
  if not isinstance(value, str) or value not in options:
    raise ValueError(f"{name}: expected one of {list(options)}, got {value!r}")
  return value


def check_cutoff(k: Any, name: str = "k", *, allow_none: bool = True, low: int = 1) -> int:
  """A rank cutoff: an int ``>= low``, or None (no cutoff, returned as :data:`NO_CUTOFF`)."""
  if k is None and allow_none:
    return NO_CUTOFF
  return min(check_int(name, k, low=low), NO_CUTOFF)


def check_real(name: str, x: Any, *, shape_doc: str = "[...]", min_ndim: int = 0, ndim: Any = None,
               shape: Any = None, like: str = "", nonempty: str = "", nonnegative: str = "") -> None:
  """``x`` must be a real (float or int, not bool) array with no NaN/inf and at least ``min_ndim`` dims.

  Options: ``ndim`` (exactly that many dims, each of size >= 1, as :func:`check_array`), ``shape`` (exactly that
  shape, which ``like`` names, as :func:`check_shape`), ``nonempty`` (at least one entry along the last axis, which
  holds what it names, as :func:`check_nonempty`) and ``nonnegative`` (no negative entry; it names what ``x``
  holds, as :func:`check_nonnegative`).
  """
  if not hasattr(x, "dtype") or not hasattr(x, "shape") or np.dtype(x.dtype).kind not in "fiu":
    raise ValueError(f"{name}: expected a real array {shape_doc}, got {desc(x)}")
  if x.ndim < min_ndim:
    raise ValueError(f"{name}: expected an array {shape_doc} with at least {min_ndim} dimension(s), got {desc(x)}")
  if ndim is not None:
    check_array(name, x, ndim=ndim, shape_doc=shape_doc, kinds="iuf", what="real array")
  if shape is not None:
    check_shape(name, x, shape, like=like)
  if nonempty:
    check_nonempty(name, x, axis=-1, what=nonempty)
  check_finite(name, x)
  if nonnegative:
    check_nonnegative(name, x, what=nonnegative)


def check_words(name: str, words: Any, *, min_ndim: int = 1) -> None:
  """``words`` must be uint32 packed codes with at least ``min_ndim`` dims."""
  if not hasattr(words, "dtype") or words.dtype != np.uint32:
    raise ValueError(f"{name}: expected packed codes of dtype uint32 (see hashjax.codes.pack_bits), got {desc(words)}")
  if words.ndim < max(min_ndim, 1) or words.shape[-1] == 0:
    raise ValueError(f"{name}: expected {min_ndim} or more dimensions [..., num_words >= 1], got {desc(words)}")


def check_bits(name: str, bits: Any) -> None:
  """Codes ``bits[..., num_bits]``, ``num_bits >= 1``, as bool, ``{0, 1}`` or ``±1`` numbers, not a mix (values
  checked when concrete)."""
  if not hasattr(bits, "dtype") or np.dtype(bits.dtype).kind not in "biuf" or bits.ndim < 1 or bits.shape[-1] == 0:
    raise ValueError(f"{name}: expected bits [..., num_bits >= 1] as bool, {{0, 1}} or ±1 numbers, got {desc(bits)}")
  values = np.unique(np.asarray(bits)).tolist() if is_concrete(bits) else []
  if not (set(values) <= {0, 1} or set(values) <= {-1, 1}):
    raise ValueError(f"{name}: expected bits in {{0, 1}} or in {{-1, +1}} (not a mix), got values {values[:6]}"
                     + (" ..." if len(values) > 6 else ""))


def check_same_width(name_a: str, a: Any, name_b: str, b: Any) -> None:
  if a.shape[-1] != b.shape[-1]:
    raise ValueError(f"{name_b}: expected codes of {a.shape[-1]} uint32 word(s) like {name_a}, got shape {b.shape}")


def num_words_for(num_bits: int) -> int:
  return (int(num_bits) + 31) // 32


def check_num_bits(num_bits: Any, *, words: Any = None, name: str = "num_bits",
                   words_name: str = "words") -> int:
  """``num_bits`` must be a positive int; if ``words`` is given it must fit them."""
  if not is_int(num_bits) or num_bits < 1:
    raise ValueError(f"{name}: expected a positive int, got {num_bits!r}")
  want = num_words_for(num_bits)
  if words is not None and words.shape[-1] != want:
    raise ValueError(f"{name}: {num_bits} bits pack into {want} uint32 word(s), {words_name} has {words.shape[-1]}")
  return int(num_bits)


def check_padding_bits(name: str, words: Any, num_bits: int) -> None:
  """The bits of ``words`` past ``num_bits`` (the top of the last word) must be 0, as
  :func:`hashjax.codes.pack_bits` leaves them (checked when concrete; of an array split over several processes,
  the shards this process holds, each process checking its own)."""
  spare = 32 * words.shape[-1] - num_bits
  if spare <= 0 or not is_concrete(words):
    return
  if isinstance(words, jax.Array) and not words.is_fully_addressable:
    # This process's shards, each block once (replicas share an index), keyed by where it starts.
    blocks = {tuple((s.start or 0) for s in shard.index): shard.data for shard in words.addressable_shards}
  else:
    blocks = {(0,) * words.ndim: words}
  count, first = 0, None
  for start, block in sorted(blocks.items()):
    bad = (np.asarray(block)[..., -1] >> np.uint32(32 - spare)) != 0
    count += int(bad.sum())
    if first is None and bad.any():
      first = tuple(int(i) + s for i, s in zip(np.argwhere(bad)[0], start))
  if count:
    raise ValueError(f"{name}: expected codes of {num_bits} bits, whose last word's top {spare} bit(s) are 0 (as "
                     f"pack_bits leaves them), got {count} code(s) with bits set there (first at {first})")


def check_nonempty(name: str, x: Any, axis: int = 0, what: str = "item") -> None:
  if x.ndim == 0 or x.shape[axis] == 0:
    raise ValueError(f"{name}: expected at least one {what}, got shape {tuple(x.shape)}")


def check_finite(name: str, x: Any) -> None:
  """Real-valued ``x`` must hold no NaN or inf (checked when concrete)."""
  if not hasattr(x, "dtype") or not np.issubdtype(np.dtype(x.dtype), np.number):
    raise ValueError(f"{name}: expected a numeric array, got {type(x).__name__}")
  if is_concrete(x) and np.issubdtype(np.dtype(x.dtype), np.inexact):
    arr = np.asarray(x)
    bad = ~np.isfinite(arr)
    if bad.any():
      first = tuple(int(i) for i in np.argwhere(bad)[0])
      raise ValueError(f"{name}: expected finite values, got {int(bad.sum())} NaN/inf, first {arr[first]!r} at {first}")


def check_int_range(name: str, x: Any, low: Any = None, high: Any = None, *, what: str = "values",
                    ndim: Any = None, shape_doc: str = "", shape: Any = None, like: str = "") -> None:
  """An integer (or bool) array ``x``; with ``low`` and ``high``, every entry in ``[low, high]`` (values checked
  when concrete); with ``ndim``, of that many dimensions, each of size >= 1 (``shape_doc`` shows them, as
  :func:`check_array`); with ``shape``, of that shape (which ``like`` names, as :func:`check_shape`)."""
  bounds = "" if low is None else f" in [{low}, {high}]"
  if not hasattr(x, "dtype") or np.dtype(x.dtype).kind not in "biu":
    raise ValueError(f"{name}: expected an integer array of {what}{bounds}, got {desc(x)}")
  if ndim is not None:
    check_array(name, x, ndim=ndim, shape_doc=shape_doc, kinds="biu", what=f"array of {what}")
  if low is not None and is_concrete(x) and x.size:
    arr = np.asarray(x)
    lo, hi = arr.min(), arr.max()
    if lo < low or hi > high:
      raise ValueError(f"{name}: expected {what}{bounds}, got values in [{lo}, {hi}]")
  if shape is not None:
    check_shape(name, x, shape, like=like)


def check_shape(name: str, x: Any, shape: tuple, *, like: str) -> None:
  if tuple(x.shape) != tuple(shape):
    raise ValueError(f"{name}: expected shape {tuple(shape)} (the shape of {like}), got {tuple(x.shape)}")


def check_key(key: Any, *, name: str = "key") -> None:
  """A ``jax.random`` key: typed ``key<impl>[]``, or raw ``uint32[k]`` of the default implementation's ``k``."""
  if not hasattr(key, "dtype") or not hasattr(key, "shape"):
    raise ValueError(f"{name}: expected a jax.random key (e.g. jax.random.key(0)), got {desc(key)}")
  if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
    if key.shape != ():
      raise ValueError(f"{name}: expected a single jax.random key (shape ()), got shape {tuple(key.shape)}")
  else:
    raw = jax.eval_shape(lambda: jax.random.key_data(jax.random.key(0))).shape  # the default raw key's, no work
    if key.dtype != np.uint32 or tuple(key.shape) != raw:
      raise ValueError(f"{name}: expected a jax.random key (jax.random.key(seed), or raw uint32 {list(raw)} as "
                       f"jax.random.PRNGKey gives), got {desc(key)}")


def check_number(name: str, value: Any, *, low: Any = None, high: Any = None, low_open: bool = False,
                 high_open: bool = False) -> float:
  """``value`` must be a finite Python or numpy real number (not a bool) within the bounds; returns it as float.

  ``low``/``high`` are inclusive unless ``low_open``/``high_open``; None leaves that side unbounded.
  """
  ok = (isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
        and bool(np.isfinite(value)))
  if ok and low is not None:
    ok = value > low if low_open else value >= low
  if ok and high is not None:
    ok = value < high if high_open else value <= high
  if not ok:
    if low is not None and high is not None:
      where = f" in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    elif low is not None:
      where = f" {'>' if low_open else '>='} {low}"
    elif high is not None:
      where = f" {'<' if high_open else '<='} {high}"
    else:
      where = ""
    raise ValueError(f"{name}: expected a finite number{where}, got {value!r}")
  return float(value)


def check_bool(name: str, value: Any) -> bool:
  """``value`` must be a Python or numpy bool; returns it as bool."""
  if not isinstance(value, (bool, np.bool_)):
    raise ValueError(f"{name}: expected a bool, got {value!r}")
  return bool(value)


def check_callable(name: str, fn: Any, *, what: str = "function") -> None:
  """``fn`` must be callable (``what`` names what is expected, e.g. ``"score function"``)."""
  if not callable(fn):
    raise ValueError(f"{name}: expected a callable {what}, got {type(fn).__name__}")


def check_float_dtype(dtype: Any, *, name: str = "dtype") -> np.dtype:
  """A result dtype: None (float64 in jax's x64 mode, else float32), float32, or float64 (x64 mode only)."""
  x64 = jax.dtypes.canonicalize_dtype(np.float64) == np.float64
  if dtype is None:
    return np.dtype(np.float64 if x64 else np.float32)
  try:
    dt = np.dtype(dtype)
  except TypeError:
    dt = None
  if dt not in (np.float32, np.float64):
    raise ValueError(f"{name}: expected None, float32 or float64, got {dtype!r}")
  if dt == np.float64 and not x64:
    raise ValueError(f"{name}: float64 needs jax x64 mode (use `with jax.enable_x64(True):`)")
  return dt


def check_word_pair(query_words: Any, db_words: Any, num_bits: Any = None) -> Any:
  """``query_words[Q, W]`` and ``db_words[N, W]`` packed codes (uint32, ``Q, N >= 1``); with ``num_bits``, also
  that ``W`` fits it and that the padding bits are 0 (when concrete). Returns ``num_bits`` as int (or None)."""
  check_codes("query_words", query_words)
  check_codes("db_words", db_words)
  check_same_width("query_words", query_words, "db_words", db_words)
  if num_bits is not None:  # the width and padding bits of query_words, then those of db_words
    num_bits = check_codes("query_words", query_words, num_bits)
    check_padding_bits("db_words", db_words, num_bits)
  return num_bits


def check_within(name: str, x: Any, low: float, high: float, *, what: str) -> None:
  """A real array ``x`` must hold values in ``[low, high]`` (checked when concrete); ``what`` names them."""
  if is_concrete(x) and x.size:
    lo, hi = np.asarray(x).min(), np.asarray(x).max()
    if lo < low or hi > high:
      raise ValueError(f"{name}: expected {what} in [{low:g}, {high:g}], got values in [{lo:g}, {hi:g}]")


def check_nonnegative(name: str, x: Any, *, what: str = "values") -> None:
  """A real array ``x`` must hold no negative entry (checked when concrete: a traced ``x`` cannot be).

  The error shows the smallest value, how many entries are negative and where the first is.
  """
  if not is_concrete(x) or not getattr(x, "size", 0):
    return
  arr = np.asarray(x)
  if arr.dtype.kind not in "if":
    return
  negative = arr < 0
  if negative.any():
    first = tuple(int(i) for i in np.argwhere(negative)[0])
    count = int(negative.sum())
    raise ValueError(f"{name}: expected non-negative {what}, got a smallest value of {arr.min().item()!r} "
                     f"({count} negative entr{'y' if count == 1 else 'ies'}, the first at index {first})")


# ----------------------------------------------------------------------------
# Rules that several public entry points share: each is written once, here.

#: A numpy seed: a non-negative int or a ``np.random.Generator`` (used as it is).
Seed = Union[int, np.random.Generator]

INT32_MAX = int(np.iinfo(np.int32).max)


def check_rng(seed: Any, *, name: str = "seed") -> np.random.Generator:
  """``seed`` (a non-negative int, or a numpy ``Generator`` returned as it is) as a numpy ``Generator``."""
  if isinstance(seed, np.random.Generator):
    return seed
  if not is_int(seed) or seed < 0:
    raise ValueError(f"{name}: expected a non-negative int or a numpy Generator, got {seed!r}")
  return np.random.default_rng(int(seed))


def check_local(name: str, x: Any, *, use: str) -> None:
  """``x`` must not be a concrete ``jax.Array`` split over several processes (a search of one process's memory)."""
  if isinstance(x, jax.Array) and is_concrete(x) and not x.is_fully_addressable:
    raise ValueError(f"{name}: expected an array this process holds whole, got one split over the devices of "
                     f"{len({d.process_index for d in x.sharding.device_set})} processes; use {use}")


def check_k(k: Any, num_db: int, *, db_name: str = "db_words") -> int:
  """A neighbour count ``1 <= k <= num_db``: a query cannot have more neighbours than the database holds
  (there is no padding policy)."""
  return check_int_at_most("k", k, num_db, what=f"the {num_db} items of {db_name} (no padding)")


def check_radius(r: Any, num_queries: int, *, name: str = "r") -> np.ndarray:
  """A Hamming radius as ``int64[Q]``: a non-negative int, or a concrete integer array ``[Q]`` of them.

  Radius queries return variable-length results, so they cannot run under jit: traced radii are refused.
  """
  if is_int(r):
    return np.full((num_queries,), check_int(name, r, low=0), np.int64)
  if (not hasattr(r, "dtype") or not hasattr(r, "shape") or not is_concrete(r) or np.dtype(r.dtype).kind not in "iu"
      or tuple(r.shape) != (num_queries,)):
    raise ValueError(f"{name}: expected an int >= 0 or a concrete integer array of them of shape ({num_queries},) "
                     f"(one radius per query), got {desc(r) if hasattr(r, 'dtype') else repr(r)}")
  check_nonnegative(name, r, what="radii")
  return np.asarray(r).astype(np.int64)


def check_float_radius(r: Any, num_queries: int, *, name: str = "r") -> np.ndarray:
  """A weighted-distance radius as ``float64[Q]``: a finite number ``>= 0``, or a concrete real array ``[Q]``."""
  if not hasattr(r, "shape") or getattr(r, "ndim", 0) == 0:
    return np.full((num_queries,), check_number(name, r if not hasattr(r, "item") else r.item(), low=0))
  check_concrete(name, r, why="radius queries return results of varying length")
  check_real(name, r, shape_doc="[Q] of radii >= 0", shape=(num_queries,), like="one per query", nonnegative="radii")
  return np.asarray(r, np.float64)


def check_result_count(total: Any, *, name: str = "r") -> None:
  """A ragged result (``RaggedNeighbors``) indexes its items with int32 offsets: at most 2^31 - 1 of them."""
  if int(total) > INT32_MAX:
    raise ValueError(f"{name}: {int(total)} results exceed the {INT32_MAX} of RaggedNeighbors' int32 offsets; use a "
                     "smaller radius or fewer queries at a time")


def check_mask(name: str, where: Any, shape: tuple, *, like: str) -> None:
  """An optional bool mask (``None`` = every entry) of the given shape."""
  if where is None:
    return
  check_array(name, where, ndim=len(shape), shape_doc=f"like {like}", kinds="b", what="bool mask", nonempty=False,
              shape=shape, like=like)


def check_label_pair(query_labels: Any, db_labels: Any, num_queries: int, num_db: int, *,
                     query_like: str = "[len(query_words)]", db_like: str = "[len(db_words)]",
                     affinity: Any = None) -> bool:
  """Class labels come as a pair: both ``query_labels[Q]`` and ``db_labels[N]`` (int32 range) or neither, and
  not with an ``affinity`` matrix.

  Returns True when both are given.
  """
  if query_labels is None and db_labels is None:
    return False
  if affinity is not None:
    raise ValueError("affinity, query_labels: expected an affinity matrix or labels, not both")
  for name, labels, size, like in (("query_labels", query_labels, num_queries, query_like),
                                   ("db_labels", db_labels, num_db, db_like)):
    if labels is None:
      raise ValueError(f"{name}: expected int labels of shape ({size},) with the other labels, got None")
    check_int_range(name, labels, -INT32_MAX - 1, INT32_MAX, what="class labels", shape=(size,), like=like)
  return True


def check_array(name: str, x: Any, *, ndim: int, shape_doc: str, kinds: str = "biuf", what: str = "array",
                nonempty: bool = True, shape: Any = None, like: str = "") -> None:
  """``x`` must be an array of ``ndim`` dimensions (each of size >= 1 when ``nonempty``) whose dtype kind is in
  ``kinds`` (numpy kind letters: ``b`` bool, ``i``/``u`` integer, ``f`` float); ``what`` names what it holds. With
  ``shape``, of exactly that shape (which ``like`` names, as :func:`check_shape`)."""
  if not (hasattr(x, "dtype") and hasattr(x, "shape") and np.dtype(x.dtype).kind in kinds and x.ndim == ndim
          and (not nonempty or min(x.shape, default=1) >= 1)):
    raise ValueError(f"{name}: expected a {'non-empty ' if nonempty else ''}{ndim}-D {what} {shape_doc}, got {desc(x)}")
  if shape is not None:
    check_shape(name, x, shape, like=like)


def check_concrete(name: str, *arrays: Any,
                   why: str = "its results vary in length, so it cannot run under jit") -> None:
  """Every one of ``arrays`` must hold values (no jit tracer); ``why`` says what needs them."""
  if not all(is_concrete(a) for a in arrays):
    raise ValueError(f"{name}: expected concrete arrays ({why}), got a traced value")


def check_weights(weights: Any, num_words: int) -> int:
  """Bit weights ``float[num_bits]`` for codes of ``num_words = ceil(num_bits / 32)`` uint32 words: real,
  finite, non-negative, with a sum within ``float32``'s range (values checked when concrete). Returns
  ``num_bits``."""
  check_real("weights", weights, ndim=1, shape_doc="[num_bits] of non-negative weights", nonnegative="weights")
  if num_words_for(weights.shape[0]) != num_words:
    raise ValueError(f"weights: expected {32 * num_words - 31} to {32 * num_words} for codes of {num_words} words, got "
                     f"{len(weights)}")
  total = float(np.asarray(weights, np.float64).sum()) if is_concrete(weights) else 0.0
  if not total <= float(np.finfo(np.float32).max) / 2:
    raise ValueError(f"weights: expected a sum within float32's range, got a sum of {total!r}")
  return int(weights.shape[0])


def check_weighted_pair(query_words: Any, db_words: Any, weights: Any) -> int:
  """:func:`check_word_pair` of the codes, :func:`check_weights` of ``weights`` for their width, and the codes'
  padding bits past ``num_bits`` 0 (when concrete). Returns ``num_bits``."""
  check_word_pair(query_words, db_words)
  num_bits = check_weights(weights, query_words.shape[1])
  check_padding_bits("query_words", query_words, num_bits)
  check_padding_bits("db_words", db_words, num_bits)
  return num_bits


def check_hamming_distances(distances: Any, num_bits: Any = None, *, name: str = "distances") -> Any:
  """Integer (not bool) Hamming distances ``[..., N]``, ``N >= 1``, in ``[0, num_bits]`` (``num_bits`` None: any
  int32 ``>= 0``; values checked when concrete); returns ``num_bits`` as int (or None)."""
  if num_bits is not None:
    num_bits = check_num_bits(num_bits)
  if (not hasattr(distances, "dtype") or not hasattr(distances, "shape") or np.dtype(distances.dtype).kind not in "iu"
      or distances.ndim < 1 or distances.shape[-1] == 0):
    raise ValueError(f"{name}: expected integer Hamming distances [..., N] with N >= 1, got {desc(distances)}")
  check_int_range(name, distances, 0, INT32_MAX if num_bits is None else num_bits, what="distances")
  return num_bits


def check_real_distances(distances: Any, *, name: str = "distances") -> None:
  """Real-valued distances ``[..., N]``, ``N >= 1`` (int or float, not bool), without NaN (when concrete;
  ``+-inf`` are allowed)."""
  if (not hasattr(distances, "dtype") or not hasattr(distances, "shape") or np.dtype(distances.dtype).kind not in "iuf"
      or distances.ndim < 1 or distances.shape[-1] == 0):
    raise ValueError(f"{name}: expected a real array [..., N], N >= 1 (smaller is closer), got {desc(distances)}")
  if is_concrete(distances) and np.dtype(distances.dtype).kind == "f":
    nan = np.isnan(np.asarray(distances))
    if nan.any():
      count, first = int(nan.sum()), tuple(int(i) for i in np.argwhere(nan)[0])
      raise ValueError(f"{name}: expected no NaN (+-inf are allowed), got {count} NaN (first at index {first})")


def check_path(name: str, path: Any) -> str:
  """``path`` must be a ``str`` or ``os.PathLike``; returns it as an absolute path."""
  if not isinstance(path, (str, os.PathLike)):
    raise ValueError(f"{name}: expected a path (str or os.PathLike), got {type(path).__name__}")
  return os.path.abspath(os.fspath(path))


def check_columns(name: str, x: Any, dim: int, *, what: str) -> None:
  """The last axis of ``x`` must hold ``dim`` columns (e.g. features); ``what`` says where ``dim`` comes from."""
  if x.shape[-1] != dim:
    raise ValueError(f"{name}: expected {dim} columns ({what}), got shape {tuple(x.shape)}")


def check_type(name: str, value: Any, types: Any, *, what: str, allow_none: bool = False) -> Any:
  """``value`` must be an instance of ``types`` (or None when ``allow_none``); ``what`` describes what is expected.
  Returns it."""
  if not (isinstance(value, types) or (allow_none and value is None)):
    raise ValueError(f"{name}: expected {what}{' or None' if allow_none else ''}, got {type(value).__name__}")
  return value


def check_nonempty_str(name: str, value: Any, *, what: str) -> str:
  """``value`` must be a non-empty ``str`` (``what`` says what it names, e.g. ``"a tfds split such as 'test'"``)."""
  if not isinstance(value, str) or not value:
    raise ValueError(f"{name}: expected {what}, got {value!r}")
  return value


def check_codes(name: str, words: Any, num_bits: Any = None, *, num_bits_name: str = "num_bits", why: str = "",
                max_rows: Any = None) -> Any:
  """Packed codes ``uint32[N, W]``: ``N >= 1`` (at most ``max_rows`` unless None); concrete when ``why`` (what needs
  the values) is given; with ``num_bits``, ``W = ceil(num_bits / 32)`` and the padding bits 0. Returns ``num_bits``
  as int (or None)."""
  check_words(name, words, min_ndim=2)
  if words.ndim != 2 or not 1 <= words.shape[0] <= (max_rows or words.shape[0]):
    raise ValueError(f"{name}: expected codes [N, W], 1 <= N{f' <= {max_rows}' if max_rows else ''}, got {words.shape}")
  if why:
    check_concrete(name, words, why=why)
  if num_bits is not None:
    num_bits = check_num_bits(num_bits, words=words, name=num_bits_name, words_name=name)
    check_padding_bits(name, words, num_bits)
  return num_bits


def check_ranking_data(name: str, x: Any, labels: Any, query_ids: Any, *, ndim: int, shape_doc: str) -> None:
  """Documents grouped by query: ``x`` a non-empty finite real array of ``ndim`` dimensions (``[n]`` scores or
  ``[n, d]`` features), ``labels`` graded relevance ``int[n] >= 0`` (None: nothing to check) and ``query_ids``
  ``int[n]``."""
  check_real(name, x, shape_doc=shape_doc, ndim=ndim)
  like = name if ndim == 1 else f"{name}[:, 0]"
  if labels is not None:
    check_int_range("labels", labels, 0, INT32_MAX, what="relevance labels", shape=x.shape[:1], like=like)
  check_int_range("query_ids", query_ids, what="query ids", shape=x.shape[:1], like=like)


def check_int_at_most(name: str, value: Any, high: int, *, what: str, low: int = 1) -> int:
  """``value`` must be an int in ``[low, high]``; ``what`` names the bound (e.g. ``"the 14 training queries"``).
  Returns it as int."""
  value = check_int(name, value, low=low)
  if value > high:
    raise ValueError(f"{name}: expected at most {what}, got {value}")
  return value


def check_file(name: str, path: Any, *, folder: bool = False) -> str:
  """``path`` (a ``str`` or ``os.PathLike``) must name an existing file, or directory when ``folder``; returns it
  as a ``str``. A missing one raises ``FileNotFoundError`` naming the argument."""
  check_path(name, path)
  path = os.fspath(path)
  if not (os.path.isdir(path) if folder else os.path.isfile(path)):
    raise FileNotFoundError(f"{name}: no {'directory' if folder else 'file'} at {path!r}")
  return path


def check_numbers(name: str, values: Any, **bounds: Any) -> np.ndarray:
  """One or more numbers (a number or a 1-D sequence of them), each passing :func:`check_number` with ``bounds``
  (``low``, ``high``, ``low_open``, ``high_open``); returns them as ``float64[F]``, ``F >= 1``."""
  arr = np.asarray(values)
  if arr.ndim > 1 or arr.size == 0:
    raise ValueError(f"{name}: expected one or more numbers (a 1-D sequence), got {values!r}")
  return np.array([check_number(name, v, **bounds) for v in arr.reshape(-1).tolist()], np.float64)


def check_histogram(name: str, hist: Any, *, integer: bool = True) -> None:
  """Counts ``hist[..., B, V]`` with ``B, V >= 1``: ints in ``[0, 2^31 - 1]`` (``integer``), else finite
  non-negative reals (values checked when concrete)."""
  if integer:
    check_int_range(name, hist, 0, INT32_MAX, what="counts")
  else:
    check_real(name, hist, shape_doc="of counts [..., B, V]", nonnegative="counts")
  if hist.ndim < 2 or 0 in hist.shape[-2:]:
    raise ValueError(f"{name}: expected counts [..., B, V] with B, V >= 1, got shape {tuple(hist.shape)}")


def check_gain_levels(num_levels: int, *, name: str = "affinity") -> int:
  """NDCG's gains ``2^v - 1`` take at most 64 levels ``v``; returns ``num_levels``."""
  if num_levels > 64:
    raise ValueError(f"{name}: expected at most 64 levels (gain 2^v - 1), got {num_levels}")
  return num_levels


def check_class_labels(labels: Any, num_items: int, *, name: str = "labels", like: str = "[len(features)]"
                       ) -> np.ndarray:
  """Class labels a supervised fit needs: ``int[num_items]`` (int32 range) of at least two classes; returns them
  as ``int64[num_items]``."""
  if labels is None:
    raise ValueError(f"{name}: expected int class labels of shape ({num_items},) (a supervised method), got None")
  check_concrete(name, labels, why="a fit reads them on the host; call it outside jax.jit")
  check_int_range(name, labels, -INT32_MAX - 1, INT32_MAX, what="class labels", shape=(num_items,), like=like)
  labels = np.asarray(labels).astype(np.int64)
  if np.unique(labels).size < 2:
    raise ValueError(f"{name}: expected at least two classes to learn from, got only class {labels[0]}")
  return labels


def check_host_key(key: Any, *, name: str = "key") -> None:
  """A concrete ``jax.random`` key (as :func:`check_key`), for fits that draw from it on the host."""
  check_key(key, name=name)
  check_concrete(name, key, why="a fit draws from it on the host; call it outside jax.jit")


def check_key_rng(key: Any, *, name: str = "key") -> np.random.Generator:
  """A ``jax.random`` key (as :func:`check_host_key`) turned into a numpy ``Generator`` seeded by its key data,
  for fits that draw on the host."""
  check_host_key(key, name=name)
  return np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel().tolist())


def check_step(step: Any) -> None:
  """A training step: an integer scalar (a Python int, or a possibly traced integer array of shape ``()``)."""
  ok = (np.issubdtype(np.dtype(step.dtype), np.integer) and np.ndim(step) == 0) if hasattr(step, "dtype") \
      else is_int(step)
  if not ok:
    raise ValueError(f"step: expected an integer scalar, got {desc(step) if hasattr(step, 'dtype') else repr(step)}")


def check_schedule(name: str, value: Any) -> Any:
  """A value ``> 0`` (returned as float) or a schedule ``step -> value``; the schedule is probed at step 0 (an
  int32 scalar, as a loss passes it) since its later values run traced and cannot be checked."""
  if not callable(value):
    return check_number(name, value, low=0, low_open=True)
  start = value(np.int32(0))
  if is_concrete(start) and np.ndim(start) == 0:
    first = float(np.asarray(start))
    if not (np.isfinite(first) and first > 0):
      raise ValueError(f"{name}: expected a schedule of values > 0, got {name}(0) = {first!r}")
  return value
