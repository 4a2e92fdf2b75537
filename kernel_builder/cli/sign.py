"""`kbuild sign BUILD_DIR` and `kbuild verify BUILD_DIR|REPO@VERSION`: Sigstore signatures over
each variant's metadata.json (kernel_builder.publish.signing, kernel_builder.runtime.signatures)."""

from __future__ import annotations

from pathlib import Path

import typer

from kernel_builder.cli.output import console as _console


def sign(
    build_dir: Path = typer.Argument(Path("build"), help="The build folder (or kernel repo) whose variants to sign."),
    identity_token: str = typer.Option(
        None, "--identity-token", envvar="KBUILD_IDENTITY_TOKEN",
        help="An OIDC token to sign with (default: the ambient one of a GitHub Actions job).",
    ),
    trust_config: Path = typer.Option(
        None, "--trust-config", envvar="KBUILD_SIGSTORE_TRUST_CONFIG",
        help="A sigstore client trust config (trusted root and signing services; default: Sigstore's public instance).",
    ),
) -> None:
    """Sign every variant's metadata.json with one Sigstore identity, writing
    <variant>/metadata.json.sigstore (the bundle the kernels runtime checks)."""
    from rich.markup import escape

    from kernel_builder.publish.signing import SigstoreSigner, sign_build

    with SigstoreSigner(identity_token, trust_config) as signer:
        written = sign_build(build_dir, signer)
    console = _console()
    for path in written:
        console.print(escape(f"signed {path}"))


def verify(
    target: str = typer.Argument(..., help="A build folder, or REPO@VERSION on the Hub (every variant: only their metadata.json and bundles are downloaded)."),
    trust_root: Path = typer.Option(
        None, "--trust-root", envvar="KBUILD_SIGSTORE_TRUST_ROOT",
        help="A Sigstore trusted_root.json (default: Sigstore's public root; offline, its cached copy).",
    ),
) -> None:
    """Say for each variant who signed it (GitHub owner, repo, workflow, ref), or that it is
    unsigned or broken. Exits non-zero unless every variant is signed."""
    from rich.markup import escape

    from kernel_builder.publish.signing import verify_target

    root, results = verify_target(target, trust_root)
    console = _console()
    console.print(escape(f"checking against the {root.source}"))
    for variant, check in results:
        console.print(escape(f"{variant}: {check}"))
    if any(check.status != "signed" for _, check in results):
        raise typer.Exit(1)
