"""Fuzzing GaussianRasterize: random image sizes (1x1 included) and tile sizes,
0 to 80 Gaussians binned by the reference's tile_bin, 1 to 5 channels,
scales and opacities from faint to saturated, with NaN / +-inf / huge values
sprinkled into the means and colours and NaN into the conics and opacities
(a Gaussian whose sigma or alpha is NaN is skipped, as the reference skips
it); values against the float64
reference (fed the inputs with denormals flushed, as TensorFlow's CPU threads
read them), gradients of finite inputs against its vjp; then one mutation at a
time of a valid call, which must be rejected naming the argument."""
import numpy as np
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

import metal_ops
from tests.fuzz.strategies import SPECIAL_F32, eager_or_graph, expect_rejected, flush_denormals, fuzz_settings
from tests.reference import gaussian_rasterize as ref


@st.composite
def scene_case(draw, special=True):
    width, height = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    tile_size = draw(st.sampled_from([4, 8, 16, 16, 32]))
    n, c = draw(st.integers(0, 80)), draw(st.integers(1, 5))
    low = draw(st.sampled_from([0.3, 1.0, 4.0]))
    opacity = draw(st.sampled_from([(0.01, 0.3), (0.05, 0.9), (0.8, 1.0)]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    inputs = ref.scene(rng, n, c, width, height, tile_size, scale=(low, 3 * low), opacity=opacity)
    if special and n and draw(st.booleans()):
        # means and colours take any special value; conics and opacities NaN
        # alone: other values outside their domain (an indefinite conic,
        # an opacity above 1) put sigma = 0 or exp's underflow, where float32
        # and float64 part, on the pixel
        for k, values in ((0, SPECIAL_F32), (2, SPECIAL_F32), (1, [np.nan]), (3, [np.nan])):
            flat = inputs[k].reshape(-1)
            flat[rng.integers(0, flat.size, 2)] = rng.choice(np.asarray(values, np.float32), 2)
    return inputs, {"width": width, "height": height, "tile_size": tile_size}


@fuzz_settings(max_examples_fraction=0.5)
@given(case=scene_case(), graph=st.booleans())
def test_gaussian_rasterize_matches_reference(case, graph):
    inputs, attrs = case
    image, alpha = eager_or_graph(lambda *x: metal_ops.gaussian_rasterize(*x, **attrs), graph)(*inputs)
    with np.errstate(invalid="ignore", over="ignore"):
        want_image, want_alpha, _ = ref.rasterize(*[flush_denormals(x) for x in inputs], attrs["width"],
                                                  attrs["height"], attrs["tile_size"])
    assert image.shape == want_image.shape and alpha.shape == want_alpha.shape
    np.testing.assert_allclose(image.numpy(), want_image, rtol=1e-5, atol=5e-5)
    np.testing.assert_allclose(alpha.numpy(), want_alpha, rtol=0, atol=5e-5)


@fuzz_settings(max_examples_fraction=0.25)
@given(case=scene_case(special=False))
def test_gaussian_rasterize_gradients_match_reference(case):
    inputs, attrs = case
    rng = np.random.default_rng(0)
    shape = (attrs["height"], attrs["width"], inputs[2].shape[1])
    v_image, v_alpha = rng.uniform(-1, 1, shape).astype(np.float32), rng.uniform(-1, 1, shape[:2]).astype(np.float32)
    floats = [tf.constant(x) for x in inputs[:5]]
    with tf.GradientTape() as tape:
        tape.watch(floats)
        image, alpha = metal_ops.gaussian_rasterize(*floats, *inputs[5:], **attrs)
        loss = tf.reduce_sum(image * v_image) + tf.reduce_sum(alpha * v_alpha)
    got = tape.gradient(loss, floats)
    want = ref.vjp(*inputs, attrs["width"], attrs["height"], attrs["tile_size"], v_image, v_alpha)
    for g, w in zip(got, want):
        # saturated pixels recover T by division from about 1e-4: float32 keeps ~1e-3 of it
        np.testing.assert_allclose(g.numpy(), w, rtol=0, atol=2e-3 * max(1.0, np.abs(w).max(initial=0)))


MUTATIONS = ["means2d", "conics", "colors", "opacities", "background", "gaussian_ids", "tile_ranges", "dtype"]


@fuzz_settings(max_examples_fraction=0.25)
@given(case=scene_case(special=False), mutation=st.sampled_from(MUTATIONS))
def test_gaussian_rasterize_rejects_bad_input_naming_it(case, mutation):
    inputs, attrs = case
    inputs = list(inputs)
    names = ["means2d", "conics", "colors", "opacities", "background", "gaussian_ids", "tile_ranges"]
    if mutation == "dtype":
        inputs[0] = inputs[0].astype(np.float64)
        name = "means2d"
    else:
        k = names.index(mutation)
        x = inputs[k]
        inputs[k] = np.zeros(x.shape[:-1] + (x.shape[-1] + 1,) if x.ndim else (1,), x.dtype)
        if mutation == "gaussian_ids":
            inputs[k] = np.zeros((1, 1), np.int32)
        name = mutation
    expect_rejected(lambda: metal_ops.gaussian_rasterize(*inputs, **attrs), name)
