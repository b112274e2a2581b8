"""The training step: one replica's loss, gradients and update, and the tf.functions that run it,
eager (TensorFlow's executor) or compiled whole by XLA (--jit), one step or a loop of K steps a
call (--steps-per-call).

A mixin of train.Trainer (StepPrograms): the programs are built on first use and kept per ray
count (--jit) or per grid phase, so a run traces each once.
"""
from examples.nerf.data import training_target


def graph_loop(k, step, state):
    """`state = step(i, *state)` for i in range(k), a loop in the graph (tf.while_loop). The
    sample's tf.functions take autograph=False: its step has no Python control flow on tensors,
    and AutoGraph's conversion of the step's Python costs seconds of the first step."""
    import tensorflow as tf

    return tf.while_loop(lambda i, *_: i < k, lambda i, *s: (i + 1, *step(i, *s)),
                         (tf.constant(0), *state))[1:]


def unscale_gradient(g, scale):
    """g / scale for a dense or an IndexedSlices gradient (None stays None)."""
    import tensorflow as tf

    if g is None:
        return None
    if isinstance(g, tf.IndexedSlices):
        return tf.IndexedSlices(g.values / scale, g.indices, g.dense_shape)
    return g / scale


class StepPrograms:
    """The training step's body and its programs (program: one step or K, eager or compiled)."""

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

    def run_call(self, step, end, loop):
        """Steps `step` to `end` - 1 in one call of the training step's program (program): compiled
        whole (--jit) or run by TensorFlow's executor, one step (`loop` False) or a loop of up to
        --steps-per-call steps in the graph (a shorter call runs only its own). Returns (loss, mse) of
        the last step; its sample counts are read at the next call, while that one runs on the device
        (the ray budget follows the sample count one call late)."""
        tf = self.tf
        self._before_call(step)
        rays = self.jit_rays() if self.jit else self.rays_for_budget()
        # The program of each ray capacity (--jit: its shapes are static) or of each grid phase (the
        # march sampler's bitfield carries the warm-up: one program for the whole run).
        key = self.jit_capacity(rays) if self.jit else True if self.marching else self.use_grid(step)
        args = [tf.constant(step, tf.int64), tf.constant(rays, tf.int32), tf.constant(end - step, tf.int32)]
        if self.jit:
            args.append(self.occupancy_words.read_value())  # (the bitfield, an argument of the program)
        loss, mse, counts = self._first_call(self.program(loop, key), *args)
        if loop:
            counts = counts[:end - step]  # (the rows of turns the call did not take are zero)
        else:  # (a loop advances the counter in the graph: it seeds the next step's jitter)
            self.step_var.assign_add(1)
        self._step = end
        self.flush_counts()
        self._pending_counts = (rays, counts)
        return loss, mse

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

    def _batch_step(self, step, count, key, active=None):
        """One step of the program `key` (program's) on the batch `ray_batch` draws for `step`:
        (loss, mse, counts). --jit: the batch padded to the capacity `key`, all padding where
        `active` is False; else the host draws the batch, each replica steps on its share and the
        figures are summed over the replicas."""
        tf = self.tf
        if self.jit:
            idx = self.ray_batch(step, count, key)
            if active is not None:  # an idle turn's rays are all padding
                idx = tf.where(active, idx, tf.constant(-1, tf.int64))
            return self._jit_step(idx, active)
        with tf.device("/CPU:0"):  # the host draws, as it feeds the step
            idx = self.ray_batch(step, count)
        figures = self.strategy.experimental_local_results(self.strategy.run(
            lambda i: self._replica_step(self.replica_share(i), key, summed=True), args=(idx,)))[0]
        return figures[0], figures[1], tf.cast(figures[2:], tf.int64)  # (every replica holds the sums)

    def program(self, loop, key):
        """The training step's program, built on first use and kept per (loop, key): one step, or
        (`loop`) up to K = --steps-per-call steps in a loop in the graph, each drawing its batch;
        `key` is the ray capacity under --jit (one XLA program per ray count, the whole call
        compiled) and the grid phase (use_grid) without. It takes the first step, the call's ray
        count, the loop's steps n (a shorter call runs only its own) and, under --jit, the bitfield
        (the variable's value at the call); it returns the last step's loss and mse and the counts
        of _replica_step, [3] for one step, [K, 3] for a loop (rows from n on zero). The ray count
        changes every step (the sample budget): without --jit the batch is a tensor of dynamic
        length, so one trace serves the whole run under every strategy. The loop advances the step
        counter in the graph: it seeds the next step's jitter.

        With --jit and the fused Adam the loop always takes K turns, those from n on inactive (their
        rays all -1, their update none: FusedAdam.apply's `active`). XLA then knows the trip count,
        and its GPU runtime queues all K turns at once, where a loop of n turns copies its condition
        to the host and waits for the GPU before each turn (on an H200 the demo's step is about the
        same either way: README.md, "`--jit`")."""
        if (loop, key) in self._programs:
            return self._programs[(loop, key)]
        tf, k, jit = self.tf, self.steps_per_call, self.jit
        fixed = jit and loop and self.fused_adam is not None
        signature = [tf.TensorSpec([], tf.int64), tf.TensorSpec([], tf.int32), tf.TensorSpec([], tf.int32)]
        if jit:
            signature.append(tf.TensorSpec(self.occupancy_words.shape, tf.float32))

        def step(i, last, counts, first, count, n):
            active = i < n if fixed else None
            loss, mse, c = self._batch_step(first + tf.cast(i, tf.int64), count, key, active)
            figures = tf.cast(tf.stack([loss, mse]), tf.float32)
            if fixed:
                self.step_var.assign_add(tf.cast(active, self.step_var.dtype))
                figures = tf.where(active, figures, last)
            else:
                self.step_var.assign_add(1)
            return figures, tf.tensor_scatter_nd_update(counts, tf.reshape(i, [1, 1]), c[None])

        @tf.function(jit_compile=jit, autograph=False, input_signature=signature)
        def program(first, count, n, *occupancy_words):
            self._occupancy_arg = occupancy_words[0] if jit else None
            try:
                if not loop:
                    return self._batch_step(first, count, key)
                last, counts = graph_loop(k if fixed else n, lambda i, *s: step(i, *s, first, count, n),
                                          (tf.zeros([2]), tf.zeros([k, 3], tf.int64)))
                return last[0], last[1], counts
            finally:
                self._occupancy_arg = None

        self._programs[(loop, key)] = program
        return program

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
