"""The sample's command line: flags in groups (the basic ones first), each checked as it is
parsed, and the run's configuration as a frozen dataclass (Config) that nothing changes in place.

`parse_args` applies the defaults that depend on the machine (the recipe, the GPU's route);
`resolve` fills in the defaults that depend on other flags. A value learnt later (the scene's
size, the replicas) makes a new Config with `Config.replace`, so metrics.json's config is the
configuration the run used.
"""
import argparse
import dataclasses

# Steps in one call of the training step's tf.function under --strategy multiworker. A call
# costs its Python and each collective's set-up whatever its steps (README.md, "Measured on
# two H100s"). Elsewhere the default is one step a call: the ray count follows the sample
# budget between calls only, and over a call's steps it lags.
MULTIWORKER_STEPS_PER_CALL = 8

# The GPU's default route: the whole step compiled by XLA, this many steps a call. On an H200 it
# trains a NeRF-synthetic scene to a higher PSNR in less time than the uncompiled step.
GPU_STEPS_PER_CALL = 8

# instant-NGP's recipe as this sample runs it (README.md compares it point by
# point): --recipe ngp, the default on a GPU for scenes from disk.
NGP_RECIPE = dict(levels=16, features=2, log2_table=19, base_res=16, march_steps=1024, grid_res=128,
                  grid_rule="ngp", sample_budget=1 << 18, batch_rays=8192, background="random", lr=1e-2,
                  lr_warmup=100, steps=35000, max_minutes=5.0, eval_every=2000, ckpt_every=5000,
                  eval_chunk=1 << 17)


