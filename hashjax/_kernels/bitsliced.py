r"""Hamming histograms of codes of at most 128 bits by bit-sliced counting: bitwise work only, no scatter.

**Bit planes.** The database is transposed once into planes of ``uint64`` words: word ``m`` of plane ``j``
holds bit ``j`` of the 64 items ``64 m .. 64 m + 63``. For one query, plane ``j`` XORed with the query's
bit ``j`` (a word of zeros or of ones) marks the items that differ from it there.

**Counting** (:func:`_block_counts`, one jitted kernel, looped over query chunks and database blocks):

1. the planes are added in groups of at most 16 by carry-save adders: per group, the bit-sliced distance of
   every item to the query over the group's bits, 64 items per operation;
2. the groups are summed pairwise by ripple-carry adders into the ``bit_length(num_bits)`` planes of each
   item's distance;
3. the distances are decoded as ``8 * high + low``: per high value, a mask of its items is ANDed with each of
   the 8 masks of the low values, and the cells are counted by popcounts summed along the words.

Each stage ends in a reduction (over pairs of groups, then along the words), so XLA keeps the adders in
registers, vectorised over words, and the program's size hardly depends on ``num_bits``.

**Labels** (``V = 2``: relevance ``[query_labels[q] == db_labels[i]]``). The database is laid out by class,
each class starting at a fresh plane word, so each word holds items of one class of the queries (or of
none). A query's counts in the words of its own class are the relevant ones: they are added into the high
32 bits of the same sums (the low 32 bits count every item). Slots that hold no item are zero codes,
masked out of every cell by a plane of occupied slots.

Everything runs with 64-bit types enabled (``uint64`` planes: popcounts are most of the work, and 64-bit
words halve their number); inputs are concrete and the layout is computed on the host.
"""

from __future__ import annotations

import functools
import jax
import jax.numpy as jnp
import numpy as np

#: The longest codes this kernel counts (at most 8 groups of 16 planes); longer ones go to the scatter-add.
MAX_BITS = 128

#: Items per plane word.
_ITEMS = 64

#: Planes added per carry-save group (stage 1).
_GROUP_PLANES = 16

#: Queries per kernel call: the distance planes of a chunk against a block stay within a few MB.
_QUERY_CHUNK = 32

#: Plane words per database block, at most (about 125,000 items); a larger database runs in equal blocks.
_BLOCK_WORDS = 1960

#: Plane words per call of :func:`_planes`: one program per code length whatever the database size (a new
#: size compiles the counting kernel only).
_PLANE_BLOCK_WORDS = 1024

#: :func:`_planes` unpacks a few plane words at a time, so that their bits stay in the cache: a power of two,
#: at least ``_UNPACK_STEP`` words, at most ``_UNPACK_WORDS / P`` where it can.
_UNPACK_WORDS = 1024
_UNPACK_STEP = 8

#: The low distance planes decoded by a tree of masks; each high value is one row of the cells (stage 3).
_LOW_PLANES = 3


