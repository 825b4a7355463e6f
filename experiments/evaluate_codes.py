r"""Evaluates hash codes made elsewhere (e.g. by DeepHash-pytorch): the tie-aware table beside mAP@k as
DeepHash-pytorch computes it, with that number's range over the orders of tied items.

  python -m experiments.evaluate_codes --codes=codes.npz
  python -m experiments.evaluate_codes --codes=codes.npz --topk=5000 --workdir=runs/dsh64
  python -m experiments.evaluate_codes --codes=words.npz --num_bits=48   # packed uint32 words

The ``.npz`` holds ``query_codes [Q, b]`` and ``db_codes [N, b]``, each ``{-1, 1}`` (e.g. ``torch.sign``
outputs) or ``{0, 1}`` (any int, float or bool dtype), or packed ``uint32[., W]`` words with the code length
from ``--num_bits`` or a ``num_bits`` key (a ``uint32`` array is always read as packed words); and
``query_labels`` / ``db_labels``: ``int[Q]`` / ``int[N]`` class labels (any integers within int64), or
``{0, 1}[Q, C]`` / ``[N, C]`` multi-hot rows (one-hot rows are read as class labels).
Relevance: the same class, or, multi-hot, at least one label in common (``query_labels @ db_labels.T > 0``).

Printed, and with ``--workdir`` written to ``<workdir>/results.json``:

* the tie-aware table of :func:`hashjax.evaluate.evaluate_codes` over the whole Hamming ranking: AP and NDCG
  averaged over every order of tied items, AP's optimistic / pessimistic bounds (relevant items first / last
  in every tie), precision and recall within Hamming radius 2, and tie-aware precision@k (``k = --topk``);
  ``tie_aware_ap_at_k`` is the tie-aware AP@k of :func:`hashjax.metrics.tie_aware_ap_from_histogram`, which
  divides by ``min(N^+, k)`` (``N^+``: the query's relevant items in the whole database) and leaves out
  queries without a relevant item;
* mAP@k by DeepHash-pytorch's formula (its ``CalcTopMap``): per query, the mean of the precisions at the ranks
  of the relevant items within the top ``k`` (dividing by the number of relevant items retrieved in the top
  ``k``), 0 for a query with none there; averaged over all ``Q`` queries. ``argsort`` ranks as
  ``CalcTopMap`` does (float32 ``0.5 (b - B_q B_x^T)`` distances, ``np.argsort``'s default, unstable sort:
  ties come in whatever order it leaves, which may change with the numpy build and CPU); ``tie_aware``,
  ``optimistic`` and ``pessimistic`` are the same formula's mean, maximum and minimum over all orders of the
  tied items (:func:`deephash_ap_ties`): how much ties alone can move the reported number.

``--topk`` defaults to 1000 (DeepHash-pytorch's ImageNet setting; it uses 5000 for NUS-WIDE and COCO) and is
clamped to ``N``; ``--topk=-1`` is DeepHash-pytorch's ``topK=-1`` (its CIFAR-10 setting), which its slice
``[0:-1]`` reads as every item but the last: ``k = N - 1``. The ``argsort`` column is the number a
DeepHash-pytorch run printed only when the rows are in the order that run evaluated them (its database loader
shuffles). Memory stays ``O(N)`` per query for the DeepHash columns; multi-hot relevance is built in blocks of
queries of at most ``2^24`` cells. Bad input (a missing key, a code value outside ``{-1, 1}`` /
``{0, 1}``, mismatched shapes, labels of the wrong length) is refused in one line ``error: ...``, exit
status 2; so is a file in which no query has a relevant database item.
"""

from __future__ import annotations

import math
import os
import zipfile
import zlib
from typing import Dict, NamedTuple, Optional, Tuple

from absl import flags
import numpy as np

from experiments import cli
from hashjax import _checks
from hashjax import codes as hcodes
from hashjax import io
from hashjax import metrics
from hashjax.evaluate import evaluate_codes

_CODES = flags.DEFINE_string("codes", None, "The .npz file: query_codes, db_codes, query_labels, db_labels "
                             "(and num_bits for packed words) (required).")
_NUM_BITS = flags.DEFINE_integer("num_bits", None, "Code length of packed uint32 codes (else the npz's "
                                 "num_bits key).")
