"""Image datasets as numpy arrays: IDX files, ``.npz`` archives, the embedded
MNIST test set, scikit-learn's digits and tensorflow-datasets (an optional extra).

Every loader returns ``(features, labels)`` with ``features`` as
``float32[n, d]`` (images flattened row-major, scaled to ``[0, 1]`` unless
``scale=False``) and ``labels`` as ``int32[n]``.

The MNIST test set (10,000 digits) ships inside the package
(``hashjax/data/mnist_t10k/``, see its README for provenance and licence), so
everything in hashjax runs offline.
"""

from __future__ import annotations

import gzip
import os
import pathlib
import zipfile
import zlib
from typing import Optional, Tuple, Union

import numpy as np

from hashjax import _checks

PathLike = Union[str, os.PathLike]

#: Folder of the embedded MNIST test set (two gzip-compressed IDX files).
MNIST_T10K_DIR = pathlib.Path(__file__).resolve().parent / "mnist_t10k"
MNIST_T10K_IMAGES = "t10k-images-idx3-ubyte.gz"
MNIST_T10K_LABELS = "t10k-labels-idx1-ubyte.gz"

# IDX type byte -> big-endian numpy dtype (http://yann.lecun.com/exdb/mnist/).
_IDX_DTYPES = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def _read_bytes(path: pathlib.Path) -> bytes:
  with open(path, "rb") as f:
    raw = f.read()
  if raw[:2] == b"\x1f\x8b":  # gzip magic, whatever the file name says
    try:
      return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as e:
      raise ValueError(f"path: {str(path)!r} is a corrupt or truncated gzip file ({e})") from e
  return raw


def read_idx(path: PathLike) -> np.ndarray:
  r"""Reads an IDX file (plain or gzip-compressed) into a numpy array.

  The header is two zero bytes, a type byte (``0x08`` uint8, ``0x09`` int8,
  ``0x0B`` int16, ``0x0C`` int32, ``0x0D`` float32, ``0x0E`` float64), the
  number of dimensions ``k`` and ``k`` big-endian uint32 sizes; the payload
  must hold exactly the product of the sizes. Gzip is detected from the
  file's magic bytes, not its name.

  .. math:: \mathrm{magic} = 256 \cdot \mathrm{type} + k, \quad
     \mathrm{len(payload)} = \mathrm{itemsize} \cdot \prod_{i<k} n_i

  Args:
    path: a local IDX file, e.g. ``t10k-labels-idx1-ubyte.gz``.

  Returns:
    ``[n_0, ..., n_{k-1}]`` array in native byte order with the file's dtype.

  Raises:
    ValueError: naming ``path`` when the file is not IDX, is corrupt, or its
      size does not match its header. ``FileNotFoundError`` if it is missing.

  >>> labels = read_idx(MNIST_T10K_DIR / MNIST_T10K_LABELS)
  >>> labels.dtype.name, labels.shape, labels[:5].tolist()
  ('uint8', (10000,), [7, 2, 1, 0, 4])
  """
  path = pathlib.Path(path)
  raw = _read_bytes(path)
  ndim = raw[3] if len(raw) >= 4 else 0
  header = 4 + 4 * ndim
  if ndim == 0 or raw[:2] != b"\x00\x00" or raw[2] not in _IDX_DTYPES or len(raw) < header:
    raise ValueError(f"path: {str(path)!r} is not an IDX file: expected 0x00 0x00, a type byte in {{0x08, 0x09, "
                     f"0x0B-0x0E}}, k >= 1 dims and k sizes, got {len(raw)} bytes [{raw[:min(header, 16)].hex(' ')}]")
  shape = tuple(int(n) for n in np.frombuffer(raw, ">u4", count=ndim, offset=4))
  dtype = _IDX_DTYPES[raw[2]]
  expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
  if len(raw) - header != expected:
    raise ValueError(f"path: {str(path)!r} has {len(raw) - header} payload bytes, but its IDX header "
                     f"(shape {shape}, {dtype.itemsize}-byte items) needs {expected}")
  data = np.frombuffer(raw, dtype, offset=header).reshape(shape)
  return data.astype(dtype.newbyteorder("="))


def _check_labels(name: str, labels: np.ndarray, num_items: int, source: str = "",
                  high: int = _checks.INT32_MAX) -> np.ndarray:
  """int32 ``labels[num_items]`` in ``[0, high]``; errors start with ``name`` and end with `` (in <source>)`` when
  given."""
  where = f" (in {source})" if source else ""
  if labels.shape != (num_items,):
    raise ValueError(f"{name}: expected one label per image, shape ({num_items},), got {labels.shape}{where}")
  if labels.dtype.kind not in "iu" or (num_items and (labels.min() < 0 or labels.max() > high)):
    got = labels.dtype.name if labels.dtype.kind not in "iu" else f"values in [{labels.min()}, {labels.max()}]"
    raise ValueError(f"{name}: expected integer class labels in [0, {high}], got {got}{where}")
  return labels.astype(np.int32)


