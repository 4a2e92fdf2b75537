"""`kbuild sign` and `kbuild verify`: Sigstore signatures over each variant's metadata.json.

Signing writes `<variant>/metadata.json.sigstore`, the bundle kernels 0.19.1 reads; the
digest in metadata.json covers every other file of the variant, so one signature vouches for
all of them. All variants of a build are signed with one identity (one certificate), obtained
once: keyless with the ambient OIDC token of a GitHub Actions job (`permissions: id-token:
write`), or the token given. Verification is runtime/signatures.py's.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kernel_builder.checks.variant_checks import variant_folders
from kernel_builder.errors import KbuildError
from kernel_builder.formatting import first_line
from kernel_builder.runtime.signatures import BUNDLE, SignatureCheck, TrustRoot, check_signature, trust_root

# bytes of metadata.json -> the bundle's JSON text
Signer = Callable[[bytes], str]


class SigningError(KbuildError):
    """The build cannot be signed (no variants, no identity, a service refused)."""


def _write_atomically(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".kbuild-sign-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def sign_build(build_dir: Path, signer: Signer) -> list[Path]:
    """Sign every variant's metadata.json; the bundles written. Bundles are made for all
    variants before any is written, so a failure leaves the build as it was."""
    variants = variant_folders(build_dir)
    bundles = [(v / BUNDLE, signer((v / "metadata.json").read_bytes())) for v in variants]
    for path, text in bundles:
        _write_atomically(path, text)
    return [path for path, _ in bundles]


@dataclass
class SigstoreSigner:
    """Keyless signing with sigstore-python against Sigstore's public services, one certificate
    for every call. `identity_token`: an OIDC token; None takes the ambient one (GitHub Actions)."""

    identity_token: str | None = None
    trust_config: Path | None = None  # a sigstore ClientTrustConfig file (another Sigstore instance)
    _signer: object = None
    _context: object = None

    def __enter__(self) -> SigstoreSigner:
        try:
            from sigstore.errors import Error as SigstoreError
            from sigstore.models import ClientTrustConfig
            from sigstore.oidc import IdentityToken, detect_credential
            from sigstore.sign import SigningContext
        except ImportError:
            raise SigningError("signing needs the sigstore package: pip install 'kbuild[sign]'") from None
        try:
            raw = self.identity_token or detect_credential()
            if not raw:
                raise SigningError(
                    "no OIDC identity to sign with: run in a GitHub Actions job with `permissions: id-token: write`, "
                    "or pass --identity-token"
                )
            config = (ClientTrustConfig.from_json(self.trust_config.read_text()) if self.trust_config
                      else ClientTrustConfig.production())
            context = SigningContext.from_trust_config(config)
            self._context = context.signer(IdentityToken(raw), cache=True)
            self._signer = self._context.__enter__()
        except (SigstoreError, OSError, ValueError) as e:
            raise SigningError(f"cannot sign: {first_line(e)}") from None
        return self

    def __exit__(self, *exc) -> None:
        if self._context is not None:
            self._context.__exit__(*exc)

    def __call__(self, data: bytes) -> str:
        from sigstore.errors import Error as SigstoreError

        try:
            return self._signer.sign_artifact(data).to_json()
        except SigstoreError as e:
            raise SigningError(f"cannot sign: {first_line(e)}") from None


def stale_signatures(variants: list[Path]) -> list[str]:
    """Variants whose bundle signs other bytes than their metadata.json (rebuilt after signing), or
    is unreadable. Compared offline, by the digest the bundle records: no trust root needed."""
    stale = []
    for variant in variants:
        bundle = variant / BUNDLE
        if not bundle.is_file():
            continue
        try:
            signed = json.loads(bundle.read_bytes())["messageSignature"]["messageDigest"]["digest"]
            actual = base64.b64encode(hashlib.sha256((variant / "metadata.json").read_bytes()).digest()).decode()
        except (OSError, ValueError, KeyError, TypeError):
            stale.append(variant.name)
            continue
        if signed != actual:
            stale.append(variant.name)
    return stale


def verify_build(build_dir: Path, root: TrustRoot) -> list[tuple[str, SignatureCheck]]:
    """Each variant's name and what its signature says."""
    return [(v.name, check_signature(v, root)) for v in variant_folders(build_dir)]


def verify_target(target: str, trust_root_file: Path | None) -> tuple[TrustRoot, list[tuple[str, SignatureCheck]]]:
    """`kbuild verify TARGET`: the trust root checked against (the file given, else Sigstore's
    public one), and what the signature of each variant says: a build folder's variants, or
    those of REPO@VERSION on the Hub (only their metadata.json and bundles are downloaded)."""
    root = trust_root(trust_root_file)
    if Path(target).exists() or "@" not in target:
        return root, verify_build(Path(target), root)
    from kernel_builder.runtime.hub import fetch_signed_metadata

    _, variants = fetch_signed_metadata(target)
    if not variants:
        raise SigningError(f"{target} holds no variants in build/: nothing to verify")
    return root, [(name, check_signature(folder, root)) for name, folder in variants]
