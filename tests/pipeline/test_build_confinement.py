"""Build confinement (issue 14, "Building" and "Crash-safe install"): every path a build reads
(build.toml, `src`, `include`, the Python package) resolves, links followed, inside the kernel
repo, else one line naming the key and the path before anything is compiled, from `kbuild plan`
too; the staleness check hashes what the build copied; a full or read-only `--out` is one line
and the previous variant stays; fusion names that Python cannot spell are refused at kbuild.toml;
and build/ holds the old or the new variant at every instant of an install, even under SIGKILL.

Real `kbuild` runs on tiny CPU kernels: the compiled tiny fixture (refused before its compile)
and pure-Python [torch-noarch] kernels written here."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import REPO, kbuild
from kernel_builder.kernel.fusion import load_fusions
from kernel_builder.errors import ManifestError
from kernel_builder.runtime.digest import verify_digest
from kernel_builder.runtime.loader import read_metadata
from test_build import FIXTURE

pytestmark = pytest.mark.e2e

NOARCH = "torch-cpu"
STAGING = ".kbuild-staging-"


def noarch_kernel(parent: Path, name: str = "conf", value: int = 1) -> Path:
    """A pure-Python kernel: builds in a second, no compiler."""
    root = parent / name
    package = root / "torch-ext" / name
    package.mkdir(parents=True)
    (root / "build.toml").write_text(
        f'[general]\nname = "{name}"\nversion = 1\nlicense = "MIT"\nbackends = ["cpu"]\n\n[torch-noarch]\n'
    )
    (package / "__init__.py").write_text(f"VALUE = {value}\n")
    return root


def tiny_kernel(parent: Path) -> Path:
    return shutil.copytree(FIXTURE, parent / "tiny")


def set_unit(root: Path, **keys: str) -> None:
    """Rewrite keys of the tiny fixture's [kernel.tiny_cpu] (values are TOML)."""
    lines = (root / "build.toml").read_text().splitlines()
    start = lines.index("[kernel.tiny_cpu]")
    for key, value in keys.items():
        line = next((i for i in range(start, len(lines)) if lines[i].startswith(f"{key} =")), None)
        if line is None:
            lines.insert(start + 1, f"{key} = {value}")
        else:
            lines[line] = f"{key} = {value}"
    (root / "build.toml").write_text("\n".join(lines) + "\n")


def refused(result: subprocess.CompletedProcess, *needles: str) -> str:
    """A non-zero exit with exactly one `kbuild: error:` line holding every needle, no traceback."""
    assert result.returncode != 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("kbuild: error:")]
    assert len(errors) == 1, result.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


def plan_and_build_refuse(root: Path, *needles: str) -> str:
    """`kbuild plan` and `kbuild build` both refuse, and the build compiled and wrote nothing."""
    refused(kbuild("plan", str(root)), *needles)
    message = refused(kbuild("build", str(root)), *needles)
    assert not (root / "build").exists()
    return message


