"""What a pip install will download, said before it starts (environments.download_cost):
pip's report read from a fake pip, sizes from local files and a loopback HTTP server,
and one real dry run of a small package."""

from __future__ import annotations

import http.server
import json
import sys
import threading
from pathlib import Path

import pytest

from kernel_builder.environments import download_cost
from kernel_builder.environments.download_cost import Download, DownloadCost, cost, dry_run
from kernel_builder.formatting import human_size


def _wheel(folder: Path, name: str, size: int) -> Path:
    path = folder / name
    path.write_bytes(b"\0" * size)
    return path


@pytest.fixture
def http_files(tmp_path):
    """A loopback server for tmp_path/served (HEAD answers Content-Length); yields (folder, base URL, stop)."""
    served = tmp_path / "served"
    served.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(served), **kwargs)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    stopped = []

    def stop():
        if not stopped:
            server.shutdown()
            server.server_close()
            stopped.append(True)

    yield served, f"http://127.0.0.1:{server.server_address[1]}", stop
    stop()


def test_sizes_come_from_local_files_and_head_and_unknown_stays_unknown(tmp_path, http_files):
    served, base, stop = http_files
    torch = _wheel(tmp_path, "torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl", 3_000_000)
    cublas = _wheel(tmp_path, "nvidia_cublas-13.1.1.3-py3-none-manylinux_2_27_x86_64.whl", 500_000)
    _wheel(served, "nvidia_nvjitlink-13.5.37-py3-none-manylinux_2_27_x86_64.whl", 200_000)
    _wheel(served, "filelock-4.3.2-py3-none-any.whl", 1_000)
    downloads = [
        Download("torch", "2.14.1", torch.as_uri()),  # a file:// index
        Download("nvidia-cublas", "13.1.1.3", str(cublas)),  # a find-links path
        Download("nvidia-nvjitlink", "13.5.37", f"{base}/nvidia_nvjitlink-13.5.37-py3-none-manylinux_2_27_x86_64.whl"),
        Download("filelock", "4.3.2", f"{base}/filelock-4.3.2-py3-none-any.whl"),
        Download("gone", "1.0", f"{base}/gone-1.0-py3-none-any.whl"),  # 404: unknown
    ]
    found = cost(downloads)
    assert [d.size for d in found.downloads] == [3_000_000, 500_000, 200_000, 1_000, None]
    assert found.total == 3_701_000 and found.unknown == 1
    assert found.describe(["torch"]) == (
        "about 3.7 MB plus 1 file of unknown size to download (torch 2.14.1, 2 NVIDIA wheels and 2 others)"
    )
    assert found.sizes()["torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl"] == 3_000_000

    # A published file never changes: its size is remembered, the server is not asked again.
    stop()
    again = cost(downloads)
    assert [d.size for d in again.downloads] == [3_000_000, 500_000, 200_000, 1_000, None]


def test_what_cannot_be_sized_is_said_to_be_unknown():
    nowhere = DownloadCost((Download("torch", "2.14.1", "http://127.0.0.1:9/torch-2.14.1.whl"),))
    assert nowhere.size_text() == "size unknown"
    assert nowhere.describe(["torch"]) == "torch 2.14.1 to download, size unknown"
    assert DownloadCost(()).describe() == "nothing to download"


def test_two_installs_count_a_shared_file_once():
    runtime = Download("nvidia-cuda-runtime", "13.0.96", "file:///w/nvidia_cuda_runtime-13.0.96.whl", 1_000_000)
    torch = DownloadCost((Download("torch", "2.14.1", "file:///w/torch.whl", 2_000_000_000), runtime))
    nvcc = DownloadCost((Download("nvidia-cuda-nvcc", "13.0.88", "file:///w/nvcc.whl", 50_000_000), runtime))
    both = torch + nvcc
    assert both.total == 2_051_000_000 and len(both.downloads) == 3
    assert both.describe(["torch"]) == "about 2.1 GB to download (torch 2.14.1 and 2 NVIDIA wheels)"


def _fake_pip(tmp_path: Path, report: dict | None) -> Path:
    """An interpreter whose `-m pip install ... --report FILE` writes `report` (None: fails)."""
    script = tmp_path / "fake-python"
    body = "import sys\n"
    if report is None:
        body += "sys.exit(1)\n"
    else:
        body += (f"report = {json.dumps(json.dumps(report))}\n"
                 "open(sys.argv[sys.argv.index('--report') + 1], 'w').write(report)\n")
    script.write_text(f"#!{sys.executable}\n{body}")
    script.chmod(0o755)
    return script


def _report_item(name: str, version: str, url: str, requires: list[str] | None = None) -> dict:
    return {"download_info": {"url": url, "archive_info": {}}, "is_direct": False,
            "metadata": {"name": name, "version": version, "requires_dist": requires}}


def test_a_pip_report_is_read_and_kept_for_a_day(tmp_path, monkeypatch):
    monkeypatch.setenv("KBUILD_CACHE_DIR", str(tmp_path / "cache"))
    download_cost._dry_run.cache_clear()
    torch = _wheel(tmp_path, "torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl", 4_000_000)
    nccl = _wheel(tmp_path, "nvidia_nccl_cu13-2.30.7-py3-none-manylinux_2_18_x86_64.whl", 1_000_000)
    report = {"version": "1", "pip_version": "23.2.1", "install": [
        _report_item("torch", "2.14.1", torch.as_uri(), ['nvidia-nccl-cu13==2.30.7; platform_system == "Linux"']),
        _report_item("nvidia-nccl-cu13", "2.30.7", nccl.as_uri()),
    ]}
    python = _fake_pip(tmp_path, report)
    found = dry_run(str(python), ["torch==2.14.*"])
    assert [(d.name, d.version) for d in found] == [("torch", "2.14.1"), ("nvidia-nccl-cu13", "2.30.7")]
    assert found[0].requires_dist == ('nvidia-nccl-cu13==2.30.7; platform_system == "Linux"',)
    assert cost(found).describe(["torch"]) == "about 5.0 MB to download (torch 2.14.1 and 1 NVIDIA wheel)"

    # Another process (the lru cache cleared) with a pip that now fails gets the kept answer.
    download_cost._dry_run.cache_clear()
    _fake_pip(tmp_path, None)
    assert dry_run(str(python), ["torch==2.14.*"]) == found
    assert dry_run(str(python), ["torch==2.13.*"], cached_only=True) is None, "never asked: not known"
    assert dry_run(str(python), ["torch==2.13.*"]) is None, "pip failed: no answer, no guess"


@pytest.mark.e2e
def test_a_real_dry_run_sizes_a_small_package(tmp_path, monkeypatch):
    """pip's own report for a small wheel (pip's configured indexes: a local file index or
    PyPI), sized by stat or HEAD: the size is the file's."""
    monkeypatch.setenv("KBUILD_CACHE_DIR", str(tmp_path / "cache"))
    found = dry_run(sys.executable, ["idna==3.*"], ["--no-deps"])
    if found is None:
        pytest.skip("pip could not resolve idna from its configured indexes here")
    [idna] = cost(found).downloads
    assert idna.name == "idna" and idna.filename.endswith(".whl")
    assert idna.size is not None and 10_000 < idna.size < 10_000_000
    assert cost(found).describe(["idna"]) == f"about {human_size(idna.size)} to download (idna {idna.version})"
