"""The package's reference of fused_mlp (python/metal_ops/_reference/fused_mlp.py:
the float64 Dense stack and the float16 / TF32 error bounds), without TensorFlow."""
from tests.reference import packaged

packaged("fused_mlp", globals())


def assert_within_float16_bound(bound, **results):
    """Each of the float16 kernel's results (y, hidden, dx, dws, dbs: see
    Float16Bound.ratios) within `bound` of the float64 reference, elementwise
    (also a tf32_bound's: the same model)."""
    bad = [f"{name}: error up to {ratio:.3g} times its error bound"
           for name, ratio in bound.ratios(**results) if not ratio <= 1.0]
    assert not bad, "; ".join(bad)
