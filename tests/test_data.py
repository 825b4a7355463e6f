"""hashjax.data against independent references (hand-written parsers, loops over pairs, scipy)."""

import gc
import gzip
import itertools
import os
import pathlib
import pickle
import shutil
import struct
import subprocess
import sys
import warnings

import jax
import numpy as np
import pytest
from scipy.spatial.distance import pdist

from hashjax import data
from hashjax.data import affinity as affinity_module

MNIST_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
REPO = pathlib.Path(__file__).resolve().parent.parent
SHARED_DATA = pathlib.Path(os.environ.get("HASHJAX_SHARED_DATA", REPO.parent / "shared" / "data"))


def _shared(sub):
  folder = SHARED_DATA / sub
  if not folder.is_dir():
    pytest.skip(f"shared data folder {folder} is absent (set HASHJAX_SHARED_DATA to the folder "
                "holding letor4_mq2008/ and mslr_web_tiny/)")
  return folder


@pytest.fixture(scope="module")
def mnist():
  return data.load_mnist_t10k()


# ----------------------------------------------------------------------------- IDX / MNIST


def _write_idx(path, array, type_code, *, compress=False, tail=b""):
  big = array.astype(array.dtype.newbyteorder(">"))
  raw = bytes([0, 0, type_code, array.ndim]) + b"".join(struct.pack(">I", n) for n in array.shape)
  raw += big.tobytes() + tail
  path.write_bytes(gzip.compress(raw) if compress else raw)


@pytest.mark.parametrize("dtype,code", [(np.uint8, 0x08), (np.int8, 0x09), (np.int16, 0x0B),
                                        (np.int32, 0x0C), (np.float32, 0x0D), (np.float64, 0x0E)])
@pytest.mark.parametrize("compress", [False, True])
def test_read_idx_round_trips_every_type(tmp_path, dtype, code, compress):
  rng = np.random.default_rng(code)
  array = (rng.normal(size=(3, 4, 5)) * 50).astype(dtype)
  path = tmp_path / "a.idx"  # no .gz suffix even when compressed: detection is by magic bytes
  _write_idx(path, array, code, compress=compress)
  back = data.read_idx(path)
  assert back.dtype == np.dtype(dtype) and back.dtype.isnative
  np.testing.assert_array_equal(back, array)


def test_read_idx_rejects_bad_files(tmp_path):
  good = np.arange(12, dtype=np.uint8).reshape(3, 4)
  cases = {
      "magic": bytes([1, 0, 8, 2]) + struct.pack(">II", 3, 4) + good.tobytes(),
      "type": bytes([0, 0, 7, 2]) + struct.pack(">II", 3, 4) + good.tobytes(),
      "zero_dims": bytes([0, 0, 8, 0]) + good.tobytes(),
      "short_header": bytes([0, 0, 8, 3]) + struct.pack(">I", 3),
      "truncated": bytes([0, 0, 8, 2]) + struct.pack(">II", 3, 4) + good.tobytes()[:-1],
      "extra": bytes([0, 0, 8, 2]) + struct.pack(">II", 3, 4) + good.tobytes() + b"\0",
      "tiny": b"\0\0",
  }
  for name, raw in cases.items():
    path = tmp_path / name
    path.write_bytes(raw)
    with pytest.raises(ValueError, match="path"):
      data.read_idx(path)
  truncated_gz = gzip.compress(cases["extra"])[:-10]
  (tmp_path / "bad.gz").write_bytes(truncated_gz)
  with pytest.raises(ValueError, match="path.*gzip"):
    data.read_idx(tmp_path / "bad.gz")
  with pytest.raises(FileNotFoundError):
    data.read_idx(tmp_path / "missing.idx")


def test_mnist_t10k_known_counts_and_raw_bytes(mnist):
  features, labels = mnist
  assert features.shape == (10000, 784) and features.dtype == np.float32
  assert labels.shape == (10000,) and labels.dtype == np.int32
  assert np.bincount(labels, minlength=10).tolist() == MNIST_COUNTS
  assert labels[0] == 7
  assert features.min() == 0.0 and features.max() == 1.0
  # Independent parse: fixed 16-byte header, row-major pixels.
  with gzip.open(data.MNIST_T10K_DIR / "t10k-images-idx3-ubyte.gz") as f:
    raw = f.read()
  assert struct.unpack(">IIII", raw[:16]) == (2051, 10000, 28, 28)
  pixels = np.frombuffer(raw, np.uint8, offset=16).reshape(10000, 784)
  np.testing.assert_array_equal(features, pixels.astype(np.float32) / 255)
  raw_features, raw_labels = data.load_mnist_t10k(scale=False)
  np.testing.assert_array_equal(raw_features, pixels.astype(np.float32))
  np.testing.assert_array_equal(raw_labels, labels)


