"""hashjax.io's save protocol, as models and indexes use it: loads during concurrent saves, concurrent writers,
killed saves and damaged files, checked against the saved objects and files read by hand."""

import hashlib
import json
import os
import pickle
import subprocess
import sys
from io import BytesIO

import numpy as np
import pytest

from hashjax import baselines, codes, index, io, models


def _model(num_bits, seed):
  """A tiny LSH model (hyperplanes drawn here: nothing to compile)."""
  rng = np.random.default_rng(seed)
  x = rng.random((6, 5), dtype=np.float32)
  params = baselines.LSHParams(mean=x.mean(0), projection=rng.normal(size=(5, num_bits)).astype(np.float32))
  return models.from_baseline("lsh", params, train_features=x)


def _multi_index(n, num_bits, num_tables, seed):
  bits = np.random.default_rng(seed).integers(0, 2, (n, num_bits))
  return index.build_multi_index(np.asarray(codes.pack_bits(bits)), num_bits=num_bits, num_tables=num_tables)


# kind: (two different versions, save, load, manifest file)
_KINDS = {
    "model": (lambda: (_model(8, 0), _model(40, 1)), models.save_model, models.load_model, "model.json"),
    "index": (lambda: (_multi_index(40, 32, 2, 0), _multi_index(30, 64, 3, 1)), index.save, index.load,
              "manifest.json"),
}


def _fields(obj):
  """Every value of a model or an index, arrays as numpy arrays, in order."""
  if isinstance(obj, models.Model):
    return [obj.kind, obj.num_bits, obj.dim, obj.feature_range, *(np.asarray(p) for p in obj.params)]
  out = [type(obj).__name__]
  for f in obj:
    out.extend(f if isinstance(f, tuple) else [f])
  return out


