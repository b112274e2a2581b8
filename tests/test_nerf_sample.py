"""The NeRF sample (examples/nerf): scene, cameras, sampling, training, checkpoints, CLI outputs."""
import dataclasses
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from examples.nerf import cameras, scene  # noqa: E402

pytestmark = pytest.mark.source_tree("examples/nerf")

# A configuration small enough for a 2-core CPU: 32x32 views, a small grid.
TINY = ["--size", "32", "--n-train", "20", "--n-val", "2", "--n-test", "2", "--levels", "8",
        "--log2-table", "14", "--finest-res", "256", "--batch-rays", "1024", "--samples", "16",
        "--grid-res", "32", "--grid-decay", "0.8", "--grid-warmup", "16", "--grid-every", "8", "--candidates", "64",
        "--march-steps", "256", "--quiet", "--eval-every", "0", "--max-minutes", "0"]


def _args(tmp_path, *extra):
    from examples.nerf import config

    return config.build_parser().parse_args(
        TINY + ["--data-dir", str(tmp_path / "data"), "--out-dir", str(tmp_path / "runs")] + list(extra))


# ----------------------------------------------------------------------------- scene
def test_scene_is_deterministic_and_cached(tmp_path):
    cfg = dict(height=16, width=16, n_train=3, n_val=1, n_test=1)
    a = scene.generate(**cfg)
    b = scene.generate(**cfg)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    c = scene.generate(**dict(cfg, seed=1))
    assert not np.array_equal(a["train_poses"], c["train_poses"])
    # Held-out views are not training views.
    assert not np.any(np.all(np.isclose(a["test_poses"][:, None], a["train_poses"][None]), axis=(2, 3)))
    d1, path = scene.load_or_generate(str(tmp_path), verbose=False, **cfg)
    assert os.path.exists(path)
    mtime = os.path.getmtime(path)
    d2, path2 = scene.load_or_generate(str(tmp_path), verbose=False, **cfg)
    assert path2 == path and os.path.getmtime(path) == mtime  # loaded, not regenerated
    for k in a:
        np.testing.assert_array_equal(d2[k], a[k], err_msg=k)
    os.remove(path)
    scene.load_or_generate(str(tmp_path), verbose=False, **cfg)  # regenerated when missing
    assert os.path.exists(path)


def test_scene_objects_materials_and_textures():
    names = [o[0] for o in scene.OBJECTS]
    assert len(names) >= 6 and len(set(names)) == len(names)
    # Straight down onto the floor, 0.05 either side of a checker edge at x = 1.2: different colours.
    o = np.array([[1.15, -0.05, 3.0], [1.25, -0.05, 3.0]])
    d = np.array([[0.0, 0.0, -1.0]] * 2)
    t, obj, n = scene.intersect(o, d)
    assert list(obj) == [0, 0] and np.allclose(t, 3.0) and np.allclose(n, [[0, 0, 1]] * 2)
    c = scene.shade(o, d)
    assert np.abs(c[0] - c[1]).max() > 0.3
    # The striped sphere: horizontal rays at two heights one stripe apart hit different colours.
    cz = scene.STRIPED_CENTER
    o = np.array([[cz[0] - 3.0, cz[1], cz[2] + 0.05], [cz[0] - 3.0, cz[1], cz[2] + 0.15]])
    d = np.array([[1.0, 0.0, 0.0]] * 2)
    _, obj, _ = scene.intersect(o, d)
    assert list(obj) == [2, 2]
    c = scene.shade(o, d)  # on the shadowed side: ambient light only
    assert np.abs(c[0] - c[1]).max() > 0.15
    # Sphere hit distance in closed form: the red sphere from +x.
    o = np.array([[3.0, 0.35, 0.55]])
    t, obj, n = scene.intersect(o, np.array([[-1.0, 0.0, 0.0]]))
    assert obj[0] == 1 and t[0] == pytest.approx(3.0 - 0.45 - 0.55) and np.allclose(n, [[1, 0, 0]])
    # Glossy material: the red sphere's colour at one point changes with the view; a diffuse one does not.
    p = np.array([0.45 + 0.55 / math.sqrt(2), 0.35, 0.55 + 0.55 / math.sqrt(2)])
    views = [np.array([1.0, 0.0, 1.0]), np.array([1.0, 0.6, 0.3])]
    cols = []
    for v in views:
        v = v / np.linalg.norm(v)
        cols.append(scene.shade((p + 2.0 * v)[None], (-v)[None])[0])
    assert np.abs(cols[0] - cols[1]).max() > 0.05
    # Misses show the white background; the emissive orb is unlit (its albedo exactly).
    assert np.allclose(scene.shade(np.array([[0.0, 0.0, 5.0]]), np.array([[0.0, 1.0, 0.0]])), 1.0)
    c = scene.shade(np.array([[-0.1, -0.2, 3.0]]), np.array([[0.0, 0.0, -1.0]]))
    assert np.allclose(c, [[1.0, 0.55, 0.1]])


def test_dataset_views_cover_several_colours():
    data = scene.generate(height=32, width=32, n_train=2, n_val=1, n_test=1)
    img = scene.to_float(data["train_images"][0]).reshape(-1, 3)
    assert img.shape == (1024, 3)
    assert (np.all(img > 0.99, axis=1)).mean() > 0.01  # background visible
    colours = np.unique(np.round(img * 4).astype(int), axis=0)
    assert len(colours) >= 8
    assert data["focal"] == pytest.approx(0.5 * 32 / math.tan(0.5 * 0.6911112070083618))


# ----------------------------------------------------------------------------- cameras
def test_camera_geometry_known_points():
    H = W = 100
    f = cameras.focal_from_fov(W)
    assert f == pytest.approx(138.8888, abs=1e-3)  # Blender synthetic at 100 px
    c2w = cameras.pose_spherical(0.0, 0.0)  # at (4, 0, 0) looking at the origin, z up
    np.testing.assert_allclose(c2w[:3, 3], [4.0, 0.0, 0.0], atol=1e-12)
    uv, depth = cameras.project(np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 1.0, 0.0],
                                          [1.0, 0.0, 0.0]]), c2w, H, W, f)
    np.testing.assert_allclose(uv[0], [50.0, 50.0], atol=1e-9)  # the target: image centre
    np.testing.assert_allclose(uv[1], [50.0, 50.0 - f / 4.0], atol=1e-9)  # world up: image up
    np.testing.assert_allclose(uv[2], [50.0 + f / 4.0, 50.0], atol=1e-9)  # +y: to the right
    np.testing.assert_allclose(depth, [4.0, 4.0, 4.0, 3.0], atol=1e-12)
    # Camera on the hemisphere, radius 4, c2w orthonormal, looking at the origin.
    poses = cameras.hemisphere_poses(20, seed=3)
    for p in poses:
        assert np.linalg.norm(p[:3, 3]) == pytest.approx(4.0)
        assert p[2, 3] > 0
        np.testing.assert_allclose(p[:3, :3].T @ p[:3, :3], np.eye(3), atol=1e-12)
        np.testing.assert_allclose(-p[:3, 2], -p[:3, 3] / 4.0, atol=1e-12)