def _number(kind, low, what):
    """An argparse type: `kind` (int or float) at least `low`; argparse names the flag in its error."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
        if not value >= low:  # (NaN fails too)
            raise argparse.ArgumentTypeError(f"must be {what}, got {text}")
        return value

    parse.__name__ = what  # argparse's message for a value `kind` cannot read
    return parse


POSITIVE = _number(int, 1, "an integer of at least 1")
COUNT = _number(int, 0, "an integer of at least 0")
FRACTION_OR_MORE = _number(float, 0.0, "a number of at least 0")


def _positive_float(text):
    value = FRACTION_OR_MORE(text)
    if value == 0.0:
        raise argparse.ArgumentTypeError(f"must be a number above 0, got {text}")
    return value


class _Switch(argparse.BooleanOptionalAction):
    """--flag / --no-flag, its help as written (Python's own appends a second "(default: ...)")."""

    def __init__(self, *args, help=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.help = help


class _HelpFormatter(argparse.HelpFormatter):
    """Each flag's default once: "(default: X)" after the help unless the help says the default
    itself, and nothing for a default of None (the help says what the flag does without it)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text or action.default in (None, argparse.SUPPRESS) or not action.option_strings:
            return text
        shown = ("on" if action.default else "off") if isinstance(action.default, bool) else "%(default)s"
        return f"{text} (default: {shown})"


def _run_group(p):
    g = p.add_argument_group("basic")
    g.add_argument("--name", default="nerf", help="run name: outputs go to <out-dir>/<name>/")
    g.add_argument("--steps", type=POSITIVE, default=3000, help="training steps")
    g.add_argument("--data", default=None, metavar="PATH",
                   help="train on a scene from disk: a NeRF-synthetic folder, an instant-ngp/nerfstudio "
                        "transforms.json (or its folder) or a tiny_nerf_data.npz (default: the procedural scene)")
    g.add_argument("--size", type=POSITIVE, default=100,
                   help="the procedural scene's image height and width in pixels (below 11, SSIM is skipped)")
    g.add_argument("--out-dir", default="runs", help="where the run's folder goes")
    g.add_argument("--resume", action="store_true", help="continue from the run's latest checkpoint")
    g.add_argument("--seed", type=int, default=0,
                   help="seeds the initial weights (keras.utils.set_random_seed), the ray batches and the jitter")
    g.add_argument("--max-minutes", type=FRACTION_OR_MORE, default=0.0,
                   help="stop training after this much training time (evaluation excluded; the run says so when "
                        "it stops there); 0 = no limit (default: 0; 5 under --recipe ngp)")
    g.add_argument("--quiet", action="store_true", help="no progress bar (the results and their paths still print)")
    g.add_argument("--jit", action=_Switch, default=None,
                   help="compile the whole training step (march, encoding, MLPs, renderer, loss, gradients, Adam) "
                        "with XLA as one tf.function(jit_compile=True): metal_ops.ray_march_static into "
                        "--sample-budget samples over a ray count of --batch-rays x 2^k (one compilation each), the "
                        "rays that do not fit masked out of the loss (README.md, \"--jit\"); needs --model hash "
                        "--sampler march (default: on, with --steps-per-call 8, where TensorFlow lists a GPU, "
                        "neither flag is given and the step can be compiled (--model hash --sampler march, "
                        "--strategy default, no --distortion): the GPU's fastest route; else off)")
    g.add_argument("--steps-per-call", type=POSITIVE, default=None, metavar="K",
                   help="run up to K training steps in one call of the step's tf.function (a loop in the "
                        "graph): the per-call costs (Python, the collectives' set-up under a strategy) are "
                        "paid once per K steps; a call ends early at a grid update, evaluation or checkpoint, "
                        "and the ray count and learning rate change between calls only; with --jit the K steps "
                        "are one XLA program (a loop in it) and a shorter call runs one step at a time (default: "
                        f"{GPU_STEPS_PER_CALL} on the GPU's default route (--jit), {MULTIWORKER_STEPS_PER_CALL} "
                        "under --strategy multiworker, else 1)")
    g.add_argument("--recipe", choices=["auto", "small", "ngp"], default="auto",
                   help="the defaults: small = the sample's own (a 2-core CPU, the 100x100 demo); ngp = instant-NGP's "
                        "recipe for real scenes on a GPU (README.md, \"The recipe against instant-NGP and nerfacc\"); "
                        "auto = ngp where TensorFlow lists a GPU and --data names a scene, else small. Flags given "
                        "explicitly always win (default: auto)")


def _scene_group(p):
    g = p.add_argument_group("scene")
    g.add_argument("--data-dir", default="data", help="where the generated procedural scene's .npz is cached")
    g.add_argument("--n-train", type=POSITIVE, default=100, help="procedural scene: training views")
    g.add_argument("--n-val", type=COUNT, default=8, help="procedural scene: validation views")
    g.add_argument("--n-test", type=COUNT, default=8, help="procedural scene: test views")
    g.add_argument("--spp", type=POSITIVE, default=3,
                   help="procedural scene's ground-truth anti-aliasing: each pixel averages spp x spp sub-pixel "
                        "rays (1 = point-sampled)")
    g.add_argument("--downscale", type=POSITIVE, default=1,
                   help="--data: box-filter the images by this factor at load (8: 800x800 -> 100x100)")
    g.add_argument("--background", choices=["white", "black", "random"], default="white",
                   help="--data with RGBA images: the colour composited behind them (random: a new colour per ray "
                        "and step; evaluation then uses white)")
    g.add_argument("--holdout", type=COUNT, default=None,
                   help="--data without a test split: hold out every K-th view (default: instant-ngp files every "
                        "8th, tiny_nerf_data.npz the last 20%%; 0: none)")
    g.add_argument("--test-views", type=COUNT, default=0,
                   help="evaluate on this many evenly spaced test views (0 = all)")


def _model_group(p):
    g = p.add_argument_group("model")
    g.add_argument("--model", choices=["hash", "baseline"], default="hash",
                   help="hash: the hash-grid NeRF of this library's ops; baseline: the Keras example's NeRF")
    g.add_argument("--levels", type=POSITIVE, default=12, help="hash encoding: resolution levels")
    g.add_argument("--features", type=POSITIVE, default=2, help="hash encoding: features per level")
    g.add_argument("--log2-table", type=POSITIVE, default=16, help="hash encoding: log2 of each level's table size")
    g.add_argument("--base-res", type=POSITIVE, default=16, help="hash encoding: the coarsest level's resolution")
    g.add_argument("--finest-res", type=POSITIVE, default=None,
                   help="hash encoding: the finest level's resolution (default: 512; --recipe ngp: 2048 x the "
                        "scene's aabb_scale, as instant-NGP)")
    g.add_argument("--hidden", type=POSITIVE, default=64, help="neurons of each hidden layer of the MLPs")
    g.add_argument("--mlp", choices=["fused", "dense"], default="fused",
                   help="hash model's MLPs: metal_ops.layers.FusedMLP + metal_ops.sh_encode, or Keras Dense layers "
                        "+ TF ops (for comparison)")
    g.add_argument("--mlp-precision", choices=["auto", "float32", "float16"], default="auto",
                   help="the fused MLPs' arithmetic: float16 (float32 weights and accumulation, a static loss "
                        "scale) runs on GPUs; auto = float16 where TensorFlow lists a GPU, else float32 "
                        "(default: auto)")
    g.add_argument("--sh-degree", type=int, choices=[1, 2, 3, 4], default=4,
                   help="view-direction encoding: real spherical harmonics, sh-degree**2 values (1 = no view "
                        "dependence)")


def _training_group(p):
    g = p.add_argument_group("training")
    g.add_argument("--batch-rays", type=POSITIVE, default=4096,
                   help="rays a step (march: the step's first ray count, and the bounds of the adapted one)")
    g.add_argument("--samples", type=POSITIVE, default=None,
                   help="samples per ray (default: 24 hash with the occupancy grid, 32 baseline as in the Keras "
                        "example)")
    g.add_argument("--lr", type=_positive_float, default=None,
                   help="Adam's learning rate (default: 2e-2 hash, 1e-3 baseline)")
    g.add_argument("--lr-warmup", type=COUNT, default=0,
                   help="steps of linear learning-rate warm-up from 1%% (nerfacc: 100; 0 = none)")
    g.add_argument("--adam", choices=["fused", "keras"], default="fused",
                   help="how keras.optimizers.Adam's update is applied: fused = one tf.raw_ops.ResourceApplyAdam per "
                        "variable (the same formulas, on the optimizer's own variables: checkpoints are the same); "
                        "keras = optimizer.apply_gradients (about ten ops per variable)")
    g.add_argument("--loss", choices=["robust", "mse", "huber"], default="mse",
                   help="robust: metal_ops.losses.RobustLoss (--robust-alpha, --robust-scale); huber: "
                        "keras.losses.Huber(--huber-delta), instant-NGP's loss")
    g.add_argument("--robust-alpha", type=float, default=1.0, help="--loss robust: the shape parameter alpha")
    g.add_argument("--robust-scale", type=_positive_float, default=0.03, help="--loss robust: the scale c")
    g.add_argument("--huber-delta", type=_positive_float, default=0.1,
                   help="--loss huber: the quadratic zone's half-width")
    g.add_argument("--distortion", type=FRACTION_OR_MORE, default=0.0,
                   help="weight of metal_ops.distortion_loss (0 = off)")
    g.add_argument("--xla-cache", default=None, metavar="DIR",
                   help="--jit: keep XLA's compiled programs in DIR (TensorFlow's persistent compilation cache, "
                        "tf_xla_persistent_cache_directory) and load them in later runs of the same settings "
                        "instead of compiling them again (default: none)")


def _sampler_group(p):
    g = p.add_argument_group("sampling")
    g.add_argument("--sampler", choices=["march", "fixed"], default="march",
                   help="hash model: march = metal_ops.ray_march through the occupancy grid (samples only in occupied "
                        "cells, a variable number per ray) + metal_ops.packed_volume_render, with a fixed budget of "
                        "samples per step (--sample-budget: the ray count adapts); fixed = --samples per ray placed "
                        "by the TF occupancy sampler (--candidates) + metal_ops.volume_render, --batch-rays rays")
    g.add_argument("--sample-budget", type=POSITIVE, default=None,
                   help="march: field evaluations per step (default: --batch-rays x --samples); the step's ray count "
                        "follows it from the previous steps' samples per ray")
    g.add_argument("--march-budget", type=POSITIVE, default=None,
                   help="--jit with pruning: samples marched per step, which the density-only pass prunes into "
                        "--sample-budget (default: 2 x --sample-budget)")
    g.add_argument("--march-steps", type=POSITIVE, default=512,
                   help="march: steps along the AABB's diagonal (the step size)")
    g.add_argument("--max-samples", type=POSITIVE, default=None,
                   help="march: at most this many samples per ray (default: --march-steps, which no ray inside the box "
                        "exceeds; a lower cap cuts the far part of long rays, which then never see the scene behind)")
    g.add_argument("--prune", action=_Switch, default=True,
                   help="march: a density-only pass without gradients first drops the samples behind each ray's "
                        "early termination, which contribute nothing; --no-prune evaluates every marched sample "
                        "(default: on)")
    g.add_argument("--candidates", type=POSITIVE, default=128, help="fixed sampler: occupancy lookups per ray")
    g.add_argument("--occlusion-depth", type=FRACTION_OR_MORE, default=0.0,
                   help="fixed sampler: also skip candidates behind this optical depth of the grid's density "
                        "estimates (0 = off: it culls the surfaces behind rays that graze an object, see README.md)")
    g.add_argument("--no-jitter", action="store_true",
                   help="deterministic sample placement (used by the distributed tests)")


def _grid_group(p):
    g = p.add_argument_group("occupancy grid (hash model)")
    g.add_argument("--occupancy", action=_Switch, default=True,
                   help="sample through the occupancy grid; --no-occupancy: every cell stays occupied (default: on)")
    g.add_argument("--grid-res", type=POSITIVE, default=64, help="cells along each side of the grid")
    g.add_argument("--grid-every", type=POSITIVE, default=16, help="steps between the grid's updates")
    g.add_argument("--grid-decay", type=FRACTION_OR_MORE, default=0.95, help="the update's EMA decay of the densities")
    g.add_argument("--grid-warmup", type=COUNT, default=128,
                   help="steps of sampling every cell before the grid is used")
    g.add_argument("--grid-rule", choices=["every-cell", "ngp"], default="every-cell",
                   help="occupancy-grid update: every-cell = each update evaluates every cell, threshold 0.01 on the "
                        "opacity of one cell; ngp = instant-NGP's and nerfacc's: every cell for the first 256 steps, "
                        "then a quarter of the cells at random and a quarter of the occupied ones, threshold 0.01 on "
                        "the optical thickness of one march step; both lowered to the mean estimate (default: "
                        "every-cell)")


def _output_group(p):
    g = p.add_argument_group("evaluation and outputs")
    g.add_argument("--eval-every", type=COUNT, default=250, help="steps between held-out evaluations (0 = none)")
    g.add_argument("--eval-views", type=COUNT, default=4, help="validation views of each periodic evaluation")
    g.add_argument("--eval-chunk", type=POSITIVE, default=16384, help="rays rendered per call in evaluation")
    g.add_argument("--ckpt-every", type=COUNT, default=500, help="steps between checkpoints (0 = at the end only)")
    g.add_argument("--no-outputs", action="store_true",
                   help="skip PNGs, plot and orbit (metrics.json and checkpoints are still written)")
    g.add_argument("--pictures", type=COUNT, default=None,
                   help="side-by-side PNGs of this many evenly spaced test views (default: all of them)")
    g.add_argument("--orbit-frames", type=COUNT, default=24, help="frames of orbit.gif (0 = none)")


def _distribute_group(p):
    g = p.add_argument_group("distributed training")
    g.add_argument("--strategy", choices=["default", "mirrored", "multiworker"], default="default",
                   help="tf.distribute strategy (mirrored: all local devices; multiworker: TF_CONFIG)")
    g.add_argument("--batch-per-replica", action="store_true",
                   help="--batch-rays and --sample-budget are each replica's: the global batch grows with the "
                        "replicas (default: off, they are the global batch's, split between the replicas)")
    g.add_argument("--collective", choices=["auto", "nccl", "ring"], default="auto",
                   help="multiworker: the all-reduce's transport (auto: NCCL where the workers run on GPUs, "
                        "the ring over gRPC otherwise; default: auto)")
    g.add_argument("--bytes-per-pack", type=COUNT, default=32 << 20,
                   help="multiworker: the gradients are all-reduced in packs of about this many bytes "
                        "(0: one pack), each started as soon as its gradients exist")


def build_parser():
    p = argparse.ArgumentParser(
        prog="python -m examples.nerf.train", formatter_class=_HelpFormatter,
        usage="%(prog)s [--name NAME] [--steps STEPS] [--data PATH] [--jit | --no-jit] [option ...]",
        description="Train the NeRF sample. Outputs go to <out-dir>/<name>/: checkpoints (ckpt/, resumable with "
                    "--resume), side-by-side PNGs of rendered vs ground-truth test views, psnr_vs_time.png, "
                    "metrics.json and orbit.gif (examples/nerf/README.md).")
    for group in (_run_group, _scene_group, _model_group, _training_group, _sampler_group, _grid_group,
                  _output_group, _distribute_group):
        group(p)
    return p


# What the run decides beside the flags: under --batch-per-replica the flags' per-replica values,
# once batch_rays and sample_budget hold the global batch's (Trainer).
DECIDED = ("replica_batch_rays", "replica_sample_budget")


def _fields():
    """The Config's fields: every flag's name, then DECIDED."""
    names = [a.dest for a in build_parser()._actions if a.dest != "help"]
    return [(name, object, dataclasses.field(default=None)) for name in names + list(DECIDED)]


class _ConfigMethods:
    def replace(self, **changes):
        """A copy with `changes` (the Config itself is frozen)."""
        return dataclasses.replace(self, **changes)


# The run's configuration: one field per flag, frozen. Its fields follow from build_parser, so a
# flag is declared once.
Config = dataclasses.make_dataclass("Config", _fields(), bases=(_ConfigMethods,), frozen=True,
                                    namespace={"__doc__": "The run's configuration: one field per flag (frozen)."})


def resolve_recipe(choice, data, gpu_listed=None):
    """"small" or "ngp" for --recipe `choice` ("auto": ngp on a GPU with --data)."""
    if choice != "auto":
        return choice
    if not data:
        return "small"
    return "ngp" if _gpu_listed(gpu_listed) else "small"


def _gpu_listed(known=None):
    if known is not None:
        return known
    import tensorflow as tf

    return bool(tf.config.list_physical_devices("GPU"))


def gpu_route_applies(args):
    """Whether the GPU's default route (--jit, GPU_STEPS_PER_CALL steps a call) suits these flags: the
    user chose neither --jit nor --steps-per-call, and the step can be compiled whole on one device
    (a strategy's workers keep their own defaults: --jit needs one GPU a worker)."""
    return (args.jit is None and args.steps_per_call is None and args.model == "hash" and args.sampler == "march"
            and args.distortion == 0 and args.strategy == "default")


def parse_args(argv=None, gpu_listed=None):
    """The command line as a Config: the recipe's defaults (explicit flags win over them) and, where
    TensorFlow lists a GPU, the GPU's default route. `gpu_listed` None: asks TensorFlow."""
    p = build_parser()
    first, _ = p.parse_known_args(argv)
    recipe = resolve_recipe(first.recipe, first.data, gpu_listed)
    if recipe == "ngp":
        p.set_defaults(**NGP_RECIPE)
    args = p.parse_args(argv)
    if gpu_route_applies(args) and _gpu_listed(gpu_listed):
        args.jit, args.steps_per_call = True, GPU_STEPS_PER_CALL
    parsed = Config(**dict(vars(args), recipe=recipe))  # (the recipe chosen, "auto" resolved)
    try:
        resolve(parsed)  # flags that do not go together: refused before any work, as argparse refuses
    except ValueError as e:
        p.error(str(e))
    return parsed


def resolve(args):
    """A Config with the defaults that follow from other flags filled in, checked for flags that
    do not go together (ValueError naming them). `args`: a Config or build_parser's Namespace."""
    a = Config(**vars(args))
    if a.recipe == "auto":  # build_parser's Namespace: its defaults are the small recipe's
        a = a.replace(recipe="small")
    def default(value, otherwise):
        return otherwise if value is None else value

    samples = default(a.samples, 24 if a.model == "hash" else 32)
    a = a.replace(
        samples=samples, jit=bool(a.jit),
        sample_budget=default(a.sample_budget, a.batch_rays * samples),
        lr=default(a.lr, 2e-2 if a.model == "hash" else 1e-3),
        max_samples=default(a.max_samples, a.march_steps),
        steps_per_call=default(a.steps_per_call, MULTIWORKER_STEPS_PER_CALL if a.strategy == "multiworker" else 1))
    _check_combinations(a)
    return a


def _check_combinations(a):
    marching = a.model == "hash" and a.sampler == "march"
    if a.steps_per_call < 1:
        raise ValueError(f"--steps-per-call must be at least 1, got {a.steps_per_call}")
    if a.jit and not marching:
        raise ValueError("--jit needs --model hash --sampler march (the step it compiles marches with "
                         "metal_ops.ray_march_static)")
    if a.jit and a.distortion > 0:
        raise ValueError("--jit: --distortion needs packed_distortion_loss, which has no XLA kernel; "
                         "train with --distortion 0 or without --jit")
    if a.march_budget is not None and not (a.jit and a.prune):
        raise ValueError("--march-budget is the --jit step's march before pruning: it needs --jit (and pruning)")
    if a.xla_cache and not a.jit:
        raise ValueError("--xla-cache keeps the programs --jit compiles: it needs --jit")
    if a.jit and a.strategy == "mirrored":
        raise ValueError("--jit: --strategy mirrored is not compiled whole (one program a device); use "
                         "--strategy multiworker, one GPU a worker, or --strategy default")
    resolve_mlp_precision(a.mlp_precision, a.model, a.mlp, gpu_listed=False)  # (its flags' combination)


MLP_FLOAT16_LOSS_SCALE = 1024.0


def resolve_mlp_precision(choice, model, mlp, gpu_listed):
    """The fused MLPs' precision for --mlp-precision `choice` ("auto": float16
    on a GPU, where the op has a float16 kernel, for the fused hash model)."""
    if choice == "auto":
        return "float16" if gpu_listed and model == "hash" and mlp == "fused" else "float32"
    if choice == "float16" and (model != "hash" or mlp != "fused"):
        raise ValueError("--mlp-precision float16 needs --model hash --mlp fused")
    return choice
