"""hashjax.index save/load (atomic, versioned, checksummed) and faiss interop, against direct numpy checks."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from brute_force import ref_distances as _ref_distances
from hashjax import codes, index
from hashjax.index import storage


def _codes(rng, n, num_bits):
  return np.asarray(codes.pack_bits(rng.integers(0, 2, (n, num_bits))))


def _same(a, b):
  """Two saved objects hold equal fields (arrays by value and dtype)."""
  assert type(a) is type(b)
  for fa, fb in zip(a, b):
    if isinstance(fa, tuple):
      assert len(fa) == len(fb)
      for x, y in zip(fa, fb):
        assert x.dtype == y.dtype and np.array_equal(x, y)
    elif isinstance(fa, np.ndarray):
      assert fa.dtype == fb.dtype and np.array_equal(fa, fb)
    else:
      assert fa == fb


def test_round_trip_of_every_kind(tmp_path):
  rng = np.random.default_rng(0)
  x = _codes(rng, 700, 70)
  q = _codes(rng, 9, 70)
  objs = [index.build_multi_index(x, num_bits=70, num_tables=3),  # sparse tables
          index.build_multi_index(x, num_bits=70),  # dense tables
          index.build_inverted_index(x[:, :1], num_bits=32),
          index.build_inverted_index(x[:, :1] & np.uint32(0xFFF), num_bits=12),
          index.CodeDatabase(x, 70)]
  for j, obj in enumerate(objs):
    path = index.save(obj, tmp_path / f"obj{j}")
    back = index.load(path)
    _same(obj, back)
  back = index.load(tmp_path / "obj0")
  got, want = index.multi_index_knn(back, q, 5, method="probe"), index.multi_index_knn(objs[0], q, 5, method="probe")
  assert all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(got, want))
  manifest = json.loads((tmp_path / "obj4" / "manifest.json").read_text())
  assert (manifest["kind"], manifest["num_bits"], manifest["count"], manifest["version"]) == ("codes", 70, 700, 1)


def test_memory_mapped_load_searches_without_reading_the_codes(tmp_path, monkeypatch):
  from hashjax import search  # pylint: disable=g-import-not-at-top
  from hashjax.index import multi  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(multi, "SCAN_BELOW_WORDS", 0)  # probed, as a larger database would be, not scanned outright
  rng = np.random.default_rng(3)
  x, q = _codes(rng, 5000, 64), _codes(rng, 7, 64)
  db_path = index.save(index.CodeDatabase(x, 64), tmp_path / "db")
  mih_path = index.save(index.build_multi_index(x, num_bits=64, num_tables=3), tmp_path / "mih")
  db, mih = index.load(db_path, mmap=True), index.load(mih_path, mmap=True)
  assert isinstance(db.words, np.memmap) and not db.words.flags.writeable
  assert isinstance(mih.db_words, np.memmap) and isinstance(mih.entries, np.memmap)
  _same(db, index.CodeDatabase(x, 64))
  d = _ref_distances(q, x)
  want_i = np.stack([np.lexsort((np.arange(x.shape[0]), row))[:10] for row in d])
  want_d = np.take_along_axis(d, want_i, axis=1)
  # chunk_size 1024: the scan streams the mapped codes in chunks of 1,024, merged by (distance, index).
  for got in (search.knn(q, db.words, 10), search.knn(q, db.words, 10, chunk_size=1024),
              index.multi_index_knn(mih, q, 10)):
    np.testing.assert_array_equal(np.asarray(got[0]), want_d)
    np.testing.assert_array_equal(np.asarray(got[1]), want_i)
  manifest = json.loads((tmp_path / "db" / "manifest.json").read_text())
  words = tmp_path / "db" / manifest["data"] / "words.npy"
  raw = bytearray(words.read_bytes())
  raw[-3] ^= 1
  words.write_bytes(bytes(raw))
  with pytest.raises(ValueError, match="words.npy: checksum mismatch"):
    index.load(db_path, mmap=True)
  with pytest.raises(ValueError, match="mmap: expected a bool"):
    index.load(mih_path, mmap=1)


def test_a_multi_index_is_version_3_and_earlier_ones_are_refused(tmp_path, monkeypatch):
  from hashjax.index import multi  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(multi, "SCAN_BELOW_WORDS", 0)  # probed, as a larger database would be, not scanned outright
  # Versions 1 and 2 held tables of items where version 3 holds entries with fingerprints: a multi-index manifest
  # of another version is refused (a code database stays version 1). With or without the sorted copy, it loads.
  rng = np.random.default_rng(4)
  x, q = _codes(rng, 3000, 70), _codes(rng, 9, 70)
  for name, reorder in (("sorted", True), ("plain", False)):
    idx = index.build_multi_index(x, num_bits=70, reorder=reorder)
    path = index.save(idx, tmp_path / name)
    mfile = os.path.join(path, "manifest.json")
    manifest = json.loads(open(mfile).read())
    names = [a["name"] for a in manifest["arrays"]]
    assert manifest["version"] == 3 and "entries" in names and ("sorted_words" in names) == reorder
    want = [np.asarray(a) for a in index.multi_index_knn(idx, q, 7)]
    for mmap in (False, True):
      back = index.load(path, mmap=mmap)
      _same(idx, back)
      assert isinstance(back.entries, np.memmap) == mmap
      assert isinstance(back.sorted_words, np.memmap) == mmap if reorder else back.sorted_words is None
      assert all(np.array_equal(np.asarray(a), b) for a, b in zip(index.multi_index_knn(back, q, 7), want))
    for version in (1, 2):
      with open(mfile, "w") as f:
        json.dump({**manifest, "version": version}, f)
      with pytest.raises(ValueError, match=f"expected format 'hashjax-index' version 3\\), got format "
                                           f"'hashjax-index' version {version}"):
        index.load(path)


def test_a_multi_index_whose_tables_point_outside_the_database_is_refused(tmp_path, monkeypatch):
  # Files edited consistently (checksums that match) but whose tables the compiled search would follow outside its
  # arrays: an entry's item past N, offsets that go back, a substring too long to key. Each is refused by name.
  monkeypatch.setattr(storage, "_CHECK_ROWS", 1000)  # the items are checked in several slices of rows
  rng = np.random.default_rng(6)
  n = 3000
  idx = index.build_multi_index(_codes(rng, n, 40), num_bits=40, num_tables=3)
  assert idx.id_bits == 12 and idx.sorted_words is None
  mfile = "manifest.json: inconsistent saved index: "
  for table, row, item in ((2, 0, n), (2, n - 1, n), (0, n - 1, (1 << 12) - 1), (1, 1500, n)):
    entries = np.array(idx.entries)
    value = int.from_bytes(entries[table, row].tobytes(), "little")
    value = (value >> 12 << 12) | item
    entries[table, row] = np.frombuffer(value.to_bytes(7, "little"), np.uint8)
    path = index.save(idx._replace(entries=entries), tmp_path / f"item{table}-{row}-{item}")
    with pytest.raises(ValueError, match=f"{mfile}an entry's item {item} is not below count {n}"):
      index.load(path)
  offsets = np.array(idx.offsets[1])
  u = int(np.flatnonzero(np.diff(offsets) > 0)[0])
  offsets[u + 1] -= 1  # bucket u loses its last entry, bucket u + 1 starts one too early ...
  assert index.load(index.save(idx._replace(offsets=(idx.offsets[0], offsets, idx.offsets[2])), tmp_path / "o1"))
  offsets[u + 1] = offsets[u] - 1  # ... but a bucket that ends before it starts is refused
  path = index.save(idx._replace(offsets=(idx.offsets[0], offsets, idx.offsets[2])), tmp_path / "o2")
  with pytest.raises(ValueError, match=f"{mfile}table 1's offsets"):
    index.load(path)
  offsets = np.array(idx.offsets[0])
  offsets[0] = -1  # the first bucket starts before the entries
  path = index.save(idx._replace(offsets=(offsets, *idx.offsets[1:])), tmp_path / "o3")
  with pytest.raises(ValueError, match=f"{mfile}table 0's offsets"):
    index.load(path)
  path = index.save(idx._replace(offsets=(idx.offsets[0].astype(np.int64), *idx.offsets[1:])), tmp_path / "o4")
  with pytest.raises(ValueError, match=f"{mfile}table 0's keys \\(uint32\\) or offsets \\(int64\\)"):
    index.load(path)
  # Codes of another dtype whose shape fits (uint64 words of 64-bit codes): the search would read them as wider lanes
  # than the queries'.
  path = index.save(idx._replace(db_words=idx.db_words.astype(np.uint64)), tmp_path / "u64")
  with pytest.raises(ValueError, match=f"{mfile}db_words of shape \\({n}, 2\\) and dtype uint64"):
    index.load(path)
  wide = index.build_multi_index(_codes(rng, 50, 66), num_bits=66, num_tables=3)
  path = index.save(wide._replace(bounds=np.array([0, 33, 34, 66])), tmp_path / "wide")
  with pytest.raises(ValueError, match=f"{mfile}bounds \\[0, 33, 34, 66\\]"):
    index.load(path)


def test_save_over_an_index_replaces_it_and_removes_the_old_data(tmp_path):
  rng = np.random.default_rng(1)
  a, b = index.CodeDatabase(_codes(rng, 50, 64), 64), index.CodeDatabase(_codes(rng, 80, 40), 40)
  path = tmp_path / "db"
  datas = []
  for obj in (a, b, a):
    index.save(obj, path)
    _same(index.load(path), obj)
    datas.append(json.loads((path / "manifest.json").read_text())["data"])
  # The current data folder and the previous one (a reader may still read it) stay; older ones go.
  assert sorted(p.name for p in path.iterdir()) == sorted([".lock", "manifest.json", *datas[1:]])
  with pytest.raises(ValueError, match="not a saved index"):
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    index.save(a, tmp_path / "other")
  assert (tmp_path / "other" / "notes.txt").read_text() == "mine"
  with pytest.raises(ValueError, match="not a directory"):
    index.save(a, tmp_path / "other" / "notes.txt")


def _saved(tmp_path):
  rng = np.random.default_rng(2)
  idx = index.build_multi_index(_codes(rng, 300, 64), num_bits=64, num_tables=4)
  path = index.save(idx, tmp_path / "mih")
  return idx, path, json.loads(open(os.path.join(path, "manifest.json")).read())


def test_truncated_altered_or_missing_files_are_refused(tmp_path):
  idx, path, manifest = _saved(tmp_path)
  items = os.path.join(path, manifest["data"], "entries.npy")
  original = open(items, "rb").read()

  def expect(match):
    with pytest.raises(ValueError, match=match):
      index.load(path)

  with open(items, "wb") as f:
    f.write(original[:len(original) // 2])  # truncated
  expect("entries.npy: checksum mismatch")
  altered = bytearray(original)
  altered[-5] ^= 1
  with open(items, "wb") as f:
    f.write(bytes(altered))
  expect("entries.npy: checksum mismatch")
  os.remove(items)
  expect("entries.npy: missing")
  with open(items, "wb") as f:
    f.write(original)
  _same(index.load(path), idx)

  mfile = os.path.join(path, "manifest.json")
  text = open(mfile).read()
  for change, match in (({"version": 2}, "version 2"), ({"num_bits": 63}, "manifest.json: checksum mismatch"),
                        ({"format": "npz"}, "not a hashjax index")):
    with open(mfile, "w") as f:
      json.dump({**manifest, **change}, f)
    expect(match)
  with open(mfile, "w") as f:
    f.write(text[:40])
  expect("manifest.json: not valid JSON")
  os.remove(mfile)
  expect("manifest.json: missing")
  with pytest.raises(ValueError, match="does not exist"):
    index.load(tmp_path / "nowhere")


class PowerCut(BaseException):
  """A crash in the middle of a save: not an Exception, so no ``except Exception`` cleanup runs."""


def test_a_crash_during_save_leaves_the_old_index(tmp_path, monkeypatch):
  idx, path, _ = _saved(tmp_path)
  new = index.build_multi_index(np.arange(5, dtype=np.uint32)[:, None], num_bits=3)  # several arrays
  real_replace, real_write = os.replace, np.lib.format.write_array

  def crash_on_manifest(src, dst):
    if str(dst).endswith("manifest.json"):
      raise PowerCut()
    real_replace(src, dst)

  calls = []

  def crash_on_second_array(*args, **kwargs):
    calls.append(1)
    if len(calls) == 2:
      raise PowerCut()
    return real_write(*args, **kwargs)

  for target, fake in ((os, crash_on_manifest), (np.lib.format, crash_on_second_array)):
    name = "replace" if target is os else "write_array"
    monkeypatch.setattr(target, name, fake)
    with pytest.raises(PowerCut):
      index.save(new, path)
    monkeypatch.undo()
    _same(index.load(path), idx)  # the old index, intact
  index.save(new, path)  # the next save completes and clears what the crashes left
  _same(index.load(path), new)
  listed = sorted(os.listdir(path))
  assert len(listed) == 4 and listed[0] == ".lock" and listed[-1] == "manifest.json"  # + this save's, previous data


_CHILD = """
import sys
import numpy as np
from hashjax import index
rng = np.random.default_rng(0)
dbs = [index.CodeDatabase(rng.integers(0, 2**32, (200_000, 2), dtype=np.uint32), 64),
       index.CodeDatabase(rng.integers(0, 2**32, (150_000, 3), dtype=np.uint32), 96)]
