"""The Sigstore stand-in (sigstore_standin.py) served on 127.0.0.1, so that the real signing
client (`sigstore sign`, sigstore-python's SigningContext, `kbuild sign`) runs unmodified:

- `POST /api/v2/signingCert` (Fulcio): checks the CSR's proof of possession and the OIDC
  token's issuer and audience, issues a certificate for the token's GitHub workflow identity;
- `POST /api/v1/log/entries` (Rekor v1): checks the hashedrekord signature, integrates it,
  answers with the inclusion proof, checkpoint and signed entry timestamp;
- `GET /token` (GitHub Actions' ID token endpoint, ACTIONS_ID_TOKEN_REQUEST_URL): a token for
  the server's identity, so the ambient-credential path is exercised too.

`client_trust_config()` is the `--trust-config` file that points the client at it. Tokens are
not signed by a real issuer (nothing here could check one); their claims are what GitHub's carry.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import rfc8785
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed

from kernel_builder.testing.sigstore_standin import GITHUB_ISSUER, GitHubIdentity, SigstoreStandIn


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def github_token(identity: GitHubIdentity, audience: str = "sigstore") -> str:
    """A JWT with the claims of a GitHub Actions OIDC token for `identity`."""
    now = int(time.time())
    claims = {
        "iss": identity.issuer, "aud": audience, "iat": now, "nbf": now, "exp": now + 600,
        "sub": f"repo:{identity.owner}/{identity.repo}:ref:{identity.ref}",
        "repository": f"{identity.owner}/{identity.repo}", "repository_owner": identity.owner,
        "ref": identity.ref, "sha": identity.sha, "workflow_ref": identity.signer_uri.removeprefix("https://github.com/"),
        "job_workflow_ref": identity.signer_uri.removeprefix("https://github.com/"),
    }
    header = {"alg": "ES256", "typ": "JWT"}
    return ".".join([_b64url(json.dumps(header).encode()), _b64url(json.dumps(claims).encode()), _b64url(b"unsigned")])


def _claims(token: str) -> dict:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def _identity(claims: dict) -> GitHubIdentity:
    """Fulcio's GitHub mapping: the workflow identity is the token's job_workflow_ref."""
    if claims.get("iss") != GITHUB_ISSUER or claims.get("aud") != "sigstore":
        raise ValueError("token is not a GitHub Actions token for sigstore")
    path, _, ref = claims["job_workflow_ref"].partition("@")
    owner, repo, workflow = path.split("/", 2)
    return GitHubIdentity(owner, repo, workflow, ref, sha=claims.get("sha", "0" * 40))


class SigstoreServer:
    """`with SigstoreServer(standin, identity) as server:` serves on `server.url` until the block ends."""

    def __init__(self, standin: SigstoreStandIn, identity: GitHubIdentity | None = None) -> None:
        self.standin = standin
        self.identity = identity
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}"
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    def __enter__(self) -> SigstoreServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._http.shutdown()
        self._http.server_close()

    def client_trust_config(self, path: Path) -> Path:
        """A sigstore ClientTrustConfig (trusted root + signing config) pointing at this server."""
        start = {"start": "2000-01-01T00:00:00Z"}
        service = {"url": self.url, "majorApiVersion": 1, "validFor": start, "operator": "kbuild-test"}
        root = self.standin.trusted_root()
        root["tlogs"][0]["baseUrl"] = self.url
        path.write_text(json.dumps({
            "mediaType": "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json",
            "trustedRoot": root,
            "signingConfig": {
                "mediaType": "application/vnd.dev.sigstore.signingconfig.v0.2+json",
                "caUrls": [service], "oidcUrls": [service], "rekorTlogUrls": [service], "tsaUrls": [],
                "rekorTlogConfig": {"selector": "ANY"}, "tsaConfig": {"selector": "ANY"},
            },
        }, indent=2))
        return path

    def _signing_cert(self, request: dict, token: str) -> dict:
        identity = _identity(_claims(token))
        csr = x509.load_pem_x509_csr(base64.b64decode(request["certificateSigningRequest"]))
        if not csr.is_signature_valid:
            raise ValueError("the CSR's proof of possession does not verify")
        cert = self.standin._certificate(csr.public_key(), identity)
        pems = [c.public_bytes(serialization.Encoding.PEM).decode() for c in (cert, self.standin.ca_cert)]
        return {"signedCertificateEmbeddedSct": {"chain": {"certificates": pems}}}

    def _log_entry(self, proposed: dict) -> dict:
        spec = proposed["spec"]
        cert = x509.load_pem_x509_certificate(base64.b64decode(spec["signature"]["publicKey"]["content"]))
        digest = bytes.fromhex(spec["data"]["hash"]["value"])
        cert.public_key().verify(base64.b64decode(spec["signature"]["content"]), digest,
                                 ec.ECDSA(Prehashed(hashes.SHA256())))
        e = self.standin._integrate(rfc8785.dumps(proposed))
        return {e["root"].hex() + f"{e['index']:016x}": {
            "body": base64.b64encode(e["body"]).decode(), "integratedTime": e["integrated"],
            "logID": e["log_id"].hex(), "logIndex": e["index"],
            "verification": {
                "inclusionProof": {"logIndex": e["index"], "rootHash": e["root"].hex(), "treeSize": e["size"],
                                   "hashes": [h.hex() for h in e["proof"]], "checkpoint": e["checkpoint"]},
                "signedEntryTimestamp": base64.b64encode(e["set"]).decode(),
            },
        }}

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet: the tests' output is the client's
                pass

            def _answer(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.startswith("/token") and server.identity is not None:
                    self._answer(200, {"value": github_token(server.identity)})
                else:
                    self._answer(404, {"message": "not found"})

            def do_POST(self) -> None:
                request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                try:
                    if self.path == "/api/v2/signingCert":
                        token = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
                        self._answer(201, server._signing_cert(request, token))
                    elif self.path == "/api/v1/log/entries":
                        self._answer(201, server._log_entry(request))
                    else:
                        self._answer(404, {"message": "not found"})
                except (KeyError, ValueError, InvalidSignature) as e:
                    self._answer(400, {"message": f"refused: {e}"})

        return Handler
