r"""Packed codes to and from faiss binary indexes (the optional ``faiss`` package: ``pip install hashjax[bench]``).

**Byte and bit order.** hashjax packs bit ``j`` of a code into bit
``j mod 32`` of ``uint32`` word ``j // 32`` (least significant first); read as
little-endian bytes, that is bit ``j mod 8`` of byte ``j // 8``, which is
faiss's layout of binary codes (``faiss.real_to_binary`` and ``fvec2bitvec``
set bit ``j mod 8`` of byte ``j // 8``, least significant first). So the
conversion is a byte view (little-endian words) cut to faiss's
``d / 8`` bytes per code, and faiss's Hamming distances equal
:func:`hashjax.codes.hamming_distance`. (``numpy.packbits``' default
``bitorder="big"`` is the other order: bit ``j`` in bit ``7 - j mod 8``.)
faiss's dimension ``d`` is a multiple of 8: codes of ``b`` bits become
``d = 8 ceil(b / 8)`` bits whose top ``d - b`` are 0, which leaves distances
unchanged.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from hashjax import _checks
from hashjax.index.inverted import InvertedIndex
from hashjax.index.multi import MultiIndex
from hashjax.index.storage import CodeDatabase


def _faiss():
  try:
    import faiss  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise ImportError("faiss interop needs the faiss package (pip install 'hashjax[bench]', i.e. faiss-cpu)") from None
  return faiss


def _as_database(db: Any, num_bits: Optional[int]) -> CodeDatabase:
  """The codes of ``db`` (an index, a CodeDatabase or ``uint32[N, W]`` words) with their length."""
  if isinstance(db, (MultiIndex, InvertedIndex, CodeDatabase)) and num_bits not in (None, db.num_bits):
    raise ValueError(f"num_bits: {type(db).__name__} holds codes of {db.num_bits} bits, got num_bits={num_bits}")
  if isinstance(db, MultiIndex):  # an index holds the checked codes it was built of
    return CodeDatabase(np.asarray(db.db_words), db.num_bits)
  if isinstance(db, InvertedIndex):
    words = np.zeros((db.num_db, 1), np.uint32)
    words[db.items, 0] = np.repeat(db.codes, np.diff(db.code_offsets))
    return CodeDatabase(words, db.num_bits)
  if isinstance(db, CodeDatabase):
    num_bits = _checks.check_codes("db.words", db.words, db.num_bits, num_bits_name="db.num_bits")
    return CodeDatabase(np.asarray(db.words), num_bits)
  # Packed words do not tell their code length: num_bits is required.
  return CodeDatabase(np.asarray(db), _checks.check_codes("db", db, _checks.check_num_bits(num_bits)))


def to_faiss_codes(words: Any, *, num_bits: int) -> np.ndarray:
  r"""faiss's binary codes of packed words: ``uint8[N, ceil(b / 8)]``, bit ``j`` in bit ``j mod 8`` of byte ``j // 8``.

  .. math:: \mathrm{byte}_t = (w_{\lfloor t / 4 \rfloor} \gg 8 (t \bmod 4)) \bmod 256

  Args:
    words: ``uint32[N, W]`` packed codes (padding bits 0).
    num_bits: the code length ``b``.

  Returns:
    ``uint8[N, ceil(b / 8)]`` (C-contiguous, as faiss's ``add`` and ``search`` take).

  >>> to_faiss_codes(np.array([[0x0201, 0]], np.uint32), num_bits=40).tolist()
  [[1, 2, 0, 0, 0]]
  """
  return _faiss_bytes(_as_database(words, num_bits))


def _faiss_bytes(db: CodeDatabase) -> np.ndarray:
  """:func:`to_faiss_codes` of checked codes."""
  raw = np.ascontiguousarray(db.words.astype("<u4")).view(np.uint8)
  return np.ascontiguousarray(raw[:, :-(-db.num_bits // 8)])


def from_faiss_codes(codes: Any, *, num_bits: int) -> np.ndarray:
  r"""Packed ``uint32`` words of faiss binary codes ``uint8[N, d / 8]`` (the inverse of :func:`to_faiss_codes`).

  .. math:: w_i = \sum_{t=0}^{3} \mathrm{byte}_{4 i + t} \, 2^{8 t}

  Args:
    codes: ``uint8[N, B]`` faiss codes with ``8 B >= num_bits``; bits from ``num_bits`` on must be 0.
    num_bits: the code length ``b``.

  Returns:
    ``uint32[N, ceil(b / 32)]``.

  >>> from_faiss_codes(np.array([[1, 2, 0, 0, 0]], np.uint8), num_bits=40).tolist()
  [[513, 0]]
  """
  if not hasattr(codes, "dtype") or np.dtype(codes.dtype) != np.uint8 or codes.ndim != 2:
    raise ValueError(f"codes: expected faiss binary codes uint8[N, d / 8], got {_checks.desc(codes)}")
  codes = np.asarray(codes)
  width = codes.shape[1]
  num_bits = _checks.check_int_at_most("num_bits", num_bits, 8 * width, what=f"the {8 * width} bits of {width} bytes")
  spare = ~((1 << np.clip(num_bits - 8 * np.arange(width), 0, 8)) - 1).astype(np.uint8)  # per byte
  if (codes & spare).any():
    raise ValueError(f"codes: bits from {num_bits} on must be 0 for codes of num_bits={num_bits}")
  num_words = _checks.num_words_for(num_bits)
  raw = np.zeros((codes.shape[0], 4 * num_words), np.uint8)
  used = min(codes.shape[1], 4 * num_words)
  raw[:, :used] = codes[:, :used]
  return raw.view("<u4").astype(np.uint32)


def to_faiss(db: Any, *, num_bits: Optional[int] = None):
  r"""A faiss ``IndexBinaryFlat`` holding the codes of ``db``, in the same order (faiss id ``i`` = item ``i``).

  .. math:: d_{\mathrm{faiss}}(q, i) = d(q, i) \quad (d_{\mathrm{faiss}} = 8 \lceil b / 8 \rceil \text{ bits})

  Args:
    db: a :class:`~hashjax.index.MultiIndex`, an :class:`~hashjax.index.InvertedIndex`, a
      :class:`~hashjax.index.CodeDatabase`, or ``uint32[N, W]`` packed words (then ``num_bits`` is required).
    num_bits: the code length; with an index or database, must equal theirs if given.

  Returns:
    ``faiss.IndexBinaryFlat`` of dimension ``8 ceil(b / 8)``; search it with :func:`to_faiss_codes` of the
    queries.

  >>> import numpy as np
  >>> fx = to_faiss(np.array([[5], [6]], np.uint32), num_bits=3)  # doctest: +SKIP
  >>> fx.d, fx.ntotal  # doctest: +SKIP
  (8, 2)
  """
  faiss = _faiss()
  database = _as_database(db, num_bits)
  out = faiss.IndexBinaryFlat(8 * -(-database.num_bits // 8))
  out.add(_faiss_bytes(database))
  return out


def from_faiss(faiss_index: Any, *, num_bits: Optional[int] = None) -> CodeDatabase:
  r"""The codes held by a faiss binary index, as a :class:`~hashjax.index.CodeDatabase` (faiss id order).

  .. math:: x_i = \mathrm{faiss\_index.reconstruct}(i), \quad i = 0 .. n - 1

  Args:
    faiss_index: a faiss binary index whose codes can be reconstructed (``IndexBinaryFlat``; an
      ``IndexBinaryIVF`` after ``make_direct_map()``).
    num_bits: the code length ``b <= d`` (default: faiss's ``d``); bits from ``b`` on must be 0.

  Returns:
    :class:`~hashjax.index.CodeDatabase` ``(words uint32[n, ceil(b / 32)], num_bits)``.

  >>> db = from_faiss(to_faiss(np.array([[5], [6]], np.uint32), num_bits=3), num_bits=3)  # doctest: +SKIP
  >>> db.words.tolist(), db.num_bits  # doctest: +SKIP
  ([[5], [6]], 3)
  """
  faiss = _faiss()
  if not isinstance(faiss_index, faiss.IndexBinary) or faiss_index.ntotal < 1:
    raise ValueError(f"faiss_index: expected a faiss binary index (faiss.IndexBinary) holding at least one code, got "
                     f"{type(faiss_index).__name__} of {getattr(faiss_index, 'ntotal', 0)} item(s)")
  try:
    codes = faiss_index.reconstruct_n(0, faiss_index.ntotal)
  except RuntimeError as e:
    raise ValueError(f"faiss_index: {type(faiss_index).__name__} cannot reconstruct its codes ({e})") from None
  codes = np.asarray(codes, np.uint8).reshape(faiss_index.ntotal, faiss_index.code_size)
  num_bits = faiss_index.d if num_bits is None else num_bits  # from_faiss_codes checks it against d = 8 B
  return CodeDatabase(from_faiss_codes(codes, num_bits=num_bits), int(num_bits))
