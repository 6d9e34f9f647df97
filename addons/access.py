"""The proxy serves its own agent only: a per-run secret that other local users do not have.

The proxy listens on 127.0.0.1, which every process on the machine can reach, and it relays
to any host: without a check, any local user could tunnel through it (to 127.0.0.1:5432, say)
or send model calls that get recorded into the owner's session. So each run makes a random
token and hands it to its agent alone, through the environment (readable by the owner's
processes and root only):

- forward mode: proxy credentials in the proxy URL, `http://forge:<token>@127.0.0.1:PORT`.
  HTTP clients send them as `Proxy-Authorization` on CONNECT (and on plain-HTTP requests);
  mitmproxy's ProxyAuth addon checks them and answers anything else 407. A tunnel whose
  CONNECT passed is trusted for every request inside it.
- reverse mode: CLIs send no proxy credentials to a base URL, so the token is a secret first
  path segment of the base URL the CLI is given, `http://127.0.0.1:PORT/<token>`. SecretPrefix
  strips it before any other addon sees the request (the recorded URL never holds it), and
  answers any request without it 403.

Either way a refused request is answered by the proxy before it goes anywhere, and the
recorder leaves alone every flow that already has a response (addons/recorder.py). Which
clients honour credentials in a proxy URL: docs/RELIABILITY.md.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass, field

from mitmproxy import http

USER = "forge"  # the proxy user name; the token is the password


@dataclass(frozen=True)
class Access:
    """One run's proxy secret, and how to put it where each mode's clients send it."""

    token: str = field(default_factory=lambda: secrets.token_hex(16), repr=False)

    def proxy_url(self, port: int, mode: str) -> str:
        """The URL the agent is given: the proxy URL (forward) or its base URL (reverse)."""
        if mode == "forward":
            return f"http://{USER}:{self.token}@127.0.0.1:{port}"
        return f"http://127.0.0.1:{port}/{self.token}"

    def settings(self, mitm_mode: str) -> dict[str, str]:
        """mitmproxy options: the credentials ProxyAuth asks for, in forward (regular) mode."""
        return {"proxyauth": f"{USER}:{self.token}"} if mitm_mode == "regular" else {}

    def addons(self, mitm_mode: str) -> list[object]:
        return [] if mitm_mode == "regular" else [SecretPrefix(self.token)]


class SecretPrefix:
    """Reverse mode: only requests whose path starts with /<token> are served, that segment
    removed."""

    def __init__(self, token: str) -> None:
        self._prefix = f"/{token}".encode()

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        path = flow.request.data.path  # bytes, as the client sent it
        head, rest = path[: len(self._prefix)], path[len(self._prefix):]
        if hmac.compare_digest(head, self._prefix) and rest[:1] in (b"", b"/", b"?"):
            # A base URL given with a trailing slash makes `/<token>//v1/...`.
            rest = b"/" + rest.lstrip(b"/") if rest[:1] != b"?" else b"/" + rest
            flow.request.data.path = rest
            return
        flow.response = http.Response.make(
            403, b"forge-record: this proxy serves only the agent it was started for\n",
            {"content-type": "text/plain"})
