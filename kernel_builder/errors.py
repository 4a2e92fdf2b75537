"""User-facing failures. The CLI prints `message` in one line and exits with `exit_code`."""


class KbuildError(Exception):
    """A user-facing failure: the CLI prints the message in one line and exits with exit_code."""

    exit_code = 1

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        self.message = message
        if exit_code is not None:
            self.exit_code = exit_code


class ManifestError(KbuildError):
    """build.toml is malformed: names the file, the key and what was expected."""

    exit_code = 2


class VariantError(KbuildError):
    """A variant name or selection that cannot be parsed or built here."""

    exit_code = 2


class BuildError(KbuildError):
    """A compile or link step failed; the message points at the job's log file."""


class EnvironmentProbeError(KbuildError):
    """The build environment (its Python and torch) could not be inspected."""


class EnvironmentCreateError(KbuildError):
    """A managed build environment could not be created; names the pip request and its log."""
