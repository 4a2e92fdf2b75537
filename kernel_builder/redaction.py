"""Secrets kept out of what kbuild shows: the passwords in URLs, the keys in connection
strings and token-like values, masked as *** wherever a setting is printed, logged or
written to JSON.

Example:
    >>> mask_credentials("https://me:hunter2@pypi.example/simple")
    'https://***@pypi.example/simple'
    >>> mask_credentials("DefaultEndpointsProtocol=https;AccountName=a;AccountKey=c2VjcmV0")
    'DefaultEndpointsProtocol=https;AccountName=a;AccountKey=***'
"""

from __future__ import annotations

import re
from typing import overload

# The user:password part of a URL (anything between the scheme and an @ before the path).
_URL_USERINFO = re.compile(r"(\w[\w+.-]*://)[^/@\s]*@")
# key=value pairs whose value is a secret: Azure's AccountKey and SharedAccessSignature,
# and the password/token/secret/key/sig parameters of URLs and connection strings.
_SECRET_PAIR = re.compile(
    r"(?i)\b((?:account|shared)?(?:key|accesskey|access_key|secret|password|passwd|pwd|token|"
    r"sharedaccesssignature|sig|signature|credential)s?)=([^;&\s]+)"
)


@overload
def mask_credentials(text: str) -> str: ...
@overload
def mask_credentials(text: None) -> None: ...
def mask_credentials(text: str | None) -> str | None:
    """`text` with every URL's user:password and every secret key=value's value replaced by
    *** (None stays None: an unset setting)."""
    if text is None:
        return None
    text = _URL_USERINFO.sub(r"\1***@", text)
    return _SECRET_PAIR.sub(r"\1=***", text)


def has_credentials(url: str) -> bool:
    """Whether masking changes `url`: it carries a password, token or key."""
    return mask_credentials(url) != url