def _as_features(name: str, images: np.ndarray, scale: bool, source: str = "") -> np.ndarray:
  """float32 ``[n, d]`` from ``images[n, ...]``; errors as in :func:`_check_labels`."""
  where = f" (in {source})" if source else ""
  if images.dtype.kind not in "buif" or images.ndim < 2 or images.shape[0] == 0:
    raise ValueError(f"{name}: expected a non-empty array of numeric images/features [n, ...], got "
                     f"{_checks.desc(images)}{where}")
  if scale and images.dtype != np.uint8:
    raise ValueError(f"{name}: scale=True divides uint8 pixels by 255, got {images.dtype.name}; use scale=False{where}")
  features = images.reshape(images.shape[0], -1).astype(np.float32)
  if not np.all(np.isfinite(features)):
    raise ValueError(f"{name}: expected finite pixel values (within float32's range), got NaN or inf{where}")
  return features / np.float32(255) if scale else features


def load_idx_images(images_path: PathLike, labels_path: PathLike, *, scale: bool = True
                    ) -> Tuple[np.ndarray, np.ndarray]:
  r"""Any labelled image set stored as a pair of IDX files (MNIST, EMNIST, Fashion-MNIST, KMNIST...).

  .. math:: x_i = \mathrm{vec}(\text{image}_i) / 255, \quad y_i = \text{label}_i

  Args:
    images_path: IDX file of ``[n, ...]`` images (uint8 when ``scale``).
    labels_path: IDX file of ``[n]`` integer labels.
    scale: divide uint8 pixels by 255 (default); ``False`` keeps the values.

  Returns:
    ``(features float32[n, d], labels int32[n])``, images flattened row-major.

  >>> features, labels = load_idx_images(MNIST_T10K_DIR / MNIST_T10K_IMAGES, MNIST_T10K_DIR / MNIST_T10K_LABELS)
  >>> features.shape, labels.shape
  ((10000, 784), (10000,))
  """
  _checks.check_bool("scale", scale)
  images = read_idx(images_path)
  features = _as_features("images_path", images, scale, repr(str(images_path)))
  return features, _check_labels("labels_path", read_idx(labels_path), images.shape[0], repr(str(labels_path)))


#: The first bytes of a zip archive (``np.savez``), of an empty one, and of a single ``.npy`` array (``np.save``).
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
_NPY_MAGIC = b"\x93NUMPY"


def _read_npz_arrays(path: pathlib.Path, keys: Tuple[str, ...]) -> Tuple[np.ndarray, ...]:
  """The arrays ``keys`` of the ``.npz`` archive at ``path``; the file is closed whatever happens."""
  shown = repr(str(path))
  with open(path, "rb") as f:  # opened here, not by np.load, which leaks it when the archive is unreadable
    head = f.read(len(_NPY_MAGIC))
    if not head.startswith(_ZIP_MAGIC):
      found = ("holds a single .npy array (np.save)" if head.startswith(_NPY_MAGIC) else
               f"is not an .npz (zip) archive: it begins with {head[:4]!r}, not {_ZIP_MAGIC[0]!r}")
      raise ValueError(f"path: {shown} {found}; expected np.savez(path, {keys[0]}=..., {keys[1]}=...)")
    f.seek(0)
    try:
      with np.load(f, allow_pickle=False) as arrays:
        if any(k not in arrays.files for k in keys):
          raise ValueError(f"path: {shown} holds arrays {sorted(arrays.files)}, expected {keys[0]!r} and "
                           f"{keys[1]!r} (features_key / labels_key)")
        out = []
        for key in keys:
          try:
            out.append(arrays[key])
          except ValueError as e:
            pickled = "allow_pickle" in str(e)
            found = ("holds Python objects (dtype object), which load_npz does not unpickle; save numeric arrays"
                     if pickled else f"is not a valid .npy member ({e})")
            raise ValueError(f"path: {shown} array {key!r} {found}") from (None if pickled else e)
        return tuple(out)
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as e:
      raise ValueError(f"path: {shown} is a corrupt or truncated .npz archive ({type(e).__name__}: {e})") from e


