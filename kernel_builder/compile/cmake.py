"""The generated CMake project (Ninja generator) for one job, and running it.

A backend describes what to compile as a CompileSpec; this module renders it through
templates/build/CMakeLists.txt.j2, configures once per work tree and lets Ninja decide
what is out of date, so an edit recompiles only what it touches.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kernel_builder.errors import BuildError, KbuildError
from kernel_builder.compile.tool_processes import ToolProcesses
from kernel_builder.file_lock import inherited_lock_fds
from kernel_builder.watchdog import shared_fds
from kernel_builder.paths import templates_dir


@dataclass(frozen=True)
class SourceGroup:
    """Files compiled with the same extra options, include folders and definitions."""

    files: tuple[str, ...]
    options: tuple[str, ...] = ()
    includes: tuple[str, ...] = ()
    # Only these files' commands carry them: the op namespace reaches only the files that
    # register ops (kernel.registration), so an edit elsewhere recompiles nothing else.
    definitions: tuple[str, ...] = ()
    # CMake's language for files whose extension it does not know (.sycl is C++).
    language: str | None = None


@dataclass(frozen=True)
class CustomCommand:
    """A step Ninja runs before the library compiles, e.g. shaders into a library that a
    generated header embeds. `command` is one argument vector, run without a shell in the
    build tree; relative outputs are in the build tree too."""

    outputs: tuple[str, ...]
    command: tuple[str, ...]
    depends: tuple[str, ...] = ()
    comment: str = ""


@dataclass(frozen=True)
class CompileSpec:
    # The CMake target and library's base name: `_<name>_<backend>`, the same for every
    # build of the kernel, so objects stay where they are when the op namespace id moves
    # (the stamp names the library after the namespace).
    target: str
    suffix: str  # ".abi3.so"
    languages: tuple[str, ...]
    groups: tuple[SourceGroup, ...]
    definitions: tuple[str, ...] = ()
    options: tuple[str, ...] = ()  # every language
    # (language, options): e.g. ("CXX", ("-fopenmp",)), ("CUDA", ("--expt-relaxed-constexpr",))
    language_options: tuple[tuple[str, tuple[str, ...]], ...] = ()
    includes: tuple[str, ...] = ()
    system_includes: tuple[str, ...] = ()  # searched after `includes` and the compilers' own
    link_dirs: tuple[str, ...] = ()
    link_libraries: tuple[str, ...] = ()
    link_options: tuple[str, ...] = ()
    cache: dict[str, str] = field(default_factory=dict)  # -D variables at configure time
    # Build-time steps: their outputs become sources of the library, so they run first.
    commands: tuple[CustomCommand, ...] = ()
    # (name, text): helper files those steps run, written beside CMakeLists.txt.
    files: tuple[tuple[str, str], ...] = ()
    # The kernel's files as build.toml lists them: the library links its objects in this
    # order, as kernel-builder does, because static initializers run in link order
    # (layer-norm's .cu launchers register into a map that ln_api.cpp defines).
    source_order: tuple[str, ...] = ()

    def sources(self) -> tuple[str, ...]:
        """Every group's files in link order: those of `source_order` as it lists them,
        then the rest (generated or kbuild's own files) as the groups list them."""
        files = [f for group in self.groups for f in group.files]
        position = {f: i for i, f in enumerate(self.source_order)}
        return tuple(sorted(files, key=lambda f: position.get(f, len(position))))

    def describe(self) -> str:
        """Stable text of everything that shapes the build: part of the input hash."""
        return repr(self)


def cmake_quote(value: str) -> str:
    """A CMake quoted argument."""
    return '"' + re.sub(r'([\\"$])', r"\\\1", str(value)) + '"'


def language_option(language: str, option: str) -> str:
    """`option` for sources of one language only: a generator expression, with the
    characters that generator expressions treat specially spelled out."""
    escaped = option.replace(">", "$<ANGLE-R>").replace(",", "$<COMMA>").replace(";", "$<SEMICOLON>")
    return f"$<$<COMPILE_LANGUAGE:{language}>:{escaped}>"


def render_project(spec: CompileSpec, work_dir: Path) -> Path:
    """Write CMakeLists.txt and registration.h into work_dir; rewrite only on change."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir("build"))),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    env.filters["q"] = cmake_quote
    env.globals["language_option"] = language_option
    text = env.get_template("CMakeLists.txt.j2").render(spec=spec)
    generated = work_dir / "generated"
    generated.mkdir(parents=True, exist_ok=True)
    registration = templates_dir("build", "registration.h").read_text()
    write_if_changed(generated / "registration.h", registration)
    # kernel-builder writes it into the kernel's torch-ext/, and sources elsewhere include it as
    # "../torch-ext/registration.h" (flash-attn3's flash-attn/flash_api.cpp): through the
    # generated/ include folder that finds this copy, and the kernel's tree stays untouched.
    (work_dir / "torch-ext").mkdir(exist_ok=True)
    write_if_changed(work_dir / "torch-ext" / "registration.h", registration)
    for name, content in spec.files:
        write_if_changed(work_dir / name, content)
    write_if_changed(work_dir / "CMakeLists.txt", text)
    return work_dir


def generated_include_dir(work_dir: Path) -> Path:
    return work_dir / "generated"


def write_if_changed(path: Path, text: str) -> None:
    # Unchanged files keep their mtime, so Ninja does not rebuild what did not change.
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def _tool(name: str) -> str:
    """A build tool from the running environment first (the cmake/ninja wheels), then PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise KbuildError(f"{name} not found; install it (`pip install {name}`) or put it on PATH")
    return found


def build_project(
    spec: CompileSpec,
    work_dir: Path,
    log_file: Path,
    jobs: int | None = None,
    nvcc_threads: int | None = None,
    launchers: dict[str, str] | None = None,
    compile_env: dict[str, str] | None = None,
    on_step: Callable[[str], None] = lambda step: None,
    tools: ToolProcesses | None = None,
) -> Path:
    """Configure (first time) and build; return the built library. Output goes to log_file;
    `on_step` hears "configure" and "compile" as they start. CMake runs as one of `tools`
    (the build's, which an interrupt stops; default: this call's own).

    Parallelism (Ninja's -j, NVCC_APPEND_FLAGS), the compiler `launchers` (cache entries)
    and `compile_env` are passed outside the project, so they never change the generated
    files or a job's input hash. A change of launchers reconfigures the existing tree."""
    build_dir = work_dir / "build"
    cmake = _tool("cmake")
    ninja = _tool("ninja")
    launchers = launchers or {}
    tools = tools or ToolProcesses()
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "w") as log:
        entries = {**spec.cache, **launchers}
        home = {"CMAKE_HOME_DIRECTORY": str(work_dir)}
        if not (build_dir / "build.ninja").exists() or not cache_holds(build_dir, {**entries, **home}):
            # CMake never switches a configured tree to another compiler (it keeps the cached
            # one, even a path that no longer exists), nor to another spelling of its folders
            # (the fixed compile paths of a shared cache): either change starts afresh.
            if not cache_holds(build_dir, {**compilers(entries), **home}):
                forget_configuration(build_dir)
            configure = [
                cmake, "-G", "Ninja", "-S", str(work_dir), "-B", str(build_dir),
                f"-DCMAKE_MAKE_PROGRAM={ninja}", "-DCMAKE_BUILD_TYPE=Release",
                *(f"-D{k}={v}" for k, v in sorted(entries.items())),
            ]
            on_step("configure")
            _run(tools, configure, log, log_file, "configure")
        command = [cmake, "--build", str(build_dir)]
        if jobs:
            command += ["--parallel", str(jobs)]
        extra = dict(compile_env or {})
        if nvcc_threads:
            extra["NVCC_APPEND_FLAGS"] = f"{os.environ.get('NVCC_APPEND_FLAGS', '')} --threads {nvcc_threads}".strip()
        on_step("compile")
        _run(tools, command, log, log_file, "compile", extra)
    library = build_dir / f"{spec.target}{spec.suffix}"
    if not library.exists():
        raise BuildError(f"the build finished but {library.name} is missing; see {log_file}")
    return library