def test_rays_project_back_to_their_pixels():
    H, W = 24, 40
    f = cameras.focal_from_fov(W)
    c2w = cameras.pose_spherical(1.1, 0.6)
    o, d = cameras.camera_rays(c2w, H, W, f)
    np.testing.assert_allclose(np.linalg.norm(d, axis=-1), 1.0, atol=1e-12)
    pts = o + 3.7 * d
    uv, _ = cameras.project(pts, c2w, H, W, f)
    cols, rows = np.meshgrid(np.arange(W) + 0.5, np.arange(H) + 0.5, indexing="xy")
    np.testing.assert_allclose(uv[..., 0], cols, atol=1e-9)
    np.testing.assert_allclose(uv[..., 1], rows, atol=1e-9)


# ----------------------------------------------------------------------------- sampling
def test_stratified_and_occupancy_sampling():
    import tensorflow as tf

    from examples.nerf import sampling

    aabb = np.array([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]], np.float32)
    o = tf.constant([[-3.0, 0.1, 0.05], [-3.0, 0.3, -0.2], [-3.0, 5.0, 0.0]])  # last one misses
    d = tf.constant([[1.0, 0.0, 0.0]] * 3)
    tn, tf_ = sampling.ray_aabb(o, d, tf.constant(aabb), 2.0, 6.0)
    np.testing.assert_allclose(tn.numpy()[:2], [2.0, 2.0], atol=1e-6)
    np.testing.assert_allclose(tf_.numpy()[:2], [4.0, 4.0], atol=1e-6)
    assert tn.numpy()[2] == tf_.numpy()[2]
    t, ts, scale = sampling.stratified(tn, tf_, 8)
    assert np.all(np.diff(t.numpy(), axis=1) >= 0)
    assert np.all((ts.numpy() >= t.numpy()[:, :-1]) & (ts.numpy() <= t.numpy()[:, 1:]))
    grid = sampling.OccupancyGrid(aabb, resolution=16)
    # Every cell occupied: the occupancy sampler is plain stratified sampling.
    t2, ts2, sc2 = sampling.occupancy_sample(o, d, tn, tf_, grid, 8, num_candidates=64, jitter=False,
                                             max_optical_depth=0.0)
    np.testing.assert_allclose(t2.numpy()[:2], t.numpy()[:2], atol=1e-5)
    np.testing.assert_allclose(sc2.numpy()[:2], 1.0, atol=1e-5)
    # Only the slab 0 <= x < 0.5 occupied: samples land there and the occupied length is exact.
    centers = grid.cell_centers().numpy()
    mask = ((centers[:, 0] >= 0.0) & (centers[:, 0] < 0.5)).astype(np.float32)
    grid.mask.assign(mask)
    t3, ts3, sc3 = sampling.occupancy_sample(o, d, tn, tf_, grid, 8, num_candidates=64, jitter=True,
                                             eps=1e-3, max_optical_depth=0.0)
    # Jittered samples leave the slab with the eps mass outside it (~0.3% of
    # them): counted over 256 parallel rays, not 2, so the check is not a coin toss.
    ys = np.linspace(-0.8, 0.8, 16, dtype=np.float32)
    o_many = tf.constant([[-3.0, y, z] for y in ys for z in ys])
    d_many = tf.constant([[1.0, 0.0, 0.0]] * len(o_many))
    tn_many, tf_many = sampling.ray_aabb(o_many, d_many, tf.constant(aabb), 2.0, 6.0)
    _, ts_many, _ = sampling.occupancy_sample(o_many, d_many, tn_many, tf_many, grid, 8, num_candidates=64,
                                              jitter=True, eps=1e-3, max_optical_depth=0.0)
    xs = o_many.numpy()[:, None, 0] + ts_many.numpy()
    assert np.mean((xs >= -0.01) & (xs <= 0.51)) > 0.98
    occ_len = np.sum(sc3.numpy() * np.diff(t3.numpy(), axis=1), axis=1)
    np.testing.assert_allclose(occ_len[:2], 0.5, atol=0.01)
    assert occ_len[2] == 0.0
    # Occluded space skipped: a dense slab 0 <= x < 0.5 hides the rest of the ray.
    grid.mask.assign(np.ones_like(mask))
    grid.density.assign(np.where(mask > 0, 1e4, 0.0).astype(np.float32))
    grid.mask.assign(((centers[:, 0] >= 0.0)).astype(np.float32))  # x >= 0 "occupied"
    t4, ts4, sc4 = sampling.occupancy_sample(o, d, tn, tf_, grid, 8, num_candidates=64, jitter=False,
                                             eps=1e-3)
    xs4 = o.numpy()[:2, None, 0] + ts4.numpy()[:2]
    assert xs4.max() < 0.5 + 1e-3  # nothing sampled behind the opaque slab (3 cells = 0.375 deep)


