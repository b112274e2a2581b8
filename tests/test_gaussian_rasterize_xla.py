"""GaussianRasterize and its gradient op under XLA (`tf.function(jit_compile=True)`,
docs/XLA.md) on every device (tests/xla_checks.py says how), and
`rasterize_gaussians(..., max_intersections=B)`, which XLA compiles whole
(projection, static binning, rasterization): its image and gradients under
XLA against the same call without XLA and the dynamic binning's."""
import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from metal_ops import splat
from tests.reference import gaussian_rasterize as ref
from tests.test_splat import HEIGHT, K, VIEWMAT, WIDTH, gaussians
from tests.xla_checks import XLA_MARKS, cuda_handlers_on_a_gpu  # noqa: F401  (the fixture: autouse)
from tests.xla_checks import assert_same, both, compile_error, on_gpu, with_grad

pytestmark = XLA_MARKS

# rasterize_gaussians compiles the projection and the static binning too.
EXTRA_XLA_OPS = {"rasterize_gaussians": ("MetalOpsGaussianProject", "MetalOpsGaussianProjectGrad",
                                         "MetalOpsGaussianTileBinStatic")}


@pytest.mark.parametrize("n,c,width,height,tile_size", [(60, 3, 37, 29, 16), (40, 1, 20, 24, 8), (0, 3, 17, 5, 16)])
def test_gaussian_rasterize_and_gradient(n, c, width, height, tile_size):
    rng = np.random.default_rng(n)
    inputs = [tf.constant(v) for v in ref.scene(rng, n, c, width, height, tile_size)]
    attrs = dict(width=width, height=height, tile_size=tile_size)
    upstream = tf.constant(rng.normal(size=(height, width, c)).astype(np.float32))

    def image(*floats):
        return metal_ops.gaussian_rasterize(*floats, *inputs[5:], **attrs)[0]

    xla, plain = both(with_grad(image, *inputs[:5], output_grad=upstream), *inputs[:5])
    assert_same(xla, plain)
    want = ref.rasterize(*[v.numpy() for v in inputs], width, height, tile_size)[0]
    np.testing.assert_allclose(xla[0], want, atol=2e-4)


def test_gaussian_rasterize_bad_conics_shape_is_a_compile_error():
    inputs = [tf.constant(v) for v in ref.scene(np.random.default_rng(0), 5, 3, 37, 29)]
    inputs[1] = inputs[1][:, :2]
    message = compile_error(lambda *v: metal_ops.gaussian_rasterize(*v, width=37, height=29)[0], *inputs)
    assert "GaussianRasterize: 'conics' must be [N, 3] (a, b, c), N as in 'means2d'" in message


def render(max_intersections):
    def fn(means, quats, scales, opacities, colors):
        image, alpha, info = splat.rasterize_gaussians(
            means, quats, scales, opacities, colors, VIEWMAT.astype(np.float32), K.astype(np.float32), WIDTH, HEIGHT,
            background=np.float32([0.1, 0.2, 0.3]), max_intersections=max_intersections)
        extra = (info["num_gaussians"], info["overflow"]) if max_intersections else ()
        return (image, alpha) + extra
    return fn


def parameters(n, seed=0):
    return [tf.constant(v, tf.float32) for v in gaussians(n, seed=seed).values()]


@pytest.mark.parametrize("budget", [None, 100000])
def test_gaussian_rasterize_rasterize_gaussians_under_xla_is_the_eager_image(budget):
    params = parameters(200, seed=1)
    want = render(None)(*params)
    got = tf.function(render(100000), jit_compile=True)(*params)
    np.testing.assert_array_equal(got[0].numpy(), want[0].numpy())
    np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())
    assert int(got[2]) == 200 and not bool(got[3])
    eager = render(budget)(*params)
    np.testing.assert_array_equal(eager[0].numpy(), want[0].numpy())


def test_gaussian_rasterize_rasterize_gaussians_gradients_under_xla_are_the_eager_ones():
    params = parameters(150, seed=2)
    upstream = tf.constant(np.random.default_rng(2).normal(size=(HEIGHT, WIDTH, 3)).astype(np.float32))
    xla = tf.function(with_grad(lambda *p: render(100000)(*p)[0], *params, output_grad=upstream),
                      jit_compile=True)(*params)
    eager = with_grad(lambda *p: render(None)(*p)[0], *params, output_grad=upstream)(*params)
    # The CUDA backward sums with atomics, in an order that varies from run to run.
    assert_same(tf.nest.map_structure(np.asarray, xla), tf.nest.map_structure(np.asarray, eager), rtol=1e-5,
                atol=1e-4 if on_gpu() else 1e-6)


def test_gaussian_rasterize_rasterize_gaussians_over_the_budget_renders_the_kept_gaussians():
    params = parameters(200, seed=3)
    image, alpha, kept, overflow = tf.function(render(300), jit_compile=True)(*params)
    kept = int(kept)
    assert 0 < kept < 200 and bool(overflow)
    want = render(None)(*(p[:kept] for p in params))
    np.testing.assert_array_equal(image.numpy(), want[0].numpy())
    np.testing.assert_array_equal(alpha.numpy(), want[1].numpy())


@pytest.mark.parametrize("budget,error", [(0, ValueError), (-1, ValueError), (10.0, TypeError)])
def test_rasterize_gaussians_bad_budget_names_max_intersections(budget, error):
    with pytest.raises(error, match="rasterize_gaussians: 'max_intersections' must be an integer >= 1"):
        render(budget)(*parameters(3))
