"""Train the NeRF sample: `python -m examples.nerf.train --name demo` (see README.md).

Outputs go to runs/<name>/: checkpoints (ckpt/, resumable with --resume),
side-by-side PNGs of rendered vs ground-truth test views, psnr_vs_time.png,
metrics.json and orbit.gif.
"""
import argparse
import contextlib
import dataclasses
import json
import math
import os
import sys
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Each GPU launches its kernels from two threads of its own rather than from TensorFlow's
# inter-op pool, which the step's host work shares: the step on a GPU is bound by the
# host's kernel launches (README.md, "Measured on two H100s"). TensorFlow reads the
# variable when it creates its GPU devices, at the process's first op.
os.environ.setdefault("TF_GPU_THREAD_MODE", "gpu_private")


def _xla_flags_for_the_sample(flags, tensorflow_version, nvidia_gpu):
    """XLA_FLAGS with the sample's choices for XLA, each unless `flags` names it:
    - XLA's fusion-emitter autotuner off (TensorFlow 2.21 only). For each fusion XLA's GPU
      compiler (TensorFlow 2.21's) times its native emitter against Triton's: a large part of the
      --jit step's first call, for no faster step (README.md, "--jit"). XLA refuses a flag it does
      not know, and this one is experimental (older XLAs lack it, a later one may drop it).
    - LLVM's optimisation level 1 for XLA's own kernels, where an NVIDIA GPU is visible
      (`nvidia_gpu`): on the GPU the --jit step's first call compiles sooner and its steady step is
      no slower, while on the CPU XLA's kernels of the same step run slower (README.md, "--jit")."""
    added = []
    autotuner = "--xla_gpu_experimental_enable_fusion_autotuner"
    if autotuner not in flags and tensorflow_version == (2, 21):
        added.append(f"{autotuner}=false")
    level = "--xla_backend_optimization_level"
    if level not in flags and nvidia_gpu:
        added.append(f"{level}=1")
    return " ".join(filter(None, [flags.strip(), *added])) if added else flags


def _nvidia_gpu_visible(environ=os.environ, devices="/dev/nvidia[0-9]*"):
    """Whether CUDA can see an NVIDIA GPU, read without TensorFlow (the XLA flags are set before it
    starts): a GPU's device node exists and CUDA_VISIBLE_DEVICES does not hide them all."""
    import glob

    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    return bool(glob.glob(devices))


def _tensorflow_version():
    """(major, minor) of the installed TensorFlow, read without importing it; None if none is found."""
    from importlib import metadata
    for dist in ("tensorflow", "tensorflow-cpu", "tf-nightly"):
        try:
            return tuple(int(part) for part in metadata.version(dist).split(".")[:2])
        except (metadata.PackageNotFoundError, ValueError):
            continue
    return None


# XLA reads XLA_FLAGS at its first compilation.
_XLA_FLAGS = _xla_flags_for_the_sample(os.environ.get("XLA_FLAGS", ""), _tensorflow_version(), _nvidia_gpu_visible())
if _XLA_FLAGS:
    os.environ["XLA_FLAGS"] = _XLA_FLAGS

import numpy as np  # noqa: E402

from examples.nerf import datasets, scene  # noqa: E402

# Steps in one call of the training step's tf.function under --strategy multiworker. A call
# costs its Python and each collective's set-up whatever its steps (README.md, "Measured on
# two H100s"). Elsewhere the default is one step a call: the ray count follows the sample
# budget between calls only, and over a call's steps it lags.
MULTIWORKER_STEPS_PER_CALL = 8


def _check_finite(loss, step):
    """float(loss) (a read-back: where fit() reads it anyway), or FloatingPointError when training diverged."""
    value = float(loss)
    if not math.isfinite(value):
        raise FloatingPointError(f"the training loss is {value} after step {step}: training diverged "
                                 "(a lower --lr may help)")
    return value


