"""What `kbuild --help` and each command's help say: nothing eaten by rich markup, no
reference to a file the user does not have, and `kbuild --version`."""

from __future__ import annotations

from typer.testing import CliRunner

from kernel_builder import __version__
from kernel_builder.cli.main import app

runner = CliRunner()


def _help(*command: str) -> str:
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "200", "TERMINAL_WIDTH": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def test_version_flag_and_command_agree():
    for args in (["--version"], ["version"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0 and result.output.strip() == f"kbuild {__version__}"


def test_publish_help_names_the_build_toml_key_of_the_default_repo_id():
    assert "[general.hub] repo-id" in _help("publish")


def test_no_help_cites_a_file_outside_the_users_install():
    for command in (["lock"], ["publish"], ["build"], ["test"], []):
        assert "FORMATS.md" not in _help(*command)
