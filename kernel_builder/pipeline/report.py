"""What a build reports: the BuildReport around its jobs' results (kernel_builder.runners.result)
that the summary table and `kbuild build --json` (for CI) are made from."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernel_builder.errors import KbuildError
from kernel_builder.runners.result import (
    BUILT, CANCELLED, CHECKED, FAILED, FROM_OUTPUT_CACHE, SKIPPED, UP_TO_DATE, JobResult,
)


@dataclass(frozen=True)
class BuildReport:
    kernel: str
    out_dir: Path
    results: tuple[JobResult, ...]
    seconds: float  # wall time of the whole build
    concurrent: int  # jobs run at once

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    def require_some_built(self, selection: bool) -> None:
        """A KbuildError when every job was skipped: a build that made nothing failed (with
        `selection`, --matrix chose the variants; else one per backend was)."""
        if not any(r.status in (BUILT, UP_TO_DATE, CHECKED) for r in self.results):
            skipped = "selected variant" if selection else "backend"
            raise KbuildError(f"nothing to build for '{self.kernel}' on this machine: every {skipped} was skipped")

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.results)

    def cache_totals(self) -> tuple[str, int, int] | None:
        """(tool, hits, compiles) over every job that compiled through the cache."""
        stats = [r.compiler_cache for r in self.results if r.compiler_cache]
        if not stats:
            return None
        return stats[0].tool, sum(s.hits for s in stats), sum(s.hits + s.misses for s in stats)

    def cache_sources(self) -> tuple[str, int]:
        """(where the hits came from: the jobs' cache locations, sccache's remote one included;
        compiles that sccache-dist build servers ran)."""
        stats = [r.compiler_cache for r in self.results if r.compiler_cache]
        locations = dict.fromkeys(s.location for s in stats if s.location)
        return "; ".join(locations), sum(s.distributed for s in stats)

    def summary_line(self) -> str:
        counts = ", ".join(f"{self.count(s)} {s}" for s in (BUILT, UP_TO_DATE, CHECKED, SKIPPED, FAILED, CANCELLED) if self.count(s))
        line = f"{self.kernel}: {counts or 'no jobs'} in {self.seconds:.1f} s ({self.concurrent} at once)"
        fetched = sum(r.status == UP_TO_DATE and r.detail == FROM_OUTPUT_CACHE for r in self.results)
        line += f"; {fetched} {FROM_OUTPUT_CACHE}" if fetched else ""
        totals = self.cache_totals()
        if totals:
            tool, hits, compiles = totals
            line += f"; {tool} {hits}/{compiles} compiles from cache ({100 * hits / compiles:.0f}%)"
            location, distributed = self.cache_sources()
            line += f" at {location}" if location else ""
            line += f", {distributed} compiled by sccache-dist" if distributed else ""
        return line

    def to_json(self) -> dict:
        totals = self.cache_totals()
        location, distributed = self.cache_sources()
        report = {
            "kernel": self.kernel,
            "out": str(self.out_dir),
            "ok": self.ok,
            "seconds": round(self.seconds, 3),
            "concurrent": self.concurrent,
            "counts": {s: self.count(s) for s in (BUILT, UP_TO_DATE, CHECKED, SKIPPED, FAILED, CANCELLED)},
            "compiler_cache": None if totals is None else {
                "tool": totals[0], "hits": totals[1], "compiles": totals[2], "hit_rate": round(totals[1] / totals[2], 3),
            },
            "jobs": [r.to_json() for r in self.results],
        }
        if totals is not None and (location or distributed):  # sccache's remote cache, sccache-dist
            report["compiler_cache"] |= {"location": location, "distributed": distributed}
        return report
