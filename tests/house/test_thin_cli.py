"""The CLI only parses, calls and prints (CONTRIBUTING.md), checked on the source:

- a command reaches the work through one stage module, its entry point (besides the option
  types that parse flags and the helpers that print, listed below);
- a module's other functions print: they reach no stage module;
- a command module raises nothing but typer.Exit: what fails, and how, is the stage's
  decision (a KbuildError there), which cli/main.py prints in one line;
- and the plan is assembled in one place (pipeline/plan_assembly.py), which build, plan,
  variants and doctor share.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import typer

import kernel_builder
from kernel_builder.cli.main import app

PACKAGE = Path(kernel_builder.__file__).resolve().parent
CLI = PACKAGE / "cli"
# Not command modules: the app and its error mapping, the shared printing, the CLI reference.
NOT_COMMANDS = {"__init__.py", "__main__.py", "main.py", "output.py", "reference.py"}

# (module, name) a command may use besides its entry point: every command module's own
# printing, the typed options that parse flags (their errors name the flag), and helpers
# that only format for printing.
SHARED = {"kernel_builder.cli.output", "kernel_builder.formatting"}
PARSING = {
    ("kernel_builder.pipeline.options", "BuildOptions"),
    ("kernel_builder.pipeline.options", "parse_cuda_arch"),
    ("kernel_builder.settings", "positive_count"),
    ("kernel_builder.scaffold.ci_github", "WorkflowOptions"),
    ("kernel_builder.backend_facts", "BACKENDS"),  # the values --backends takes, for its help
}
PRINTING = {
    ("kernel_builder.runners.progress", "progress_for"),
    ("kernel_builder.environments.store", "describe_compute"),
}


def command_functions() -> dict[Path, set[str]]:
    """The functions registered as commands, by module file: from the app itself."""
    found: dict[Path, set[str]] = {}

    def add(group: typer.Typer) -> None:
        for info in group.registered_commands:
            found.setdefault(Path(inspect.getfile(info.callback)).resolve(), set()).add(info.callback.__name__)
        for sub in group.registered_groups:
            add(sub.typer_instance)

    add(app)
    return found


def _is_work(module: str, name: str) -> bool:
    return (
        module.startswith("kernel_builder.") and not module.startswith("kernel_builder.cli.")
        and module not in SHARED and (module, name) not in PARSING and (module, name) not in PRINTING
    )


def _imported(nodes) -> dict[str, tuple[str, str]]:
    """Local name -> (module, name) for the `from kernel_builder... import` among `nodes`
    (`import kernel_builder.x` binds the module: (module, '*'))."""
    names = {}
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                names[alias.asname or alias.name] = (node.module, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = (alias.name, "*")
    return names


def thin_cli_findings(source: str, commands: set[str], label: str) -> list[str]:
    """What in one command module's `source` breaks the rules of the module docstring."""
    tree = ast.parse(source)
    findings = []
    module_level = _imported(tree.body)
    for local, (module, name) in module_level.items():
        if _is_work(module, name):
            findings.append(f"{label} imports {module}.{name} at module level: import a stage's entry point in the command")
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if ast.unparse(raised) != "typer.Exit":
                findings.append(f"{label}:{node.lineno} raises {ast.unparse(raised)}: the stage decides failures, "
                                "the CLI raises only typer.Exit")
    for function in tree.body:
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        local = _imported(ast.walk(function))
        used = {n.id for n in ast.walk(function) if isinstance(n, ast.Name)} | set(local)
        reached = {local.get(n) or module_level.get(n) for n in used} - {None}
        work = sorted({(m, n) for m, n in reached if _is_work(m, n)})
        where = f"{label}:{function.name}"
        if function.name not in commands:
            findings += [f"{where} is not a command and reaches {m}.{n}: helpers of the CLI only print" for m, n in work]
            continue
        entry_points = sorted({m for m, _ in work})
        if len(entry_points) > 1:
            findings.append(f"{where} reaches {len(entry_points)} stage modules ({', '.join(entry_points)}): "
                            "give the stage one entry point that does the work")
    return findings


def test_cli_modules_only_parse_call_and_print():
    commands = command_functions()
    modules = sorted(p for p in CLI.glob("*.py") if p.name not in NOT_COMMANDS)
    assert len(modules) >= 10 and sum(len(c) for c in commands.values()) >= 20  # the app was found
    findings = []
    for path in modules:
        findings += thin_cli_findings(path.read_text(), commands.get(path.resolve(), set()), f"cli/{path.name}")
    assert findings == []


def test_the_rules_catch_a_thick_command():
    """The checker is not blind: logic of the kind moved out of the CLI is found."""
    source = '''
import typer
from kernel_builder.cli.output import console
from kernel_builder.errors import KbuildError

def build(kernel_dir):
    from kernel_builder.kernel.manifest import load_manifest
    from kernel_builder.pipeline.plan import plan_build
    rows = plan_build(load_manifest(kernel_dir))
    if not rows:
        raise KbuildError("nothing")
    raise typer.Exit(1)

def _selected(selector):
    from kernel_builder.pipeline.selection import select
    return select(selector)
'''
    findings = thin_cli_findings(source, {"build"}, "cli/thick.py")
    assert any("imports kernel_builder.errors.KbuildError at module level" in f for f in findings), findings
    assert any("raises KbuildError" in f for f in findings), findings
    assert any("cli/thick.py:build reaches 3 stage modules" in f for f in findings), findings  # and errors
    assert any("cli/thick.py:_selected is not a command and reaches kernel_builder.pipeline.selection.select" in f
               for f in findings), findings
    assert sum(" raises " in f for f in findings) == 1, findings  # not typer.Exit


# The steps from selection options to a plan, by the module that defines them.
PLAN_STEPS = {
    "plan_build": "kernel_builder.pipeline.plan",
    "naming_style": "kernel_builder.pipeline.plan",
    "resolve": "kernel_builder.pipeline.selection",
}


def importers(steps: dict[str, str]) -> dict[str, list[str]]:
    """For each function of `steps`: the modules of the package that import it from its module."""
    found: dict[str, set[str]] = {name: set() for name in steps}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if steps.get(alias.name) == node.module:
                        found[alias.name].add(str(path.relative_to(PACKAGE)))
    return {name: sorted(modules) for name, modules in found.items()}


def test_one_plan_assembly():
    """build (its local runner), plan, variants and doctor make their plans through
    pipeline/plan_assembly.py: only it turns the selection options (--matrix, --shard,
    --variant-names) into a plan."""
    assert importers(PLAN_STEPS) == dict.fromkeys(PLAN_STEPS, ["pipeline/plan_assembly.py"])
