"""Scenes from disk for the NeRF sample (examples/nerf/datasets.py).

Each format is written here from the procedural scene and read back: the
loaders must give the built-in path's rays exactly and its colours exactly
(lossless PNG / npz). Also: intrinsics with fx != fy, an off-centre principal
point and a non-square image; the box filter of --downscale; RGBA compositing;
every bad-data case names its file; a short training run on an exported scene.
"""
import json
import os
import subprocess
import sys

import imageio.v2 as imageio
import numpy as np
import pytest

from examples.nerf import cameras, datasets, scene, views

pytestmark = pytest.mark.source_tree("examples/nerf")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = dict(height=16, width=16, n_train=5, n_val=2, n_test=2, spp=1, seed=0)


@pytest.fixture(scope="module")
def builtin():
    return datasets.from_procedural(scene.generate(**SMALL))


@pytest.fixture(scope="module")
def blender_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("blender")
    scene.export_blender(str(out), verbose=False, **SMALL)
    return out


def assert_same_views(got, want, background=(1.0, 1.0, 1.0)):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        go, gd = g.rays()
        wo, wd = w.rays()
        np.testing.assert_array_equal(go, wo)
        np.testing.assert_array_equal(gd, wd)
        np.testing.assert_array_equal(g.composite(background), w.composite(background))


# ---- the formats round-trip ---------------------------------------------------------------

def test_blender_export_reads_back_as_the_builtin_scene(blender_dir, builtin):
    for split in ("train", "val", "test"):
        assert os.path.isfile(blender_dir / f"transforms_{split}.json")
    ds = datasets.load(str(blender_dir), log=None)
    assert ds.format == "blender" and ds.has_alpha
    np.testing.assert_array_equal(ds.aabb, datasets.STANDARD_AABB)
    assert (ds.near, ds.far) == (cameras.NEAR, cameras.FAR)
    for split in ("train", "val", "test"):
        assert_same_views(ds.splits[split], builtin.splits[split])


