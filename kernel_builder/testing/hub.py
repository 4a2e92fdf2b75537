"""A local Hugging Face Hub for tests: the real huggingface_hub and kernels clients talk to it over HTTP.

    with HubServer(tmp_path / "hub").start() as hub:
        api = HfApi(endpoint=hub.endpoint, token=hub.write_token)

or, in the foreground, for subprocesses and people:

    python -m kernel_builder.testing.hub --root DIR [--port N] [--token TOKEN:write]...

It prints its endpoint on the first line. The API itself lives in hub_api.py and the storage in
hub_store.py; this module only moves bytes between sockets and `HubApi.handle`. Clients must
run with HF_HUB_DISABLE_XET=1: the server speaks LFS, not Xet.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import re
import signal
import socket
import sys
import threading
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import BinaryIO
from urllib.parse import parse_qs, urlsplit

from .hub_api import (
    DEFAULT_TOKENS,
    READ_TOKEN,
    TEST_USER,
    WRITE_TOKEN,
    HubApi,
    HubError,
    Request,
    Response,
    error_response,
)
from .hub_store import HubStore

__all__ = ["READ_TOKEN", "TEST_USER", "WRITE_TOKEN", "HubServer", "RequestRecord", "main"]

_DRAIN_LIMIT = 1 << 20  # unread request bodies up to this size are drained to keep the connection


CLIENT_CLOSED = 499  # the status recorded for a request whose client hung up before it was whole
_LENGTH_RE = re.compile(r"[0-9]{1,18}")
_CHUNK_SIZE_RE = re.compile(rb"[0-9A-Fa-f]{1,15}")


class MalformedBody(ValueError):
    """The request's framing (Content-Length, Transfer-Encoding, a chunk size) cannot be read:
    answered with a 400 and a closed connection, since where the next request starts is unknown."""


def _body_length(headers) -> int | None:
    """The body's length from the framing headers, None for chunked; MalformedBody when they
    are not exactly one of: no body, one Content-Length of digits, Transfer-Encoding: chunked."""
    lengths = [v.strip() for v in headers.get_all("Content-Length") or []]
    codings = [c.strip().lower() for v in headers.get_all("Transfer-Encoding") or [] for c in v.split(",")]
    if codings:
        if codings != ["chunked"] or lengths:
            raise MalformedBody("Transfer-Encoding must be exactly 'chunked', without a Content-Length")
        return None
    if not lengths:
        return 0
    if len(lengths) != 1 or not _LENGTH_RE.fullmatch(lengths[0]):
        raise MalformedBody(f"Invalid Content-Length: {', '.join(lengths)!r}")
    return int(lengths[0])


@dataclasses.dataclass(frozen=True)
class RequestRecord:
    method: str
    path: str      # as sent, percent-encoded, with the query
    status: int    # as answered, or CLIENT_CLOSED


class _Body:
    """A request body as a stream, framed by Content-Length or chunked transfer encoding."""

    def __init__(self, rfile: BinaryIO, length: int | None):
        """`length`: the Content-Length, or None for a chunked body."""
        self._rfile = rfile
        self._chunked = length is None
        self._left = length or 0
        self._done = not self._chunked and self._left == 0

    def read(self, size: int = -1) -> bytes:
        out = bytearray()
        while not self._done and (size < 0 or len(out) < size):
            if self._chunked and self._left == 0:
                self._next_chunk()
                continue
            want = self._left if size < 0 else min(self._left, size - len(out))
            data = self._rfile.read(want)
            if not data:
                raise ConnectionError("the client closed the connection mid-body")
            out += data
            self._left -= len(data)
            if self._left == 0:
                if self._chunked:
                    self._rfile.readline()  # the CRLF after each chunk
                else:
                    self._done = True
        return bytes(out)

    def _next_chunk(self) -> None:
        line = self._rfile.readline(1024)
        if not line:
            raise ConnectionError("the client closed the connection mid-body")
        size = line.split(b";")[0].strip()
        if not _CHUNK_SIZE_RE.fullmatch(size):
            raise MalformedBody(f"Invalid chunk size: {size[:20]!r}")
        self._left = int(size, 16)
        if self._left == 0:
            while self._rfile.readline(1024).strip():  # trailers, then the blank line
                pass
            self._done = True

    def drain(self, limit: int) -> bool:
        """Discard what is left, if it is at most `limit` bytes; True when the body is consumed."""
        try:
            while not self._done and limit > 0:
                limit -= len(self.read(min(limit, 1 << 16))) or 1
        except (ConnectionError, ValueError):
            return False
        return self._done


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: huggingface_hub pools its connections
    server_version = "kbuild-test-hub"
    timeout = 120
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, True)

    def finish(self) -> None:
        self.server.track(self.connection, False)
        super().finish()

    def do_GET(self) -> None:
        try:
            body = _Body(self.rfile, _body_length(self.headers))
        except MalformedBody as error:
            self._refuse(error)
            return
        target = urlsplit(self.path)
        host = self.headers.get("Host") or "{}:{}".format(*self.server.server_address[:2])
        request = Request(self.command, target.path or "/", parse_qs(target.query, keep_blank_values=True),
                          self.headers, body, f"http://{host}")
        try:
            response = self.server.hub.app.handle(request)
        except ConnectionError:  # the client hung up mid-body: nothing was written, nothing to answer
            self.close_connection = True
            self.server.hub._record(RequestRecord(self.command, self.path, CLIENT_CLOSED))
            return
        except MalformedBody as error:  # found while the API read the body
            self._refuse(error)
            return
        except Exception as error:  # noqa: BLE001 - a server bug: answer like the Hub would, and say what broke
            self.server.hub._log(f"internal error on {self.command} {self.path}: {error!r}", error)
            response = Response(500, {"Content-Type": "application/json"}, b'{"error": "Internal Error"}')
        if not body.drain(_DRAIN_LIMIT):
            self.close_connection = True
        self._send(response)
        self.server.hub._record(RequestRecord(self.command, self.path, response.status))

    do_HEAD = do_POST = do_PUT = do_DELETE = do_GET

    def _refuse(self, error: MalformedBody) -> None:
        self.close_connection = True
        response = error_response(HubError(400, str(error)))
        self._send(response)
        self.server.hub._record(RequestRecord(self.command, self.path, response.status))

    def _send(self, response: Response) -> None:
        self.send_response(response.status)
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(response.content_length))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command == "HEAD":
            return
        try:
            if response.file is None:
                self.wfile.write(response.body)
                return
            with open(response.file, "rb") as f:
                f.seek(response.offset)
                left = response.length
                while left > 0:
                    chunk = f.read(min(left, 1 << 20))
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    left -= len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def log_message(self, format: str, *args) -> None:
        if self.server.hub.verbose:
            sys.stderr.write(f"{self.address_string()} - {format % args}\n")


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    hub: HubServer

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()

    def track(self, connection: socket.socket, alive: bool) -> None:
        with self._connections_lock:
            (self._connections.add if alive else self._connections.discard)(connection)

    def close_connections(self) -> None:
        """Hang up on kept-alive clients, so that no old handler answers after a stop."""
        with self._connections_lock:
            connections, self._connections = list(self._connections), set()
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)


class HubServer:
    """The test Hub on a local port, persisting in `root`.

    `tokens` maps each accepted token to "write" or "read" (default: WRITE_TOKEN and READ_TOKEN);
    every token belongs to one user, TEST_USER, who may read and (with a write token) write
    every repo. `trusted_orgs` are organizations whose overview says trustedKernelPublisher;
    `orgs` are further organizations that exist but are not trusted, as does any other
    namespace but the user's that holds a repo.
    """

    def __init__(self, root: Path, tokens: dict[str, str] | None = None,
                 trusted_orgs: tuple[str, ...] = ("kernels-community",), *, orgs: tuple[str, ...] = (),
                 host: str = "127.0.0.1", port: int = 0, tree_page_size: int = 1000, verbose: bool = False):
        self.root = Path(root)
        self.tokens = dict(DEFAULT_TOKENS if tokens is None else tokens)
        self.trusted_orgs = tuple(trusted_orgs)
        self.orgs = tuple(orgs)
        self.host, self.port = host, port
        self.tree_page_size = tree_page_size
        self.verbose = verbose
        self.requests: list[RequestRecord] = []  # every request answered, oldest first
        self._lock = threading.Lock()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.app: HubApi | None = None

    # -- lifecycle ------------------------------------------------------------------------
    def _bind(self) -> None:
        self.app = HubApi(HubStore(self.root), self.tokens, self.trusted_orgs, self.orgs,
                          page_size=self.tree_page_size)
        self._httpd = _HTTPServer((self.host, self.port), _Handler)
        self._httpd.hub = self

    def start(self) -> HubServer:
        """Serve from a background thread; returns self."""
        if self._httpd is not None:
            raise RuntimeError("the server is already running")
        self._bind()
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                        name=f"hub-server-{self.endpoint}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        self._httpd.close_connections()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._httpd, self._thread = None, None

    def __enter__(self) -> HubServer:
        return self if self._httpd is not None else self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- facts for clients ----------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the server is not running")
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def token(self, role: str) -> str:
        """A token with `role` ("write" or "read")."""
        for token, token_role in self.tokens.items():
            if token_role == role:
                return token
        raise LookupError(f"no {role} token configured")

    @property
    def write_token(self) -> str:
        return self.token("write")

    @property
    def read_token(self) -> str:
        return self.token("read")

    def _record(self, record: RequestRecord) -> None:
        with self._lock:
            self.requests.append(record)

    def _log(self, message: str, error: BaseException | None = None) -> None:
        sys.stderr.write(f"[hub] {message}\n")
        if error is not None:
            traceback.print_exception(error, file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernel_builder.testing.hub",
                                     description="Run the kbuild test Hub in the foreground.")
    parser.add_argument("--root", required=True, type=Path, help="folder the repos persist in")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--token", action="append", default=[], metavar="TOKEN:ROLE",
                        help="accept TOKEN with ROLE write or read (repeatable; default: the test tokens)")
    parser.add_argument("--trusted-org", action="append", metavar="ORG",
                        help="an organization marked as a trusted kernel publisher, besides kernels-community")
    parser.add_argument("--org", action="append", default=[], metavar="ORG",
                        help="an untrusted organization (one that holds a repo exists anyway)")
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    args = parser.parse_args(argv)

    tokens = {}
    for spec in args.token:
        token, _, role = spec.rpartition(":")
        if not token or role not in ("write", "read"):
            parser.error(f"--token wants TOKEN:write or TOKEN:read, not {spec!r}")
        tokens[token] = role
    trusted = tuple(dict.fromkeys(("kernels-community", *(args.trusted_org or ()))))
    server = HubServer(args.root, tokens or None, trusted, orgs=tuple(args.org), host=args.host,
                       port=args.port, verbose=args.verbose)
    server._bind()
    print(server.endpoint, flush=True)
    for token, role in server.tokens.items():
        print(f"token {role}: {token}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server._httpd.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server._httpd.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
