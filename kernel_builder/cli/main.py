"""The `kbuild` app: every command registered in one list (each lives in its own module
under kernel_builder/cli/), and the entry point that maps error classes to exit codes.

A KbuildError becomes one line on stderr and its exit code; never a traceback. Ctrl-C and
SIGTERM end a command with one "kbuild: interrupted..." line and 128 + the signal."""

from __future__ import annotations

import signal
import sys

import typer

from kernel_builder import __version__
from kernel_builder.cli.output import console as _console
from kernel_builder.cli.output import new_app
from kernel_builder.errors import Interrupted, KbuildError, Terminated

app = new_app("Build, check and publish compute kernels for the Hugging Face Kernel Hub.", name="kbuild")


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"kbuild {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version, help="Print kbuild's version."),
) -> None:
    """Build, check and publish compute kernels for the Hugging Face Kernel Hub."""


def version() -> None:
    """Print kbuild's version (also `kbuild --version`)."""
    typer.echo(f"kbuild {__version__}")


def _register_commands() -> None:
    """Every command and command group of `kbuild`, in the order `kbuild --help` lists them."""
    from kernel_builder.cli import bench, build, check, ci, dev, docker, doctor, env, kernel_test, lock, migrate, publish, scaffold

    commands = {
        "init": scaffold.init, "build": build.build, "plan": build.plan, "variants": build.variants, "check": check.check,
        "test": kernel_test.test, "bench": bench.bench, "dev": dev.dev, "publish": publish.publish, "lock": lock.lock, "migrate": migrate.migrate,
        "doctor": doctor.doctor, "demo": scaffold.demo, "version": version,
    }
    groups = {
        "env": (env.env_app, "List, create and prune kbuild's cached build environments."),
        "docker": (docker.docker_app, "Build the images that `kbuild build --runner docker` builds in."),
        "ci": (ci.ci_app, "Write a kernel repo's CI workflow (GitHub Actions), and run its steps."),
    }
    for name, command in commands.items():
        app.command(name)(command)
    for name, (group, help_text) in groups.items():
        app.add_typer(group, name=name, help=help_text)


def _terminated(signal_number, frame) -> None:
    raise Terminated()


def main() -> None:
    # SIGTERM (a CI runner cancelling, `kill`) stops a command as Ctrl-C does, not mid-write.
    signal.signal(signal.SIGTERM, _terminated)
    try:
        # Outside standalone mode click returns typer.Exit's code instead of exiting.
        code = app(standalone_mode=False)
        sys.exit(code if isinstance(code, int) else 0)
    except Interrupted as e:
        _say_interrupted(e.message, e.exit_code)
    except KbuildError as e:
        from rich.markup import escape

        _console(stderr=True).print(f"[red]kbuild: error:[/] {escape(e.message)}")
        sys.exit(e.exit_code)
    except KeyboardInterrupt as e:
        _say_interrupted("interrupted", 128 + getattr(e, "signal_number", signal.SIGINT))
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except Exception as e:
        # Usage errors and aborts, from click or the copy of click that typer bundles
        # (typer._click): they carry their own message and exit code.
        if callable(getattr(e, "show", None)) and isinstance(getattr(e, "exit_code", None), int):
            e.show()
            sys.exit(e.exit_code)
        if type(e).__name__ == "Abort":
            # click turns an interrupt outside a build's jobs into Abort
            cause = e.__cause__ or e.__context__
            if isinstance(cause, KeyboardInterrupt):
                _say_interrupted("interrupted", 128 + getattr(cause, "signal_number", signal.SIGINT))
            sys.exit(1)
        raise


def _say_interrupted(message: str, exit_code: int) -> None:
    from rich.markup import escape

    _console(stderr=True).print(f"kbuild: {escape(message)}")
    sys.exit(exit_code)


_register_commands()

if __name__ == "__main__":
    main()
