"""The NeRF sample on real scenes: instant-ngp folders as they are (frames
without images), the ngp recipe and its occupancy-grid rule, evaluation in
large chunks, and benchmarks/nerf_scene_gpu.py on tiny scenes made here."""
import json
import math
import os

import imageio.v2 as imageio
import numpy as np
import pytest
import tensorflow as tf

from examples.nerf import cameras, datasets, scene

pytestmark = pytest.mark.source_tree("examples/nerf")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = dict(height=16, width=24, n_train=9, n_val=1, n_test=2, spp=1, seed=0)
LENS = dict(k1=0.05, k2=-0.08, p1=-0.001, p2=0.0002)


def ngp_folder(root, missing=(), lens=True, aabb_scale=4):
    """A tiny instant-ngp folder in fox's layout: intrinsics and lens at the top,
    JPEG-named frames under images/, those numbered in `missing` without their file."""
    data = scene.generate(**SMALL)
    views = list(data["train_poses"]) + list(data["test_poses"])
    images = list(data["train_images"]) + list(data["test_images"])
    os.makedirs(root / "images", exist_ok=True)
    frames = []
    for i, (c2w, img) in enumerate(zip(views, images)):
        name = f"images/{i:04d}.png"
        if i not in missing:
            imageio.imwrite(root / name, img[..., :3])
        frames.append({"file_path": name, "sharpness": 30.0, "transform_matrix": np.asarray(c2w).tolist()})
    h, w = SMALL["height"], SMALL["width"]
    focal = cameras.focal_from_fov(w)
    meta = dict(camera_angle_x=cameras.CAMERA_ANGLE_X, fl_x=focal, fl_y=focal * 1.01, cx=w / 2 - 0.3, cy=h / 2 + 0.2,
                w=float(w), h=float(h), aabb_scale=aabb_scale, frames=frames)
    if lens:
        meta.update(LENS)
    with open(root / "transforms.json", "w") as f:
        json.dump(meta, f)
    return root


# ---- instant-ngp folders as they are -----------------------------------------------------

def test_frames_without_their_image_are_skipped_with_one_note_naming_them_all(tmp_path):
    root = ngp_folder(tmp_path, missing=(2, 5, 9))
    logged = []
    ds = datasets.load(str(root), log=logged.append)
    views = ds.splits["train"] + ds.splits["test"]
    assert len(views) == 8  # 11 frames, 3 without an image
    notes = [n for n in ds.notes if "missing" in n]
    assert notes == ["3 of 11 frames skipped, their image is missing: images/0002.png, images/0005.png, "
                     "images/0009.png"]
    # The held-out views are every 8th of the frames that are there (views 0 and 8 of 0, 1, 3, 4, 6, 7, 8, 10).
    assert [os.path.basename(v.name) for v in ds.splits["test"]] == ["0000.png"]
    assert len(datasets.load(str(root), holdout=3, log=None).splits["test"]) == 3
    # Intrinsics and lens from the file; instant-ngp's box for aabb_scale 4.
    v = ds.splits["train"][0]
    assert v.distortion == (LENS["k1"], LENS["k2"], LENS["p1"], LENS["p2"], 0.0)
    assert v.fy == pytest.approx(1.01 * v.fx) and v.cx == pytest.approx(SMALL["width"] / 2 - 0.3)
    np.testing.assert_allclose(ds.aabb, [[(0.5 - 2.0 - 0.5) / 0.33] * 3, [(0.5 + 2.0 - 0.5) / 0.33] * 3])


def test_a_folder_without_any_image_is_refused_naming_it(tmp_path):
    root = ngp_folder(tmp_path, missing=range(11))
    with pytest.raises(datasets.DatasetError, match=r"transforms\.json: none of its 11 frames has its image in .*"
                                                    r"\(first: images/0000\.png\)"):
        datasets.load(str(root), log=None)