@pytest.mark.parametrize("max_count", [0, 3, 300, 3000])
def test_transmittance_test_keeps_what_the_renderer_uses(max_count):
    """The pruning pass's float32 test against float64 sums per ray (NumPy): it keeps every sample
    whose transmittance is at least the threshold, each ray's a prefix, and beyond that only
    samples within a quantum a sample of the threshold's optical depth."""
    import collections

    import tensorflow as tf

    from examples.nerf import model as hmodel

    samples = collections.namedtuple("Samples", "t_starts t_ends ray_indices ray_offsets ray_counts")
    rng = np.random.default_rng(max_count)
    limit = -math.log(1e-4)
    for trial in range(6):
        counts = rng.integers(0, max_count + 1, size=rng.integers(0, 30)).astype(np.int32)
        if len(counts) and max_count:
            counts[0] = max_count  # the deepest ray sets the quantum
        n = int(counts.sum())
        offsets = (np.cumsum(counts) - counts).astype(np.int32)
        t0 = rng.uniform(0, 5, n).astype(np.float32)
        t1 = t0 + rng.exponential(0.01, n).astype(np.float32)
        scale = (1e-3, 0.1, 1.0, 30.0, 300.0, 3.0)[trial]
        sigma = (rng.exponential(1.0, n) * scale * (rng.uniform(size=n) < 0.7)).astype(np.float32)
        ray_indices = np.repeat(np.arange(len(counts)), counts).astype(np.int32)
        keep = hmodel._transmittance_above(samples(t0, t1, ray_indices, offsets, counts), tf.constant(sigma),
                                           1e-4).numpy()
        tau = sigma.astype(np.float64) * (t1.astype(np.float64) - t0.astype(np.float64))
        for r, (a, c) in enumerate(zip(offsets, counts)):
            depth = np.cumsum(tau[a:a + c]) - tau[a:a + c]
            kept = keep[a:a + c]
            assert np.all(np.diff(kept.astype(int)) <= 0), (trial, r)  # a prefix
            assert np.all(kept[depth <= limit * (1 - 1e-6)]), (trial, r)
            quantum = 2.0 ** (np.ceil(np.log2((limit + 1) * max(counts.max(), 1))) - 23)
            assert np.all(depth[kept] <= limit + quantum * np.arange(1, c + 1)[kept] + 1e-4), (trial, r)


# ----------------------------------------------------------------------------- training
@pytest.mark.cpu_semantics("a GPU's float-atomic gradients make each run differ a little; the CPU's training is "
                           "bitwise reproducible")
def test_same_seed_same_training(tmp_path):
    """--seed fixes the initial weights, the ray batches and the jitter: two runs
    with one seed end with the same weights, bit for bit; another seed differs."""
    from examples.nerf import train

    def weights(name, seed):
        tr = train.Trainer(_args(tmp_path, "--name", name, "--steps", "6", "--seed", str(seed)), log=lambda *a: None)
        first = [v.numpy().copy() for v in tr.model.trainable_variables]
        tr.fit(verbose=False)
        return first, [v.numpy() for v in tr.model.trainable_variables]

    (init_a, end_a), (init_b, end_b), (init_c, _) = weights("a", 0), weights("b", 0), weights("c", 1)
    for x, y in zip(init_a + end_a, init_b + end_b):
        np.testing.assert_array_equal(x, y)
    assert any(not np.array_equal(x, y) for x, y in zip(init_a, init_c))
    assert any(not np.array_equal(x, y) for x, y in zip(init_a, end_a))  # the six steps trained


@pytest.mark.cpu_semantics("a GPU's float-atomic gradients make each run differ a little; the CPU's training is "
                           "bitwise reproducible")
