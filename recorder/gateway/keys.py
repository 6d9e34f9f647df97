"""Which session a call belongs to, and what proves it.

A call names its session in one of three ways, looked for in this order: a path prefix
`/s/<session>/...` (stripped before the call is forwarded), an `X-Forge-Session` header, or
nothing but its token. The token is the session's own, sent where the harness sends its API
key (`x-api-key`, `Authorization: Bearer`, `x-goog-api-key`); it is required in every case, so
knowing a session's id is not enough to write into it. The token never goes further: the
credential headers are replaced by the gateway's own upstream key, or dropped.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass

SESSION_HEADER = "x-forge-session"
CREDENTIAL_HEADERS = ("x-api-key", "authorization", "x-goog-api-key")
TOKEN_PREFIX = "frs_"
_PREFIX = re.compile(r"^/s/([A-Za-z0-9_.-]{1,128})(/.*)?$")


@dataclass(frozen=True)
class Named:
    session_id: str | None  # what the path or header named; None: the token alone
    how: str  # "path", "header" or "token"
    path: str  # the path to forward (the /s/<id> prefix stripped)
    token: str | None


def named(path: str, headers) -> Named:
    """How the request names its session (`headers`: a case-insensitive mapping)."""
    token = token_of(headers)
    match = _PREFIX.match(path.split("?", 1)[0])
    if match:
        rest = path[len("/s/") + len(match.group(1)):] or "/"
        return Named(match.group(1), "path", rest if rest.startswith("/") else "/" + rest, token)
    if headers.get(SESSION_HEADER):
        return Named(headers[SESSION_HEADER].strip(), "header", path, token)
    return Named(None, "token", path, token)


def token_of(headers) -> str | None:
    for name in CREDENTIAL_HEADERS:
        value = (headers.get(name) or "").strip()
        if name == "authorization":
            scheme, _, value = value.partition(" ")
            value = value.strip() if scheme.lower() == "bearer" else ""
        if value:
            return value
    return None


def replace_credentials(headers, upstream_key: str | None) -> None:
    """Put the gateway's upstream key where the harness put its token (so each dialect
    gets the header it expects), or drop the credential headers if there is no key."""
    for name in CREDENTIAL_HEADERS:
        if name not in headers:
            continue
        if upstream_key is None:
            del headers[name]
        elif name == "authorization":
            headers[name] = f"Bearer {upstream_key}"
        else:
            headers[name] = upstream_key
    headers.pop(SESSION_HEADER, None)


def derive(secret: str, purpose: str, value: str, length: int = 32) -> str:
    """A value only the gateway can make: HMAC-SHA256 of `purpose:value` under `secret`.
    It is how a retried create gets the same id and token back without the token being
    stored anywhere."""
    mac = hmac.new(secret.encode(), f"{purpose}:{value}".encode(), hashlib.sha256)
    return mac.hexdigest()[:length]


def session_token(secret: str, session_id: str) -> str:
    return TOKEN_PREFIX + derive(secret, "token", session_id, 40)
