"""metal_ops.selftest (python -m metal_ops.selftest): its comparison, table,
report and exit status, run here with the CPU as the device under test
against the NumPy references (the package's, metal_ops._reference, which
tests/reference loads), through the same code path a Mac runs against the CPU
op; what it runs on a machine without a GPU; and planted mismatches that
must make it exit 1.
"""
import importlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import op_def_registry

from metal_ops import _loader, _reference, selftest

march = importlib.import_module("metal_ops.ray_march")  # the module (metal_ops.ray_march is the op)
from tests.child_env import child_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

if not os.path.exists(_loader.library_path()):
    pytest.skip(f"no op library at {_loader.library_path()} (run make)", allow_module_level=True)


def numpy_reference(case, repeat):
    """The self-test's comparison against the package's references (metal_ops._reference)."""
    if case.op not in _reference.OPS:
        raise AssertionError(f"no NumPy reference for {case.op}")
    return selftest.numpy_reference(case, repeat)


def registered_ops():
    """{name: OpDef} of every op the library registers, by the name of its generated
    wrapper (TensorFlow's snake case: metal_ops_sh_encode, zero_out), read from the
    module tf.load_op_library made of the library: a wrapper (with its
    _eager_fallback) per op, and the op's definition in TensorFlow's registry."""
    lib = _loader.load_library()
    wrappers = {n for n in dir(lib) if hasattr(lib, n + "_eager_fallback")}
    ops = {}
    for name in dir(lib):
        op_def = op_def_registry.get(name) if name[:1].isupper() else None
        snake = [w for w in wrappers if w.replace("_", "") == name.lower()]
        if op_def is not None and snake:
            ops[snake[0]] = op_def
    assert len(ops) == len(wrappers) >= 10, (sorted(ops), sorted(wrappers))
    return ops


def small_cases():
    # The cases of a machine without a GPU but the large timing ones (odd sizes and empty tensors stay).
    return [c for c in selftest.cases(cpu_only=True) if max(a.size for a in c.inputs) < 50_000]


def public_ops():
    """{name: OpDef} of the library's ops by their public names (MetalOpsSHEncode:
    metal_ops.sh_encode); Grad ops and the internal ones have no function of that
    name in metal_ops."""
    import metal_ops

    registered = {name.removeprefix("metal_ops_"): op_def for name, op_def in registered_ops().items()}
    public = {name: op_def for name, op_def in registered.items() if callable(getattr(metal_ops, name, None))}
    assert len(public) >= 10, sorted(registered)
    return public


def test_cases_cover_every_op_dtype_and_empty_tensors():
    all_cases = selftest.cases()
    ops = {c.op for c in all_cases}
    public = public_ops()
    # RayMarchStatic runs RayMarch's count and fill passes (the self-test's
    # ray_march cases) with a cut and padding between them, which
    # tests/test_ray_march_static.py checks; outside XLA it has no GPU kernel
    # of its own, and its self-test cases are [xla] cases (where XLA compiles).
    covered_by = {"ray_march_static": "ray_march"}
    assert set(covered_by.values()) <= ops
    assert ops <= set(public), f"self-test cases of no public op: {sorted(ops - set(public))}"
    public = {name: op_def for name, op_def in public.items() if name not in covered_by}
    assert set(public) <= ops, f"public ops without self-test cases: {sorted(set(public) - ops)}"
    half = tf.float16.as_datatype_enum
    for op, op_def in public.items():
        if any(half in a.allowed_values.list.type for a in op_def.attr if a.type == "type"):
            assert {"float32", "float16"} <= {c.dtype for c in all_cases if c.op == op}, op
    for op in ops:
        assert any(min(a.size for a in c.inputs) == 0 for c in all_cases if c.op == op), f"{op}: no empty case"


