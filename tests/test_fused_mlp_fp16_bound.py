"""The float16 FusedMLP error bound (metal_ops._reference.fused_mlp.float16_bound,
docs/FUSED_MLP_GPU.md "float16 error bound"), checked against a NumPy model of
the float16 kernels: float16 inputs, weights, biases and dy; float32 products
and sums; every layer's output and every dL/dz rounded to float16, the
derivatives taken from the float16 outputs; dx, dW, db rounded to float16.

The model's results must lie within the bound on many random networks (every
width, depth 1 to 8, every activation pair, N = 0, relu pre-activations planted
at 0), the bound must not be vacuous (within a small factor of the errors the
model makes; kernel bugs of the kinds a float16 kernel can have are caught),
and the self-test's float16 FusedMLP comparison must pass the model's results
and fail planted errors. The real kernels are checked against the same bound
by tests/cuda/test_fused_mlp_cuda.py (CUDA) and tests/test_fused_mlp_metal_shim.py
(the Metal shaders through the MSL shim).
"""
import importlib
import math

import numpy as np
import pytest

from tests.reference import fused_mlp as ref

HIDDEN = ("none", "relu", "leaky_relu", "sigmoid", "softplus")
OUTPUT = HIDDEN + ("trunc_exp",)
F16, F32 = np.float16, np.float32


def _f32(a):
    return np.asarray(a).astype(F32)


def simulate(x, ws, bs, dy, act, out_act, alpha=ref.ALPHA, accumulate=F32, drop_row=False):
    """The float16 kernels in NumPy: (y, hidden, dx, dws, dbs), float16.
    `accumulate=F16` sums the batch's weight and bias gradients in float16 and
    `drop_row` leaves the last row out of them: kernel bugs the bound must catch."""
    depth = len(ws)
    names = [act] * (depth - 1) + [out_act]
    h = [np.asarray(x, F16)]
    for l in range(depth):
        z = _f32(h[l]) @ _f32(ws[l]) + _f32(bs[l])  # float32 accumulation, as the kernels
        h.append(_f32(ref.act(z, names[l], alpha)).astype(F16))
    g = (_f32(dy) * _f32(ref.dact_from_output(_f32(h[-1]), names[-1], alpha))).astype(F16)
    dws, dbs = [None] * depth, [None] * depth
    rows = slice(0, max(0, len(g) - 1)) if drop_row else slice(None)
    for l in range(depth - 1, -1, -1):
        a, gl = h[l][rows], g[rows]
        if accumulate == F16:
            dw, db = np.zeros((a.shape[1], gl.shape[1]), F16), np.zeros(gl.shape[1], F16)
            for n in range(len(a)):
                dw = (dw + np.outer(_f32(a[n]), _f32(gl[n]))).astype(F16)
                db = (db + _f32(gl[n])).astype(F16)
            dws[l], dbs[l] = dw, db
        else:
            dws[l] = (_f32(a).T @ _f32(gl)).astype(F16)
            dbs[l] = _f32(gl).sum(0, dtype=F32).astype(F16)
        t = _f32(g) @ _f32(ws[l]).T
        if l == 0:
            dx = t.astype(F16)
        else:
            g = (t * _f32(ref.dact_from_output(_f32(h[l]), names[l - 1], alpha))).astype(F16)
    return h[-1], np.stack(h[1:-1]), dx, dws, dbs


def random_net(rng, n, in_dim, width, hidden, out_dim, act, plant_zeros=True):
    """Glorot-uniform float16 network, x in [-1, 1], dy normal. With
    `plant_zeros`, the biases of half the units of every layer cancel row 0's
    pre-activation (to within float16 rounding of the bias): relu's kink."""
    dims = [in_dim] + [width] * hidden + [out_dim]
    ws, bs = [], []
    x = rng.uniform(-1, 1, (n, in_dim)).astype(F16)
    h = x.astype(np.float64)
    for l, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        lim = np.sqrt(6.0 / (a + b))
        ws.append(rng.uniform(-lim, lim, (a, b)).astype(F16))
        bias = rng.uniform(-0.1, 0.1, b)
        if plant_zeros and n:
            z0 = h[0] @ ws[-1].astype(np.float64)
            bias[::2] = -z0[::2]
        bs.append(bias.astype(F16))
        h = ref.act(h @ ws[-1].astype(np.float64) + bs[-1].astype(np.float64),
                    act if l < len(dims) - 2 else "none")
    dy = rng.standard_normal((n, out_dim)).astype(F16)
    return x, ws, bs, dy


