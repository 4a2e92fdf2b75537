"""The docker runner on a real engine: images built with BuildKit from the offline Debian
base (docker/offline-base.sh), pip settings forwarded from the host, and kernels built in
containers: tiny (outputs belong to the caller), then examples/swiglu's CPU and cu130
variants (nvcc from NVIDIA's wheels), checked with `kbuild check` and loaded on the host.

.ci/run starts an engine and starts making the base in the background; the tests make the base
(or wait for that run) where they can (root, debootstrap) and skip, saying why, where no engine runs."""

from __future__ import annotations

import base64
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import copy_example, docker_engine, kbuild, kbuild_in_process
from kernel_builder.runners import docker_images
from kernel_builder.runners.docker import KBUILD_PACKAGE_DIR, container_spec, run_container
from kernel_builder.variants import Variant

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "fixtures" / "tiny"
CPU = "torch213-cxx11-cpu-x86_64-linux"
CU130 = "torch214-cxx11-cu130-x86_64-linux"

pytestmark = [pytest.mark.e2e, pytest.mark.docker]


@pytest.fixture(scope="module")
def engine():
    client = docker_engine()
    if os.uname().machine != "x86_64":
        pytest.skip("the offline base and the cu130 image are made for x86_64 here")
    return client


@pytest.fixture(scope="module")
def base_image(engine) -> str:
    """$KBUILD_TEST_BASE_IMAGE, else docker/offline-base.sh's image (.ci/run starts making it early; the script
    waits for that run and finds its image)."""
    if os.environ.get("KBUILD_TEST_BASE_IMAGE"):
        return os.environ["KBUILD_TEST_BASE_IMAGE"]
    done = subprocess.run([str(REPO / "docker" / "offline-base.sh")], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        pytest.skip(f"no base image: docker/offline-base.sh failed: {why}")
    return done.stdout.strip().splitlines()[-1]


def test_builds_tiny_in_a_container_as_the_caller(engine, base_image, tmp_path):
    images, _ = docker_images.build_images([Variant.parse(CPU)], engine, base_image=base_image, say=print)
    img = docker_images.image_for(Variant.parse(CPU), base_image=base_image)
    assert images[0].image.tag == img.tag and images[0].status in ("built", "present")
    # The secrets never reach the image: its history names no forwarded setting.
    history = json.dumps(engine.api.history(img.tag))
    assert "127.0.0.1" not in history and "constraint" not in history

    kernel, out = Path(shutil.copytree(TINY, tmp_path / "tiny")), tmp_path / "out"
    spec = container_spec(CPU, kernel, out, tmp_path / "ccache", KBUILD_PACKAGE_DIR, img,
                          uid=os.getuid(), gid=os.getgid(), max_jobs=2, nvcc_threads=None, kbuild_cache_dir=tmp_path / "job")
    outcome = run_container(spec, tmp_path / "job.log", client=engine)
    log = (tmp_path / "job.log").read_text()
    assert outcome.exit_code == 0, log
    assert [row["status"] for row in outcome.report["jobs"]] == ["built"], log
    metadata = out / CPU / "metadata.json"
    assert json.loads(metadata.read_text())["name"] == "tiny"
    assert metadata.stat().st_uid == os.getuid(), "outputs belong to the caller, not root"


PASSWORD = "s3cr3t-index-pw"


@contextmanager
def index_behind_a_password() -> Iterator[tuple[str, list[str]]]:
    """An index URL with user:password@ on loopback (the image build runs with the host's
    network) and the Authorization headers it received. It serves nothing (404): pip goes on
    to the host's forwarded indexes, which serve torch, so the build works as before."""
    heard: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            heard.append(self.headers.get("Authorization", ""))
            self.send_error(404)

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://kbuild:{PASSWORD}@127.0.0.1:{server.server_address[1]}/simple", heard
    finally:
        server.shutdown()
        server.server_close()


def holds(command: list[str], secret: bytes) -> bool:
    """Whether `command`'s output (a `docker save` tar: GBs) holds `secret`, read as a stream."""
    with subprocess.Popen(command, stdout=subprocess.PIPE) as process:
        assert process.stdout is not None
        tail = b""
        found = False
        while chunk := process.stdout.read(1 << 20):
            found = found or secret in tail + chunk
            tail = chunk[-len(secret):]
    assert process.returncode == 0, f"{command} failed"
    return found


def test_a_remade_base_rebuilds_the_image_of_the_same_tag(engine, base_image, tmp_path, monkeypatch):
    """Same name, other content (offline-base.sh run again): the image is not 'present'.
    These builds install torch with an index password (KBUILD_TORCH_INDEX): it reaches pip
    as a BuildKit secret, and neither the plan, the build's output, the image's history nor
    any byte of the saved image holds it."""
    variant = Variant.parse(CPU)
    docker_images.build_images([variant], engine, base_image=base_image)
    stand_in = f"kbuild-test-base-copy:{os.getpid()}"
    engine.images.get(base_image).tag(stand_in)
    secret = PASSWORD.encode()
    with index_behind_a_password() as (index, heard):
        monkeypatch.setenv("KBUILD_TORCH_INDEX", index)  # every build below: its image tag holds it masked
        tag = docker_images.image_for(variant, base_image=stand_in).tag
        try:
            plan = kbuild_in_process("docker", "build-images", "--dry-run", "--base-image", stand_in,
                                     "torch=2.13 backend=cpu os=linux arch=x86_64")
            assert plan.returncode == 0 and "TORCH_INDEX_URL=http://***@127.0.0.1" in plan.stdout, plan.stdout + plan.stderr
            assert PASSWORD not in plan.stdout + plan.stderr
            lines: list[str] = []
            first, _ = docker_images.build_images([variant], engine, base_image=stand_in, say=lines.append)
            assert first[0].status == "built" and first[0].image.tag == tag
            expected = "Basic " + base64.b64encode(f"kbuild:{PASSWORD}".encode()).decode()
            assert expected in heard, f"the torch install never asked the index with its password: {heard}"
            assert PASSWORD not in "\n".join(lines)
            history = subprocess.run(["docker", "history", "--no-trunc", tag], capture_output=True, text=True, check=True).stdout
            assert "TORCH_INDEX_URL=http://***@127.0.0.1" in history and PASSWORD not in history
            assert not holds(["docker", "save", tag], PASSWORD.encode()), "the index password is in the saved image"

            again, _ = docker_images.build_images([variant], engine, base_image=stand_in)
            assert again[0].status == "present"
            # Re-point the name at other content: a one-layer child of the base.
            child = engine.containers.create(stand_in, ["true"], network_mode="none")
            child.commit(*stand_in.split(":"))
            child.remove()
            lines = []
            rebuilt, _ = docker_images.build_images([variant], engine, base_image=stand_in, say=lines.append)
            assert rebuilt[0].status == "built" and any("its base changed" in line for line in lines)
        finally:
            for name in (tag, stand_in):
                try:
                    engine.images.remove(name, force=True)
                except Exception:  # noqa: BLE001 -- already gone
                    pass


def test_swiglu_cpu_and_cu130_build_in_containers_and_pass_check(engine, base_image, tmp_path):
    """The issue's acceptance: both variants in containers, the CUDA one with nvcc from
    wheels; `kbuild check` passes both and says which policy they meet; the CPU build
    loads on the host and matches the reference."""
    kernel, out, store = copy_example("swiglu", tmp_path), tmp_path / "out", tmp_path / "store"
    both = ("--runner", "docker", "--base-image", base_image, "--variant", CPU, "--variant", CU130, "--json")
    done = kbuild("build", str(kernel), *both, "--out", str(out), "--output-cache", str(store))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {row["variant"]: row for row in json.loads(done.stdout)["jobs"]}
    assert {rows[v]["status"] for v in (CPU, CU130)} == {"built"}, rows

    # The output cache, reached from the host: each variant went up under the id its container
    # stamped; a second checkout (another path) into a fresh folder installs both from the
    # store, verified, with no build container.
    stamped = {json.loads((out / v / "metadata.json").read_text())["kbuild"]["input-hash"] for v in (CPU, CU130)}
    assert {p.stem for p in store.glob("*.tar")} == stamped
    second = copy_example("swiglu", tmp_path / "second-checkout")
    again = kbuild("build", str(second), *both, "--out", str(tmp_path / "again"), "--output-cache", str(store),
                   "--output-cache-mode", "read")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    for row in json.loads(again.stdout)["jobs"]:
        assert (row["status"], row["detail"], row["checks"]) == ("up-to-date", "from the output cache", []), row
    for variant in (CPU, CU130):
        [first_library], [cached_library] = (out / variant).glob("*.so"), (tmp_path / "again" / variant).glob("*.so")
        assert first_library.read_bytes() == cached_library.read_bytes()
    for variant in (CPU, CU130):
        log = Path(rows[variant]["log"]).read_text()
        assert log.startswith("$ docker run"), "built in a container"
    # The glibc policy is said up front (Debian bookworm: 2.36).
    assert "has glibc 2.36" in done.stderr and "manylinux_2_36" in done.stderr
    # The CUDA image has no toolkit but NVIDIA's wheels, and the library carries the SASS
    # swiglu asks for (read with the cuobjdump of the image's triton wheel).
    [library] = (out / CU130).glob("*.so")
    cuda_image = docker_images.image_for(Variant.parse(CU130), base_image=base_image).tag
    site = "/opt/kbuild/venv/lib/python3.11/site-packages"
    probe = (f"ls -d /usr/local/cuda* 2>/dev/null; ls {site}/nvidia/cu13/bin/nvcc; "
             f"{site}/triton/backends/nvidia/bin/cuobjdump --list-elf {library}")
    listing = engine.containers.run(cuda_image, ["sh", "-c", probe], remove=True, network_mode="none",
                                    volumes={str(out): {"bind": str(out), "mode": "ro"}}).decode()
    assert not listing.startswith("/usr/local/cuda") and f"{site}/nvidia/cu13/bin/nvcc" in listing, listing
    assert {"sm_80", "sm_90"} <= set(re.findall(r"\.(sm_\d+a?)\.cubin", listing)), listing

    checked = kbuild("check", str(out), "--json")
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-2000:]
    reports = {r["variant"]: {c["check"]: c for c in r["checks"]} for r in json.loads(checked.stdout)}
    for variant in (CPU, CU130):
        abi = reports[variant]["abi"]
        assert abi["status"] == "ok" and abi["detail"].startswith("manylinux_2_28"), abi

    # Loaded in a fresh interpreter: this suite may have loaded another swiglu build of the
    # same kernel id already.
    check = (
        "import sys, torch; from pathlib import Path; from kernel_builder.runtime import load_local; "
        "swiglu = load_local(Path(sys.argv[1])); x = torch.randn(5, 2 * 96); d = x.shape[-1] // 2; "
        "torch.testing.assert_close(swiglu.silu_and_mul(x), torch.nn.functional.silu(x[..., :d]) * x[..., d:], "
        "rtol=1e-5, atol=1e-5); print('matches')"
    )
    loaded = subprocess.run([sys.executable, "-c", check, str(out / CPU)], capture_output=True, text=True, check=False)
    assert loaded.returncode == 0 and loaded.stdout.strip() == "matches", loaded.stderr[-2000:]