_TOPK = flags.DEFINE_integer("topk", 1000, "k of mAP@k and precision@k (clamped to the database size); -1: "
                             "DeepHash-pytorch's topK=-1, every item but the last (N - 1).")

KEYS = ("query_codes", "db_codes", "query_labels", "db_labels")

#: Cells (query, item) of one block of the multi-hot relevance matrix.
BLOCK_CELLS = 1 << 24

ConfigError = cli.ConfigError


class Codes(NamedTuple):
  """Validated inputs: packed codes ``uint32[Q, W]`` / ``[N, W]``, their length, and the labels: ``int[Q]`` /
  ``int[N]`` classes, or ``{0, 1}[Q, C]`` / ``[N, C]`` multi-hot rows when ``multi_hot``."""
  query_words: np.ndarray
  db_words: np.ndarray
  num_bits: int
  query_labels: np.ndarray
  db_labels: np.ndarray
  multi_hot: bool
  labels: str


# --------------------------------------------------------------------------- reading the .npz


def _not_bits(x: np.ndarray) -> np.ndarray:
  """Where ``x`` holds a value other than -1, 0 and 1."""
  return (x != -1) & (x != 0) & (x != 1)


def _bits(name: str, x: np.ndarray) -> Tuple[np.ndarray, Optional[str]]:
  """``{0, 1}`` bits of ``{-1, 1}`` or ``{0, 1}`` codes and their kind ("pm1" / "01"; ``None`` when every entry
  is 1, which reads the same either way)."""
  if x.dtype.kind not in "biuf":
    raise ConfigError(f"{name}: expected {{-1, 1}} or {{0, 1}} codes, got dtype {x.dtype}")
  other = _not_bits(x)
  if other.any():
    bad = x[other].ravel()[0].item()
    hint = " (packed words must be uint32)" if x.dtype.kind in "iu" else ""
    raise ConfigError(f"{name}: expected {{-1, 1}} or {{0, 1}} codes{hint}, got the value {bad!r}")
  neg, zero, one = (x == -1), (x == 0), (x == 1)
  if neg.any() and zero.any():
    raise ConfigError(f"{name}: expected {{-1, 1}} or {{0, 1}} codes, got -1, 0 and 1 in one array (a sign of 0, "
                      f"e.g. torch.sign(0.0), is 0: map it to 1 or -1)")
  return one.astype(np.uint8), "pm1" if neg.any() else "01" if zero.any() else None


def _words(data, num_bits: Optional[int]) -> Tuple[np.ndarray, np.ndarray, int]:
  """Packed ``uint32`` words of both code arrays and the code length."""
  q, x = data["query_codes"], data["db_codes"]
  for name, a in (("query_codes", q), ("db_codes", x)):
    if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] < 1:
      raise ConfigError(f"{name}: expected a 2-D array [rows, bits] with at least one row, got shape {a.shape}")
  packed = [a.dtype == np.uint32 for a in (q, x)]
  if any(packed) and not all(packed):
    (name, a), other = (("db_codes", x), "query_codes") if packed[0] else (("query_codes", q), "db_codes")
    raise ConfigError(f"{name}: expected packed uint32 words like {other}, got dtype {a.dtype}")
  if q.shape[1] != x.shape[1]:
    raise ConfigError(f"db_codes: expected {q.shape[1]} columns like query_codes {q.shape}, got shape {x.shape}")
  if all(packed):
    if num_bits is None:
      raise ConfigError("query_codes: packed uint32 words need their code length: --num_bits or a num_bits key "
                        "(uint32 arrays are read as packed words; store unpacked codes as another dtype)")
    try:  # the library's checks of packed codes (words per row, zero padding bits), in their one line
      for name, a in (("query_codes", q), ("db_codes", x)):
        _checks.check_codes(name, a, num_bits)
    except ValueError as e:
      raise ConfigError(str(e)) from None
    return q, x, num_bits
  if num_bits is not None and num_bits != q.shape[1]:
    words = q.dtype.kind in "iu" and _not_bits(q).any()  # integers that are not bits
    hint = f" (packed words must be uint32, not {q.dtype})" if words else ""
    raise ConfigError(f"num_bits: expected the codes' {q.shape[1]} columns{hint}, got {num_bits}")
  (qb, qkind), (xb, xkind) = _bits("query_codes", q), _bits("db_codes", x)
  if None not in (qkind, xkind) and qkind != xkind:
    want, got = ("{-1, 1}", "0") if qkind == "pm1" else ("{0, 1}", "-1")
    raise ConfigError(f"db_codes: expected {want} codes like query_codes, got {got}")
  return np.asarray(hcodes.pack_bits(qb)), np.asarray(hcodes.pack_bits(xb)), q.shape[1]


