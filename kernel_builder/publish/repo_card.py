"""The repo card (README.md on `main`) that `kbuild publish` writes: what the kernel is,
which variants a version ships (backend, capabilities, torch), and how to load it with
`kernels` and with transformers. Generated from build.toml and the variants' metadata."""

from __future__ import annotations

import re

from kernel_builder.kernel.manifest import Manifest
from kernel_builder.variants import Kind, try_parse

# The line of the card that names its release; card_release reads it back.
_RELEASE_RE = re.compile(r"^Backends: .*\. Latest release: `(v(\d+)\.(\d+)\.(\d+))`", re.MULTILINE)


def _capabilities(metadata: dict) -> str:
    archs = metadata.get("backend", {}).get("archs") or []
    return ", ".join(archs) if archs else "-"


def _torch(variant_name: str) -> str:
    variant = try_parse(variant_name)
    if variant is None or variant.torch is None:
        return "any"
    version = f"{variant.torch[0]}.{variant.torch[1]}"
    return f"{version} or newer (stable ABI)" if variant.kind is Kind.STABLE_ABI else version


def render_card(manifest: Manifest, repo_id: str, variants: list[dict], branch: str, tag: str) -> str:
    """`variants`: each variant's metadata.json plus its folder name under `variant`."""
    general = manifest.general
    major = branch.lstrip("v")
    backends = sorted({m.get("backend", {}).get("type", "?") for m in variants})
    rows = "\n".join(
        f"| `{m['variant']}` | {m.get('backend', {}).get('type', '?')} | {_capabilities(m)} | {_torch(m['variant'])} |"
        for m in sorted(variants, key=lambda m: m["variant"])
    )
    license_line = f"license: {general.license.lower()}\n" if general.license else ""
    return f"""---
{license_line}library_name: kernels
tags:
- kernel
---

# {general.name}

Compute kernel `{general.name}`, built with kbuild for the Hugging Face Kernel Hub.
Backends: {", ".join(backends)}. Latest release: `{tag}` (branch `{branch}`).

## Variants in {tag}

| variant | backend | capabilities | torch |
| --- | --- | --- | --- |
{rows}

## Use it

With [`kernels`](https://github.com/huggingface/kernels):

```python
from kernels import get_kernel

{general.name.replace("-", "_")} = get_kernel("{repo_id}", version={major})
```

Pin an exact release with `revision="{tag}"`. `kernels` loads only from publishers the Hub
marks trusted (such as `kernels-community`); from any other org, add `trust_remote_code=True`
(or `trust_remote_code=["{repo_id}"]`).

With transformers, let a model pick up the kernel's layers:

```python
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained("<model>", use_kernels=True)
```
"""


def card_release(card: str) -> tuple[str, tuple[int, int, int]] | None:
    """The release a card rendered by render_card names (tag, numbers); None for any other text."""
    match = _RELEASE_RE.search(card)
    if match is None:
        return None
    return match[1], (int(match[2]), int(match[3]), int(match[4]))


def later_release(card: str | None, tag: str) -> str | None:
    """The release named by `card` (the card on main) when it is later than `tag`, else None:
    a card is never written over a later release's, so publishing a patch of an older line
    (v1.0.5 after v1.1.0) leaves the newer card in place."""
    release = card_release(card) if card is not None else None
    ours = tuple(int(n) for n in tag.lstrip("v").split("."))
    return release[0] if release is not None and release[1] > ours else None