def counts(query_words, db_words, *, num_bits: int, query_labels=None, db_labels=None) -> np.ndarray:
  r"""``int32[Q, num_bits + 1, V]`` Hamming histograms of packed codes, by bit-sliced counting (on the host).

  .. math:: n_{q,d,v} = |\{ i : d(q, i) = d,\ [\ell_q = \ell_i] = v \}|

  Args:
    query_words: ``uint32[Q, W]`` packed queries, concrete, padding bits 0.
    db_words: ``uint32[N, W]`` packed database codes, concrete, padding bits 0.
    num_bits: the code length, at most :data:`MAX_BITS`; ``W = ceil(num_bits / 32)``.
    query_labels, db_labels: optional ``[Q]`` and ``[N]`` labels (any comparable numpy values), both or none.

  Returns:
    ``int32[Q, num_bits + 1, V]`` counts as a numpy array; ``V = 2`` (irrelevant, relevant) with labels,
    else ``V = 1``.

  >>> import numpy as np
  >>> q = np.array([[0b11]], np.uint32)
  >>> x = np.array([[0b11], [0b10], [0b00]], np.uint32)
  >>> counts(q, x, num_bits=2).tolist()
  [[[1], [1], [1]]]
  >>> counts(q, x, num_bits=2, query_labels=np.array([5]), db_labels=np.array([5, 5, 7])).tolist()
  [[[0, 1], [0, 1], [1, 0]]]
  """
  if not 1 <= num_bits <= MAX_BITS:
    raise ValueError(f"num_bits: expected 1 to {MAX_BITS} bits for the bit-sliced kernel, got {num_bits}")
  query_words, db_words = np.asarray(query_words), np.asarray(db_words)
  num_q, n = query_words.shape[0], db_words.shape[0]
  labelled = query_labels is not None
  if num_q == 0 or n == 0:
    return np.zeros((num_q, num_bits + 1, 1 + labelled), np.int32)
  if labelled:
    query_class, db_class = _classes(query_labels, db_labels)
  else:
    query_class, db_class = np.zeros(num_q, np.int32), np.zeros(n, np.int32)
  slot, word_class = _layout(db_class)
  num_words = len(word_class)
  blocks = -(-num_words // _BLOCK_WORDS)
  block = _block_size(-(-num_words // blocks))
  # The layout in equal blocks, zero codes in the free slots, which the occupied-slot planes leave out.
  placed = np.zeros((_ITEMS * block * blocks, db_words.shape[1]), np.uint32)
  placed[slot] = db_words
  occupied = np.zeros(len(placed), bool)
  occupied[slot] = True
  occupied = np.packbits(occupied, bitorder="little").view("<u8")
  word_class = np.concatenate([word_class, np.full(block * blocks - num_words, -1, np.int32)])
  chunk = min(_QUERY_CHUNK, num_q)
  pad = -num_q % chunk  # zero queries of no class fill the last chunk and are cut off again
  masks = np.concatenate([_query_masks(query_words, num_bits), np.zeros((pad, _num_planes(num_bits)), np.uint64)])
  query_class = np.concatenate([query_class, np.full(pad, -1, np.int32)])
  sums = []
  with jax.enable_x64(True):
    all_planes = _all_planes(placed, _num_planes(num_bits))
    for w0 in range(0, block * blocks, block):
      planes = jax.device_put(all_planes[:, w0:w0 + block])
      sums.append([_block_counts(masks[c:c + chunk], planes, occupied[w0:w0 + block],
                                 word_class[w0:w0 + block], query_class[c:c + chunk], num_bits=num_bits,
                                 labelled=labelled)
                   for c in range(0, len(masks), chunk)])
    # Gathered once every block and chunk is dispatched.
    total = sum(np.concatenate([np.stack(chunk_sums, -1) for chunk_sums in part]) for part in jax.device_get(sums))
  total = total.reshape(len(masks), -1)[:num_q, :num_bits + 1]  # distance L h + l at L h + l
  if not labelled:
    return total.astype(np.int32)[..., None]
  everything = (total & np.uint64(0xFFFFFFFF)).astype(np.int64)
  relevant = (total >> np.uint64(32)).astype(np.int64)
  return np.stack([everything - relevant, relevant], -1).astype(np.int32)


def _classes(query_labels, db_labels):
  """``(query_class int32[Q], db_class int32[N])``: indices into the queries' sorted labels, -1 for none."""
  classes, query_class = np.unique(np.asarray(query_labels), return_inverse=True)
  db_labels = np.asarray(db_labels)
  pos = np.minimum(np.searchsorted(classes, db_labels), len(classes) - 1)
  db_class = np.where(classes[pos] == db_labels, pos, -1)
  return query_class.reshape(-1).astype(np.int32), db_class.astype(np.int32)


def _layout(db_class: np.ndarray):
  """``(slot int[N], word_class int32[M])``: item ``i``'s slot among ``64 M``, and the class of each word.

  The items of each class (-1: of no query class) fill consecutive words in their order, the class's last
  word partly. Without classes (all 0) the slots are ``0 .. N - 1``.

  >>> slot, word_class = _layout(np.array([1, 0, 1, -1]))
  >>> slot.tolist(), word_class.tolist()
  ([64, 0, 65, 128], [0, 1, -1])
  """
  keys = np.where(db_class < 0, db_class.max(initial=-1) + 1, db_class)  # "no class" last
  sizes = np.bincount(keys)
  words = -(-sizes // _ITEMS)  # per class
  first = _ITEMS * (np.cumsum(words) - words) - (np.cumsum(sizes) - sizes)  # slot minus rank, per class
  order = np.argsort(keys.astype(np.min_scalar_type(len(sizes))), kind="stable")  # a radix sort for small keys
  slot = np.empty(len(keys), np.int64)
  slot[order] = np.repeat(first, sizes) + np.arange(len(keys))
  class_of_key = np.where(np.arange(len(sizes)) > db_class.max(initial=-1), -1, np.arange(len(sizes)))
  return slot, np.repeat(class_of_key, words).astype(np.int32)


def _block_size(words: int) -> int:
  """Plane words per block: ``words``, off a multiple of 256.

  Planes a multiple of 2 KB apart map to the same cache sets, and stage 1 reads 16 planes at once.
  """
  return words + 1 if words % 256 == 0 else words


def _group_shape(num_bits: int):
  """``(groups, planes per group)``: a power of two (at least 2) of balanced groups of at most 16 planes.

  >>> _group_shape(32), _group_shape(48), _group_shape(128)
  ((2, 16), (4, 12), (8, 16))
  """
  groups = max(2, 1 << (-(-num_bits // _GROUP_PLANES) - 1).bit_length())
  return groups, -(-num_bits // groups)


def _num_planes(num_bits: int) -> int:
  """``P``: the planes of :func:`_group_shape` (at least ``num_bits``, at most ``32 W``); those past ``num_bits``
  are zero."""
  groups, per_group = _group_shape(num_bits)
  return groups * per_group


def _query_masks(query_words: np.ndarray, num_bits: int) -> np.ndarray:
  """``uint64[Q, P]``: each query bit as a word of zeros or of ones, zero past ``num_bits``."""
  bits = np.unpackbits(np.ascontiguousarray(query_words, "<u4").view(np.uint8), axis=1, bitorder="little")
  masks = np.zeros((len(bits), _num_planes(num_bits)), np.uint64)
  masks[:, :num_bits] = bits[:, :num_bits]
  return np.negative(masks)  # 0 or 2^64 - 1


@functools.partial(jax.jit, static_argnames="num_planes")
def _planes(db_words, *, num_planes: int):
  """``uint64[P, M]`` bit planes of ``db_words`` (``uint32[64 M, W]``): bit ``j`` of item ``64 m + k`` at bit
  ``k`` of word ``m`` of plane ``j``.

  The items of a few words at a time (their bits in the cache) are unpacked and packed again.
  """
  num_words = db_words.shape[0] // _ITEMS
  step = _UNPACK_STEP  # doubled while it divides num_words and stays within _UNPACK_WORDS / P
  while num_words % (2 * step) == 0 and 2 * step * num_planes <= _UNPACK_WORDS:
    step *= 2
  j = np.arange(num_planes)

  def planes_of(words):  # [64 step, W] -> [P, step]
    bits = (words[:, j // 32] >> jnp.asarray(j % 32, jnp.uint32)) & jnp.uint32(1)
    bits = bits.T.reshape(num_planes, step, _ITEMS).astype(jnp.uint64)
    return jnp.sum(bits << jnp.arange(_ITEMS, dtype=jnp.uint64), axis=-1, dtype=jnp.uint64)

  out = jax.lax.map(planes_of, db_words.reshape(num_words // step, _ITEMS * step, db_words.shape[1]))
  return out.transpose(1, 0, 2).reshape(num_planes, num_words)


# The adders call lax's primitives directly (arrays of one shape: nothing to broadcast or promote): the kernel
# holds hundreds of them, and each jax.numpy operator adds tracing work.
_xor, _and, _or, _not = jax.lax.bitwise_xor, jax.lax.bitwise_and, jax.lax.bitwise_or, jax.lax.bitwise_not


def _all_planes(placed: np.ndarray, num_planes: int) -> np.ndarray:
  """``uint64[P, M]`` on the host: :func:`_planes` of ``placed`` (``uint32[64 M, W]``) in blocks of
  :data:`_PLANE_BLOCK_WORDS` words, the last one shifted back to end at word ``M`` (a database of fewer words
  is padded to one block)."""
  num_words, block = len(placed) // _ITEMS, _PLANE_BLOCK_WORDS
  if num_words < block:
    placed = np.pad(placed, ((0, _ITEMS * (block - num_words)), (0, 0)))
  total = max(num_words, block)
  out = np.empty((num_planes, total), np.uint64)
  for end in range(block, total + block, block):
    end = min(end, total)
    out[:, end - block:end] = np.asarray(_planes(placed[_ITEMS * (end - block):_ITEMS * end], num_planes=num_planes))
  return out[:, :num_words]


def _carry_save_sum(planes: list) -> list:
  """Bit-sliced sum of 1-bit planes by full and half adders: the planes of the sum, least significant first."""
  columns = [list(planes)]  # columns[w]: planes of weight 2^w still to add
  w = 0
  while w < len(columns):
    col = columns[w]
    while len(col) > 1:
      if len(col) >= 3:  # full adder
        a, b, c = col.pop(), col.pop(), col.pop()
        t = _xor(a, b)
        col.insert(0, _xor(t, c))
        carry = _or(_and(a, b), _and(t, c))
      else:  # half adder
        a, b = col.pop(), col.pop()
        col.insert(0, _xor(a, b))
        carry = _and(a, b)
      if w + 1 == len(columns):
        columns.append([])
      columns[w + 1].append(carry)
    w += 1
  return [col[0] for col in columns]


def _ripple_add(a: list, b: list) -> list:
  """Bit-sliced sum of two numbers of ``len(a) == len(b)`` planes (least significant first), modulo
  ``2^len(a)``."""
  out, carry = [], None
  for x, y in zip(a, b):
    t = _xor(x, y)
    out.append(t if carry is None else _xor(t, carry))
    carry = _and(x, y) if carry is None else _or(_and(x, y), _and(t, carry))
  return out


def _value_masks(planes: list, count: int) -> list:
  """``masks[v]``: the items whose bit-sliced value (``planes``, least significant first) is ``v``, ``v < count``.

  A decoding tree: each mask is one AND of a shared partial mask.
  """
  masks = {0: None}
  for j, p in enumerate(planes):
    grown, off = {}, _not(p)
    for v, m in masks.items():
      grown[v] = off if m is None else _and(m, off)
      if v | (1 << j) < count:
        grown[v | (1 << j)] = p if m is None else _and(m, p)
    masks = grown
  return [masks[v] for v in range(count)]


@functools.partial(jax.jit, static_argnames=("num_bits", "labelled"))
def _block_counts(query_masks, planes, occupied, word_class, query_class, *, num_bits: int, labelled: bool):
  """``L`` sums ``uint64[C, H]``: the counts of ``C`` queries against one block of ``M`` plane words.

  ``query_masks`` is ``uint64[C, P]`` (:func:`_query_masks`), ``planes`` ``uint64[P, M]`` (:func:`_planes`),
  ``occupied`` ``uint64[M]`` the slots holding items; with ``labelled``, ``word_class`` ``int32[M]`` and
  ``query_class`` ``int32[C]`` name the classes. Sum ``l`` holds at ``[q, h]`` the count at distance
  ``L h + l`` (``L = 8``, fewer below 4 bits), the relevant ones in its high 32 bits when ``labelled``.

  Each stage ends in a reduction (``lax.reduce`` over pairs of groups, then along the words, all cells in one
  variadic reduction), so XLA computes the adders once, in registers, and materialises only the distance
  planes between stages.
  """
  c, words = query_masks.shape[0], planes.shape[1]
  width = num_bits.bit_length()  # planes of a distance
  groups, per_group = _group_shape(num_bits)
  zero = jnp.zeros((), planes.dtype)

  def add_pairs(parts):  # [C, n, 2, (1,) M] planes -> [C, n, (1,) M], one more plane (up to width)
    parts = parts + [jnp.zeros_like(parts[0])] * (min(len(parts) + 1, width) - len(parts))
    return list(jax.lax.reduce(parts, [zero] * len(parts), _ripple_add, (2,)))

  # 1. Carry-save adders per group, and the first pairwise sum: planes of [C, groups / 2, 1, M].
  #    Plane j of every group, XORed with the queries' bit j, as [C, groups / 2, 2, 1, M] (one split of each).
  grouped = planes.reshape(groups // 2, 2, per_group, words)
  qmask = query_masks.reshape(c, groups // 2, 2, per_group)
  shape = (c, groups // 2, 2, 1, words)
  differ = [_xor(jax.lax.broadcast_in_dim(g, shape, (1, 2, 3, 4)), jax.lax.broadcast_in_dim(m, shape, (0, 1, 2, 3)))
            for g, m in zip(jax.lax.split(grouped, [1] * per_group, 2), jax.lax.split(qmask, [1] * per_group, 3))]
  dist = add_pairs(_carry_save_sum(differ))
  # 2. Pairwise sums of the groups.
  while groups > 2:
    groups //= 2
    dist = add_pairs([p.reshape(c, groups // 2, 2, words) for p in dist])
  # 3. Decoding: rows[C, H, M] mask each high value's items, ANDed with the masks of the low values.
  low = min(_LOW_PLANES, width)
  num_high = -(-(num_bits + 1) // (1 << low))
  shape = (c, num_high, words)
  dist = [jax.lax.broadcast_in_dim(p.reshape(c, words), shape, (0, 2)) for p in dist]
  dist += [jnp.zeros(shape, planes.dtype)] * (width - len(dist))
  rows = jax.lax.broadcast_in_dim(occupied, shape, (2,))
  for k in range(width - low):  # plane low + k, flipped where bit k of the high value is 0
    flip = np.where((np.arange(num_high) >> k) & 1, np.uint64(0), ~np.uint64(0))
    rows = _and(rows, _xor(dist[low + k], jax.lax.broadcast_in_dim(flip, shape, (1,))))
  cells = [jax.lax.population_count(_and(rows, m)) for m in _value_masks(dist[:low], 1 << low)]
  if labelled:  # the counts in the words of the query's class, again in the high half (a shift by 64 gives 0)
    mine = jax.lax.broadcast_in_dim(word_class[None, :] == query_class[:, None], shape, (0, 2))
    shift = jax.lax.select(mine, jnp.full(shape, 32, planes.dtype), jnp.full(shape, 64, planes.dtype))
    cells = [_or(n, jax.lax.shift_left(n, shift)) for n in cells]
  return tuple(jax.lax.reduce(cells, [zero] * len(cells), lambda a, b: list(map(jax.lax.add, a, b)), (2,)))
