"""Thread safety: every op called from 8 Python threads at once, and inside
tf.data map with num_parallel_calls, gives exactly the serial results
(forward and gradients; each thread on its own inputs, so cross-talk between
concurrent calls shows up); the loader and fusion.enable() raced from 8
threads in a fresh process load everything once and never abort.

Each runs on every device (tests/devices.py), the threads on the test's device.
Exact equality is required: every CPU kernel is deterministic (fixed work
partition, no atomics in float accumulation), which docs/RELIABILITY.md states;
so is every GPU kernel except those of GPU_ATOMICS (compared to 1e-5 there).
"""
import functools
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from metal_ops.hash_encode import hash_grid_size

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
THREADS = 8
ROUNDS = 3
HASH = dict(num_levels=8, log2_hashmap_size=12, base_resolution=8, per_level_scale=1.5)
# Ops whose GPU results are not bitwise reproducible from call to call: float
# atomics (HashEncode's table gradient, RobustLoss's per-channel parameter
# gradients) and cuBLAS (FusedConv2D: one handle per thread; cuBLAS may choose
# another algorithm).
GPU_ATOMICS = {"hash_encode", "robust_loss", "fused_conv2d"}

pytestmark = pytest.mark.every_device


def _cotangents(outs):
    # Fixed weights per output element, built on the host from the eager
    # tensor's static shape and passed as the tape's output gradients: the
    # tape then needs no reduction ops. tf.size/tf.range/tf.reshape, and the
    # Tile of reduce_sum's gradient, on GPU tensors from 8 eager threads at
    # once fail now and then inside TensorFlow itself (docs/RELIABILITY.md).
    return [tf.constant(np.sin(np.arange(o.shape.num_elements(), dtype=np.float64) * 0.37).reshape(o.shape), o.dtype)
            for o in outs]


def run_with_grads(fn, inputs):
    xs = [tf.constant(a) for a in inputs]
    with tf.GradientTape() as tape:
        tape.watch(xs)
        outs = fn(*xs)
        outs = [o for o in (outs if isinstance(outs, (list, tuple)) else [outs]) if o is not None]
    grads = tape.gradient(outs, xs, output_gradients=_cotangents(outs))
    return [o.numpy() for o in outs] + [tf.convert_to_tensor(g).numpy() for g in grads if g is not None]


def _case_inputs(op, seed):
    rng = np.random.default_rng(seed)
    f32 = np.float32
    if op == "zero_out":
        return [rng.normal(size=(64, 257)).astype(f32)]
    if op == "hash_encode":
        rows = hash_grid_size(3, **HASH)
        return [rng.uniform(0, 1, size=(4096, 3)).astype(f32), rng.normal(size=(rows, 2)).astype(f32)]
    if op == "robust_loss":
        return [rng.normal(size=(512, 3)).astype(f32), rng.uniform(-2, 2, size=(3,)).astype(f32),
                rng.uniform(0.1, 2, size=(3,)).astype(f32)]
    if op == "distortion_loss":
        return [rng.uniform(0, 1, size=(512, 48)).astype(f32),
                np.cumsum(rng.uniform(0, 0.1, size=(512, 49)), axis=1).astype(f32)]
    if op == "volume_render":
        return [rng.uniform(0, 3, size=(512, 48)).astype(f32), rng.uniform(0, 1, size=(512, 48, 3)).astype(f32),
                (2 + np.cumsum(rng.uniform(0, 0.1, size=(512, 49)), axis=1)).astype(f32),
                rng.uniform(0, 1, size=(3,)).astype(f32)]
    if op == "sh_encode":
        return [rng.normal(size=(4096, 3)).astype(f32)]
    if op == "fused_conv2d":
        return [rng.normal(size=(2, 16, 16, 8)).astype(f32), rng.normal(size=(3, 3, 8, 16)).astype(f32),
                rng.normal(size=(16,)).astype(f32), rng.normal(size=(2, 16, 16, 16)).astype(f32)]
    raise ValueError(op)


OPS = {
    "zero_out": lambda x: metal_ops.zero_out(x, preserve_index=1000),
    "hash_encode": lambda x, table: metal_ops.hash_encode(x, table, interpolation="smoothstep", **HASH),
    "robust_loss": metal_ops.robust_loss,
    "distortion_loss": metal_ops.distortion_loss,
    "volume_render": lambda s, c, t, bg: tuple(metal_ops.volume_render(s, c, tf.stop_gradient(t), background=bg,
                                                                      return_weights=True)),
    "sh_encode": metal_ops.sh_encode,
    "fused_conv2d": lambda x, w, b, r: metal_ops.fused_conv2d(x, w, bias=b, residual=r, activation="swish"),
}


