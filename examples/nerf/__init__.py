"""NeRF sample: procedural scene, hash-grid NeRF trained with metal_ops (see README.md)."""