def load_npz(path: PathLike, *, features_key: str = "features", labels_key: str = "labels",
             scale: bool = False) -> Tuple[np.ndarray, np.ndarray]:
  r"""A labelled dataset saved with ``numpy.savez``: ``features[n, ...]`` and ``labels[n]``.

  .. math:: x_i = \mathrm{vec}(\text{features}_i), \quad y_i = \text{labels}_i

  For data in other formats (e.g. USPS as HDF5): load it yourself once and
  ``np.savez(path, features=..., labels=...)``. Nothing is unpickled
  (``allow_pickle=False``), and the file is closed on every path.

  Args:
    path: the ``.npz`` file.
    features_key, labels_key: names of the two arrays in it.
    scale: divide uint8 features by 255 (default ``False``: keep the values).

  Returns:
    ``(features float32[n, d], labels int32[n])``.

  Raises:
    ValueError: naming ``path`` and what is wrong when the file is not an
      ``.npz`` archive (a single ``.npy``, random bytes, a pickle), is
      truncated or corrupt, lacks one of the two arrays, holds object arrays,
      or when the arrays have the wrong dtypes or shapes (numeric
      ``features[n, ...]`` with ``n >= 1``, integer ``labels[n]`` in
      ``[0, 2^31)``). ``FileNotFoundError`` if there is no file.

  >>> import tempfile, os
  >>> path = os.path.join(tempfile.mkdtemp(), "toy.npz")
  >>> np.savez(path, features=np.eye(3), labels=np.array([0, 1, 1]))
  >>> x, y = load_npz(path)
  >>> x.shape, x.dtype.name, y.tolist()
  ((3, 3), 'float32', [0, 1, 1])
  """
  _checks.check_bool("scale", scale)
  for name, key in (("features_key", features_key), ("labels_key", labels_key)):
    _checks.check_nonempty_str(name, key, what="the name of an array in the archive")
  path = pathlib.Path(_checks.check_file("path", path))
  images, labels = _read_npz_arrays(path, (features_key, labels_key))
  source = f"{str(path)!r}"
  features = _as_features("path", images, scale, f"{source} array {features_key!r}")
  return features, _check_labels("path", labels, images.shape[0], f"{source} array {labels_key!r}")


def load_mnist_t10k(*, scale: bool = True, data_dir: Optional[PathLike] = None
                    ) -> Tuple[np.ndarray, np.ndarray]:
  r"""The MNIST test set (LeCun, Cortes & Burges), embedded in the package.

  .. math:: x_{i} = p_{i} / 255 \in [0, 1]^{784}, \quad y_i \in \{0, \dots, 9\}

  Images are flattened row-major (pixel ``(r, c)`` at column ``28 r + c``).
  The label counts per digit 0-9 are
  ``[980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]``.

  Args:
    scale: divide the uint8 pixels by 255 (default); ``False`` keeps 0..255
      as float32.
    data_dir: folder holding ``t10k-images-idx3-ubyte.gz`` and
      ``t10k-labels-idx1-ubyte.gz``; defaults to the copy inside hashjax.

  Returns:
    ``(features float32[10000, 784], labels int32[10000])``.

  >>> features, labels = load_mnist_t10k()
  >>> features.shape, features.dtype.name, float(features.max()), labels[:3].tolist()
  ((10000, 784), 'float32', 1.0, [7, 2, 1])
  """
  _checks.check_bool("scale", scale)
  folder = MNIST_T10K_DIR if data_dir is None else pathlib.Path(data_dir)
  images_path, labels_path = folder / MNIST_T10K_IMAGES, folder / MNIST_T10K_LABELS
  images, labels = read_idx(images_path), read_idx(labels_path)
  expected = (np.uint8, (10000, 28, 28), np.uint8, (10000,))
  if (images.dtype, images.shape, labels.dtype, labels.shape) != expected or labels.max() > 9:
    largest = f" up to {labels.max()}" if labels.size else ""
    raise ValueError(f"data_dir: expected the MNIST test set, 10000 uint8 28x28 images in {str(images_path)!r} and "
                     f"their uint8 labels 0..9 in {str(labels_path)!r}, got images of {_checks.desc(images)} and "
                     f"labels of {_checks.desc(labels)}{largest}")
  return _as_features("data_dir", images, scale), labels.astype(np.int32)


def load_digits(*, scale: bool = True) -> Tuple[np.ndarray, np.ndarray]:
  r"""scikit-learn's 8x8 handwritten digits (1,797 images, 10 classes).

  .. math:: x_{i} = p_{i} / 16 \in [0, 1]^{64}, \quad y_i \in \{0, \dots, 9\}

  Args:
    scale: divide the 0..16 pixel counts by 16 (default); ``False`` keeps them.

  Returns:
    ``(features float32[1797, 64], labels int32[1797])``.

  >>> features, labels = load_digits()
  >>> features.shape, features.dtype.name, float(features.max()), labels.dtype.name
  ((1797, 64), 'float32', 1.0, 'int32')
  """
  _checks.check_bool("scale", scale)
  from sklearn import datasets  # pylint: disable=g-import-not-at-top
  bunch = datasets.load_digits()
  features = np.asarray(bunch.data, np.float32)
  if scale:
    features /= np.float32(16)
  return features, np.asarray(bunch.target, np.int32)


