"""The README's code runs as written: its example and its raw-op snippet, on the CPU."""
import os
import re

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
    assert len(losses) == 2 and np.all(np.isfinite(losses))
    assert [type(layer).__name__ for layer in model.layers] == ["HashEncoding", "FusedMLP"]


def test_raw_op_snippet_gives_a_gradient():
    names = run_block("Use")
    dx = names["dx"].numpy()
    assert dx.shape == (1024, 3) and np.all(np.isfinite(dx)) and np.any(dx != 0)
