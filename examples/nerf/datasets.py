"""Scenes from disk for the NeRF sample: the formats NeRF users have.

    load(path, downscale=1) -> Dataset

Formats, detected from what `path` holds:

- NeRF-synthetic / Blender: a folder with transforms_{train,val,test}.json
  (camera_angle_x; frames with file_path and transform_matrix) and RGBA PNGs.
  The files' splits are kept. Bounds: the standard box [-1.5, 1.5]^3, near/far 2/6.
- instant-ngp / nerfstudio: transforms.json (or its folder) with fl_x, fl_y
  (or camera_angle_x/y), cx, cy, w, h, OpenCV lens distortion (k1, k2, p1,
  p2, k3: each pixel gets the ray the lens bends onto it), per-frame overrides
  of any of them, aabb_scale, scale, offset; JPEG or PNG, RGB or RGBA, any aspect ratio. No
  split in the file: every `holdout`-th view (default 8: views 0, 8, 16, ...)
  is held out for testing. Frames whose image file is missing are skipped
  with one note naming them all (instant-ngp's own fox lists 67 frames and
  ships 50 images); a file none of whose images is there is refused. Bounds: instant-ngp's box of side aabb_scale
  around (0.5, 0.5, 0.5) in its coordinates, mapped back through scale and
  offset; a file with none of those three (nerfstudio's, in COLMAP's units)
  gets the box instant-ngp would have after colmap2nerf's normalisation,
  fitted to the cameras (box_from_cameras). near/far from the cameras'
  distances to the box.
- tiny_nerf_data.npz (images, poses, focal; the Keras NeRF example's file):
  the first 80% of the views train and the rest are held out, as in that example.
  Bounds: near/far 2/6 and the box [-1.5, 1.5]^3 of that scene.
- LLFF (poses_bounds.npy) and other unbounded, forward-facing captures are
  refused with a message: the sample's hash grid covers a bounded box.

Cameras are in the OpenGL convention of all three formats (x right, y up, the
camera looks along -z); intrinsics are per view (fx, fy, cx, cy in pixels;
the pixel (col, row) is the ray through (col + 0.5, row + 0.5)).

Images stay uint8 in memory. RGBA images are kept premultiplied (colour times
alpha, then the alpha), which box filtering (`downscale`) and compositing onto
any background treat exactly: composite = rgb + background * (1 - alpha).

Bad data raises DatasetError naming the file (and the frame).
"""
import glob
import json
import math
import os

import numpy as np

from examples.nerf import cameras
# The loaders build these; the package's users (train, pack, the tests) reach them as datasets.*.
from examples.nerf.views import (  # noqa: F401 (box_downscale, exit_status: re-exported)
    Dataset, DatasetError, View, _bounds_from_cameras, _check_sizes, _Progress, _scaled, box_downscale,
    box_from_cameras, exit_status, read_image)

STANDARD_AABB = np.array([[-1.5, -1.5, -1.5], [1.5, 1.5, 1.5]])
NGP_DEFAULT_SCALE = 0.33
NGP_DEFAULT_OFFSET = (0.5, 0.5, 0.5)
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".webp", ".PNG", ".JPG", ".JPEG", ".WEBP")


def _number(value, key, where, positive=False):
    """A finite float from a file's field (JSON numbers may arrive as anything)."""
    try:
        x = float(np.asarray(value, dtype=np.float64).reshape(-1)[0]) if not isinstance(value, str) else float("nan")
    except (TypeError, ValueError, IndexError):
        x = float("nan")
    if not math.isfinite(x) or (positive and x <= 0.0):
        raise DatasetError(f"{where}: '{key}' must be a finite{' positive' if positive else ''} number, "
                           f"got {value!r}")
    return x


