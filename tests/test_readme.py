"""The README's code runs as written: its example and its raw-op snippet, on the CPU."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

pytestmark = pytest.mark.source_tree("README.md")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def python_block(heading):
    """The first ```python block of the README section under `## <heading>`."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    section = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert section, f"README.md has no section '## {heading}'"
    block = re.search(r"^```python\n(.*?)^```", section.group(1), re.M | re.S)
    assert block, f"README.md's section '## {heading}' has no python block"
    return block.group(1)


def run_block(heading):
    names = {"__name__": "readme"}
    with tf.device("/CPU:0"):
        exec(compile(python_block(heading), f"README.md ## {heading}", "exec"), names)
    return names


def test_example_trains_the_model_it_shows():
    names = run_block("Example")
    model, points = names["model"], names["points"]
    with tf.device("/CPU:0"):
        prediction = model.predict(points[:8], verbose=0)
    assert prediction.shape == (8, 3)
    losses = model.history.history["loss"]
    assert len(losses) == 30 and np.all(np.isfinite(losses))
    assert losses[-1] < losses[0] / 10, losses  # it visibly learns: an order of magnitude in its run
    assert [type(layer).__name__ for layer in model.layers] == ["HashEncoding", "FusedMLP"]


def test_raw_op_snippet_gives_a_gradient():
    names = run_block("Use")
    dx = names["dx"].numpy()
    assert dx.shape == (1024, 3) and np.all(np.isfinite(dx)) and np.any(dx != 0)


def status_section():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    section = re.search(r"^## Status\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert section, "README.md has no section '## Status'"
    return " ".join(section.group(1).split())


def test_status_counts_the_self_test_cases_it_runs():
    """The self-test's case count on a machine without a GPU, as
    metal_ops.selftest makes its cases (every op's, and those of the ops with
    XLA kernels again under XLA)."""
    from metal_ops import selftest
    cases = selftest.cases(cpu_only=True)
    xla = sum(c.label.endswith(selftest.XLA_LABEL) for c in cases)
    assert xla and len(cases) > xla
    expected = (f"self-test runs {len(cases)} cases: {len(cases) - xla} of every op's CPU kernel, "
                f"and {xla} of them again under XLA")
    assert expected in status_section(), f"README.md's Status should say: {expected!r}"


def test_status_cites_its_figures_from_the_generated_tables():
    """The GPU counts stand in docs/PERFORMANCE.md's generated tables, whose
    sections the Status names."""
    from benchmarks import report
    titles = set(re.findall(r"^## (.*)$", report.render(), flags=re.M))
    named = re.findall(r'\("([^"]+)", "([^"]+)"\)', status_section())
    assert named and all(t in titles for pair in named for t in pair), (named, sorted(titles))


@pytest.mark.parametrize("doc", ["README.md", "docs/FUSED_CONV2D.md"])
def test_fusion_example_fuses_what_it_shows(doc):
    """The fusion example, run as a reader runs it (a new process, its own
    first lines before TensorFlow's import), prints a report with the fused op."""
    from tests.child_env import child_env
    from tests.test_doc_examples import blocks

    code = next(c for _, _, c in blocks(os.path.join(ROOT, doc)) if "metal_ops.fusion.enable()" in c)
    # The pass rewrites graphs placed on the CPU (python/metal_ops/fusion.py): on a GPU host
    # the example runs as on a machine without one.
    env = child_env(TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    env.pop("TF_ENABLE_ONEDNN_OPTS", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "FusionReport" in out.stdout and "1 MetalOpsFusedConv2D" in out.stdout, out.stdout
