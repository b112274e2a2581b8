"""The NeRF sample under tf.distribute: MirroredStrategy (two logical CPUs) and
MultiWorkerMirroredStrategy (two local worker processes on loopback, TF_CONFIG).

Each strategy computes the all-reduced gradients of the global loss (hash
table included) on a fixed global ray batch and trains a few steps; a
single-replica trainer starting from the same weights, on the same global
batches, must get the same gradients and the same weights. Sample placement is
deterministic (--no-jitter) and the occupancy-grid update is seeded
statelessly, so the runs differ only by summation order. A checkpoint written
by two workers restores in one process, and one written by one process in
two workers, with the same renders.

The strategies run in subprocesses: logical devices and TF_CONFIG must be set
before TensorFlow initialises.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.local_workers import tf_configs, wait_all

pytestmark = pytest.mark.source_tree("examples/nerf")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 3
ADAM_LR = 2e-2  # the runs' learning rate (tiny_argv)


def tiny_argv(tmp, strategy):
    return ["--size", "16", "--n-train", "4", "--n-val", "1", "--n-test", "1", "--levels", "4",
            "--log2-table", "12", "--finest-res", "64", "--batch-rays", "256", "--samples", "8",
            "--grid-res", "16", "--grid-warmup", "0", "--grid-every", "2", "--candidates", "32",
            "--no-jitter", "--mlp-precision", "float32", "--quiet", "--ckpt-every", "0", "--eval-every", "0", "--max-minutes", "0",
            "--data-dir", os.path.join(tmp, "data"), "--out-dir", os.path.join(tmp, "runs"),
            "--strategy", strategy, "--name", f"dist_{strategy}", "--lr", str(ADAM_LR)]


def _run_steps(trainer):
    """Gradients on the step-0 batch, then STEPS training steps; returns arrays to compare."""
    idx = trainer.batch_indices(12345)
    grads = trainer.reduced_gradients(idx, use_grid=False)
    for _ in range(STEPS):
        trainer.train_one_step()
    return grads, [v.numpy() for v in trainer.model.trainable_variables], trainer.grid.mask.numpy()


def _single_replica(tmp, init_weights):
    from examples.nerf import config, train

    tr = train.Trainer(config.build_parser().parse_args(tiny_argv(tmp, "default")), log=lambda *a: None)
    for v, w in zip(tr.model.weights, init_weights):
        v.assign(w)
    return _run_steps(tr)


def _save(path, grads, weights, mask, names, extra=None):
    arrays = {f"g{i}": g for i, g in enumerate(grads)}
    arrays.update({f"w{i}": w for i, w in enumerate(weights)})
    arrays["mask"] = mask
    np.savez(path, **arrays)
    with open(path + ".json", "w") as f:
        json.dump(dict(names=names, **(extra or {})), f)


def worker_main(mode, tmp, out, index=0):
    """Subprocess entry: mode 'mirrored' (2 logical CPUs) or 'multiworker' (TF_CONFIG set)."""
    import tensorflow as tf

    if mode == "mirrored":
        # Both replicas and the single-replica reference on the CPU: on a
        # machine with a GPU the reference would otherwise run there, and
        # then the runs differ by more than summation order (Adam turns a
        # last-bit difference in a near-zero gradient into a visible step).
        tf.config.set_visible_devices([], "GPU")
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    else:
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    from examples.nerf import config, train

    tr = train.Trainer(config.build_parser().parse_args(tiny_argv(tmp, mode)), strategy=strategy,
                       log=lambda *a: None)
    assert tr.num_replicas == 2, tr.num_replicas
    init = [v.numpy() for v in tr.model.weights]
    grads, weights, mask = _run_steps(tr)
    # The ray count follows the sample budget; the step takes any count in its one trace.
    assert tr.timing_stats()["train_step_traces"] == 1, tr.timing_stats()
    if mode == "mirrored":
        # The optimizer updates each device's copy of the weights and of its own variables.
        for v in list(tr.model.trainable_variables) + list(tr.optimizer.variables):
            copies = [x.numpy() for x in strategy.experimental_local_results(v.value)]
            assert len(copies) == 2, v.path
            np.testing.assert_array_equal(copies[0], copies[1], err_msg=v.path)
    names = [v.path for v in tr.model.trainable_variables]
    devices = sorted({str(d) for d in strategy.extended.worker_devices})
    if index == 0:
        np.savez(out + ".init.npz", *init)
        _save(out, grads, weights, mask, names, dict(devices=devices))
    if mode == "mirrored":
        # The single-replica reference in the same process (same initial weights, same batches).
        g1, w1, m1 = _single_replica(tmp, init)
        _save(out[:-4] + ".single.npz", g1, w1, m1, names)


def _env(**extra):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("TF_CONFIG", None)
    env.update(extra)
    return env


def _two_workers(entry, *args, cpu_only=False):
    """Runs this file's `entry` as two local workers over loopback (TF_CONFIG); their outputs.
    `cpu_only`: the workers see no GPU (two workers sharing one GPU through NCCL, which the
    sample's strategy picks where they see one, is refused: "NCCL: invalid usage")."""
    hidden = dict(CUDA_VISIBLE_DEVICES="") if cpu_only else {}
    wait_all([subprocess.Popen([sys.executable, os.path.abspath(__file__), entry, *map(str, args), str(i)],
                               cwd=ROOT, env=_env(TF_CONFIG=tf_config, **hidden), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
              for i, tf_config in enumerate(tf_configs(2))])


def _load(path):
    z = np.load(path)
    with open(path + ".json") as f:
        meta = json.load(f)
    n = len(meta["names"])
    return [z[f"g{i}"] for i in range(n)], [z[f"w{i}"] for i in range(n)], z["mask"], meta


def _compare(dist, single):
    (g_d, w_d, m_d, meta), (g_s, w_s, m_s, _) = dist, single
    assert "hash_encoding/table" in meta["names"][0], meta["names"]
    table_grad = g_d[0]
    assert np.count_nonzero(table_grad) > 100  # the hash table really gets gradients
    for name, a, b in zip(meta["names"], g_d, g_s):
        scale = max(np.abs(b).max(), 1e-12)
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * scale, err_msg=f"gradient of {name}")
    for name, a, b in zip(meta["names"], w_d, w_s):
        # Adam divides by sqrt(v): a near-zero gradient whose last bits differ
        # with summation order moves its weight by up to a step (lr) either
        # way. All but a few elements agree tightly; those few stay within
        # the steps Adam can take.
        what = f"weights of {name} after {STEPS} steps"
        close = np.isclose(a, b, rtol=1e-3, atol=1e-4)
        assert close.mean() >= 0.999, f"{what}: {np.count_nonzero(~close)} of {close.size} elements differ"
        np.testing.assert_allclose(a, b, rtol=0, atol=2 * ADAM_LR * STEPS, err_msg=what)
    np.testing.assert_array_equal(m_d, m_s)  # the occupancy grid agrees too


def test_mirrored_strategy_two_logical_cpus(tmp_path):
    out = str(tmp_path / "mirrored.npz")
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "mirrored", str(tmp_path), out],
                       cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    dist = _load(out)
    assert len(dist[3]["devices"]) == 2
    _compare(dist, _load(out[:-4] + ".single.npz"))