def test_mnist_t10k_reports_corrupt_or_wrong_files(tmp_path):
  images, labels = data.MNIST_T10K_DIR / "t10k-images-idx3-ubyte.gz", data.MNIST_T10K_DIR / "t10k-labels-idx1-ubyte.gz"
  # Truncated images.
  bad = tmp_path / "truncated"
  bad.mkdir()
  (bad / images.name).write_bytes(images.read_bytes()[:100_000])
  shutil.copy(labels, bad / labels.name)
  with pytest.raises(ValueError, match="path"):
    data.load_mnist_t10k(data_dir=bad)
  # Valid IDX files of the wrong shape / label range.
  wrong = tmp_path / "wrong"
  wrong.mkdir()
  _write_idx(wrong / images.name, np.zeros((5, 28, 28), np.uint8), 0x08, compress=True)
  shutil.copy(labels, wrong / labels.name)
  with pytest.raises(ValueError, match="data_dir"):
    data.load_mnist_t10k(data_dir=wrong)
  shutil.copy(images, wrong / images.name)
  _write_idx(wrong / labels.name, np.full(10000, 10, np.uint8), 0x08, compress=True)
  with pytest.raises(ValueError, match="data_dir"):
    data.load_mnist_t10k(data_dir=wrong)
  with pytest.raises(ValueError, match="scale"):
    data.load_mnist_t10k(scale="yes")


def test_load_idx_images_and_npz_read_any_labelled_set(tmp_path, mnist):
  # A second image set in the IDX layout (here: 7 images of 5 x 4 pixels), read independently.
  rng = np.random.default_rng(0)
  images = rng.integers(0, 256, size=(7, 5, 4), dtype=np.uint8)
  labels = np.array([3, 0, 1, 1, 2, 9, 0], np.uint8)
  _write_idx(tmp_path / "img", images, 0x08, compress=True)
  _write_idx(tmp_path / "lab", labels, 0x08)
  x, y = data.load_idx_images(tmp_path / "img", tmp_path / "lab")
  assert x.dtype == np.float32 and x.shape == (7, 20) and y.dtype == np.int32
  np.testing.assert_array_equal(x * 255, images.reshape(7, 20).astype(np.float32))
  np.testing.assert_array_equal(y, labels)
  x_raw, _ = data.load_idx_images(tmp_path / "img", tmp_path / "lab", scale=False)
  assert x_raw.max() == images.max()
  # The embedded MNIST files through the general loader give the same arrays.
  x10k, y10k = data.load_idx_images(data.MNIST_T10K_DIR / "t10k-images-idx3-ubyte.gz",
                                    data.MNIST_T10K_DIR / "t10k-labels-idx1-ubyte.gz")
  np.testing.assert_array_equal(x10k, mnist[0])
  np.testing.assert_array_equal(y10k, mnist[1])
  # Bad pairs name the argument.
  _write_idx(tmp_path / "short", labels[:5], 0x08)
  with pytest.raises(ValueError, match="labels_path: expected one label per image"):
    data.load_idx_images(tmp_path / "img", tmp_path / "short")
  _write_idx(tmp_path / "flt", images.astype(np.float32), 0x0D)
  with pytest.raises(ValueError, match="images_path: scale=True"):
    data.load_idx_images(tmp_path / "flt", tmp_path / "lab")
  _write_idx(tmp_path / "nan", np.full((7, 2), np.nan, np.float32), 0x0D)
  with pytest.raises(ValueError, match="images_path: expected finite"):
    data.load_idx_images(tmp_path / "nan", tmp_path / "lab", scale=False)
  _write_idx(tmp_path / "neg", np.array([0, -1, 0, 0, 0, 0, 0], np.int8), 0x09)
  with pytest.raises(ValueError, match=r"labels_path: expected integer class labels in \[0, .*got values in \[-1, 0\]"):
    data.load_idx_images(tmp_path / "img", tmp_path / "neg")
  # npz: the same arrays back; missing keys and wrong label types are named.
  np.savez(tmp_path / "set.npz", features=images, labels=labels)
  x2, y2 = data.load_npz(tmp_path / "set.npz", scale=True)
  np.testing.assert_array_equal(x2, x)
  np.testing.assert_array_equal(y2, y)
  np.savez(tmp_path / "xy.npz", x=images, y=labels.astype(np.float32))
  with pytest.raises(ValueError, match="features_key / labels_key"):
    data.load_npz(tmp_path / "xy.npz")
  with pytest.raises(ValueError, match="path: expected integer class labels"):
    data.load_npz(tmp_path / "xy.npz", features_key="x", labels_key="y")


