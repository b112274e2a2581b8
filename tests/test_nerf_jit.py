"""The NeRF sample's --jit: the whole training step as one XLA program (docs/NERF.md, "The compiled step")."""
import json
import os

import numpy as np
import pytest

import metal_ops  # noqa: F401  (at collection: the library registers its XLA kernels before any compilation)
from tests.test_nerf_sample import _args

pytestmark = pytest.mark.source_tree("examples/nerf")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Small enough that a step's compilation and its steps fit a 2-core CPU: 256 rays of at most
# 64 samples (--march-steps 64), so --sample-budget 16384 holds every sample of every ray.
SMALL = ["--batch-rays", "256", "--march-steps", "64", "--grid-warmup", "2", "--grid-every", "2"]


def _trainer(tmp_path, name, *extra):
    from examples.nerf import train

    return train.Trainer(_args(tmp_path, "--name", name, *SMALL, *extra), log=lambda *a: None)


def _steps(tr, n, rays):
    """n training steps of `rays` rays each (the ray count's adaptation to the budget held fixed);
    returns [(loss, mse, samples kept, rays kept)]."""
    tr.rays_for_budget = lambda: rays
    out = []
    for _ in range(n):
        loss, mse = tr.train_one_step()
        counts = tr._pending_counts[1].numpy()
        out.append((float(loss), float(mse), int(counts[0]), int(counts[2])))
    tr.flush_counts()
    return out


def _assert_same_training(init, ref, jit, ref_steps, jit_steps, weights_rtol=0.03):
    """Same samples, the same losses up to float rounding, and weights whose difference is small
    against the training's change to them: Adam (epsilon 1e-15) turns a rounding difference in a
    near-zero gradient into a step of up to the learning rate, so entry-wise tolerances do not apply
    (the robust loss, bounded like L1, gives more near-zero sums of gradients in the hash table)."""
    assert [s[2:] for s in jit_steps] == [s[2:] for s in ref_steps]
    np.testing.assert_allclose([s[:2] for s in jit_steps], [s[:2] for s in ref_steps], rtol=1e-4)
    for w0, a, b in zip(init, ref.model.trainable_variables, jit.model.trainable_variables):
        moved = np.linalg.norm(a.numpy() - w0)
        assert moved > 0, a.path
        assert np.linalg.norm(b.numpy() - a.numpy()) <= weights_rtol * moved, a.path


@pytest.mark.cpu_semantics("the CPU's training is reproducible; a GPU's float atomics differ run to run")
@pytest.mark.parametrize("prune", [[], ["--no-prune"]], ids=["prune", "no-prune"])
def test_jit_step_trains_as_the_default_step(tmp_path, prune):
    """From one seed, --jit and the default step take the same samples (pruned by the density pass
    or not) and reach the same losses and weights, across the grid's warm-up and its updates,
    while every ray fits the budget."""
    ref = _trainer(tmp_path, "ref", "--sample-budget", "16384", *prune)
    jit = _trainer(tmp_path, "jit", "--jit", "--sample-budget", "16384", *prune)
    init = [v.numpy() for v in jit.model.trainable_variables]
    ref_steps, jit_steps = _steps(ref, 5, 256), _steps(jit, 5, 256)
    assert all(s[3] == 256 for s in jit_steps)  # every ray kept
    assert all(0 < s[2] < 16384 for s in jit_steps)  # and the rest of the budget padding
    _assert_same_training(init, ref, jit, ref_steps, jit_steps)
    assert list(jit._programs) == [(False, 512)] and jit._programs[(False, 512)].experimental_get_tracing_count() == 1  # 2 x 256
    assert jit.sample_stats()["padding_per_step"] == 16384 - np.mean([s[2] for s in jit_steps])


@pytest.mark.cpu_semantics("the CPU's training is reproducible; a GPU's float atomics differ run to run")
@pytest.mark.parametrize("flags", [["--loss", "robust"], ["--loss", "huber"], ["--mlp", "dense"], ["--adam", "keras"]],
                         ids=["robust", "huber", "dense", "keras-adam"])
