"""What a harness shim knows: how to route one agent CLI through the recorder.

A shim only computes environment variables; it imports the standard library alone and never
starts anything. Two routing modes exist (docs/ROUTING.md):

- reverse: the CLI's base-URL variable points at the proxy, which forwards to the real API
  (or to the user's own gateway, when that variable was already set). The base URL handed
  to the CLI is the proxy's address with the upstream base URL's path kept
  (`https://gw.example/openai/v1` becomes `http://127.0.0.1:PORT/openai/v1`), so the CLI
  sends the paths it would send without the recorder and the proxy forwards them unchanged;
- forward: HTTPS_PROXY plus every CA variable the common runtimes read, so the CLI keeps
  talking to its real host and the proxy intercepts TLS for model hosts only.

The `proxy_url` a shim gets carries the run's secret (addons/access.py): in forward mode as
proxy credentials, `http://forge:<token>@127.0.0.1:PORT`; in reverse mode as the first path
segment of the base URL, `http://127.0.0.1:PORT/<token>`. A shim passes it on whole.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

LOOPBACK = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class CaFiles:
    cert: str  # the proxy's CA certificate alone (PEM)
    bundle: str  # system roots plus that CA, for variables that replace the trust store


class Shim:
    name = "generic"
    executables: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()  # Python packages run as `python -m NAME`
    model_hosts: tuple[str, ...] = ()
    base_url_var: str | None = None  # the CLI's base-URL variable, if it has one
    default_base_url: str | None = None
    user_agent_pattern: re.Pattern[str] | None = None
    # When `--mode auto` picks reverse, in words (`forge-record harnesses` shows it); None
    # when auto is always the same mode. tests/test_cli.py checks each against auto_mode.
    reverse_when: str | None = None

    def auto_mode(self, environ: Mapping[str, str]) -> str:
        return "reverse" if self.base_url_var else "forward"

    def base_urls(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The base-URL variables this CLI reads that are set: {variable: URL}. Forward mode
        intercepts their hosts; reverse mode points them at the proxy."""
        url = environ.get(self.base_url_var) if self.base_url_var else None
        return {self.base_url_var: url} if url else {}

    def upstream_base(self, environ: Mapping[str, str], argv: Sequence[str] = ()) -> str | None:
        """The base URL the CLI would use without the recorder, where reverse-mode traffic
        goes: the user's own base URL if set, else the API's."""
        if self.base_url_var and environ.get(self.base_url_var):
            return environ[self.base_url_var].rstrip("/")
        return self.default_base_url

    def reverse_refusal(self, environ: Mapping[str, str], argv: Sequence[str] = ()
                        ) -> str | None:
        """Why reverse mode cannot route this run (one line), or None when it can. A CLI
        that would send part of its model traffic past the proxy is refused, not run."""
        if self.upstream_base(environ, argv) is None:
            return f"{self.name} has no base-URL variable; use --mode forward"
        return None

    def reverse_base(self, proxy_url: str, environ: Mapping[str, str],
                     argv: Sequence[str] = ()) -> str:
        """The base URL to hand the CLI in reverse mode: the proxy, under the path of the
        base URL the CLI would have used (`upstream_base`)."""
        base = self.upstream_base(environ, argv)
        return proxy_url + (urlsplit(base).path.rstrip("/") if base else "")

    def reverse_env(self, proxy_url: str, environ: Mapping[str, str]) -> dict[str, str]:
        assert self.base_url_var is not None
        return {self.base_url_var: self.reverse_base(proxy_url, environ)}

    def reverse_argv(
        self, argv: list[str], proxy_url: str, environ: Mapping[str, str]
    ) -> list[str]:
        """The command line to run in reverse mode, for CLIs whose base URL is set by
        flags rather than by a variable (Codex's `-c` overrides). Unchanged by default."""
        return argv

    def forward_env(
        self, proxy_url: str, ca: CaFiles, environ: Mapping[str, str]
    ) -> dict[str, str]:
        no_proxy = _merge_no_proxy(environ.get("NO_PROXY") or environ.get("no_proxy") or "")
        return {
            "HTTPS_PROXY": proxy_url,
            "HTTP_PROXY": proxy_url,
            "https_proxy": proxy_url,
            "http_proxy": proxy_url,
            "NO_PROXY": no_proxy,
            "no_proxy": no_proxy,
            # Node and Bun add this file to their roots.
            "NODE_EXTRA_CA_CERTS": ca.cert,
            # Python's ssl/httpx and requests replace their trust store with these files, so
            # they get the full bundle; Codex adds this one to its roots.
            "SSL_CERT_FILE": ca.bundle,
            "REQUESTS_CA_BUNDLE": ca.bundle,
            "CODEX_CA_CERTIFICATE": ca.cert,
        }

    def version_from(self, user_agent: str) -> str | None:
        if self.user_agent_pattern is None:
            return None
        match = self.user_agent_pattern.search(user_agent)
        return match.group(1) if match else None


def _merge_no_proxy(existing: str) -> str:
    """The user's NO_PROXY with loopback added: local servers (an IDE bridge, a local
    model) must not be sent to the proxy."""
    entries = [e.strip() for e in existing.split(",") if e.strip()]
    entries += [h for h in LOOPBACK if h not in entries]
    return ",".join(entries)
