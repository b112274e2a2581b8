"""The occupancy grid's schedule: when it updates, the bitfield the march sampler reads, and under
--jit the update's compilation ahead, in a thread of its own while the first step compiles.

A mixin of train.Trainer: it reads the trainer's grid, model, strategy and flags (self.args).
"""
import contextlib
import threading

from examples.nerf.distribute import runs_on_gpu


class GridSchedule:
    """The occupancy grid's updates and the bitfield the training step marches through."""

    def _words(self, bits):
        """uint8 [1, B] -> float32 [1, ceil(B / 4)] holding the same bytes (occupancy_words, assemble.py)."""
        tf = self.tf
        bits = tf.convert_to_tensor(bits)
        pad = -int(bits.shape[1]) % 4
        return tf.bitcast(tf.reshape(tf.pad(bits, [[0, 0], [0, pad]]), [1, -1, 4]), tf.float32)

    def _packed_mask(self):
        """The occupancy mask packed for metal_ops.ray_march, as float32 words (as _words lays them out)."""
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

    def use_grid(self, step=None):
        step = self.step if step is None else step
        return self.grid is not None and self.args.occupancy and step >= self.args.grid_warmup

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
        # A device scope holds for its own thread only: the thread enters the device this thread's
        # ops go to (a test's or a caller's tf.device), where the step and the grid's variables are.
        device = self.tf.identity(self.tf.constant(0.0)).device
        errors = []

        def compile_all():
            try:
                with scope, self.tf.device(device):
                    for args in calls:
                        fn(*args)
            except Exception as e:  # noqa: BLE001 (raised again by _wait_grid_ahead, in the training thread)
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
            if errors:  # the thread's own error, raised where training waits for it
                errors[0].add_note("raised in the thread that compiles the occupancy grid's update ahead (--jit)")
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