def test_load_digits_matches_sklearn():
  from sklearn.datasets import load_digits
  ref = load_digits()
  features, labels = data.load_digits()
  assert features.shape == (1797, 64) and features.dtype == np.float32 and labels.dtype == np.int32
  np.testing.assert_allclose(features, ref.data / 16.0, rtol=1e-7)
  np.testing.assert_array_equal(labels, ref.target)
  raw, _ = data.load_digits(scale=False)
  np.testing.assert_array_equal(raw, ref.data)


# ----------------------------------------------------------------------------- tfds (mocked)


@pytest.mark.parametrize("name,shape", [("mnist", (28, 28, 1)), ("cifar10", (32, 32, 3))])
def test_load_tfds_under_mock_data_matches_the_data_source(tmp_path, name, shape):
  tfds = pytest.importorskip("tensorflow_datasets")
  with tfds.testing.mock_data(num_examples=6):
    features, labels = data.load_tfds(name, split="test", data_dir=tmp_path)
    raw_features, _ = data.load_tfds(name, split="test", scale=False)
    source = tfds.data_source(name, split="test", builder_kwargs={"file_format": "array_record"})
    ref = [source[i] for i in range(len(source))]
  assert features.shape == (6, int(np.prod(shape))) and features.dtype == np.float32
  assert labels.shape == (6,) and labels.dtype == np.int32
  images = np.stack([np.asarray(ex["image"]) for ex in ref])
  assert images.shape == (6,) + shape and images.dtype == np.uint8
  np.testing.assert_array_equal(raw_features, images.reshape(6, -1).astype(np.float32))
  np.testing.assert_allclose(features, images.reshape(6, -1) / 255.0, rtol=1e-6)
  np.testing.assert_array_equal(labels, [int(ex["label"]) for ex in ref])
  assert labels.min() >= 0 and labels.max() < 10


def test_load_tfds_errors(tmp_path):
  tfds = pytest.importorskip("tensorflow_datasets")
  with pytest.raises(FileNotFoundError, match="data_dir"):  # nothing prepared there, no download
    data.load_tfds("mnist", split="test", data_dir=tmp_path)
  with pytest.raises(ValueError, match="name"):
    data.load_tfds("no_such_dataset_zz", split="test", data_dir=tmp_path)
  with pytest.raises(ValueError, match="split"):
    data.load_tfds("mnist", split="", data_dir=tmp_path)
  with tfds.testing.mock_data(num_examples=2):
    with pytest.raises(ValueError, match="image_key"):
      data.load_tfds("mnist", split="test", image_key="pixels")
    with pytest.raises(ValueError, match="label_key"):
      data.load_tfds("mnist", split="test", label_key="class")


# ----------------------------------------------------------------------------- damaged files


def _error_of(fn, *args, **kwargs):
  """``(type, message)`` of what ``fn`` raises; the traceback is dropped so that nothing it holds stays alive."""
  try:
    fn(*args, **kwargs)
  except Exception as e:  # pylint: disable=broad-except
    return type(e), str(e)
  raise AssertionError(f"{fn.__name__} raised nothing")