def test_smoke_training_32px_psnr_rises(tmp_path):
    import tensorflow as tf

    from examples.nerf import train

    tr = train.Trainer(_args(tmp_path, "--name", "smoke", "--steps", "120"), log=lambda *a: None)
    before, _, _ = tr.evaluate("val")
    tr.fit(verbose=False)
    after, psnrs, renders = tr.evaluate("val")
    assert tr.step == 120
    assert renders[0].shape == (32, 32, 3)
    assert after >= before + 5.0, (before, after)
    assert tr.use_grid()  # the occupancy grid was in use at the end
    # The mask is the grid's density estimates under its threshold rule. Whether
    # 120 steps empty any cell depends on the run's arithmetic, so it is not
    # asserted; masks with empty cells are marched in the tests below.
    density, mask = tr.grid.density.numpy(), tr.grid.mask.numpy()
    thr = min(-math.log(1.0 - tr.grid.threshold) / float(tr.grid.cell_size), float(np.mean(density)))
    assert np.all(mask[density > thr * (1 + 1e-5)] == 1.0) and np.all(mask[density < thr * (1 - 1e-5)] == 0.0)
    assert np.mean(mask) > 0.0
    # The training step's bitfield is the mask's, packed at the last grid update.
    np.testing.assert_array_equal(tr.occupancy_bits().numpy(), tr.metal_ops.pack_occupancy(tr.grid.mask[None]).numpy())
    # The march sampler (the default): the ray count follows the sample budget
    # (1024 rays x 16 samples), and the grid removes the samples in empty cells.
    assert tr.marching
    stats = tr.sample_stats()
    assert 0.75 * 16384 <= stats["field_evals_per_step"] <= 1.25 * 16384, stats
    # Evaluation marches without jitter: the same image twice.
    np.testing.assert_array_equal(renders[0], tr.evaluate("val")[2][0])
    # Pruning (the density-only pass) drops only samples the renderer skips: the same images.
    o, d = tr.train_o[:2048], tr.train_d[:2048]
    kw = dict(aabb=tr.dataset.aabb, near=tr.near, far=tr.far, background=tr.background, grid=tr.grid, use_grid=True,
              step_size=tr.step_size, max_samples=tr.args.max_samples, jitter=False)
    full, s_full, m_full = tr._hmodel.render_hash_marched(tr.model, o, d, prune=False, **kw)
    pruned, s_pruned, m_pruned = tr._hmodel.render_hash_marched(tr.model, o, d, prune=True, **kw)
    assert int(m_full) == int(m_pruned) == int(s_full.t_starts.shape[0]) >= int(s_pruned.t_starts.shape[0])
    np.testing.assert_allclose(pruned.rgb.numpy(), full.rgb.numpy(), atol=1e-4)
    np.testing.assert_allclose(pruned.opacity.numpy(), full.opacity.numpy(), atol=1e-4)
    # Samples only in occupied cells: with the upper half of the grid emptied,
    # every sample lies in the lower half, and there are fewer.
    g = tr.grid.resolution
    tr.grid.mask.assign(np.repeat((np.arange(g) < g // 2).astype(np.float32), g * g))
    o, d = tr.train_o[:4096], tr.train_d[:4096]
    counts = {}
    for use_grid in (False, True):
        _, s, _ = tr._hmodel.render_hash_marched(
            tr.model, o, d, aabb=tr.dataset.aabb, near=tr.near, far=tr.far, background=tr.background, grid=tr.grid,
            use_grid=use_grid, step_size=tr.step_size, max_samples=tr.args.max_samples, jitter=False, prune=False)
        counts[use_grid] = int(s.t_starts.shape[0])
        points = tf.gather(o, s.ray_indices) + tf.gather(d, s.ray_indices) * (0.5 * (s.t_starts + s.t_ends))[:, None]
        if use_grid:
            assert float(tf.reduce_min(tr.grid.occupied_at(points))) == 1.0
    assert 0 < counts[True] < 0.8 * counts[False], counts


def test_fixed_sampler_trains(tmp_path):
    from examples.nerf import train

    tr = train.Trainer(_args(tmp_path, "--name", "fixed", "--steps", "40", "--sampler", "fixed"),
                       log=lambda *a: None)
    before, _, _ = tr.evaluate("val")
    tr.fit(verbose=False)
    after, _, _ = tr.evaluate("val")
    assert after >= before + 3.0, (before, after)
    assert tr.sample_stats()["field_evals_per_ray"] == 16.0


def test_a_diverged_loss_stops_training():
    import tensorflow as tf

    from examples.nerf import train

    assert train.check_finite(tf.constant(0.25), 3) == 0.25
    with pytest.raises(FloatingPointError, match="the training loss is nan after step 7: training diverged"):
        train.check_finite(tf.constant(float("nan")), 7)


def test_steps_per_call_trains_as_one_step_a_call(tmp_path, capsys):
    """--steps-per-call K runs the same steps in a loop of the graph: with a fixed ray count (the
    fixed sampler) and no jitter, the weights after 11 steps across grid updates are those of one
    step a call; a call ends at grid updates, the grid's take-over and evaluations, the first step
    is alone, and fit() evaluates where it would (its learning rate changes between calls only)."""
    from examples.nerf import train
    from examples.nerf.distribute import runs_on_gpu

    def trainer(name, *extra):
        return train.Trainer(_args(tmp_path, "--name", name, "--steps", "11", "--sampler", "fixed", "--no-jitter",
                                   "--grid-warmup", "4", "--grid-every", "4", "--eval-every", "6", *extra),
                             log=lambda *a: None)

    def weights(tr):
        tr.train_until(11)
        return [v.numpy() for v in tr.model.trainable_variables]

    one, four = trainer("k1"), trainer("k4", "--steps-per-call", "4")
    if runs_on_gpu(one.strategy):
        # A GPU's float atomics sum in a different order each run: the runs agree as the
        # distributed ones do (_assert_same_weights), the CPU's bit for bit. Eleven steps of
        # the hash table's scattered gradients leave more near-zero entries whose sign
        # follows the order (0.4% of the table on an H200), so 1% may move by Adam's steps.
        _assert_same_weights(weights(one), weights(four), steps=11, lr=one.args.lr, share=0.99)
    else:
        for x, y in zip(weights(one), weights(four)):
            np.testing.assert_array_equal(x, y)
    assert four.step == 11 and int(four.step_var.numpy()) == 11
    assert four.sample_stats()["rays_per_step"] == one.sample_stats()["rays_per_step"]
    assert [four.call_end(s, 11) for s in (1, 4, 6, 8, 9)] == [4, 6, 8, 11, 11]
    assert all(loop for loop, _ in four._programs) and four._programs[(True, True)].experimental_get_tracing_count() == 1

    fitted = trainer("k4fit", "--steps-per-call", "4")
    fitted.fit(verbose=False)
    assert fitted.step == 11 and len(fitted.step_seconds) == 11 and [h["step"] for h in fitted.history] == [6, 11]
    with pytest.raises(SystemExit):
        trainer("k0", "--steps-per-call", "0")
    assert "argument --steps-per-call: must be an integer of at least 1, got 0" in capsys.readouterr().err


def _assert_same_weights(a, b, steps, lr, share=0.999):
    """Weights of two runs whose gradients differ by summation order alone: Adam (epsilon 1e-15)
    turns a last-bit difference in a near-zero gradient into a step of up to the learning rate
    either way, so all but a few elements (1 - share of them) agree tightly and those few within
    the steps' reach."""
    for x, y in zip(a, b):
        close = np.isclose(x, y, rtol=1e-3, atol=1e-4)
        assert close.mean() >= share, f"{np.count_nonzero(~close)} of {close.size} elements differ"
        np.testing.assert_allclose(x, y, rtol=0, atol=2 * lr * steps)


def test_march_training_step_is_traced_once_across_the_grid_warmup(tmp_path):
    """The ray count changes every step and the grid takes over after its
    warm-up: one traced training step serves both (a retrace costs seconds on a
    GPU), and the bitfield it marches through is every cell, then the grid's mask."""
    from examples.nerf import train

    tr = train.Trainer(_args(tmp_path, "--name", "once", "--steps", "3", "--grid-warmup", "4", "--grid-every", "2"),
                       log=lambda *x: None)
    tr.fit(verbose=False)
    np.testing.assert_array_equal(tr.occupancy_bits().numpy(), tr.all_occupied_bits)
    tr.fit(steps=7, verbose=False)
    assert tr._grid_fn.experimental_get_tracing_count() == 1  # its updates before and after the warm-up
    np.testing.assert_array_equal(tr.occupancy_bits().numpy(),
                                  tr.metal_ops.pack_occupancy(tr.grid.mask.numpy()[None]).numpy())
    # A grid update that empties cells is published (this short run's grid is still full).
    mask = (np.arange(tr.grid.resolution ** 3) % 3 > 0).astype(np.float32)
    tr.grid.mask.assign(mask)
    tr.publish_occupancy(tr.step, force=True)
    np.testing.assert_array_equal(tr.occupancy_bits().numpy(), tr.metal_ops.pack_occupancy(mask[None]).numpy())
    assert list(tr._programs) == [(False, True)]
    assert tr._programs[(False, True)].experimental_get_tracing_count() == 1


def test_checkpoint_resume_continues_from_same_step(tmp_path):
    from examples.nerf import train

    # --grid-warmup 4: the resumed step 6 marches through the grid's mask.
    a = _args(tmp_path, "--name", "resume", "--steps", "6", "--ckpt-every", "3", "--grid-warmup", "4")
    tr = train.Trainer(a, log=lambda *x: None)
    tr.fit(verbose=False)
    assert tr.step == 6
    saved = [v.numpy() for v in tr.model.weights]
    saved_opt = [v.numpy() for v in tr.optimizer.variables]
    # A mask with empty cells in the last checkpoint (this short run's is all occupied).
    mask = (np.arange(tr.grid.resolution ** 3) % 3 > 0).astype(np.float32)
    tr.grid.mask.assign(mask)
    tr.manager.save(checkpoint_number=6)
    saved_grid = tr.grid.density.numpy()
    msgs = []
    tr2 = train.Trainer(_args(tmp_path, "--name", "resume", "--steps", "9", "--ckpt-every", "3", "--grid-warmup", "4",
                              "--resume"), log=msgs.append)
    assert tr2.step == 6 and any("resumed" in m for m in msgs)
    for x, y in zip(saved, tr2.model.weights):
        np.testing.assert_array_equal(x, y.numpy())
    for x, y in zip(saved_opt, tr2.optimizer.variables):
        np.testing.assert_array_equal(x, y.numpy())
    np.testing.assert_array_equal(saved_grid, tr2.grid.density.numpy())
    np.testing.assert_array_equal(tr2.grid.mask.numpy(), mask)
    # The training step's bitfield is packed from the restored mask.
    np.testing.assert_array_equal(tr2.occupancy_bits().numpy(), tr.metal_ops.pack_occupancy(mask[None]).numpy())
    assert int(tr2.optimizer.iterations.numpy()) == 6
    tr2.fit(verbose=False)
    assert tr2.step == 9 and int(tr2.optimizer.iterations.numpy()) == 9
    # Without --resume a run starts again from step 0.
    tr3 = train.Trainer(_args(tmp_path, "--name", "resume", "--steps", "9"), log=lambda *x: None)
    assert tr3.step == 0


def test_checkpoint_of_the_other_mlp_layout_is_refused_clearly(tmp_path):
    from examples.nerf import train

    dense = train.Trainer(_args(tmp_path, "--name", "layout", "--steps", "2", "--ckpt-every", "2", "--mlp", "dense"),
                          log=lambda *x: None)
    dense.fit(verbose=False)
    with pytest.raises(ValueError, match=r"holds the hash model with --mlp dense .*resume it with --mlp dense"):
        train.Trainer(_args(tmp_path, "--name", "layout", "--steps", "4", "--resume"), log=lambda *x: None)
    again = train.Trainer(_args(tmp_path, "--name", "layout", "--steps", "4", "--resume", "--mlp", "dense"),
                          log=lambda *x: None)
    assert again.step == 2 and again.model.mlp == "dense"


def test_mlp_precision_choice():
    from examples.nerf import config

    assert config.resolve_mlp_precision("auto", "hash", "fused", gpu_listed=True) == "float16"
    assert config.resolve_mlp_precision("auto", "hash", "fused", gpu_listed=False) == "float32"
    assert config.resolve_mlp_precision("auto", "hash", "dense", gpu_listed=True) == "float32"
    assert config.resolve_mlp_precision("auto", "baseline", "fused", gpu_listed=True) == "float32"
    assert config.resolve_mlp_precision("float32", "hash", "fused", gpu_listed=True) == "float32"
    for model, mlp in (("hash", "dense"), ("baseline", "fused")):
        with pytest.raises(ValueError, match="--mlp-precision float16 needs --model hash --mlp fused"):
            config.resolve_mlp_precision("float16", model, mlp, gpu_listed=True)


def test_float16_mlp_gradients_are_unscaled(tmp_path):
    """The float16 MLP's loss-scaled gradients, divided back, are the float32
    model's gradients up to float16 rounding (1024x off if the scale stayed)."""
    from examples.nerf import train

    fixed = ["--steps", "1", "--no-jitter", "--grid-warmup", "0"]
    t32 = train.Trainer(_args(tmp_path, "--name", "p32", "--mlp-precision", "float32", *fixed), log=lambda *a: None)
    t16 = train.Trainer(_args(tmp_path, "--name", "p16", "--mlp-precision", "float16", *fixed), log=lambda *a: None)
    assert t16.mlp_precision == "float16" and t16.loss_scale > 1
    for v16, v32 in zip(t16.model.trainable_variables, t32.model.trainable_variables):
        v16.assign(v32)
    idx = t32.batch_indices(7)
    g32 = t32.reduced_gradients(idx)
    g16 = t16.reduced_gradients(idx)
    names = [v.name for v in t32.model.trainable_variables]
    for name, a, b in zip(names, g16, g32):
        rel = np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30)
        assert rel < 0.05, f"{name}: float16 gradient differs from float32 by {rel:.3g} (relative norm)"


# Betas whose 1 - beta is exact in float32 and float64: Keras rounds 1 - beta in
# float64, ResourceApplyAdam in float32, and over several steps near-zero
# hash-table gradients amplify that last-bit difference; with these betas the
# two updates are the same float32 arithmetic.
EXACT_BETAS = (0.875, 0.984375)


def _train_graph_ops(tr):
    """The op types in the graph of the trainer's train function (the traced step)."""
    tf = tr.tf
    graph = tr.program(False, tr.use_grid()).get_concrete_function(
        tf.constant(0, tf.int64), tf.constant(tr.args.batch_rays), tf.constant(1)).graph
    return [op.type for op in graph.get_operations()]


@pytest.mark.parametrize("betas, steps", [(None, 1), (EXACT_BETAS, 3)], ids=["trainer-betas", "exact-betas"])
def test_fused_adam_trains_as_keras_adam(tmp_path, betas, steps):
    """--adam fused (ResourceApplyAdam on the Keras optimizer's variables) and
    --adam keras: the same weights and optimizer variables after the same
    steps from the same weights, and fewer ops in the traced step. On the CPU:
    a GPU's hash-table gradient sums with float atomics, so two trainers'
    gradients differ in their last bits there."""
    import tensorflow as tf

    with tf.device("/CPU:0"):
        _fused_and_keras_adam_agree(tmp_path, betas, steps)


def _fused_and_keras_adam_agree(tmp_path, betas, steps):
    from examples.nerf import train

    fixed = ["--steps", str(steps), "--no-jitter", "--grid-warmup", "0", "--mlp-precision", "float32"]
    trainers = {}
    for adam in ("keras", "fused"):
        tr = trainers[adam] = train.Trainer(_args(tmp_path, "--name", adam, "--adam", adam, *fixed),
                                            log=lambda *a: None)
        if betas is not None:  # read when the step is traced
            tr.optimizer.beta_1, tr.optimizer.beta_2 = betas
    keras_tr, fused_tr = trainers["keras"], trainers["fused"]
    assert keras_tr.fused_adam is None and fused_tr.fused_adam is not None
    for v, w in zip(fused_tr.model.weights, keras_tr.model.weights):
        v.assign(w)
    for tr in trainers.values():
        tr.fit(verbose=False)
        assert int(tr.optimizer.iterations.numpy()) == steps
    pairs = list(zip(fused_tr.model.trainable_variables, keras_tr.model.trainable_variables)) + \
        list(zip(fused_tr.optimizer.variables, keras_tr.optimizer.variables))
    assert len(pairs) == 11 + 2 + 2 * 11
    for a, b in pairs:
        assert a.name == b.name
        ref = b.numpy()
        np.testing.assert_allclose(a.numpy(), ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()),
                                   err_msg=f"{a.path} after {steps} steps")
    if steps > 1:
        ops = {adam: _train_graph_ops(tr) for adam, tr in trainers.items()}
        assert ops["fused"].count("ResourceApplyAdam") == 11 and "ResourceApplyAdam" not in ops["keras"]
        counts = {adam: len(o) for adam, o in ops.items()}
        assert counts["fused"] < counts["keras"] - 10 * 11, counts  # about ten ops fewer per variable


def test_fused_adam_on_dense_and_indexed_slices_gradients():
    """FusedAdam against keras.optimizers.Adam's own update: a dense gradient
    (ResourceApplyAdam) and an IndexedSlices one with repeated rows (Keras's
    update, which a densified gradient would not match), a learning-rate change
    on the way."""
    import keras
    import tensorflow as tf

    from examples.nerf import fused_adam

    rng = np.random.default_rng(0)
    init = [rng.normal(size=(10, 2)).astype(np.float32), rng.normal(size=(3,)).astype(np.float32)]
    batches = [(rng.integers(0, 10, 6), rng.normal(size=6).astype(np.float32)) for _ in range(4)]
    results = {}
    for adam in ("keras", "fused"):
        variables = [keras.Variable(init[0], name="table"), keras.Variable(init[1], name="bias")]
        opt = keras.optimizers.Adam(0.05, beta_1=EXACT_BETAS[0], beta_2=EXACT_BETAS[1], epsilon=1e-7)
        opt.build(variables)
        fused = fused_adam.FusedAdam(opt, variables) if adam == "fused" else None

        @tf.function
        def step(rows, x):
            with tf.GradientTape() as tape:
                table, bias = variables
                loss = tf.reduce_sum(tf.gather(table, rows) ** 2 * x[:, None]) + tf.reduce_sum(bias * x[:3] ** 2)
            grads = tape.gradient(loss, variables)
            assert isinstance(grads[0], tf.IndexedSlices) and not isinstance(grads[1], tf.IndexedSlices)
            if fused is None:
                opt.apply_gradients(zip(grads, variables))
            else:
                fused.apply(grads)

        for i, (rows, x) in enumerate(batches):
            if i == 2:
                opt.learning_rate.assign(0.01)
            step(tf.constant(rows), tf.constant(x))
        assert int(opt.iterations.numpy()) == len(batches)
        results[adam] = [v.numpy() for v in variables + opt.variables]
    assert not np.allclose(results["fused"][0], init[0])
    for a, b in zip(results["fused"], results["keras"]):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_fused_adam_inactive_step_keeps_every_variable():
    """FusedAdam.apply(active=False) leaves the variables, the moments and the iteration count
    bit for bit (whatever the finite gradient): active steps 0 and 2 around an inactive step 1
    end where the plain updates of gradients 0 and 2 do."""
    import keras
    import tensorflow as tf

    from examples.nerf import fused_adam

    rng = np.random.default_rng(1)
    init = [rng.normal(size=(5, 3)).astype(np.float32), rng.normal(size=(4,)).astype(np.float32)]
    grads = [[tf.constant(rng.normal(size=w.shape).astype(np.float32)) for w in init] for _ in range(3)]
    results = {}
    for mode, steps in (("plain", [(0, None), (2, None)]), ("masked", [(0, True), (1, False), (2, True)])):
        variables = [keras.Variable(w, name=f"w{i}") for i, w in enumerate(init)]
        opt = keras.optimizers.Adam(0.05)
        opt.build(variables)
        fused = fused_adam.FusedAdam(opt, variables)
        apply = tf.function(lambda g, on: fused.apply(g, active=on))
        for i, on in steps:
            before = [v.numpy() for v in variables + opt.variables]
            if on is None:
                tf.function(lambda g: fused.apply(g))(grads[i])
            else:
                apply(grads[i], tf.constant(on))
            if on is False:
                for a, v in zip(before, variables + opt.variables):
                    np.testing.assert_array_equal(a, v.numpy(), err_msg=v.path)
        assert int(opt.iterations.numpy()) == 2
        results[mode] = [v.numpy() for v in variables + opt.variables]
    assert not np.array_equal(results["masked"][0], init[0])
    for a, b in zip(results["masked"], results["plain"]):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="dense gradients"):
        fused.apply([tf.IndexedSlices(tf.ones([1, 3]), tf.constant([0]), tf.constant([5, 3])), grads[0][1]],
                    active=tf.constant(True))


