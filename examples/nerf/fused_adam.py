"""A Keras 3 Adam optimizer's update applied with TensorFlow's fused kernel.

Keras 3's TensorFlow backend applies Adam to each variable as about ten
elementwise ops (moments, bias correction, square root, division, three
assignments), each a separate kernel launch. tf.raw_ops.ResourceApplyAdam does
the same update in one kernel, on CPUs and GPUs:

    Keras 3 (keras/src/optimizers/adam.py, amsgrad off), t = iterations + 1:
        alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)
        m += (g - m) * (1 - beta_1);  v += (g^2 - v) * (1 - beta_2)
        var -= m * alpha / (sqrt(v) + epsilon)
    ResourceApplyAdam (tensorflow/core/kernels/training_ops.cc, use_nesterov
    off) takes beta1_power = beta_1^t and beta2_power = beta_2^t and computes
    the same expressions, epsilon outside the square root as in Keras.

An IndexedSlices gradient keeps Keras's update: Keras sums the squares of
repeated rows' slices into v, which one ResourceApplyAdam on the summed
gradient cannot reproduce.

FusedAdam updates the Keras optimizer's own variables (iterations, learning
rate, momentums and velocities), so checkpoints of the optimizer, and the
Keras path, read and continue the same state.
"""
import tensorflow as tf


def adam_slots(optimizer, variables):
    """[(momentum, velocity)] of each model variable in a built Keras 3 Adam.

    Keras names the slots "<variable path with / as _>_momentum" and
    "..._velocity" (BaseOptimizer.add_variable_from_reference) and has no
    public lookup; a slot that is missing, ambiguous or of another shape or
    dtype than its variable raises ValueError.
    """
    by_name = {}
    for s in optimizer.variables:
        by_name.setdefault(s.name, []).append(s)
    slots = []
    for var in variables:
        pair = []
        for kind in ("momentum", "velocity"):
            name = f"{var.path.replace('/', '_')}_{kind}"
            found = by_name.get(name, [])
            if len(found) != 1:
                raise ValueError(f"optimizer {optimizer.name}: {len(found)} variables named {name!r} (the {kind} of "
                                 f"{var.path}); its variables: {[s.path for s in optimizer.variables]}")
            slot = found[0]
            if tuple(slot.shape) != tuple(var.shape) or slot.dtype != var.dtype:
                raise ValueError(f"optimizer {optimizer.name}: {slot.path} is {slot.dtype} {tuple(slot.shape)}, "
                                 f"its variable {var.path} {var.dtype} {tuple(var.shape)}")
            pair.append(slot)
        slots.append(tuple(pair))
    return slots


def unsupported_settings(optimizer):
    """Why ResourceApplyAdam would not compute `optimizer`'s update (empty: it does)."""
    import keras

    why = []
    if type(optimizer) is not keras.optimizers.Adam:
        why.append(f"{type(optimizer).__name__} is not keras.optimizers.Adam")
        return why
    if optimizer.amsgrad:
        why.append("amsgrad")
    for name in ("weight_decay", "clipnorm", "clipvalue", "global_clipnorm", "loss_scale_factor",
                 "gradient_accumulation_steps"):
        if getattr(optimizer, name, None):
            why.append(name)
    if optimizer.use_ema:
        why.append("use_ema")
    if not isinstance(optimizer._learning_rate, keras.Variable):
        why.append("a learning-rate schedule or callable")
    return why