index.save(dbs[0], sys.argv[1])
print("saved", flush=True)
for i in range(10**6):
  index.save(dbs[(i + 1) % 2], sys.argv[1])
"""


def test_a_killed_save_leaves_a_loadable_index(tmp_path):
  # A process saving in a loop is killed (SIGKILL) at an arbitrary moment; the directory loads as one of the
  # two complete databases it was alternating between.
  path = str(tmp_path / "db")
  root = os.path.dirname(os.path.dirname(os.path.abspath(index.__file__)))
  env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", ""), "JAX_PLATFORMS": "cpu"}
  child = subprocess.Popen([sys.executable, "-c", _CHILD, path], stdout=subprocess.PIPE, env=env)
  try:
    assert child.stdout.readline().strip() == b"saved"
    time.sleep(0.7)
  finally:
    child.send_signal(signal.SIGKILL)
    child.wait()
  rng = np.random.default_rng(0)
  a, b = rng.integers(0, 2**32, (200_000, 2), dtype=np.uint32), rng.integers(0, 2**32, (150_000, 3), dtype=np.uint32)
  back = index.load(path)
  assert (back.num_bits, back.words.shape) in ((64, a.shape), (96, b.shape))
  assert np.array_equal(back.words, a if back.num_bits == 64 else b)


def test_save_and_load_bad_inputs(tmp_path):
  x = np.zeros((4, 2), np.uint32)
  cases = [
      ("obj", lambda: index.save({"words": x}, tmp_path / "a")),
      ("num_bits", lambda: index.save(index.CodeDatabase(x, 96), tmp_path / "a")),
      ("obj.words", lambda: index.save(index.CodeDatabase(x.astype(np.int32), 64), tmp_path / "a")),
      ("obj.words", lambda: index.save(index.CodeDatabase(x | np.uint32(1 << 31), 63), tmp_path / "a")),
      ("directory", lambda: index.save(index.CodeDatabase(x, 64), 3)),
      ("directory", lambda: index.load(None)),
  ]
  for name, fn in cases:
    with pytest.raises(ValueError, match=name):
      fn()
  assert storage.FORMAT_VERSION == index.FORMAT_VERSION == 1


# ----------------------------------------------------------------------------
# faiss interop.


def test_faiss_byte_order_without_faiss():
  # Code bit j is bit j % 8 of byte j // 8 (numpy's packbits with bitorder="little"), for any length.
  rng = np.random.default_rng(3)
  for num_bits in (8, 33, 64, 70, 256):
    bits = rng.integers(0, 2, (6, num_bits))
    words = np.asarray(codes.pack_bits(bits))
    want = np.packbits(bits, axis=1, bitorder="little")
    got = index.to_faiss_codes(words, num_bits=num_bits)
    assert got.dtype == np.uint8 and np.array_equal(got, want)
    assert np.array_equal(index.from_faiss_codes(want, num_bits=num_bits), words)
  with pytest.raises(ValueError, match="codes"):
    index.from_faiss_codes(np.full((1, 2), 255, np.uint8), num_bits=12)  # bits past num_bits
  with pytest.raises(ValueError, match="num_bits"):
    index.from_faiss_codes(np.zeros((1, 2), np.uint8), num_bits=17)


def test_faiss_round_trip_and_distances():
  faiss = pytest.importorskip("faiss")
  rng = np.random.default_rng(4)
  for num_bits in (64, 70, 256):
    bits = rng.integers(0, 2, (120, num_bits))
    x = np.asarray(codes.pack_bits(bits))
    q = np.asarray(codes.pack_bits(rng.integers(0, 2, (7, num_bits))))
    fx = index.to_faiss(x, num_bits=num_bits)
    assert isinstance(fx, faiss.IndexBinaryFlat) and fx.d == 8 * -(-num_bits // 8) and fx.ntotal == 120
    # faiss's own binarisation of the +-1 codes gives the same bytes.
    if num_bits % 8 == 0:
      signs = np.ascontiguousarray((2.0 * bits - 1).astype(np.float32).ravel())
      own = np.zeros((120, fx.code_size), np.uint8)
      faiss.real_to_binary(num_bits * 120, faiss.swig_ptr(signs), faiss.swig_ptr(own))
      assert np.array_equal(own, index.to_faiss_codes(x, num_bits=num_bits))
    # faiss's Hamming distances are ours (every item of every query).
    dist, ids = fx.search(index.to_faiss_codes(q, num_bits=num_bits), 120)
    ref = _ref_distances(q, x)
    assert np.array_equal(dist, np.take_along_axis(ref, ids, axis=1))
    assert np.array_equal(np.sort(ids, axis=1), np.tile(np.arange(120), (7, 1)))
    back = index.from_faiss(fx, num_bits=num_bits)
    assert back.num_bits == num_bits and np.array_equal(back.words, x)
  # Indexes and databases export their codes, in item order.
  x = np.asarray(codes.pack_bits(rng.integers(0, 2, (300, 32))))
  for obj in (index.build_multi_index(x, num_bits=32), index.build_inverted_index(x, num_bits=32),
              index.CodeDatabase(x, 32)):
    assert np.array_equal(index.from_faiss(index.to_faiss(obj)).words, x)
  # An index built in faiss from its own bytes imports with d bits by default.
  fx = faiss.IndexBinaryFlat(16)
  fx.add(np.array([[1, 128], [255, 0]], np.uint8))
  db = index.from_faiss(fx)
  assert db.num_bits == 16 and db.words[:, 0].tolist() == [1 | 128 << 8, 255]
  cases = [
      ("faiss_index", lambda: index.from_faiss(faiss.IndexFlatL2(4))),
      ("faiss_index", lambda: index.from_faiss(faiss.IndexBinaryFlat(8))),  # empty
      ("num_bits", lambda: index.from_faiss(fx, num_bits=17)),
      ("codes", lambda: index.from_faiss(fx, num_bits=9)),  # bit 15 set in item 0
      ("num_bits", lambda: index.to_faiss(x)),
      ("num_bits", lambda: index.to_faiss(index.CodeDatabase(x, 32), num_bits=31)),
  ]
  for name, fn in cases:
    with pytest.raises(ValueError, match=name):
      fn()
