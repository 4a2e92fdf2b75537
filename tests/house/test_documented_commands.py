"""Every command the README and docs/ show is a real one and runs as shown: parsed by the real
app, run here when cheap and hermetic, else tied to the test that runs it
(tests/house/documented_commands.py has the reading of the pages and the tables)."""

from __future__ import annotations

import ast
import functools
import re
import shutil
from pathlib import Path

import pytest
import typer

from conftest import REPO, kbuild_in_process
from documented_commands import (HOME, OWN_ENVIRONMENT_STORE, PLUMBING, RUN_BY_TESTS, RUN_ELSEWHERE, RUNS_HERE, RUNS_HERE_WHEN_REFUSED,
                                RUNS_HERE_WITH, WORKSPACE, documented_commands, inline_commands)
from kernel_builder.cli.main import app


@functools.cache
def _kbuild_command():
    return typer.main.get_command(app)


def _kbuild_context(words: tuple[str, ...]) -> tuple[str, str | None]:
    """Parse `kbuild ...` with the real app as the shell would hand it over, invoking nothing:
    (the command's path, None) or (its path, the error the parser gives)."""
    command, parent, path, rest = _kbuild_command(), None, ["kbuild"], list(words[1:])
    while hasattr(command, "list_commands") and rest:
        context = typer.Context(command, info_name=path[-1], parent=parent)
        if rest[0] not in command.list_commands(context):
            break
        command, parent, path = command.get_command(context, rest[0]), context, [*path, rest.pop(0)]
    if hasattr(command, "list_commands") and rest and not rest[0].startswith("-"):
        return " ".join(path), f"No such command '{rest[0]}'."
    try:
        command.make_context(path[-1], rest, parent=parent)
    except typer.Exit as done:  # an eager option (--version, --help) ends parsing early
        return " ".join(path), None if done.exit_code == 0 else f"exit {done.exit_code}"
    except Exception as error:  # click's, which typer may vendor: a usage error or a bad value
        if not hasattr(error, "format_message"):
            raise
        return " ".join(path), error.format_message()
    return " ".join(path), None


def _runs_here(segment, command) -> bool:
    if segment.words[0] != "kbuild":
        return False
    path, _ = _kbuild_context(segment.words)
    return (path in RUNS_HERE or path in RUNS_HERE_WITH and RUNS_HERE_WITH[path] in segment.words
            or path in RUNS_HERE_WHEN_REFUSED and _shown_error(command, segment) is not None)


def _needs_a_test(segment, command) -> bool:
    return segment.words[0] not in PLUMBING and not _runs_here(segment, command)


def _shown_error(command, segment) -> str | None:
    """The `kbuild: error:` line the page shows for the command's last kbuild segment, if any."""
    kbuild_segments = [each for each in command.segments() if each.words[0] == "kbuild"]
    shown = re.search(r"^kbuild: error: .*$", command.output, re.M)
    return shown.group(0) if shown and kbuild_segments[-1] == segment else None


COMMANDS = documented_commands()


def test_the_pages_show_commands_and_the_reader_finds_them():
    """The extraction sees what a reader sees: a prompt's command, a prompt-less bash block's
    lines, continuations joined, sample output kept apart."""
    shown = {command.text for command in COMMANDS}
    assert "pip install '.[torch,kernels]' && kbuild demo" in shown
    assert any(text.startswith("kbuild build examples/swiglu --runner docker") and text.endswith("x86_64-linux")
               for text in shown), "a continued line is one command"
    doctor = next(command for command in COMMANDS if command.text == "kbuild doctor")
    assert "builds cpu, cuda" in doctor.output and "$" not in doctor.output.split("\n", 1)[0]


def test_every_documented_kbuild_command_parses_with_the_real_app():
    wrong = _parse_problems(COMMANDS)
    assert not wrong, "\n".join(wrong)


def test_every_kbuild_command_named_in_prose_has_those_subcommands_and_options():
    """`kbuild ...` in a sentence may leave out what a run needs (`kbuild publish`) or stand for
    any command (`kbuild COMMAND --help`), never name a command or an option that does not exist."""
    incomplete = re.compile(r"Missing |requires an argument|Usage: |No such command '[A-Z_]+'")
    wrong = [problem for problem in _parse_problems(inline_commands()) if not incomplete.search(problem)]
    assert len(inline_commands()) > 50 and not wrong, "\n".join(wrong)


def test_a_sentence_naming_a_missing_command_or_option_is_caught(tmp_path):
    page = tmp_path / "prose.md"
    page.write_text("Run `kbuild publish`, then `kbuild envs list`\nor `kbuild build --no-such`.\n\n"
                    "```bash\n$ kbuild plan `kbuild --no-such`\n```\n")
    assert _parse_problems(inline_commands([page])) == [
        f"{page}:1: `kbuild publish`: Missing option '--tag' / '-t'.",
        f"{page}:1: `kbuild envs list`: No such command 'envs'.",
        f"{page}:2: `kbuild build --no-such`: No such option: --no-such"]


