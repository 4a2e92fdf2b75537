"""The one `kbuild` app: every command registered once, in one list, and each error class
mapped to its exit code by the entry point (in-process: main() with sys.argv set)."""

from __future__ import annotations

import sys

import pytest

from kernel_builder.cli import main as cli
from kernel_builder.errors import BuildError, KbuildError, ManifestError, UsageError, VariantError

COMMANDS = {"init", "build", "plan", "variants", "check", "test", "bench", "dev", "publish", "lock", "migrate", "doctor", "demo", "version"}
GROUPS = {"env", "docker", "ci"}


def run_main(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["kbuild", *args])
    with pytest.raises(SystemExit) as exited:
        cli.main()
    out, err = capsys.readouterr()
    return exited.value.code, out, err


def test_every_command_and_group_is_registered_once():
    names = [c.name for c in cli.app.registered_commands]
    assert sorted(names) == sorted(COMMANDS)
    assert sorted(g.name for g in cli.app.registered_groups) == sorted(GROUPS)


@pytest.mark.parametrize(("error", "code"), [(KbuildError, 1), (BuildError, 1), (UsageError, 2), (ManifestError, 2), (VariantError, 2)])
def test_each_error_class_has_one_exit_code(error, code):
    assert error("x").exit_code == code


def test_a_usage_error_exits_2_in_one_line(monkeypatch, capsys, tmp_path):
    code, out, err = run_main(monkeypatch, capsys, "init", str(tmp_path / "kk"), "--backends", "fortran")
    assert code == 2
    assert err.strip().count("\n") == 0 and "kbuild: error: --backends" in err and "Traceback" not in err
    assert not (tmp_path / "kk").exists()  # refused before anything is written


def test_a_failure_exits_1_in_one_line(monkeypatch, capsys, tmp_path):
    (tmp_path / "project").mkdir()
    code, _, err = run_main(monkeypatch, capsys, "lock", str(tmp_path / "project"))
    assert code == 1 and "pyproject.toml does not exist" in err and "Traceback" not in err


def test_version_prints_and_exits_0(monkeypatch, capsys):
    code, out, _ = run_main(monkeypatch, capsys, "--version")
    assert code == 0 and out.startswith("kbuild ")
