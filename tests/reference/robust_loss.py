"""The package's reference of robust_loss (python/metal_ops/_reference/robust_loss.py), without TensorFlow."""
from tests.reference import packaged

packaged("robust_loss", globals())
