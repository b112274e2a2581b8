"""The package's reference of gaussian_tile_bin (python/metal_ops/_reference/gaussian_tile_bin.py), without TensorFlow."""
from tests.reference import packaged

packaged("gaussian_tile_bin", globals())
