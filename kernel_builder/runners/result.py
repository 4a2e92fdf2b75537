"""What one build job ends in, wherever it ran: a JobResult (a Docker job's comes back as
its `kbuild build --json` row)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from kernel_builder.checks.variant_checks import CheckResult
from kernel_builder.compile.compiler_cache import CacheStats

# A job ends in one of these.
BUILT, UP_TO_DATE, CHECKED, SKIPPED, FAILED, CANCELLED = "built", "up-to-date", "checked", "skipped", "failed", "cancelled"
# The detail of an up-to-date job whose variant was installed from the output cache, not compiled.
FROM_OUTPUT_CACHE = "from the output cache"


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
    # The sources Ninja compiled (compile.cmake.compiled_sources), relative to the kernel
    # where they are in it; None where no compile ran (up to date, skipped, noarch).
    compiled: tuple[str, ...] | None = None

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
        data["compiled"] = None if self.compiled is None else list(self.compiled)
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
            None if row.get("compiled") is None else tuple(row["compiled"]),
        )


def folder_size(folder: Path) -> int | None:
    try:
        return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    except OSError:
        return None
