"""metal_ops.selftest (python -m metal_ops.selftest): its comparison, table,
report and exit status, run here with the CPU as the device under test
against the NumPy references of tests/reference, through the same code path
a Mac runs against the CPU op; and planted mismatches that must make it exit 1.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from metal_ops import _loader, selftest
from tests.reference import distortion_loss as distortion_ref
from tests.reference import ray_march as ray_march_ref
from tests.reference import sh_encode as sh_ref
from tests.reference import zero_out as zero_out_ref

if not os.path.exists(_loader.library_path()):
    pytest.skip(f"no op library at {_loader.library_path()} (run make)", allow_module_level=True)

NUMPY_REFERENCE_OPS = ("zero_out", "distortion_loss", "sh_encode", "ray_march")


def numpy_reference(case, repeat):
    """(outputs, gradients of sum(cotangent * output), seconds) from tests/reference."""
    x = case.inputs
    if case.op == "zero_out":
        outs = [zero_out_ref.zero_out(x[0], case.attrs["preserve_index"])]
        grads = lambda cots: [zero_out_ref.zero_out(cots[0], case.attrs["preserve_index"])]  # noqa: E731
    elif case.op == "distortion_loss":
        loss, dw, dt = distortion_ref.reference(x[0], x[1])
        outs = [loss]
        grads = lambda cots: [cots[0][:, None] * dw, cots[0][:, None] * dt]  # noqa: E731
    elif case.op == "sh_encode":
        degree = case.attrs["degree"]
        outs = [sh_ref.values(x[0], degree)]
        grads = lambda cots: [sh_ref.vjp(x[0], cots[0], degree)]  # noqa: E731
    elif case.op == "ray_march":
        outs = list(ray_march_ref.reference(*x[:5], seed=int(x[5]), **case.attrs))
        grads = None
    else:
        raise AssertionError(f"no NumPy reference for {case.op}")
    cots = selftest.cotangents(case, [o.shape for o in outs])
    return outs, (grads(cots) if case.differentiable else []), None


def small_cases():
    # Every case of these ops but the large timing ones (odd sizes and empty tensors stay).
    return [c for c in selftest.cases(set(NUMPY_REFERENCE_OPS)) if max(a.size for a in c.inputs) < 100_000]


def test_cases_cover_every_op_dtype_and_empty_tensors():
    import metal_ops

    all_cases = selftest.cases()
    ops = {c.op for c in all_cases}
    public_ops = {"zero_out", "volume_render", "distortion_loss", "robust_loss", "sh_encode", "hash_encode",
                  "fused_conv2d", "fused_mlp", "ray_march", "packed_volume_render"}
    assert ops == public_ops and all(hasattr(metal_ops, op) for op in ops)
    for op in ("robust_loss", "sh_encode", "hash_encode", "fused_mlp"):
        assert {"float32", "float16"} <= {c.dtype for c in all_cases if c.op == op}, op
    for op in ops:
        assert any(min(a.size for a in c.inputs) == 0 for c in all_cases if c.op == op), f"{op}: no empty case"


def test_cpu_against_numpy_reference_passes(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(selftest.SYNC_ENV, raising=False)
    report = tmp_path / "report.json"
    selected = small_cases()
    assert len(selected) >= 15
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
    env = dict(os.environ, PYTHONPATH=os.path.dirname(_loader.PACKAGE_DIR), CUDA_VISIBLE_DEVICES="")
    report = tmp_path / "report.json"
    r = subprocess.run([sys.executable, "-m", "metal_ops.selftest", "--json", str(report)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no GPU device" in r.stdout
    data = json.loads(report.read_text())
    assert data["passed"] is True and data["results"] == [] and data["environment"]["env"][selftest.SYNC_ENV] == "1"
