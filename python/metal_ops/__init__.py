"""tf-metal-ops: TensorFlow custom ops for neural-graphics training.

Every public function loads the compiled library lazily on first call. Op
wrappers live in one module per op (metal_ops/<op>.py) next to their gradients.
"""
from metal_ops._build import build_info
from metal_ops._loader import load_library
from metal_ops.distortion_loss import distortion_loss
from metal_ops import fusion
from metal_ops.fused_conv2d import fused_conv2d
from metal_ops.fused_mlp import fused_mlp
from metal_ops.hash_encode import hash_encode, hash_grid_size
from metal_ops import layers
from metal_ops.ray_march import RayMarchSamples, pack_occupancy, ray_march
from metal_ops.robust_loss import robust_loss
from metal_ops.sh_encode import sh_encode
from metal_ops import losses
from metal_ops.volume_render import VolumeRenderOutput, volume_render
from metal_ops.zero_out import zero_out

__version__ = "0.1.0"

__all__ = [
    "build_info",
    "load_library",
    "distortion_loss",
    "fused_conv2d",
    "fused_mlp",
    "fusion",
    "hash_encode",
    "hash_grid_size",
    "layers",
    "losses",
    "pack_occupancy",
    "ray_march",
    "RayMarchSamples",
    "robust_loss",
    "sh_encode",
    "VolumeRenderOutput",
    "volume_render",
    "zero_out",
]
