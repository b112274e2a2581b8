"""The benchmarks that run through TensorFlow on a GPU (benchmarks/*_gpu.py)
run here with --quick, on whatever device TensorFlow lists: their command
lines, set-up and contenders work before a GPU machine runs them in full."""
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.source_tree("benchmarks/")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("module,expect", [
    ("bench_xla_gpu", "FusedMLP+XLA"),
    ("bench_fused_mlp_gpu", "tf32"),
    ("bench_fused_conv2d_gpu", "tf32"),
])
def test_quick_run(module, expect):
    proc = subprocess.run([sys.executable, "-m", f"benchmarks.{module}", "--quick"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert expect in proc.stdout, out[-3000:]
