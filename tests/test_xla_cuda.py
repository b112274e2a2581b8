"""The CUDA handlers of the XLA kernels on a GPU (docs/XLA.md, "On a GPU"):
what the self-test's [xla] cases do not reach. Invalid rays are caught on
the device and come back from `jit_compile=True` on the GPU as the errors
of the ops without XLA, with their messages (never NaN outputs in silence);
RayMarchStatic on the GPU gives the host handler's layout and padding, and
its kept samples are the CUDA RayMarch's bit for bit. Runs where TensorFlow
lists a GPU and the CUDA library registered the op's CUDA handlers
(`tools/check/gpu_check.sh xla`); skips elsewhere and says why."""
import re
import sys

import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from metal_ops import _loader
from tests.reference import packed_volume_render as pvr_ref

pytestmark = pytest.mark.skipif(sys.platform == "darwin", reason="Metal has no XLA")

GPU = "/GPU:0"


def require_cuda_handlers(*ops):
    if not tf.config.list_physical_devices("GPU"):
        pytest.skip("no GPU listed: the CUDA handlers run on a CUDA GPU")
    metal_ops.load_library()
    missing = [op for op in ops if op not in _loader.xla_cuda_ops()]
    if missing:
        pytest.skip(f"no CUDA handler registered for {', '.join(missing)} (the CUDA library's, docs/XLA.md)")


def message(error):
    """An op error's message without TensorFlow's node prefix and op suffix."""
    return re.sub(r"^\{\{[^}]*\}\} ", "", str(error).split(" [Op:")[0]).strip()


def same_error_as_without_xla(fn, *args):
    """fn(*args) on the GPU under XLA and without it: both InvalidArgumentError,
    the message without XLA inside the one under XLA."""
    with tf.device(GPU):
        with pytest.raises(tf.errors.InvalidArgumentError) as xla_error:
            np.asarray(tf.function(fn, jit_compile=True)(*args))
        with pytest.raises(tf.errors.InvalidArgumentError) as plain_error:
            np.asarray(fn(*args))
    assert message(plain_error.value) in str(xla_error.value), (str(xla_error.value), str(plain_error.value))
    return str(xla_error.value)


def test_distortion_loss_unsorted_t_is_an_error():
    require_cuda_handlers("MetalOpsDistortionLoss", "MetalOpsDistortionLossGrad")
    t = np.tile(np.arange(5, dtype=np.float32), (3, 1))
    t[2, 3] = 0.5
    text = same_error_as_without_xla(metal_ops.distortion_loss, tf.ones([3, 4]), tf.constant(t))
    assert "ray 2 has t[2, 2] = 2 > t[2, 3] = 0.5" in text


@pytest.mark.parametrize("where,value,expected", [("sigma", -1.0, "ray 1, sample 2 has sigma = -1"),
                                                  ("sigma", np.nan, "ray 1, sample 2"), ("t", 0.5, "ray 1")])
def test_volume_render_invalid_ray_is_an_error(where, value, expected):
    require_cuda_handlers("MetalOpsVolumeRender", "MetalOpsVolumeRenderGrad")
    sigma = np.ones([3, 4], np.float32)
    t = np.tile(np.arange(5, dtype=np.float32), (3, 1))
    if where == "sigma":
        sigma[1, 2] = value
    else:
        t[1, 3] = value
    text = same_error_as_without_xla(lambda s, tt: metal_ops.volume_render(s, tf.zeros([3, 4, 3]), tt).rgb,
                                     tf.constant(sigma), tf.constant(t))
    assert expected in text


@pytest.mark.parametrize("fault", ["counts past the samples", "overlapping rays", "negative sigma", "t_end < t_start"])
def test_packed_volume_render_invalid_ray_is_an_error(fault):
    require_cuda_handlers("MetalOpsPackedVolumeRender", "MetalOpsPackedVolumeRenderGrad")
    sigma, rgb, t0, t1, offsets, counts = pvr_ref.make_packed([3, 4, 2], dtype=np.float32)
    if fault == "counts past the samples":
        counts = np.array([3, 4, 3], np.int32)
    elif fault == "overlapping rays":
        offsets = np.array([0, 2, 7], np.int32)
    elif fault == "negative sigma":
        sigma[4] = -2.0
    else:
        t1[5] = t0[5] - 0.25
    text = same_error_as_without_xla(
        lambda s, o, c: metal_ops.packed_volume_render(s, rgb, t0, t1, o, c).rgb, tf.constant(sigma),
        tf.constant(offsets), tf.constant(counts))
    assert "ray" in text


def _march_inputs(rays, g=16, seed=3):
    from metal_ops.ray_march import pack_occupancy

    rng = np.random.default_rng(seed)
    origins = rng.uniform(-3, 3, (rays, 3)).astype(np.float32)
    dirs = (rng.uniform(-1, 2, (rays, 3)) - origins).astype(np.float32)
    dirs /= np.maximum(np.linalg.norm(dirs, axis=1, keepdims=True), 1e-6)
    bits = pack_occupancy(rng.uniform(size=(1, g, g, g)) < 0.3).numpy()
    attrs = dict(aabb=[-0.5, 0.0, -0.25, 1.5, 1.0, 1.75], grid_resolution=g, step_size=0.01, max_step_size=0.1)
    return [origins, dirs, np.zeros(rays, np.float32), np.full(rays, 10.0, np.float32), bits], attrs


@pytest.mark.parametrize("jitter", [False, True])
def test_ray_march_static_is_the_cuda_ray_march_cut_and_padded(jitter):
    require_cuda_handlers("MetalOpsRayMarchStatic")
    inputs, attrs = _march_inputs(301)
    with tf.device(GPU):
        full = [np.asarray(a) for a in metal_ops.ray_march(*inputs, jitter=jitter, seed=9, **attrs)]
    total = len(full[0])
    for budget in [0, total // 3, total, total + 100]:
        fn = tf.function(lambda *x: tuple(metal_ops.ray_march_static(*x, jitter=jitter, seed=9, sample_budget=budget,
                                                                     **attrs)), jit_compile=True)
        with tf.device(GPU):
            got = [np.asarray(a) for a in fn(*inputs)]
        counts = full[4].astype(np.int64)
        kept = int(np.sum(np.cumsum(counts) <= budget))
        n = int(counts[:kept].sum())
        assert (int(got[5]), int(got[6])) == (n, kept), budget
        np.testing.assert_array_equal(got[4], np.where(np.arange(301) < kept, full[4], 0))
        np.testing.assert_array_equal(got[3], np.where(np.arange(301) < kept, full[3], n))
        for k in range(3):  # the kept samples bit for bit, then the padding
            np.testing.assert_array_equal(got[k][:n], full[k][:n])
        np.testing.assert_array_equal(got[0][n:], 0)
        np.testing.assert_array_equal(got[1][n:], 0)
        np.testing.assert_array_equal(got[2][n:], 300)


def test_ray_march_static_without_rays_is_padding_only():
    require_cuda_handlers("MetalOpsRayMarchStatic")
    inputs, attrs = _march_inputs(0)
    fn = tf.function(lambda *x: tuple(metal_ops.ray_march_static(*x, sample_budget=7, **attrs)), jit_compile=True)
    with tf.device(GPU):
        got = [np.asarray(a) for a in fn(*inputs)]
    np.testing.assert_array_equal(got[0], np.zeros(7, np.float32))
    np.testing.assert_array_equal(got[2], np.zeros(7, np.int32))
    assert got[3].shape == (0,) and (int(got[5]), int(got[6])) == (0, 0)
