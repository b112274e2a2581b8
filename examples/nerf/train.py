"""Train the NeRF sample: `python -m examples.nerf.train --name demo` (README.md; `--help` lists
the flags, the basic ones first).

The trainer is put together from one module per part: config (the flags), assemble (scene, model,
optimizer), data (ray batches), steps (the training step, eager or --jit, one or K a call),
grid_schedule (the occupancy grid), checkpoints, evaluate and outputs (pictures, metrics.json).
This module holds the training loop and main().
"""
import math
import sys
import time

import numpy as np

from examples.nerf import config, datasets, environment
from examples.nerf.assemble import Assembly
from examples.nerf.checkpoints import Checkpoints
from examples.nerf.data import RayData
from examples.nerf.distribute import make_strategy, resolve_collective
from examples.nerf.evaluate import Evaluation, psnr_from_mse
from examples.nerf.grid_schedule import GridSchedule
from examples.nerf.outputs import Outputs, report
from examples.nerf.steps import StepPrograms


def check_finite(loss, step):
    """float(loss) (a read-back: where fit() reads it anyway), or FloatingPointError when training diverged."""
    value = float(loss)
    if not math.isfinite(value):
        raise FloatingPointError(f"the training loss is {value} after step {step}: training diverged "
                                 "(a lower --lr may help)")
    return value


class Trainer(Assembly, RayData, StepPrograms, GridSchedule, Checkpoints, Evaluation, Outputs):
    """The whole pipeline; usable from tests and benchmarks (see train() below). `args`: a
    config.Config (parse_args) or build_parser's Namespace; the trainer keeps it resolved and
    frozen as self.args."""

    def __init__(self, args, strategy=None, log=print, dataset=None):
        self.assemble(args, strategy, log, dataset)

    @property
    def step(self):
        return self._step

    def fit(self, steps=None, max_seconds=None, verbose=True, eval_callback=None):
        """Trains until `steps` (total) or `max_seconds` of training time; evaluates periodically."""
        import keras

        a = self.args
        steps = a.steps if steps is None else steps
        if max_seconds is None:
            max_seconds = a.max_minutes * 60.0 if a.max_minutes > 0 else float("inf")
        self.stopped_at_time_limit = False
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
                check_finite(loss, s)
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
                vals = [("loss", check_finite(loss, s)), ("psnr", psnr_from_mse(float(mse))), ("steps/s", rate),
                        ("samples/ray", self.samples_per_ray or float(a.samples))]
                if val is not None:
                    vals.append(("val_psnr", val))
                bar.update(s, values=vals, finalize=last)
            if last:
                break
        self.stopped_at_time_limit = self.step < steps and train_time - start_train_time >= max_seconds
        self._wait_grid_ahead()  # a run that ends before its first grid update
        return train_time

    def set_learning_rate(self, progress):
        lr = self.args.lr * 0.33 ** sum(progress >= m for m in (0.5, 0.75, 0.9))
        warmup = self.args.lr_warmup
        if warmup and self.step < warmup:  # nerfacc's LinearLR: from 1% to 100% over the warm-up
            lr *= 0.01 + 0.99 * self.step / warmup
        if getattr(self, "_lr", None) != lr:  # assigned on change only: no read-back per step
            self.optimizer.learning_rate.assign(lr)
            self._lr = lr

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
        return self.run_call(self.step, self.call_end(self.step, limit), loop=self.steps_per_call > 1)

    def train_until(self, end):
        """Calls of the training step (train_steps) until step `end`: (loss, mse) of the last step."""
        loss = mse = None
        while self.step < end:
            loss, mse = self.train_steps(limit=end)
        return loss, mse

    def train_one_step(self):
        """One optimizer step, a call of the one-step program whatever --steps-per-call: (loss, mse)
        as scalar tensors (float() reads them back, which waits for the device)."""
        return self.run_call(self.step, self.step + 1, loop=False)

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


def train(argv=None, log=print):
    """The command line's run: parse, set the environment, train, evaluate, write and report."""
    environment.set_process_environment()
    args = config.parse_args(argv)
    if args.jit:  # XLA reads its flags at its first compilation, which --jit's step is
        environment.set_xla_flags()
        if args.xla_cache:
            environment.use_xla_cache(args.xla_cache)
    if args.strategy == "multiworker":
        args = args.replace(collective=resolve_collective(args.collective))  # metrics.json's: the transport used
    started = time.perf_counter()
    trainer = Trainer(args, strategy=make_strategy(args.strategy, args.collective, args.bytes_per_pack), log=log)
    log(f"scene: {trainer.data_path} ({trainer.data_seconds:.1f} s), {trainer.n_train_rays} training rays, "
        f"model={args.model}, replicas={trainer.num_replicas}{', --jit' if trainer.jit else ''}, "
        f"{trainer.steps_per_call} step(s) a call")
    trainer.fit(verbose=not args.quiet)
    test_psnr, test_psnrs, renders = trainer.evaluate("test")
    skipped = trainer.ssim_skipped("test")
    test_ssims = [] if skipped else trainer.ssim(renders, "test")
    metrics = trainer.write_outputs(test_psnrs, renders, dict(
        test_ssim_mean=float(np.mean(test_ssims)) if test_ssims else None,
        test_ssim=[round(x, 4) for x in test_ssims]), started=started)
    report(trainer, metrics, test_psnr, test_psnrs, test_ssims, skipped, log)
    return trainer, metrics


def main(argv=None):
    return datasets.exit_status(lambda: train(argv))


if __name__ == "__main__":
    sys.exit(main())
