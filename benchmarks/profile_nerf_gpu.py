"""Where a NeRF training step's time goes on a GPU: TensorFlow's profiler over
a few steps of the sample's trainer (procedural scene, default settings),
summarised from the profile itself.

    python -m benchmarks.profile_nerf_gpu [--warmup-steps 300] [--steps 50] [trainer flags...]

With `--strategy multiworker` among the trainer flags, each worker process
(TF_CONFIG) profiles its own steps and writes its own file (the task index
added to the name): `benchmarks/multi_gpu.py --parts profile` starts them.

Prints and writes benchmarks/results/nerf_gpu_profile.<gpu>.json:
- wall time per step (timed without the profiler, then with it);
- GPU busy time per step (the union of kernel and copy intervals over every
  stream) and so the GPU's idle share: host work and waiting on read-backs;
- kernels and device-to-host copies per step; the kernels that take the most
  GPU time, by name;
- the host's busiest events per step (TensorFlow's op launches, the
  executor, collectives' waits), by name: what the host does while the GPU
  waits;
- with --first-step, the same for the process's first call of the step
  (tracing, graph optimisation, compilation with --jit, the first kernels).
The raw profile (TensorBoard's profile plugin reads it) stays in --logdir.
"""
import argparse
import collections
import glob
import json
import os
import platform
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _union_ps(intervals):
    total, end = 0, -1
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def summarise_xspace(path, steps, top=15):
    """GPU activity of an xplane.pb: busy time, kernel and copy counts, top kernels."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    gpu = [p for p in space.planes if p.name.startswith("/device:GPU:")]
    if not gpu:
        return {"gpu": None, "note": "the profile has no GPU plane (no GPU, or CUPTI could not be loaded)",
                "top_host_events_ms_per_step": _host_events(space, steps, 2 * top)}
    plane = gpu[0]
    intervals, by_kernel, copies_d2h, copies_h2d, kernels = [], collections.Counter(), 0, 0, 0
    for line in plane.lines:
        if not line.name.startswith("Stream"):
            continue  # "Launch Stats" and similar summary lines repeat the streams' events
        base = line.timestamp_ns * 1000
        for ev in line.events:
            name = plane.event_metadata[ev.metadata_id].name
            start = base + ev.offset_ps
            intervals.append((start, start + ev.duration_ps))
            if "memcpy" in name.lower():  # CUPTI names them MEMCPYDtoH, Memcpy DtoH, ...
                copies_d2h += "dtoh" in name.lower().replace(" ", "")
                copies_h2d += "htod" in name.lower().replace(" ", "")
            else:
                kernels += 1
                by_kernel[name] += ev.duration_ps
    busy_ms = _union_ps(intervals) / 1e9
    return {
        "gpu": plane.name,
        "top_host_events_ms_per_step": _host_events(space, steps, 2 * top),
        "busy_ms_per_step": busy_ms / steps,
        "kernels_per_step": kernels / steps,
        "d2h_copies_per_step": copies_d2h / steps,
        "h2d_copies_per_step": copies_h2d / steps,
        "top_kernels_ms_per_step": [(n[:120], ps / 1e9 / steps) for n, ps in by_kernel.most_common(top)],
    }


def _host_events(space, steps, top):
    """The host planes' events by name (summed over threads; nested events count in each)."""
    by_name = collections.Counter()
    for plane in space.planes:
        if not plane.name.startswith("/host:"):
            continue
        for line in plane.lines:
            for ev in line.events:
                by_name[plane.event_metadata[ev.metadata_id].name] += ev.duration_ps
    return [(n[:120], ps / 1e9 / steps) for n, ps in by_name.most_common(top)]