def test_a_cutlass_kernel_builds_in_a_container_from_the_hosts_headers(engine, base_image, tmp_path):
    """The containers have no network, so `depends = ["cutlass_4_0"]` is made on the host (from
    PyPI) and mounted read-only into the container, which compiles against exactly that
    release (the fixture static_asserts 4.0.0) and passes its import check. One capability:
    the docker runner compiles the kernel's own list (it refuses --cuda-arch)."""
    root = Path(shutil.copytree(REPO / "tests" / "fixtures" / "cutlass-depends", tmp_path / "cutlass-depends"))
    toml = root / "build.toml"
    toml.write_text(toml.read_text().replace('depends = ["torch", "cutlass_4_0"]',
                                             'depends = ["torch", "cutlass_4_0"]\ncuda-capabilities = ["9.0"]'))
    out = tmp_path / "out"
    done = kbuild("build", str(root), "--runner", "docker", "--base-image", base_image, "--variant", CU130,
                  "--out", str(out), "--json")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [row] = json.loads(done.stdout)["jobs"]
    assert row["status"] == "built" and {c["check"]: c["status"] for c in row["checks"]}.get("import") == "ok", row
    command = Path(row["log"]).read_text().splitlines()[0]
    assert command.startswith("$ docker run") and re.search(r"source=[^,]*/tools/cutlass/4\.0\.0-[0-9a-f]+,target=[^,]+,readonly",
                                                            command), command
    assert list((out / CU130).glob("*.so"))