def _labels(data, num_q: int, num_db: int) -> Tuple[np.ndarray, np.ndarray, bool, str]:
  """Class labels ``int[Q]`` / ``int[N]`` or multi-hot rows, checked against the codes' rows."""
  out = []
  for name, rows, codes_name in (("query_labels", num_q, "query_codes"), ("db_labels", num_db, "db_codes")):
    y = data[name]
    if y.ndim not in (1, 2) or y.shape[0] != rows:
      raise ConfigError(f"{name}: expected {rows} labels (one per row of {codes_name}) as int[{rows}] or "
                        f"multi-hot [{rows}, C], got shape {y.shape}")
    if y.ndim == 1 and y.dtype.kind not in "iub":
      raise ConfigError(f"{name}: expected integer class labels, got dtype {y.dtype}")
    if y.ndim == 2 and (y.dtype.kind not in "biuf" or not np.all((y == 0) | (y == 1))):
      raise ConfigError(f"{name}: expected multi-hot rows of 0 and 1, got other values (dtype {y.dtype})")
    out.append(y)
  ql, xl = out
  if ql.ndim != xl.ndim or (ql.ndim == 2 and ql.shape[1] != xl.shape[1]):
    raise ConfigError(f"db_labels: expected labels like query_labels "
                      f"({'int[N]' if ql.ndim == 1 else f'[N, {ql.shape[1]}]'}), got shape {xl.shape}")
  if ql.ndim == 1:  # relevance is equality: any integer classes, numbered 0 .. K-1 by their sorted values
    for name, y in (("query_labels", ql), ("db_labels", xl)):
      if y.dtype == np.uint64 and y.size and y.max() > np.iinfo(np.int64).max:
        raise ConfigError(f"{name}: expected class labels within int64, got {y.max()}")
    ids = np.unique(np.concatenate([ql.astype(np.int64), xl.astype(np.int64)]), return_inverse=True)[1].reshape(-1)
    return ids[:num_q], ids[num_q:], False, "class labels"
  if np.all(ql.sum(1) == 1) and np.all(xl.sum(1) == 1):  # one-hot: the same relevance as class labels
    return np.argmax(ql, 1), np.argmax(xl, 1), False, "one-hot labels (read as class labels)"
  return ql.astype(np.float32), xl.astype(np.float32), True, "multi-hot labels (relevant: a label in common)"


