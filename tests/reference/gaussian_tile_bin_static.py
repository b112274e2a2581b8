"""The package's reference of gaussian_tile_bin_static (python/metal_ops/_reference/gaussian_tile_bin_static.py), without TensorFlow."""
from tests.reference import packaged

packaged("gaussian_tile_bin_static", globals())
