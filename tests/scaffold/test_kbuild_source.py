"""Where the generated workflows install kbuild from (kernel_builder/scaffold/kbuild_source.py):
the URL pip recorded, else the checkout's remote and commit; never a source CI cannot reach.
(The workflows once installed `kbuild[docker]==0.1.0`, which is on no index.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from git_repo import git
from kernel_builder.errors import UsageError
from kernel_builder.scaffold.kbuild_source import checked_requirement, ci_requirement, install_requirement

REMOTE = "https://example.invalid/kbuild.git"


@pytest.fixture
def pushed_checkout(tmp_path) -> tuple[Path, Path, str]:
    """A clone of this repository whose origin is a network URL and holds its HEAD (fetched
    from a local bare copy that the URL stands for)."""
    upstream = tmp_path / "upstream.git"
    git(tmp_path, "clone", "-q", "--bare", REPO, upstream)
    checkout = tmp_path / "kbuild"
    git(tmp_path, "clone", "-q", upstream, checkout)
    git(checkout, "remote", "set-url", "origin", REMOTE)
    return checkout, upstream, git(checkout, "rev-parse", "HEAD")


@pytest.mark.e2e  # pip fetches the source
def test_a_checkout_gives_its_remote_and_commit_and_pip_can_fetch_it(pushed_checkout, tmp_path):
    checkout, upstream, commit = pushed_checkout
    requirement = install_requirement(checkout, distribution="not-installed")
    assert requirement == f"kbuild[docker] @ git+{REMOTE}@{commit}"
    # pip itself fetches that requirement (git's insteadOf maps the URL to the local copy) and
    # reads the project it finds there: the source exists and is kbuild.
    remap = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": f"url.{upstream.as_uri()}.insteadOf", "GIT_CONFIG_VALUE_0": REMOTE}
    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "-q", "--report", str(report),
                           requirement], capture_output=True, text=True, check=False, env=dict(os.environ, **remap))
    assert done.returncode == 0, done.stderr[-3000:]
    assert '"name": "kbuild"' in report.read_text()


def test_an_unpushed_commit_a_local_remote_or_none_is_refused_with_what_to_pass(pushed_checkout, tmp_path):
    checkout, _, _ = pushed_checkout
    (checkout / "new.txt").write_text("x")
    git(checkout, "add", "new.txt")
    git(checkout, "commit", "-q", "-m", "local only")
    with pytest.raises(UsageError, match=r"kbuild's commit [0-9a-f]{12} is not on https://example.invalid/kbuild.git: push it, or pass --install"):
        install_requirement(checkout, distribution="not-installed")
    git(checkout, "remote", "set-url", "origin", str(tmp_path / "upstream.git"))
    with pytest.raises(UsageError, match="is not on a network a CI runner reaches; pass --install 'kbuild"):
        install_requirement(checkout, distribution="not-installed")
    git(checkout, "remote", "remove", "origin")
    with pytest.raises(UsageError, match="has no remote 'origin'; pass --install"):
        install_requirement(checkout, distribution="not-installed")
    with pytest.raises(UsageError, match="not installed from a URL"):
        install_requirement(None, distribution="not-installed")


def test_an_scp_style_remote_becomes_https(pushed_checkout):
    checkout, _, commit = pushed_checkout
    git(checkout, "remote", "set-url", "origin", "git@github.com:org/kbuild.git")
    assert install_requirement(checkout, distribution="not-installed") == f"kbuild[docker] @ git+https://github.com/org/kbuild.git@{commit}"


@pytest.mark.parametrize(("direct_url", "expected"), [
    ('{"url": "https://github.com/org/kbuild", "vcs_info": {"vcs": "git", "commit_id": "abc123"}}',
     "kbuild[docker] @ git+https://github.com/org/kbuild@abc123"),
    ('{"url": "https://example.org/kbuild-0.1.0-py3-none-any.whl", "archive_info": {}}',
     "kbuild[docker] @ https://example.org/kbuild-0.1.0-py3-none-any.whl"),
    (None, "kbuild[docker]==0.1.0"),  # from an index: the runner's pip finds it there too
])
def test_the_url_pip_recorded_comes_first(tmp_path, monkeypatch, direct_url, expected):
    info = tmp_path / "kbuild_fake-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kbuild-fake\nVersion: 0.1.0\n")
    if direct_url:
        (info / "direct_url.json").write_text(direct_url)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert install_requirement(None, distribution="kbuild-fake") == expected.replace("0.1.0", __import__("kernel_builder").__version__)


def test_a_local_folder_install_falls_back_to_the_checkout(tmp_path, monkeypatch, pushed_checkout):
    checkout, _, commit = pushed_checkout
    info = tmp_path / "kbuild_fake-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kbuild-fake\nVersion: 0.1.0\n")
    (info / "direct_url.json").write_text('{"url": "file:///work/kbuild", "dir_info": {"editable": true}}')
    monkeypatch.syspath_prepend(str(tmp_path))
    assert install_requirement(checkout, distribution="kbuild-fake").endswith(f"@{commit}")


@pytest.mark.parametrize(("text", "message"), [
    ("kbuild[docker", "is not a pip requirement"),
    ("torch==2.13", "installs torch, not kbuild"),
    ("kbuild @ git+file:///work/kbuild", "is a local path, which a CI runner does not have"),
    ("kbuild @ file:///work/kbuild", "is a local path"),
])
def test_a_given_requirement_is_checked(text, message):
    with pytest.raises(UsageError, match=message):
        checked_requirement(text, "--install")


def test_the_option_comes_before_the_variable(monkeypatch):
    monkeypatch.setenv("KBUILD_CI_INSTALL", "kbuild==9.9")
    assert ci_requirement() == "kbuild==9.9"
    assert ci_requirement("kbuild @ git+https://example.org/k@1") == "kbuild @ git+https://example.org/k@1"
    monkeypatch.setenv("KBUILD_CI_INSTALL", "nope==1")
    with pytest.raises(UsageError, match="KBUILD_CI_INSTALL 'nope==1' installs nope"):
        ci_requirement()
