"""The Keras example's NeRF (keras.io examples/vision/nerf.py) for a time-to-quality baseline.

Kept faithful to the example: positional encoding of world positions with 16
frequencies (3 + 2*3*16 = 99 inputs, no view direction), 8 Dense(64, relu)
layers with the inputs concatenated after the fifth, Dense(4) output
(sigmoid colour, relu density), stratified samples in [near, far] = [2, 6],
composite rendering with 1 - exp, an exclusive cumprod of (1 - alpha) + 1e-10
and reduce_sum, last interval 1e10, MSE loss and Adam(1e-3). The only
addition is the white background composited as bg * (1 - sum w), which the
scene needs and which the hash model gets too (same pipeline, same rays).
"""
import keras
import tensorflow as tf

from examples.nerf import sampling

POS_ENCODE_DIMS = 16


def encode_position(x):
    positions = [x]
    for i in range(POS_ENCODE_DIMS):
        for fn in (tf.sin, tf.cos):
            positions.append(fn(2.0 ** i * x))
    return tf.concat(positions, axis=-1)


class KerasExampleNeRF(keras.Model):
    def __init__(self, num_layers=8, dense_units=64, **kw):
        super().__init__(**kw)
        self.num_layers = num_layers
        self.dense = [keras.layers.Dense(dense_units, activation="relu", name=f"dense_{i}")
                      for i in range(num_layers)]
        self.out = keras.layers.Dense(4, name="out")
        n_in = 3 + 2 * 3 * POS_ENCODE_DIMS
        width = n_in
        for i, layer in enumerate(self.dense):
            layer.build((None, width))
            width = dense_units + (n_in if (i % 4 == 0 and i > 0) else 0)
        self.out.build((None, width))

    def call(self, points):
        inputs = encode_position(points)
        x = inputs
        for i, layer in enumerate(self.dense):
            x = layer(x)
            if i % 4 == 0 and i > 0:
                x = tf.concat([x, inputs], axis=-1)
        return self.out(x)


def composite_render(pred, t_vals, background):
    """The example's render_rgb_depth (+ background). pred [R,S,4], t_vals [R,S] sample distances."""
    rgb = tf.sigmoid(pred[..., :-1])
    sigma_a = tf.nn.relu(pred[..., -1])
    delta = t_vals[..., 1:] - t_vals[..., :-1]
    delta = tf.concat([delta, tf.broadcast_to([1e10], tf.shape(delta[..., :1]))], axis=-1)
    alpha = 1.0 - tf.exp(-sigma_a * delta)
    exp_term = 1.0 - alpha
    epsilon = 1e-10
    transmittance = tf.math.cumprod(exp_term + epsilon, axis=-1, exclusive=True)
    weights = alpha * transmittance
    color = tf.reduce_sum(weights[..., None] * rgb, axis=-2)
    acc = tf.reduce_sum(weights, axis=-1)
    color = color + (1.0 - acc)[:, None] * background
    depth = tf.reduce_sum(weights * t_vals, axis=-1)
    return color, depth, acc


def render_baseline(model, origins, dirs, *, near, far, background, num_samples, jitter=True):
    t, ts, _ = sampling.stratified(tf.fill(tf.shape(origins)[:1], near),
                                   tf.fill(tf.shape(origins)[:1], far), num_samples, jitter=jitter)
    pts = origins[:, None, :] + dirs[:, None, :] * ts[..., None]
    r = tf.shape(origins)[0]
    pred = tf.reshape(model(tf.reshape(pts, (-1, 3))), (r, num_samples, 4))
    return composite_render(pred, ts, background)
