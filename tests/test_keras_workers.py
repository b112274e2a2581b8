"""examples/keras_workers: two workers (local processes over loopback, TF_CONFIG)
train the Keras model to the weights one process reaches on their batches
together; its arguments are checked before TensorFlow starts.

The runs are subprocesses on the CPU: TF_CONFIG must be set before TensorFlow
initialises, and XLA compiles collectives for GPUs only.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.local_workers import tf_configs, wait_all

pytestmark = pytest.mark.source_tree("examples/keras_workers")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# SGD: Adam's step is about the sign of a tiny gradient, which summation order can flip
ARGS = ["--steps", "12", "--steps-per-call", "4", "--points", "49152", "--optimizer", "sgd", "--lr", "0.05"]


def _env(**extra):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    env.pop("TF_CONFIG", None)
    env.update(extra)
    return env


def _start(args, **env):
    return subprocess.Popen([sys.executable, "-m", "examples.keras_workers.train", *args], cwd=ROOT,
                            env=_env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(procs):
    return [json.loads(so.strip().splitlines()[-1]) for so, _ in wait_all(procs)]


def test_two_workers_reach_one_process_weights_on_their_batches_together(tmp_path):
    one, two = str(tmp_path / "one.npz"), str(tmp_path / "two.npz")
    procs = [_start(ARGS + ["--batch", "2048", "--save", two], TF_CONFIG=tf_config) for tf_config in tf_configs(2)]
    procs.append(_start(ARGS + ["--batch", "4096", "--save", one]))
    *workers, single = _finish(procs)
    assert [w["replicas"] for w in workers] == [2, 2] and single["replicas"] == 1
    assert workers[0]["loss"] == workers[1]["loss"]  # the loss is all-reduced
    np.testing.assert_allclose(workers[0]["loss"], single["loss"], rtol=1e-5)
    assert single["loss"] < single["first_loss"]
    a, b = np.load(one), np.load(two)
    assert len(a.files) == 7, a.files  # the hash table and the MLP's three layers
    for name in a.files:
        scale = np.abs(a[name]).max()
        assert scale > 0, name
        np.testing.assert_allclose(b[name], a[name], rtol=1e-4, atol=1e-5 * scale, err_msg=name)


@pytest.mark.parametrize("args, message", [
    (["--steps", "10", "--steps-per-call", "4"], "--steps (10) must be a positive multiple of --steps-per-call (4)"),
    (["--steps", "8", "--steps-per-call", "0"], "--steps (8) must be a positive multiple of --steps-per-call (0)"),
    (["--batch", "0"], "--batch (0) and --lr (0.01) must be positive"),
    (["--lr", "nan"], "--batch (65536) and --lr (nan) must be positive"),
    (["--steps", "8", "--steps-per-call", "4", "--batch", "4096", "--points", "8192"],
     "--points (8192) must hold a call's batches of all replicas"),
])
def test_bad_arguments_stop_with_a_message_naming_them(args, message):
    _refused(args, message)


def test_compiled_calls_on_cpu_workers_stop_with_a_message():
    # before the strategy, which would wait for the other worker
    _refused(["--jit", "on"], "--jit on: XLA compiles collectives for GPUs only", TF_CONFIG=tf_configs(2)[0])


def _refused(args, message, **env):
    r = subprocess.run([sys.executable, "-m", "examples.keras_workers.train", *args], cwd=ROOT, env=_env(**env),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and message in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
