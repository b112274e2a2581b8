"""A procedural, deterministic NeRF scene: nothing is downloaded.

Six objects on a checkered floor slab, rendered by closed-form ray
intersection (spheres, axis-aligned boxes, a capped vertical cylinder) with a
directional light, hard shadows (closed-form shadow rays), ambient light,
Blinn-Phong highlights on the glossy materials (view-dependent colour), one
emissive (unlit) object and a white background:

  floor         box slab, checker texture (0.3-unit squares)      diffuse
  red sphere    glossy (strong Blinn-Phong highlight)              glossy
  striped ball  yellow/blue stripes 0.1 units wide in z            diffuse, high frequency
  green box     cube                                               diffuse
  blue cylinder capped, vertical                                   plastic (weak highlight)
  orange orb    small floating sphere                              emissive
  white box     small cube behind the red sphere (occluded often)  diffuse

Cameras are Blender-synthetic style (radius 4 on the upper hemisphere, looking
at the origin, camera_angle_x 0.6911, near/far 2/6). The data set (train /
val / test views, poses, focal, bounds) is cached as an .npz under data/ and
regenerated when missing or when the configuration changes.
"""
import hashlib
import json
import os

import numpy as np

from examples.nerf import cameras

SCENE_VERSION = 1
BACKGROUND = np.array([1.0, 1.0, 1.0])
# Axis-aligned box containing every object (the floor slab spans x, y in [-1.5, 1.5]).
AABB = np.array([[-1.5, -1.5, -0.06], [1.5, 1.5, 1.46]])
LIGHT_DIR = np.array([0.45, 0.3, 1.0]) / np.linalg.norm([0.45, 0.3, 1.0])
AMBIENT = 0.3

_INF = np.inf


# ---------------------------------------------------------------------------
# Closed-form intersections. o, d: [N, 3] (d unit). Return t [N] (inf = miss)
# and normals [N, 3].
def _sphere(o, d, center, radius):
    oc = o - center
    b = np.einsum("ij,ij->i", oc, d)
    c = np.einsum("ij,ij->i", oc, oc) - radius * radius
    disc = b * b - c
    hit = disc > 0.0
    sq = np.sqrt(np.where(hit, disc, 0.0))
    t0, t1 = -b - sq, -b + sq
    t = np.where(t0 > 1e-6, t0, t1)
    t = np.where(hit & (t > 1e-6), t, _INF)
    n = (o + d * np.where(np.isfinite(t), t, 0.0)[:, None] - center) / radius
    return t, n


def _box(o, d, lo, hi):
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = 1.0 / d
        t1 = (lo - o) * inv
        t2 = (hi - o) * inv
    tmin3 = np.fmin(t1, t2)
    tmax3 = np.fmax(t1, t2)
    tmin = np.max(tmin3, axis=1)
    tmax = np.min(tmax3, axis=1)
    hit = (tmax >= np.maximum(tmin, 1e-6))
    t_entry = np.where(tmin > 1e-6, tmin, tmax)
    t = np.where(hit, t_entry, _INF)
    axis = np.where(tmin > 1e-6, np.argmax(tmin3, axis=1), np.argmin(tmax3, axis=1))
    n = np.zeros_like(o)
    sign = np.where(tmin > 1e-6, -np.sign(d[np.arange(len(d)), axis]), np.sign(d[np.arange(len(d)), axis]))
    n[np.arange(len(d)), axis] = sign
    return t, n