def _assert_same(got, expected, what, exact=True):
    assert len(got) == len(expected), what
    for k, (g, e) in enumerate(zip(got, expected)):
        msg = f"{what}: output {k} differs from the serial result"
        if exact:
            np.testing.assert_array_equal(g, e, err_msg=msg)
        else:
            # float32 sums of up to a few thousand terms in another order
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(e).max(initial=0))),
                                       err_msg=msg)


@functools.lru_cache(maxsize=None)
def serial(op, device):
    """Serial results (outputs + gradients) of `op` on `device` for seeds 0..THREADS-1."""
    with tf.device(device):
        return [run_with_grads(OPS[op], _case_inputs(op, s)) for s in range(THREADS)]


@pytest.mark.parametrize("op", sorted(OPS))
def test_eight_threads_equal_serial(op, tf_device):
    errors, results = [], {}
    barrier = threading.Barrier(THREADS)
    expected = serial(op, tf_device)

    def worker(seed):
        try:
            inputs = _case_inputs(op, seed)
            barrier.wait()
            with tf.device(tf_device):  # a thread starts with TensorFlow's default placement
                results[seed] = [run_with_grads(OPS[op], inputs) for _ in range(ROUNDS)]
        except BaseException as e:  # reported below, with the thread's seed
            errors.append((seed, f"{type(e).__name__}: {e}"))

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    exact = tf_device == "/CPU:0" or op not in GPU_ATOMICS
    for seed in range(THREADS):
        for r in range(ROUNDS):
            _assert_same(results[seed][r], expected[seed], f"{op} thread {seed} round {r}", exact)


@pytest.mark.cpu_semantics("tf.data runs its map functions on the CPU")
@pytest.mark.parametrize("op", sorted(OPS))
def test_tf_data_parallel_map_equals_serial(op, tf_device):
    """Forward outputs inside Dataset.map(num_parallel_calls=8) (graph mode,
    tf.data's own thread pool), element i = seed i."""
    per_seed = [_case_inputs(op, s) for s in range(THREADS)]
    columns = tuple(np.stack([inp[k] for inp in per_seed]) for k in range(len(per_seed[0])))

    def mapped(*args):
        outs = OPS[op](*args)
        return tuple(o for o in (outs if isinstance(outs, (list, tuple)) else [outs]) if o is not None)

    ds = tf.data.Dataset.from_tensor_slices(columns).repeat(ROUNDS).map(mapped, num_parallel_calls=THREADS,
                                                                         deterministic=True)
    for i, outs in enumerate(ds):
        seed = i % THREADS
        n_out = len(outs)
        _assert_same([o.numpy() for o in outs], serial(op, tf_device)[seed][:n_out], f"{op} tf.data element {i}")


CHILD = r"""
import json, sys, threading
import metal_ops
from metal_ops import fusion
barrier = threading.Barrier(8)
out, errors = {}, []
def worker(i):
    try:
        barrier.wait()
        if i % 2 == 0:
            out[i] = ("enable", fusion.enable())
        elif i % 4 == 1:
            out[i] = ("zero_out", metal_ops.zero_out([i, 1, 2], preserve_index=0).numpy().tolist())
        else:
            out[i] = ("hash_grid_size", metal_ops.hash_grid_size(3, 4, 10, 4, 1.5))
    except BaseException as e:
        errors.append(repr(e))
ts = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
lib = fusion._dlopen_noload(fusion.plugin_path())
print(json.dumps({"out": out, "errors": errors, "init_calls": int(lib.MetalOpsFusionInitCalls()),
                  "same_module": metal_ops.load_library() is metal_ops.load_library()}))
"""


@pytest.mark.cpu_semantics("a fresh process's loader and fusion.enable(); no op runs on a device")
def test_loader_and_fusion_enable_raced_from_eight_threads():
    """Fresh process: 4 threads call fusion.enable() while 4 others make the
    first op calls (each asking the loader for the library)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    for k in ("METAL_OPS_FUSION", "TF_PLUGGABLE_DEVICE_LIBRARY_PATH"):
        env.pop(k, None)
    proc = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["errors"] == []
    assert res["init_calls"] == 1, "the plugin was registered exactly once"
    assert res["same_module"]
    expected_rows = metal_ops.hash_grid_size(3, 4, 10, 4, 1.5)
    for i, (kind, value) in res["out"].items():
        i = int(i)
        if kind == "enable":
            assert value is True
        elif kind == "zero_out":
            assert value == [i, 0, 0]
        else:
            assert value == expected_rows
