"""`kbuild build --output-cache`: a build uploads its variant under its input id; a build into a
fresh output folder (another runner's checkout, a re-run) installs it from the store,
verified, with no compile; a read-only build adds nothing to the store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import kbuild
from kernel_builder.runtime.digest import verify_digest

VARIANT = "torch213-cxx11-cpu-x86_64-linux"
pytestmark = pytest.mark.e2e


def build_json(kernel: Path, out: Path, *extra: str) -> dict:
    result = kbuild("build", str(kernel), "--variant", VARIANT, "--out", str(out), "--json", *extra, check=True)
    (row,) = json.loads(result.stdout)["jobs"]
    return row


def test_a_second_build_dir_installs_from_the_output_cache(relu_cpu, tmp_path):
    store = tmp_path / "store"
    first = build_json(relu_cpu, tmp_path / "first", "--output-cache", str(store))
    assert first["status"] == "built", first
    entries = sorted(p.name for p in store.iterdir() if p.suffix == ".tar")
    assert len(entries) == 1
    input_id = entries[0].removesuffix(".tar")
    metadata = json.loads((tmp_path / "first" / VARIANT / "metadata.json").read_text())
    assert metadata["kbuild"]["input-hash"] == input_id

    # A fresh output folder, the store given by the environment, read-only as for a fork's PR.
    second = kbuild("build", str(relu_cpu), "--variant", VARIANT, "--out", str(tmp_path / "second"), "--json",
                    env={"KBUILD_OUTPUT_CACHE": f"file://{store}", "KBUILD_OUTPUT_CACHE_MODE": "read"}, check=True)
    (row,) = json.loads(second.stdout)["jobs"]
    assert (row["status"], row["detail"]) == ("up-to-date", "from the output cache"), row
    assert row["compiled"] is None and row["compiler_cache"] is None, "nothing compiled"
    installed = tmp_path / "second" / VARIANT
    assert verify_digest(installed, json.loads((installed / "metadata.json").read_text())) == []
    assert sorted(p.name for p in store.iterdir() if p.suffix == ".tar") == entries

    # A tampered entry is refused: the build compiles instead and says why.
    entry = store / entries[0]
    data = bytearray(entry.read_bytes())
    at = data.index(b"ops")  # a byte of a packaged file, not of the archive's headers
    data[at:at + 3] = b"OPS"
    entry.write_bytes(bytes(data))
    third = build_json(relu_cpu, tmp_path / "third", "--output-cache", str(store), "--output-cache-mode", "read")
    assert third["status"] == "built", third
    warnings = [c for c in third["checks"] if c["check"] == "output-cache"]
    assert len(warnings) == 1 and "refused" in warnings[0]["detail"] and warnings[0]["status"] == "warning", third["checks"]


def test_a_checkout_at_another_path_with_its_own_cache_installs_from_the_output_cache(relu_cpu, tmp_path):
    """Issue 34: the input id names no folder, so a second runner (its checkout at another
    path, its own kbuild cache and work trees) installs the first one's build; and the
    library itself names no folder of the runner that built it (-ffile-prefix-map), so the
    entry is the library that runner would have built."""
    import shutil
    import sysconfig

    import torch

    store = tmp_path / "store"
    first = build_json(relu_cpu, tmp_path / "first", "--output-cache", str(store))
    assert first["status"] == "built", first
    [library] = (tmp_path / "first" / VARIANT).glob("*.so")
    data = library.read_bytes()
    site_packages = Path(torch.__file__).resolve().parents[1]
    for folder in (relu_cpu.resolve(), site_packages, Path(sysconfig.get_paths()["include"])):
        assert str(folder).encode() not in data, f"the library names {folder}"
    assert b"/kbuild/kernel/" in data, "TORCH_CHECK's file names are spelled through /kbuild"

    elsewhere = Path(shutil.copytree(relu_cpu, tmp_path / "runner-b" / "checkouts" / "relu",
                                     ignore=shutil.ignore_patterns("build", "__pycache__")))
    second = kbuild("build", str(elsewhere), "--variant", VARIANT, "--json", "--output-cache", str(store),
                    env={"KBUILD_CACHE_DIR": str(tmp_path / "runner-b" / "cache")}, check=True)
    (row,) = json.loads(second.stdout)["jobs"]
    assert (row["status"], row["detail"]) == ("up-to-date", "from the output cache"), row
    [cached] = (elsewhere / "build" / VARIANT).glob("*.so")
    assert cached.read_bytes() == data
    # The up-to-date check uses the same id: a rebuild there does nothing.
    third = build_json(elsewhere, elsewhere / "build")
    assert (third["status"], third["detail"]) == ("up-to-date", ""), third
