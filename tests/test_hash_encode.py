"""HashEncode (CPU kernels): NumPy reference, gradients, determinism, bad inputs.

The reference is tests/reference/hash_encode.py (written from the published
formulas, not from kernels/common/hash_grid.h).
"""
import hashlib
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from metal_ops.hash_encode import hash_grid_offsets
from tests.reference import hash_encode as ref

pytestmark = pytest.mark.every_device

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A small grid with dense coarse levels and hashed fine levels for every D.
SMALL = dict(num_levels=5, log2_hashmap_size=9, base_resolution=3, per_level_scale=1.9)
STANDARD = dict(num_levels=16, log2_hashmap_size=19, base_resolution=16,
                per_level_scale=ref.per_level_scale_from(16, 2048, 16))
GRID_KEYS = ("num_levels", "log2_hashmap_size", "base_resolution", "per_level_scale")


def grid_args(cfg):
    return {k: cfg[k] for k in GRID_KEYS}


def make_points(n, d, seed, special=True):
    """Points in and out of [0, 1] with NaN / inf / exact-boundary rows."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-0.25, 1.25, (n, d)).astype(np.float32)
    if special and n >= 8:
        x[0] = 0.0
        x[1] = 1.0
        x[2, 0] = np.nan
        x[3, -1] = np.inf
        x[4, 0] = -np.inf
        x[5] = 0.5
        x[6] = rng.uniform(0, 1, d)
    return x


def make_table(d, f, cfg, seed, dtype=np.float32):
    rows = ref.table_rows(d, **grid_args(cfg))
    return np.random.default_rng(seed).normal(size=(rows, f)).astype(dtype)


def close(actual, expected, rel):
    actual = np.asarray(actual, np.float64)
    scale = max(1.0, float(np.max(np.abs(expected)))) if np.size(expected) else 1.0
    np.testing.assert_allclose(actual, expected, rtol=0, atol=rel * scale)


def encode_and_grads(x, table, cfg, interpolation, out_of_range, dy, mode):
    def run(x, table, dy):
        with tf.GradientTape() as tape:
            tape.watch([x, table])
            y = metal_ops.hash_encode(x, table, interpolation=interpolation, out_of_range=out_of_range,
                                      **grid_args(cfg))
        gx, gt = tape.gradient(y, [x, table], output_gradients=dy)
        return y, gt, gx

    fn = tf.function(run) if mode == "function" else run
    return fn(tf.constant(x), tf.constant(table), tf.constant(dy))


# ---- grid size --------------------------------------------------------------------------


def test_standard_configuration_has_12196240_parameters():
    rows = metal_ops.hash_grid_size(3, **STANDARD)
    assert rows * 2 == 12_196_240
    assert ref.table_rows(3, **STANDARD) == rows


@pytest.mark.parametrize("d", [1, 2, 3, 4])
@pytest.mark.parametrize("cfg", [SMALL, STANDARD, dict(num_levels=1, log2_hashmap_size=1, base_resolution=1,
                                                        per_level_scale=1.0),
                                 dict(num_levels=32, log2_hashmap_size=30, base_resolution=16, per_level_scale=1.5)])
def test_grid_offsets_match_reference(d, cfg):
    offsets = hash_grid_offsets(d, **cfg)
    levels = ref.levels(d, **cfg)
    assert list(offsets[:-1]) == [lv.offset for lv in levels]
    assert offsets[-1] == ref.table_rows(d, **cfg)


def test_row_count_is_64_bit():
    # 32 levels of 2^30 rows: more rows than 2^32 (sizes are int64 end to end).
    rows = metal_ops.hash_grid_size(3, num_levels=32, log2_hashmap_size=30, base_resolution=16, per_level_scale=1.5)
    assert rows > 2**32
    assert rows == ref.table_rows(3, num_levels=32, log2_hashmap_size=30, base_resolution=16, per_level_scale=1.5)


def test_hash_grid_size_inside_tf_function_is_a_python_int():
    @tf.function
    def f():
        return tf.constant(metal_ops.hash_grid_size(2, **SMALL))

    assert int(f()) == ref.table_rows(2, **SMALL)


def test_small_grid_has_dense_and_hashed_levels():
    for d in (1, 2, 3, 4):
        kinds = {lv.hashed for lv in ref.levels(d, **SMALL)}
        assert kinds == {False, True} or d == 1 and kinds == {False}
    # D = 1 never hashes at this size; a finer 1-D grid does.
    assert {lv.hashed for lv in ref.levels(1, num_levels=4, log2_hashmap_size=4, base_resolution=8,
                                       per_level_scale=2.0)} == {False, True}


# ---- forward + gradients against the reference ---------------------------------------------


@pytest.mark.parametrize("d", [1, 2, 3, 4])
@pytest.mark.parametrize("f", [1, 2, 4, 8])
@pytest.mark.parametrize("interpolation", ["linear", "smoothstep"])
@pytest.mark.parametrize("out_of_range", ["clamp", "wrap", "zero"])
def test_matches_reference(d, f, interpolation, out_of_range):
    cfg = SMALL if d > 1 else dict(num_levels=4, log2_hashmap_size=4, base_resolution=8, per_level_scale=2.0)
    n = 1000
    x = make_points(n, d, seed=d * 10 + f)
    table = make_table(d, f, cfg, seed=f)
    dy = np.random.default_rng(7).normal(size=(n, cfg["num_levels"] * f)).astype(np.float32)
    mode = "function" if (d + f) % 2 else "eager"
    y, gt, gx = encode_and_grads(x, table, cfg, interpolation, out_of_range, dy, mode)
    kw = dict(interpolation=interpolation, out_of_range=out_of_range, **grid_args(cfg))
    expected = ref.encode(x, table, **kw)
    exp_gt, exp_gx = ref.encode_grads(x, table, dy, **kw)
    assert y.shape == (n, cfg["num_levels"] * f) and y.dtype == tf.float32
    close(y, expected, 1e-5)
    close(gt, exp_gt, 1e-5)
    close(gx, exp_gx, 1e-5)
    # NaN / inf rows encode to zero with zero gradients in every mode.
    for row in (2, 3, 4):
        assert not np.any(y.numpy()[row]) and not np.any(gx.numpy()[row])


@pytest.mark.parametrize("n,mode", [(0, "eager"), (0, "function"), (1, "eager"), (1, "function"),
                                    (1000, "eager"), (1000, "function"), (2**17, "function")])
def test_point_counts(n, mode):
    cfg = dict(num_levels=8, log2_hashmap_size=15, base_resolution=16, per_level_scale=2.0) if n > 1000 else SMALL
    x = np.random.default_rng(n).uniform(0, 1, (n, 3)).astype(np.float32)
    table = make_table(3, 2, cfg, seed=3)
    dy = np.random.default_rng(1).normal(size=(n, cfg["num_levels"] * 2)).astype(np.float32)
    y, gt, gx = encode_and_grads(x, table, cfg, "linear", "clamp", dy, mode)
    assert y.shape == (n, cfg["num_levels"] * 2) and gt.shape == table.shape and gx.shape == (n, 3)
    expected = ref.encode(x, table, **grid_args(cfg))
    close(y, expected, 1e-5)
    exp_gt, exp_gx = ref.encode_grads(x, table, dy, **grid_args(cfg))
    close(gt, exp_gt, 1e-5)
    close(gx, exp_gx, 1e-5)
    if n == 0:
        assert not np.any(gt.numpy())


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("interpolation", ["linear", "smoothstep"])
def test_float16_table(d, interpolation):
    cfg = SMALL
    n = 1000
    x = make_points(n, d, seed=5)
    table = make_table(d, 4, cfg, seed=2, dtype=np.float16)
    dy = np.random.default_rng(3).normal(size=(n, cfg["num_levels"] * 4)).astype(np.float16)
    y, gt, gx = encode_and_grads(x, table, cfg, interpolation, "clamp", dy, "eager")
    assert y.dtype == tf.float16 and gt.dtype == tf.float16 and gx.dtype == tf.float32
    kw = dict(interpolation=interpolation, **grid_args(cfg))
    close(y, ref.encode(x, table.astype(np.float64), **kw), 2e-3)
    exp_gt, exp_gx = ref.encode_grads(x, table.astype(np.float64), dy.astype(np.float64), **kw)
    close(gt, exp_gt, 2e-3)  # float32 accumulation, one rounding to half at the end
    close(gx, exp_gx, 1e-4)


def test_float16_table_gradient_accumulates_in_float32():
    # 4096 points all on one vertex of a 1-level dense grid: the gradient of
    # that row is 4096 * 1e-3 * 1. A float16 accumulator stalls near 4 (its ulp
    # there is 2^-8 > 1e-3 / 2); float32 accumulation gives 4.096.
    cfg = dict(num_levels=1, log2_hashmap_size=4, base_resolution=2, per_level_scale=1.0)
    x = np.zeros((4096, 1), np.float32)  # pos = 0.5 * 0 + 0.5: corner 0 weight 0.5
    table = np.zeros((metal_ops.hash_grid_size(1, **cfg), 1), np.float16)
    dy = np.full((4096, 1), 2e-3, np.float16)
    _, gt, _ = encode_and_grads(x, table, cfg, "linear", "clamp", dy, "eager")
    assert gt.numpy()[0, 0] == np.float16(4096 * 0.5 * np.float32(np.float16(2e-3)))


# ---- out-of-range behaviour, spelled out ------------------------------------------------------


def test_out_of_range_modes():
    cfg = SMALL
    x = np.array([[0.3, 1.7], [-0.2, 0.4], [0.5, 0.5], [np.nan, 0.1]], np.float32)
    table = make_table(2, 2, cfg, seed=0)
    enc = {m: metal_ops.hash_encode(x, table, out_of_range=m, **cfg).numpy() for m in ("clamp", "wrap", "zero")}
    clipped = metal_ops.hash_encode(np.clip(x, 0, 1), table, **cfg).numpy()
    np.testing.assert_array_equal(enc["clamp"][:3], clipped[:3])
    assert not np.any(enc["zero"][:2]) and np.array_equal(enc["zero"][2], enc["clamp"][2])
    assert not np.array_equal(enc["wrap"][0], enc["clamp"][0])
    for m in enc:
        assert not np.any(enc[m][3])
    # Clamp: zero input gradient along the clamped coordinate only.
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = metal_ops.hash_encode(xt, table, out_of_range="clamp", **cfg)
    gx = tape.gradient(y, xt).numpy()
    assert gx[0, 1] == 0 and gx[0, 0] != 0 and gx[1, 0] == 0 and gx[1, 1] != 0
    assert not np.any(gx[3])


# ---- tf.test.compute_gradient -------------------------------------------------------------------


def interior_points(n, d, cfg, seed, margin=0.08):
    """Points whose position at every level is at least `margin` away from a
    cell face, so finite differences stay inside one cell."""
    rng = np.random.default_rng(seed)
    keep = []
    levels = ref.levels(d, **grid_args(cfg))
    while len(keep) < n:
        p = rng.uniform(0.05, 0.95, d).astype(np.float32)
        frac = [(float(lv.scale) * p + 0.5) % 1.0 for lv in levels]
        if all(np.all((fr > margin) & (fr < 1 - margin)) for fr in frac):
            keep.append(p)
    return np.stack(keep)


GRAD_CFG = dict(num_levels=3, log2_hashmap_size=6, base_resolution=2, per_level_scale=1.5)


@pytest.mark.parametrize("d", [1, 2, 3, 4])
@pytest.mark.parametrize("interpolation", ["linear", "smoothstep"])
def test_compute_gradient_table_and_inputs(d, interpolation):
    cfg = GRAD_CFG
    x = interior_points(4, d, cfg, seed=d)
    table = make_table(d, 2, cfg, seed=d)
    kw = dict(interpolation=interpolation, **cfg)
    theo, num = tf.test.compute_gradient(lambda t: metal_ops.hash_encode(x, t, **kw), [tf.constant(table)],
                                         delta=1e-2)
    np.testing.assert_allclose(theo[0], num[0], atol=2e-3)
    theo, num = tf.test.compute_gradient(lambda v: metal_ops.hash_encode(v, table, **kw), [tf.constant(x)],
                                         delta=1e-3)
    np.testing.assert_allclose(theo[0], num[0], atol=3e-2, rtol=2e-2)


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("interpolation", ["linear", "smoothstep"])
def test_second_derivative_for_eikonal_losses(d, interpolation):
    """d(input gradient)/d(table) and d(input gradient)/d(upstream): against
    compute_gradient and against the reference."""
    cfg = GRAD_CFG
    x = tf.constant(interior_points(5, d, cfg, seed=7))
    table = make_table(d, 2, cfg, seed=1)
    w = tf.constant(np.random.default_rng(2).normal(size=(5, cfg["num_levels"] * 2)).astype(np.float32))
    kw = dict(interpolation=interpolation, **cfg)

    def input_grad(t):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = metal_ops.hash_encode(x, t, **kw)
            s = tf.reduce_sum(y * w)
        return tape.gradient(s, x)

    theo, num = tf.test.compute_gradient(input_grad, [tf.constant(table)], delta=1e-2)
    np.testing.assert_allclose(theo[0], num[0], atol=5e-3 * max(1.0, np.abs(num[0]).max()))
    # Eikonal-style loss: gradient w.r.t. the table, against the reference.
    gg = np.random.default_rng(3).normal(size=(5, d)).astype(np.float32)
    tv = tf.Variable(table)
    with tf.GradientTape() as outer:
        gx = input_grad(tv)
        loss = tf.reduce_sum(gx * gg)
    got = outer.gradient(loss, tv)
    expected, _ = ref.encode_second_order(x.numpy(), table, w.numpy(), gg, **kw)
    close(got, expected, 1e-5)
    # And w.r.t. the upstream gradient (the MLP side of an eikonal loss).
    with tf.GradientTape() as outer:
        outer.watch(w)
        with tf.GradientTape() as tape:
            tape.watch(x)
            s = tf.reduce_sum(metal_ops.hash_encode(x, table, **kw) * w)
        loss = tf.reduce_sum(tape.gradient(s, x) * gg)
    _, expected_dw = ref.encode_second_order(x.numpy(), table, w.numpy(), gg, **kw)
    close(outer.gradient(loss, w), expected_dw, 1e-5)


def test_gradient_of_table_gradient_wrt_upstream_is_the_encoding():
    cfg = SMALL
    x = make_points(50, 3, seed=4, special=False)
    table = make_table(3, 2, cfg, seed=4)
    g = make_table(3, 2, cfg, seed=5)
    dy = tf.constant(np.ones((50, cfg["num_levels"] * 2), np.float32))
    with tf.GradientTape() as outer:
        outer.watch(dy)
        t = tf.constant(table)
        with tf.GradientTape() as tape:
            tape.watch(t)
            y = metal_ops.hash_encode(x, t, **cfg)
        gt = tape.gradient(y, t, output_gradients=dy)
        loss = tf.reduce_sum(gt * g)
    close(outer.gradient(loss, dy), ref.encode(x, g, **cfg), 1e-5)


# ---- gradient plumbing ---------------------------------------------------------------------------


def test_input_gradient_skipped_when_not_needed():
    cfg = SMALL
    x = tf.constant(make_points(100, 3, seed=1, special=False))
    t = tf.Variable(make_table(3, 2, cfg, seed=1))
    with tf.GradientTape() as tape:
        y = metal_ops.hash_encode(x, t, **cfg)
    (gt,) = tape.gradient(y, [t])
    expected, _ = ref.encode_grads(x.numpy(), t.numpy(), np.ones(y.shape), **cfg)
    close(gt, expected, 1e-5)
    # The backward op is told to skip the input gradient: it returns [0, D].
    lib = metal_ops.load_library()
    gt2, gx2 = lib.metal_ops_hash_encode_grad(tf.ones_like(y), x, t, compute_input_grad=False, **cfg)
    assert gx2.shape == (0, 3)
    close(gt2, gt.numpy(), 1e-6)  # a GPU's table gradient sums with float atomics: not bitwise
    gt3, gx3 = lib.metal_ops_hash_encode_grad(tf.ones_like(y), x, t, compute_table_grad=False, **cfg)
    assert gt3.shape == (0, 2) and gx3.shape == (100, 3)


def test_tf_gradients_in_graph_mode():
    cfg = SMALL
    xv = make_points(64, 2, seed=9)
    tv = make_table(2, 4, cfg, seed=9)
    with tf.Graph().as_default():
        x = tf.constant(xv)
        t = tf.constant(tv)
        y = metal_ops.hash_encode(x, t, **cfg)
        gx, gt = tf.gradients(tf.reduce_sum(y * y), [x, t])
        with tf.compat.v1.Session() as sess:
            yv, gxv, gtv = sess.run([y, gx, gt])
    exp_gt, exp_gx = ref.encode_grads(xv, tv, 2 * yv, **cfg)
    close(gtv, exp_gt, 1e-5)
    close(gxv, exp_gx, 1e-5)


def test_shape_function():
    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32), tf.TensorSpec([None, 4], tf.float32)])
    def f(x, t):
        y = metal_ops.hash_encode(x, t, **SMALL)
        assert y.shape.as_list() == [None, SMALL["num_levels"] * 4]
        return y

    f.get_concrete_function()
    rows = metal_ops.hash_grid_size(3, **SMALL)

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32), tf.TensorSpec([rows + 1, 4], tf.float32)])
    def g(x, t):
        return metal_ops.hash_encode(x, t, **SMALL)

    with pytest.raises(ValueError, match=f"table has {rows + 1} rows but the hash grid needs {rows}"):
        g.get_concrete_function()


# ---- determinism ------------------------------------------------------------------------------------

_DIGEST_SCRIPT = textwrap.dedent("""
    import hashlib, sys
    import tensorflow as tf
    threads, determinism = int(sys.argv[1]), sys.argv[2] == "1"
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    if determinism:
        tf.config.experimental.enable_op_determinism()
    import metal_ops
    from tests.reference import hash_encode as ref
    cfg, x, t, dy = ref.determinism_case()
    with tf.device("/CPU:0"):
        x, t, dy = tf.constant(x), tf.constant(t), tf.constant(dy)
        with tf.GradientTape() as tape:
            tape.watch([x, t])
            y = metal_ops.hash_encode(x, t, **cfg)
        gx, gt = tape.gradient(y, [x, t], output_gradients=dy)
    print(hashlib.sha256(gt.numpy().tobytes() + gx.numpy().tobytes()).hexdigest())
