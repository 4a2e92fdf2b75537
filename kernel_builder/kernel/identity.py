"""A kernel's op namespace id: what `_<name>_<backend>_<id>` ends with, and what a build's
up-to-date check and `kbuild publish`'s staleness check compare.

The id is 7 hex digits of a hash over what a build reads (sources.input_files: build.toml,
kbuild.toml, the declared sources and includes, the Python package), by relative path and
bytes. So the same sources give the same id in any folder, with or without git, and a commit
that touches only the README, tests or CI files changes nothing. `_dirty` is appended when
one of those files is not as committed (provenance.git_state); outside git there is no
commit to differ from, so no suffix, and `kbuild publish` refuses such a build on its own.
"""

from __future__ import annotations

from kernel_builder.kernel.manifest import Manifest
from kernel_builder.kernel.provenance import GitState, git_state
from kernel_builder.kernel.sources import content_hash, input_files

DIRTY = "_dirty"


def kernel_identity(manifest: Manifest) -> tuple[str, GitState | None]:
    """(id, git state) of the kernel as it is now. Collecting the inputs refuses a link out
    of the repo, so `kbuild plan` and `kbuild publish` do too."""
    files = input_files(manifest)
    state = git_state(manifest.root, files)
    suffix = DIRTY if state is not None and state.dirty else ""
    return content_hash(manifest.root, files)[:7] + suffix, state
