r"""Saving and loading indexes and packed-code databases: one directory, atomic, versioned, checksummed.

:func:`save` writes a :class:`~hashjax.index.MultiIndex`, an
:class:`~hashjax.index.InvertedIndex` or a :class:`CodeDatabase` to a
directory; :func:`load` reads back whichever was saved. Layout::

  directory/
    manifest.json        format, version, kind, num_bits, count, the data folder, each array's
                         file, dtype, shape and sha256, and the sha256 of the manifest itself
    data-<token>/        one .npy file per array
    .lock                the writers' lock

Both follow the save protocol of :mod:`hashjax.io` (models use it too):
**atomic** (the manifest, which names its data folder, is replaced last in
one rename, so the directory always loads as the old index or the new one,
complete), **safe under concurrency** (saves to one directory wait for each
other and the last wins; a load during a save returns one complete index,
never a mix and never an error) and **verified** (:func:`load` checks the
manifest's own checksum, its format version (:data:`FORMAT_VERSION`;
:data:`MULTI_FORMAT_VERSION` for a multi-index), and each array file's
sha256, dtype and shape; a truncated or altered file, another version or a missing file raise
``ValueError`` naming the file).
Arrays are stored with ``numpy.save`` (no pickles) and read with
``allow_pickle=False``.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Dict, NamedTuple, Tuple, Union

import numpy as np

from hashjax import _checks, io
from hashjax.index.inverted import InvertedIndex
from hashjax.index.multi import ENTRY_BYTES, MAX_SUBSTRING_BITS, MultiIndex

#: Format version of the code databases and inverted indexes :func:`save` writes and :func:`load` reads.
FORMAT_VERSION = 1
#: Format version of a multi-index: tables of entries with fingerprints (:class:`~hashjax.index.MultiIndex`), with
#: or without the sorted copy of the codes. Versions 1 and 2 (tables of items) are refused; build such an index
#: again.
MULTI_FORMAT_VERSION = 3
#: The file :func:`load` reads first.
MANIFEST = "manifest.json"
_FORMAT = "hashjax-index"
_KINDS = ("codes", "inverted", "multi")
_CHECK_ROWS = 1 << 21  # entries of a table whose items load checks at a time (about 50 MiB of work arrays)
_INVERTED_ARRAYS = ("keys", "codes", "code_offsets", "items", "filter", "filter_rank", "prefix_starts",
                    "coarse_filter")


class CodeDatabase(NamedTuple):
  """A database of packed codes with its code length, as :func:`save` stores it.

  Attributes:
    words: ``uint32[N, W]`` packed codes, ``W = ceil(num_bits / 32)``, padding bits 0.
    num_bits: the code length ``b``.
  """
  words: np.ndarray
  num_bits: int

  @property
  def count(self) -> int:
    """Number of codes ``N``."""
    return int(self.words.shape[0])


Saved = Union[CodeDatabase, InvertedIndex, MultiIndex]


# ----------------------------------------------------------------------------
# Saving.


def _arrays(obj: Saved) -> Tuple[str, Dict[str, np.ndarray], Dict[str, int]]:
  """``(kind, arrays, integers)`` of what :func:`save` stores."""
  if isinstance(obj, CodeDatabase):
    words = obj.words
    num_bits = _checks.check_codes("obj.words", words, obj.num_bits, num_bits_name="obj.num_bits")
    return "codes", {"words": np.asarray(words)}, {"num_bits": num_bits, "count": int(words.shape[0])}
  if isinstance(obj, InvertedIndex):
    arrays = {name: np.asarray(getattr(obj, name)) for name in _INVERTED_ARRAYS}
    return "inverted", arrays, {"num_bits": obj.num_bits, "count": obj.num_db, "filter_bits": obj.filter_bits}
  if isinstance(obj, MultiIndex):
    arrays = {"db_words": obj.db_words, "bounds": obj.bounds, "entries": obj.entries}
    if obj.sorted_words is not None:
      arrays["sorted_words"] = obj.sorted_words
    for j in range(obj.num_tables):
      arrays[f"keys_{j}"] = obj.keys[j]
      arrays[f"offsets_{j}"] = obj.offsets[j]
    return "multi", {k: np.asarray(v) for k, v in arrays.items()}, {
        "num_bits": obj.num_bits, "count": obj.num_db, "num_tables": obj.num_tables}
  raise ValueError(f"obj: expected a MultiIndex, an InvertedIndex or a CodeDatabase, got {type(obj).__name__}")


def save(obj: Saved, directory: Any) -> str:
  r"""Writes an index or a :class:`CodeDatabase` to ``directory``, atomically; returns its absolute path.

  .. math:: \mathrm{load}(\mathrm{save}(x, p)) = x

  The directory is created with its parents. A directory that already holds
  a saved index is replaced, but only once the new one is complete (module
  docstring); a file, or a directory holding anything else, is refused.

  Args:
    obj: a :class:`~hashjax.index.MultiIndex`, an :class:`~hashjax.index.InvertedIndex` or a
      :class:`CodeDatabase`.
    directory: the directory (str or os.PathLike).

  Returns:
    The absolute path of the directory.

  >>> import os, tempfile, numpy as np
  >>> db = CodeDatabase(np.array([[5, 0], [3, 1]], np.uint32), num_bits=40)
  >>> path = save(db, os.path.join(tempfile.mkdtemp(), "codes"))
  >>> back = load(path)
  >>> back.num_bits, back.words.tolist()
  (40, [[5, 0], [3, 1]])
  """
  kind, arrays, ints = _arrays(obj)
  version = MULTI_FORMAT_VERSION if kind == "multi" else FORMAT_VERSION
  header = {"format": _FORMAT, "version": version, "kind": kind, **ints}
  return io.save_arrays(_checks.check_path("directory", directory), arrays, header, manifest=MANIFEST, what="index")


# ----------------------------------------------------------------------------
# Loading.


#: The rule of each field every index manifest holds, called with the field's name and value.
_MANIFEST_FIELDS = {"kind": functools.partial(_checks.check_option, options=_KINDS), "num_bits": _checks.check_int,
                    "count": _checks.check_int}


def _check_manifest(file: str, manifest: Dict[str, Any]) -> None:
  """``manifest`` must be an index manifest of :data:`FORMAT_VERSION`, or of :data:`MULTI_FORMAT_VERSION` for a
  multi-index (its checksum is verified after)."""
  got = (manifest.get("format"), manifest.get("version"))
  version = MULTI_FORMAT_VERSION if manifest.get("kind") == "multi" else FORMAT_VERSION
  if got != (_FORMAT, version):
    raise ValueError(f"{file}: not a hashjax index manifest this hashjax reads (expected format {_FORMAT!r} "
                     f"version {version}), got format {got[0]!r} version {got[1]!r}")
  for key, rule in _MANIFEST_FIELDS.items():
    rule(f"{file}: {key}", manifest.get(key))


def _expect(condition: bool, path: str, what: str) -> None:
  if not condition:
    raise ValueError(f"{os.path.join(path, MANIFEST)}: inconsistent saved index: {what}")


def _multi(path: str, a: Dict[str, np.ndarray], manifest: Dict[str, Any]) -> MultiIndex:
  num_bits, count, m = manifest["num_bits"], manifest["count"], manifest.get("num_tables")
  _expect(_checks.is_int(m) and m >= 1, path, f"num_tables {m!r}")
  _expect(all(f"{p}_{j}" in a for j in range(m) for p in ("keys", "offsets")), path, "a table's arrays missing")
  _expect(all(n in a for n in ("db_words", "bounds", "entries")), path, "an array of the multi-index missing")
  db, bounds, entries = a["db_words"], a["bounds"], a["entries"]
  _expect(db.shape == (count, _checks.num_words_for(num_bits)) and db.dtype == np.uint32, path,
          f"db_words of shape {db.shape} and dtype {db.dtype}")
  _expect(entries.shape == (m, count, ENTRY_BYTES) and entries.dtype == np.uint8, path,
          f"entries of shape {entries.shape} and dtype {entries.dtype}")
  sorted_words = a.get("sorted_words")
  _expect(sorted_words is None or (sorted_words.shape == db.shape and sorted_words.dtype == db.dtype), path,
          "sorted_words of another shape or dtype")
  _expect(bounds.dtype.kind == "i", path, f"bounds of dtype {bounds.dtype}")
  widths = np.diff(bounds)
  _expect(bounds.shape == (m + 1,) and bounds[0] == 0 and bounds[-1] == num_bits
          and bool(np.all((widths >= 1) & (widths <= MAX_SUBSTRING_BITS))), path, f"bounds {bounds.tolist()}")
  for j in range(m):
    keys, offsets = a[f"keys_{j}"], a[f"offsets_{j}"]
    _expect(keys.ndim == 1 and keys.dtype == np.uint32 and offsets.ndim == 1 and offsets.dtype == np.int32, path,
            f"table {j}'s keys ({keys.dtype}) or offsets ({offsets.dtype})")
    rows = (1 << int(widths[j])) if not keys.size else keys.shape[0]
    _expect(offsets.shape == (rows + 1,) and offsets[0] == 0 and offsets[-1] == count
            and bool(np.all(np.diff(offsets) >= 0)), path, f"table {j}'s offsets")
  index = MultiIndex(db, bounds, tuple(a[f"keys_{j}"] for j in range(m)), tuple(a[f"offsets_{j}"] for j in range(m)),
                     entries, num_bits, sorted_words)
  # The compiled search reads the codes at the entries' items unchecked: an item past the database, in a file whose
  # checksums were written to match, would read outside it.
  for j in range(m):
    for start in range(0, count, _CHECK_ROWS):
      items = index.table_items(j, slice(start, start + _CHECK_ROWS))
      _expect(int(items.max()) < count, path, f"an entry's item {int(items.max())} is not below count {count}")
  return index


def load(directory: Any, *, mmap: bool = False) -> Saved:
  r"""Reads what :func:`save` wrote: a :class:`~hashjax.index.MultiIndex`, an
  :class:`~hashjax.index.InvertedIndex` or a :class:`CodeDatabase`, verified.

  .. math:: \mathrm{load}(\mathrm{save}(x, p)) = x

  With ``mmap=True`` the arrays (the packed codes above all) are memory-mapped
  read-only rather than read into memory: each file is checked against its
  sha256 in one streamed pass, and pages are read as a search touches them:
  :func:`hashjax.search.knn` copies a host database to the device one segment
  at a time (about 8 million codes of 64 bits), and
  :func:`~hashjax.index.multi_index_knn` reads only its candidates' codes.

  Args:
    directory: a directory written by :func:`save`.
    mmap: memory-map the arrays (``numpy.memmap``, read-only) instead of reading them.

  Returns:
    The saved object, its arrays as numpy arrays (memory maps with ``mmap=True``).

  Raises:
    ValueError: naming the file, when the directory holds no saved index, or a file is missing, truncated or
      altered (checksum), or of another format version, or when the arrays do not fit together (a multi-index
      whose tables point outside its arrays, say).

  >>> import os, tempfile, numpy as np
  >>> from hashjax.index import build_multi_index, multi_index_knn
  >>> x = np.array([[1], [6], [7], [0]], np.uint32)
  >>> path = save(build_multi_index(x, num_bits=3), os.path.join(tempfile.mkdtemp(), "mih"))
  >>> multi_index_knn(load(path), np.array([[7]], np.uint32), 2)[1].tolist()
  [[2, 1]]
  """
  path = _checks.check_path("directory", directory)
  manifest, a = io.load_arrays(path, manifest=MANIFEST, check=_check_manifest, mmap=_checks.check_bool("mmap", mmap))
  num_bits, count = manifest["num_bits"], manifest["count"]
  if manifest["kind"] == "codes":
    words = a.get("words")
    _expect(words is not None and words.shape == (count, _checks.num_words_for(num_bits)), path,
            "words missing or of another shape")
    return CodeDatabase(words, num_bits)
  if manifest["kind"] == "inverted":
    _expect(all(n in a for n in _INVERTED_ARRAYS), path, "an array of the inverted index missing")
    _expect(a["items"].shape == (count,) and a["code_offsets"][-1] == count, path, "items or code_offsets")
    filter_bits = manifest.get("filter_bits")
    _expect(_checks.is_int(filter_bits) and 1 <= filter_bits <= num_bits <= 32, path, f"filter_bits {filter_bits!r}")
    return InvertedIndex(*(a[n] for n in _INVERTED_ARRAYS), num_bits, filter_bits)
  return _multi(path, a, manifest)
