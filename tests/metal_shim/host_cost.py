"""What the own Metal queue costs the host, per op call and per NeRF training
step, as the strict model of Metal counts it (docs/METAL_COMPAT.md, "The Mac's
cost and the offload threshold").

    .venv/bin/python -m tests.metal_shim.host_cost [--ops OP,...] [--nerf-steps 3]

Runs with METAL_OPS_METAL=shim (the own-queue host path on the model, every
call above a work of 0 elements sent to it): for each op the self-test's
largest float32 case (python/metal_ops/selftest.py), forward and backward once,
then steps of the NeRF sample (examples/nerf, the tests' small configuration).
Prints one markdown table: plans run, command buffers, CPU waits for the GPU,
bytes copied into Metal buffers and back out, tensors wrapped without a copy.
"""
import argparse
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIELDS = ("plans", "command_buffers", "waits", "bytes_in", "bytes_out", "wrapped")
# The NeRF sample's configuration in tests/test_nerf_sample.py (32x32 images,
# 8 levels of 2^14 entries, 1024 rays of 16 samples).
NERF_ARGS = ["--size", "32", "--n-train", "20", "--n-val", "2", "--n-test", "2", "--levels", "8",
             "--log2-table", "14", "--finest-res", "256", "--batch-rays", "1024", "--samples", "16",
             "--grid-res", "32", "--grid-decay", "0.8", "--grid-warmup", "16", "--grid-every", "8",
             "--candidates", "64", "--march-steps", "256", "--quiet", "--eval-every", "0", "--max-minutes", "0",
             "--no-outputs"]


def _setup():
    os.environ["METAL_OPS_METAL"] = "shim"
    os.environ.pop("METAL_OPS_METAL_MIN_WORK", None)
    for path in (ROOT, os.path.join(ROOT, "python")):
        if path not in sys.path:
            sys.path.insert(0, path)
    from tests.metal_shim import model

    model.load()


def counters():
    """The host path's totals so far: plans run and its cost."""
    from metal_ops import metal_path

    cost = metal_path.host_cost()
    cost["plans"] = metal_path.metal_runs()[0]
    return cost


def delta(after, before, per=1):
    return {k: (after[k] - before[k]) / per for k in FIELDS}


# The model runs the shaders on the CPU, SIMD-group matrices as fibers: the
# 65536-row cases of the matrix ops would take minutes, and the counts do not
# grow with the size.
MAX_CASE_ELEMENTS = 1 << 20


def largest_case(op):
    """The self-test's largest float32 case of `op` (by input elements, at most
    MAX_CASE_ELEMENTS)."""
    from metal_ops import selftest

    def elements(c):
        return sum(getattr(a, "size", 1) for a in c.inputs)

    found = [c for c in selftest.cases([op]) if elements(c) <= MAX_CASE_ELEMENTS]
    return max([c for c in found if c.dtype == "float32" and c.differentiable] or found, key=elements)


def op_cost(op):
    """The case's cost per forward-and-backward call: selftest.execute runs it
    twice (a warm-up, then one timed run)."""
    from metal_ops import selftest

    case = largest_case(op)
    before = counters()
    selftest.execute(case, "/CPU:0", repeat=1)
    return case, delta(counters(), before, per=2)


def nerf_step_cost(steps):
    from examples.nerf import config, train

    with tempfile.TemporaryDirectory() as tmp:
        args = config.build_parser().parse_args(NERF_ARGS + ["--data-dir", os.path.join(tmp, "data"),
                                                            "--out-dir", os.path.join(tmp, "runs")])
        trainer = train.Trainer(args, log=lambda *a: None)
        trainer.fit(steps=1, verbose=False)  # the first step builds the graph
        before = counters()
        trainer.fit(steps=1 + steps, verbose=False)
        return delta(counters(), before, per=steps)


def _row(name, cost):
    def n(v):
        return f"{v:g}" if v < 10_000 else f"{v:,.0f}"
    return (f"| {name} | {n(cost['plans'])} | {n(cost['command_buffers'])} | {n(cost['waits'])} | "
            f"{n(cost['bytes_in'])} / {n(cost['bytes_out'])} | {n(cost['wrapped'])} |")


def main(argv=None):
    from tests import op_files

    ops = op_files.metal_planned_ops()  # the ops with a Metal plan, found by their files
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", default=",".join(ops), help="comma-separated op names (default: every op with a "
                                                             "Metal plan)")
    parser.add_argument("--nerf-steps", type=int, default=2, help="NeRF steps measured (0: none)")
    args = parser.parse_args(argv)
    _setup()
    import metal_ops  # noqa: F401  (loads the op library)

    print("| call (own queue, strict model) | plans | command buffers | waits | bytes copied in / out | "
          "tensors wrapped |")
    print("| --- | --- | --- | --- | --- | --- |")
    for op in filter(None, args.ops.split(",")):
        case, cost = op_cost(op)
        print(_row(f"{op}: {case.label} {case.dtype}, forward + backward", cost), flush=True)
    if args.nerf_steps > 0:
        print(_row("NeRF sample, one training step (mean of %d)" % args.nerf_steps, nerf_step_cost(args.nerf_steps)))
    from metal_ops import metal_path
    from tests.metal_shim import model as metal_model

    model = metal_model.counters()
    if model["violations"] or metal_path.metal_fallbacks():
        print(f"broken Metal rules: {model['violations']} ({model['first_violation']}); "
              f"fallbacks to the CPU: {metal_path.metal_fallbacks()}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
