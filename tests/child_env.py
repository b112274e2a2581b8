"""The environment of the Python processes tests start.

A child inherits the parent's whole environment. Where a test sets the
child's PYTHONPATH to particular folders, the folders the test process's own
PYTHONPATH brought in from outside this tree still follow them: that is where
TensorFlow lives when it was installed with `pip install --target` (the GPU run
of docs/BUILDING.md, "TensorFlow's CUDA build").
"""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TREE = {os.path.realpath(p) for p in (ROOT, os.path.join(ROOT, "python"))}


def inherited_pythonpath():
    """The folders of this process's PYTHONPATH that are not this tree's."""
    return [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if p and os.path.realpath(os.path.join(ROOT, p)) not in _TREE]


def child_env(pythonpath=None, **overrides):
    """os.environ with `overrides`; with `pythonpath` (a list of folders),
    PYTHONPATH is those folders followed by the inherited ones."""
    env = dict(os.environ, **overrides)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(p) for p in pythonpath] + inherited_pythonpath())
    return env
