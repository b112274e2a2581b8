"""Shared pieces of the fuzz suite: profile selection, special values, shapes,
and the error contract (a rejected input raises a documented error whose
message names the offending argument)."""
import os
import re

import numpy as np
import tensorflow as tf
from hypothesis import settings
from hypothesis import strategies as st

# Errors an op may raise for a bad input: TF's InvalidArgument (kernel or
# shape function in eager mode), ValueError (shape function while tracing a
# tf.function, Keras/wrapper argument checks) and TypeError (dtype not in the
# op's list, raised by the generated wrapper).
REJECTED = (tf.errors.InvalidArgumentError, ValueError, TypeError)


def active_profile():
    name = os.environ.get("METAL_OPS_FUZZ_PROFILE", "ci")
    if name not in ("ci", "long"):
        raise ValueError(f"METAL_OPS_FUZZ_PROFILE must be 'ci' or 'long', got {name!r}")
    return "metal_ops_" + name


def fuzz_settings(**overrides):
    """The active profile (tests/fuzz/conftest.py), optionally scaled down for
    an expensive test with max_examples_fraction=..."""
    base = settings.get_profile(active_profile())
    fraction = overrides.pop("max_examples_fraction", None)
    if fraction is not None:
        overrides["max_examples"] = max(5, int(base.max_examples * fraction))
    return settings(base, **overrides)


def assert_names_argument(error, *names):
    """The message of `error` must mention one of `names` as a word."""
    message = str(error)
    assert any(re.search(rf"(?<![A-Za-z0-9_]){re.escape(n)}(?![A-Za-z0-9_])", message) for n in names), (
        f"error does not name any of {names}: {type(error).__name__}: {message}")


def expect_rejected(fn, *names, errors=REJECTED):
    """Calls fn(); it must raise one of `errors` naming one of `names`."""
    try:
        result = fn()
    except errors as e:  # noqa: PERF203
        assert_names_argument(e, *names)
        return e
    raise AssertionError(f"expected an error naming {names}, got a result: {result!r}")


def eager_or_graph(fn, graph):
    """fn, or fn in a tf.function when `graph`."""
    return tf.function(fn) if graph else fn


def mutated_vectors(x, mutation, last_dim):
    """The [..., 3] input x of an element-wise op under one of the mutations
    those ops share: "last_dim" (a last dimension of `last_dim`), "scalar",
    else float64."""
    if mutation == "last_dim":
        return np.zeros(x.shape[:-1] + (last_dim,), x.dtype)
    if mutation == "scalar":
        return x.dtype.type(0.5)
    return x.astype(np.float64)


SPECIAL_F32 = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e-45, -1e-45, 1.2e-38, 3.4e38, -3.4e38, 1e30, -1e30]


def floats32(min_value=-1e6, max_value=1e6, special=True):
    """float32 values: mostly finite in range, sometimes special (NaN, +-inf,
    denormals, huge, signed zero)."""
    finite = st.floats(min_value, max_value, allow_nan=False, allow_infinity=False, width=32)
    if not special:
        return finite
    return st.one_of(finite, finite, finite, st.sampled_from(SPECIAL_F32))


def arrays(draw, shape, elements, dtype=np.float32):
    """A NumPy array of `shape` drawn element by element (small shapes only)."""
    n = int(np.prod(shape)) if len(shape) else 1
    values = draw(st.lists(elements, min_size=n, max_size=n))
    return np.asarray(values, dtype=dtype).reshape(shape)


def fast_arrays(draw, shape, low, high, dtype=np.float32, special_rate=0.0):
    """Larger arrays: seeded NumPy fill (hypothesis draws only the seed), with
    an optional fraction of special values sprinkled in."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    a = rng.uniform(low, high, size=shape).astype(dtype)
    if special_rate > 0 and a.size:
        mask = rng.random(a.shape) < special_rate
        a[mask] = rng.choice(np.asarray(SPECIAL_F32, dtype), size=int(mask.sum()))
    return a


def flush_denormals(a):
    """What TensorFlow's CPU kernels see: TF runs its threads with denormals
    flushed to zero (FTZ/DAZ), so a denormal input behaves as a signed zero.
    References are fed flushed inputs."""
    a = np.asarray(a)
    if not np.issubdtype(a.dtype, np.floating):
        return a
    tiny = np.finfo(a.dtype).tiny
    return np.where(np.abs(a) < tiny, np.copysign(np.zeros_like(a), a), a).astype(a.dtype)


def value_and_vjp(fn, x, upstream, graph=False):
    """(fn(x), the gradient of sum(upstream * fn(x)) w.r.t. x) as NumPy arrays,
    eagerly or in a tf.function."""
    def run(x, upstream):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x)
        return y, tape.gradient(y, x, output_gradients=upstream)

    y, g = (tf.function(run) if graph else run)(tf.constant(x), tf.constant(upstream))
    return y.numpy(), g.numpy()
