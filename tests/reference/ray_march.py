"""The package's reference of ray_march (python/metal_ops/_reference/ray_march.py), without TensorFlow."""
from tests.reference import packaged

packaged("ray_march", globals())
