"""Trains 3D Gaussian splatting from posed images with metal_ops.

    python -m examples.splat.train [--data PATH] [--steps N] [--name NAME] [option ...]

Reads what the NeRF sample reads (examples.nerf.datasets: NeRF-synthetic,
instant-NGP / nerfstudio transforms, the procedural scene by default), starts
from random Gaussians in the scene's box, trains with the reference's recipe
(examples/splat/recipe.py: L1 + 0.2 D-SSIM, Adam per parameter, density
control, SH bands added over time), then renders every test view (PSNR,
SSIM), writes the test renders, an orbit and metrics.json under
<out-dir>/<name>/.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np

SSIM_MIN_SIDE = 11  # tf.image.ssim's 11x11 window
LOSS_READ_EVERY = 100  # steps whose losses are read back (and checked) together
OPENGL_TO_OPENCV = np.diag([1.0, -1.0, -1.0, 1.0])


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m examples.splat.train", description=__doc__.split("\n\n")[0])
    g = p.add_argument_group("run")
    g.add_argument("--name", default="splat", help="run name: outputs go to <out-dir>/<name>/")
    g.add_argument("--out-dir", default="runs", help="where the run's folder goes")
    g.add_argument("--steps", type=int, default=None,
                   help="training steps (one view each; default 30000 for a dataset, 2000 for the procedural scene)")
    g.add_argument("--seed", type=int, default=0, help="seed of the initial Gaussians, the views' order and splits")
    g.add_argument("--quiet", action="store_true", help="no progress lines")
    g.add_argument("--xla-loss", choices=("auto", "on", "off"), default="auto",
                   help="compile the loss and its gradient with XLA (auto: where TensorFlow sees a CUDA GPU)")
    g.add_argument("--no-outputs", action="store_true", help="no pictures, orbit or metrics.json")
    g = p.add_argument_group("data")
    g.add_argument("--data", default=None,
                   help="NeRF-synthetic folder, transforms.json (or its folder); default: the procedural scene")
    g.add_argument("--data-dir", default="data", help="where the generated procedural scene's .npz is cached")
    g.add_argument("--size", type=int, default=100, help="the procedural scene's image side in pixels")
    g.add_argument("--downscale", type=int, default=1, help="divide a dataset's images' sides by this")
    g.add_argument("--background", choices=("white", "black"), default="white",
                   help="the colour RGBA images are composited on, and the renderer's background")
    g = p.add_argument_group("model")
    g.add_argument("--init-points", type=int, default=None,
                   help="random Gaussians in the scene's box to start from (default 100000; 5000 for the "
                        "procedural scene)")
    g.add_argument("--sh-degree", type=int, default=3, choices=(0, 1, 2, 3), help="the highest SH band")
    g.add_argument("--init-from", default=None, metavar="NPZ",
                   help="start from the Gaussians in this .npz (--write-init's layout) instead of random ones")
    g.add_argument("--write-init", default=None, metavar="NPZ",
                   help="write the initial Gaussians to this .npz (stored parameters: means, log scales, quats, "
                        "opacity logits, sh0, shN)")
    a = p.parse_args(argv)
    if a.steps is not None and a.steps < 1:
        p.error(f"--steps must be at least 1, got {a.steps}")
    if a.init_points is not None and a.init_points < 1:
        p.error(f"--init-points must be at least 1, got {a.init_points}")
    if a.size < 1 or a.downscale < 1:
        p.error("--size and --downscale must be at least 1")
    a.steps = a.steps or (2000 if a.data is None else 30_000)
    a.init_points = a.init_points or (5000 if a.data is None else 100_000)
    return a


def load_dataset(a, log):
    from examples.nerf import datasets, scene

    if a.data is None:
        data, _ = scene.load_or_generate(a.data_dir, verbose=not a.quiet, height=a.size, width=a.size)
        return datasets.from_procedural(data)
    dataset = datasets.load(a.data, downscale=a.downscale, log=log)
    # The rasterizer projects through a pinhole: a capture's lens distortion is taken out of its images.
    views = {id(v): v for vs in dataset.splits.values() for v in vs}  # a split may list another's views
    flat = {k: v.pinhole() for k, v in views.items()}
    resampled = sum(flat[k] is not v for k, v in views.items())
    if resampled:
        dataset.splits = {k: [flat[id(v)] for v in vs] for k, vs in dataset.splits.items()}
        if log:
            log(f"{a.data}: {resampled} views resampled to a pinhole camera (without their lens distortion)")
    return dataset


def camera(view):
    """(viewmat [4, 4] world-to-camera in OpenCV's convention, K [3, 3]) of a datasets.View (OpenGL's)."""
    viewmat = np.linalg.inv(view.c2w @ OPENGL_TO_OPENCV).astype(np.float32)
    K = np.array([[view.fx, 0.0, view.cx], [0.0, view.fy, view.cy], [0.0, 0.0, 1.0]], np.float32)
    return viewmat, K


def scene_extent(views):
    """The reference's scene extent: 1.1 x the largest distance of a camera from their mean."""
    centers = np.stack([v.c2w[:3, 3] for v in views])
    return 1.1 * float(np.linalg.norm(centers - centers.mean(0), axis=1).max())


