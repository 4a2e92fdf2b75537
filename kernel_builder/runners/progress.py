"""What a running build shows: a live table of every job (rich) on a terminal, one line
per step elsewhere (CI logs), nothing with --json.

Jobs report their steps (`step`) and their end (`finished`); the last compiler line is
read from the tail of each running job's log file when the table redraws, so compiles
need no callback."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

_TAIL_BYTES = 4096
_LINE_WIDTH = 90


def last_line(log_file: Path | None) -> str:
    """The last non-empty line of a log, shortened: what the compiler is doing now."""
    if log_file is None:
        return ""
    try:
        with open(log_file, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - _TAIL_BYTES))
            tail = f.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[-1]
    return line if len(line) <= _LINE_WIDTH else line[: _LINE_WIDTH - 3] + "..."


@dataclass
class _JobState:
    label: str
    step: str = "queued"
    started: float | None = None
    ended: float | None = None
    log_file: Path | None = None
    outcome: str | None = None  # the result's status once finished

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
            state.step = step
            state.log_file = log_file or state.log_file
        self.changed(state)

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
    """One line per step: readable in a CI log, where a live table cannot redraw."""

    def __init__(self, console):
        super().__init__()
        self.console = console

    def changed(self, state: _JobState, detail: str = "") -> None:
        from rich.markup import escape

        style = _STYLE.get(state.step, "bold")
        tail = f": {escape(detail)}" if detail else ""
        self.console.print(f"[{state.elapsed():6.1f}s] {escape(state.label)} [{style}]{escape(state.step)}[/]{tail}")


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

        table = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
        table.add_column("")
        table.add_column("variant", no_wrap=True)
        table.add_column("step", no_wrap=True)
        table.add_column("time", justify="right")
        table.add_column("last line", overflow="ellipsis", no_wrap=True)
        with self._lock:
            states = list(self.jobs.values())
        for s in states:
            running = s.started is not None and s.outcome is None
            mark = Spinner("dots") if running else ("" if s.outcome is None else "✓" if s.outcome != "failed" else "✗")
            style = _STYLE.get(s.step, "bold" if running else "dim")
            line = escape(last_line(s.log_file)) if running else ""
            table.add_row(mark, escape(s.label), f"[{style}]{escape(s.step)}[/]", f"{s.elapsed():.1f}s", f"[dim]{line}[/]")
        return table


def progress_for(console, quiet: bool) -> Progress:
    """The view that suits the output: silent, live on a terminal, else lines."""
    if quiet:
        return Progress()
    return LiveProgress(console) if console.is_terminal else LineProgress(console)
