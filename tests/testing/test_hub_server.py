"""The test Hub (kernel_builder.testing.hub) against the real clients over HTTP.

In-process tests drive huggingface_hub's HfApi, hf_hub_download and snapshot_download; the
subprocess tests run the real `kernels` runtime and the server's own command line.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from hub_fixture import hub_env
from huggingface_hub import CommitOperationAdd, HfApi
from huggingface_hub.errors import (
    BadRequestError,
    EntryNotFoundError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import RepoFile, RepoFolder
from huggingface_hub.utils.sha import git_hash

from kernel_builder.runtime import hash_variant
from kernel_builder.testing import TEST_USER, HubServer
from kernel_builder.testing.hub import CLIENT_CLOSED
from kernel_builder.testing.hub_api import AUTH_REQUIRED, INVALID_TOKEN

pytestmark = pytest.mark.e2e

REPO_ROOT = Path(__file__).resolve().parents[2]
KERNEL = "kernels-community/hub-tiny"
SO_BYTES = b"\x7fELF\x02\x01\x01\0\0\0" + bytes(range(256)) * 8  # NUL bytes: binary, so LFS


# -- helpers -----------------------------------------------------------------------------
def client(hub: HubServer, token: str | bool | None = None) -> HfApi:
    """HfApi on the test hub; token None = the write token, False = anonymous."""
    return HfApi(endpoint=hub.endpoint, token=hub.write_token if token is None else token)


def kernel_folder(root: Path, *, value: int = 42, module_id: str = "_hub_tiny_cpu_0001") -> Path:
    """A kernel repo folder with one noarch variant, build/torch-cpu, that needs no compiling."""
    variant = root / "build" / "torch-cpu"
    variant.mkdir(parents=True, exist_ok=True)
    (variant / "__init__.py").write_text(f"from ._impl import double\n\nvalue = {value}\n")
    (variant / "_impl.py").write_text("def double(x):\n    return 2 * x\n")
    (variant / f"{module_id}.so").write_bytes(SO_BYTES)
    metadata = {
        "id": module_id, "name": "hub-tiny", "version": 1, "license": "Apache-2.0", "python-depends": [],
        "backend": {"type": "cpu"},
        "digest": {"algorithm": "sha256", "files": hash_variant(variant)},
        "provenance": {"kernel-builder": {"version": "0.1.0", "commit": "0" * 40, "dirty": False},
                       "kernel": {"commit": "1" * 40, "dirty": False}},
    }
    (variant / "metadata.json").write_text(json.dumps(metadata, indent=2))
    return root


def publish(hub: HubServer, src: Path, repo_id: str = KERNEL, branch: str = "v1") -> str:
    """Create the kernel repo and branch, upload `src` to it; returns the commit sha."""
    api = client(hub)
    api.create_repo(repo_id, repo_type="kernel", exist_ok=True)
    api.create_branch(repo_id, branch=branch, repo_type="kernel", exist_ok=True)
    return api.upload_folder(folder_path=src, repo_id=repo_id, repo_type="kernel", revision=branch,
                             commit_message="Upload kernel").oid


def count(hub: HubServer, method: str, fragment: str) -> int:
    return sum(1 for r in hub.requests if r.method == method and fragment in r.path)


def raw(hub: HubServer, method: str, path: str, body: bytes | None = None, token: str | None = None,
        headers: dict | None = None) -> tuple[int, dict, bytes]:
    """One request without huggingface_hub: (status, headers, body)."""
    request = urllib.request.Request(hub.endpoint + path, data=body, method=method, headers=headers or {})
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


# -- repos -------------------------------------------------------------------------------
def test_create_kernel_repo_and_exist_ok(hub):
    api = client(hub)
    url = api.create_repo(KERNEL, repo_type="kernel")
    assert url == f"{hub.endpoint}/kernels/{KERNEL}"
    assert (url.repo_type, url.repo_id) == ("kernel", KERNEL)

    with pytest.raises(HfHubHTTPError) as exists:
        api.create_repo(KERNEL, repo_type="kernel")
    assert exists.value.response.status_code == 409
    assert api.create_repo(KERNEL, repo_type="kernel", exist_ok=True) == url

    info = api.kernel_info(KERNEL)
    assert info.id == KERNEL and len(info.sha) == 40 and info.private is False
    refs = api.list_repo_refs(KERNEL, repo_type="kernel")
    assert [(b.name, b.ref, b.target_commit) for b in refs.branches] == [("main", "refs/heads/main", info.sha)]
    assert refs.tags == [] and refs.converts == []
    # A new repo starts like one on the Hub: main holds .gitattributes.
    assert [s["rfilename"] for s in info.siblings] == [".gitattributes"]  # KernelInfo keeps raw dicts

    # Other repo types, and a namespace-less name landing in the user's namespace.
    assert api.create_repo("plain", repo_type="model") == f"{hub.endpoint}/{TEST_USER}/plain"
    assert api.repo_info(f"{TEST_USER}/plain").id == f"{TEST_USER}/plain"
    assert api.create_repo("kernels-community/data", repo_type="dataset").repo_type == "dataset"
    with pytest.raises(RepositoryNotFoundError):
        api.repo_info("kernels-community/data", repo_type="model")
    with pytest.raises(RepositoryNotFoundError):
        api.kernel_info("kernels-community/missing")

    api.delete_repo("kernels-community/data", repo_type="dataset")
    with pytest.raises(RepositoryNotFoundError):
        api.dataset_info("kernels-community/data")


def test_upload_folder_is_one_commit_with_lfs_for_the_so(hub, tmp_path):
    api = client(hub)
    src = kernel_folder(tmp_path / "src")
    api.create_repo(KERNEL, repo_type="kernel")
    before = api.kernel_info(KERNEL).sha
    api.create_branch(KERNEL, branch="v1", repo_type="kernel")
    sha = api.upload_folder(folder_path=src, repo_id=KERNEL, repo_type="kernel", revision="v1",
                            commit_message="Upload kernel").oid

    commits = api.list_repo_commits(KERNEL, repo_type="kernel", revision="v1")
    assert [c.commit_id for c in commits] == [sha, before]
    assert commits[0].title == "Upload kernel"
    assert count(hub, "POST", "/commit/v1") == 1
    assert count(hub, "PUT", "/lfs-upload/") == 1  # one LFS object: the .so

    files = {f.path: f for f in api.list_repo_tree(KERNEL, repo_type="kernel", revision="v1", recursive=True)
             if isinstance(f, RepoFile)}
    so = files["build/torch-cpu/_hub_tiny_cpu_0001.so"]
    assert so.lfs is not None and so.lfs.size == len(SO_BYTES) == so.size
    assert files["build/torch-cpu/__init__.py"].lfs is None
    assert files["build/torch-cpu/metadata.json"].lfs is None
    # main did not move.
    assert api.kernel_info(KERNEL).sha == before


def test_reupload_of_identical_files_makes_no_commit_and_no_upload(hub, tmp_path):
    src = kernel_folder(tmp_path / "src")
    sha = publish(hub, src)
    commits, puts = count(hub, "POST", "/commit/"), count(hub, "PUT", "/lfs-upload/")

    again = client(hub).upload_folder(folder_path=src, repo_id=KERNEL, repo_type="kernel", revision="v1",
                                      commit_message="Upload kernel")
    assert again.oid == sha
    assert count(hub, "POST", "/commit/") == commits
    assert count(hub, "PUT", "/lfs-upload/") == puts

    # Same .so content in another repo: the server has the object, so the batch asks for nothing.
    publish(hub, src, repo_id="kernels-community/hub-tiny-copy")
    assert count(hub, "PUT", "/lfs-upload/") == puts


def test_preupload_decides_lfs_and_reports_existing_oids(hub, tmp_path):
    publish(hub, kernel_folder(tmp_path / "src"))
    files = [
        {"path": "small.py", "sample": base64.b64encode(b"print(1)\n").decode(), "size": 9},
        {"path": "big.txt", "sample": base64.b64encode(b"text").decode(), "size": 11 * 1024 * 1024},
        {"path": "weights.safetensors", "sample": base64.b64encode(b"text").decode(), "size": 4},
        {"path": "build/torch-cpu/_impl.py", "sample": "", "size": 30},
    ]
    status, _, body = raw(hub, "POST", f"/api/kernels/{KERNEL}/preupload/v1", json.dumps({"files": files}).encode(),
                          hub.write_token, {"Content-Type": "application/json"})
    assert status == 200
    answers = {f["path"]: f for f in json.loads(body)["files"]}
    assert {p: a["uploadMode"] for p, a in answers.items()} == {
        "small.py": "regular", "big.txt": "lfs", "weights.safetensors": "lfs",  # by .gitattributes
        "build/torch-cpu/_impl.py": "regular",
    }
    assert all(a["shouldIgnore"] is False for a in answers.values())
    assert "oid" not in answers["small.py"]
    impl = (tmp_path / "src/build/torch-cpu/_impl.py").read_bytes()
    assert answers["build/torch-cpu/_impl.py"]["oid"] == git_hash(impl)


def test_lfs_batch_upload_and_verify(hub):
    client(hub).create_repo(KERNEL, repo_type="kernel")
    data = os.urandom(70_000)
    oid = hashlib.sha256(data).hexdigest()
    batch_path = f"/kernels/{KERNEL}.git/info/lfs/objects/batch"
    lfs_headers = {"Content-Type": "application/vnd.git-lfs+json", "Accept": "application/vnd.git-lfs+json"}

    def batch(token: str | None = hub.write_token) -> tuple[int, dict]:
        body = json.dumps({"operation": "upload", "transfers": ["basic", "multipart"], "hash_algo": "sha256",
                           "objects": [{"oid": oid, "size": len(data)}], "ref": {"name": "main"}}).encode()
        status, _, answer = raw(hub, "POST", batch_path, body, token, lfs_headers)
        return status, json.loads(answer)

    assert batch(None)[0] == 401 and batch(hub.read_token)[0] == 403
    status, answer = batch()
    actions = answer["objects"][0]["actions"]
    upload, verify = actions["upload"]["href"], actions["verify"]["href"]
    assert status == 200 and upload.startswith(hub.endpoint) and verify.startswith(hub.endpoint)

    def put(url: str, payload: bytes) -> int:
        # Chunked, as a streaming client may send it; no token, as huggingface_hub sends none.
        import http.client

        parts = urlsplit(url)
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        chunks = (payload[i:i + 9999] for i in range(0, len(payload), 9999))
        connection.request("PUT", parts.path, body=chunks, encode_chunked=True)
        status = connection.getresponse().status
        connection.close()
        return status

    assert put(upload, data[:-1] + b"!") == 400  # content must match the oid
    assert put(upload.replace(oid, "0" * 64), data) == 403  # the URL is signed for one object
    verify_body = json.dumps({"oid": oid, "size": len(data)}).encode()
    assert raw(hub, "POST", verify[len(hub.endpoint):], verify_body, hub.write_token, lfs_headers)[0] == 404
    assert put(upload, data) == 200
    assert raw(hub, "POST", verify[len(hub.endpoint):], verify_body, hub.write_token, lfs_headers)[0] == 200
    # Now the server has it: no actions, nothing to upload.
    assert batch()[1]["objects"] == [{"oid": oid, "size": len(data)}]


# -- refs --------------------------------------------------------------------------------
def test_tags_and_branches(hub, tmp_path):
    api = client(hub)
    sha = publish(hub, kernel_folder(tmp_path / "src"))

    api.create_tag(KERNEL, tag="v1.0.0", revision="v1", repo_type="kernel", tag_message="first release")
    refs = api.list_repo_refs(KERNEL, repo_type="kernel")
    assert [(t.name, t.ref, t.target_commit) for t in refs.tags] == [("v1.0.0", "refs/tags/v1.0.0", sha)]
    with pytest.raises(HfHubHTTPError) as exists:
        api.create_tag(KERNEL, tag="v1.0.0", revision="main", repo_type="kernel")
    assert exists.value.response.status_code == 409
    api.create_tag(KERNEL, tag="v1.0.0", revision="main", repo_type="kernel", exist_ok=True)
    assert api.kernel_info(KERNEL, revision="v1.0.0").sha == sha
    assert api.kernel_info(KERNEL, revision="refs/tags/v1.0.0").sha == sha
    with pytest.raises(RevisionNotFoundError):
        api.create_tag(KERNEL, tag="v9.0.0", revision="no-such-branch", repo_type="kernel")

    api.delete_tag(KERNEL, tag="v1.0.0", repo_type="kernel")
    assert api.list_repo_refs(KERNEL, repo_type="kernel").tags == []
    with pytest.raises(RevisionNotFoundError):
        api.delete_tag(KERNEL, tag="v1.0.0", repo_type="kernel")

    with pytest.raises(HfHubHTTPError) as branch_exists:
        api.create_branch(KERNEL, branch="v1", repo_type="kernel")
    assert branch_exists.value.response.status_code == 409
    api.create_branch(KERNEL, branch="v1", repo_type="kernel", exist_ok=True)
    api.create_branch(KERNEL, branch="v2", revision=sha, repo_type="kernel")
    with pytest.raises(RevisionNotFoundError):
        api.create_branch(KERNEL, branch="v3", revision="no-such-branch", repo_type="kernel")
    with pytest.raises(BadRequestError):
        api.create_branch(KERNEL, branch="bad..name", repo_type="kernel")
    branches = {b.name: b.target_commit for b in api.list_repo_refs(KERNEL, repo_type="kernel").branches}
    assert branches["v2"] == sha == branches["v1"] and "v3" not in branches

    api.delete_branch(KERNEL, branch="v2", repo_type="kernel")
    assert "v2" not in {b.name for b in api.list_repo_refs(KERNEL, repo_type="kernel").branches}
    with pytest.raises(RevisionNotFoundError):
        api.delete_branch(KERNEL, branch="v2", repo_type="kernel")


def test_commit_rules(hub, tmp_path):
    api = client(hub)
    sha = publish(hub, kernel_folder(tmp_path / "src"))
    add = lambda path, data: CommitOperationAdd(path_in_repo=path, path_or_fileobj=data)

    # A branch that does not exist: the client creates branches first, the Hub refuses.
    with pytest.raises(RevisionNotFoundError):
        api.create_commit(KERNEL, [add("x.py", b"x = 1\n")], commit_message="m", repo_type="kernel", revision="v7")

    newer = api.create_commit(KERNEL, [add("x.py", b"x = 1\n")], commit_message="m", repo_type="kernel",
                              revision="v1", parent_commit=sha).oid
    with pytest.raises(HfHubHTTPError) as stale:
        api.create_commit(KERNEL, [add("y.py", b"y = 1\n")], commit_message="m", repo_type="kernel",
                          revision="v1", parent_commit=sha)
    assert stale.value.response.status_code == 412

    with pytest.raises(EntryNotFoundError):
        api.delete_file("nope.py", repo_id=KERNEL, repo_type="kernel", revision="v1")
    api.delete_file("x.py", repo_id=KERNEL, repo_type="kernel", revision="v1")
    api.delete_folder("build/torch-cpu", repo_id=KERNEL, repo_type="kernel", revision="v1")
    assert api.list_repo_files(KERNEL, repo_type="kernel", revision="v1") == [".gitattributes"]
    # History and old commits stay.
    assert "x.py" in api.list_repo_files(KERNEL, repo_type="kernel", revision=newer)

    # A pull request: its own ref, the branch does not move.
    pr = api.create_commit(KERNEL, [add("pr.py", b"pr = 1\n")], commit_message="pr", repo_type="kernel",
                           revision="main", create_pr=True)
    assert pr.pr_url.endswith("/discussions/1") and pr.pr_revision == "refs/pr/1"
    refs = api.list_repo_refs(KERNEL, repo_type="kernel", include_pull_requests=True)
    assert [(p.ref, p.target_commit) for p in refs.pull_requests] == [("refs/pr/1", pr.oid)]
    assert "pr.py" in api.list_repo_files(KERNEL, repo_type="kernel", revision="refs/pr/1")
    assert "pr.py" not in api.list_repo_files(KERNEL, repo_type="kernel", revision="main")


def test_commit_payloads_the_hub_refuses(hub, tmp_path):
    publish(hub, kernel_folder(tmp_path / "src"))

    def commit(*ops: dict) -> int:
        lines = [{"key": "header", "value": {"summary": "raw", "description": ""}}, *ops]
        body = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
        return raw(hub, "POST", f"/api/kernels/{KERNEL}/commit/v1", body, hub.write_token,
                   {"Content-Type": "application/x-ndjson"})[0]

    binary = base64.b64encode(SO_BYTES).decode()
    assert commit({"key": "file", "value": {"path": "a.so", "content": binary, "encoding": "base64"}}) == 400
    assert commit({"key": "lfsFile", "value": {"path": "b.so", "algo": "sha256", "oid": "ab" * 32, "size": 3}}) == 400
    assert commit({"key": "file", "value": {"path": "../up.py", "content": "", "encoding": "base64"}}) == 400
    assert commit({"key": "file", "value": {"path": "ok.py", "content": "eA==", "encoding": "base64"}}) == 200


# -- listings and downloads ----------------------------------------------------------------
def test_tree_listing(hub, tmp_path):
    api = client(hub)
    sha = publish(hub, kernel_folder(tmp_path / "src"))

    top = list(api.list_repo_tree(KERNEL, repo_type="kernel", revision="v1"))
    assert {(type(e).__name__, e.path) for e in top} == {("RepoFile", ".gitattributes"), ("RepoFolder", "build")}
    everything = {e.path for e in api.list_repo_tree(KERNEL, repo_type="kernel", revision="v1", recursive=True)}
    assert {"build", "build/torch-cpu", "build/torch-cpu/__init__.py", "build/torch-cpu/metadata.json"} <= everything

    # What kernels asks: the variant folders under build/, at a sha and at a full ref name.
    for revision in (sha, "refs/heads/v1"):
        variants = list(api.list_repo_tree(KERNEL, path_in_repo="build", repo_type="kernel", revision=revision))
        assert [(type(e), e.path) for e in variants] == [(RepoFolder, "build/torch-cpu")]
    status, _, body = raw(hub, "GET", f"/api/kernels/{KERNEL}/tree/refs%2Fheads%2Fv1/build?recursive=false")
    assert status == 200 and [e["path"] for e in json.loads(body)] == ["build/torch-cpu"]

    with pytest.raises(EntryNotFoundError):
        list(api.list_repo_tree(KERNEL, path_in_repo="nope", repo_type="kernel", revision="v1"))
    with pytest.raises(RevisionNotFoundError):
        list(api.list_repo_tree(KERNEL, repo_type="kernel", revision="v9"))

    expanded = {e.path: e for e in api.list_repo_tree(KERNEL, repo_type="kernel", revision="v1", expand=True)}
    assert expanded["build"].last_commit.oid == sha
    assert expanded[".gitattributes"].last_commit.title == "initial commit"

    # Pagination through Link headers.
    hub.app.page_size = 2
    paged = {e.path for e in api.list_repo_tree(KERNEL, repo_type="kernel", revision="v1", recursive=True)}
    assert paged == everything and count(hub, "GET", "cursor=") >= 2


def test_downloads_get_the_right_bytes(hub, tmp_path):
    api = client(hub)
    src = kernel_folder(tmp_path / "src")
    sha = publish(hub, src)
    so_name = "build/torch-cpu/_hub_tiny_cpu_0001.so"

    so = api.hf_hub_download(KERNEL, so_name, repo_type="kernel", revision="v1", cache_dir=tmp_path / "c1")
    assert Path(so).read_bytes() == SO_BYTES and f"/snapshots/{sha}/" in so
    meta = api.get_hf_file_metadata(url=f"{hub.endpoint}/kernels/{KERNEL}/resolve/v1/{so_name}")
    assert meta.commit_hash == sha and meta.size == len(SO_BYTES)
    assert meta.etag == hashlib.sha256(SO_BYTES).hexdigest()

    snap = Path(api.snapshot_download(KERNEL, repo_type="kernel", revision="v1", cache_dir=tmp_path / "c2",
                                      allow_patterns=["build/torch-cpu/*.py"]))
    got = sorted(str(p.relative_to(snap)) for p in snap.rglob("*") if p.is_file())
    assert got == ["build/torch-cpu/__init__.py", "build/torch-cpu/_impl.py"]
    assert (snap / "build/torch-cpu/_impl.py").read_bytes() == (src / "build/torch-cpu/_impl.py").read_bytes()

    with pytest.raises(EntryNotFoundError):
        api.hf_hub_download(KERNEL, "build/missing.py", repo_type="kernel", revision="v1", cache_dir=tmp_path / "c3")
    with pytest.raises(RevisionNotFoundError):
        api.hf_hub_download(KERNEL, so_name, repo_type="kernel", revision="v9", cache_dir=tmp_path / "c3")

    # Range requests, HEAD without a body, no compression.
    url = f"/kernels/{KERNEL}/resolve/v1/{so_name}"
    status, headers, body = raw(hub, "GET", url, headers={"Range": "bytes=2-9", "Accept-Encoding": "gzip"})
    assert status == 206 and body == SO_BYTES[2:10]
    assert headers["Content-Range"] == f"bytes 2-9/{len(SO_BYTES)}" and "Content-Encoding" not in headers
    status, headers, body = raw(hub, "HEAD", url)
    assert status == 200 and body == b"" and int(headers["Content-Length"]) == len(SO_BYTES)
    assert headers["X-Repo-Commit"] == sha and headers["X-Linked-Size"] == str(len(SO_BYTES))
    status, headers, _ = raw(hub, "HEAD", f"/kernels/{KERNEL}/resolve/v1/missing.py")
    assert status == 404 and headers["X-Error-Code"] == "EntryNotFound" and headers["X-Repo-Commit"] == sha
    assert raw(hub, "GET", url, headers={"Range": f"bytes={len(SO_BYTES)}-"})[0] == 416


def test_old_commit_keeps_serving_old_content(hub, tmp_path):
    api = client(hub)
    first = publish(hub, kernel_folder(tmp_path / "src", value=1))
    second = publish(hub, kernel_folder(tmp_path / "src", value=2))
    assert first != second

    def read(revision: str, cache: str) -> str:
        return Path(api.hf_hub_download(KERNEL, "build/torch-cpu/__init__.py", repo_type="kernel",
                                        revision=revision, cache_dir=tmp_path / cache)).read_text()

    assert "value = 2" in read("v1", "a")
    assert "value = 1" in read(first, "a")  # same cache: keyed by sha, never confused
    assert "value = 1" in read(first, "b")
    assert "value = 2" in read(second, "b")


# -- tokens and privacy --------------------------------------------------------------------
def test_writes_need_a_valid_write_token(hub, tmp_path):
    src = kernel_folder(tmp_path / "src")
    publish(hub, src)

    with pytest.raises(HfHubHTTPError) as anonymous:
        client(hub, False).create_repo("kernels-community/other", repo_type="kernel")
    assert anonymous.value.response.status_code == 401 and AUTH_REQUIRED in str(anonymous.value)

    with pytest.raises(HfHubHTTPError) as invalid:
        client(hub, "hf_not_a_token").create_repo("kernels-community/other", repo_type="kernel")
    assert invalid.value.response.status_code == 401 and INVALID_TOKEN in str(invalid.value)

    with pytest.raises(HfHubHTTPError) as read_only:
        client(hub, hub.read_token).create_repo("kernels-community/other", repo_type="kernel")
    assert read_only.value.response.status_code == 403

    for token, status in ((False, 401), ("hf_not_a_token", 401), (hub.read_token, 403)):
        api = client(hub, token)
        with pytest.raises(HfHubHTTPError) as upload:
            api.upload_file(path_or_fileobj=b"x = 1\n", path_in_repo="x.py", repo_id=KERNEL, repo_type="kernel")
        assert upload.value.response.status_code == status
        with pytest.raises(HfHubHTTPError) as branch:
            api.create_branch(KERNEL, branch="v9", repo_type="kernel")
        assert branch.value.response.status_code == status
        with pytest.raises(HfHubHTTPError) as tag:
            api.create_tag(KERNEL, tag="t", repo_type="kernel")
        assert tag.value.response.status_code == status

    # Reads of a public repo need no token; a bad token is refused even there, as on the Hub.
    assert client(hub, False).kernel_info(KERNEL).id == KERNEL
    assert client(hub, hub.read_token).kernel_info(KERNEL).id == KERNEL
    with pytest.raises(HfHubHTTPError) as bad_read:
        client(hub, "hf_not_a_token").kernel_info(KERNEL)
    assert bad_read.value.response.status_code == 401
    assert count(hub, "POST", "/commit/") == 1


def test_whoami_and_org_overview(hub):
    me = client(hub).whoami()
    assert me["name"] == TEST_USER and me["auth"]["accessToken"]["role"] == "write"
    assert "kernels-community" in {org["name"] for org in me["orgs"]}
    assert client(hub, hub.read_token).whoami()["auth"]["accessToken"]["role"] == "read"
    with pytest.raises(HfHubHTTPError, match="Invalid user token"):
        client(hub, "hf_not_a_token").whoami()

    assert client(hub, False).get_organization_overview("kernels-community").trustedKernelPublisher is True
    with pytest.raises(HfHubHTTPError) as missing:
        client(hub, False).get_organization_overview("somebody")
    assert missing.value.response.status_code == 404
    # An org that holds a repo exists, untrusted (kernels then says "not from a trusted
    # publisher"); the user's own namespace is no org; a server's trusted orgs are trusted.
    client(hub).create_repo("myorg/relu", repo_type="kernel")
    client(hub).create_repo("mine", repo_type="kernel")
    assert client(hub, False).get_organization_overview("myorg").trustedKernelPublisher is False
    with pytest.raises(HfHubHTTPError) as user:
        client(hub, False).get_organization_overview(TEST_USER)
    assert user.value.response.status_code == 404
    with HubServer(hub.root, trusted_orgs=("kernels-community", "myorg")).start() as trusting:
        assert client(trusting, False).get_organization_overview("myorg").trustedKernelPublisher is True
    assert raw(hub, "POST", "/api/validate-yaml", b'{"content": "", "repoType": "model"}')[0] == 200


def test_private_repo_is_invisible_without_a_token(hub, tmp_path):
    api = client(hub)
    api.create_repo("kernels-community/secret", repo_type="kernel", private=True)
    api.upload_file(path_or_fileobj=b"s = 1\n", path_in_repo="s.py", repo_id="kernels-community/secret",
                    repo_type="kernel")
    anonymous = client(hub, False)
    with pytest.raises(RepositoryNotFoundError) as hidden:
        anonymous.kernel_info("kernels-community/secret")
    assert hidden.value.response.status_code == 401
    with pytest.raises(RepositoryNotFoundError):
        anonymous.list_repo_refs("kernels-community/secret", repo_type="kernel")
    with pytest.raises(RepositoryNotFoundError):
        anonymous.hf_hub_download("kernels-community/secret", "s.py", repo_type="kernel", cache_dir=tmp_path / "c")
    # Missing and private look the same to an anonymous client.
    with pytest.raises(RepositoryNotFoundError) as missing:
        anonymous.kernel_info("kernels-community/missing")
    assert missing.value.response.status_code == 401

    reader = client(hub, hub.read_token)
    assert reader.kernel_info("kernels-community/secret").private is True
    assert Path(reader.hf_hub_download("kernels-community/secret", "s.py", repo_type="kernel",
                                       cache_dir=tmp_path / "c")).read_bytes() == b"s = 1\n"

    # Visibility changes (the client's update_repo_settings takes no kernel repos).
    api.create_repo("kernels-community/secret-model", private=True)
    with pytest.raises(RepositoryNotFoundError):
        anonymous.model_info("kernels-community/secret-model")
    api.update_repo_settings("kernels-community/secret-model", private=False)
    assert anonymous.model_info("kernels-community/secret-model").private is False


# -- persistence ---------------------------------------------------------------------------
def test_restart_on_the_same_root_keeps_everything(tmp_path):
    root = tmp_path / "hub"
    with HubServer(root).start() as hub:
        sha = publish(hub, kernel_folder(tmp_path / "src"))
        client(hub).create_tag(KERNEL, tag="v1.0.0", revision="v1", repo_type="kernel")
        client(hub).create_repo("kernels-community/secret", repo_type="kernel", private=True)

    with HubServer(root).start() as hub:
        api = client(hub)
        refs = api.list_repo_refs(KERNEL, repo_type="kernel")
        assert {b.name: b.target_commit for b in refs.branches}["v1"] == sha
        assert [(t.name, t.target_commit) for t in refs.tags] == [("v1.0.0", sha)]
        so = api.hf_hub_download(KERNEL, "build/torch-cpu/_hub_tiny_cpu_0001.so", repo_type="kernel",
                                 revision=sha, cache_dir=tmp_path / "cache")
        assert Path(so).read_bytes() == SO_BYTES
        with pytest.raises(RepositoryNotFoundError):
            client(hub, False).kernel_info("kernels-community/secret")
        # Nothing half-written is left behind in the store.
        assert not [p for p in root.rglob(".tmp-*")] and not [p for p in root.rglob(".upload-*")]


def test_a_client_killed_mid_request_leaves_nothing_half_written(hub, tmp_path):
    sha = publish(hub, kernel_folder(tmp_path / "src"))
    host, port = urlsplit(hub.endpoint).hostname, urlsplit(hub.endpoint).port

    def hang_up(method: str, path: str, sent: bytes, announced: int, token: str | None = None) -> None:
        with socket.create_connection((host, port), timeout=10) as conn:
            auth = f"Authorization: Bearer {token}\r\n" if token else ""
            conn.sendall(f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\n{auth}"
                         f"Content-Length: {announced}\r\n\r\n".encode() + sent)

    line = json.dumps({"key": "file", "value": {"path": "late.py", "content": "eA==", "encoding": "base64"}})
    header = json.dumps({"key": "header", "value": {"summary": "cut", "description": ""}})
    body = f"{header}\n{line}\n".encode()
    before = count(hub, "POST", "/commit/v1") + count(hub, "PUT", "/lfs-upload/")  # the publish's own
    hang_up("POST", f"/api/kernels/{KERNEL}/commit/v1", body[:-10], len(body), hub.write_token)

    data = os.urandom(50_000)
    oid = hashlib.sha256(data).hexdigest()
    hang_up("PUT", f"/lfs-upload/{oid}/{len(data)}/{hub.app._upload_signature(oid, len(data))}", data[:20_000],
            len(data))

    for _ in range(200):  # the server notices the hang-ups on its own threads
        if count(hub, "POST", "/commit/v1") + count(hub, "PUT", "/lfs-upload/") == before + 2:
            break
        time.sleep(0.05)
    assert [r.status for r in hub.requests[-2:]] == [CLIENT_CLOSED, CLIENT_CLOSED]
    assert not list((tmp_path / "hub").rglob(".upload-*")) and not list((tmp_path / "hub").rglob(".tmp-*"))
    assert hub.app.store.lfs_size(oid) is None
    api = client(hub)
    assert {b.name: b.target_commit for b in api.list_repo_refs(KERNEL, repo_type="kernel").branches}["v1"] == sha
    assert "late.py" not in api.list_repo_files(KERNEL, repo_type="kernel", revision="v1")


# -- subprocesses: the real kernels runtime and the command line ------------------------------
def test_kernels_get_kernel_loads_from_the_hub(hub, tmp_path):
    publish(hub, kernel_folder(tmp_path / "src", value=7, module_id="_hub_tiny_cpu_0002"))
    untrusted = kernel_folder(tmp_path / "src2", value=8, module_id="_hub_tiny_cpu_0003")
    publish(hub, untrusted, repo_id=f"{TEST_USER}/hub-tiny")
    script = textwrap.dedent(f"""
        import json, kernels
        k = kernels.get_kernel({KERNEL!r}, version=1, backend="cpu")
        try:
            kernels.get_kernel({TEST_USER + '/hub-tiny'!r}, version=1, backend="cpu")
            refused = None
        except ValueError as e:
            refused = str(e)
        u = kernels.get_kernel({TEST_USER + '/hub-tiny'!r}, version=1, backend="cpu", trust_remote_code=True)
        print(json.dumps({{"value": k.value, "double": k.double(21), "file": k.__file__,
                           "refused": refused, "untrusted": u.value}}))
    """)
    env = dict(os.environ, **hub_env(hub, tmp_path))
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded["value"] == 7 and loaded["double"] == 42 and loaded["untrusted"] == 8
    assert "trust" in loaded["refused"]
    assert loaded["file"].startswith(env["HF_HOME"])
    # The runtime's path: org overview, refs, the build/ tree at a sha, metadata, then the snapshot.
    paths = [r.path for r in hub.requests]
    assert "/api/organizations/kernels-community/overview" in paths
    assert f"/api/kernels/{KERNEL}/refs" in paths
    assert any(p.startswith(f"/api/kernels/{KERNEL}/tree/") and "/build" in p for p in paths)


def test_command_line_server_and_restart(tmp_path):
    root = tmp_path / "hub"

    def serve() -> tuple[subprocess.Popen, str]:
        process = subprocess.Popen(
            [sys.executable, "-m", "kernel_builder.testing.hub", "--root", str(root), "--token", "hf_cli:write"],
            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return process, process.stdout.readline().strip()

    process, endpoint = serve()
    try:
        assert endpoint.startswith("http://127.0.0.1:")
        api = HfApi(endpoint=endpoint, token="hf_cli")
        api.create_repo(KERNEL, repo_type="kernel")
        api.upload_file(path_or_fileobj=b"v = 1\n", path_in_repo="v.py", repo_id=KERNEL, repo_type="kernel")
        with pytest.raises(HfHubHTTPError) as refused:
            HfApi(endpoint=endpoint, token="hf_test_write_token").upload_file(
                path_or_fileobj=b"v = 2\n", path_in_repo="v.py", repo_id=KERNEL, repo_type="kernel")
        assert refused.value.response.status_code == 401  # only the --token tokens are accepted
    finally:
        process.terminate()
        process.wait(timeout=30)

    process, endpoint = serve()
    try:
        files = HfApi(endpoint=endpoint, token=False).list_repo_files(KERNEL, repo_type="kernel")
        assert files == [".gitattributes", "v.py"]
    finally:
        process.terminate()
        process.wait(timeout=30)
