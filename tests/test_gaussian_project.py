"""GaussianProject (3D Gaussians through a pinhole camera): the kernels vs
the float64 NumPy reference (tests/reference/gaussian_project.py), culling,
gradients against the reference's complex-step derivative, shapes, bad
inputs, and the Metal shaders through the MSL shim. CUDA:
tests/cuda/test_gaussian_project_cuda.py."""
import ctypes

import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from metal_ops._loader import load_library
from metal_ops.gaussian_project import scene
from tests.metal_shim.shim import f32, i64, load_shim, ptr, u32
from tests.reference import gaussian_project as ref

pytestmark = pytest.mark.every_device

ERRORS = (tf.errors.InvalidArgumentError, ValueError)


def project(inputs, **attrs):
    return [t.numpy() for t in metal_ops.gaussian_project(*inputs, **attrs)]


def check_against_reference(got, want, rtol=1e-4):
    """The op's outputs against the reference's: radii [N, 2] equal but for
    Gaussians whose box lies within float32 rounding of an integer (off by one
    there), the other outputs close where both keep the Gaussian."""
    means2d, conics, depths, radii = got
    w_means2d, w_conics, w_depths, w_radii = want
    assert radii.dtype == np.int32 and radii.shape == w_radii.shape == (len(means2d), 2)
    np.testing.assert_array_equal(radii > 0, w_radii > 0)
    np.testing.assert_array_equal(radii[:, 0] > 0, radii[:, 1] > 0)  # culled: both 0
    assert np.all(np.abs(radii - w_radii) <= 1) and np.sum(radii != w_radii) <= max(1, 0.01 * radii.size)
    keep = radii[:, 0] > 0
    assert np.all(means2d[~keep] == 0) and np.all(conics[~keep] == 0) and np.all(depths[~keep] == 0)
    np.testing.assert_allclose(means2d[keep], w_means2d[keep], rtol=rtol, atol=rtol * 10)
    np.testing.assert_allclose(depths[keep], w_depths[keep], rtol=rtol)
    scale = np.abs(w_conics[keep]).max(axis=1, keepdims=True)
    np.testing.assert_allclose(conics[keep] / scale, w_conics[keep] / scale, atol=rtol * 10)


# ---- values ------------------------------------------------------------------------------
@pytest.mark.parametrize("n,width,height", [(1, 64, 48), (7, 64, 48), (1000, 64, 48), (3000, 800, 600),
                                            (500, 17, 5)])
def test_values_match_numpy(n, width, height):
    inputs = scene(np.random.default_rng(n + width), n, width, height)
    got = project(inputs, width=width, height=height)
    assert [g.shape for g in got] == [(n, 2), (n, 3), (n,), (n, 2)]
    check_against_reference(got, ref.project(*inputs, width, height))


@pytest.mark.parametrize("attrs", [dict(near_plane=2.5), dict(far_plane=4.0), dict(eps2d=0.0), dict(eps2d=2.0)])
def test_attributes(attrs):
    inputs = scene(np.random.default_rng(5), 800)
    got = project(inputs, width=64, height=48, **attrs)
    check_against_reference(got, ref.project(*inputs, 64, 48, **attrs))
    if "near_plane" in attrs or "far_plane" in attrs:
        kept = got[2][got[3][:, 0] > 0]
        assert kept.size and np.all(kept >= attrs.get("near_plane", 0)) and np.all(kept <= attrs.get("far_plane", 1e10))


def test_empty_set():
    inputs = scene(np.random.default_rng(0), 0)
    got = project(inputs, width=64, height=48)
    assert [g.shape for g in got] == [(0, 2), (0, 3), (0,), (0, 2)]