def test_an_unreadable_image_still_stops_with_its_name(tmp_path):
    root = ngp_folder(tmp_path)
    (root / "images" / "0003.png").write_bytes(b"not a png")
    with pytest.raises(datasets.DatasetError, match=r"0003\.png: cannot read the image"):
        datasets.load(str(root), log=None)


def test_undistorted_pixel_directions_are_cached_and_the_same():
    lens = (0.05, -0.08, -0.001, 0.0002)
    a = cameras.camera_rays(np.eye(4), 12, 20, 30.0, fy=31.0, cx=9.7, cy=6.2, distortion=lens)
    b = cameras.camera_rays(cameras.pose_spherical(0.3, 0.4), 12, 20, 30.0, fy=31.0, cx=9.7, cy=6.2, distortion=lens)
    hits = cameras._pixel_directions.cache_info().hits
    c = cameras.camera_rays(np.eye(4), 12, 20, 30.0, fy=31.0, cx=9.7, cy=6.2, distortion=lens)
    assert cameras._pixel_directions.cache_info().hits == hits + 1
    np.testing.assert_array_equal(a[1], c[1])
    assert not np.array_equal(a[1], b[1])
    # The pixel's ray projects back onto the pixel centre through the lens.
    px, _ = cameras.project(a[0][3, 5] + a[1][3, 5], np.eye(4), 12, 20, 30.0, fy=31.0, cx=9.7, cy=6.2,
                            distortion=lens)
    np.testing.assert_allclose(px, [5.5, 3.5], atol=1e-6)


# ---- the recipe ------------------------------------------------------------------------------

def test_recipe_defaults_apply_on_a_gpu_with_a_scene_and_explicit_flags_win():
    from examples.nerf import config

    small = config.build_parser().parse_args([])
    for argv, gpu, want in ((["--data", "x"], True, "ngp"), (["--data", "x"], False, "small"), ([], True, "small"),
                            (["--data", "x", "--recipe", "small"], True, "small"), (["--recipe", "ngp"], False, "ngp")):
        a = config.parse_args(argv, gpu_listed=gpu)
        assert a.recipe == want, argv
        for key, value in config.NGP_RECIPE.items():
            assert getattr(a, key) == (value if want == "ngp" else getattr(small, key)), (argv, key)
    a = config.parse_args(["--data", "x", "--lr", "3e-2", "--march-steps", "256"], gpu_listed=True)
    assert (a.lr, a.march_steps, a.grid_res) == (3e-2, 256, config.NGP_RECIPE["grid_res"])
    # The small recipe is the parser's defaults, unchanged.
    parsed = vars(config.parse_args([], gpu_listed=False))
    assert {k: parsed[k] for k in vars(small)} == dict(vars(small), recipe="small")


class _Field:
    """A density field: sigma = 50 inside a ball of radius 0.5 around the origin, 0 outside."""

    def __init__(self):
        self.calls = []

    def __call__(self, p):
        import tensorflow as tf

        self.calls.append(int(p.shape[0]))
        return tf.where(tf.norm(p, axis=-1) < 0.5, 50.0, 0.0)


