"""What a running build shows: a live table of every job (rich) on a terminal, one line
per step elsewhere (CI logs), nothing with --json.

Jobs report their steps (`step`) and their end (`finished`); what a job does within a step
(`activity`: Ninja's progress, CMake's current check) is read from the tail of its log file
when the table redraws, so compiles need no callback. What has no log of the job's own (pip
creating its build environment) reports it with `doing`."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from kernel_builder.compile.diagnostics import CompilerError, compiler_errors
from kernel_builder.settings import read_environment

_TAIL_BYTES = 256 * 1024  # compiler warnings can bury the last status line deep
_LINE_WIDTH = 90

# What a step is doing when its log has nothing better to say.
_STEP_TEXT = {
    "environment": "creating build environment",
    "configure": "configuring",
    "compile": "compiling",
    "check": "checking the variant",
    "container": "starting the build container",
}
# The commands kbuild writes into a log before running them ("VAR=value ... $ cmake ...").
_COMMAND_LINE = re.compile(r"^(?:\S+=\S*\s+)*\$ ")
# Ninja's status lines (NINJA_STATUS="[%f/%t] "): in a log, each is printed as its edge
# finishes, so "[3/12] Building CXX object a.cpp.o" means a.cpp is compiled.
_NINJA_LINE = re.compile(r"^\[(\d+)/(\d+)\] (?:(Building) \w+ object (\S+)|(Linking) .* (\S+)|(.*))$")


def _tail_lines(log_file: Path | None) -> list[str]:
    if log_file is None:
        return []
    try:
        with open(log_file, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - _TAIL_BYTES))
            tail = f.read().decode(errors="replace")
    except OSError:
        return []
    return [line.strip() for line in tail.splitlines() if line.strip()]


def _shorten(line: str) -> str:
    return line if len(line) <= _LINE_WIDTH else line[: _LINE_WIDTH - 3] + "..."


def activity(step: str, log_file: Path | None) -> str:
    """What a running job is doing now, for the live table: Ninja's progress while it
    compiles ("[3/12] compiled kernel.cu", "[12/12] linked _k.abi3.so"), CMake's current
    check while it configures, else what the step means. Never the command kbuild ran
    (the log's "$ cmake ..." lines), which says nothing about progress."""
    lines = [line for line in _tail_lines(log_file) if not _COMMAND_LINE.match(line)]
    text = _STEP_TEXT.get(step, step)
    if step == "compile":
        for line in reversed(lines):
            status = _NINJA_LINE.match(line)
            if status:
                done, total, built, obj, linked, library, other = status.groups()
                if built:
                    return _shorten(f"[{done}/{total}] compiled {Path(obj).name.removesuffix('.o')}")
                if linked:
                    return _shorten(f"[{done}/{total}] linked {Path(library).name}")
                return _shorten(f"[{done}/{total}] {other}")
        return text
    if step == "configure":
        checks = [line[3:] for line in lines if line.startswith("-- ")]
        return _shorten(f"{text}: {checks[-1]}") if checks else text
    if step in _STEP_TEXT and step != "container":
        return text
    return _shorten(lines[-1]) if lines else text


@dataclass
class _JobState:
    label: str
    step: str = "queued"
    started: float | None = None
    ended: float | None = None
    log_file: Path | None = None
    outcome: str | None = None  # the result's status once finished
    doing: str | None = None  # what the step is doing, as reported (`doing`); cleared by the next step
    said: float = float("-inf")  # when LineProgress last printed `doing`

    def elapsed(self) -> float:
        if self.started is None:
            return 0.0
        return (self.ended or time.perf_counter()) - self.started


@dataclass
class Progress:
    """Silent: what --json and library callers get."""

    jobs: dict[str, _JobState] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, label: str) -> None:
        self.jobs.setdefault(label, _JobState(label))

    def step(self, label: str, step: str, log_file: Path | None = None) -> None:
        with self._lock:
            state = self.jobs.setdefault(label, _JobState(label))
            if state.started is None:
                state.started = time.perf_counter()
            state.step, state.doing = step, None
            state.log_file = log_file or state.log_file
        self.changed(state)

    def doing(self, label: str, text: str, step: str | None = None) -> None:
        """What the job's step is doing now ("downloading torch-...whl: 1.2 of 3.0 GB"),
        entering `step` first if the job is in another."""
        if step is not None and self.jobs.get(label, _JobState(label)).step != step:
            self.step(label, step)
        with self._lock:
            state = self.jobs.setdefault(label, _JobState(label))
            state.doing = text
        self.noted(state)

    def noted(self, state: _JobState) -> None:
        pass

    def finished(self, label: str, status: str, detail: str = "") -> None:
        with self._lock:
            state = self.jobs.setdefault(label, _JobState(label))
            state.started = state.started or time.perf_counter()
            state.ended = time.perf_counter()
            state.step, state.outcome = status, status
        self.changed(state, detail)

    def changed(self, state: _JobState, detail: str = "") -> None:
        pass

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        pass


