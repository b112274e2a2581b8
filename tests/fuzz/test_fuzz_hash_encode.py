"""Fuzzing HashEncode: random grids (D, L, T, base, scale, F), interpolation,
out-of-range modes, coordinates with NaN / +-inf / denormals / far outside
[0, 1]; forward and gradients against tests/reference/hash_encode.py; then one
mutation at a time of a valid call, which must be rejected naming the argument."""
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

import metal_ops
from metal_ops.hash_encode import hash_grid_size
from tests.reference import hash_encode as ref
from tests.fuzz.strategies import SPECIAL_F32, expect_rejected, flush_denormals, fuzz_settings


@st.composite
def grid_config(draw):
    return dict(
        num_levels=draw(st.integers(1, 6)),
        log2_hashmap_size=draw(st.integers(2, 12)),
        base_resolution=draw(st.integers(1, 24)),
        per_level_scale=draw(st.sampled_from([1.0, 1.26, 1.3819, 1.5, 2.0, 2.5])),
        interpolation=draw(st.sampled_from(["linear", "smoothstep"])),
        out_of_range=draw(st.sampled_from(["clamp", "wrap", "zero"])),
    )


@st.composite
def hash_case(draw):
    cfg = draw(grid_config())
    d = draw(st.integers(1, 4))
    f = draw(st.sampled_from([1, 2, 4, 8]))
    n = draw(st.sampled_from([0, 1, 2, 7, 33, 200]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.uniform(-0.3, 1.3, size=(n, d)).astype(np.float32)
    if n and draw(st.booleans()):
        k = min(n, 4)
        x.reshape(-1)[rng.integers(0, x.size, size=k)] = rng.choice(np.asarray(SPECIAL_F32 + [1.0, 0.0, 1e4, -7.5], np.float32), size=k)
    grid = {k: cfg[k] for k in ("num_levels", "log2_hashmap_size", "base_resolution", "per_level_scale")}
    rows = hash_grid_size(d, **grid)
    table = rng.normal(size=(rows, f)).astype(np.float32)
    return x, table, cfg


def _wrap_extent(x, cfg):
    """max |finest scale * x| over finite coordinates in "wrap" mode, else 0."""
    finite = x[np.isfinite(x)]
    if cfg["out_of_range"] != "wrap" or finite.size == 0:
        return 0.0
    scale = cfg["base_resolution"] * cfg["per_level_scale"] ** (cfg["num_levels"] - 1)
    return float(np.max(np.abs(finite.astype(np.float64)))) * scale


def _no_wrap_overflow(x, cfg):
    """In "wrap" mode tiny-cuda-nn's cell index wraps through uint32; the
    reference casts through int64, which only agrees while scale * x fits."""
    return _wrap_extent(x, cfg) < 2**30


@fuzz_settings()
@given(case=hash_case(), graph=st.booleans())
def test_hash_encode_matches_reference(case, graph):
    x, table, cfg = case
    fn = tf.function(metal_ops.hash_encode) if graph else metal_ops.hash_encode
    out = fn(x, table, **cfg).numpy()
    assert out.shape == (x.shape[0], cfg["num_levels"] * table.shape[1])
    assert np.all(np.isfinite(out)), "finite table -> finite encoding, whatever the coordinates"
    if _no_wrap_overflow(x, cfg):
        np.testing.assert_allclose(out, ref.encode(flush_denormals(x), table, **cfg), rtol=1e-4, atol=1e-5)


@fuzz_settings(max_examples_fraction=0.5)
@given(case=hash_case())
def test_hash_encode_gradients_match_reference(case):
    x, table, cfg = case
    rng = np.random.default_rng(x.size)
    dy = rng.normal(size=(x.shape[0], cfg["num_levels"] * table.shape[1])).astype(np.float32)
    xt, tt = tf.constant(x), tf.constant(table)
    with tf.GradientTape() as tape:
        tape.watch([xt, tt])
        y = metal_ops.hash_encode(xt, tt, **cfg)
    gx, gt = tape.gradient(y, [xt, tt], output_gradients=tf.constant(dy))
    gx = np.zeros_like(x) if gx is None else gx.numpy()
    gt = np.zeros_like(table) if gt is None else tf.convert_to_tensor(gt).numpy()
    assert np.all(np.isfinite(gt)) and np.all(np.isfinite(gx))
    if _no_wrap_overflow(x, cfg):
        ref_t, ref_x = ref.encode_grads(flush_denormals(x), table, dy, **cfg)
        np.testing.assert_allclose(gt, ref_t, rtol=1e-4, atol=1e-4)
        # Input gradients are scale * (table differences): relative to their size.
        np.testing.assert_allclose(gx, ref_x, rtol=2e-3, atol=2e-3 * (1 + np.abs(ref_x).max(initial=0)))


# Regression: huge finite wrap-mode coordinates once hit an undefined
# float->int64 cast and, past FLT_MAX, inf - inf = NaN weights (hash_grid.h locate()).
@pytest.mark.parametrize("x", [3.4e38, -3.4e38])
def test_wrap_mode_huge_finite_coordinate(x):
    cfg = dict(num_levels=1, log2_hashmap_size=2, base_resolution=3, per_level_scale=1.0, out_of_range="wrap")
    xt = tf.constant([[x]], tf.float32)
    table = tf.constant([[0.64], [0.1], [-0.5], [0.36]], tf.float32)
    with tf.GradientTape() as tape:
        tape.watch([xt, table])
        y = metal_ops.hash_encode(xt, table, **cfg)
    g_table = tf.convert_to_tensor(tape.gradient(y, table))
    assert np.all(np.isfinite(y.numpy())) and np.all(np.isfinite(g_table.numpy()))


MUTATIONS = ["rows", "features", "dims_zero", "dims_five", "inputs_rank", "table_rank", "table_dtype", "levels",
             "hashmap_size", "base", "scale", "interpolation", "out_of_range"]


@fuzz_settings(max_examples_fraction=0.75)
@given(case=hash_case(), mutation=st.sampled_from(MUTATIONS), delta=st.sampled_from([-1, 1, 8, -8]))
def test_hash_encode_rejects_one_bad_argument(case, mutation, delta):
    x, table, cfg = case
    call = dict(cfg)
    if mutation == "rows":
        rows = max(0, table.shape[0] + delta)
        table = np.zeros((rows if rows != table.shape[0] else rows + 1, table.shape[1]), np.float32)
        names = ("table",)
    elif mutation == "features":
        table = np.zeros((table.shape[0], 3), np.float32)
        names = ("table",)
    elif mutation == "dims_zero":
        x = np.zeros((x.shape[0], 0), np.float32)
        names = ("inputs",)
    elif mutation == "dims_five":
        x = np.zeros((x.shape[0], 5), np.float32)
        names = ("inputs",)
    elif mutation == "inputs_rank":
        x = x.reshape(-1)
        names = ("inputs",)
    elif mutation == "table_rank":
        table = table.reshape(-1)
        names = ("table",)
    elif mutation == "table_dtype":
        table = table.astype(np.float64)
        names = ("table",)
    elif mutation == "levels":
        call["num_levels"] = [0, -1, 33, 2**31][abs(delta) % 4]
        names = ("num_levels",)
    elif mutation == "hashmap_size":
        call["log2_hashmap_size"] = [0, -3, 31, 64][abs(delta) % 4]
        names = ("log2_hashmap_size",)
    elif mutation == "base":
        call["base_resolution"] = [0, -1][abs(delta) % 2]
        names = ("base_resolution",)
    elif mutation == "scale":
        call["per_level_scale"] = [0.5, float("nan"), float("inf"), -2.0][abs(delta) % 4]
        names = ("per_level_scale",)
    elif mutation == "interpolation":
        call["interpolation"] = "cubic"
        names = ("interpolation",)
    else:
        call["out_of_range"] = "mirror"
        names = ("out_of_range",)
    expect_rejected(lambda: metal_ops.hash_encode(x, table, **call), *names)
