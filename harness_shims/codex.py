"""Codex CLI (`codex`, npm @openai/codex; checked with 0.171.0).

auto mode is forward: HTTPS_PROXY plus CODEX_CA_CERTIFICATE (Codex adds it to its roots for
HTTPS and WebSocket alike) and SSL_CERT_FILE. Codex then runs exactly as configured: the
built-in provider keeps its WebSocket transport with the warm-up, zstd request bodies under a
ChatGPT login, remote compaction, and its own choice of host (api.openai.com with an API key,
chatgpt.com/backend-api/codex with a ChatGPT login), so nothing has to be guessed. Codex
0.171 ignores OPENAI_BASE_URL, so there is no user base-URL variable that reverse mode would
have to keep in the path.

reverse mode (opt-in) puts `-c openai_base_url="<proxy>/<path>"` right after `codex`, a
per-run override of the built-in provider's base URL: the user's ~/.codex (or CODEX_HOME) is
never written. The upstream is api.openai.com when OPENAI_API_KEY or CODEX_API_KEY is set,
else chatgpt.com (ChatGPT login); `--upstream HOST=URL` sends it elsewhere. A custom
`model_provider` in the user's config is not overridden: in forward mode, give its host with
`--upstream HOST=URL` to have it recorded.

The version comes from the User-Agent: `codex_exec/0.171.0 (...)` for `codex exec`,
`codex_cli_rs/...` for the terminal UI (the `originator` header names the same client).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from forge_record.harness_shims.base import Shim

API = "https://api.openai.com/v1"
CHATGPT = "https://chatgpt.com/backend-api/codex"


def _reverse_target(environ: Mapping[str, str]) -> str:
    """The built-in provider's base URL: the API with a key, else the ChatGPT backend."""
    return API if environ.get("OPENAI_API_KEY") or environ.get("CODEX_API_KEY") else CHATGPT


class Codex(Shim):
    name = "codex"
    verified = "Codex 0.171.0, real binary, HTTP SSE and WebSocket, forward and reverse"
    executables = ("codex",)
    model_hosts = ("api.openai.com", "chatgpt.com")
    user_agent_pattern = re.compile(r"\bcodex_[a-z_]+/(\d[\w.+-]*)")

    def auto_mode(self, environ: Mapping[str, str]) -> str:
        return "forward"

    def upstream_base(self, environ: Mapping[str, str]) -> str | None:
        return _reverse_target(environ)

    def reverse_env(self, proxy_url: str, environ: Mapping[str, str]) -> dict[str, str]:
        return {}  # Codex takes its base URL from config, set by reverse_argv

    def reverse_argv(
        self, argv: list[str], proxy_url: str, environ: Mapping[str, str]
    ) -> list[str]:
        # Before the subcommand: root-level -c overrides apply to every subcommand, and a
        # user's trailing `--` or prompt cannot swallow them.
        base = self.reverse_base(proxy_url, environ)
        return [argv[0], "-c", f'openai_base_url="{base}"', *argv[1:]]
