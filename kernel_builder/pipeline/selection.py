"""`--matrix` selections: the variants of the default matrix that a kernel admits, narrowed
by a selector, and `--shard I/N`, a stable slice of them for one of N CI machines.

What a kernel admits: its `[general] backends`, `[torch] minver/maxver`,
`[general.cuda] minver/maxver`; a backend named in `[torch] stable-abi` builds one
`torch-stable-abi{M}{m}-...` variant per toolkit and platform instead of one per torch
release; a `[torch-noarch]` kernel builds `torch-<backend>`, one per backend.

A selector is whitespace-separated terms, all of which must hold:

- `KEY OP VALUE`, a key expression:
  - `torch`, `cuda`, `rocm`, `xpu` compare MAJOR.MINOR versions with `=` (or `==`), `!=`,
    `>=`, `<=`, `>`, `<`; `=` and `!=` also take a comma list (`torch=2.12,2.14`).
    `torch` matches a variant when a torch release of the matrix that it loads on does:
    a stable-ABI variant loads on its ABI version and newer, a noarch one on every release.
    `cuda`, `rocm` and `xpu` narrow only that backend's variants (`cuda>=13.0` keeps
    the CPU ones; add `backend=cuda` to drop them).
  - `backend`, `arch`, `os` and `abi` (`stable`, `exact` or `noarch`) take `=` or `!=`
    and a comma list (`backend=cuda,cpu`).
- any other term is a glob on variant names (`'torch21[34]-*-cu13*'`), of either naming
  style (`'torch-2.1[34]-*-cuda-13.*'`); several globs are alternatives: a variant needs
  to match one of them.
- `all`, like an empty selector, keeps everything.
"""

from __future__ import annotations

import fnmatch
import operator
import re
from dataclasses import dataclass
from typing import Callable

from kernel_builder.backend_facts import ALL as ALL_FACTS, VERSIONED
from kernel_builder.errors import VariantError
from kernel_builder.kernel.manifest import Manifest
from kernel_builder.variants import (
    BACKENDS,
    Kind,
    Matrix,
    Style,
    Variant,
    default_matrix,
    noarch_variant,
    parse_version,
    stable_abi_variant,
)

# key -> example: torch's version and each versioned backend's toolkit version.
VERSION_KEYS = {"torch": "2.13", **{f.name: f.example_version for f in ALL_FACTS if f.versioned}}
CHOICE_KEYS = ("backend", "arch", "os", "abi")
ABI_KINDS = {"stable": Kind.STABLE_ABI, "exact": Kind.ARCH, "noarch": Kind.NOARCH}
ABI_NAMES = {kind: name for name, kind in ABI_KINDS.items()}
KEYS_HELP = (
    f"keys are {', '.join(VERSION_KEYS)} (versions, with = == != >= <= > <) "
    "and backend, arch, os, abi (= or != with a comma list)"
)

_COMPARE = {
    "=": operator.eq, "==": operator.eq, "!=": operator.ne,
    ">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt,
}
_KEY_EXPRESSION = re.compile(r"^([A-Za-z_]+)(==|!=|>=|<=|=|>|<)(.*)$")
_VERSION = re.compile(r"^\d+\.\d+$")
_SHARD = re.compile(r"^(\d+)/(\d+)$")


@dataclass(frozen=True)
class Step:
    """One stage of a selection; `label` names it when it leaves nothing."""

    label: str
    apply: Callable[[list[Variant]], list[Variant]]


def _keeping(label: str, keep: Callable[[Variant], bool]) -> Step:
    return Step(label, lambda variants: [v for v in variants if keep(v)])


def _narrow(variants: list[Variant], steps: list[Step], what: str, listing: bool = True) -> list[Variant]:
    """Apply `steps` in order; the first that leaves nothing is the error (`listing`: naming
    the first variants it had)."""
    for step in steps:
        kept = step.apply(variants)
        if not kept:
            shown = ", ".join(v.name for v in variants[:3]) + (", ..." if len(variants) > 3 else "")
            shown = f" ({shown})" if listing else ""
            raise VariantError(f"{what}: {step.label} left none of the {len(variants)} variants before it{shown}")
        variants = kept
    return variants


@dataclass(frozen=True)
class Admitted:
    """The variants a kernel admits, and the torch releases of the matrix within its bounds."""

    variants: tuple[Variant, ...]
    torch_releases: tuple[tuple[int, int], ...]

    def releases(self, variant: Variant) -> tuple[tuple[int, int], ...]:
        """The torch releases of the matrix that `variant` loads on."""
        if variant.kind is Kind.ARCH:
            return (variant.torch,)
        if variant.kind is Kind.STABLE_ABI:
            return tuple(t for t in self.torch_releases if t >= variant.torch)
        return self.torch_releases


