"""tf-metal-ops: TensorFlow custom ops for neural-graphics training.

Importing metal_ops loads the compiled library where it has XLA kernels
(every build but macOS's): XLA takes op kernels in once, at TensorFlow's
first op in the process, so `import metal_ops` before it is all a user does
(docs/XLA.md). Elsewhere, and when loading fails, the library loads on the
first op call, which raises the loader's error. Op
wrappers live in one module per op (metal_ops/<op>.py) next to their gradients;
the package's attribute `metal_ops.<op>` is the op's function (so
`import metal_ops.<op> as m` gives the function; the module is
`importlib.import_module("metal_ops.<op>")`).
"""
import sys as _sys

from metal_ops import _loader

__version__ = "0.1.0"


def _usage_only():
    """Whether this import is the one `python -m metal_ops --help` (or
    --version) makes before running metal_ops.__main__, which prints its
    usage without TensorFlow (sys.orig_argv: Python 3.10 and later)."""
    argv = list(getattr(_sys, "orig_argv", []))
    if "-m" not in argv or argv.index("-m") + 1 >= len(argv) or argv[argv.index("-m") + 1] != "metal_ops":
        return False
    return bool({"-h", "--help", "--version"} & set(argv[argv.index("-m") + 2:]))


if not _usage_only():
    # Before anything imports TensorFlow: a missing or mismatched TensorFlow is one
    # clear ImportError (both versions, what to install), not an undefined symbol.
    _loader.check_tensorflow()

    from metal_ops._build import build_info  # noqa: E402
    from metal_ops._loader import load_library  # noqa: E402
    from metal_ops.distortion_loss import distortion_loss, packed_distortion_loss  # noqa: E402
    from metal_ops import fusion  # noqa: E402
    from metal_ops.fused_conv2d import fused_conv2d  # noqa: E402
    from metal_ops.fused_mlp import fused_mlp  # noqa: E402
    from metal_ops.hash_encode import hash_encode, hash_grid_size  # noqa: E402
    from metal_ops import layers  # noqa: E402
    from metal_ops.packed_volume_render import PackedVolumeRenderOutput, packed_volume_render  # noqa: E402
    from metal_ops.ray_march import (  # noqa: E402
        RayMarchSamples, RayMarchStaticSamples, pack_occupancy, ray_march, ray_march_static)
    from metal_ops.robust_loss import robust_loss  # noqa: E402
    from metal_ops.scene_contract import scene_contract  # noqa: E402
    from metal_ops.sh_encode import sh_encode  # noqa: E402
    from metal_ops.gaussian_tile_bin import gaussian_tile_bin, gaussian_tile_bin_static  # noqa: E402
    from metal_ops.gaussian_project import gaussian_project  # noqa: E402
    from metal_ops.gaussian_rasterize import gaussian_rasterize  # noqa: E402
    from metal_ops import splat  # noqa: E402
    from metal_ops.splat import rasterize_gaussians  # noqa: E402
    from metal_ops.trunc_exp import trunc_exp  # noqa: E402
    from metal_ops import losses  # noqa: E402
    from metal_ops.volume_render import VolumeRenderOutput, volume_render  # noqa: E402
    from metal_ops.zero_out import zero_out  # noqa: E402,F401  (the tutorial op: metal_ops.zero_out, not in __all__)

    # docs/XLA.md: the XLA kernels must be registered before TensorFlow's first op.
    if _loader.builds_xla_kernels():
        try:
            load_library()
        except ImportError:
            pass  # not built or not loadable here: the first op call raises the loader's message

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
    "packed_distortion_loss",
    "PackedVolumeRenderOutput",
    "packed_volume_render",
    "ray_march",
    "ray_march_static",
    "RayMarchSamples",
    "RayMarchStaticSamples",
    "robust_loss",
    "scene_contract",
    "sh_encode",
    "gaussian_tile_bin",
    "gaussian_tile_bin_static",
    "gaussian_project",
    "gaussian_rasterize",
    "rasterize_gaussians",
    "splat",
    "trunc_exp",
    "VolumeRenderOutput",
    "volume_render",
]
