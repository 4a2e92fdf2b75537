"""A local stand-in for Sigstore's public services (Fulcio, the CT log, Rekor), for tests with no network.

It mints what the real services mint, in their formats, so that the unmodified sigstore
verifier (`sigstore.verify.Verifier(trusted_root=...)`) accepts its bundles against the trusted
root file it writes:

- a CA whose leaf certificates carry Fulcio's OIDC extensions for a GitHub Actions identity
  (issuer, workflow, repository, ref: the OIDs of fulcio/docs/oid-info.md), with an embedded
  precertificate SCT signed by a CT log key;
- a transparency log (RFC 6962 Merkle tree) whose hashedrekord 0.0.1 entries come with an
  inclusion proof, a signed checkpoint and a signed entry timestamp (the time source);
- bundles in the v0.3 media type, the one `sigstore sign` writes.

Only `cryptography` and `rfc8785` are used (both are dependencies of sigstore); nothing here
talks to a network.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import struct
from dataclasses import dataclass
from pathlib import Path

import rfc8785
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
_FULCIO = "1.3.6.1.4.1.57264.1."
_SCT_LIST_OID = x509.ObjectIdentifier("1.3.6.1.4.1.11129.2.4.2")


@dataclass(frozen=True)
class GitHubIdentity:
    """The GitHub Actions OIDC identity a leaf certificate is issued to."""

    owner: str
    repo: str
    workflow: str = ".github/workflows/release.yaml"
    ref: str = "refs/tags/v1.0.0"
    sha: str = "0" * 40
    issuer: str = GITHUB_ISSUER

    @property
    def repository_uri(self) -> str:
        return f"https://github.com/{self.owner}/{self.repo}"

    @property
    def signer_uri(self) -> str:
        return f"{self.repository_uri}/{self.workflow}@{self.ref}"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _der_utf8(value: str) -> bytes:
    raw = value.encode()
    if len(raw) < 0x80:
        return b"\x0c" + bytes([len(raw)]) + raw
    length = len(raw).to_bytes((len(raw).bit_length() + 7) // 8, "big")
    return b"\x0c" + bytes([0x80 | len(length)]) + length + raw


def _der_octets(raw: bytes) -> bytes:
    length = len(raw).to_bytes((len(raw).bit_length() + 7) // 8, "big") if len(raw) >= 0x80 else b""
    return b"\x04" + (bytes([0x80 | len(length)]) + length if length else bytes([len(raw)])) + raw


def _spki(key: ec.EllipticCurvePublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _key_id(key: ec.EllipticCurvePublicKey) -> bytes:
    return hashlib.sha256(_spki(key)).digest()


def _fulcio_extensions(identity: GitHubIdentity) -> list[x509.UnrecognizedExtension]:
    """Fulcio's extensions for a GitHub token: 1.1-1.6 hold raw strings, 1.8 on DER UTF8Strings."""
    raw = {1: identity.issuer, 2: "push", 3: identity.sha, 4: "release", 5: f"{identity.owner}/{identity.repo}",
           6: identity.ref}
    der = {8: identity.issuer, 9: identity.signer_uri, 10: identity.sha, 11: "github-hosted",
           12: identity.repository_uri, 13: identity.sha, 14: identity.ref,
           16: f"https://github.com/{identity.owner}", 18: identity.signer_uri, 19: identity.sha, 20: "push",
           21: f"{identity.repository_uri}/actions/runs/1/attempts/1"}
    exts = [x509.UnrecognizedExtension(x509.ObjectIdentifier(f"{_FULCIO}{n}"), v.encode()) for n, v in raw.items()]
    exts += [x509.UnrecognizedExtension(x509.ObjectIdentifier(f"{_FULCIO}{n}"), _der_utf8(v)) for n, v in der.items()]
    return exts


