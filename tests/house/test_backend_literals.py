"""Backend facts live in one record per backend (kernel_builder/backend_facts.py) and each
backend's compiler side in compile/backends/<name>.py: no other module spells a backend's
name, except the few below, each for a stated reason. And CONTRIBUTING.md's "A new
backend" list names exactly the files where a backend's name may be spelled: the files a
new backend touches."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import kernel_builder
from kernel_builder.backend_facts import FACTS, FALLBACK

PACKAGE = Path(kernel_builder.__file__).resolve().parent
REPO = PACKAGE.parent
# The fallback backend (cpu) is also torch's CPU device and every choice's default: its name
# is everywhere for good reasons, and no new backend changes that.
CHECKED = sorted(set(FACTS) - {FALLBACK})

# module (relative to kernel_builder/) -> why it may spell a backend's name. `True` in the
# second place: a new backend may need an entry there too, so CONTRIBUTING.md lists it.
ALLOWED: dict[str, tuple[str, bool]] = {
    "kernel/manifest.py": (
        "build.toml's schema: the keys and tables kernels' parser knows per backend and edition "
        "([general.cuda], [kernel.*] cuda-capabilities, rocm-archs, rust-cuda-oxide, mlx-noarch on metal)", True),
    "pipeline/plan.py": ("--cuda-arch is the cuda backend's flag by name; it narrows cuda jobs only", False),
    "pipeline/dev_loop.py": ("--cuda-arch again: the dev loop picks this machine's CUDA GPU", False),
    "pipeline/build_tvm_ffi.py": (
        "[tvm-ffi] kernels build for cpu and cuda only so far; the others are named with why they are skipped "
        "(a new backend is skipped there too)", False),
    "compile/tvm_ffi.py": ("[tvm-ffi] compiles: nvcc for cuda's .cu sources, g++ for the rest", False),
}


def _allowed_by_rule(rel: str) -> bool:
    """The facts module, and compile/backends/<backend>.py with its helpers (<backend>_*.py,
    noarch_only.py for the backends without a compiler)."""
    if rel == "backend_facts.py":
        return True
    m = re.fullmatch(r"compile/backends/([a-z]+)(?:_[a-z_]+)?\.py", rel)
    return bool(m) and (m.group(1) in FACTS or rel == "compile/backends/noarch_only.py")


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def backend_literals(path: Path) -> list[str]:
    """The string constants of `path` that are exactly a backend's name (docstrings aside)."""
    tree = ast.parse(path.read_text())
    docs = _docstrings(tree)
    return sorted(
        f"{node.lineno}: {node.value!r}" for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in CHECKED
        and id(node) not in docs
    )


@functools.cache
def spelling_modules() -> dict[str, list[str]]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if not _allowed_by_rule(rel) and (literals := backend_literals(path)):
            found[rel] = literals
    return found


def test_only_the_allowed_modules_spell_a_backend_name():
    stray = {rel: literals for rel, literals in spelling_modules().items() if rel not in ALLOWED}
    assert stray == {}, "read kernel_builder.backend_facts (a record's field) instead of naming a backend"


def test_every_allowed_module_still_needs_its_exception():
    assert sorted(ALLOWED) == sorted(spelling_modules()), "an allow-list entry no module needs any more"


def test_the_check_sees_a_literal():
    sample = PACKAGE / "kernel" / "manifest.py"
    assert backend_literals(sample), "the scan finds the literals build.toml's schema needs"


def _new_backend_paragraph() -> str:
    text = (REPO / "CONTRIBUTING.md").read_text()
    m = re.search(r"^- \*\*A new backend\*\*(.*?)(?=^- \*\*)", text, re.S | re.M)
    assert m, "CONTRIBUTING.md has a '- **A new backend**' item"
    return m.group(1)


def test_contributing_lists_the_files_a_new_backend_touches():
    """The files the "A new backend" item names are those where a backend's name may be
    spelled (by rule, or by an allow-list entry a new backend may need), plus the data and
    registry files that hold no Python literal."""
    named = set(re.findall(r"`((?:kernel_builder|docker|templates|tests)/[^`]+)`", _new_backend_paragraph()))
    named.discard("tests/house/test_backend_literals.py")  # this test, which the item cites
    package = {n.removeprefix("kernel_builder/") for n in named if n.startswith("kernel_builder/")}
    expected = {
        "backend_facts.py",
        "compile/backends/<name>.py",
        "compile/backends/__init__.py",  # the registry
        "compile/backends/noarch_only.py",
        "data/matrix.toml",
        # BuildEnv's fields are torch.version's attributes, read by a probe script run in the
        # environment itself (a string, not a literal): a backend torch reports in a new one adds a field.
        "environments/probe.py",
        *(rel for rel, (_, new_backend) in ALLOWED.items() if new_backend),
    }
    assert package == expected
    assert all(_allowed_by_rule(rel.replace("<name>", "cuda")) for rel in package if rel.startswith("compile/backends/<"))
    assert {n for n in named if not n.startswith("kernel_builder/")} == {
        "docker/Dockerfile.<name>", "templates/init/<name>/", "tests/compile/"}