def _read_npz(path: str) -> Dict[str, np.ndarray]:
  """The arrays of the ``.npz`` file at ``path`` by key; ConfigError (one line) for a file that is not one."""
  with open(path, "rb") as f:  # closed however the reading ends
    try:
      archive = np.load(f, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
      raise ConfigError(f"--codes={path}: expected an .npz file, got {type(e).__name__}: {e}") from None
    if isinstance(archive, np.ndarray):
      raise ConfigError(f"--codes={path}: expected an .npz file (np.savez) with keys {', '.join(KEYS)}, got a "
                        f".npy array of shape {archive.shape}")
    data = {}
    with archive:
      for key in archive.files:
        try:
          data[key] = archive[key]
        except ValueError as e:
          if "allow_pickle" in str(e):  # an object array: pickled, never read
            raise ConfigError(f"{key}: expected a numeric array, got an object array; store e.g. ragged label "
                              f"lists as multi-hot rows") from None
          raise ConfigError(f"--codes={path}: {key} could not be read (ValueError: {e})") from None
        except (OSError, EOFError, zipfile.BadZipFile, zlib.error) as e:
          kind = "zlib.error" if isinstance(e, zlib.error) else type(e).__name__
          raise ConfigError(f"--codes={path}: {key} could not be read ({kind}: {e})") from None
        if not isinstance(data[key], np.ndarray):  # a member that is not a .npy file comes back as bytes
          raise ConfigError(f"--codes={path}: {key} is not a .npy array (np.savez writes one per key)")
  return data


def load_codes(path: str, *, num_bits: Optional[int] = None) -> Codes:
  """Reads and checks the ``.npz`` at ``path`` (module docstring); ``num_bits``: the length of packed words
  (else the file's ``num_bits`` key). Raises ConfigError in one line naming the key and what was expected."""
  if os.path.isdir(path):
    raise ConfigError(f"--codes={path}: expected an .npz file, got a directory")
  if not os.path.isfile(path):
    raise ConfigError(f"--codes={path}: no such file")
  data = _read_npz(path)
  missing = [k for k in KEYS if k not in data]
  if missing:
    raise ConfigError(f"--codes={path}: no key {', '.join(missing)} (expected keys {', '.join(KEYS)}; "
                      f"found {', '.join(sorted(data)) or 'none'})")
  if "num_bits" in data:
    key = data["num_bits"]
    if key.shape != () or key.dtype.kind not in "iu" or int(key) < 1:
      raise ConfigError(f"num_bits: expected a positive integer scalar key, got {key!r}")
    if num_bits is not None and num_bits != int(key):
      raise ConfigError(f"--num_bits={num_bits}: expected the file's num_bits {int(key)}")
    num_bits = int(key)
  if num_bits is not None and num_bits < 1:
    raise ConfigError(f"--num_bits: expected a positive integer, got {num_bits}")
  q, x, num_bits = _words(data, num_bits)
  ql, xl, multi_hot, kind = _labels(data, q.shape[0], x.shape[0])
  shared = (ql.sum(0) > 0) & (xl.sum(0) > 0) if multi_hot else np.isin(ql, xl)  # a label both sides hold
  if not shared.any():
    raise ConfigError("query_labels, db_labels: expected at least one query with a relevant database item (a "
                      "label in common), got none: every AP would be undefined")
  return Codes(q, x, num_bits, ql, xl, multi_hot, kind)


# --------------------------------------------------------------------------- DeepHash-pytorch's mAP@k


def _harmonic(n: int) -> np.ndarray:
  """``H[t] = sum_{i <= t} 1/i`` for ``t = 0 .. n`` (float64)."""
  return np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1, n + 1))])