def _cylinder(o, d, cx, cy, radius, z0, z1):
    """Vertical capped cylinder."""
    ox, oy = o[:, 0] - cx, o[:, 1] - cy
    a = d[:, 0] ** 2 + d[:, 1] ** 2
    b = ox * d[:, 0] + oy * d[:, 1]
    c = ox * ox + oy * oy - radius * radius
    disc = b * b - a * c
    ok = (disc > 0.0) & (a > 1e-12)
    sq = np.sqrt(np.where(ok, disc, 0.0))
    a_safe = np.where(a > 1e-12, a, 1.0)
    t_side = (-b - sq) / a_safe
    z = o[:, 2] + t_side * d[:, 2]
    t_side = np.where(ok & (t_side > 1e-6) & (z >= z0) & (z <= z1), t_side, _INF)
    ts0 = np.where(np.isfinite(t_side), t_side, 0.0)
    t_best = t_side
    n = np.stack([(ox + ts0 * d[:, 0]) / radius, (oy + ts0 * d[:, 1]) / radius, np.zeros_like(ox)], axis=1)
    n = np.where(np.isfinite(t_best)[:, None], n, 0.0)
    for zc, nz in ((z1, 1.0), (z0, -1.0)):
        with np.errstate(divide="ignore", invalid="ignore"):
            tc = (zc - o[:, 2]) / d[:, 2]
            px, py = ox + tc * d[:, 0], oy + tc * d[:, 1]
        okc = np.isfinite(tc) & (tc > 1e-6) & (px * px + py * py <= radius * radius)
        tc = np.where(okc, tc, _INF)
        better = tc < t_best
        t_best = np.where(better, tc, t_best)
        n = np.where(better[:, None], np.array([0.0, 0.0, nz]), n)
    return t_best, n


# ---------------------------------------------------------------------------
# The scene: (name, shape function, albedo function, specular, shininess, emissive)
def _const(c):
    c = np.asarray(c, np.float64)
    return lambda p: np.broadcast_to(c, p.shape)


def _checker(p):
    k = (np.floor(p[:, 0] / 0.3) + np.floor(p[:, 1] / 0.3)).astype(np.int64) % 2
    return np.where(k[:, None] == 0, np.array([0.88, 0.86, 0.80]), np.array([0.22, 0.27, 0.36]))


STRIPED_CENTER = np.array([-0.65, -0.55, 0.42])


def _stripes(p):
    k = np.floor((p[:, 2] - STRIPED_CENTER[2]) / 0.1).astype(np.int64) % 2
    return np.where(k[:, None] == 0, np.array([0.95, 0.78, 0.12]), np.array([0.12, 0.22, 0.72]))


OBJECTS = [
    ("floor", lambda o, d: _box(o, d, np.array([-1.5, -1.5, -0.05]), np.array([1.5, 1.5, 0.0])),
     _checker, 0.0, 1.0, False),
    ("red_sphere", lambda o, d: _sphere(o, d, np.array([0.45, 0.35, 0.55]), 0.55),
     _const([0.80, 0.10, 0.08]), 0.6, 40.0, False),
    ("striped_sphere", lambda o, d: _sphere(o, d, STRIPED_CENTER, 0.42),
     _stripes, 0.0, 1.0, False),
    ("green_box", lambda o, d: _box(o, d, np.array([-0.95, 0.3, 0.0]), np.array([-0.35, 0.9, 0.6])),
     _const([0.15, 0.62, 0.22]), 0.0, 1.0, False),
    ("blue_cylinder", lambda o, d: _cylinder(o, d, 0.72, -0.62, 0.28, 0.0, 0.9),
     _const([0.20, 0.42, 0.90]), 0.25, 16.0, False),
    ("orange_orb", lambda o, d: _sphere(o, d, np.array([-0.1, -0.2, 1.2]), 0.2),
     _const([1.0, 0.55, 0.1]), 0.0, 1.0, True),
    ("white_box", lambda o, d: _box(o, d, np.array([0.85, 0.75, 0.0]), np.array([1.2, 1.1, 0.35])),
     _const([0.92, 0.92, 0.92]), 0.0, 1.0, False),
]


def intersect(o, d):
    """Nearest hit: (t [N] with inf for misses, object id [N] (-1 = miss), normal [N, 3])."""
    t_best = np.full(len(o), _INF)
    obj = np.full(len(o), -1, np.int64)
    normal = np.zeros_like(o)
    for k, (_, shape, *_rest) in enumerate(OBJECTS):
        t, n = shape(o, d)
        better = t < t_best
        t_best = np.where(better, t, t_best)
        obj = np.where(better, k, obj)
        normal = np.where(better[:, None], n, normal)
    return t_best, obj, normal


