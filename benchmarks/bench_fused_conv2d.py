"""Grappler fusion plugin: a stack of ResNet conv/identity blocks, plugin on vs off.

    .venv/bin/python benchmarks/bench_fused_conv2d.py [--repeats 7] [--quick]

The oneDNN setting (TF_ENABLE_ONEDNN_OPTS) is fixed when TensorFlow starts, so
this script runs itself twice as a child (oneDNN on, oneDNN off). Inside each
child, plugin on and plugin off run side by side in ONE process: the plugin is
loaded once and METAL_OPS_FUSION=0 is set while the "off" functions are first
run (Grappler optimises a tf.function when it is first instantiated; the plugin
reads the variable on every pass), so the "off" graphs are exactly TF's own.
Results are checked equal before timing; medians over interleaved repeats, of
the wall time and of the process CPU time (all threads; less disturbed by other
processes on a shared machine).

Model: blocks from seed 003 (ResNet-50 stage 2: res_conv(s=1, (64, 256)),
res_identity((64, 256)) x 2), batch 16, 56x56x64 NHWC input, BatchNorm folded
into the convolutions' bias (inference form). Timed: inference, and one
training step (forward, gradients, SGD update). Also the fused op alone
(OpenBLAS sgemm tiles on TF's pool) vs the Conv2D + BiasAdd + AddV2 + Relu
composite: 1x1 64 -> 256, 1x1 256 -> 64, 3x3 64 -> 64 at 16x56x56, and
3x3 256 -> 256 at 16x14x14 (a filter too large for an L2-sized tile, which
the plugin leaves to TF; docs/FUSED_CONV2D.md).

JSON: benchmarks/results/fused_conv2d.cpu.json.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

from benchmarks import timing
from tests.reference import keras_resnet

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = timing.result_path("fused_conv2d")


# This benchmark's sections of docs/PERFORMANCE.md, read by benchmarks/report.py:
# {<benchmark>.<device>: (title, what it measures, [(column header, row key), ...] or None)}.
REPORT = {
    "fused_conv2d.cpu": ("FusedConv2D and the fusion plugin on the CPU",
                         "3 ResNet blocks, batch 16, 56x56x64, Grappler plugin on against off in one process; the "
                         "fused op alone against TF's Conv2D + BiasAdd + AddV2 + Relu.",
                         [("oneDNN", "oneDNN"), ("what", "what"), ("plugin on / fused ms", "on_ms"),
                          ("off / TF ms", "off_ms"), ("x", "x")]),
}


def _median_times(fns, repeats):
    """Interleaved rounds (benchmarks/timing.py); the median wall seconds of each
    callable and the median process CPU seconds (all threads), which other
    processes' load on the shared machine disturbs less than the wall time."""
    times = timing.interleaved_ms(dict(enumerate(fns)), repeats)
    wall = [statistics.median(w for w, _ in times[i]) / 1e3 for i in range(len(fns))]
    cpu = [statistics.median(c for _, c in times[i]) / 1e3 for i in range(len(fns))]
    return wall, cpu