def _which(obj, versions):
  """The one of ``versions`` that ``obj`` equals in every value (array dtypes and contents included)."""
  def same(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
      return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    return a == b
  got = _fields(obj)
  matches = [i for i, v in enumerate(versions) if len(_fields(v)) == len(got)
             and all(same(np.asarray(a) if hasattr(a, "dtype") else a, np.asarray(b) if hasattr(b, "dtype") else b)
                     for a, b in zip(got, _fields(v)))]
  assert len(matches) == 1, f"loaded {obj!r} is none of the saved versions"
  return matches[0]


def _manifest(path, name):
  with open(os.path.join(path, name)) as f:
    return json.load(f)


def _listing(path):
  """``(data folders, other entries)`` of a saved object's directory."""
  names = sorted(os.listdir(path))
  return [n for n in names if n.startswith("data-")], [n for n in names if not n.startswith("data-")]


# A writer process running hashjax.io alone (no jax import: it starts at once): it saves the header and arrays
# that model.save / index.save wrote, alternately, for the given seconds, and prints how many saves it made.
_WRITER = """
import importlib.util, pickle, sys, time
spec = importlib.util.spec_from_file_location("hashjax_io", sys.argv[1])
io = importlib.util.module_from_spec(spec)
spec.loader.exec_module(io)
with open(sys.argv[2], "rb") as f:
  versions, manifest = pickle.load(f)
path, i, seconds = sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
print("ready", flush=True)
end, count = time.monotonic() + seconds, 0
while time.monotonic() < end:
  arrays, header = versions[(i + count) % 2]
  io.save_arrays(path, arrays, header, manifest=manifest)
  count += 1
print(count, flush=True)
"""


def _record(path, manifest):
  """``(arrays, header)`` of a saved object, read by hand from its manifest and .npy files."""
  m = _manifest(path, manifest)
  arrays = {e["name"]: np.load(os.path.join(path, e["file"])) for e in m["arrays"]}
  return arrays, {k: v for k, v in m.items() if k not in ("data", "arrays", "checksum")}


@pytest.mark.parametrize("kind", sorted(_KINDS))
def test_loads_during_two_concurrent_writers_see_one_complete_version(kind, tmp_path):
  make, save, load, manifest = _KINDS[kind]
  versions = make()
  staged = [_record(save(v, tmp_path / f"staged{i}"), manifest) for i, v in enumerate(versions)]
  with open(tmp_path / "versions.pkl", "wb") as f:
    pickle.dump((staged, manifest), f)
  path = str(tmp_path / "obj")
  save(versions[0], path)
  writers = [subprocess.Popen([sys.executable, "-c", _WRITER, io.__file__, str(tmp_path / "versions.pkl"), path,
                               str(start), "1.0"], stdout=subprocess.PIPE, text=True) for start in (0, 1)]
  try:
    assert [w.stdout.readline().strip() for w in writers] == ["ready", "ready"]
    seen = [0, 0]
    while any(w.poll() is None for w in writers):
      seen[_which(load(path), versions)] += 1  # never an error, never a mix of the two
  finally:
    for w in writers:
      w.wait(timeout=60)
  saves = [int(w.stdout.read().strip()) for w in writers]
  assert [w.returncode for w in writers] == [0, 0] and min(saves) >= 3 and sum(seen) >= 10, (saves, seen)
  last = _which(load(path), versions)  # the last complete save
  data, rest = _listing(path)
  assert rest == sorted([".lock", manifest]) and 1 <= len(data) <= 2
  assert _manifest(path, manifest)["data"] in data
  assert _fields(load(path))[0] == _fields(versions[last])[0]


@pytest.mark.parametrize("kind", sorted(_KINDS))
def test_a_load_whose_data_folder_is_removed_meanwhile_reads_the_new_version(kind, tmp_path, monkeypatch):
  # Two saves complete while a load reads (from within its first numpy parse, twice): the folder it read from is
  # removed, its manifest replaced; it starts over and returns the newest version whole.
  make, save, load, manifest = _KINDS[kind]
  old, new = make()
  path = save(old, tmp_path / "obj")
  real_load, calls = np.load, []

  def saving_meanwhile(*args, **kwargs):
    calls.append(1)
    if len(calls) <= 2:
      save(new, path)
      save(new, path)
    return real_load(*args, **kwargs)

  monkeypatch.setattr(np, "load", saving_meanwhile)
  got = load(path)
  monkeypatch.undo()
  assert _which(got, (old, new)) == 1
  assert len(calls) == 2 + len(_manifest(path, manifest)["arrays"])  # two attempts cut short, one whole


class PowerCut(BaseException):
  """A crash inside a save: not an Exception, so no ``except Exception`` cleanup runs."""


@pytest.mark.parametrize("kind", sorted(_KINDS))
def test_a_crashed_or_killed_save_leaves_the_old_version_and_the_next_save_clears_it(kind, tmp_path, monkeypatch):
  make, save, load, manifest = _KINDS[kind]
  old, new = make()
  path = save(old, tmp_path / "obj")
  real_write, real_replace, calls = np.lib.format.write_array, os.replace, []

  def crash_on_second_array(*args, **kwargs):
    calls.append(1)
    if len(calls) == 2:
      raise PowerCut()
    return real_write(*args, **kwargs)

  def crash_on_manifest(src, dst):
    if str(dst).endswith(manifest):
      raise PowerCut()
    real_replace(src, dst)

  for target, name, fake in ((np.lib.format, "write_array", crash_on_second_array), (os, "replace", crash_on_manifest)):
    monkeypatch.setattr(target, name, fake)
    with pytest.raises(PowerCut):
      save(new, path)
    monkeypatch.undo()
    assert _which(load(path), (old, new)) == 0
  # What a SIGKILL leaves: a half-written temporary folder and a data folder no manifest names.
  os.makedirs(os.path.join(path, ".tmp-0123456789abcdef"))
  with open(os.path.join(path, ".tmp-0123456789abcdef", "x.npy"), "wb") as f:
    f.write(b"\x93NUMPY")
  os.makedirs(os.path.join(path, "data-fedcba9876543210"))
  with open(os.path.join(path, ".tmp-ab3_x9zq"), "wb") as f:  # a manifest's temp file, as mkstemp named it
    f.write(b"{")
  assert _which(load(path), (old, new)) == 0
  previous = _manifest(path, manifest)["data"]
  save(new, path)
  assert _which(load(path), (old, new)) == 1
  data, rest = _listing(path)
  assert rest == sorted([".lock", manifest]) and data == sorted([previous, _manifest(path, manifest)["data"]])


def _resign(path, manifest, entry, blob):
  """Rewrites ``entry``'s file with ``blob`` and the manifest with the new sha256 and checksum, as a consistent
  edit would (the checksum: sha256 of the manifest's other fields as compact, key-sorted JSON)."""
  m = _manifest(path, manifest)
  with open(os.path.join(path, entry["file"]), "wb") as f:
    f.write(blob)
  next(e for e in m["arrays"] if e["name"] == entry["name"])["sha256"] = hashlib.sha256(blob).hexdigest()
  body = {k: v for k, v in m.items() if k != "checksum"}
  m["checksum"] = hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
  with open(os.path.join(path, manifest), "w") as f:
    json.dump(m, f)


@pytest.mark.parametrize("kind", sorted(_KINDS))
def test_damaged_or_edited_files_are_refused_by_name(kind, tmp_path):
  make, save, load, manifest = _KINDS[kind]
  obj = make()[0]
  path = save(obj, tmp_path / "obj")
  mfile = os.path.join(path, manifest)
  m = _manifest(path, manifest)
  entry = m["arrays"][-1]
  file = os.path.join(path, entry["file"])
  with open(file, "rb") as f:
    original = f.read()
  with open(mfile, "rb") as f:
    original_manifest = f.read()

  def refused(pattern):
    with pytest.raises(ValueError, match=pattern):
      load(path)

  flipped = bytearray(original)
  flipped[-1] ^= 0x10
  with open(file, "wb") as f:
    f.write(bytes(flipped))
  refused(f"{file}: checksum mismatch")
  os.remove(file)
  refused(f"{file}: missing")
  with open(file, "wb") as f:
    f.write(original)
  edits = [{"num_bits": m["num_bits"] + 1}, {"arrays": m["arrays"][:-1]}]
  edits.append({"kind": "pca"} if kind == "model" else {"count": m["count"] - 1})
  for edit in edits:
    with open(mfile, "w") as f:
      json.dump({**m, **edit}, f)
    refused(f"{mfile}: checksum mismatch")
  with open(mfile, "wb") as f:
    f.write(original_manifest)
  assert _which(load(path), (obj,)) == 0
  if kind == "model":  # NaN parameters with consistent checksums: refused naming the file and the array
    value = np.load(file)
    value.flat[0] = np.nan
    buf = BytesIO()
    np.save(buf, value)
    _resign(path, manifest, entry, buf.getvalue())
    refused(f"{file}: array '{entry['name']}': expected finite values")
    buf = BytesIO()  # integer parameters of a float field: refused naming the array
    np.save(buf, np.ones(value.shape, np.int32))
    _resign(path, manifest, entry, buf.getvalue())
    refused(f"{mfile}: does not describe a usable model: {entry['name']}: expected floating-point values, "
            f"got dtype int32")
  # A consistently signed manifest that names a file outside the directory: refused before any array is read.
  outside = {**m, "arrays": [{**e, "file": "../" + e["file"]} if e["name"] == entry["name"] else e
                             for e in m["arrays"]]}
  body = {k: v for k, v in outside.items() if k != "checksum"}
  outside["checksum"] = hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
  with open(mfile, "w") as f:
    json.dump(outside, f)
  refused(f"{mfile}: array '{entry['name']}': expected a file inside the directory, got '../")


def test_a_save_never_deletes_files_it_did_not_write(tmp_path):
  # Names that look like ours but are not the exact forms this module writes are a user's: refused, not deleted.
  for name in ("data-notes.txt", ".tmp-mine"):
    d = tmp_path / name.strip(".")
    d.mkdir()
    (d / name).write_text("mine")
    with pytest.raises(ValueError, match="holds files that are not a saved"):
      io.save_arrays(str(d), {"a": np.arange(3)}, {"kind": "demo"})
    assert (d / name).read_text() == "mine"


def test_bad_array_names_and_headers_are_refused_before_anything_is_written(tmp_path):
  with pytest.raises(ValueError, match="arrays: expected names that map to distinct files"):
    io.save_arrays(str(tmp_path / "a"), {"a/b": np.zeros(1), "a.b": np.ones(1)}, {"kind": "demo"})
  with pytest.raises(ValueError, match="header: expected JSON fields without NaN"):
    io.save_arrays(str(tmp_path / "b"), {"a": np.zeros(1)}, {"kind": float("nan")})
  assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_written_files_get_the_mode_open_gives_them_under_the_umask(tmp_path):
  old = os.umask(0o022)
  try:
    io.atomic_write_json(str(tmp_path / "r.json"), {"a": 1})
    path = io.save_arrays(str(tmp_path / "x"), {"w": np.eye(2)}, {"format": "demo"})
    os.umask(0o027)
    io.atomic_write_bytes(str(tmp_path / "g.bin"), b"abc")
    os.umask(0o002)  # a folder shared by a group: its members may take the lock to save
    shared = io.save_arrays(str(tmp_path / "shared"), {"w": np.eye(2)}, {"format": "demo"})
  finally:
    os.umask(old)
  mode = lambda p: os.stat(p).st_mode & 0o777
  assert mode(tmp_path / "r.json") == 0o644  # readable by others, as open() would leave it
  assert mode(os.path.join(path, io.MANIFEST)) == 0o644
  assert mode(tmp_path / "g.bin") == 0o640
  assert mode(os.path.join(shared, io.MANIFEST)) == mode(os.path.join(shared, io.LOCK_FILE)) == 0o664
