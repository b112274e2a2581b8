"""The training rays and each step's batch of them: origins, directions and colours of every
training pixel, the step's ray indices (drawn from the seed and the step alone), the --jit step's
padded layout, and the ray count that follows the sample budget.

A mixin of train.Trainer (RayData); training_target is the batch's colours and background.
"""
import numpy as np


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


class RayData:
    """The training rays (train_o, train_d, train_c, set by the trainer) and the steps' batches."""

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

    def replica_share(self, idx):
        """This replica's slice of a step's global ray indices (the last axis; in a replica context):
        the replicas take equal consecutive slices in the order of their ids, the workers' included."""
        if self.num_replicas == 1:
            return idx
        tf = self.tf
        b = tf.shape(idx)[-1] // self.num_replicas
        start = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.int32) * b
        return idx[..., start:start + b]