def test_one_gaussian_by_hand():
    """A round Gaussian on the optical axis: mean2d the principal point, an
    isotropic conic 1 / (f^2 s^2 / z^2 + eps2d), radii ceil(3.33 sigma) at
    opacity 1 and ceil(sqrt(2 log(255 o)) sigma) below it."""
    f, z, s = 100.0, 4.0, 0.2
    inputs = [np.array([[0, 0, z]], np.float32), np.array([[1, 0, 0, 0]], np.float32),
              np.full((1, 3), s, np.float32), np.eye(4, dtype=np.float32),
              np.array([[f, 0, 32], [0, f, 24], [0, 0, 1]], np.float32)]
    means2d, conics, depths, radii = project(inputs, width=64, height=48)
    var = (f * s / z) ** 2 + 0.3
    np.testing.assert_allclose(means2d, [[32, 24]], rtol=1e-6)
    np.testing.assert_allclose(conics, [[1 / var, 0, 1 / var]], rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(depths, [z])
    np.testing.assert_array_equal(radii, [[np.ceil(3.33 * np.sqrt(var))] * 2])
    radii = project(inputs, width=64, height=48, opacities=np.float32([0.05]))[3]
    np.testing.assert_array_equal(radii, [[np.ceil(np.sqrt(2 * np.log(255 * 0.05)) * np.sqrt(var))] * 2])


def test_opacities_size_and_cull_the_radii():
    """Random opacities, some below 1/255 and NaN (culled, not an error), and
    anisotropic Gaussians: the radii [N, 2] are the reference's."""
    rng = np.random.default_rng(11)
    n = 2000
    inputs = scene(rng, n)
    opacities = np.exp(rng.uniform(np.log(1e-3), 0, n)).astype(np.float32)
    opacities[::97] = np.nan
    opacities[1::89] = 1 / 255 * 0.999
    got = project(inputs, width=64, height=48, opacities=opacities)
    want = ref.project(*inputs, 64, 48, opacities=opacities)
    check_against_reference(got, want)
    radii = got[3]
    assert np.all(radii[::97] == 0) and np.all(radii[1::89] == 0) and np.all(radii[opacities < 1 / 255] == 0)
    assert np.any(radii[:, 0] != radii[:, 1]) and np.mean(radii[:, 0] > 0) > 0.3


def test_culling():
    """Behind the camera, before the near plane, beyond the far plane, off
    screen (left, right, above, below) are culled; one on screen is kept."""
    means = np.array([[0, 0, -3], [0, 0, 0.005], [0, 0, 50], [-30, 0, 3], [30, 0, 3], [0, -30, 3], [0, 30, 3],
                      [0.1, 0.1, 3]], np.float32)
    n = len(means)
    inputs = [means, np.tile(np.float32([1, 0, 0, 0]), (n, 1)), np.full((n, 3), 0.05, np.float32),
              np.eye(4, dtype=np.float32), np.array([[60, 0, 32], [0, 60, 24], [0, 0, 1]], np.float32)]
    got = project(inputs, width=64, height=48, far_plane=20.0)
    np.testing.assert_array_equal(got[3][:, 0] > 0, [False] * 7 + [True])
    check_against_reference(got, ref.project(*inputs, 64, 48, far_plane=20.0))


def test_all_culled_gives_zeros():
    means, quats, scales, viewmat, k = scene(np.random.default_rng(1), 200)
    means[:, 2] = -5 - np.abs(means[:, 2])  # every Gaussian behind the camera
    got = project([means, quats, scales, viewmat, k], width=64, height=48)
    assert not np.any(got[3]) and not np.any(got[0]) and not np.any(got[1]) and not np.any(got[2])


# ---- gradients ---------------------------------------------------------------------------
def op_with_grad(inputs, cotangents, **attrs):
    tensors = [tf.constant(v) for v in inputs]
    with tf.GradientTape() as tape:
        tape.watch(tensors[:3])
        out = metal_ops.gaussian_project(*tensors, **attrs)
        total = sum(tf.reduce_sum(o * c) for o, c in zip(out[:3], cotangents))
    return out, tape.gradient(total, tensors)


@pytest.mark.parametrize("width,height,seed", [(64, 48, 0), (800, 600, 1), (30, 90, 2)])
def test_gradient_matches_complex_step(width, height, seed):
    rng = np.random.default_rng(seed)
    inputs = scene(rng, 600, width, height)
    cots = [rng.normal(size=s).astype(np.float32) for s in ((600, 2), (600, 3), (600,))]
    out, grads = op_with_grad(inputs, cots, width=width, height=height)
    assert grads[3] is None and grads[4] is None  # viewmat and K: no gradient
    want = ref.vjp(inputs, cots, width, height)
    for got, w in zip(grads[:3], want):
        scale = np.abs(w).max(axis=1, keepdims=True) + 1e-3
        np.testing.assert_allclose(got.numpy() / scale, w / scale, atol=2e-3)
    culled = out[3].numpy()[:, 0] == 0
    assert culled.any() and all(np.all(g.numpy()[culled] == 0) for g in grads[:3])


def test_gradient_where_the_jacobian_clamps():
    """Gaussians far outside the view frustum but large enough to reach the
    image: J's x / z and y / z are clamped, and the gradient follows the clamp."""
    rng = np.random.default_rng(4)
    n = 50
    means = np.stack([rng.choice([-1, 1], n) * rng.uniform(3, 4, n), rng.uniform(-0.5, 0.5, n),
                      rng.uniform(1.5, 2.5, n)], 1).astype(np.float32)
    scales = np.full((n, 3), 1.5, np.float32)
    _, quats, _, _, k = scene(rng, n)
    inputs = [means, quats, scales, np.eye(4, dtype=np.float32), k]
    cots = [rng.normal(size=s).astype(np.float32) for s in ((n, 2), (n, 3), (n,))]
    out, grads = op_with_grad(inputs, cots, width=64, height=48)
    assert np.mean(out[3].numpy()[:, 0] > 0) > 0.5
    want = ref.vjp(inputs, cots, 64, 48)
    for got, w in zip(grads[:3], want):
        scale = np.abs(w).max(axis=1, keepdims=True) + 1e-3
        np.testing.assert_allclose(got.numpy() / scale, w / scale, atol=2e-3)


def test_gradient_of_depths_only():
    """Only depths used: the gradient is W's third row (its z) for kept Gaussians."""
    inputs = scene(np.random.default_rng(3), 100)
    means = tf.constant(inputs[0])
    with tf.GradientTape() as tape:
        tape.watch(means)
        out = metal_ops.gaussian_project(means, *inputs[1:], width=64, height=48)
        total = tf.reduce_sum(out.depths)
    g = tape.gradient(total, means).numpy()
    keep = out.radii.numpy()[:, 0] > 0
    np.testing.assert_allclose(g[keep], np.tile(inputs[3][2, :3], (keep.sum(), 1)), rtol=1e-6)
    assert np.all(g[~keep] == 0)


# ---- shapes and bad inputs ---------------------------------------------------------------
def test_shape_function():
    spec = [tf.TensorSpec([None, 3]), tf.TensorSpec([None, 4]), tf.TensorSpec([None, 3]), tf.TensorSpec([4, 4]),
            tf.TensorSpec([3, 3])]
    out = tf.function(lambda *v: metal_ops.gaussian_project(*v, width=8, height=8)).get_concrete_function(
        *spec).structured_outputs
    assert [o.shape.as_list() for o in out] == [[None, 2], [None, 3], [None], [None, 2]]
    assert out.radii.dtype == tf.int32


@pytest.mark.parametrize("which,shape,message", [
    (0, (5, 2), r"'means' must be \[N, 3\]"), (0, (5,), r"'means' must be \[N, 3\]"),
    (1, (5, 3), r"'quats' must be \[N, 4\] = \[5,4\]"), (1, (4, 4), r"'quats' must be \[N, 4\] = \[5,4\]"),
    (2, (5, 4), r"'scales' must be \[N, 3\]"), (3, (3, 4), r"'viewmat' must be \[4, 4\]"),
    (4, (3,), r"'K' \(the op's input 'intrinsics'\) must be \[3, 3\], got shape \[3\]")])
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_bad_shapes_name_the_argument(which, shape, message, mode):
    inputs = scene(np.random.default_rng(0), 5)
    inputs[which] = np.ones(shape, np.float32)
    fn = lambda *v: metal_ops.gaussian_project(*v, width=64, height=48)  # noqa: E731
    fn = fn if mode == "eager" else tf.function(fn)
    with pytest.raises(ERRORS, match="GaussianProject: " + message):
        fn(*inputs)


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_bad_opacities_shape_names_the_argument(mode):
    inputs = scene(np.random.default_rng(0), 5)
    fn = lambda *v: metal_ops.gaussian_project(*v, width=64, height=48, opacities=np.ones(4, np.float32))  # noqa
    fn = fn if mode == "eager" else tf.function(fn)
    with pytest.raises(ERRORS, match=r"GaussianProject: 'opacities' must be \[N\] = \[5\], got shape \[4\]"):
        fn(*inputs)


@pytest.mark.parametrize("which,index,value,message", [
    (1, 3, [0, 0, 0, 0], r"'quats' must be finite and nonzero .*quats\[3\] = \(0, 0, 0, 0\)"),
    (1, 2, [np.nan, 1, 0, 0], r"'quats' must be finite and nonzero .*quats\[2\]"),
    (2, 4, [0.1, 0, 0.1], r"'scales' must be positive and finite, got scales\[4\] = \(0.1, 0, 0.1\)"),
    (2, 1, [0.1, -0.2, 0.1], r"'scales' must be positive and finite, got scales\[1\]"),
    (2, 0, [np.nan, 0.1, 0.1], r"'scales' must be positive and finite, got scales\[0\] = \(nan"),
    (2, 0, [np.inf, 0.1, 0.1], r"'scales' must be positive and finite"),
    (0, 5, [np.nan, 0, 1], r"'means' must be finite, got means\[5\] = \(nan, 0, 1\)"),
    (0, 5, [0, np.inf, 1], r"'means' must be finite, got means\[5\]")])
def test_bad_values_name_the_argument_and_the_first_gaussian(which, index, value, message):
    inputs = scene(np.random.default_rng(0), 9)
    inputs[which][index] = value
    inputs[which][index + 2] = value  # a later one is not the one named
    with pytest.raises(tf.errors.InvalidArgumentError, match="GaussianProject: " + message):
        project(inputs, width=64, height=48)


@pytest.mark.parametrize("attrs,message", [
    (dict(width=0, height=8), "'width' must be"), (dict(width=8, height=0), "'height' must be"),
    (dict(width=8, height=70000), "'height' must be"), (dict(width=8, height=8, eps2d=-1.0), "'eps2d' must be"),
    (dict(width=8, height=8, near_plane=float("nan")), "'near_plane' must be")])
def test_bad_attributes_name_the_attribute(attrs, message):
    with pytest.raises(ERRORS, match=message):
        metal_ops.gaussian_project(*scene(np.random.default_rng(0), 3), **attrs)


def test_wrong_dtype_is_a_type_error():
    inputs = scene(np.random.default_rng(0), 3)
    inputs[2] = inputs[2].astype(np.float64)
    with pytest.raises(TypeError, match="gaussian_project: 'scales' must be float32, got float64"):
        metal_ops.gaussian_project(*inputs, width=8, height=8)
    with pytest.raises(TypeError, match="width"):
        metal_ops.gaussian_project(*scene(np.random.default_rng(0), 3), width=8.5, height=8)


def test_grad_op_checks_its_upstream_gradients():
    inputs = scene(np.random.default_rng(0), 4)
    lib = load_library()
    radii = np.ones((4, 2), np.int32)
    args = [np.zeros((4, 2), np.float32), np.zeros((4, 3), np.float32), np.zeros(4, np.float32)] + inputs + [radii]
    bad = list(args)
    bad[1] = np.zeros((4, 2), np.float32)
    with pytest.raises(ERRORS, match=r"GaussianProjectGrad: 'grad_conics' must be \[N, 3\] = \[4,3\]"):
        lib.metal_ops_gaussian_project_grad(*bad, width=8, height=8)
    bad = list(args)
    bad[8] = np.ones(4, np.int32)
    with pytest.raises(ERRORS, match=r"GaussianProjectGrad: 'radii' must be \[N, 2\]"):
        lib.metal_ops_gaussian_project_grad(*bad, width=8, height=8)
    grads = lib.metal_ops_gaussian_project_grad(*args, width=8, height=8)
    assert [g.shape.as_list() for g in grads] == [[4, 3], [4, 4], [4, 3]]


# ---- Metal shaders through the MSL shim --------------------------------------------------
def shim_lib():
    lib = load_shim()
    vp, f = ctypes.c_void_p, ctypes.c_float
    lib.shim_gaussian_project_forward.argtypes = [vp] * 10 + [ctypes.c_int64, ctypes.c_int, ctypes.c_int, f, f, f,
                                                             ctypes.c_uint32]
    lib.shim_gaussian_project_backward.argtypes = [vp] * 12 + [ctypes.c_int64, ctypes.c_int, ctypes.c_int, f, f, f,
                                                               ctypes.c_uint32]
    lib.shim_gaussian_project_find_every_kernel.restype = ctypes.c_int
    return lib


@pytest.mark.source_tree("the Metal shaders (MSL shim)")
@pytest.mark.parametrize("n,grid", [(1, 1), (300, 7), (1000, 256)])
def test_metal_shaders_on_msl_shim(n, grid):
    lib = shim_lib()
    assert lib.shim_gaussian_project_find_every_kernel() == 0
    rng = np.random.default_rng(n)
    inputs = scene(rng, n)
    outs = [np.full((n, 2), 7, np.float32), np.full((n, 3), 7, np.float32), np.full(n, 7, np.float32),
            np.full((n, 2), 7, np.int32)]
    attrs = (64, 48, 0.01, 1e10, 0.3)
    opacities = rng.uniform(0.002, 1, n).astype(np.float32)
    lib.shim_gaussian_project_forward(*[ptr(v) for v in inputs[:3] + [opacities] + inputs[3:] + outs], i64(n),
                                      *attrs[:2], *map(f32, attrs[2:]), u32(grid))
    check_against_reference(outs, ref.project(*inputs, 64, 48, opacities=opacities))
    cots = [np.ascontiguousarray(rng.normal(size=s).astype(np.float32)) for s in ((n, 2), (n, 3), (n,))]
    grads = [np.full((n, 3), 7, np.float32), np.full((n, 4), 7, np.float32), np.full((n, 3), 7, np.float32)]
    lib.shim_gaussian_project_backward(*[ptr(v) for v in cots + inputs + [outs[3]] + grads], i64(n), *attrs[:2],
                                       *map(f32, attrs[2:]), u32(grid))
    _, want = op_with_grad(inputs, cots, width=64, height=48, opacities=opacities)
    for got, w in zip(grads, want[:3]):
        np.testing.assert_allclose(got, w.numpy(), rtol=1e-5, atol=1e-5 * np.abs(w.numpy()).max())