def admitted(manifest: Manifest, matrix: Matrix | None = None) -> Admitted:
    """The default matrix restricted to what `manifest` admits (see the module docstring)."""
    manifest.require_buildable()
    matrix = matrix or default_matrix()
    releases = tuple(sorted({v.torch for v in matrix.variants if manifest.admits_torch(v.torch)}))
    backends = manifest.general.backends
    if manifest.noarch is not None:
        return Admitted(tuple(noarch_variant(b) for b in backends), releases)
    steps = [_keeping(f"[general] backends ({', '.join(backends)})", lambda v: v.backend in backends)]
    torch = manifest.torch
    if torch.minver or torch.maxver:
        steps.append(_keeping(_bounds_label("torch", torch), lambda v: manifest.admits_torch(v.torch)))
    for backend in VERSIONED:
        bounds = manifest.general.backend_table(backend)
        if getattr(bounds, "minver", None) or getattr(bounds, "maxver", None):
            steps.append(_keeping(
                _bounds_label(f"general.{backend}", bounds),
                lambda v, backend=backend: v.backend != backend or manifest.toolkit_reason(backend, v.backend_version) is None,
            ))
    if torch.stable_abi:
        abi = ", ".join(f"{backend} = {version}" for backend, version in torch.stable_abi.items())
        steps.append(Step(f"[torch] stable-abi ({abi})", lambda variants: _collapse_stable_abi(torch, variants)))
    kept = _narrow(list(matrix.variants), steps, f"kernel '{manifest.name}' admits no variant of the default matrix")
    return Admitted(tuple(kept), releases)


def _bounds_label(section: str, bounds) -> str:
    parts = [f"minver {bounds.minver}" if bounds.minver else "", f"maxver {bounds.maxver}" if bounds.maxver else ""]
    return f"[{section}] " + ", ".join(p for p in parts if p)


def _collapse_stable_abi(torch, variants: list[Variant]) -> list[Variant]:
    """A backend built against the stable ABI gets one variant per toolkit and platform,
    standing for every torch release from the ABI version on; older releases drop out."""
    out: dict[Variant, None] = {}
    for v in variants:
        abi = torch.stable_abi_for(v.backend)
        if abi is None:
            out[v] = None
        elif v.torch >= parse_version(abi):
            out[stable_abi_variant(parse_version(abi), v.backend, v.backend_version, v.arch, v.os)] = None
    return sorted(out, key=Variant.sort_key)


# -- the selector -----------------------------------------------------------------------
def select(manifest: Manifest, selector: str = "", matrix: Matrix | None = None) -> list[Variant]:
    """The admitted variants that every term of `selector` keeps, in matrix order."""
    matrix = matrix or default_matrix()
    kernel = admitted(manifest, matrix)
    steps = parse_selector(selector, kernel, matrix)
    return _narrow(list(kernel.variants), steps, f"--matrix '{selector}' selects nothing")


def select_from_matrix(selector: str, what: str) -> list[Variant]:
    """The variants of the whole default matrix, whatever a kernel admits, that every term of
    `selector` keeps; `what` names the selection in the error when a term leaves none."""
    matrix = default_matrix()
    every = Admitted(matrix.variants, tuple(sorted({v.torch for v in matrix.variants})))
    return _narrow(list(matrix.variants), parse_selector(selector, every, matrix), what, listing=False)


def parse_selector(selector: str, kernel: Admitted, matrix: Matrix) -> list[Step]:
    """One step per key expression, in order, and one for all globs together, placed
    where the first glob stands."""
    steps: list[Step] = []
    globs: list[str] = []
    glob_at = None
    for term in selector.split():
        if term == "all":
            continue
        if m := _KEY_EXPRESSION.match(term):
            steps.append(_key_step(term, *m.groups(), kernel, matrix))
        elif any(c in term for c in "=<>") or term.startswith("!"):
            raise VariantError(
                f"--matrix: '{term}' is neither a key expression KEY OP VALUE (such as torch>=2.13) "
                f"nor a glob on variant names; {KEYS_HELP}"
            )
        elif hint := _key_for_bare_value(term, matrix):
            # A bare value is a glob that can never match a whole variant name.
            raise VariantError(
                f"--matrix: unknown matrix term '{term}': did you mean '{hint}'? "
                "(a term without KEY OP is a glob on whole variant names)"
            )
        else:
            glob_at = len(steps) if glob_at is None else glob_at
            globs.append(term)
    if globs:
        label = " or ".join(f"'{g}'" for g in globs)
        steps.insert(glob_at, _keeping(label, lambda v: any(
            fnmatch.fnmatchcase(v.name, g) or fnmatch.fnmatchcase(v.with_style(Style.NEW).name, g) for g in globs
        )))
    return steps