def child(repeats, quick):
    import numpy as np
    import tensorflow as tf

    import metal_ops
    from metal_ops import fusion
    from tensorflow.python.util import _pywrap_util_port

    fusion.enable()
    keras = tf.keras
    batch, hw = (4, 28) if quick else (16, 56)

    res_conv, res_identity = keras_resnet.blocks(keras)

    keras.utils.set_random_seed(0)
    inp = keras.Input(shape=(hw, hw, 64), batch_size=batch)
    x = res_conv(inp, 1, (64, 256))
    x = res_identity(x, (64, 256))
    x = res_identity(x, (64, 256))
    model = keras.Model(inp, x)
    rng = np.random.default_rng(0)
    xin = tf.constant(rng.standard_normal((batch, hw, hw, 64)).astype(np.float32))
    target = tf.constant(rng.standard_normal((batch, hw, hw, 256)).astype(np.float32))
    opt = keras.optimizers.SGD(1e-6)

    def make(fn):
        return tf.function(fn)

    def infer(x):
        return model(x, training=False)

    def loss_grads(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x, training=True) - y) ** 2)
        return tape.gradient(loss, model.trainable_variables)

    def train_step(x, y):
        grads = loss_grads(x, y)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return grads[0]

    def instantiate(fn, args, plugin):
        """tf.function optimised with the plugin on or off (decided at first run)."""
        f = make(fn)
        if not plugin:
            os.environ["METAL_OPS_FUSION"] = "0"
        try:
            f(*args)
        finally:
            os.environ.pop("METAL_OPS_FUSION", None)
        return f

    out = {"onednn": bool(_pywrap_util_port.IsMklEnabled()), "batch": batch, "hw": hw}
    # ---- equality first ----
    with fusion.record() as rec_infer:
        inf_on = instantiate(infer, (xin,), True)
    inf_off = instantiate(infer, (xin,), False)
    with fusion.record() as rec_train:
        g_on = instantiate(loss_grads, (xin, target), True)
    g_off = instantiate(loss_grads, (xin, target), False)
    y_on, y_off = inf_on(xin).numpy(), inf_off(xin).numpy()
    out["infer_max_abs_diff"] = float(np.max(np.abs(y_on - y_off)))
    gd = [float(np.max(np.abs(a.numpy() - b.numpy())) / (np.max(np.abs(b.numpy())) + 1e-12))
          for a, b in zip(g_on(xin, target), g_off(xin, target))]
    out["grad_max_rel_diff"] = max(gd)
    assert out["infer_max_abs_diff"] < 1e-3, out
    assert out["grad_max_rel_diff"] < 1e-3, out
    out["fused_patterns_infer"] = rec_infer.report().patterns
    out["fused_patterns_train"] = rec_train.report().patterns

    # ---- timings ----
    (t_on, t_off), (c_on, c_off) = _median_times([lambda: inf_on(xin).numpy(), lambda: inf_off(xin).numpy()],
                                                 repeats)
    out["infer_s"] = {"plugin_on": t_on, "plugin_off": t_off, "speedup": t_off / t_on,
                      "cpu_plugin_on": c_on, "cpu_plugin_off": c_off, "cpu_speedup": c_off / c_on}
    tr_on, tr_off = instantiate(train_step, (xin, target), True), instantiate(train_step, (xin, target), False)
    (t_on, t_off), (c_on, c_off) = _median_times([lambda: tr_on(xin, target).numpy(),
                                                  lambda: tr_off(xin, target).numpy()], max(3, repeats // 2))
    out["train_step_s"] = {"plugin_on": t_on, "plugin_off": t_off, "speedup": t_off / t_on,
                           "cpu_plugin_on": c_on, "cpu_plugin_off": c_off, "cpu_speedup": c_off / c_on}

    # ---- the fused op alone vs TF's composite (plugin off for the composite) ----
    out["op_alone_s"] = {}
    shapes = (("1x1_64to256", hw, 1, 64, 256), ("1x1_256to64", hw, 1, 256, 64), ("3x3_64to64", hw, 3, 64, 64),
              ("3x3_256to256_14x14", max(hw // 4, 1), 3, 256, 256))
    for name, size, k, cin, cout in shapes:
        xs = tf.constant(rng.standard_normal((batch, size, size, cin)).astype(np.float32))
        ws = tf.constant((rng.standard_normal((k, k, cin, cout)) / np.sqrt(k * k * cin)).astype(np.float32))
        bs = tf.constant(rng.standard_normal(cout).astype(np.float32))
        rs = tf.constant(rng.standard_normal((batch, size, size, cout)).astype(np.float32))
        ours = make(lambda x, w, b, r: metal_ops.fused_conv2d(x, w, b, r, activation="relu"))
        theirs = instantiate(lambda x, w, b, r: tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "SAME"), b) + r),
                             (xs, ws, bs, rs), False)
        run_ours = lambda: ours(xs, ws, bs, rs).numpy()
        run_theirs = lambda: theirs(xs, ws, bs, rs).numpy()
        d = float(np.max(np.abs(run_ours() - run_theirs())))
        assert d < 1e-3, d
        (t_ours, t_tf), (c_ours, c_tf) = _median_times([run_ours, run_theirs], repeats)
        flops = 2.0 * batch * size * size * cin * cout * k * k
        out["op_alone_s"][name] = {"fused_op": t_ours, "tf_composite": t_tf,
                                   "speedup": t_tf / t_ours, "cpu_speedup": c_tf / c_ours,
                                   "fused_op_gflops": flops / t_ours / 1e9, "tf_gflops": flops / t_tf / 1e9,
                                   "max_abs_diff": d}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="small shapes (smoke test)")
    ap.add_argument("--child", action="store_true")
    args = ap.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args.repeats, args.quick)))
        return
    results = {"repeats": args.repeats, "load_avg_start": os.getloadavg(), "configs": {}}
    for onednn in ("1", "0"):
        env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS=onednn, TF_CPP_MIN_LOG_LEVEL="2")
        env.pop("METAL_OPS_FUSION", None)
        cmd = [sys.executable, "-m", "benchmarks.bench_fused_conv2d", "--child", "--repeats", str(args.repeats)]
        if args.quick:
            cmd.append("--quick")
        proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr[-5000:])
            raise SystemExit(f"child with TF_ENABLE_ONEDNN_OPTS={onednn} failed")
        line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")][-1]
        r = json.loads(line[len("RESULT "):])
        key = f"onednn_{'on' if onednn == '1' else 'off'}"
        results["configs"][key] = r
        print(f"== TF_ENABLE_ONEDNN_OPTS={onednn} (oneDNN active: {r['onednn']}), batch {r['batch']}, "
              f"{r['hw']}x{r['hw']}x64, 3 ResNet blocks")
        print(f"   fused by the plugin (inference): {len(r['fused_patterns_infer'])} "
              f"{sorted(set(r['fused_patterns_infer']))}")
        print(f"   check: inference max |diff| {r['infer_max_abs_diff']:.2e}, "
              f"gradients max rel diff {r['grad_max_rel_diff']:.2e}")
        for name in ("infer_s", "train_step_s"):
            t = r[name]
            print(f"   {name[:-2]:>10}: plugin on {t['plugin_on'] * 1e3:8.1f} ms   off {t['plugin_off'] * 1e3:8.1f} ms"
                  f"   speedup {t['speedup']:.3f}x (CPU time {t['cpu_speedup']:.3f}x)")
        for name, t in r["op_alone_s"].items():
            print(f"   fused op alone, {name} + bias + residual + relu: {t['fused_op'] * 1e3:.1f} ms "
                  f"({t['fused_op_gflops']:.0f} GFLOP/s) "
                  f"vs TF Conv2D+BiasAdd+AddV2+Relu {t['tf_composite'] * 1e3:.1f} ms "
                  f"({t['tf_gflops']:.0f} GFLOP/s): {t['speedup']:.3f}x (CPU time {t['cpu_speedup']:.3f}x)")
    results["load_avg_end"] = os.getloadavg()
    print(f"load average: start {results['load_avg_start']}, end {results['load_avg_end']}")
    if not args.quick:
        timing.write_json(RESULTS, results)


if __name__ == "__main__":
    main()
