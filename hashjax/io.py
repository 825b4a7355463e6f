r"""File output: atomic single files, and the one save protocol of models, indexes and code databases.

**Single files** (:func:`atomic_write_bytes`, :func:`atomic_write_json`): the
bytes go to a temporary file beside the target, are fsynced, and the file is
renamed over the target; a reader sees the old file or the new one, and a
crash mid-write leaves the old one.

**Saved objects** (:func:`save_arrays`, :func:`load_arrays`): a JSON header
and named numpy arrays (a model's parameters, an index's tables, a code
database) saved to one directory::

  path/
    manifest.json      the header's fields; "data", the current data folder; "arrays", each array's name,
                       file, dtype, shape and sha256; "checksum", the sha256 of everything else in it
    data-<token>/      one .npy file per array, never changed once written
    .lock              the writers' lock

(a format may name its manifest otherwise: a model's is ``model.json``).

*Writing.* A writer takes an exclusive ``fcntl.flock`` on ``.lock``
(blocking: concurrent saves to one directory run one after the other, the
last to finish wins, none is lost). It writes the arrays into a temporary
``.tmp-<token>`` folder, fsyncs every file and the folder, renames it to
``data-<token>``, and only then replaces the manifest in one atomic rename.
At every instant the manifest names a complete data folder. Still under the
lock, it removes the leftovers of killed saves (``.tmp-*``, data folders no
manifest names) and every data folder but the new one and the one the
replaced manifest named, which a reader may still be reading.

*Reading.* A reader takes no lock: it reads the manifest, then every file
from the one data folder the manifest names, each checked against its
sha256, so it never mixes two saves. When a file is missing or does not
match and the manifest has changed since it was read (a save replaced it and
a later save removed its folder), the reader starts over; after a few
attempts it reads under a shared lock, which waits for the running save. A
mismatch under an unchanged manifest is damage: ``ValueError`` naming the
file. The manifest's own checksum refuses an edited manifest the same way.
Arrays are read with ``allow_pickle=False``: loading runs no code. With
``mmap=True`` each file is checked against its sha256 in a streamed pass and
then memory-mapped read-only, not copied: data folders are never changed in
place, so the mapped bytes are the ones checked, and a mapping stays valid
after a later save removes its folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
from io import BytesIO
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Tuple

import numpy as np

from hashjax import _checks

__all__ = ["atomic_write_bytes", "atomic_write_json", "write_synced", "check_target", "save_arrays", "load_arrays",
           "MANIFEST", "LOCK_FILE"]

#: The manifest's default file name.
MANIFEST = "manifest.json"
#: The lock file writers hold while saving.
LOCK_FILE = ".lock"
_TMP = ".tmp-"
_DATA = "data-"
#: The names this module writes beside a manifest: its data folders (``data-`` and 16 hex digits) and temporary
#: files and folders (``.tmp-`` and 16 hex digits, or the 8 characters of ``tempfile.mkstemp``, which earlier
#: versions used for a manifest's temporary file). Nothing else in a saved directory is ever deleted.
_OURS = re.compile(r"(\.tmp-([0-9a-f]{16}|[a-z0-9_]{8})|data-[0-9a-f]{16})")
_ATTEMPTS = 4  # optimistic reads before reading under the shared lock, which always succeeds


class _Hashing:
  """A binary file that hashes what is written to it."""

  def __init__(self, f):
    self.f, self.sha = f, hashlib.sha256()

  def write(self, data) -> int:
    self.sha.update(data)
    return self.f.write(data)


def write_synced(path: str, write: Callable[[Any], None]) -> str:
  r"""Creates ``path``, lets ``write(f)`` fill it, fsyncs it; returns the sha256 of the bytes written.

  .. math:: \mathrm{write\_synced}(p, w) = \mathrm{sha256}(\text{bytes } w \text{ wrote})

  The file object ``write`` receives has only ``write(bytes)``.

  >>> import hashlib, os, tempfile
  >>> p = os.path.join(tempfile.mkdtemp(), "x.bin")
  >>> write_synced(p, lambda f: f.write(b"abc")) == hashlib.sha256(b"abc").hexdigest()
  True
  """
  with open(path, "wb") as f:
    hashing = _Hashing(f)
    write(hashing)
    f.flush()
    os.fsync(f.fileno())
  return hashing.sha.hexdigest()


def _fsync_dir(path: str) -> None:
  fd = os.open(path, os.O_RDONLY)
  try:
    os.fsync(fd)
  finally:
    os.close(fd)


def atomic_write_bytes(path: str, data: bytes) -> None:
  r"""Writes ``data`` to ``path`` atomically (same-directory temp file, fsync, ``os.replace``).

  The file gets the mode ``open()`` would give it (0o666 less the umask).

  .. math:: \mathrm{path} \leftarrow \mathrm{data} \quad \text{(old or new, never partial)}

  >>> import os, tempfile
  >>> p = os.path.join(tempfile.mkdtemp(), "x.bin")
  >>> atomic_write_bytes(p, b"abc")
  >>> with open(p, "rb") as f:
  ...   f.read()
  b'abc'
  """
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  tmp = os.path.join(directory, _TMP + secrets.token_hex(8))
  os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # the umask's mode, as open() gives
  try:
    write_synced(tmp, lambda f: f.write(data))
    os.replace(tmp, path)
  finally:
    if os.path.exists(tmp):  # the write or the rename failed
      os.unlink(tmp)
  _fsync_dir(directory)


def atomic_write_json(path: str, obj: Any) -> None:
  r"""Writes ``obj`` as indented JSON to ``path`` atomically.

  .. math:: \mathrm{path} \leftarrow \mathrm{json}(\mathrm{obj})

  >>> import os, tempfile
  >>> p = os.path.join(tempfile.mkdtemp(), "r.json")
  >>> atomic_write_json(p, {"ap": 0.5})
  >>> with open(p) as f:
  ...   json.load(f)
  {'ap': 0.5}
  """
  atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode("utf-8"))


# ----------------------------------------------------------------------------
# Saved objects.


def _checksum(manifest: Dict[str, Any]) -> str:
  body = {k: v for k, v in manifest.items() if k != "checksum"}
  return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


def _remove(path: str) -> None:
  if os.path.isdir(path) and not os.path.islink(path):
    shutil.rmtree(path, ignore_errors=True)
  elif os.path.lexists(path):
    os.unlink(path)


@contextlib.contextmanager
def _locked(path: str, *, shared: bool, create: bool) -> Iterator[None]:
  """Holds ``flock`` on ``path/.lock`` (created when ``create``; no lock when it is absent and not created)."""
  try:
    fd = os.open(os.path.join(path, LOCK_FILE), os.O_RDWR | os.O_CREAT if create else os.O_RDONLY, 0o666)
  except FileNotFoundError:
    yield
    return
  try:
    fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
    yield
  finally:
    os.close(fd)  # releases the lock


def _current_data(file: str) -> Optional[str]:
  """The data folder the manifest ``file`` names, or None (no manifest, an unreadable one, an older layout)."""
  try:
    with open(file, "rb") as f:
      data = json.loads(f.read().decode("utf-8")).get("data")
  except (OSError, ValueError, AttributeError):
    return None
  return data if isinstance(data, str) else None


def check_target(path: str, *, manifest: str = MANIFEST, legacy: Sequence[str] = (), what: str = "index") -> None:
  r"""Refuses (``ValueError`` naming ``path``) a directory :func:`save_arrays` could not or would not save to: a
  file (or a link to none), a path below a file, a directory (or the nearest existing one above ``path``) that is
  not writable, or a directory holding anything but a saved object's files (its manifest, data folders, lock,
  leftovers of killed saves and ``legacy`` files).

  .. math:: \mathrm{path} \notin \mathrm{files}, \qquad \mathrm{listdir}(\mathrm{path}) \subseteq \mathrm{ours}

  >>> import os, tempfile
  >>> root = tempfile.mkdtemp()
  >>> check_target(os.path.join(root, "new"))  # a path that does not exist yet: fine
  >>> open(os.path.join(root, "notes.txt"), "w").close()
  >>> check_target(root, what="model")
  Traceback (most recent call last):
  ...
  ValueError: ...: holds files that are not a saved model (['notes.txt']); choose a new or empty directory
  """
  existing = os.path.abspath(path)
  while not os.path.lexists(existing):
    existing = os.path.dirname(existing)
  if not os.path.isdir(existing):
    where = "exists and is not a directory" if existing == os.path.abspath(path) else f"is below the file {existing}"
    raise ValueError(f"{path}: {where}; refusing to replace it with a {what}")
  if not os.access(existing, os.W_OK | os.X_OK):
    where = "" if existing == os.path.abspath(path) else f" ({existing}, where it would be created)"
    raise ValueError(f"{path}: expected a writable directory for the {what}, got one that is not writable{where}")
  ours = {manifest, LOCK_FILE, *legacy}
  others = sorted(n for n in (os.listdir(path) if os.path.isdir(path) else ())
                  if n not in ours and not _OURS.fullmatch(n))
  if others:
    raise ValueError(f"{path}: holds files that are not a saved {what} ({others[:3]}); choose a new or empty directory")


def save_arrays(path: str, arrays: Dict[str, np.ndarray], header: Dict[str, Any], *, manifest: str = MANIFEST,
                legacy: Sequence[str] = (), what: str = "index") -> str:
  r"""Saves ``header`` and ``arrays`` to the directory ``path`` by the protocol of the module docstring.

  .. math:: \mathrm{load\_arrays}(\mathrm{save\_arrays}(p, a, h)) = (h', a), \qquad h \subseteq h'

  The directory is created with its parents. One that holds anything but
  the manifest, data folders, the lock, leftovers of killed saves and the
  ``legacy`` files of an older layout (removed once no reader can need them)
  is refused. Concurrent saves wait for each other.

  Args:
    path: absolute directory path.
    arrays: ``{name: array}``, names ``/``-separated paths (stored as ``name`` with ``.`` for ``/``, plus
      ``.npy``), no object dtypes.
    header: JSON-serialisable fields of the manifest (e.g. ``format``, ``version``, ``kind``), without
      ``data``, ``arrays`` or ``checksum``.
    manifest: the manifest's file name.
    legacy: file names of an older layout of the same object in ``path``.
    what: what is saved, for the error message (``"index"``, ``"model"``).

  Returns:
    ``path``.

  >>> import os, tempfile, numpy as np
  >>> arrays = {"a/b": np.arange(3), "scale": np.array(2.5)}
  >>> path = save_arrays(os.path.join(tempfile.mkdtemp(), "x"), arrays, {"kind": "demo"})
  >>> header, arrays = load_arrays(path, check=lambda file, header: None)
  >>> header["kind"], arrays["a/b"].tolist(), arrays["scale"].shape
  ('demo', [0, 1, 2], ())
  """
  check_target(path, manifest=manifest, legacy=legacy, what=what)
  files = [name.replace("/", ".") + ".npy" for name in arrays]
  if len(set(files)) != len(files):
    raise ValueError(f"arrays: expected names that map to distinct files ('/' becomes '.'), got {sorted(arrays)}")
  try:
    json.dumps(header, allow_nan=False)
  except (TypeError, ValueError) as e:
    raise ValueError(f"header: expected JSON fields without NaN or inf, got {e}") from None
  os.makedirs(path, exist_ok=True)
  file = os.path.join(path, manifest)
  with _locked(path, shared=False, create=True):
    for name in os.listdir(path):  # leftovers of killed saves: no other writer runs
      if name.startswith(_TMP) and _OURS.fullmatch(name):
        _remove(os.path.join(path, name))
    token = secrets.token_hex(8)
    tmp, data = os.path.join(path, _TMP + token), _DATA + token
    os.mkdir(tmp)
    try:
      listed = []
      for name, array in arrays.items():
        array = np.asarray(array, order="C")  # (ascontiguousarray would make a 0-d array 1-d)
        base = name.replace("/", ".") + ".npy"
        digest = write_synced(os.path.join(tmp, base),
                              lambda f, a=array: np.lib.format.write_array(f, a, allow_pickle=False))
        listed.append({"name": name, "file": f"{data}/{base}", "dtype": array.dtype.str,
                       "shape": list(array.shape), "sha256": digest})
      _fsync_dir(tmp)
      os.replace(tmp, os.path.join(path, data))
    finally:
      shutil.rmtree(tmp, ignore_errors=True)  # a failed save's half-written folder (once renamed, nothing)
    _fsync_dir(path)
    previous = _current_data(file)
    body = {**header, "data": data, "arrays": listed}
    body["checksum"] = _checksum(body)
    atomic_write_bytes(file, (json.dumps(body, indent=1, sort_keys=True, allow_nan=False) + "\n").encode("utf-8"))
    keep = {data, previous} if previous else {data, *legacy}
    for name in os.listdir(path):
      if (_OURS.fullmatch(name) or name in legacy) and name not in keep:
        _remove(os.path.join(path, name))
  return path


class _Changed(Exception):
  """A file named by a manifest does not match its checksum (a missing one raises ``FileNotFoundError``)."""


def _read_npy(path: str, entry: Dict[str, Any], manifest: str, mmap: bool) -> np.ndarray:
  file = os.path.join(path, entry["file"])
  with open(file, "rb") as f:  # FileNotFoundError: load_arrays names the missing file
    if mmap:  # hashed in 16 MiB pieces, then mapped
      digest = hashlib.sha256()
      for piece in iter(lambda: f.read(1 << 24), b""):
        digest.update(piece)
      digest = digest.hexdigest()
    else:
      blob = f.read()
      digest = hashlib.sha256(blob).hexdigest()
  if digest != entry["sha256"]:
    raise _Changed(f"{file}: checksum mismatch (sha256 {digest[:16]}..., {manifest} lists {entry['sha256'][:16]}...): "
                   "the file is truncated or altered")
  # The file is the one the save wrote (its sha256), so its dtype and shape are those the manifest lists.
  try:
    return np.load(file, mmap_mode="r", allow_pickle=False) if mmap else np.load(BytesIO(blob), allow_pickle=False)
  except (OSError, ValueError, EOFError) as e:
    raise ValueError(f"{file}: not a readable .npy array ({type(e).__name__}: {e})") from None


def _parse(file: str, raw: bytes, check: Callable[[str, Dict[str, Any]], None]) -> Dict[str, Any]:
  try:
    header = json.loads(raw.decode("utf-8"))
  except (UnicodeDecodeError, json.JSONDecodeError) as e:
    raise ValueError(f"{file}: not valid JSON, truncated or altered ({e})") from None
  _checks.check_type(file, header, dict, what="a JSON object")
  check(file, header)
  signed = "checksum" in header  # else an older layout (read_legacy), whose arrays list no file or sha256
  if signed and header["checksum"] != _checksum(header):
    raise ValueError(f"{file}: checksum mismatch (the manifest was altered or truncated)")
  keys = ("name", "file", "dtype", "shape", "sha256") if signed else ("name", "dtype", "shape")
  listed, folder = header.get("arrays"), "a data folder and " if signed else ""
  if not isinstance(listed, list) or not all(isinstance(e, dict) and set(keys) <= set(e) for e in listed) or (
      signed and not isinstance(header.get("data"), str)):
    raise ValueError(f"{file}: expected {folder}arrays as a list of {{{', '.join(keys)}}}")
  for e in listed if signed else ():
    rel = e["file"]
    if not isinstance(rel, str) or os.path.isabs(rel) or os.pardir in rel.replace("\\", "/").split("/"):
      raise ValueError(f"{file}: array {e['name']!r}: expected a file inside the directory, got {rel!r}")
  return header


def _read_bytes(file: str) -> Optional[bytes]:
  try:
    with open(file, "rb") as f:
      return f.read()
  except FileNotFoundError:
    return None


def load_arrays(path: str, *, manifest: str = MANIFEST, check: Callable[[str, Dict[str, Any]], None],
                read_legacy: Optional[Callable[[Dict[str, Any]], Dict[str, np.ndarray]]] = None,
                mmap: bool = False) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
  r"""Reads what :func:`save_arrays` wrote to ``path``: ``(manifest, arrays)``, one save's, verified.

  .. math:: (h, a) = \mathrm{load\_arrays}(p), \qquad \mathrm{sha256}(a_i) = h.\mathrm{arrays}_i.\mathrm{sha256}

  Never fails because a save is under way (module docstring).

  Args:
    path: absolute directory path.
    manifest: the manifest's file name.
    check: ``check(file, header)`` raises ``ValueError`` naming ``file`` when the parsed manifest is not of the
      expected format or version; it runs before the checksum is verified.
    read_legacy: reads the arrays of a manifest without ``checksum`` (an older layout), raising
      ``FileNotFoundError`` for a missing file; None refuses such a manifest.
    mmap: memory-map the arrays read-only (``numpy.memmap``) instead of reading them into memory.

  Returns:
    The manifest as a dict, and ``{name: array}``.

  Raises:
    ValueError: naming the file, when ``path`` holds no manifest, or a file is missing, truncated or altered.

  >>> import os, tempfile, numpy as np
  >>> path = save_arrays(os.path.join(tempfile.mkdtemp(), "x"), {"w": np.eye(2)}, {"format": "demo"})
  >>> load_arrays(path, check=lambda file, header: None)[1]["w"].tolist()
  [[1.0, 0.0], [0.0, 1.0]]
  """
  if not os.path.isdir(path):
    raise ValueError(f"{path}: does not exist or is not a directory; expected a saved object's directory")
  file = os.path.join(path, manifest)
  for attempt in range(_ATTEMPTS + 1):
    with _locked(path, shared=True, create=False) if attempt == _ATTEMPTS else contextlib.nullcontext():
      raw = _read_bytes(file)
      if raw is None:
        raise ValueError(f"{file}: missing; {path!r} holds no saved object (or its first save has not completed)")
      header = _parse(file, raw, check)
      try:
        if "checksum" in header:
          return header, {e["name"]: _read_npy(path, e, manifest, mmap) for e in header["arrays"]}
        if read_legacy is None:
          raise ValueError(f"{file}: expected a checksum, got a manifest without one")
        return header, read_legacy(header)
      except (_Changed, FileNotFoundError) as e:
        problem = str(e) if isinstance(e, _Changed) else f"{e.filename}: missing (named by {manifest})"
        if _read_bytes(file) == raw:  # the same save: damage, not a race
          raise ValueError(problem) from None
  raise ValueError(problem)
