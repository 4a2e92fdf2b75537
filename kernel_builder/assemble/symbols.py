"""`symbols.json`: a variant's public functions and layers, as `kernels describe-api` reads
them (schema_version 1), found by reading the package's source, never by importing it.

kbuild adds `ops`, the schemas its registration sources define (`m.def("name(...) -> ...")`),
which `kbuild publish` compares with the previous release (kernel_builder.publish.api_diff);
kernels reads only the keys it knows."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

SCHEMA_VERSION = 1
LAYER_ATTRIBUTES = ("has_backward", "can_torch_compile")


def _parse(file: Path) -> ast.Module | None:
    try:
        return ast.parse(file.read_text(encoding="utf-8"), str(file))
    except (OSError, SyntaxError, ValueError):
        return None


def _dunder_all(tree: ast.Module) -> list[str] | None:
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value is not None:
            try:
                names = ast.literal_eval(node.value)
            except ValueError:
                return None
            return [n for n in names if isinstance(n, str)]
    return None


def _is_submodule(package: Path, name: str) -> bool:
    return (package / f"{name}.py").is_file() or (package / name / "__init__.py").is_file()


def _functions(package: Path) -> list[dict]:
    tree = _parse(package / "__init__.py")
    if tree is None:
        return []
    exported = _dunder_all(tree)
    if exported is None:  # no __all__: the functions the package defines itself
        exported = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")]
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    return [{"name": n} for n in exported if not _is_submodule(package, n) and n not in classes]


def _bool_attribute(cls: ast.ClassDef, name: str) -> bool | None:
    for node in cls.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and target.id == name and isinstance(value, ast.Constant):
            return value.value if isinstance(value.value, bool) else None
    return None


def _layers(package: Path) -> list[dict]:
    file = package / "layers.py"
    if not file.is_file():
        file = package / "layers" / "__init__.py"
    tree = _parse(file) if file.is_file() else None
    if tree is None:
        return []
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef) and not n.name.startswith("_")}
    exported = _dunder_all(tree)
    names = [n for n in exported if n in classes] if exported is not None else list(classes)
    return [
        {"name": n, "attributes": {a: _bool_attribute(classes[n], a) for a in LAYER_ATTRIBUTES}}
        for n in names
    ]


# `.def(` and its string literal(s), adjacent ones concatenated as C++ does, optionally in
# TORCH_SELECTIVE_SCHEMA(...).
_DEF = re.compile(r'\.def\(\s*(?:TORCH_SELECTIVE_SCHEMA\(\s*)?((?:"(?:[^"\\\n]|\\.)*"\s*)+)')
_LITERAL = re.compile(r'"((?:[^"\\\n]|\\.)*)"')


def op_schemas(sources: Iterable[Path]) -> list[dict]:
    """The ops that these registration sources define, `{name, schema}` by name; the schema is
    None for a `def` that names the op only (torch infers it from the function). Every `def`
    the text spells counts, whichever backend's `#if` it sits in."""
    found: dict[str, str | None] = {}
    for source in sources:
        try:
            text = source.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for match in _DEF.finditer(text):
            spelled = " ".join("".join(_LITERAL.findall(match.group(1))).split())
            name = spelled.split("(", 1)[0].strip()
            if name:
                found[name] = spelled if "(" in spelled else None
    return [{"name": name, "schema": found[name]} for name in sorted(found)]


def describe_package(package: Path, ops: list[dict] | None = None) -> dict:
    """The symbols.json content for the package in folder `package` (a staged variant), with
    the `ops` its library defines (op_schemas) when it has one."""
    described = {"schema_version": SCHEMA_VERSION, "functions": _functions(package), "layers": _layers(package)}
    return described if ops is None else {**described, "ops": ops}
