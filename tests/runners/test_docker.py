"""The docker runner and its build images: the Dockerfiles (parsed), the image each variant
gets and its tag, the container spec of a job (image, mounts, environment, command,
user), running a container (against a stand-in engine), `kbuild docker build-images`, and
`kbuild docker build-images`; real engines build in tests/runners/test_docker_engine.py."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import optional_module
from kernel_builder.runners import docker_images
from kernel_builder.runners.docker_images import FAMILIES, HOME, VENV, image_for, image_tag
from kernel_builder.errors import KbuildError
from kernel_builder.runners import docker as runner
from kernel_builder.runners.docker import (
    KBUILD_PACKAGE_DIR,
    container_path,
    container_spec,
    parse_report,
    run_container,
)
from kernel_builder.variants import Variant, default_matrix

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "fixtures" / "tiny"
NO_ENGINE = "unix:///nonexistent.sock"
# One variant of each family, the image of which the Dockerfile checks build args against.
SAMPLE = {
    "cpu": "torch214-cxx11-cpu-x86_64-linux",
    "cuda": "torch214-cxx11-cu130-aarch64-linux",
    "rocm": "torch213-cxx11-rocm71-x86_64-linux",
    "xpu": "torch214-cxx11-xpu20260-x86_64-linux",
}


@pytest.fixture(autouse=True)
def _default_indexes(monkeypatch):
    """The torch indexes of data/matrix.toml, not an override from the environment."""
    monkeypatch.delenv("KBUILD_TORCH_INDEX", raising=False)


def image(name: str) -> docker_images.ImageSpec:
    return image_for(Variant.parse(name))


# -- the Dockerfiles ----------------------------------------------------------------------
def _refs(text: str) -> set[str]:
    """Docker (upper-case) variables a value refers to; shell-local ones are lower-case."""
    return set(re.findall(r"\$\{?([A-Z_][A-Z0-9_]*)", text))


def _arg(value: str) -> tuple[str, str | None]:
    name, _, default = value.partition("=")
    return name.strip(), (default.strip() or None) if "=" in value else None


def test_every_dockerfile_is_there():
    assert sorted(p.name for p in docker_images.docker_dir().glob("Dockerfile.*")) == [f"Dockerfile.{f}" for f in sorted(FAMILIES)]


@pytest.mark.parametrize("family", FAMILIES)
def test_dockerfile_parses_and_takes_the_args_the_code_passes(family):
    path = docker_images.dockerfile(family)
    spec = image(SAMPLE[family])
    assert spec.family == family and spec.dockerfile == path
    parser = optional_module("dockerfile_parse").DockerfileParser(fileobj=io.BytesIO(path.read_bytes()), build_args=spec.build_args)
    steps = [s for s in parser.structure if s["instruction"] != "COMMENT"]

    froms = [s for s in steps if s["instruction"] == "FROM"]
    assert len(froms) == 1, "one stage: the final stage is the image"
    arch = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}[spec.platform]
    assert parser.baseimage == spec.build_args["BASE_IMAGE"] == f"quay.io/pypa/manylinux_2_28_{arch}"

    # Global ARGs (before FROM) serve FROM only; the stage sees its own ARGs and ENVs.
    first_from = steps.index(froms[0])
    global_args = dict(_arg(s["value"]) for s in steps[:first_from] if s["instruction"] == "ARG")
    assert _refs(froms[0]["value"]) <= set(global_args)
    stage_args: dict[str, str | None] = {}
    # A global ARG redeclared in the stage keeps its value there.
    redeclared = {n for n in global_args if any(s["instruction"] == "ARG" and _arg(s["value"])[0] == n
                                               for s in steps[first_from + 1:])}
    known = {"PATH"}  # the base image's environment
    for step in steps[first_from + 1 :]:
        kind, value = step["instruction"], step["value"]
        undeclared = _refs(value) - set(stage_args) - known
        assert not undeclared, f"{path.name}:{step['startline'] + 1}: {kind} uses {sorted(undeclared)}, not declared before it"
        if kind == "ARG":
            name, default = _arg(value)
            stage_args[name] = global_args[name] if name in redeclared else default
        elif kind == "ENV":
            known |= {m.group(1) for m in re.finditer(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)=", value)}
        assert kind not in ("COPY", "ADD"), "the Dockerfile text and its args must be all of the image's inputs"

    declared = set(global_args) | set(stage_args)
    passed = set(spec.build_args)
    assert passed <= declared, f"passed but not declared: {sorted(passed - declared)}"
    required = {n for n, d in {**global_args, **stage_args}.items() if d is None}
    assert required <= passed, f"declared without a default but not passed: {sorted(required - passed)}"
    assert {"TORCH_VERSION", "TORCH_INDEX_URL"} <= passed

    # Building needs no GPU: nothing asks for one or probes for one.
    text = path.read_text()
    for probe in ("nvidia-smi", "rocminfo", "rocm-smi", "sycl-ls", "clinfo", "--gpus", "NVIDIA_VISIBLE_DEVICES",
                  "is_available()", "device_count()"):
        assert probe not in text, probe

    # The final stage has the venv the container command runs, first on PATH, and a HOME any uid can write.
    runs = " ".join(s["value"] for s in steps if s["instruction"] == "RUN")
    assert f"-m venv {VENV}" in runs and f"mkdir -p -m 1777 {HOME}" in runs
    assert parser.envs["PATH"].startswith(f"{VENV}/bin:")
    assert parser.envs["HOME"] == HOME


def test_cuda_images_take_nvcc_from_nvidias_wheels():
    from kernel_builder.environments.cuda_wheels import requirements

    spec = image(SAMPLE["cuda"])
    assert spec.build_args["TOOLKIT_REQUIREMENTS"].split() == requirements((13, 0))
    text = spec.dockerfile.read_text()
    assert "${TOOLKIT_REQUIREMENTS}" in text
    # No system toolkit, no NVIDIA package repository.
    assert "dnf" not in text and "apt-get" not in text and "developer.download.nvidia.com" not in text


def test_pip_settings_arrive_as_secrets_and_the_download_cache_is_shared():
    for family in ("cpu", "cuda"):
        text = docker_images.dockerfile(family).read_text()
        assert "--mount=type=secret,id=pip.conf" in text and "PIP_CONFIG_FILE=/run/secrets/pip.conf" in text
        assert "--mount=type=cache,id=kbuild-pip" in text


@pytest.mark.parametrize("family", FAMILIES)
def test_the_torch_index_password_reaches_the_build_as_a_secret_only(family, monkeypatch):
    """A password in KBUILD_TORCH_INDEX is in no build arg (the image history keeps those),
    no plan (--json) and no argument of the build command: the torch install reads the
    secret torch-index-url."""
    from kernel_builder.runners import image_builder

    url = "https://builder:IDXs3cr3t@mirror.example/whl/simple/"
    monkeypatch.setenv("KBUILD_TORCH_INDEX", url)
    name = {"cpu": "torch213-cxx11-cpu-x86_64-linux", "cuda": "torch214-cxx11-cu130-x86_64-linux",
            "rocm": "torch214-cxx11-rocm71-x86_64-linux", "xpu": "torch214-cxx11-xpu20260-x86_64-linux"}[family]
    try:
        spec = image(name)
    except KbuildError as e:
        pytest.skip(f"no {family} image in the default matrix: {e.message}")
    assert "IDXs3cr3t" not in json.dumps(spec.to_json()) and "IDXs3cr3t" not in repr(spec)
    assert spec.build_args["TORCH_INDEX_URL"] == "https://***@mirror.example/whl/simple/"
    text = spec.dockerfile.read_text()
    assert "--mount=type=secret,id=torch-index-url" in text and "/run/secrets/torch-index-url" in text
    assert '--index-url "${TORCH_INDEX_URL}"' not in text and '--index-url "$TORCH_INDEX_URL"' not in text

    seen: dict = {}

    def fake_build(dockerfile, tag, build_args, labels, pip, **kwargs):
        seen["args"] = json.dumps([build_args, labels])
        seen["secret"] = pip.secrets[docker_images.TORCH_INDEX_SECRET].read_text()
        seen["mode"] = pip.secrets[docker_images.TORCH_INDEX_SECRET].stat().st_mode & 0o777

    monkeypatch.setattr(image_builder, "build_image", fake_build)
    monkeypatch.setattr("kernel_builder.runners.pip_forwarding.host_pip_settings", lambda python=None: {})
    docker_images._build(spec, rebuild=False, base_id=None, say=lambda line: None)
    assert "IDXs3cr3t" not in seen["args"] and seen["secret"] == url and seen["mode"] == 0o600

def test_the_base_image_is_a_choice(monkeypatch):
    name = "torch214-cxx11-cu130-x86_64-linux"
    default = image(name)
    assert default.build_args["BASE_IMAGE"] == "quay.io/pypa/manylinux_2_28_x86_64"
    chosen = image_for(Variant.parse(name), base_image="kbuild-offline-base:bookworm")
    assert chosen.build_args["BASE_IMAGE"] == "kbuild-offline-base:bookworm" and chosen.tag != default.tag
    monkeypatch.setenv("KBUILD_DOCKER_BASE_IMAGE", "kbuild-offline-base:bookworm")
    assert image(name) == chosen
    assert image_for(Variant.parse(name), base_image="other:1").build_args["BASE_IMAGE"] == "other:1"


def test_glibc_policy_of_a_base():
    assert docker_images.glibc_policy((2, 28)) == "manylinux_2_28"
    assert docker_images.glibc_policy((2, 17)) == "manylinux_2_28"
    assert docker_images.glibc_policy((2, 36)) == "manylinux_2_36"


# -- which image builds a variant -----------------------------------------------------------
def test_images_follow_the_variant():
    cpu = image("torch214-cxx11-cpu-x86_64-linux")
    assert (cpu.family, cpu.platform, cpu.torch) == ("cpu", "linux/amd64", (2, 14))
    assert cpu.build_args["TORCH_VERSION"] == "2.14.*"
    # Any flavour builds CPU code: pip's own configuration (the host's, forwarded) picks it.
    assert cpu.build_args["TORCH_INDEX_URL"] == ""
    assert "typer>=0.12" in cpu.build_args["KBUILD_REQUIREMENTS"].split()

    cu132 = image("torch214-cxx11-cu132-aarch64-linux")
    assert (cu132.platform, cu132.build_args["BASE_IMAGE"], cu132.build_args["CUDA_VERSION"]) == (
        "linux/arm64", "quay.io/pypa/manylinux_2_28_aarch64", "13.2")
    assert cu132.build_args["TORCH_INDEX_URL"] == "https://download.pytorch.org/whl/cu132"
    # PyPI carries torch 2.14's cu130 build (data/matrix.toml [torch-index] pypi-cuda).
    assert image("torch214-cxx11-cu130-x86_64-linux").build_args["TORCH_INDEX_URL"] == ""

    rocm = image("torch213-cxx11-rocm71-x86_64-linux")
    assert rocm.build_args["ROCM_VERSION"] == "7.1"
    assert rocm.build_args["TORCH_INDEX_URL"] == "https://download.pytorch.org/whl/rocm7.1"
    xpu = image("torch214-cxx11-xpu20260-x86_64-linux")
    assert xpu.build_args["ONEAPI_VERSION"] == "2026.0"
    assert xpu.build_args["TORCH_INDEX_URL"] == "https://download.pytorch.org/whl/xpu"


def test_stable_abi_builds_with_the_newest_matching_torch_and_noarch_in_a_cpu_image():
    stable = image("torch-stable-abi212-cu130-x86_64-linux")
    assert stable.torch == (2, 14) and stable == image("torch214-cxx11-cu130-x86_64-linux")
    with pytest.raises(KbuildError, match="no torch >= 2.99"):
        image("torch-stable-abi299-cu130-x86_64-linux")
    noarch = image("torch-cuda")
    assert noarch.family == "cpu" and noarch.torch == (2, 14)


@pytest.mark.parametrize("name, needs", [
    ("torch214-metal-aarch64-darwin", "needs macOS and Xcode"),
    ("torch214-cpu-aarch64-darwin", "needs macOS,"),
    ("torch214-cxx11-rocm72-aarch64-linux", "x86_64 only"),
    ("torch214-cxx11-cu126-x86_64-linux", "no NVIDIA compiler wheels for CUDA 12.6"),
])
def test_variants_without_an_image_say_why(name, needs):
    with pytest.raises(KbuildError) as caught:
        image(name)
    assert caught.value.message.startswith(f"{name}: no build image") and needs in caught.value.message
    assert "\n" not in caught.value.message


def test_tag_is_a_stable_hash_of_the_inputs(tmp_path, monkeypatch):
    spec = image("torch214-cxx11-cu130-x86_64-linux")
    assert re.fullmatch(r"kbuild-build-cuda:torch2\.14-cu130-x86_64-[0-9a-f]{12}", spec.tag)
    assert image("torch214-cxx11-cu130-x86_64-linux").tag == spec.tag
    text = spec.dockerfile.read_text()
    args = dict(spec.build_args)
    assert image_tag("cuda", text, args, spec.platform, "l") == image_tag("cuda", text, dict(reversed(args.items())), spec.platform, "l")
    assert image_tag("cuda", text, {**args, "CUDA_VERSION": "13.2"}, spec.platform, "l") != image_tag("cuda", text, args, spec.platform, "l")
    assert image("torch214-cxx11-cu132-x86_64-linux").tag != spec.tag

    # An edited Dockerfile is a new image.
    edited = tmp_path / "Dockerfile.cuda"
    edited.write_text(text + "\n# a change\n")
    monkeypatch.setattr(docker_images, "dockerfile", lambda family: edited)
    changed = image("torch214-cxx11-cu130-x86_64-linux")
    assert changed.tag != spec.tag and changed.tag.rsplit("-", 1)[0] == spec.tag.rsplit("-", 1)[0]


def test_plan_images_dedupes_and_lists_what_has_none():
    variants = [Variant.parse(n) for n in (
        "torch-stable-abi212-cu130-x86_64-linux", "torch214-cxx11-cu130-x86_64-linux", "torch214-metal-aarch64-darwin",
    )]
    planned, skipped = docker_images.plan_images(variants)
    assert [(p.variants, p.status) for p in planned] == [(
        ("torch-stable-abi212-cu130-x86_64-linux", "torch214-cxx11-cu130-x86_64-linux"), "planned")]
    assert [v for v, _ in skipped] == ["torch214-metal-aarch64-darwin"]


# -- the container of a job ---------------------------------------------------------------
def _kernel(tmp_path: Path) -> Path:
    return Path(shutil.copytree(TINY, tmp_path / "tiny"))


def _mount(spec, source: Path):
    found = [m for m in spec.mounts if m.source == source.resolve()]
    assert found, f"no mount of {source}: {spec.mounts}"
    return found[0]


def _covered(spec, path: Path, read_only: bool) -> bool:
    """Whether `path` is visible at its own path through a mount of that kind."""
    path = path.resolve()
    return any((m.source == path or m.source in path.parents) and m.read_only == read_only
               and m.target == m.source.as_posix() for m in spec.mounts)


def test_container_spec_of_a_cpu_job(tmp_path):
    kernel = _kernel(tmp_path)
    out, ccache, jobcache = tmp_path / "out", tmp_path / "ccache", tmp_path / "jobcache"
    name = "torch214-cxx11-cpu-x86_64-linux"
    img = image(name)
    spec = container_spec(name, kernel, out, ccache, KBUILD_PACKAGE_DIR, img, uid=os.getuid(), gid=os.getgid(),
                          max_jobs=None, nvcc_threads=None, kbuild_cache_dir=jobcache)
    assert spec.image == img.tag and spec.platform == "linux/amd64"
    assert spec.user == f"{os.getuid()}:{os.getgid()}"
    # The source read-only, at its own path; the output, the compiler cache and the job's cache writable.
    assert _mount(spec, kernel).read_only and _mount(spec, kernel).target == str(kernel.resolve())
    assert not _covered(spec, kernel, read_only=False)
    for writable in (out, ccache, jobcache):
        assert not _mount(spec, writable).read_only
    assert _covered(spec, KBUILD_PACKAGE_DIR, read_only=True)

    env = spec.environment
    assert env["KBUILD_CACHE_DIR"] == str(jobcache.resolve())
    assert env["PYTHONPATH"] == str(KBUILD_PACKAGE_DIR.parent)
    assert env["CCACHE_DIR"] == str(ccache.resolve()) and env["KBUILD_COMPILER_CACHE"] == "ccache"
    assert env["HOME"] == HOME
    assert (env["GIT_CONFIG_COUNT"], env["GIT_CONFIG_KEY_0"], env["GIT_CONFIG_VALUE_0"]) == ("1", "safe.directory", "*")
    assert "MAX_JOBS" not in env and "NVCC_THREADS" not in env
    assert spec.command == (
        f"{VENV}/bin/python", "-m", "kernel_builder.cli", "build", str(kernel.resolve()),
        "--variant", name, "--out", str(out.resolve()), "--env", VENV, "--no-create-env", "--compiler-cache", "--json",
    )
    assert spec.working_dir == str(kernel.resolve())


def test_a_cuda_job_gets_the_hosts_cutlass_headers_read_only_where_its_kbuild_looks(tmp_path):
    """The containers have no network: the CUTLASS release a unit depends on is made on the
    host and mounted, read-only, in the container's own tools root (its job cache's)."""
    kernel, jobcache = _kernel(tmp_path), tmp_path / "jobcache"
    release = tmp_path / "host-cache" / "tools" / "cutlass" / "4.5.2-abc123"
    release.mkdir(parents=True)
    name = "torch214-cxx11-cu130-x86_64-linux"
    spec = container_spec(name, kernel, tmp_path / "out", None, KBUILD_PACKAGE_DIR, image(name), uid=1, gid=1,
                          max_jobs=None, nvcc_threads=None, kbuild_cache_dir=jobcache, cutlass=(release,))
    mount = _mount(spec, release)
    assert mount.read_only and mount.target == str(jobcache.resolve() / "tools" / "cutlass" / "4.5.2-abc123")
    assert Path(mount.target).is_dir(), "the mount point is made by the caller, not by the engine as root"
    assert spec.environment["KBUILD_CACHE_DIR"] == str(jobcache.resolve())
    plain = container_spec(name, kernel, tmp_path / "out", None, KBUILD_PACKAGE_DIR, image(name), uid=1, gid=1,
                           max_jobs=None, nvcc_threads=None, kbuild_cache_dir=jobcache)
    assert not any("cutlass" in m.target for m in plain.mounts)


def test_container_spec_of_a_cuda_job_in_a_git_work_tree(tmp_path):
    repo = tmp_path / "repo"
    kernel = Path(shutil.copytree(TINY, repo / "kernels" / "tiny"))
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "tiny"], check=True)
    name = "torch214-cxx11-cu130-x86_64-linux"
    spec = container_spec(name, kernel, kernel / "build", None, KBUILD_PACKAGE_DIR, image(name),
                          uid=1234, gid=5678, max_jobs=3, nvcc_threads=2)
    # The whole work tree, so that git sees the kernel's folder as a local build does.
    assert _mount(spec, repo).read_only
    out = _mount(spec, kernel / "build")
    assert not out.read_only and out.target == str((kernel / "build").resolve())
    targets = [m.target for m in spec.mounts]
    assert targets.index(str(repo.resolve())) < targets.index(out.target), "the writable output is mounted over the source"
    job_cache = Path(spec.environment["KBUILD_CACHE_DIR"])
    assert job_cache == runner.job_cache_dir(image(name), name) and not _mount(spec, job_cache).read_only
    assert spec.user == "1234:5678"
    assert (spec.environment["MAX_JOBS"], spec.environment["NVCC_THREADS"]) == ("3", "2")
    assert "CCACHE_DIR" not in spec.environment and "--no-compiler-cache" in spec.command
    for gpu in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"):
        assert gpu not in spec.environment

    kwargs = spec.to_docker_run_kwargs()
    assert kwargs["image"] == image(name).tag and kwargs["user"] == "1234:5678"
    assert {"Target": str(repo.resolve()), "Source": str(repo.resolve()), "Type": "bind", "ReadOnly": True} in kwargs["mounts"]
    assert not {"device_requests", "devices", "runtime", "privileged"} & set(kwargs), "no GPU, no privileges"
    assert kwargs["network_mode"] == "none", "a build reads nothing but its mounts"
    argv = spec.to_cli()
    assert argv[:3] == ["docker", "run", "--rm"] and "--gpus" not in argv
    assert argv[argv.index("--network") + 1] == "none"
    assert f"type=bind,source={repo.resolve()},target={repo.resolve()},readonly" in argv
    assert argv[argv.index(image(name).tag) + 1:] == list(spec.command)


def test_the_container_command_is_the_build_command_of_today():
    """Every option the runner passes is one `kbuild build` has."""
    import typer.main

    from kernel_builder.cli import main as cli

    build = typer.main.get_command(cli.app).commands["build"]
    options = {opt for param in build.params for opt in (*param.opts, *param.secondary_opts)}
    spec = container_spec("torch214-cxx11-cpu-x86_64-linux", TINY, TINY / "build", Path("/c"), KBUILD_PACKAGE_DIR,
                          image("torch214-cxx11-cpu-x86_64-linux"), uid=1, gid=1, max_jobs=1, nvcc_threads=1)
    assert spec.command[1:4] == ("-m", "kernel_builder.cli", "build")
    assert {a for a in spec.command if a.startswith("--")} <= options


def test_paths_the_image_uses_are_remapped():
    assert container_path(Path("/home/me/kernel")) == "/home/me/kernel"
    assert container_path(Path("/usr/src/kernel")) == "/host/usr/src/kernel"
    assert container_path(Path("/opt")) == "/host/opt"
    assert container_path(Path("/optional/k")) == "/optional/k"


def test_compiler_cache_folder_for_containers(monkeypatch, tmp_path):
    monkeypatch.delenv("KBUILD_COMPILER_CACHE", raising=False)
    monkeypatch.setenv("CCACHE_DIR", str(tmp_path / "cc"))
    assert runner.default_compiler_cache_dir() == tmp_path / "cc"
    assert runner.default_compiler_cache_dir(False) is None
    monkeypatch.delenv("CCACHE_DIR")
    assert runner.default_compiler_cache_dir(True) == Path(os.environ["KBUILD_CACHE_DIR"]) / "ccache"
    monkeypatch.setenv("KBUILD_COMPILER_CACHE", "none")
    assert runner.default_compiler_cache_dir() is None and runner.default_compiler_cache_dir(True) is not None


def test_mount_text_quotes_commas():
    mount = runner.Mount("/a,b", Path("/a,b"), True)
    assert mount.to_cli() == 'type=bind,"source=/a,b","target=/a,b",readonly'


# -- running a container (a stand-in engine) ----------------------------------------------
REPORT = [{"variant": "torch214-cxx11-cpu-x86_64-linux", "backend": "cpu", "status": "built", "seconds": 1.5,
           "detail": "", "log": None, "compiler_cache": None}]


class FakeContainer:
    def __init__(self, exit_code: int):
        self.exit_code = exit_code
        self.started = self.removed = False
        stdout = json.dumps(REPORT, indent=2) + "\n"
        self.stderr_chunks = [b"tiny: config", "uring … ok\n".encode(), b"compil", b"ing\n"]
        self.stdout = stdout.encode()

    def start(self):
        self.started = True

    def logs(self, stream=False, follow=False, stdout=True, stderr=True):
        if stream:
            data = b"".join(self.stderr_chunks) + self.stdout
            return iter([data[i:i + 7] for i in range(0, len(data), 7)])  # chunks split lines anywhere
        return self.stdout if stdout and not stderr else b""

    def wait(self):
        return {"StatusCode": self.exit_code}

    def remove(self, force=False):
        self.removed = force


class FakeClient:
    def __init__(self, exit_code: int = 0, missing_image: bool = False):
        self.container = FakeContainer(exit_code)
        self.missing_image = missing_image
        self.created_with = None
        self.containers = self

    def create(self, **kwargs):
        from docker.errors import ImageNotFound

        if self.missing_image:
            raise ImageNotFound("no such image")
        self.created_with = kwargs
        return self.container


def test_run_container_streams_the_log_and_reads_the_report(tmp_path):
    optional_module("docker.errors")
    kernel = _kernel(tmp_path)
    name = "torch214-cxx11-cpu-x86_64-linux"
    spec = container_spec(name, kernel, kernel / "build", tmp_path / "ccache", KBUILD_PACKAGE_DIR, image(name),
                          uid=os.getuid(), gid=os.getgid(), max_jobs=2, nvcc_threads=None, kbuild_cache_dir=tmp_path / "job")
    client, lines = FakeClient(), []
    outcome = run_container(spec, tmp_path / "logs" / "job.log", on_line=lines.append, client=client)
    assert client.created_with == spec.to_docker_run_kwargs()
    assert client.container.started and client.container.removed
    assert (outcome.exit_code, outcome.report) == (0, REPORT) and outcome.seconds >= 0
    assert lines[:2] == ["tiny: configuring … ok", "compiling"]
    log = (tmp_path / "logs" / "job.log").read_text().splitlines()
    assert log[0].startswith("$ docker run --rm ") and log[1:3] == lines[:2]
    # Writable mount sources exist before the container starts, made by the caller (not root).
    for path in (kernel / "build", tmp_path / "ccache", tmp_path / "job"):
        assert path.is_dir() and path.stat().st_uid == os.getuid()

    failed = run_container(spec, tmp_path / "job2.log", client=FakeClient(exit_code=1))
    assert failed.exit_code == 1
    with pytest.raises(KbuildError, match="is not built: run `kbuild docker build-images`"):
        run_container(spec, tmp_path / "job3.log", client=FakeClient(missing_image=True))


def test_parse_report_skips_stray_lines():
    assert parse_report("note: something\n[\n  {\"a\": 1}\n]\n") == [{"a": 1}]
    assert parse_report("") is None and parse_report("no json here") is None


def test_no_engine_is_one_clear_error(tmp_path, monkeypatch):
    optional_module("docker.errors")
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)
    message = f"no Docker engine reachable (DOCKER_HOST={NO_ENGINE}): start Docker or use --runner local"
    with pytest.raises(KbuildError) as caught:
        runner.docker_client()
    assert caught.value.message == message
    name = "torch214-cxx11-cpu-x86_64-linux"
    spec = container_spec(name, TINY, tmp_path / "out", None, KBUILD_PACKAGE_DIR, image(name),
                          uid=1, gid=1, max_jobs=None, nvcc_threads=None, kbuild_cache_dir=tmp_path / "job")
    with pytest.raises(KbuildError, match=re.escape(message)):
        run_container(spec, tmp_path / "job.log")


# -- kbuild docker build-images --------------------------------------------------------------
# The real entry point (cli.main, which turns a KbuildError into one line).
ENTRY = "from kernel_builder.cli import main as cli; cli.main()"


def kbuild_docker(*args: str, env: dict | None = None, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", ENTRY, "docker", *args], cwd=cwd, capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})), check=False)


@pytest.mark.e2e
def test_build_images_dry_run_lists_images(tmp_path):
    result = kbuild_docker("build-images", "torch=2.14 backend=cpu,cuda arch=x86_64", "--dry-run", cwd=tmp_path,
                           env={"DOCKER_HOST": NO_ENGINE})  # a dry run needs no engine
    assert result.returncode == 0, result.stderr
    cpu, cu130 = image("torch214-cxx11-cpu-x86_64-linux"), image("torch214-cxx11-cu130-x86_64-linux")
    for spec in (cpu, cu130):
        assert f"planned  {spec.tag}" in result.stdout
    assert str(docker_images.dockerfile("cuda")) in result.stdout
    assert "--build-arg CUDA_VERSION=13.0" in result.stdout and "--build-arg TORCH_VERSION=2.14.*" in result.stdout

    result = kbuild_docker("build-images", "all", "--kernel", str(TINY), "--dry-run", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert {i["family"] for i in data["images"]} == {"cpu"}  # tiny: cpu and metal
    row = next(i for i in data["images"] if i["tag"] == cpu.tag)
    assert row["variants"] == ["torch214-cxx11-cpu-x86_64-linux"] and row["build_args"] == cpu.build_args
    assert {s["variant"] for s in data["skipped"]} == {
        f"torch21{m}-{b}-aarch64-darwin" for m in (2, 3, 4) for b in ("cpu", "metal")}


@pytest.mark.e2e
def test_build_images_without_an_engine_says_so_in_one_line(tmp_path):
    result = kbuild_docker("build-images", "torch=2.14 backend=cpu arch=x86_64", cwd=tmp_path, env={"DOCKER_HOST": NO_ENGINE})
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"kbuild: error: no Docker engine reachable (DOCKER_HOST={NO_ENGINE}): start Docker or use --runner local"
    )


@pytest.mark.e2e
def test_build_images_selection_errors_are_one_line(tmp_path):
    result = kbuild_docker("build-images", "torch>=2.99", "--dry-run", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    count = len(default_matrix().variants)
    assert result.stderr.strip() == f"kbuild: error: build-images 'torch>=2.99': 'torch>=2.99' left none of the {count} variants before it"


