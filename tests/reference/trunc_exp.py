"""The package's reference of trunc_exp (python/metal_ops/_reference/trunc_exp.py), without TensorFlow."""
from tests.reference import packaged

packaged("trunc_exp", globals())
