"""A release's public API against the previous release of its major: what `kbuild publish`
refuses to break without a new major version.

The API of a release is read from the `symbols.json` of its variants (kernel_builder.assemble.symbols),
merged over them: the public functions of the package, the layers with their capabilities,
and the ops with their schemas. A function, layer or op that is gone, an op whose schema
changed, or a layer that lost `has_backward` or `can_torch_compile` breaks the API; what is
added does not. A release published before kbuild recorded ops has its ops left uncompared.

Example:
    >>> print(describe_breaks("v1.2.0", "v1.1.0", ["- op scale(Tensor x, float by) -> Tensor: removed"]))
    refusing to publish v1.2.0: it breaks the API of v1.1.0, the previous release of major 1:
      - op scale(Tensor x, float by) -> Tensor: removed
    raise the major version (build.toml [general] version = 2, tag v2.0.0), or pass --allow-api-break
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from kernel_builder.assemble.symbols import LAYER_ATTRIBUTES


@dataclass(frozen=True)
class Api:
    functions: frozenset[str]
    layers: dict[str, dict[str, bool | None]]  # name -> attributes
    ops: dict[str, str | None] | None  # name -> schema; None: the release recorded no ops

    @classmethod
    def merged(cls, symbols: Iterable[dict]) -> "Api":
        """One release's API from the symbols.json content of each of its variants."""
        functions: set[str] = set()
        layers: dict[str, dict] = {}
        ops: dict[str, str | None] | None = None
        for described in symbols:
            functions.update(f["name"] for f in described.get("functions", ()))
            layers.update((layer["name"], layer.get("attributes", {})) for layer in described.get("layers", ()))
            if "ops" in described:
                ops = (ops or {}) | {op["name"]: op.get("schema") for op in described["ops"]}
        return cls(frozenset(functions), layers, ops)


def breaks(old: Api, new: Api) -> list[str]:
    """What `new` removes or changes of `old`, one line each: `- ...: removed`, `~ ...: changed`."""
    lines = [f"- function {name}: removed" for name in sorted(old.functions - new.functions)]
    for name, attributes in sorted(old.layers.items()):
        if name not in new.layers:
            lines.append(f"- layer {name}: removed")
            continue
        lost = [a for a in LAYER_ATTRIBUTES if attributes.get(a) is True and new.layers[name].get(a) is not True]
        lines += [f"~ layer {name}: {a} was True, is now {new.layers[name].get(a)}" for a in lost]
    if old.ops is not None and new.ops is not None:
        for name, schema in sorted(old.ops.items()):
            if name not in new.ops:
                lines.append(f"- op {schema or name}: removed")
            elif schema is not None and new.ops[name] is not None and schema != new.ops[name]:
                lines.append(f"~ op {name}: {schema}  ->  {new.ops[name]}")
    return lines


def previous_release(tag: tuple[int, int, int], releases: dict[str, tuple[int, int, int]]) -> str | None:
    """The newest of `releases` (tag name -> its numbers) in `tag`'s major and older than it."""
    older = [(numbers, name) for name, numbers in releases.items() if numbers[0] == tag[0] and numbers < tag]
    return max(older)[1] if older else None


def local_api(variants: Iterable[Path]) -> Api:
    """The API of the variants about to be published."""
    return Api.merged(json.loads(p.read_text()) for v in variants if (p := v / "symbols.json").is_file())


def describe_breaks(tag: str, previous: str, lines: list[str]) -> str:
    """The refusal: a headline, the diff, what to do; one block."""
    major = int(tag[1:].split(".")[0])
    return "\n".join([
        f"refusing to publish {tag}: it breaks the API of {previous}, the previous release of major {major}:",
        *(f"  {line}" for line in lines),
        f"raise the major version (build.toml [general] version = {major + 1}, tag v{major + 1}.0.0), "
        "or pass --allow-api-break",
    ])
