r"""Databases and training batches laid out over several devices with :mod:`jax.sharding`.

A database of packed codes is split by rows over the devices of a :class:`jax.sharding.Mesh`
(:func:`shard_rows`, a :class:`~jax.sharding.NamedSharding` whose spec splits axis 0); each device searches
or counts its own rows with the single-device code, inside :func:`jax.shard_map`, and the shards' answers
meet by a collective:

* :func:`knn`: each shard's top ``k`` by (distance, index), its indices shifted to global ones,
  ``all_gather``-ed and merged by one two-key sort: exactly :func:`hashjax.search.knn`'s answer (the global
  top ``k`` lies within the union of the shards' top ``k``, and global indices are distinct), with Hamming
  or weighted Hamming distances (``weights=``);
* :func:`multi_index_knn`: the same merge over processes that each hold a multi-index of their own rows
  (:func:`hashjax.index.build_multi_index`), gathered by :func:`jax.experimental.multihost_utils.process_allgather`;
* :func:`radius_search`: the shards' histograms give each shard's largest count within the radius ``K``;
  each shard's top ``K`` then holds all its items within the radius, merged and cut at the radius:
  :func:`hashjax.search.radius_search`'s answer, at the cost of a histogram scan plus a k-NN with ``k = K``;
* :func:`hamming_histogram`: the shards' histograms summed by ``psum``, the counts of
  :func:`hashjax.histograms.hamming_histogram` (:func:`hashjax.evaluate.evaluate_codes` takes this path for a
  database split over several devices, so its metrics are the single-device ones).

A row count that the number of shards does not divide is refused (``ValueError``), or padded with copies of
the last row by ``shard_rows(..., pad=True)``; the searches then take ``num_db``, the number of real rows, and
never return, count or rank a padding row. Queries are copied to every device. The searches that need the
whole database in one host's memory (:func:`hashjax.search.knn_with_ties` and ``knn_tie_break``, multi-index
hashing) take a row-split array only when one process holds every row; across processes they refuse it
(``ValueError`` naming ``db_words``): use the functions here.

Training (:func:`hashjax.train.train` with ``mesh=``) is data-parallel: :func:`replicate` copies the parameters
and optimizer state to every device, :func:`shard_batch` splits the batch along its leading axis, and the one
jitted step computes the loss of the whole batch, its gradient summed across devices by XLA: the numbers of
one device, up to the order of float sums.

Several processes (hosts) are one program run by each of them: :func:`initialize_processes` joins them through
:func:`jax.distributed.initialize` before any computation, :func:`data_mesh` then spans every process's devices,
each process loads only the rows :func:`process_rows` names, and :func:`shard_process_rows` assembles the blocks
into one row-split array, searched and counted as above. Results come back replicated on every process.
"""

from __future__ import annotations

import functools
import math
import os
from typing import Any, Optional, Sequence, Tuple, Union

import jax
from jax import lax
from jax.experimental import multihost_utils
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import numpy as np

from hashjax import _checks
from hashjax import histograms
from hashjax import search
from hashjax.index import multi

Array = jax.Array

__all__ = ["initialize_processes", "data_mesh", "shard_rows", "process_rows", "shard_process_rows", "replicate",
           "shard_batch", "is_row_sharded", "knn", "multi_index_knn", "radius_search", "hamming_histogram"]

# ----------------------------------------------------------------------------
# Processes.