@pytest.fixture
def outside(tmp_path) -> Path:
    """Files beside the kernel repo, which no build may read."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "add.cpp").write_text((FIXTURE / "cpu" / "add.cpp").read_text())
    (folder / "evil.h").write_text("#error outside\n")
    (folder / "secret.py").write_text("TOKEN = 'hf_outside_secret'\n")
    return folder


# -- paths leaving the repo -------------------------------------------------------------------


def test_a_src_entry_leaving_the_repo_is_refused_before_any_compile(tmp_path, outside):
    root = tiny_kernel(tmp_path)
    set_unit(root, src='["../outside/add.cpp"]')
    plan_and_build_refuse(root, "[kernel.tiny_cpu] src", "'../outside/add.cpp'", "outside the kernel repo")


def test_a_src_file_linked_out_of_the_repo_is_refused(tmp_path, outside):
    root = tiny_kernel(tmp_path)
    (root / "cpu" / "add.cpp").unlink()
    (root / "cpu" / "add.cpp").symlink_to(outside / "add.cpp")
    plan_and_build_refuse(root, "[kernel.tiny_cpu] src", "'cpu/add.cpp' is a link to", str(outside / "add.cpp"))


def test_a_header_linked_out_of_an_include_folder_is_refused(tmp_path, outside):
    root = tiny_kernel(tmp_path)
    (root / "inc").mkdir()
    (root / "inc" / "evil.h").symlink_to(outside / "evil.h")
    set_unit(root, include='["inc"]')
    plan_and_build_refuse(root, "[kernel.tiny_cpu] include", "'inc/evil.h' is a link to", str(outside / "evil.h"))


def test_the_docker_runner_refuses_a_link_out_before_any_image_or_container(tmp_path, outside):
    root = tiny_kernel(tmp_path)
    (root / "inc").mkdir()
    (root / "inc" / "evil.h").symlink_to(outside / "evil.h")
    set_unit(root, include='["inc"]')
    result = kbuild("build", str(root), "--runner", "docker", "--variant", "torch213-cxx11-cpu-x86_64-linux")
    refused(result, "[kernel.tiny_cpu] include", "'inc/evil.h' is a link to", str(outside / "evil.h"))
    assert not (root / "build").exists()


def test_an_include_folder_linked_out_of_the_repo_is_refused(tmp_path, outside):
    root = tiny_kernel(tmp_path)
    (root / "inc").symlink_to(outside, target_is_directory=True)
    set_unit(root, include='["inc"]')
    plan_and_build_refuse(root, "[kernel.tiny_cpu] include", "'inc' is a link to", str(outside))


@pytest.mark.parametrize("key", ["src", "include"])
def test_an_absolute_path_is_one_line_not_a_value_error(tmp_path, outside, key):
    root = tiny_kernel(tmp_path)
    target = outside / "add.cpp" if key == "src" else outside
    set_unit(root, **{key: json.dumps([str(target)])})
    message = plan_and_build_refuse(root, f"[kernel.tiny_cpu] {key}", str(target), "absolute path")
    assert "ValueError" not in message


def test_an_include_of_the_parent_tree_is_refused_without_walking_it(tmp_path):
    root = tiny_kernel(tmp_path)
    set_unit(root, include='["../../../.."]')
    started = time.perf_counter()
    result = kbuild("plan", str(root))
    refused(result, "[kernel.tiny_cpu] include", "'../../../..'", "outside the kernel repo")
    assert time.perf_counter() - started < 30  # the old walk of / took minutes, or crashed


def test_a_package_file_linked_out_of_the_repo_is_never_copied(tmp_path, outside):
    root = noarch_kernel(tmp_path)
    (root / "torch-ext" / "conf" / "leak.py").symlink_to(outside / "secret.py")
    plan_and_build_refuse(root, "package torch-ext/conf", "'torch-ext/conf/leak.py' is a link to", str(outside / "secret.py"))


def test_a_package_folder_linked_out_of_the_repo_is_refused(tmp_path, outside):
    root = noarch_kernel(tmp_path)
    (root / "torch-ext" / "conf" / "extra").symlink_to(outside, target_is_directory=True)
    plan_and_build_refuse(root, "package torch-ext/conf", "'torch-ext/conf/extra' is a link to")


def test_the_package_itself_linked_out_of_the_repo_is_refused(tmp_path):
    elsewhere = noarch_kernel(tmp_path / "elsewhere")
    root = noarch_kernel(tmp_path)
    shutil.rmtree(root / "torch-ext" / "conf")
    (root / "torch-ext" / "conf").symlink_to(elsewhere / "torch-ext" / "conf", target_is_directory=True)
    plan_and_build_refuse(root, "[general] name", "'torch-ext/conf' is a link to")


def test_links_inside_the_repo_are_followed_copied_and_hashed(tmp_path):
    """What the build reads through a link inside the repo is what it copies and what the
    staleness check hashes: editing the link's target rebuilds."""
    root = noarch_kernel(tmp_path)
    shared = root / "shared"
    shared.mkdir()
    (shared / "helper.py").write_text("HELP = 1\n")
    (root / "torch-ext" / "conf" / "sub").symlink_to(Path("..", "..", "shared"), target_is_directory=True)
    kbuild("build", str(root), check=True)
    built = root / "build" / NOARCH / "sub" / "helper.py"
    assert built.read_text() == "HELP = 1\n" and not built.is_symlink()
    (shared / "helper.py").write_text("HELP = 2\n")
    rows = json.loads(kbuild("build", str(root), "--json", check=True).stdout)["jobs"]
    assert [r["status"] for r in rows] == ["built"], rows
    assert built.read_text() == "HELP = 2\n"


def test_a_build_toml_linked_out_of_the_repo_names_the_file_given(tmp_path):
    elsewhere = noarch_kernel(tmp_path / "elsewhere")
    root = tmp_path / "repo"
    root.mkdir()
    (root / "build.toml").symlink_to(elsewhere / "build.toml")
    message = refused(kbuild("plan", str(root)), str(root / "build.toml"), "outside the kernel repo")
    assert message.index(str(root / "build.toml")) < message.index(str(elsewhere))
    refused(kbuild("build", str(root / "build.toml")), str(root / "build.toml"))
    assert not (elsewhere / "build").exists() and not (root / "build").exists()