def _networks():
    rng = np.random.default_rng(2024)
    nets = []
    for i in range(48):
        act = HIDDEN[i % len(HIDDEN)]
        out_act = OUTPUT[(i // len(HIDDEN)) % len(OUTPUT)]
        width = (16, 32, 64, 128)[i % 4]
        hidden = 1 + (i * 5) % 8
        in_dim = int(rng.integers(1, 129))
        out_dim = int(rng.integers(1, 129)) if i % 3 else int(rng.integers(1, 5))
        n = (0, 1, 37, 300, 700)[i % 5]
        nets.append((i, n, in_dim, width, hidden, out_dim, act, out_act))
    return nets


NETWORKS = _networks()


def _ratios(seed, n, in_dim, width, hidden, out_dim, act, out_act, plant_zeros=True, **sim):
    rng = np.random.default_rng(seed)
    x, ws, bs, dy = random_net(rng, n, in_dim, width, hidden, out_dim, act, plant_zeros)
    bound = ref.float16_bound(x, ws, bs, dy, act, out_act)
    y, hs, dx, dws, dbs = simulate(x, ws, bs, dy, act, out_act, **sim)
    return bound.ratios(y=y, hidden=hs, dx=dx, dws=dws, dbs=dbs)


@pytest.mark.parametrize("net", NETWORKS, ids=[f"{n[0]}-n{n[1]}-{n[2]}-{n[3]}x{n[4]}-{n[5]}-{n[6]}-{n[7]}"
                                               for n in NETWORKS])
def test_simulated_kernel_within_bound(net):
    ratios = _ratios(*net)
    bad = [(name, r) for name, r in ratios if not r <= 1.0]
    assert not bad, bad


def test_bound_is_not_vacuous():
    # Within a small factor of the errors the model makes (the bound's lam = 8
    # alone accounts for most of it): in every network the output nearest its
    # bound reaches a tenth of it; in most, half the outputs reach a twentieth.
    # The others are degenerate: a dead relu output (every error 0), or a deep
    # sigmoid net whose output barely varies over the rows, so that a unit
    # near 0 is near 0 for every row and may flip for all of them at once.
    worst, medians = [], []
    for net in NETWORKS:
        if net[1] >= 300:
            ratios = [r for _, r in _ratios(*net, plant_zeros=False)]
            worst.append(max(ratios))
            medians.append(float(np.median(ratios)))
    assert len(worst) >= 15
    assert min(worst) >= 0.1, worst
    assert np.mean(np.array(medians) >= 0.05) >= 0.8, medians
    assert np.median(medians) >= 0.1, medians


def test_relu_kinks_are_planted():
    # Row 0's planted pre-activations are within float16 rounding of 0, so the
    # model's relu masks differ from the float64 reference's there.
    rng = np.random.default_rng(5)
    x, ws, bs, dy = random_net(rng, 50, 16, 64, 3, 8, "relu")
    z = x.astype(np.float64) @ ws[0].astype(np.float64) + bs[0].astype(np.float64)
    assert np.abs(z[0, ::2]).max() < 1e-3 * np.abs(z).max()
    flips = 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        x, ws, bs, dy = random_net(rng, 20, 16, 64, 3, 8, "relu")
        zs_ref = x.astype(np.float64)
        h = x
        for l in range(3):
            z64 = zs_ref @ ws[l].astype(np.float64) + bs[l].astype(np.float64)
            z32 = _f32(h) @ _f32(ws[l]) + _f32(bs[l])
            flips += int(np.sum((z64[0] > 0) != (z32[0] > 0)))
            zs_ref, h = np.maximum(z64, 0), np.maximum(z32, 0).astype(F16)
    assert flips > 0


@pytest.mark.parametrize("where,key,layer", [("y", "y", 0), ("hidden 0", "hidden", 0), ("dx", "dx", 0),
                                              ("dW0", "dws", 0), ("db1", "dbs", 1)])
def test_planted_error_of_four_bounds_is_caught(where, key, layer):
    rng = np.random.default_rng(3)
    x, ws, bs, dy = random_net(rng, 200, 31, 64, 2, 3, "relu")
    bound = ref.float16_bound(x, ws, bs, dy, "relu", "none")
    y, hs, dx, dws, dbs = simulate(x, ws, bs, dy, "relu", "none")
    got = {"y": [y], "hidden": list(hs), "dx": [dx], "dws": list(dws), "dbs": list(dbs)}
    want = {"y": [bound.y], "hidden": bound.hidden, "dx": [bound.dx], "dws": bound.dws, "dbs": bound.dbs}
    bnd = {"y": [bound.y_bound], "hidden": bound.hidden_bound, "dx": [bound.dx_bound], "dws": bound.dws_bound,
           "dbs": bound.dbs_bound}
    # At the element with the largest bound: the reference plus 4 bounds; the rest as the model has it.
    k = np.unravel_index(np.argmax(bnd[key][layer]), bnd[key][layer].shape)
    planted = got[key][layer].astype(np.float64)
    planted[k] = want[key][layer][k] + 4 * bnd[key][layer][k]
    got[key][layer] = planted
    ratios = dict(bound.ratios(y=got["y"][0], hidden=got["hidden"], dx=got["dx"][0], dws=got["dws"], dbs=got["dbs"]))
    assert ratios[where] == pytest.approx(4.0)
    assert all(r <= 1.0 for name, r in ratios.items() if name != where)


@pytest.mark.parametrize("bug", ["float16 batch sums", "a row left out of dW and db"])
def test_kernel_bugs_are_caught(bug):
    net = (7, 700, 32, 64, 2, 16, "relu", "none")
    assert all(r <= 1.0 for _, r in _ratios(*net))
    sim = {"accumulate": F16} if bug == "float16 batch sums" else {"drop_row": True}
    ratios = dict(_ratios(*net, **sim))
    assert max(r for name, r in ratios.items() if name.startswith(("dW", "db"))) > 1.0, ratios


def test_empty_batch():
    rng = np.random.default_rng(0)
    x, ws, bs, dy = random_net(rng, 0, 5, 32, 2, 3, "relu")
    bound = ref.float16_bound(x, ws, bs, dy, "relu", "none")
    assert bound.y.shape == (0, 3) and bound.dx.shape == (0, 5)
    assert all(np.all(w == 0) for w in bound.dws + bound.dbs)
    y, hs, dx, dws, dbs = simulate(x, ws, bs, dy, "relu", "none")
    assert all(r == 0.0 for _, r in bound.ratios(y=y, hidden=hs, dx=dx, dws=dws, dbs=dbs))


def test_mismatches_are_infinite():
    want, bound = np.ones(3), np.full(3, 1e-3)
    assert ref.worst_ratio(np.ones(4), want, bound) == math.inf
    assert ref.worst_ratio(np.array([1.0, np.nan, 1.0]), want, bound) == math.inf
    assert ref.worst_ratio(np.array([1.0, np.inf, 1.0]), want, bound) == math.inf
    assert ref.worst_ratio(np.ones(3) + 5e-4, want, bound) == pytest.approx(0.5)


# ---- the self-test's float16 FusedMLP comparison ---------------------------------------------

def _selftest_case():
    from metal_ops import selftest

    case = next(c for c in selftest.cases({"fused_mlp"}) if c.dtype == "float16")
    layers = (len(case.inputs) - 1) // 2
    x, ws, bs = case.inputs[0], case.inputs[1:1 + layers], case.inputs[1 + layers:]
    (cot,) = selftest.cotangents(case, [(x.shape[0], ws[-1].shape[1])])
    y, _, dx, dws, dbs = simulate(x, ws, bs, cot.astype(F16), case.attrs["activation"],
                                  case.attrs["output_activation"])
    return selftest, case, [y], [dx] + dws + dbs


def test_selftest_float16_check_passes_the_model():
    selftest, case, values, grads = _selftest_case()
    assert case.check is importlib.import_module("metal_ops.fused_mlp").selftest_float16_check
    assert case.tolerance == 1.0
    error, note = case.check(case, values, grads)
    assert 0.0 < error <= case.tolerance, note
    assert note.endswith("(error / float16 bound)")


@pytest.mark.parametrize("which,name", [(0, "gradient of input 0"), (5, "gradient of input 5"),
                                        (None, "output 0")])
def test_selftest_float16_check_fails_a_planted_error(which, name):
    # One element off by 4 times its bound, the rest as the model has it.
    selftest, case, values, grads = _selftest_case()
    layers = (len(case.inputs) - 1) // 2
    (cot,) = selftest.cotangents(case, [values[0].shape])
    bound = ref.float16_bound(case.inputs[0], case.inputs[1:1 + layers], case.inputs[1 + layers:], cot.astype(F16),
                              case.attrs["activation"], case.attrs["output_activation"])
    wants = [(bound.y, bound.y_bound), (bound.dx, bound.dx_bound)] + list(zip(bound.dws, bound.dws_bound)) + list(
        zip(bound.dbs, bound.dbs_bound))
    want, bnd = wants[0 if which is None else which + 1]
    target = values if which is None else grads
    k = 0 if which is None else which
    bad = target[k].astype(np.float64)
    i = bad.size // 2
    bad.flat[i] = want.flat[i] + 4 * bnd.flat[i]
    target[k] = bad
    error, note = case.check(case, values, grads)
    assert error == pytest.approx(4.0) and note == f"largest in {name} (error / float16 bound)"


def test_selftest_row_of_a_float16_case(monkeypatch):
    # run_case takes the case's check, not the CPU reference (there is no float16 CPU kernel).
    selftest, case, values, grads = _selftest_case()
    monkeypatch.setattr(selftest, "execute", lambda c, d, repeat=1: (values, grads, ["/device:GPU:0"], 1e-3))

    def no_reference(case, repeat):
        raise AssertionError("the CPU reference was asked for")

    row = selftest.run_case(case, "/device:GPU:0", no_reference, 1)
    assert row["passed"] and row["tolerance"] == 1.0 and 0 < row["error"] <= 1.0, row
    assert row["reference_ms"] is None and "(error / float16 bound)" in row["note"]


def test_selftest_float16_check_missing_gradient():
    selftest, case, values, grads = _selftest_case()
    grads[3] = None
    assert case.check(case, values, grads) == (math.inf, "gradient of input 3: missing on the device")

