"""The library on several GPUs through tf.distribute, against one GPU.

    python -m benchmarks.multi_gpu                 # on a machine with >= 2 GPUs and TensorFlow's CUDA build
    python -m benchmarks.multi_gpu --parts workers # MultiWorkerMirroredStrategy: worker processes, one GPU each
    python -m benchmarks.multi_gpu --quick         # the same code on two logical CPUs (a check, no figures)
    python -m benchmarks.multi_gpu --parts workers --nerf-steps 30 --out /tmp/r   # CPU workers (a check)

Six parts, each written to benchmarks/results/multi_gpu.<device>.json as it
finishes (a part run by a later command replaces its own entry only):

1. keras: a Keras model of HashEncoding + FusedMLP trained with RobustLoss and
   SGD under MirroredStrategy on two GPUs, against the same model on one GPU
   with the same global batch and the same initial weights. The weights after
   N steps must agree within the tolerance float32 summation allows (below),
   and the two-GPU model must round-trip through `model.save` / `load_model`.
2. nerf: `python -m examples.nerf.train --strategy mirrored` on one GPU and on
   two (global batch held fixed, and doubled), plus a second one-GPU run with
   another seed for the run-to-run spread: held-out PSNR and steps per second.
3. workers: `python -m examples.nerf.train --strategy multiworker` as N
   processes on this machine (TF_CONFIG on localhost ports, one GPU each
   through CUDA_VISIBLE_DEVICES, or on the CPU where TensorFlow lists no GPU),
   each worker with --batch-rays rays (--batch-per-replica), against one
   process with the default strategy (two seeds) and one worker alone under
   the strategy: rays per second (all workers' rays over the slowest
   worker's training time after the first step, and over the median step)
   and held-out PSNR; and the Keras model of part 1 as N workers against one
   process, each worker with its own points: points per second; on GPUs both
   also compiled by XLA (--jit; the all-reduce an XLA collective).
   --worker-runs runs some of these groups (the file keeps the other rows, each
   with its commit); a --worker-batch other than 4096 is in the rows' names.
4. profile: `python -m benchmarks.profile_nerf_gpu` (TensorFlow's profiler
   over the NeRF sample's steps) in one process, then as N workers with
   --batch-rays rays each: per process the step's wall and GPU-busy time,
   its kernels and the host's busiest events (where a worker's step waits).
   Like part 3's, its rows name a --worker-batch other than 4096 and
   --worker-tag, and a run replaces the rows of its own names only.
5. collective: N worker processes as in part 3, each timing a tf.function whose
   step all-reduces one float32 variable of 1, 2^18 and 2^22 values (the NeRF
   sample's communication options) and adds to it, against the same step
   without the all-reduce, one step a call and eight in a loop a call: what
   one collective adds to a step, and what calls of several steps (the NeRF
   sample's --steps-per-call) save of it; on GPUs also compiled by XLA, in
   worker processes of their own.
6. selftest: `python -m metal_ops.selftest` on every GPU TensorFlow lists.

The tolerance of part 1, per weight and step. (a) Summation order: a replica
sums its half of the batch, NCCL adds the two halves, one GPU sums the whole
batch in one pass whose order the hash table's atomics leave open; two
float32 sums of the same m terms in different orders differ by at most
2 gamma_m S, where S is the sum over the step's examples of |that example's
gradient| of the weight and gamma_m = m u / (1 - m u), u = 2^-24 (Higham,
"Accuracy and Stability of Numerical Algorithms", 3.1 and 4.2). (b) Each
example's gradient goes through dot products of at most K = the MLP's width
terms in each of its D layers, which the two runs may block differently
(other row counts per kernel call): at most 2 D gamma_K S more. Where
FusedMLP runs in TF32 (TensorFlow's default on NVIDIA GPUs since Ampere), each
product's operands are first rounded to 10 mantissa bits (unit roundoff
u_tf32 = 2^-11), and after the first step the two runs' float32 weights differ
in their last bits, which can round them to neighbouring TF32 values: each
layer then adds 2 * 2 u_tf32 S, so (b) is 2 D (gamma_K + 2 u_tf32) S. (c) SGD moves
the weight by lr times the sum, and rounding w - lr g to float32 can land one
unit in the last place apart: 2 u |w|. A difference also passes through later
steps' gradients; at the small learning rate used that factor stays near 1,
and the check allows 2x. S is computed here exactly from per-example
gradients along the one-GPU trajectory.
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def checkout_python(root=ROOT, path=None):
    """The checkout's python/ folder, to put first on the path, where it holds a built library or
    no other metal_ops is importable; else None: an unbuilt checkout runs against the installed
    package (`path`: the folders to look in, default sys.path)."""
    import importlib.machinery

    folder = os.path.join(root, "python")
    if os.path.exists(os.path.join(folder, "metal_ops", "_build_info.json")):
        return folder
    others = [p for p in (sys.path if path is None else path) if os.path.abspath(p or os.curdir) != folder]
    return None if importlib.machinery.PathFinder.find_spec("metal_ops", others) else folder


SOURCE_PATH = [p for p in (checkout_python(), ROOT) if p]
sys.path[:0] = [p for p in SOURCE_PATH if p not in sys.path]

from benchmarks import timing  # noqa: E402

PARTS = ("keras", "nerf", "workers", "profile", "collective", "selftest")
COLLECTIVE_FLOATS = (1, 1 << 18, 1 << 22)  # the collective part's all-reduces: 4 B, 1 MiB, 16 MiB
WORKER_BATCH = 4096  # the workers part's rays a worker a step
WORKER_RUNS = ("default", "looped", "compiled", "keras")  # the workers part's groups of runs
U32 = 2.0 ** -24
U_TF32 = 2.0 ** -11


def child_env(**extra):
    """The environment of the processes started here: NVLink multicast off for NCCL, GPU memory
    taken as used, each GPU's kernels launched from threads of its own (as the NeRF sample sets)."""
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    env.setdefault("TF_GPU_THREAD_MODE", "gpu_private")
    # This process and the ones it starts share GPUs: each takes the memory it uses, not all of it.
    env.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
    env["PYTHONPATH"] = os.pathsep.join(SOURCE_PATH + [env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def gamma(m):
    return m * U32 / (1.0 - m * U32)


def keras_data(n, seed):
    """n points in the unit cube and the values the Keras model learns for them
    (examples/keras_workers's function)."""
    from examples.keras_workers.train import target

    x = np.random.default_rng(seed).uniform(0, 1, (n, 3)).astype(np.float32)
    return x, target(x)


def keras_model():
    """The Keras model of the keras and workers parts: examples/keras_workers's HashEncoding + FusedMLP."""
    from examples.keras_workers.train import build_model

    return build_model()


def keras_worker(args):
    """--keras-worker: one process of the Keras model's run, under MultiWorkerMirroredStrategy
    where TF_CONFIG is set (the NeRF sample's communication options), else the default strategy:
    --keras-worker-steps SGD steps on --keras-worker-batch points of its own with RobustLoss,
    after 5 calls of warm-up, --steps-per-call steps a call of the step's function (a loop in the
    graph, as Keras's steps_per_execution runs). Prints one line, KERAS_WORKER and JSON: all
    workers' points per second and the last loss (the mean over every worker's points)."""
    import metal_ops  # noqa: F401  before the strategy runs TensorFlow's first op (docs/XLA.md)
    import keras
    import tensorflow as tf

    from examples.nerf.distribute import communication_options
    from metal_ops import losses

    tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=communication_options()) \
        if tf_config else tf.distribute.get_strategy()
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = keras_model()
        opt = keras.optimizers.SGD(args.lr)
        opt.build(model.trainable_variables)
    loss_fn = losses.RobustLoss(alpha=1.0, scale=0.1)
    x, y = keras_data(args.keras_worker_batch, tf_config.get("task", {}).get("index", 0))
    xb, yb = (strategy.experimental_distribute_values_from_function(lambda ctx, v=v: tf.constant(v)) for v in (x, y))

    def replica(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))  # divided by the replicas: the sum is the mean
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    per_call = args.steps_per_call

    # The loss is all-reduced for the call's last step only, as Keras's fit() reads its loss
    # metric: one collective a step (the gradients'), not two. --keras-jit: the call compiled by
    # XLA, strategy.run in it and the gradients' all-reduce an XLA collective.
    @tf.function(jit_compile=args.keras_jit or None)
    def steps(xb, yb):
        for _ in tf.range(per_call - 1) if per_call > 2 else range(per_call - 1):  # one step a call: no loop
            strategy.run(replica, args=(xb, yb))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica, args=(xb, yb)), axis=None)

    for _ in range(5):
        loss = steps(xb, yb)
    float(loss)
    calls = max(1, args.keras_worker_steps // per_call)
    t0 = time.perf_counter()
    for _ in range(calls):
        loss = steps(xb, yb)
    loss = float(loss)
    seconds = time.perf_counter() - t0
    points = strategy.num_replicas_in_sync * args.keras_worker_batch * calls * per_call
    print("KERAS_WORKER", json.dumps({"points_per_second": points / seconds, "seconds": seconds, "loss": loss,
                                      "replicas": strategy.num_replicas_in_sync}))


def keras_part(devices, steps, batch, lr, quick):
    """Part 1 (in this process): weights after `steps` SGD steps on `devices` against devices[:1]."""
    import keras
    import tensorflow as tf

    tf32 = not quick and tf.config.experimental.tensor_float_32_execution_enabled()

    from metal_ops import losses

    x, y = keras_data(steps * batch, 0)
    make_model = keras_model

    with tf.device(devices[0]):
        init = make_model().get_weights()
    loss_fn = losses.RobustLoss(alpha=1.0, scale=0.1, reduction="sum")

    def train(strategy):
        with strategy.scope():
            model = make_model()
            model.set_weights(init)
            opt = keras.optimizers.SGD(lr)
            opt.build(model.trainable_variables)

        @tf.function
        def step(xb, yb):
            def replica(xb, yb):
                with tf.GradientTape() as tape:
                    # Summed over the global batch: the replicas' gradients add up to one GPU's.
                    loss = loss_fn(yb, model(xb, training=True)) / batch
                grads = tape.gradient(loss, model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables))
            strategy.run(replica, args=(xb, yb))

        data = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((x, y)).batch(batch))
        t0 = time.perf_counter()
        for xb, yb in data:
            step(xb, yb)
        seconds = time.perf_counter() - t0
        return model, [w.copy() for w in model.get_weights()], seconds

    two_model, two, two_s = train(tf.distribute.MirroredStrategy(devices))
    _, one, one_s = train(tf.distribute.MirroredStrategy(devices[:1]))
    _, one_again, _ = train(tf.distribute.MirroredStrategy(devices[:1]))

    # S_t per weight: the sum over the step's examples of |that example's gradient|,
    # along the one-GPU trajectory (the weights before each step).
    with tf.device(devices[0]):
        model = make_model()
        model.set_weights(init)
        opt = keras.optimizers.SGD(lr)
        bound = [np.zeros_like(w) for w in init]

        @tf.function
        def example_grads(xb, yb):
            def one(i):
                with tf.GradientTape() as tape:
                    loss = loss_fn(yb[i:i + 1], model(xb[i:i + 1], training=True)) / batch
                return [tf.abs(tf.convert_to_tensor(g)) for g in tape.gradient(loss, model.trainable_variables)]
            acc = [tf.zeros_like(v) for v in model.trainable_variables]
            for i in tf.range(batch):
                acc = [a + g for a, g in zip(acc, one(i))]
            return acc

        @tf.function
        def sgd_step(xb, yb):
            with tf.GradientTape() as tape:
                loss = loss_fn(yb, model(xb, training=True)) / batch
            opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))

        width, depth = 64, 3  # the FusedMLP below: 64 units, two hidden layers and the output layer
        for s in range(steps):
            xb, yb = x[s * batch:(s + 1) * batch], y[s * batch:(s + 1) * batch]
            for b, g, w in zip(bound, example_grads(xb, yb), model.get_weights()):
                b += (lr * 2 * (gamma(batch) + depth * (gamma(width) + (2 * U_TF32 if tf32 else 0))) * g.numpy()
                      + 2 * U32 * np.abs(w))
            sgd_step(xb, yb)
    allowed = [2 * b for b in bound]
    rows = []
    ok = True
    for i, (a, b, c, tol) in enumerate(zip(two, one, one_again, allowed)):
        diff = np.abs(a - b)
        within = bool(np.all(diff <= tol + 1e-12))
        ok = ok and within
        rows.append({"weight": i, "shape": list(a.shape), "max_abs_diff_two_vs_one": float(diff.max(initial=0)),
                     "max_abs_diff_one_vs_one": float(np.abs(b - c).max(initial=0)),
                     "max_allowed": float(tol.max(initial=0)), "max_ratio_to_allowed":
                     float(np.max(diff / np.maximum(tol, 1e-30), initial=0)),
                     "moved_from_init": float(np.abs(b - init[i]).max(initial=0)), "within": within})

    # The two-GPU model round-trips through the Keras file format.
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.keras")
        two_model.save(path)
        loaded = keras.models.load_model(path)
        probe = x[:256]
        saved_ok = all(np.array_equal(p, q) for p, q in zip(loaded.get_weights(), two)) and np.allclose(
            loaded.predict(probe, verbose=0), two_model.predict(probe, verbose=0), rtol=1e-6, atol=1e-6)
    return {"devices": devices, "steps": steps, "global_batch": batch, "lr": lr, "optimizer": "SGD", "tf32": tf32,
            "weights_within_tolerance": ok, "save_load_round_trip": bool(saved_ok),
            "seconds_two": two_s, "seconds_one": one_s, "weights": rows}


