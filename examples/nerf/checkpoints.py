"""Checkpoints: what a checkpoint holds, where each worker writes it, restoring the latest, and
the check that a checkpoint's MLP layout is the one the flags build.

A mixin of train.Trainer (Checkpoints).
"""
import json
import os
import shutil


class Checkpoints:
    """The run's tf.train.Checkpoint, its manager and the multi-worker roles."""

    def _open_checkpoints(self):
        """The checkpoint (model, optimizer, step, training time, grid) and its manager; with --resume
        the latest checkpoint restored, else the chief clears the run's old ones."""
        tf = self.tf
        items = dict(model=self.model, optimizer=self.optimizer, step=self.step_var, train_seconds=self.time_var)
        if self.grid is not None:
            items["grid"] = self.grid
        self.ckpt = tf.train.Checkpoint(**items)
        self.ckpt_dir = os.path.join(self.run_dir, "ckpt")
        if not self.args.resume and self._is_chief() and os.path.isdir(self.ckpt_dir):
            shutil.rmtree(self.ckpt_dir)
        self.manager = tf.train.CheckpointManager(self.ckpt, self._ckpt_dir_for_worker(), max_to_keep=2)
        # Every worker restores the chief's checkpoint (the others' are temporary): a shared folder,
        # or a copy of it on every machine.
        latest = tf.train.latest_checkpoint(self.ckpt_dir) if self.args.resume else None
        if latest:
            self._restore(latest)

    def _restore(self, path):
        """The checkpoint at `path`, the bitfield of its grid and the run's PSNR history so far."""
        self._check_checkpoint_layout(path)
        self.ckpt.restore(path).assert_existing_objects_matched()
        # The step counter, mirrored on the host: reading step_var (on the GPU
        # there) would wait for the device every step.
        self._step = self._first_step = int(self.step_var.numpy())
        if self.marching:
            self.publish_occupancy(self._step, force=True)
        hist = os.path.join(self.run_dir, "metrics.json")
        if os.path.exists(hist):
            with open(hist) as f:
                self.history = json.load(f).get("history", [])
        self.log(f"resumed from {path} at step {self._step}")

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
