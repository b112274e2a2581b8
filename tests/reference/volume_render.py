"""The package's reference of volume_render (python/metal_ops/_reference/volume_render.py), without TensorFlow."""
from tests.reference import packaged

packaged("volume_render", globals())