class Trainer:
    def __init__(self, a, log=print):
        import tensorflow as tf

        import metal_ops
        from examples.splat.density import DensityControl
        from examples.splat.recipe import Recipe

        self.tf, self.a, self.log = tf, a, log
        self.dataset = load_dataset(a, log)
        self.train_views = self.dataset.splits["train"]
        if not self.train_views:
            raise ValueError(f"{a.data or 'the procedural scene'}: no training views")
        self.background = np.array([1.0, 1.0, 1.0] if a.background == "white" else [0.0, 0.0, 0.0], np.float32)
        self.cameras = [camera(v) for v in self.train_views]
        # Each step's view as tensors made once, in host memory: a step copies only its own image to a GPU.
        with tf.device("/CPU:0"):
            self.view_tensors = [(tf.constant(vm), tf.constant(K), tf.constant(v.composite(self.background)))
                                 for (vm, K), v in zip(self.cameras, self.train_views)]
        self.image_shape = tuple(self.view_tensors[0][2].shape)  # (height, width, 3)
        self.xla_loss = a.xla_loss == "on" or (
            a.xla_loss == "auto" and tf.test.is_built_with_cuda() and bool(tf.config.list_physical_devices("GPU")))
        self.extent = scene_extent(self.train_views)
        self.recipe = Recipe.for_steps(a.steps, sh_degree=a.sh_degree)
        if a.init_from:
            with np.load(a.init_from) as f:
                missing = [k for k in metal_ops.splat.PARAMETERS if k not in f.files]
                if missing:
                    raise ValueError(f"--init-from {a.init_from}: no {', '.join(missing)} in the file")
                self.gaussians = metal_ops.splat.Gaussians(**{k: f[k] for k in metal_ops.splat.PARAMETERS})
        else:
            self.gaussians = metal_ops.splat.Gaussians.random_in_box(self.dataset.aabb, a.init_points, seed=a.seed)
        if a.write_init:
            write_gaussians(a.write_init, self.gaussians)
        r = self.recipe
        means_lr = tf.keras.optimizers.schedules.ExponentialDecay(
            r.lr_means * self.extent, decay_steps=r.steps, decay_rate=r.lr_means_final / r.lr_means)
        self.optimizer = metal_ops.splat.GaussianAdam(self.gaussians, dict(
            means=means_lr, scales=r.lr_scales, quats=r.lr_quats, opacities=r.lr_opacities, sh0=r.lr_sh0,
            shN=r.lr_shN))
        self.density = DensityControl(r, self.extent, seed=a.seed)
        self.density.reset(self.gaussians.count)
        self.rng = np.random.default_rng(a.seed)
        self._steps = {}
        self._loss_and_gradient = loss_and_gradient(tf, r.ssim_weight, self.xla_loss)

    def _train_step(self, degree, accumulate):
        """The compiled step for one SH degree: render, loss, gradients, Adam
        and (accumulate) density control's sums; returns the loss. Nothing is
        read back: the host runs ahead while the GPU works."""
        key = (degree, accumulate)
        if key in self._steps:
            return self._steps[key]
        tf, g = self.tf, self.gaussians
        height, width = self.image_shape[:2]
        background = tf.constant(self.background)
        names = self.optimizer.names

        @tf.function(reduce_retracing=True)
        def step(viewmat, K, target):
            with tf.GradientTape() as tape:
                image, _, info = g.render(viewmat, K, width, height, sh_degree=degree, background=background)
            # The loss and its gradient by the image in one function (XLA fuses SSIM's many small ops there).
            loss, grad_image = self._loss_and_gradient(image, target)
            variables = [getattr(g, k) for k in names]
            grads = tape.gradient(image, variables + [info["means2d"]], output_gradients=grad_image)
            self.optimizer.apply(dict(zip(names, grads[:-1])))
            if accumulate:
                self.density.accumulate(grads[-1], info["radii"], width, height)
            return loss

        self._steps[key] = step
        return step

    def train(self):
        a, r = self.a, self.recipe
        started, order, pending = time.perf_counter(), [], []
        self.losses = []
        loss_ema = None

        def read_losses(step):
            """The steps' losses so far, read back together (one wait for the GPU)."""
            nonlocal loss_ema
            if not pending:
                return
            values = [float(x) for x in self.tf.stack(pending).numpy()]
            first = step - len(pending) + 1
            pending.clear()
            for k, loss in enumerate(values):
                if not math.isfinite(loss):
                    raise FloatingPointError(f"step {first + k}: the loss is {loss}")
                loss_ema = loss if loss_ema is None else 0.95 * loss_ema + 0.05 * loss
            self.losses.extend(values)

        log_every = max(1, r.steps // 20)
        for step in range(1, r.steps + 1):
            if not order:
                order = list(self.rng.permutation(len(self.train_views)))
            i = order.pop()
            accumulate = r.refine_start < step <= r.refine_stop + 1
            pending.append(self._train_step(r.sh_degree_at(step - 1), accumulate)(*self.view_tensors[i]))
            if len(pending) == LOSS_READ_EVERY:
                read_losses(step)
            done = self.density.step(step, self.gaussians, self.optimizer)
            if not a.quiet and (step % log_every == 0 or "cloned" in done):
                read_losses(step)
                self.log(f"step {step}/{r.steps}: loss {loss_ema:.4f}, {self.gaussians.count} Gaussians"
                         + (f" (cloned {done['cloned']}, split {done['split']}, pruned {done['pruned']})"
                            if "cloned" in done else "") + f", {time.perf_counter() - started:.0f} s")
        read_losses(r.steps)
        return time.perf_counter() - started

    def render(self, view, degree=None):
        viewmat, K = camera(view)
        image, _, _ = self.gaussians.render(viewmat, K, view.width, view.height,
                                            sh_degree=self.recipe.sh_degree if degree is None else degree,
                                            background=self.background)
        return np.clip(image.numpy(), 0.0, 1.0)

    def evaluate(self, views):
        psnrs, ssims, renders = [], [], []
        for v in views:
            img = self.render(v)
            psnr, ssim = image_metrics(img, v.composite(self.background))
            psnrs.append(psnr)
            if ssim is not None:
                ssims.append(ssim)
            renders.append(img)
        return psnrs, ssims, renders


def psnr_db(img, ref):
    """PSNR (dB) of an image in [0, 1] against its reference, in float64; inf where they are equal."""
    mse = float(np.mean((np.asarray(img, np.float64) - np.asarray(ref, np.float64)) ** 2))
    return math.inf if mse == 0.0 else -10.0 * math.log10(mse)


def image_metrics(img, ref):
    """(PSNR dB, SSIM or None under 11 px) of an image [H, W, 3] in [0, 1] against its reference."""
    import tensorflow as tf

    psnr = psnr_db(img, ref)
    if min(img.shape[:2]) < SSIM_MIN_SIDE:
        return psnr, None
    return psnr, float(tf.image.ssim(tf.constant(img, tf.float32), tf.constant(ref, tf.float32), max_val=1.0))


def write_gaussians(path, gaussians):
    """The Gaussians' stored parameters as an .npz (--init-from reads it)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    np.savez(path, **{k: v.numpy() for k, v in gaussians.variables_by_name.items()})


def peak_gpu_mib(tf):
    """TensorFlow's peak GPU memory in use (MiB) on its first GPU, None without one."""
    if not tf.config.list_physical_devices("GPU"):
        return None
    return tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20


def image_loss(tf, image, target, ssim_weight):
    """(1 - w) L1 + w (1 - SSIM), SSIM with the reference's 11x11 window of sigma 1.5 (skipped under 11 px)."""
    l1 = tf.reduce_mean(tf.abs(image - target))
    if ssim_weight == 0.0 or min(image.shape[0], image.shape[1]) < SSIM_MIN_SIDE:
        return l1
    ssim = tf.image.ssim(image[None], target[None], max_val=1.0, filter_size=11, filter_sigma=1.5)[0]
    return (1.0 - ssim_weight) * l1 + ssim_weight * (1.0 - ssim)


def loss_and_gradient(tf, ssim_weight, xla):
    """A tf.function (compiled with XLA if `xla`) of (image [H, W, C], target)
    to (image_loss, its gradient by the image)."""
    def fn(image, target):
        with tf.GradientTape() as tape:
            tape.watch(image)
            loss = image_loss(tf, image, target, ssim_weight)
        return loss, tape.gradient(loss, image)

    return tf.function(fn, jit_compile=bool(xla))


def write_metrics(run_dir, metrics):
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=1)


