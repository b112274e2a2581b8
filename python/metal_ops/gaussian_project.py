"""The projection of 3D Gaussians through a pinhole camera, for Gaussian
splatting (kernels/gaussian_project/gaussian_project_op.cc).

The formulas (gsplat's, classic 3DGS), the op's declaration and its checks
live once in kernels/gaussian_project/gaussian_project.h (CPU, CUDA and Metal
kernels). docs/GAUSSIAN_PROJECT.md describes the op.
"""
import collections

import tensorflow as tf

from metal_ops._args import float_tensor, op_attrs
from metal_ops._loader import load_library

GaussianProjection = collections.namedtuple("GaussianProjection", ["means2d", "conics", "depths", "radii"])


def gaussian_project(means, quats, scales, viewmat, K, *, width, height, near_plane=0.01, far_plane=1e10,
                     eps2d=0.3, opacities=None, name=None):
    """Projects N 3D Gaussians to the image of a pinhole camera.

    Args:
      means: [N, 3] float32 world-space means.
      quats: [N, 4] float32 rotations (w, x, y, z), normalised inside the op;
        a zero (or non-finite) quaternion is an error naming 'quats'.
      scales: [N, 3] float32 linear scales (the standard deviations along the
        rotated axes); zero, negative or non-finite is an error naming 'scales'.
        A non-finite mean is an error naming 'means'.
      viewmat: [4, 4] float32 world-to-camera matrix (OpenCV axes: x right,
        y down, +z forward). No gradient.
      K: [3, 3] float32 intrinsics [[fx, 0, cx], [0, fy, cy], [0, 0, 1]]. No gradient.
      width, height: the image size in pixels, 1 to 65536.
      near_plane, far_plane: Gaussians whose camera-space depth lies outside
        [near_plane, far_plane] are culled.
      eps2d: the dilation added to the 2D covariance's diagonal (pixels^2).
      opacities: [N] float32 opacities (after the sigmoid), which size the
        radii; None: ones. A Gaussian of opacity below 1/255 (or NaN) is
        culled. No gradient.

    Returns `GaussianProjection(means2d, conics, depths, radii)`:
      means2d [N, 2] float32 pixel coordinates (pixel (row i, column j) has
      its centre at (j + 0.5, i + 0.5)); conics [N, 3] float32, the inverse
      2D covariance (inv[0,0], inv[0,1], inv[1,1]); depths [N] float32, the
      camera-space z; radii [N, 2] int32, the half-sides (x, y) in pixels of
      the box outside which the Gaussian's alpha (opacity exp(-sigma)) is
      below 1/255, at most 3.33 sigma (gsplat's opacity-aware box). A culled
      Gaussian (too transparent, behind the near plane, beyond the far plane,
      or wholly off the image) has radii 0 and zeros in the other outputs.

    Differentiable w.r.t. means, quats and scales (from means2d, conics and
    depths; zero for culled Gaussians); radii have no gradient.
    """
    op = "gaussian_project"
    with tf.name_scope(name or op):
        attrs = op_attrs(op, "MetalOpsGaussianProject", width=width, height=height, near_plane=near_plane,
                         far_plane=far_plane, eps2d=eps2d)
        means, quats, scales, viewmat, K = [float_tensor(op, arg, value) for arg, value in
                                            (("means", means), ("quats", quats), ("scales", scales),
                                             ("viewmat", viewmat), ("K", K))]
        opacities = (tf.ones(tf.shape(means)[:1], tf.float32) if opacities is None
                     else float_tensor(op, "opacities", opacities))
        return GaussianProjection(*load_library().metal_ops_gaussian_project(means, quats, scales, opacities,
                                                                             viewmat, K, **attrs))


@tf.RegisterGradient("MetalOpsGaussianProject")
def _gaussian_project_grad(op, grad_means2d, grad_conics, grad_depths, _grad_radii):
    attrs = {a: op.get_attr(a) for a in ("width", "height", "near_plane", "far_plane", "eps2d")}
    means, quats, scales, _opacities, viewmat, k = op.inputs
    zeros = tf.zeros_like
    grad_means2d = zeros(op.outputs[0]) if grad_means2d is None else grad_means2d
    grad_conics = zeros(op.outputs[1]) if grad_conics is None else grad_conics
    grad_depths = zeros(op.outputs[2]) if grad_depths is None else grad_depths
    grad_means, grad_quats, grad_scales = load_library().metal_ops_gaussian_project_grad(
        grad_means2d, grad_conics, grad_depths, means, quats, scales, viewmat, k, op.outputs[3], **attrs)
    return [grad_means, grad_quats, grad_scales, None, None, None]


def scene(rng, n, width=64, height=48):
    """A test scene of n Gaussians in front of a camera (NumPy float32): means,
    quats, scales, viewmat, K; most land on the image of width x height, some
    off it or behind the camera. The self-test's and the tests' inputs."""
    import numpy as np

    means = np.stack([rng.uniform(-2.5, 2.5, n), rng.uniform(-2, 2, n), rng.uniform(-1, 6, n)], axis=1)
    quats = rng.normal(size=(n, 4))
    scales = np.exp(rng.uniform(-3.5, -0.5, size=(n, 3)))
    angle = 0.1
    viewmat = np.eye(4)
    viewmat[:3, :3] = [[np.cos(angle), 0, np.sin(angle)], [0, 1, 0], [-np.sin(angle), 0, np.cos(angle)]]
    viewmat[:3, 3] = [0.1, -0.05, 2.0]
    f = 0.9 * width
    k = np.array([[f, 0, width / 2 + 0.3], [0, f * 1.02, height / 2 - 0.2], [0, 0, 1]])
    return [np.ascontiguousarray(v, np.float32) for v in (means, quats, scales, viewmat, k)]


def selftest_cases(cpu_only=False):
    """The self-test's cases (python -m metal_ops.selftest): a scene of odd
    size, an empty one, a large one."""
    import numpy as np

    from metal_ops import selftest

    rng, out = selftest.rng("gaussian_project"), []
    for n, (width, height) in [(1001, (64, 48)), (0, (16, 16)), (20000, (800, 600))]:
        means, quats, scales, viewmat, k = scene(rng, n, width, height)
        # The camera travels in the attributes: the case's inputs are the differentiable ones.
        attrs = {"width": width, "height": height, "viewmat": viewmat.tolist(), "K": k.tolist()}
        out.append(selftest.case(
            "gaussian_project", f"n={n} image={width}x{height}", np.float32, [means, quats, scales],
            lambda m, q, s, v=viewmat, k=k, w=width, h=height: gaussian_project(m, q, s, v, k, width=w, height=h)[:3],
            2e-4, attrs))
    return out