def test_every_documented_command_is_run_by_the_docs_check_or_a_named_test():
    """A command a page shows is run here (RUNS_HERE), or named in RUN_BY_TESTS with a test whose
    source holds its program, subcommands and flags, or in RUN_ELSEWHERE with why no test can."""
    problems = _coverage_problems(COMMANDS)
    used = {segment.key for command in COMMANDS for segment in command.segments()}
    problems += [f"tests/house/documented_commands.py: `{key}` is on no page any more: remove it"
                 for key in sorted((set(RUN_BY_TESTS) | set(RUN_ELSEWHERE)) - used)]
    assert not problems, "\n".join(problems)


def test_a_new_command_without_a_test_or_with_a_wrong_option_fails_naming_its_page_and_line(tmp_path, monkeypatch):
    page = tmp_path / "new-guide.md"
    page.write_text("# New\n\n```bash\n$ kbuild plan examples/relu --matrix cpu\n...\n"
                    "$ kbuild build examples/relu --no-such-flag\n$ kbuild publish relu --tag v9.0.0 \\\n"
                    "    --repo-id me/relu\n```\n")
    commands = documented_commands([page])
    assert [command.line for command in commands] == [4, 6, 7]
    where = f"{page}:"
    assert _parse_problems(commands) == [f"{where}6: `kbuild build examples/relu --no-such-flag`: No such option: --no-such-flag"]
    assert _coverage_problems(commands) == [
        f"{where}6: `kbuild build examples/relu --no-such-flag` is run by no test: add it to RUN_BY_TESTS in "
        "tests/house/documented_commands.py with the test that runs it",
        f"{where}7: `kbuild publish relu --tag v9.0.0 --repo-id me/relu` is run by no test: add it to RUN_BY_TESTS in "
        "tests/house/documented_commands.py with the test that runs it"]
    # A line naming a test that is not there, or one that does not run the command, is refused.
    for node, says in [("tests/cli/test_dev.py::test_no_such_test", "does not exist"),
                       ("tests/cli/test_dev.py::test_watch_reruns_after_a_save",
                        "does not run it: its source lacks ['publish', '--tag', '--repo-id']")]:
        monkeypatch.setitem(RUN_BY_TESTS, "kbuild publish relu --tag v9.0.0 --repo-id me/relu", node)
        assert _coverage_problems(commands)[-1] == f"{where}7: `kbuild publish relu --tag v9.0.0 --repo-id me/relu`: {node} {says}"


def _parse_problems(commands) -> list[str]:
    return [f"{command.where}: `{segment.key}`: {error}" for command in commands for segment in command.segments()
            if segment.words[0] == "kbuild" for _, error in [_kbuild_context(segment.words)] if error]


def _coverage_problems(commands) -> list[str]:
    problems = []
    for command in commands:
        for segment in (segment for segment in command.segments() if _needs_a_test(segment, command)):
            if segment.key in RUN_ELSEWHERE:
                program = _program(segment.words)
                if "/" in program and not (REPO / program).exists():
                    problems.append(f"{command.where}: `{segment.key}`: {program} does not exist")
                continue
            node = RUN_BY_TESTS.get(segment.key)
            if node is None:
                problems.append(f"{command.where}: `{segment.key}` is run by no test: add it to RUN_BY_TESTS in "
                                "tests/house/documented_commands.py with the test that runs it")
                continue
            missing = _missing_from_test(node, segment.words)
            if missing:
                problems.append(f"{command.where}: `{segment.key}`: {node} {missing}")
    return problems


def _missing_from_test(node: str, words: tuple[str, ...]) -> str | None:
    """None when the test `node` (file::function) exists and its source holds the words that make
    the invocation (program, kbuild subcommands, option flags), else what is missing."""
    file, _, name = node.partition("::")
    if not (REPO / file).is_file():
        return "does not exist"
    lines, definitions = _module(REPO / file)
    function = definitions.get(name.split("[")[0].split("::")[-1])
    if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
        return "does not exist"
    body = "\n".join(_test_source(lines, definitions, function))
    missing = [shown for shown, pattern in _invocation_patterns(words) if not re.search(pattern, body)]
    return f"does not run it: its source lacks {missing}" if missing else None


