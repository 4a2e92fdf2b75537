"""The test Hub refuses what the Hub refuses, over real HTTP, and stays healthy afterwards:
repo ids by huggingface_hub's rule (so no id becomes a folder outside the server's --root),
invalid committed paths (NUL, '.git', non-UTF-8), and malformed bodies and framing, each
with a 400 rather than a 500, an empty reply or a corrupted branch (issue 14)."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest
from huggingface_hub import HfApi

from test_hub_server import KERNEL, kernel_folder, publish, raw

pytestmark = pytest.mark.e2e

NDJSON = {"Content-Type": "application/x-ndjson"}
LFS_JSON = {"Content-Type": "application/vnd.git-lfs+json"}
HEADER = {"key": "header", "value": {"summary": "raw", "description": ""}}
DEEP = b"[" * 100_000 + b"]" * 100_000


def ndjson(*lines: object) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def commit(hub, body: bytes, repo: str = KERNEL) -> tuple[int, dict, bytes]:
    return raw(hub, "POST", f"/api/kernels/{repo}/commit/v1", body, hub.write_token, NDJSON)


def add(path: str, content: str = "eA==") -> dict:
    return {"key": "file", "value": {"path": path, "content": content, "encoding": "base64"}}


def repo_body(name: object = "n", organization: object = None) -> bytes:
    return json.dumps({"name": name, "organization": organization, "type": "kernel"}).encode()


def assert_healthy(hub, tmp_path: Path) -> None:
    """The branch still lists, downloads and takes a commit: nothing was left half written."""
    api = HfApi(endpoint=hub.endpoint, token=hub.write_token)
    files = api.list_repo_files(KERNEL, repo_type="kernel", revision="v1")
    assert "build/torch-cpu/_impl.py" in files
    status, _, body = commit(hub, ndjson(HEADER, add(f"ok-{len(hub.requests)}.py")))
    assert status == 200, body
    assert api.hf_hub_download(KERNEL, "build/torch-cpu/_impl.py", repo_type="kernel", revision="v1",
                               cache_dir=tmp_path / f"cache-{len(hub.requests)}")


def tree_outside(root: Path, hub_root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if hub_root not in (p, *p.parents)}


# -- repo ids and the server's root ---------------------------------------------------------
def outside_organizations(tmp_path: Path) -> list[object]:
    return [str(tmp_path / "outside"), "../outside", "../../outside", "a/../../outside", "..%2Foutside",
            "x/y", {"name": "x"}, ["x"], 5, True, ""]


def test_create_and_delete_never_leave_the_root(hub, tmp_path):
    before = tree_outside(tmp_path, hub.root)
    for organization in outside_organizations(tmp_path):
        status, headers, body = raw(hub, "POST", "/api/repos/create", repo_body("n", organization), hub.write_token)
        assert status == 400, (organization, status, body)
        assert "organization" in json.loads(body)["error"]
        status, _, body = raw(hub, "DELETE", "/api/repos/delete", repo_body("n", organization), hub.write_token)
        assert status == 400, (organization, status, body)
    assert tree_outside(tmp_path, hub.root) == before
    assert not (hub.root / "repos" / "kernels" / "a").exists()


def test_a_repo_planted_outside_the_root_cannot_be_read_or_deleted(hub, tmp_path):
    # A real repo, copied to a folder beside the root: only an id that escapes the root could reach it.
    HfApi(endpoint=hub.endpoint, token=hub.write_token).create_repo("me/n", repo_type="kernel")
    planted = tmp_path / "outside" / "n"
    planted.parent.mkdir()
    (hub.root / "repos" / "kernels" / "me" / "n").rename(planted)
    for namespace in (str(tmp_path / "outside"), "../../../outside", "..%2F..%2F..%2Foutside"):
        encoded = quote(namespace, safe="")
        status, _, body = raw(hub, "GET", f"/api/kernels/{encoded}/n", token=hub.write_token)
        assert status == 400, (namespace, status, body)
        status, _, body = raw(hub, "GET", f"/api/kernels/{encoded}/n/refs", token=hub.write_token)
        assert status == 400, (namespace, status, body)
        status, _, body = raw(hub, "GET", f"/kernels/{encoded}/n/resolve/main/.gitattributes", token=hub.write_token)
        assert status == 400, (namespace, status, body)
        status, _, body = raw(hub, "DELETE", "/api/repos/delete", repo_body("n", namespace), hub.write_token)
        assert status == 400, (namespace, status, body)
    assert (planted / "refs.json").is_file()


@pytest.mark.parametrize("name", ["ev il", "-x", "x-", ".x", "x.", "a--b", "a..b", "x.git", "a" * 97, "caf\u00e9",
                                  "a/b", "", 7, None])
def test_repo_names_follow_huggingface_hubs_rule(hub, name):
    status, _, body = raw(hub, "POST", "/api/repos/create", repo_body(name, "me"), hub.write_token)
    assert status == 400, (name, status, body)
    assert not (hub.root / "repos" / "kernels" / "me").exists()


@pytest.mark.parametrize("name", ["_x", "x_", "A.b-c_1", "a" * 96, "1"])
def test_repo_names_the_hub_accepts_are_accepted(hub, name):
    status, _, body = raw(hub, "POST", "/api/repos/create", repo_body(name, "me"), hub.write_token)
    assert status == 200, (name, status, body)
    assert HfApi(endpoint=hub.endpoint, token=hub.read_token).kernel_info(f"me/{name}").id == f"me/{name}"


@pytest.mark.parametrize("path", [
    "/api/kernels/me/ev%20il", "/api/kernels/me/a--b/refs", "/api/kernels/..%2Fme/x/tree/main",
    "/kernels/me/x.git/resolve/main/README.md", "/kernels/%2Fetc/x.git/info/lfs/objects/batch",
])
def test_repo_ids_in_urls_are_checked_too(hub, path):
    method = "POST" if path.endswith("batch") else "GET"
    body = b'{"operation": "upload", "objects": []}' if method == "POST" else None
    status, headers, answer = raw(hub, method, path, body, hub.write_token, LFS_JSON if body else None)
    assert status == 400, (path, status, answer)
    assert "error" in json.loads(answer)


# -- committed paths ------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["a\x00b.py", "build/\x00", "\x00", "x/.git/config", ".GIT/config", "a\nb.py",
                                  "a/./b.py", "a//b.py", "/abs.py"])
def test_invalid_committed_paths_are_refused_and_the_branch_stays_healthy(hub, tmp_path, path):
    publish(hub, kernel_folder(tmp_path / "src"))
    for operation in (add(path),
                      {"key": "lfsFile", "value": {"path": path, "algo": "sha256", "oid": "ab" * 32, "size": 3}},
                      {"key": "deletedFile", "value": {"path": path}}):
        status, _, body = commit(hub, ndjson(HEADER, operation))
        assert status == 400, (operation, status, body)
    assert_healthy(hub, tmp_path)


def test_a_path_that_is_not_unicode_text_is_refused(hub, tmp_path):
    publish(hub, kernel_folder(tmp_path / "src"))
    # A lone surrogate: valid JSON, but no UTF-8 encoding exists for it.
    line = b'{"key": "file", "value": {"path": "a\\ud800.py", "content": "eA==", "encoding": "base64"}}\n'
    status, _, body = commit(hub, ndjson(HEADER) + line)
    assert status == 400, body
    assert_healthy(hub, tmp_path)


# -- malformed bodies -----------------------------------------------------------------------
def test_malformed_commit_bodies_get_400(hub, tmp_path):
    publish(hub, kernel_folder(tmp_path / "src"))
    bodies = [
        ndjson(HEADER, [1, 2]), ndjson(HEADER, "file"), ndjson(HEADER, 3), ndjson(HEADER, None),
        ndjson([HEADER]), ndjson("header"), ndjson({"key": "header", "value": "s"}),
        ndjson({"key": "header", "value": {"summary": ["s"]}}),
        ndjson({"key": "header", "value": {"summary": "s", "parentCommit": 5}}),
        ndjson(HEADER, {"key": "file", "value": "x"}), ndjson(HEADER, {"key": "file", "value": {"path": 5}}),
        ndjson(HEADER, {"key": "file", "value": {"path": "a.py", "content": 5}}),
        ndjson(HEADER, {"key": "lfsFile", "value": {"path": "a.bin", "oid": 5, "size": 1}}),
        ndjson(HEADER, {"key": "lfsFile", "value": {"path": "a.bin", "oid": "ab" * 32, "size": "1"}}),
        ndjson(HEADER, {"key": "deletedFolder", "value": {"path": ["x"]}}), ndjson(HEADER, {"key": ["file"]}),
        ndjson(HEADER) + DEEP + b"\n", DEEP, b"\xff\xfe\n", b"\n\n",
    ]
    for body in bodies:
        status, _, answer = commit(hub, body)
        assert status == 400, (body[:80], status, answer)
        assert "error" in json.loads(answer)
    assert_healthy(hub, tmp_path)


def test_malformed_json_bodies_get_400(hub, tmp_path):
    publish(hub, kernel_folder(tmp_path / "src"))
    batch = f"/kernels/{KERNEL}.git/info/lfs/objects/batch"
    token = hub.write_token
    cases = [
        ("POST", batch, b"[]", LFS_JSON), ("POST", batch, b'[{"operation": "upload"}]', LFS_JSON),
        ("POST", batch, b'{"operation": "upload", "objects": {"oid": 1}}', LFS_JSON),
        ("POST", batch, b'{"operation": "upload", "objects": [1, "x"]}', LFS_JSON),
        ("POST", batch, b'{"operation": ["upload"]}', LFS_JSON), ("POST", batch, DEEP, LFS_JSON),
        ("POST", f"/kernels/{KERNEL}.git/info/lfs/objects/verify", b"[1]", LFS_JSON),
        ("POST", f"/kernels/{KERNEL}.git/info/lfs/objects/verify", b'{"oid": 5, "size": 1}', LFS_JSON),
        ("POST", "/api/repos/create", b"[]", None), ("POST", "/api/repos/create", DEEP, None),
        ("POST", "/api/repos/create", b'{"name": "n", "type": ["kernel"]}', None),
        ("POST", "/api/repos/create", b"\xff", None), ("DELETE", "/api/repos/delete", b'"me/n"', None),
        ("POST", f"/api/kernels/{KERNEL}/preupload/v1", b"[]", None),
        ("POST", f"/api/kernels/{KERNEL}/preupload/v1", b'{"files": "a.py"}', None),
        ("POST", f"/api/kernels/{KERNEL}/preupload/v1", b'{"files": [1]}', None),
        ("POST", f"/api/kernels/{KERNEL}/preupload/v1", b'{"files": [{"path": "a", "size": 1, "sample": 5}]}', None),
        ("POST", f"/api/kernels/{KERNEL}/preupload/v1", DEEP, None),
        ("POST", f"/api/kernels/{KERNEL}/branch/v9", b"[]", None),
        ("POST", f"/api/kernels/{KERNEL}/branch/v9", b'{"startingPoint": 5}', None),
        ("POST", f"/api/kernels/{KERNEL}/tag/v1", b'[{"tag": "t"}]', None),
        ("POST", f"/api/kernels/{KERNEL}/paths-info/v1", b'{"paths": "build"}', {"Content-Type": "application/json"}),
        ("POST", f"/api/kernels/{KERNEL}/paths-info/v1", b"[]", {"Content-Type": "application/json"}),
        ("PUT", f"/api/kernels/{KERNEL}/settings", b"[true]", None),
    ]
    for method, path, body, headers in cases:
        status, _, answer = raw(hub, method, path, body, token, headers)
        assert status == 400, (method, path, body[:80], status, answer)
        assert "error" in json.loads(answer)
    assert_healthy(hub, tmp_path)


def http(hub, head: bytes, body: bytes = b"") -> bytes:
    """One request written byte for byte (for framing no client library sends); the answer's
    status line, or b'' when the server hung up without one."""
    host, port = urlsplit(hub.endpoint).hostname, urlsplit(hub.endpoint).port
    with socket.create_connection((host, port), timeout=20) as s:
        s.sendall(head + b"\r\n\r\n" + body)
        s.shutdown(socket.SHUT_WR)  # what a server waiting for more body would need to give up
        answer = b""
        while chunk := s.recv(1 << 16):
            answer += chunk
    return answer.split(b"\r\n", 1)[0]


FRAMED = b'{"name": "framed", "type": "kernel"}'


@pytest.mark.parametrize("framing", [
    b"Content-Length: abc", b"Content-Length: -5", b"Content-Length: 1e3", b"Content-Length: +%d",
    b"Content-Length: %d, %d", b"Content-Length: %d\r\nContent-Length: 3", b"Content-Length: \xff",
    b"Transfer-Encoding: chunked", b"Transfer-Encoding: gzip\r\nContent-Length: %d",
])
def test_bad_framing_gets_400_and_the_server_stays_up(hub, tmp_path, framing):
    publish(hub, kernel_folder(tmp_path / "src"))
    # A body the server would take: only its framing is wrong.
    body = b"zz\r\n" + FRAMED + b"\r\n0\r\n\r\n" if b"chunked" in framing else FRAMED
    head = (b"POST /api/repos/create HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + hub.write_token.encode() + b"\r\n"
            + framing.replace(b"%d", str(len(FRAMED)).encode()))
    assert http(hub, head, body).startswith(b"HTTP/1.1 400 "), framing
    assert not (hub.root / "repos" / "kernels" / "kbuild-tester" / "framed").exists()
    assert_healthy(hub, tmp_path)
