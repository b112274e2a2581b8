"""The ops and their files, found by name: an op is a REGISTER_OP file,
kernels/<op>/<op>_op.cc (an op in the op shape of docs/ADDING_AN_OP.md) or
ops/<op>_op.cc (an op whose folder has the per-backend files of
docs/ARCHITECTURE.md, "The layout"), and an op's other files carry its name. The tests that cover every op read their
lists from here, so adding an op edits no list."""
import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _ops_in(pattern):
    return {os.path.basename(p)[: -len("_op.cc")] for p in glob.glob(os.path.join(ROOT, pattern))}


# The ops in the op shape (kernels/<op>/<op>_op.cc), and every op.
SHAPED_OPS = sorted(op for op in _ops_in("kernels/*/*_op.cc") if os.path.isdir(os.path.join(ROOT, "kernels", op)))
OPS = sorted(_ops_in("ops/*_op.cc") | set(SHAPED_OPS))


def is_shaped(op):
    """Whether `op` has the op shape of docs/ADDING_AN_OP.md."""
    return op in SHAPED_OPS


def op_definition(op):
    """The op's REGISTER_OP file, relative to the repository root."""
    return f"kernels/{op}/{op}_op.cc" if is_shaped(op) else f"ops/{op}_op.cc"


def op_definitions():
    """Every REGISTER_OP file (absolute paths), sorted."""
    return sorted(os.path.join(ROOT, op_definition(op)) for op in OPS) + sorted(
        p for p in glob.glob(os.path.join(ROOT, "ops", "*.cc")) if not p.endswith("_op.cc"))


def named(folder, op):
    """Files in `folder` named <op>.<ext> or <op>_<anything>."""
    return sorted(f for f in os.listdir(os.path.join(ROOT, folder)) if re.match(rf"{re.escape(op)}[._]", f))


def folder(op):
    """kernels/<op>: the op's C++, CUDA, Metal and XLA files (docs/ARCHITECTURE.md, "The layout")."""
    return f"kernels/{op}"


def metal_planned_ops():
    """The ops whose work runs as a Metal plan: their folder holds
    <op>_plan.h (docs/ARCHITECTURE.md, "Metal plans"), or, in the op shape,
    a shader, whose plans <op>_metal.cc defines (an MPSGraph op has none)."""
    return [op for op in OPS if os.path.isfile(os.path.join(ROOT, folder(op), f"{op}_plan.h"))
            or (is_shaped(op) and os.path.isfile(os.path.join(ROOT, folder(op), f"{op}.metal")))]
