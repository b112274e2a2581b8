"""The Gaussian splatting sample (examples/splat): density control clones,
splits and prunes as the reference's rules say, and a short run trains."""
import numpy as np
import pytest

from metal_ops import splat

pytestmark = pytest.mark.source_tree("examples/splat")


def test_density_control_clones_small_splits_large_and_prunes():
    from examples.splat.density import DensityControl
    from examples.splat.recipe import Recipe

    recipe = Recipe.for_steps(300)
    scales = np.log([[0.01] * 3, [0.5] * 3, [0.01] * 3, [0.5] * 3])
    g = splat.Gaussians(np.zeros((4, 3)), scales, np.tile([1.0, 0, 0, 0], (4, 1)), np.array([0.0, 0.0, 0.0, -9.0]),
                        np.zeros((4, 1, 3)), np.zeros((4, 15, 3)))
    opt = splat.GaussianAdam(g, dict(means=0.1))
    control = DensityControl(recipe, extent=1.0)
    # Gaussians 0 and 1 have a high view-space gradient; 3 is nearly transparent.
    control.accumulate(np.array([[1e-3, 0], [1e-3, 0], [0, 0], [0, 0]]), np.ones((4, 2)), 10, 10)
    done = control.refine(recipe.refine_start + recipe.refine_every, g, opt)
    assert (done["cloned"], done["split"], done["pruned"]) == (1, 1, 1)
    # Kept: 0, 2 (originals), the clone of 0, the two halves of 1 (scales / 1.6).
    assert g.count == 5
    np.testing.assert_allclose(np.sort(np.exp(g.scales.numpy()[:, 0])), [0.01, 0.01, 0.01, 0.5 / 1.6, 0.5 / 1.6], rtol=1e-6)


def test_the_sample_trains_a_small_scene(tmp_path):
    from examples.splat import train

    metrics = train.main(["--size", "24", "--steps", "200", "--init-points", "400", "--quiet", "--no-outputs",
                          "--data-dir", str(tmp_path), "--out-dir", str(tmp_path)])
    assert metrics["steps"] == 200 and np.isfinite(metrics["test_psnr_mean"])
    assert metrics["loss_last"] < 0.7 * metrics["loss_first"], {k: metrics[k] for k in ("loss_first", "loss_last")}
    with pytest.raises(SystemExit):
        train.parse_args(["--steps", "0"])


def test_density_sums_in_a_tf_function_match_numpy():
    import tensorflow as tf

    from examples.splat.density import DensityControl
    from examples.splat.recipe import Recipe

    rng = np.random.default_rng(3)
    grads = [rng.normal(size=(50, 2)).astype(np.float32) * 1e-3 for _ in range(4)]
    radii = [np.repeat(rng.integers(0, 3, (50, 1)), 2, 1).astype(np.int32) for _ in range(4)]  # [N, 2]
    control = DensityControl(Recipe.for_steps(300), extent=1.0)
    control.reset(50)
    step = tf.function(lambda g, r: control.accumulate(g, r, 40, 30))
    for g, r in zip(grads, radii):
        step(tf.constant(g), tf.constant(r))
    norm = [np.where(r[:, 0] > 0, np.linalg.norm(g * [20.0, 15.0], axis=-1), 0.0) for g, r in zip(grads, radii)]
    np.testing.assert_allclose(control.grad2d.numpy(), np.sum(norm, 0), rtol=1e-6)
    np.testing.assert_array_equal(control.count.numpy(), np.sum([r[:, 0] > 0 for r in radii], 0))


def test_the_loss_on_xla_matches_the_loss_without():
    import tensorflow as tf

    from examples.splat import train

    rng = np.random.default_rng(4)
    image, target = (tf.constant(rng.random((24, 20, 3)), tf.float32) for _ in range(2))
    plain = train.loss_and_gradient(tf, 0.2, xla=False)(image, target)
    xla = train.loss_and_gradient(tf, 0.2, xla=True)(image, target)
    np.testing.assert_allclose(xla[0].numpy(), plain[0].numpy(), rtol=1e-5)
    np.testing.assert_allclose(xla[1].numpy(), plain[1].numpy(), rtol=1e-4, atol=1e-8)


def test_a_capture_with_lens_distortion_trains_on_pinhole_images(tmp_path):
    import json

    import imageio.v2 as imageio

    from examples.nerf import cameras
    from examples.splat import train

    rng = np.random.default_rng(0)
    frames = []
    for i in range(3):
        imageio.imwrite(tmp_path / f"{i}.png", rng.integers(0, 256, (20, 28, 3), dtype=np.uint8))
        frames.append({"file_path": f"{i}.png",
                       "transform_matrix": cameras.look_at([2.0, 0.5 * i, 2.0], target=[0.0, 0.0, 0.0]).tolist()})
    with open(tmp_path / "transforms.json", "w") as f:
        json.dump(dict(fl_x=30.0, fl_y=30.0, cx=14.0, cy=10.0, w=28, h=20, k1=-0.2, k2=0.02, aabb_scale=1,
                       frames=frames), f)
    logged = []
    dataset = train.load_dataset(train.parse_args(["--data", str(tmp_path)]), logged.append)
    views = sorted({v.name: v for vs in dataset.splits.values() for v in vs}.values(), key=lambda v: v.name)
    assert len(views) == 3 and all(v.distortion is None for vs in dataset.splits.values() for v in vs)
    assert any("3 views resampled to a pinhole camera" in str(line) for line in logged)
    raw = imageio.imread(tmp_path / "0.png")
    assert views[0].image.shape == raw.shape and 0 < np.abs(views[0].image.astype(int) - raw).max()
