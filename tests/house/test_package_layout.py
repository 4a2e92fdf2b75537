"""The house rules of CONTRIBUTING.md, checked: stage folders import only the same or an
earlier stage (so there is no import circle), the runtime imports no builder module, and at
most 12 modules sit at the package root."""

from __future__ import annotations

import ast
from pathlib import Path

import kernel_builder

PACKAGE = Path(kernel_builder.__file__).resolve().parent
# Earliest first: a module may import its own stage or one listed before it.
STAGES = ["", "runtime", "testing", "kernel", "environments", "compile", "assemble", "checks", "runners", "pipeline",
          "publish", "scaffold", "doctor", "cli"]
ROOT_LIMIT = 12


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (PACKAGE / parts[1]).is_dir()) else ""


def imports(module: str) -> set[str]:
    """kernel_builder modules that `module` imports, at module level or inside a function."""
    path = MODULES[module]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: len(module.split(".")) - node.level + (path.name == "__init__.py")]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            candidates = [target] + [f"{target}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        found |= {c for c in candidates if c in MODULES and c != module}
    return found


def test_every_stage_folder_is_known():
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert folders == set(STAGES) - {""}


def test_no_import_goes_up_a_stage():
    upward = [
        f"{module} ({stage(module) or 'root'}) imports {target} ({stage(target) or 'root'})"
        for module in MODULES for target in imports(module)
        if STAGES.index(stage(target)) > STAGES.index(stage(module))
    ]
    assert upward == []


def test_no_import_circle():
    graph = {m: imports(m) for m in MODULES}
    # Within one stage imports may go either way; a circle there is still a circle.
    visiting, done, circles = set(), set(), []

    def visit(module: str, trail: list[str]) -> None:
        visiting.add(module)
        for target in sorted(graph[module]):
            if target in visiting:
                circles.append(" -> ".join(trail[trail.index(target):] + [target]))
            elif target not in done:
                visit(target, trail + [target])
        visiting.discard(module)
        done.add(module)

    for module in sorted(graph):
        if module not in done:
            visit(module, [module])
    assert circles == []


def test_the_runtime_imports_no_builder_module():
    builder = [f"{m} imports {t}" for m in MODULES if stage(m) == "runtime" for t in imports(m) if stage(t) not in ("", "runtime")]
    assert builder == []


def test_at_most_twelve_modules_at_the_root():
    root = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert len(root) <= ROOT_LIMIT, root