def test_blender_export_cli(tmp_path):
    out = tmp_path / "scene"
    r = subprocess.run([sys.executable, "-m", "examples.nerf.scene", "--export", str(out), "--size", "8",
                        "--n-train", "2", "--n-val", "1", "--n-test", "1", "--spp", "1"],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    meta = json.load(open(out / "transforms_train.json"))
    assert meta["camera_angle_x"] == pytest.approx(cameras.CAMERA_ANGLE_X)
    assert [f["file_path"] for f in meta["frames"]] == ["./train/r_0", "./train/r_1"]
    assert imageio.imread(out / "train" / "r_0.png").shape == (8, 8, 4)


def write_ngp(root, views, **extra):
    """An instant-ngp transforms.json (RGB PNGs) of `views`."""
    os.makedirs(root / "images", exist_ok=True)
    frames = []
    for i, v in enumerate(views):
        imageio.imwrite(root / "images" / f"{i:03d}.png", v.image[..., :3])
        frames.append({"file_path": f"images/{i:03d}.png", "transform_matrix": v.c2w.tolist()})
    v0 = views[0]
    meta = dict(fl_x=v0.fx, fl_y=v0.fy, cx=v0.cx, cy=v0.cy, w=v0.width, h=v0.height, aabb_scale=1, frames=frames)
    meta.update(extra)
    with open(root / "transforms.json", "w") as f:
        json.dump(meta, f)
    return root / "transforms.json"


def test_instant_ngp_file_reads_back_with_every_8th_view_held_out(tmp_path, builtin):
    views = builtin.splits["train"] + builtin.splits["val"] + builtin.splits["test"]  # 9 views
    path = write_ngp(tmp_path, views)
    logged = []
    ds = datasets.load(str(path), log=logged.append)
    assert ds.format == "instant-ngp"
    assert_same_views(ds.splits["test"], [views[0], views[8]])
    assert_same_views(ds.splits["train"], views[1:8])
    assert any("every 8th view held out" in n for n in ds.notes)
    # instant-ngp's default box (aabb_scale 1, scale 0.33, offset 0.5) in the file's coordinates.
    np.testing.assert_allclose(ds.aabb, [[-0.5 / 0.33] * 3, [0.5 / 0.33] * 3])
    assert datasets.load(str(tmp_path), holdout=3, log=None).splits["test"][1].name.endswith("003.png")


def test_jpeg_frames_load_close_to_the_original(tmp_path):
    yy, xx = np.mgrid[0:32, 0:48]
    smooth = np.stack([xx * 5, yy * 7, 128 + 0 * xx], axis=-1).astype(np.uint8)  # JPEG keeps smooth images well
    imageio.imwrite(tmp_path / "a.jpg", smooth, quality=95)
    c2w = cameras.look_at([0.0, -4.0, 1.0])
    with open(tmp_path / "transforms.json", "w") as f:
        json.dump(dict(fl_x=40.0, aabb_scale=1, frames=[{"file_path": "a.jpg", "transform_matrix": c2w.tolist()}]), f)
    v = datasets.load(str(tmp_path), holdout=0, log=None).splits["train"][0]
    assert v.image.shape == (32, 48, 3) and v.image.dtype == np.uint8
    assert np.abs(v.image.astype(int) - smooth).mean() < 2
    assert (v.cx, v.cy) == (24.0, 16.0)


def test_ngp_box_follows_aabb_scale_scale_and_offset():
    np.testing.assert_allclose(datasets.ngp_aabb(4, scale=0.5, offset=(0.5, 0.0, 1.0)),
                               [[-4.0, -3.0, -5.0], [4.0, 5.0, 3.0]])


def test_tiny_nerf_npz_reads_back_with_the_keras_split(tmp_path, builtin):
    views = builtin.splits["train"] + builtin.splits["val"] + builtin.splits["test"]
    path = tmp_path / "tiny_nerf_data.npz"
    np.savez(path, images=np.stack([v.image.astype(np.float32) / 255.0 for v in views]),
             poses=np.stack([v.c2w.astype(np.float32) for v in views]), focal=np.float64(views[0].fx))
    ds = datasets.load(str(path), log=None)
    split = int(len(views) * 0.8)
    assert_same_views(ds.splits["train"], views[:split])
    assert_same_views(ds.splits["test"], views[split:])
    assert "80/20" in ds.notes[0]


# ---- intrinsics, downscale, compositing ---------------------------------------------------

def test_intrinsics_fx_fy_principal_point_and_aspect_project_a_point_where_expected(tmp_path):
    h, w, fx, fy, cx, cy = 24, 40, 50.0, 35.0, 23.25, 9.5
    c2w = cameras.look_at([3.0, -2.0, 1.5], target=[0.2, 0.1, 0.3])
    img = np.zeros((h, w, 3), np.uint8)
    imageio.imwrite(tmp_path / "a.png", img)
    with open(tmp_path / "transforms.json", "w") as f:
        json.dump(dict(fl_x=fx, fl_y=fy, cx=cx, cy=cy, w=w, h=h,
                       frames=[{"file_path": "a.png", "transform_matrix": c2w.tolist()}]), f)
    view = datasets.load(str(tmp_path), holdout=0, log=None).splits["train"][0]
    assert (view.width, view.height, view.fx, view.fy, view.cx, view.cy) == (w, h, fx, fy, cx, cy)
    # A point, projected with the pinhole model written out here (OpenGL camera:
    # x right, y up, looking along -z; row 0 at the top).
    point = np.array([0.4, -0.1, 0.5])
    cam = (point - c2w[:3, 3]) @ c2w[:3, :3]
    col, row = fx * cam[0] / -cam[2] + cx, -fy * cam[1] / -cam[2] + cy
    c, r = int(col), int(row)
    sub = (col - c, row - r)
    o, d = cameras.camera_rays(c2w, h, w, view.fx, subpixel=sub, fy=view.fy, cx=view.cx, cy=view.cy)
    ray = d[r, c]
    to_point = (point - o[r, c]) / np.linalg.norm(point - o[r, c])
    np.testing.assert_allclose(ray, to_point, atol=1e-12)
    # And the view's own rays go through pixel centres with the same model.
    vo, vd = view.rays()
    centre = vd.reshape(h, w, 3)[r, c]
    expected = c2w[:3, :3] @ np.array([(c + 0.5 - cx) / fx, -(r + 0.5 - cy) / fy, -1.0])
    np.testing.assert_allclose(centre, expected / np.linalg.norm(expected), atol=1e-12)


def test_downscale_is_a_box_filter_of_premultiplied_rgba(tmp_path):
    rng = np.random.default_rng(3)
    rgba = rng.integers(0, 256, (18, 21, 4), dtype=np.uint8)
    imageio.imwrite(tmp_path / "x.png", rgba)
    premult = np.concatenate([np.round(rgba[..., :3] * (rgba[..., 3:] / 255.0)), rgba[..., 3:]], -1)
    np.testing.assert_array_equal(datasets.read_image(str(tmp_path / "x.png")), premult)
    n = 4
    want = np.round(premult[:16, :20].astype(np.float64).reshape(4, 4, 5, 4, 4).mean(axis=(1, 3)))
    np.testing.assert_array_equal(datasets.box_downscale(premult, n), want.astype(np.uint8))
    with open(tmp_path / "transforms.json", "w") as f:
        json.dump(dict(fl_x=30.0, fl_y=32.0, cx=10.0, cy=9.0,
                       frames=[{"file_path": "x.png", "transform_matrix": np.eye(4).tolist()}]), f)
    v = datasets.load(str(tmp_path), downscale=n, holdout=0, log=None).splits["train"][0]
    assert v.image.shape == (4, 5, 4)
    assert (v.fx, v.fy, v.cx, v.cy) == (7.5, 8.0, 2.5, 2.25)


def test_rgba_composites_on_any_background(tmp_path):
    img = np.array([[[255, 0, 0, 255], [0, 255, 0, 0], [0, 0, 255, 128]]], np.uint8)
    imageio.imwrite(tmp_path / "p.png", img)
    v = datasets.View(datasets.read_image(str(tmp_path / "p.png")), np.eye(4), 1.0, 1.0, 1.5, 0.5)
    white, black = v.composite([1, 1, 1]), v.composite([0, 0, 0])
    np.testing.assert_allclose(white[0, 0], [1, 0, 0])
    np.testing.assert_allclose(white[0, 1], [1, 1, 1])      # fully transparent: the background
    np.testing.assert_allclose(black[0, 1], [0, 0, 0])
    np.testing.assert_allclose(white[0, 2] - black[0, 2], 1 - 128 / 255, rtol=1e-6)
    np.testing.assert_allclose(black[0, 2], [0, 0, 128 / 255], atol=1 / 255)


# ---- bad data ------------------------------------------------------------------------------

def bad_blender(tmp_path, blender_dir, edit):
    import shutil

    root = tmp_path / "bad"
    shutil.copytree(blender_dir, root)
    edit(root)
    return root


@pytest.mark.parametrize("case,edit,match", [
    ("missing image", lambda r: os.remove(r / "train" / "r_1.png"), r"frame 1: image file .*r_1.*missing"),
    ("unreadable image", lambda r: (r / "train" / "r_0.png").write_bytes(b"not a png"),
     r"r_0\.png: cannot read the image"),
    ("mixed sizes", lambda r: imageio.imwrite(r / "val" / "r_0.png", np.zeros((8, 8, 4), np.uint8)),
     r"images of different sizes"),
    ("wrong matrix", lambda r: _edit_json(r / "transforms_test.json", lambda m: m["frames"][1].update(
        transform_matrix=[[1, 0, 0], [0, 1, 0]])), r"transforms_test\.json, frame 1: transform_matrix must be"),
    ("bad json", lambda r: (r / "transforms_val.json").write_text("{"), r"transforms_val\.json: not valid JSON"),
    ("no angle", lambda r: _edit_json(r / "transforms_train.json", lambda m: m.pop("camera_angle_x")),
     r"transforms_train\.json: 'camera_angle_x' is missing"),
])
def test_bad_blender_data_names_the_file(tmp_path, blender_dir, case, edit, match):
    root = bad_blender(tmp_path, blender_dir, edit)
    with pytest.raises(datasets.DatasetError, match=match):
        datasets.load(str(root), log=None)


def _edit_json(path, fn):
    meta = json.load(open(path))
    fn(meta)
    with open(path, "w") as f:
        json.dump(meta, f)


def test_bad_npz_and_unknown_formats_name_the_file(tmp_path):
    np.savez(tmp_path / "a.npz", images=np.zeros((3, 4, 4, 3), np.float32), poses=np.zeros((2, 4, 4)),
             focal=np.float64(5))
    with pytest.raises(datasets.DatasetError, match=r"a\.npz: 'poses' must be \[N, 4, 4\] for 3 images"):
        datasets.load(str(tmp_path / "a.npz"), log=None)
    np.savez(tmp_path / "b.npz", pictures=np.zeros(3))
    with pytest.raises(datasets.DatasetError, match=r"b\.npz: not a tiny_nerf_data\.npz \(missing focal, images"):
        datasets.load(str(tmp_path / "b.npz"), log=None)
    (tmp_path / "c.txt").write_text("x")
    with pytest.raises(datasets.DatasetError, match=r"c\.txt: unknown scene format"):
        datasets.load(str(tmp_path / "c.txt"), log=None)
    with pytest.raises(datasets.DatasetError, match=r"no such file or folder"):
        datasets.load(str(tmp_path / "nope"), log=None)
    llff = tmp_path / "fern"
    llff.mkdir()
    np.save(llff / "poses_bounds.npy", np.zeros((3, 17)))
    with pytest.raises(datasets.DatasetError, match=r"poses_bounds\.npy: a forward-facing LLFF capture: unbounded"):
        datasets.load(str(llff), log=None)


def _one_frame_ngp(root, meta=None, frame=None, image=None):
    imageio.imwrite(root / "a.png", np.zeros((8, 8, 3), np.uint8) if image is None else image)
    f = {"file_path": "a.png", "transform_matrix": np.eye(4).tolist()}
    f.update(frame or {})
    m = {"fl_x": 10.0, "frames": [f]}
    m.update(meta or {})
    with open(root / "transforms.json", "w") as fh:
        json.dump(m, fh)
    return root / "transforms.json"


@pytest.mark.parametrize("meta,frame,match", [
    ({"fl_x": "wide"}, None, r"frame 0: 'fl_x' must be a finite positive number, got 'wide'"),
    ({"fl_x": 0}, None, r"frame 0: 'fl_x' must be a finite positive number, got 0"),
    (None, {"fl_y": None}, r"frame 0: 'fl_y' must be a finite positive number, got None"),
    ({"w": "8px"}, None, r"frame 0: 'w' must be a finite positive number"),
    ({"scale": 0}, None, r"transforms\.json: 'scale' must be a finite positive number, got 0"),
    ({"aabb_scale": "big"}, None, r"transforms\.json: 'aabb_scale' must be a finite positive number"),
    ({"offset": [0.5, "a", 0.5]}, None, r"transforms\.json: 'offset' must be a finite number, got 'a'"),
    ({"offset": 0.5}, None, r"transforms\.json: 'offset' must be a list of 3 numbers"),
    (None, {"file_path": 7}, r"frame 0: 'file_path' must be a file name, got 7"),
    (None, {"transform_matrix": [[1, 0, 0, 0], [0, 1, 0]]}, r"frame 0: transform_matrix must be a finite 4x4"),
    (None, {"transform_matrix": [["a"] * 4] * 4}, r"frame 0: transform_matrix must be a finite 4x4"),
    (None, {"transform_matrix": (2 * np.eye(4)).tolist()}, r"frame 0: transform_matrix is not a rigid"),
])
def test_bad_ngp_values_name_the_file(tmp_path, meta, frame, match):
    path = _one_frame_ngp(tmp_path, meta, frame)
    with pytest.raises(datasets.DatasetError, match=match):
        datasets.load(str(path), holdout=0, log=None)


def test_grey_and_grey_alpha_images_load_as_rgb_and_rgba(tmp_path):
    grey = np.arange(64, dtype=np.uint8).reshape(8, 8)
    path = _one_frame_ngp(tmp_path, image=np.stack([grey, np.full_like(grey, 255)], axis=-1))
    v = datasets.load(str(path), holdout=0, log=None).splits["train"][0]
    np.testing.assert_array_equal(v.image, np.stack([grey] * 3 + [np.full_like(grey, 255)], axis=-1))


def test_every_view_held_out_says_so(tmp_path):
    path = _one_frame_ngp(tmp_path)
    with pytest.raises(datasets.DatasetError, match=r"no training views \(1 views, all held out: see --holdout\)"):
        datasets.load(str(path), log=None)


def test_nerfstudio_file_without_aabb_scale_gets_a_box_fitted_to_its_cameras(tmp_path, builtin):
    # nerfstudio keeps COLMAP's units: the same cameras, 10x further out around (3, -2, 1).
    shift = np.array([3.0, -2.0, 1.0])
    views = []
    for v in builtin.splits["train"] + builtin.splits["val"]:
        c2w = v.c2w.copy()
        c2w[:3, 3] = 10.0 * c2w[:3, 3] + shift
        views.append(datasets.View(v.image, c2w, v.fx, v.fy, v.cx, v.cy))
    path = write_ngp(tmp_path, views)
    meta = json.load(open(path))
    del meta["aabb_scale"]
    with open(path, "w") as f:
        json.dump(meta, f)
    ds = datasets.load(str(path), log=None)
    # Cameras at distance 40 looking at `shift`: a box of half-side 0.375 * 40 = 15 around it.
    np.testing.assert_allclose(ds.aabb, [shift - 15.0, shift + 15.0], atol=1e-9)
    assert any("fitted to the cameras" in n for n in ds.notes)
    gaps = [np.linalg.norm(np.clip(v.c2w[:3, 3], ds.aabb[0], ds.aabb[1]) - v.c2w[:3, 3]) for v in views]
    assert ds.near == pytest.approx(0.9 * min(gaps))
    # Parallel axes (a forward-facing capture) have no such box.
    for v in views:
        v.c2w[:3, :3] = np.eye(3)
    write_ngp(tmp_path, views)
    meta = json.load(open(path))
    del meta["aabb_scale"]
    with open(path, "w") as f:
        json.dump(meta, f)
    with pytest.raises(datasets.DatasetError, match=r"transforms\.json: the cameras' axes do not meet"):
        datasets.load(str(path), log=None)


def test_training_targets_for_each_background_mode():
    import tensorflow as tf

    from examples.nerf.data import training_target

    rgba = np.array([[255, 0, 0, 255], [0, 0, 0, 0], [0, 64, 0, 128]], np.uint8)  # premultiplied
    c = rgba[:, :3] / 255.0
    a = rgba[:, 3:] / 255.0
    for mode, bg in (("white", 1.0), ("black", 0.0)):
        target, background = training_target(tf.constant(rgba), mode, 0, 5)
        assert background is None  # the renderer's fixed background
        np.testing.assert_allclose(target.numpy(), c + bg * (1 - a), rtol=1e-6)
    t5, b5 = training_target(tf.constant(rgba), "random", 0, 5)
    t5b, b5b = training_target(tf.constant(rgba), "random", 0, 5)
    t6, b6 = training_target(tf.constant(rgba), "random", 0, 6)
    b5 = b5.numpy()
    assert b5.shape == (3, 3) and len(np.unique(b5)) == 9  # a colour per ray and channel
    np.testing.assert_array_equal(b5, b5b.numpy())         # a function of (seed, step)
    assert not np.allclose(b5, b6.numpy())                 # new colours each step
    np.testing.assert_allclose(t5.numpy(), c + b5 * (1 - a), rtol=1e-6)
    np.testing.assert_allclose(t5.numpy()[0], [1, 0, 0])   # opaque pixels ignore the background
    rgb, background = training_target(tf.constant(rgba[:, :3]), "random", 0, 5)
    assert background is None
    np.testing.assert_allclose(rgb.numpy(), c, rtol=1e-6)


def test_ngp_checks_sizes_and_distortion(tmp_path, builtin):
    path = write_ngp(tmp_path, builtin.splits["train"][:2], w=99)
    with pytest.raises(datasets.DatasetError, match=r"frame 0: the image is 16x16 but the file says w=99"):
        datasets.load(str(path), log=None)
    path = write_ngp(tmp_path, builtin.splits["train"][:2], camera_model="OPENCV_FISHEYE", k1=0.1)
    with pytest.raises(datasets.DatasetError, match=r"frame 0: camera model 'OPENCV_FISHEYE' is not supported"):
        datasets.load(str(path), log=None)
    path = write_ngp(tmp_path, builtin.splits["train"][:2], k4=0.01)
    with pytest.raises(datasets.DatasetError, match=r"frame 0: 'k4' is a fisheye coefficient"):
        datasets.load(str(path), log=None)


def test_opencv_lens_distortion_rays_reach_the_point_that_projects_to_their_pixel(tmp_path):
    h, w, fx, fy, cx, cy = 30, 44, 40.0, 37.0, 20.5, 16.0
    k1, k2, p1, p2, k3 = -0.21, 0.05, 0.003, -0.002, 0.01
    c2w = cameras.look_at([2.5, 1.0, 2.0], target=[0.1, -0.2, 0.0])
    imageio.imwrite(tmp_path / "a.png", np.zeros((h, w, 3), np.uint8))
    with open(tmp_path / "transforms.json", "w") as f:
        json.dump(dict(camera_model="OPENCV", fl_x=fx, fl_y=fy, cx=cx, cy=cy, w=w, h=h, k1=k1, k2=k2, p1=p1, p2=p2,
                       frames=[{"file_path": "a.png", "transform_matrix": c2w.tolist(), "k3": k3}]), f)
    view = datasets.load(str(tmp_path), holdout=0, log=None).splits["train"][0]
    assert view.distortion == (k1, k2, p1, p2, k3)
    _, d = view.rays()
    d = d.reshape(h, w, 3)
    # COLMAP's OPENCV model written out (x right, y down, camera looking along +z
    # in OpenCV terms, i.e. along -z of the OpenGL camera): the pixel each ray's
    # direction lands on must be that ray's pixel centre.
    for r, c in [(0, 0), (3, 40), (15, 20), (29, 43), (22, 5)]:
        cam = d[r, c] @ c2w[:3, :3]
        x, y = cam[0] / -cam[2], -cam[1] / -cam[2]
        rr = x * x + y * y
        radial = 1 + k1 * rr + k2 * rr ** 2 + k3 * rr ** 3
        xd = x * radial + 2 * p1 * x * y + p2 * (rr + 2 * x * x)
        yd = y * radial + p1 * (rr + 2 * y * y) + 2 * p2 * x * y
        np.testing.assert_allclose([fx * xd + cx, fy * yd + cy], [c + 0.5, r + 0.5], atol=1e-9)
    # Downscaling keeps the (normalised) lens model with the scaled intrinsics.
    small = datasets.load(str(tmp_path), downscale=2, holdout=0, log=None).splits["train"][0]
    assert small.distortion == view.distortion and (small.fx, small.cx) == (fx / 2, cx / 2)


@pytest.mark.parametrize("k1, k2, p1, p2, k3", [(-0.21, 0.05, 0.003, -0.002, 0.01), (0.35, 0.2, 0.0, 0.0, 0.0)])
def test_pinhole_resamples_the_image_where_the_lens_puts_each_pixel(k1, k2, p1, p2, k3):
    h, w, fx, fy, cx, cy = 30, 44, 40.0, 37.0, 20.5, 16.0
    rows, cols = np.mgrid[0:h, 0:w].astype(np.float64)
    ramp = lambda u, v: np.stack([3.0 * u + 20, 5.0 * v + 10, 2.0 * u + 3.0 * v], -1)  # noqa: E731 (pixel indices)
    view = views.View(np.round(ramp(cols, rows)).astype(np.uint8), np.eye(4), fx, fy, cx, cy, "a",
                      (k1, k2, p1, p2, k3))
    flat = view.pinhole()
    assert flat.distortion is None and flat.image.dtype == np.uint8 and flat.image.shape == (h, w, 3)
    # COLMAP's OPENCV model written out; bilinear sampling of a linear ramp is the ramp, and a
    # point off the image takes its nearest edge pixel's colour.
    x, y = (cols + 0.5 - cx) / fx, (rows + 0.5 - cy) / fy
    rr = x * x + y * y
    radial = 1 + k1 * rr + k2 * rr ** 2 + k3 * rr ** 3
    u = fx * (x * radial + 2 * p1 * x * y + p2 * (rr + 2 * x * x)) + cx - 0.5
    v = fy * (y * radial + p1 * (rr + 2 * y * y) + 2 * p2 * x * y) + cy - 0.5
    want = ramp(np.clip(u, 0, w - 1), np.clip(v, 0, h - 1))
    assert np.abs(flat.image - want).max() <= 1.0  # the source's rounding, then the result's
    assert ((u < 0) | (u > w - 1)).any() == (k1 > 0)  # the second lens pushes the corners off the image
    undistorted = views.View(view.image, np.eye(4), fx, fy, cx, cy, "b", (0.0, 0.0, 0.0, 0.0, 0.0))
    assert undistorted.pinhole() is undistorted and view.pinhole().image.tobytes() == flat.image.tobytes()


def test_train_cli_reports_bad_data_without_a_traceback(tmp_path):
    r = subprocess.run([sys.executable, "-m", "examples.nerf.train", "--data", str(tmp_path / "missing"),
                        "--out-dir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].startswith("error: ") and "no such file or folder" in r.stderr
    assert "Traceback" not in r.stderr


# ---- training on an exported scene ---------------------------------------------------------

def test_training_on_an_exported_scene_improves_held_out_psnr(tmp_path):
    from examples.nerf import config, train

    root = tmp_path / "scene"
    scene.export_blender(str(root), verbose=False, height=32, width=32, n_train=40, n_val=2, n_test=2, spp=1)
    args = config.build_parser().parse_args([
        "--data", str(root), "--background", "random", "--out-dir", str(tmp_path), "--name", "exported",
        "--steps", "120", "--batch-rays", "1024", "--levels", "8", "--log2-table", "14", "--finest-res", "128",
        "--eval-every", "0", "--ckpt-every", "0", "--grid-warmup", "32", "--quiet", "--no-outputs"])
    tr = train.Trainer(args, log=lambda *a: None)
    assert tr.train_c.shape[-1] == 4  # RGBA kept, composited on a random colour per ray and step
    before, _, _ = tr.evaluate("test")
    tr.fit(verbose=False)
    after, psnrs, renders = tr.evaluate("test")
    assert renders[0].shape == (32, 32, 3)
    assert after >= before + 5.0, (before, after)
    ssims = tr.ssim(renders, "test")
    assert len(ssims) == 2 and all(0.0 < s <= 1.0 for s in ssims)
