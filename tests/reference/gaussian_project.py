"""The package's reference of gaussian_project (python/metal_ops/_reference/gaussian_project.py), without TensorFlow."""
from tests.reference import packaged

packaged("gaussian_project", globals())