#: What :func:`load_tfds` says when tensorflow-datasets cannot be imported.
_TFDS_MISSING = "hashjax.data.load_tfds needs tensorflow-datasets: pip install 'hashjax[tfds]'"


def _import_tfds():
  """The ``tensorflow_datasets`` module, imported on first use (it is an optional extra, and slow to import)."""
  try:
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(f"{_TFDS_MISSING} ({type(e).__name__}: {e})", name="tensorflow_datasets") from e
  return tfds


def load_tfds(name: str, *, split: str, data_dir: Optional[PathLike] = None, download: bool = False,
              image_key: str = "image", label_key: str = "label", scale: bool = True
              ) -> Tuple[np.ndarray, np.ndarray]:
  r"""Any tensorflow-datasets dataset with image and class-label features.

  Needs the optional extra ``pip install 'hashjax[tfds]'`` (tensorflow-datasets,
  imported here, never at ``import hashjax``). Reads through
  ``tfds.data_source`` (random access over ArrayRecord files), which works
  without TensorFlow; examples are read one at a time and stacked.
  ``tfds.load`` would need TensorFlow and is not used. Use tfds's split
  slicing to read part of a split (``split="train[:5000]"``).

  .. math:: x_i = \mathrm{vec}(\mathrm{image}_i) / 255, \quad y_i = \mathrm{label}_i

  Args:
    name: a tfds name such as ``"mnist"`` or ``"cifar10"``.
    split: a tfds split, e.g. ``"test"`` or ``"train[:10%]"``.
    data_dir: tfds data folder (default: ``$TFDS_DATA_DIR`` or
      ``~/tensorflow_datasets``). Data are read in ``array_record`` format;
      a folder prepared as TFRecord by ``tfds.load`` cannot be read here.
    download: let tfds download and prepare the data when it is missing
      (needs the network; off by default so nothing is fetched silently).
    image_key: the image feature (any numeric array; flattened row-major).
    label_key: the class-label feature.
    scale: divide uint8 images by 255; ``False`` keeps raw values as float32.

  Returns:
    ``(features float32[n, prod(image shape)], labels int32[n])``.

  Raises:
    ImportError: when tensorflow-datasets, an optional extra, is not
      installed (``pip install 'hashjax[tfds]'``).
    ValueError: naming the argument for an unknown dataset or feature key.
    FileNotFoundError: when the data are not in ``data_dir`` and
      ``download`` is False.

  >>> import pytest; tfds = pytest.importorskip("tensorflow_datasets")  # the optional extra
  >>> with tfds.testing.mock_data(num_examples=3):  # random stand-in data, offline
  ...   features, labels = load_tfds("cifar10", split="test")
  >>> features.shape, features.dtype.name, labels.dtype.name
  ((3, 3072), 'float32', 'int32')
  """
  for arg, value, what in (("name", name, "a tfds dataset name such as 'mnist'"),
                           ("split", split, "a tfds split such as 'test' or 'train[:5000]'")):
    _checks.check_nonempty_str(arg, value, what=what)
  _checks.check_bool("scale", scale)
  tfds = _import_tfds()

  # What tfds raises when the data are not prepared; with download=True its own errors pass through.
  missing = () if download else (KeyError, FileNotFoundError, NotImplementedError, AssertionError)
  try:
    source = tfds.data_source(name, split=split, data_dir=data_dir, download=download,
                              builder_kwargs={"file_format": "array_record"})
  except tfds.core.registered.DatasetNotFoundError as e:
    raise ValueError(f"name: tfds has no dataset {name!r}") from e
  except missing as e:
    raise FileNotFoundError(f"data_dir: no tfds data for {name!r} split {split!r} in array_record format under "
                            f"{data_dir or '$TFDS_DATA_DIR or ~/tensorflow_datasets'}; pass download=True (needs the "
                            f"network) or prepare them (tfds.data_source({name!r}, data_dir=...)); tfds: {e}") from e

  features_info = source.dataset_info.features
  for arg, key in (("image_key", image_key), ("label_key", label_key)):
    _checks.check_option(arg, key, sorted(features_info.keys()))
  num_classes = getattr(features_info[label_key], "num_classes", None)

  n = len(source)
  if n == 0:
    raise ValueError(f"split: {name!r} split {split!r} holds no examples")
  images, labels = [], np.empty(n, np.int64)
  for i in range(n):
    example = source[i]
    images.append(np.asarray(example[image_key]))
    labels[i] = int(np.asarray(example[label_key]))
  features = _as_features("image_key", np.stack(images), scale, f"{name!r} feature {image_key!r}")
  high = _checks.INT32_MAX if num_classes is None else num_classes - 1
  return features, _check_labels("label_key", labels, n, f"{name!r} feature {label_key!r}", high=high)
