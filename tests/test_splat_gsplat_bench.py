"""The side-by-side against gsplat (benchmarks/bench_splat_gsplat.py,
benchmarks/splat_mic_gsplat.py) in what runs without a GPU: the inputs, the
TF worker and the parent's protocol on the CPU, the shared initial
Gaussians, and the one evaluator of both trainers' renders."""
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from benchmarks import bench_splat_gsplat as bench
from benchmarks import splat_mic_gsplat as mic

pytestmark = pytest.mark.source_tree("benchmarks/ and examples/splat")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_inputs_lie_in_view_and_span_a_few_tiles():
    d = bench.make_inputs(4000, 800, 800, seed=3)
    assert {k: d[k].shape for k in bench.GRADIENT_INPUTS} == {
        "means": (4000, 3), "quats": (4000, 4), "scales": (4000, 3), "opacities": (4000,), "colors": (4000, 3)}
    assert all(d[k].dtype == np.float32 for k in bench.GRADIENT_INPUTS + ("viewmat", "K", "upstream"))
    x, y, z = d["means"].T
    K = d["K"]
    u, v = K[0, 0] * x / z + K[0, 2], K[1, 1] * y / z + K[1, 2]
    assert z.min() >= 2.0 and z.max() <= 6.0 and 0 <= u.min() and u.max() <= 800 and 0 <= v.min() and v.max() <= 800
    radius_px = 3.0 * d["scales"].max(1) * K[0, 0] / z
    assert 2.0 < np.median(radius_px) < 32.0 and radius_px.max() < 100.0  # a few 16-pixel tiles
    np.testing.assert_array_equal(bench.make_inputs(10, 64, 64, seed=1)["means"],
                                  bench.make_inputs(10, 64, 64, seed=1)["means"])
    assert bench.image_agreement(np.ones((2, 2, 3)), np.ones((2, 2, 3))) == (0.0, math.inf)
    diff, psnr = bench.image_agreement(np.zeros((2, 2, 3)), np.full((2, 2, 3), 0.1))
    assert diff == pytest.approx(0.1) and psnr == pytest.approx(20.0)


def test_the_tf_side_renders_as_rasterize_gaussians_and_has_every_gradient():
    import metal_ops
    import tensorflow as tf

    d = bench.make_inputs(300, 48, 40, seed=0)
    side = bench.TFSide("cpu")
    image, visible, fields = side.load(d)
    expected, _, info = metal_ops.rasterize_gaussians(*[d[k] for k in bench.GRADIENT_INPUTS], d["viewmat"], d["K"],
                                                      48, 40, background=d["background"])
    np.testing.assert_array_equal(image, expected.numpy())
    assert visible == int(tf.reduce_sum(tf.cast(tf.reduce_all(info["radii"] > 0, -1), tf.int32))) > 250
    assert fields == {}
    assert side.time_iters(1) > 0 and side.peak_mib() is None
    inputs = [tf.constant(d[k]) for k in bench.GRADIENT_INPUTS]
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        img = metal_ops.rasterize_gaussians(*inputs, d["viewmat"], d["K"], 48, 40, background=d["background"])[0]
        loss = tf.reduce_sum(img * d["upstream"])
    assert all(float(tf.reduce_max(tf.abs(g))) > 0 for g in tape.gradient(loss, inputs))


def test_the_parent_and_its_workers_on_the_cpu(tmp_path):
    """--protocol-check: both workers are the TF worker, so the images agree exactly."""
    out = tmp_path / "r.json"
    run = subprocess.run([sys.executable, "-m", "benchmarks.bench_splat_gsplat", "--device", "cpu", "--sizes", "200",
                          "--width", "32", "--height", "32", "--rounds", "2", "--iters", "1", "--protocol-check",
                          "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join([os.path.join(ROOT, "python"), ROOT])})
    assert run.returncode == 0, run.stdout + run.stderr
    row, = json.loads(out.read_text())["rows"]
    assert row["gaussians"] == 200 and row["image_max_abs_diff"] == 0 and row["tf_visible"] == row["tf_again_visible"]
    assert len(row["tf_round_ms"]) == 2 and row["speedup"] > 0
    assert "| 200 |" in run.stdout


def test_the_initial_gaussians_round_trip(tmp_path):
    from examples.splat import train

    path = str(tmp_path / "init.npz")
    common = ["--size", "16", "--steps", "1", "--init-points", "50", "--data-dir", str(tmp_path), "--quiet"]
    written = train.Trainer(train.parse_args(common + ["--write-init", path, "--seed", "4"])).gaussians
    read = train.Trainer(train.parse_args(common + ["--init-from", path])).gaussians
    for key, var in written.variables_by_name.items():
        np.testing.assert_array_equal(read.variables_by_name[key].numpy(), var.numpy())
    with np.load(path) as f:
        np.savez(tmp_path / "bad.npz", means=f["means"])
    with pytest.raises(ValueError, match="--init-from .*bad.npz: no scales"):
        train.Trainer(train.parse_args(common + ["--init-from", str(tmp_path / "bad.npz")]))


def test_prepare_writes_the_scene_and_the_initial_gaussians(tmp_path):
    from examples.nerf import scene

    data, out = tmp_path / "scene", tmp_path / "run"
    scene.export_blender(str(data), verbose=False, height=16, width=16, n_train=3, n_val=1, n_test=2, spp=1, seed=0)
    mic.prepare(mic.parse_args(["prepare", "--data", str(data), "--dir", str(out), "--init-points", "40"]))
    with np.load(out / "scene.npz") as f:
        assert f["train_targets"].shape == (3, 16, 16, 3) and f["test_targets"].shape == (2, 16, 16, 3)
        assert f["train_viewmats"].shape == (3, 4, 4) and f["test_Ks"].shape == (2, 3, 3)
        assert 0.0 <= f["train_targets"].min() and f["train_targets"].max() <= 1.0
    with np.load(out / "init.npz") as f:
        assert f["means"].shape == (40, 3)


def test_one_evaluator_scores_both_runs(tmp_path):
    import imageio.v2 as imageio

    rng = np.random.default_rng(0)
    refs = rng.uniform(0, 1, (3, 16, 16, 3)).astype(np.float32)
    np.savez(tmp_path / "scene.npz", test_targets=refs)
    for name, noise in (("ours", 0.0), ("gsplat", 0.05)):
        os.makedirs(tmp_path / name)
        for i, ref in enumerate(refs):
            img = np.clip(ref + noise * rng.standard_normal(ref.shape), 0, 1)
            imageio.imwrite(tmp_path / name / f"test_{i:03d}.png", (img * 255.0 + 0.5).astype(np.uint8))
        (tmp_path / name / "metrics.json").write_text(json.dumps(
            {"steps": 10, "train_seconds": 2.0, "gaussians": 5, "peak_gpu_mib": None, "gsplat": "1.5.3"}))
    out = tmp_path / "splat_mic_gsplat.h200.json"
    ours, theirs = mic.record(mic.parse_args(["record", "--dir", str(tmp_path), "--out", str(out)]))
    assert ours["test_psnr"] > 50 and ours["test_ssim"] > 0.999  # 8-bit quantisation alone
    assert 24 < theirs["test_psnr"] < 28 and theirs["test_ssim"] < 0.99 and theirs["test_views"] == 3
    assert json.loads(out.read_text())["rows"][1]["trainer"] == "gsplat 1.5.3"
    os.remove(tmp_path / "gsplat" / "test_002.png")
    with pytest.raises(SystemExit, match="2 test renders, the scene has 3"):
        mic.record(mic.parse_args(["record", "--dir", str(tmp_path)]))