""")


def _digest(threads, determinism):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run([sys.executable, "-c", _DIGEST_SCRIPT, str(threads), determinism], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


@pytest.mark.cpu_semantics("the CPU's default table gradient is deterministic; a GPU's default uses float atomics")
def test_backward_is_bitwise_deterministic():
    cfg, x, t, dy = ref.determinism_case()
    x, t, dy = tf.constant(x), tf.constant(t), tf.constant(dy)
    lib = metal_ops.load_library()
    runs = [lib.metal_ops_hash_encode_grad(dy, x, t, **cfg) for _ in range(3)]
    for gt, gx in runs[1:]:
        assert gt.numpy().tobytes() == runs[0][0].numpy().tobytes()
        assert gx.numpy().tobytes() == runs[0][1].numpy().tobytes()
    # Same bits with 1 or 2 intra-op threads and under enable_op_determinism.
    digests = {_digest(1, "0"), _digest(2, "0"), _digest(2, "1")}
    assert len(digests) == 1, digests


def test_deterministic_backward_is_bitwise_reproducible():
    """deterministic=True: the same bits from run to run on every device."""
    cfg, x, t, dy = ref.determinism_case()
    x, t, dy = tf.constant(x), tf.constant(t), tf.constant(dy)
    lib = metal_ops.load_library()
    runs = [lib.metal_ops_hash_encode_grad(dy, x, t, deterministic=True, **cfg) for _ in range(3)]
    for gt, gx in runs[1:]:
        assert gt.numpy().tobytes() == runs[0][0].numpy().tobytes()
        assert gx.numpy().tobytes() == runs[0][1].numpy().tobytes()


_SECOND_ORDER_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import tensorflow as tf
    tf.config.experimental.enable_op_determinism()
    import metal_ops
    from tests.reference import hash_encode as ref
    cfg, x, t, dy = ref.determinism_case()
    gg = np.random.default_rng(1).normal(size=(x.shape[0], 3)).astype(np.float32)
    lib = metal_ops.load_library()
    with tf.device(sys.argv[1]):
        runs = [[v.numpy() for v in lib.metal_ops_hash_encode_grad_grad(gg, dy, x, t, **cfg)] for _ in range(3)]
    same = all(a.tobytes() == b.tobytes() for r in runs[1:] for a, b in zip(r, runs[0]))
    np.savez(sys.argv[2], grad_table=runs[0][0], grad_grad_encoded=runs[0][1], same=same)
""")


