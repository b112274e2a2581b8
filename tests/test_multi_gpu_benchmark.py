"""benchmarks/multi_gpu.py from a source checkout: the checkout's python/ goes first on the
path only where it holds a built library, so an unbuilt checkout runs the benchmark against an
installed metal_ops."""
import os
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.source_tree("benchmarks/")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _checkout(tmp, built):
    """A checkout with the benchmark and metal_ops' sources, built or not, and an installed metal_ops."""
    root = os.path.join(tmp, "checkout")
    os.makedirs(os.path.join(root, "benchmarks"))
    for name in ("multi_gpu.py", "timing.py"):
        shutil.copy(os.path.join(ROOT, "benchmarks", name), os.path.join(root, "benchmarks", name))
    os.makedirs(os.path.join(root, "python", "metal_ops"))
    open(os.path.join(root, "python", "metal_ops", "__init__.py"), "w").close()
    if built:
        open(os.path.join(root, "python", "metal_ops", "_build_info.json"), "w").close()
    site = os.path.join(tmp, "site-packages", "metal_ops")
    os.makedirs(site)
    open(os.path.join(site, "__init__.py"), "w").close()
    return root, os.path.dirname(site)


@pytest.mark.parametrize("built", [False, True])
def test_the_checkouts_python_goes_first_only_where_it_is_built(tmp_path, built):
    root, site = _checkout(str(tmp_path), built)
    code = ("import sys, benchmarks.multi_gpu as m, metal_ops; print(metal_ops.__file__); "
            "print(m.child_env()['PYTHONPATH'].split(':')[0])")
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": site})
    assert proc.returncode == 0, proc.stderr[-3000:]
    imported, child_first = proc.stdout.split()
    expected = os.path.join(root, "python") if built else site
    assert imported == os.path.join(expected, "metal_ops", "__init__.py")
    assert child_first == (os.path.join(root, "python") if built else root)


def test_an_unbuilt_checkout_without_an_installed_package_keeps_its_python_first(tmp_path):
    sys.path.insert(0, ROOT)
    try:
        from benchmarks import multi_gpu
    finally:
        sys.path.remove(ROOT)
    root, site = _checkout(str(tmp_path), built=False)
    assert multi_gpu.checkout_python(root, path=[root]) == os.path.join(root, "python")
    assert multi_gpu.checkout_python(root, path=[root, site]) is None
