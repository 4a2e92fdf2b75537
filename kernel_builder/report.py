"""What a build reports: one JobResult per job, and the BuildReport around them that the
summary table and `kbuild build --json` (for CI) are made from."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from kernel_builder.checks import CheckResult
from kernel_builder.compiler_cache import CacheStats

# A job ends in one of these.
BUILT, UP_TO_DATE, CHECKED, SKIPPED, FAILED, CANCELLED = "built", "up-to-date", "checked", "skipped", "failed", "cancelled"


@dataclass(frozen=True)
class JobResult:
    variant: str  # the variant, or "(backend)" where none was chosen (a skipped backend, a device check)
    backend: str
    status: str  # built | up-to-date | checked (device code compiled, no variant) | skipped | failed | cancelled
    seconds: float = 0.0
    detail: str = ""
    log: str | None = None
    compiler_cache: CacheStats | None = None  # None: no cache, or nothing compiled
    size: int | None = None  # bytes of the variant folder, when there is one
    checks: tuple[CheckResult, ...] = ()  # run on the variant before it was installed

    @property
    def ok(self) -> bool:
        return self.status not in (FAILED, CANCELLED)

    @property
    def label(self) -> str:
        """The variant, or the backend where none was chosen (a skipped backend, a device check)."""
        return self.backend if self.variant.startswith("(") else self.variant

    @property
    def warnings(self) -> list[str]:
        return [f"{c.check}: {c.detail}" for c in self.checks if c.status == "warning"]

    def to_json(self) -> dict:
        data = asdict(self)
        data["checks"] = [c.to_json() for c in self.checks]
        return data

    @classmethod
    def from_json(cls, row: dict) -> "JobResult":
        """A job row of `kbuild build --json` (as a container's build prints it)."""
        cache = row.get("compiler_cache")
        checks = tuple(
            CheckResult(c["check"], c["status"], c.get("detail", ""), tuple(c.get("findings", ()))) for c in row.get("checks", ())
        )
        return cls(
            row["variant"], row["backend"], row["status"], row.get("seconds", 0.0), row.get("detail", ""), row.get("log"),
            CacheStats(**cache) if cache else None, row.get("size"), checks,
        )


def folder_size(folder: Path) -> int | None:
    try:
        return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    except OSError:
        return None


def human_size(size: int | None) -> str:
    if size is None:
        return ""
    for unit in ("B", "KB", "MB"):
        if size < 1024 or unit == "MB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return ""


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

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.results)

    def cache_totals(self) -> tuple[str, int, int] | None:
        """(tool, hits, compiles) over every job that compiled through the cache."""
        stats = [r.compiler_cache for r in self.results if r.compiler_cache]
        if not stats:
            return None
        return stats[0].tool, sum(s.hits for s in stats), sum(s.hits + s.misses for s in stats)

    def summary_line(self) -> str:
        counts = ", ".join(f"{self.count(s)} {s}" for s in (BUILT, UP_TO_DATE, CHECKED, SKIPPED, FAILED, CANCELLED) if self.count(s))
        line = f"{self.kernel}: {counts or 'no jobs'} in {self.seconds:.1f} s ({self.concurrent} at once)"
        totals = self.cache_totals()
        if totals:
            tool, hits, compiles = totals
            line += f"; {tool} {hits}/{compiles} compiles from cache ({100 * hits / compiles:.0f}%)"
        return line

    def to_json(self) -> dict:
        totals = self.cache_totals()
        return {
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
