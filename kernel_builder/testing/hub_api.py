"""The Hub's HTTP API, as huggingface_hub and kernels use it: a request in, a response out.

No sockets here (see hub.py): `HubApi.handle(Request) -> Response`. Status codes, headers and
JSON shapes follow what the clients read (huggingface_hub's hf_api.py, _commit_api.py, lfs.py,
file_download.py and utils/_http.py): errors carry `X-Error-Code` (RepoNotFound,
RevisionNotFound, EntryNotFound) so `hf_raise_for_status` raises the same exception classes
it raises against the Hub, `X-Error-Message`, and a JSON body `{"error": ...}`.
"""

from __future__ import annotations

import base64
import dataclasses
import fnmatch
import hashlib
import hmac
import json
import re
import uuid
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO
from urllib.parse import parse_qs, unquote, urlencode

from kernel_builder.hub_names import name_problem, repo_id_problem
from kernel_builder.runtime.files import MAX_JSON_DEPTH, json_depth

from .hub_store import (
    SHA256_RE,
    File,
    HubStore,
    Repo,
    RevisionTarget,
    Snapshot,
    iso_time,
    lfs_pointer,
)

TEST_USER = "kbuild-tester"
WRITE_TOKEN = "hf_test_write_token"
READ_TOKEN = "hf_test_read_token"
DEFAULT_TOKENS = {WRITE_TOKEN: "write", READ_TOKEN: "read"}

TYPE_BY_PLURAL = {"models": "model", "datasets": "dataset", "spaces": "space", "kernels": "kernel"}
URL_PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/", "kernel": "kernels/"}

# The Hub keeps files above 10 MB and binary files (a NUL byte in the sample) out of git.
LFS_THRESHOLD = 10 * 1024 * 1024
# The message the Hub sends, and huggingface_hub tests for, when a token is not valid.
INVALID_TOKEN = "Invalid credentials in Authorization header"
AUTH_REQUIRED = "Authentication required: this operation needs a token with write access"
_BAD_REF_CHARS = re.compile(r"[\x00-\x20~^:?*\[\\\x7f]")
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")


