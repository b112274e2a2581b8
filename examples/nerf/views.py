"""A scene's views as the sample holds them: View (an image and its camera), Dataset (the splits
and the box), the images' reading and box filtering, the checks that views agree, and the box and
near/far distances fitted to the cameras. datasets.py reads the formats into these.
"""
import os
import sys
from dataclasses import dataclass, field

import numpy as np

from examples.nerf import cameras


class DatasetError(ValueError):
    """Bad or unsupported scene data; the message names the file."""


def exit_status(run):
    """A command's exit status: 0 after run(), 2 with the message on stderr
    when it raises DatasetError."""
    try:
        run()
    except DatasetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


@dataclass
class View:
    image: np.ndarray  # uint8 [H, W, 3], or [H, W, 4] premultiplied RGBA
    c2w: np.ndarray    # float64 [4, 4], OpenGL convention
    fx: float
    fy: float
    cx: float
    cy: float
    name: str = ""
    distortion: tuple = None  # OpenCV (k1, k2, p1, p2, k3), see cameras.distort


    @property
    def height(self):
        return self.image.shape[0]

    @property
    def width(self):
        return self.image.shape[1]

    def rays(self):
        """Origins and unit directions, each [H * W, 3] float64."""
        o, d = cameras.camera_rays(self.c2w, self.height, self.width, focal=self.fx, fy=self.fy, cx=self.cx,
                                   cy=self.cy, distortion=self.distortion)
        return o.reshape(-1, 3), d.reshape(-1, 3)

    def pinhole(self):
        """The view as a pinhole camera of the same intrinsics, without lens distortion: each
        pixel takes the image's colour, bilinearly, where the lens puts the pixel centre's ray
        (cameras.distort); a ray that lands off the image takes the nearest edge pixel's.
        A rasterizer that projects through a pinhole (Gaussian splatting) trains on these.
        The view itself where it has no distortion."""
        if self.distortion is None or not any(self.distortion):
            return self
        h, w = self.height, self.width
        cols, rows = np.meshgrid(np.arange(w, dtype=np.float64) + 0.5, np.arange(h, dtype=np.float64) + 0.5)
        xd, yd = cameras.distort((cols - self.cx) / self.fx, (rows - self.cy) / self.fy, self.distortion)
        # Continuous pixel coordinates of the lens's point, from pixel centres (j + 0.5, i + 0.5).
        u = np.clip(xd * self.fx + self.cx - 0.5, 0.0, w - 1.0)
        v = np.clip(yd * self.fy + self.cy - 0.5, 0.0, h - 1.0)
        j0 = np.clip(np.floor(u).astype(np.int64), 0, max(w - 2, 0))
        i0 = np.clip(np.floor(v).astype(np.int64), 0, max(h - 2, 0))
        j1, i1 = np.minimum(j0 + 1, w - 1), np.minimum(i0 + 1, h - 1)
        a, b = (u - j0)[..., None], (v - i0)[..., None]
        img = self.image.astype(np.float64)
        out = ((1 - b) * ((1 - a) * img[i0, j0] + a * img[i0, j1]) + b * ((1 - a) * img[i1, j0] + a * img[i1, j1]))
        return View(np.clip(np.round(out), 0, 255).astype(np.uint8), self.c2w, self.fx, self.fy, self.cx, self.cy,
                    self.name, None)

    def composite(self, background):
        """Float image [H, W, 3] in [0, 1] on a background colour."""
        img = self.image.astype(np.float32) / 255.0
        if img.shape[-1] == 3:
            return img
        return img[..., :3] + np.asarray(background, np.float32) * (1.0 - img[..., 3:])


@dataclass
class Dataset:
    name: str
    format: str
    splits: dict          # "train" / "val" / "test" -> [View]
    aabb: np.ndarray      # [2, 3] the box the hash grid and occupancy grid cover
    near: float
    far: float
    notes: list = field(default_factory=list)
    cache: dict = field(default_factory=dict, repr=False, compare=False)  # derived arrays (the training rays)

    @property
    def has_alpha(self):
        return any(v.image.shape[-1] == 4 for views in self.splits.values() for v in views)

    def size(self):
        """(H, W) of the views (all the same)."""
        views = [v for vs in self.splits.values() for v in vs]
        return views[0].height, views[0].width


# ---- images ----------------------------------------------------------------------------

