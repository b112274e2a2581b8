"""Blender-synthetic-style pinhole cameras: poses on a hemisphere, rays, projection.

Conventions (the NeRF "Blender" data sets): world z is up; a camera-to-world
matrix c2w is 4x4 with columns (right, up, back, position); the camera looks
along its -z axis, image x goes right and image y goes down (row index).
A pixel (col, row) is the ray through its centre (col + 0.5, row + 0.5).
Ray directions are returned with unit length, so the ray parameter t is a
distance (near/far 2/6 are distances from the camera centre).
"""
import functools
import math

import numpy as np

CAMERA_ANGLE_X = 0.6911112070083618  # Blender synthetic: focal 138.89 at 100 px wide
RADIUS = 4.0
NEAR, FAR = 2.0, 6.0


def focal_from_fov(width, camera_angle_x=CAMERA_ANGLE_X):
    return 0.5 * width / math.tan(0.5 * camera_angle_x)


def look_at(position, target=(0.0, 0.0, 0.0), world_up=(0.0, 0.0, 1.0)):
    """Camera-to-world 4x4 (float64) for a camera at `position` looking at `target`."""
    position = np.asarray(position, np.float64)
    forward = np.asarray(target, np.float64) - position
    forward /= np.linalg.norm(forward)
    right = np.cross(forward, np.asarray(world_up, np.float64))
    n = np.linalg.norm(right)
    if n < 1e-9:  # looking straight down/up: pick any right vector
        right = np.array([1.0, 0.0, 0.0])
    else:
        right /= n
    up = np.cross(right, forward)
    c2w = np.eye(4)
    c2w[:3, 0] = right
    c2w[:3, 1] = up
    c2w[:3, 2] = -forward
    c2w[:3, 3] = position
    return c2w


def pose_spherical(azimuth, elevation, radius=RADIUS):
    """Camera on a sphere (angles in radians, elevation above the z=0 plane) looking at the origin."""
    ce = math.cos(elevation)
    pos = radius * np.array([ce * math.cos(azimuth), ce * math.sin(azimuth), math.sin(elevation)])
    return look_at(pos)


def hemisphere_poses(n, seed, radius=RADIUS, min_elevation_deg=10.0, max_elevation_deg=75.0):
    """`n` deterministic random cameras on the upper hemisphere (uniform over the band's area)."""
    rng = np.random.default_rng(seed)
    az = rng.uniform(0.0, 2.0 * math.pi, n)
    s0, s1 = math.sin(math.radians(min_elevation_deg)), math.sin(math.radians(max_elevation_deg))
    el = np.arcsin(rng.uniform(s0, s1, n))
    return np.stack([pose_spherical(a, e, radius) for a, e in zip(az, el)])


def orbit_poses(n, elevation_deg=30.0, radius=RADIUS):
    return np.stack([pose_spherical(2.0 * math.pi * i / n, math.radians(elevation_deg), radius)
                     for i in range(n)])


def distort(x, y, distortion):
    """OpenCV / COLMAP "OPENCV" lens model on normalised image coordinates (x right, y down).

    distortion = (k1, k2, p1, p2) or (k1, k2, p1, p2, k3): radial and tangential terms.
    """
    k1, k2, p1, p2, k3 = (tuple(distortion) + (0.0,))[:5]
    r2 = x * x + y * y
    radial = 1.0 + r2 * (k1 + r2 * (k2 + r2 * k3))
    return (x * radial + 2.0 * p1 * x * y + p2 * (r2 + 2.0 * x * x),
            y * radial + p1 * (r2 + 2.0 * y * y) + 2.0 * p2 * x * y)


def undistort(xd, yd, distortion, iterations=50):
    """Inverse of distort() by Newton's method (the model has no closed-form inverse)."""
    x, y = np.array(xd, np.float64), np.array(yd, np.float64)
    eps = 1e-7
    for _ in range(iterations):
        fx_, fy_ = distort(x, y, distortion)
        ex, ey = fx_ - xd, fy_ - yd
        # Jacobian by central differences: exact enough at eps 1e-7 for a polynomial of degree 7.
        ax, ay = distort(x + eps, y, distortion)
        bx, by = distort(x - eps, y, distortion)
        j11, j21 = (ax - bx) / (2 * eps), (ay - by) / (2 * eps)
        ax, ay = distort(x, y + eps, distortion)
        bx, by = distort(x, y - eps, distortion)
        j12, j22 = (ax - bx) / (2 * eps), (ay - by) / (2 * eps)
        det = j11 * j22 - j12 * j21
        dx, dy = (j22 * ex - j12 * ey) / det, (j11 * ey - j21 * ex) / det
        x, y = x - dx, y - dy
        if max(np.max(np.abs(dx)), np.max(np.abs(dy))) < 1e-13:
            break
    return x, y


@functools.lru_cache(maxsize=8)
def _pixel_directions(height, width, fx, fy, cx, cy, subpixel, distortion):
    """Normalised image coordinates (x, y) [H, W] of the pixels' rays (read-only).

    Cached: the views of a capture share their intrinsics, and undistorting a
    1920x1080 image by Newton's method takes about a second.
    """
    cols, rows = np.meshgrid(np.arange(width, dtype=np.float64) + subpixel[0],
                             np.arange(height, dtype=np.float64) + subpixel[1], indexing="xy")
    x, y = (cols - cx) / fx, (rows - cy) / fy
    if distortion is not None:
        x, y = undistort(x, y, distortion)
    x.setflags(write=False)
    y.setflags(write=False)
    return x, y


def camera_rays(c2w, height, width, focal, subpixel=(0.5, 0.5), fy=None, cx=None, cy=None, distortion=None):
    """Ray origins and unit directions, each [H, W, 3] float64, for one camera.

    focal is fx; fy defaults to it, and the principal point (cx, cy) to the image centre.
    distortion: OpenCV lens coefficients (see distort()); the ray of a pixel is
    the one that the lens bends onto it.
    """
    fy = focal if fy is None else fy
    cx = 0.5 * width if cx is None else cx
    cy = 0.5 * height if cy is None else cy
    x, y = _pixel_directions(int(height), int(width), float(focal), float(fy), float(cx), float(cy),
                             (float(subpixel[0]), float(subpixel[1])),
                             tuple(float(k) for k in distortion) if distortion is not None and any(distortion)
                             else None)
    dirs_cam = np.stack([x, -y, -np.ones_like(x)], axis=-1)
    dirs = dirs_cam @ c2w[:3, :3].T
    dirs /= np.linalg.norm(dirs, axis=-1, keepdims=True)
    origins = np.broadcast_to(c2w[:3, 3], dirs.shape).copy()
    return origins, dirs


def project(points, c2w, height, width, focal, fy=None, cx=None, cy=None, distortion=None):
    """World points [..., 3] -> (pixel coordinates [..., 2] as (col, row), depth along the view axis)."""
    fy = focal if fy is None else fy
    cx = 0.5 * width if cx is None else cx
    cy = 0.5 * height if cy is None else cy
    p = np.asarray(points, np.float64) - c2w[:3, 3]
    cam = p @ c2w[:3, :3]  # rotation is orthonormal: world->camera is R^T
    depth = -cam[..., 2]
    x, y = cam[..., 0] / depth, -cam[..., 1] / depth
    if distortion is not None and any(distortion):
        x, y = distort(x, y, distortion)
    return np.stack([focal * x + cx, fy * y + cy], axis=-1), depth
