"""The package's reference of hash_encode (python/metal_ops/_reference/hash_encode.py), without TensorFlow."""
from tests.reference import packaged

packaged("hash_encode", globals())