def test_second_order_under_op_determinism_is_bitwise_reproducible(tf_device, tmp_path):
    """MetalOpsHashEncodeGradGrad under enable_op_determinism (a GPU's
    fixed-point table sums): the same bits from run to run, and the values of
    the op without it (a GPU's float atomics) within rounding."""
    cfg, x, t, dy = ref.determinism_case()
    gg = np.random.default_rng(1).normal(size=(x.shape[0], 3)).astype(np.float32)
    out = tmp_path / "second_order.npz"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    run = subprocess.run([sys.executable, "-c", _SECOND_ORDER_SCRIPT, tf_device or "/CPU:0", str(out)], env=env,
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    got = np.load(out)
    assert bool(got["same"])
    gt, gdy = metal_ops.load_library().metal_ops_hash_encode_grad_grad(gg, dy, x, t, **cfg)
    close(got["grad_table"], gt.numpy(), 1e-5)
    close(got["grad_grad_encoded"], gdy.numpy(), 1e-6)


# ---- bad inputs -----------------------------------------------------------------------------------


def _encode(x, t, **over):
    kw = dict(SMALL)
    kw.update(over)
    return metal_ops.hash_encode(x, t, **kw)


GOOD_X = np.zeros((4, 3), np.float32)
GOOD_T = np.zeros((ref.table_rows(3, **SMALL), 2), np.float32)


@pytest.mark.parametrize("x,t,pattern", [
    (np.zeros((4,), np.float32), GOOD_T, r"inputs must be a rank-2 tensor"),
    (np.zeros((4, 3, 1), np.float32), GOOD_T, r"inputs must be a rank-2 tensor"),
    (np.zeros((4, 0), np.float32), GOOD_T, r"inputs must be \[N, D\] with D in \[1, 4\], got D = 0"),
    (np.zeros((4, 5), np.float32), GOOD_T, r"inputs must be \[N, D\] with D in \[1, 4\], got D = 5"),
    (GOOD_X, np.zeros((GOOD_T.shape[0],), np.float32), r"table must be a rank-2 tensor"),
    (GOOD_X, np.zeros((GOOD_T.shape[0], 3), np.float32), r"table must be \[P, F\] with F in \{1, 2, 4, 8\}, got F = 3"),
    (GOOD_X, np.zeros((GOOD_T.shape[0] - 8, 2), np.float32),
     rf"table has {GOOD_T.shape[0] - 8} rows but the hash grid needs {GOOD_T.shape[0]}"),
])
def test_bad_tensors(x, t, pattern):
    with pytest.raises(tf.errors.InvalidArgumentError, match=pattern):
        _encode(x, t)


@pytest.mark.parametrize("over,pattern", [
    (dict(base_resolution=0), "base_resolution"),
    (dict(base_resolution=-4), "base_resolution"),
    (dict(log2_hashmap_size=0), "log2_hashmap_size"),
    (dict(log2_hashmap_size=31), r"log2_hashmap_size must be in \[1, 30\], got 31"),
    (dict(per_level_scale=0.5), r"per_level_scale must be finite and >= 1, got 0.5"),
    (dict(per_level_scale=float("nan")), r"'per_level_scale' must be a number, got nan"),
    (dict(num_levels=0), "num_levels"),
    (dict(num_levels=33), r"num_levels must be in \[1, 32\], got 33"),
    (dict(base_resolution=1 << 20, per_level_scale=8.0), "resolution of the finest level"),
])
def test_bad_attributes(over, pattern):
    with pytest.raises(tf.errors.InvalidArgumentError, match=pattern):
        _encode(GOOD_X, GOOD_T, **over)


@pytest.mark.parametrize("over,pattern", [
    (dict(interpolation="cubic"), r"'interpolation' must be one of 'linear', 'smoothstep', got 'cubic'"),
    (dict(out_of_range="mirror"), r"'out_of_range' must be one of 'clamp', 'wrap', 'zero', got 'mirror'"),
])
def test_a_bad_choice_lists_the_choices(over, pattern):
    with pytest.raises(ValueError, match=pattern):
        _encode(GOOD_X, GOOD_T, **over)


def test_bad_gradient_shape():
    lib = metal_ops.load_library()
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"grad_encoded must have shape \[4, 10\]"):
        lib.metal_ops_hash_encode_grad(np.zeros((4, 9), np.float32), GOOD_X, GOOD_T, **SMALL)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"grad_grad_inputs must have shape \[4, 3\]"):
        lib.metal_ops_hash_encode_grad_grad(np.zeros((4, 2), np.float32), np.zeros((4, 10), np.float32), GOOD_X,
                                            GOOD_T, **SMALL)


