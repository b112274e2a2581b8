"""metal_ops.splat: rasterize_gaussians (projection, binning and rasterization
in one call) against the float64 references composed, its gradients against
central differences of that composition, sh_colors, Gaussians and GaussianAdam.
The sample's tests: tests/test_splat_sample.py."""
import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from metal_ops import splat
from tests.reference import gaussian_project as proj_ref
from tests.reference import gaussian_rasterize as rast_ref
from tests.reference import sh_encode as sh_ref

WIDTH, HEIGHT = 40, 30
VIEWMAT = np.array([[1, 0, 0, 0.1], [0, 1, 0, -0.2], [0, 0, 1, 4.0], [0, 0, 0, 1]], np.float64)
K = np.array([[45.0, 0, 19.5], [0, 45.0, 15.5], [0, 0, 1]], np.float64)


def gaussians(n, seed=0, channels=3):
    rng = np.random.default_rng(seed)
    return dict(means=rng.uniform(-1.0, 1.0, (n, 3)), quats=rng.normal(size=(n, 4)),
                scales=rng.uniform(0.05, 0.3, (n, 3)), opacities=rng.uniform(0.1, 0.9, n),
                colors=rng.uniform(0.0, 1.0, (n, channels)))


def reference(g, background):
    """The three references composed, float64: (image, alpha, radii)."""
    means2d, conics, depths, radii = proj_ref.project(g["means"], g["quats"], g["scales"], VIEWMAT, K, WIDTH, HEIGHT,
                                                      opacities=g["opacities"])
    ids, ranges = rast_ref.tile_bin(means2d, radii, depths, WIDTH, HEIGHT, 16)
    image, alpha = rast_ref.rasterize(means2d, conics, g["colors"], g["opacities"], background, ids, ranges,
                                      WIDTH, HEIGHT, 16)[:2]
    return image, alpha, radii


def ours(g, background):
    f32 = {k: tf.constant(v, tf.float32) for k, v in g.items()}
    return splat.rasterize_gaussians(f32["means"], f32["quats"], f32["scales"], f32["opacities"], f32["colors"],
                                     VIEWMAT.astype(np.float32), K.astype(np.float32), WIDTH, HEIGHT,
                                     background=background.astype(np.float32))


@pytest.mark.parametrize("n,channels", [(0, 3), (1, 3), (60, 3), (200, 1)])
def test_rasterize_gaussians_matches_the_references_composed(n, channels):
    g = gaussians(n, seed=n, channels=channels)
    background = np.linspace(0.2, 0.8, channels)
    image, alpha, info = ours(g, background)
    want_image, want_alpha, want_radii = reference(g, background)
    assert image.shape == (HEIGHT, WIDTH, channels) and alpha.shape == (HEIGHT, WIDTH)
    np.testing.assert_array_equal(info["radii"].numpy(), want_radii)
    np.testing.assert_allclose(image.numpy(), want_image, atol=2e-4)
    np.testing.assert_allclose(alpha.numpy(), want_alpha, atol=2e-4)


def test_the_opacity_aware_box_loses_no_pixel():
    """rasterize_gaussians' image with the opacity-aware radii equals the
    rendering where every Gaussian is binned into every tile of its 3.33-sigma
    box whatever its opacity (the radii at opacity 1): outside the smaller box
    no pixel reaches alpha 1/255. Opacities from 1/255 to 1, some Gaussians
    culled by theirs."""
    n = 400
    g = gaussians(n, seed=7)
    rng = np.random.default_rng(8)
    g["opacities"] = np.exp(rng.uniform(np.log(0.5 / 255), 0, n))
    background = np.array([0.2, 0.4, 0.6])
    image, alpha, info = ours(g, background)
    f32 = {k: np.asarray(v, np.float32) for k, v in g.items()}
    p = metal_ops.gaussian_project(f32["means"], f32["quats"], f32["scales"], VIEWMAT.astype(np.float32),
                                   K.astype(np.float32), width=WIDTH, height=HEIGHT)
    ids, ranges = metal_ops.gaussian_tile_bin(p.means2d, p.radii, p.depths, width=WIDTH, height=HEIGHT)
    full_image, full_alpha = metal_ops.gaussian_rasterize(p.means2d, p.conics, f32["colors"], f32["opacities"],
                                                          background.astype(np.float32), ids, ranges, width=WIDTH,
                                                          height=HEIGHT)[:2]
    radii, full_radii = info["radii"].numpy(), p.radii.numpy()
    assert np.all(radii <= full_radii) and np.mean(radii < full_radii) > 0.3
    assert np.any((radii[:, 0] == 0) & (full_radii[:, 0] > 0))
    assert info["gaussian_ids"].shape[0] < 0.8 * ids.shape[0]
    np.testing.assert_allclose(image.numpy(), full_image.numpy(), rtol=0, atol=1e-6)
    np.testing.assert_allclose(alpha.numpy(), full_alpha.numpy(), rtol=0, atol=1e-6)