def shade(o, d):
    """Colour [N, 3] in [0, 1] of rays o + t d (d unit), white background."""
    o = np.asarray(o, np.float64)
    d = np.asarray(d, np.float64)
    t, obj, n = intersect(o, d)
    color = np.broadcast_to(BACKGROUND, o.shape).copy()
    hit = obj >= 0
    if not hit.any():
        return color
    p = o[hit] + t[hit, None] * d[hit]
    nh, oh, dh = n[hit], obj[hit], d[hit]
    # Shadow rays toward the light, offset along the normal.
    ps = p + 1e-4 * nh
    ts, _, _ = intersect(ps, np.broadcast_to(LIGHT_DIR, ps.shape))
    visible = ~np.isfinite(ts)
    ndotl = np.clip(nh @ LIGHT_DIR, 0.0, None) * visible
    half = LIGHT_DIR - dh
    half /= np.linalg.norm(half, axis=1, keepdims=True)
    ndoth = np.clip(np.einsum("ij,ij->i", nh, half), 0.0, None)
    out = np.zeros_like(p)
    for k, (_, _, albedo_fn, spec, shin, emissive) in enumerate(OBJECTS):
        m = oh == k
        if not m.any():
            continue
        albedo = albedo_fn(p[m])
        if emissive:
            out[m] = albedo
            continue
        c = albedo * (AMBIENT + (1.0 - AMBIENT) * ndotl[m, None])
        if spec > 0:
            c = c + spec * (visible[m] * ndoth[m] ** shin)[:, None]
        out[m] = c
    color[hit] = np.clip(out, 0.0, 1.0)
    return color


def render_view(c2w, height, width, focal, spp=1, with_alpha=False):
    """Ground-truth image [H, W, 3] float64 on the white background; spp > 1
    averages a spp x spp sub-pixel grid. with_alpha: also the coverage [H, W]
    (the fraction of sub-pixel rays that hit an object) and the premultiplied
    colour, so that colour = premultiplied + background * (1 - coverage)."""
    acc = np.zeros((height, width, 3))
    hits = np.zeros((height, width))
    offs = [(i + 0.5) / spp for i in range(spp)]
    for sy in offs:
        for sx in offs:
            o, d = cameras.camera_rays(c2w, height, width, focal, subpixel=(sx, sy))
            o, d = o.reshape(-1, 3), d.reshape(-1, 3)
            acc += shade(o, d).reshape(height, width, 3)
            if with_alpha:
                hits += (intersect(o, d)[1] >= 0).reshape(height, width)
    image = acc / (spp * spp)
    if not with_alpha:
        return image
    coverage = hits / (spp * spp)
    return image, coverage, image - BACKGROUND * (1.0 - coverage)[..., None]


# ---------------------------------------------------------------------------
# spp=3: every ground-truth pixel is the mean over a 3x3 sub-pixel grid (a box-filtered
# pixel, as a real camera or Blender's renderer integrates it). Point-sampled pixels
# alias the 0.3-unit checker and the stripes in a way that differs from view to view,
# which no 3D model can reproduce on held-out views.
DEFAULT_CONFIG = dict(height=100, width=100, n_train=100, n_val=8, n_test=8, spp=3, seed=0)


def _config_key(cfg):
    blob = json.dumps(dict(cfg, version=SCENE_VERSION), sort_keys=True).encode()
    return hashlib.sha1(blob).hexdigest()[:10]


def generate(height=100, width=100, n_train=100, n_val=8, n_test=8, spp=3, seed=0):
    """The data set as a dict of NumPy arrays (images uint8 [N, H, W, 3], poses [N, 4, 4])."""
    focal = cameras.focal_from_fov(width)
    data = {"focal": np.float64(focal), "height": np.int64(height), "width": np.int64(width),
            "near": np.float64(cameras.NEAR), "far": np.float64(cameras.FAR),
            "aabb": AABB.copy(), "background": BACKGROUND.copy()}
    # Separate seeds per split: held-out views never coincide with training views.
    for split, n, s in (("train", n_train, seed), ("val", n_val, seed + 1000), ("test", n_test, seed + 2000)):
        poses = cameras.hemisphere_poses(n, s)
        imgs = np.stack([render_view(c, height, width, focal, spp) for c in poses]) if n else \
            np.zeros((0, height, width, 3))
        data[f"{split}_poses"] = poses.astype(np.float32)
        data[f"{split}_images"] = np.round(imgs * 255.0).astype(np.uint8)
    return data


