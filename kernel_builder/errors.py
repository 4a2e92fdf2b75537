"""User-facing failures, one class per exit code. The CLI (kernel_builder.cli.main) prints
`message` in one line and exits with the class's `exit_code`; never a traceback.

- 1, `KbuildError`: what was asked for is sound but did not succeed (a compile failed, the
  Hub refused, a check found a problem).
- 2, `UsageError`: what was asked for is wrong (a flag's value, a name, build.toml, a folder
  holding nothing to work on); the message says what to change.
- 128 + the signal, `Interrupted`: Ctrl-C (SIGINT, 130) or SIGTERM (143) stopped the command.
Other exit codes: a command's own outcome (`kbuild test` returns pytest's)."""

import signal


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


class Interrupted(KbuildError):
    """Exit code 128 + the signal: the command was stopped (Ctrl-C, SIGTERM); the message
    says what was left undone. Also what a job's tool run raises when the build stops it."""

    def __init__(self, message: str, signal_number: int = signal.SIGINT):
        super().__init__(message)
        self.signal_number = int(signal_number)
        self.exit_code = 128 + self.signal_number


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises KeyboardInterrupt (kernel_builder.cli.main installs
    the handler), so that a build stops the same way on both."""

    signal_number = signal.SIGTERM
