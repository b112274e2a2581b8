"""The package's reference of scene_contract (python/metal_ops/_reference/scene_contract.py), without TensorFlow."""
from tests.reference import packaged

packaged("scene_contract", globals())
