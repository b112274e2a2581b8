"""PackedVolumeRender and its gradient ops under XLA (`tf.function(jit_compile=True)`,
docs/XLA.md) on every device: tests/xla_checks.py says how."""
import re

import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from tests.reference import packed_volume_render as pvr_ref
from tests.xla_checks import XLA_MARKS, cuda_handlers_on_a_gpu  # noqa: F401  (the fixture: autouse)
from tests.xla_checks import assert_same, both, with_grad

pytestmark = XLA_MARKS


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("counts", [[5, 0, 12, 1, 30, 7], [0, 0], [], [3]])
@pytest.mark.parametrize("background", [None, "one", "per_ray"])
@pytest.mark.parametrize("return_weights", [False, True])
def test_packed_volume_render_and_gradients(dtype, counts, background, return_weights):
    sigma, rgb, t0, t1, offsets, counts = pvr_ref.make_packed(counts, seed=len(counts), dtype=dtype, surface=True)
    rays, n = len(counts), len(sigma)
    rng = np.random.default_rng(n)
    bg = {None: None, "one": rng.uniform(size=3).astype(dtype), "per_ray": rng.uniform(size=(rays, 3)).astype(dtype)}
    bg = None if bg[background] is None else tf.constant(bg[background])
    cot = [tf.constant(rng.normal(size=s).astype(dtype)) for s in [(rays, 3), (rays,), (rays,), (n,)]]

    def op(sigma, rgb, *bgs):
        out = metal_ops.packed_volume_render(sigma, rgb, t0, t1, offsets, counts, bgs[0] if bgs else None,
                                             early_termination=1e-3, return_weights=return_weights)
        return [out.rgb, out.depth, out.opacity] + ([out.weights] if return_weights else [])

    args = [tf.constant(sigma), tf.constant(rgb)] + ([bg] if bg is not None else [])
    xla, plain = both(with_grad(op, *args, output_grad=cot if return_weights else cot[:3]), *args)
    want = pvr_ref.render(sigma, rgb, t0, t1, offsets, counts, None if bg is None else bg.numpy(), 1e-3)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for got, ref in zip(xla[0], want):
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)
    assert_same(xla, plain, rtol=tol / 10, atol=tol / 10)  # the [3] background's gradient: a sum XLA orders


def test_packed_volume_render_bad_layout_is_a_run_time_error():
    """The layout (offsets, counts) is data: checked by the host handler with the kernel's message."""
    sigma, rgb, t0, t1, offsets, counts = pvr_ref.make_packed([3, 4], dtype=np.float32)
    fn = tf.function(lambda c: metal_ops.packed_volume_render(sigma, rgb, t0, t1, offsets, c).rgb, jit_compile=True)
    with pytest.raises(tf.errors.InvalidArgumentError) as xla_error:
        fn(tf.constant([3, 5], tf.int32))
    with pytest.raises(tf.errors.InvalidArgumentError) as plain_error:
        metal_ops.packed_volume_render(sigma, rgb, t0, t1, offsets, tf.constant([3, 5], tf.int32))
    assert "ray_counts" in str(xla_error.value) or "ray_offsets" in str(xla_error.value)
    plain_message = re.sub(r"^\{\{[^}]*\}\} ", "", str(plain_error.value).split(" [Op:")[0])
    assert plain_message in str(xla_error.value)
