"""opencode (`opencode`, npm opencode-ai, a Bun binary; checked with 1.18.33).

auto mode is forward: opencode picks providers from its config files, which forge-record does
not rewrite, so HTTPS_PROXY/HTTP_PROXY (Bun's fetch honours them) and NODE_EXTRA_CA_CERTS (Bun
reads it: "works for both proxy connections and direct API access", PROTOCOLS.md §2.5 (c))
cover every provider. NO_PROXY keeps localhost, 127.0.0.1 and ::1: opencode's TUI talks to its
own local server and must not be sent to the proxy (§2.5 (b)). Its background service
(`opencode service`) only sees these variables when started from this environment; one that
is already running keeps its own.

reverse mode passes OPENCODE_CONFIG_CONTENT (inline config, merged over the user's files) that
points the Anthropic provider's `baseURL` at the proxy. AI SDK providers put the API version
in the base URL, so it ends in `/v1` (§2.5 (a)). A `baseURL` the user set in a config file is
overridden for this run; to keep such a gateway, use forward mode with `--upstream`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from forge_record.harness_shims.base import Shim

CONFIG_VAR = "OPENCODE_CONFIG_CONTENT"


class OpenCode(Shim):
    name = "opencode"
    executables = ("opencode",)
    model_hosts = ("api.anthropic.com", "api.openai.com", "generativelanguage.googleapis.com",
                   "opencode.ai")  # opencode.ai serves the Zen model gateway (/zen/v1)
    default_base_url = "https://api.anthropic.com/v1"  # AI SDK base URLs hold the version
    user_agent_pattern = re.compile(r"\bopencode/([\w.+-]+)")
    verified = "opencode 1.18.33, real binary, forward and reverse"

    def auto_mode(self, environ: Mapping[str, str]) -> str:
        return "forward"

    def reverse_env(self, proxy_url: str, environ: Mapping[str, str]) -> dict[str, str]:
        try:
            config = json.loads(environ.get(CONFIG_VAR) or "{}")
        except ValueError:
            config = {}
        if not isinstance(config, dict):
            config = {}
        provider = config.setdefault("provider", {}).setdefault("anthropic", {})
        provider.setdefault("options", {})["baseURL"] = self.reverse_base(proxy_url, environ)
        return {CONFIG_VAR: json.dumps(config)}
