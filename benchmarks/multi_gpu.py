"""The library on several GPUs through tf.distribute.MirroredStrategy, against one GPU.

    python -m benchmarks.multi_gpu                 # on a machine with >= 2 GPUs and TensorFlow's CUDA build
    python -m benchmarks.multi_gpu --quick         # the same code on two logical CPUs (a check, no figures)

Three parts, each written to benchmarks/results/multi_gpu.<device>.json as it
finishes:

1. keras: a Keras model of HashEncoding + FusedMLP trained with RobustLoss and
   SGD under MirroredStrategy on two GPUs, against the same model on one GPU
   with the same global batch and the same initial weights. The weights after
   N steps must agree within the tolerance float32 summation allows (below),
   and the two-GPU model must round-trip through `model.save` / `load_model`.
2. nerf: `python -m examples.nerf.train --strategy mirrored` on one GPU and on
   two (global batch held fixed, and doubled), plus a second one-GPU run with
   another seed for the run-to-run spread: held-out PSNR and steps per second.
3. selftest: `python -m metal_ops.selftest` on every GPU TensorFlow lists.

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
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [p for p in (os.path.join(ROOT, "python"), ROOT) if p not in sys.path]

from benchmarks import timing  # noqa: E402

U32 = 2.0 ** -24
U_TF32 = 2.0 ** -11


def child_env(**extra):
    """The environment of the processes started here: NVLink multicast off for NCCL."""
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python"), ROOT, env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def gamma(m):
    return m * U32 / (1.0 - m * U32)


def keras_part(devices, steps, batch, lr, quick):
    """Part 1 (in this process): weights after `steps` SGD steps on `devices` against devices[:1]."""
    import keras
    import tensorflow as tf

    tf32 = not quick and tf.config.experimental.tensor_float_32_execution_enabled()

    from metal_ops import layers, losses

    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (steps * batch, 3)).astype(np.float32)
    y = np.stack([np.sin(6 * x[:, 0]), np.cos(5 * x[:, 1]), x[:, 2] ** 2], axis=1).astype(np.float32)

    def make_model():
        return keras.Sequential([
            keras.Input((3,)),
            layers.HashEncoding(num_levels=8, features_per_level=2, log2_hashmap_size=14, base_resolution=8,
                                finest_resolution=256),
            layers.FusedMLP(3, hidden_units=64, hidden_layers=2),
        ])

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


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="two logical CPUs, tiny settings: checks the script runs")
    p.add_argument("--parts", default="keras,nerf,selftest")
    p.add_argument("--keras-steps", type=int, default=8)
    p.add_argument("--keras-batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--nerf-steps", type=int, default=3000)
    p.add_argument("--no-tf32", action="store_true", help="strict float32 matrix products on the GPU")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    args = p.parse_args(argv)
    os.environ.update(child_env())
    import tensorflow as tf

    if args.no_tf32:
        tf.config.experimental.enable_tensor_float_32_execution(False)

    if args.quick:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        devices, device = ["/cpu:0", "/cpu:1"], "cpu"
        args.keras_steps, args.keras_batch, args.nerf_steps = 2, 16, 20
    else:
        gpus = tf.config.list_physical_devices("GPU")
        if len(gpus) < 2:
            raise SystemExit(f"benchmarks.multi_gpu: TensorFlow lists {len(gpus)} GPU(s); two are needed "
                             "(--quick runs on two logical CPUs)")
        devices = ["/gpu:0", "/gpu:1"]
        name = tf.config.experimental.get_device_details(gpus[0]).get("device_name", "gpu")
        device = ("h200" if "H200" in name else "h100" if "H100" in name else "gpu") + f"x{len(gpus)}"
    parts = args.parts.split(",")
    result = {"benchmark": "multi_gpu", "tensorflow": tf.__version__, "devices": devices,
              "machine": timing.cpu_description()}
    path = os.path.join(args.out, f"multi_gpu.{device}.json")

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
