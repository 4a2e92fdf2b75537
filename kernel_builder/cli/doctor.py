"""`kbuild doctor [KERNEL_DIR]`: what this machine can build and what to install for the
rest (kernel_builder.doctor.checkup computes it; this prints it)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from kernel_builder.cli.output import console as _console
from kernel_builder.cli.output import print_json

STATUS = {"ok": "[green]ok[/]", "limited": "[yellow]limited[/]", "missing": "[red]missing[/]"}


def doctor(
    kernel_dir: Optional[Path] = typer.Argument(None, help="Also say which of this kernel's backends and variants build here."),
    env: Optional[Path] = typer.Option(None, "--env", help="Judge with this build environment instead of the running one."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Say what this machine can build: compilers and versions, build environments, Docker, compiler cache, disk and memory; and what to install for the rest."""
    from kernel_builder.doctor.checkup import diagnose

    report = diagnose(kernel_dir, env)
    if as_json:
        print_json(report.to_json())
        return
    print_report(report)


# -- the text report ------------------------------------------------------------------------
def print_report(report) -> None:
    from rich.markup import escape

    console = _console()
    console.print(f"[bold]kbuild doctor[/]: {report.platform}, Python {escape(report.python)}")
    console.print(_backends_table(report.backends))
    console.print(_section(
        "build tools",
        [(_ok(t.available), t.name, f"{t.version} ({t.path})" if t.available else t.reason, t.install) for t in report.tools],
    ))
    console.print(_section("build environments", [_environment_row(e) for e in report.environments]))
    if report.platforms:
        console.print(_section("other platforms", [_platform_row(p) for p in report.platforms]))
    console.print(_section("other", [_docker_row(report.docker), _cache_row(report.compiler_cache), _output_cache_row(report.output_cache),
                                      *_resource_rows(report.resources)]))
    if report.kernel is not None:
        console.print(_kernel_table(report.kernel))
    console.print(escape(report.summary_line()))


def _ok(flag: bool, missing: str = "missing") -> str:
    return STATUS["ok"] if flag else STATUS.get(missing, f"[red]{missing}[/]")


def _cell(text: str | None, install: str | None = None, fallback: str | None = None) -> str:
    from rich.markup import escape

    out = escape(text or "")
    out += f"\n[cyan]install:[/] {escape(install)}" if install else ""
    return out + (f"\n[cyan]or:[/] {escape(fallback)}" if fallback else "")


def _section(title: str, rows: list[tuple]):
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_header=False, show_edge=False, pad_edge=False)
    table.add_column("status", no_wrap=True)
    table.add_column("what", no_wrap=True)
    table.add_column("detail", overflow="fold")
    for status, what, detail, install, *fallback in rows:
        table.add_row(status, what, _cell(detail, install, *fallback))
    return table


def _backends_table(backends):
    rows = []
    for b in backends:
        if b.status == "missing":
            detail = b.reason
        else:
            found = f"{b.tool} {b.version or '(version unknown)'} ({b.path})"
            if b.detail:
                found += f", {b.detail}"
            if b.variants:
                detail = f"{found}; builds {', '.join(b.variants)}"
            else:
                detail = f"{found}; no variant: {b.reason}"
                if b.device_check:
                    detail += "; `kbuild build` compile-checks its device code instead"
        rows.append((STATUS[b.status], b.backend, detail, b.install, b.fallback))
    return _section("backends", rows)


def _environment_row(e):
    if e.torch_version is None or not e.complete:
        return (STATUS["missing"], e.name, e.reason or f"{e.python}: no torch", None)
    from kernel_builder.environments.store import describe_compute

    size = f", {e.size_bytes / 1e9:.1f} GB" if e.size_bytes else ""
    return (STATUS["ok"], e.name, f"torch {e.torch_version} ({describe_compute(e.compute)}) in {e.python}{size}", None)


def _platform_row(p):
    if not p.buildable:
        status = STATUS["missing"]
    else:
        status = STATUS["limited" if p.missing else "ok"]
    detail = f"CPU variants: {p.route}" + "".join(f"; {m}" for m in p.missing)
    return (status, p.platform, detail, p.install)


def _docker_row(d):
    if d.reachable and d.image_builder_reason:
        return (STATUS["missing"], "docker", f"engine {d.version or '(version unknown)'} at {d.host}, but "
                f"{d.image_builder_reason}", None)
    if d.reachable:
        return (STATUS["ok"], "docker", f"engine {d.version or '(version unknown)'} at {d.host}; "
                f"images build with `{d.image_builder}` (BuildKit)", None)
    return (STATUS["missing"], "docker", d.reason, d.install)


def _cache_row(c):
    if c.tool is None:
        return (STATUS["missing"], "compiler cache", c.reason, c.install)
    from kernel_builder.formatting import human_size

    size = f", {human_size(c.size_bytes)}" if c.size_bytes is not None else ""
    where = f"remote cache {c.remote}: {c.remote_detail}" if c.remote else f"cache in {c.directory}{size}"
    dist = f"; sccache-dist scheduler {c.dist_scheduler}: {c.dist_problem or 'answered'}" if c.dist_scheduler else ""
    healthy = c.remote_answers is not False and not c.dist_problem
    return (STATUS["ok" if healthy else "limited"], "compiler cache", f"{c.tool} ({c.path}), {where}{dist}", None)


def _output_cache_row(o):
    status = "[dim]none[/]" if o.answers is None else STATUS["ok" if o.answers else "limited"]
    return (status, "output cache", f"{o.store}: {o.detail}" if o.store else o.detail, None)


def _resource_rows(r):
    memory = "unknown" if r.memory_available is None else f"{r.memory_available / 2**30:.1f} GiB free"
    compiles = f", {r.parallel_compiles} compile(s) at once at {r.memory_per_compile / 2**30:.0f} GiB each" if r.parallel_compiles else ""
    memory_short = any(s.startswith("memory") for s in r.shortfalls)
    disk_short = any(s.startswith("disk") for s in r.shortfalls)
    yield (_ok(not memory_short, "short"), "cores, memory", f"{r.cores} cores, {memory}{compiles}", None)
    disk = f"{r.disk_free / 1e9:.1f} GB free in {r.disk_path}; a first CUDA build needs about {r.cuda_disk_needed / 1e9:.0f} GB"
    yield (_ok(not disk_short, "short"), "disk", disk, None)
    for shortfall in r.shortfalls:
        yield ("[yellow]warning[/]", "", shortfall, None)


def _kernel_table(kernel):
    from rich.markup import escape
    from rich.table import Table

    built = sum(r["buildable"] for r in kernel.variants)
    table = Table(title=escape(f"{kernel.name} ({kernel.root}): {built} of {len(kernel.variants)} variants for this platform build here"),
                  title_justify="left")
    table.add_column("backend / variant")
    table.add_column("here", no_wrap=True)
    table.add_column("environment, or why not", overflow="fold")
    for row in kernel.backends:
        label = f"{row['backend']}: {row['variant'] or '-'}"
        table.add_row(escape(label), "[green]yes[/]" if row["buildable"] else "no", escape(row["environment"] or row["reason"] or ""))
    table.add_section()
    for row in kernel.variants:
        table.add_row(escape(row["variant"]), "[green]yes[/]" if row["buildable"] else "no", escape(row["environment"] or row["reason"] or ""))
    return table
