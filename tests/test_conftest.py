"""tests/conftest.py's source_tree mark, as tools/check/wheel_test.sh meets it:
in a copy of the suite without the tree, a module marked
`pytestmark = pytest.mark.source_tree(reason)` is one skip with its reason and
is not imported; a test with the mark is a skip; the rest runs."""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

MARKED_MODULE = '''import pytest

import a_module_only_the_tree_has  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.source_tree("the tree's own module")]


def test_never_collected():
    raise AssertionError("a module marked source_tree was collected without the tree")
'''

MARKED_TEST = '''import pytest


@pytest.mark.source_tree("one file of the tree")
def test_reads_the_tree():
    raise AssertionError("a test marked source_tree ran without the tree")


def test_runs_everywhere():
    pass
'''


def test_source_tree_marks_skip_without_the_tree(tmp_path):
    suite = tmp_path / "tests"
    suite.mkdir()
    for name in ("conftest.py", "devices.py"):
        shutil.copy(os.path.join(HERE, name), suite / name)
    shutil.copy(os.path.join(os.path.dirname(HERE), "pytest.ini"), tmp_path / "pytest.ini")
    (suite / "__init__.py").write_text("")
    (suite / "test_marked_module.py").write_text(MARKED_MODULE)
    (suite / "test_marked_test.py").write_text(MARKED_TEST)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", "tests"], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "1 passed, 2 skipped" in r.stdout, r.stdout[-3000:]
    assert "needs the source tree (the tree's own module); this suite runs against an installed package" in r.stdout
    assert "needs the source tree (one file of the tree)" in r.stdout