def test_bad_grid_size_arguments():
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"input_dim must be in \[1, 4\], got 5"):
        metal_ops.hash_grid_size(5, **SMALL)
    with pytest.raises(tf.errors.InvalidArgumentError, match="per_level_scale"):
        metal_ops.hash_grid_size(3, num_levels=4, log2_hashmap_size=10, base_resolution=4, per_level_scale=0.9)


def test_integer_inputs_rejected():
    with pytest.raises(TypeError, match="hash_encode: 'inputs' must be float32, got int32"):
        metal_ops.hash_encode(np.zeros((4, 3), np.int32), GOOD_T, **SMALL)


def test_per_level_scale_helper_matches_instant_ngp():
    assert math.isclose(ref.per_level_scale_from(16, 2048, 16), math.exp(math.log(128) / 15))


def test_finest_resolution_gives_instant_ngp_s_per_level_scale():
    from metal_ops.hash_encode import per_level_scale_for
    assert math.isclose(per_level_scale_for(16, 16, 2048), math.exp(math.log(128) / 15))
    assert per_level_scale_for(1, 16, 2048) == 1.0
    grid = dict(num_levels=4, log2_hashmap_size=10, base_resolution=4)
    x = np.random.default_rng(8).uniform(0, 1, (30, 2)).astype(np.float32)
    rows = metal_ops.hash_grid_size(2, finest_resolution=32, **grid)
    assert rows == metal_ops.hash_grid_size(2, per_level_scale=per_level_scale_for(4, 4, 32), **grid)
    table = np.random.default_rng(9).normal(size=(rows, 2)).astype(np.float32)
    np.testing.assert_array_equal(
        metal_ops.hash_encode(x, table, finest_resolution=32, **grid).numpy(),
        metal_ops.hash_encode(x, table, per_level_scale=per_level_scale_for(4, 4, 32), **grid).numpy())
    # per_level_scale, when given, wins over finest_resolution
    with pytest.raises(tf.errors.InvalidArgumentError, match="per_level_scale must be finite and >= 1, got 0.5"):
        metal_ops.hash_encode(x, table, per_level_scale=0.5, finest_resolution=32, **grid)


def test_defaults_are_instant_ngp_s_nerf_grid():
    rows = metal_ops.hash_grid_size(1)
    assert rows == metal_ops.hash_grid_size(1, 16, 19, 16, math.exp(math.log(128) / 15))
    assert metal_ops.hash_grid_size(3) * 2 == 12_196_240
    x = np.random.default_rng(10).uniform(0, 1, (16, 1)).astype(np.float32)
    table = np.random.default_rng(11).normal(size=(rows, 2)).astype(np.float32)
    np.testing.assert_array_equal(
        metal_ops.hash_encode(x, table).numpy(),
        metal_ops.hash_encode(x, table, num_levels=16, log2_hashmap_size=19, base_resolution=16,
                              per_level_scale=math.exp(math.log(128) / 15)).numpy())