#: The environment variables :func:`initialize_processes` reads for the settings it is not given
#: (``JAX_COORDINATOR_ADDRESS`` is read by :func:`jax.distributed.initialize` itself).
PROCESS_ENV = ("JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "JAX_COORDINATOR_ADDRESS")


def _env_int(name: str, variable: str) -> Optional[int]:
  text = os.environ.get(variable)
  if text is None or not text.strip():
    return None
  try:
    return int(text)
  except ValueError:
    raise ValueError(f"{name}: expected an int in the environment variable {variable}, got {text!r}") from None


def initialize_processes(*, coordinator_address: Optional[str] = None, num_processes: Optional[int] = None,
                         process_id: Optional[int] = None) -> int:
  r"""Joins this process to a run of ``P`` processes (:func:`jax.distributed.initialize`); returns ``P``.

  Every process runs the same program and calls this first, before any jax computation; afterwards
  :func:`data_mesh` spans the devices of every process (``jax.devices()``), and each process lays out its own
  rows with :func:`process_rows` and :func:`shard_process_rows`. On the CPU backend, the collectives between
  processes are gloo's (``jax_cpu_collectives_implementation``, set to ``"gloo"`` only when it names none).

  .. math:: \mathrm{devices} = \textstyle\bigcup_{p < P} \mathrm{local\_devices}(p)

  Args:
    coordinator_address: ``"host:port"`` of process 0, where the others meet it; None: the variable
      ``JAX_COORDINATOR_ADDRESS``, read by jax.
    num_processes: ``P >= 1``; None: the variable ``JAX_NUM_PROCESSES``, else 1. One process starts nothing.
    process_id: this process's number, ``0 <= p < P``; None: the variable ``JAX_PROCESS_ID`` (else jax's own
      detection of a cluster, e.g. Slurm's).

  Returns:
    ``P``, the number of processes.

  >>> initialize_processes(num_processes=1)  # a single process: nothing to join
  1
  """
  if num_processes is None:
    num_processes = _env_int("num_processes", "JAX_NUM_PROCESSES")
  num_processes = _checks.check_int("num_processes", 1 if num_processes is None else num_processes, low=1)
  if process_id is None:
    process_id = _env_int("process_id", "JAX_PROCESS_ID")
  last = num_processes - 1
  if process_id is not None:
    _checks.check_int_at_most("process_id", process_id, last, low=0, what=f"num_processes - 1 = {last}")
  if coordinator_address is not None:
    host, _, port = coordinator_address.rpartition(":") if isinstance(coordinator_address, str) else ("", "", "")
    if not host or not port.isdigit():
      raise ValueError(f"coordinator_address: expected 'host:port' of process 0, got {coordinator_address!r}")
  if num_processes == 1:
    return 1
  if jax.config.jax_cpu_collectives_implementation is None:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(coordinator_address=coordinator_address, num_processes=num_processes,
                             process_id=None if process_id is None else int(process_id))
  return num_processes


# ----------------------------------------------------------------------------
# Layout.


def data_mesh(num_devices: Optional[int] = None, *, axis_name: str = "data") -> Mesh:
  r"""A one-axis mesh over the first ``num_devices`` devices (all by default), for data-parallel layouts.

  .. math:: \mathrm{mesh} = (d_0, \dots, d_{n-1}) \text{ along axis } \texttt{axis\_name}

  Args:
    num_devices: ``1 <= n <= jax.device_count()``, or None for every device.
    axis_name: the mesh axis' name.

  Returns:
    a :class:`jax.sharding.Mesh` of shape ``(n,)``.

  >>> mesh = data_mesh(1)
  >>> dict(mesh.shape)
  {'data': 1}
  """
  available = jax.device_count()
  if num_devices is None:
    num_devices = available
  n = _checks.check_int_at_most("num_devices", num_devices, available, what=f"the {available} device(s) jax sees")
  _checks.check_nonempty_str("axis_name", axis_name, what="a non-empty str")
  return Mesh(np.asarray(jax.devices()[:n]), (axis_name,))


def _check_mesh(mesh: Any) -> Mesh:
  return _checks.check_type("mesh", mesh, Mesh, what="a jax.sharding.Mesh (e.g. hashjax.sharding.data_mesh())")


def _check_split(name: str, x: Any, mesh: Any, pad: Any, num_rows: Optional[int] = None) -> Tuple[Mesh, int]:
  """The arguments of :func:`shard_rows` (``num_rows`` None: ``x`` holds every row, at least one) and of
  :func:`shard_process_rows` (``x`` holds this process's rows of ``num_rows``, checked): ``x`` (named ``name``) a
  concrete array ``[rows, ...]``, ``mesh``, ``pad``, and the rows divisible by the mesh's devices unless ``pad``.
  Returns the mesh and the number of padding rows."""
  if not hasattr(x, "shape") or len(x.shape) < 1 or (num_rows is None and x.shape[0] == 0):
    raise ValueError(f"{name}: expected an array [rows, ...]{' with at least one row' if num_rows is None else ''}, "
                     f"got {_checks.desc(x)}")
  _checks.check_concrete(name, x, why="its rows are placed on devices")
  mesh = _check_mesh(mesh)
  _checks.check_bool("pad", pad)
  rows_name, rows = (name, x.shape[0]) if num_rows is None else ("num_rows", num_rows)
  extra = -rows % mesh.size
  if extra and not pad:
    raise ValueError(f"{rows_name}: expected a number of rows divisible by the mesh's {mesh.size} devices, got {rows} "
                     f"rows (pad=True appends {extra} padding rows; pass num_db={rows} to the searches)")
  return mesh, extra


def shard_rows(x: Any, mesh: Mesh, *, name: str = "x", pad: bool = False) -> Array:
  r"""``x[N, ...]`` split by rows over every device of ``mesh`` (``NamedSharding(mesh, P(mesh.axis_names))``).

  .. math:: \text{shard } s = x[s N' / S : (s + 1) N' / S], \quad N' = S \lceil N / S \rceil

  Args:
    x: an array with at least one axis, e.g. ``db_words uint32[N, W]``.
    mesh: the device mesh; its ``S`` devices each hold ``N' / S`` consecutive rows.
    name: the argument's name in error messages.
    pad: when ``S`` does not divide ``N``: False refuses (``ValueError``), True appends copies of the last row
      up to ``N' = S ceil(N / S)`` rows (pass ``num_db=N`` to :func:`knn`, :func:`radius_search` and
      :func:`hamming_histogram`, which then ignore them).

  Returns:
    a ``jax.Array [N', ...]`` laid out over ``mesh``.

  >>> import numpy as np
  >>> x = shard_rows(np.arange(6, dtype=np.uint32).reshape(3, 2), data_mesh(1))
  >>> x.shape, x.sharding.spec
  ((3, 2), P('data',))
  """
  mesh, extra = _check_split(name, x, mesh, pad)
  if extra:
    x = np.asarray(x)
    x = np.concatenate([x, np.broadcast_to(x[-1:], (extra,) + x.shape[1:])])
  return jax.device_put(x, NamedSharding(mesh, P(tuple(mesh.axis_names))))


def _process_block(rows: int, mesh: Mesh) -> slice:
  """The rows ``[start, stop)`` of a ``[rows, ...]`` array split by :func:`shard_rows` that this process's devices
  hold (``S`` divides ``rows``); ValueError unless they are consecutive."""
  split = NamedSharding(mesh, P(tuple(mesh.axis_names)))
  blocks = sorted((index[0].start or 0, rows if index[0].stop is None else index[0].stop)
                  for index in split.addressable_devices_indices_map((rows,)).values())
  if not blocks or any(b[0] != a[1] for a, b in zip(blocks, blocks[1:])):
    raise ValueError(f"mesh: expected process {jax.process_index()}'s devices to hold consecutive rows (data_mesh()), "
                     f"got rows {blocks} on the mesh's devices {[d.id for d in mesh.devices.flat]}")
  return slice(blocks[0][0], blocks[-1][1])


def process_rows(num_rows: int, mesh: Mesh) -> slice:
  r"""The rows of a ``[N, ...]`` database that this process holds when it is split by rows over ``mesh``.

  The rows of the process's devices' shards, as :func:`shard_rows` splits them (``N' = S \lceil N / S \rceil``
  rows, the ones past ``N`` padding), cut at ``N``: consecutive, and together over the processes every row once.
  In a single process, every row.

  .. math:: \mathrm{rows}(p) = [\min(a_p, N), \min(b_p, N)), \quad
     [a_p, b_p) = \textstyle\bigcup_{s \in \mathrm{devices}(p)} [s N' / S, (s + 1) N' / S)

  Args:
    num_rows: ``N >= 1``, the database's number of rows (over every process).
    mesh: the device mesh, ``S`` devices; this process's devices must be next to each other along it, as in
      :func:`data_mesh`.

  Returns:
    a ``slice`` (``start`` and ``stop`` ints): the rows to load, and to pass to :func:`shard_process_rows`.

  >>> process_rows(10, data_mesh(1))
  slice(0, 10, None)
  """
  mesh = _check_mesh(mesh)
  num_rows = _checks.check_int("num_rows", num_rows)
  return _real_rows(_process_block(mesh.size * -(-num_rows // mesh.size), mesh), num_rows)


def _real_rows(block: slice, num_rows: int) -> slice:
  """The rows of ``block`` (this process's, of the padded array) before ``num_rows`` (the real ones)."""
  return slice(min(block.start, num_rows), min(block.stop, num_rows))


def shard_process_rows(local_rows: Any, mesh: Mesh, *, num_rows: int, pad: bool = False,
                       name: str = "local_rows") -> Array:
  r"""One ``[N', ...]`` array split by rows over ``mesh`` from each process's own rows (``x[process_rows(N, mesh)]``).

  Every process calls it with its rows; none holds the whole database. In a single process it is
  :func:`shard_rows`. Built by :func:`jax.make_array_from_process_local_data`.

  .. math:: x = \mathrm{concat}_{p < P}\; x[\mathrm{rows}(p)] \text{ laid out as } \texttt{shard\_rows}(x)

  Args:
    local_rows: ``[n_p, ...]``, the rows :func:`process_rows` names for this process, in order.
    mesh: the device mesh over every process's devices (:func:`data_mesh`), ``S`` devices.
    num_rows: ``N``, the rows over every process.
    pad: when ``S`` does not divide ``N``: False refuses (``ValueError``); True pads to ``N' = S ceil(N / S)``
      rows, as :func:`shard_rows` does (the padding rows copy the process's last row, or are zero in a process
      with no real row; pass ``num_db=N`` to the searches, which ignore them whatever they hold).
    name: the argument's name in error messages.

  Returns:
    a ``jax.Array [N', ...]`` laid out over ``mesh`` like ``shard_rows(x, mesh, pad=pad)``.

  >>> import numpy as np
  >>> x = np.arange(6, dtype=np.uint32).reshape(3, 2)
  >>> mesh = data_mesh(1)
  >>> shard_process_rows(x[process_rows(3, mesh)], mesh, num_rows=3).sharding.spec
  P('data',)
  """
  num_rows = _checks.check_int("num_rows", num_rows)
  mesh, extra = _check_split(name, local_rows, mesh, pad, num_rows)
  block = _process_block(num_rows + extra, mesh)
  rows = _real_rows(block, num_rows)
  want = rows.stop - rows.start
  if local_rows.shape[0] != want:
    raise ValueError(f"{name}: expected this process's {want} rows {rows.start}:{rows.stop} of {num_rows} "
                     f"(process_rows({num_rows}, mesh)), got {local_rows.shape[0]} rows")
  local = np.asarray(local_rows)
  fill = block.stop - block.start - want
  if fill:
    last = local[-1:] if want else np.zeros((1,) + local.shape[1:], local.dtype)
    local = np.concatenate([local, np.broadcast_to(last, (fill,) + local.shape[1:])])
  return jax.make_array_from_process_local_data(NamedSharding(mesh, P(tuple(mesh.axis_names))), local,
                                                (num_rows + extra,) + local.shape[1:])


def replicate(tree: Any, mesh: Mesh) -> Any:
  r"""Every array leaf of ``tree`` copied to every device of ``mesh`` (``NamedSharding(mesh, P())``).

  .. math:: x \mapsto (x, x, \dots, x) \text{ on } d_0, \dots, d_{S-1}

  >>> import numpy as np
  >>> replicate({"w": np.ones(2)}, data_mesh(1))["w"].sharding.spec
  P()
  """
  sharding = NamedSharding(_check_mesh(mesh), P())
  return jax.tree.map(lambda leaf: jax.device_put(leaf, sharding), tree)


def shard_batch(batch: Any, mesh: Mesh, *, replicated: Sequence[str] = ()) -> Any:
  r"""A training batch laid out for data parallelism: leaves split along their leading axis over ``mesh``.

  .. math:: \mathrm{batch}[B, \dots] \mapsto S \text{ shards of } B / S \text{ rows}

  Args:
    batch: a pytree of arrays, each with a leading batch axis (a dict for ``replicated``).
    mesh: the device mesh, ``S`` devices.
    replicated: top-level keys of a dict ``batch`` whose leaves are copied to every device instead (e.g. a
      pool of items that the loss indexes into).

  Returns:
    the batch with every leaf a ``jax.Array`` on ``mesh``.

  Raises:
    ValueError: naming the leaf, when ``S`` does not divide its leading axis (a padded batch would change the
      loss, so it is not padded), or when a ``replicated`` key is not in the batch.

  >>> import numpy as np
  >>> out = shard_batch({"x": np.ones((4, 2)), "pool": np.ones(3)}, data_mesh(1), replicated=("pool",))
  >>> out["x"].sharding.spec, out["pool"].sharding.spec
  (P('data',), P())
  """
  mesh = _check_mesh(mesh)
  keys = list(batch) if isinstance(batch, dict) else []
  if isinstance(replicated, str) or not all(isinstance(k, str) and k in keys for k in replicated):
    raise ValueError(f"replicated: expected a sequence of keys (str) of a dict batch, got {replicated!r} for a batch "
                     f"of {f'keys {keys}' if isinstance(batch, dict) else type(batch).__name__}")
  split = NamedSharding(mesh, P(tuple(mesh.axis_names)))

  def place(path, leaf):
    where = f"batch{jax.tree_util.keystr(path)}"
    rows = leaf.shape[0] if hasattr(leaf, "shape") and len(leaf.shape) else None
    if rows is None or rows % mesh.size:
      raise ValueError(f"{where}: expected a leading axis divisible by the mesh's {mesh.size} devices (or its key in "
                       f"replicated=), got {f'{rows} rows' if rows is not None else _checks.desc(leaf)}")
    return jax.device_put(leaf, split)

  if not replicated:
    return jax.tree_util.tree_map_with_path(place, batch)
  return {k: replicate(v, mesh) if k in replicated else jax.tree_util.tree_map_with_path(
      lambda path, leaf, k=k: place((jax.tree_util.DictKey(k),) + path, leaf), v) for k, v in batch.items()}


def _row_layout(x: Any):
  """``(mesh, axes, S)`` of a concrete ``jax.Array`` whose ``NamedSharding`` splits its rows only, over the mesh
  ``axes`` (``S`` shards; ``axes`` empty: one copy, ``S = 1``); None for any other value."""
  sharding = getattr(x, "sharding", None) if _checks.is_concrete(x) else None
  if not isinstance(sharding, NamedSharding):
    return None
  spec = tuple(sharding.spec) + (None,) * (x.ndim - len(sharding.spec))
  if any(s is not None for s in spec[1:]):
    return None
  first = spec[0]
  axes = () if first is None else (first,) if isinstance(first, str) else tuple(first)
  return sharding.mesh, axes, math.prod(sharding.mesh.shape[a] for a in axes)


def is_row_sharded(x: Any) -> bool:
  r"""Whether ``x`` is a concrete ``jax.Array`` whose rows a ``NamedSharding`` splits over several devices.

  .. math:: S > 1

  >>> import numpy as np
  >>> is_row_sharded(np.zeros((4, 1))), is_row_sharded(shard_rows(np.zeros((4, 1)), data_mesh(1)))
  (False, False)
  """
  layout = _row_layout(x)
  return layout is not None and layout[2] > 1


def _check_search(query_words: Any, db_words: Any, num_db: Any, num_bits: Any = None):
  """The arguments every search and count here takes: the codes as :func:`hashjax._checks.check_word_pair` (of a
  ``db_words`` split over several processes, this process's shards; the others check theirs), ``db_words`` split
  by rows only, and ``num_db`` (None: every row) in ``[1, N]``. Returns ``(num_bits, mesh, axes, S, num_db)``."""
  split = isinstance(db_words, jax.Array) and _checks.is_concrete(db_words) and not db_words.is_fully_addressable
  for block in [shard.data for shard in db_words.addressable_shards] if split else [db_words]:
    checked = _checks.check_word_pair(query_words, block, num_bits)
  layout = _row_layout(db_words)
  if layout is None:
    raise ValueError("db_words: expected a jax.Array laid out with a NamedSharding that splits its rows only "
                     f"(shard_rows), got {_checks.desc(db_words)} with sharding {getattr(db_words, 'sharding', None)}")
  rows = db_words.shape[0]
  if num_db is not None:
    num_db = _checks.check_int_at_most("num_db", num_db, rows, what=f"len(db_words) = {rows} (real rows; the rest pad)")
  return (checked, *layout, rows if num_db is None else num_db)


def _place_queries(query_words, mesh: Mesh):
  """``query_words`` (or any array every device needs) copied to every device of ``mesh``."""
  return jax.device_put(np.asarray(query_words) if not isinstance(query_words, jax.Array) else query_words,
                        NamedSharding(mesh, P()))


# ----------------------------------------------------------------------------
# Search.


@functools.lru_cache(maxsize=64)
def _topk_program(mesh: Mesh, axes: tuple, rows: int, k_local: int, keep: int, num_db: int, weighted: bool):
  """The jitted shard_map: each shard's top ``k_local`` (global indices, padding rows masked), all-gathered
  and merged by (distance, index); the first ``keep`` columns, replicated. ``weighted``: a third argument,
  the weights (replicated)."""
  spec = P(axes if axes else None)

  def local(q, db, *weights):
    d, i = search.knn(q, db, k_local, weights=weights[0] if weighted else None)
    shard = lax.axis_index(axes) if axes else 0
    i = i + shard * rows
    if num_db < rows * max(1, math.prod(mesh.shape[a] for a in axes)):
      pad = i >= num_db
      sentinel = jnp.inf if weighted else 32 * q.shape[1] + 1  # beyond every real distance
      d, i = jnp.where(pad, sentinel, d), jnp.where(pad, _checks.INT32_MAX, i)
    if axes:
      d, i = (lax.all_gather(a, axes, axis=1, tiled=True) for a in (d, i))
    d, i = lax.sort((d, i), dimension=1, num_keys=2)
    return d[:, :keep], i[:, :keep]

  # The merged lists are equal on every shard (all_gather, then the same sort); the replication check cannot
  # see through the k-NN kernels, so it is off.
  in_specs = (P(), spec, P()) if weighted else (P(), spec)
  return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=in_specs, out_specs=(P(), P()), check_vma=False))


def knn(query_words: Array, db_words: Array, k: int, *, num_db: Optional[int] = None,
        weights: Optional[Array] = None):
  r"""Exact k nearest neighbours over a database split by rows over devices, by (distance, index).

  Each shard finds its own top ``k`` with :func:`hashjax.search.knn` where its rows live; the shards' lists,
  their indices made global, are gathered and merged by (distance, index). The answer is exactly
  ``search.knn(query_words, db_words[:num_db], k, weights=weights)``'s.

  .. math:: \mathrm{knn}_k(q) = \text{first } k \text{ of } \textstyle\bigcup_s \mathrm{knn}_k^{(s)}(q)
     \text{ by } (d(q, i), i)

  Args:
    query_words: ``uint32[Q, W]`` packed query codes (copied to every device).
    db_words: ``uint32[N, W]`` packed codes laid out by :func:`shard_rows` (any ``NamedSharding`` that splits
      rows only).
    k: ``1 <= k <= num_db`` neighbours per query.
    num_db: the number of real rows (``shard_rows(..., pad=True)``); rows from ``num_db`` on are ignored.
      None: every row.
    weights: None (Hamming distance), or ``float[num_bits]`` non-negative finite weights, one per bit, as
      for :func:`hashjax.search.knn` (copied to every device).

  Returns:
    ``(distances int32[Q, k], indices int32[Q, k])`` (``float32`` distances with ``weights``), sorted per row
    by (distance, index), replicated.

  >>> import numpy as np
  >>> from hashjax.codes import pack_bits
  >>> x = shard_rows(pack_bits(np.array([[1, 1, 0], [0, 0, 0], [1, 0, 0]])), data_mesh(1))
  >>> d, i = knn(pack_bits(np.array([[1, 0, 0]])), x, 2)
  >>> d.tolist(), i.tolist()
  ([[0, 1]], [[2, 0]])
  """
  _, mesh, axes, shards, num_db = _check_search(query_words, db_words, num_db)
  if weights is not None:
    _checks.check_weights(weights, db_words.shape[1])
  k = _checks.check_k(k, num_db, db_name="db_words[:num_db]")
  rows = db_words.shape[0] // shards
  k_local = min(k + db_words.shape[0] - num_db, rows)  # each shard keeps k real items past its padding
  program = _topk_program(mesh, axes, rows, k_local, k, num_db, weights is not None)
  w = () if weights is None else (_place_queries(np.asarray(weights, np.float32), mesh),)
  return program(_place_queries(query_words, mesh), db_words, *w)


def multi_index_knn(index: multi.MultiIndex, query_words: Array, k: int, *, first_row: int, method: str = "auto"):
  r"""Exact k nearest neighbours over a database split by rows over processes, each with a multi-index of its rows.

  Every process builds :func:`hashjax.index.build_multi_index` over its own block of rows (e.g. the rows
  :func:`process_rows` names) and calls this with the same queries and ``k`` and its block's first global row.
  Each searches its own index (:func:`hashjax.index.multi_index_knn`); the lists, their indices made global, are
  gathered from every process and merged by (distance, index): exactly ``search.knn(query_words, db, k)`` over
  the whole database, on every process. The blocks must not overlap; together they need at least ``k`` rows.

  .. math:: \mathrm{knn}_k(q) = \text{first } k \text{ of } \textstyle\bigcup_p \mathrm{knn}_k^{(p)}(q)
     \text{ by } (d(q, i), i)

  Args:
    index: this process's :class:`hashjax.index.MultiIndex`, over global rows ``first_row ..
      first_row + index.num_db - 1``.
    query_words: ``uint32[Q, W]`` packed query codes, the same on every process.
    k: ``1 <= k <=`` the rows of all the processes' indexes together.
    first_row: the global index of this process's first row, ``>= 0``.
    method: ``"auto"`` or ``"probe"``, as :func:`hashjax.index.multi_index_knn` takes it.

  Returns:
    ``(distances int32[Q, k], indices int32[Q, k])``, sorted per row by (distance, index), the same on every
    process.

  >>> import numpy as np
  >>> from hashjax.codes import pack_bits
  >>> from hashjax.index import build_multi_index
  >>> rows = pack_bits(np.array([[1, 1, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0]]))  # global rows 5, 6, 7
  >>> d, i = multi_index_knn(build_multi_index(rows, num_bits=4, num_tables=2),
  ...                        pack_bits(np.array([[1, 0, 0, 0]])), 2, first_row=5)
  >>> d.tolist(), i.tolist()
  ([[0, 1]], [[7, 5]])
  """
  first_row = _checks.check_int("first_row", first_row, low=0)
  _checks.check_type("index", index, multi.MultiIndex, what="a hashjax.index.MultiIndex (build_multi_index)")
  blocks = np.asarray(multihost_utils.process_allgather(np.array([first_row, index.num_db], np.int64)))
  blocks = blocks.reshape(-1, 2)
  ends = blocks[:, 0] + blocks[:, 1]
  order = np.argsort(blocks[:, 0], kind="stable")
  if np.any(blocks[order[1:], 0] < ends[order[:-1]]):
    raise ValueError(f"first_row: expected the processes' rows not to overlap, got (first row, end) "
                     f"{[(int(a), int(b)) for a, b in zip(blocks[:, 0], ends)]} for processes 0..{len(blocks) - 1}")
  k = _checks.check_k(k, int(blocks[:, 1].sum()), db_name="the indexes of every process")
  own = min(k, index.num_db)
  d, i = (np.asarray(a) for a in multi.multi_index_knn(index, query_words, own, method=method))
  sentinel_d = np.full((d.shape[0], k - own), index.num_bits + 1, np.int32)  # past every real distance
  d = np.concatenate([d, sentinel_d], axis=1)
  i = np.concatenate([i.astype(np.int64) + first_row, np.full(sentinel_d.shape, np.iinfo(np.int64).max)], axis=1)
  gathered_d, gathered_i = (np.asarray(multihost_utils.process_allgather(a)) for a in (d, i))
  gathered_d = np.moveaxis(gathered_d.reshape(-1, *d.shape), 0, 1).reshape(d.shape[0], -1)
  gathered_i = np.moveaxis(gathered_i.reshape(-1, *i.shape), 0, 1).reshape(i.shape[0], -1)
  best = np.lexsort((gathered_i, gathered_d), axis=1)[:, :k]
  return (jax.device_put(np.take_along_axis(gathered_d, best, 1).astype(np.int32)),
          jax.device_put(np.take_along_axis(gathered_i, best, 1).astype(np.int32)))


@functools.lru_cache(maxsize=64)
def _histogram_program(mesh: Mesh, axes: tuple, num_bits: int, num_levels: int, kind: str, chunk_size: int,
                       stacked: bool):
  """The jitted shard_map of per-shard histograms: summed by ``psum`` (``stacked`` False) or stacked
  ``[S, Q, num_bits + 1, V]``, replicated."""
  spec = P(axes if axes else None)
  in_specs = {"none": (P(), spec), "labels": (P(), spec, P(), spec),
              "affinity": (P(), spec, P(None, axes if axes else None))}[kind]

  def local(q, db, *levels):
    if kind == "labels":
      hist = histograms.hamming_histogram(q, db, num_bits=num_bits, query_labels=levels[0], db_labels=levels[1],
                                          chunk_size=chunk_size)
    else:
      hist = histograms.hamming_histogram(q, db, *levels, num_bits=num_bits,
                                          num_levels=num_levels if levels else None, chunk_size=chunk_size)
    if stacked:  # gathered, so that every process reads every shard's counts
      return lax.all_gather(hist, axes, axis=0, tiled=False) if axes else hist[None]
    return lax.psum(hist, axes) if axes else hist

  # The single-device kernels' loops start from unsharded zeros, which the replication check refuses; psum and
  # all_gather make the result equal on every shard.
  return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=in_specs, out_specs=P(), check_vma=False))


