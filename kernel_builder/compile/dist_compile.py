"""Distributed compiles: sccache's client settings for an sccache-dist scheduler.

`kbuild build --dist-scheduler URL` (or KBUILD_DIST_SCHEDULER) writes sccache's client
config (the `[dist]` table: scheduler_url, the auth token, the toolchain cache) into
kbuild's cache and points each job's sccache server at it with SCCACHE_CONF. sccache
packages each compiler as a toolchain itself (the compiler and what it loads, sent once
to every build server); the toolchains listed in KBUILD_DIST_TOOLCHAINS (a TOML array of
sccache's `[[dist.toolchains]]` tables, for prepackaged archives) are passed through.

Before any job starts, kbuild asks the scheduler for its status: a scheduler that does not
answer fails the build with one line, unless `--dist-fallback-local` builds with local
compiles instead.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from kernel_builder.compile.private_files import write_secret
from kernel_builder.errors import UsageError
from kernel_builder.paths import cache_dir, short_key
from kernel_builder.redaction import mask_credentials

_STATUS_PATH = "/api/v1/scheduler/status"
_STATUS_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class DistSettings:
    scheduler_url: str
    token: str = ""  # the token of the scheduler's client_auth
    toolchains: str = ""  # a TOML array of [[dist.toolchains]] tables, or empty

    def __post_init__(self) -> None:
        if not self.scheduler_url.startswith(("http://", "https://")):
            raise UsageError(f"--dist-scheduler must be an http:// or https:// URL, got {mask_credentials(self.scheduler_url)!r}")

    def config_text(self) -> str:
        cache = cache_dir("sccache-dist-client")
        lines = [
            "# Written by kbuild for sccache's distributed compiles.",
            "[dist]",
            f"scheduler_url = {json.dumps(self.scheduler_url)}",
            f"cache_dir = {json.dumps(str(cache))}",
            f"toolchains = {self.toolchains.strip() or '[]'}",
            "",
            "[dist.auth]",
        ]
        lines += ['type = "token"', f"token = {json.dumps(self.token)}"]
        return "\n".join(lines) + "\n"

    def write_config(self) -> Path:
        """sccache's config file (SCCACHE_CONF) for these settings, in kbuild's cache: 0600
        from its first byte, and made so again if found otherwise (it holds the token)."""
        text = self.config_text()
        path = cache_dir("sccache-dist-client") / f"client-{short_key(text)}.toml"
        write_secret(path, text)
        return path


def scheduler_problem(settings: DistSettings) -> str | None:
    """Why the scheduler cannot be used, or None when it answers its status request."""
    url = settings.scheduler_url.rstrip("/") + _STATUS_PATH
    shown = mask_credentials(settings.scheduler_url)
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {settings.token}"} if settings.token else {})
    try:
        with urllib.request.urlopen(request, timeout=_STATUS_TIMEOUT_S) as response:
            response.read()
    except urllib.error.HTTPError as e:
        return f"the sccache-dist scheduler at {shown} answered HTTP {e.code} to its status request"
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        # urllib's reason can quote the URL's user:password part (a "nonnumeric port").
        return mask_credentials(f"cannot reach the sccache-dist scheduler at {shown}: {getattr(reason, 'strerror', None) or reason}")
    return None
