"""PackedVolumeRender over padded samples (`packed_volume_render(...,
num_samples=...)`), as `ray_march_static` returns them: the kept rays render
exactly as over `ray_march`'s samples, the rays that did not fit render the
background, the padding (whatever its values) has weight 0 and gradient 0;
and the static march feeding the renderer inside one
`tf.function(jit_compile=True)` (docs/XLA.md, "Static shapes") against the
same function without XLA."""
import sys

import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from tests.reference.ray_march import random_case

pytestmark = pytest.mark.cpu_semantics("MetalOpsRayMarchStatic has a CPU kernel and an XLA host handler only")

ATTRS = dict(aabb=[-0.5, 0.0, -0.25, 1.5, 1.0, 1.75], step_size=0.0123, max_step_size=0.2)
BACKGROUND = np.array([0.25, 0.5, 0.75], np.float32)


def fields(samples, origins, dirs):
    """sigma [N], rgb [N, 3]: smooth functions of each sample's midpoint (the same for a sample wherever it is packed)."""
    t_mid = 0.5 * (samples.t_starts + samples.t_ends)
    x = tf.gather(origins, samples.ray_indices) + tf.gather(dirs, samples.ray_indices) * t_mid[:, None]
    sigma = 4.0 * tf.exp(-tf.reduce_sum(tf.square(x - 0.5), axis=1))
    rgb = tf.sigmoid(tf.stack([x[:, 0], x[:, 1] - x[:, 2], 2.0 * x[:, 2]], axis=1))
    return sigma, rgb


def render_both(seed, rays, g, fill, budget_of_total, early_termination):
    origins, dirs, near, far, bits = random_case(seed, rays, g, 1, fill)
    kw = dict(ATTRS, grid_resolution=g)
    dyn = metal_ops.ray_march(origins, dirs, near, far, bits, **kw)
    total = int(dyn.t_starts.shape[0])
    budget = int(round(total * budget_of_total))
    st = metal_ops.ray_march_static(origins, dirs, near, far, bits, sample_budget=budget, **kw)
    n = int(st.num_samples)
    d_sigma, d_rgb = fields(dyn, origins, dirs)
    s_sigma, s_rgb = fields(st, origins, dirs)
    # the padding's values are anything: the renderer must not read them
    pad = tf.range(budget) >= n
    s_sigma = tf.where(pad, np.float32(np.nan), s_sigma)
    s_rgb = tf.where(pad[:, None], np.float32(-7.0), s_rgb)
    t_starts = tf.where(pad, np.float32(np.inf), st.t_starts)
    grads = np.random.default_rng(seed).normal(size=(rays, 5)).astype(np.float32)

    def render(sigma, rgb, s, t_starts, **extra):
        with tf.GradientTape() as tape:
            tape.watch([sigma, rgb])
            out = metal_ops.packed_volume_render(sigma, rgb, t_starts, s.t_ends, s.ray_offsets, s.ray_counts,
                                                 background=BACKGROUND, early_termination=early_termination,
                                                 return_weights=True, **extra)
            loss = (tf.reduce_sum(out.rgb * grads[:, :3]) + tf.reduce_sum(out.depth * grads[:, 3])
                    + tf.reduce_sum(out.opacity * grads[:, 4]) + tf.reduce_sum(out.weights))
        return [np.asarray(v) for v in list(out) + tape.gradient(loss, [sigma, rgb])]

    got = render(s_sigma, s_rgb, st, t_starts, num_samples=st.num_samples)
    want = render(d_sigma, d_rgb, dyn, dyn.t_starts)
    return got, want, n, int(st.num_rays), budget


@pytest.mark.parametrize("seed,rays,g,fill", [(1, 97, 8, 0.3), (2, 40, 16, 0.1), (3, 1, 4, 1.0)])
@pytest.mark.parametrize("budget_of_total", [0.0, 0.4, 1.0, 1.3])
@pytest.mark.parametrize("early_termination", [0.0, 1e-2])
def test_kept_rays_render_as_without_padding(seed, rays, g, fill, budget_of_total, early_termination):
    got, want, n, kept, budget = render_both(seed, rays, g, fill, budget_of_total, early_termination)
    rgb, depth, opacity, weights, grad_sigma, grad_rgb = got
    w_rgb, w_depth, w_opacity, w_weights, w_grad_sigma, w_grad_rgb = want
    assert rgb.shape == (rays, 3) and weights.shape == (budget,) and grad_sigma.shape == (budget,)
    # kept rays: the same bits
    np.testing.assert_array_equal(rgb[:kept], w_rgb[:kept])
    np.testing.assert_array_equal(depth[:kept], w_depth[:kept])
    np.testing.assert_array_equal(opacity[:kept], w_opacity[:kept])
    np.testing.assert_array_equal(weights[:n], w_weights[:n])
    np.testing.assert_array_equal(grad_sigma[:n], w_grad_sigma[:n])
    np.testing.assert_array_equal(grad_rgb[:n], w_grad_rgb[:n])
    # rays that did not fit: no samples, the background
    np.testing.assert_array_equal(rgb[kept:], np.broadcast_to(BACKGROUND, (rays - kept, 3)))
    np.testing.assert_array_equal(depth[kept:], 0.0)
    np.testing.assert_array_equal(opacity[kept:], 0.0)
    # the padding: weight 0, gradient 0
    np.testing.assert_array_equal(weights[n:], 0.0)
    np.testing.assert_array_equal(grad_sigma[n:], 0.0)
    np.testing.assert_array_equal(grad_rgb[n:], 0.0)
    if budget_of_total >= 1.0:
        assert kept == rays