def test_a_build_toml_linked_inside_the_repo_keeps_the_repo_as_root(tmp_path):
    """The kernel root is the folder of the build.toml given, not the link target's."""
    root = noarch_kernel(tmp_path)
    (root / "config").mkdir()
    (root / "build.toml").rename(root / "config" / "build.toml")
    (root / "build.toml").symlink_to(Path("config", "build.toml"))
    kbuild("build", str(root), check=True)
    assert (root / "build" / NOARCH / "__init__.py").read_text() == "VALUE = 1\n"


def test_a_file_name_that_is_not_utf8_is_one_line_naming_the_folder(tmp_path):
    root = noarch_kernel(tmp_path)
    package = os.fsencode(root / "torch-ext" / "conf")
    try:
        open(os.path.join(package, b"bad\xff.py"), "w").close()
    except OSError as e:  # a filesystem that only takes UTF-8 names cannot hold one
        pytest.skip(f"this filesystem refuses a non-UTF-8 name: {e}")
    plan_and_build_refuse(root, "'torch-ext/conf'", "not UTF-8", "bad\\xff.py")


# -- a full or read-only --out ------------------------------------------------------------------


@contextmanager
def small_filesystem(folder: Path, size: str):
    """A real tmpfs of `size` at folder (needs root and mount(8)); skips where it cannot."""
    folder.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root and mount(8)")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def failed_write(root: Path, out: Path, needle: str, before: dict) -> None:
    """The rebuild failed in one line naming `needle`; the previous variant is intact."""
    result = kbuild("build", str(root), "--out", str(out), "--json")
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    (row,) = json.loads(result.stdout)["jobs"]
    assert row["status"] == "failed" and needle in row["detail"] and "\n" not in row["detail"], row
    assert "previous variant is kept" in row["detail"], row
    variant = out / NOARCH
    assert read_metadata(variant) == before and verify_digest(variant, before) == []
    assert (variant / "__init__.py").read_text() == "VALUE = 1\n"
    assert not [p for p in out.iterdir() if p.name.startswith(STAGING)]


def test_a_full_disk_is_one_line_and_keeps_the_previous_variant(tmp_path):
    root = noarch_kernel(tmp_path)
    with small_filesystem(tmp_path / "out", "128k") as out:
        kbuild("build", str(root), "--out", str(out), check=True)
        before = read_metadata(out / NOARCH)
        (root / "torch-ext" / "conf" / "__init__.py").write_text("VALUE = 2\n")
        (root / "torch-ext" / "conf" / "big.py").write_text("# padding\n" * 40_000)  # 400 KB > 128 KB
        failed_write(root, out, "No space left on device", before)


def test_a_read_only_out_is_one_line_and_keeps_the_previous_variant(tmp_path):
    root = noarch_kernel(tmp_path)
    with small_filesystem(tmp_path / "out", "1m") as out:
        kbuild("build", str(root), "--out", str(out), check=True)
        before = read_metadata(out / NOARCH)
        subprocess.run(["mount", "-o", "remount,ro", str(out)], check=True)
        (root / "torch-ext" / "conf" / "__init__.py").write_text("VALUE = 2\n")
        failed_write(root, out, "Read-only file system", before)


# -- fusion names --------------------------------------------------------------------------------

LAYERS = """
import torch


class Fused(torch.nn.Module):
    def forward(self, x):
        return x
"""


@pytest.mark.parametrize(
    "children, bad",
    [
        ('{ name = "class", params = ["weight"] }, { name = "mlp" }', "'class'"),
        ('{ name = "self", params = ["weight"] }, { name = "mlp" }', "'self'"),
        ('{ name = "norm", params = ["None"] }, { name = "mlp" }', "'None'"),
        ('{ name = "norm", attrs = ["lambda"] }, { name = "mlp" }', "'lambda'"),
    ],
)
def test_a_fusion_name_python_cannot_spell_is_refused_at_kbuild_toml(tmp_path, children, bad):
    root = noarch_kernel(tmp_path)
    (root / "torch-ext" / "conf" / "layers.py").write_text(LAYERS)
    (root / "kbuild.toml").write_text(f"[fusion.Fused]\nchildren = [{children}]\n")
    with pytest.raises(ManifestError) as raised:
        load_fusions(root)
    assert raised.value.message.startswith("kbuild.toml: [fusion.Fused] children[") and bad in raised.value.message
    refused(kbuild("build", str(root)), "kbuild.toml", bad)
    assert not (root / "build").exists()


