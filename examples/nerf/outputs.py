"""What a run leaves: metrics.json, the side-by-side pictures, the PSNR curve and the orbit, the
sample and timing figures, and the console's summary of them.

A mixin of train.Trainer (Outputs), and report() for the console.
"""
import json
import os
import time

import numpy as np


class Outputs:
    """sample_stats / timing_stats / write_outputs / plot_curve."""

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
        fns = self._programs.values()
        return dict(first_step_s=round(t[0], 3) if t else None,
                    steady_step_ms=round(1000.0 * float(np.median(t[1:])), 2) if len(t) > 1 else None,
                    train_step_traces=sum(f.experimental_get_tracing_count() for f in fns))

    def write_outputs(self, test_psnrs, test_renders, extra, started=None):
        """The pictures, the curve, the orbit and metrics.json (returned as a dict). `started`: the
        time.perf_counter() the run started at; metrics.json's wall_seconds is from it to the JSON's
        writing, after the pictures (the console reports that same figure)."""
        import imageio.v2 as imageio

        a = self.args
        os.makedirs(self.run_dir, exist_ok=True)
        gts = self.ground_truth("test")
        paths = []
        if not a.no_outputs and self._is_chief():
            shown = range(len(gts))
            if a.pictures is not None and a.pictures < len(gts):
                shown = sorted(set(np.linspace(0, len(gts) - 1, a.pictures).round().astype(int))) if a.pictures else []
            for i in shown:
                img, gt = test_renders[i], gts[i]
                err = np.clip(np.abs(img - gt) * 4.0, 0, 1)
                side = np.concatenate([img, gt, err], axis=1)
                p = os.path.join(self.run_dir, f"test_{i:02d}.png")
                imageio.imwrite(p, (side * 255).round().astype(np.uint8))
                paths.append(p)
            self.plot_curve(os.path.join(self.run_dir, "psnr_vs_time.png"))
            poses = self.orbit_poses(a.orbit_frames) if a.orbit_frames else []
            frames = [(self.render_image(c) * 255).round().astype(np.uint8) for c in poses]
            if frames:
                imageio.mimsave(os.path.join(self.run_dir, "orbit.gif"), frames, duration=0.08, loop=0)
        metrics = dict(
            name=a.name, recipe=a.recipe, model=a.model, mlp_precision=self.mlp_precision,
            step=self.step,
            train_seconds=float(self.time_var.numpy()),
            test_psnr_mean=float(np.mean(test_psnrs)) if test_psnrs else None,
            test_psnr=[round(x, 4) for x in test_psnrs], history=self.history,
            dataset=dict(name=self.dataset.name, format=self.dataset.format, notes=self.dataset.notes,
                         views={k: len(v) for k, v in self.dataset.splits.items()}, size=[self.H, self.W],
                         aabb=self.dataset.aabb.tolist(), near=self.near, far=self.far),
            config=vars(a), xla_flags=os.environ.get("XLA_FLAGS", ""), data=self.data_path, side_by_side=paths,
            **self.sample_stats(), **self.timing_stats(), **extra)
        if started is not None:
            metrics["wall_seconds"] = round(time.perf_counter() - started, 2)
        # The other workers of a multi-worker run write beside the chief (the same folder on one machine).
        name = "metrics.json" if self._is_chief() else "metrics.{}{}.json".format(*self._task())
        with open(os.path.join(self.run_dir, name), "w") as f:
            json.dump(metrics, f, indent=2)
        return metrics

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


def report(trainer, metrics, test_psnr, test_psnrs, test_ssims, ssim_skipped, log=print):
    """The console's summary of a run: each test view, the mean, the times (metrics.json's figures:
    train_seconds, the training alone, and wall_seconds, the whole run), the sampler's figures, the
    step's time and where the pictures and metrics went. `ssim_skipped`: why SSIM was not
    computed, or None."""
    a = trainer.args
    for i, p in enumerate(test_psnrs):
        log(f"  test view {i:3d}: PSNR {p:6.2f} dB" + ("" if ssim_skipped else f", SSIM {test_ssims[i]:.4f}"))
    if ssim_skipped:
        log(f"SSIM skipped: {ssim_skipped}")
    ssim = "" if ssim_skipped else f", SSIM {np.mean(test_ssims) if test_ssims else float('nan'):.4f}"
    log(f"held-out test PSNR: {test_psnr:.2f} dB{ssim} (mean of {len(test_psnrs)} views) after {trainer.step} steps, "
        f"{metrics['train_seconds']:.0f} s of training, {metrics['wall_seconds']:.0f} s in all (metrics.json's "
        "train_seconds and wall_seconds)")
    if getattr(trainer, "stopped_at_time_limit", False):
        log(f"training stopped at the time limit: --max-minutes {a.max_minutes:g} ended it after {trainer.step} "
            f"of {a.steps} steps (--max-minutes 0: no limit)")
    st = trainer.sample_stats()
    log(f"sampler {a.sampler if a.model == 'hash' else 'fixed'}: {st['field_evals_per_ray']:.1f} field "
        f"evaluations per ray, {st['field_evals_per_step']:.0f} per step ({st['rays_per_step']:.0f} rays per step; "
        f"{st['marched_per_ray']:.1f} samples per ray marched)")
    ts = trainer.timing_stats()
    if ts["steady_step_ms"] is not None:
        log(f"step time{' (--jit)' if a.jit else ''}: first step {ts['first_step_s']:.2f} s (tracing"
            f"{' and compiling' if a.jit else ''}), then {ts['steady_step_ms']:.1f} ms (median); "
            f"{ts['train_step_traces']} training-step trace(s)")
    run = trainer.run_dir
    if a.no_outputs:
        log(f"metrics: {os.path.join(run, 'metrics.json')} (--no-outputs: no pictures)")
    else:
        log(f"pictures: {os.path.join(run, 'test_*.png')} (rendered | ground truth | 4x error), "
            f"{os.path.join(run, 'orbit.gif')}, {os.path.join(run, 'psnr_vs_time.png')}; "
            f"metrics: {os.path.join(run, 'metrics.json')}")