def test_fused_adam_refuses_what_it_does_not_compute():
    import keras

    from examples.nerf import fused_adam

    variables = [keras.Variable(np.zeros((2, 2), np.float32), name="w")]
    other = [keras.Variable(np.zeros((2, 2), np.float32), name="u")]
    opt = keras.optimizers.Adam()
    opt.build(other)
    with pytest.raises(ValueError, match=r"0 variables named 'w_momentum'"):
        fused_adam.FusedAdam(opt, variables)
    for kw, why in ((dict(amsgrad=True), "amsgrad"), (dict(clipnorm=1.0), "clipnorm"),
                    (dict(weight_decay=0.1), "weight_decay")):
        opt = keras.optimizers.Adam(**kw)
        opt.build(variables)
        with pytest.raises(ValueError, match=f"without {why}"):
            fused_adam.FusedAdam(opt, variables)
    opt = keras.optimizers.Adam(keras.optimizers.schedules.ExponentialDecay(1e-3, 10, 0.5))
    opt.build(variables)
    with pytest.raises(ValueError, match="schedule"):
        fused_adam.FusedAdam(opt, variables)


def test_fused_and_dense_mlps_compute_the_same_field():
    import tensorflow as tf

    from examples.nerf import model as hmodel

    kw = dict(num_levels=4, log2_hashmap_size=10, finest_resolution=64, hidden=32, sh_degree=3)
    fused, dense = hmodel.HashNeRF(mlp="fused", **kw), hmodel.HashNeRF(mlp="dense", **kw)
    assert hmodel.HashNeRF(**kw).mlp == "fused"  # the default
    dense.encoding.set_weights(fused.encoding.get_weights())
    w = fused.density_mlp.get_weights()
    dense.density_hidden.set_weights(w[:2])
    dense.density_out.set_weights(w[2:])
    w = fused.color_mlp.get_weights()
    for layer, i in ((dense.color_hidden1, 0), (dense.color_hidden2, 2), (dense.color_out, 4)):
        layer.set_weights(w[i:i + 2])
    rng = np.random.default_rng(0)
    x = tf.constant(rng.uniform(size=(300, 3)), tf.float32)
    d = rng.normal(size=(300, 3))
    d = tf.constant(d / np.linalg.norm(d, axis=1, keepdims=True), tf.float32)

    def run(m):
        with tf.GradientTape() as tape:
            sigma, rgb = m(x, d)
            loss = tf.reduce_sum(sigma * 1e-3) + tf.reduce_sum(rgb * rgb)
        return [sigma, rgb] + tape.gradient(loss, m.trainable_variables)

    a, b = run(fused), run(dense)
    assert len(a) == len(b) == 2 + 1 + 4 + 6
    # Variables in the same order: table, density W0 b0 W1 b1, colour W0 b0 W1 b1 W2 b2.
    for u, v in zip(a, b):
        np.testing.assert_allclose(u.numpy(), v.numpy(), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="hidden width"):
        hmodel.HashNeRF(mlp="fused", hidden=48)
    with pytest.raises(ValueError, match="mlp must be one of"):
        hmodel.HashNeRF(mlp="xla")


