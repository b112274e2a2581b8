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


def test_profile_summary_counts_gpu_time_once_and_sums_host_events(tmp_path):
    """benchmarks/profile_nerf_gpu.py's summary of a profile (the figures of `--parts profile`):
    overlapping kernels on two streams count once in the busy time, copies are counted apart,
    and the host's events are summed by name over its threads, per step."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    from benchmarks.profile_nerf_gpu import summarise_xspace

    space = xplane_pb2.XSpace()

    def plane(name, events):  # events: (line, name, start_us, duration_us)
        p = space.planes.add(name=name)
        names = sorted({e[1] for e in events})
        for i, n in enumerate(names, 1):
            p.event_metadata[i].id, p.event_metadata[i].name = i, n
        lines = {}
        for line, n, start, dur in events:
            if line not in lines:
                lines[line] = p.lines.add(name=line, timestamp_ns=0)
            lines[line].events.add(metadata_id=names.index(n) + 1, offset_ps=start * 10**6,
                                   duration_ps=dur * 10**6)

    plane("/device:GPU:0", [("Stream #1", "kernel_a", 0, 100), ("Stream #2", "kernel_b", 50, 100),
                            ("Stream #1", "MEMCPYDtoH", 300, 20), ("Stream #1", "kernel_a", 400, 100),
                            ("Launch Stats", "kernel_a", 0, 999)])
    plane("/host:CPU", [("thread 1", "ExecutorState::Process", 0, 600), ("thread 2", "ExecutorState::Process", 0, 200),
                        ("thread 1", "MetalOpsHashEncode", 10, 40)])
    path = tmp_path / "profile.xplane.pb"
    path.write_bytes(space.SerializeToString())
    summary = summarise_xspace(str(path), steps=2)
    assert summary["gpu"] == "/device:GPU:0"
    assert summary["busy_ms_per_step"] == pytest.approx((150 + 20 + 100) / 1000 / 2)
    assert summary["kernels_per_step"] == 1.5 and summary["d2h_copies_per_step"] == 0.5
    assert summary["top_kernels_ms_per_step"][0] == ("kernel_a", pytest.approx(0.1))
    assert summary["top_host_events_ms_per_step"] == [("ExecutorState::Process", pytest.approx(0.4)),
                                                      ("MetalOpsHashEncode", pytest.approx(0.02))]


def test_a_run_of_some_worker_groups_keeps_the_other_rows_with_their_commit():
    from benchmarks import multi_gpu

    old = [{"name": "a", "x": 1}, {"name": "b", "x": 2}, {"name": "c", "x": 3, "commit": "older"}]
    new = [{"name": "b", "x": 20}, {"name": "d", "x": 40}]
    assert multi_gpu.merge_rows(old, "abc", new, ["compiled"]) == [
        {"commit": "abc", "name": "a", "x": 1}, {"commit": "older", "name": "c", "x": 3}] + new
    assert multi_gpu.merge_rows(old, "abc", new, list(multi_gpu.WORKER_RUNS)) == new
    # the profile part's runs (no groups) replace the rows of their own names only
    assert multi_gpu.merge_rows(old, "abc", new) == multi_gpu.merge_rows(old, "abc", new, ["compiled"])
