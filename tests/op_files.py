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


def folder(op):
    """kernels/<op>: the op's C++, CUDA, Metal and XLA files (docs/ARCHITECTURE.md, "The layout")."""
    return f"kernels/{op}"


def metal_planned_ops():
    """The ops whose work runs as a Metal plan: their folder holds
    <op>_plan.h (docs/ARCHITECTURE.md, "Metal plans")."""
    return [op for op in OPS if os.path.isfile(os.path.join(ROOT, folder(op), f"{op}_plan.h"))]
