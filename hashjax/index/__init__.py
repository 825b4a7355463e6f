"""Indexes over packed codes: the inverted index for short codes, multi-index hashing for long ones, and their
storage.

* :mod:`hashjax.index.inverted`: the inverted index of Nair et al. (radius search over codes of at most 32 bits);
* :mod:`hashjax.index.multi`: multi-index hashing (Norouzi, Punjani and Fleet), exact k-NN and radius search over
  codes of any length;
* :mod:`hashjax.index.storage`: :func:`save` / :func:`load` of either index, or of a :class:`CodeDatabase`, to a
  directory, atomically, with a format version and checksums;
* :mod:`hashjax.index.interop`: packed codes to and from faiss binary indexes (the optional ``faiss`` package).

Every search returns exactly what :func:`hashjax.search.knn` / :func:`hashjax.search.radius_search` return,
ordered by (distance, index).
"""

from hashjax.index.interop import from_faiss, from_faiss_codes, to_faiss, to_faiss_codes  # noqa: F401
from hashjax.index.inverted import (  # noqa: F401
    COARSE_FILTER_BITS, DIRECT_MAX_BITS, MAX_FILTER_BITS, MAX_MASKS, PROBE_COST_PER_SCANNED_CODE, InvertedIndex,
    build_inverted_index, choose_method, lookup, num_masks)
from hashjax.index.multi import (  # noqa: F401
    MultiIndex, build_multi_index, default_num_tables, multi_index_knn, multi_index_radius)
from hashjax.index.storage import FORMAT_VERSION, CodeDatabase, load, save  # noqa: F401
from hashjax.search import RaggedNeighbors  # noqa: F401
