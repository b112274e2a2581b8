"""The package's reference of gaussian_rasterize (python/metal_ops/_reference/gaussian_rasterize.py), without TensorFlow."""
from tests.reference import packaged

packaged("gaussian_rasterize", globals())