@functools.lru_cache(maxsize=64)
def _rows_from_program(mesh: Mesh, start: int):
  """The jitted ``x[start:]`` of a row-split array, replicated (readable on every process)."""
  return jax.jit(lambda x: x[start:], out_shardings=NamedSharding(mesh, P()))


def radius_search(query_words: Array, db_words: Array, r: Union[int, Array], *,
                  num_db: Optional[int] = None) -> search.RaggedNeighbors:
  r"""Every item within Hamming distance ``r`` of each query, over a database split by rows over devices.

  .. math:: \mathcal{R}_r(q) = \{ i < \mathrm{num\_db} : d(q, i) \le r \}, \text{ ordered by } (d(q, i), i)

  Two passes: the shards' histograms give the largest number ``K`` of one shard's items within a query's
  radius; then each shard's top ``K`` (:func:`knn`'s program) holds all of its items within the radius, and
  the merged lists are cut at the radius. The result is exactly
  ``search.radius_search(query_words, db_words[:num_db], r)``'s; memory ``O(Q S K)``. Concrete inputs only.

  Args:
    query_words: ``uint32[Q, W]`` packed query codes.
    db_words: ``uint32[N, W]`` packed codes laid out by :func:`shard_rows`.
    r: a non-negative int, or ``int[Q]`` one radius per query.
    num_db: the number of real rows, as for :func:`knn`.

  Returns:
    a :class:`hashjax.search.RaggedNeighbors` ``(distances, indices, offsets)``.

  >>> import numpy as np
  >>> from hashjax.codes import pack_bits
  >>> x = shard_rows(pack_bits(np.array([[1, 1, 0], [0, 0, 0], [1, 0, 0], [0, 1, 1]])), data_mesh(1))
  >>> res = radius_search(pack_bits(np.array([[1, 0, 0], [1, 1, 1]])), x, 1)
  >>> res.distances.tolist(), res.indices.tolist(), res.offsets.tolist()
  ([0, 1, 1, 1, 1], [2, 0, 1, 0, 3], [0, 3, 5])
  """
  _, mesh, axes, shards, num_db = _check_search(query_words, db_words, num_db)
  _checks.check_concrete("query_words", query_words)
  num_q, num_words = query_words.shape
  num_bits = 32 * num_words
  radius = np.minimum(_checks.check_radius(r, num_q), num_bits)
  q = _place_queries(query_words, mesh)
  hist = np.asarray(_histogram_program(mesh, axes, num_bits, 1, "none", histograms.DEFAULT_CHUNK_SIZE, True)(
      q, db_words))[..., 0]  # [S, Q, num_bits + 1]
  within = np.take_along_axis(np.cumsum(hist, axis=-1), radius[None, :, None], axis=-1)[..., 0]
  top = int(within.max())
  if top == 0:
    return search.RaggedNeighbors.from_arrays(np.zeros(0, np.int32), np.zeros(0, np.int32),
                                              np.zeros(num_q + 1, np.int64))
  rows = db_words.shape[0] // shards
  program = _topk_program(mesh, axes, rows, top, top * max(shards, 1), num_db, False)
  d, i = (np.asarray(a) for a in program(q, db_words))
  hit = (d <= radius[:, None]) & (i < num_db)
  offsets = np.concatenate([[0], np.cumsum(hit.sum(axis=1))])
  return search.RaggedNeighbors.from_arrays(d[hit], i[hit], offsets)


