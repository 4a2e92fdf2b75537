"""The docker runner's output cache on the host side (kernel_builder.runners.docker_output_cache),
against a real local-folder store: a hit installs the variant with no build container; a miss
builds and uploads under the id the build stamped; a probe that gives no id builds, with a
warning. The containers are stand-ins here (tests/runners/test_docker_engine.py runs real ones)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kernel_builder.assemble.output_cache import OutputCache
from kernel_builder.runners.docker import container_spec
from kernel_builder.runners.docker_output_cache import PROBE_MODULE, cached_build, probe_command
from kernel_builder.runners.result import JobResult
from kernel_builder.variants import Variant

from assemble.test_output_cache import ID, VARIANT, make_variant

V = Variant.parse(VARIANT)


def never_built() -> JobResult:
    raise AssertionError("a build container ran")


def build_into(out: Path, input_id: str = ID):
    def build() -> JobResult:
        make_variant(out / VARIANT, input_id)
        return JobResult(VARIANT, "cpu", "built", 1.0)
    return build


def test_a_hit_installs_the_variant_without_a_build_container(tmp_path):
    cache = OutputCache(str(tmp_path / "store"))
    assert cache.store(ID, make_variant(tmp_path / "elsewhere" / VARIANT))
    out = tmp_path / "out"
    result = cached_build(cache, V, out, lambda: {"variant": VARIANT, "input-id": ID}, never_built)
    assert (result.status, result.detail, result.checks) == ("up-to-date", "from the output cache", ())
    assert (out / VARIANT / "_relu_cpu_abc1234.abi3.so").is_file()


def test_a_miss_builds_and_uploads_under_the_stamped_id(tmp_path):
    cache, out = OutputCache(str(tmp_path / "store")), tmp_path / "out"
    result = cached_build(cache, V, out, lambda: {"input-id": ID}, build_into(out))
    assert result.status == "built" and result.checks == ()
    assert [p.name for p in (tmp_path / "store").glob("*.tar")] == [f"{ID}.tar"]
    # The next runner's fresh output folder installs it.
    shutil.rmtree(out)
    again = cached_build(cache, V, out, lambda: {"input-id": ID}, never_built)
    assert again.detail == "from the output cache"


@pytest.mark.parametrize("answer", [None, {"error": "build.toml: no such file"}, ["not", "an", "answer"]])
def test_no_input_id_from_the_image_builds_with_a_warning(tmp_path, answer):
    cache, out = OutputCache(str(tmp_path / "store"), "read"), tmp_path / "out"
    result = cached_build(cache, V, out, lambda: answer, build_into(out))
    assert result.status == "built"
    (warning,) = result.checks
    assert warning.check == "output-cache" and warning.status == "warning" and "input id" in warning.detail
    assert not (tmp_path / "store").exists(), "a read-only store gets nothing"


def test_the_probe_runs_the_build_commands_arguments(tmp_path):
    from kernel_builder.runners.docker_images import image_for
    from kernel_builder.runners.docker import KBUILD_PACKAGE_DIR

    spec = container_spec(VARIANT, tmp_path, tmp_path / "out", None, KBUILD_PACKAGE_DIR, image_for(V),
                          uid=1, gid=1, max_jobs=None, nvcc_threads=None, kbuild_cache_dir=tmp_path / "job")
    probe = probe_command(spec.command)
    assert probe[:3] == (spec.command[0], "-m", PROBE_MODULE) and probe[3:] == spec.command[4:]
