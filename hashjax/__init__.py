"""hashjax: learning and searching binary hash codes as learning to rank, in JAX."""

from hashjax import codes
from hashjax.codes import binarize, distance_histogram, hamming_distance, hamming_histogram
from hashjax.codes import pack_bits, unpack_bits, weighted_hamming_distance

__version__ = "0.1.0"
