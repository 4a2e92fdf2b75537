"""Missing variants only (issue 34): `kbuild plan --missing-from ORG/NAME@vN` lists the variants a
version branch of the Hub lacks, and `kbuild publish --add-variants` adds exactly those to the
release, leaving the ones already there byte for byte as they were.

The real CLI in a subprocess and the real huggingface_hub client against the test Hub. No
compile: the kernel is the pure-Python fixture (tests/fixtures/fused) with a second noarch
backend, so it has two variants (torch-cpu, torch-cuda) to release one after the other; the
naming-style test needs only folder names on the branch."""

from __future__ import annotations

import json
import shutil

import pytest
from huggingface_hub import CommitOperationAdd, HfApi

from conftest import REPO, kbuild
from git_repo import git
from hub_fixture import hub_env
from test_publish import committed_copy, publish, refs

pytestmark = pytest.mark.e2e

REPO_ID = "me/fused"


@pytest.fixture
def two_variant_kernel(tmp_path):
    """The fused fixture built for CPU and (noarch) CUDA, committed."""
    root = tmp_path / "fused"
    shutil.copytree(REPO / "tests" / "fixtures" / "fused", root)
    toml = root / "build.toml"
    toml.write_text(toml.read_text().replace('backends = ["cpu"]', 'backends = ["cpu", "cuda"]'))
    root = committed_copy(root, tmp_path / "kernel")
    kbuild("build", str(root), check=True)
    assert sorted(p.name for p in (root / "build").iterdir()) == ["torch-cpu", "torch-cuda"]
    return root


def released_files(hub, revision: str) -> dict[str, tuple]:
    """path -> what identifies its bytes on the Hub (git blob id, LFS sha256), at `revision`."""
    api = HfApi(endpoint=hub.endpoint, token=hub.read_token)
    return {e.path: (e.blob_id, e.lfs.sha256 if e.lfs else None, e.size)
            for e in api.list_repo_tree(REPO_ID, repo_type="kernel", revision=revision, recursive=True)
            if hasattr(e, "blob_id")}


def missing(root, ref: str, env: dict, *options: str) -> list[str]:
    result = kbuild("plan", str(root), *options, "--missing-from", ref, "--json", env=env)
    assert result.returncode == 0, result.stderr
    return [row["variant"] for row in json.loads(result.stdout)]