def write_outputs(trainer, run_dir, metrics, renders):
    import imageio.v2 as imageio

    from examples.nerf import cameras as nerf_cameras
    from examples.nerf.views import View

    write_metrics(run_dir, metrics)
    for i, img in enumerate(renders):
        imageio.imwrite(os.path.join(run_dir, f"test_{i:03d}.png"), (img * 255.0 + 0.5).astype(np.uint8))
    first = trainer.dataset.splits["test"][0] if trainer.dataset.splits["test"] else trainer.train_views[0]
    radius = float(np.linalg.norm(first.c2w[:3, 3]))
    frames = []
    for pose in nerf_cameras.orbit_poses(24, radius=radius):
        view = View(np.zeros((first.height, first.width, 3), np.uint8), np.asarray(pose, np.float64),
                    first.fx, first.fy, first.cx, first.cy)
        frames.append((trainer.render(view) * 255.0 + 0.5).astype(np.uint8))
    imageio.mimsave(os.path.join(run_dir, "orbit.gif"), frames, duration=0.08, loop=0)


def main(argv=None):
    a = parse_args(argv)
    log = (lambda *x: None) if a.quiet else print
    trainer = Trainer(a, log=print)
    start = f"{trainer.gaussians.count} Gaussians from {a.init_from}" if a.init_from else \
        f"{a.init_points} random Gaussians"
    log(f"{trainer.dataset.name}: {len(trainer.train_views)} training views of "
        f"{trainer.image_shape[1]}x{trainer.image_shape[0]}, {start}, {a.steps} steps")
    seconds = trainer.train()
    window = max(1, min(50, a.steps // 4))
    metrics = dict(name=a.name, steps=a.steps, train_seconds=round(seconds, 2), gaussians=trainer.gaussians.count,
                   peak_gpu_mib=peak_gpu_mib(trainer.tf),
                   loss_first=float(np.mean(trainer.losses[:window])), loss_last=float(np.mean(trainer.losses[-window:])),
                   dataset=trainer.dataset.name, config=vars(a))
    run_dir = os.path.join(a.out_dir, a.name)
    if not a.no_outputs:  # the training's figures first: a failure in the evaluation keeps them
        write_metrics(run_dir, metrics)
    psnrs, ssims, renders = trainer.evaluate(trainer.dataset.splits["test"])
    metrics.update(test_psnr_mean=float(np.mean(psnrs)) if psnrs else None,
                   test_ssim_mean=float(np.mean(ssims)) if ssims else None, test_psnr=psnrs, test_ssim=ssims)
    if not a.no_outputs:
        write_outputs(trainer, run_dir, metrics, renders)
    print(f"trained {a.steps} steps in {seconds:.1f} s: {trainer.gaussians.count} Gaussians; test PSNR "
          f"{metrics['test_psnr_mean']:.2f} dB" + (f", SSIM {metrics['test_ssim_mean']:.4f}" if ssims else "")
          + f" over {len(psnrs)} views")
    return metrics


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