class _MerkleLog:
    """An append-only RFC 6962 tree: leaf hash sha256(0x00||leaf), node sha256(0x01||left||right)."""

    def __init__(self) -> None:
        self.leaves: list[bytes] = []

    @staticmethod
    def _leaf(data: bytes) -> bytes:
        return hashlib.sha256(b"\x00" + data).digest()

    def _root(self, hashes: list[bytes]) -> bytes:
        if len(hashes) == 1:
            return hashes[0]
        k = 1 << ((len(hashes) - 1).bit_length() - 1)  # the largest power of two below n
        return hashlib.sha256(b"\x01" + self._root(hashes[:k]) + self._root(hashes[k:])).digest()

    def _path(self, m: int, hashes: list[bytes]) -> list[bytes]:
        if len(hashes) == 1:
            return []
        k = 1 << ((len(hashes) - 1).bit_length() - 1)
        if m < k:
            return self._path(m, hashes[:k]) + [self._root(hashes[k:])]
        return self._path(m - k, hashes[k:]) + [self._root(hashes[:k])]

    def append(self, body: bytes) -> tuple[int, bytes, list[bytes]]:
        """Add `body`; its index, the new root and its inclusion proof (lowest level first)."""
        self.leaves.append(self._leaf(body))
        index = len(self.leaves) - 1
        return index, self._root(self.leaves), self._path(index, self.leaves)


