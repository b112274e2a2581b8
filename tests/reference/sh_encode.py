"""The package's reference of sh_encode (python/metal_ops/_reference/sh_encode.py), without TensorFlow."""
from tests.reference import packaged

packaged("sh_encode", globals())
