"""pytest plugin for tests/test_metal_plans.py's child runs: at the end writes
METAL_OPS_PLAN_REPORT (JSON): the Metal path, the plans and passes the
executor ran, and the test cases that passed."""
import json
import os

_passed = 0


def pytest_runtest_logreport(report):
    global _passed
    if report.when == "call" and report.passed:
        _passed += 1


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("METAL_OPS_PLAN_REPORT")
    if not path:
        return
    from metal_ops import metal_path

    name, reason = metal_path.active_metal_path()
    plans, passes = metal_path.metal_runs()
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"path": name, "reason": reason, "plans": plans, "passes": passes, "passed": _passed}, f)
