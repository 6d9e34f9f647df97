"""The upstream model servers of a gateway: each session sticks to one, healthy ones only.

A session's calls go to the upstream that ranks highest for its id under rendezvous hashing
(sha256 of session id + upstream URL): the same session always lands on the same engine, so
its prefix cache stays warm, and an upstream that goes away moves only its own sessions.
`check()` (run every few seconds by the gateway) marks an upstream unhealthy when a TCP
connection to it fails, and healthy again when one succeeds; unhealthy ones are skipped.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass
from urllib.parse import urlsplit

CONNECT_TIMEOUT = 2.0


@dataclass
class Upstream:
    url: str
    scheme: str
    host: str
    port: int
    path: str  # prefix put before the forwarded path, "" for none
    healthy: bool = True

    @classmethod
    def parse(cls, url: str) -> Upstream:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"bad --upstream URL {url!r} (want http[s]://host[:port][/path])")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(url.rstrip("/"), parts.scheme, parts.hostname, port,
                   parts.path.rstrip("/"))


class Upstreams:
    def __init__(self, urls: list[str]) -> None:
        self.all = [Upstream.parse(u) for u in urls]

    def pick(self, session_id: str) -> Upstream | None:
        healthy = [u for u in self.all if u.healthy]
        if not healthy:
            return None
        return max(healthy, key=lambda u: hashlib.sha256(
            f"{session_id}\n{u.url}".encode()).digest())

    def any_healthy(self) -> bool:
        return any(u.healthy for u in self.all)

    async def check(self) -> None:
        await asyncio.gather(*(self._check(u) for u in self.all))

    async def _check(self, upstream: Upstream) -> None:
        try:
            _, writer = await asyncio.wait_for(
                asyncio.open_connection(upstream.host, upstream.port), CONNECT_TIMEOUT)
        except (OSError, TimeoutError):
            upstream.healthy = False
            return
        writer.close()
        upstream.healthy = True