def read_image(path):
    """uint8 [H, W, 3] or premultiplied [H, W, 4]."""
    import imageio.v2 as imageio

    if not os.path.isfile(path):
        raise DatasetError(f"{path}: image file is missing")
    try:
        img = np.asarray(imageio.imread(path))
    except Exception as e:  # imageio raises many types for unreadable files
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise DatasetError(f"{path}: cannot read the image ({type(e).__name__}: {first_line})") from None
    if img.dtype == np.uint16:
        img = (img.astype(np.float64) / 257.0).round().astype(np.uint8)
    if img.dtype != np.uint8:
        raise DatasetError(f"{path}: unsupported pixel type {img.dtype} (8- or 16-bit images are supported)")
    if img.ndim == 2:
        img = np.stack([img] * 3, axis=-1)
    elif img.ndim == 3 and img.shape[-1] == 2:  # grey + alpha
        img = np.concatenate([img[..., :1]] * 3 + [img[..., 1:]], axis=-1)
    if img.ndim != 3 or img.shape[-1] not in (3, 4):
        raise DatasetError(f"{path}: expected an RGB or RGBA image, got shape {img.shape}")
    if img.shape[-1] == 4:
        a = img[..., 3:].astype(np.float64) / 255.0
        img = np.concatenate([np.round(img[..., :3] * a), img[..., 3:]], axis=-1).astype(np.uint8)
    return img


def box_downscale(img, n):
    """Mean over n x n pixel blocks (rows and columns beyond a multiple of n are dropped)."""
    if n == 1:
        return img
    h, w = img.shape[0] // n * n, img.shape[1] // n * n
    if h == 0 or w == 0:
        raise DatasetError(f"--downscale {n} is larger than the image ({img.shape[1]}x{img.shape[0]})")
    blocks = img[:h, :w].astype(np.float64).reshape(h // n, n, w // n, n, img.shape[-1])
    return np.round(blocks.mean(axis=(1, 3))).astype(np.uint8)


def _scaled(view, n):
    """The view with its image box-filtered by n and intrinsics to match."""
    if n == 1:
        return view
    # Distortion acts on normalised coordinates, which scaling the pixels leaves alone.
    return View(box_downscale(view.image, n), view.c2w, view.fx / n, view.fy / n, view.cx / n, view.cy / n,
                view.name, view.distortion)


class _Progress:
    def __init__(self, total, label, log):
        self.total, self.label, self.log, self.done, self.next = total, label, log, 0, 0.1

    def step(self):
        self.done += 1
        if self.total >= 50 and self.log and self.done / self.total >= self.next:
            self.log(f"  {self.label}: {self.done}/{self.total} images")
            self.next += 0.1


def _check_sizes(views, where, downscale=1):
    sizes = {(v.height, v.width) for v in views}
    if len(sizes) > 1:
        first = views[0]
        odd = next(v for v in views if (v.height, v.width) != (first.height, first.width))
        after = f" (after --downscale {downscale})" if downscale > 1 else ""
        raise DatasetError(f"{where}: images of different sizes{after}: {first.name} is {first.width}x{first.height}, "
                           f"{odd.name} is {odd.width}x{odd.height}")


# colmap2nerf puts the cameras' mean distance to their focus at 4 and instant-ngp's
# default box (aabb_scale 1, scale 0.33) then spans +-0.5/0.33 = +-1.5 around it.
CAMERA_BOX_RATIO = 1.5 / 4.0


def box_from_cameras(views, where):
    """A cube around the point nearest to all optical axes, half-side 0.375 x the cameras' mean distance to it.

    This is the box instant-ngp uses for a colmap2nerf file with aabb_scale 1.
    """
    centres = np.stack([v.c2w[:3, 3] for v in views])
    axes = -np.stack([v.c2w[:3, 2] for v in views])
    axes /= np.linalg.norm(axes, axis=1, keepdims=True)
    proj = np.eye(3)[None] - axes[:, :, None] * axes[:, None, :]  # removes the component along each axis
    a, b = proj.sum(axis=0), np.einsum("nij,nj->i", proj, centres)
    if np.linalg.cond(a) > 1e6:
        raise DatasetError(f"{where}: the cameras' axes do not meet (parallel: a forward-facing capture?), so no "
                           "bounded box can be fitted; give aabb_scale/scale/offset as instant-ngp does")
    focus = np.linalg.solve(a, b)
    in_front = np.einsum("ni,ni->n", focus - centres, axes) > 0
    if in_front.mean() < 0.5:
        raise DatasetError(f"{where}: most cameras look away from the point where their axes meet: not an "
                           "object-centred capture; give aabb_scale/scale/offset as instant-ngp does")
    half = CAMERA_BOX_RATIO * float(np.mean(np.linalg.norm(centres - focus, axis=1)))
    return np.stack([focus - half, focus + half])


def _bounds_from_cameras(views, aabb):
    """near / far from the camera centres' distances to the box."""
    centres = np.stack([v.c2w[:3, 3] for v in views])
    corners = np.array([[aabb[i][0], aabb[j][1], aabb[k][2]] for i in (0, 1) for j in (0, 1) for k in (0, 1)])
    far = float(np.max(np.linalg.norm(centres[:, None] - corners[None], axis=-1)))
    inside = np.all((centres >= aabb[0]) & (centres <= aabb[1]), axis=1)
    gap = np.linalg.norm(np.maximum(np.maximum(aabb[0] - centres, centres - aabb[1]), 0.0), axis=1)
    near = 0.05 if inside.any() else max(0.05, 0.9 * float(gap.min()))
    return near, far
