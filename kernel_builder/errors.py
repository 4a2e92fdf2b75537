"""User-facing failures, one class per exit code. The CLI (kernel_builder.cli.main) prints
`message` in one line and exits with the class's `exit_code`; never a traceback.

- 1, `KbuildError`: what was asked for is sound but did not succeed (a compile failed, the
  Hub refused, a check found a problem).
- 2, `UsageError`: what was asked for is wrong (a flag's value, a name, build.toml, a folder
  holding nothing to work on); the message says what to change.
Other exit codes: a command's own outcome (`kbuild test` returns pytest's), 130 on Ctrl-C."""


class KbuildError(Exception):
    """Exit code 1: the operation failed; the message says where to look."""

    exit_code = 1

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class UsageError(KbuildError):
    """Exit code 2: the user's input is wrong; the message says what to change."""

    exit_code = 2


class ManifestError(UsageError):
    """build.toml is malformed: names the file, the key and what was expected."""


class VariantError(UsageError):
    """A variant name or selection that cannot be parsed or built here."""


class BuildError(KbuildError):
    """A compile or link step failed; the message points at the job's log file."""


class EnvironmentProbeError(KbuildError):
    """The build environment (its Python and torch) could not be inspected."""


class EnvironmentCreateError(KbuildError):
    """A managed build environment could not be created; names the pip request and its log."""
