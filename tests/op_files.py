"""The ops and their files, found by name: an op is its folder kernels/<op>/
with its REGISTER_OP file kernels/<op>/<op>_op.cc (the op shape of
docs/ADDING_AN_OP.md), and an op's other files carry its name. The tests that
cover every op read their lists from here, so adding an op edits no list."""
import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# Every op: a folder kernels/<op>/ holding kernels/<op>/<op>_op.cc.
OPS = sorted(op for op in (os.path.basename(p)[: -len("_op.cc")]
                           for p in glob.glob(os.path.join(ROOT, "kernels", "*", "*_op.cc")))
             if os.path.isfile(os.path.join(ROOT, "kernels", op, f"{op}_op.cc")))


def op_definition(op):
    """The op's REGISTER_OP file, relative to the repository root."""
    return f"kernels/{op}/{op}_op.cc"


def op_definitions():
    """Every REGISTER_OP file (absolute paths), sorted."""
    return sorted(os.path.join(ROOT, op_definition(op)) for op in OPS)


def named(folder, op):
    """Files in `folder` named <op>.<ext> or <op>_<anything>."""
    return sorted(f for f in os.listdir(os.path.join(ROOT, folder)) if re.match(rf"{re.escape(op)}[._]", f))


def folder(op):
    """kernels/<op>: the op's C++, CUDA, Metal and XLA files (docs/ARCHITECTURE.md, "The layout")."""
    return f"kernels/{op}"


def metal_planned_ops():
    """The ops whose work runs as a Metal plan: their folder holds a shader,
    whose plans <op>_metal.cc defines (an MPSGraph op has none)."""
    return [op for op in OPS if os.path.isfile(os.path.join(ROOT, folder(op), f"{op}.metal"))]