@functools.cache
def _module(path: Path) -> tuple[list[str], dict[str, ast.AST]]:
    """A test module's lines and its top-level definitions by name (functions, classes, tables)."""
    source, definitions = path.read_text(), {}
    for node in ast.parse(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        for name in [getattr(node, "name", None), *(getattr(target, "id", None) for target in targets)]:
            if name:
                definitions[name] = node
    return source.splitlines(), definitions


def _test_source(lines: list[str], definitions: dict[str, ast.AST], function: ast.AST) -> list[str]:
    """The test's source and that of the module-level helpers, fixtures and tables it names,
    and those they name (a test that runs the command through a helper or a table of cases)."""
    found, pending = [function], [function]
    while pending:
        for node in ast.walk(pending.pop()):
            name = node.id if isinstance(node, ast.Name) else node.arg if isinstance(node, ast.arg) else None
            if name in definitions and definitions[name] not in found:
                found.append(definitions[name])
                pending.append(definitions[name])
    return ["\n".join(lines[node.lineno - 1:node.end_lineno]) for node in found]


def _invocation_patterns(words: tuple[str, ...]) -> list[tuple[str, str]]:
    """What a test that runs the segment holds, as (what to name when missing, a pattern): a
    kbuild command's path as consecutive string literals (`"env", "create"`), the program's
    name otherwise, and each option flag as a string literal of its own."""
    quoted = r"[\"']{}[\"'=]"
    if words[0] == "kbuild":
        path = _kbuild_context(words)[0].split()[1:]
        program = [(" ".join(path), r"\s*,\s*".join(quoted.format(re.escape(word)) for word in path))] if path else []
    elif words[:2] in (("python", "-c"), ("python3", "-c")):  # a snippet: the calls it makes into the modules it imports
        modules = set(re.findall(r"import ([\w, ]+)", words[2])[0].replace(" ", "").split(",")) - {"torch"}
        return [(call, re.escape(call)) for call in dict.fromkeys(re.findall(rf"\.(\w+)\(", words[2]))
                if re.search(rf"\b({'|'.join(modules)})\.{call}\(", words[2])]
    else:
        name = Path(_program(words)).name
        program = [(name, rf"(?<=[\"'\s/]){re.escape(name)}(?=[\"'\s])")]
    flags = [word.split("=")[0] for word in words[1:] if word.startswith("-")]
    return program + [(flag, quoted.format(re.escape(flag))) for flag in dict.fromkeys(flags)]


def _program(words: tuple[str, ...]) -> str:
    """The program a segment runs: a python script's path, else its first word."""
    if words[0].startswith("python"):
        return next((word for word in words[1:] if not word.startswith("-")), words[0])
    return words[0]


def _workspace(folder: Path) -> Path:
    for name, source in WORKSPACE.items():
        shutil.copytree(REPO / source, folder / name, ignore=shutil.ignore_patterns("build", "__pycache__"))
    return folder


def _expected_status(command, segment_index: int, segments) -> int | None:
    """What the page says the segment exits with: N from a following `echo "exit N"` (None: any
    non-zero, from a `kbuild: error:` in the sample output), else 0."""
    for later in segments[segment_index + 1:]:
        if later.words[:1] == ("echo",):
            shown = re.search(r"^exit (\d+)$", command.output, re.M)
            return int(shown.group(1)) if shown else 0
    return None if _shown_error(command, segments[segment_index]) else 0


@pytest.mark.parametrize("page", sorted({command.page for command in COMMANDS
                                 if any(_runs_here(segment, command) for segment in command.segments())}),
                         ids=lambda page: str(page.relative_to(REPO)))
def test_the_commands_that_run_here_exit_as_the_page_shows(page, tmp_path):
    """A page's cheap kbuild commands, in page order, in a workspace of copies (WORKSPACE; `/home/me` is
    that folder), each with the exit status its page shows."""
    wrong = _run_here_problems([command for command in COMMANDS if command.page == page], _workspace(tmp_path))
    assert not wrong, "\n".join(wrong)


def test_a_command_that_exits_otherwise_than_its_page_shows_is_named(tmp_path):
    page = tmp_path / "matrix.md"
    page.write_text("```bash\n$ kbuild plan examples/relu --matrix 'backend=metal arch=x86_64'\n"
                    "$ kbuild plan examples/relu --matrix 'backend=cpu' --json > plan.json && kbuild ci matrix plan.json\n```\n")
    wrong = _run_here_problems(documented_commands([page]), _workspace(tmp_path / "workspace"))
    assert len(wrong) == 1 and wrong[0].startswith(f"{page}:2: `kbuild plan examples/relu --matrix 'backend=metal "
                                                   "arch=x86_64'` exited 2, the page shows 0: kbuild: error:"), wrong


def _run_here_problems(commands, workspace: Path) -> list[str]:
    wrong = []
    for command in commands:
        segments = command.segments()
        for index, segment in enumerate(segments):
            if not _runs_here(segment, command):
                continue
            words = [word.replace(HOME, str(workspace)) for word in segment.words[1:]]
            own_store = _kbuild_context(segment.words)[0] in OWN_ENVIRONMENT_STORE
            env = {**({"KBUILD_ENVS_DIR": str(workspace / ".envs")} if own_store else {}),
                   **dict(assignment.split("=", 1) for assignment in segment.env)}
            done = kbuild_in_process(*words, cwd=workspace, env=env)
            if segment.stdout_to:
                (workspace / segment.stdout_to).write_text(done.stdout)
            expected, shown_error = _expected_status(command, index, segments), _shown_error(command, segment)
            if done.returncode != expected and not (expected is None and done.returncode != 0):
                wrong.append(f"{command.where}: `{segment.key}` exited {done.returncode}, the page shows "
                             f"{'an error' if expected is None else expected}: {done.stderr.strip()[-500:]}")
            elif shown_error and shown_error not in done.stderr.splitlines():
                wrong.append(f"{command.where}: `{segment.key}` says {done.stderr.strip()[-500:]!r}, the page shows {shown_error!r}")
    return wrong
