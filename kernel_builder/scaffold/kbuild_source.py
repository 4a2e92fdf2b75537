"""Where a CI runner installs this kbuild from, for the workflows kbuild writes.

kbuild is not on PyPI, so `kbuild[docker]==<version>` would fail at a new kernel repo's first
CI install. The source is what this kbuild knows about itself: the URL and commit pip recorded
when it installed it (PEP 610's direct_url.json), or, run from a git checkout, that
checkout's remote and commit. A source CI cannot reach (a local folder, an unpushed commit)
is refused with what to pass as `--install` instead.
"""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path

from kernel_builder import __version__
from kernel_builder.errors import UsageError
from kernel_builder.kernel.provenance import git_output
from kernel_builder.paths import CHECKOUT_DIR
from kernel_builder.settings import CI_INSTALL, read_environment

# The docker extra: the workflow builds with `--runner docker`.
PROJECT = "kbuild[docker]"
_EXAMPLE = f"--install '{PROJECT} @ git+https://github.com/ORG/kbuild@COMMIT'"
_NETWORK_SCHEMES = ("https://", "http://", "ssh://", "git://")


def ci_requirement(explicit: str | None = None) -> str:
    """What a workflow installs kbuild with: `--install`, else $KBUILD_CI_INSTALL (both
    checked), else this kbuild's own source."""
    if explicit:
        return checked_requirement(explicit, "--install")
    chosen = read_environment().ci_install
    return checked_requirement(chosen, CI_INSTALL) if chosen else install_requirement()


def install_requirement(checkout: Path | None = CHECKOUT_DIR, distribution: str = "kbuild") -> str:
    """The pip requirement that installs this kbuild on a CI runner."""
    recorded = _recorded_url(distribution)
    if recorded is not None:
        return recorded
    if checkout is not None and (checkout / ".git").exists():
        return _checkout_requirement(checkout)
    raise UsageError(f"cannot tell where CI can install kbuild from (it is not installed from a URL, and kbuild is "
                     f"not on PyPI); pass {_EXAMPLE}")


def checked_requirement(text: str, given_as: str) -> str:
    """The requirement as given (`given_as`: the option or variable), if pip can read it and
    a runner can reach it."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        requirement = Requirement(text)
    except InvalidRequirement as e:
        raise UsageError(f"{given_as} {text!r} is not a pip requirement ({e}); e.g. {_EXAMPLE}") from None
    if requirement.name.lower() != "kbuild":
        raise UsageError(f"{given_as} {text!r} installs {requirement.name}, not kbuild; e.g. {_EXAMPLE}")
    if requirement.url and requirement.url.split("+", 1)[-1].startswith("file:"):
        raise UsageError(f"{given_as} {text!r} is a local path, which a CI runner does not have; e.g. {_EXAMPLE}")
    return text


def _recorded_url(distribution: str) -> str | None:
    """The requirement for the URL pip installed kbuild from; None for a local folder (an
    editable or path install, whose checkout may know more). Installed from an index (no
    direct_url.json): that index's version, which the runner's pip finds the same way."""
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return None
    text = dist.read_text("direct_url.json")
    if not text:
        return f"{PROJECT}=={__version__}"
    recorded = json.loads(text)
    url = recorded.get("url", "")
    if not url.startswith(_NETWORK_SCHEMES):
        return None
    vcs = recorded.get("vcs_info")
    if vcs:
        return f"{PROJECT} @ {vcs['vcs']}+{url}@{vcs['commit_id']}"
    return f"{PROJECT} @ {url}"


def _checkout_requirement(checkout: Path) -> str:
    """`git+URL@COMMIT` for the checkout's remote, when that remote is on a network and holds
    the commit (a remote-tracking branch contains it)."""
    commit = git_output(checkout, "rev-parse", "HEAD")
    remote = git_output(checkout, "config", "--get", "remote.origin.url")
    if not commit or not remote:
        raise UsageError(f"cannot tell where CI can install kbuild from: its checkout {checkout} has no remote "
                         f"'origin'; pass {_EXAMPLE}")
    url = _network_url(remote)
    if url is None:
        raise UsageError(f"cannot tell where CI can install kbuild from: its checkout's remote {remote} is not on "
                         f"a network a CI runner reaches; pass {_EXAMPLE}")
    if not git_output(checkout, "branch", "-r", "--contains", commit, "--list", "origin/*"):
        raise UsageError(f"kbuild's commit {commit[:12]} is not on {remote}: push it, or pass {_EXAMPLE}")
    return f"{PROJECT} @ git+{url}@{commit}"


def _network_url(remote: str) -> str | None:
    """The remote as pip's git+ URL wants it: scp-like `git@host:path` becomes https (a runner
    has no SSH key); a local path is None."""
    if remote.startswith(_NETWORK_SCHEMES):
        return remote
    user_host, sep, path = remote.partition(":")
    if sep and "@" in user_host and "/" not in user_host:
        return f"https://{user_host.split('@', 1)[1]}/{path}"
    return None
