"""What the own queue's first-use check costs the host (docs/METAL_COMPAT.md,
"The first-use check"), as the strict model of Metal runs it, and what it
does with a GPU that computes wrongly.

    .venv/bin/python -m tests.metal_shim.check_cost [--ops OP,...] [--fault wrong_result] [--json]

Runs with METAL_OPS_METAL=shim (the own-queue host path on the model, every
call sent to it): for each op its smallest float32 self-test case with
non-empty inputs, forward and backward twice (the first call of each op is
checked, the second is not), under the model faults of --fault; then the
same with METAL_OPS_METAL=0 (the CPU kernels), and whether the results are
the same bits. Prints one markdown table (checks, bytes of outputs kept for
the check, the checks' host time), or with --json one line per op.
"""
import argparse
import ctypes
import json
import os
import sys

from tests.metal_shim.host_cost import _setup  # the own queue on the model, every call sent to it

def smallest_case(op):
    """The op's smallest float32 self-test case whose inputs are all non-empty."""
    from metal_ops import selftest

    def size(c):
        return sum(getattr(a, "size", 1) for a in c.inputs)

    full = [c for c in selftest.cases([op]) if all(getattr(a, "size", 1) > 0 for a in c.inputs)]
    return min([c for c in full if c.dtype == "float32"] or full, key=size)


def measure(ops, fault):
    import numpy as np

    from metal_ops import _loader, metal_path, selftest

    lib = ctypes.CDLL(_loader.library_path())

    def checks():
        out = (ctypes.c_uint64 * 4)()
        lib.metal_ops_metal_checks(out)
        return list(out)

    report = {}
    for op in ops:
        case = smallest_case(op)
        os.environ["METAL_OPS_METAL"] = "shim"
        os.environ["METAL_OPS_MODEL_FAULTS"] = fault
        c0, f0, p0 = checks(), metal_path.metal_fallbacks(), metal_path.metal_runs()[0]
        got = selftest.execute(case, "/CPU:0", repeat=1)
        c1, f1, p1 = checks(), metal_path.metal_fallbacks(), metal_path.metal_runs()[0]
        os.environ["METAL_OPS_METAL"] = "0"
        os.environ.pop("METAL_OPS_MODEL_FAULTS", None)
        want = selftest.execute(case, "/CPU:0", repeat=1)
        same = all(np.asarray(a).tobytes() == np.asarray(b).tobytes()
                   for a, b in zip(got[0] + got[1], want[0] + want[1]) if a is not None)
        report[op] = {"label": case.label, "same": same, "checks": c1[0] - c0[0], "turned_off": c1[1] - c0[1],
                      "fallbacks": f1 - f0, "plans": p1 - p0, "bytes": c1[2] - c0[2], "ns": c1[3] - c0[3]}
    return report


def main(argv=None):
    _setup()
    from tests import op_files

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", default=",".join(op_files.metal_planned_ops()),
                        help="comma-separated op names (default: every op with Metal plans)")
    parser.add_argument("--fault", default="", help="METAL_OPS_MODEL_FAULTS for the Metal calls")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON line")
    args = parser.parse_args(argv)
    import metal_ops  # noqa: F401  (loads the op library)
    from metal_ops import metal_path
    from tests.metal_shim import model

    report = measure([op for op in args.ops.split(",") if op], args.fault)
    if args.json:
        print("REPORT " + json.dumps(report))
        print("MODEL " + json.dumps(model.counters()))
        return 0
    print("| op: case (float32, forward + backward) | first calls checked | bytes of outputs kept | "
          "host time of the checks (ms) |")
    print("| --- | --- | --- | --- |")
    for op, r in report.items():
        print(f"| {op}: {r['label']} | {r['checks']} | {r['bytes']:,} | {r['ns'] / 1e6:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
