"""experiments.cascade (Nair et al. 2012, Sec. 6) against a loop reference: shortlist, then a kNN vote."""

import os
import sys

import numpy as np
import pytest

from brute_force import ref_distances as _ref_distances
from hashjax import codes


def _repo_on_path():
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  if root not in sys.path:
    sys.path.insert(0, root)


_repo_on_path()
from experiments import cascade  # pylint: disable=g-import-not-at-top,wrong-import-position


def _ref_cascade(sq, sx, lq, lx, labels, *, k, num_classes, radius=None, bins=None):
  """Loop reference: shortlist by the short code, then Nair's relative-threshold kNN vote."""
  ds, dl = _ref_distances(sq, sx), _ref_distances(lq, lx)
  preds, sizes = [], []
  for j in range(sq.shape[0]):
    if radius is not None:
      keep = [i for i in range(sx.shape[0]) if ds[j, i] <= radius]
    else:
      nearest_bins = sorted(set(ds[j].tolist()))[:bins]
      keep = [i for i in range(sx.shape[0]) if ds[j, i] in nearest_bins]
    sizes.append(len(keep))
    kept_bins = sorted({int(dl[j, i]) for i in keep})[:k]
    votes = [0] * num_classes
    for i in keep:
      if dl[j, i] in kept_bins:
        votes[labels[i]] += 1
    best = max(votes)
    preds.append(votes.index(best) if best > 0 else -1)
  return np.array(preds), np.array(sizes)


def _packed(rng, n, num_bits):
  return np.asarray(codes.pack_bits(rng.integers(0, 2, (n, num_bits))))


@pytest.mark.parametrize("short_bits,long_bits", [(4, 16), (6, 40)])
def test_cascade_matches_loop_reference(short_bits, long_bits):
  rng = np.random.default_rng(short_bits)
  num_q, n, num_classes = 25, 150, 3
  sq, sx = _packed(rng, num_q, short_bits), _packed(rng, n, short_bits)
  lq, lx = _packed(rng, num_q, long_bits), _packed(rng, n, long_bits)
  labels = rng.integers(0, num_classes, n)
  for kw in ({"radius": 0}, {"radius": 1}, {"radius": 2}, {"bins": 1}, {"bins": 2}):
    for k in (1, 3):
      ref_p, ref_s = _ref_cascade(sq, sx, lq, lx, labels, k=k, num_classes=num_classes, **kw)
      out = cascade.cascade_knn_classify(
          sq, sx, lq, lx, labels, short_bits=short_bits, long_bits=long_bits, k=k, num_classes=num_classes,
          shortlist_radius=kw.get("radius"), shortlist_bins=kw.get("bins"), query_block=7)
      np.testing.assert_array_equal(np.asarray(out.shortlist_sizes), ref_s, err_msg=str(kw))
      np.testing.assert_array_equal(np.asarray(out.predictions), ref_p, err_msg=f"{kw} k={k}")
  # With 20 items over 64 short codes, radius 0 leaves some queries without a
  # shortlist: they abstain (-1).
  out = cascade.cascade_knn_classify(sq, sx[:20], lq, lx[:20], labels[:20], short_bits=short_bits,
                                   long_bits=long_bits, k=1, num_classes=num_classes, shortlist_radius=0)
  if short_bits == 6:
    empty = np.asarray(out.shortlist_sizes) == 0
    assert empty.any() and np.all(np.asarray(out.predictions)[empty] == -1)


def test_cascade_bad_inputs():
  rng = np.random.default_rng(0)
  sq, sx, lq, lx = _packed(rng, 3, 4), _packed(rng, 9, 4), _packed(rng, 3, 40), _packed(rng, 9, 40)
  labels = rng.integers(0, 2, 9)
  base = dict(short_bits=4, long_bits=40, k=1, num_classes=2)

  def run(*args, **kw):
    merged = {**base, "shortlist_radius": 1, **kw}
    merged = {key: v for key, v in merged.items() if v is not None or key.startswith("shortlist")}
    return cascade.cascade_knn_classify(*(args or (sq, sx, lq, lx, labels)), **merged)

  cases = [
      ("shortlist_radius", lambda: run(shortlist_bins=2)),
      ("shortlist_radius", lambda: run(shortlist_radius=None)),
      ("shortlist_radius", lambda: run(shortlist_radius=-1)),
      ("shortlist_bins", lambda: run(shortlist_radius=None, shortlist_bins=0)),
      ("short_bits", lambda: run(short_bits=40)),
      ("long_bits", lambda: run(long_bits=4)),
      ("long_db_words", lambda: run(sq, sx, lq, lx[:8], labels)),
      ("long_query_words", lambda: run(sq, sx, lq[:2], lx, labels)),
      ("short_db_words", lambda: run(sq, sx | np.uint32(1 << 5), lq, lx, labels)),
      ("short_query_words", lambda: run(sq.astype(np.int32), sx, lq, lx, labels)),
      ("db_labels", lambda: run(sq, sx, lq, lx, labels[:8])),
      ("num_classes", lambda: run(num_classes=0)),
      ("query_block", lambda: run(query_block=0)),
      ("db_labels", lambda: run(sq, sx, lq, lx, labels + 2)),  # labels >= num_classes
      ("db_labels", lambda: run(sq, sx, lq, lx, labels.astype(np.float32))),
      ("threshold", lambda: run(threshold="top")),
      ("k", lambda: run(k=0)),
      ("short_query_words", lambda: run(sq[:, None], sx, lq, lx, labels)),
      ("short_db_words", lambda: run(sq, np.zeros((9, 2), np.uint32), lq, lx, labels)),
  ]
  for name, fn in cases:
    with pytest.raises(ValueError, match=name):
      fn()
