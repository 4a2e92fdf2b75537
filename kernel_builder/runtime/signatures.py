"""Sigstore signatures of build variants: who signed a variant, and whether the user's policy trusts them.

A signed variant holds `metadata.json.sigstore` beside `metadata.json`: a Sigstore bundle over
metadata.json's bytes, whose digest covers every other file (the format kernels 0.19.1 reads).
The signature is checked with the real sigstore verifier (the optional `kbuild[sign]` extra)
against a trusted root: the file named by `KBUILD_SIGSTORE_TRUST_ROOT`, else Sigstore's public
root (refreshed over the network, or the cached/embedded copy when offline, which is said).

A policy is a list of rules `github:OWNER/REPO[/WORKFLOW]@REF`, each part a shell-style glob
(`github:my-org/*@refs/tags/v*`); a signer is trusted when any rule matches the GitHub identity
in its certificate. The default list is kernels 0.19.1's built-in one. `KBUILD_SIGNERS` (rules
separated by commas or whitespace) replaces it; `KBUILD_SIGNATURES` sets the mode:
`warn` (default: an unsigned, broken or untrusted variant loads with a warning), `require`
(it is refused) or `off` (nothing is checked).
"""

from __future__ import annotations

import fnmatch
import functools
import importlib.util
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

from kernel_builder.errors import KbuildError
from kernel_builder.formatting import first_line

BUNDLE = "metadata.json.sigstore"
GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
MODES = ("warn", "require", "off")
MODE_ENV = "KBUILD_SIGNATURES"
SIGNERS_ENV = "KBUILD_SIGNERS"
TRUST_ROOT_ENV = "KBUILD_SIGSTORE_TRUST_ROOT"

# kernels 0.19.1's DEFAULT_POLICY (kernels/_internals/verify.py), as rules.
_KC = "github:huggingface/kernels-community/.github/workflows/{}@refs/heads/main"
DEFAULT_SIGNERS = (
    _KC.format("build.yaml"),
    _KC.format("build-mac.yaml"),
    _KC.format("build-windows.yaml"),
    _KC.format("sign-old-builds.yaml"),
    "github:huggingface/kernels-community-rs/.github/workflows/build.yaml@refs/heads/main",
)

_OID_ISSUER_V2 = "1.3.6.1.4.1.57264.1.8"
_OID_BUILD_SIGNER_URI = "1.3.6.1.4.1.57264.1.9"
_SIGNER_URI = re.compile(r"https://github\.com/([^/]+)/([^/]+)/(.+)@(refs/.+)")
_RULE = re.compile(r"github:([^/@\s]+)/([^/@\s]+)(?:/([^@\s]+))?@(\S+)")


class SignatureError(KbuildError):
    """A signature could not be checked, or a policy or mode is malformed."""


@dataclass(frozen=True)
class Signer:
    """The GitHub Actions identity in a signing certificate."""

    owner: str
    repo: str
    workflow: str
    ref: str

    def __str__(self) -> str:
        return f"github:{self.owner}/{self.repo}/{self.workflow}@{self.ref}"


@dataclass(frozen=True)
class Rule:
    owner: str
    repo: str
    workflow: str
    ref: str

    @classmethod
    def parse(cls, text: str) -> Rule:
        m = _RULE.fullmatch(text.strip())
        if not m:
            raise SignatureError(
                f"signer rule {text!r} is not of the form github:OWNER/REPO[/WORKFLOW]@REF "
                "(globs allowed, e.g. github:my-org/*@refs/tags/v*)"
            )
        owner, repo, workflow, ref = m.groups()
        return cls(owner, repo, workflow or "*", ref)

    def matches(self, signer: Signer) -> bool:
        # GitHub names compare case-insensitively; workflow paths and refs do not.
        return (fnmatch.fnmatch(signer.owner.lower(), self.owner.lower())
                and fnmatch.fnmatch(signer.repo.lower(), self.repo.lower())
                and fnmatch.fnmatchcase(signer.workflow, self.workflow)
                and fnmatch.fnmatchcase(signer.ref, self.ref))


@dataclass(frozen=True)
class SignaturePolicy:
    """Which signers are trusted, and what to do with a variant that has none of them."""

    rules: tuple[Rule, ...]
    mode: str = "warn"

    @classmethod
    def of(cls, signers: str | list[str] | tuple[str, ...] | None = None, mode: str | None = None) -> SignaturePolicy:
        """A policy from explicit arguments, else the environment, else the defaults."""
        mode = mode or os.environ.get(MODE_ENV) or "warn"
        if mode not in MODES:
            raise SignatureError(f"signature mode {mode!r} is not one of {', '.join(MODES)}")
        if signers is None:
            signers = os.environ.get(SIGNERS_ENV) or list(DEFAULT_SIGNERS)
        if isinstance(signers, str):
            signers = [s for s in re.split(r"[,\s]+", signers) if s]
        if mode != "off" and not signers:
            raise SignatureError("the signer policy lists no signers; give at least one github:OWNER/REPO@REF rule")
        return cls(tuple(Rule.parse(s) for s in signers), mode)

    def trusts(self, signer: Signer) -> bool:
        return any(rule.matches(signer) for rule in self.rules)


@dataclass(frozen=True)
class SignatureCheck:
    """What a variant's signature says: status is signed, unsigned or broken."""

    status: str
    signer: Signer | None = None
    reason: str = ""

    def __str__(self) -> str:
        if self.status == "signed":
            return f"signed by {self.signer}"
        return self.status + (f": {self.reason}" if self.reason else "")


