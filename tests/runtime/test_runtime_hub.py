"""get_kernel from the Hub: version requests and their resolution, trust, the offline
cache, and (end to end, against the local Hub test server) branches, tags, ranges,
offline loads, tampered caches and single-variant downloads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from hub_fixture import hub_env as hub_vars

from kernel_builder.errors import KbuildError
from kernel_builder.runtime import hash_variant
from kernel_builder.runtime.loader import KernelLoadError
from kernel_builder.runtime.trust import (
    UntrustedKernelError,
    check_trust,
    trusted_namespaces,
)
from kernel_builder.runtime.versions import (
    KernelVersionError,
    Refs,
    parse_request,
    resolve,
)
from kernel_builder.testing import HubServer

REPO = Path(__file__).resolve().parents[2]
SHA = {name: f"{i:x}" * 40 for i, name in enumerate(["a", "b", "c", "d", "e", "f", "g"], start=10)}


# -- requests ------------------------------------------------------------------------------
def test_parse_request_forms():
    assert parse_request("org/k", version=2) == parse_request("org/k", version="2")
    r = parse_request("org/k", version=2)
    assert (r.repo_id, r.kind, r.value) == ("org/k", "version", 2)
    r = parse_request("org/k@v2.1.0")
    assert (r.kind, r.value) == ("revision", "v2.1.0")
    r = parse_request("org/k@>=2.0,<3.0")
    assert (r.kind, r.value) == ("range", ">=2.0,<3.0")
    r = parse_request("org/k", version="~=1.1")
    assert (r.kind, r.value) == ("range", "~=1.1")
    r = parse_request("org/k", revision="main")
    assert (r.kind, r.value) == ("revision", "main")


@pytest.mark.parametrize(
    "args, kwargs, words",
    [
        (("org/k",), {}, ["say which version", "version=N"]),
        (("org/k@v1.0.0",), {"version": 1}, ["one way only", "'@'", "version="]),
        (("org/k",), {"version": 1, "revision": "main"}, ["one way only"]),
        (("not-a-repo",), {"version": 1}, ["invalid kernel repo id", "org/name"]),
        (("org/k@",), {}, ["nothing after '@'"]),
        (("org/k",), {"version": "latest"}, ["neither a major version nor a range"]),
        (("org/k",), {"version": True}, ["must be an int"]),
    ],
)
def test_parse_request_errors_are_one_line(args, kwargs, words):
    with pytest.raises(KernelVersionError) as e:
        parse_request(*args, **kwargs)
    assert "\n" not in e.value.message and isinstance(e.value, KbuildError)
    for w in words:
        assert w in e.value.message


REFS = Refs(
    branches={"main": SHA["a"], "v1": SHA["b"], "v2": SHA["c"]},
    tags={"v1.0.0": SHA["d"], "v1.9.0": SHA["e"], "v1.10.0": SHA["f"], "v2.0.0rc1": SHA["g"], "nightly": SHA["a"]},
)


def test_resolve_version_branch_tag_and_sha():
    r = resolve(parse_request("o/k", version=1), REFS)
    assert (r.ref, r.sha) == ("v1", SHA["b"])
    r = resolve(parse_request("o/k", version=2), REFS)
    assert (r.ref, r.sha) == ("v2", SHA["c"])
    r = resolve(parse_request("o/k@v1.9.0"), REFS)
    assert (r.ref, r.sha) == ("v1.9.0", SHA["e"])
    r = resolve(parse_request("o/k", revision="refs/heads/main"), REFS)
    assert (r.ref, r.sha) == ("main", SHA["a"])
    r = resolve(parse_request("o/k", revision="9" * 40), REFS)
    assert r.sha == "9" * 40


def test_resolve_range_takes_the_highest_release_numerically():
    r = resolve(parse_request("o/k@>=1.0,<2.0"), REFS)
    assert (r.ref, r.sha) == ("v1.10.0", SHA["f"])  # 1.10 > 1.9: versions, not strings
    r = resolve(parse_request("o/k@<1.5"), REFS)
    assert r.ref == "v1.0.0"
    # A pre-release counts only when the range names one, as pip does.
    with pytest.raises(KernelVersionError):
        resolve(parse_request("o/k@>=2.0"), REFS)
    assert resolve(parse_request("o/k@>=2.0rc1"), REFS).ref == "v2.0.0rc1"


def test_resolve_errors_list_what_exists():
    with pytest.raises(KernelVersionError) as e:
        resolve(parse_request("o/k", version=3), REFS)
    assert e.value.message.startswith("o/k has no branch v3 (version=3)")
    assert "version branches: v1, v2" in e.value.message and "main" in e.value.message

    with pytest.raises(KernelVersionError) as e:
        resolve(parse_request("o/k@>=3.0,<4.0"), REFS)
    assert "no release tag of o/k matches '>=3.0,<4.0'" in e.value.message
    assert "v1.0.0, v1.9.0, v1.10.0, v2.0.0rc1" in e.value.message

    with pytest.raises(KernelVersionError) as e:
        resolve(parse_request("o/k@v9.9.9"), REFS)
    assert "no tag or branch 'v9.9.9'" in e.value.message and "v1.10.0" in e.value.message

    with pytest.raises(KernelVersionError) as e:
        resolve(parse_request("o/k@>=one"), REFS)
    assert "not a valid version range" in e.value.message


# -- trust ---------------------------------------------------------------------------------
@pytest.fixture
def clean_trust_env(monkeypatch, tmp_path):
    monkeypatch.delenv("KBUILD_TRUSTED_NAMESPACES", raising=False)
    monkeypatch.setenv("KBUILD_CONFIG", str(tmp_path / "no-config.toml"))
    return tmp_path


def test_trust_default_env_config_and_opt_in(clean_trust_env, monkeypatch):
    assert trusted_namespaces() == {"kernels-community"}
    check_trust("kernels-community/relu")
    check_trust("Kernels-Community/relu")  # the Hub's names are case-insensitive

    with pytest.raises(UntrustedKernelError) as e:
        check_trust("acme/relu")
    assert e.value.message.startswith(
        "refusing to load acme/relu: namespace 'acme' is not trusted; pass trust_remote_code=True "
        "or add it to KBUILD_TRUSTED_NAMESPACES"
    )
    check_trust("acme/relu", True)
    check_trust("acme/relu", ["acme"])
    check_trust("acme/relu", ["acme/relu"])
    with pytest.raises(UntrustedKernelError):
        check_trust("acme/relu", ["acme/other"])
    with pytest.raises(KernelLoadError, match="got the string"):
        check_trust("acme/relu", "acme")

    monkeypatch.setenv("KBUILD_TRUSTED_NAMESPACES", "acme, other-org")
    check_trust("acme/relu")
    assert trusted_namespaces() == {"kernels-community", "acme", "other-org"}

    monkeypatch.delenv("KBUILD_TRUSTED_NAMESPACES")
    config = clean_trust_env / "config.toml"
    config.write_text('[runtime]\ntrusted-namespaces = ["Acme"]\n')
    monkeypatch.setenv("KBUILD_CONFIG", str(config))
    check_trust("acme/relu")

    config.write_text("[runtime]\ntrusted-namespaces = 'acme'\n")
    with pytest.raises(KbuildError, match="must be a list of strings"):
        check_trust("acme/relu")
    config.write_text("[runtime\n")
    with pytest.raises(KbuildError, match="not valid TOML"):
        check_trust("acme/relu")


# -- the cache, without a server -----------------------------------------------------------
def test_hub_cache_dir_agrees_with_huggingface_hub(tmp_path):
    code = (
        "import json; from kernel_builder.runtime.hub import hub_cache_dir; "
        "from huggingface_hub import constants; print(json.dumps([str(hub_cache_dir()), constants.HF_HUB_CACHE]))"
    )
    base = {k: v for k, v in os.environ.items() if k not in ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME")}
    for extra in (
        {"HF_HOME": str(tmp_path / "home")},
        {"XDG_CACHE_HOME": str(tmp_path / "xdg")},
        {"HF_HOME": str(tmp_path / "home"), "HUGGINGFACE_HUB_CACHE": str(tmp_path / "legacy")},
        {"HF_HOME": str(tmp_path / "home"), "HF_HUB_CACHE": str(tmp_path / "hub")},
    ):
        out = subprocess.run([sys.executable, "-c", code], env=base | extra, cwd=REPO, capture_output=True, text=True, check=True)
        ours, theirs = json.loads(out.stdout)
        assert ours == theirs, extra


def _noarch_variant(folder: Path, module_id: str, value: int) -> None:
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("from ._impl import value\n")
    (folder / "_impl.py").write_text(f"value = {value}\n")
    metadata = {
        "id": module_id, "name": "offline-kernel", "version": 1, "license": "Apache-2.0", "python-depends": [],
        "backend": {"type": "cpu"}, "digest": {"algorithm": "sha256", "files": hash_variant(folder)},
        "provenance": {"kernel-builder": {"version": "0"}, "kernel": {}},
    }
    (folder / "metadata.json").write_text(json.dumps(metadata))


def test_offline_load_from_the_cache_record_imports_no_hub_client(tmp_path):
    """What an online load leaves behind (snapshot + kbuild.json) is enough offline, and the
    offline path never imports huggingface_hub."""
    cache = tmp_path / "hub"
    repo = cache / "kernels--kernels-community--offline-kernel"
    sha = "1" * 40
    _noarch_variant(repo / "snapshots" / sha / "build" / "torch-cpu", "_offline_kernel_cpu_0a1b2c3", 5)
    state = {
        "format": 1,
        "refs": {"branches": {"v1": sha}, "tags": {"v1.0.0": sha}},
        "variants": {sha: ["torch-cpu", "torch-cuda"]},
        "complete": {sha: ["torch-cpu"]},
    }
    (repo / "kbuild.json").write_text(json.dumps(state))
    code = textwrap.dedent(
        """
        import json, sys
        from kernel_builder.runtime import get_kernel, KernelLoadError
        out = {"v1": get_kernel("kernels-community/offline-kernel", version=1, backend="cpu").value}
        out["range"] = get_kernel("kernels-community/offline-kernel@>=1,<2", backend="cpu").value
        for spec, kw in (("kernels-community/offline-kernel", {"version": 2}),
                         ("kernels-community/other", {"version": 1})):
            try:
                get_kernel(spec, backend="cpu", **kw)
            except KernelLoadError as e:
                out[spec + str(kw)] = e.message
        out["hf"] = "huggingface_hub" in sys.modules
        print(json.dumps(out))
        """
    )
    env = dict(os.environ, HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1")
    result = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.splitlines()[-1])
    assert out["v1"] == 5 and out["range"] == 5 and out["hf"] is False
    missing_branch = out["kernels-community/offline-kernel{'version': 2}"]
    assert "cannot be resolved offline" in missing_branch and "no branch v2" in missing_branch
    assert "Load it once online" in out["kernels-community/other{'version': 1}"]


# == end to end, against the local Hub test server ==========================================
# Everything that talks to the Hub runs in a subprocess with the server's environment:
# huggingface_hub reads HF_ENDPOINT and HF_HUB_DISABLE_XET at import time, and each test
# wants its own HF_HOME (the client caches by sha forever).

PUBLISH = textwrap.dedent(
    """
    import json, sys
    from huggingface_hub import HfApi
    job = json.loads(sys.argv[1])
    api = HfApi()
    repo, kind = job["repo_id"], job["repo_type"]
    api.create_repo(repo, repo_type=kind, exist_ok=True)
    commits = {}
    for release in job["releases"]:
        api.create_branch(repo, branch=release["branch"], repo_type=kind, exist_ok=True)
        info = api.upload_folder(repo_id=repo, repo_type=kind, folder_path=release["folder"],
                                 revision=release["branch"], commit_message=release["label"],
                                 delete_patterns=["build/**"])
        commits[release["label"]] = info.oid
        if release.get("tag"):
            api.create_tag(repo, tag=release["tag"], revision=info.oid, repo_type=kind)
    print(json.dumps(commits))
    """
)


def client_env(server, tmp_path: Path, **extra: str) -> dict[str, str]:
    """os.environ plus the test Hub's client variables (a fresh HF_HOME each call), without
    any trust configuration of the person running the tests."""
    env = {k: v for k, v in os.environ.items() if k not in ("KBUILD_TRUSTED_NAMESPACES", "TRANSFORMERS_OFFLINE")}
    env.update(hub_vars(server, tmp_path), KBUILD_CONFIG=str(tmp_path / "no-kbuild-config.toml"))
    # These test kernels are unsigned; signatures are tested in test_signed_hub_load.py (each
    # check would also look for Sigstore's trust root online, once per client process).
    env.update(KBUILD_SIGNATURES="off")
    env.update(extra)
    return env


def make_noarch_kernel(root: Path, name: str, value: int, variants=("torch-cpu", "torch-cuda")) -> Path:
    """A kernel repo folder whose build/<variant>/ are pure-Python packages with metadata
    and digests as kbuild writes them; `value` tells the builds apart after loading. Each
    variant holds a small `data.bin`, which the Hub stores in LFS."""
    for variant in variants:
        backend = variant.removeprefix("torch-")
        module_id = f"_{name.replace('-', '_')}_{backend}_{value:07d}"
        folder = root / "build" / variant
        folder.mkdir(parents=True)
        (folder / "__init__.py").write_text("from ._impl import value, double\n\n__all__ = ['value', 'double']\n")
        (folder / "_impl.py").write_text(f"value = {value}\n\n\ndef double(x):\n    return 2 * x\n")
        (folder / "layers.py").write_text("__all__: list[str] = []\n")
        (folder / "data.bin").write_bytes(bytes([value % 256]) * 2048)
        metadata = {
            "id": module_id, "name": name, "version": value // 10, "license": "Apache-2.0", "python-depends": [],
            "backend": {"type": backend}, "digest": {"algorithm": "sha256", "files": hash_variant(folder)},
            "provenance": {"kernel-builder": {"version": "0.1.0", "commit": "0" * 40, "dirty": False},
                           "kernel": {"commit": "1" * 40, "dirty": False}},
        }
        (folder / "metadata.json").write_text(json.dumps(metadata, indent=2))
    return root


def publish(server, workdir: Path, repo_id: str, releases: list[tuple[str, str, str | None, int]],
            repo_type: str = "kernel", **kw) -> dict[str, str]:
    """Publish (label, branch, tag or None, value) releases in order with the real client;
    returns label -> commit sha."""
    jobs = []
    for label, branch, tag, value in releases:
        folder = make_noarch_kernel(workdir / f"{repo_id.replace('/', '--')}-{label}", repo_id.split("/")[1], value, **kw)
        jobs.append({"label": label, "branch": branch, "tag": tag, "folder": str(folder)})
    env = client_env(server, workdir)
    result = subprocess.run([sys.executable, "-c", PUBLISH, json.dumps({"repo_id": repo_id, "repo_type": repo_type, "releases": jobs})],
                            env=env, cwd=REPO, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


# A client script: runs each get_kernel call and prints one JSON line; a KernelLoadError
# becomes {"error": message, "type": class name}, as a user would see it.
CLIENT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    steps = json.loads(sys.argv[1])
    from kernel_builder.runtime import get_kernel, KernelLoadError
    out = []
    for spec, kwargs in steps:
        try:
            m = get_kernel(spec, **kwargs)
            folder = Path(m.__file__).parent  # <cache>/<repo>/snapshots/<sha>/build/<variant>
            out.append({"value": m.value, "sha": folder.parents[1].name, "variant": folder.name,
                        "path": str(folder), "module": m.__name__})
        except KernelLoadError as e:
            out.append({"error": e.message, "type": type(e).__name__})
    out.append({"hf_imported": "huggingface_hub" in sys.modules})
    print(json.dumps(out))
    """
)


