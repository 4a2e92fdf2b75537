"""What `kbuild --help` and each command's help say: nothing eaten by rich markup, no
reference to a file the user does not have, option names whole at 80 columns, and
`kbuild --version`."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from conftest import kbuild

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
    assert "[general.hub] repo-id" in " ".join(_help("publish").split())


def test_no_help_cites_a_file_outside_the_users_install():
    for command in (["lock"], ["publish"], ["build"], ["test"], []):
        assert "FORMATS.md" not in _help(*command)


def _commands(group, path=()):
    """Every command of the click app under `group`, with its words (`ci github`)."""
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name), command


def _shown_whole(help_text: str, command) -> None:
    shown = set(re.findall(r"(?<![\w-])--?[\w-]*\w", help_text))
    for param in (p for p in command.params if not getattr(p, "hidden", False)):
        for name in (*param.opts, *param.secondary_opts):
            if name.startswith("-"):
                assert name in shown, (name, help_text)
    assert "…" not in help_text, help_text
    assert "<bool>" not in help_text, "a flag takes no value: no type to show"
    assert max(len(line) for line in help_text.splitlines()) <= 80, help_text


def test_help_at_80_columns_keeps_every_option_name_whole():
    import typer.main

    for words, command in _commands(typer.main.get_command(app)):
        result = runner.invoke(app, [*words, "--help"], env={"COLUMNS": "80"})
        assert result.exit_code == 0, (words, result.output)
        _shown_whole(result.output, command)


@pytest.mark.e2e
def test_help_through_a_pipe_at_80_columns():
    import typer.main

    done = kbuild("build", "--help", env={"COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    _shown_whole(done.stdout, typer.main.get_command(app).commands["build"])
