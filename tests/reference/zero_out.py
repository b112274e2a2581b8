"""The package's reference of zero_out (python/metal_ops/_reference/zero_out.py), without TensorFlow."""
from tests.reference import packaged

packaged("zero_out", globals())
