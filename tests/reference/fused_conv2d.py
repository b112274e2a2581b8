"""The package's reference of fused_conv2d (python/metal_ops/_reference/fused_conv2d.py), without TensorFlow."""
from tests.reference import packaged

packaged("fused_conv2d", globals())