def test_multiworker_mirrored_strategy_two_local_workers(tmp_path):
    out = str(tmp_path / "multiworker.npz")
    _two_workers("multiworker", tmp_path, out)
    dist = _load(out)
    # Single-replica reference from worker 0's (broadcast) initial weights, in this process.
    init_z = np.load(out + ".init.npz")
    init = [init_z[f"arr_{i}"] for i in range(len(init_z.files))]
    g, w, m = _single_replica(str(tmp_path), init)
    _compare(dist, (g, w, m, None))


def ckpt_argv(tmp, strategy, resume):
    """The run the checkpoint test writes and reads back (one name, so one checkpoint folder); the
    workers run their steps in calls of several (--steps-per-call: the loop of steps in the graph)."""
    return tiny_argv(tmp, strategy) + ["--name", "ckpt"] + (["--resume"] if resume else []) + \
        (["--steps-per-call", "4", "--grid-every", "4"] if strategy == "multiworker" else [])  # steps 1-2: one call


def checkpoint_worker_main(tmp, out, index, resume):
    """Subprocess entry 'ckpt': one of two workers of the run 'ckpt' that trains STEPS steps and
    saves a checkpoint, or (resume) restores the latest one; writes its step and its render of the
    first test view to out.<index>.npz. The strategy is the sample's (distribute.make_strategy)."""
    from examples.nerf import config, distribute, train

    args = config.build_parser().parse_args(ckpt_argv(tmp, "multiworker", resume))
    tr = train.Trainer(args, strategy=distribute.make_strategy("multiworker"), log=lambda *a: None)
    assert tr.num_replicas == 2, tr.num_replicas
    # The sample loads the library before the strategy runs TensorFlow's first op: XLA compiles its ops.
    assert tr.metal_ops._loader.xla_status() == (True, None), tr.metal_ops._loader.xla_status()
    if not resume:
        tr.train_until(STEPS)
        assert tr.timing_stats()["train_step_traces"] == 1 and len(tr._programs) == 1, tr.timing_stats()
        assert int(tr.step_var.numpy()) == STEPS == tr.call_end(1, STEPS)
        tr.manager.save(checkpoint_number=tr.step)
    np.savez(f"{out}.{index}.npz", step=tr.step, image=tr.render_image(tr.dataset.splits["test"][0]))


@pytest.mark.cpu_semantics("the renders are compared bit for bit: the workers and this process on the CPU")
def test_checkpoint_of_two_workers_restores_in_one_and_back(tmp_path):
    """Two workers train and save; one process restores that checkpoint and renders what they
    rendered, trains on and saves; two workers restore that one and render what it rendered.
    The workers and this process run on the CPU (where a GPU is visible too)."""
    from examples.nerf import config, train

    out = str(tmp_path / "render")
    _two_workers("ckpt", tmp_path, out, 0, cpu_only=True)
    written = [np.load(f"{out}.{i}.npz") for i in range(2)]
    assert [int(w["step"]) for w in written] == [STEPS, STEPS]
    np.testing.assert_array_equal(written[0]["image"], written[1]["image"])

    args = config.build_parser().parse_args(ckpt_argv(str(tmp_path), "default", True))
    one = train.Trainer(args, log=lambda *a: None)
    view = one.dataset.splits["test"][0]
    assert one.step == STEPS
    np.testing.assert_array_equal(one.render_image(view), written[0]["image"])
    for _ in range(2):
        one.train_one_step()
    one.manager.save(checkpoint_number=one.step)
    image = one.render_image(view)
    assert not np.array_equal(image, written[0]["image"])  # the steps changed the model

    _two_workers("ckpt", tmp_path, out + ".resumed", 1, cpu_only=True)
    for i in range(2):
        resumed = np.load(f"{out}.resumed.{i}.npz")
        assert int(resumed["step"]) == STEPS + 2, f"worker {i}"
        np.testing.assert_array_equal(resumed["image"], image, err_msg=f"worker {i}")


if __name__ == "__main__":
    if sys.argv[1] == "ckpt":
        checkpoint_worker_main(sys.argv[2], sys.argv[3], int(sys.argv[5]), bool(int(sys.argv[4])))
    else:
        worker_main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 0)