# ----------------------------------------------------------------------------
# Histograms.


def hamming_histogram(query_words: Array, db_words: Array, affinity: Optional[Array] = None, *, num_bits: int,
                      num_levels: Optional[int] = None, query_labels: Optional[Array] = None,
                      db_labels: Optional[Array] = None, num_db: Optional[int] = None,
                      chunk_size: int = histograms.DEFAULT_CHUNK_SIZE) -> Array:
  r""":func:`hashjax.histograms.hamming_histogram` of a database split by rows over devices: shard sums.

  Each shard counts its own rows (with its columns of ``affinity`` or its ``db_labels``) where they live; the
  counts are summed across devices by ``psum``. Rows from ``num_db`` on (padding, whatever they hold) are not
  counted: their counts are computed on the host and subtracted exactly.

  .. math:: n_{q,d,v} = \sum_s |\{ i \in \mathrm{shard}_s,\ i < \mathrm{num\_db} : d(q, i) = d,\ a_{q,i} = v \}|

  Args:
    query_words: ``uint32[Q, W]`` packed queries.
    db_words: ``uint32[N, W]`` packed codes laid out by :func:`shard_rows`.
    affinity: optional ``int[Q, num_db]`` levels in ``[0, num_levels)`` (laid out here, by columns).
    num_bits: the code length; must match ``W``.
    num_levels: ``V`` with ``affinity`` (inferred when None).
    query_labels: optional ``int[Q]`` class labels (with ``db_labels``).
    db_labels: optional ``int[num_db]`` class labels (laid out here, like the rows).
    num_db: the number of real rows, as for :func:`knn`.
    chunk_size: database items per streamed step of each shard.

  Returns:
    ``int32[Q, num_bits + 1, V]`` counts, replicated.

  >>> import numpy as np
  >>> from hashjax.codes import pack_bits
  >>> x = shard_rows(pack_bits(np.array([[1, 1], [0, 1], [0, 0]])), data_mesh(1))
  >>> hamming_histogram(pack_bits(np.array([[1, 1]])), x, np.array([[1, 1, 0]]), num_bits=2).tolist()
  [[[0, 1], [0, 1], [1, 0]]]
  """
  num_bits, mesh, axes, _, num_db = _check_search(query_words, db_words, num_db, num_bits)
  total = db_words.shape[0]
  num_q = query_words.shape[0]
  chunk_size = _checks.check_int("chunk_size", chunk_size)
  inputs = [_place_queries(query_words, mesh), db_words]
  split = lambda x, spec: jax.device_put(x, NamedSharding(mesh, spec))
  rows_spec = P(axes if axes else None)
  pad_cols = lambda x, axis: np.concatenate(  # padding copies of the last real column (row) of the levels
      [x, np.repeat(np.take(x, [-1], axis=axis), total - num_db, axis=axis)], axis=axis) if total > num_db else x
  if _checks.check_label_pair(query_labels, db_labels, num_q, num_db, db_like="[num_db]", affinity=affinity):
    _checks.check_concrete("query_labels, db_labels", query_labels, db_labels, why="they are laid out on devices")
    kind, num_levels = "labels", 2
    level_args = [split(np.asarray(query_labels, np.int32), P()),
                  split(pad_cols(np.asarray(db_labels, np.int32), 0), rows_spec)]
  elif affinity is not None:
    _checks.check_concrete("affinity", affinity, why="it is laid out on devices")
    _checks.check_shape("affinity", affinity, (num_q, num_db), like="[len(query_words), num_db]")
    num_levels = histograms.num_levels_of(affinity, num_levels)
    kind, level_args = "affinity", [split(pad_cols(np.asarray(affinity, np.int32), 1), P(None, rows_spec[0]))]
  else:
    kind, num_levels, level_args = "none", 1, []
  program = _histogram_program(mesh, axes, num_bits, num_levels, kind, chunk_size, False)
  hist = program(*inputs, *level_args)
  if total == num_db:
    return hist
  padding = np.asarray(_rows_from_program(mesh, num_db)(db_words))  # whatever they hold, counted with their levels
  extra = {}
  if kind == "labels":
    extra = dict(query_labels=np.asarray(query_labels), db_labels=pad_cols(np.asarray(db_labels), 0)[num_db:])
  elif kind == "affinity":
    extra = dict(affinity=pad_cols(np.asarray(affinity), 1)[:, num_db:], num_levels=num_levels)
  counted = histograms.hamming_histogram(np.asarray(query_words), padding, num_bits=num_bits, **extra)
  return _checks.as_jax(np.asarray(hist) - np.asarray(counted))