def load_or_generate(data_dir="data", verbose=True, **cfg):
    """Loads the cached .npz for this configuration, generating (and caching) it when missing."""
    cfg = dict(DEFAULT_CONFIG, **cfg)
    path = os.path.join(data_dir, f"nerf_scene_{cfg['height']}x{cfg['width']}_{_config_key(cfg)}.npz")
    if os.path.exists(path):
        try:
            with np.load(path) as z:
                return {k: z[k] for k in z.files}, path
        except Exception:  # a torn file from an interrupted run: regenerate
            pass
    data = generate(**cfg)
    os.makedirs(data_dir, exist_ok=True)
    tmp = path + f".tmp{os.getpid()}.npz"
    np.savez_compressed(tmp, **data)
    os.replace(tmp, path)
    if verbose:
        print(f"generated scene -> {path}")
    return data, path


def to_float(images):
    return images.astype(np.float32) / 255.0


# ---------------------------------------------------------------------------
# Export as a NeRF-synthetic (Blender) folder: what users of that format have,
# and what tests read back through examples.nerf.datasets.
def export_blender(out_dir, verbose=True, **cfg):
    """Writes transforms_{train,val,test}.json and RGBA PNGs (alpha = coverage) of the scene."""
    import imageio.v2 as imageio

    cfg = dict(DEFAULT_CONFIG, **cfg)
    h, w, spp = cfg["height"], cfg["width"], cfg["spp"]
    focal = cameras.focal_from_fov(w)
    seed = cfg["seed"]
    for split, n, s in (("train", cfg["n_train"], seed), ("val", cfg["n_val"], seed + 1000),
                        ("test", cfg["n_test"], seed + 2000)):
        os.makedirs(os.path.join(out_dir, split), exist_ok=True)
        frames = []
        for i, c2w in enumerate(cameras.hemisphere_poses(n, s)):
            _, coverage, premult = render_view(c2w, h, w, focal, spp, with_alpha=True)
            alpha = np.round(coverage * 255.0)
            a = np.maximum(alpha / 255.0, 1e-12)[..., None]
            straight = np.where(alpha[..., None] > 0, np.clip(premult / a, 0.0, 1.0), 0.0)
            rgba = np.concatenate([np.round(straight * 255.0), alpha[..., None]], axis=-1).astype(np.uint8)
            imageio.imwrite(os.path.join(out_dir, split, f"r_{i}.png"), rgba)
            frames.append({"file_path": f"./{split}/r_{i}", "rotation": 0.0,
                           "transform_matrix": c2w.astype(np.float32).astype(np.float64).tolist()})
        with open(os.path.join(out_dir, f"transforms_{split}.json"), "w") as f:
            json.dump({"camera_angle_x": cameras.CAMERA_ANGLE_X, "frames": frames}, f, indent=2)
    if verbose:
        print(f"wrote the procedural scene as a NeRF-synthetic folder: {out_dir} "
              f"({cfg['n_train']}/{cfg['n_val']}/{cfg['n_test']} views, {w}x{h})")


def main(argv=None):
    import argparse

    p = argparse.ArgumentParser(prog="python -m examples.nerf.scene", description=__doc__.splitlines()[0])
    p.add_argument("--export", metavar="DIR", required=True, help="write the scene as a NeRF-synthetic folder")
    p.add_argument("--size", type=int, default=DEFAULT_CONFIG["height"])
    p.add_argument("--n-train", type=int, default=DEFAULT_CONFIG["n_train"])
    p.add_argument("--n-val", type=int, default=DEFAULT_CONFIG["n_val"])
    p.add_argument("--n-test", type=int, default=DEFAULT_CONFIG["n_test"])
    p.add_argument("--spp", type=int, default=DEFAULT_CONFIG["spp"])
    a = p.parse_args(argv)
    export_blender(a.export, height=a.size, width=a.size, n_train=a.n_train, n_val=a.n_val, n_test=a.n_test,
                   spp=a.spp)
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
