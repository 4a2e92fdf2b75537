"""`kbuild init` makes the kernel a git repository with the scaffold as its first commit
(kernel_builder.scaffold.first_commit), with real git, against a git config of the test's own."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import kbuild_in_process
from git_repo import git

pytestmark = pytest.mark.usefixtures("ci_install")  # init's workflow needs an install source


@pytest.fixture(autouse=True)
def own_git_config(tmp_path, monkeypatch) -> Path:
    """Git reads only this file as its global config, and no identity from the environment."""
    config = tmp_path / "gitconfig"
    config.write_text("[user]\n\tname = Ada\n\temail = ada@example.com\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL"):
        monkeypatch.delenv(name, raising=False)
    return config


def test_init_commits_every_scaffolded_file_once(tmp_path):
    result = kbuild_in_process("init", "my-op", cwd=tmp_path, check=True)
    root = tmp_path / "my-op"
    assert "made a git repository with the scaffold as its first commit" in result.stdout
    assert git(root, "rev-list", "--count", "HEAD") == "1"
    assert git(root, "log", "-1", "--format=%an <%ae> %s") == "Ada <ada@example.com> Scaffold my-op with kbuild init"
    on_disk = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and ".git" not in p.relative_to(root).parts)
    assert git(root, "ls-files").splitlines() == on_disk and git(root, "status", "--porcelain") == ""


def test_no_git_leaves_a_plain_folder(tmp_path):
    result = kbuild_in_process("init", "my-op", "--no-git", cwd=tmp_path, check=True)
    assert not (tmp_path / "my-op" / ".git").exists() and "git" not in result.stdout


def test_inside_a_repo_no_nested_repo_is_made(tmp_path):
    git(tmp_path, "init", "-q")
    result = kbuild_in_process("init", "kernels/my-op", cwd=tmp_path, check=True)
    assert not (tmp_path / "kernels" / "my-op" / ".git").exists()
    assert f"is inside the git repository {tmp_path}: no new repository made" in result.stdout


def test_without_a_git_identity_the_commit_is_made_anyway_and_says_how(tmp_path, own_git_config):
    own_git_config.write_text("")
    result = kbuild_in_process("init", "my-op", cwd=tmp_path, check=True)
    root = tmp_path / "my-op"
    assert git(root, "log", "-1", "--format=%an <%ae>") == "kbuild <kbuild@localhost>"
    assert "committed as kbuild <kbuild@localhost> since git has no user.name or user.email" in result.stdout
    assert "git commit --amend --reset-author" in result.stdout
    local = subprocess.run(["git", "-C", str(root), "config", "--local", "--get", "user.name"], capture_output=True, check=False)
    assert local.returncode == 1, "the fallback identity is for that commit only, not written to the repo's config"


def test_without_git_installed_the_scaffold_stands_and_one_line_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    result = kbuild_in_process("init", "my-op", cwd=tmp_path, check=True)
    assert (tmp_path / "my-op" / "build.toml").is_file() and not (tmp_path / "my-op" / ".git").exists()
    assert "git is not installed: no repository made" in result.stdout