_STYLE = {"built": "green", "up-to-date": "green", "checked": "cyan", "failed": "red", "cancelled": "yellow",
          "skipped": "yellow"}


class LineProgress(Progress):
    """One line per step: readable in a CI log, where a live table cannot redraw; what a
    step is doing, at most every DOING_INTERVAL_S seconds."""

    DOING_INTERVAL_S = 10.0

    def __init__(self, console):
        super().__init__()
        self.console = console

    def noted(self, state: _JobState) -> None:
        now = time.perf_counter()
        if now - state.said < self.DOING_INTERVAL_S or state.doing is None:
            return
        state.said = now
        self.changed(state, state.doing)

    def changed(self, state: _JobState, detail: str = "") -> None:
        from rich.markup import escape

        style = _STYLE.get(state.step, "bold")
        tail = f": {escape(detail)}" if detail else ""
        self.console.print(f"[{state.elapsed():6.1f}s] {escape(state.label)} [{style}]{escape(state.step)}[/]{tail}")


class GithubProgress(LineProgress):
    """LineProgress for GitHub Actions: as each job ends, its whole log in a fold group
    (`::group::`), and an `::error` annotation for each compiler error of a failed job, so
    they show on the run's page and beside the source line."""

    def __init__(self, console, workspace: Path | None = None):
        super().__init__(console)
        self.workspace = workspace

    def changed(self, state: _JobState, detail: str = "") -> None:
        super().changed(state, detail)
        if state.outcome is None or state.log_file is None:
            return
        try:
            text = Path(state.log_file).read_text(errors="replace")
        except OSError:
            return
        out = self.console.out
        with self._lock:  # jobs end in worker threads: one group at a time
            out(f"::group::{state.label}: {state.outcome} in {state.elapsed():.1f} s ({state.log_file})", highlight=False)
            out(text.rstrip("\n"), highlight=False)
            out("::endgroup::", highlight=False)
            if state.outcome == "failed":
                for error in compiler_errors(text):
                    out(github_error(error, self.workspace), highlight=False)


def github_error(error: CompilerError, workspace: Path | None) -> str:
    """A compiler error as a GitHub Actions annotation; its file relative to the checkout,
    where GitHub can show it beside the line."""
    file = Path(error.file)
    if workspace is not None and file.is_absolute() and file.is_relative_to(workspace):
        file = file.relative_to(workspace)
    place = f"file={_escape_property(str(file))},line={error.line}"
    if error.column is not None:
        place += f",col={error.column}"
    return f"::error {place}::{_escape_data(error.message)}"


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


_TIME_WIDTH, _COLUMN_GAP, _MIN_ACTIVITY_WIDTH = 7, 2, 12


class LiveProgress(Progress):
    """A live table on a terminal: every job with its step, elapsed time and last compiler line."""

    def __init__(self, console):
        super().__init__()
        self.console = console
        self._live = None

    def __enter__(self) -> "LiveProgress":
        from rich.live import Live

        self._live = Live(get_renderable=self._table, console=self.console, refresh_per_second=4, transient=True)
        self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)

    def _table(self):
        from rich.markup import escape
        from rich.spinner import Spinner
        from rich.table import Table

        with self._lock:
            states = list(self.jobs.values())
        # Whole variant names come first: the activity gets the room that is left, and is
        # left out (the names wrap) on a terminal too narrow for it.
        widest = {"label": max((len(s.label) for s in states), default=0), "step": max((len(s.step) for s in states), default=0)}
        room = self.console.width - (widest["label"] + widest["step"] + _TIME_WIDTH + 4 * _COLUMN_GAP + 1)
        table = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
        table.add_column("")
        table.add_column("variant", overflow="fold")
        table.add_column("step", no_wrap=True)
        table.add_column("time", justify="right", no_wrap=True)
        if room >= _MIN_ACTIVITY_WIDTH:
            table.add_column("activity", overflow="ellipsis", no_wrap=True, max_width=room)
        for s in states:
            running = s.started is not None and s.outcome is None
            mark = Spinner("dots") if running else ("" if s.outcome is None else "✓" if s.outcome != "failed" else "✗")
            style = _STYLE.get(s.step, "bold" if running else "dim")
            cells = [mark, escape(s.label), f"[{style}]{escape(s.step)}[/]", f"{s.elapsed():.1f}s"]
            if room >= _MIN_ACTIVITY_WIDTH:
                cells.append(f"[dim]{escape(s.doing or activity(s.step, s.log_file)) if running else ''}[/]")
            table.add_row(*cells)
        return table


def progress_for(console, quiet: bool) -> Progress:
    """The view that suits the output: silent, lines with fold groups on GitHub Actions,
    live on a terminal, else lines."""
    if quiet:
        return Progress()
    environment = read_environment()
    if environment.github_actions:
        return GithubProgress(console, environment.github_workspace or Path.cwd())
    return LiveProgress(console) if console.is_terminal else LineProgress(console)