def _profiled(logdir, run, steps, top=15):
    """`run()` under TensorFlow's profiler, writing to `logdir`: (its wall milliseconds per step,
    summarise_xspace of the profile, or None where no profile was written)."""
    import tensorflow as tf

    tf.profiler.experimental.start(logdir)
    t0 = time.perf_counter()
    run()
    ms = (time.perf_counter() - t0) * 1e3 / steps
    tf.profiler.experimental.stop()
    paths = sorted(glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb")), key=os.path.getmtime)
    return ms, (summarise_xspace(paths[-1], steps, top=top) if paths else None)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--warmup-steps", type=int, default=300)
    p.add_argument("--steps", type=int, default=50, help="steps timed, then steps profiled")
    p.add_argument("--logdir", default=os.path.join(ROOT, "runs", "nerf_gpu_profile"))
    p.add_argument("--out", default=None, help="the JSON (default benchmarks/results/nerf_gpu_profile.<gpu>.json)")
    p.add_argument("--first-step", action="store_true",
                   help="also profile the process's first call of the step (tracing, graph optimisation, "
                        "compilation with --jit, the GPU's first kernels): its wall time and host events")
    args, trainer_flags = p.parse_known_args(argv)
    # The process settings the sample's command line makes (train.train): TensorFlow's GPU threads
    # and, for its --jit runs, XLA's flags, before TensorFlow starts.
    from examples.nerf import environment

    environment.set_process_environment()
    environment.set_xla_flags()

    import tensorflow as tf

    from examples.nerf import config, distribute, train as nerf_train

    common = ["--name", "gpu_profile", "--steps", "1000000", "--max-minutes", "0", "--eval-every", "0",
              "--ckpt-every", "0", "--no-outputs", "--quiet", "--data-dir", os.path.join(ROOT, "data"),
              "--out-dir", os.path.join(ROOT, "runs")]
    flags = config.parse_args(common + trainer_flags)
    strategy = None
    if flags.strategy != "default":
        if flags.strategy == "multiworker":
            flags = flags.replace(collective=distribute.resolve_collective(flags.collective))
        strategy = distribute.make_strategy(flags.strategy, flags.collective, flags.bytes_per_pack)
    trainer = nerf_train.Trainer(flags, strategy=strategy, log=lambda *a: None)
    task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task") if flags.strategy == "multiworker" else None
    logdir = os.path.join(args.logdir, f"worker{task.get('index')}") if task else args.logdir
    first = None
    if args.first_step:
        first_ms, first = _profiled(os.path.join(logdir, "first"), lambda: float(trainer.train_steps()[0]), 1, top=20)
        first = {"profiled_wall_ms": first_ms, **first} if first else None
    float(trainer.train_until(trainer.step + args.warmup_steps)[0])  # --steps-per-call: several steps a call
    t0 = time.perf_counter()
    loss, _ = trainer.train_until(trainer.step + args.steps)
    float(loss)
    wall_ms = (time.perf_counter() - t0) * 1e3 / args.steps
    grid_ms = grid = None
    if trainer.grid is not None and flags.occupancy:  # three updates, timed whole, then three profiled
        def grid_updates():
            float([trainer.update_grid(trainer.step + flags.grid_every * i) for i in range(3)][-1])

        t0 = time.perf_counter()
        grid_updates()
        grid_ms = (time.perf_counter() - t0) * 1e3 / 3
        grid_profiled_ms, grid = _profiled(os.path.join(logdir, "grid"), grid_updates, 3, top=10)
        grid = {"profiled_wall_ms": grid_profiled_ms, **grid} if grid else None

    profiled_ms, summary = _profiled(logdir, lambda: float(trainer.train_until(trainer.step + args.steps)[0]),
                                     args.steps)
    summary = summary or {"gpu": None, "note": "no xplane.pb written"}
    result = {
        "benchmark": "nerf_gpu_profile", "steps": args.steps, "warmup_steps": args.warmup_steps,
        "wall_ms_per_step": wall_ms, "profiled_wall_ms_per_step": profiled_ms, "grid_update_ms": grid_ms,
        "grid_every": flags.grid_every, "grid_update_profile": grid, "first_step_profile": first,
        "rays_per_step": trainer.rays_for_budget(), "samples_per_ray": trainer.samples_per_ray,
        "devices": [d.name for d in tf.config.list_logical_devices()], "tensorflow": tf.__version__,
        "platform": platform.platform(), "trainer_flags": trainer_flags, **summary,
    }
    if task:
        result["worker"] = task.get("index")
    if summary.get("gpu"):
        result["gpu_idle_share"] = 1 - summary["busy_ms_per_step"] / profiled_ms
    print(f"NeRF step: {wall_ms:.2f} ms wall ({profiled_ms:.2f} ms while profiled), "
          f"{result['rays_per_step']} rays x {result['samples_per_ray'] or 0:.1f} samples"
          + (f"; grid update {grid_ms:.1f} ms every {flags.grid_every} steps" if grid_ms is not None else ""))
    if summary.get("gpu"):
        print(f"  GPU busy {summary['busy_ms_per_step']:.2f} ms/step (idle {100 * result['gpu_idle_share']:.0f}%), "
              f"{summary['kernels_per_step']:.0f} kernels, {summary['d2h_copies_per_step']:.1f} device-to-host and "
              f"{summary['h2d_copies_per_step']:.1f} host-to-device copies per step")
        for name, ms in summary["top_kernels_ms_per_step"]:
            print(f"  {ms:7.3f} ms  {name}")
        print("  host:")
        for name, ms in summary["top_host_events_ms_per_step"]:
            print(f"  {ms:7.3f} ms  {name}")
    else:
        print("  " + summary["note"])
        for name, ms in summary.get("top_host_events_ms_per_step", []):
            print(f"  {ms:7.3f} ms  {name}")
    if first:
        print(f"first call: {first['profiled_wall_ms']:.0f} ms while profiled"
              + (f", GPU busy {first['busy_ms_per_step']:.1f} ms, {first['kernels_per_step']:.0f} kernels"
                 if first.get("gpu") else ""))
        for name, ms in first["top_host_events_ms_per_step"]:
            print(f"  {ms:9.1f} ms  {name} (host)")
    if grid and grid.get("gpu"):
        print(f"grid update: {grid['profiled_wall_ms']:.1f} ms while profiled, GPU busy {grid['busy_ms_per_step']:.2f} "
              f"ms, {grid['kernels_per_step']:.0f} kernels, {grid['d2h_copies_per_step']:.1f} device-to-host copies")
        for name, ms in grid["top_kernels_ms_per_step"]:
            print(f"  {ms:7.3f} ms  {name}")
        for name, ms in grid["top_host_events_ms_per_step"][:10]:
            print(f"  {ms:7.3f} ms  {name} (host)")
    from benchmarks import timing

    gpus = tf.config.list_physical_devices("GPU")
    gpu = tf.config.experimental.get_device_details(gpus[0]).get("device_name") if gpus else None
    out = args.out or timing.result_path("nerf_gpu_profile", timing.device_label(gpu))
    if task:
        out = f"{os.path.splitext(out)[0]}.worker{task.get('index')}.json"
    timing.write_json(out, dict(result, device=gpu))


if __name__ == "__main__":
    main()