def _matrix(value, where):
    try:
        m = np.asarray(value, dtype=np.float64) if isinstance(value, (list, tuple)) else None
    except (TypeError, ValueError):
        m = None
    if m is None or m.shape not in ((4, 4), (3, 4)) or not np.all(np.isfinite(m)):
        shape = getattr(m, "shape", type(value).__name__)
        raise DatasetError(f"{where}: transform_matrix must be a finite 4x4 (or 3x4) matrix, got {shape}")
    if m.shape == (3, 4):
        m = np.concatenate([m, [[0.0, 0.0, 0.0, 1.0]]])
    # Rays and projection take the rotation as orthonormal (a rigid camera-to-world).
    r = m[:3, :3]
    if not np.allclose(r.T @ r, np.eye(3), atol=1e-2):
        raise DatasetError(f"{where}: transform_matrix is not a rigid camera-to-world transform (its 3x3 rotation "
                           "part is not orthonormal)")
    return m


def _frame(frame, where):
    """(file_path, transform_matrix) of a frame, checked."""
    if not isinstance(frame, dict) or "file_path" not in frame or "transform_matrix" not in frame:
        raise DatasetError(f"{where}: needs 'file_path' and 'transform_matrix'")
    if not isinstance(frame["file_path"], str) or not frame["file_path"]:
        raise DatasetError(f"{where}: 'file_path' must be a file name, got {frame['file_path']!r}")
    return frame["file_path"], _matrix(frame["transform_matrix"], where)


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise DatasetError(f"{path}: cannot read ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise DatasetError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(data, dict) or not isinstance(data.get("frames"), list):
        raise DatasetError(f"{path}: expected a JSON object with a 'frames' list")
    return data


def _image_path(root, file_path, where):
    path = os.path.normpath(os.path.join(root, file_path))
    if os.path.splitext(path)[1] in IMAGE_EXTENSIONS:
        return path
    for ext in IMAGE_EXTENSIONS:  # NeRF-synthetic's file_path has no extension
        if os.path.isfile(path + ext):
            return path + ext
    raise DatasetError(f"{where}: image file {path}(.png/.jpg/.webp) is missing")


def _present_image(root, file_path):
    """The image file of an instant-ngp frame, or None where it is missing."""
    path = os.path.normpath(os.path.join(root, file_path))
    if os.path.isfile(path):
        return path
    if os.path.splitext(path)[1] not in IMAGE_EXTENSIONS:
        for ext in IMAGE_EXTENSIONS:
            if os.path.isfile(path + ext):
                return path + ext
    return None



def _load_blender(root, downscale, log):
    splits = {}
    notes = []
    files = {s: os.path.join(root, f"transforms_{s}.json") for s in ("train", "val", "test")}
    if not os.path.isfile(files["train"]):
        raise DatasetError(f"{files['train']}: missing (a NeRF-synthetic folder has transforms_train.json)")
    for split, path in files.items():
        if not os.path.isfile(path):
            notes.append(f"no {os.path.basename(path)}: the {split} split is empty")
            splits[split] = []
            continue
        data = _read_json(path)
        if "camera_angle_x" not in data:
            raise DatasetError(f"{path}: 'camera_angle_x' is missing")
        angle = _number(data["camera_angle_x"], "camera_angle_x", path, positive=True)
        views = []
        progress = _Progress(len(data["frames"]), f"{split} ({os.path.basename(path)})", log)
        for i, frame in enumerate(data["frames"]):
            where = f"{path}, frame {i}"
            file_path, c2w = _frame(frame, where)
            image_path = _image_path(root, file_path, where)
            img = read_image(image_path)
            focal = 0.5 * img.shape[1] / math.tan(0.5 * angle)
            view = View(img, c2w, focal, focal, 0.5 * img.shape[1], 0.5 * img.shape[0], image_path)
            views.append(_scaled(view, downscale))
            progress.step()
        splits[split] = views
    return Dataset(os.path.basename(os.path.normpath(root)), "blender", splits, STANDARD_AABB.copy(),
                   cameras.NEAR, cameras.FAR, notes)


NGP_INTRINSICS = ("fl_x", "fl_y", "cx", "cy", "w", "h", "camera_angle_x", "camera_angle_y")


def _ngp_intrinsics(meta, img, where):
    h, w = img.shape[:2]
    size = {k: _number(meta[k], k, where, positive=True) for k in ("w", "h") if k in meta}
    if size.get("w", w) != w or size.get("h", h) != h:
        raise DatasetError(f"{where}: the image is {w}x{h} but the file says w={meta.get('w')}, h={meta.get('h')}")
    num = {k: _number(meta[k], k, where, positive=k != "cx" and k != "cy") for k in meta if k not in ("w", "h")}
    fx, fy = num.get("fl_x"), num.get("fl_y")
    if fx is None and "camera_angle_x" in num:
        fx = 0.5 * w / math.tan(0.5 * num["camera_angle_x"])
    if fy is None and "camera_angle_y" in num:
        fy = 0.5 * h / math.tan(0.5 * num["camera_angle_y"])
    if fx is None and fy is None:
        raise DatasetError(f"{where}: no focal length (fl_x / fl_y or camera_angle_x / camera_angle_y)")
    fx = fx if fx is not None else fy
    fy = fy if fy is not None else fx
    return fx, fy, num.get("cx", 0.5 * w), num.get("cy", 0.5 * h)


NGP_LENS = ("camera_model", "is_fisheye", "k1", "k2", "p1", "p2", "k3", "k4")
PINHOLE_MODELS = ("OPENCV", "PINHOLE", "SIMPLE_PINHOLE", "SIMPLE_RADIAL", "RADIAL", "PERSPECTIVE")


def _ngp_distortion(meta, where):
    """(k1, k2, p1, p2, k3) of COLMAP's OPENCV model (what colmap2nerf and ns-process-data write), or None."""
    model = meta.get("camera_model", "OPENCV")
    if not isinstance(model, str) or model.upper() not in PINHOLE_MODELS or meta.get("is_fisheye"):
        raise DatasetError(f"{where}: camera model {model if not meta.get('is_fisheye') else 'fisheye'!r} is not "
                           f"supported (supported: {', '.join(PINHOLE_MODELS)} with k1, k2, p1, p2, k3)")
    if abs(_number(meta.get("k4", 0.0), "k4", where)) > 0.0:
        raise DatasetError(f"{where}: 'k4' is a fisheye coefficient; fisheye lenses are not supported")
    coeffs = tuple(_number(meta.get(k, 0.0), k, where) for k in ("k1", "k2", "p1", "p2", "k3"))
    return coeffs if any(coeffs) else None


def ngp_aabb(aabb_scale, scale=NGP_DEFAULT_SCALE, offset=NGP_DEFAULT_OFFSET):
    """instant-ngp's box (side aabb_scale around 0.5 in its coordinates) in the file's coordinates.

    instant-ngp maps a position p to p * scale + offset and cycles the axes; its
    box is a cube centred on (0.5, 0.5, 0.5), so per axis i the file's
    coordinates span [(0.5 - k/2 - offset_i) / scale, (0.5 + k/2 - offset_i) / scale].
    """
    k = float(aabb_scale)
    offset = np.asarray(offset, np.float64)
    return np.stack([(0.5 - 0.5 * k - offset) / scale, (0.5 + 0.5 * k - offset) / scale])


def _load_ngp(json_path, downscale, holdout, log):
    root = os.path.dirname(os.path.abspath(json_path))
    meta = _read_json(json_path)
    scale = _number(meta.get("scale", NGP_DEFAULT_SCALE), "scale", json_path, positive=True)
    offset = meta.get("offset", NGP_DEFAULT_OFFSET)
    if not (isinstance(offset, (list, tuple)) and len(offset) == 3):
        raise DatasetError(f"{json_path}: 'offset' must be a list of 3 numbers, got {offset!r}")
    offset = [_number(x, "offset", json_path) for x in offset]
    aabb_scale = _number(meta.get("aabb_scale", 1), "aabb_scale", json_path, positive=True)
    views, missing = [], []
    progress = _Progress(len(meta["frames"]), os.path.basename(json_path), log)
    for i, frame in enumerate(meta["frames"]):
        where = f"{json_path}, frame {i}"
        file_path, c2w = _frame(frame, where)
        image_path = _present_image(root, file_path)
        if image_path is None:  # instant-ngp's own folders list frames whose image is not shipped
            missing.append(file_path)
            progress.step()
            continue
        img = read_image(image_path)
        merged = {k: frame.get(k, meta.get(k)) for k in NGP_INTRINSICS + NGP_LENS if k in frame or k in meta}
        fx, fy, cx, cy = _ngp_intrinsics({k: v for k, v in merged.items() if k in NGP_INTRINSICS}, img, where)
        views.append(_scaled(View(img, c2w, fx, fy, cx, cy, image_path, _ngp_distortion(merged, where)), downscale))
        progress.step()
    if not views and missing:
        raise DatasetError(f"{json_path}: none of its {len(missing)} frames has its image in {root} "
                           f"(first: {missing[0]})")
    if not views:
        raise DatasetError(f"{json_path}: no frames")
    _check_sizes(views, json_path, downscale)
    every = 8 if holdout is None else int(holdout)
    if every > 0:
        test = [v for i, v in enumerate(views) if i % every == 0]
        train = [v for i, v in enumerate(views) if i % every != 0]
        note = f"no split in {os.path.basename(json_path)}: every {every}th view held out for testing " \
               f"({len(test)} test, {len(train)} train; --holdout changes it)"
    else:
        train, test = views, []
        note = "--holdout 0: every view trains, none is held out"
    if any(k in meta for k in ("aabb_scale", "scale", "offset")) or len(views) < 2:
        aabb = ngp_aabb(aabb_scale, scale, offset)
        box_note = f"aabb_scale {aabb_scale:g}"
    else:  # nerfstudio's files keep COLMAP's units: instant-ngp's fixed box would be arbitrary there
        aabb = box_from_cameras(views, json_path)
        box_note = "no aabb_scale/scale/offset: box fitted to the cameras (centre where their axes meet)"
    near, far = _bounds_from_cameras(views, aabb)
    notes = [note, f"{box_note}: box {aabb[0].round(3).tolist()} .. {aabb[1].round(3).tolist()}, "
                   f"near/far {near:.3g}/{far:.3g}"]
    if missing:
        notes.insert(0, f"{len(missing)} of {len(meta['frames'])} frames skipped, their image is missing: "
                        + ", ".join(missing))
    return Dataset(os.path.basename(root), "instant-ngp", {"train": train, "val": test[:8], "test": test},
                   aabb, near, far, notes)



def _load_npz(path, downscale, holdout):
    try:
        with np.load(path) as z:
            files = set(z.files)
            missing = {"images", "poses", "focal"} - files
            if missing:
                raise DatasetError(f"{path}: not a tiny_nerf_data.npz (missing {', '.join(sorted(missing))}; "
                                   f"has {', '.join(sorted(files))})")
            images, poses, focal = z["images"], z["poses"], _number(z["focal"], "focal", path, positive=True)
    except DatasetError:
        raise
    except Exception as e:
        raise DatasetError(f"{path}: cannot read the .npz ({type(e).__name__}: {e})") from None
    if images.ndim != 4 or images.shape[-1] not in (3, 4):
        raise DatasetError(f"{path}: 'images' must be [N, H, W, 3], got {images.shape}")
    if poses.shape != (len(images), 4, 4) and poses.shape != (len(images), 3, 4):
        raise DatasetError(f"{path}: 'poses' must be [N, 4, 4] for {len(images)} images, got {poses.shape}")
    if images.dtype != np.uint8:
        images = np.round(np.clip(images.astype(np.float64), 0.0, 1.0) * 255.0).astype(np.uint8)
    h, w = images.shape[1:3]
    views = [_scaled(View(images[i][..., :3], _matrix(poses[i].tolist(), f"{path}, pose {i}"), focal, focal,
                          0.5 * w, 0.5 * h, f"{path}[{i}]"), downscale) for i in range(len(images))]
    if holdout is None:
        split = int(len(views) * 0.8)  # the Keras example's split
        train, test = views[:split], views[split:]
        note = f"{os.path.basename(path)}: views 0-{split - 1} train, {split}-{len(views) - 1} are held out " \
               "(the Keras NeRF example's 80/20 split; --holdout K holds out every K-th view instead)"
    else:
        k = int(holdout)
        test = [v for i, v in enumerate(views) if k > 0 and i % k == 0]
        train = [v for i, v in enumerate(views) if not (k > 0 and i % k == 0)]
        note = f"every {k}th view held out" if k > 0 else "--holdout 0: none held out"
    return Dataset(os.path.splitext(os.path.basename(path))[0], "tiny_nerf_npz",
                   {"train": train, "val": test[:8], "test": test}, STANDARD_AABB.copy(), cameras.NEAR,
                   cameras.FAR, [note])


def detect_format(path):
    """'blender', 'instant-ngp' or 'tiny_nerf_npz' (with the file to read), else DatasetError."""
    if os.path.isdir(path):
        if os.path.isfile(os.path.join(path, "transforms_train.json")):
            return "blender", path
        if os.path.isfile(os.path.join(path, "transforms.json")):
            return "instant-ngp", os.path.join(path, "transforms.json")
        if os.path.isfile(os.path.join(path, "poses_bounds.npy")):
            raise DatasetError(f"{os.path.join(path, 'poses_bounds.npy')}: a forward-facing LLFF capture: unbounded "
                               "scenes are not supported (the hash grid covers a bounded box). Supported: "
                               "NeRF-synthetic folders, instant-ngp/nerfstudio transforms.json, tiny_nerf_data.npz")
        npz = sorted(glob.glob(os.path.join(path, "*.npz")))
        if len(npz) == 1:
            return detect_format(npz[0])
        raise DatasetError(f"{path}: no scene found (expected transforms_train.json, transforms.json or one .npz)")
    if not os.path.exists(path):
        raise DatasetError(f"{path}: no such file or folder")
    base = os.path.basename(path)
    if base.endswith(".json"):
        if base.startswith("transforms_"):
            return "blender", os.path.dirname(os.path.abspath(path))
        return "instant-ngp", path
    if base.endswith(".npz"):
        return "tiny_nerf_npz", path
    if base == "poses_bounds.npy":
        return detect_format(os.path.dirname(os.path.abspath(path)))
    raise DatasetError(f"{path}: unknown scene format (supported: a NeRF-synthetic folder, a transforms.json, "
                       "a tiny_nerf_data.npz)")


def load(path, downscale=1, holdout=None, log=print):
    if int(downscale) < 1:
        raise DatasetError(f"--downscale must be >= 1, got {downscale}")
    fmt, target = detect_format(path)
    if fmt == "blender":
        ds = _load_blender(target, int(downscale), log)
    elif fmt == "instant-ngp":
        ds = _load_ngp(target, int(downscale), holdout, log)
    else:
        ds = _load_npz(target, int(downscale), holdout)
    views = [v for vs in ds.splits.values() for v in vs]
    if not ds.splits["train"]:
        held = f" ({len(ds.splits['test'])} views, all held out: see --holdout)" if ds.splits["test"] else ""
        raise DatasetError(f"{path}: no training views{held}")
    _check_sizes(views, path, int(downscale))
    return ds


def from_procedural(data):
    """The sample's built-in scene (examples.nerf.scene) as a Dataset."""
    focal = float(data["focal"])
    h, w = int(data["height"]), int(data["width"])
    splits = {}
    for split in ("train", "val", "test"):
        splits[split] = [View(img, pose.astype(np.float64), focal, focal, 0.5 * w, 0.5 * h, f"{split}[{i}]")
                         for i, (img, pose) in enumerate(zip(data[f"{split}_images"], data[f"{split}_poses"]))]
    return Dataset("procedural", "procedural", splits, np.asarray(data["aabb"], np.float64),
                   float(data["near"]), float(data["far"]))