def test_baseline_model_trains(tmp_path):
    from examples.nerf import baseline, train

    tr = train.Trainer(_args(tmp_path, "--name", "base", "--model", "baseline", "--steps", "3",
                             "--batch-rays", "256"), log=lambda *x: None)
    assert isinstance(tr.model, baseline.KerasExampleNeRF)
    assert len(tr.model.dense) == 8
    assert tr.model.dense[5].kernel.shape == (64 + 99, 64)  # the skip after the fifth layer
    losses = [tr.train_one_step()[0] for _ in range(3)]
    assert all(np.isfinite(losses))


def test_composite_render_matches_formula():
    import tensorflow as tf

    from examples.nerf import baseline

    rng = np.random.default_rng(0)
    pred = rng.normal(size=(5, 7, 4)).astype(np.float32)
    t = np.sort(rng.uniform(2, 6, size=(5, 7)), axis=1).astype(np.float32)
    bg = np.array([1.0, 0.5, 0.25], np.float32)
    rgb, depth, acc = baseline.composite_render(tf.constant(pred), tf.constant(t), tf.constant(bg))
    c = 1 / (1 + np.exp(-pred[..., :3].astype(np.float64)))
    s = np.maximum(pred[..., 3], 0).astype(np.float64)
    delta = np.concatenate([np.diff(t, axis=1), np.full((5, 1), 1e10)], axis=1)
    alpha = 1 - np.exp(-s * delta)
    T = np.concatenate([np.ones((5, 1)), np.cumprod(1 - alpha + 1e-10, axis=1)[:, :-1]], axis=1)
    w = alpha * T
    ref = (w[..., None] * c).sum(1) + (1 - w.sum(1))[:, None] * bg
    np.testing.assert_allclose(rgb.numpy(), ref, atol=1e-5)
    np.testing.assert_allclose(acc.numpy(), w.sum(1), atol=1e-5)