def test_without_a_gpu_every_op_has_cases_and_a_packaged_reference():
    """What a CPU-only installation checks: each public op's CPU kernel outside
    XLA (and under it where it has XLA kernels) against the package's reference
    of it, the one tests/reference/<op>.py loads for the op's own tests."""
    public = set(public_ops())
    cpu_cases = selftest.cases(cpu_only=True)
    plain = {c.op for c in cpu_cases if not c.label.endswith(selftest.XLA_LABEL)}
    assert public <= plain, f"ops without a CPU self-test case: {sorted(public - plain)}"
    assert {c.op for c in cpu_cases} == set(_reference.OPS) == public, sorted(set(_reference.OPS) ^ public)
    assert not [c for c in cpu_cases if c.dtype == "float16"]
    folder = os.path.dirname(_reference.__file__)
    for op in _reference.OPS:
        assert os.path.exists(os.path.join(folder, f"{op}.py")), op
        assert callable(_reference.references()[op]), op
        assert callable(importlib.import_module(f"tests.reference.{op}").selftest), op
    # Under XLA, each op with XLA kernels (docs/XLA.md).
    with_xla = {c.op for c in cpu_cases if c.label.endswith(selftest.XLA_LABEL)}
    assert with_xla == set(selftest.xla_ops()) & public, sorted(with_xla ^ set(selftest.xla_ops()))


def test_reference_modules_load_without_tensorflow():
    # The CUDA harness tests run without TensorFlow: tests/reference loads the
    # package's references from their folder, not through metal_ops/__init__.
    code = ("import importlib, sys; "
            f"mods = [importlib.import_module('tests.reference.' + op) for op in {_reference.OPS!r}]; "
            "assert 'tensorflow' not in sys.modules and 'metal_ops' not in sys.modules, sorted(sys.modules); "
            "assert all(callable(m.selftest) for m in mods)")
    env = child_env(pythonpath=[os.path.join(ROOT, "python"), ROOT])
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("bg", ["none", "shared", "per_ray"])
@pytest.mark.parametrize("eps", [0.0, 1e-2])
def test_renderer_reference_gradients_match_finite_differences(bg, eps):
    """The renderers' reference gradients the self-test uses (vjp, written out
    from the formulas) against the central finite differences of the float64
    forward the op tests use; packed rays of other lengths, one empty."""
    from tests.reference import packed_volume_render as packed, volume_render as dense
    from tests.reference.render_testing import assert_grads_close, cotangents, make_background

    background = make_background(bg, 5, np.float64)
    sigma, rgb, t = dense.make_rays(5, 7, seed=3, dtype=np.float64, surface=True)
    cot = cotangents(5, (5, 7), np.float64, True)
    assert dense.margin_ok(sigma, t, eps)
    assert_grads_close(dense.vjp(sigma, rgb, t, background, eps, cot),
                       dense.numeric_grads(sigma, rgb, t, background, eps, cot), np.float64, background)
    rays = packed.make_packed([3, 0, 6, 1, 5], seed=3, dtype=np.float64, surface=True)
    cot = cotangents(5, (15,), np.float64, True)
    assert packed.margin_ok(rays[0], *rays[2:], eps)
    assert_grads_close(packed.vjp(*rays, background, eps, cot), packed.numeric_grads(*rays, background, eps, cot),
                       np.float64, background)


