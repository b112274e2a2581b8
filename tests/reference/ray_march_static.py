"""The package's reference of ray_march_static (python/metal_ops/_reference/ray_march_static.py), without TensorFlow."""
from tests.reference import packaged

packaged("ray_march_static", globals())
