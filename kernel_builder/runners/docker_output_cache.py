"""The docker runner's output cache, reached from the host: the build containers have no network.

Before a variant's build container starts, a short container of the same image prints the
variant's input id (input_id_probe: the id is the image's toolchain's, the one its build will
stamp); the host looks it up and, on a verified hit, installs the variant with no build
container at all. After a build, the host uploads the variant under the id its metadata.json
carries. As for the local runner, a refused entry or a lost upload is a warning among the job's
checks, never a failure."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

from kernel_builder.assemble.output_cache import OutputCache, OutputCacheError
from kernel_builder.checks.variant_checks import WARNING, CheckResult
from kernel_builder.errors import KbuildError
from kernel_builder.runners.base import writing_to
from kernel_builder.runners.local import OUTPUT_CACHE_CHECK, drop_other_style, is_up_to_date
from kernel_builder.runners.result import BUILT, FROM_OUTPUT_CACHE, UP_TO_DATE, JobResult, folder_size
from kernel_builder.runtime.files import JsonFileError, load_json_file
from kernel_builder.variants import Variant

PROBE_MODULE = "kernel_builder.pipeline.input_id_probe"


def probe_command(build_command: tuple[str, ...]) -> tuple[str, ...]:
    """The probe for a build container's command (`python -m kernel_builder.cli build ARGS`):
    the same interpreter and arguments, the probe instead of the build."""
    python, _, _, _, *arguments = build_command
    return (python, "-m", PROBE_MODULE, *arguments)


def cached_build(
    cache: OutputCache,
    variant: Variant,
    out_dir: Path,
    probe: Callable[[], dict | list | None],
    build: Callable[[], JobResult],
) -> JobResult:
    """`build()` (the build container) unless the store holds the variant's build: `probe()`
    runs the probe container and returns its JSON."""
    start = time.perf_counter()
    dest = out_dir / variant.name
    warnings: list[CheckResult] = []

    def warn(message: str) -> None:
        warnings.append(CheckResult(OUTPUT_CACHE_CHECK, WARNING, message))

    try:
        answer = probe()
    except KbuildError as e:
        answer = {"error": e.message}
    input_id = answer.get("input-id") if isinstance(answer, dict) else None
    if not isinstance(input_id, str):
        why = answer.get("error") if isinstance(answer, dict) else None
        warn(f"the build image did not say the variant's input id ({why or 'no answer'}); building")
    elif not is_up_to_date(dest, input_id):
        with writing_to(out_dir):
            if cache.fetch(input_id, dest, warn=warn):
                drop_other_style(variant, out_dir)
                return JobResult(variant.name, variant.backend, UP_TO_DATE, time.perf_counter() - start,
                                 FROM_OUTPUT_CACHE, size=folder_size(dest), checks=tuple(warnings))
    result = build()
    if result.status == BUILT:
        try:
            cache.store(_stamped_id(dest), dest)
        except OutputCacheError as e:
            warn(f"{e.message}; the variant is built and installed")
        except (OSError, JsonFileError, ValueError) as e:
            warn(f"cannot read the built variant's input id ({e}); not uploaded")
    return replace(result, checks=(*result.checks, *warnings)) if warnings else result


def _stamped_id(dest: Path) -> str:
    """The input id the container's build stamped into the variant (a ValueError if none)."""
    metadata = load_json_file(dest / "metadata.json")
    stamp = metadata.get("kbuild") if isinstance(metadata, dict) else None
    if not isinstance(stamp, dict) or not isinstance(stamp.get("input-hash"), str):
        raise ValueError("metadata.json has no kbuild.input-hash")
    return stamp["input-hash"]
