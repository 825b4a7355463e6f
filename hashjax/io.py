"""Atomic file output: write to a temporary file beside the target, then rename.

A reader never sees a half-written file, and a crash mid-write leaves the
file as it was.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any


def atomic_write_bytes(path: str, data: bytes) -> None:
  """Writes ``data`` to ``path`` atomically (same-directory temp file + ``os.replace``).

  >>> import os, tempfile
  >>> p = os.path.join(tempfile.mkdtemp(), "x.bin")
  >>> atomic_write_bytes(p, b"abc")
  >>> with open(p, "rb") as f:
  ...   f.read()
  b'abc'
  """
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise


def atomic_write_json(path: str, obj: Any) -> None:
  """Writes ``obj`` as indented JSON to ``path`` atomically.

  >>> import os, tempfile
  >>> p = os.path.join(tempfile.mkdtemp(), "r.json")
  >>> atomic_write_json(p, {"ap": 0.5})
  >>> with open(p) as f:
  ...   json.load(f)
  {'ap': 0.5}
  """
  atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode("utf-8"))