def compilers(entries: dict[str, str]) -> dict[str, str]:
    """The compiler entries (CMAKE_<LANG>_COMPILER, CMAKE_CUDA_HOST_COMPILER) among cache entries."""
    return {k: v for k, v in entries.items() if re.fullmatch(r"CMAKE_[A-Z]+_(HOST_)?COMPILER", k)}


def forget_configuration(build_dir: Path) -> None:
    """Drop CMake's cache and its per-compiler probes; object files stay for Ninja to judge."""
    (build_dir / "CMakeCache.txt").unlink(missing_ok=True)
    shutil.rmtree(build_dir / "CMakeFiles", ignore_errors=True)


def cache_holds(build_dir: Path, entries: dict[str, str]) -> bool:
    """Whether the build tree's CMakeCache.txt has these values (a missing entry reads as
    empty, as CMake treats it)."""
    cached: dict[str, str] = {}
    try:
        text = (build_dir / "CMakeCache.txt").read_text(errors="replace")
    except OSError:
        return False
    for line in text.splitlines():
        match = re.match(r"([A-Za-z0-9_]+):[A-Z]+=(.*)$", line)
        if match:
            cached[match[1]] = match[2]
    return all(cached.get(name, "") == value for name, value in entries.items())


def _run(
    tools: ToolProcesses, command: list[str], log, log_file: Path, step: str, extra_env: dict[str, str] | None = None
) -> None:
    log.write("".join(f"{k}={v} " for k, v in (extra_env or {}).items()) + "$ " + " ".join(command) + "\n")
    log.flush()
    env = dict(os.environ, NINJA_STATUS="[%f/%t] ", **(extra_env or {}))
    # The build's locks and its sccache servers' watchdog pipes go with the tools, so compilers
    # outliving a killed kbuild still hold the locks and keep their servers running.
    code = tools.run(command, step, stdout=log, stderr=subprocess.STDOUT, env=env,
                     pass_fds=inherited_lock_fds() + shared_fds())
    if code != 0:
        log.flush()
        raise BuildError(f"{step} failed: {first_error(log_file)} (full log: {log_file})")