def test_cpu_against_numpy_reference_passes(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(selftest.SYNC_ENV, raising=False)
    report = tmp_path / "report.json"
    selected = small_cases()
    assert {c.op for c in selected} == set(_reference.OPS)
    rc = selftest.main(["--json", str(report), "--repeat", "1"], devices=["/CPU:0"], reference=numpy_reference,
                       selected=selected)
    out = capsys.readouterr().out
    assert rc == 0, out
    assert os.environ[selftest.SYNC_ENV] == "1"
    data = json.loads(report.read_text())
    assert data["passed"] is True and len(data["results"]) == len(selected)
    assert all(r["passed"] and r["error"] <= r["tolerance"] and r["device_ms"] > 0 for r in data["results"])
    env = data["environment"]
    assert env["tensorflow"] and env["os"] and "backends" in env["metal_ops_build"]
    assert {"tensorflow_metal", "gpu_devices", "python"} <= set(env)
    header = next(line for line in out.splitlines() if line.startswith("op "))
    for column in ("case", "dtype", "device", "max error", "tolerance", "result", "device ms", "cpu ms"):
        assert column in header
    assert f"{len(selected)} of {len(selected)} cases passed" in out


def _perturbed(which):
    def reference(case, repeat):
        outs, grads, seconds = numpy_reference(case, repeat)
        target = outs if which == "output" else grads
        if target and target[0].size:
            target[0] = target[0].astype(np.float64).copy()
            target[0].flat[target[0].size // 2] += 0.5
        return outs, grads, seconds
    return reference


@pytest.mark.parametrize("which", ["output", "gradient"])
def test_planted_mismatch_exits_1(tmp_path, capsys, which):
    selected = [c for c in small_cases() if c.op == "distortion_loss" and min(a.size for a in c.inputs) > 0]
    report = tmp_path / "report.json"
    rc = selftest.main(["--json", str(report), "--repeat", "1"], devices=["/CPU:0"], reference=_perturbed(which),
                       selected=selected)
    out = capsys.readouterr().out
    assert rc == 1, out
    assert "FAIL" in out and "FAILED" in out
    rows = json.loads(report.read_text())["results"]
    assert rows and not any(r["passed"] for r in rows)
    # One element off by 0.5: the relative error |d| / max(1, |want|) is finite, above the tolerance
    # (and 0.5 at most, give or take the kernel's own rounding, which the tolerance bounds).
    assert all(r["tolerance"] < r["error"] <= 0.5 + r["tolerance"] for r in rows), [(r["case"], r["error"])
                                                                                  for r in rows]
    where = "output 0" if which == "output" else "gradient of input 0"
    assert all(r["note"] == f"largest in {where}" for r in rows), [r["note"] for r in rows]


def test_an_error_raised_by_the_op_fails_the_case(capsys):
    case = selftest.cases({"zero_out"})[0]
    bad = case._replace(call=lambda v: selftest_bad_index(v))
    rc = selftest.main(["--repeat", "1"], devices=["/CPU:0"], reference=numpy_reference, selected=[bad])
    out = capsys.readouterr().out
    assert rc == 1 and "InvalidArgumentError" in out


def selftest_bad_index(v):
    import metal_ops

    return metal_ops.zero_out(v, preserve_index=10**6)


@pytest.mark.parametrize("got,want,finite", [
    ([np.ones(3)], [np.ones(3)], True),
    ([np.ones(3)], [np.ones(4)], False),  # shape
    ([np.array([1.0, np.nan])], [np.array([1.0, 2.0])], False),  # NaN on one side
    ([np.array([1.0, np.nan])], [np.array([1.0, np.nan])], True),  # NaN on both
    ([None], [np.ones(2)], False),  # missing gradient
    ([np.ones((0, 3))], [np.ones((0, 3))], True),  # empty
    ([np.array([np.inf])], [np.array([np.inf])], True),
])
def test_max_error_mismatches(got, want, finite):
    error, note = selftest.max_error(got, want)
    assert np.isfinite(error) == finite, note


def test_max_error_is_relative_above_one():
    assert selftest.max_error([np.array([101.0, 0.5])], [np.array([100.0, 0.25])])[0] == pytest.approx(0.25)


@pytest.mark.skipif(sys.platform == "darwin", reason="a Mac's Metal GPU cannot be hidden from TensorFlow: "
                    "the self-test runs on it there (tests/test_metal_device.py, the macOS workflow)")
def test_module_runs_from_an_installed_package_without_a_gpu(tmp_path):
    # Outside the source tree, with only the package importable: no tests/ folder.
    with open(selftest.__file__, encoding="utf-8") as f:
        assert "tests" not in {line.split()[1].split(".")[0] for line in f if line.startswith(("import ", "from "))}
    # It checks the CPU kernels against the package's references (three ops here, for time).
    env = child_env(pythonpath=[os.path.dirname(_loader.PACKAGE_DIR)], CUDA_VISIBLE_DEVICES="")
    report = tmp_path / "report.json"
    r = subprocess.run([sys.executable, "-m", "metal_ops.selftest", "--json", str(report), "--repeat", "1",
                        "--ops", "zero_out,sh_encode,fused_mlp"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    backends = (_loader.read_build_info() or {}).get("backends", [])
    assert selftest.no_gpu_message(backends) in r.stdout and "tensorflow-metal" not in r.stdout, r.stdout
    # No warning of TensorFlow's about what the self-test does on purpose.
    assert "must be floating" not in r.stderr and "retracing" not in r.stderr, r.stderr
    data = json.loads(report.read_text())
    assert data["passed"] is True and data["environment"]["env"][selftest.SYNC_ENV] == "1"
    ops = {row["op"] for row in data["results"]}
    assert ops == {"zero_out", "sh_encode", "fused_mlp"} and all(row["device"] == "/CPU:0"
                                                                for row in data["results"])
    want = selftest.cases({"zero_out", "sh_encode", "fused_mlp"}, cpu_only=True)
    assert [row["case"] for row in data["results"]] == [c.label for c in want]


def test_without_a_gpu_a_wrong_kernel_fails():
    """The CPU-only run compares with the references, not with the CPU op itself."""
    case = selftest.cases({"trunc_exp"})[0]
    bad = case._replace(call=lambda x: metal_ops_trunc_exp_plus_ulp(x))
    rc = selftest.main(["--repeat", "1"], devices=[], selected=[bad])
    assert rc == 1


def metal_ops_trunc_exp_plus_ulp(x):
    import metal_ops

    return metal_ops.trunc_exp(x) * 1.001


def test_int32_is_expected_on_the_host_of_a_cuda_gpu_only():
    int32 = selftest.case("zero_out", "x", np.int32, [], None, 0.0)
    f32 = selftest.case("zero_out", "x", np.float32, [], None, 0.0)
    assert selftest.expected_device_type(int32, "GPU", platform="linux") == "CPU"
    assert selftest.expected_device_type(int32, "GPU", platform="darwin") == "GPU"  # a Metal kernel keeps int32
    assert selftest.expected_device_type(f32, "GPU", platform="linux") == "GPU"
    assert selftest.expected_device_type(int32, "CPU", platform="linux") == "CPU"


# ---- RayMarch: rounding-robust comparison ------------------------------------------------------

def _boundary_rays(dx, kind):
    """RayMarch inputs and attributes: rays along +x through a 4^3 grid on the
    unit box with steps of 1/8, where one step's midpoint falls exactly on the
    plane x = 1/4 between cells 0 and 1 (dx = 1), or one ulp before it (dx
    just below 1), as a GPU's different rounding would put it. Kind "count":
    cell 0 occupied, cell 1 empty, so that ray gets one sample more or fewer;
    kind "shift": cell 0 empty, cell 1 occupied, so its run starts half a step
    later. The other ray crosses occupied cells only (no flip)."""
    from metal_ops.ray_march import pack_occupancy

    grid = np.zeros((1, 4, 4, 4), bool)  # [c, z, y, x]
    if kind == "count":
        grid[0, 1, 1, 0] = True
        near0 = 0.0    # midpoints at x = 1/8, 1/4 (the boundary), ...
    else:
        grid[0, 1, 1, 1] = True
        near0 = 0.125  # the march starts at t = 1/8: its first midpoint is on the boundary
    grid[0, 3, 3, :] = True
    inputs = [np.array([[0.0625, 0.375, 0.375], [0.0625, 0.875, 0.875]], np.float32),
              np.array([[dx, 0, 0], [dx, 0, 0]], np.float32), np.array([near0, 0.0], np.float32),
              np.full(2, 10.0, np.float32), pack_occupancy(grid).numpy()]
    return inputs, dict(aabb=[0, 0, 0, 1, 1, 1], grid_resolution=4, step_size=0.125)


def _boundary_march(dx, kind):
    import metal_ops

    inputs, attrs = _boundary_rays(dx, kind)
    return [np.asarray(t) for t in metal_ops.ray_march(*inputs, **attrs)]


NUDGED = float(np.nextafter(np.float32(1), np.float32(0)))


@pytest.mark.parametrize("kind", ["count", "shift"])
def test_ray_march_comparison_tolerates_a_one_ulp_boundary_flip(kind):
    want = _boundary_march(1.0, kind)
    got = _boundary_march(NUDGED, kind)
    # The planted flip is real: ray 0's samples changed, ray 1's did not.
    counts_g, counts_w = got[4], want[4]
    if kind == "count":
        assert abs(int(counts_g[0]) - int(counts_w[0])) == 1
    else:
        assert counts_g[0] == counts_w[0] == 2
        assert np.max(np.abs(got[0][:2] - want[0][:2])) == pytest.approx(0.0625, rel=1e-3)
    assert counts_g[1] == counts_w[1] == 8
    # Element by element the results are incomparable; the ray-march comparison passes.
    assert selftest.max_error(got, want)[0] > 1e-5
    error, note = march.compare_ray_march(got, want, tolerance=1e-5)
    assert error <= 1e-5 and note == "1 rays flipped at cell boundaries", (error, note)


def test_ray_march_boundary_flip_passes_through_the_selftest(capsys):
    # The same flip as a self-test case: the "device" marches the nudged rays,
    # the reference gives the exact ones' samples.
    import metal_ops

    inputs, attrs = _boundary_rays(NUDGED, "count")
    case = selftest.case("ray_march", "one-ulp boundary", np.float32, inputs,
                         lambda *t: tuple(metal_ops.ray_march(*t, **attrs)), 1e-5, attrs, differentiable=False,
                         compare=march.compare_ray_march)
    want = _boundary_march(1.0, "count")
    rc = selftest.main(["--repeat", "1"], devices=["/CPU:0"], reference=lambda c, r: (want, [], None),
                       selected=[case])
    out = capsys.readouterr().out
    assert rc == 0, out


@pytest.fixture(scope="module")
def march_result():
    case = next(c for c in selftest.cases({"ray_march"}) if c.label.startswith("rays=301"))
    return [np.asarray(t) for t in case.call(*case.inputs)]


def _insert(result, ray, t0s, t1s):
    """`result` with samples [t0, t1] added to ray `ray` (its packing kept valid)."""
    t0, t1, idx, off, cnt = (a.copy() for a in result)
    at = off[ray] + cnt[ray]
    t0, t1 = np.insert(t0, at, t0s), np.insert(t1, at, t1s)
    idx = np.insert(idx, at, [ray] * len(t0s))
    cnt[ray] += len(t0s)
    order = np.argsort(t0[off[ray]:off[ray] + cnt[ray]], kind="stable")
    t0[off[ray]:off[ray] + cnt[ray]] = t0[off[ray]:off[ray] + cnt[ray]][order]
    t1[off[ray]:off[ray] + cnt[ray]] = t1[off[ray]:off[ray] + cnt[ray]][order]
    off = (np.cumsum(cnt) - cnt).astype(off.dtype)
    return [t0, t1, idx, off, cnt]


def _ray_with(result, at_least):
    cnt = result[4]
    return int(np.flatnonzero(cnt >= at_least)[0])


def _after_last(result, ray, steps):
    t1 = result[1][result[3][ray] + result[4][ray] - 1]
    step = 0.01
    return [t1 + 1 + k * step for k in range(steps)], [t1 + 1 + (k + 1) * step for k in range(steps)]


PLANTED = {
    "every sample moved": lambda r: [r[0] + 2e-4, r[1] + 2e-4] + r[2:],
    "one sample moved beyond tolerance": lambda r: [np.where(np.arange(r[0].size) == r[3][_ray_with(r, 3)],
                                                             r[0] - 1e-4, r[0]), r[1]] + r[2:],
    "three samples more on one ray": lambda r: _insert(r, _ray_with(r, 1), *_after_last(r, _ray_with(r, 1), 3)),
    "one sample more on 5% of the rays": lambda r: _many_inserted(r, 0.05),
    "a run shifted by five steps": lambda r: _shifted_run(r),
    "offsets off by one": lambda r: r[:3] + [r[3] + np.int32(1), r[4]],
    "a sample on the wrong ray": lambda r: r[:2] + [np.where(np.arange(r[2].size) == 0, r[2] + 1, r[2])] + r[3:],
    "t_end before t_start": lambda r: [r[1], r[0]] + r[2:],
}


def _many_inserted(result, fraction):
    rays = np.flatnonzero(result[4] >= 1)[:int(np.ceil(fraction * result[4].size)) + 1]
    for ray in rays:
        result = _insert(result, int(ray), *_after_last(result, int(ray), 1))
    return result


def _shifted_run(result):
    ray = _ray_with(result, 8)
    t0, t1 = result[0].copy(), result[1].copy()
    span = slice(result[3][ray], result[3][ray] + result[4][ray])
    shift = 5 * float(np.max(t1[span] - t0[span]))
    t0[span] += shift
    t1[span] += shift
    return [t0, t1] + result[2:]


@pytest.mark.parametrize("fault", sorted(PLANTED))
def test_ray_march_comparison_catches_planted_faults(march_result, fault):
    got = PLANTED[fault]([a.copy() for a in march_result])
    assert march.compare_ray_march(march_result, march_result, tolerance=1e-5) == (0.0, "")
    error, note = march.compare_ray_march(got, march_result, tolerance=1e-5)
    assert not error <= 1e-5, (fault, error, note)


# ---- RayMarchStatic: padding, layout, and the rays both sides kept --------------------------------

@pytest.fixture(scope="module")
def static_case():
    case = next(c for c in selftest.cases({"ray_march_static"}) if "jitter=True budget=1500" in c.label)
    assert case.label.endswith("[xla]")
    return case


def _static(case, **changes):
    import metal_ops

    attrs = dict(case.attrs, **changes)
    return [np.asarray(t) for t in metal_ops.ray_march_static(*case.inputs[:5], seed=case.inputs[5], **attrs)]


def test_ray_march_static_cases_run_under_xla_only():
    assert all(c.label.endswith("[xla]") for c in selftest.cases({"ray_march_static"}))
    assert selftest.xla_ops()["ray_march_static"] == ("MetalOpsRayMarchStatic",)


def test_ray_march_static_comparison_passes_itself_and_the_xla_result(static_case):
    want = _static(static_case)
    assert 0 < int(want[6]) < len(want[4]), "the budget cuts the rays"
    assert march.compare_ray_march_static(want, want, tolerance=1e-5) == (0.0, "")
    got = [np.asarray(t) for t in static_case.call(*static_case.inputs)]
    error, note = march.compare_ray_march_static(got, want, tolerance=1e-5)
    assert error <= 1e-5, note


def _cut_at(result, kept):
    """A RayMarchStatic result with only its first `kept` rays kept, padded as the op pads."""
    t0, t1, idx, off, cnt = (a.copy() for a in result[:5])
    n = int(off[kept])
    cnt[kept:], off[kept:] = 0, n
    t0[n:], t1[n:], idx[n:] = 0, 0, max(len(cnt) - 1, 0)
    return [t0, t1, idx, off, cnt, np.int32(n), np.int32(kept)]


def test_ray_march_static_comparison_tolerates_a_cut_one_ray_earlier(static_case):
    # A flip that adds a sample to a kept ray can leave the last kept ray out.
    want = _static(static_case)
    last = int(np.flatnonzero(want[4][:int(want[6])] > 0)[-1])  # the last kept ray with samples
    limit = max(1, int(np.ceil(march.RAY_MARCH_MAX_FLIPPED * len(want[4]))))  # rays the cut may move by
    assert 0 < int(want[6]) - last <= limit
    got = _cut_at(want, last)
    assert march._ray_march_static_problem(got, "cut", len(want[0])) is None
    error, note = march.compare_ray_march_static(got, want, tolerance=1e-5)
    assert error <= 1e-5 and "rays kept on the device" in note, (error, note)
    error, note = march.compare_ray_march_static(_cut_at(want, last - 2 * limit), want, tolerance=1e-5)
    assert not error <= 1e-5, note


STATIC_PLANTED = {
    "padding on the wrong ray": lambda r: r[:2] + [np.where(np.arange(r[2].size) >= int(r[5]), 0, r[2])] + r[3:],
    "padding not zero-length": lambda r: [np.where(np.arange(r[0].size) >= int(r[5]), 1.0, r[0]).astype(np.float32)]
    + r[1:],
    "a dropped ray with samples": lambda r: r[:4] + [np.where(np.arange(r[4].size) == int(r[6]), 1, r[4])] + r[5:],
    "num_samples off by one": lambda r: r[:5] + [np.int32(int(r[5]) - 1), r[6]],
    "a kept sample moved": lambda r: [np.where(np.arange(r[0].size) == 1, r[0] - 1e-3, r[0]), r[1]] + r[2:],
}


@pytest.mark.parametrize("fault", sorted(STATIC_PLANTED))
def test_ray_march_static_comparison_catches_planted_faults(static_case, fault):
    want = _static(static_case)
    got = STATIC_PLANTED[fault]([a.copy() for a in want])
    error, note = march.compare_ray_march_static(got, want, tolerance=1e-5)
    assert not error <= 1e-5, (fault, error, note)

def test_list_prints_the_cases_and_their_count(capsys):
    rc = selftest.main(["--list", "--ops", "trunc_exp"], devices=[])
    out = capsys.readouterr().out.splitlines()
    plain, xla = selftest.count(selftest.cases({"trunc_exp"}, cpu_only=True))
    assert rc == 0 and plain > 0
    assert len(out) == plain + xla + 1 and out[0].startswith("trunc_exp  ")
    assert out[-1] == f"metal_ops.selftest: {plain + xla} cases on each of /CPU:0: {plain} outside XLA, {xla} under XLA"


def test_an_unknown_op_is_an_error_naming_the_ops(capsys):
    with pytest.raises(SystemExit) as info:
        selftest.main(["--ops", "trunc_exp,no_such_op"], devices=[])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--ops: no op named no_such_op (the ops: " in err and "trunc_exp" in err


@pytest.mark.parametrize("system,backends,says,not_says", [
    ("darwin", ["cpu", "metal"], "Metal GPU device", "CUDA"),
    ("linux", ["cpu", "cuda"], "CUDA GPU", "Metal"),
    ("linux", ["cpu"], "no GPU kernels", "GPU device against"),
])
def test_help_and_messages_say_what_runs_on_the_platform(system, backends, says, not_says):
    text = selftest.what_it_tests(backends, system)
    assert says in text and not_says not in text and "/CPU:0" in text
    message = selftest.no_gpu_message(backends, system)
    assert ("pip install tensorflow-metal" in message) == (system == "darwin"), message


def test_a_case_with_integer_inputs_watches_only_its_floating_ones(monkeypatch):
    """Integer inputs (a layout, a seed) have no gradient: the self-test does
    not watch them (TensorFlow warns "the dtype of the watched tensor must be
    floating" for each one)."""
    watched = []
    watch = tf.GradientTape.watch
    monkeypatch.setattr(tf.GradientTape, "watch", lambda self, t: watched.extend(tf.nest.flatten(t)) or watch(self, t))
    case = next(c for c in selftest.cases({"packed_volume_render"}, cpu_only=True) if c.differentiable)
    _, grads, _, _ = selftest.execute(case, "/CPU:0")
    assert watched and all(t.dtype.is_floating for t in watched), [t.dtype for t in watched]
    kinds = [np.asarray(a).dtype.kind for a in case.inputs]
    assert "i" in kinds and all(g is None for g, k in zip(grads, kinds) if k != "f")
    assert len(grads) == len(kinds) and grads[0] is not None