@pytest.mark.parametrize("mirrored", [False, True], ids=["plain", "mirrored"])
def test_ngp_grid_rule_updates_a_quarter_at_random_and_a_quarter_of_the_occupied(mirrored):
    """The rule's update, its variables plain or a strategy's mirrored ones (which have no scatter ops)."""
    import contextlib

    import tensorflow as tf

    from examples.nerf import sampling

    aabb = np.array([[-1.5] * 3, [1.5] * 3])
    step = 3.0 * math.sqrt(3.0) / 1024
    scope = tf.distribute.MirroredStrategy(["/cpu:0"]).scope() if mirrored else contextlib.nullcontext()
    with scope:
        grid = sampling.OccupancyGrid(aabb, resolution=16, decay=0.95, rule="ngp", threshold_length=step)
    assert isinstance(grid.density, tf.distribute.DistributedValues) == mirrored
    field = _Field()
    seed = tf.constant([0, 1], tf.int64)
    grid.update(field, seed=seed, every_cell=True)
    assert sum(field.calls) == 16 ** 3
    occupied = grid.mask.numpy().copy()
    centres = grid.cell_centers().numpy()
    inside = np.linalg.norm(centres, axis=-1) < 0.4
    assert occupied[inside].all() and 0 < occupied.mean() < 0.1
    # Threshold: 0.01 of one march step's optical thickness, lowered to the mean of the positive estimates.
    density = grid.density.numpy()
    thr = min(0.01 / step, density[density > 0].mean())
    np.testing.assert_array_equal(occupied, (density > thr).astype(np.float32))
    # After the warm-up: G^3/4 uniform + G^3/4 occupied cells; the others keep their estimates (no decay).
    field.calls.clear()
    before = grid.density.numpy().copy()
    grid.update(field, seed=seed + 7, every_cell=False)
    assert sum(field.calls) == 2 * (16 ** 3 // 4)
    after = grid.density.numpy()
    changed = after != before
    assert 0 < changed.mean() <= 0.5
    # each updated cell: max(0.95 x its estimate, the density at its jittered point: 0 or 50)
    a, b = after[changed], before[changed]
    assert np.all(np.isclose(a, 0.95 * b) | (np.isclose(a, 50.0) & (0.95 * b <= 50.0)))
    with pytest.raises(ValueError, match="rule must be one of"):
        sampling.OccupancyGrid(aabb, rule="sometimes")


@pytest.mark.parametrize("share,tries", [(0.1, 10), (0.5, 3), (0.0, 10), (1.0, 1)])
def test_first_occupied_takes_the_first_occupied_try_else_the_last(share, tries):
    import tensorflow as tf

    from examples.nerf import sampling

    rng = np.random.default_rng(7)
    mask = (rng.random(997) < share).astype(np.float32)
    cells = rng.integers(0, mask.size, (4001, tries))
    want = np.array([next((c for c in row if mask[c] > 0), row[-1]) for row in cells])
    got = sampling.first_occupied(tf.constant(mask), tf.constant(cells)).numpy()
    np.testing.assert_array_equal(got, want)
    assert sampling.first_occupied(tf.constant(mask), tf.zeros([0, tries], tf.int64)).shape == (0,)


def _tiny_ngp_args(tmp_path, data, *extra):
    from examples.nerf import config

    return config.parse_args([
        "--data", str(data), "--recipe", "ngp", "--out-dir", str(tmp_path / "runs"), "--name", "ngp",
        "--levels", "6", "--log2-table", "12", "--finest-res", "64", "--batch-rays", "256", "--sample-budget", "4096",
        "--march-steps", "96", "--grid-res", "16", "--grid-warmup", "4", "--grid-every", "4", "--steps", "10",
        "--max-minutes", "0", "--eval-every", "5", "--eval-chunk", "100", "--orbit-frames", "2", "--quiet",
        *extra], gpu_listed=False)


def test_ngp_recipe_trains_an_instant_ngp_folder_with_missing_images(tmp_path, monkeypatch):
    from examples.nerf import config, train

    root = ngp_folder(tmp_path / "fox", missing=(4,))
    args = _tiny_ngp_args(tmp_path, root, "--loss", "huber", "--pictures", "1")
    assert args.lr_warmup == 100 and args.grid_rule == "ngp" and args.background == "random"
    logged = []
    tr = train.Trainer(args, log=logged.append)
    assert any("frames skipped, their image is missing: images/0004.png" in m for m in logged)
    assert isinstance(tr.loss_fn, __import__("keras").losses.Huber) and tr.grid.rule == "ngp"
    tr.set_learning_rate(0.0)
    assert float(tr.optimizer.learning_rate.numpy()) == pytest.approx(1e-2 * 0.01)
    tr.eval_at_seconds = [0.0]
    tr.fit(verbose=False)
    # the timed evaluation at 0 s waits for the occupancy grid (step 4); then every 5 steps
    assert tr.step == 10 and [h["step"] for h in tr.history] == [4, 5, 10]
    # Evaluation in chunks of 100 rays (4 a view): one trace for every chunk and view, and the
    # same image as one chunk.
    psnr, psnrs, renders = tr.evaluate("test")
    assert len(psnrs) == 2 and renders[0].shape == (16, 24, 3)
    fn = tr._render_fn[tr.use_grid()]
    assert fn.experimental_get_tracing_count() == 1
    np.testing.assert_allclose(tr.render_image(tr.dataset.splits["test"][0], chunk=4096), renders[0], atol=1e-6)
    # Orbit frames of a large capture are rendered at most ORBIT_MAX_SIDE a side, with the lens.
    monkeypatch.setattr(train.Trainer, "ORBIT_MAX_SIDE", 12)
    frame = tr.render_image(tr.orbit_poses(2)[0])
    assert frame.shape == (8, 12, 3)
    metrics = tr.write_outputs(psnrs, renders, {})
    assert metrics["recipe"] == "ngp" and os.path.exists(os.path.join(tr.run_dir, "test_00.png"))
    assert not os.path.exists(os.path.join(tr.run_dir, "test_01.png"))  # --pictures 1
    assert os.path.exists(os.path.join(tr.run_dir, "orbit.gif"))
    # The finest resolution defaults to instant-NGP's: 2048 x aabb_scale.
    a2 = config.parse_args(["--data", str(root), "--recipe", "ngp", "--out-dir", str(tmp_path / "r2"), "--levels", "2",
                           "--log2-table", "10", "--grid-res", "8", "--quiet"], gpu_listed=False)
    tr2 = train.Trainer(a2, log=lambda *a: None, dataset=tr.dataset)
    assert tr2.args.finest_res == 2048 * 4
    assert tr2.train_o is not None and tr2._rays(tr2.dataset.splits["train"]) is tr._rays(tr.dataset.splits["train"])


# ---- the GPU script, tiny, on the test machine's device ---------------------------------------

@pytest.mark.parametrize("kind", ["blender", "instant-ngp"])
def test_nerf_scene_gpu_script_quick(tmp_path, kind):
    from benchmarks import nerf_scene_gpu

    if kind == "blender":
        data = tmp_path / "mic"
        scene.export_blender(str(data), verbose=False, height=16, width=16, n_train=6, n_val=1, n_test=3, spp=1)
        os.remove(data / "transforms_val.json")  # as the mic folder at hand: no val split
    else:
        data = ngp_folder(tmp_path / "fox", missing=(1,))
    results = tmp_path / "results"
    # --quick: --quick-steps steps end the main run (the minutes only set the learning-rate schedule);
    # the ablation and the profile once (blender).
    extra = ["--ablation", "--profile", "--ablation-seconds", "1"] if kind == "blender" else []
    out = nerf_scene_gpu.main(["--data", str(data), "--quick", "--minutes", "2", "--quick-steps", "8",
                               "--results", str(results), "--out-dir", str(tmp_path / "runs"), "--curve-views", "2",
                               *extra])
    name = data.name
    device, _ = nerf_scene_gpu.device_tag(tf)  # the files' device part: cpu here, h100 on an H100
    main = json.loads((results / f"nerf_{name}.{device}.json").read_text())
    assert main["test_views"] == (3 if kind == "blender" else 2) and math.isfinite(main["test_psnr"])
    assert main["steps"] == 8 and main["curve"][-1]["step"] == 8 and main["eval_seconds"] >= 0
    assert main["curve_views"] == 2 and main["recipe"] == "ngp" and main["curve_split"] == "test"
    assert (results / f"nerf_{name}.{device}.png").exists()
    assert (tmp_path / "runs" / f"nerf_{name}" / "orbit.gif").exists()
    if kind != "blender":
        assert set(out) == {"main"} and any("images/0001.png" in n for n in main["dataset_notes"])
        return
    ablation = json.loads((results / f"nerf_{name}_ablation.{device}.json").read_text())
    assert [r["label"] for r in ablation["rows"]] == [label for label, _ in nerf_scene_gpu.ABLATION[:2]]
    assert ablation["warmup_seconds"] == 1  # --ablation-warmup at most --ablation-seconds
    profile = json.loads((results / f"nerf_{name}_profile.{device}.json").read_text())
    assert [r["sample_budget"] for r in profile["rows"]] == [8192, 16384]
    assert all(r["wall_ms_per_step"] > 0 for r in profile["rows"])
    assert set(out) == {"main", "ablation", "profile"}


def test_pack_writes_a_compact_copy_that_loads_the_same(tmp_path):
    from examples.nerf import pack

    src = tmp_path / "synthetic"
    scene.export_blender(str(src), verbose=False, height=16, width=16, n_train=3, n_val=1, n_test=2, spp=1)
    (src / "test" / "r_0_depth_0000.png").write_bytes(b"listed nowhere")
    files, _ = pack.pack(str(src), str(tmp_path / "packed"), log=None)
    assert files == 6 and not (tmp_path / "packed" / "test" / "r_0_depth_0000.png").exists()
    a, b = datasets.load(str(src), log=None), datasets.load(str(tmp_path / "packed"), log=None)
    for split in ("train", "val", "test"):
        assert [os.path.basename(v.name) for v in b.splits[split]] == \
            [os.path.basename(v.name).replace(".png", ".webp") for v in a.splits[split]]
        for x, y in zip(a.splits[split], b.splits[split]):
            np.testing.assert_array_equal(x.image, y.image)
            np.testing.assert_array_equal(x.c2w, y.c2w)
    fox = ngp_folder(tmp_path / "fox", missing=(3,))
    assert pack.pack(str(fox), str(tmp_path / "fox_packed"), log=None)[0] == 10
    a, b = datasets.load(str(fox), log=None), datasets.load(str(tmp_path / "fox_packed"), log=None)
    assert a.notes == b.notes and len(b.splits["train"]) == len(a.splits["train"])
    assert pack.main([str(tmp_path / "nothing"), str(tmp_path / "x")]) == 2
    assert pack.main([str(src), str(tmp_path / "two"), "--splits", "train", "test"]) == 0
    assert sorted(os.listdir(tmp_path / "two")) == ["test", "train", "transforms_test.json", "transforms_train.json"]


def test_orbit_sweeps_the_arc_of_a_one_sided_capture():
    import types

    from examples.nerf import train

    def trainer(azimuths):
        views = [datasets.View(np.zeros((2, 2, 3), np.uint8), cameras.pose_spherical(a, 0.3), 1.0, 1.0, 1.0, 1.0)
                 for a in azimuths]
        ds = datasets.Dataset("d", "instant-ngp", {"train": views}, datasets.STANDARD_AABB, 0.1, 10.0)
        return types.SimpleNamespace(dataset=ds)

    def azimuths(poses):
        return np.degrees(np.arctan2([p[1, 3] for p in poses], [p[0, 3] for p in poses]))

    side = azimuths(train.Trainer.orbit_poses(trainer(np.radians([-40.0, -10.0, 20.0, 50.0])), 8))
    assert side.min() == pytest.approx(-40.0) and side.max() == pytest.approx(50.0)
    around = azimuths(train.Trainer.orbit_poses(trainer(np.radians(np.arange(0.0, 360.0, 40.0))), 8))
    np.testing.assert_allclose(np.sort(np.mod(around, 360.0)), np.arange(0.0, 360.0, 45.0), atol=1e-9)
