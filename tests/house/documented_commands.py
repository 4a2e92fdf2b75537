"""The shell commands the README and docs/ show, read from their fenced blocks, and what runs each.

A block's commands are its `$ ` lines (the lines after them, up to the next `$ `, are sample
output), or, in a bash/sh/console block without prompts, every line. A line ending in `\\`
goes on on the next one; `#` starts a comment. A command line is split into segments at
`&&`, `||`, `;` and `|`; each segment is one program's words, without `NAME=value` prefixes
and `> file` redirections.

tests/house/test_documented_commands.py parses every `kbuild` segment with the real app, runs the ones in
RUNS_HERE in a workspace of copies (WORKSPACE), and asks every other segment to be in
RUN_BY_TESTS (a test that runs it) or RUN_ELSEWHERE (why no test can): a command added to a
page without either fails there, naming the page and line.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]

# Where the docs check runs commands: a temporary folder that stands for the reader's working
# folder (a kbuild checkout, or a folder of kernels), holding copies of these repo folders
# under the names the pages use. `/home/me` in a command is that folder too.
WORKSPACE = {
    "examples/relu": "examples/relu",
    "examples/swiglu": "examples/swiglu",
    "relu": "examples/relu",
    "fused": "tests/fixtures/fused",
    "tiny": "tests/fixtures/tiny",
    "A/swiglu": "examples/swiglu",  # two runners' checkouts (shared-cache.md)
    "B/swiglu": "examples/swiglu",
}
HOME = "/home/me"

# kbuild commands cheap and hermetic enough for the fast lane: the docs check runs them (in
# this process) and expects the exit status the page shows (an `echo "exit N"` after it, or a
# `kbuild: error:` line in its sample output: non-zero; otherwise 0).
# (`kbuild doctor` is not one: its first probe of every toolchain takes about a minute.)
RUNS_HERE = {"kbuild init", "kbuild plan", "kbuild variants", "kbuild migrate", "kbuild ci github",
             "kbuild ci matrix", "kbuild env list", "kbuild env prune", "kbuild version", "kbuild"}
# These get a managed-environment store of their own (they would change the suite's); the others
# read the suite's, whose recorded pip answers spare them half a minute of pip.
OWN_ENVIRONMENT_STORE = {"kbuild env prune"}
# ... and these only with the flag that keeps them from doing the costly part.
RUNS_HERE_WITH = {"kbuild docker build-images": "--dry-run"}
# ... and these where the page shows them refused (a `kbuild: error:` line): a refused build
# stops before any work, with the very error line the page shows.
RUNS_HERE_WHEN_REFUSED = {"kbuild build"}

# Shell plumbing around the commands that matter (setting a variable, clearing a folder,
# filtering an output): shown for context, run by no check.
PLUMBING = {"export", "rm", "echo", "grep", "head", "ls", "cd"}

# A segment (its words as shlex.join quotes them) -> the test that runs it. The docs
# check asks the test to exist and its source to hold the segment's program, subcommands and
# option flags (what a path or value is may differ: a test builds a copy).
RUN_BY_TESTS = {
    # README.md
    "pip install '.[torch,kernels]'": "tests/house/test_quick_start.py::test_the_quick_start_install_builds_publishes_and_loads",
    "kbuild demo": "tests/scaffold/test_scaffold_e2e.py::test_demo_command_shows_its_build_and_reuses_it",
    # docs/guides/testing.md
    "kbuild bench examples/relu --iterations 5 --warmup 1":
        "tests/checks/test_kernel_benchmarks.py::test_kbuild_bench_builds_then_runs_and_a_mismatch_is_one_line",
    # docs/guides/signing.md
    "kbuild sign build/":
        "tests/testing/test_sigstore_standin.py::test_kbuild_sign_runs_the_real_signing_client_against_the_standin_on_loopback",
    "kbuild verify build/": "tests/publish/test_signing.py::test_kbuild_verify_says_who_signed_or_why_not",
    "kbuild verify kernels-community/relu@v1.2.0":
        "tests/runtime/test_signed_hub_load.py::test_sign_publish_load_by_version_with_a_policy",
    # docs/guides/output-cache.md
    "kbuild build relu --variant torch213-cxx11-cpu-x86_64-linux --output-cache /home/me/kcache":
        "tests/pipeline/test_output_cache_build.py::test_a_second_build_dir_installs_from_the_output_cache",
    # docs/examples.md
    "kbuild build examples/flash-attn": "tests/conftest.py::built_example",
    "kbuild test examples/flash-attn":
        "tests/checks/test_kernel_tests.py::test_own_tests_pass_by_python_name_and_get_kernel_with_device_skip_counted",
    "benchmarks/gpu/run.sh": "tests/examples/test_gpu_proof.py::test_without_a_gpu_it_says_to_use_the_dry_run",
    "benchmarks/gpu/run.sh --dry-run --out proof":
        "tests/examples/test_gpu_proof.py::test_dry_run_builds_tests_and_times_every_example",
    # docs/guides/building.md
    "kbuild build examples/swiglu --matrix 'backend=cpu,cuda torch>=2.13 cuda<13.2 arch=x86_64'":
        "tests/pipeline/test_selection.py::test_build_matrix_builds_the_selection_and_reports_what_it_skips",
    "kbuild build examples/swiglu --variant torch214-cxx11-cu130-x86_64-linux --out out --max-jobs 2 --nvcc-threads 2":
        "tests/runners/test_runner_options.py::test_an_honoured_option_reaches_the_job",
    "kbuild build examples/swiglu --env .venv": "tests/checks/test_stable_abi.py::test_a_build_in_a_newer_torch_loads_in_this_one",
    # docs/guides/aarch64.md
    "kbuild build examples/swiglu --variant torch214-cxx11-cpu-aarch64-linux":
        "tests/pipeline/test_aarch64.py::test_swiglu_and_layer_norm_cross_build_pass_check_and_import_in_the_emulated_python",
    "kbuild test examples/swiglu --variant torch214-cxx11-cpu-aarch64-linux":
        "tests/pipeline/test_aarch64.py::test_their_own_tests_pass_under_emulation",
    # docs/guides/checks.md
    "kbuild check examples/relu": "tests/checks/test_check.py::test_a_compiled_cpu_variant_imports_and_registers_its_ops",
    "kbuild check build/torch213-cxx11-cpu-x86_64-linux":
        "tests/checks/test_check.py::test_kbuild_check_flags_glibc_2_34_and_a_tampered_file",
    # docs/guides/docker.md (skipped, and saying why, where Docker is not reachable)
    "docker/offline-base.sh": "tests/runners/test_docker_engine.py::test_builds_tiny_in_a_container_as_the_caller",
    "kbuild build examples/swiglu --runner docker --base-image kbuild-offline-base:bookworm --variant "
    "torch213-cxx11-cpu-x86_64-linux --variant torch214-cxx11-cu130-x86_64-linux":
        "tests/runners/test_docker_engine.py::test_swiglu_cpu_and_cu130_build_in_containers_and_pass_check",
    "kbuild check examples/swiglu/build":
        "tests/runners/test_docker_engine.py::test_swiglu_cpu_and_cu130_build_in_containers_and_pass_check",
    "docker/offline-base.sh bookworm arm64":
        "tests/runners/test_docker_aarch64.py::test_relu_builds_in_an_arm64_container_and_passes_check",
    "kbuild build examples/relu --runner docker --base-image kbuild-offline-base:bookworm-arm64 --variant "
    "torch214-cxx11-cpu-aarch64-linux":
        "tests/runners/test_docker_aarch64.py::test_relu_builds_in_an_arm64_container_and_passes_check",
    "kbuild check examples/relu/build":
        "tests/runners/test_docker_aarch64.py::test_relu_builds_in_an_arm64_container_and_passes_check",
    # docs/guides/environments.md
    "kbuild doctor": "tests/doctor/test_doctor.py::test_text_report",
    "kbuild env create torch214-cxx11-cu130-x86_64-linux":
        "tests/environments/test_envstore.py::test_a_killed_kbuild_takes_its_pip_along_and_no_password_shows",
    # docs/guides/first-kernel.md
    "kbuild build demo": "tests/scaffold/test_scaffold_e2e.py::test_init_then_build_then_generated_tests_pass",
    "kbuild test demo":  # the same invocation on a kernel whose tests pass, fail and skip
        "tests/checks/test_kernel_tests.py::test_own_tests_pass_by_python_name_and_get_kernel_with_device_skip_counted",
    # docs/guides/formats.md
    "kbuild build examples/relu --variant-names new":
        "tests/pipeline/test_variants.py::test_build_names_new_style_and_both_runtimes_load_it",
    "kbuild build examples/relu": "tests/pipeline/test_variants.py::test_switching_styles_leaves_one_folder_per_build",
    # docs/guides/publishing.md
    "kbuild publish relu --tag v1.0.0 --repo-id kernels-community/relu --dry-run":
        "tests/publish/test_publish.py::test_dry_run_prints_the_plan_and_touches_nothing",
    "kbuild publish relu --tag v1.0.0 --repo-id kernels-community/relu":
        "tests/publish/test_publish.py::test_round_trip_publish_then_kernels_get_kernel_runs_it",
    "kbuild publish relu --tag v1.0.1 --repo-id kernels-community/relu":
        "tests/publish/test_publish.py::test_a_missing_or_wrong_token_is_one_clear_line",
    "kbuild publish relu --add-variants --tag v1.1.0 --repo-id kernels-community/relu":
        "tests/publish/test_add_variants.py::"
        "test_add_variants_adds_the_missing_variant_and_leaves_the_released_one_byte_identical",
    "python -c 'import kernels, torch; relu = kernels.get_kernel('\"'\"'kernels-community/relu'\"'\"', version=1, "
    "backend='\"'\"'cpu'\"'\"'); print(relu.relu(torch.tensor([-1.0, 2.0])))'":
        "tests/publish/test_publish.py::test_round_trip_publish_then_kernels_get_kernel_runs_it",
    # docs/guides/aarch64.md
    "kbuild build relu --variant torch29-cxx11-cpu-aarch64-linux":
        "tests/pipeline/test_aarch64.py::test_with_a_cpu_torch_kernels_picks_the_cpu_variant_by_its_own_rule_and_the_tests_pass",
    "kbuild test relu --variant torch29-cxx11-cpu-aarch64-linux":
        "tests/pipeline/test_aarch64.py::test_with_a_cpu_torch_kernels_picks_the_cpu_variant_by_its_own_rule_and_the_tests_pass",
    # docs/guides/shared-cache.md
    "kbuild build relu --variant torch213-cxx11-cpu-x86_64-linux":
        "tests/compile/test_shared_cache.py::test_runner_b_gets_every_cpu_compile_from_runner_as_redis_cache",
    "kbuild build relu --variant torch213-cxx11-cpu-x86_64-linux --json":
        "tests/compile/test_shared_cache.py::test_runner_b_gets_every_cpu_compile_from_runner_as_redis_cache",
    "kbuild build /home/me/A/swiglu --variant torch213-cxx11-cpu-x86_64-linux --compiler-cache-tool sccache":
        "tests/compile/test_shared_cache.py::test_runner_b_gets_every_cpu_compile_from_runner_as_redis_cache",
    "kbuild build /home/me/B/swiglu --variant torch213-cxx11-cpu-x86_64-linux --compiler-cache-tool sccache":
        "tests/compile/test_shared_cache.py::test_runner_b_gets_every_cpu_compile_from_runner_as_redis_cache",
    # docs/guides/testing.md
    "kbuild test tests/fixtures/tested":
        "tests/checks/test_kernel_tests.py::test_own_tests_pass_by_python_name_and_get_kernel_with_device_skip_counted",
    "kbuild dev relu": "tests/cli/test_dev.py::test_dev_builds_outside_the_kernel_runs_its_tests_and_prints_the_summary",
    "kbuild dev relu --watch": "tests/cli/test_dev.py::test_watch_reruns_after_a_save",
}

# A segment -> why no test on this machine runs it (it is the test suite itself, it needs the
# network, or it is the reader's own setup that the tests make their own way). A program or
# script named by a path must still exist.
RUN_ELSEWHERE = {
    "kbuild build examples/swiglu --variant torch214-cxx11-cpu-aarch64-linux --torch-index https://download.pytorch.org/whl/cpu":
        "PyTorch's own index is not reachable from the test machines (only PyPI is)",
    "apt-get install g++-aarch64-linux-gnu qemu-user-static":
        "installs system packages as root; .ci/run installs both (install_tool)",
    "pip install -e '.[test]'": "the contributor's install: the test suite runs inside it",
    "python -m pytest -n auto": "the test suite itself (.ci/run runs it in CI)",
    "python -m pytest -m 'not e2e'": "the test suite's fast lane itself",
    "python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl pyelftools==0.32":
        "downloads from PyPI; the tests have no network",
    "python examples/flash-attn/benchmarks/compare_sdpa.py":
        "a benchmark prints figures; performance is measured by hand, never by a timed test (CONTRIBUTING.md)",
    "python benchmarks/bench_output_cache.py":
        "a benchmark prints figures; performance is measured by hand, never by a timed test (CONTRIBUTING.md)",
    "docker/qemu-binfmt.sh": "registers qemu with the machine's kernel (root): .ci/run runs it before the tests, "
        "and tests/runners/test_docker_platform.py reads registrations of every state",
    "redis-server --port 6390 --save '' --appendonly no --daemonize yes":
        "the tests start their own loopback redis-server (kernel_builder/testing/sccache_servers.py)",
}


@dataclasses.dataclass(frozen=True)
class Segment:
    words: tuple[str, ...]  # the program and its arguments, quotes removed
    env: tuple[str, ...]  # NAME=value prefixes
    stdout_to: str | None  # `> file`

    @property
    def key(self) -> str:
        return shlex.join(self.words)


@dataclasses.dataclass(frozen=True)
class Command:
    page: Path
    line: int  # 1-based, of the line the command starts on
    text: str  # as shown, without the prompt, continuations joined
    output: str  # the sample output shown after it, up to the next command

    @property
    def where(self) -> str:
        page = self.page.relative_to(REPO) if self.page.is_relative_to(REPO) else self.page
        return f"{page}:{self.line}"

    def segments(self) -> list[Segment]:
        return split_segments(self.text)


_FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w+-]*)")
_SHELL_BLOCKS = {"bash", "sh", "shell", "console"}


def documented_commands(pages: list[Path] = PAGES) -> list[Command]:
    return [command for page in pages for command in page_commands(page)]


def page_commands(page: Path) -> list[Command]:
    lines, commands, index = page.read_text().splitlines(), [], 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        index += 1
        if not opening:
            continue
        fence, language = opening.groups()
        body_start, closing = index, re.compile(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        while index < len(lines) and not closing.match(lines[index]):
            index += 1
        body = lines[body_start:index]
        index += 1
        commands += _block_commands(page, body_start + 1, body, language)
    return commands


def _block_commands(page: Path, first_line: int, body: list[str], language: str) -> list[Command]:
    prompted = any(line.lstrip().startswith("$ ") for line in body)
    if not prompted and language not in _SHELL_BLOCKS:
        return []  # sample output, or code in another language (tested where it is run)
    found, index = [], 0
    while index < len(body):
        line = body[index].strip()
        start = index
        index += 1
        if prompted and not line.startswith("$ ") or not line or line.startswith("#"):
            continue
        text = line[2:] if prompted else line
        while text.endswith("\\") and index < len(body):
            text = text[:-1].rstrip() + " " + body[index].strip()
            index += 1
        output_end = index
        while prompted and output_end < len(body) and not body[output_end].lstrip().startswith("$ "):
            output_end += 1
        found.append(Command(page, first_line + start, text, "\n".join(body[index:output_end])))
    return found


def inline_commands(pages: list[Path] = PAGES) -> list[Command]:
    """The `kbuild ...` code spans of the pages' prose (fenced blocks left out): a command's name,
    often without its arguments, so only its subcommands and options are checked."""
    found = []
    for page in pages:
        text = page.read_text()
        fenced = [range(start, end) for start, end in _fenced_spans(text)]
        for span in re.finditer(r"(?<!`)`(kbuild(?: [\w-][^`]*)?)`(?!`)", text):
            if not any(span.start() in block for block in fenced):
                command = re.sub(r"\$\{\{[^}]*\}\}", "EXPR", span.group(1))  # a GitHub Actions expression: one word
                found.append(Command(page, text.count("\n", 0, span.start()) + 1, command, ""))
    return found


def _fenced_spans(text: str) -> list[tuple[int, int]]:
    lines, spans, offset, opened = text.splitlines(keepends=True), [], 0, None
    for line in lines:
        fence = _FENCE.match(line)
        if fence and opened is None:
            opened = (offset, fence.group(1))
        elif opened and re.match(rf"^\s*{re.escape(opened[1][0])}{{{len(opened[1])},}}\s*$", line):
            spans.append((opened[0], offset + len(line)))
            opened = None
        offset += len(line)
    return spans


def split_segments(text: str) -> list[Segment]:
    lexer = shlex.shlex(text, posix=True, punctuation_chars="&|;<>")
    lexer.whitespace_split = True
    segments, words = [], []
    for token in [*lexer, ";"]:
        if token in ("&&", "||", ";", "|"):
            if words:
                segments.append(_segment(words))
            words = []
        else:
            words.append(token)
    return segments


def _segment(words: list[str]) -> Segment:
    env = []
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        env.append(words.pop(0))
    stdout_to = None
    if ">" in words[:-1]:
        at = words.index(">")
        stdout_to, words = words[at + 1], words[:at]
    return Segment(tuple(words), tuple(env), stdout_to)