def nerf_run(name, visible, args, out_dir, extra):
    env = child_env(CUDA_VISIBLE_DEVICES=visible) if visible is not None else child_env()
    cmd = [sys.executable, "-m", "examples.nerf.train", "--name", name, "--out-dir", out_dir, "--quiet",
           "--no-outputs", "--steps", str(args.nerf_steps)] + extra
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        return {"name": name, "command": " ".join(cmd[1:]), "error": (r.stdout[-1500:] + r.stderr[-3000:])}
    with open(os.path.join(out_dir, name, "metrics.json")) as f:
        m = json.load(f)
    return {"name": name, "visible_gpus": visible, "command": " ".join(cmd[1:]), "steps": m["step"],
            "train_seconds": m["train_seconds"], "steps_per_second": m["step"] / m["train_seconds"],
            "test_psnr_mean": m["test_psnr_mean"], "wall_seconds": wall, "batch_rays": m["config"]["batch_rays"],
            "strategy": m["config"]["strategy"]}


def nerf_part(args, out_dir):
    runs = [("one_gpu_default", "0", ["--seed", "0"]),
            ("one_gpu_default_seed1", "0", ["--seed", "1"]),
            ("one_gpu_mirrored", "0", ["--strategy", "mirrored", "--seed", "0"]),
            ("two_gpu_mirrored", "0,1", ["--strategy", "mirrored", "--seed", "0"]),
            ("two_gpu_mirrored_batch_x2", "0,1", ["--strategy", "mirrored", "--seed", "0", "--batch-rays", "8192"])]
    if args.quick:
        runs = [(n, None, e + ["--size", "16", "--n-train", "4", "--n-test", "1", "--n-val", "1"])
                for n, _, e in runs[:1]]
    return [nerf_run(n, v, args, out_dir, e) for n, v, e in runs]