class HubError(Exception):
    """An API error: status, message, the `X-Error-Code` if the Hub sends one, extra headers."""

    def __init__(self, status: int, message: str, code: str | None = None, headers: dict | None = None,
                 extra: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code
        self.headers, self.extra = headers or {}, extra or {}


@dataclasses.dataclass
class Request:
    method: str
    path: str                      # percent-encoded, without the query
    query: dict[str, list[str]]
    headers: Mapping[str, str]     # case-insensitive (http.client.HTTPMessage)
    stream: BinaryIO               # the body, read on demand
    endpoint: str                  # "http://host:port" as the client addressed us
    _body: bytes | None = None

    def body(self) -> bytes:
        if self._body is None:
            self._body = self.stream.read()
        return self._body

    def json(self) -> dict:
        """The body as a JSON object ({} when empty); anything else is a 400."""
        raw = self.body()
        return _json_object(raw, "The request body") if raw.strip() else {}

    def json_lines(self) -> list[dict]:
        """An NDJSON body: one JSON object per non-blank line."""
        return [_json_object(line, f"Line {number} of the body")
                for number, line in enumerate(self.body().splitlines(), 1) if line.strip()]

    def param(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else None

    def flag(self, name: str) -> bool:
        return (self.param(name) or "").lower() in ("1", "true")


@dataclasses.dataclass
class Response:
    status: int
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    body: bytes = b""
    file: Path | None = None       # served instead of `body`: `length` bytes from `offset`
    offset: int = 0
    length: int = 0

    @property
    def content_length(self) -> int:
        return self.length if self.file is not None else len(self.body)


@dataclasses.dataclass(frozen=True)
class Identity:
    token: str
    role: str  # "write" or "read"


def _json_kind(value: Any) -> str:
    for kind, words in ((bool, "true or false"), (int, "an integer"), (float, "a number"), (str, "a string"),
                        (list, "an array"), (dict, "an object")):
        if isinstance(value, kind):
            return words
    return "null"


def _json_object(raw: bytes, what: str) -> dict:
    """`raw` parsed as one JSON object, its nesting bounded before the recursive parser sees it."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise HubError(400, f"{what} is not UTF-8 text") from None
    # Counting brackets first spares a scan of large bodies (base64 content) that cannot nest deep.
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and json_depth(text) > MAX_JSON_DEPTH:
        raise HubError(400, f"{what} nests JSON deeper than {MAX_JSON_DEPTH} levels")
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise HubError(400, f"{what} is not valid JSON") from None
    if not isinstance(value, dict):
        raise HubError(400, f"{what} must be a JSON object, not {_json_kind(value)}")
    return value


def _field(obj: dict, key: str, kind: type, default: Any = None) -> Any:
    """`obj[key]` when it has the JSON type `kind`, `default` when it is absent or null, else a 400."""
    value = obj.get(key)
    if value is None:
        return default
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise HubError(400, f"{key!r} must be {_json_kind(kind())}, not {_json_kind(value)}")
    return value


def _objects(obj: dict, key: str) -> list[dict]:
    """`obj[key]` as a list of JSON objects ([] when absent), else a 400."""
    items = _field(obj, key, list, [])
    if not all(isinstance(item, dict) for item in items):
        raise HubError(400, f"each item of {key!r} must be an object")
    return items


def error_response(error: HubError) -> Response:
    """How the Hub answers an error: the status, X-Error-Code, X-Error-Message and {"error": ...}."""
    return json_response({"error": error.message, **error.extra}, error.status, {
        "X-Error-Message": _header_safe(error.message),
        **({"X-Error-Code": error.code} if error.code else {}),
        **error.headers,
    })


def json_response(data: Any, status: int = 200, headers: dict | None = None,
                  content_type: str = "application/json; charset=utf-8") -> Response:
    return Response(status, {"Content-Type": content_type, **(headers or {})}, json.dumps(data).encode())


def _header_safe(text: str) -> str:
    return " ".join(text.split()).encode("latin-1", "replace").decode("latin-1")


def _repo_not_found(identity: Identity | None) -> HubError:
    # Without credentials the Hub answers 401 (it will not say whether a private repo exists).
    return HubError(401 if identity is None else 404, "Repository not found", "RepoNotFound")


def _revision_not_found(revision: str) -> HubError:
    return HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")


def _valid_ref_name(name: str) -> bool:
    return _utf8(name) and not (
        not name or name.startswith(("/", "refs/", "-")) or name.endswith(("/", ".", ".lock"))
        or "//" in name or ".." in name or "@{" in name or name == "@"
        or _BAD_REF_CHARS.search(name) or re.fullmatch(r"[0-9a-f]{40}", name)
    )


def _utf8(text: str) -> bool:
    """False for text no UTF-8 bytes can spell (a lone surrogate from a JSON escape)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _valid_path(path: str) -> bool:
    """A path git can store and check out: no NUL or control characters (a NUL would end the
    name inside a tree object), no empty, '.' or '..' part, no '.git' folder at any depth."""
    parts = path.split("/")
    return (bool(path) and _utf8(path) and not _CONTROL_CHARS.search(path)
            and all(p not in ("", ".", "..") and p.lower() != ".git" for p in parts))


def _parent(path: str) -> str:
    return path.rpartition("/")[0]


class HubApi:
    def __init__(self, store: HubStore, tokens: Mapping[str, str], trusted_orgs: tuple[str, ...] = (),
                 orgs: tuple[str, ...] = (), user: str = TEST_USER, page_size: int = 1000):
        self.store = store
        self.tokens = dict(tokens)
        self.trusted_orgs = tuple(trusted_orgs)
        self.orgs = tuple(dict.fromkeys((*trusted_orgs, *orgs)))
        self.user = user
        self.page_size = page_size

    # -- entry point ----------------------------------------------------------------------
    def handle(self, req: Request) -> Response:
        try:
            identity = self._identity(req)
            response = self._route(req, identity)
        except HubError as e:
            response = error_response(e)
        response.headers.setdefault("X-Request-Id", str(uuid.uuid4()))
        return response

    def _identity(self, req: Request) -> Identity | None:
        header = (req.headers.get("authorization") or "").strip()
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        role = self.tokens.get(token.strip()) if scheme.lower() == "bearer" else None
        if role is None:
            raise HubError(401, INVALID_TOKEN)
        return Identity(token.strip(), role)

    def _route(self, req: Request, identity: Identity | None) -> Response:
        segs = [unquote(s) for s in req.path.split("/")[1:]]
        while len(segs) > 1 and segs[-1] == "":
            segs.pop()
        method = req.method
        if segs[:1] == ["api"]:
            return self._route_api(req, identity, segs[1:])
        if segs[:1] == ["lfs-upload"] and method == "PUT" and len(segs) == 4:
            return self._lfs_put(req, *segs[1:])
        repo_type = TYPE_BY_PLURAL.get(segs[0]) if segs else None
        if repo_type and repo_type != "model":
            segs = segs[1:]
        repo_type = repo_type or "model"
        if len(segs) >= 3 and segs[1].endswith(".git") and segs[2:5] == ["info", "lfs", "objects"]:
            repo_id = f"{segs[0]}/{segs[1][:-4]}"
            if segs[5:] == ["batch"] and method == "POST":
                return self._lfs_batch(req, identity, repo_type, repo_id)
            if segs[5:] == ["verify"] and method == "POST":
                return self._lfs_verify(req, identity, repo_type, repo_id)
        if len(segs) >= 5 and segs[2] == "resolve" and method in ("GET", "HEAD"):
            repo = self._readable(identity, repo_type, f"{segs[0]}/{segs[1]}")
            return self._resolve_file(req, repo, segs[3], "/".join(segs[4:]))
        raise HubError(404, "Not found")

    def _route_api(self, req: Request, identity: Identity | None, segs: list[str]) -> Response:
        method = req.method
        if segs == ["whoami-v2"] and method == "GET":
            return self._whoami(identity)
        if segs == ["validate-yaml"] and method == "POST":
            return json_response({"errors": [], "warnings": []})
        if len(segs) == 3 and segs[0] == "organizations" and segs[2] == "overview" and method == "GET":
            return self._org_overview(segs[1])
        if segs == ["repos", "create"] and method == "POST":
            return self._create_repo(req, identity)
        if segs == ["repos", "delete"] and method == "DELETE":
            return self._delete_repo(req, identity)
        if len(segs) < 3 or segs[0] not in TYPE_BY_PLURAL:
            raise HubError(404, "Not found")
        repo_type, repo_id, rest = TYPE_BY_PLURAL[segs[0]], f"{segs[1]}/{segs[2]}", segs[3:]
        action, arg = (rest[0] if rest else ""), "/".join(rest[1:])
        if method == "GET":
            if not rest or action == "revision":
                repo = self._readable(identity, repo_type, repo_id)
                return self._repo_info(req, repo, arg or "main")
            if action == "refs" and not arg:
                return self._refs(req, self._readable(identity, repo_type, repo_id))
            if action == "tree" and len(rest) >= 2:
                repo = self._readable(identity, repo_type, repo_id)
                return self._tree(req, repo, rest[1], "/".join(rest[2:]).strip("/"))
            if action == "commits" and len(rest) >= 2:
                return self._commits(req, self._readable(identity, repo_type, repo_id), arg)
        if method == "POST":
            if action == "paths-info" and arg:
                return self._paths_info(req, self._readable(identity, repo_type, repo_id), arg)
            if action == "preupload" and arg:
                return self._preupload(req, self._writable(identity, repo_type, repo_id), arg)
            if action == "commit" and arg:
                return self._commit(req, self._writable(identity, repo_type, repo_id), arg)
            if action == "branch" and arg:
                return self._create_branch(req, self._writable(identity, repo_type, repo_id), arg)
            if action == "tag" and arg:
                return self._create_tag(req, self._writable(identity, repo_type, repo_id), arg)
        if method == "DELETE":
            if action == "branch" and arg:
                return self._delete_ref(self._writable(identity, repo_type, repo_id), "heads", arg)
            if action == "tag" and arg:
                return self._delete_ref(self._writable(identity, repo_type, repo_id), "tags", arg)
        if method == "PUT" and action == "settings" and not arg:
            return self._settings(req, self._writable(identity, repo_type, repo_id))
        raise HubError(404, "Not found")

    # -- access ---------------------------------------------------------------------------
    def _repo(self, repo_type: str, repo_id: str) -> Repo:
        """The repo named `repo_id`, once it is an id the Hub accepts: so that no id ever names
        a folder outside the store (an absolute path, '..', a '%2F'-encoded slash)."""
        problem = repo_id_problem(repo_id)
        if problem:
            raise HubError(400, f"Invalid repo id {repo_id!r}: {problem}")
        return self.store.repo(repo_type, repo_id)

    def _readable(self, identity: Identity | None, repo_type: str, repo_id: str) -> Repo:
        repo = self._repo(repo_type, repo_id)
        # Any valid token belongs to the one test user, who owns every repo.
        if repo.exists() and (identity is not None or not repo.private):
            return repo
        raise _repo_not_found(identity)

    def _writable(self, identity: Identity | None, repo_type: str, repo_id: str) -> Repo:
        if identity is None:
            repo = self._repo(repo_type, repo_id)
            if repo.exists() and not repo.private:
                raise HubError(401, AUTH_REQUIRED)
            raise _repo_not_found(None)
        repo = self._readable(identity, repo_type, repo_id)
        self._require_write(identity, f"write to the {repo_type} repo {repo_id}")
        return repo

    @staticmethod
    def _require_write(identity: Identity | None, action: str) -> None:
        if identity is None:
            raise HubError(401, AUTH_REQUIRED)
        if identity.role != "write":
            raise HubError(403, f"You don't have the rights to {action}: this token has the read role, "
                                "and the operation needs a token with write access")

    def _resolve(self, repo: Repo, revision: str) -> RevisionTarget:
        target = repo.resolve(revision)
        if target is None:
            raise _revision_not_found(revision)
        return target

    def _snapshot(self, sha: str) -> Snapshot:
        return self.store.snapshot(self.store.commit(sha).tree)

    def _repo_url(self, req: Request, repo: Repo) -> str:
        return f"{req.endpoint}/{URL_PREFIX[repo.type]}{repo.id}"

    # -- account --------------------------------------------------------------------------
    def _whoami(self, identity: Identity | None) -> Response:
        if identity is None:
            raise HubError(401, INVALID_TOKEN)
        role = "admin" if identity.role == "write" else "read"
        return json_response({
            "type": "user", "id": hashlib.sha1(self.user.encode()).hexdigest()[:24], "name": self.user,
            "fullname": self.user, "email": f"{self.user}@example.invalid", "emailVerified": True,
            "isPro": False, "canPay": False, "avatarUrl": "",
            "orgs": [{"type": "org", "name": org, "fullname": org, "roleInOrg": role} for org in self.orgs],
            "auth": {"type": "access_token",
                     "accessToken": {"displayName": f"test-{identity.role}", "role": identity.role}},
        })

    def _org_overview(self, org: str) -> Response:
        # As on the Hub, an organization that holds repos exists (untrusted unless named
        # trusted): kernels 0.19 then says "not from a trusted publisher", not "could not
        # verify publisher trust status" (its answer to a 404). A user's namespace is no org.
        if org not in self.orgs and (org == self.user or name_problem(org) or not self.store.holds_namespace(org)):
            raise HubError(404, "Organization not found")
        return json_response({
            "name": org, "fullname": org, "avatarUrl": "", "type": "org", "isVerified": False,
            "trustedKernelPublisher": org in self.trusted_orgs,
            "numModels": 0, "numDatasets": 0, "numSpaces": 0, "numUsers": 1, "numFollowers": 0,
        })

    # -- repos ----------------------------------------------------------------------------
    def _repo_body(self, req: Request) -> tuple[str, str, dict]:
        payload = req.json()
        repo_type = payload.get("type") or "model"
        if not isinstance(repo_type, str) or repo_type not in URL_PREFIX:
            raise HubError(400, f"Invalid repo type: {repo_type!r}")
        name = payload.get("name")
        if problem := name_problem(name):
            raise HubError(400, f"Invalid repo name: {problem}")
        # Checked, not trusted: the namespace becomes a folder under the store's root.
        namespace = payload.get("organization")
        if namespace is None:
            namespace = self.user
        elif problem := name_problem(namespace):
            raise HubError(400, f"Invalid organization: {problem}")
        repo_id = f"{namespace}/{name}"
        if problem := repo_id_problem(repo_id):
            raise HubError(400, f"Invalid repo id {repo_id!r}: {problem}")
        return repo_type, repo_id, payload

    def _create_repo(self, req: Request, identity: Identity | None) -> Response:
        if identity is None:
            raise HubError(401, AUTH_REQUIRED)
        repo_type, repo_id, payload = self._repo_body(req)
        self._require_write(identity, f"create a {repo_type} under this namespace")
        if "visibility" in payload:
            private = payload["visibility"] != "public"
        else:
            private = bool(payload.get("private"))
        url = f"{req.endpoint}/{URL_PREFIX[repo_type]}{repo_id}"
        repo = self.store.create_repo(repo_type, repo_id, private=private, author=self.user)
        if repo is None:
            # exist_ok=True reads the url from this answer.
            raise HubError(409, f"You already created this {repo_type} repo", extra={"url": url})
        if payload.get("sdk"):
            repo.update_settings(sdk=payload["sdk"])
        return json_response({"url": url, "name": repo_id, "id": self._repo_object_id(repo)})

    def _delete_repo(self, req: Request, identity: Identity | None) -> Response:
        repo_type, repo_id, _ = self._repo_body(req)
        repo = self._writable(identity, repo_type, repo_id)
        self.store.delete_repo(repo)
        return json_response({})

    def _settings(self, req: Request, repo: Repo) -> Response:
        payload = req.json()
        changes = {}
        if "private" in payload:
            changes["private"] = bool(payload["private"])
        if "visibility" in payload:
            changes["private"] = payload["visibility"] != "public"
        if "gated" in payload:
            changes["gated"] = payload["gated"]
        repo.update_settings(**changes)
        return json_response({})

    @staticmethod
    def _repo_object_id(repo: Repo) -> str:
        return hashlib.sha1(f"{repo.type}/{repo.id}".encode()).hexdigest()[:24]

    def _repo_info(self, req: Request, repo: Repo, revision: str) -> Response:
        sha = self._resolve(repo, revision).sha
        commit = self.store.commit(sha)
        snapshot = self.store.snapshot(commit.tree)
        blobs = req.flag("blobs")
        siblings = []
        for path in sorted(snapshot.files):
            sibling: dict[str, Any] = {"rfilename": path}
            if blobs:
                file = snapshot.files[path]
                sibling.update(size=file.size, blobId=file.blob)
                if file.lfs_oid:
                    sibling["lfs"] = {"sha256": file.lfs_oid, "size": file.size, "pointerSize": file.pointer_size}
            siblings.append(sibling)
        settings = repo.settings
        info: dict[str, Any] = {
            "_id": self._repo_object_id(repo), "id": repo.id, "author": repo.id.split("/")[0], "sha": sha,
            "lastModified": commit.date, "createdAt": iso_time(settings.get("createdAt", commit.timestamp)),
            "private": bool(settings.get("private")), "gated": settings.get("gated", False), "disabled": False,
            "downloads": 0, "likes": 0, "tags": [], "siblings": siblings,
        }
        if repo.type == "model":
            info["modelId"] = repo.id
        if repo.type == "space":
            info["sdk"] = settings.get("sdk")
        expand = req.query.get("expand[]") or req.query.get("expand")
        if expand:
            info = {k: v for k, v in info.items() if k in ("_id", "id", *expand)}
        return json_response(info)

    # -- refs -----------------------------------------------------------------------------
    @staticmethod
    def _ref_json(kind: str, name: str, sha: str) -> dict:
        prefix = {"heads": "refs/heads/", "tags": "refs/tags/", "prs": "refs/pr/"}[kind]
        return {"name": name, "ref": prefix + name, "targetCommit": sha}

    def _refs(self, req: Request, repo: Repo) -> Response:
        refs = repo.refs()
        data: dict[str, Any] = {
            kind_out: [self._ref_json(kind, n, s) for n, s in sorted(refs[kind].items())]
            for kind_out, kind in (("branches", "heads"), ("tags", "tags"))
        }
        data["converts"] = []
        if req.flag("include_prs"):
            data["pullRequests"] = [self._ref_json("prs", n, s) for n, s in sorted(refs["prs"].items(), key=lambda x: int(x[0]))]
        return json_response(data)

    def _create_branch(self, req: Request, repo: Repo, branch: str) -> Response:
        if not _valid_ref_name(branch):
            raise HubError(400, f"Invalid branch name: {branch}")
        start = _field(req.json(), "startingPoint", str)
        return self._add_ref(repo, "heads", branch, self._resolve(repo, start or "main").sha)

    def _create_tag(self, req: Request, repo: Repo, revision: str) -> Response:
        tag = req.json().get("tag") or ""
        if not isinstance(tag, str) or not _valid_ref_name(tag):
            raise HubError(400, f"Invalid tag name: {tag!r}")
        return self._add_ref(repo, "tags", tag, self._resolve(repo, revision).sha)

    @staticmethod
    def _add_ref(repo: Repo, kind: str, name: str, sha: str) -> Response:
        """Create refs/<kind>/<name> at `sha`; the Hub answers 409 when it exists."""

        def add(refs: dict) -> None:
            if name in refs[kind]:
                raise HubError(409, f"{'Branch' if kind == 'heads' else 'Tag'} {name} already exists")
            refs[kind][name] = sha

        repo.update_refs(add)
        return json_response({"name": name, "ref": f"refs/{kind}/{name}", "targetCommit": sha})

    def _delete_ref(self, repo: Repo, kind: str, name: str) -> Response:
        if kind == "heads" and name == "main":
            raise HubError(403, "Cannot delete the default branch")

        def remove(refs: dict) -> None:
            if refs[kind].pop(name, None) is None:
                raise _revision_not_found(name)

        repo.update_refs(remove)
        return json_response({})

    # -- listings -------------------------------------------------------------------------
    @staticmethod
    def _entry(snapshot: Snapshot, path: str) -> dict:
        file = snapshot.files.get(path)
        if file is None:
            return {"type": "directory", "oid": snapshot.dirs[path], "size": 0, "path": path}
        entry: dict[str, Any] = {"type": "file", "oid": file.blob, "size": file.size, "path": path}
        if file.lfs_oid:
            entry["lfs"] = {"oid": file.lfs_oid, "size": file.size, "pointerSize": file.pointer_size}
        return entry

    def _last_commits(self, repo: Repo, sha: str, paths: list[str]) -> dict[str, dict]:
        """For each path, the newest commit (first-parent history) that changed it."""
        def state(snapshot: Snapshot, path: str) -> object:
            return snapshot.files.get(path) or snapshot.dirs.get(path)

        found: dict[str, dict] = {}
        pending = list(paths)
        for commit in repo.history(sha):
            here = self.store.snapshot(commit.tree)
            before = self._snapshot(commit.parents[0]) if commit.parents else Snapshot({}, {})
            info = {"id": commit.sha, "title": commit.title, "date": commit.date}
            for path in [p for p in pending if state(here, p) != state(before, p)]:
                found[path] = info
                pending.remove(path)
            if not pending:
                break
        return found

    def _page(self, req: Request, items: list, page_size: int) -> tuple[list, dict]:
        """One page of `items` and the `Link: <...>; rel="next"` header the client follows."""
        try:
            start = max(0, int(req.param("cursor") or 0))
        except ValueError:
            raise HubError(400, "Invalid cursor") from None
        headers = {}
        if start + page_size < len(items):
            query = {k: v[-1] for k, v in req.query.items() if k != "cursor"}
            query["cursor"] = str(start + page_size)
            headers["Link"] = f'<{req.endpoint}{req.path}?{urlencode(query)}>; rel="next"'
        return items[start:start + page_size], headers

    def _tree(self, req: Request, repo: Repo, revision: str, path: str) -> Response:
        target = self._resolve(repo, revision)
        snapshot = self._snapshot(target.sha)
        if path not in snapshot.dirs:
            raise HubError(404, f"{path} does not exist on \"{revision}\"", "EntryNotFound",
                           {"X-Repo-Commit": target.sha})
        prefix = f"{path}/" if path else ""
        paths = [p for p in (*snapshot.dirs, *snapshot.files) if p and p.startswith(prefix)]
        if not req.flag("recursive"):
            paths = [p for p in paths if _parent(p) == path]
        expand = req.flag("expand")
        page, headers = self._page(req, sorted(paths), 50 if expand else self.page_size)
        entries = [self._entry(snapshot, p) for p in page]
        if expand:
            last = self._last_commits(repo, target.sha, page)
            for entry in entries:
                entry["lastCommit"] = last.get(entry["path"])
        return json_response(entries, headers=headers)

    def _paths_info(self, req: Request, repo: Repo, revision: str) -> Response:
        content_type = req.headers.get("content-type") or ""
        if "json" in content_type:
            payload = req.json()
            paths, expand = _field(payload, "paths", list, []), bool(payload.get("expand"))
            if not all(isinstance(p, str) for p in paths):
                raise HubError(400, "'paths' must be a list of strings")
        else:
            form = parse_qs(req.body().decode())
            paths, expand = form.get("paths", []), (form.get("expand") or ["false"])[-1].lower() == "true"
        target = self._resolve(repo, revision)
        snapshot = self._snapshot(target.sha)
        found = [p.strip("/") for p in paths if p.strip("/") in snapshot.files or p.strip("/") in snapshot.dirs]
        entries = [self._entry(snapshot, p) for p in found]
        if expand:
            last = self._last_commits(repo, target.sha, found)
            for entry in entries:
                entry["lastCommit"] = last.get(entry["path"])
        return json_response(entries)

    def _commits(self, req: Request, repo: Repo, revision: str) -> Response:
        sha = self._resolve(repo, revision).sha
        items = [
            {"id": c.sha, "title": c.title, "message": c.body, "date": c.date,
             "authors": [{"user": c.author, "avatar": ""}]}
            for c in repo.history(sha)
        ]
        page, headers = self._page(req, items, 50)
        return json_response(page, headers=headers)

    # -- files ----------------------------------------------------------------------------
    def _resolve_file(self, req: Request, repo: Repo, revision: str, path: str) -> Response:
        sha = self._resolve(repo, revision).sha
        file = self._snapshot(sha).files.get(path)
        if file is None:
            raise HubError(404, "Entry not found", "EntryNotFound", {"X-Repo-Commit": sha})
        headers = {
            "X-Repo-Commit": sha, "ETag": f'"{file.etag}"', "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream" if file.lfs_oid else "text/plain; charset=utf-8",
        }
        if file.lfs_oid:
            # What the Hub puts on its redirect to the LFS storage, which the client prefers.
            headers.update({"X-Linked-Etag": f'"{file.lfs_oid}"', "X-Linked-Size": str(file.size)})
        start, end, status = 0, file.size, 200
        range_header = req.headers.get("range")
        if range_header and req.method == "GET":
            parsed = _parse_range(range_header, file.size)
            if parsed is None:
                return Response(416, {**headers, "Content-Range": f"bytes */{file.size}"})
            start, end = parsed
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{file.size}"
        if file.lfs_oid:
            return Response(status, headers, file=self.store.lfs_path(file.lfs_oid), offset=start, length=end - start)
        return Response(status, headers, self.store.blob_bytes(file.blob)[start:end])

    # -- uploads --------------------------------------------------------------------------
    def _write_target(self, repo: Repo, revision: str) -> RevisionTarget:
        """A revision commits can go to: a branch or a pull request ref."""
        target = repo.resolve(revision)
        if target is None or target.kind not in ("heads", "prs"):
            raise _revision_not_found(revision)
        return target

    @staticmethod
    def _lfs_patterns(snapshot: Snapshot, store: HubStore) -> list[str]:
        file = snapshot.files.get(".gitattributes")
        if file is None or file.lfs_oid:
            return []
        patterns = []
        for line in store.blob_bytes(file.blob).decode(errors="replace").splitlines():
            fields = line.split()
            if len(fields) > 1 and "filter=lfs" in fields[1:]:
                patterns.append(fields[0])
        return patterns

    @staticmethod
    def _matches(path: str, pattern: str) -> bool:
        if "/" not in pattern.strip("/"):
            return fnmatch.fnmatchcase(PurePosixPath(path).name, pattern)
        return fnmatch.fnmatchcase(path, pattern.lstrip("/").replace("**/", "*"))

    def _preupload(self, req: Request, repo: Repo, revision: str) -> Response:
        head = self._write_target(repo, revision).sha
        snapshot = self._snapshot(head)
        patterns = self._lfs_patterns(snapshot, self.store)
        answers = []
        for item in _objects(req.json(), "files"):
            path, size = _field(item, "path", str), _field(item, "size", int)
            if path is None or size is None:
                raise HubError(400, "Each file needs a path and a size")
            try:
                sample = base64.b64decode(_field(item, "sample", str, ""))
            except ValueError:
                raise HubError(400, f"Invalid sample for {path}") from None
            lfs = size > LFS_THRESHOLD or b"\0" in sample or any(self._matches(path, p) for p in patterns)
            answer: dict[str, Any] = {"path": path, "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False}
            existing = snapshot.files.get(path)
            if existing is not None:
                answer["oid"] = existing.etag  # equal to the local oid -> the client skips the file
            answers.append(answer)
        return json_response({"files": answers, "commitOid": head})

    def _commit(self, req: Request, repo: Repo, revision: str) -> Response:
        items = req.json_lines()
        if not items or items[0].get("key") != "header":
            raise HubError(400, "The commit payload must start with a header line")
        header = _field(items[0], "value", dict, {})
        summary = _field(header, "summary", str, "").strip()
        if not summary:
            raise HubError(400, "The commit summary must not be empty")
        description = _field(header, "description", str, "")
        message = summary + (f"\n\n{description}" if description.strip() else "")
        parent_commit = _field(header, "parentCommit", str)
        create_pr = req.flag("create_pr")
        target = self._write_target(repo, revision)

        def apply(refs: dict) -> tuple[str, str | None]:
            kind, name = target.kind, target.name
            head = refs[kind].get(name)
            if head is None:
                raise _revision_not_found(revision)
            if parent_commit and parent_commit != head:
                raise HubError(412, "A commit has happened since. Please refresh and try again.")
            files = dict(self._snapshot(head).files)
            for item in items[1:]:
                self._apply_operation(files, item)
            sha = self.store.write_commit(self.store.write_tree(files), (head,), self.user, message)
            repo.add_commit(sha)
            if create_pr:
                number = str(max((int(n) for n in refs["prs"]), default=0) + 1)
                refs["prs"][number] = sha
                return sha, number
            refs[kind][name] = sha
            return sha, None

        sha, pr = repo.update_refs(apply)
        base = self._repo_url(req, repo)
        answer = {"success": True, "commitOid": sha, "commitUrl": f"{base}/commit/{sha}", "hookOutput": ""}
        if pr is not None:
            answer["pullRequestUrl"] = f"{base}/discussions/{pr}"
        return json_response(answer)

    def _apply_operation(self, files: dict[str, File], item: dict) -> None:
        key, value = item.get("key"), _field(item, "value", dict, {})
        path = _field(value, "path", str, "")
        if key in ("file", "lfsFile", "deletedFile") and not _valid_path(path):
            raise HubError(400, f"Invalid path in repo: {path!r}")
        if key == "file":
            if value.get("encoding", "base64") != "base64":
                raise HubError(400, f"Unsupported encoding for {path}: {value.get('encoding')}")
            try:
                content = base64.b64decode(_field(value, "content", str, ""), validate=True)
            except ValueError:
                raise HubError(400, f"Invalid base64 content for {path}") from None
            # The same rule preupload applies to the 512-byte sample it sees.
            if len(content) > LFS_THRESHOLD or b"\0" in content[:512]:
                raise HubError(400, f"Your push was rejected because it contains binary files or files larger "
                                    f"than 10 MB ({path}): upload them with LFS")
            self._place(files, path, File(self.store.write_object("blob", content), len(content)))
        elif key == "lfsFile":
            oid, size = _field(value, "oid", str, ""), _field(value, "size", int)
            stored = self.store.lfs_size(oid)
            if value.get("algo", "sha256") != "sha256" or stored is None:
                raise HubError(400, f"LFS object {oid} for {path} was not uploaded")
            if size is not None and size != stored:
                raise HubError(400, f"LFS object {oid} for {path} has size {stored}, not {size}")
            pointer = lfs_pointer(oid, stored)
            self._place(files, path, File(self.store.write_object("blob", pointer), stored, oid, len(pointer)))
        elif key == "deletedFile":
            if files.pop(path, None) is None:
                raise HubError(404, f"A file with this name doesn't exist: {path}", "EntryNotFound")
        elif key == "deletedFolder":
            folder = path.strip("/")
            if folder and not _valid_path(folder):
                raise HubError(400, f"Invalid path in repo: {path!r}")
            inside = [p for p in files if not folder or p.startswith(folder + "/")]
            if not inside:
                raise HubError(404, f"A folder with this name doesn't exist: {path}", "EntryNotFound")
            for p in inside:
                del files[p]
        else:
            raise HubError(400, f"Unknown commit operation: {key!r}")

    @staticmethod
    def _place(files: dict[str, File], path: str, file: File) -> None:
        parts = path.split("/")
        if any("/".join(parts[:i]) in files for i in range(1, len(parts))):
            raise HubError(400, f"Cannot add {path}: a parent folder of it is a file")
        if any(p.startswith(path + "/") for p in files):
            raise HubError(400, f"Cannot add {path}: a folder with this name exists")
        files[path] = file

    # -- LFS ------------------------------------------------------------------------------
    def _upload_signature(self, oid: str, size: int) -> str:
        return hmac.new(self.store.secret, f"{oid}:{size}".encode(), hashlib.sha256).hexdigest()[:32]

    def _lfs_batch(self, req: Request, identity: Identity | None, repo_type: str, repo_id: str) -> Response:
        payload = req.json()
        if _field(payload, "operation", str) != "upload":
            self._readable(identity, repo_type, repo_id)
            raise HubError(422, "Only the upload operation is supported")
        repo = self._writable(identity, repo_type, repo_id)
        verify = f"{req.endpoint}/{URL_PREFIX[repo.type]}{repo.id}.git/info/lfs/objects/verify"
        objects = []
        for obj in _objects(payload, "objects"):
            oid, size = obj.get("oid"), obj.get("size")
            answer: dict[str, Any] = {"oid": oid, "size": size}
            if not isinstance(oid, str) or not SHA256_RE.fullmatch(oid) or not isinstance(size, int) or size < 0:
                answer["error"] = {"code": 422, "message": "Invalid object: expected a sha256 oid and a size"}
            elif (stored := self.store.lfs_size(oid)) is not None:
                if stored != size:
                    answer["error"] = {"code": 422, "message": f"Object {oid} has size {stored}, not {size}"}
                # else: no actions -- the server has it, nothing to upload
            else:
                href = f"{req.endpoint}/lfs-upload/{oid}/{size}/{self._upload_signature(oid, size)}"
                answer["authenticated"] = True
                answer["actions"] = {"upload": {"href": href, "expires_in": 86400},
                                     "verify": {"href": verify, "expires_in": 86400}}
            objects.append(answer)
        return json_response({"transfer": "basic", "objects": objects, "hash_algo": "sha256"},
                             content_type="application/vnd.git-lfs+json")

    def _lfs_put(self, req: Request, oid: str, size: str, signature: str) -> Response:
        # The client sends no token here: the signed URL from the batch answer is the permission.
        if not size.isdigit() or not hmac.compare_digest(signature, self._upload_signature(oid, int(size))):
            raise HubError(403, "Invalid or expired upload URL")
        error = self.store.put_lfs(oid, int(size), req.stream)
        if error:
            raise HubError(400, f"LFS upload of {oid} failed: {error}")
        return Response(200)

    def _lfs_verify(self, req: Request, identity: Identity | None, repo_type: str, repo_id: str) -> Response:
        self._writable(identity, repo_type, repo_id)
        payload = req.json()
        oid, size = _field(payload, "oid", str, ""), _field(payload, "size", int)
        stored = self.store.lfs_size(oid)
        if stored is None or stored != size:
            raise HubError(404, f"LFS object {oid} of size {size} was not found")
        return json_response({"success": True}, content_type="application/vnd.git-lfs+json")


def _parse_range(header: str, size: int) -> tuple[int, int] | None:
    """A single `bytes=` range as [start, end); None when it cannot be satisfied."""
    unit, _, spec = header.partition("=")
    if unit.strip() != "bytes" or "," in spec:
        return None
    first, _, last = spec.strip().partition("-")
    try:
        if first == "":
            length = int(last)
            return (max(0, size - length), size) if length > 0 and size > 0 else None
        start = int(first)
        end = min(int(last) + 1, size) if last else size
    except ValueError:
        return None
    return (start, end) if start < size and start < end else None
