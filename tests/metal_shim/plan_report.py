"""pytest plugin for tests/test_metal_plans.py's child runs. With
METAL_OPS_PLAN_ROUTES (e.g. "shim,shim-stream") it sets METAL_OPS_METAL to
each route in turn before each test (the op library reads it at every call).
At the end it writes METAL_OPS_PLAN_REPORT (JSON): per route the tests that
passed and the plans run, the totals, the fallbacks to the CPU, the host
path's cost and the model's counters. The model itself is loaded by
tests/conftest.py (the child starts with METAL_OPS_METAL=shim)."""
import json
import os

from tests.metal_shim import model

_passed = 0
_routes = {}
_current = {}


def _runs():
    from metal_ops import metal_path

    return metal_path.metal_runs()


def pytest_runtest_setup(item):
    routes = [r for r in os.environ.get("METAL_OPS_PLAN_ROUTES", "").split(",") if r]
    if not routes:
        return
    route = routes[len(_current.setdefault("order", [])) % len(routes)]
    _current["order"].append(item.nodeid)
    os.environ["METAL_OPS_METAL"] = route
    _current["route"] = route
    _current["before"] = _runs()


def pytest_runtest_logreport(report):
    global _passed
    if report.when != "call":
        return
    route = _current.get("route", os.environ.get("METAL_OPS_METAL", ""))
    stats = _routes.setdefault(route, {"passed": 0, "plans": 0, "passes": 0})
    if report.passed:
        _passed += 1
        stats["passed"] += 1
    if "before" in _current:
        after = _runs()
        stats["plans"] += after[0] - _current["before"][0]
        stats["passes"] += after[1] - _current["before"][1]


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("METAL_OPS_PLAN_REPORT")
    if not path:
        return
    from metal_ops import metal_path

    name, reason = metal_path.active_metal_path()
    plans, passes = metal_path.metal_runs()
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"path": name, "reason": reason, "plans": plans, "passes": passes, "passed": _passed,
                   "routes": _routes, "fallbacks": metal_path.metal_fallbacks(), "cost": metal_path.host_cost(),
                   "model": model.counters()}, f)
