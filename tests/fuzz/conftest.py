"""Hypothesis profiles of the fuzz suite.

- "metal_ops_ci" (default): bounded and derandomized, so `make test` is
  reproducible and stays within its time budget on 2 cores.
- "metal_ops_long": selected with METAL_OPS_FUZZ_PROFILE=long (`make fuzz`):
  many more examples, random seeds, the example database kept in
  .hypothesis/ so a failure found once is replayed first next time.

The profiles are applied per test through `fuzz_settings()` (tests/fuzz/
strategies.py) instead of `settings.load_profile`, so hypothesis tests elsewhere
in the suite keep their own settings.
"""
import os

from hypothesis import HealthCheck, settings

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
