"""NeRF sample: procedural scene, hash-grid NeRF trained with metal_ops (see README.md)."""
import os
import sys

# Run from a source checkout (`python -m examples.nerf.train` in the repository root):
# make the in-tree package python/metal_ops importable when it is not installed.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_PY = os.path.join(_ROOT, "python")
if os.path.isdir(os.path.join(_PY, "metal_ops")) and _PY not in sys.path:
    try:
        import metal_ops  # noqa: F401
    except ImportError:
        sys.path.insert(0, _PY)
