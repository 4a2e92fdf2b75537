"""The parallel schedule's order (tests/parallel_schedule.py): costliest module first, the
machine-wide watchers as one unit, and the committed measurement readable."""

import json

import parallel_schedule


def test_measured_modules_cost_their_seconds_and_others_a_second_per_test(monkeypatch, tmp_path):
    durations = tmp_path / "durations.json"
    durations.write_text(json.dumps({"tests/a/test_slow.py": 300, "tests/compile/test_shared_cache.py": 200}))
    monkeypatch.setattr(parallel_schedule, "DURATIONS", durations)
    nodeids = ["tests/a/test_slow.py::t1", "tests/a/test_fast.py::t1", "tests/a/test_fast.py::t2",
               "tests/compile/test_shared_cache.py::t", "tests/checks/test_import_process.py::t1"]
    costs = parallel_schedule.scope_costs(nodeids)
    assert costs == {"tests/a/test_slow.py": 300, "tests/a/test_fast.py": 2, "machine-wide": 201}
    assert parallel_schedule.costliest(["tests/a/test_fast.py", "machine-wide", "tests/a/test_slow.py"], costs) \
        == "tests/a/test_slow.py"


def test_ties_and_unknown_scopes_have_a_stable_order():
    assert parallel_schedule.costliest(["b", "a", "c"], {}) == "c"
    assert parallel_schedule.costliest(["b", "a"], {"a": 5, "b": 5}) == "b"


def test_a_broken_measurement_file_is_no_measurement(monkeypatch, tmp_path):
    broken = tmp_path / "durations.json"
    broken.write_text("[1, 2")
    monkeypatch.setattr(parallel_schedule, "DURATIONS", broken)
    assert parallel_schedule.scope_costs(["tests/x/test_y.py::a"]) == {"tests/x/test_y.py": 1.0}


def test_the_committed_measurement_names_existing_modules():
    measured = parallel_schedule.measured_seconds()
    assert measured, "tests/module_durations.json holds no measurement"
    missing = [m for m in measured if not (parallel_schedule.DURATIONS.parent.parent / m).is_file()]
    assert not missing, f"tests/module_durations.json names modules that no longer exist: {missing}"
