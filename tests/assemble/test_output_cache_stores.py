"""The output cache against real stores on loopback, through their fsspec backends: an HTTP
server (read-only: entries other builds uploaded), an S3 API server (moto's server mode,
through s3fs) and the test Hub (huggingface_hub's HfFileSystem): an entry uploaded by one build is a verified hit for the next, a tampered one
is refused (tampered, truncated)."""

from __future__ import annotations

import functools
import http.server
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

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


# huggingface_hub reads HF_ENDPOINT when it is imported: the Hub's client runs in a subprocess.
_HUB_CLIENT = """
import json, sys
from pathlib import Path
sys.path[:0] = sys.argv[1:3]
from test_output_cache import ID, VARIANT, fetch, make_variant
from kernel_builder.assemble.output_cache import OutputCache
cache, tmp = OutputCache(sys.argv[3]), Path(sys.argv[4])
stored = cache.store(ID, make_variant(tmp / "built" / VARIANT)) if sys.argv[5] == "store" else None
print(json.dumps({"stored": stored, "fetched": fetch(cache, tmp / "out" / VARIANT)}))
"""


def test_a_hub_repo_is_a_store_through_hffilesystem(hub, tmp_path):
    from huggingface_hub import HfApi

    from hub_fixture import hub_env

    api = HfApi(endpoint=hub.endpoint, token=hub.write_token)
    repo = f"{api.whoami()['name']}/kernel-cache"
    api.create_repo(repo, repo_type="dataset")
    tests = Path(__file__).resolve().parents[1]

    def client(step: str, folder: str) -> dict:
        argv = [sys.executable, "-c", _HUB_CLIENT, str(tests), str(tests / "assemble"), f"hf://datasets/{repo}/relu",
                str(tmp_path / folder), step]
        done = subprocess.run(argv, env=dict(os.environ, **hub_env(hub, tmp_path)), capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.splitlines()[-1])

    assert client("store", "first") == {"stored": True, "fetched": [True, []]}
    entry = api.hf_hub_download(repo, f"relu/{ID}.tar", repo_type="dataset", cache_dir=tmp_path / "dl")
    data = Path(entry).read_bytes()
    (tmp_path / "truncated.tar").write_bytes(data[: len(data) // 2])
    api.upload_file(path_or_fileobj=str(tmp_path / "truncated.tar"), path_in_repo=f"relu/{ID}.tar", repo_id=repo,
                    repo_type="dataset")  # truncated
    second = client("fetch", "second")
    assert second["stored"] is None and second["fetched"][0] is False
    assert len(second["fetched"][1]) == 1 and "refused" in second["fetched"][1][0]
