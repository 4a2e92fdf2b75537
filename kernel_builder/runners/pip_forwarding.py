"""The host's pip configuration, as an image build sees it.

A build farm behind a mirror or a proxy installs packages the way its own pip does: the
index and extra indexes, find-links folders, the CA bundle, constraints, the proxy. The
image builds (kernel_builder.runners.image_builder) get those settings as BuildKit secrets,
which are mounted for one RUN step and never stored in a layer, the image's history or its
cache key: a password in an index URL stays out of the image, and a changed mirror does not
rebuild it.

What is a local folder on the host (a find-links folder, a `file://` index) is served
read-only over HTTP on the loopback interface while the image builds (the build runs with
the host's network), so gigabytes of wheels need not be copied into a build context.
"""

from __future__ import annotations

import ast
import http.server
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from kernel_builder.compile.private_files import write_secret
from kernel_builder.errors import KbuildError

# pip settings that say where packages come from and how to reach them; others (verbosity,
# --user, ...) are the host's business. Values with several entries are space-separated.
FORWARDED = (
    "index-url", "extra-index-url", "find-links", "no-index", "trusted-host", "proxy",
    "cert", "client-cert", "constraint", "timeout", "retries", "pre", "prefer-binary",
)
_SECTION_RANK = {"global": 0, "install": 1, ":env:": 2}
# Where the Dockerfiles mount the secrets (id -> /run/secrets/<id>).
SECRETS_DIR = "/run/secrets"
PIP_CONF_ID = "pip.conf"
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy", "all_proxy")