def test_jit_step_compiles_each_loss_mlp_and_adam(tmp_path, flags):
    """Every stock TensorFlow op of these steps has an XLA kernel on the CPU (Keras's Huber, Dense
    layers and Adam update, the TF view encoding), and each trains as its default step."""
    ref = _trainer(tmp_path, "ref", "--sample-budget", "16384", *flags)
    jit = _trainer(tmp_path, "jit", "--jit", "--sample-budget", "16384", *flags)
    init = [v.numpy() for v in jit.model.trainable_variables]
    ref_steps, jit_steps = _steps(ref, 3, 256), _steps(jit, 3, 256)
    _assert_same_training(init, ref, jit, ref_steps, jit_steps, weights_rtol=0.1)


@pytest.mark.cpu_semantics("the CPU's training is reproducible; a GPU's float atomics differ run to run")
def test_jit_steps_per_call_compiles_the_loop_and_trains_as_one_step_a_call(tmp_path):
    """--jit --steps-per-call 4: every call is one XLA program (a loop of the call's steps in it),
    the shorter ones (the first step, the steps before a grid update) included, and the run takes
    the samples and reaches the losses and weights of one compiled step a call."""
    one = _trainer(tmp_path, "one", "--jit", "--sample-budget", "16384", "--grid-every", "4")
    four = _trainer(tmp_path, "four", "--jit", "--sample-budget", "16384", "--grid-every", "4", "--steps-per-call", "4")
    init = [v.numpy() for v in four.model.trainable_variables]
    for tr in (one, four):
        tr.rays_for_budget = lambda: 256
        losses = [float(tr.train_steps(limit=10)[0]) for _ in range(10) if tr.step < 10]
        assert tr.step == 10 and int(tr.step_var.numpy()) == 10
        tr.losses = losses
    # four: step 0 alone (the first call), 1 (the grid's warm-up ends at 2), 2-3 (the grid update at 4
    # ends the call), 4-7, 8-9 (the limit ends the call); each call's loss is its last step's
    assert len(four.losses) == 5
    np.testing.assert_allclose(four.losses, [one.losses[i] for i in (0, 1, 3, 7, 9)], rtol=1e-4)
    assert list(four._programs) == [(True, 512)]
    assert four._programs[(True, 512)].experimental_get_tracing_count() == 1
    assert four.sample_stats() == one.sample_stats()
    for w0, a, b in zip(init, one.model.trainable_variables, four.model.trainable_variables):
        assert np.linalg.norm(b.numpy() - a.numpy()) <= 0.03 * np.linalg.norm(a.numpy() - w0), a.path
    # The loop takes its 4 turns in every call (those past the call's steps inactive), so XLA knows
    # its trip count: a GPU runs it without waiting for the condition before each turn.
    tf = four.tf
    hlo = four._programs[(True, 512)].experimental_get_compiler_ir(
        tf.constant(0, tf.int64), tf.constant(256), tf.constant(1), four.occupancy_words.read_value())(
        stage="optimized_hlo")
    assert '"known_trip_count":{"n":"4"}' in hlo


def test_an_error_of_the_grid_compilation_thread_is_raised_where_training_waits():
    import threading

    from examples.nerf.grid_schedule import GridSchedule

    schedule = GridSchedule()
    thread = threading.Thread(target=lambda: None)
    thread.start()
    schedule._grid_ahead = (thread, [ValueError("no such device")])
    with pytest.raises(ValueError, match="no such device") as raised:
        schedule._wait_grid_ahead()
    assert "compiles the occupancy grid's update ahead" in str(raised.value.__notes__)
    assert schedule._grid_ahead is None