def run_client(env: dict, *steps: tuple[str, dict]) -> list[dict]:
    result = subprocess.run([sys.executable, "-c", CLIENT, json.dumps(steps)], env=env, cwd=REPO,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


RELU = "kernels-community/relu"
# (label, branch, tag, value): v1 gets two releases and then an untagged commit, so its head
# is not the newest v1 tag.
RELEASES = [("v1.0.0", "v1", "v1.0.0", 10), ("v1.1.0", "v1", "v1.1.0", 11), ("v1-head", "v1", None, 12), ("v2.0.0", "v2", "v2.0.0", 20)]


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """One test Hub for the module, holding relu's releases, the same kernel under an
    untrusted namespace, and a kernel with only a CUDA build."""
    root = tmp_path_factory.mktemp("published")
    with HubServer(root / "hub") as server:
        commits = publish(server, root, RELU, RELEASES)
        acme = publish(server, root, "acme/relu", [("v1.0.0", "v1", "v1.0.0", 30)])
        publish(server, root, "kernels-community/cuda-only", [("v1.0.0", "v1", "v1.0.0", 40)], variants=("torch-cuda",))
        as_model = publish(server, root, "kernels-community/model-typed", [("v1.0.0", "v1", "v1.0.0", 60)], repo_type="model")
        yield SimpleNamespace(server=server, commits=commits, acme=acme["v1.0.0"], as_model=as_model["v1.0.0"])


def requests_during(server, fn):
    before = len(server.requests)
    result = fn()
    return result, server.requests[before:]


@pytest.mark.e2e
def test_versions_tags_ranges_and_revisions(published, tmp_path):
    c = published.commits
    out = run_client(
        client_env(published.server, tmp_path),
        (f"{RELU}@>=1.0,<2.0", {}),               # the highest v1 tag, not the v1 head
        (RELU, {"version": 1}),                    # branch v1's head
        (f"{RELU}@v2.0.0", {}),                    # a tag
        (RELU, {"revision": c["v1.0.0"]}),         # a commit
        (RELU, {"version": "~=1.0.0"}),            # a range through version=
        (RELU, {"revision": "v2"}),                # a branch by name
    )
    got = [(r["value"], r["sha"], r["variant"]) for r in out[:-1]]
    assert got == [
        (11, c["v1.1.0"], "torch-cpu"),
        (12, c["v1-head"], "torch-cpu"),
        (20, c["v2.0.0"], "torch-cpu"),
        (10, c["v1.0.0"], "torch-cpu"),
        (10, c["v1.0.0"], "torch-cpu"),
        (20, c["v2.0.0"], "torch-cpu"),
    ]


@pytest.mark.e2e
def test_one_line_errors(published, tmp_path):
    out = run_client(
        client_env(published.server, tmp_path),
        ("kernels-community/no-such-kernel", {"version": 1}),
        (RELU, {"version": 3}),
        (f"{RELU}@>=3.0,<4.0", {}),
        (f"{RELU}@v9.9.9", {}),
        ("kernels-community/cuda-only", {"version": 1}),
    )
    errors = [(r["type"], r["error"]) for r in out[:-1]]
    assert all("\n" not in message for _, message in errors)
    assert errors[0][0] == "KernelNotFoundError"
    assert errors[0][1].startswith("kernel repo kernels-community/no-such-kernel was not found on http://127.0.0.1:")
    assert errors[1] == ("KernelVersionError", f"{RELU} has no branch v3 (version=3); version branches: v1, v2; all branches: main, v1, v2")
    assert errors[2] == ("KernelVersionError", f"no release tag of {RELU} matches '>=3.0,<4.0'; tags: v1.0.0, v1.1.0, v2.0.0")
    assert errors[3][0] == "KernelVersionError" and "no tag or branch 'v9.9.9'" in errors[3][1]
    assert errors[4][0] == "KernelLoadError"
    assert errors[4][1].startswith("No build variant of kernels-community/cuda-only@v1 (")
    assert "torch-cuda was rejected: pure-Python build for cuda, but the backend here is cpu" in errors[4][1]


@pytest.mark.e2e
def test_cached_loads_online_and_offline_and_only_one_variant_is_downloaded(published, tmp_path):
    server, c = published.server, published.commits
    env = client_env(server, tmp_path)
    steps = [(RELU, {"version": 1}), (f"{RELU}@>=1.0,<2.0", {}), (f"{RELU}@v2.0.0", {})]
    cold = run_client(env, *steps)
    assert [r["value"] for r in cold[:-1]] == [12, 11, 20]

    # Only build/torch-cpu was fetched: the snapshots hold nothing else, and every blob is one of its files.
    repo_cache = Path(env["HF_HUB_CACHE"]) / "kernels--kernels-community--relu"
    linked = set()
    for sha in (c["v1-head"], c["v1.1.0"], c["v2.0.0"]):
        snapshot = repo_cache / "snapshots" / sha
        files = [p for p in snapshot.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
        assert sorted(p.relative_to(snapshot).as_posix() for p in files) == [
            f"build/torch-cpu/{n}" for n in ("__init__.py", "_impl.py", "data.bin", "layers.py", "metadata.json")
        ]
        linked |= {p.resolve().name for p in files}
    assert {b.name for b in (repo_cache / "blobs").iterdir()} == linked
    # kernels' own offline lookup reads refs/v1; huggingface_hub's format is the commit alone.
    assert (repo_cache / "refs" / "v1").read_text() == c["v1-head"]

    # Warm and online: one request per load (the ref listing), nothing downloaded.
    warm, requests = requests_during(server, lambda: run_client(env, *steps))
    assert [r["value"] for r in warm[:-1]] == [12, 11, 20]
    assert [(r.method, r.path) for r in requests] == [("GET", "/api/kernels/kernels-community/relu/refs")] * 3

    # The Hub unreachable without HF_HUB_OFFLINE: the cache's record is used, as huggingface_hub does.
    unreachable = run_client(dict(env, HF_ENDPOINT="http://127.0.0.1:9"), (RELU, {"version": 1}))
    assert unreachable[0]["value"] == 12

    # A commit is immutable: once its variant is complete, loading it asks the Hub nothing.
    by_commit, requests = requests_during(server, lambda: run_client(env, (RELU, {"revision": c["v1-head"]})))
    assert by_commit[0]["value"] == 12 and by_commit[-1] == {"hf_imported": False} and requests == []

    # Offline, against a Hub that is not even there: same commits, no request, and
    # huggingface_hub is never imported.
    offline_env = dict(env, HF_HUB_OFFLINE="1", HF_ENDPOINT="http://127.0.0.1:9")
    offline, requests = requests_during(server, lambda: run_client(offline_env, *steps, (f"{RELU}@v1.0.0", {})))
    assert [(r.get("value"), r.get("sha")) for r in offline[:3]] == [(12, c["v1-head"]), (11, c["v1.1.0"]), (20, c["v2.0.0"])]
    # v1.0.0 is known from the last ref listing, but was never downloaded.
    assert offline[3]["type"] == "KernelOfflineError"
    assert offline[3]["error"].startswith(f"{RELU}@v1.0.0 ({c['v1.0.0'][:7]}) is not in the cache")
    assert offline[-1] == {"hf_imported": False} and requests == []


# A warm load in the user's default setup (no KBUILD_SIGNATURES): what it imported, and the
# warnings it gave. Each mode is a fresh process, as a program starting would be.
WARM_CLIENT = textwrap.dedent(
    """
    import json, sys, warnings
    from kernel_builder.runtime import get_kernel, KernelLoadError
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = {"value": get_kernel("kernels-community/relu", version=1).value}
        except KernelLoadError as e:
            out = {"error": e.message, "type": type(e).__name__}
    out["imported"] = sorted(m for m in ("huggingface_hub.hf_api", "sigstore") if m in sys.modules)
    out["warnings"] = [str(w.message) for w in caught]
    print(json.dumps(out))
    """
)


@pytest.mark.e2e
def test_a_warm_load_by_version_imports_only_what_it_needs(published, tmp_path):
    """The warm online path makes kernels' one ref listing through huggingface_hub's HTTP layer
    (not hf_api), and an unsigned variant is judged without sigstore or its trust root: both
    imports cost more than the rest of the load (benchmarks/bench_get_kernel.py)."""
    env = client_env(published.server, tmp_path)
    del env["KBUILD_SIGNATURES"]  # the default, warn

    def warm(**extra):
        result = subprocess.run([sys.executable, "-c", WARM_CLIENT], env=dict(env, **extra), cwd=REPO,
                                capture_output=True, text=True, check=False)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout.strip().splitlines()[-1])

    assert warm()["value"] == 12  # cold: downloads, so imports hf_api
    out, requests = requests_during(published.server, warm)
    assert out["value"] == 12 and out["imported"] == []
    assert [(r.method, r.path) for r in requests] == [("GET", "/api/kernels/kernels-community/relu/refs")]
    assert any("is unsigned (loading it anyway: KBUILD_SIGNATURES=warn)" in w for w in out["warnings"]), out

    refused = warm(KBUILD_SIGNATURES="require")
    assert refused["type"] == "SignatureRefusedError" and "is unsigned; refused" in refused["error"], refused
    assert refused["imported"] == []

    # HF_TOKEN goes into the listing's headers through huggingface_hub, as with HfApi.
    assert warm(HF_TOKEN="hf_test_token")["value"] == 12


@pytest.mark.e2e
def test_a_file_changed_in_the_cache_is_refused_by_name(published, tmp_path):
    env = client_env(published.server, tmp_path)
    first = run_client(env, (RELU, {"version": 1}))[0]
    assert first["value"] == 12
    # An edit through the snapshot link changes the cached blob itself.
    impl = Path(first["path"]) / "_impl.py"
    impl.write_text(impl.read_text().replace("12", "666"))

    for e in (env, dict(env, HF_HUB_OFFLINE="1")):
        refused = run_client(e, (RELU, {"version": 1}))[0]
        assert refused["type"] == "DigestMismatchError"
        assert refused["error"].startswith(f"refusing to load {RELU}@v1: files in the cached variant ")
        assert "_impl.py: hash mismatch" in refused["error"] and "Nothing was imported" in refused["error"]


@pytest.mark.e2e
def test_untrusted_namespaces_are_refused_before_any_request(published, tmp_path):
    server = published.server
    env = client_env(server, tmp_path)
    out, requests = requests_during(server, lambda: run_client(env, ("acme/relu", {"version": 1})))
    assert out[0] == {
        "type": "UntrustedKernelError",
        "error": "refusing to load acme/relu: namespace 'acme' is not trusted; pass trust_remote_code=True or add it "
        f"to KBUILD_TRUSTED_NAMESPACES (or to trusted-namespaces in {tmp_path / 'no-kbuild-config.toml'})",
    }
    assert requests == [] and not (Path(env["HF_HUB_CACHE"]) / "kernels--acme--relu").exists()

    opted_in = run_client(env, ("acme/relu", {"version": 1, "trust_remote_code": True}),
                          ("acme/relu@v1.0.0", {"trust_remote_code": ["acme/relu"]}))
    assert [(r["value"], r["sha"]) for r in opted_in[:2]] == [(30, published.acme)] * 2
    allowed = run_client(client_env(server, tmp_path, KBUILD_TRUSTED_NAMESPACES="other,acme"), ("acme/relu", {"version": 1}))
    assert allowed[0]["value"] == 30


@pytest.mark.e2e
def test_a_repo_of_model_type_loads_too(published, tmp_path):
    """Kernels published before the Hub had kernel repos are model repos: refs are looked up
    as a kernel first, then as a model, and the cache folder follows the type."""
    env = client_env(published.server, tmp_path)
    out = run_client(env, ("kernels-community/model-typed", {"version": 1}))
    assert (out[0]["value"], out[0]["sha"]) == (60, published.as_model)
    assert "/models--kernels-community--model-typed/snapshots/" in out[0]["path"]
    offline = run_client(dict(env, HF_HUB_OFFLINE="1"), ("kernels-community/model-typed@>=1.0", {}))
    assert offline[0]["value"] == 60