def _sigstore():
    try:
        from sigstore.errors import Error as SigstoreError
        from sigstore.models import Bundle, ClientTrustConfig, TrustedRoot
        from sigstore.verify import Verifier, policy
    except ImportError:
        raise SignatureError(
            "checking signatures needs the sigstore package: pip install 'kbuild[sign]'"
        ) from None
    return SigstoreError, Bundle, ClientTrustConfig, TrustedRoot, Verifier, policy


@dataclass
class TrustRoot:
    """A sigstore Verifier and where its root of trust came from (said in reports)."""

    verifier: object
    source: str


def trust_root(path: Path | str | None = None) -> TrustRoot:
    """The verifier for `path` (a trusted_root.json), `KBUILD_SIGSTORE_TRUST_ROOT`, or Sigstore's public root."""
    return _trust_root(str(path or os.environ.get(TRUST_ROOT_ENV) or ""))


@functools.lru_cache(maxsize=4)  # a TUF refresh (or its timeout) once per process, not per load
def _trust_root(path: str) -> TrustRoot:
    sigstore_error, _, client_config, trusted_root, verifier, _ = _sigstore()
    if path:
        try:
            return TrustRoot(verifier(trusted_root=trusted_root.from_file(str(path))), f"trust root {path}")
        except (OSError, ValueError, sigstore_error) as e:
            raise SignatureError(f"cannot read the Sigstore trust root {path}: {e}") from None
    try:
        config = client_config.production(offline=False)
        return TrustRoot(verifier(trusted_root=config.trusted_root), "Sigstore public trust root")
    except Exception:  # noqa: BLE001 - TUF raises many kinds when the network is away
        pass
    try:
        config = client_config.production(offline=True)
    except Exception as e:  # noqa: BLE001
        raise SignatureError(f"cannot load Sigstore's trust root (offline, and no cached copy): {e}") from None
    return TrustRoot(verifier(trusted_root=config.trusted_root),
                     "Sigstore public trust root (offline: the cached or embedded copy)")


def _extension(cert, oid: str) -> str | None:
    from cryptography import x509

    try:
        raw = cert.extensions.get_extension_for_oid(x509.ObjectIdentifier(oid)).value.value
    except x509.ExtensionNotFound:
        return None
    # DER UTF8String: tag 0x0c, then a short or long length.
    if len(raw) < 2 or raw[0] != 0x0C:
        return None
    n = raw[1]
    start = 2 if n < 0x80 else 2 + (n & 0x7F)
    return raw[start:].decode("utf-8", "replace")


def signer_of(cert) -> Signer | None:
    """The GitHub Actions identity of a Fulcio certificate, or None for any other identity."""
    if _extension(cert, _OID_ISSUER_V2) != GITHUB_ISSUER:
        return None
    m = _SIGNER_URI.fullmatch(_extension(cert, _OID_BUILD_SIGNER_URI) or "")
    return Signer(*m.groups()) if m else None


def check_signature(folder: Path | str, root: TrustRoot) -> SignatureCheck:
    """Verify `folder/metadata.json.sigstore` over `folder/metadata.json` (before metadata.json is parsed)."""
    folder = Path(folder)
    bundle_file = folder / BUNDLE
    if not bundle_file.is_file():
        return SignatureCheck("unsigned")
    sigstore_error, bundle_cls, _, _, _, policy = _sigstore()
    try:
        bundle = bundle_cls.from_json(bundle_file.read_bytes())
        metadata = (folder / "metadata.json").read_bytes()
    except OSError as e:
        return SignatureCheck("broken", reason=f"cannot read {e.filename}: {e.strerror}")
    except (ValueError, sigstore_error) as e:
        return SignatureCheck("broken", reason=f"{BUNDLE} is not a Sigstore bundle: {first_line(e)}")
    try:
        # Any GitHub Actions identity verifies here; the user's policy is applied to it afterwards,
        # so a report can say who signed even when that signer is not trusted.
        root.verifier.verify_artifact(metadata, bundle, policy.OIDCIssuerV2(GITHUB_ISSUER))
    except sigstore_error as e:
        return SignatureCheck("broken", reason=first_line(e))
    signer = signer_of(bundle.signing_certificate)
    if signer is None:
        return SignatureCheck("broken", reason="the certificate names no GitHub Actions workflow")
    return SignatureCheck("signed", signer)


def enforce(folder: Path, policy: SignaturePolicy, root: TrustRoot | None = None) -> str | None:
    """Apply `policy` to the variant at `folder`: warn and return None, or (require mode)
    return why it is refused, for the loader to raise; `off` checks nothing."""
    if policy.mode == "off":
        return None
    if policy.mode == "warn" and root is None and importlib.util.find_spec("sigstore") is None:
        return None  # as kernels does: without the sign extra, warn mode checks nothing
    # No bundle, nothing to verify: sigstore's import and its trust root (a TUF refresh over
    # the network) cost seconds, so an unsigned variant is judged without them.
    signed = (folder / BUNDLE).is_file()
    check = check_signature(folder, root or trust_root()) if signed else SignatureCheck("unsigned")
    if check.status == "signed" and policy.trusts(check.signer):
        return None
    problem = (f"{folder} is signed by {check.signer}, which the signer policy does not trust"
               if check.status == "signed" else f"{folder} is {check}")
    remedy = (f"trust its signer with {SIGNERS_ENV} or signatures=SignaturePolicy.of([...]), or set {MODE_ENV}=warn"
              if check.status == "signed" else f"load a signed build, or set {MODE_ENV}=warn")
    if policy.mode == "require":
        return f"{problem}; refused ({MODE_ENV}=require): {remedy}. Nothing was imported."
    warnings.warn(f"{problem} (loading it anyway: {MODE_ENV}=warn)", stacklevel=4)
    return None
