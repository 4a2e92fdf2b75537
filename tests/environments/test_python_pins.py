"""python-depends at kernel-builder's releases: the pins in kernel_builder/data/python_depends.toml
are the facts of kernel-builder's Nix (huggingface/kernels nix-builder/pkgs/python-modules), and a
kernel gets the one its flake.lock's kernel-builder revision had."""

from __future__ import annotations

import json
from datetime import datetime

from kernel_builder.environments import python_pins
from kernel_builder.environments.runtime_overlay import _satisfied, kernel_runtime_needs
from kernel_builder.kernel.manifest import PYTHON_DEPENDS, load_manifest

# The reference's facts, read off its history: (commit time, the version its default.nix sets).
# nvidia-cutlass-dsl: f83b4da6 (kernel-builder merged into kernels) 4.3.0, ab6917a2 4.4.1,
# 6ca4e2f9 4.5.0, a6564d1f 4.6.1; tvm-ffi: 4bcdf6f9 0.1.9 (unchanged since).
REFERENCE = {
    "nvidia-cutlass-dsl": [("2026-01-21T13:43:34+01:00", "4.3.0"), ("2026-03-12T15:23:58+01:00", "4.4.1"),
                           ("2026-05-13T14:36:03-04:00", "4.5.0"), ("2026-08-03T20:49:27+02:00", "4.6.1")],
    "tvm-ffi": [("2026-03-09T15:06:45+01:00", "0.1.9")],
}
# kernels 0.19.1's python_depends.json: the pip package of each name.
KERNELS_PIP = {"einops": "einops", "helion": "helion", "tvm-ffi": "apache-tvm-ffi",
               "nvidia-cutlass-dsl": "nvidia-cutlass-dsl", "onednn": "onednn-devel", "nki": "nki"}


def test_the_pins_are_kernel_builders_and_the_names_the_runtimes():
    known = python_pins.known()
    assert {name: d.pip for name, d in known.items()} == KERNELS_PIP
    assert set(known) == set().union(*PYTHON_DEPENDS.values())  # every name build.toml may use
    pinned = {name: [(since.isoformat(), version) for since, version in d.pins] for name, d in known.items() if d.pins}
    assert pinned == REFERENCE


def lock(root, when: str) -> None:
    stamp = int(datetime.fromisoformat(when).timestamp())
    nodes = {"root": {"inputs": {"kernel-builder": "kernel-builder"}},
             "kernel-builder": {"locked": {"owner": "huggingface", "repo": "kernels", "lastModified": stamp, "type": "github"}}}
    (root / "flake.lock").write_text(json.dumps({"nodes": nodes, "root": "root", "version": 7}))


def test_a_kernel_gets_the_pin_of_the_kernel_builder_its_flake_lock_locks(tmp_path):
    # msa locks 81580bb9 (2026-07-07): nvidia-cutlass-dsl 4.5.0, whose cute.core.ThrMma it uses.
    lock(tmp_path, "2026-07-07T15:08:57+05:30")
    assert python_pins.kernel_pins(tmp_path) == {"nvidia-cutlass-dsl": "4.5.0", "tvm-ffi": "0.1.9"}
    lock(tmp_path, "2026-08-03T20:49:27+02:00")  # the bump's own commit
    assert python_pins.kernel_pins(tmp_path)["nvidia-cutlass-dsl"] == "4.6.1"
    lock(tmp_path, "2025-06-01T00:00:00+00:00")  # older than the table: its oldest
    assert python_pins.kernel_pins(tmp_path)["nvidia-cutlass-dsl"] == "4.3.0"
    (tmp_path / "flake.lock").write_text("not json")  # no usable lock: the newest
    assert python_pins.locked_kernel_builder(tmp_path) is None
    assert python_pins.kernel_pins(tmp_path)["nvidia-cutlass-dsl"] == "4.6.1"


def test_a_kernels_needs_carry_its_pins(tmp_path):
    root = tmp_path / "kk"
    (root / "torch-ext" / "kk").mkdir(parents=True)
    (root / "torch-ext" / "kk" / "__init__.py").write_text("import cutlass\n")
    (root / "build.toml").write_text(
        '[general]\nname = "kk"\nversion = 1\nlicense = "MIT"\nbackends = ["cuda"]\npython-depends = ["einops"]\n\n'
        '[general.cuda]\npython-depends = ["nvidia-cutlass-dsl"]\n\n[torch]\nsrc = []\n')
    lock(root, "2026-07-07T15:08:57+05:30")
    needs = kernel_runtime_needs(load_manifest(root), "cuda")
    # `import cutlass` is the declared dependency's module, not a second need.
    assert needs.packages == ("einops", "nvidia-cutlass-dsl==4.5.0")


def test_a_base_with_another_release_does_not_satisfy_a_pin():
    dists = {"nvidia-cutlass-dsl": "4.8.1", "einops": "0.8.1"}
    assert not _satisfied("nvidia-cutlass-dsl==4.5.0", dists)
    assert _satisfied("nvidia-cutlass-dsl==4.8.1", dists)
    assert _satisfied("einops", dists) and not _satisfied("helion", dists)
