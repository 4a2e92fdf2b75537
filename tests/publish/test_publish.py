"""`kbuild publish` against the test Hub (kernel_builder.testing), with the real
huggingface_hub client over HTTP, and the real `kernels` package loading the result.

A compiled kernel (examples/relu, its CPU variant) for the round trip and the killed
upload; a pure-Python one (tests/fixtures/fused) for the version and refusal rules."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import EXAMPLES, REPO, kbuild, optional_module
from git_repo import git, new_repo
from hub_fixture import hub_env
from kernel_builder.runtime.digest import hash_variant

torch = optional_module("torch")

pytestmark = pytest.mark.e2e

CPU_VARIANT = "torch{}{}-cxx11-cpu-x86_64-linux".format(*torch.__version__.split(".")[:2])


def committed_copy(source: Path, dest: Path) -> Path:
    """The kernel as its own git repository with everything committed (build/ ignored)."""
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns("build", "__pycache__"))
    (dest / ".gitignore").write_text("build/\n__pycache__/\n")
    return new_repo(dest)


@pytest.fixture(scope="module")
def relu(tmp_path_factory) -> Path:
    root = committed_copy(EXAMPLES / "relu", tmp_path_factory.mktemp("publish") / "relu")
    kbuild("build", str(root), "--variant", CPU_VARIANT, check=True)
    return root


@pytest.fixture
def fused(tmp_path) -> Path:
    root = committed_copy(REPO / "tests" / "fixtures" / "fused", tmp_path / "fused")
    kbuild("build", str(root), check=True)
    return root


def publish(root: Path, *args: str, env: dict) -> subprocess.CompletedProcess:
    return kbuild("publish", str(root), *args, env=env)


def refs(hub, repo_id: str) -> tuple[dict, dict]:
    from huggingface_hub import HfApi

    found = HfApi(endpoint=hub.endpoint, token=hub.read_token).list_repo_refs(repo_id, repo_type="kernel")
    return {b.name: b.target_commit for b in found.branches}, {t.name: t.target_commit for t in found.tags}


def test_round_trip_publish_then_kernels_get_kernel_runs_it(relu, hub, tmp_path):
    env = hub_env(hub, tmp_path)
    result = publish(relu, "--tag", "v1.0.0", "--repo-id", "kernels-community/relu", env=env)
    assert result.returncode == 0, result.stderr
    branches, tags = refs(hub, "kernels-community/relu")
    assert tags["v1.0.0"] == branches["v1"], (branches, tags)
    assert "published kernels-community/relu tag v1.0.0" in result.stderr

    from huggingface_hub import HfApi

    api = HfApi(endpoint=hub.endpoint, token=hub.read_token)
    files = {f.path for f in api.list_repo_tree("kernels-community/relu", repo_type="kernel", revision="v1", recursive=True)
             if hasattr(f, "size") and not hasattr(f, "tree_id")}
    local = {f"build/{CPU_VARIANT}/{p.name}" for p in (relu / "build" / CPU_VARIANT).iterdir() if p.is_file()}
    assert local <= files
    card = Path(api.hf_hub_download("kernels-community/relu", "README.md", repo_type="kernel")).read_text()
    assert f"`{CPU_VARIANT}`" in card and 'get_kernel("kernels-community/relu", version=1)' in card

    # The reference client, unchanged, loads it by version and runs it on CPU. From your own
    # org it loads with the README's trust options: kernels 0.19 asks the Hub (GET
    # /api/organizations/ORG/overview) whether ORG is a trusted publisher, and without an
    # option refuses one that is not with that reason, not "could not verify" (tests/testing).
    assert publish(relu, "--tag", "v1.0.0", "--repo-id", "myorg/relu", env=env).returncode == 0
    script = (
        "import kernels, torch\n"
        "x = torch.randn(1000)\n"
        "def load(repo, **trust):\n"
        "    relu = kernels.get_kernel(repo, version=1, backend='cpu', **trust)\n"
        "    assert torch.equal(relu.relu(x), torch.relu(x))\n"
        "    return relu\n"
        "print('ok', load('kernels-community/relu').__name__)\n"
        "try:\n"
        "    load('myorg/relu')\n"
        "except ValueError as e:\n"
        "    print('refused:', e)\n"
        "load('myorg/relu', trust_remote_code=True)\n"
        "load('myorg/relu', trust_remote_code=['myorg/relu'])\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], env=dict(os.environ, **hub_env(hub, tmp_path, token=None)),
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    community, refused, own = done.stdout.splitlines()
    assert community.startswith("ok") and own == "ok", done.stdout
    assert "'myorg/relu' is not from a trusted publisher" in refused and "trust_remote_code=True" in refused, refused

    # Publishing the same version again is refused; nothing moves.
    again = publish(relu, "--tag", "v1.0.0", "--repo-id", "kernels-community/relu", env=env)
    assert again.returncode == 1 and "tag v1.0.0 already exists" in again.stderr
    assert again.stderr.strip().count("\n") == 0 and "Traceback" not in again.stderr
    assert refs(hub, "kernels-community/relu")[1] == tags


def test_a_publish_killed_mid_upload_leaves_no_tag_and_a_rerun_completes(relu, hub, tmp_path, monkeypatch):
    env = hub_env(hub, tmp_path)
    uploading, release = threading.Event(), threading.Event()
    original = hub.app._lfs_put

    def stalled_upload(*args, **kwargs):
        uploading.set()
        release.wait(60)
        return original(*args, **kwargs)

    monkeypatch.setattr(hub.app, "_lfs_put", stalled_upload)
    command = [sys.executable, "-m", "kernel_builder.cli", "publish", str(relu), "--tag", "v1.0.0", "--repo-id", "me/relu"]
    process = subprocess.Popen(command, cwd=REPO, env=dict(os.environ, **env), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, start_new_session=True)
    try:
        assert uploading.wait(300), "the upload never started"
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
    finally:
        release.set()
    monkeypatch.setattr(hub.app, "_lfs_put", original)
    branches, tags = refs(hub, "me/relu")
    assert tags == {}
    assert "v1" not in branches or branches["v1"] == branches["main"], "no commit may land on v1"

    result = publish(relu, "--tag", "v1.0.0", "--repo-id", "me/relu", env=env)
    assert result.returncode == 0, result.stderr
    branches, tags = refs(hub, "me/relu")
    assert tags["v1.0.0"] == branches["v1"] != branches["main"]


def test_benchmark_scripts_go_to_the_version_branch_where_kernels_benchmark_finds_them(relu, hub, tmp_path):
    # As kernel-builder's upload: KERNEL_DIR/benchmarks/benchmark*.py to benchmarks/ on vN, a
    # benchmark*.py the kernel no longer has deleted there, other files under benchmarks/ kept.
    from huggingface_hub import HfApi

    env, repo_id = hub_env(hub, tmp_path), "me/relu-bench"
    api = HfApi(endpoint=hub.endpoint, token=hub.write_token)
    api.create_repo(repo_id, repo_type="kernel")
    api.create_branch(repo_id, branch="v1", repo_type="kernel")
    for name in ("benchmark_old.py", "notes.md"):
        api.upload_file(path_or_fileobj=b"# left from an earlier release\n", path_in_repo=f"benchmarks/{name}",
                        repo_id=repo_id, repo_type="kernel", revision="v1")
    result = publish(relu, "--tag", "v1.0.0", "--repo-id", repo_id, env=env)
    assert result.returncode == 0, result.stderr
    assert "and 1 benchmark scripts" in result.stderr, result.stderr

    on_branch = {f.path for f in api.list_repo_tree(repo_id, path_in_repo="benchmarks", repo_type="kernel",
                                                   revision="v1.0.0", recursive=True)}
    assert on_branch == {"benchmarks/benchmark.py", "benchmarks/notes.md"}, on_branch
    # The reference client's own discovery (what `kernels benchmark ORG/NAME@v1` runs) on a download of the branch.
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from huggingface_hub import snapshot_download\n"
        "from kernels._internals.cli import benchmark\n"  # kernels 0.19.1's module for `kernels benchmark`
        f"path = Path(snapshot_download({repo_id!r}, repo_type='kernel', revision='v1'))\n"
        f"for script in benchmark.discover_benchmark_scripts({repo_id!r}, path):\n"
        "    print(script.name, script.read_bytes() == Path(sys.argv[1]).read_bytes())\n"
    )
    found = subprocess.run([sys.executable, "-c", script, str(relu / "benchmarks" / "benchmark.py")],
                           env=dict(os.environ, **env), capture_output=True, text=True, check=False)
    assert found.returncode == 0, found.stderr[-3000:]
    assert found.stdout.split() == ["benchmark.py", "True"], found.stdout

    # The tag holds this build (the benchmark scripts are not what it compares): a re-run is
    # "nothing left to do", not "other content than build/".
    again = publish(relu, "--tag", "v1.0.0", "--repo-id", repo_id, env=env)
    assert again.returncode == 1 and "with this build" in again.stderr, again.stderr


def test_versions_branches_and_ranges(fused, hub, tmp_path):
    env = hub_env(hub, tmp_path)
    repo = ["--repo-id", "kernels-community/fused"]
    assert publish(fused, "--tag", "v1.0.0", *repo, env=env).returncode == 0
    first = refs(hub, "kernels-community/fused")[1]["v1.0.0"]

    layers = fused / "torch-ext" / "fused" / "layers.py"
    layers.write_text(layers.read_text() + "\n# v1.1\n")
    dirty = kbuild("build", str(fused), check=True)
    assert dirty.returncode == 0
    refused = publish(fused, "--tag", "v1.1.0", *repo, env=env)
    assert refused.returncode == 1 and "uncommitted changes" in refused.stderr and "--allow-dirty" in refused.stderr
    git(fused, "commit", "-q", "-am", "v1.1")
    stale = publish(fused, "--tag", "v1.1.0", *repo, env=env)
    assert stale.returncode == 1 and "build/ does not match the source" in stale.stderr
    kbuild("build", str(fused), check=True)
    assert publish(fused, "--tag", "v1.1.0", *repo, env=env).returncode == 0
    again = publish(fused, "--tag", "v1.1.0", *repo, env=env)
    assert again.returncode == 1 and "tag v1.1.0 already exists" in again.stderr

    # A layer that loses torch.compile breaks v1's API: refused in v1, published as v2 (publish.api_diff).
    layers.write_text(layers.read_text().replace("can_torch_compile = True", "can_torch_compile = False"))
    git(fused, "commit", "-q", "-am", "no torch.compile")
    kbuild("build", str(fused), check=True)
    breaking = publish(fused, "--tag", "v1.2.0", *repo, env=env)
    assert breaking.returncode == 1, breaking.stderr
    assert "it breaks the API of v1.1.0" in breaking.stderr
    assert "  ~ layer RMSNormMLP: can_torch_compile was True, is now False\n" in breaking.stderr

    (fused / "build.toml").write_text((fused / "build.toml").read_text().replace("version = 1", "version = 2"))
    mismatch = publish(fused, "--tag", "v1.2.0", *repo, env=env)
    assert mismatch.returncode == 2 and "must equal build.toml's [general] version = 2" in mismatch.stderr
    git(fused, "commit", "-q", "-am", "v2")
    kbuild("build", str(fused), check=True)
    assert publish(fused, "--tag", "v2.0.0", *repo, env=env).returncode == 0

    branches, tags = refs(hub, "kernels-community/fused")
    assert set(tags) == {"v1.0.0", "v1.1.0", "v2.0.0"}
    assert tags["v1.0.0"] == first != tags["v1.1.0"] == branches["v1"]
    assert tags["v2.0.0"] == branches["v2"]

    # What the runtime resolves from these releases.
    script = (
        "import sys\n"
        "from kernel_builder.runtime import fetch_kernel\n"
        "for request, version in (('kernels-community/fused@>=1.0,<2.0', None), ('kernels-community/fused', 1),"
        " ('kernels-community/fused@v2.0.0', None)):\n"
        "    print(fetch_kernel(request, version, backend='cpu').sha)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=dict(os.environ, **hub_env(hub, tmp_path, token=None)),
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [tags["v1.1.0"], branches["v1"], tags["v2.0.0"]]

    # --force moves a tag; without it the tag stays.
    assert publish(fused, "--tag", "v2.0.0", *repo, env=env).returncode == 1
    moved = publish(fused, "--tag", "v2.0.0", "--force", *repo, env=env)
    assert moved.returncode == 0 and refs(hub, "kernels-community/fused")[1]["v2.0.0"] == branches["v2"]


def test_dry_run_prints_the_plan_and_touches_nothing(fused, hub, tmp_path):
    result = publish(fused, "--tag", "v1.0.0", "--repo-id", "me/fused", "--dry-run", "--json", env=hub_env(hub, tmp_path))
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert (plan["repo_id"], plan["branch"], plan["tag"]) == ("me/fused", "v1", "v1.0.0")
    assert plan["variants"] == ["torch-cpu"] and all(f["path"].startswith("build/torch-cpu/") for f in plan["files"])
    assert plan["size"] == sum(f["size"] for f in plan["files"]) > 0
    assert not [r for r in hub.requests if r.method != "GET"], "a dry run sends nothing"


def test_a_commit_that_touches_no_input_keeps_the_build_publishable(fused, hub, tmp_path):
    (fused / "README.md").write_text("# fused\n")
    git(fused, "add", "README.md")
    git(fused, "commit", "-q", "-m", "readme")
    rows = json.loads(kbuild("build", str(fused), "--json", check=True).stdout)["jobs"]
    assert [r["status"] for r in rows] == ["up-to-date"]
    result = publish(fused, "--tag", "v1.0.1", "--repo-id", "me/fused", "--dry-run", env=hub_env(hub, tmp_path))
    assert result.returncode == 0 and "would publish me/fused" in result.stdout, result.stderr


@pytest.mark.parametrize(("token", "message"), [
    (None, "no Hugging Face token: set HF_TOKEN or run `hf auth login`"),
    ("hf_wrong", "rejected the Hugging Face token (HTTP 401)"),
])
def test_a_missing_or_wrong_token_is_one_clear_line(fused, hub, tmp_path, token, message):
    env = hub_env(hub, tmp_path, token=token)
    result = publish(fused, "--tag", "v1.0.0", "--repo-id", "me/fused", env=env)
    assert result.returncode == 1 and message in result.stderr, result.stderr
    assert result.stderr.strip().count("\n") == 0 and "Traceback" not in result.stderr


def test_refuses_a_build_that_fails_its_checks_and_names_missing_settings(fused, hub, tmp_path):
    env = hub_env(hub, tmp_path)
    no_repo = publish(fused, "--tag", "v1.0.0", env=env)
    assert no_repo.returncode == 2 and "pass --repo-id ORG/NAME or set [general.hub] repo-id" in no_repo.stderr
    bad_tag = publish(fused, "--tag", "1.0", "--repo-id", "me/fused", env=env)
    assert bad_tag.returncode == 2 and "expected vMAJOR.MINOR.PATCH" in bad_tag.stderr
    layers = fused / "build" / "torch-cpu" / "layers.py"
    layers.write_text(layers.read_text() + "# tampered\n")
    tampered = publish(fused, "--tag", "v1.0.0", "--repo-id", "me/fused", env=env)
    assert tampered.returncode == 1 and "refusing to publish builds that fail `kbuild check`" in tampered.stderr
    assert "layers.py" in tampered.stderr


def test_refuses_a_variant_that_needs_a_newer_glibc_and_says_to_build_in_docker(relu, hub, tmp_path):
    """A library bound to a glibc symbol that kbuild cannot pin (pthread_create moved into
    libc at 2.34): publish names the symbol and the way out, the manylinux_2_28 image."""
    root = Path(shutil.copytree(relu, tmp_path / "relu", symlinks=True))
    folder = root / "build" / CPU_VARIANT
    [library] = folder.glob("*.abi3.so")
    source = tmp_path / "threads.c"
    source.write_text("#include <pthread.h>\nstatic void *run(void *a) { return a; }\n"
                      "int start(void) { pthread_t t; return pthread_create(&t, 0, run, 0); }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    metadata = json.loads((folder / "metadata.json").read_text())
    metadata["digest"]["files"] = hash_variant(folder)  # only the glibc finding is left to refuse
    (folder / "metadata.json").write_text(json.dumps(metadata, indent=2))

    result = publish(root, "--tag", "v1.0.0", "--repo-id", "me/relu", "--dry-run", env=hub_env(hub, tmp_path))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert f"{CPU_VARIANT}: abi: {library.name} needs GLIBC_2.34 (pthread_create) > 2.28: pthread_create cannot be " \
        "pinned to an older version; build with `kbuild build --runner docker` (the manylinux_2_28 image)" in result.stderr


def _set_symbols(folder: Path, symbols: dict) -> None:
    """symbols.json of a built variant replaced, and its digest with it (so the build passes its checks)."""
    (folder / "symbols.json").write_text(json.dumps(symbols, indent=2) + "\n")
    metadata = json.loads((folder / "metadata.json").read_text())
    metadata["digest"]["files"] = hash_variant(folder)
    (folder / "metadata.json").write_text(json.dumps(metadata, indent=2))


def test_a_release_that_removes_an_op_is_refused_with_the_diff_unless_allowed(shared_static, hub, tmp_path):
    """v1.1.0 has an op (reset_count) that the build of v1.2.0 no longer has: refused, with the
    diff, unless --allow-api-break (a new major breaking the API: test_versions_branches_and_ranges)."""
    root = Path(shutil.copytree(shared_static[0], tmp_path / "shared-static"))
    [folder] = (root / "build").iterdir()
    built = json.loads((folder / "symbols.json").read_text())
    assert built["ops"] == [{"name": "next_count", "schema": "next_count() -> int"}]
    env = hub_env(hub, tmp_path)
    repo = ["--repo-id", "me/shared-static", "--allow-dirty"]

    _set_symbols(folder, {**built, "ops": [*built["ops"], {"name": "reset_count", "schema": "reset_count() -> ()"}]})
    assert publish(root, "--tag", "v1.1.0", *repo, env=env).returncode == 0
    _set_symbols(folder, built)
    refused = publish(root, "--tag", "v1.2.0", *repo, env=env)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert (
        "kbuild: error: refusing to publish v1.2.0: it breaks the API of v1.1.0, the previous release of major 1:\n"
        "  - op reset_count() -> (): removed\n"
        "raise the major version (build.toml [general] version = 2, tag v2.0.0), or pass --allow-api-break\n"
    ) in refused.stderr
    assert "v1.2.0" not in refs(hub, "me/shared-static")[1]

    assert publish(root, "--tag", "v1.2.0", *repo, "--allow-api-break", env=env).returncode == 0
    assert set(refs(hub, "me/shared-static")[1]) == {"v1.1.0", "v1.2.0"}
