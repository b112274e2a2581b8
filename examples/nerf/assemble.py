"""Putting a run together: the scene, its rays, the strategy's replicas, the model, its occupancy
grid, the optimizer and the loss, each a step of Assembly.assemble (train.Trainer's constructor).

The configuration is frozen: what follows from the scene or the replicas (the finest resolution,
the global batch of --batch-per-replica) makes a new Config, which the trainer keeps as self.args.
"""
import dataclasses
import os
import time

import numpy as np

from examples.nerf import config, datasets, scene
from examples.nerf.distribute import runs_on_gpu


class Assembly:
    """train.Trainer's set-up, in the order each part needs the ones before it."""

    def assemble(self, args, strategy, log, dataset):
        import keras
        import tensorflow as tf

        import metal_ops
        from examples.nerf import baseline, model as hmodel, sampling

        self.tf, self.keras, self.metal_ops = tf, keras, metal_ops
        self._baseline, self._hmodel, self._sampling = baseline, hmodel, sampling
        self.log = log
        self.args = config.resolve(args)
        self.marching = self.args.model == "hash" and self.args.sampler == "march"
        self.jit = self.args.jit
        self.steps_per_call = self.args.steps_per_call
        if self.marching and self.args.distortion > 0 and not hasattr(metal_ops, "packed_distortion_loss"):
            raise ValueError("--distortion needs --sampler fixed (this build has no packed distortion loss)")
        if self.jit:
            self._check_jit_kernels()
        self.run_dir = os.path.join(self.args.out_dir, self.args.name)
        os.makedirs(self.run_dir, exist_ok=True)
        self._load_scene(dataset)
        self._place_rays()
        self._join_strategy(strategy)
        self._build_model()
        self._build_optimizer_and_loss()
        self._reset_counters()
        self._open_checkpoints()

    def _load_scene(self, dataset):
        """The dataset (a shared one, one from --data or the procedural scene) and its splits."""
        a, log = self.args, self.log
        t0 = time.perf_counter()
        if dataset is not None:
            # A loaded scene shared between trainers (benchmarks): their own split lists, one ray cache.
            self.dataset = dataclasses.replace(dataset, splits={k: list(v) for k, v in dataset.splits.items()},
                                               notes=list(dataset.notes))
            self.data_path = a.data or dataset.name
        elif a.data:
            # (the loader logs its progress through the images, which --quiet hides)
            self.dataset = datasets.load(a.data, downscale=a.downscale, holdout=a.holdout,
                                         log=None if a.quiet else log)
            self.data_path = a.data
        else:
            data, self.data_path = scene.load_or_generate(
                a.data_dir, verbose=True, height=a.size, width=a.size, n_train=a.n_train,
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
            self.args = a.replace(finest_res=2048 * aabb_scale if a.recipe == "ngp" else 512)

    def _place_rays(self):
        """The scene's bounds and backgrounds, and every training ray as constants."""
        tf, ds = self.tf, self.dataset
        self.near, self.far = ds.near, ds.far
        self.aabb = tf.constant(ds.aabb, tf.float32)
        # Evaluation composites RGBA views on white (black with --background black).
        self.eval_background = np.array([0.0, 0.0, 0.0] if self.args.background == "black" else [1.0, 1.0, 1.0])
        self.background = tf.constant(self.eval_background, tf.float32)
        o, d, c = self._rays(ds.splits["train"])
        self.train_o, self.train_d, self.train_c = (tf.constant(x) for x in (o, d, c))
        self.n_train_rays = len(o)

    def _join_strategy(self, strategy):
        """The replicas, the global batch they share, and the precision of the MLPs on their devices."""
        tf, a = self.tf, self.args
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
        if a.batch_per_replica:
            # From here on the flags hold the global batch (as metrics.json's config records it).
            a = self.args = a.replace(
                batch_per_replica=False, replica_batch_rays=a.batch_rays, replica_sample_budget=a.sample_budget,
                batch_rays=a.batch_rays * self.num_replicas, sample_budget=a.sample_budget * self.num_replicas)
        if a.batch_rays % self.num_replicas:
            raise ValueError(f"--batch-rays {a.batch_rays} is not divisible by {self.num_replicas} replicas")
        self.mlp_precision = config.resolve_mlp_precision(a.mlp_precision, a.model, a.mlp,
                                                          runs_on_gpu(self.strategy))
        # float16 MLP gradients of a mean loss over thousands of rays fall below
        # float16's normal range; the loss is scaled up and the gradients down.
        self.loss_scale = config.MLP_FLOAT16_LOSS_SCALE if self.mlp_precision == "float16" else 1.0

    def _build_model(self):
        """The model and its occupancy grid (hash) in the strategy's scope, from --seed's weights: a run
        is reproducible on the CPU (Keras draws unseeded initialisers from its global seed generator)."""
        tf, a, ds = self.tf, self.args, self.dataset
        self.keras.utils.set_random_seed(a.seed)
        with self.strategy.scope():
            if a.model != "hash":
                self.model = self._baseline.KerasExampleNeRF()
                self.grid = None
                return
            self.model = self._hmodel.HashNeRF(
                num_levels=a.levels, features_per_level=a.features, log2_hashmap_size=a.log2_table,
                base_resolution=a.base_res, finest_resolution=a.finest_res, hidden=a.hidden,
                sh_degree=a.sh_degree, mlp=a.mlp, mlp_precision=self.mlp_precision)
            # ngp rule: the threshold is on one march step's optical thickness (the fixed sampler: a cell's).
            step = self._hmodel.march_step_size(ds.aabb, a.march_steps) if self.marching else None
            self.grid = self._sampling.OccupancyGrid(ds.aabb, resolution=a.grid_res, decay=a.grid_decay,
                                                     rule=a.grid_rule, threshold_length=step)
            if self.marching:
                self.step_size = step
                # The training step's occupancy bitfield (metal_ops.ray_march's input):
                # every cell occupied before the grid warm-up ends, then the grid's mask,
                # packed where it changes (publish_occupancy), not every step; not saved.
                # One variable for both phases, so one traced training step serves the
                # whole run. Its bytes as float32 words (bitcast, never computed with):
                # MultiWorkerMirroredStrategy broadcasts initial values with collectives,
                # which take no uint8, and an int32 variable lives in host memory (a copy
                # to the GPU every step, and a wait for it at every publish).
                self.all_occupied_bits = self.metal_ops.pack_occupancy(tf.ones_like(self.grid.mask)[None]).numpy()
                self.occupancy_words = tf.Variable(
                    self._words(self.all_occupied_bits), trainable=False, name="occupancy_bits",
                    synchronization=tf.VariableSynchronization.ON_WRITE,
                    aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
                self._published_grid = False

    def _build_optimizer_and_loss(self):
        """Adam (instant-NGP's betas and epsilon for the hash model), the fused update, the step and
        training-time counters, and the loss. The learning rate is set every call from the progress
        (set_learning_rate)."""
        from examples.nerf import fused_adam

        tf, keras, a = self.tf, self.keras, self.args
        with self.strategy.scope():
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
            self.loss_fn = self.metal_ops.losses.RobustLoss(alpha=a.robust_alpha, scale=a.robust_scale)
        elif a.loss == "huber":
            self.loss_fn = keras.losses.Huber(delta=a.huber_delta)
        else:
            self.loss_fn = keras.losses.MeanSquaredError()

    def _reset_counters(self):
        """The programs (built on first use), the step on the host and this process's sample counts."""
        self.history = []
        self._programs = {}  # the training step's programs, by (loop, ray capacity or grid phase): program
        self._jit_rays = 0  # --jit: the last call's ray count (jit_rays: it only grows)
        self._occupancy_arg = None  # --jit: the bitfield the compiled step was given (occupancy_bits)
        self._render_fn = {}
        self.eval_at_seconds = []  # fit(): also evaluate when the training time passes each of these
        self._grid_fn = None
        self._grid_ahead = None  # --jit: the thread compiling the grid update ahead, its errors
        self._grid_phases = set()  # the phases (grid_fn's every_cell) updates have run in
        self._step = 0  # the step counter on the host (a checkpoint's restore sets it)
        self._first_step = 0
        self._pending_counts = None  # (rays, counts tensor) of the last step, read one step later
        self.samples_per_ray = None  # march: recent field evaluations per ray (drives the ray count)
        self.field_evals = 0  # field evaluations (samples), marched samples and rays of this process's steps
        self.marched = 0
        self.rays_seen = 0
        self.padding = 0  # --jit: padding samples (budget - samples kept) and rays dropped (no room in the budget)
        self.dropped_rays = 0
        self.step_seconds = []  # wall time of each step fit() ran (the first includes tracing and compiling)
