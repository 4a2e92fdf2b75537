"""Whose kernels load without asking: a kernel runs arbitrary code at import, so a repo
outside the allowlist is refused unless the caller opts in.

The allowlist is the union of
- `kernels-community` (always);
- `KBUILD_TRUSTED_NAMESPACES`: namespaces (orgs or users) separated by commas or
  whitespace, e.g. `KBUILD_TRUSTED_NAMESPACES=my-org,alice`;
- the config file's `trusted-namespaces` list under `[runtime]`:

      # ~/.config/kbuild/config.toml ($XDG_CONFIG_HOME/kbuild/config.toml; KBUILD_CONFIG names another file)
      [runtime]
      trusted-namespaces = ["my-org", "alice"]

A caller opts in per call with `trust_remote_code=True` (any repo), or with a list (tuple,
set) of repo ids and/or namespaces (`["alice/relu", "my-org"]`); False or None opts in to
nothing, and any other value is an error rather than a guess. Names compare case-insensitively,
as the Hub treats them. Standard library only.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from kernel_builder.errors import KbuildError
from kernel_builder.runtime.loader import KernelLoadError

DEFAULT_TRUSTED = ("kernels-community",)
ENV_VAR = "KBUILD_TRUSTED_NAMESPACES"
CONFIG_ENV_VAR = "KBUILD_CONFIG"
_KINDS = {str: "string", int: "integer", dict: "dict", bytes: "bytes"}


class UntrustedKernelError(KernelLoadError):
    """The repo's namespace is not on the allowlist and the caller did not opt in."""


def config_path() -> Path:
    """`KBUILD_CONFIG`, else `$XDG_CONFIG_HOME/kbuild/config.toml`, else `~/.config/kbuild/config.toml`."""
    explicit = os.environ.get(CONFIG_ENV_VAR)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CONFIG_HOME")
    return (Path(xdg) if xdg else Path.home() / ".config") / "kbuild" / "config.toml"


def _from_config(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except OSError as e:
        raise KbuildError(f"cannot read the kbuild config {path}: {e.strerror or e}") from None
    import tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise KbuildError(f"the kbuild config {path} is not valid TOML: {e}") from None
    runtime = data.get("runtime", {})
    names = runtime.get("trusted-namespaces", []) if isinstance(runtime, dict) else None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise KbuildError(f"{path}: [runtime] trusted-namespaces must be a list of strings such as [\"my-org\"]")
    return names


def trusted_namespaces() -> frozenset[str]:
    """The allowlist now (environment and config file are read on every call), casefolded."""
    names = list(DEFAULT_TRUSTED)
    names += re.split(r"[\s,]+", os.environ.get(ENV_VAR, ""))
    names += _from_config(config_path())
    return frozenset(n.strip().casefold() for n in names if n.strip())


def _opted_in(trust_remote_code: object) -> bool | frozenset[str]:
    """The caller's opt-in: True (any repo), or the casefolded repo ids / namespaces listed.
    Anything else is a KernelLoadError: a mistyped value must never grant trust by accident
    (a dict would be read by its keys, `1` is not True)."""
    if trust_remote_code is None or trust_remote_code is False:
        return frozenset()
    if trust_remote_code is True:
        return True
    if isinstance(trust_remote_code, (list, tuple, set, frozenset)) and all(
        isinstance(n, str) for n in trust_remote_code
    ):
        return frozenset(n.strip().casefold() for n in trust_remote_code)
    shown = repr(trust_remote_code)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    raise KernelLoadError(
        "trust_remote_code must be True, False or a list of repo ids / namespaces such as "
        f"[\"my-org\", \"alice/relu\"], got the {_KINDS.get(type(trust_remote_code), type(trust_remote_code).__name__)} {shown}"
    )


def is_trusted(repo_id: str, trust_remote_code: bool | Iterable[str] = False) -> bool:
    opted = _opted_in(trust_remote_code)
    if opted is True:
        return True
    namespace = repo_id.split("/", 1)[0].casefold()
    if repo_id.casefold() in opted or namespace in opted:
        return True
    return namespace in trusted_namespaces()


def check_trust(repo_id: str, trust_remote_code: bool | Iterable[str] = False) -> None:
    """Raise UntrustedKernelError unless `repo_id` may load (see the module doc); a
    `trust_remote_code` of another form is a KernelLoadError."""
    if is_trusted(repo_id, trust_remote_code):
        return
    namespace = repo_id.split("/", 1)[0]
    raise UntrustedKernelError(
        f"refusing to load {repo_id}: namespace '{namespace}' is not trusted; pass trust_remote_code=True "
        f"or add it to {ENV_VAR} (or to trusted-namespaces in {config_path()})"
    )
