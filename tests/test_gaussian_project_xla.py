"""GaussianProject and its gradient op under XLA (`tf.function(jit_compile=True)`,
docs/XLA.md) on every device: tests/xla_checks.py says how."""
import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from metal_ops.gaussian_project import scene
from tests.reference import gaussian_project as ref
from tests.xla_checks import XLA_MARKS, cuda_handlers_on_a_gpu  # noqa: F401  (the fixture: autouse)
from tests.xla_checks import assert_same, both, compile_error, with_grad

pytestmark = XLA_MARKS


def project(width, height, **attrs):
    def fn(means, quats, scales, viewmat, k, opacities=None):
        out = metal_ops.gaussian_project(means, quats, scales, viewmat, k, width=width, height=height,
                                         opacities=opacities, **attrs)
        return tf.concat([out.means2d, out.conics, out.depths[:, None]], 1), out.radii
    return fn


@pytest.mark.parametrize("n,width,height,attrs", [(700, 64, 48, {}), (0, 64, 48, {}),
                                                  (300, 40, 90, {"eps2d": 1.0, "near_plane": 2.0})])
def test_gaussian_project_and_gradient(n, width, height, attrs):
    rng = np.random.default_rng(n)
    inputs = [tf.constant(v) for v in scene(rng, n, width, height)]
    inputs.append(tf.constant(rng.uniform(0.5 / 255, 1, n).astype(np.float32)))  # opacities: some culled
    upstream = tf.constant(rng.normal(size=(n, 6)).astype(np.float32))
    fn = project(width, height, **attrs)
    xla, plain = both(with_grad(lambda m, q, s: fn(m, q, s, *inputs[3:])[0], *inputs[:3], output_grad=upstream),
                      *inputs[:3])
    radii_xla, radii_plain = both(lambda *v: fn(*v)[1], *inputs)
    np.testing.assert_array_equal(radii_xla, radii_plain)
    assert_same(xla, plain)
    arrays = [v.numpy() for v in inputs]
    want = ref.project(*arrays[:5], width, height, opacities=arrays[5], **attrs)
    np.testing.assert_array_equal(radii_xla > 0, want[3] > 0)
    keep = want[3][:, 0] > 0
    np.testing.assert_allclose(xla[0][keep, :2], want[0][keep], rtol=1e-4, atol=1e-3)
    cots = [upstream.numpy()[:, :2], upstream.numpy()[:, 2:5], upstream.numpy()[:, 5]]
    for got, w in zip(xla[1], ref.vjp(arrays[:5], cots, width, height, opacities=arrays[5], **attrs)):
        scale = np.abs(w).max(axis=1, keepdims=True) + 1e-3
        np.testing.assert_allclose(got / scale, w / scale, atol=2e-3)


def test_gaussian_project_bad_shapes_are_compile_errors():
    inputs = [tf.constant(v) for v in scene(np.random.default_rng(0), 4)]
    inputs[1] = tf.zeros([4, 3])
    message = compile_error(lambda *v: project(64, 48)(*v)[0], *inputs)
    assert "GaussianProject: 'quats' must be [N, 4] = [4,4], got shape [4,3]" in message
    inputs[1] = tf.ones([4, 4])
    message = compile_error(lambda *v: project(64, 48)(*v, tf.ones([3]))[0], *inputs)
    assert "GaussianProject: 'opacities' must be [N] = [4], got shape [3]" in message


def test_gaussian_project_zero_quaternion_is_an_error_naming_quats():
    means, quats, scales, viewmat, k = scene(np.random.default_rng(0), 6)
    quats[2] = 0
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"'quats' must be finite and nonzero .*quats\[2\]"):
        tf.function(project(64, 48), jit_compile=True)(means, quats, scales, viewmat, k)


def test_gaussian_project_grad_shape_mismatch_is_a_compile_error():
    lib = metal_ops.load_library()
    inputs = [tf.constant(v) for v in scene(np.random.default_rng(0), 4)]
    args = [tf.zeros([4, 2]), tf.zeros([4, 2]), tf.zeros([4])] + inputs + [tf.ones([4, 2], tf.int32)]
    message = compile_error(lambda *v: lib.metal_ops_gaussian_project_grad(*v, width=8, height=8)[0], *args)
    assert "GaussianProjectGrad: 'grad_conics' must be [N, 3] = [4,3], got shape [4,2]" in message