class FusedAdam:
    """Applies a built keras.optimizers.Adam's update to `variables` with one
    ResourceApplyAdam per variable. Call apply() where apply_gradients would be
    called: in a replica context (tf.function, strategy.run or none)."""

    def __init__(self, optimizer, variables):
        why = unsupported_settings(optimizer)
        if why:
            raise ValueError(f"the fused Adam computes keras.optimizers.Adam without {', '.join(why)}")
        self.optimizer = optimizer
        self.variables = list(variables)
        for var in self.variables:
            if var.constraint is not None or getattr(var, "overwrite_with_gradient", False):
                raise ValueError(f"{var.path}: a constraint or overwrite_with_gradient (Keras applies them, "
                                 "the fused Adam does not)")
        self.slots = adam_slots(optimizer, self.variables)

    def apply(self, grads, also=(), active=None):
        """Applies `grads`; returns the tensors of `also` summed over the replicas, in the
        gradients' all-reduce (one collective a step, where a separate one for a step's
        figures costs each worker a wait; as they are with one replica). `active`, a bool
        scalar tensor: False leaves the variables, the moments and the iteration count as
        they are, for any finite gradients (a step of a loop of fixed trip count that has
        nothing to do)."""
        opt = self.optimizer
        grads, also = list(grads), list(also)
        missing = [v.path for g, v in zip(grads, self.variables) if g is None]
        if missing or len(grads) != len(self.variables):
            raise ValueError(f"the fused Adam needs a gradient for each of its {len(self.variables)} variables "
                             f"(got {len(grads)}; none for {missing})")
        if active is not None and any(isinstance(g, tf.IndexedSlices) for g in grads):
            raise ValueError("the fused Adam's `active` needs dense gradients (Keras's update of "
                             "IndexedSlices moves the moments whatever its learning rate)")
        strategy = tf.distribute.get_strategy()
        if strategy.num_replicas_in_sync > 1:
            # As Keras (TFOptimizer._all_reduce_sum_gradients): summed over replicas, IndexedSlices kept.
            reduced = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, grads + also)
            grads, also = reduced[:len(grads)], reduced[len(grads):]
        iterations = opt.iterations.value  # the tf.Variable: one AssignAddVariableOp, not read + add + assign
        with tf.name_scope(opt.name):
            t_int = iterations.read_value() + 1
            hyper = {}  # the update's scalars, once per dtype; merge_call hands each device its replica's
            for dtype in sorted({tf.as_dtype(v.dtype).name for v in self.variables}):
                t = tf.cast(t_int, dtype)
                b1 = tf.constant(opt.beta_1, dtype)
                b2 = tf.constant(opt.beta_2, dtype)
                hyper[dtype] = dict(beta1_power=tf.pow(b1, t), beta2_power=tf.pow(b2, t),
                                    lr=tf.cast(opt.learning_rate, dtype), beta1=b1, beta2=b2,
                                    epsilon=tf.constant(opt.epsilon, dtype))
                if active is not None:
                    # An inactive step: no learning rate, and betas of 1, so that m += (g - m) * (1 - beta1)
                    # and v += (g^2 - v) * (1 - beta2) keep the moments exactly.
                    one = tf.constant(1.0, dtype)
                    hyper[dtype].update(lr=tf.where(active, hyper[dtype]["lr"], tf.zeros_like(one)),
                                        beta1=tf.where(active, b1, one), beta2=tf.where(active, b2, one))

            def update(distribution, grads, hyper):
                for grad, var, (m, v) in zip(grads, self.variables, self.slots):
                    distribution.extended.update(var.value, apply_one, group=False,
                                                 args=(grad, m, v, hyper[tf.as_dtype(var.dtype).name]))

            def apply_one(var, grad, m, v, scalars):
                if isinstance(grad, tf.IndexedSlices):
                    # Keras updates every row, but squares the slices before it sums repeated
                    # rows into v (sum of g^2, not (sum of g)^2): its own update keeps that.
                    return opt.update_step(grad, var, opt.learning_rate)
                grad = tf.cast(grad, var.dtype)
                # Inside extended.update, m.value.handle is this device's copy of a mirrored slot.
                return tf.raw_ops.ResourceApplyAdam(var=var.handle, m=m.value.handle, v=v.value.handle, grad=grad,
                                                    use_locking=False, use_nesterov=False, **scalars)

            tf.__internal__.distribute.interim.maybe_merge_call(update, strategy, grads, hyper)
        iterations.assign_add(1 if active is None else tf.cast(active, iterations.dtype))
        return also
