"""Hypothesis profiles of the fuzz suite.

- "metal_ops_ci" (default): bounded and derandomized, so `make test` is
  reproducible and stays within its time budget on 2 cores.
- "metal_ops_long": selected with METAL_OPS_FUZZ_PROFILE=long (`make fuzz`):
  many more examples, random seeds, the example database kept in
  .hypothesis/ so a failure found once is replayed first next time.

The profiles are applied per test through `fuzz_settings()` (tests/fuzz/
strategies.py) instead of `settings.load_profile`, so hypothesis tests elsewhere
in the suite keep their own settings.

The fuzz suite checks the CPU kernels' exact semantics (every bad value named,
NaN and inf where TensorFlow's float32 CPU ops give them, flush-to-zero): it
runs on /CPU:0 on every machine. The GPU kernels are checked by the op tests,
which run on every device (tests/devices.py).
"""
import os

import pytest
from hypothesis import HealthCheck, settings


@pytest.fixture(autouse=True)
def _on_the_cpu():
    import tensorflow as tf

    with tf.device("/CPU:0"):
        yield

_COMMON = dict(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    print_blob=True,
)

settings.register_profile("metal_ops_ci", max_examples=int(os.environ.get("METAL_OPS_FUZZ_EXAMPLES", "40")),
                          derandomize=True, database=None, **_COMMON)
settings.register_profile("metal_ops_long", max_examples=int(os.environ.get("METAL_OPS_FUZZ_EXAMPLES", "1500")),
                          derandomize=False, **_COMMON)



def pytest_report_header(config):
    from tests.fuzz.strategies import active_profile

    return f"metal_ops fuzz profile: {active_profile()}"