def build_parser():
    p = argparse.ArgumentParser(prog="python -m examples.nerf.train", description=__doc__,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    g = p.add_argument_group("run")
    g.add_argument("--name", default="nerf", help="run name: outputs go to <out-dir>/<name>/")
    g.add_argument("--out-dir", default="runs")
    g.add_argument("--data-dir", default="data", help="where the generated scene .npz is cached")
    g.add_argument("--resume", action="store_true", help="continue from the run's latest checkpoint")
    g.add_argument("--seed", type=int, default=0,
                   help="seeds the initial weights (keras.utils.set_random_seed), the ray batches and the jitter")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    g.add_argument("--no-outputs", action="store_true",
                   help="skip PNGs, plot and orbit (metrics.json and checkpoints are still written)")
    g.add_argument("--strategy", choices=["default", "mirrored", "multiworker"], default="default",
                   help="tf.distribute strategy (mirrored: all local devices; multiworker: TF_CONFIG)")
    g.add_argument("--batch-per-replica", action="store_true",
                   help="--batch-rays and --sample-budget are each replica's: the global batch grows with the "
                        "replicas (default: they are the global batch's, split between the replicas)")
    g.add_argument("--collective", choices=["auto", "nccl", "ring"], default="auto",
                   help="multiworker: the all-reduce's transport (auto: NCCL where the workers run on GPUs, "
                        "the ring over gRPC otherwise)")
    g.add_argument("--bytes-per-pack", type=int, default=32 << 20,
                   help="multiworker: the gradients are all-reduced in packs of about this many bytes "
                        "(0: one pack), each started as soon as its gradients exist")
    g.add_argument("--steps-per-call", type=int, default=None, metavar="K",
                   help="run up to K training steps in one call of the step's tf.function (a loop in the "
                        "graph): the per-call costs (Python, the collectives' set-up under a strategy) are "
                        "paid once per K steps; a call ends early at a grid update, evaluation or checkpoint, "
                        "and the ray count and learning rate change between calls only; with --jit the K steps "
                        "are one XLA program (a loop in it) and a shorter call runs one step at a time (default: "
                        f"{MULTIWORKER_STEPS_PER_CALL} under --strategy multiworker, else 1)")
    g = p.add_argument_group("scene")
    g.add_argument("--data", default=None, metavar="PATH",
                   help="train on a scene from disk: a NeRF-synthetic folder, an instant-ngp/nerfstudio "
                        "transforms.json (or its folder) or a tiny_nerf_data.npz (default: the procedural scene)")
    g.add_argument("--downscale", type=int, default=1,
                   help="--data: box-filter the images by this factor at load (8: 800x800 -> 100x100)")
    g.add_argument("--background", choices=["white", "black", "random"], default="white",
                   help="--data with RGBA images: the colour composited behind them (random: a new colour per ray "
                        "and step; evaluation then uses white)")
    g.add_argument("--holdout", type=int, default=None,
                   help="--data without a test split: hold out every K-th view (default: instant-ngp files every "
                        "8th, tiny_nerf_data.npz the last 20%%; 0: none)")
    g.add_argument("--test-views", type=int, default=0,
                   help="evaluate on this many evenly spaced test views (0 = all)")
    g.add_argument("--size", type=int, default=100, help="image height and width")
    g.add_argument("--n-train", type=int, default=100)
    g.add_argument("--n-val", type=int, default=8)
    g.add_argument("--n-test", type=int, default=8)
    g.add_argument("--spp", type=int, default=3,
                   help="ground-truth anti-aliasing: each pixel averages spp x spp sub-pixel rays (1 = point-sampled)")
    g = p.add_argument_group("model")
    g.add_argument("--model", choices=["hash", "baseline"], default="hash",
                   help="hash: our hash-grid NeRF; baseline: the Keras example's NeRF")
    g.add_argument("--levels", type=int, default=12)
    g.add_argument("--features", type=int, default=2)
    g.add_argument("--log2-table", type=int, default=16, help="log2 hash table size per level")
    g.add_argument("--base-res", type=int, default=16)
    g.add_argument("--finest-res", type=int, default=None,
                   help="default 512; --recipe ngp: 2048 x the scene's aabb_scale, as instant-NGP")
    g.add_argument("--hidden", type=int, default=64)
    g.add_argument("--mlp", choices=["fused", "dense"], default="fused",
                   help="hash model's MLPs: metal_ops.layers.FusedMLP + metal_ops.sh_encode, or Keras Dense layers "
                        "+ TF ops (for comparison)")
    g.add_argument("--mlp-precision", choices=["auto", "float32", "float16"], default="auto",
                   help="the fused MLPs' arithmetic: float16 (float32 weights and accumulation, a static loss "
                        "scale) runs on GPUs; auto = float16 where TensorFlow lists a GPU, else float32")
    g.add_argument("--sh-degree", type=int, default=4,
                   help="view-direction encoding: real spherical harmonics, sh-degree**2 values (1 = no view dependence)")
    g = p.add_argument_group("training")
    g.add_argument("--steps", type=int, default=3000)
    g.add_argument("--max-minutes", type=float, default=8.0,
                   help="stop training after this much training time (evaluation excluded); 0 = no limit")
    g.add_argument("--batch-rays", type=int, default=4096)
    g.add_argument("--samples", type=int, default=None,
                   help="samples per ray (default: 24 hash with the occupancy grid, 32 baseline as in the Keras example)")
    g.add_argument("--lr", type=float, default=None, help="default: 2e-2 hash, 1e-3 baseline")
    g.add_argument("--adam", choices=["fused", "keras"], default="fused",
                   help="how keras.optimizers.Adam's update is applied: fused = one tf.raw_ops.ResourceApplyAdam per "
                        "variable (the same formulas, on the optimizer's own variables: checkpoints are the same); "
                        "keras = optimizer.apply_gradients (about ten ops per variable)")
    g.add_argument("--loss", choices=["robust", "mse", "huber"], default="mse",
                   help="robust: metal_ops.losses.RobustLoss (--robust-alpha, --robust-scale); huber: "
                        "keras.losses.Huber(--huber-delta), instant-NGP's loss")
    g.add_argument("--robust-alpha", type=float, default=1.0)
    g.add_argument("--robust-scale", type=float, default=0.03)
    g.add_argument("--distortion", type=float, default=0.0,
                   help="weight of metal_ops.distortion_loss (0 = off)")
    g.add_argument("--sampler", choices=["march", "fixed"], default="march",
                   help="hash model: march = metal_ops.ray_march through the occupancy grid (samples only in occupied "
                        "cells, a variable number per ray) + metal_ops.packed_volume_render, with a fixed budget of "
                        "samples per step (--sample-budget: the ray count adapts); fixed = --samples per ray placed "
                        "by the TF occupancy sampler (--candidates) + metal_ops.volume_render, --batch-rays rays")
    g.add_argument("--sample-budget", type=int, default=None,
                   help="march: field evaluations per step (default: --batch-rays x --samples); the step's ray count "
                        "follows it from the previous steps' samples per ray")
    g.add_argument("--jit", action="store_true",
                   help="march: compile the whole training step (march, encoding, MLPs, renderer, loss, gradients, "
                        "Adam) with XLA as one tf.function(jit_compile=True): metal_ops.ray_march_static into "
                        "--sample-budget samples over a ray count of --batch-rays x 2^k (one compilation each), the "
                        "rays that do not fit masked out of the loss (README.md, \"--jit\")")
    g.add_argument("--xla-cache", default=None, metavar="DIR",
                   help="--jit: keep XLA's compiled programs in DIR (TensorFlow's persistent compilation cache, "
                        "tf_xla_persistent_cache_directory) and load them in later runs of the same settings "
                        "instead of compiling them again")
    g.add_argument("--march-budget", type=int, default=None,
                   help="--jit with pruning: samples marched per step, which the density-only pass prunes into "
                        "--sample-budget (default: 2 x --sample-budget)")
    g.add_argument("--march-steps", type=int, default=512,
                   help="march: steps along the AABB's diagonal (the step size)")
    g.add_argument("--max-samples", type=int, default=None,
                   help="march: at most this many samples per ray (default: --march-steps, which no ray inside the box "
                        "exceeds; a lower cap cuts the far part of long rays, which then never see the scene behind)")
    g.add_argument("--no-prune", dest="prune", action="store_false",
                   help="march: evaluate every marched sample (default: a density-only pass without gradients first "
                        "drops the samples behind each ray's early termination, which contribute nothing)")
    g.add_argument("--occupancy", dest="occupancy", action="store_true", default=True,
                   help="occupancy-grid sampling (hash model)")
    g.add_argument("--no-occupancy", dest="occupancy", action="store_false")
    g.add_argument("--grid-res", type=int, default=64)
    g.add_argument("--grid-every", type=int, default=16, help="occupancy update interval (steps)")
    g.add_argument("--grid-decay", type=float, default=0.95, help="occupancy EMA decay per update")
    g.add_argument("--grid-warmup", type=int, default=128,
                   help="steps of plain stratified sampling before the grid is used")
    g.add_argument("--candidates", type=int, default=128, help="occupancy lookups per ray")
    g.add_argument("--occlusion-depth", type=float, default=0.0,
                   help="also skip candidates behind this optical depth of the grid's density estimates "
                        "(0 = off: it culls the surfaces behind rays that graze an object, see README.md)")
    g.add_argument("--no-jitter", action="store_true",
                   help="deterministic sample placement (used by the distributed tests)")
    g.add_argument("--eval-every", type=int, default=250, help="steps between held-out evaluations")
    g.add_argument("--eval-views", type=int, default=4, help="validation views used in periodic evaluation")
    g.add_argument("--ckpt-every", type=int, default=500)
    g.add_argument("--orbit-frames", type=int, default=24)
    g = p.add_argument_group("recipe (README.md, \"The recipe against instant-NGP and nerfacc\")")
    g.add_argument("--recipe", choices=["auto", "small", "ngp"], default="auto",
                   help="the defaults: small = the sample's own (a 2-core CPU, the 100x100 demo); ngp = instant-NGP's "
                        "recipe for real scenes on a GPU (NGP_RECIPE); auto = ngp where TensorFlow lists a GPU and "
                        "--data names a scene, else small. Flags given explicitly always win")
    g.add_argument("--huber-delta", type=float, default=0.1, help="--loss huber: the quadratic zone's half-width")
    g.add_argument("--lr-warmup", type=int, default=0,
                   help="steps of linear learning-rate warm-up from 1%% (nerfacc: 100; 0 = none)")
    g.add_argument("--grid-rule", choices=["every-cell", "ngp"], default="every-cell",
                   help="occupancy-grid update: every-cell = each update evaluates every cell, threshold 0.01 on the "
                        "opacity of one cell; ngp = instant-NGP's and nerfacc's: every cell for the first 256 steps, "
                        "then a quarter of the cells at random and a quarter of the occupied ones, threshold 0.01 on "
                        "the optical thickness of one march step; both lowered to the mean estimate")
    g.add_argument("--eval-chunk", type=int, default=16384, help="rays rendered per call in evaluation")
    g.add_argument("--pictures", type=int, default=None,
                   help="side-by-side PNGs of this many evenly spaced test views (default: all of them)")
    return p


# instant-NGP's recipe as this sample runs it (README.md compares it point by
# point): --recipe ngp, the default on a GPU for scenes from disk.
NGP_RECIPE = dict(levels=16, features=2, log2_table=19, base_res=16, march_steps=1024, grid_res=128,
                  grid_rule="ngp", sample_budget=1 << 18, batch_rays=8192, background="random", lr=1e-2,
                  lr_warmup=100, steps=35000, max_minutes=5.0, eval_every=2000, ckpt_every=5000,
                  eval_chunk=1 << 17)


def resolve_recipe(choice, data, gpu_listed=None):
    """"small" or "ngp" for --recipe `choice` ("auto": ngp on a GPU with --data)."""
    if choice != "auto":
        return choice
    if not data:
        return "small"
    if gpu_listed is None:
        import tensorflow as tf
        gpu_listed = bool(tf.config.list_physical_devices("GPU"))
    return "ngp" if gpu_listed else "small"


def parse_args(argv=None, gpu_listed=None):
    """The command line with the recipe's defaults (explicit flags win over them)."""
    p = build_parser()
    first, _ = p.parse_known_args(argv)
    recipe = resolve_recipe(first.recipe, first.data, gpu_listed)
    if recipe == "ngp":
        p.set_defaults(**NGP_RECIPE)
    args = p.parse_args(argv)
    args.recipe = recipe
    return args


MLP_FLOAT16_LOSS_SCALE = 1024.0


def resolve_mlp_precision(choice, model, mlp, gpu_listed):
    """The fused MLPs' precision for --mlp-precision `choice` ("auto": float16
    on a GPU, where the op has a float16 kernel, for the fused hash model)."""
    if choice == "auto":
        return "float16" if gpu_listed and model == "hash" and mlp == "fused" else "float32"
    if choice == "float16" and (model != "hash" or mlp != "fused"):
        raise ValueError("--mlp-precision float16 needs --model hash --mlp fused")
    return choice


def graph_loop(k, step, state):
    """`state = step(i, *state)` for i in range(k), a loop in the graph (tf.while_loop). The
    sample's tf.functions take autograph=False: its step has no Python control flow on tensors,
    and AutoGraph's conversion of the step's Python costs seconds of the first step."""
    import tensorflow as tf

    return tf.while_loop(lambda i, *_: i < k, lambda i, *s: (i + 1, *step(i, *s)),
                         (tf.constant(0), *state))[1:]


def runs_on_gpu(strategy):
    """Whether the model's ops run on GPUs: the strategy's devices, or (the
    default strategy) where an op created here is placed, device scopes included."""
    import tensorflow as tf

    if strategy is not tf.distribute.get_strategy() or tf.distribute.has_strategy():
        return all("GPU" in d.upper() for d in strategy.extended.worker_devices)
    return "GPU" in tf.identity(tf.constant(0.0)).device.upper()


def unscale_gradient(g, scale):
    """g / scale for a dense or an IndexedSlices gradient (None stays None)."""
    import tensorflow as tf

    if g is None:
        return None
    if isinstance(g, tf.IndexedSlices):
        return tf.IndexedSlices(g.values / scale, g.indices, g.dense_shape)
    return g / scale


def psnr_from_mse(mse):
    return -10.0 * math.log10(max(float(mse), 1e-12))


def training_target(colors, mode, seed, step):
    """Target colours [N, 3] of a batch and the background to render it on.

    colors: uint8 [N, 3] or premultiplied RGBA [N, 4]. RGBA is composited on
    white or black, or (mode "random") on a colour per ray drawn from (seed,
    step), so each step sees new backgrounds and the model cannot bake one
    into the transparent space. Returns background None where the renderer's
    fixed background (white/black) is the one to use.
    """
    import tensorflow as tf

    c = tf.cast(colors, tf.float32) / 255.0
    if c.shape[-1] != 4:
        return c, None
    if mode == "random":
        seeds = tf.stack([tf.cast(seed, tf.int64), tf.cast(step, tf.int64)])
        background = tf.random.stateless_uniform(tf.shape(c[:, :3]), seed=seeds)
        return c[:, :3] + background * (1.0 - c[:, 3:]), background
    fixed = tf.constant([0.0, 0.0, 0.0] if mode == "black" else [1.0, 1.0, 1.0], tf.float32)
    return c[:, :3] + fixed * (1.0 - c[:, 3:]), None


class Trainer:
    """The whole pipeline; usable from tests and benchmarks (see train() below)."""

    def __init__(self, args, strategy=None, log=print, dataset=None):
        import keras
        import tensorflow as tf

        import metal_ops
        from examples.nerf import baseline, fused_adam, model as hmodel, sampling

        self.tf, self.keras, self.metal_ops = tf, keras, metal_ops
        self._baseline, self._hmodel, self._sampling = baseline, hmodel, sampling
        self.args = a = args
        self.log = log
        if a.samples is None:
            a.samples = 24 if a.model == "hash" else 32
        if a.sample_budget is None:
            a.sample_budget = a.batch_rays * a.samples
        self.marching = a.model == "hash" and a.sampler == "march"
        if self.marching and a.distortion > 0 and not hasattr(metal_ops, "packed_distortion_loss"):
            raise ValueError("--distortion needs --sampler fixed (this build has no packed distortion loss)")
        self.jit = bool(getattr(a, "jit", False))
        if self.jit and not self.marching:
            raise ValueError("--jit needs --model hash --sampler march (the step it compiles marches with "
                             "metal_ops.ray_march_static)")
        if self.jit and a.distortion > 0:
            raise ValueError("--jit: --distortion needs packed_distortion_loss, which has no XLA kernel; "
                             "train with --distortion 0 or without --jit")
        if getattr(a, "march_budget", None) is not None and not (self.jit and a.prune):
            raise ValueError("--march-budget is the --jit step's march before pruning: it needs --jit (and pruning)")
        if getattr(a, "xla_cache", None) and not self.jit:
            raise ValueError("--xla-cache keeps the programs --jit compiles: it needs --jit")
        if self.jit and a.strategy == "mirrored":
            raise ValueError("--jit: --strategy mirrored is not compiled whole (one program a device); use "
                             "--strategy multiworker, one GPU a worker, or --strategy default")
        self.steps_per_call = getattr(a, "steps_per_call", None)
        if self.steps_per_call is None:
            self.steps_per_call = MULTIWORKER_STEPS_PER_CALL if a.strategy == "multiworker" else 1
        if self.steps_per_call < 1:
            raise ValueError(f"--steps-per-call must be at least 1, got {self.steps_per_call}")
        if self.jit:
            self._check_jit_kernels()
        if a.lr is None:
            a.lr = 2e-2 if a.model == "hash" else 1e-3
        self.run_dir = os.path.join(a.out_dir, a.name)
        os.makedirs(self.run_dir, exist_ok=True)

        t0 = time.perf_counter()
        if dataset is not None:
            # A loaded scene shared between trainers (benchmarks): their own split lists, one ray cache.
            self.dataset = dataclasses.replace(dataset, splits={k: list(v) for k, v in dataset.splits.items()},
                                               notes=list(dataset.notes))
            self.data_path = a.data or dataset.name
        elif a.data:
            self.dataset = datasets.load(a.data, downscale=a.downscale, holdout=a.holdout,
                                         log=None if a.quiet else log)
            self.data_path = a.data
        else:
            data, self.data_path = scene.load_or_generate(
                a.data_dir, verbose=not a.quiet, height=a.size, width=a.size, n_train=a.n_train,
                n_val=a.n_val, n_test=a.n_test, spp=a.spp, seed=0)
            self.dataset = datasets.from_procedural(data)
        self.data_seconds = time.perf_counter() - t0
        ds = self.dataset
        if not ds.splits["val"] and ds.splits["test"] and a.eval_every:
            # Periodic evaluation only draws the PSNR curve (nothing is selected by it).
            idx = np.linspace(0, len(ds.splits["test"]) - 1, max(a.eval_views, 1)).round().astype(int)
            ds.splits["val"] = [ds.splits["test"][i] for i in sorted(set(idx))]
            ds.notes.append(f"no validation views: the periodic evaluation uses {len(ds.splits['val'])} "
                            "evenly spaced test views")
        for note in ds.notes:
            log(f"{ds.name}: {note}")
        if a.test_views and len(ds.splits["test"]) > a.test_views:
            idx = np.linspace(0, len(ds.splits["test"]) - 1, a.test_views).round().astype(int)
            ds.splits["test"] = [ds.splits["test"][i] for i in idx]
        self.H, self.W = ds.size()
        if a.finest_res is None:
            # instant-NGP: 2048 over its unit cube, which spans 1 / NGP_DEFAULT_SCALE scene units per aabb_scale.
            aabb_scale = max(1, round(float(np.max(ds.aabb[1] - ds.aabb[0])) * datasets.NGP_DEFAULT_SCALE))
            a.finest_res = 2048 * aabb_scale if getattr(a, "recipe", "small") == "ngp" else 512
        self.near, self.far = ds.near, ds.far
        self.aabb = tf.constant(ds.aabb, tf.float32)
        # Evaluation composites RGBA views on white (black with --background black).
        self.eval_background = np.array([0.0, 0.0, 0.0] if a.background == "black" else [1.0, 1.0, 1.0])
        self.background = tf.constant(self.eval_background, tf.float32)
        o, d, c = self._rays(ds.splits["train"])
        self.train_o, self.train_d, self.train_c = (tf.constant(x) for x in (o, d, c))
        self.n_train_rays = len(o)

        self.strategy = strategy or tf.distribute.get_strategy()
        self.num_replicas = self.strategy.num_replicas_in_sync
        # --jit under workers: each worker's step one XLA program, the gradients' all-reduce an XLA
        # collective in it (NCCL), which XLA compiles for GPUs only.
        self._jit_workers = self.jit and (tf.distribute.has_strategy() or
                                          self.strategy is not tf.distribute.get_strategy())
        if self._jit_workers and (len(self.strategy.extended.worker_devices) != 1 or
                                  (self.num_replicas > 1 and not runs_on_gpu(self.strategy))):
            raise ValueError("--jit under a strategy compiles one device's step a worker, and the workers' "
                             "all-reduce for GPUs only: run one GPU a worker (--strategy multiworker), or "
                             "train without --jit")
        if getattr(a, "batch_per_replica", False):
            # From here on the flags hold the global batch (as metrics.json's config records it).
            a.batch_per_replica = False
            a.replica_batch_rays, a.replica_sample_budget = a.batch_rays, a.sample_budget
            a.batch_rays *= self.num_replicas
            a.sample_budget *= self.num_replicas
        if a.batch_rays % self.num_replicas:
            raise ValueError(f"--batch-rays {a.batch_rays} is not divisible by {self.num_replicas} replicas")
        self.mlp_precision = resolve_mlp_precision(a.mlp_precision, a.model, a.mlp, runs_on_gpu(self.strategy))
        # float16 MLP gradients of a mean loss over thousands of rays fall below
        # float16's normal range; the loss is scaled up and the gradients down.
        self.loss_scale = MLP_FLOAT16_LOSS_SCALE if self.mlp_precision == "float16" else 1.0
        # The initial weights from --seed, as the ray batches and jitter are: a run
        # is reproducible on the CPU (Keras draws unseeded initialisers from its
        # global seed generator).
        keras.utils.set_random_seed(a.seed)
        with self.strategy.scope():
            if a.model == "hash":
                self.model = hmodel.HashNeRF(
                    num_levels=a.levels, features_per_level=a.features, log2_hashmap_size=a.log2_table,
                    base_resolution=a.base_res, finest_resolution=a.finest_res, hidden=a.hidden,
                    sh_degree=a.sh_degree, mlp=a.mlp, mlp_precision=self.mlp_precision)
                # ngp rule: the threshold is on one march step's optical thickness (the fixed sampler: a cell's).
                step = self._hmodel.march_step_size(ds.aabb, a.march_steps) if self.marching else None
                self.grid = sampling.OccupancyGrid(ds.aabb, resolution=a.grid_res, decay=a.grid_decay,
                                                   rule=getattr(a, "grid_rule", "every-cell"), threshold_length=step)
                if self.marching:
                    # The training step's occupancy bitfield (metal_ops.ray_march's input):
                    # every cell occupied before the grid warm-up ends, then the grid's mask,
                    # packed where it changes (publish_occupancy), not every step; not saved.
                    # One variable for both phases, so one traced training step serves the
                    # whole run. Its bytes as float32 words (bitcast, never computed with):
                    # MultiWorkerMirroredStrategy broadcasts initial values with collectives,
                    # which take no uint8, and an int32 variable lives in host memory (a copy
                    # to the GPU every step, and a wait for it at every publish).
                    self.all_occupied_bits = metal_ops.pack_occupancy(tf.ones_like(self.grid.mask)[None]).numpy()
                    self.occupancy_words = tf.Variable(
                        self._words(self.all_occupied_bits), trainable=False, name="occupancy_bits",
                        synchronization=tf.VariableSynchronization.ON_WRITE,
                        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
                    self._published_grid = False
            else:
                self.model = baseline.KerasExampleNeRF()
                self.grid = None
            # The learning rate is set every step from the progress (steps or time
            # budget, whichever is further along): x0.33 at 50%, 75% and 90%.
            if a.model == "hash":
                self.optimizer = keras.optimizers.Adam(a.lr, beta_1=0.9, beta_2=0.99, epsilon=1e-15)
            else:
                self.optimizer = keras.optimizers.Adam(a.lr)
            self.optimizer.build(self.model.trainable_variables)
            self.fused_adam = fused_adam.FusedAdam(self.optimizer, self.model.trainable_variables) \
                if a.adam == "fused" else None
            self.step_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="step",
                                        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
            self.time_var = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="train_seconds",
                                        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        if a.loss == "robust":
            self.loss_fn = metal_ops.losses.RobustLoss(alpha=a.robust_alpha, scale=a.robust_scale)
        elif a.loss == "huber":
            self.loss_fn = keras.losses.Huber(delta=a.huber_delta)
        else:
            self.loss_fn = keras.losses.MeanSquaredError()

        ckpt_items = dict(model=self.model, optimizer=self.optimizer, step=self.step_var,
                          train_seconds=self.time_var)
        if self.grid is not None:
            ckpt_items["grid"] = self.grid
        self.ckpt = tf.train.Checkpoint(**ckpt_items)
        self.ckpt_dir = os.path.join(self.run_dir, "ckpt")
        if not a.resume and self._is_chief() and os.path.isdir(self.ckpt_dir):
            import shutil
            shutil.rmtree(self.ckpt_dir)
        self.manager = tf.train.CheckpointManager(self.ckpt, self._ckpt_dir_for_worker(), max_to_keep=2)
        self.history = []
        # Every worker restores the chief's checkpoint (the others' are temporary): a shared folder,
        # or a copy of it on every machine.
        latest = tf.train.latest_checkpoint(self.ckpt_dir) if a.resume else None
        if latest:
            self._check_checkpoint_layout(latest)
            self.ckpt.restore(latest).assert_existing_objects_matched()
            if self.marching:
                self.publish_occupancy(int(self.step_var.numpy()), force=True)
            hist = os.path.join(self.run_dir, "metrics.json")
            if os.path.exists(hist):
                with open(hist) as f:
                    self.history = json.load(f).get("history", [])
            self.log(f"resumed from {latest} at step {int(self.step_var.numpy())}")

        self._train_fn = {}
        self._block_fn = {}  # --steps-per-call: the loop of steps of each use_grid
        self._jit_fn = {}  # --jit: the compiled step of each ray count
        self._jit_block_fn = {}  # --jit --steps-per-call: the compiled loop of steps of each ray count
        self._jit_rays = 0  # --jit: the last call's ray count (jit_rays: it only grows)
        self._occupancy_arg = None  # --jit: the bitfield the compiled step was given (occupancy_bits)
        self._render_fn = {}
        self.eval_at_seconds = []  # fit(): also evaluate when the training time passes each of these
        self._grid_fn = None
        self._grid_ahead = None  # --jit: the thread compiling the grid update ahead, its errors
        self._grid_phases = set()  # the phases (grid_fn's every_cell) updates have run in
        # The step counter, mirrored on the host: reading step_var (on the GPU
        # there) would wait for the device every step.
        self._step = int(self.step_var.numpy())
        self._first_step = self._step
        self._pending_counts = None  # (rays, counts tensor) of the last step, read one step later
        self.samples_per_ray = None  # march: recent field evaluations per ray (drives the ray count)
        self.field_evals = 0  # field evaluations (samples), marched samples and rays of this process's steps
        self.marched = 0
        self.rays_seen = 0
        self.padding = 0  # --jit: padding samples (budget - samples kept) and rays dropped (no room in the budget)
        self.dropped_rays = 0
        self.step_seconds = []  # wall time of each step fit() ran (the first includes tracing and compiling)
        if self.marching:
            self.step_size = self._hmodel.march_step_size(ds.aabb, a.march_steps)
            if a.max_samples is None:
                a.max_samples = a.march_steps

    # ------------------------------------------------------------------ helpers
    def jit_ops(self):
        """The library's ops (forward and gradient) in the --jit training step."""
        a = self.args
        ops = ["MetalOpsRayMarchStatic", "MetalOpsHashEncode", "MetalOpsHashEncodeGrad",
               "MetalOpsPackedVolumeRender", "MetalOpsPackedVolumeRenderGrad"]
        if a.mlp == "fused":
            ops += ["MetalOpsFusedMLP", "MetalOpsFusedMLPGrad", "MetalOpsSHEncode", "MetalOpsSHEncodeGrad"]
        if a.loss == "robust":
            ops += ["MetalOpsRobustLoss", "MetalOpsRobustLossGrad"]
        return ops

    def _check_jit_kernels(self):
        """--jit: XLA compiles each op of the step in this process (where TensorFlow lists a GPU: with
        a CUDA handler), else a ValueError naming what is missing (docs/XLA.md)."""
        loader = self.metal_ops._loader
        ops = self.jit_ops()
        if loader.has_xla_kernels(ops):
            return
        registered, reason = loader.xla_status()
        if not registered:
            raise ValueError(f"--jit: XLA does not compile the metal_ops ops in this process: {reason}")
        missing = sorted(set(ops) - set(loader.xla_cuda_ops()))
        raise ValueError(f"--jit: TensorFlow lists a GPU, and these ops of the training step have no CUDA handler "
                         f"for XLA: {', '.join(missing)} (docs/XLA.md, \"On a GPU\"); train without --jit")

    def _check_checkpoint_layout(self, path):
        """A checkpoint of the other MLP layout is refused with the flag that reads it."""
        if self.args.model != "hash":
            return
        saved = self._hmodel.checkpoint_mlp(path)
        if saved is not None and saved != self.args.mlp:
            raise ValueError(f"{path}: this checkpoint holds the hash model with --mlp {saved} (its MLP weights are "
                             f"{'FusedMLP layers' if saved == 'fused' else 'Keras Dense layers'}); resume it with "
                             f"--mlp {saved}, or start a new run without --resume")

    def _task(self):
        """This process's (type, index) in TF_CONFIG under --strategy multiworker, else ("chief", 0)."""
        tfc = os.environ.get("TF_CONFIG")
        if self.args.strategy != "multiworker" or not tfc:
            return "chief", 0
        task = json.loads(tfc).get("task", {})
        return task.get("type", "worker"), int(task.get("index", 0))

    def _is_chief(self):
        kind, index = self._task()
        return kind == "chief" or (kind == "worker" and index == 0)

    def _ckpt_dir_for_worker(self):
        # Multi-worker: every worker saves (collective variables), only the chief's copy is kept.
        if self._is_chief():
            return self.ckpt_dir
        return os.path.join(self.run_dir, f"ckpt_worker_tmp_{os.getpid()}")

    def _rays(self, views):
        """Origins, directions (float32 [N, 3]) and colours (uint8 [N, 3], or premultiplied RGBA [N, 4]);
        cached on the dataset, so trainers sharing a scene compute them once."""
        key = ("rays", tuple(v.name for v in views), tuple(id(v) for v in views))
        if key not in self.dataset.cache:
            self.dataset.cache[key] = self._compute_rays(views)
        return self.dataset.cache[key]

    def _compute_rays(self, views):
        if not views:
            z = np.zeros((0, 3), np.float32)
            return z, z, np.zeros((0, 3), np.uint8)
        channels = max(v.image.shape[-1] for v in views)
        os_, ds_, cs = [], [], []
        for v in views:
            o, d = v.rays()
            os_.append(o)
            ds_.append(d)
            img = v.image
            if img.shape[-1] < channels:  # RGB among RGBA views: opaque
                img = np.concatenate([img, np.full(img.shape[:2] + (1,), 255, np.uint8)], axis=-1)
            cs.append(img.reshape(-1, channels))
        return (np.concatenate(os_).astype(np.float32), np.concatenate(ds_).astype(np.float32),
                np.concatenate(cs))

    def _words(self, bits):
        """uint8 [1, B] -> float32 [1, ceil(B / 4)] holding the same bytes (see occupancy_words)."""
        tf = self.tf
        bits = tf.convert_to_tensor(bits)
        pad = -int(bits.shape[1]) % 4
        return tf.bitcast(tf.reshape(tf.pad(bits, [[0, 0], [0, pad]]), [1, -1, 4]), tf.float32)

    def _packed_mask(self):
        """The occupancy mask packed for metal_ops.ray_march, as float32 words (see occupancy_words)."""
        return self._words(self.metal_ops.pack_occupancy(self.grid.mask[None]))

    def occupancy_bits(self):
        """The bitfield the training step marches through (uint8 [1, ceil(G^3 / 8)])."""
        tf = self.tf
        words = self.occupancy_words if self._occupancy_arg is None else self._occupancy_arg
        return tf.reshape(tf.bitcast(words, tf.uint8), [1, -1])[:, :self.all_occupied_bits.shape[1]]

    def publish_occupancy(self, step, force=False):
        """Points the march sampler's bitfield at what step `step` uses: every cell
        before the grid warm-up ends, the grid's mask after (re-packed when `force`:
        the mask changed)."""
        live = self.use_grid(step)
        if live == self._published_grid and not (force and live):
            return
        self.occupancy_words.assign(self._packed_mask() if live else self._words(self.all_occupied_bits))
        self._published_grid = live

    @property
    def step(self):
        return self._step

    def use_grid(self, step=None):
        step = self.step if step is None else step
        return self.grid is not None and self.args.occupancy and step >= self.args.grid_warmup

    def batch_indices(self, step, count=None):
        """Global ray batch of a step as a NumPy array (ray_batch, drawn eagerly)."""
        return self.ray_batch(step, self.args.batch_rays if count is None else count).numpy()

    def ray_batch(self, step, count, capacity=None):
        """Global ray batch of step `step`: `count` indices into the training rays, uniform with
        replacement, a function of (seed, step) only, so resumes and replicas agree; the steps draw
        it in their own programs (a stateless Philox draw: the same values on every device, under
        XLA or not, and the first k of any longer draw are those of k). A --jit step draws on its
        device, inside its XLA program (no indices to copy a call); TensorFlow's executor draws on
        the host's CPU, as a GPU's draw adds kernels to that launch-bound step (README.md,
        "`--jit`"). `capacity` (--jit): the [capacity] row of _padded_rays."""
        tf = self.tf
        seed = tf.stack([tf.constant(self.args.seed, tf.int64), tf.cast(step, tf.int64)])
        rows = tf.random.stateless_uniform([count if capacity is None else capacity], seed=seed, minval=0,
                                           maxval=self.n_train_rays, dtype=tf.int64, alg="philox")
        return rows if capacity is None else self._padded_rays(rows, count, capacity)

    def jit_rays(self):
        """--jit: the step's ray count, --batch-rays x 2^k (|k| <= 4): the smallest at least
        rays_for_budget(), so the rays overfill the budget and the last ones are dropped (marched,
        then masked) rather than leaving it half padding; a multiple of the replicas. The count only
        grows: a call never takes fewer rays than the one before (a count above twice --batch-rays
        is a program of its own, jit_capacity). The rays above the budget's share cost only their march."""
        a = self.args
        want, lo, hi = self.rays_for_budget(), max(1, a.batch_rays // 16), 16 * a.batch_rays
        r = a.batch_rays
        while r < want and r < hi:
            r *= 2
        while r // 2 >= max(want, lo, self._jit_rays) and (r // 2) % self.num_replicas == 0:
            r //= 2
        self._jit_rays = max(r, self._jit_rays)
        return self._jit_rays

    def jit_capacity(self, rays):
        """--jit: the compiled program's ray count for a call of `rays` (jit_rays()) rays: at least
        2 x --batch-rays. The grid's warm-up asks for fewer rays than later steps do, and a scene's
        count commonly settles at one or two times --batch-rays (the demo's grows to twice it): the
        calls below that are padded into one program rather than compiling programs of their own.
        A count above it is a program of its own (the counts only grow, by doubling); padding every
        call to the largest, 16 x --batch-rays, would cost every step the padding's per-ray work."""
        return max(2 * self.args.batch_rays, rays)

    def _padded_rays(self, rows, rays, capacity):
        """--jit: the first `rays` of `rows` [capacity] (a tensor) laid out as the program takes them:
        each replica's consecutive share (replica_share) followed by its padding of -1."""
        tf, n = self.tf, self.num_replicas
        share, at = capacity // n, tf.range(capacity)
        # position `at` is place j of replica r's share: ray r * (rays / n) + j of the batch, or padding
        r, j = at // share, at % share
        per = tf.cast(rays, tf.int32) // n
        return tf.where(j < per, tf.gather(rows, tf.minimum(r * per + j, capacity - 1)), tf.constant(-1, tf.int64))

    def rays_for_budget(self):
        """The next step's ray count: --sample-budget over the recent samples per ray (a multiple of the replicas)."""
        a, n = self.args, self.num_replicas
        if not self.marching or self.samples_per_ray is None:
            return a.batch_rays
        rays = a.sample_budget / max(self.samples_per_ray, 1.0)
        rays = min(max(rays, a.batch_rays // 16), 16 * a.batch_rays)
        return max(n, int(rays) // n * n)

    # ------------------------------------------------------------------ rendering
    def render_rays(self, o, d, training, use_grid, return_weights=False, background=None, sample_budget=None):
        """(rgb [R, 3], the renderer's output, the samples: t [R, S+1] (fixed) or RayMarchSamples (march),
        the number of samples marched (march: before pruning; fixed: R * S)). Training with the march
        sampler reads the published bitfield (occupancy_bits), so `use_grid` matters there only for
        evaluation. `sample_budget` (march): static shapes, metal_ops.ray_march_static's samples."""
        a = self.args
        jitter = training and not a.no_jitter
        background = self.background if background is None else background
        if self.marching:
            seed = self.tf.cast((self.step_var.read_value() + 7919 * a.seed) % 2147483647, self.tf.int32) \
                if jitter else 0
            out, samples, marched = self._hmodel.render_hash_marched(
                self.model, o, d, aabb=self.dataset.aabb, near=self.near, far=self.far, background=background,
                grid=self.grid, use_grid=use_grid, step_size=self.step_size, max_samples=a.max_samples,
                jitter=jitter, seed=seed, return_weights=return_weights, prune=a.prune,
                occupancy=self.occupancy_bits() if training else None, sample_budget=sample_budget,
                march_budget=None if not sample_budget else
                a.march_budget // self.num_replicas if a.march_budget else 2 * sample_budget)
            return out.rgb, out, samples, marched
        if a.model == "hash":
            out, t = self._hmodel.render_hash(
                self.model, o, d, aabb=self.aabb, near=self.near, far=self.far,
                background=background, num_samples=a.samples, grid=self.grid,
                use_grid=use_grid, num_candidates=a.candidates, occlusion_depth=a.occlusion_depth,
                jitter=jitter,
                return_weights=return_weights)
            return out.rgb, out, t, self.tf.shape(o)[0] * a.samples
        rgb, _, _ = self._baseline.render_baseline(
            self.model, o, d, near=self.near, far=self.far, background=background,
            num_samples=a.samples, jitter=jitter)
        return rgb, None, None, self.tf.shape(o)[0] * a.samples

    def _replica_loss(self, idx, use_grid):
        tf, a = self.tf, self.args
        if self.jit:
            # --jit pads each replica's share with -1 (jit_capacity): a padding ray starts beyond the
            # box's far corner and points away from it, so the march gives it no samples.
            valid = idx >= 0
            idx = tf.maximum(idx, 0)
        o = tf.gather(self.train_o, idx)
        d = tf.gather(self.train_d, idx)
        if self.jit:
            lo, hi = self.dataset.aabb
            o = tf.where(valid[:, None], o, tf.constant(2.0 * hi - lo, tf.float32))
            d = tf.where(valid[:, None], d, tf.constant([3.0 ** -0.5] * 3, tf.float32))
        step = self.step_var.read_value() if a.background == "random" else None  # seeds random backgrounds only
        c, background = training_target(tf.gather(self.train_c, idx), a.background, a.seed, step)
        want_w = a.model == "hash" and a.distortion > 0
        rgb, out, t, marched = self.render_rays(o, d, True, use_grid, return_weights=want_w, background=background,
                                                sample_budget=a.sample_budget // self.num_replicas if self.jit
                                                else None)
        if self.jit:
            # Static shapes: the rays from num_rays on got no samples (the budget was full), nor did
            # the padding; their background-only colours are masked out, and the means are over the rays kept
            # (the replica's share of the mean: the Keras loss divides by the replicas itself).
            kept = tf.logical_and(tf.range(tf.shape(idx)[0]) < t.num_rays, valid)
            num_kept = tf.reduce_sum(tf.cast(kept, tf.int32))
            kept = tf.cast(kept, tf.float32)
            n_kept = tf.cast(tf.maximum(num_kept, 1), tf.float32)
            loss = self.loss_fn(c, rgb, sample_weight=kept * (tf.cast(tf.shape(idx)[0], tf.float32) / n_kept))
            mse = tf.reduce_sum(tf.square(rgb - c) * kept[:, None]) / (3.0 * n_kept * self.num_replicas)
            return loss, mse, tf.cast(tf.stack([t.num_samples, marched, num_kept]), tf.int64)
        n_samples = tf.shape(t.t_starts)[0] if self.marching else marched
        # replica mean -> share of the global mean (the replicas take equal slices; the march
        # sampler's ray count follows the sample budget, so it is not --batch-rays)
        frac = 1.0 / self.num_replicas
        # Keras losses already divide by num_replicas_in_sync under tf.distribute
        # (keras.src.losses.loss.scale_loss_for_distribution); replicas get equal shares.
        loss = self.loss_fn(c, rgb)
        if want_w and self.marching:
            loss += a.distortion * tf.reduce_mean(self.metal_ops.packed_distortion_loss(
                out.weights, t.t_starts, t.t_ends, t.ray_offsets, t.ray_counts)) * frac
        elif want_w:
            loss += a.distortion * tf.reduce_mean(self.metal_ops.distortion_loss(out.weights, t)) * frac
        mse = tf.reduce_mean(tf.square(rgb - c)) * frac
        return loss, mse, tf.cast(tf.stack([n_samples, marched, tf.shape(o)[0]]), tf.int64)

    def _gradients(self, tape, loss, variables):
        """d loss / d variables, through the static loss scale of a float16 MLP."""
        if self.loss_scale == 1.0:
            return tape.gradient(loss, variables)
        seed = self.tf.constant(self.loss_scale, loss.dtype, shape=loss.shape)  # the loss is a scalar
        grads = tape.gradient(loss, variables, output_gradients=seed)
        return [unscale_gradient(g, self.loss_scale) for g in grads]

    def _replica_step(self, idx, use_grid, summed=False, active=None):
        """Loss, gradients and the optimizer's update on one replica's rays: (loss, mse, counts),
        or with `summed` the step's figures [loss, mse, *counts] (float32) summed over the replicas.
        `active` (the fused Adam's, a bool tensor): False keeps the variables as they are."""
        tf = self.tf
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            loss, mse, counts = self._replica_loss(idx, use_grid)
        grads = self._gradients(tape, loss, variables)
        if not summed:
            self._apply(grads, variables, active)
            return loss, mse, counts
        # float32 holds the counts exactly below 2^24 (the samples of a step are far fewer).
        figures = tf.concat([tf.stack([loss, mse]), tf.cast(counts, tf.float32)], 0)
        if self.fused_adam is not None:
            # The figures ride in the gradients' all-reduce: one collective a step, not two.
            return self.fused_adam.apply(grads, also=[figures], active=active)[0]
        self._apply(grads, variables)
        if self.num_replicas > 1:
            figures = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, figures)
        return figures

    def _apply(self, grads, variables, active=None):
        if self.fused_adam is not None:
            self.fused_adam.apply(grads, active=active)
        else:
            self.optimizer.apply_gradients(zip(grads, variables))

    def _jit_step(self, idx, active=None):
        """--jit: the step on the global batch's ray indices `idx`: (loss, mse, counts). Under workers
        each replica steps on its share (strategy.run) and the figures are summed over the replicas
        in the gradients' all-reduce. `active`: _replica_step's."""
        if not self._jit_workers:
            return self._replica_step(idx, True, active=active)
        tf = self.tf
        figures = self.strategy.run(
            lambda i: self._replica_step(self.replica_share(i), True, summed=True, active=active), args=(idx,))
        figures = self.strategy.experimental_local_results(figures)[0]
        return figures[0], figures[1], tf.cast(figures[2:], tf.int64)

    def _get_jit_train_fn(self, rays):
        """--jit: the whole step of `rays` rays (jit_capacity, padded) as one XLA program (one
        compilation per ray count); takes the step and its ray count (the batch is drawn in it)."""
        if rays not in self._jit_fn:
            tf = self.tf

            # The bitfield is an argument (the variable's value at the call).
            @tf.function(jit_compile=True, autograph=False,
                         input_signature=[tf.TensorSpec([], tf.int64), tf.TensorSpec([], tf.int32),
                                          tf.TensorSpec(self.occupancy_words.shape, tf.float32)])
            def jit_train_fn(step, count, occupancy_words):
                self._occupancy_arg = occupancy_words
                try:
                    return self._jit_step(self.ray_batch(step, count, rays))
                finally:
                    self._occupancy_arg = None

            self._jit_fn[rays] = jit_train_fn
        return self._jit_fn[rays]

    def _get_jit_block_fn(self, rays):
        """--jit --steps-per-call K: up to K steps of `rays` rays (jit_capacity, padded) as one XLA
        program, a loop of its `n` argument's steps in it: one compilation per ray count, shorter
        calls (the first step, the steps before a grid update) included. Takes the first step, the
        call's ray count and n, and draws each step's batch in the loop (ray_batch); returns the
        last step's loss and mse and the steps' counts [K, 3] (rows from n on zero). The step
        counter advances in the loop: it seeds the next step's jitter.

        With the fused Adam the loop always takes K turns, those from n on inactive (their rays all
        -1, their update none: FusedAdam.apply's `active`). XLA then knows the trip count, and
        its GPU runtime queues all K turns at once, where a loop of n turns copies its condition to
        the host and waits for the GPU before each turn (on an H200 the demo's step is about the
        same either way: README.md, "`--jit`")."""
        if rays not in self._jit_block_fn:
            tf, k = self.tf, self.steps_per_call
            fixed = self.fused_adam is not None

            @tf.function(jit_compile=True, autograph=False,
                         input_signature=[tf.TensorSpec([], tf.int64), tf.TensorSpec([], tf.int32),
                                          tf.TensorSpec([], tf.int32),
                                          tf.TensorSpec(self.occupancy_words.shape, tf.float32)])
            def jit_block_fn(first, count, n, occupancy_words):
                self._occupancy_arg = occupancy_words

                def step(i, last, counts):
                    idx = self.ray_batch(first + tf.cast(i, tf.int64), count, rays)
                    active = i < n if fixed else None
                    if fixed:  # an idle turn's rays are all padding
                        idx = tf.where(active, idx, tf.constant(-1, tf.int64))
                    loss, mse, c = self._jit_step(idx, active)
                    figures = tf.cast(tf.stack([loss, mse]), tf.float32)
                    if fixed:
                        self.step_var.assign_add(tf.cast(active, self.step_var.dtype))
                        figures = tf.where(active, figures, last)
                    else:
                        self.step_var.assign_add(1)
                    return figures, tf.tensor_scatter_nd_update(counts, tf.reshape(i, [1, 1]), c[None])

                try:
                    last, counts = graph_loop(k if fixed else n, step, (tf.zeros([2]), tf.zeros([k, 3], tf.int64)))
                    return last[0], last[1], counts
                finally:
                    self._occupancy_arg = None

            self._jit_block_fn[rays] = jit_block_fn
        return self._jit_block_fn[rays]

    def _get_train_fn(self, use_grid):
        if use_grid in self._train_fn:
            return self._train_fn[use_grid]
        tf = self.tf

        def replica_stats(idx):
            return self._replica_step(self.replica_share(idx), use_grid, summed=True)

        # The ray count changes every step (the sample budget): the step takes the step and its
        # ray count, draws the global batch (ray_batch, a tensor of dynamic length) and each
        # replica slices its share, so one trace serves the whole run under every strategy.
        @tf.function(jit_compile=False, autograph=False,
                     input_signature=[tf.TensorSpec([], tf.int64), tf.TensorSpec([], tf.int32)])
        def train_fn(step, count):
            with tf.device("/CPU:0"):  # (ray_batch) the host draws, as it feeds the step
                idx = self.ray_batch(step, count)
            # Every replica holds the sums: this device's copy.
            stats = self.strategy.experimental_local_results(self.strategy.run(replica_stats, args=(idx,)))[0]
            return stats[0], stats[1], tf.cast(stats[2:], tf.int64)

        self._train_fn[use_grid] = train_fn
        return train_fn

    def _get_block_fn(self, use_grid):
        """--steps-per-call: k steps of `count` rays from step `first` on in one call, a loop in the
        graph (each step draws its batch, ray_batch); returns each step's summed figures, [k, 5]
        float32 (loss, mse and the three counts of _replica_step). The step counter advances in
        the loop: it seeds the next step's jitter."""
        if use_grid in self._block_fn:
            return self._block_fn[use_grid]
        tf = self.tf

        def replica_stats(idx):
            return self._replica_step(self.replica_share(idx), use_grid, summed=True)

        @tf.function(jit_compile=False, autograph=False,
                     input_signature=[tf.TensorSpec([], tf.int64), tf.TensorSpec([], tf.int32),
                                      tf.TensorSpec([], tf.int32)])
        def block_fn(first, k, count):
            def step(i, figures):
                with tf.device("/CPU:0"):  # (ray_batch)
                    idx = self.ray_batch(first + tf.cast(i, tf.int64), count)
                stats = self.strategy.experimental_local_results(self.strategy.run(replica_stats, args=(idx,)))
                self.step_var.assign_add(1)
                return (figures.write(i, stats[0]),)

            return graph_loop(k, step, (tf.TensorArray(tf.float32, size=k, element_shape=[5]),))[0].stack()

        self._block_fn[use_grid] = block_fn
        return block_fn

    def replica_share(self, idx):
        """This replica's slice of a step's global ray indices (the last axis; in a replica context):
        the replicas take equal consecutive slices in the order of their ids, the workers' included."""
        if self.num_replicas == 1:
            return idx
        tf = self.tf
        b = tf.shape(idx)[-1] // self.num_replicas
        start = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.int32) * b
        return idx[..., start:start + b]

    def reduced_gradients(self, idx, use_grid=False):
        """All-reduced (summed) gradients of the global loss on `idx`, as seen by replica 0."""
        tf = self.tf
        variables = self.model.trainable_variables

        def replica_grads(i):
            with tf.GradientTape() as tape:
                loss, _, _ = self._replica_loss(self.replica_share(i), use_grid)
            grads = [tf.convert_to_tensor(g) for g in self._gradients(tape, loss, variables)]
            return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, grads)

        fn = tf.function(lambda i: self.strategy.run(replica_grads, args=(i,)), autograph=False)
        res = fn(tf.constant(idx))
        return [self.strategy.experimental_local_results(g)[0].numpy() for g in res]

    def set_learning_rate(self, progress):
        lr = self.args.lr * 0.33 ** sum(progress >= m for m in (0.5, 0.75, 0.9))
        warmup = getattr(self.args, "lr_warmup", 0)
        if warmup and self.step < warmup:  # nerfacc's LinearLR: from 1% to 100% over the warm-up
            lr *= 0.01 + 0.99 * self.step / warmup
        if getattr(self, "_lr", None) != lr:  # assigned on change only: no read-back per step
            self.optimizer.learning_rate.assign(lr)
            self._lr = lr

    def _grid_program(self):
        """The grid update's tf.function: (seed, every_cell, publish, commit) -> the occupied share;
        `commit` False assigns every variable its own value (_compile_grid_ahead)."""
        tf = self.tf
        if self._grid_fn is None:
            def density(p):
                return self.model.density(self._hmodel.normalize_points(p, self.aabb))[0]

            # A GPU takes the update's cells in one call of the field (fewer, larger kernels);
            # a CPU in chunks of 2^17, which bound its memory.
            chunk = None if runs_on_gpu(self.strategy) else 1 << 17

            # --jit compiles the update too, under workers as well (each worker updates its copy
            # of the mirrored grid alike: no collective): its few dozen small kernels become a few
            # fusions (examples/nerf/README.md, "`--jit`")
            @tf.function(jit_compile=self.jit or None, autograph=False)
            def grid_fn(seed, every_cell, publish, commit):
                occupied = self.grid.update(density, seed=seed, every_cell=every_cell, chunk=chunk, commit=commit)
                if self.marching:  # publish, a bool tensor: one trace before and after the warm-up
                    words = self.occupancy_words
                    words.assign(tf.where(tf.logical_and(publish, commit), self._packed_mask(), words.read_value()))
                return occupied

            self._grid_fn = grid_fn
        return self._grid_fn

    def _grid_args(self, step, every_cell=None, commit=True):
        """grid_fn's arguments for the update of `step`. every_cell, a python bool: one trace per
        phase of the ngp rule (its updates' shapes differ)."""
        tf = self.tf
        if every_cell is None:
            every_cell = self.grid.rule == "every-cell" or step < self.grid.NGP_WARMUP_STEPS
        publish = self.marching and self.use_grid(step)  # (grid_fn publishes only what it commits)
        return tf.constant([self.args.seed, step], tf.int64), every_cell, tf.constant(publish), tf.constant(commit)

    def update_grid(self, step):
        """The occupancy grid's update of `step`, and with the march sampler past the grid's warm-up
        the bitfield it marches, in one call; returns the occupied share of the cells (a scalar
        tensor: nothing waits for the device until it is read)."""
        self._wait_grid_ahead()  # the compilation ahead ends before the variables change
        args = self._grid_args(step)
        self._grid_phases.add(args[1])
        occupied = self._grid_program()(*args)
        if args[2]:
            self._published_grid = True
        return occupied

    def _compile_grid_ahead(self, step):
        """--jit: XLA compiles the grid update's programs (one per phase of the updates from `step`
        on, but for one an update has run) in a thread of their own while the first step compiles
        in this one, so the first updates do not stop training to compile. Each program is traced
        and runs once there with commit=False (its variables assigned their own values), in the
        strategy's scope where this thread is in it; the tracing holds Python's lock, which XLA's
        compilation of the step here does not (_first_call).
        Nothing else assigns the grid's variables or the bitfield before the next update, and
        update_grid waits for the thread first: the run is the same as without it."""
        a = self.args
        if not (self.jit and self.grid is not None and a.occupancy):
            return
        phases = {True} if self.grid.rule == "every-cell" else \
            ({False} | ({True} if step < self.grid.NGP_WARMUP_STEPS else set()))
        phases -= self._grid_phases  # an update of this call compiled its phase
        if not phases:
            return
        fn = self._grid_program()
        calls = [self._grid_args(step, every_cell, commit=False) for every_cell in sorted(phases)]
        scope = self.strategy.scope() if self.tf.distribute.has_strategy() else contextlib.nullcontext()
        errors = []

        def compile_all():
            try:
                with scope:
                    for args in calls:
                        fn(*args)
            except Exception as e:  # noqa: BLE001 (raised again by update_grid, in the training thread)
                errors.append(e)

        thread = threading.Thread(target=compile_all, name="grid-update-compile", daemon=True)
        thread.start()
        self._grid_ahead = (thread, errors)

    def _wait_grid_ahead(self):
        """Waits for _compile_grid_ahead's thread, if any; raises its error here."""
        if self._grid_ahead is not None:
            thread, errors = self._grid_ahead
            thread.join()
            self._grid_ahead = None
            if errors:
                raise errors[0]

    def _before_call(self, step):
        """The occupancy grid's update where `step` has one, and the bitfield the step marches."""
        a = self.args
        if self.grid is not None and a.occupancy and step % a.grid_every == 0 and \
                step >= a.grid_warmup - 4 * a.grid_every:
            self.update_grid(step)
        if self.marching:
            # the bitfield carries the warm-up: one traced step for the whole run
            self.publish_occupancy(step)

    def _first_call(self, fn, *args):
        """fn(*args), the --jit step's program. The process's first call traces it here first, then
        starts the grid update's compilation ahead, whose tracing in its thread overlaps XLA's
        compilation of this call instead of preceding it."""
        if self.step == self._first_step and self._grid_ahead is None:
            fn.get_concrete_function(*args)
            self._compile_grid_ahead(self.step)
        return fn(*args)

    def call_end(self, step, limit=None):
        """The step after the last one of the call that starts at `step`: up to --steps-per-call
        steps, ending at a multiple of it, before a step that updates the grid or first marches
        through it, after an --eval-every or --ckpt-every step, and at `limit`; the process's first
        step is a call of its own (its time is the tracing's)."""
        a, k = self.args, self.steps_per_call
        if k == 1 or step == self._first_step:
            return step + 1
        end = step + k - step % k
        for every in (a.eval_every, a.ckpt_every):
            if every:
                end = min(end, (step // every + 1) * every)
        if self.grid is not None and a.occupancy:
            end = min(end, (step // a.grid_every + 1) * a.grid_every)
            if step < a.grid_warmup:
                end = min(end, a.grid_warmup)
        if limit is not None:
            end = min(end, limit)
        return max(end, step + 1)

    def train_steps(self, limit=None):
        """The steps of one call of the training step (call_end; one step unless --steps-per-call):
        (loss, mse) of its last step as scalar tensors (float() reads them back, which waits for
        the device)."""
        if self.steps_per_call == 1:
            return self.train_one_step()
        tf, step = self.tf, self.step
        end = self.call_end(step, limit)
        if self.jit:
            # --jit compiles K steps a call (one shape): a shorter call runs only its own.
            self._before_call(step)
            rays = self.jit_rays()
            fn = self._get_jit_block_fn(self.jit_capacity(rays))
            loss, mse, counts = self._first_call(fn, tf.constant(step, tf.int64), tf.constant(rays, tf.int32),
                                                 tf.constant(end - step, tf.int32), self.occupancy_words.read_value())
            self._step = end
            self.flush_counts()
            self._pending_counts = (rays, counts[:end - step])
            return loss, mse
        self._before_call(step)
        fn = self._get_block_fn(True if self.marching else self.use_grid(step))
        rays = self.rays_for_budget()
        figures = fn(tf.constant(step, tf.int64), tf.constant(end - step, tf.int32), tf.constant(rays, tf.int32))
        self._step = end
        self.flush_counts()
        self._pending_counts = (rays, figures[:, 2:])
        return figures[-1, 0], figures[-1, 1]

    def train_until(self, end):
        """Calls of the training step (train_steps) until step `end`: (loss, mse) of the last step."""
        loss = mse = None
        while self.step < end:
            loss, mse = self.train_steps(limit=end)
        return loss, mse

    def train_one_step(self):
        """One optimizer step: (loss, mse) as scalar tensors (float() reads them
        back, which waits for the device)."""
        step = self.step
        self._before_call(step)
        if self.jit:
            rays = self.jit_rays()
            fn = self._get_jit_train_fn(self.jit_capacity(rays))
            loss, mse, counts = self._first_call(fn, self.tf.constant(step, self.tf.int64),
                                                 self.tf.constant(rays, self.tf.int32),
                                                 self.occupancy_words.read_value())
        else:
            fn = self._get_train_fn(True if self.marching else self.use_grid(step))
            rays = self.rays_for_budget()
            loss, mse, counts = fn(self.tf.constant(step, self.tf.int64), self.tf.constant(rays, self.tf.int32))
        self.step_var.assign_add(1)
        self._step += 1
        # The last step's counts are read here, while this step runs on the
        # device: the ray budget follows the sample count one step late.
        self.flush_counts()
        self._pending_counts = (rays, counts)
        return loss, mse

    def flush_counts(self):
        """Accounts the sample counts of the last step run (a device read-back)."""
        if self._pending_counts is None:
            return
        rays, counts = self._pending_counts
        self._pending_counts = None
        for n_samples, marched, kept in np.asarray(counts.numpy()).reshape(-1, 3).astype(np.int64).tolist():
            spr = n_samples / max(kept, 1)
            # Samples per ray change as the grid learns the scene: a short EMA.
            self.samples_per_ray = spr if self.samples_per_ray is None else 0.7 * self.samples_per_ray + 0.3 * spr
            self.field_evals += n_samples
            self.marched += marched
            self.rays_seen += kept
            if self.jit:
                self.padding += self.args.sample_budget - n_samples
                self.dropped_rays += rays - kept

    ORBIT_MAX_SIDE = 800  # orbit frames of larger captures are rendered at this size (longer side)

    def render_image(self, view, chunk=None):
        """A view (datasets.View, or a camera-to-world matrix with the first test view's intrinsics, scaled
        to at most ORBIT_MAX_SIDE pixels a side). `chunk` rays a call (default --eval-chunk); one trace
        serves every chunk and view, and the chunks are read back once per view."""
        tf = self.tf
        chunk = chunk or getattr(self.args, "eval_chunk", None) or 16384
        if not isinstance(view, datasets.View):
            ref = (self.dataset.splits["test"] or self.dataset.splits["train"])[0]
            f = min(1.0, self.ORBIT_MAX_SIDE / max(ref.height, ref.width))
            h, w = max(1, round(ref.height * f)), max(1, round(ref.width * f))
            view = datasets.View(np.zeros((h, w, 3), np.uint8), np.asarray(view, np.float64),
                                 ref.fx * w / ref.width, ref.fy * h / ref.height,
                                 ref.cx * w / ref.width, ref.cy * h / ref.height, distortion=ref.distortion)
        o, d = view.rays()
        o = o.astype(np.float32)
        d = d.astype(np.float32)
        ug = self.use_grid()
        if ug not in self._render_fn:
            spec = [tf.TensorSpec([None, 3], tf.float32)] * 2
            self._render_fn[ug] = tf.function(lambda o_, d_: self.render_rays(o_, d_, False, ug)[0],
                                              input_signature=spec, autograph=False)
        fn = self._render_fn[ug]
        parts = [fn(tf.constant(o[i:i + chunk]), tf.constant(d[i:i + chunk])) for i in range(0, len(o), chunk)]
        img = tf.concat(parts, 0).numpy() if len(parts) > 1 else parts[0].numpy()
        return np.clip(img.reshape(view.height, view.width, 3), 0.0, 1.0)

    def ground_truth(self, split):
        return [v.composite(self.eval_background) for v in self.dataset.splits[split]]

    def evaluate(self, split="val", max_views=None):
        """Mean per-image PSNR on held-out views; also returns the renders."""
        views = self.dataset.splits[split]
        if max_views:
            views = views[:max_views]
        renders, psnrs = [], []
        for view in views:
            img = self.render_image(view)
            renders.append(img)
            psnrs.append(psnr_from_mse(np.mean((img - view.composite(self.eval_background)) ** 2)))
        return float(np.mean(psnrs)) if psnrs else float("nan"), psnrs, renders

    def ssim(self, renders, split):
        """Per-view SSIM (tf.image.ssim, max value 1) of renders against the split's ground truth."""
        tf = self.tf
        return [float(tf.image.ssim(tf.constant(img, tf.float32), tf.constant(gt, tf.float32), max_val=1.0))
                for img, gt in zip(renders, self.ground_truth(split))]

    # ------------------------------------------------------------------ the loop
    def fit(self, steps=None, max_seconds=None, verbose=True, eval_callback=None):
        """Trains until `steps` (total) or `max_seconds` of training time; evaluates periodically."""
        import keras

        a = self.args
        steps = a.steps if steps is None else steps
        if max_seconds is None:
            max_seconds = a.max_minutes * 60.0 if a.max_minutes > 0 else float("inf")
        bar = keras.utils.Progbar(steps, stateful_metrics=["loss", "psnr", "steps/s", "samples/ray", "val_psnr"],
                                  verbose=1 if verbose else 0)
        train_time = float(self.time_var.numpy())
        start_train_time = train_time
        window_t, window_s = time.perf_counter(), self.step
        rate = 0.0
        val = None
        eval_at = sorted(self.eval_at_seconds)  # training seconds (this call's) with an evaluation
        while self.step < steps and train_time - start_train_time < max_seconds:
            t0 = time.perf_counter()
            progress = max(self.step / max(steps, 1), (train_time - start_train_time) / max_seconds)
            self.set_learning_rate(progress)
            before = self.step
            loss, mse = self.train_steps(limit=steps)
            if self.step >= steps:
                self.flush_counts()  # the last step finished: counted in the training time
            seconds = time.perf_counter() - t0
            self.step_seconds += [seconds / (self.step - before)] * (self.step - before)  # a call's steps share it
            train_time += seconds
            self.time_var.assign(train_time)
            s = self.step
            now = time.perf_counter()
            if now - window_t > 2.0:
                rate = (s - window_s) / (now - window_t)
                window_t, window_s = now, s
            last = s >= steps or train_time - start_train_time >= max_seconds
            # (timed evaluations wait for the occupancy grid: before it every ray marches the whole box)
            timed = bool(eval_at) and train_time - start_train_time >= eval_at[0] and \
                (not self.marching or self.use_grid())
            while timed and eval_at and train_time - start_train_time >= eval_at[0]:
                eval_at.pop(0)
            if (a.eval_every and (s % a.eval_every == 0 or last)) or timed or (last and self.eval_at_seconds):
                _check_finite(loss, s)
                val, _, _ = self.evaluate("val", a.eval_views)
                self.history.append(dict(step=s, train_seconds=round(train_time, 3),
                                         val_psnr=round(val, 4), train_psnr=round(psnr_from_mse(float(mse)), 4),
                                         loss=float(loss), **self.sample_stats()))
                if eval_callback is not None and eval_callback(self, self.history[-1]):
                    last = True
                window_t, window_s = time.perf_counter(), s  # do not count evaluation in steps/s
            if a.ckpt_every and (s % a.ckpt_every == 0 or last):
                self.manager.save(checkpoint_number=s)
            if verbose and (s // 10 > before // 10 or last):  # float(): a read-back, so only for the progress bar
                vals = [("loss", _check_finite(loss, s)), ("psnr", psnr_from_mse(float(mse))), ("steps/s", rate),
                        ("samples/ray", self.samples_per_ray or float(a.samples))]
                if val is not None:
                    vals.append(("val_psnr", val))
                bar.update(s, values=vals, finalize=last)
            if last:
                break
        self._wait_grid_ahead()  # a run that ends before its first grid update
        return train_time

    def sample_stats(self):
        """Field evaluations per ray and per step, over the steps this process ran."""
        self.flush_counts()
        steps = max(self.step - self._first_step, 1)
        stats = dict(field_evals_per_ray=round(self.field_evals / max(self.rays_seen, 1), 3),
                     field_evals_per_step=round(self.field_evals / steps, 1),
                     marched_per_ray=round(self.marched / max(self.rays_seen, 1), 3),
                     rays_per_step=round(self.rays_seen / steps, 1))
        if self.jit:  # evaluated as well: the padding; marched, then masked: the dropped rays
            stats.update(padding_per_step=round(self.padding / steps, 1),
                         dropped_rays_per_step=round(self.dropped_rays / steps, 1))
        return stats

    def timing_stats(self):
        """The steps fit() ran in this process: the first one's seconds (tracing and, with --jit, XLA's
        compilation included), the median step's milliseconds after it, and the training-step traces."""
        t = self.step_seconds
        fns = [f for fs in (self._jit_fn, self._jit_block_fn, self._train_fn, self._block_fn) for f in fs.values()]
        return dict(first_step_s=round(t[0], 3) if t else None,
                    steady_step_ms=round(1000.0 * float(np.median(t[1:])), 2) if len(t) > 1 else None,
                    train_step_traces=sum(f.experimental_get_tracing_count() for f in fns))

    # ------------------------------------------------------------------ outputs
    def write_outputs(self, test_psnrs, test_renders, extra):
        import imageio.v2 as imageio

        a = self.args
        os.makedirs(self.run_dir, exist_ok=True)
        gts = self.ground_truth("test")
        paths = []
        if not a.no_outputs and self._is_chief():
            shown = range(len(gts))
            if getattr(a, "pictures", None) is not None and a.pictures < len(gts):
                shown = sorted(set(np.linspace(0, len(gts) - 1, a.pictures).round().astype(int))) if a.pictures else []
            for i in shown:
                img, gt = test_renders[i], gts[i]
                err = np.clip(np.abs(img - gt) * 4.0, 0, 1)
                side = np.concatenate([img, gt, err], axis=1)
                p = os.path.join(self.run_dir, f"test_{i:02d}.png")
                imageio.imwrite(p, (side * 255).round().astype(np.uint8))
                paths.append(p)
            self.plot_curve(os.path.join(self.run_dir, "psnr_vs_time.png"))
            frames = [(self.render_image(c) * 255).round().astype(np.uint8) for c in self.orbit_poses(a.orbit_frames)]
            if frames:
                imageio.mimsave(os.path.join(self.run_dir, "orbit.gif"), frames, duration=0.08, loop=0)
        metrics = dict(
            name=a.name, recipe=getattr(a, "recipe", "small"), model=a.model, mlp_precision=self.mlp_precision,
            step=self.step,
            train_seconds=float(self.time_var.numpy()),
            test_psnr_mean=float(np.mean(test_psnrs)) if test_psnrs else None,
            test_psnr=[round(x, 4) for x in test_psnrs], history=self.history,
            dataset=dict(name=self.dataset.name, format=self.dataset.format, notes=self.dataset.notes,
                         views={k: len(v) for k, v in self.dataset.splits.items()}, size=[self.H, self.W],
                         aabb=self.dataset.aabb.tolist(), near=self.near, far=self.far),
            config=vars(a), xla_flags=os.environ.get("XLA_FLAGS", ""), data=self.data_path, side_by_side=paths,
            **self.sample_stats(), **self.timing_stats(), **extra)
        # The other workers of a multi-worker run write beside the chief (the same folder on one machine).
        name = "metrics.json" if self._is_chief() else "metrics.{}{}.json".format(*self._task())
        with open(os.path.join(self.run_dir, name), "w") as f:
            json.dump(metrics, f, indent=2)
        return metrics

    def orbit_poses(self, n):
        """A circle of cameras around the box centre, at the training cameras' mean distance and height;
        where the training cameras leave a gap of more than 60 degrees of azimuth (a capture from one
        side, such as fox), the orbit sweeps their arc forth and back instead."""
        from examples.nerf import cameras

        if self.dataset.format == "procedural":
            return cameras.orbit_poses(n)
        centre = self.dataset.aabb.mean(axis=0)
        positions = np.stack([v.c2w[:3, 3] for v in self.dataset.splits["train"]]) - centre
        radius = float(np.mean(np.linalg.norm(positions, axis=1)))
        elevation = float(np.arcsin(np.clip(np.mean(positions[:, 2]) / max(radius, 1e-9), -0.99, 0.99)))
        around = np.sort(np.arctan2(positions[:, 1], positions[:, 0]))
        gaps = np.diff(np.concatenate([around, around[:1] + 2.0 * math.pi]))
        widest = int(np.argmax(gaps))
        start, span = around[(widest + 1) % len(around)], 2.0 * math.pi - gaps[widest]
        poses = []
        for i in range(n):
            az = 2.0 * math.pi * i / n if gaps[widest] <= math.pi / 3 else \
                start + span * 0.5 * (1.0 - math.cos(2.0 * math.pi * i / n))
            pos = centre + radius * np.array([math.cos(elevation) * math.cos(az), math.cos(elevation) * math.sin(az),
                                              math.sin(elevation)])
            poses.append(cameras.look_at(pos, target=centre))
        return poses

    def plot_curve(self, path, others=()):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for label, hist in [(self.args.model, self.history)] + list(others):
            if hist:
                ax.plot([h["train_seconds"] for h in hist], [h["val_psnr"] for h in hist], "o-",
                        label=label, ms=3)
        ax.set_xlabel("training time (s)")
        ax.set_ylabel("held-out PSNR (dB)")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)


def resolve_collective(collective):
    """--collective auto: NCCL where TensorFlow lists a GPU, else the ring."""
    import tensorflow as tf

    if collective != "auto":
        return collective
    return "nccl" if tf.config.list_physical_devices("GPU") else "ring"


def communication_options(collective="auto", bytes_per_pack=0):
    """MultiWorkerMirroredStrategy's all-reduce: NCCL between GPUs (TensorFlow's AUTO takes the
    ring, which goes through host memory and gRPC), the ring over gRPC between CPUs; gradients in
    packs of about `bytes_per_pack` bytes (0: one pack)."""
    import tensorflow as tf

    impl = tf.distribute.experimental.CommunicationImplementation
    return tf.distribute.experimental.CommunicationOptions(
        bytes_per_pack=bytes_per_pack,
        implementation=impl.NCCL if resolve_collective(collective) == "nccl" else impl.RING)


def make_strategy(name, collective="auto", bytes_per_pack=0):
    """The --strategy's tf.distribute strategy (None: the default one). The op library loads
    first: XLA takes op kernels in at TensorFlow's first op, which creating a strategy runs."""
    import metal_ops  # noqa: F401
    import tensorflow as tf

    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multiworker":
        return tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=communication_options(collective, bytes_per_pack))
    return None


def use_xla_cache(directory):
    """TensorFlow's persistent XLA compilation cache in `directory`: compiled programs are written
    there and read back by later processes. TensorFlow reads TF_XLA_FLAGS at its first XLA
    compilation, so this takes effect only before one; a directory the flags already name stays."""
    flags = os.environ.get("TF_XLA_FLAGS", "")
    if "tf_xla_persistent_cache_directory" not in flags:
        os.makedirs(directory, exist_ok=True)
        # quoted: TF_XLA_FLAGS splits at white space outside quotes
        cache = f'--tf_xla_persistent_cache_directory="{os.path.abspath(directory)}"'
        os.environ["TF_XLA_FLAGS"] = f"{flags} {cache}".strip()


def train(argv=None, log=print):
    args = parse_args(argv)
    if args.xla_cache and args.jit:  # without --jit the trainer refuses it
        use_xla_cache(args.xla_cache)
    if args.strategy == "multiworker":
        args.collective = resolve_collective(args.collective)  # metrics.json's config: the transport used
    t_start = time.perf_counter()
    trainer = Trainer(args, strategy=make_strategy(args.strategy, args.collective, args.bytes_per_pack),
                      log=log)
    if not args.quiet:
        log(f"scene: {trainer.data_path} ({trainer.data_seconds:.1f} s), "
            f"{trainer.n_train_rays} training rays, model={args.model}, replicas={trainer.num_replicas}")
    trainer.fit(verbose=not args.quiet)
    test_psnr, test_psnrs, renders = trainer.evaluate("test")
    test_ssims = trainer.ssim(renders, "test")
    metrics = trainer.write_outputs(test_psnrs, renders, dict(
        wall_seconds=round(time.perf_counter() - t_start, 2),
        test_ssim_mean=float(np.mean(test_ssims)) if test_ssims else None,
        test_ssim=[round(x, 4) for x in test_ssims]))
    if not args.quiet:
        for i, (p_, s_) in enumerate(zip(test_psnrs, test_ssims)):
            log(f"  test view {i:3d}: PSNR {p_:6.2f} dB, SSIM {s_:.4f}")
        log(f"held-out test PSNR: {test_psnr:.2f} dB, SSIM {np.mean(test_ssims) if test_ssims else float('nan'):.4f} "
            f"(mean of {len(test_psnrs)} views) after "
            f"{trainer.step} steps, {metrics['train_seconds']:.0f} s of training, "
            f"{time.perf_counter() - t_start:.0f} s in all")
        st = trainer.sample_stats()
        log(f"sampler {args.sampler if args.model == 'hash' else 'fixed'}: {st['field_evals_per_ray']:.1f} field "
            f"evaluations per ray, {st['field_evals_per_step']:.0f} per step ({st['rays_per_step']:.0f} rays per step; "
            f"{st['marched_per_ray']:.1f} samples per ray marched)")
        ts = trainer.timing_stats()
        if ts["steady_step_ms"] is not None:
            log(f"step time{' (--jit)' if args.jit else ''}: first step {ts['first_step_s']:.2f} s (tracing"
                f"{' and compiling' if args.jit else ''}), then {ts['steady_step_ms']:.1f} ms (median); "
                f"{ts['train_step_traces']} training-step trace(s)")
        log(f"pictures: {os.path.join(trainer.run_dir, 'test_*.png')} (rendered | ground truth | 4x error), "
            f"{os.path.join(trainer.run_dir, 'orbit.gif')}, {os.path.join(trainer.run_dir, 'psnr_vs_time.png')}; "
            f"metrics: {os.path.join(trainer.run_dir, 'metrics.json')}")
    return trainer, metrics


def main(argv=None):
    return datasets.exit_status(lambda: train(argv))


if __name__ == "__main__":
    sys.exit(main())