def _bad_npz_files(folder):
  """{file name: what the error must say}: archives np.load cannot read, or whose arrays are wrong."""
  x, y = np.arange(12, dtype=np.uint8).reshape(4, 3), np.array([0, 1, 1, 2])
  np.savez(folder / "good.npz", features=x, labels=y)
  raw = (folder / "good.npz").read_bytes()
  (folder / "truncated.npz").write_bytes(raw[:len(raw) // 2])
  (folder / "truncated_end.npz").write_bytes(raw[:-30])
  flipped = bytearray(raw)
  flipped[raw.index(b"\x93NUMPY") + 120] ^= 0xFF  # inside the first member's data: a CRC mismatch
  (folder / "crc.npz").write_bytes(bytes(flipped))
  np.savez_compressed(folder / "compressed.npz", features=np.random.default_rng(0).random((50, 40)), labels=y)
  raw = (folder / "compressed.npz").read_bytes()
  (folder / "compressed_cut.npz").write_bytes(raw[:len(raw) // 2])
  (folder / "random.npz").write_bytes(np.random.default_rng(1).bytes(300))
  (folder / "empty.npz").write_bytes(b"")
  (folder / "pickle.npz").write_bytes(pickle.dumps({"features": x, "labels": y}))
  np.save(folder / "single.npy", x)
  np.savez(folder / "objects.npz", features=np.array([{"a": 1}, None], dtype=object), labels=y[:2])
  np.savez(folder / "missing.npz", features=x)
  np.savez(folder / "strings.npz", features=np.array([["a", "b"], ["c", "d"]]), labels=y[:2])
  np.savez(folder / "flat.npz", features=np.arange(4.0), labels=y)
  np.savez(folder / "no_items.npz", features=np.zeros((0, 3)), labels=y[:0])
  np.savez(folder / "float_labels.npz", features=x, labels=y.astype(np.float32))
  np.savez(folder / "short_labels.npz", features=x, labels=y[:3])
  np.savez(folder / "negative_labels.npz", features=x, labels=y - 1)
  np.savez(folder / "nan.npz", features=np.full((4, 2), np.nan), labels=y)
  np.savez(folder / "huge.npz", features=np.full((4, 2), 1e300), labels=y)
  return {
      "truncated.npz": "corrupt or truncated .npz archive", "truncated_end.npz": "corrupt or truncated",
      "crc.npz": "corrupt or truncated", "compressed_cut.npz": "corrupt or truncated",
      "random.npz": "is not an .npz (zip) archive", "empty.npz": "is not an .npz (zip) archive",
      "pickle.npz": "is not an .npz (zip) archive", "single.npy": "holds a single .npy array",
      "objects.npz": "array 'features' holds Python objects", "missing.npz": "holds arrays ['features']",
      "strings.npz": "numeric images/features [n, ...], got dtype str", "flat.npz": "expected a non-empty array",
      "no_items.npz": "expected a non-empty array", "float_labels.npz": "expected integer class labels",
      "short_labels.npz": "expected one label per image", "negative_labels.npz": "got values in [-1, 1]",
      "nan.npz": "expected finite", "huge.npz": "expected finite",
  }


def test_load_npz_names_the_path_and_the_problem_and_closes_the_file(tmp_path, monkeypatch):
  import builtins  # pylint: disable=g-import-not-at-top
  cases = _bad_npz_files(tmp_path)
  opened = []
  real_open = builtins.open

  def tracking_open(*args, **kwargs):
    f = real_open(*args, **kwargs)
    opened.append(f)
    return f

  monkeypatch.setattr(builtins, "open", tracking_open)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for name, what in sorted(cases.items()):
      path = tmp_path / name
      kind, message = _error_of(data.load_npz, path)
      assert kind is ValueError, (name, kind, message)
      assert message.startswith("path: ") and repr(str(path)) in message and what in message, (name, message)
      assert "\n" not in message
      assert opened and all(f.closed for f in opened), name
      opened.clear()
    gc.collect()  # an unclosed file object would warn as it is collected
  assert not [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
  monkeypatch.undo()
  x, y = data.load_npz(tmp_path / "good.npz")
  assert x.tolist() == np.arange(12).reshape(4, 3).tolist() and y.tolist() == [0, 1, 1, 2]
  kind, message = _error_of(data.load_npz, tmp_path / "absent.npz")
  assert kind is FileNotFoundError and "absent.npz" in message
  for kwargs, name in [(dict(features_key=""), "features_key"), (dict(labels_key=3), "labels_key")]:
    with pytest.raises(ValueError, match=name):
      data.load_npz(tmp_path / "good.npz", **kwargs)
  with pytest.raises(ValueError, match="path"):
    data.load_npz(3)


def test_idx_and_mnist_errors_name_the_file(tmp_path):
  labels = np.array([0, 1, 2], np.uint8)
  _write_idx(tmp_path / "img", np.zeros((4, 2, 2), np.uint8), 0x08)
  _write_idx(tmp_path / "lab", labels, 0x08)
  with pytest.raises(ValueError, match="labels_path: expected one label per image") as info:
    data.load_idx_images(tmp_path / "img", tmp_path / "lab")
  assert repr(str(tmp_path / "lab")) in str(info.value)
  wrong = tmp_path / "wrong"
  wrong.mkdir()
  _write_idx(wrong / "t10k-images-idx3-ubyte.gz", np.zeros((5, 28, 28), np.uint8), 0x08, compress=True)
  _write_idx(wrong / "t10k-labels-idx1-ubyte.gz", labels, 0x08, compress=True)
  with pytest.raises(ValueError, match="data_dir") as info:
    data.load_mnist_t10k(data_dir=wrong)
  assert repr(str(wrong / "t10k-images-idx3-ubyte.gz")) in str(info.value)


# ----------------------------------------------------------------------------- tfds as an optional extra


def test_load_tfds_without_tensorflow_datasets_names_the_extra(monkeypatch):
  monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)  # import tensorflow_datasets now fails
  with pytest.raises(ImportError) as info:
    data.load_tfds("mnist", split="test")
  assert str(info.value).startswith("hashjax.data.load_tfds needs tensorflow-datasets: pip install 'hashjax[tfds]'")
  # Bad arguments are still named first.
  with pytest.raises(ValueError, match="split"):
    data.load_tfds("mnist", split="")


_IMPORT_ALL = """
import importlib, pkgutil, sys
sys.modules["tensorflow_datasets"] = None  # as if not installed: importing it raises ImportError
import hashjax
for info in pkgutil.walk_packages(hashjax.__path__, "hashjax."):
  importlib.import_module(info.name)
print("ok")
"""


def test_no_module_of_hashjax_imports_tensorflow_datasets():
  proc = subprocess.run([sys.executable, "-c", _IMPORT_ALL], capture_output=True, text=True, timeout=300,
                        cwd=REPO, env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


# ----------------------------------------------------------------------------- LETOR / svmlight


def _parse_letor(path, num_features):
  """Independent line parser: label qid:q i:v ... # comment."""
  feats, labels, qids = [], [], []
  with open(path) as f:
    for line in f:
      body = line.split("#", 1)[0].split()
      labels.append(int(body[0]))
      assert body[1].startswith("qid:")
      qids.append(int(body[1][4:]))
      row = np.zeros(num_features)
      for item in body[2:]:
        j, v = item.split(":")
        row[int(j) - 1] = float(v)
      feats.append(row)
  return np.array(feats), np.array(labels), np.array(qids)


def test_letor_mq2008_s1_counts_and_values():
  path = _shared("letor4_mq2008") / "S1.txt"
  got = data.load_svmlight_ranking(path, num_features=46)
  assert got.features.shape == (2933, 46) and got.features.dtype == np.float32
  assert got.affinity.dtype == np.int32 and got.query_ids.dtype == np.int64
  assert np.bincount(got.affinity).tolist() == [2316, 427, 190]
  assert len(np.unique(got.query_ids)) == 157
  assert got.query_ids[0] == 10002 and got.features[0, 0] == np.float32(0.007477)
  ref_x, ref_y, ref_q = _parse_letor(path, 46)
  np.testing.assert_array_equal(got.features, ref_x.astype(np.float32))
  np.testing.assert_array_equal(got.affinity, ref_y)
  np.testing.assert_array_equal(got.query_ids, ref_q)
  groups = data.group_by_query(got.query_ids)
  assert len(groups.query_ids) == len(groups.indices) == 157
  # Reference grouping by a dict in first-appearance order.
  ref = {}
  for i, q in enumerate(ref_q.tolist()):
    ref.setdefault(q, []).append(i)
  assert groups.query_ids.tolist() == list(ref)
  assert [g.tolist() for g in groups.indices] == list(ref.values())


@pytest.mark.parametrize("name,queries,counts", [
    ("search_tiny_train.txt", 7, [338, 155, 77, 6, 6]),
    ("search_tiny_test.txt", 4, [185, 136, 79, 2, 1]),
])
def test_mslr_tiny_136_features(name, queries, counts):
  path = _shared("mslr_web_tiny") / name
  got = data.load_svmlight_ranking(path, num_features=136)
  assert got.features.shape == (sum(counts), 136)
  assert np.bincount(got.affinity).tolist() == counts
  assert len(data.group_by_query(got.query_ids).indices) == queries
  ref_x, ref_y, ref_q = _parse_letor(path, 136)
  np.testing.assert_array_equal(got.features, ref_x.astype(np.float32))
  np.testing.assert_array_equal(got.query_ids, ref_q)
  with pytest.raises(ValueError, match="num_features"):
    data.load_svmlight_ranking(path, num_features=46)


def test_svmlight_pads_and_rejects_bad_content(tmp_path):
  def write(text):
    path = tmp_path / "f.txt"
    path.write_text(text)
    return path

  got = data.load_svmlight_ranking(write("1 qid:4 2:0.5\n0 qid:2 1:1 #c\n"), num_features=5)
  np.testing.assert_array_equal(got.features, [[0, 0.5, 0, 0, 0], [1, 0, 0, 0, 0]])
  for text in ["1 qid:1 1:nan\n", "1 qid:1 1:inf\n", "1 1:0.5\n", "0.5 qid:1 1:1\n", "-1 qid:1 1:1\n",
               "", "1 qid:1 1:abc\n", "1 qid:1 0:1\n"]:
    with pytest.raises(ValueError, match="path"):
      data.load_svmlight_ranking(write(text), num_features=3)
  with pytest.raises(ValueError, match="num_features"):
    data.load_svmlight_ranking(write("1 qid:1 4:1\n"), num_features=3)
  with pytest.raises(ValueError, match="num_features"):
    data.load_svmlight_ranking(write("1 qid:1 1:1\n"), num_features=0)
  with pytest.raises(FileNotFoundError, match="path"):
    data.load_svmlight_ranking(tmp_path / "missing.txt", num_features=3)
  with pytest.raises(ValueError, match="query_ids"):
    data.group_by_query(np.array([], np.int64))
  with pytest.raises(ValueError, match="query_ids"):
    data.group_by_query(np.array([1.0, 2.0]))


# ----------------------------------------------------------------------------- protocols


def test_retrieval_split_talr_setting_on_mnist(mnist):
  _, labels = mnist
  split = data.retrieval_split(labels, queries_per_class=100, train_per_class=500, seed=0)
  assert (len(split.query), len(split.database), len(split.train)) == (1000, 9000, 5000)
  assert np.bincount(labels[split.query]).tolist() == [100] * 10
  assert np.bincount(labels[split.train]).tolist() == [500] * 10
  assert np.bincount(labels[split.database]).tolist() == [c - 100 for c in MNIST_COUNTS]
  assert not set(split.query.tolist()) & set(split.database.tolist())
  assert sorted(split.query.tolist() + split.database.tolist()) == list(range(10000))
  assert set(split.train.tolist()) <= set(split.database.tolist())
  for part in split:
    assert part.dtype == np.int64 and np.all(np.diff(part) > 0)
  again = data.retrieval_split(labels, seed=0)
  other = data.retrieval_split(labels, seed=1)
  for a, b in zip(split, again):
    np.testing.assert_array_equal(a, b)
  assert not np.array_equal(split.query, other.query)
  from_gen = data.retrieval_split(labels, seed=np.random.default_rng(0))
  np.testing.assert_array_equal(from_gen.query, split.query)
  whole = data.retrieval_split(labels, train_per_class=None, seed=0)
  np.testing.assert_array_equal(whole.train, whole.database)


def test_retrieval_split_errors():
  labels = np.array([0] * 5 + [1] * 3)
  with pytest.raises(ValueError, match="labels.*class 1"):
    data.retrieval_split(labels, queries_per_class=1, train_per_class=3)
  with pytest.raises(ValueError, match="labels"):
    data.retrieval_split(labels, queries_per_class=3, train_per_class=None)
  for bad in [np.array([0, -1, 1]), np.array([[0, 1]]), np.array([0.0, 1.0]), np.array([], np.int32), [0, 1]]:
    with pytest.raises(ValueError, match="labels"):
      data.retrieval_split(bad, queries_per_class=1, train_per_class=1)
  with pytest.raises(ValueError, match="queries_per_class"):
    data.retrieval_split(labels, queries_per_class=0)
  with pytest.raises(ValueError, match="train_per_class"):
    data.retrieval_split(labels, queries_per_class=1, train_per_class=1.5)
  with pytest.raises(ValueError, match="seed"):
    data.retrieval_split(labels, queries_per_class=1, train_per_class=1, seed=-3)


def test_random_split():
  split = data.random_split(100, num_queries=20, num_train=30, seed=5)
  assert (len(split.query), len(split.database), len(split.train)) == (20, 80, 30)
  assert sorted(split.query.tolist() + split.database.tolist()) == list(range(100))
  assert set(split.train.tolist()) <= set(split.database.tolist())
  again = data.random_split(100, num_queries=20, num_train=30, seed=5)
  np.testing.assert_array_equal(again.train, split.train)
  with pytest.raises(ValueError, match="num_queries"):
    data.random_split(10, num_queries=10)
  with pytest.raises(ValueError, match="num_train"):
    data.random_split(10, num_queries=2, num_train=9)
  with pytest.raises(ValueError, match="num_items"):
    data.random_split(0, num_queries=1)


def test_validation_split(mnist):
  _, labels = mnist
  split = data.retrieval_split(labels, seed=0)
  val = data.validation_split(split.train, labels=labels, per_class=50, seed=3)
  assert np.bincount(labels[val.validation]).tolist() == [50] * 10
  assert np.bincount(labels[val.train]).tolist() == [450] * 10
  assert sorted(val.train.tolist() + val.validation.tolist()) == split.train.tolist()
  again = data.validation_split(split.train, labels=labels, per_class=50, seed=3)
  np.testing.assert_array_equal(again.validation, val.validation)
  frac = data.validation_split(split.train, labels=labels, fraction=0.1, seed=0)
  assert np.bincount(labels[frac.validation]).tolist() == [50] * 10
  plain = data.validation_split(split.train, fraction=0.2, seed=0)
  assert len(plain.validation) == 1000 and len(plain.train) == 4000
  assert not set(plain.validation.tolist()) & set(plain.train.tolist())
  assert set(plain.validation.tolist()) <= set(split.train.tolist())


def test_validation_split_errors():
  labels = np.array([0, 0, 0, 1, 1])
  train = np.arange(5)
  with pytest.raises(ValueError, match="labels"):  # class 1 has 2 items: cannot hold out 2
    data.validation_split(train, labels=labels, per_class=2)
  with pytest.raises(ValueError, match="labels"):  # too short for the indices
    data.validation_split(np.arange(6), labels=labels, per_class=1)
  with pytest.raises(ValueError, match="labels"):
    data.validation_split(train, per_class=1)
  with pytest.raises(ValueError, match="per_class"):
    data.validation_split(train, labels=labels)
  with pytest.raises(ValueError, match="per_class"):
    data.validation_split(train, labels=labels, per_class=1, fraction=0.5)
  for fraction in [0.0, 1.0, -0.1, float("nan")]:
    with pytest.raises(ValueError, match="fraction"):
      data.validation_split(train, fraction=fraction)
  with pytest.raises(ValueError, match="train_indices"):
    data.validation_split(np.array([1, 1, 2]), fraction=0.5)
  with pytest.raises(ValueError, match="train_indices"):
    data.validation_split(np.array([], np.int64), fraction=0.5)


# ----------------------------------------------------------------------------- affinities


def test_label_affinity_matches_loops_and_jits():
  rng = np.random.default_rng(0)
  q, x = rng.integers(0, 4, size=7), rng.integers(0, 4, size=11)
  want = np.array([[int(q[a] == x[b]) for b in range(11)] for a in range(7)])
  got = data.label_affinity(q, x)
  assert got.dtype == np.int32 and got.shape == (7, 11)
  np.testing.assert_array_equal(got, want)
  np.testing.assert_array_equal(jax.jit(data.label_affinity)(q, x), want)
  np.testing.assert_array_equal(data.label_affinity(q, x, num_classes=4), want)


def test_label_affinity_errors():
  good = np.array([0, 1])
  with pytest.raises(ValueError, match="query_labels"):
    data.label_affinity(np.array([0, -1]), good)
  with pytest.raises(ValueError, match="db_labels"):
    data.label_affinity(good, np.array([[0, 1]]))
  with pytest.raises(ValueError, match="db_labels"):
    data.label_affinity(good, np.array([0.0, 1.0]))
  with pytest.raises(ValueError, match="query_labels"):
    data.label_affinity(np.array([], np.int32), good)
  with pytest.raises(ValueError, match="db_labels"):
    data.label_affinity(good, np.array([0, 5]), num_classes=3)
  with pytest.raises(ValueError, match="num_classes"):
    data.label_affinity(good, good, num_classes=0)


def test_multilabel_affinity_matches_loops():
  rng = np.random.default_rng(1)
  q, x = rng.integers(0, 2, size=(6, 5)), rng.integers(0, 2, size=(9, 5))
  count = np.array([[sum(int(q[a, l] and x[b, l]) for l in range(5)) for b in range(9)] for a in range(6)])
  got = data.multilabel_affinity(q, x)
  assert got.dtype == np.int32
  np.testing.assert_array_equal(got, count)
  np.testing.assert_array_equal(data.multilabel_affinity(q.astype(bool), x.astype(bool), binary=True),
                                (count > 0).astype(int))
  with pytest.raises(ValueError, match="db_labels"):
    data.multilabel_affinity(q, x[:, :4])
  with pytest.raises(ValueError, match="query_labels"):
    data.multilabel_affinity(q * 2, x)
  with pytest.raises(ValueError, match="query_labels"):
    data.multilabel_affinity(q[0], x)
  with pytest.raises(ValueError, match="binary"):
    data.multilabel_affinity(q, x, binary=1)


def _pair_sq(a, b):
  return float(sum((float(u) - float(v)) ** 2 for u, v in zip(a, b)))


@pytest.mark.parametrize("block", [None, 7])
@pytest.mark.parametrize("fractions", [(0.05, 0.013, 0.01, 0.002, 0.001), (0.5, 1.0)])
def test_euclidean_thresholds_match_sorted_pairs(monkeypatch, block, fractions):
  if block is not None:  # force many row blocks and the candidate pruning
    monkeypatch.setattr(affinity_module, "_BLOCK_ELEMENTS", block)
  rng = np.random.default_rng(2)
  x = rng.integers(0, 4, size=(40, 3)).astype(np.float64)  # integer points: exact distances, many ties
  pairs = sorted(_pair_sq(x[i], x[j]) for i, j in itertools.combinations(range(40), 2))
  got = data.euclidean_thresholds(x, fractions=fractions)
  want = [pairs[max(1, int(np.floor(f * len(pairs) + 0.5))) - 1] for f in fractions]
  assert got.tolist() == want


def test_euclidean_thresholds_on_mnist_match_scipy_pdist(mnist):
  features, _ = mnist
  x = features[:400]
  d = np.sort(pdist(x.astype(np.float64)))  # sqrt of squared distances, computed by differences
  got = data.euclidean_thresholds(x, fractions=data.TALR_FRACTIONS)
  for f, t in zip(data.TALR_FRACTIONS, got):
    k = int(np.floor(f * d.size + 0.5))
    np.testing.assert_allclose(np.sqrt(t), d[k - 1], rtol=1e-9)


def test_euclidean_affinity_levels_match_loops():
  rng = np.random.default_rng(3)
  q = rng.integers(0, 5, size=(8, 2)).astype(np.float32)
  x = rng.integers(0, 5, size=(13, 2)).astype(np.float32)
  thresholds, levels = [8.0, 4.0, 1.0, 0.0], [1, 2, 5, 10]
  want = np.zeros((8, 13), int)
  for a in range(8):
    for b in range(13):
      d = _pair_sq(q[a], x[b])
      want[a, b] = max([0] + [lv for t, lv in zip(thresholds, levels) if d <= t])
  got = data.euclidean_affinity_levels(q, x, thresholds=thresholds, levels=levels)
  assert got.dtype == np.int32
  np.testing.assert_array_equal(got, want)
  # Threshold order does not matter: the highest level met wins.
  np.testing.assert_array_equal(
      data.euclidean_affinity_levels(q, x, thresholds=thresholds[::-1], levels=levels[::-1]), want)


def test_talr_levels_on_the_reference_set_hit_the_fractions():
  rng = np.random.default_rng(4)
  x = rng.normal(size=(300, 5))  # continuous: no ties, so exactly k pairs per threshold
  t = data.euclidean_thresholds(x, fractions=data.TALR_FRACTIONS)
  a = data.euclidean_affinity_levels(x, x, thresholds=t)
  upper = a[np.triu_indices(300, 1)]
  total = upper.size
  for f, lv in zip(data.TALR_FRACTIONS, data.TALR_LEVELS):
    assert int((upper >= lv).sum()) == int(np.floor(f * total + 0.5))


@pytest.mark.parametrize("block", [None, 5])
def test_euclidean_top_fraction_matches_loops(monkeypatch, block):
  if block is not None:
    monkeypatch.setattr(affinity_module, "_BLOCK_ELEMENTS", block)
  rng = np.random.default_rng(5)
  q = rng.integers(0, 4, size=(6, 2)).astype(np.float64)
  x = rng.integers(0, 4, size=(50, 2)).astype(np.float64)
  for fraction in (0.02, 0.1, 0.5):
    k = max(1, int(np.floor(fraction * 50 + 0.5)))
    want = np.zeros((6, 50), int)
    for a in range(6):
      dists = [_pair_sq(q[a], x[b]) for b in range(50)]
      kth = sorted(dists)[k - 1]
      want[a] = [int(d <= kth) for d in dists]
    np.testing.assert_array_equal(data.euclidean_top_fraction_affinity(q, x, fraction=fraction), want)
  # Without ties exactly k = 2% of the database per query.
  cont = data.euclidean_top_fraction_affinity(rng.normal(size=(4, 3)), rng.normal(size=(500, 3)))
  assert cont.sum(1).tolist() == [10] * 4


def test_euclidean_affinity_errors():
  x = np.zeros((4, 3))
  nan = x.copy()
  nan[1, 2] = np.nan
  inf = x.copy()
  inf[0, 0] = np.inf
  with pytest.raises(ValueError, match="query_features"):
    data.euclidean_top_fraction_affinity(nan, x)
  with pytest.raises(ValueError, match="db_features"):
    data.euclidean_affinity_levels(x, inf, thresholds=[1.0], levels=[1])
  with pytest.raises(ValueError, match="db_features"):
    data.euclidean_top_fraction_affinity(x, np.zeros((4, 2)))
  with pytest.raises(ValueError, match="query_features"):
    data.euclidean_top_fraction_affinity(np.zeros((0, 3)), x)
  with pytest.raises(ValueError, match="features"):
    data.euclidean_thresholds(nan)
  with pytest.raises(ValueError, match="features"):
    data.euclidean_thresholds(x[:1])
  for fractions in [(0.0,), (1.5,), (), (float("nan"),)]:
    with pytest.raises(ValueError, match="fractions"):
      data.euclidean_thresholds(x, fractions=fractions)
  with pytest.raises(ValueError, match="levels"):
    data.euclidean_affinity_levels(x, x, thresholds=[1.0, 2.0], levels=[1])
  with pytest.raises(ValueError, match="levels"):
    data.euclidean_affinity_levels(x, x, thresholds=[1.0], levels=[0])
  with pytest.raises(ValueError, match="thresholds"):
    data.euclidean_affinity_levels(x, x, thresholds=[-1.0], levels=[1])
  for fraction in [0.0, 1.1, True]:
    with pytest.raises(ValueError, match="fraction"):
      data.euclidean_top_fraction_affinity(x, x, fraction=fraction)
