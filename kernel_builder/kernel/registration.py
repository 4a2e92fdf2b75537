"""Which of a kernel's compiled files register its ops: the only files the op namespace id reaches.

The op namespace id (identity.py) changes with every edit of any input and with the commit
state (`_dirty`). Were `TORCH_EXTENSION_NAME` defined for every file, every edit and every
commit would change every compile command, and Ninja (and the compiler cache) would compile
everything again. So the build defines it only for the registration files:
- every compiled file of the binding (`[torch] src`, the torch-ext glue), and
- any unit source that names the macro, in its own text or in a header of the kernel repo
  it includes (directly or through other headers), e.g. a unit with a PYBIND11_MODULE.

A file the build does not define it for fails to compile with "TORCH_EXTENSION_NAME was not
declared" rather than building a wrong namespace, so the scan errs on the side of more files:
a mention in a comment counts.

Example:
    >>> registration_files(manifest)
    frozenset({'/src/relu/torch-ext/torch_binding.cpp'})
"""

from __future__ import annotations

import re
from pathlib import Path

from kernel_builder.kernel.manifest import Manifest

NAMESPACE_MACRO = "TORCH_EXTENSION_NAME"

_MENTION = re.compile(rb"\b" + NAMESPACE_MACRO.encode() + rb"\b")
_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"\n]+)[>"]', re.MULTILINE)


def registration_files(manifest: Manifest) -> frozenset[str]:
    """The absolute paths (as the build spells them: `str(root / src)`) of the files that
    must be compiled with the op namespace defined; see the module doc."""
    root = manifest.root
    found: set[str] = set()
    if manifest.torch is not None:
        found.update(str(root / f) for f in manifest.torch.src)
    scanner = _Scanner(root.resolve())
    for unit in manifest.units:
        folders = tuple(root / i for i in unit.include) + (root,)
        found.update(str(root / f) for f in unit.src if scanner.mentions(root / f, folders))
    return frozenset(found)


class _Scanner:
    """Whether a file or a repo header it includes names the macro; each file read once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.answers: dict[Path, bool] = {}

    def mentions(self, file: Path, folders: tuple[Path, ...]) -> bool:
        real = file.resolve()
        if real in self.answers:
            return self.answers[real]
        self.answers[real] = False  # an include cycle ends here
        try:
            text = real.read_bytes()
        except OSError:
            return False  # the input walk names unreadable inputs; nothing to find here
        answer = bool(_MENTION.search(text)) or any(
            self.mentions(header, folders)
            for name in _INCLUDE.findall(text)
            if (header := self._resolve(name.decode(errors="replace"), real.parent, folders)) is not None
        )
        self.answers[real] = answer
        return answer

    def _resolve(self, name: str, beside: Path, folders: tuple[Path, ...]) -> Path | None:
        """The repo file an include names, searched beside the includer and in the unit's
        include folders, as the compiler does; None for system and torch headers."""
        for folder in (beside, *folders):
            candidate = (folder / name).resolve()
            if candidate.is_relative_to(self.root) and candidate.is_file():
                return candidate
        return None
