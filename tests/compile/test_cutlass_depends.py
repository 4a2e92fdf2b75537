"""`depends = ["cutlass_X_Y"]`: the CUTLASS release kernel-builder builds the name with, fetched
from pinned PyPI files, accepted only with the release tag's content, on the CUDA library's include
path (kernel_builder.environments.cutlass_headers); a name kbuild cannot provide fails before
anything compiles, in one line."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import threading
import zipfile
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import REPO, kbuild
from cuda_toolkit import CUDA_VARIANT, needs_nvcc
from kernel_builder.environments import cutlass_headers
from kernel_builder.environments.cutlass_headers import Release, Source, tree_digest, unpack
from kernel_builder.errors import BuildError
from kernel_builder.kernel.manifest import KNOWN_DEPENDS
from kernel_builder.paths import cache_dir, short_key

FIXTURE = Path(__file__).parents[1] / "fixtures" / "cutlass-depends"
# kernel-builder's facts (huggingface/kernels nix-builder/pkgs/cutlass/default.nix): the release
# behind each name.
KERNEL_BUILDER_RELEASES = {
    "cutlass_2_10": "2.10.0", "cutlass_3_5": "3.5.1", "cutlass_3_6": "3.6.0", "cutlass_3_8": "3.8.0",
    "cutlass_3_9": "3.9.2", "cutlass_4_0": "4.0.0", "cutlass_4_4": "4.4.2", "cutlass_4_5": "4.5.2",
}


def test_every_cutlass_name_kernels_knows_is_kernel_builders_release():
    assert {n for n in KNOWN_DEPENDS if n.startswith("cutlass_")} == set(KERNEL_BUILDER_RELEASES)
    releases = cutlass_headers.releases()
    assert {name: r.version for name, r in releases.items()} == KERNEL_BUILDER_RELEASES
    for release in releases.values():
        assert [tree for tree, _ in release.trees] == ["include", "tools/util/include"]
        # Every tree comes from exactly one source, or the release has none at all.
        covered = [tree for s in release.sources for tree, _ in s.folders]
        assert sorted(covered) == (sorted(t for t, _ in release.trees) if release.sources else [])


def test_a_release_without_a_source_is_refused_in_one_line():
    with pytest.raises(BuildError) as refused:
        cutlass_headers.include_dirs(cutlass_headers.releases()["cutlass_4_5"])
    message = refused.value.message
    assert "\n" not in message and "CUTLASS 4.5.2 (depends cutlass_4_5)" in message and "cutlass_4_0" in message
    with pytest.raises(BuildError, match="cutlass_9_9: kbuild has no record"):
        cutlass_headers.wanted(["torch", "cutlass_9_9"])
    assert cutlass_headers.wanted(["torch", "cutlass_4_0", "cutlass_4_0"]) == (cutlass_headers.releases()["cutlass_4_0"],)


# -- unpacking and checking, against a package index served here --------------------------

HEADERS = {"cutlass/cutlass.h": b"#pragma once\n", "cute/layout.hpp": b"#pragma once\n// layout\n"}


def sdist(path: Path, files: dict[str, bytes], prefix: str, mode: int = 0o644) -> Path:
    with tarfile.open(path, "w:gz") as t:
        for name, data in files.items():
            info = tarfile.TarInfo(prefix + name)
            info.size, info.mode = len(data), mode
            t.addfile(info, io.BytesIO(data))
    return path


def wheel(path: Path, files: dict[str, bytes], prefix: str) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(prefix + name, data)
    return path


def test_a_tree_digest_is_its_content_whatever_the_archive_or_modes(tmp_path):
    sdist(tmp_path / "a.tar.gz", HEADERS, "pkg-1/third_party/cutlass/include/", mode=0o755)
    wheel(tmp_path / "b.whl", HEADERS, "pkg/data/include/")
    unpack(tmp_path / "a.tar.gz", "pkg-1/third_party/cutlass/include", tmp_path / "from-sdist")
    unpack(tmp_path / "b.whl", "pkg/data/include", tmp_path / "from-wheel")
    assert tree_digest(tmp_path / "from-sdist") == tree_digest(tmp_path / "from-wheel")
    (tmp_path / "from-wheel" / "cute" / "layout.hpp").write_bytes(b"changed\n")
    assert tree_digest(tmp_path / "from-sdist") != tree_digest(tmp_path / "from-wheel")
    with pytest.raises(BuildError, match="escapes its folder"):
        unpack(sdist(tmp_path / "evil.tar.gz", {"../../x.h": b""}, "p/include/"), "p/include", tmp_path / "evil")
    with pytest.raises(BuildError, match="has no files under nowhere/"):
        unpack(tmp_path / "b.whl", "nowhere", tmp_path / "none")


@pytest.fixture
def index(tmp_path, monkeypatch):
    """A package index (the JSON simple API, PEP 691) on localhost, serving `tmp_path/files`:
    `publish(package, file)` lists a file under its package."""
    files = tmp_path / "files"
    files.mkdir()
    listings: dict[str, list] = {}

    class Handler(SimpleHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            package = self.path.strip("/").split("/")[-1]
            if self.path.startswith("/simple/") and package in listings:
                body = json.dumps({"meta": {"api-version": "1.0"}, "name": package, "files": listings[package]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            super().do_GET()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(files)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{server.server_port}/simple")

    def publish(package: str, path: Path) -> Source:
        shutil.move(str(path), files / path.name)
        data = (files / path.name).read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        # Relative, as some indexes write them.
        listings.setdefault(package, []).append({"filename": path.name, "url": f"../../{path.name}", "hashes": {"sha256": digest}})
        return Source(package, path.name, digest, len(data), ())

    yield publish
    server.shutdown()


def release_of(source: Source, folder: str, digest: str) -> Release:
    return Release("cutlass_test", "9.9.9", (("include", digest),), (Source(**{**source.__dict__, "folders": (("include", folder),)}),))


def test_a_release_is_fetched_checked_and_unpacked_once(tmp_path, index):
    expected = tree_digest(_tree(tmp_path / "expected", HEADERS))
    source = index("vendor-pkg", sdist(tmp_path / "vendor_pkg-1.0.tar.gz", HEADERS, "vendor_pkg-1.0/cutlass/include/"))
    release = release_of(source, "vendor_pkg-1.0/cutlass/include", expected)
    said: list[str] = []
    dirs = cutlass_headers.include_dirs(release, said.append)
    assert len(said) == 1 and "CUTLASS 9.9.9 (depends cutlass_test)" in said[0] and "vendor_pkg-1.0.tar.gz" in said[0]
    folder = Path(dirs[0])
    assert folder.parent.name.startswith("9.9.9-") and (folder / "cutlass" / "cutlass.h").read_bytes() == HEADERS["cutlass/cutlass.h"]
    assert not (folder.parent / "downloads").exists()  # only the trees are kept
    assert cutlass_headers.include_dirs(release, said.append) == dirs and len(said) == 1  # made once


def test_a_file_or_tree_that_is_not_the_pinned_one_is_refused(tmp_path, index):
    source = index("vendor-pkg", sdist(tmp_path / "vendor_pkg-1.0.tar.gz", HEADERS, "v/include/"))
    wrong_tree = release_of(source, "v/include", "0" * 64)
    with pytest.raises(BuildError, match=r"the include/ unpacked from vendor_pkg-1.0.tar.gz is not that release's"):
        cutlass_headers.ensure(wrong_tree)
    left = [p.name for p in cutlass_headers.tools_root().iterdir() if p.name.startswith((wrong_tree.key, f".{wrong_tree.key}"))]
    assert left == [f"{wrong_tree.key}.lock"]  # no folder, complete or half-made
    expected = tree_digest(_tree(tmp_path / "expected", HEADERS))
    # (Other versions than the fetch test's: a folder already made with the content is reused.)
    tampered = Release("cutlass_test", "9.9.8", (("include", expected),),
                       (Source("vendor-pkg", source.file, "f" * 64, source.size, (("include", "v/include"),)),))
    with pytest.raises(BuildError, match="sha256 .* is not the pinned ffffffffffff"):
        cutlass_headers.ensure(tampered)
    missing = Release("cutlass_test", "9.9.7", (("include", expected),),
                      (Source("vendor-pkg", "absent-2.0.tar.gz", "f" * 64, 1, (("include", "v/include"),)),))
    with pytest.raises(BuildError, match="could not download absent-2.0.tar.gz from http://127.0.0.1:.*does not list"):
        cutlass_headers.ensure(missing)


def test_a_ready_release_folder_serves_without_a_source(tmp_path, monkeypatch):
    """What a build container sees: the host's checked folder of a release no PyPI file
    carries (cutlass_4_5), mounted read-only, and neither PyPI nor a checkout."""
    monkeypatch.setenv("KBUILD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KBUILD_CUTLASS_CHECKOUTS", raising=False)
    release = cutlass_headers.releases()["cutlass_4_5"]
    with pytest.raises(BuildError):
        cutlass_headers.ensure(release)  # nothing made yet: refused as before
    folder = cutlass_headers.tools_root() / release.key
    (folder / "include").mkdir(parents=True)
    (folder / cutlass_headers.READY).write_text("{}\n")
    assert cutlass_headers.ensure(release) == folder


def test_a_release_without_a_pypi_source_comes_from_a_checkout_the_user_names(tmp_path, monkeypatch):
    """KBUILD_CUTLASS_CHECKOUTS: a clone of the tag (here, folders with the release's content) is
    used when its trees are exactly the release's; otherwise the refusal says how to make one."""
    checkout = tmp_path / "cutlass"
    _tree(checkout / "include", HEADERS)
    _tree(checkout / "tools" / "util" / "include", {"cutlass/util/host_tensor.h": b"#pragma once\n"})
    trees = (("include", tree_digest(checkout / "include")), ("tools/util/include", tree_digest(checkout / "tools/util/include")))
    release = Release("cutlass_test", "9.9.6", trees, ())
    monkeypatch.delenv("KBUILD_CUTLASS_CHECKOUTS", raising=False)
    with pytest.raises(BuildError) as refused:
        cutlass_headers.ensure(release)
    message = refused.value.message
    assert "\n" not in message and "git clone --depth 1 --branch v9.9.6 https://github.com/NVIDIA/cutlass DIR" in message
    assert "KBUILD_CUTLASS_CHECKOUTS=DIR" in message and "cutlass_4_0" in message
    other = _tree(tmp_path / "other" / "include", {"cutlass/cutlass.h": b"// another release\n"}).parent
    monkeypatch.setenv("KBUILD_CUTLASS_CHECKOUTS", str(other))
    with pytest.raises(BuildError, match=f"none of {other} holds it"):
        cutlass_headers.ensure(release)
    monkeypatch.setenv("KBUILD_CUTLASS_CHECKOUTS", os.pathsep.join([str(other), str(checkout)]))
    said: list[str] = []
    include, util = cutlass_headers.include_dirs(release, said.append)
    assert Path(include).parent == cutlass_headers.tools_root() / release.key and said == [
        f"copying CUTLASS 9.9.6 (depends cutlass_test) headers from {checkout} (first time only)"]
    assert (Path(util) / "cutlass" / "util" / "host_tensor.h").is_file() and tree_digest(Path(include)) == trees[0][1]


def _tree(folder: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return folder


# -- real builds --------------------------------------------------------------------------

@pytest.mark.e2e
@pytest.mark.creates_env
@needs_nvcc
def test_a_kernel_depending_on_cutlass_4_0_builds_against_exactly_that_release(tmp_path):
    """The fixture's .cu includes cutlass/, cute/ (mma_sm100_desc.hpp, which deep-gemm stopped
    at) and cutlass/util/, and static_asserts CUTLASS 4.0.0; the build's import check loads it."""
    root = shutil.copytree(FIXTURE, tmp_path / "cutlass-depends")
    result = kbuild("build", str(root), "--variant", CUDA_VARIANT, "--cuda-arch", "9.0", "--max-jobs", "1")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    # The include path (part of the input hash) names the release and its content digest.
    # (the work tree of a --cuda-arch build is named after its architectures too)
    cmake = next(cache_dir("work", short_key(str(root.resolve()))).glob(f"{CUDA_VARIANT}*/CMakeLists.txt")).read_text()
    folder = cutlass_headers.tools_root() / cutlass_headers.releases()["cutlass_4_0"].key
    assert folder.name.startswith("4.0.0-") and str(folder / "include") in cmake and str(folder / "tools/util/include") in cmake
    from kernel_builder.environments.store import EnvSpec, find_env

    env = find_env(EnvSpec((2, 14), "cu130"))
    version = subprocess.run(
        [env.python, "-c", "import sys; from kernel_builder.runtime import load_local; print(load_local(sys.argv[1]).cutlass_version())",
         str(root)], capture_output=True, text=True, check=False, env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert version.stdout.split() == ["400"], version.stderr[-2000:]


@pytest.mark.e2e
@pytest.mark.creates_env
@needs_nvcc
def test_an_unknown_or_unprovidable_cutlass_fails_before_compiling_in_one_line(tmp_path):
    root = shutil.copytree(FIXTURE, tmp_path / "cutlass-depends")
    toml = root / "build.toml"
    toml.write_text(toml.read_text().replace('"cutlass_4_0"', '"cutlass_9_9"'))
    unknown = kbuild("build", str(root), "--variant", CUDA_VARIANT)
    assert unknown.returncode == 2 and len(unknown.stderr.strip().splitlines()) == 1
    assert "[kernel.cutlass_version] depends: unknown dependency 'cutlass_9_9'" in unknown.stderr
    toml.write_text(toml.read_text().replace('"cutlass_9_9"', '"cutlass_4_5"'))
    unprovidable = kbuild("build", str(root), "--variant", CUDA_VARIANT, "--json")
    job = json.loads(unprovidable.stdout)["jobs"][0]
    assert unprovidable.returncode != 0 and job["status"] == "failed" and "\n" not in job["detail"]
    assert job["detail"].startswith("CUTLASS 4.5.2 (depends cutlass_4_5): no file on PyPI carries")
    assert not job.get("log")  # nothing compiled


@pytest.mark.e2e
@needs_nvcc
def test_a_tvm_ffi_cuda_unit_gets_its_cutlass_too(tmp_path):
    """kernel-builder's cutlass-gemm-tvm-ffi shape: a [tvm-ffi] cuda unit with depends = ["cutlass_3_6"]."""
    root = shutil.copytree(Path(__file__).parents[1] / "fixtures" / "tvm-ffi-relu", tmp_path / "tvm-ffi-relu")
    toml = root / "build.toml"
    text = toml.read_text().replace('backends = ["cpu", "cuda", "xpu"]', 'backends = ["cuda"]')
    toml.write_text(text.replace('backend = "cuda"\ndepends = []', 'backend = "cuda"\ndepends = ["cutlass_3_6"]'))
    source = root / "cuda" / "relu.cu"
    source.write_text('#include <cutlass/cutlass.h>\n#include <cutlass/version.h>\n'
                      'static_assert(CUTLASS_MAJOR == 3 && CUTLASS_MINOR == 6, "cutlass_3_6 is CUTLASS 3.6.0");\n'
                      + source.read_text())
    result = kbuild("build", str(root), "--json")
    jobs = {row["backend"]: row for row in json.loads(result.stdout)["jobs"]}
    assert result.returncode == 0 and jobs["cuda"]["status"] == "built", result.stdout[-2000:] + result.stderr[-1000:]
