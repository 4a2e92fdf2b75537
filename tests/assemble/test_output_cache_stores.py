"""The output cache against real stores on loopback, through their fsspec backends: an HTTP
server (read-only: entries other builds uploaded) and an S3 API server (moto's server mode,
through s3fs): an entry uploaded by one build is a verified hit for the next, a tampered one
is refused."""

from __future__ import annotations

import functools
import http.server
import io
import subprocess
import sys
import tarfile
import threading
import time

import pytest

from conftest import optional_module
from kernel_builder.assemble.output_cache import OutputCache
from kernel_builder.loopback import free_port, listening
from test_output_cache import ID, VARIANT, fetch, make_variant

pytestmark = pytest.mark.e2e  # servers on loopback, over HTTP


@pytest.fixture
def http_store(tmp_path):
    optional_module("aiohttp")  # fsspec's HTTP backend
    folder = tmp_path / "served"
    OutputCache(str(folder)).store(ID, make_variant(tmp_path / "built" / VARIANT))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield OutputCache(f"http://127.0.0.1:{server.server_address[1]}/"), folder
    server.shutdown()
    server.server_close()


def test_an_http_store_serves_hits_and_takes_no_uploads(http_store, tmp_path):
    cache, folder = http_store
    assert not cache.writable and "HTTP stores are read-only" in cache.describe()
    hit, warnings = fetch(cache, tmp_path / "out" / VARIANT)
    assert hit and warnings == []
    assert cache.store(ID, tmp_path / "out" / VARIANT) is False
    missing = "ef" * 32
    assert fetch(cache, tmp_path / "other" / VARIANT, missing) == (False, [])


def test_an_http_store_with_a_tampered_entry_is_refused(http_store, tmp_path):
    cache, folder = http_store
    entry = folder / f"{ID}.tar"
    with tarfile.open(entry, "a") as tar:  # one more file than the digest lists
        info = tarfile.TarInfo("planted.py")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    hit, warnings = fetch(cache, tmp_path / "out" / VARIANT)
    assert not hit and "planted.py: unknown file" in warnings[0]


@pytest.fixture(scope="module")
def s3_server():
    optional_module("s3fs")
    optional_module("moto.server")
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not listening(port) and time.monotonic() < deadline:
            if server.poll() is not None:
                pytest.fail("moto's S3 server exited at start")
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_an_s3_store_round_trips_and_refuses_a_truncated_entry(s3_server, tmp_path, monkeypatch):
    import s3fs

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)  # botocore reads it (and AWS_ENDPOINT_URL_S3)
    s3 = s3fs.S3FileSystem(client_kwargs={"endpoint_url": s3_server}, skip_instance_cache=True)
    s3.mkdir("kernels")
    cache = OutputCache("s3://kernels/relu")
    assert cache.store(ID, make_variant(tmp_path / "built" / VARIANT)) is True
    assert cache.entry_count() == 1
    hit, warnings = fetch(cache, tmp_path / "out" / VARIANT)
    assert hit and warnings == []

    data = s3.cat_file(f"kernels/relu/{ID}.tar")
    s3.pipe_file(f"kernels/relu/{ID}.tar", data[: len(data) // 3])
    s3.invalidate_cache()
    hit, warnings = fetch(OutputCache("s3://kernels/relu"), tmp_path / "again" / VARIANT)
    assert not hit and len(warnings) == 1 and "refused" in warnings[0]