def test_everything_behind_the_camera_gives_the_background():
    g = gaussians(30)
    g["means"][:, 2] = -10.0  # camera space z = -6
    image, alpha, info = ours(g, np.array([0.1, 0.2, 0.3]))
    assert not info["radii"].numpy().any()
    np.testing.assert_array_equal(alpha.numpy(), 0.0)
    np.testing.assert_allclose(image.numpy(), np.broadcast_to([0.1, 0.2, 0.3], (HEIGHT, WIDTH, 3)), atol=1e-7)


def test_gradients_match_central_differences_of_the_references():
    """d/d(means, quats, scales, opacities, colors) of sum(w * image): ours in
    float32 against float64 central differences of the composed references, a
    random direction at a time (a scene whose alphas stay away from the
    thresholds under the step)."""
    g = gaussians(12, seed=3)
    g["opacities"] = np.full(12, 0.5)
    background = np.array([0.3, 0.3, 0.3])
    w = np.random.default_rng(4).uniform(-1, 1, (HEIGHT, WIDTH, 3))
    f32 = {k: tf.constant(v, tf.float32) for k, v in g.items()}
    with tf.GradientTape() as tape:
        tape.watch(list(f32.values()))
        image = splat.rasterize_gaussians(f32["means"], f32["quats"], f32["scales"], f32["opacities"],
                                          f32["colors"], VIEWMAT.astype(np.float32), K.astype(np.float32), WIDTH,
                                          HEIGHT, background=background.astype(np.float32))[0]
        loss = tf.reduce_sum(image * w)
    grads = dict(zip(f32, tape.gradient(loss, list(f32.values()))))
    rng = np.random.default_rng(5)
    for key in ("means", "quats", "scales", "opacities", "colors"):
        direction = rng.normal(size=g[key].shape)
        eps = 1e-5

        def f(t):
            moved = dict(g, **{key: g[key] + t * direction})
            return float(np.sum(reference(moved, background)[0] * w))

        want = (f(eps) - f(-eps)) / (2 * eps)
        got = float(np.sum(grads[key].numpy() * direction))
        assert abs(got - want) <= 2e-3 * max(1.0, abs(want)), (key, got, want)


@pytest.mark.parametrize("degree", [0, 1, 2, 3])
def test_sh_colors_are_the_sh_basis_times_the_coefficients(degree):
    rng = np.random.default_rng(degree)
    sh = rng.normal(size=(7, 16, 3)) * 0.3
    means = rng.normal(size=(7, 3))
    camera = np.array([0.5, -1.0, 3.0])
    got = splat.sh_colors(tf.constant(sh, tf.float32), tf.constant(means, tf.float32), camera, degree).numpy()
    d = means - camera
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    used = (degree + 1) ** 2
    basis = sh_ref.values(d, degree + 1)[:, :used]
    want = np.maximum(np.einsum("nk,nkc->nc", basis, sh[:, :used]) + 0.5, 0.0)
    np.testing.assert_allclose(got, want, atol=1e-5)
    with pytest.raises(ValueError, match="degree must be in"):
        splat.sh_colors(sh, means, camera, 4)


