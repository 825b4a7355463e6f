r"""Saving and loading indexes and packed-code databases: one directory, atomic, versioned, checksummed.

:func:`save` writes a :class:`~hashjax.index.MultiIndex`, an
:class:`~hashjax.index.InvertedIndex` or a :class:`CodeDatabase` to a
directory; :func:`load` reads back whichever was saved. Layout::

  directory/
    manifest.json        format, version, kind, num_bits, count, the data folder, each array's
                         file, dtype, shape and sha256, and the sha256 of the manifest itself
    data-<token>/        one .npy file per array

**Atomic.** :func:`save` writes the arrays into a temporary folder inside
the directory, fsyncs every file, renames the folder to a fresh
``data-<token>``, fsyncs the directory, and only then replaces
``manifest.json`` in one ``os.replace`` (a new manifest written beside it,
fsynced, renamed over the old). The manifest is what :func:`load` reads
first, and it names its data folder, so at every instant the directory
loads as the old index or as the new one, complete: a crash before the
manifest's rename leaves the old index (and a stray folder, removed by the
next save); after it, the new one. The previous data folder is removed
after the switch.

**Verified.** :func:`load` checks the manifest's own checksum, its format
version (:data:`FORMAT_VERSION`), and each array file's sha256, dtype and
shape before using it; a truncated or altered file, another version or a
missing file raise ``ValueError`` naming the file. Arrays are stored with
``numpy.save`` (no pickles) and read with ``allow_pickle=False``.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
from typing import Any, Dict, NamedTuple, Tuple, Union

import numpy as np

from hashjax import _checks, io
from hashjax.index.inverted import InvertedIndex
from hashjax.index.multi import MultiIndex

#: Format version written by :func:`save`; :func:`load` reads exactly this version.
FORMAT_VERSION = 1
#: The file :func:`load` reads first.
MANIFEST = "manifest.json"
_FORMAT = "hashjax-index"
_KINDS = ("codes", "inverted", "multi")
_CHUNK = 1 << 22  # bytes hashed per read
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
    _checks.check_words("obj.words", words, min_ndim=2)
    if words.ndim != 2:
      raise ValueError(f"obj.words: expected packed codes of shape [N, W], got shape {tuple(words.shape)}")
    num_bits = _checks.check_num_bits(obj.num_bits, words=words, name="obj.num_bits", words_name="obj.words")
    _checks.check_padding_bits("obj.words", words, num_bits)
    return "codes", {"words": np.asarray(words)}, {"num_bits": num_bits, "count": int(words.shape[0])}
  if isinstance(obj, InvertedIndex):
    arrays = {name: np.asarray(getattr(obj, name)) for name in _INVERTED_ARRAYS}
    return "inverted", arrays, {"num_bits": obj.num_bits, "count": obj.num_db, "filter_bits": obj.filter_bits}
  if isinstance(obj, MultiIndex):
    arrays = {"db_words": obj.db_words, "bounds": obj.bounds, "items": obj.items}
    for j in range(obj.num_tables):
      arrays[f"keys_{j}"] = obj.keys[j]
      arrays[f"offsets_{j}"] = obj.offsets[j]
    return "multi", {k: np.asarray(v) for k, v in arrays.items()}, {
        "num_bits": obj.num_bits, "count": obj.num_db, "num_tables": obj.num_tables}
  raise ValueError(f"obj: expected a MultiIndex, an InvertedIndex or a CodeDatabase, got {type(obj).__name__}")


class _HashingWriter:
  """A binary file that hashes what is written to it."""

  def __init__(self, f):
    self.f = f
    self.sha = hashlib.sha256()

  def write(self, data) -> int:
    self.sha.update(data)
    return self.f.write(data)


def _write_array(path: str, array: np.ndarray) -> str:
  """Writes ``array`` as ``.npy`` to ``path``, fsynced; returns its sha256."""
  with open(path, "wb") as f:
    writer = _HashingWriter(f)
    np.lib.format.write_array(writer, np.ascontiguousarray(array), allow_pickle=False)
    f.flush()
    os.fsync(f.fileno())
  return writer.sha.hexdigest()


def _fsync_dir(path: str) -> None:
  fd = os.open(path, os.O_RDONLY)
  try:
    os.fsync(fd)
  finally:
    os.close(fd)


def _manifest_checksum(manifest: Dict[str, Any]) -> str:
  body = {k: v for k, v in manifest.items() if k != "checksum"}
  return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


def _ours(name: str) -> bool:
  """Entries :func:`save` creates inside the directory."""
  return name == MANIFEST or name.startswith("data-") or name.startswith(".tmp-")


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
  if not isinstance(directory, (str, os.PathLike)):
    raise ValueError(f"directory: expected a path (str or os.PathLike), got {type(directory).__name__}")
  path = os.path.abspath(os.fspath(directory))
  if os.path.exists(path) and not os.path.isdir(path):
    raise ValueError(f"directory: {path!r} exists and is not a directory; refusing to replace it with an index")
  os.makedirs(path, exist_ok=True)
  others = sorted(name for name in os.listdir(path) if not _ours(name))
  if others:
    raise ValueError(f"directory: {path!r} holds files that are not a saved index ({others[:3]}); refusing to "
                     "write an index there (choose a new or empty directory)")
  token = secrets.token_hex(8)
  tmp = os.path.join(path, f".tmp-{token}")
  data = f"data-{token}"
  os.mkdir(tmp)
  try:
    listed = []
    for name, array in arrays.items():
      digest = _write_array(os.path.join(tmp, f"{name}.npy"), array)
      listed.append({"name": name, "file": f"{data}/{name}.npy", "dtype": array.dtype.str,
                     "shape": list(array.shape), "sha256": digest})
    _fsync_dir(tmp)
    os.replace(tmp, os.path.join(path, data))
    _fsync_dir(path)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  manifest = {"format": _FORMAT, "version": FORMAT_VERSION, "kind": kind, "data": data, "arrays": listed, **ints}
  manifest["checksum"] = _manifest_checksum(manifest)
  io.atomic_write_bytes(os.path.join(path, MANIFEST),
                        (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode("utf-8"))
  _fsync_dir(path)
  for name in os.listdir(path):  # the previous data folder and leftovers of interrupted saves
    if name != data and name != MANIFEST and _ours(name):
      shutil.rmtree(os.path.join(path, name), ignore_errors=True)
  return path


# ----------------------------------------------------------------------------
# Loading.


def _read_manifest(path: str) -> Dict[str, Any]:
  file = os.path.join(path, MANIFEST)
  if not os.path.isdir(path):
    raise ValueError(f"directory: {path!r} does not exist or is not a directory; expected a saved index")
  if not os.path.isfile(file):
    raise ValueError(f"{file}: missing; {path!r} holds no saved index (an interrupted first save leaves none)")
  try:
    with open(file, "rb") as f:
      manifest = json.loads(f.read().decode("utf-8"))
  except (UnicodeDecodeError, json.JSONDecodeError) as e:
    raise ValueError(f"{file}: truncated or altered, not valid JSON ({e})") from None
  if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT:
    raise ValueError(f"{file}: not a hashjax index manifest (expected format {_FORMAT!r})")
  if manifest.get("version") != FORMAT_VERSION:
    raise ValueError(f"{file}: format version {manifest.get('version')!r}, but this hashjax reads version "
                     f"{FORMAT_VERSION} only")
  if manifest.get("checksum") != _manifest_checksum(manifest):
    raise ValueError(f"{file}: checksum mismatch (the manifest was altered or truncated)")
  if manifest.get("kind") not in _KINDS:
    raise ValueError(f"{file}: kind: expected one of {list(_KINDS)}, got {manifest.get('kind')!r}")
  for name in ("num_bits", "count"):
    if not _checks.is_int(manifest.get(name)) or manifest[name] < 1:
      raise ValueError(f"{file}: {name}: expected a positive int, got {manifest.get(name)!r}")
  return manifest


def _read_array(path: str, entry: Dict[str, Any]) -> np.ndarray:
  file = os.path.join(path, entry["file"])
  if not os.path.isfile(file):
    raise ValueError(f"{file}: missing (listed in {MANIFEST})")
  sha = hashlib.sha256()
  with open(file, "rb") as f:
    for block in iter(lambda: f.read(_CHUNK), b""):
      sha.update(block)
  if sha.hexdigest() != entry["sha256"]:
    raise ValueError(f"{file}: checksum mismatch (sha256 {sha.hexdigest()[:16]}..., {MANIFEST} lists "
                     f"{entry['sha256'][:16]}...): the file is truncated or altered")
  try:
    array = np.load(file, allow_pickle=False)
  except (OSError, ValueError, EOFError) as e:
    raise ValueError(f"{file}: not a readable .npy array ({type(e).__name__}: {e})") from None
  if array.dtype.str != entry["dtype"] or list(array.shape) != entry["shape"]:
    raise ValueError(f"{file}: expected dtype {entry['dtype']} and shape {tuple(entry['shape'])} (as {MANIFEST} "
                     f"lists), got {_checks.desc(array)}")
  return array


def _expect(condition: bool, path: str, what: str) -> None:
  if not condition:
    raise ValueError(f"{os.path.join(path, MANIFEST)}: inconsistent saved index: {what}")


def _multi(path: str, a: Dict[str, np.ndarray], manifest: Dict[str, Any]) -> MultiIndex:
  num_bits, count, m = manifest["num_bits"], manifest["count"], manifest.get("num_tables")
  _expect(_checks.is_int(m) and m >= 1, path, f"num_tables {m!r}")
  _expect(all(f"{p}_{j}" in a for j in range(m) for p in ("keys", "offsets")), path, "a table's arrays missing")
  db, bounds, items = a["db_words"], a["bounds"], a["items"]
  _expect(db.shape == (count, _checks.num_words_for(num_bits)), path, f"db_words of shape {db.shape}")
  _expect(items.shape == (m, count), path, f"items of shape {items.shape}")
  _expect(bounds.shape == (m + 1,) and bounds[0] == 0 and bounds[-1] == num_bits
          and bool(np.all(np.diff(bounds) >= 1)), path, f"bounds {bounds.tolist()}")
  for j in range(m):
    keys, offsets = a[f"keys_{j}"], a[f"offsets_{j}"]
    rows = (1 << int(bounds[j + 1] - bounds[j])) if not keys.size else keys.shape[0]
    _expect(offsets.shape == (rows + 1,) and offsets[-1] == count, path, f"table {j}'s offsets")
  return MultiIndex(db, bounds, tuple(a[f"keys_{j}"] for j in range(m)), tuple(a[f"offsets_{j}"] for j in range(m)),
                    items, num_bits)


def load(directory: Any) -> Saved:
  r"""Reads what :func:`save` wrote: a :class:`~hashjax.index.MultiIndex`, an
  :class:`~hashjax.index.InvertedIndex` or a :class:`CodeDatabase`, verified.

  .. math:: \mathrm{load}(\mathrm{save}(x, p)) = x

  Args:
    directory: a directory written by :func:`save`.

  Returns:
    The saved object, its arrays as numpy arrays.

  Raises:
    ValueError: naming the file, when the directory holds no saved index, or a file is missing, truncated or
      altered (checksum), or of another format version.

  >>> import os, tempfile, numpy as np
  >>> from hashjax.index import build_multi_index, multi_index_knn
  >>> x = np.array([[1], [6], [7], [0]], np.uint32)
  >>> path = save(build_multi_index(x, num_bits=3), os.path.join(tempfile.mkdtemp(), "mih"))
  >>> multi_index_knn(load(path), np.array([[7]], np.uint32), 2)[1].tolist()
  [[2, 1]]
  """
  if not isinstance(directory, (str, os.PathLike)):
    raise ValueError(f"directory: expected a path (str or os.PathLike), got {type(directory).__name__}")
  path = os.path.abspath(os.fspath(directory))
  manifest = _read_manifest(path)
  listed = manifest.get("arrays")
  if not isinstance(listed, list) or not all(isinstance(e, dict) and {"name", "file", "dtype", "shape", "sha256"}
                                             <= set(e) for e in listed):
    raise ValueError(f"{os.path.join(path, MANIFEST)}: arrays: expected a list of {{name, file, dtype, shape, "
                     "sha256}} objects")
  a = {e["name"]: _read_array(path, e) for e in listed}
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