def test_padding_without_rays_renders_nothing():
    sigma = tf.constant([1.0, np.nan, 2.0, 3.0])
    with tf.GradientTape() as tape:
        tape.watch(sigma)
        out = metal_ops.packed_volume_render(sigma, tf.ones([4, 3]), tf.zeros([4]), tf.ones([4]),
                                             tf.zeros([0], tf.int32), tf.zeros([0], tf.int32), num_samples=0,
                                             return_weights=True)
        loss = tf.reduce_sum(out.weights)
    assert out.rgb.shape == (0, 3) and out.depth.shape == (0,) and out.opacity.shape == (0,)
    np.testing.assert_array_equal(out.weights, np.zeros(4))
    np.testing.assert_array_equal(tape.gradient(loss, sigma), np.zeros(4))


@pytest.mark.parametrize("pad", [0, 1, 64, 65, 200])
def test_per_ray_background_with_padding(pad):
    """A per-ray background [R, 3] over padded samples (the padding's rays get rows of their own,
    dropped again): outputs and the background's gradient [R, 3] as without the padding."""
    rng = np.random.default_rng(pad)
    counts = np.array([3, 0, 5, 2], np.int32)
    n = int(counts.sum())
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int32)
    sigma = rng.uniform(0.0, 3.0, n + pad).astype(np.float32)
    rgb = rng.uniform(size=(n + pad, 3)).astype(np.float32)
    t0 = np.sort(rng.uniform(0.0, 1.0, n + pad)).astype(np.float32)
    t1 = t0 + rng.uniform(0.0, 0.2, n + pad).astype(np.float32)
    background = tf.constant(rng.uniform(size=(4, 3)).astype(np.float32))

    def render(k, **extra):
        with tf.GradientTape() as tape:
            tape.watch(background)
            out = metal_ops.packed_volume_render(sigma[:k], rgb[:k], t0[:k], t1[:k], offsets, counts,
                                                 background=background, **extra)
            loss = tf.reduce_sum(out.rgb * np.arange(12, dtype=np.float32).reshape(4, 3))
        return [np.asarray(v) for v in (out.rgb, out.depth, out.opacity, tape.gradient(loss, background))]

    for got, want in zip(render(n + pad, num_samples=np.int32(n)), render(n)):
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_num_samples_must_be_int32():
    with pytest.raises(TypeError, match="'num_samples' must be int32"):
        metal_ops.packed_volume_render(tf.zeros([4]), tf.zeros([4, 3]), tf.zeros([4]), tf.zeros([4]),
                                       tf.zeros([1], tf.int32), tf.zeros([1], tf.int32), num_samples=np.int64(2))


# ---- one jit-compiled function: march, field, render, masked loss, gradients ---------
def packed_volume_render_has_xla_kernel():
    render = tf.function(lambda sigma: metal_ops.packed_volume_render(
        sigma, tf.zeros([1, 3]), tf.zeros([1]), tf.ones([1]), tf.zeros([1], tf.int32), tf.ones([1], tf.int32)),
        jit_compile=True)
    try:
        render(tf.zeros([1]))  # an input: a function of constants only could be folded before XLA sees it
    except tf.errors.InvalidArgumentError as e:
        if "No registered 'MetalOpsPackedVolumeRender' OpKernel for XLA_CPU_JIT" in str(e):
            return False
        raise
    return True


@pytest.mark.skipif(sys.platform == "darwin", reason="Metal has no XLA: no XLA kernels on macOS")
@pytest.mark.parametrize("budget", [0, 300, 5000])
def test_static_march_feeds_the_renderer_in_one_xla_function(budget):
    if not packed_volume_render_has_xla_kernel():
        pytest.skip("MetalOpsPackedVolumeRender has no XLA kernel in this build")
    origins, dirs, near, far, bits = random_case(4, 64, 8, 1, 0.4)
    target = np.random.default_rng(4).uniform(size=(64, 3)).astype(np.float32)
    scale = tf.Variable(3.0)
    colour = tf.Variable([0.2, -0.4, 0.9])

    def step(seed):
        s = metal_ops.ray_march_static(origins, dirs, near, far, bits, sample_budget=budget, jitter=True, seed=seed,
                                       grid_resolution=8, **ATTRS)
        with tf.GradientTape() as tape:
            sigma, rgb = fields(s, origins, dirs)
            out = metal_ops.packed_volume_render(scale * sigma, tf.sigmoid(rgb + colour), s.t_starts, s.t_ends,
                                                 s.ray_offsets, s.ray_counts, background=BACKGROUND,
                                                 num_samples=s.num_samples)
            kept = tf.cast(tf.range(64) < s.num_rays, tf.float32)
            loss = tf.reduce_sum(kept[:, None] * tf.square(out.rgb - target))
        return (loss, *tape.gradient(loss, [scale, colour]), s.num_samples, s.num_rays, out.rgb, out.depth)

    seed = tf.constant(5)
    xla = tf.function(step, jit_compile=True)(seed)
    plain = tf.function(step, jit_compile=False)(seed)
    assert int(xla[3]) == int(plain[3]) and int(xla[4]) == int(plain[4])
    for a, b in zip(xla, plain):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=1e-6)
