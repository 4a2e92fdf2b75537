"""`kbuild publish` after a killed run, with a bad repo id and with a read-only token: the real
CLI in a subprocess, the real huggingface_hub client, the test Hub over HTTP (issue 14)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest
from huggingface_hub import HfApi
from huggingface_hub.errors import EntryNotFoundError

from conftest import REPO, kbuild
from git_repo import git
from hub_fixture import hub_env
from test_publish import fused, publish, refs  # noqa: F401 - fused is a fixture

pytestmark = pytest.mark.e2e

REPO_ID = "me/fused"


def card(hub, tmp_path) -> str | None:
    """README.md on main, or None when there is none."""
    api = HfApi(endpoint=hub.endpoint, token=hub.read_token)
    try:
        path = api.hf_hub_download(REPO_ID, "README.md", repo_type="kernel", revision="main",
                                   cache_dir=tmp_path / f"card-{len(hub.requests)}")
    except EntryNotFoundError:
        return None
    return open(path).read()


def one_line(result: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def killed_before_the_card(root, hub, env, monkeypatch) -> None:
    """Run `kbuild publish --tag v1.0.0` and SIGKILL it while the Hub holds the preupload call of
    its card (the step before the card's commit is sent, so the commit never arrives)."""
    on_main, release = threading.Event(), threading.Event()
    original = hub.app._preupload

    def stalled_preupload(req, repo, revision):
        if revision == "main":
            on_main.set()
            release.wait(60)
        return original(req, repo, revision)

    monkeypatch.setattr(hub.app, "_preupload", stalled_preupload)
    command = [sys.executable, "-m", "kernel_builder.cli", "publish", str(root), "--tag", "v1.0.0", "--repo-id", REPO_ID]
    process = subprocess.Popen(command, cwd=REPO, env=dict(os.environ, **env), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, start_new_session=True)
    try:
        assert on_main.wait(300), "the card upload never started: " + process.communicate(timeout=60)[1].decode()
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
    finally:
        release.set()
    monkeypatch.setattr(hub.app, "_preupload", original)


def test_a_rerun_completes_a_publish_killed_after_the_tag(fused, hub, tmp_path, monkeypatch):
    env = hub_env(hub, tmp_path)
    killed_before_the_card(fused, hub, env, monkeypatch)
    branches, tags = refs(hub, REPO_ID)
    assert tags["v1.0.0"] == branches["v1"], "the kill must come after the tag"
    assert card(hub, tmp_path) is None, "the kill must come before the card"

    rerun = publish(fused, "--tag", "v1.0.0", "--repo-id", REPO_ID, env=env)
    assert rerun.returncode == 0, rerun.stderr
    assert "Traceback" not in rerun.stderr
    finishing = [line for line in rerun.stderr.splitlines() if "tag v1.0.0" in line and "already" in line]
    assert len(finishing) == 1 and "repo card" in finishing[0], rerun.stderr
    assert "uploading" not in rerun.stderr, "the build is on the tag already: nothing is uploaded again"
    after = refs(hub, REPO_ID)
    assert after[1] == tags and after[0]["v1"] == branches["v1"], "the tag and branch v1 stay where they were"
    assert after[0]["main"] != branches["main"], "the card is a commit on main"
    text = card(hub, tmp_path)
    assert text is not None and "Latest release: `v1.0.0`" in text and "`torch-cpu`" in text

    # Now every step is done: a third run refuses, in one line, as for any existing tag.
    again = publish(fused, "--tag", "v1.0.0", "--repo-id", REPO_ID, env=env)
    assert again.returncode == 1 and "tag v1.0.0 already exists" in one_line(again)


def test_a_tag_on_other_content_stays_a_refusal(fused, hub, tmp_path, monkeypatch):
    env = hub_env(hub, tmp_path)
    killed_before_the_card(fused, hub, env, monkeypatch)
    tagged = refs(hub, REPO_ID)

    layers = fused / "torch-ext" / "fused" / "layers.py"
    layers.write_text(layers.read_text() + "\n# other content\n")
    git(fused, "commit", "-q", "-am", "other content")
    kbuild("build", str(fused), check=True)
    refused = publish(fused, "--tag", "v1.0.0", "--repo-id", REPO_ID, env=env)
    assert refused.returncode == 1
    line = one_line(refused)
    assert "tag v1.0.0 already exists" in line and "other content" in line and "--force" in line, line
    assert refs(hub, REPO_ID) == tagged and card(hub, tmp_path) is None


def test_a_card_of_a_later_release_is_not_replaced_by_an_older_rerun(fused, hub, tmp_path, monkeypatch):
    env = hub_env(hub, tmp_path)
    first = git(fused, "rev-parse", "HEAD")
    killed_before_the_card(fused, hub, env, monkeypatch)
    layers = fused / "torch-ext" / "fused" / "layers.py"
    layers.write_text(layers.read_text() + "\n# v1.1\n")
    git(fused, "commit", "-q", "-am", "v1.1")
    kbuild("build", str(fused), check=True)
    assert publish(fused, "--tag", "v1.1.0", "--repo-id", REPO_ID, env=env).returncode == 0
    assert "Latest release: `v1.1.0`" in card(hub, tmp_path)

    # Back to v1.0.0's sources: the same build as its tag, whose card never landed, but v1.1.0's
    # card supersedes it: nothing is left to do, and the newer card stays.
    git(fused, "checkout", "-q", first)
    kbuild("build", str(fused), check=True)
    old = publish(fused, "--tag", "v1.0.0", "--repo-id", REPO_ID, env=env)
    assert old.returncode == 1
    line = one_line(old)
    assert "tag v1.0.0 already exists" in line and "nothing left to do" in line and "v1.1.0" in line, line
    assert "Latest release: `v1.1.0`" in card(hub, tmp_path)

    # A new patch of the older line is published and tagged, and says the newer card stays.
    patch = publish(fused, "--tag", "v1.0.5", "--repo-id", REPO_ID, env=env)
    assert patch.returncode == 0 and "Traceback" not in patch.stderr, patch.stderr
    kept = [line for line in patch.stderr.splitlines() if "card on main stays at v1.1.0" in line]
    assert len(kept) == 1 and "v1.0.5" in kept[0], patch.stderr
    assert "v1.0.5" in refs(hub, REPO_ID)[1]
    assert "Latest release: `v1.1.0`" in card(hub, tmp_path)


@pytest.mark.parametrize("repo_id", ["org/ev il", "../x", "org/../x", "org/a--b", "/x", "org/x.git", "org/-x",
                                     "caf\u00e9/x"])
def test_a_repo_id_the_hub_refuses_is_one_line_before_any_request(fused, hub, tmp_path, repo_id):
    result = publish(fused, "--tag", "v1.0.0", "--repo-id", repo_id, env=hub_env(hub, tmp_path))
    assert result.returncode == 2, result.stderr
    line = one_line(result)
    assert "--repo-id" in line and repr(repo_id) in line, line
    assert hub.requests == [], "nothing may reach the Hub"


def test_a_repo_id_in_build_toml_is_checked_too(fused, hub, tmp_path):
    manifest = fused / "build.toml"
    manifest.write_text(manifest.read_text() + '\n[general.hub]\nrepo-id = "org/ev il"\n')
    git(fused, "commit", "-q", "-am", "hub repo id")
    result = publish(fused, "--tag", "v1.0.0", "--dry-run", env=hub_env(hub, tmp_path))
    assert result.returncode == 2, result.stderr
    line = one_line(result)
    assert "[general.hub] repo-id" in line and "'org/ev il'" in line, line


@pytest.mark.parametrize("existing", [False, True], ids=["new-repo", "existing-repo"])
def test_a_read_only_token_is_told_it_cannot_write(fused, hub, tmp_path, existing):
    if existing:
        HfApi(endpoint=hub.endpoint, token=hub.write_token).create_repo(REPO_ID, repo_type="kernel")
    result = publish(fused, "--tag", "v1.0.0", "--repo-id", REPO_ID, env=hub_env(hub, tmp_path, token=hub.read_token))
    assert result.returncode == 1
    line = one_line(result)
    assert f"kbuild: error: this token cannot write to {REPO_ID} (" in line, line
    assert "read role" in line and "Request ID" not in line, line
    if existing:
        assert refs(hub, REPO_ID) == ({"main": refs(hub, REPO_ID)[0]["main"]}, {}), "nothing was written"
    else:
        assert not (hub.root / "repos" / "kernels" / "me").exists(), "nothing was written"
