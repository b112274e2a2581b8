"""3D Gaussian splatting sample: trains Gaussians from posed images with metal_ops (see README.md)."""