@pytest.mark.cpu_semantics("the CPU's training is reproducible; a GPU's float atomics differ run to run")
def test_jit_compiles_the_grid_update_ahead_and_trains_as_without_it(tmp_path):
    """--jit runs the grid update's program once with commit=False in a thread while the first
    step compiles: its first real update finds the program compiled, and the run (weights, grid,
    bitfield) is bit for bit the run without the compilation ahead. The thread starts once the
    step is traced, so that its own tracing overlaps the step's compilation."""
    flags = ["--jit", "--sample-budget", "16384", "--grid-every", "4", "--grid-warmup", "20", "--steps-per-call", "4"]
    ahead, plain = _trainer(tmp_path, "ahead", *flags), _trainer(tmp_path, "plain", *flags)
    plain._compile_grid_ahead = lambda step: None
    step_traces_at_start = []
    start = ahead._compile_grid_ahead

    def traced_then_start(step):
        step_traces_at_start.append(sum(f.experimental_get_tracing_count() for f in ahead._programs.values()))
        start(step)

    ahead._compile_grid_ahead = traced_then_start
    for v, w in zip(plain.model.trainable_variables, ahead.model.trainable_variables):
        v.assign(w)
    def grid_state(tr):
        return [v.numpy().view(np.uint8) for v in (tr.grid.density, tr.grid.mask, tr.occupancy_words)]

    for tr in (ahead, plain):
        tr.rays_for_budget = lambda: 256
        before = grid_state(tr)
        tr.train_steps(limit=10)  # the first call: step 0; the grid's first update is step 4's
        if tr is ahead:
            ahead._wait_grid_ahead()  # raises the thread's error, if any
            assert ahead._grid_fn.experimental_get_tracing_count() == 1
            assert step_traces_at_start == [1]
            for a, b in zip(grid_state(ahead), before):  # the update ran, and assigned nothing new
                np.testing.assert_array_equal(a, b)
        while tr.step < 10:
            tr.train_steps(limit=10)
    assert ahead._grid_ahead is None and ahead._grid_fn.experimental_get_tracing_count() == 1
    for a, b in [(ahead.grid.density, plain.grid.density), (ahead.grid.mask, plain.grid.mask),
                 (ahead.occupancy_words, plain.occupancy_words),
                 *zip(ahead.model.trainable_variables, plain.model.trainable_variables)]:
        np.testing.assert_array_equal(a.numpy().view(np.uint8), b.numpy().view(np.uint8), err_msg=a.name)


# A subprocess: creating MultiWorkerMirroredStrategy configures this process's collectives.
_ONE_WORKER = """
import json, pathlib, sys
import numpy as np
from examples.nerf import distribute, train
from tests.test_nerf_jit import SMALL, _trainer
from tests.test_nerf_sample import _args

tmp = pathlib.Path(sys.argv[1])
flags = ["--jit", "--sample-budget", "16384", "--grid-every", "4", "--steps-per-call", "4"]
ref = _trainer(tmp, "ref", *flags)
init = [v.numpy() for v in ref.model.trainable_variables]
strategy = distribute.make_strategy("multiworker")  # no TF_CONFIG: one worker, this process's CPU
worker = train.Trainer(_args(tmp, "--name", "worker", "--strategy", "multiworker", *SMALL, *flags),
                       strategy=strategy, log=lambda *a: None)
for v, w in zip(worker.model.trainable_variables, init):
    v.assign(w)
out = {}
for name, tr in (("ref", ref), ("worker", worker)):
    tr.rays_for_budget = lambda: 256
    losses = [float(tr.train_steps(limit=10)[0]) for _ in range(10) if tr.step < 10]
    out[name] = dict(losses=losses, stats=tr.sample_stats(), step=int(tr.step_var.numpy()),
                     blocks=tr._programs[(True, 512)].experimental_get_tracing_count(),
                     moved=[float(np.linalg.norm(v.numpy() - w)) for v, w in zip(tr.model.trainable_variables, init)])
out["apart"] = [float(np.linalg.norm(a.numpy() - b.numpy()))
                for a, b in zip(ref.model.trainable_variables, worker.model.trainable_variables)]
out["jit_workers"] = worker._jit_workers
print("RESULT", json.dumps(out))
"""