def _key_for_bare_value(term: str, matrix: Matrix) -> str | None:
    """The key expression a bare value most likely meant: 'cpu' -> 'backend=cpu',
    'x86_64' -> 'arch=x86_64', '2.14' -> 'torch=2.14' ('13.0' -> 'cuda=13.0' when only a
    CUDA release of the matrix is 13.0); None for anything else, a glob or a variant name."""
    word = term.lower()
    for key in CHOICE_KEYS:
        if word in _choices(key, matrix):
            return f"{key}={word}"
    if not _VERSION.match(term):
        return None
    version = parse_version(term)

    def released(key: str) -> bool:
        return any((v.torch if key == "torch" else v.backend_version) == version
                   for v in matrix.variants if key in ("torch", v.backend))

    return f"{next((k for k in VERSION_KEYS if released(k)), 'torch')}={term}"


def _key_step(term: str, key: str, op: str, value: str, kernel: Admitted, matrix: Matrix) -> Step:
    if key not in VERSION_KEYS and key not in CHOICE_KEYS:
        raise VariantError(f"--matrix: unknown key '{key}' in '{term}'; {KEYS_HELP}")
    if not value or value[0] in "=<>!":
        raise VariantError(f"--matrix: '{term}': bad operator or missing value; use KEY OP VALUE with OP one of = == != >= <= > <")
    values = value.split(",")
    if len(values) > 1 and op not in ("=", "==", "!="):
        raise VariantError(f"--matrix: '{term}': {op} compares with one value; only = and != take a comma list")
    label = f"'{term}'"
    if key in CHOICE_KEYS:
        return _keeping(label, _choice_test(term, key, op, values, matrix))
    wanted = [_term_version(term, key, v) for v in values]
    compare = _COMPARE[op]

    def holds(version: tuple[int, int]) -> bool:
        if op == "!=":
            return all(compare(version, w) for w in wanted)
        return any(compare(version, w) for w in wanted)

    if key == "torch":
        return _keeping(label, lambda v: any(holds(t) for t in kernel.releases(v)))
    # A backend version narrows that backend only; a noarch variant has none and loads on any.
    return _keeping(label, lambda v: v.backend != key or v.backend_version is None or holds(v.backend_version))


def _term_version(term: str, key: str, text: str) -> tuple[int, int]:
    if not _VERSION.match(text):
        raise VariantError(f"--matrix: '{term}': '{text}' is not a version; expected MAJOR.MINOR such as {VERSION_KEYS[key]}")
    return parse_version(text)


def _choice_test(term: str, key: str, op: str, values: list[str], matrix: Matrix) -> Callable[[Variant], bool]:
    if op not in ("=", "==", "!="):
        raise VariantError(f"--matrix: '{term}': {key} takes = or != with a comma list, e.g. {key}={_choices(key, matrix)[0]}")
    choices = _choices(key, matrix)
    unknown = [v for v in values if v not in choices]
    if unknown:
        raise VariantError(f"--matrix: '{term}': unknown {key} '{unknown[0]}'; expected some of {', '.join(choices)}")
    field = {
        "backend": lambda v: v.backend,
        "arch": lambda v: v.arch,
        "os": lambda v: v.os,
        "abi": lambda v: ABI_NAMES[v.kind],
    }[key]
    wanted = set(values) if op != "!=" else set(choices) - set(values)
    # A noarch variant has no arch or os: it loads on every one.
    return lambda v: field(v) is None or field(v) in wanted


def _choices(key: str, matrix: Matrix) -> tuple[str, ...]:
    if key == "backend":
        return BACKENDS
    if key == "abi":
        return tuple(ABI_KINDS)
    return tuple(sorted({getattr(v, key) for v in matrix.variants}))


# -- shards -----------------------------------------------------------------------------
def parse_shard(spec: str) -> tuple[int, int]:
    """'2/3' -> (2, 3): the second of three shards, 1-based."""
    m = _SHARD.match(spec.strip())
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise VariantError(f"--shard '{spec}': expected I/N with 1 <= I <= N, such as 2/3 (the second of three shards)")
    return int(m.group(1)), int(m.group(2))


def take_shard(variants: list[Variant], spec: str) -> list[Variant]:
    """Every N-th variant by name, from the I-th: the same slice on every machine and run,
    and the N shards together are the selection, each variant in exactly one."""
    index, count = parse_shard(spec)
    part = sorted(variants, key=lambda v: v.name)[index - 1 :: count]
    if not part:
        raise VariantError(
            f"--shard {spec}: shard {index} of {count} is empty; the selection has only "
            f"{len(variants)} variants, so use at most {len(variants)} shards"
        )
    return part


def resolve(manifest: Manifest, matrix: str | None, shard: str | None) -> list[Variant] | None:
    """The variants `--matrix SEL [--shard I/N]` names, or None without --matrix."""
    if matrix is None:
        if shard is not None:
            raise VariantError("--shard splits a --matrix selection; add --matrix (all, or a selector)")
        return None
    if shard is not None:
        parse_shard(shard)  # a bad spec fails before the selection is computed
    selected = select(manifest, matrix)
    return take_shard(selected, shard) if shard is not None else selected
