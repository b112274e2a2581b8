"""The package's reference of distortion_loss (python/metal_ops/_reference/distortion_loss.py), without TensorFlow."""
from tests.reference import packaged

packaged("distortion_loss", globals())