def one_line(result) -> str:
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_add_variants_adds_the_missing_variant_and_leaves_the_released_one_byte_identical(two_variant_kernel, hub, tmp_path):
    root, env = two_variant_kernel, hub_env(hub, tmp_path)
    repo = ["--repo-id", REPO_ID]
    first = kbuild("publish", str(root), "--add-variants", "--tag", "v1.0.0", *repo, env=env)
    assert "cannot read me/fused on the Hub" in one_line(first)  # nothing released to add to
    # v1.0.0 ships CPU only (the CUDA build is held back, as if the matrix had no CUDA variant yet).
    held = tmp_path / "held"
    shutil.move(root / "build" / "torch-cuda", held)
    assert publish(root, "--tag", "v1.0.0", *repo, env=env).returncode == 0
    shutil.move(held, root / "build" / "torch-cuda")
    before = released_files(hub, "v1.0.0")
    assert any(p.startswith("build/torch-cpu/") for p in before) and not any("torch-cuda" in p for p in before)

    assert missing(root, f"{REPO_ID}@v1", env) == ["torch-cuda"]

    sent = len(hub.requests)
    dry = kbuild("publish", str(root), "--add-variants", "--tag", "v1.1.0", *repo, "--dry-run", "--json", env=env)
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["variants"] == ["torch-cuda"] and plan["kept"] == ["torch-cpu"]
    assert plan["files"] and all(f["path"].startswith("build/torch-cuda/") for f in plan["files"])
    assert {r.method for r in hub.requests[sent:]} <= {"GET", "HEAD"}, "a dry run reads the Hub, writes nothing"

    added = kbuild("publish", str(root), "--add-variants", "--tag", "v1.1.0", *repo, env=env)
    assert added.returncode == 0, added.stderr
    assert "adding 1 variants (torch-cuda" in added.stderr and "published me/fused tag v1.1.0" in added.stderr
    branches, tags = refs(hub, REPO_ID)
    assert tags["v1.1.0"] == branches["v1"] != tags["v1.0.0"]
    after = released_files(hub, "v1.1.0")
    # Every file of the release is there with the same bytes; only torch-cuda's are new.
    assert {p: after[p] for p in before} == before
    local = {f"build/torch-cuda/{p.relative_to(root / 'build' / 'torch-cuda').as_posix()}"
             for p in (root / "build" / "torch-cuda").rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert set(after) - set(before) == local
    api = HfApi(endpoint=hub.endpoint, token=hub.read_token)
    card = open(api.hf_hub_download(REPO_ID, "README.md", repo_type="kernel", cache_dir=tmp_path / "card")).read()
    assert "`torch-cpu`" in card and "`torch-cuda`" in card and "Latest release: `v1.1.0`" in card

    assert missing(root, f"{REPO_ID}@v1", env) == []
    again = kbuild("publish", str(root), "--add-variants", "--tag", "v1.1.0", *repo, env=env)
    assert "nothing left to do" in one_line(again)
    nothing = kbuild("publish", str(root), "--add-variants", "--tag", "v1.1.1", *repo, env=env)
    assert "nothing to add: every variant of build/ is on me/fused@v1 already" in one_line(nothing)

    # A rebuild from changed sources differs from what v1 released: refused, and nothing moves.
    layers = root / "torch-ext" / "fused" / "layers.py"
    layers.write_text(layers.read_text() + "\n# changed\n")
    git(root, "commit", "-q", "-am", "change")
    kbuild("build", str(root), check=True)
    changed = kbuild("publish", str(root), "--add-variants", "--tag", "v1.2.0", *repo, env=env)
    line = one_line(changed)
    assert "torch-cpu, torch-cuda on me/fused@v1 differ from build/" in line, line
    assert refs(hub, REPO_ID) == (branches, tags)
    assert released_files(hub, "v1") == after


def test_missing_from_counts_a_variant_released_under_either_name(hub, tmp_path):
    """The branch has one variant under its legacy name and one under its new-style name: both
    count as released; the listing is the plan's other variants, in the plan's order."""
    env = hub_env(hub, tmp_path)
    relu = REPO / "examples" / "relu"
    selection = ("--matrix", "backend=cpu")
    planned = json.loads(kbuild("plan", str(relu), *selection, "--json", env=env, check=True).stdout)
    names = [row["variant"] for row in planned if row["variant"]]
    assert len(names) >= 3, names
    legacy, as_new = names[0], names[1]
    from kernel_builder.variants import Variant

    new_name = Variant.parse(as_new).other_style().name
    api = HfApi(endpoint=hub.endpoint, token=hub.write_token)
    api.create_repo("me/relu", repo_type="kernel")
    api.create_branch("me/relu", branch="v1", repo_type="kernel")
    api.create_commit("me/relu", [CommitOperationAdd(path_in_repo=f"build/{name}/metadata.json", path_or_fileobj=b"{}")
                                  for name in (legacy, new_name)],
                      commit_message="two variants", repo_type="kernel", revision="v1")

    assert missing(relu, "me/relu@v1", env, *selection) == names[2:]
    text = kbuild("plan", str(relu), *selection, "--missing-from", "me/relu@v1", env=env, check=True).stdout
    assert f"{len(names) - 2} missing from me/relu@v1" in text

    for ref, message in (("me/relu", "expected ORG/NAME@vN"), ("me/relu@v2", "so its builds go to branch v1"),
                         ("me/other@v1", "cannot read me/other on the Hub"), ):
        result = kbuild("plan", str(relu), *selection, "--missing-from", ref, env=env)
        assert message in one_line(result), (ref, result.stderr)
    api.create_repo("me/empty", repo_type="kernel")
    result = kbuild("plan", str(relu), "--missing-from", "me/empty@v1", env=env)
    assert "me/empty has no branch v1" in one_line(result)