def free_port():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(cmd, workers, strategy, gpus, timeout):
    """Starts `cmd` as `workers` processes on this machine and waits for them: under --strategy
    multiworker with a TF_CONFIG of localhost ports, one GPU each (CUDA_VISIBLE_DEVICES) where
    `gpus`, else on the CPU. Returns (their stdouts, the first failure's output or None, seconds)."""
    cluster = {"worker": [f"localhost:{free_port()}" for _ in range(workers)]}
    procs = []
    t0 = time.perf_counter()
    for i in range(workers):
        env = {"CUDA_VISIBLE_DEVICES": str(i)} if gpus else {}
        if strategy == "multiworker":
            env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})
        procs.append(subprocess.Popen(cmd, cwd=ROOT, env=child_env(**env), stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outputs = []
    try:
        outputs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    failed = [f"worker {i}: {so[-1500:]}{se[-3000:]}" for i, (p, (so, se)) in enumerate(zip(procs, outputs))
              if p.returncode != 0] or ([] if len(outputs) == workers else [f"timed out after {timeout} s"])
    return [so for so, _ in outputs], (failed[0] if failed else None), time.perf_counter() - t0


def nerf_workers_run(name, workers, strategy, gpus, args, out_dir, extra):
    """The NeRF sample as `workers` processes (launch), each with --batch-rays rays
    (--batch-per-replica): rays per second of all workers, over the slowest worker's training
    time after the first step and over the median step, and held-out PSNR."""
    cmd = [sys.executable, "-m", "examples.nerf.train", "--name", name, "--out-dir", out_dir, "--quiet",
           "--no-outputs", "--steps", str(args.nerf_steps), "--strategy", strategy, "--batch-per-replica"] + extra
    _, error, wall = launch(cmd, workers, strategy, gpus, args.worker_timeout)
    row = {"name": name, "workers": workers, "strategy": strategy, "gpus_per_worker": 1 if gpus else 0,
           "command": " ".join(cmd[1:])}
    if error:
        return {**row, "error": error}
    run_dir = os.path.join(out_dir, name)
    with open(os.path.join(run_dir, "metrics.json")) as f:
        m = json.load(f)
    each = [m]
    for i in range(1, workers):
        with open(os.path.join(run_dir, f"metrics.worker{i}.json")) as f:
            each.append(json.load(f))
    rays = m["rays_per_step"]  # all workers' rays: the step's counts are all-reduced
    # The steps after the first (tracing, and the strategy's set-up): the slowest worker's time.
    after_first = max(w["train_seconds"] - w["first_step_s"] for w in each)
    return {**row, "collective": m["config"]["collective"], "bytes_per_pack": m["config"]["bytes_per_pack"],
            "steps": m["step"], "rays_per_step": rays, "rays_per_step_per_worker": rays / workers,
            "train_seconds": max(w["train_seconds"] for w in each),
            "rays_per_second": rays * (m["step"] - 1) / after_first,
            "first_step_s": m["first_step_s"], "steady_step_ms": m["steady_step_ms"],
            "train_step_traces": m["train_step_traces"],
            "steady_rays_per_second": rays / (m["steady_step_ms"] / 1000.0) if m["steady_step_ms"] else None,
            "test_psnr_mean": m["test_psnr_mean"], "wall_seconds": wall}


def keras_workers_run(name, workers, strategy, gpus, args, per_call=1, jit=False):
    """The Keras model as `workers` processes (launch, keras_worker), `per_call` steps a call, each
    call compiled by XLA with `jit`: points per second, last loss."""
    cmd = [sys.executable, "-m", "benchmarks.multi_gpu", "--keras-worker", "--keras-worker-steps",
           str(args.keras_worker_steps), "--keras-worker-batch", str(args.keras_worker_batch), "--lr", str(args.lr),
           "--steps-per-call", str(per_call)] + (["--keras-jit"] if jit else [])
    stdouts, error, wall = launch(cmd, workers, strategy, gpus, args.worker_timeout)
    row = {"name": name, "workers": workers, "strategy": strategy, "gpus_per_worker": 1 if gpus else 0,
           "command": " ".join(cmd[1:]), "points_per_worker": args.keras_worker_batch}
    if error:
        return {**row, "error": error}
    done = [json.loads(line.split(None, 1)[1]) for out in stdouts for line in out.splitlines()
            if line.startswith("KERAS_WORKER ")]
    return {**row, "points_per_second": min(d["points_per_second"] for d in done), "loss": done[0]["loss"],
            "replicas": done[0]["replicas"], "wall_seconds": wall}


def workers_part(args, out_dir, gpus):
    """N local workers under MultiWorkerMirroredStrategy against one process on one device, each
    worker's batch held: the NeRF sample (rays per second, held-out PSNR; a second seed of one
    process for the spread) and the Keras model (points per second); with --steps-per-call K > 1,
    one process and N workers again at K steps a call of the step, against each other."""
    n = args.workers
    wanted = set(args.worker_runs.split(","))
    extra = ["--seed", "0", "--batch-rays", str(args.worker_batch)] + shlex.split(args.worker_args)
    if not gpus:
        extra += ["--size", "16", "--n-train", "4", "--n-test", "1", "--n-val", "1", "--eval-every", "0",
                  "--ckpt-every", "0", "--levels", "4", "--log2-table", "12", "--grid-res", "16"]
    one = extra + ["--steps-per-call", "1"]
    runs = [("one_worker_default", 1, "default", one),
            ("one_worker_default_seed1", 1, "default", one[:1] + ["1"] + one[2:]),
            ("one_worker_multiworker", 1, "multiworker", one),
            (f"{n}_workers_multiworker", n, "multiworker", one)]
    if not gpus:
        runs = runs[:1] + runs[2:]
        args.keras_worker_batch, args.keras_worker_steps = min(args.keras_worker_batch, 4096), \
            min(args.keras_worker_steps, 20)
    k = args.steps_per_call
    looped = [] if k == 1 else [(f"one_worker_default_{k}_a_call", 1, "default", extra + ["--steps-per-call", str(k)]),
                                (f"{n}_workers_multiworker_{k}_a_call", n, "multiworker",
                                 extra + ["--steps-per-call", str(k)])]
    # --jit: each worker's calls one XLA program, the all-reduce an XLA collective, which XLA
    # compiles for GPUs only (here and in the Keras rows below)
    compiled = [] if not gpus else [
        (f"one_worker_default_{k}_a_call_jit", 1, "default", extra + ["--steps-per-call", str(k), "--jit"]),
        (f"{n}_workers_multiworker_{k}_a_call_jit", n, "multiworker", extra + ["--steps-per-call", str(k), "--jit"])]
    batch = run_suffix(args)
    rows = []
    for what, group in (("default", runs), ("looped", looped), ("compiled", compiled)):
        if what in wanted:
            rows += _versus_first([nerf_workers_run(name + batch, w, strategy, gpus, args, out_dir, e)
                                   for name, w, strategy, e in group], "rays_per_second", "steady_rays_per_second")
    if "keras" not in wanted:
        return rows
    for per_call, jit in [(p, False) for p in dict.fromkeys((1, k))] + ([(k, True)] if gpus else []):
        suffix = ("" if per_call == 1 else f"_{per_call}_a_call") + ("_jit" if jit else "")
        rows += _versus_first([keras_workers_run(f"keras_one_worker_default{suffix}", 1, "default", gpus, args,
                                                 per_call, jit),
                               keras_workers_run(f"keras_{n}_workers_multiworker{suffix}", n, "multiworker", gpus,
                                                 args, per_call, jit)], "points_per_second")
    return rows


def run_suffix(args):
    """The workers and profile parts' rows name a batch other than the default's, and --worker-tag:
    runs at several batches or recipes share the file."""
    return ("" if args.worker_batch == WORKER_BATCH else f"_{args.worker_batch}_rays") + \
        (f"_{args.worker_tag}" if args.worker_tag else "")


def merge_rows(old, old_commit, new, runs=None):
    """A part's rows after a run: the new rows, and before them the file's rows of other names,
    each with the commit it ran at; for the workers part (`runs`, its groups run), only where
    `runs` is not every group."""
    if runs is not None and set(runs) >= set(WORKER_RUNS):
        return new
    names = {r["name"] for r in new}
    return [{"commit": old_commit, **r} for r in old if r["name"] not in names] + new


def _versus_first(rows, *keys):
    """rows, each with <key>_vs_one_worker for each of `keys`: its `key` over the first row's."""
    for key in keys:
        one = rows[0].get(key) if rows else None
        for r in rows:
            if one and r.get(key):
                r[f"{key}_vs_one_worker"] = r[key] / one
    return rows


def collective_worker(args):
    """--collective-worker: one process of the collective part, under MultiWorkerMirroredStrategy
    with the NeRF sample's communication options. Prints one line, COLLECTIVE_WORKER and JSON: per
    all-reduce size, the milliseconds of a step of the function with and without the all-reduce, a step
    a call and eight a call."""
    import metal_ops  # noqa: F401  before the strategy runs TensorFlow's first op (docs/XLA.md)
    import tensorflow as tf

    from examples.nerf.distribute import communication_options

    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=communication_options())
    rows = []
    for n in COLLECTIVE_FLOATS:
        with strategy.scope():
            v = tf.Variable(tf.ones([n]))

        def timed(reduce, loop=1, jit=False):
            """Milliseconds a replica step ((all-reduce of) v, then v += 1e-6 of it) takes, in calls of
            `loop` steps (a loop in the graph, as --steps-per-call runs the NeRF sample's steps);
            `jit`: the call compiled by XLA, the all-reduce an XLA collective."""
            def replica():
                x = v * 1e-3
                if reduce:
                    x = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, x)
                v.assign_add(x * 1e-6)

            @tf.function(jit_compile=jit or None)
            def fn():
                for _ in tf.range(loop):
                    strategy.run(replica)
                return v.read_value()

            calls = max(1, args.collective_calls // loop)
            for _ in range(5):
                out = fn()
            out.numpy()
            t0 = time.perf_counter()
            for _ in range(calls):
                out = fn()
            out.numpy()
            return (time.perf_counter() - t0) * 1e3 / (calls * loop)

        row = {"floats": n, "bytes": 4 * n}
        if not args.collective_jit:
            row.update(all_reduce_ms=timed(True), without_ms=timed(False),
                       all_reduce_ms_8_a_call=timed(True, 8), without_ms_8_a_call=timed(False, 8))
        else:
            try:
                row.update(all_reduce_ms_jit=timed(True, jit=True), without_ms_jit=timed(False, jit=True))
            except tf.errors.OpError as e:  # the other rows stand; the message says why these are missing
                row["jit_error"] = e.message.splitlines()[0][:500]
        rows.append(row)
    print("COLLECTIVE_WORKER", json.dumps({"rows": rows, "replicas": strategy.num_replicas_in_sync}))


def collective_part(args, gpus):
    """What one all-reduce adds to a function's call under MultiWorkerMirroredStrategy (launch,
    collective_worker): per size, the slowest worker's milliseconds with and without it; on GPUs
    also with the call compiled by XLA, in workers of their own (XLA sets up its own NCCL
    communicators, which a process whose collective executor holds some can fail to)."""
    cmd = [sys.executable, "-m", "benchmarks.multi_gpu", "--collective-worker", "--collective-calls",
           str(args.collective_calls)]
    row = {"workers": args.workers, "command": " ".join(cmd[1:]), "calls": args.collective_calls}
    rows = None
    for extra in [[]] + ([["--collective-jit"]] if gpus else []):  # XLA compiles collectives for GPUs only
        stdouts, error, _ = launch(cmd + extra, args.workers, "multiworker", gpus, args.worker_timeout)
        if error:
            row["jit_error" if extra else "error"] = error
            continue
        done = [json.loads(line.split(None, 1)[1])["rows"] for out in stdouts for line in out.splitlines()
                if line.startswith("COLLECTIVE_WORKER ")]
        got = [{**{k: each[0][k] for k in ("floats", "bytes")},
                **{k: max(w[k] for w in each) for k in each[0]
                   if k not in ("floats", "bytes") and all(k in w for w in each)}} for each in zip(*done)]
        rows = got if rows is None else [{**a, **b} for a, b in zip(rows, got)]
    return {**row, "rows": rows} if rows is not None else row


def profile_part(args, out_dir, gpus):
    """Where a step's time goes: benchmarks.profile_nerf_gpu in one process with the default
    strategy, then as N workers (launch), each with --batch-rays rays: per process, the wall and
    GPU-busy time of a step, its kernels and the host's busiest events."""
    flags = ["--seed", "0", "--batch-rays", str(args.worker_batch), "--batch-per-replica",
             "--warmup-steps", str(args.profile_warmup), "--steps", str(args.profile_steps)] + \
        shlex.split(args.worker_args)
    rows = []
    for name, workers, strategy in ((f"one_worker_default{run_suffix(args)}", 1, "default"),
                                    (f"{args.workers}_workers_multiworker{run_suffix(args)}", args.workers,
                                     "multiworker")):
        out = os.path.join(out_dir, name, "profile.json")
        cmd = [sys.executable, "-m", "benchmarks.profile_nerf_gpu", "--out", out, "--logdir",
               os.path.join(out_dir, name, "logs"), "--strategy", strategy] + flags
        _, error, _ = launch(cmd, workers, strategy, gpus, args.worker_timeout)
        row = {"name": name, "workers": workers, "strategy": strategy, "command": " ".join(cmd[1:])}
        if error:
            rows.append({**row, "error": error})
            continue
        paths = [out] if workers == 1 else [f"{os.path.splitext(out)[0]}.worker{i}.json" for i in range(workers)]
        each = []
        for path in paths:
            with open(path) as f:
                each.append({k: v for k, v in json.load(f).items() if k not in ("devices", "platform")})
        rows.append({**row, "processes": each})
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="two logical CPUs, tiny settings: checks the script runs")
    p.add_argument("--parts", default="keras,nerf,selftest",
                   help=f"comma-separated, of {','.join(PARTS)}")
    p.add_argument("--keras-steps", type=int, default=8)
    p.add_argument("--keras-batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--nerf-steps", type=int, default=3000)
    p.add_argument("--workers", type=int, default=2, help="workers: local worker processes (one GPU each)")
    p.add_argument("--worker-batch", type=int, default=WORKER_BATCH,
                   help="workers: each worker's rays per step (another than the default's: in the rows' names)")
    p.add_argument("--worker-runs", default=",".join(WORKER_RUNS),
                   help=f"workers: comma-separated, of {','.join(WORKER_RUNS)}: the NeRF runs a step a call, "
                        "at K steps a call, K steps a call compiled by XLA (GPUs), the Keras model's runs; "
                        "the file keeps its other rows")
    p.add_argument("--worker-args", default="",
                   help="workers: more flags of the NeRF sample's runs (\"--collective ring\", \"--bytes-per-pack 0\")")
    p.add_argument("--worker-tag", default="", metavar="NAME",
                   help="workers, profile: a suffix of the NeRF rows' names (runs with other --worker-args share "
                        "the file)")
    p.add_argument("--worker-timeout", type=float, default=900, help="workers: seconds a run may take")
    p.add_argument("--keras-worker-steps", type=int, default=200, help="workers: the Keras model's timed steps")
    p.add_argument("--keras-worker-batch", type=int, default=1 << 18, help="workers: each worker's points a step")
    p.add_argument("--keras-worker", action="store_true", help=argparse.SUPPRESS)  # a process of that run
    p.add_argument("--keras-jit", action="store_true", help=argparse.SUPPRESS)  # that process's step under XLA
    p.add_argument("--collective-calls", type=int, default=200, help="collective: timed calls of each function")
    p.add_argument("--steps-per-call", type=int, default=8, metavar="K",
                   help="workers: also run one process and the workers at K steps a call of the step's function "
                        "(the NeRF sample's default; 1: one step a call only)")
    p.add_argument("--collective-worker", action="store_true", help=argparse.SUPPRESS)  # a process of that part
    p.add_argument("--collective-jit", action="store_true", help=argparse.SUPPRESS)  # its calls compiled by XLA
    p.add_argument("--profile-warmup", type=int, default=300, help="profile: steps before the timed ones")
    p.add_argument("--profile-steps", type=int, default=30, help="profile: steps timed, then steps profiled")
    p.add_argument("--no-tf32", action="store_true", help="strict float32 matrix products on the GPU")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    args = p.parse_args(argv)
    if args.worker_tag and not re.fullmatch(r"\w+", args.worker_tag):
        p.error(f"--worker-tag: letters, digits and _ only (it names runs' folders), not {args.worker_tag!r}")
    os.environ.update(child_env())
    if args.keras_worker:
        keras_worker(args)
        return 0
    if args.collective_worker:
        collective_worker(args)
        return 0
    import tensorflow as tf

    import metal_ops  # noqa: F401  before TensorFlow's first op (docs/XLA.md)

    if args.no_tf32:
        tf.config.experimental.enable_tensor_float_32_execution(False)

    parts = args.parts.split(",")
    gpus = tf.config.list_physical_devices("GPU")
    if args.quick or (not gpus and set(parts) <= {"workers", "profile", "collective"}):
        # Two logical CPUs; the workers part: worker processes on the CPU.
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        devices, device, gpus = ["/cpu:0", "/cpu:1"], "cpu", []
        if args.quick:
            args.keras_steps, args.keras_batch, args.nerf_steps = 2, 16, 20
    else:
        if len(gpus) < max(2, args.workers if "workers" in parts else 2):
            raise SystemExit(f"benchmarks.multi_gpu: TensorFlow lists {len(gpus)} GPU(s); two are needed, and one "
                             "a worker (--quick runs on two logical CPUs, --parts workers on CPU workers)")
        devices = [f"/gpu:{i}" for i in range(2)]
        name = tf.config.experimental.get_device_details(gpus[0]).get("device_name", "gpu")
        device = ("h200" if "H200" in name else "h100" if "H100" in name else "gpu") + f"x{len(gpus)}"
    path = os.path.join(args.out, f"multi_gpu.{device}.json")
    # Parts run by separate commands share the file: the parts not run here are kept.
    kept, commands, old_workers, old_profile, old_commit = {}, {}, [], [], None
    if os.path.exists(path):
        with open(path) as f:
            old = json.load(f)
        kept = {k: v for k, v in old.items() if k in PARTS and k not in parts}
        old_workers, old_profile, old_commit = old.get("workers", []), old.get("profile", []), old.get("commit")
        commands = {k: v for k, v in old.get("commands", {}).items() if k in kept}
    commands.update({part: timing.command_line() for part in parts if part in PARTS})
    result = {"benchmark": "multi_gpu", "command": "; ".join(dict.fromkeys(commands.values())),
              "commands": commands, "tensorflow": tf.__version__, "devices": devices,
              "machine": timing.cpu_description(), **kept}

    def save():
        timing.write_json(path, result)

    if "keras" in parts:
        result["keras"] = keras_part(devices, args.keras_steps, args.keras_batch, args.lr, args.quick)
        print(json.dumps({k: v for k, v in result["keras"].items() if k != "weights"}, indent=1))
        save()
    if "nerf" in parts:
        with tempfile.TemporaryDirectory() as tmp:
            result["nerf"] = nerf_part(args, tmp)
        for r in result["nerf"]:
            print({k: r.get(k) for k in ("name", "steps_per_second", "test_psnr_mean", "train_seconds", "error")})
        save()
    if "workers" in parts:
        with tempfile.TemporaryDirectory() as tmp:
            new = workers_part(args, tmp, bool(gpus))
        result["workers"] = merge_rows(old_workers, old_commit, new, args.worker_runs.split(","))
        for r in result["workers"]:
            print({k: r[k] for k in ("name", "rays_per_second", "points_per_second", "rays_per_second_vs_one_worker",
                                     "points_per_second_vs_one_worker", "steady_step_ms", "test_psnr_mean", "error")
                   if k in r})
        save()
    if "profile" in parts:
        with tempfile.TemporaryDirectory() as tmp:
            result["profile"] = merge_rows(old_profile, old_commit, profile_part(args, tmp, bool(gpus)))
        for r in result["profile"]:
            for w in r.get("processes", []):
                print(r["name"], {k: w.get(k) for k in ("worker", "wall_ms_per_step", "busy_ms_per_step",
                                                         "kernels_per_step", "gpu_idle_share")})
                for name, ms in w.get("top_host_events_ms_per_step", []):
                    print(f"  {ms:7.3f} ms  {name}")
            if "error" in r:
                print(r["name"], r["error"])
        save()
    if "collective" in parts:
        result["collective"] = collective_part(args, bool(gpus))
        for r in result["collective"].get("rows") or []:
            print(f"all-reduce of {r['bytes']} bytes:", {k: round(v, 3) for k, v in r.items() if k.endswith("_ms")
                                                          or "_ms_" in k}, r.get("jit_error", ""))
        for key in ("error", "jit_error"):
            if key in result["collective"]:
                print("collective", key, result["collective"][key])
        save()
    if "selftest" in parts and not args.quick:
        report = os.path.join(tempfile.mkdtemp(), "selftest.json")
        r = subprocess.run([sys.executable, "-m", "metal_ops.selftest", "--json", report], cwd=ROOT, env=child_env(),
                           capture_output=True, text=True)
        print(r.stdout[-3000:], r.stderr[-2000:])
        if os.path.exists(report):
            with open(report) as f:
                rep = json.load(f)
            per_device = {}
            for row in rep["results"]:
                d = per_device.setdefault(row.get("device", "?"), [0, 0])
                d[0] += bool(row["passed"])
                d[1] += 1
            result["selftest"] = {"passed": rep["passed"], "devices": rep["devices"],
                                  "per_device": {k: f"{a} of {b}" for k, (a, b) in per_device.items()}}
        else:
            result["selftest"] = {"error": r.stdout[-1500:] + r.stderr[-1500:]}
        save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