@pytest.mark.cpu_semantics("the CPU's training is reproducible; a GPU's float atomics differ run to run")
def test_jit_under_the_multiworker_strategy_runs_strategy_run_in_the_program(tmp_path):
    """--jit --strategy multiworker: each worker's calls are one XLA program with strategy.run in it
    (its replica's share, the figures summed in the gradients' all-reduce). One worker on the CPU
    (XLA compiles collectives for GPUs only, so two workers run on GPUs) trains as the default strategy."""
    import subprocess
    import sys

    # conftest.py gives the child this tree's PYTHONPATH; no TF_CONFIG: a worker of its own
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    run = subprocess.run([sys.executable, "-c", _ONE_WORKER, str(tmp_path)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert run.returncode == 0 and lines, run.stderr[-3000:]
    out = json.loads(lines[0].split(None, 1)[1])
    ref, worker = out["ref"], out["worker"]
    assert out["jit_workers"] and worker["step"] == ref["step"] == 10 and worker["blocks"] == 1
    np.testing.assert_allclose(worker["losses"], ref["losses"], rtol=1e-4)
    assert worker["stats"] == ref["stats"]
    for moved, apart in zip(ref["moved"], out["apart"]):
        assert moved > 0 and apart <= 0.03 * moved


@pytest.mark.cpu_semantics("the CPU's training is reproducible; a GPU's float atomics differ run to run")
def test_jit_step_masks_the_rays_the_budget_drops(tmp_path):
    """A budget too small for the batch: the rays after the last one whose pruned samples fit get
    none, and the step trains as the default step on the rays kept (loss and MSE means over them)."""
    jit = _trainer(tmp_path, "jit", "--jit", "--sample-budget", "2000")
    init = [v.numpy() for v in jit.model.trainable_variables]
    (jit_step,) = _steps(jit, 1, 256)
    kept = jit_step[3]
    assert 0 < kept < 256 and 2000 - 64 < jit_step[2] <= 2000, jit_step
    assert jit.sample_stats()["dropped_rays_per_step"] == 256 - kept
    # The default step on the first `kept` rays of the batch (the batch's prefix: same rays, same jitter).
    ref = _trainer(tmp_path, "ref", "--sample-budget", "2000")
    ref_steps = _steps(ref, 1, kept)
    _assert_same_training(init, ref, jit, ref_steps, [jit_step])


def test_jit_ray_count_overfills_the_budget_and_only_grows(tmp_path):
    """A call's ray counts are --batch-rays x 2^k (|k| <= 4): the smallest at least the count the
    budget asks for, and never fewer than the last call's."""
    from examples.nerf import train

    tr = train.Trainer.__new__(train.Trainer)
    tr.args, tr.num_replicas = _args(tmp_path, "--batch-rays", "256"), 1
    for want, rays in [(256, 256), (255, 256), (257, 512), (129, 256), (128, 128), (17, 32), (1, 16),
                       (4000, 4096), (4097, 4096)]:
        tr._jit_rays, tr.rays_for_budget = 0, lambda w=want: w
        assert tr.jit_rays() == rays, (want, rays)
    tr._jit_rays = 0
    for want, rays in [(100, 128), (40, 128), (129, 256), (600, 1024), (300, 1024), (1025, 2048)]:
        tr.rays_for_budget = lambda w=want: w
        assert tr.jit_rays() == rays, (want, rays)


def test_jit_pads_each_replicas_share_to_the_capacity(tmp_path):
    """A call's ray count is padded to the program's, at least 2 x --batch-rays: each replica's
    consecutive share of the call's rays, then its padding of -1; the batch drawn in the program
    is the first rays of the same draw (ray_batch)."""
    import tensorflow as tf

    from examples.nerf import train

    tr = train.Trainer.__new__(train.Trainer)
    tr.tf, tr.n_train_rays = tf, 1000
    tr.args, tr.num_replicas = _args(tmp_path, "--batch-rays", "16"), 2
    assert [tr.jit_capacity(r) for r in (2, 16, 32, 64)] == [32, 32, 32, 64]
    rows = tf.range(100, 132, dtype=tf.int64)
    out = tr._padded_rays(rows, 8, tr.jit_capacity(8)).numpy()
    assert out.shape == (32,) and out.dtype == np.int64
    np.testing.assert_array_equal(out[:4], np.arange(100, 104))
    np.testing.assert_array_equal(out[16:20], np.arange(104, 108))
    assert (out[4:16] == -1).all() and (out[20:] == -1).all()
    np.testing.assert_array_equal(tr._padded_rays(rows, 32, 32).numpy(), rows.numpy())
    batch = tr.batch_indices(3, 8)
    assert batch.shape == (8,) and batch.min() >= 0 and batch.max() < 1000
    drawn = tr.ray_batch(3, 8, 32).numpy()
    np.testing.assert_array_equal(np.concatenate([drawn[:4], drawn[16:20]]), batch)
    compiled = tf.function(lambda s, c: tr.ray_batch(s, c, 32), jit_compile=True, autograph=False)
    np.testing.assert_array_equal(compiled(tf.constant(3, tf.int64), tf.constant(8)).numpy(), drawn)
    assert not np.array_equal(tr.batch_indices(4, 8), batch)


@pytest.mark.cpu_semantics("the CPU's training is reproducible; a GPU's float atomics differ run to run")
def test_jit_pads_the_calls_of_fewer_rays_into_one_program(tmp_path):
    """Calls of 16 to 512 rays run the program of 2 x --batch-rays (512), padded: the padding rays get
    no samples, and a call trains as the default step on its own rays; 1024 rays compile their own."""
    jit = _trainer(tmp_path, "jit", "--jit", "--sample-budget", "65536")
    ref = _trainer(tmp_path, "ref", "--sample-budget", "65536")
    init = [v.numpy() for v in jit.model.trainable_variables]
    jit_steps, ref_steps = [], []
    for rays in (16, 64, 512, 1024):
        jit_steps += _steps(jit, 1, rays)
        ref_steps += _steps(ref, 1, rays)
        assert jit_steps[-1][3] == rays  # every ray kept, none of the padding
        assert [key for _, key in jit._programs] == ([512] if rays <= 512 else [512, 1024])
    _assert_same_training(init, ref, jit, ref_steps, jit_steps)
    assert jit._programs[(False, 512)].experimental_get_tracing_count() == 1


@pytest.mark.parametrize("flags, message", [
    (["--sampler", "fixed"], "--jit needs --model hash --sampler march"),
    (["--model", "baseline"], "--jit needs --model hash --sampler march"),
    (["--distortion", "0.01"], "packed_distortion_loss, which has no XLA kernel"),
    (["--no-prune", "--march-budget", "100000"], "--march-budget is the --jit step's march before pruning"),
    (["--strategy", "mirrored"], "--strategy mirrored is not compiled whole"),
])
def test_jit_refuses_what_it_does_not_compile(tmp_path, flags, message):
    from examples.nerf import train

    with pytest.raises(ValueError, match=message):
        train.Trainer(_args(tmp_path, "--name", "refused", "--jit", *flags), log=lambda *a: None)


def test_jit_refuses_ops_without_xla_kernels(tmp_path, monkeypatch):
    """Where XLA cannot compile one of the step's ops (a GPU without its CUDA handler, or the library
    loaded after TensorFlow's first op), --jit stops with a message naming the op."""
    from examples.nerf import train
    from metal_ops import _loader

    monkeypatch.setattr(_loader, "has_xla_kernels", lambda ops=None: False)
    monkeypatch.setattr(_loader, "xla_status", lambda: (True, None))
    monkeypatch.setattr(_loader, "xla_cuda_ops", lambda: frozenset({"MetalOpsHashEncode", "MetalOpsHashEncodeGrad"}))
    with pytest.raises(ValueError, match="no CUDA handler for XLA: MetalOpsFusedMLP, .*MetalOpsRayMarchStatic"):
        train.Trainer(_args(tmp_path, "--name", "refused", "--jit"), log=lambda *a: None)
    monkeypatch.setattr(_loader, "xla_status", lambda: (False, "the library loaded after TensorFlow's first op"))
    with pytest.raises(ValueError, match="loaded after TensorFlow's first op"):
        train.Trainer(_args(tmp_path, "--name", "refused", "--jit"), log=lambda *a: None)


@pytest.mark.cpu_semantics("the CPU's training is reproducible; a GPU's float atomics differ run to run")
def test_jit_training_psnr_rises_and_metrics_time_the_steps(tmp_path):
    """A short --jit run trains (held-out PSNR rises) and writes the first step's time
    (compilation included) and the steady step time to metrics.json."""
    tr = _trainer(tmp_path, "jitrun", "--jit", "--steps", "60", "--sample-budget", "8192", "--no-outputs",
                  "--ckpt-every", "0")
    before, _, _ = tr.evaluate("val")
    tr.fit(verbose=False)
    after, psnrs, renders = tr.evaluate("test")
    assert tr.step == 60 and tr.use_grid()
    assert after >= before + 3.0, (before, after)
    tr.write_outputs(psnrs, renders, {})
    with open(tmp_path / "runs" / "jitrun" / "metrics.json") as f:
        saved = json.load(f)
    assert saved["config"]["jit"] is True
    assert saved["first_step_s"] > 0 and saved["steady_step_ms"] > 0
    assert saved["first_step_s"] * 1000.0 > saved["steady_step_ms"]  # the first step compiles
    assert saved["train_step_traces"] == len(tr._programs) >= 1
    assert saved["padding_per_step"] >= 0 and saved["dropped_rays_per_step"] >= 0


@pytest.mark.parametrize("budget", [4000, 1500, 0])
def test_static_pruning_keeps_what_the_dynamic_pruning_keeps(budget):
    """The density pass's pruning in static shapes: the samples the dynamic pruning keeps, of the rays
    taken in order while they fit `budget`, then ray_march_static's padding (t_start = t_end = 0 on
    the last ray)."""
    import tensorflow as tf

    from examples.nerf import model as hmodel

    rng = np.random.default_rng(0)
    r, g = 96, 8
    o = np.concatenate([rng.uniform(-0.3, 0.3, (r, 2)), np.full((r, 1), -2.0)], 1).astype(np.float32)
    d = np.concatenate([rng.uniform(-0.2, 0.2, (r, 2)), np.ones((r, 1))], 1).astype(np.float32)
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    occupancy = metal_ops.pack_occupancy(tf.ones([1, g ** 3]))
    aabb = np.array([[-1, -1, -1], [1, 1, 1]], np.float32)
    args = (o, d, tf.fill([r], 0.0), tf.fill([r], 10.0), occupancy, aabb, g, 0.05)
    full = metal_ops.ray_march(*args, max_samples=64)
    march = metal_ops.ray_march_static(*args, sample_budget=3000, max_samples=64)
    assert 0 < int(march.num_rays) < r  # the march itself drops rays too
    n = int(march.num_samples)
    sigma_full = tf.constant(rng.uniform(0.0, 30.0, int(full.t_starts.shape[0])).astype(np.float32))
    sigma = tf.concat([sigma_full[:n], tf.fill([3000 - n], 5.0)], 0)  # padding: any density
    dynamic = hmodel._before_termination(full, sigma_full, 1e-4, r)
    static = hmodel._before_termination_static(march, sigma, 1e-4, r, budget)
    counts = dynamic.ray_counts.numpy()
    assert counts.sum() < 0.7 * int(full.t_starts.shape[0])  # the pruning drops samples
    fits = (np.cumsum(counts) <= budget) & (np.arange(r) < int(march.num_rays))
    kept_rays, kept = int(fits.sum()), int(counts[fits].sum())
    assert int(static.num_rays) == kept_rays and int(static.num_samples) == kept
    kept_counts = np.where(fits, counts, 0)
    np.testing.assert_array_equal(static.ray_counts.numpy(), kept_counts)
    np.testing.assert_array_equal(static.ray_offsets.numpy(), np.cumsum(kept_counts) - kept_counts)
    for name in ("t_starts", "t_ends", "ray_indices"):
        np.testing.assert_array_equal(getattr(static, name).numpy()[:kept], getattr(dynamic, name).numpy()[:kept])
    assert static.t_starts.shape == (budget,)
    np.testing.assert_array_equal(static.t_starts.numpy()[kept:], 0.0)
    np.testing.assert_array_equal(static.t_ends.numpy()[kept:], 0.0)
    np.testing.assert_array_equal(static.ray_indices.numpy()[kept:], r - 1)


@pytest.mark.parametrize("n", [0, 1, 3, 4, 5, 17, 64, 1000])
@pytest.mark.parametrize("exclusive", [False, True])
def test_prefix_sum_is_the_cumulative_sum(n, exclusive):
    """sampling.prefix_sum (the --jit step's scans) against NumPy's cumulative sum, exactly: integers,
    and floats whose partial sums are exact (multiples of 2^-4), eager and compiled by XLA."""
    import tensorflow as tf

    from examples.nerf import sampling

    rng = np.random.default_rng(n)
    for x in (rng.integers(-50, 50, n).astype(np.int32), (rng.integers(0, 4096, n) / 16).astype(np.float32)):
        want = np.cumsum(x, dtype=x.dtype) - (x if exclusive else 0)
        compiled = tf.function(lambda t: sampling.prefix_sum(t, exclusive=exclusive), jit_compile=True)
        for got in (sampling.prefix_sum(tf.constant(x), exclusive=exclusive), compiled(tf.constant(x))):
            assert got.dtype == x.dtype
            np.testing.assert_array_equal(got.numpy(), want)
    with pytest.raises(ValueError, match="static length"):
        tf.function(sampling.prefix_sum).get_concrete_function(tf.TensorSpec([None], tf.int32))


def test_the_sample_sets_its_xla_flags_unless_told():
    """XLA_FLAGS gets the fusion autotuner off with TensorFlow 2.21 (XLA refuses a flag it does not
    know: other versions keep XLA_FLAGS as it is) and LLVM's level 1 where an NVIDIA GPU is
    visible; a flag the user set is kept."""
    from examples.nerf import environment

    off, o1 = "--xla_gpu_experimental_enable_fusion_autotuner=false", "--xla_backend_optimization_level=1"
    flags = environment.xla_flags_for_the_sample
    assert flags("", (2, 21), False) == off
    assert flags("", (2, 21), True) == f"{off} {o1}"
    assert flags("--xla_dump_to=/tmp/x", (2, 21), True) == f"--xla_dump_to=/tmp/x {off} {o1}"
    for kept in (off.replace("false", "true"), off.replace("=false", "")):
        assert flags(kept, (2, 21), False) == kept
    assert flags("--xla_backend_optimization_level=3", (2, 21), True) == f"--xla_backend_optimization_level=3 {off}"
    assert flags("", (2, 19), False) == "" and flags("", (2, 22), False) == ""
    assert flags("", (2, 19), True) == o1
    assert flags("--a", None, False) == "--a"


@pytest.mark.parametrize("visible, nodes, seen", [
    (None, ["nvidia0"], True), ("0,1", ["nvidia0", "nvidia1"], True), (None, [], False),
    ("", ["nvidia0"], False), ("-1", ["nvidia0"], False), (None, ["nvidiactl", "nvidia-uvm"], False),
])
def test_the_sample_sees_an_nvidia_gpu_by_its_device_node(tmp_path, visible, nodes, seen):
    from examples.nerf import environment

    for name in nodes:
        (tmp_path / name).touch()
    environ = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert environment.nvidia_gpu_visible(environ, str(tmp_path / "nvidia[0-9]*")) is seen


def test_xla_cache_keeps_the_compiled_programs(tmp_path):
    """--xla-cache DIR: the run writes its XLA programs into DIR (TensorFlow's persistent cache, which
    a later run reads); without --jit it is refused."""
    import subprocess
    import sys

    from examples.nerf import train
    from tests.test_nerf_sample import TINY

    with pytest.raises(ValueError, match="--xla-cache keeps the programs --jit compiles"):
        train.Trainer(_args(tmp_path, "--name", "refused", "--xla-cache", str(tmp_path / "c")), log=lambda *a: None)
    env = {k: v for k, v in os.environ.items() if k != "TF_XLA_FLAGS"}
    cache = tmp_path / "xla cache"
    run = subprocess.run([sys.executable, "-m", "examples.nerf.train", *TINY, *SMALL,
                          "--data-dir", str(tmp_path / "data"), "--out-dir", str(tmp_path / "runs"), "--steps", "2",
                          "--eval-every", "0", "--ckpt-every", "0", "--no-outputs", "--jit", "--xla-cache", str(cache)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert [f for f in os.listdir(cache) if f.startswith("xla_compile_cache")], os.listdir(cache)
    # --jit: main() adds the sample's XLA flags to the caller's, and metrics.json records them
    from examples.nerf import environment

    m = json.loads((tmp_path / "runs" / "nerf" / "metrics.json").read_text())
    assert m["xla_flags"] == environment.xla_flags_for_the_sample(
        env.get("XLA_FLAGS", ""), environment.tensorflow_version(), environment.nvidia_gpu_visible(env))