def deephash_ap_ties(hist: np.ndarray, *, k: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
  r"""DeepHash-pytorch's AP@k of each query over the orders of its tied items: the mean, maximum and minimum.

  DeepHash's AP@k of one ranking sums the precisions at the ranks ``t_j`` of the relevant items within the
  top ``k`` and divides by their number ``R`` (0 when ``R = 0``). Only the tie straddling rank ``k`` decides
  ``R``: with ``m`` of its relevant items inside the cutoff (``m`` hypergeometric over the tie orders), the
  maximum puts every tie's relevant items first (the straddling tie's first within the cutoff), the minimum
  last, each maximised / minimised over ``m``; the mean is exact over all orders.

  .. math:: \mathrm{AP}@k = \frac{1}{R} \sum_{j=1}^{R} \frac{j}{t_j}, \quad
     R = |\{\text{relevant items in the top } k\}|

  Args:
    hist: ``int[Q, B, 2]`` counts per distance bin (ascending): ``[..., 0]`` irrelevant, ``[..., 1]`` relevant.
    k: the cutoff (clamped to each query's item count).

  Returns:
    ``(tie_aware, optimistic, pessimistic)``, each ``float64[Q]``; 0 where no order retrieves a relevant item.

  >>> h = np.array([[[0, 1], [2, 1], [0, 0]]])  # d=0: one relevant; d=1: one relevant of three
  >>> [round(float(v[0]), 4) for v in deephash_ap_ties(h, k=2)]  # rank 2 relevant or not: AP 1 either way
  [1.0, 1.0, 1.0]
  >>> # k=3: in 1/3 of the orders ranks 2-3 hold no relevant item (AP 1); else it is at rank 2 (AP 1) or 3
  >>> [round(float(v[0]), 4) for v in deephash_ap_ties(h, k=3)]  # (AP (1 + 2/3) / 2): mean 1/3 + 2/3 (11/12)
  [0.9444, 1.0, 0.8333]
  """
  hist = np.asarray(hist, np.int64)
  n_all, p_all = hist.sum(-1), hist[..., 1]
  h = _harmonic(int(n_all.sum(-1).max()))

  def run(before_rel, start, m):  # sum_{j=1..m} (before_rel + j) / (start + j): m relevant in a row
    return m + (before_rel - start) * (h[start + m] - h[start])

  out = np.zeros((3, hist.shape[0]))
  for q in range(hist.shape[0]):
    n, p = n_all[q], p_all[q]
    through = np.cumsum(n)
    before, p_before = through - n, np.cumsum(p) - p
    kq = min(k, int(through[-1]))
    c = int(np.searchsorted(through, kq))  # the bin holding rank kq: bins before it lie wholly in the top k
    n_in, p_in, b_in, pb_in, t_in = n[:c], p[:c], before[:c], p_before[:c], through[:c]
    best = np.sum(run(pb_in, b_in, p_in))
    worst = np.sum(run(pb_in, t_in - p_in, p_in))
    r = np.where(n_in > 1, (p_in - 1) / np.maximum(n_in - 1, 1), 0.0)
    dh = h[t_in] - h[b_in]
    mean = np.sum(np.where(n_in > 0, p_in / np.maximum(n_in, 1) * ((pb_in + 1) * dh + r * (n_in - (b_in + 1) * dh)),
                           0.0))
    big_b, big_p, nc, pc, s = int(before[c]), int(p_before[c]), int(n[c]), int(p[c]), kq - int(before[c])
    m = np.arange(max(0, pc - (nc - s)), min(pc, s) + 1)  # relevant items of the straddling tie in the top k
    dh_s = h[big_b + s] - h[big_b]
    rate = (m - 1) / (s - 1) if s > 1 else np.zeros(len(m))
    tie = {"best": run(big_p, big_b, m), "worst": run(big_p, big_b + s - m, m),
           "mean": m / s * ((big_p + 1) * dh_s + rate * (s - (big_b + 1) * dh_s))}
    total = big_p + m
    ap = lambda inside, part: np.where(total > 0, (inside + part) / np.maximum(total, 1), 0.0)
    # Hypergeometric chances of m, by the ratio of consecutive terms (no factorials).
    ratios = (pc - m[:-1]) * (s - m[:-1]) / ((m[:-1] + 1) * (nc - pc - s + m[:-1] + 1.0))
    log_w = np.concatenate([[0.0], np.cumsum(np.log(ratios))])
    w = np.exp(log_w - log_w.max())
    out[:, q] = (np.sum(w * ap(mean, tie["mean"])) / np.sum(w), np.max(ap(best, tie["best"])),
                 np.min(ap(worst, tie["worst"])))
  return np.clip(out[0], out[2], out[1]), out[1], out[2]  # the mean, kept within its bounds' rounding


def _relevance_row(c: Codes, i: int) -> np.ndarray:
  """``float32[N]`` relevance of query ``i``, as DeepHash-pytorch builds it (``dot(labels) > 0``)."""
  if c.multi_hot:
    return (np.dot(c.query_labels[i], c.db_labels.T) > 0).astype(np.float32)
  return (c.db_labels == c.query_labels[i]).astype(np.float32)


def deephash_map(c: Codes, *, topk: int) -> Dict:
  r"""mAP@k by DeepHash-pytorch's ``CalcTopMap`` (``np.argsort`` tie order) and its tie-aware mean and range.

  Per query, as ``CalcTopMap``: float32 distances ``0.5 (b - B_q B_x^T)`` of ``{-1, 1}`` codes,
  ``np.argsort`` (numpy's default quicksort), the top ``k``, the mean of ``j / t_j`` over the relevant items
  there (0 when none), summed over the queries in order and divided by ``Q``. The same per-query histograms
  give :func:`deephash_ap_ties`' mean, maximum and minimum over tie orders, and hashjax's tie-aware AP@k
  (``Z = min(N^+, k)``, queries without a relevant item left out).

  .. math:: \mathrm{mAP}@k = \frac{1}{Q} \sum_q \frac{1}{R_q} \sum_{j=1}^{R_q} \frac{j}{t_{q,j}}

  Returns:
    dict of Python numbers: ``argsort``, ``tie_aware``, ``optimistic``, ``pessimistic``, ``k``,
    ``hashjax_tie_aware_ap_at_k``.

  >>> c = Codes(hcodes.pack_bits(np.array([[0, 0]])), hcodes.pack_bits(np.array([[0, 1], [1, 0], [1, 1]])), 2,
  ...           np.array([0]), np.array([1, 0, 0]), False, "class labels")
  >>> out = deephash_map(c, topk=1)  # one relevant item of the tie at d=1 ranks first in one order of two
  >>> out["tie_aware"], out["optimistic"], out["pessimistic"]
  (0.5, 1.0, 0.0)
  """
  b = c.num_bits
  q_pm = np.asarray(hcodes.unpack_bits(c.query_words, b), np.float32) * 2 - 1
  x_pm = np.asarray(hcodes.unpack_bits(c.db_words, b), np.float32) * 2 - 1
  num_q, num_db = len(q_pm), len(x_pm)
  topk = min(topk, num_db)
  hist = np.zeros((num_q, b + 1, 2), np.int64)
  total = 0
  for i in range(num_q):
    gnd = _relevance_row(c, i)
    hamm = 0.5 * (b - np.dot(q_pm[i, :], x_pm.transpose()))
    ind = np.argsort(hamm)
    tgnd = gnd[ind][0:topk]
    tsum = np.sum(tgnd).astype(int)
    if tsum > 0:
      total = total + np.mean(np.linspace(1, tsum, tsum) / (np.asarray(np.where(tgnd == 1)) + 1.0))
    hist[i] = np.bincount(hamm.astype(np.int64) * 2 + gnd.astype(np.int64), minlength=2 * (b + 1)).reshape(b + 1, 2)
  mean, best, worst = deephash_ap_ties(hist, k=topk)
  at_k = metrics.mean_and_count(np.asarray(metrics.tie_aware_ap_from_histogram(hist, k=topk)))
  return {"argsort": float(total / num_q), "tie_aware": float(np.mean(mean)), "optimistic": float(np.mean(best)),
          "pessimistic": float(np.mean(worst)), "k": topk, "hashjax_tie_aware_ap_at_k": float(at_k.mean)}


# --------------------------------------------------------------------------- the tie-aware table


#: evaluate_codes' means and the count of queries each averages over.
_WEIGHTS = {"tie_aware_ap": "defined_ap", "optimistic_ap": "defined_ap", "pessimistic_ap": "defined_ap",
            "recall_at_radius": "defined_ap", "tie_aware_ndcg": "defined_ndcg",
            "precision_at_radius": "num_queries", "tie_aware_precision_at_k": "num_queries"}


def _merge(blocks) -> Dict:
  """One :func:`evaluate_codes` result from those of blocks of queries: each mean weighted by the queries it
  averages over, counts summed."""
  if len(blocks) == 1:
    return blocks[0]
  weights = [{"defined_ap": r["num_queries"] - r["num_undefined_ap"],
              "defined_ndcg": r["num_queries"] - r["num_undefined_ndcg"], "num_queries": r["num_queries"]}
             for r in blocks]
  out = dict(blocks[0])
  for key in blocks[0]:
    if key in _WEIGHTS:
      pairs = [(w[_WEIGHTS[key]], r[key]) for w, r in zip(weights, blocks) if w[_WEIGHTS[key]] > 0]
      out[key] = sum(w * v for w, v in pairs) / sum(w for w, _ in pairs) if pairs else math.nan
    elif key.startswith("num_") and key != "num_db":
      out[key] = sum(r[key] for r in blocks)
  return out


def tie_aware_table(c: Codes, *, k: int, block_cells: int = BLOCK_CELLS) -> Dict:
  """:func:`hashjax.evaluate.evaluate_codes` of the codes: with class labels in one call; with multi-hot
  labels on the relevance matrix, built and evaluated in blocks of queries of at most ``block_cells`` cells."""
  k = min(k, len(c.db_words))
  if not c.multi_hot:
    return evaluate_codes(c.query_words, c.db_words, num_bits=c.num_bits, query_labels=c.query_labels,
                          db_labels=c.db_labels, k=k)
  step = max(1, block_cells // len(c.db_words))
  blocks = []
  for start in range(0, len(c.query_words), step):
    rows = slice(start, start + step)
    relevance = (c.query_labels[rows] @ c.db_labels.T > 0).astype(np.int32)
    blocks.append(evaluate_codes(c.query_words[rows], c.db_words, num_bits=c.num_bits, relevance=relevance, k=k))
  return _merge(blocks)


# --------------------------------------------------------------------------- the command


_TABLE = (("tie_aware_ap", "AP over the whole ranking, mean over all orders of tied items (He et al. 2018)"),
          ("optimistic_ap", "the same AP, relevant items first in every tie"),
          ("pessimistic_ap", "the same AP, relevant items last in every tie"),
          ("tie_aware_ndcg", "NDCG over the whole ranking, mean over tie orders"),
          ("precision_at_radius", "precision of the items within Hamming radius 2 (0 when none)"),
          ("recall_at_radius", "recall within Hamming radius 2"),
          ("tie_aware_precision_at_k", "precision@k, a tie straddling k counted by its expectation"))

_DEEPHASH = (("argsort", "ties in the order np.argsort leaves them, as CalcTopMap reports"),
             ("tie_aware", "mean over all orders of tied items"),
             ("optimistic", "best order: relevant items first in every tie"),
             ("pessimistic", "worst order"))


def evaluate_file(path: str, *, num_bits: Optional[int] = None, topk: int = 1000) -> Dict:
  """The results of the codes at ``path`` (module docstring): ``{"codes", "num_queries", "num_db", "num_bits",
  "labels", "tie_aware": evaluate_codes' dict, "deephash": deephash_map's dict}``."""
  if topk < 1 and topk != -1:
    raise ConfigError(f"--topk: expected an integer >= 1 (clamped to the database size) or -1, got {topk}")
  c = load_codes(path, num_bits=num_bits)
  if topk == -1:  # DeepHash-pytorch's topK=-1: its slice [0:-1], every item but the last
    if len(c.db_words) < 2:
      raise ConfigError(f"--topk=-1: expected at least 2 database items (it ranks all but the last), got "
                        f"{len(c.db_words)}")
    topk = len(c.db_words) - 1
  return {"codes": path, "num_queries": len(c.query_words), "num_db": len(c.db_words), "num_bits": c.num_bits,
          "labels": c.labels, "tie_aware": tie_aware_table(c, k=topk), "deephash": deephash_map(c, topk=topk)}


def format_report(result: Dict) -> str:
  """The printed report: the tie-aware table and the DeepHash-pytorch columns, each value with its meaning."""
  t, d = result["tie_aware"], result["deephash"]
  k = d["k"]
  lines = [f"{result['codes']}: {result['num_queries']} queries, {result['num_db']} database items, "
           f"{result['num_bits']} bits, {result['labels']}",
           f"tie-aware table (hashjax.evaluate.evaluate_codes, k={t['k']}; AP, NDCG, recall: means over the "
           f"{t['num_queries'] - t['num_undefined_ap']} queries with a relevant item, precisions over all):"]
  lines += [f"  {name:<26}{t[name]:8.4f}  {what}" for name, what in _TABLE]
  lines += [f"  {'tie_aware_ap_at_k':<26}{d['hashjax_tie_aware_ap_at_k']:8.4f}  AP@{k}, mean over tie orders, "
            f"divided by min(relevant items in the database, {k})",
            f"mAP@{k} by DeepHash-pytorch's CalcTopMap formula (per query: mean precision at the relevant items "
            f"of the top {k}, 0 when none; mean over all {result['num_queries']} queries):"]
  lines += [f"  {name:<26}{d[name]:8.4f}  {what}" for name, what in _DEEPHASH]
  lines.append(f"  ties can move DeepHash's mAP@{k} by {d['optimistic'] - d['pessimistic']:.4f} "
               f"(argsort {d['argsort'] - d['tie_aware']:+.4f} from the tie-aware mean)")
  return "\n".join(lines)


def main():
  # --workdir is optional here: taken (created and held) before the work, when given.
  workdir = cli.WORKDIR.value
  if workdir is not None:
    workdir = cli.workdir(workdir, launcher="experiments.evaluate_codes")
  result = evaluate_file(_CODES.value, num_bits=_NUM_BITS.value, topk=_TOPK.value)
  print(format_report(result))
  if workdir is not None:
    path = os.path.join(workdir, "results.json")
    io.atomic_write_json(path, result)
    print(f"results: {path}")


def launch():
  """Runs the command line (:func:`experiments.cli.run`: help, ``--codes`` required, one-line errors)."""
  cli.run(main, config=False, required=("codes",), check=None)


if __name__ == "__main__":
  launch()
