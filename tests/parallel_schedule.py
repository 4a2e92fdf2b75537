"""How `python -m pytest -n auto` hands test modules to xdist's workers (tests/conftest.py's
pytest_xdist_make_scheduler).

- Each test module runs whole on one worker: module fixtures are made once per worker.
- The modules that watch machine-wide processes or sockets for their own builds share one
  worker, so that they never mistake another's for their own.
- The costliest module left goes out first (longest processing time first), so that a
  five-minute module does not start last and leave the other workers idle. The costs are the
  seconds each module took in a measured run (tests/module_durations.json, written by
  `KBUILD_TEST_DURATIONS_OUT=FILE python -m pytest -n auto`); a module missing there costs
  a second per test.

xdist's own `loadgroup` marks cannot do the grouping: xdist sets `item._nodeid`, which
pytest 9.2's node ids no longer read.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

DURATIONS = Path(__file__).with_name("module_durations.json")
MACHINE_WIDE = "machine-wide"
_MACHINE_WIDE_WATCHERS = {"test_shared_cache", "test_build_interrupt", "test_build_concurrency",
                          "test_envstore", "test_import_process", "test_tool_processes", "test_compiler_cache"}
_UNMEASURED_SECONDS_PER_TEST = 1.0


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def scope_of(nodeid: str) -> str:
    module = module_of(nodeid)
    return MACHINE_WIDE if Path(module).stem in _MACHINE_WIDE_WATCHERS else module


def measured_seconds() -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(DURATIONS.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}  # no measurement: every module costs its test count


def scope_costs(nodeids) -> dict[str, float]:
    """Seconds per scheduling scope: its modules' measured seconds, else a second per test."""
    measured = measured_seconds()
    tests = defaultdict(int)
    for nodeid in nodeids:
        tests[module_of(nodeid)] += 1
    costs: dict[str, float] = defaultdict(float)
    for module, count in tests.items():
        costs[scope_of(module)] += measured.get(module, count * _UNMEASURED_SECONDS_PER_TEST)
    return costs


def costliest(scopes, costs: dict[str, float]) -> str:
    """The scope to hand out next: the costliest, ties broken by name (a stable order)."""
    return max(scopes, key=lambda scope: (costs.get(scope, 0.0), scope))


def make_scheduler(config, log):
    from xdist.scheduler import LoadFileScheduling

    class CostliestModuleFirst(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

        def _assign_work_unit(self, node) -> None:
            # xdist pops the queue's first scope; put the costliest one there first.
            costs = getattr(self, "_costs", None)
            if costs is None:
                costs = self._costs = scope_costs(self.collection or ())
            self.workqueue.move_to_end(costliest(self.workqueue, costs), last=False)
            super()._assign_work_unit(node)

    return CostliestModuleFirst(config, log)


class DurationRecorder:
    """Sums each module's setup, call and teardown seconds as the controller receives the
    reports, and writes {module: seconds} to `path` at the end (sorted, rounded: a stable diff)."""

    def __init__(self, path: Path):
        self.path = path
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report) -> None:
        self.seconds[module_of(report.nodeid)] += report.duration

    def pytest_sessionfinish(self, session) -> None:
        data = {module: round(seconds, 1) for module, seconds in sorted(self.seconds.items())}
        self.path.write_text(json.dumps(data, indent=1) + "\n")