class SigstoreStandIn:
    """One Sigstore instance: a CA, a CT log and a transparency log, each with its own key."""

    def __init__(self, name: str = "kbuild-test") -> None:
        self.name = name
        self.now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
        self._ca_key = ec.generate_private_key(ec.SECP384R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, name),
                             x509.NameAttribute(NameOID.COMMON_NAME, f"{name} root")])
        ca_public = self._ca_key.public_key()
        self.ca_cert = (
            x509.CertificateBuilder()
            .subject_name(ca_name).issuer_name(ca_name).public_key(ca_public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(self.now - dt.timedelta(days=1))
            .not_valid_after(self.now + dt.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=1), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_public), critical=False)
            .sign(self._ca_key, hashes.SHA384())
        )
        self._ct_key = ec.generate_private_key(ec.SECP256R1())
        self._rekor_key = ec.generate_private_key(ec.SECP256R1())
        self._log = _MerkleLog()

    # -- the trusted root, as sigstore's TUF repository serves it ---------------------------------

    def trusted_root(self) -> dict:
        start = {"start": (self.now - dt.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")}

        def log(url: str, key: ec.EllipticCurvePrivateKey) -> dict:
            return {"baseUrl": url, "hashAlgorithm": "SHA2_256",
                    "publicKey": {"rawBytes": _b64(_spki(key.public_key())), "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                                  "validFor": start},
                    "logId": {"keyId": _b64(_key_id(key.public_key()))}}

        return {
            "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
            "tlogs": [log(f"https://rekor.{self.name}.invalid", self._rekor_key)],
            "certificateAuthorities": [{
                "subject": {"organization": self.name, "commonName": f"{self.name} root"},
                "uri": f"https://fulcio.{self.name}.invalid",
                "certChain": {"certificates": [{"rawBytes": _b64(self.ca_cert.public_bytes(serialization.Encoding.DER))}]},
                "validFor": start,
            }],
            "ctlogs": [log(f"https://ctfe.{self.name}.invalid/test", self._ct_key)],
            "timestampAuthorities": [],
        }

    def write_trusted_root(self, path: Path) -> Path:
        path.write_text(json.dumps(self.trusted_root(), indent=2))
        return path

    # -- Fulcio: a short-lived certificate with an embedded SCT -----------------------------------

    def _certificate(self, public_key, identity: GitHubIdentity) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([])).issuer_name(self.ca_cert.subject).public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(self.now - dt.timedelta(minutes=1))
            .not_valid_after(self.now + dt.timedelta(minutes=10))
            .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._ca_key.public_key()), critical=False)
            .add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier(identity.signer_uri)]),
                           critical=True)
        )
        for ext in _fulcio_extensions(identity):
            builder = builder.add_extension(ext, critical=False)
        # The precertificate is the certificate without its SCT list: the CT log signs its TBS.
        precert = builder.sign(self._ca_key, hashes.SHA384())
        sct = self._sct(precert.tbs_certificate_bytes)
        sct_list = struct.pack("!H", len(sct)) + sct
        sct_ext = x509.UnrecognizedExtension(_SCT_LIST_OID, _der_octets(struct.pack("!H", len(sct_list)) + sct_list))
        return builder.add_extension(sct_ext, critical=False).sign(self._ca_key, hashes.SHA384())

    def _sct(self, tbs: bytes) -> bytes:
        """An RFC 6962 v1 SCT over a precertificate entry, TLS-encoded."""
        millis = int(self.now.timestamp() * 1000)
        issuer_key_hash = _key_id(self._ca_key.public_key())
        signed = struct.pack("!BBQH", 0, 0, millis, 1) + issuer_key_hash + len(tbs).to_bytes(3, "big") + tbs
        signed += struct.pack("!H", 0)  # no extensions
        signature = self._ct_key.sign(signed, ec.ECDSA(hashes.SHA256()))
        log_id = _key_id(self._ct_key.public_key())
        return (struct.pack("!B", 0) + log_id + struct.pack("!QH", millis, 0)
                + struct.pack("!BBH", 4, 3, len(signature)) + signature)  # sha256, ecdsa

    # -- Rekor: a hashedrekord entry with inclusion proof, checkpoint and SET ---------------------

    def _integrate(self, body: bytes) -> dict:
        """Append a canonical entry body; its index, time, proof, checkpoint and SET."""
        index, root, proof = self._log.append(body)
        log_id = _key_id(self._rekor_key.public_key())
        integrated = int(self.now.timestamp())
        promise = rfc8785.dumps({"body": _b64(body), "integratedTime": integrated, "logID": log_id.hex(),
                                 "logIndex": index})
        note = f"{self.name} rekor - 1\n{len(self._log.leaves)}\n{_b64(root)}\n"
        note_sig = self._rekor_key.sign(note.encode(), ec.ECDSA(hashes.SHA256()))
        return {"body": body, "index": index, "root": root, "proof": proof, "log_id": log_id,
                "integrated": integrated, "size": len(self._log.leaves),
                "set": self._rekor_key.sign(promise, ec.ECDSA(hashes.SHA256())),
                "checkpoint": f"{note}\n\u2014 {self.name}-rekor {_b64(log_id[:4] + note_sig)}\n"}

    def _log_entry(self, cert: x509.Certificate, signature: bytes, digest: bytes) -> dict:
        """A hashedrekord 0.0.1 entry for the signature, as a bundle holds it."""
        e = self._integrate(rfc8785.dumps({
            "apiVersion": "0.0.1", "kind": "hashedrekord",
            "spec": {"data": {"hash": {"algorithm": "sha256", "value": digest.hex()}},
                     "signature": {"content": _b64(signature),
                                   "publicKey": {"content": _b64(cert.public_bytes(serialization.Encoding.PEM))}}},
        }))
        return {
            "logIndex": str(e["index"]), "logId": {"keyId": _b64(e["log_id"])},
            "kindVersion": {"kind": "hashedrekord", "version": "0.0.1"},
            "integratedTime": str(e["integrated"]),
            "inclusionPromise": {"signedEntryTimestamp": _b64(e["set"])},
            "inclusionProof": {"logIndex": str(e["index"]), "rootHash": _b64(e["root"]), "treeSize": str(e["size"]),
                               "hashes": [_b64(h) for h in e["proof"]], "checkpoint": {"envelope": e["checkpoint"]}},
            "canonicalizedBody": _b64(e["body"]),
        }

    def sign(self, artifact: bytes, identity: GitHubIdentity) -> str:
        """The Sigstore bundle (JSON text) that `sigstore sign` would write for `artifact`."""
        key = ec.generate_private_key(ec.SECP256R1())  # ephemeral, as in keyless signing
        cert = self._certificate(key.public_key(), identity)
        digest = hashlib.sha256(artifact).digest()
        signature = key.sign(artifact, ec.ECDSA(hashes.SHA256()))
        return json.dumps({
            "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
            "verificationMaterial": {
                "certificate": {"rawBytes": _b64(cert.public_bytes(serialization.Encoding.DER))},
                "tlogEntries": [self._log_entry(cert, signature, digest)],
            },
            "messageSignature": {"messageDigest": {"algorithm": "SHA2_256", "digest": _b64(digest)},
                                 "signature": _b64(signature)},
        })