def test_cli_writes_outputs(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    cmd = [sys.executable, "-m", "examples.nerf.train", "--name", "cli", "--steps", "20",
           "--eval-every", "10", "--orbit-frames", "3", "--ckpt-every", "10"] + \
        [x for x in TINY if x not in ("--quiet",)][:-4] + \
        ["--data-dir", str(tmp_path / "data"), "--out-dir", str(tmp_path / "runs")]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "held-out test PSNR" in r.stdout and "pictures:" in r.stdout
    run = tmp_path / "runs" / "cli"
    for name in ("metrics.json", "psnr_vs_time.png", "orbit.gif", "test_00.png", "test_01.png"):
        assert (run / name).exists(), name
    m = json.loads((run / "metrics.json").read_text())
    assert m["step"] == 20 and len(m["test_psnr"]) == 2 and len(m["history"]) == 2
    assert m["test_psnr_mean"] == pytest.approx(np.mean(m["test_psnr"]), abs=1e-3)
    # The XLA flags the run had: the caller's (the sample adds its own only for --jit, which this
    # run is not on a CPU).
    assert m["xla_flags"] == env.get("XLA_FLAGS", "") or m["config"]["jit"]
    assert "held-out test PSNR" in r.stdout and "s in all (metrics.json's train_seconds and wall_seconds)" in r.stdout
    import imageio.v2 as imageio

    side = imageio.imread(run / "test_00.png")
    assert side.shape == (32, 96, 3)  # rendered | ground truth | error
    assert len(imageio.mimread(run / "orbit.gif")) == 3
    assert (run / "ckpt" / "checkpoint").exists()


def test_cli_quiet_run_of_views_too_small_for_ssim_reports_its_results(tmp_path):
    """--quiet hides the progress bar only; views smaller than SSIM's window skip SSIM with a note;
    the console's times are metrics.json's."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    cmd = [sys.executable, "-m", "examples.nerf.train", "--name", "small", "--steps", "2", "--size", "7",
           "--n-train", "2", "--n-val", "1", "--n-test", "1", "--levels", "2", "--log2-table", "10",
           "--finest-res", "32", "--batch-rays", "64", "--grid-res", "8", "--eval-every", "0", "--ckpt-every", "0",
           "--orbit-frames", "0", "--quiet", "--data-dir", str(tmp_path / "data"), "--out-dir", str(tmp_path / "runs")]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "SSIM skipped: a test view is 7x7 pixels, and tf.image.ssim needs at least 11 a side" in r.stdout
    assert "pictures:" in r.stdout and "/step" not in r.stdout + r.stderr  # no progress bar
    m = json.loads((tmp_path / "runs" / "small" / "metrics.json").read_text())
    assert m["test_ssim"] == [] and m["test_ssim_mean"] is None and m["step"] == 2
    assert f"{m['train_seconds']:.0f} s of training, {m['wall_seconds']:.0f} s in all" in r.stdout


@pytest.mark.parametrize("argv, message", [
    (["--steps", "-5"], "argument --steps: must be an integer of at least 1, got -5"),
    (["--size", "0"], "argument --size: must be an integer of at least 1, got 0"),
    (["--lr", "0"], "argument --lr: must be a number above 0, got 0"),
    (["--max-minutes", "-1"], "argument --max-minutes: must be a number of at least 0, got -1"),
    (["--batch-rays", "many"], "argument --batch-rays: must be an integer of at least 1, got 'many'"),
    (["--jit", "--sampler", "fixed"], "error: --jit needs --model hash --sampler march"),
    (["--mlp-precision", "float16", "--mlp", "dense"], "error: --mlp-precision float16 needs --model hash --mlp fused"),
])
def test_bad_flags_are_refused_before_any_work(argv, message, capsys):
    from examples.nerf import config

    with pytest.raises(SystemExit):
        config.parse_args(argv, gpu_listed=False)
    assert message in capsys.readouterr().err


def test_importing_the_sample_leaves_the_environment_alone():
    """The sample sets TensorFlow's and XLA's variables in main(), once its flags are parsed."""
    code = ("import os; before = dict(os.environ); import examples.nerf.train; "
            "changed = sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k)); "
            "print(changed)")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr[-2000:]


def test_flags_show_their_real_default_once_and_the_gpu_route():
    """Each flag's default once in --help, none as None or an inverted switch; on a GPU the default
    is --jit --steps-per-call 8 unless the user picks either (or the step cannot be compiled)."""
    from examples.nerf import config

    text = config.build_parser().format_help()
    assert "(default: None)" not in text and "default: True" not in text and "default: False" not in text
    assert text.index("basic:") < text.index("scene:") and "--no-jit" in text and "--no-prune" in text
    for option in text.split("\n  --")[1:]:
        assert option.count("(default") <= 1, option
    cpu, gpu = config.parse_args([], gpu_listed=False), config.parse_args([], gpu_listed=True)
    assert (cpu.jit, cpu.steps_per_call, cpu.max_minutes) == (None, None, 0.0)
    assert (gpu.jit, gpu.steps_per_call) == (True, config.GPU_STEPS_PER_CALL)
    assert config.resolve(cpu).jit is False and config.resolve(cpu).steps_per_call == 1
    for off in (["--no-jit"], ["--steps-per-call", "1"], ["--sampler", "fixed"], ["--strategy", "multiworker"]):
        assert not config.parse_args(off, gpu_listed=True).jit, off
    with pytest.raises(dataclasses.FrozenInstanceError):
        gpu.steps = 5


@pytest.mark.parametrize("sampler", ["march", "fixed"])
def test_distortion_robust_and_occlusion_options_train(tmp_path, sampler):
    from examples.nerf import train

    occlusion = ["--occlusion-depth", "10"] if sampler == "fixed" else []
    tr = train.Trainer(_args(tmp_path, "--name", "dist", "--steps", "2", "--distortion", "0.01",
                             "--loss", "robust", "--grid-warmup", "0", "--sampler", sampler, *occlusion),
                       log=lambda *x: None)
    l_dist = [tr.train_one_step()[0] for _ in range(2)]
    tr2 = train.Trainer(_args(tmp_path, "--name", "mse", "--steps", "2", "--grid-warmup", "0"),
                        log=lambda *x: None)
    l_mse, mse = (float(v) for v in tr2.train_one_step())
    assert all(np.isfinite(l_dist)) and np.isfinite(l_mse)
    assert l_mse == pytest.approx(mse, rel=1e-5)  # the default loss is the MSE itself


def test_view_encoding_degrees_are_nested_real_spherical_harmonics():
    import tensorflow as tf

    from examples.nerf import model as hmodel

    rng = np.random.default_rng(0)
    d = rng.normal(size=(64, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    full = hmodel.sh_encode(tf.constant(d, tf.float32), 4).numpy()
    assert full.shape == (64, 16)
    # Orthonormal on the sphere: the mean of Y_i Y_j over uniform directions is delta_ij / (4 pi).
    dd = rng.normal(size=(200000, 3))
    dd /= np.linalg.norm(dd, axis=1, keepdims=True)
    y = hmodel.sh_encode(tf.constant(dd, tf.float32), 4).numpy().astype(np.float64)
    np.testing.assert_allclose(y.T @ y / len(dd) * 4 * np.pi, np.eye(16), atol=0.03)
    for degree in (1, 2, 3):
        np.testing.assert_array_equal(hmodel.sh_encode(tf.constant(d, tf.float32), degree).numpy(),
                                      full[:, :degree * degree])
    m = hmodel.HashNeRF(num_levels=2, log2_hashmap_size=10, finest_resolution=32, hidden=16, sh_degree=2)
    sigma, rgb = m(tf.constant(rng.uniform(size=(5, 3)), tf.float32), tf.constant(d[:5], tf.float32))
    assert sigma.shape == (5,) and rgb.shape == (5, 3)
    with pytest.raises(ValueError, match="sh_degree"):
        hmodel.HashNeRF(sh_degree=5)


@pytest.mark.parametrize("degree", [1, 2, 3, 4])
def test_view_encoding_of_the_dense_path_is_the_ops(degree):
    """The sample's TF sh_encode (its --mlp dense path) gives metal_ops.sh_encode's
    values and gradients, for unit and other directions; NaN / inf where the op
    gives them."""
    import tensorflow as tf

    import metal_ops
    from examples.nerf import model as hmodel

    rng = np.random.default_rng(20 + degree)
    d = rng.normal(size=(777, 3))
    d[:400] /= np.linalg.norm(d[:400], axis=1, keepdims=True)
    d[400:] *= rng.uniform(0.05, 3.0, size=(377, 1))
    special = [[0, 0, 0], [1e3, -2e3, 5e2], [1e-20, 0, -1e-20], [0, 0, 2], [np.inf, 0, 0],
               [np.nan, 0.5, 0.5], [1, -np.inf, 1], [3e12, 0, 0]]
    d = tf.constant(np.concatenate([d, special]), tf.float32)
    upstream = rng.uniform(-1, 1, size=(1, degree * degree)).astype(np.float32)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(d)
        ours, theirs = metal_ops.sh_encode(d, degree=degree), hmodel.sh_encode(d, degree)
        ours_sum, theirs_sum = (tf.reduce_sum(v[:-4] * upstream) for v in (ours, theirs))
    ours, theirs = ours.numpy(), theirs.numpy()
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(theirs))
    np.testing.assert_array_equal(ours[np.isinf(theirs)], theirs[np.isinf(theirs)])
    finite = np.isfinite(theirs)
    np.testing.assert_allclose(ours[finite], theirs[finite], rtol=1e-6, atol=1e-6)
    zero = tf.UnconnectedGradients.ZERO  # degree 1: the constant band
    np.testing.assert_allclose(tape.gradient(ours_sum, d, unconnected_gradients=zero).numpy(),
                               tape.gradient(theirs_sum, d, unconnected_gradients=zero).numpy(), rtol=1e-5, atol=1e-5)