def host_pip_settings(python: str | None = None) -> dict[str, str]:
    """The forwarded settings of the host's pip (config files and PIP_* variables, as
    `pip config list` shows them), later scopes overriding earlier ones."""
    try:
        done = subprocess.run(
            [python or sys.executable, "-m", "pip", "config", "list"],
            capture_output=True, text=True, timeout=60, check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise KbuildError(f"cannot read the host's pip configuration: {e}") from None
    return parse_config_list(done.stdout) if done.returncode == 0 else {}


def parse_config_list(text: str) -> dict[str, str]:
    """`global.index-url='https://...'` lines -> {"index-url": "https://..."}. pip itself
    reads an install's options from [global], then [install], then PIP_* (`:env:`)."""
    found: dict[str, tuple[int, str]] = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        section, _, key = name.rpartition(".")
        if not sep or key not in FORWARDED or section not in _SECTION_RANK:
            continue
        try:
            parsed = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            parsed = value
        rank = _SECTION_RANK[section]
        if key not in found or rank >= found[key][0]:
            found[key] = (rank, " ".join(str(parsed).split()))
    return {key: value for key, (_, value) in found.items()}


@dataclass
class ForwardedPip:
    """What an image build receives: secret files (BuildKit id -> host file) and the
    proxy variables (Docker's predefined build args, which it keeps out of the history)."""

    secrets: dict[str, Path] = field(default_factory=dict)
    proxy_args: dict[str, str] = field(default_factory=dict)
    folder: Path | None = None  # where secrets made for this build are written

    def add_secret(self, secret_id: str, text: str) -> None:
        """`text` as the secret `secret_id`, in a file only the user reads, gone after the build."""
        assert self.folder is not None
        path = self.folder / secret_id
        write_secret(path, text)
        self.secrets[secret_id] = path


@contextmanager
def forwarded_pip(settings: dict[str, str] | None = None, environ: dict[str, str] | None = None) -> Iterator[ForwardedPip]:
    """The host's pip settings as secrets for one image build, with its local folders
    served on loopback until the block ends."""
    settings = host_pip_settings() if settings is None else settings
    environ = dict(os.environ) if environ is None else environ
    with tempfile.TemporaryDirectory(prefix="kbuild-pip-") as temp, _FolderServer() as server:
        forwarded = ForwardedPip(proxy_args={k: v for k, v in environ.items() if k in PROXY_VARIABLES and v},
                                 folder=Path(temp))
        lines = ["[global]"]
        for key, value in settings.items():
            value = _translate(key, value, server, forwarded, Path(temp))
            if value:
                lines.append(f"{key} = {value}")
        conf = Path(temp) / PIP_CONF_ID
        write_secret(conf, "\n".join(lines) + "\n")
        forwarded.secrets[PIP_CONF_ID] = conf
        yield forwarded


def _translate(key: str, value: str, server: "_FolderServer", forwarded: ForwardedPip, temp: Path) -> str:
    """A setting's value as the image build can use it: local folders as loopback URLs,
    local files (CA bundle, client certificate, constraints) as secrets."""
    if key in ("cert", "client-cert"):
        return _secret_file(f"pip-{key}", Path(value), forwarded, key)
    if key == "constraint":
        files = [Path(unquote(urlparse(v).path)) if v.startswith("file:") else Path(v) for v in value.split()]
        joined = temp / "constraints.txt"
        joined.write_text("".join(_read(f, key) + "\n" for f in files))
        return _secret_file("pip-constraints", joined, forwarded, key)
    if key in ("index-url", "extra-index-url", "find-links"):
        return " ".join(_reachable(v, server, index=key != "find-links") for v in value.split())
    return value


def _read(path: Path, key: str) -> str:
    try:
        return path.read_text()
    except OSError as e:
        raise KbuildError(f"pip's {key} file {path} cannot be read for the image build: {e.strerror}") from None


def _secret_file(secret_id: str, path: Path, forwarded: ForwardedPip, key: str) -> str:
    if not path.is_file():
        raise KbuildError(f"pip's {key} {path} is not a file: fix pip's configuration (pip config list) or the PIP_* variable")
    forwarded.secrets[secret_id] = path
    return f"{SECRETS_DIR}/{secret_id}"


def _reachable(location: str, server: "_FolderServer", index: bool) -> str:
    """A URL the build can fetch: remote URLs as they are, a local folder (or file:// URL)
    served on loopback; a local file (a single wheel) through its folder. A local index is
    served from its parent folder: its pages link to files beside it (`simple/x/` links
    `../../files/x.whl`)."""
    parsed = urlparse(location)
    if parsed.scheme not in ("", "file"):
        return location
    path = Path(unquote(parsed.path) if parsed.scheme == "file" else location).resolve()
    if not path.exists():
        return ""  # pip skips a missing find-links folder too
    if index and path.is_dir() and path.parent != path:
        folder, name = path.parent, path.name + "/"
    else:
        folder, name = (path, "") if path.is_dir() else (path.parent, path.name)
    return server.serve(folder) + name


class _FolderServer:
    """Host folders served read-only at http://127.0.0.1:PORT/<n>/ on demand; paths that
    would leave a folder (.., links out of it) are refused."""

    def __init__(self) -> None:
        self._roots: list[Path] = []
        self._httpd: http.server.ThreadingHTTPServer | None = None

    def serve(self, folder: Path) -> str:
        if folder not in self._roots:
            self._roots.append(folder)
        if self._httpd is None:
            self._start()
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/{self._roots.index(folder)}/"

    def _start(self) -> None:
        roots = self._roots

        class Handler(http.server.SimpleHTTPRequestHandler):
            def translate_path(self, path: str) -> str:
                number, _, rest = path.lstrip("/").partition("/")
                if not number.isdigit() or int(number) >= len(roots):
                    return "/nonexistent/kbuild"
                root = roots[int(number)]
                self.directory = str(root)
                resolved = Path(super().translate_path("/" + rest)).resolve()
                return str(resolved) if resolved == root or root in resolved.parents else "/nonexistent/kbuild"

            def log_message(self, *args) -> None:  # the build's own output says what was fetched
                pass

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def __enter__(self) -> "_FolderServer":
        return self

    def __exit__(self, *exc) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
