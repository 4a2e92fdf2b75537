"""`kbuild ci github`: the generated GitHub workflows pass actionlint, every `kbuild` command
in them parses with kbuild's own CLI, the plan step's output has the shape the matrix
expressions read, and the plan -> build -> publish steps, run here in order, publish a
release to the test Hub."""

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
from kernel_builder.scaffold.ci_github import WORKFLOW_PATH, check_complete, job_matrices
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
    """Values for the `${{ ... }}` expressions a generated workflow uses; any other fails the test."""

    def __init__(self, plan: dict | None, matrix: dict | None = None, runner_temp: str = "/tmp/runner",
                 token: str = "hf_token", ref_name: str = "v1.0.0"):
        self.plan, self.matrix, self.runner_temp, self.token, self.ref_name = plan, matrix or {}, runner_temp, token, ref_name

    def __call__(self, expression: str) -> str:
        if expression.startswith("matrix."):
            return str(self.matrix[expression[len("matrix."):]])
        m = re.fullmatch(r"fromJSON\(needs\.plan\.outputs\.plan\)\.([\w.]+)", expression)
        if m:
            value = self.plan
            for key in m.group(1).split("."):
                value = value[key]
            return value if isinstance(value, str) else json.dumps(value)
        fixed = {"runner.temp": self.runner_temp, "secrets.HF_TOKEN": self.token, "github.ref_name": self.ref_name,
                 "github.sha": "0" * 40, "steps.plan.outputs.plan": json.dumps(self.plan),
                 "github.event_name == 'pull_request' && 'read' || 'readwrite'": "readwrite"}
        if expression in fixed:
            return fixed[expression]
        raise AssertionError(f"the test knows no value for the expression {expression!r}")

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
    """Run the plan job's steps here (not the pip install: kbuild is this checkout) and return its output."""
    job = workflow["jobs"]["plan"]
    outputs = tmp_path / "plan-output"
    outputs.write_text("")
    for step in job["steps"]:
        if "run" in step and "pip install" not in step["run"]:
            run_script(step["run"], root, kbuild_bin, tmp_path,
                       {**step_env(workflow, job, step, Expressions(None, runner_temp=str(tmp_path))),
                        "GITHUB_OUTPUT": str(outputs), **(extra_env or {})})
    lines = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
    return json.loads(lines["plan"])


def run_script(script: str, cwd: Path, kbuild_bin: Path, tmp_path: Path, env: dict[str, str]) -> str:
    """A run step in bash as GitHub runs it (`shell: bash`: -e -o pipefail)."""
    full = dict(os.environ, RUNNER_TEMP=str(tmp_path), **env)
    full["PATH"] = f"{kbuild_bin}{os.pathsep}{full['PATH']}"
    result = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
                            cwd=cwd, env=full, capture_output=True, text=True)
    assert result.returncode == 0, f"step failed ({result.returncode}):\n{script}\n{result.stdout}\n{result.stderr}"
    return result.stdout


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


def test_matrices_build_every_planned_variant_whatever_buildable_says():
    plan = job_matrices(ROWS)
    assert [e["variant"] for e in plan["build"]["include"]] == sorted(r["variant"] for r in ROWS)
    tests = {e["variant"]: e for e in plan["test"]["include"]}
    assert tests["torch213-cxx11-cpu-x86_64-linux"]["torch"] == "torch==2.13.*"
    assert tests["torch-stable-abi210-cpu-x86_64-linux"]["torch"] == "torch==2.14.*"  # the newest it loads on
    assert tests["torch213-cxx11-cpu-x86_64-linux"]["index"].endswith("/whl/cpu")
    assert [e["index"] for e in plan["gpu"]["rocm"]["include"]] == ["https://download.pytorch.org/whl/rocm7.1"]


def test_shards_split_as_kbuild_build_shard_does():
    plan = job_matrices(ROWS, shards=3)
    shards = plan["build"]["include"]
    assert [s["shard"] for s in shards] == ["1/3", "2/3", "3/3"]
    names = sorted(r["variant"] for r in ROWS)
    assert shards[0]["variants"].split() == names[0::3] and shards[1]["variants"].split() == names[1::3]
    cpu = {e["variant"]: e["artifact"] for e in plan["test"]["include"]}
    assert cpu[names[0]] == "build-shard-1-of-3"


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
        (["--matrix", "arch=aarch64"], "add os=linux arch=x86_64"),
        (["--gpu-runner", "cuda"], "expected BACKEND=LABEL"),
        (["--gpu-runner", "xpu=x"], "the selection has no xpu variant"),
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
def test_plan_build_publish_steps_run_here_in_order_publish_the_release(hub, tmp_path, kbuild_bin):
    """The pure-Python fixture kernel, committed with its workflow, through the workflow's own
    plan, build and publish steps against the test Hub. Two differences from GitHub: this
    machine has no Docker engine, so `--runner docker` becomes `--runner local`; and the steps
    that install kbuild, upload or download artifacts are skipped (kbuild is this checkout,
    and every build job writes into the one build/ that publish reads)."""
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
    for job_name in ("build", "publish"):
        job = workflow["jobs"][job_name]
        entries = json.loads(Expressions(plan)(EXPRESSION.fullmatch(job["strategy"]["matrix"]).group(1)))["include"] \
            if "strategy" in job else [{}]
        for entry in entries:
            values = Expressions(plan, entry, runner_temp=str(tmp_path), token=hub.write_token, ref_name="v1.0.0")
            for step in job["steps"]:
                if "run" not in step or "pip install" in step["run"]:
                    continue
                script = step["run"].replace("--runner docker", "--runner local")
                run_script(script, root, kbuild_bin, tmp_path, {**env, **step_env(workflow, job, step, values)})

    from huggingface_hub import HfApi

    refs = HfApi(endpoint=hub.endpoint, token=hub.read_token).list_repo_refs("me/fused", repo_type="kernel")
    assert "v1.0.0" in {t.name for t in refs.tags}
    files = HfApi(endpoint=hub.endpoint, token=hub.read_token).list_repo_files("me/fused", repo_type="kernel",
                                                                                revision="v1.0.0")
    assert any(f.startswith("build/torch-cpu/") for f in files)


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
    # actions/cache holds the output cache only (sccache keeps its own cache).
    (cached,) = [s for s in steps if s.get("uses", "").startswith("actions/cache@")]
    assert cached["with"]["path"] == build["env"]["KBUILD_OUTPUT_CACHE"] == "${{ runner.temp }}/kbuild-output-cache"
    assert "'pull_request' && 'read'" in build["env"]["KBUILD_OUTPUT_CACHE_MODE"]
    assert any("sccache==" in s.get("run", "") for s in steps)
    backend = {"gha": "SCCACHE_GHA_ENABLED", "redis": "SCCACHE_REDIS_ENDPOINT", "s3": "SCCACHE_BUCKET"}[shared]
    assert backend in build["env"]
    exported = next((s for s in steps if s.get("uses", "").startswith("actions/github-script@")), None)
    assert (exported is not None) == (shared == "gha")
    if exported:
        assert "ACTIONS_RESULTS_URL" in exported["with"]["script"] and "ACTIONS_RUNTIME_TOKEN" in exported["with"]["script"]


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
