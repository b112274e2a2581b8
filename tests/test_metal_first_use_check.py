"""The own queue's first-use check (kernels/cpu/metal_offload.h): the first
call of each pipeline in a process runs on the GPU and on the CPU kernel and
the two are compared; a GPU that computes differently (the model's
wrong_result fault: the last dispatch of each command buffer perturbs what it
wrote) turns Metal off for the op with one warning naming the op, and the call
keeps the CPU kernel's result. For every op with a Metal plan, in one child
process: its smallest float32 self-test case, forward and backward, first with
the fault, then with METAL_OPS_METAL=0 (the CPU kernels' bits)."""
import json
import os
import subprocess
import sys

import pytest

from tests.op_files import metal_planned_ops

pytestmark = pytest.mark.source_tree("the Metal shaders (the strict model of Metal)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIM_EXEC = os.path.join(ROOT, "build", "libmetal_ops_shim_exec.so")

CHILD = """
import ctypes, json, os, sys
import numpy as np
import metal_ops
from metal_ops import metal_path, selftest, _loader
lib = ctypes.CDLL(_loader.library_path())
def checks():
    out = (ctypes.c_uint64 * 4)()
    lib.metal_ops_metal_checks(out)
    return list(out)
def smallest(op):
    found = selftest.cases([op])
    size = lambda c: sum(getattr(a, "size", 1) for a in c.inputs)
    full = [c for c in found if all(getattr(a, "size", 1) > 0 for a in c.inputs)]
    return min([c for c in full if c.dtype == "float32"] or full, key=size)
report = {}
for op in sys.argv[1:]:
    case = smallest(op)
    os.environ["METAL_OPS_METAL"] = "shim"
    os.environ["METAL_OPS_MODEL_FAULTS"] = os.environ["FAULT"]
    c0, f0, p0 = checks(), metal_path.metal_fallbacks(), metal_path.metal_runs()[0]
    got = selftest.execute(case, "/CPU:0", repeat=1)
    c1, f1, p1 = checks(), metal_path.metal_fallbacks(), metal_path.metal_runs()[0]
    os.environ["METAL_OPS_METAL"] = "0"
    want = selftest.execute(case, "/CPU:0", repeat=1)
    same = all(np.asarray(a).tobytes() == np.asarray(b).tobytes()
               for a, b in zip(got[0] + got[1], want[0] + want[1]) if a is not None)
    report[op] = {"label": case.label, "same": same, "checks": c1[0] - c0[0], "turned_off": c1[1] - c0[1],
                  "fallbacks": f1 - f0, "plans": p1 - p0, "bytes": c1[2] - c0[2], "ns": c1[3] - c0[3]}
print("REPORT " + json.dumps(report))
print("MODEL " + json.dumps(metal_path.model_counters()))
"""


def run_ops(fault):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", METAL_OPS_METAL="shim", METAL_OPS_SHIM_EXEC_LIB=SHIM_EXEC,
               TF_CPP_MIN_LOG_LEVEL="0", FAULT=fault)
    env.pop("METAL_OPS_METAL_MIN_WORK", None)
    out = subprocess.run([sys.executable, "-c", CHILD] + metal_planned_ops(), env=env, capture_output=True,
                         text=True, cwd=ROOT, timeout=900)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    line = [x for x in out.stdout.splitlines() if x.startswith("REPORT ")][-1]
    return json.loads(line[len("REPORT "):]), out.stderr


@pytest.fixture(scope="module")
def wrong_results():
    if not os.path.exists(SHIM_EXEC):
        pytest.fail(f"{SHIM_EXEC} is missing: run `make metal-shim` (make test does)")
    return run_ops("wrong_result")


@pytest.mark.parametrize("op", metal_planned_ops())
def test_a_wrong_result_on_the_own_queue_ends_in_the_cpu_result_and_one_warning(wrong_results, op):
    report, stderr = wrong_results
    r = report[op]
    assert r["same"], (op, r)  # the CPU kernel's bits, forward and backward
    assert r["checks"] >= 1 and r["turned_off"] >= 1 and r["fallbacks"] == r["turned_off"], (op, r)
    warnings = [line for line in stderr.splitlines() if "differs from the CPU kernel's" in line]
    assert len(warnings) == sum(x["turned_off"] for x in report.values()), warnings
    ops = [w.split(" on Metal: ")[0].split()[-1] for w in warnings]
    assert len(ops) == len(set(ops)), ops  # one warning per op


def test_every_op_runs_unchecked_after_a_good_first_call():
    """Without a fault every first call agrees with the CPU kernel: nothing is
    turned off, and the checks' cost per op is what docs/METAL_COMPAT.md
    states (the check doubles the first call's host work, no later call's)."""
    report, stderr = run_ops("")
    for op, r in report.items():
        assert r["turned_off"] == 0 and r["fallbacks"] == 0 and r["checks"] >= 1 and r["plans"] > 0, (op, r)
    assert "differs from the CPU kernel's" not in stderr
    for op, r in report.items():
        print(f"| {op}: {r['label']} | {r['checks']} | {r['bytes']:,} | {r['ns'] / 1e6:.1f} |")