def test_a_kernel_layer_named_by_a_keyword_is_refused(tmp_path):
    root = noarch_kernel(tmp_path)
    (root / "kbuild.toml").write_text('[fusion.None]\nchildren = [{ name = "a" }, { name = "b" }]\n')
    refused(kbuild("build", str(root)), "kbuild.toml: [fusion.None]", "'None'")


# -- crash-safe install ----------------------------------------------------------------------------

# Installs the two builds in turn into out/<variant>, as `kbuild build` installs each new one.
INSTALL_LOOP = """
import os, shutil, sys
from pathlib import Path
from kernel_builder.assemble.stamp import STAGING_PREFIX, install

sources, out, variant = [Path(sys.argv[1]), Path(sys.argv[2])], Path(sys.argv[3]), sys.argv[4]
for i in range(1_000_000):
    staging = out / f"{STAGING_PREFIX}{variant}-{os.getpid()}"
    shutil.copytree(sources[i % 2], staging)
    install(staging, out / variant)
    if i == 0:
        print("installing", flush=True)
"""


LOAD = "from kernel_builder.runtime import load_local; print(load_local({path!r}).VALUE)"


def load_value(path: Path) -> int:
    """load_local (digests verified) in a fresh interpreter: the VALUE the loaded kernel holds."""
    result = subprocess.run([sys.executable, "-c", LOAD.format(path=str(path))], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr
    return int(result.stdout.split()[-1])


@pytest.fixture
def two_builds(tmp_path) -> tuple[Path, Path, Path]:
    """The kernel repo, and copies of its variant built with VALUE = 1 and with VALUE = 2
    (the sources now say 2)."""
    root = noarch_kernel(tmp_path)
    builds = []
    for value in (1, 2):
        (root / "torch-ext" / "conf" / "__init__.py").write_text(f"VALUE = {value}\n")
        kbuild("build", str(root), check=True)
        builds.append(shutil.copytree(root / "build" / NOARCH, tmp_path / f"v{value}"))
    return root, builds[0], builds[1]


def test_a_reader_always_finds_the_variant_and_sigkill_leaves_one(two_builds, tmp_path):
    """While installs replace the variant over and over, a reader polling build/<variant>
    never finds it missing; SIGKILL at any moment leaves a complete variant that loads, and
    the next build clears what the killed install left."""
    root, v1, v2 = two_builds
    out = root / "build"
    shutil.rmtree(out / NOARCH)
    shutil.copytree(v1, out / NOARCH)
    writer = subprocess.Popen([sys.executable, "-c", INSTALL_LOOP, str(v1), str(v2), str(out), NOARCH],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline() == "installing\n", writer.stderr.read()
        marker = str(out / NOARCH / "metadata.json")
        checks = missing = 0
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            checks += 1
            missing += not os.path.exists(marker)
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    finally:
        if writer.poll() is None:
            writer.kill()
    assert missing == 0, f"build/{NOARCH} was missing in {missing} of {checks} looks during the installs"
    assert writer.returncode == -signal.SIGKILL
    assert verify_digest(out / NOARCH, read_metadata(out / NOARCH)) == []
    assert load_value(root) in (1, 2)
    rows = json.loads(kbuild("build", str(root), "--json", check=True).stdout)["jobs"]
    assert [r["status"] for r in rows] in (["built"], ["up-to-date"]), rows
    assert sorted(p.name for p in out.iterdir()) == [NOARCH]
    assert load_value(root) == 2


def test_a_kill_between_the_two_renames_still_loads_and_the_next_build_recovers(two_builds):
    """Where the filesystem cannot exchange two names atomically, install renames twice; a
    SIGKILL between the renames leaves the previous variant under its replaced name and the
    new one staged (the on-disk state reproduced here). kbuild's loader still loads the
    previous variant, and the next build puts it back and brings it up to date."""
    root, v1, v2 = two_builds
    out = root / "build"
    shutil.rmtree(out / NOARCH)
    shutil.copytree(v1, out / f"{STAGING}old-{NOARCH}-4242")
    shutil.copytree(v2, out / f"{STAGING}{NOARCH}-4242")
    assert load_value(root) == 1
    rows = json.loads(kbuild("build", str(root), "--json", check=True).stdout)["jobs"]
    assert [r["status"] for r in rows] == ["built"], rows
    assert sorted(p.name for p in out.iterdir()) == [NOARCH]
    assert load_value(root) == 2
