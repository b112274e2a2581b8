"""The ops and their files, found by name: the op registry is ops/<op>_op.cc
(one REGISTER_OP file per op), and an op's other files carry its name
(docs/ARCHITECTURE.md, the layout). The tests that cover every op read their
lists from here, so adding an op edits no list."""
import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

OPS = sorted(os.path.basename(p)[: -len("_op.cc")] for p in glob.glob(os.path.join(ROOT, "ops", "*_op.cc")))


def named(folder, op):
    """Files in `folder` named <op>.<ext> or <op>_<anything>."""
    return sorted(f for f in os.listdir(os.path.join(ROOT, folder)) if re.match(rf"{re.escape(op)}[._]", f))


def metal_planned_ops():
    """The ops whose CPU kernels offer their work to a Metal plan: a file of
    kernels/cpu named by the op calls cpu::RunOnMetal (docs/ARCHITECTURE.md,
    "Metal plans")."""
    def calls_run_on_metal(name):
        with open(os.path.join(ROOT, "kernels", "cpu", name), encoding="utf-8") as f:
            return "RunOnMetal(" in f.read()

    return [op for op in OPS if any(calls_run_on_metal(name) for name in named("kernels/cpu", op))]
