"""The projection of 3D Gaussians (gsplat's classic 3DGS formulas), in
float64, written from the formulas, independent of
kernels/gaussian_project/gaussian_project.h.

- `project(means, quats, scales, viewmat, K, width, height, near_plane,
  far_plane, eps2d, opacities)`: (means2d, conics, depths, radii [N, 2]),
  culled Gaussians zero with radii 0.
- `vjp(inputs, cotangents, ...)`: the gradients of sum(cotangent * output)
  over means2d, conics and depths with respect to means, quats and scales, by
  complex-step differentiation of the same formulas (exact to rounding; no
  hand-derived derivative), zero for culled Gaussians.

The covariance is R S S^T R^T with R the rotation matrix of the unit
quaternion (w, x, y, z) and S = diag(scales); the camera-space covariance
W Sigma W^T; the 2D covariance J Sigma_c J^T + eps2d I with J the Jacobian of
the perspective map (x / z, y / z) scaled by (fx, fy), its x / z and y / z
clamped to the view frustum widened by 30 % of the half field of view
(gsplat's persp_proj); the conic its inverse; the radii gsplat 1.5.3's
opacity-aware box, (ceil(e sqrt(a)), ceil(e sqrt(c))) with
e = min(3.33, sqrt(2 log(255 opacity))), a Gaussian of opacity below 1/255
(or NaN) culled.
"""
import numpy as np


def _rotation(q):
    """[..., 3, 3] rotation matrices of quaternions [..., 4] (w, x, y, z), normalised."""
    q = q / np.sqrt(np.sum(q * q, axis=-1, keepdims=True))
    w, x, y, z = np.moveaxis(q, -1, 0)
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
        np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
        np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
    ], -2)


def _clamp(v, lo, hi):
    """v clamped to [lo, hi] by its real part (complex steps: the clamped side is constant)."""
    return np.where(v.real < lo, lo, np.where(v.real > hi, hi, v))


def _raw(means, quats, scales, viewmat, K, width, height, eps2d):
    """Every Gaussian's projection before culling: means2d, the 2D covariance
    (a, b, c), depth. Works on complex arrays."""
    W, w = viewmat[:3, :3], viewmat[:3, 3]
    fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
    t = means @ W.T + w
    M = _rotation(quats) * scales[:, None, :]
    sigma_c = W @ M @ np.swapaxes(M, -1, -2) @ W.T
    x, y, z = t[:, 0], t[:, 1], t[:, 2]
    half_x, half_y = 0.5 * width / fx, 0.5 * height / fy
    tx = z * _clamp(x / z, -(cx / fx + 0.3 * half_x), (width - cx) / fx + 0.3 * half_x)
    ty = z * _clamp(y / z, -(cy / fy + 0.3 * half_y), (height - cy) / fy + 0.3 * half_y)
    zero = np.zeros_like(z)
    J = np.stack([np.stack([fx / z, zero, -fx * tx / z ** 2], -1),
                  np.stack([zero, fy / z, -fy * ty / z ** 2], -1)], -2)
    cov2 = J @ sigma_c @ np.swapaxes(J, -1, -2)
    cov = np.stack([cov2[:, 0, 0] + eps2d, cov2[:, 0, 1], cov2[:, 1, 1] + eps2d], -1)
    means2d = np.stack([fx * x / z + cx, fy * y / z + cy], -1)
    return means2d, cov, z


def _outputs(cov):
    a, b, c = cov[:, 0], cov[:, 1], cov[:, 2]
    det = a * c - b * b
    return np.stack([c / det, -b / det, a / det], -1), det


def project(means, quats, scales, viewmat, K, width, height, near_plane=0.01, far_plane=1e10, eps2d=0.3,
            opacities=None):
    """(means2d [N, 2], conics [N, 3], depths [N], radii [N, 2] int32), float64;
    opacities [N] (None: ones)."""
    args = [np.asarray(v, np.float64) for v in (means, quats, scales, viewmat, K)]
    alpha_min = 1.0 / 255.0
    o = np.ones(len(args[0])) if opacities is None else np.asarray(opacities, np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        means2d, cov, z = _raw(*args, width, height, eps2d)
        conics, det = _outputs(cov)
        extend = np.minimum(3.33, np.sqrt(2 * np.log(o / alpha_min)))
        rx, ry = np.ceil(extend * np.sqrt(cov[:, 0])), np.ceil(extend * np.sqrt(cov[:, 2]))
    u, v = means2d[:, 0], means2d[:, 1]
    with np.errstate(invalid="ignore"):
        keep = ((o >= alpha_min) & (z >= near_plane) & (z <= far_plane) & (det > 0) & (rx > 0) & (ry > 0) &
                (u + rx > 0) & (u - rx < width) & (v + ry > 0) & (v - ry < height))
    radii = np.where(keep[:, None], np.nan_to_num(np.stack([rx, ry], -1)), 0).astype(np.int32)
    return (np.where(keep[:, None], means2d, 0), np.where(keep[:, None], conics, 0), np.where(keep, z, 0), radii)


def vjp(inputs, cotangents, width, height, near_plane=0.01, far_plane=1e10, eps2d=0.3, opacities=None):
    """[grad_means, grad_quats, grad_scales] of sum(cotangent * output) over
    (means2d, conics, depths), by complex steps of 1e-30 on each of the 10
    parameters of every Gaussian at once (the Gaussians are independent)."""
    means, quats, scales, viewmat, K = [np.asarray(v, np.float64) for v in inputs]
    keep = project(means, quats, scales, viewmat, K, width, height, near_plane, far_plane, eps2d,
                   opacities)[3][:, 0] > 0
    cot = [np.asarray(c, np.float64) for c in cotangents]
    step = 1e-30
    grads = []
    for which, arg in enumerate((means, quats, scales)):
        g = np.zeros_like(arg)
        for k in range(arg.shape[1]):
            args = [means.astype(complex), quats.astype(complex), scales.astype(complex)]
            args[which][:, k] += 1j * step
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                means2d, cov, z = _raw(*args, viewmat, K, width, height, eps2d)
                conics, _ = _outputs(cov)
            total = np.sum(cot[0] * means2d.imag, -1) + np.sum(cot[1] * conics.imag, -1) + cot[2] * z.imag
            g[:, k] = np.where(keep, total / step, 0)
        grads.append(g)
    return grads


def selftest(inputs, attrs):
    """A self-test case (metal_ops.selftest): inputs (means, quats, scales),
    the camera in attrs (viewmat, K, width, height); the outputs means2d,
    conics and depths, and the gradients as a function of the cotangents."""
    a = dict(attrs)
    camera = [np.asarray(a.pop("viewmat")), np.asarray(a.pop("K"))]
    full = list(inputs) + camera
    return list(project(*full, **a)[:3]), lambda cots: vjp(full, cots, **a)