# Ninja's line as an object finishes (NINJA_STATUS="[%f/%t] "):
# "[3/12] Building CXX object CMakeFiles/_relu_cpu.dir/src/relu/relu_cpu/relu.cpp.o".
_COMPILED = re.compile(r"^\[\d+/\d+\] Building \w+ object CMakeFiles/[^/\s]+\.dir/(\S+)\.o(?:bj)?$", re.MULTILINE)


def compiled_sources(log_file: Path) -> tuple[str, ...]:
    """The sources Ninja compiled in the build a job's log records (each build rewrites it),
    spelled as CMake names their objects: the source's absolute path without its leading
    "/" (e.g. "src/relu/relu_cpu/relu.cpp")."""
    try:
        text = log_file.read_text(errors="replace")
    except OSError:
        return ()
    return tuple(_COMPILED.findall(text))


def first_error(log_file: Path) -> str:
    """The first compiler or CMake error line of a log, for a one-line report."""
    try:
        lines = log_file.read_text(errors="replace").splitlines()
    except OSError:
        return "no log"
    for line in lines:
        if re.search(r"\berror\b|CMake Error|undefined reference", line, re.IGNORECASE):
            return line.strip()[:300]
    tail = [line for line in lines if line.strip()]
    return tail[-1].strip()[:300] if tail else "no output"
