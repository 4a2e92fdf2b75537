"""The host's pip settings as an image build gets them (runners/pip_forwarding.py): read
from the real `pip config list`, turned into secrets and loopback URLs, and the loopback
server's confinement to the folders it serves."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from kernel_builder.errors import KbuildError
from kernel_builder.runners.image_builder import buildkit_cli
from kernel_builder.runners.pip_forwarding import forwarded_pip, host_pip_settings, parse_config_list


def test_config_list_lines_later_sections_win():
    text = "\n".join([
        "global.index-url='https://mirror.example/simple'",
        "install.index-url='https://install.example/simple'",
        ":env:.find-links='/opt/wheels /more'",
        "global.verbose='1'",  # not where packages come from: not forwarded
        "global.cert='/etc/ca.pem'",
        ":env:.cert='/etc/env-ca.pem'",
    ])
    assert parse_config_list(text) == {
        "index-url": "https://install.example/simple",
        "find-links": "/opt/wheels /more",
        "cert": "/etc/env-ca.pem",
    }


def test_the_real_pip_config_is_read(tmp_path):
    """Through pip itself: a config file and a PIP_* variable."""
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://mirror.example/simple\ntimeout = 7\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env |= {"PIP_CONFIG_FILE": str(conf), "PIP_EXTRA_INDEX_URL": "https://extra.example/simple"}
    script = "from kernel_builder.runners.pip_forwarding import host_pip_settings; print(host_pip_settings())"
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    settings = eval(done.stdout)  # noqa: S307 -- our own dict's repr
    assert settings["index-url"] == "https://mirror.example/simple" and settings["timeout"] == "7"
    assert settings["extra-index-url"] == "https://extra.example/simple"
    assert isinstance(host_pip_settings(), dict)


def test_local_folders_are_served_and_files_become_secrets(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "demo-1.0-py3-none-any.whl").write_bytes(b"wheel bytes")
    index = tmp_path / "mirror" / "simple"
    (index / "demo").mkdir(parents=True)
    (tmp_path / "mirror" / "files").mkdir()
    (tmp_path / "mirror" / "files" / "demo-1.0.tar.gz").write_bytes(b"sdist bytes")
    (index / "demo" / "index.html").write_text('<a href="../../files/demo-1.0.tar.gz">demo-1.0.tar.gz</a>')
    ca, constraints = tmp_path / "ca.pem", tmp_path / "constraints.txt"
    ca.write_text("CERT")
    constraints.write_text("torch<=2.14.1\n")
    (tmp_path / "secret.txt").write_text("outside every served folder")
    settings = {
        "index-url": "https://user:password@mirror.example/simple",
        "extra-index-url": f"file://{index}",
        "find-links": f"{wheels} {tmp_path / 'missing'}",
        "cert": str(ca),
        "constraint": str(constraints),
        "timeout": "30",
    }
    with forwarded_pip(settings, environ={"HTTPS_PROXY": "http://proxy:3128", "HOME": "/root"}) as pip:
        conf = pip.secrets["pip.conf"].read_text()
        assert pip.secrets["pip-cert"] == ca and pip.secrets["pip-constraints"].read_text() == "torch<=2.14.1\n\n"
        assert "cert = /run/secrets/pip-cert" in conf and "constraint = /run/secrets/pip-constraints" in conf
        # The credentials travel in the secret only, never as a build arg.
        assert "index-url = https://user:password@mirror.example/simple" in conf
        assert pip.proxy_args == {"HTTPS_PROXY": "http://proxy:3128"}
        assert oct(pip.secrets["pip.conf"].stat().st_mode & 0o777) == "0o600"

        links = next(line for line in conf.splitlines() if line.startswith("find-links"))
        url = links.split(" = ")[1].strip()
        assert url.startswith("http://127.0.0.1:") and len(links.split()) == 3, "a missing folder is dropped"
        assert b"demo-1.0-py3-none-any.whl" in urllib.request.urlopen(url).read()
        # A local index is served from its parent, so its relative links resolve.
        extra = next(line for line in conf.splitlines() if line.startswith("extra-index-url")).split(" = ")[1]
        assert extra.endswith("/simple/")
        page = urllib.request.urlopen(extra + "demo/").read().decode()
        assert urllib.request.urlopen(urllib.parse.urljoin(extra + "demo/", "../../files/demo-1.0.tar.gz")).read() == b"sdist bytes"
        assert "demo-1.0.tar.gz" in page
        # Nothing outside a served folder.
        for escape in ("../secret.txt", "%2e%2e/secret.txt", "../../../../etc/passwd"):
            with pytest.raises(urllib.error.HTTPError):
                urllib.request.urlopen(url + escape)
        (wheels / "link").symlink_to(tmp_path / "secret.txt")
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(url + "link")
        served_port = url.split(":")[2].split("/")[0]
    with pytest.raises(OSError):  # the server stops with the block
        urllib.request.urlopen(f"http://127.0.0.1:{served_port}/0/", timeout=5)


def test_a_configured_file_that_is_missing_is_one_clear_error(tmp_path):
    with pytest.raises(KbuildError, match=r"pip's cert .*nope.pem is not a file: fix pip's configuration"):
        with forwarded_pip({"cert": str(tmp_path / "nope.pem")}, environ={}):
            pass


def _fake_docker(folder: Path, version: str, buildx: bool) -> None:
    """A `docker` that answers --version (and `buildx version` when it has the plugin)."""
    folder.mkdir()
    script = folder / "docker"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = --version ]; then echo "Docker version {version}, build x"; exit 0; fi\n'
        f'if [ "$1" = buildx ]; then exit {0 if buildx else 1}; fi\n'
        "exit 2\n"
    )
    script.chmod(0o755)


def test_the_cli_that_builds_with_buildkit_is_chosen(tmp_path, monkeypatch):
    _fake_docker(tmp_path / "new", "28.2.2", buildx=False)  # BuildKit only through buildx, which it lacks
    _fake_docker(tmp_path / "old", "20.10.24+dfsg1", buildx=False)
    _fake_docker(tmp_path / "plugin", "28.2.2", buildx=True)

    def chosen(*folders: str):
        monkeypatch.setenv("PATH", os.pathsep.join(str(tmp_path / f) for f in folders))
        buildkit_cli.cache_clear()
        try:
            return buildkit_cli()
        finally:
            buildkit_cli.cache_clear()

    assert chosen("new", "old").argv == (str(tmp_path / "old" / "docker"), "build")
    assert chosen("new", "old").environment == (("DOCKER_BUILDKIT", "1"),)
    assert chosen("plugin", "old").argv == (str(tmp_path / "plugin" / "docker"), "buildx", "build", "--load")
    with pytest.raises(KbuildError, match="needs BuildKit: install Docker's buildx plugin"):
        chosen("new")
    with pytest.raises(KbuildError, match="needs the docker command"):
        chosen("nothing-here")


def test_a_failed_image_build_names_the_steps_own_error():
    from kernel_builder.runners.image_builder import failure_reason

    tail = [
        "Looking in indexes: https://pypi.org/simple",
        "ERROR: Could not find a version that satisfies the requirement torch==2.14.* (from versions: none)",
        "ERROR: No matching distribution found for torch==2.14.*",
        "ERROR: executor failed running [/bin/sh -c export PIP_CONFIG_FILE=... && pip install ...]: exit code: 1",
        "------",
        " > [stage-0 2/3] RUN --mount=type=secret,id=pip.conf ...",
        "executor failed running [/bin/sh -c export ...]: exit code: 1",
    ]
    assert failure_reason(tail) == "ERROR: No matching distribution found for torch==2.14.*"
    base_missing = ["ERROR: failed to solve: kbuild-offline-base:nope: not found"]
    assert failure_reason(base_missing) == base_missing[0]
    assert failure_reason([]) == "no output"


def test_secret_files_are_private_from_their_first_byte(tmp_path, monkeypatch):
    """Made 0600 as they are created, not chmod-ed after the text is in (issue 30): chmod
    does nothing here and the umask lets everyone read."""
    monkeypatch.setattr(os, "chmod", lambda *args, **kwargs: None)
    monkeypatch.setattr(Path, "chmod", lambda *args, **kwargs: None)
    old = os.umask(0)
    try:
        with forwarded_pip({"index-url": "https://user:password@mirror.example/simple"}, environ={}) as pip:
            pip.add_secret("torch-index-url", "https://user:password@mirror.example/whl")
            modes = {name: oct(path.stat().st_mode & 0o777) for name, path in pip.secrets.items()}
    finally:
        os.umask(old)
    assert modes == {"pip.conf": "0o600", "torch-index-url": "0o600"}