def test_gaussians_refuse_bad_parameters_and_start_from_points():
    g = splat.Gaussians.random_in_box([[-1, -1, -1], [1, 1, 1]], 50, seed=1)
    assert g.count == 50 and g.means.numpy().shape == (50, 3) and g.shN.numpy().shape == (50, 15, 3)
    assert g.means.shape.as_list() == [None, 3]  # densification resizes it
    np.testing.assert_allclose(tf.sigmoid(g.opacities).numpy(), 0.1, atol=1e-6)
    with pytest.raises(ValueError, match="scales must have shape"):
        splat.Gaussians(np.zeros((2, 3)), np.zeros((3, 3)), np.zeros((2, 4)), np.zeros(2), np.zeros((2, 1, 3)),
                        np.zeros((2, 15, 3)))
    with pytest.raises(ValueError, match="means holds NaN"):
        splat.Gaussians(np.full((1, 3), np.nan), np.zeros((1, 3)), np.ones((1, 4)), np.zeros(1),
                        np.zeros((1, 1, 3)), np.zeros((1, 15, 3)))


def test_nearest_neighbor_distance_is_exact():
    rng = np.random.default_rng(0)
    points = np.concatenate([rng.random((400, 3)) * [3, 1, 0.5], [[9.0, 9.0, 9.0]]])
    got = splat.nearest_neighbor_distance(points, 3)
    d = np.linalg.norm(points[:, None] - points[None], axis=-1)
    np.fill_diagonal(d, np.inf)
    np.testing.assert_allclose(got, np.sort(d, 1)[:, :3].mean(1), rtol=1e-12)


def test_gaussian_adam_matches_adam_over_steps():
    """Five steps against NumPy's Adam as the reference (and torch.optim.Adam) write it:
    lr m_hat / (sqrt(v_hat) + eps), with a scheduled learning rate and eps 1e-15."""
    g = splat.Gaussians.random_in_box([[-1, -1, -1], [1, 1, 1]], 6, seed=5)
    lr = lambda step: 0.01 * 0.9 ** step  # noqa: E731
    opt = splat.GaussianAdam(g, dict(means=lr, scales=0.05))
    rng = np.random.default_rng(6)
    want = {k: getattr(g, k).numpy().astype(np.float64) for k in ("means", "scales")}
    m = {k: np.zeros_like(v) for k, v in want.items()}
    v = {k: np.zeros_like(x) for k, x in want.items()}
    for t in range(1, 6):
        grads = {k: rng.normal(size=x.shape).astype(np.float32) * 10.0 ** rng.integers(-6, 1) for k, x in want.items()}
        opt.apply(grads)
        for k in want:
            m[k] = 0.9 * m[k] + 0.1 * grads[k]
            v[k] = 0.999 * v[k] + 0.001 * np.square(grads[k].astype(np.float64))
            step_lr = lr(t - 1) if k == "means" else 0.05
            want[k] -= step_lr * (m[k] / (1 - 0.9 ** t)) / (np.sqrt(v[k] / (1 - 0.999 ** t)) + 1e-15)
        for k in want:
            np.testing.assert_allclose(getattr(g, k).numpy(), want[k], rtol=1e-5, atol=1e-6, err_msg=f"{k}, step {t}")


def test_gaussian_adam_steps_and_follows_the_gaussians():
    g = splat.Gaussians.random_in_box([[-1, -1, -1], [1, 1, 1]], 4, seed=2)
    opt = splat.GaussianAdam(g, dict(means=0.1, opacities=lambda step: 0.01 * (step + 1)))
    means0 = g.means.numpy().copy()
    grad = np.arange(12, dtype=np.float32).reshape(4, 3) - 5.0
    opt.apply({"means": grad, "opacities": np.ones(4, np.float32)})
    # Adam's first step moves each element by lr * sign(g) (bias-corrected m / sqrt(v)).
    np.testing.assert_allclose(g.means.numpy(), means0 - 0.1 * np.sign(grad), atol=1e-6)
    opt.append({k: v.numpy()[:1] for k, v in g.variables_by_name.items()})
    assert g.count == 5 and opt.m["means"].numpy().shape[0] == 5 and not opt.m["means"].numpy()[4].any()
    opt.keep(np.array([True, False, True, True, True]))
    assert g.count == 4 and opt.v["opacities"].numpy().shape[0] == 4
    opt.reset("opacities", tf.zeros(4))
    assert not opt.m["opacities"].numpy().any()
    with pytest.raises(ValueError, match="unknown parameters"):
        splat.GaussianAdam(g, {"colour": 1.0})
