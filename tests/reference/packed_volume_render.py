"""The package's reference of packed_volume_render (python/metal_ops/_reference/packed_volume_render.py), without TensorFlow."""
from tests.reference import packaged

packaged("packed_volume_render", globals())
