"""Gemini CLI (`gemini`, npm @google/gemini-cli; checked with 0.61.0).

auto mode is forward, so "Login with Google" keeps working: that auth talks to Code Assist
(cloudcode-pa.googleapis.com/v1internal, recorded as `gemini.code_assist`), which no base-URL
variable redirects outside dev builds. Forward sets HTTPS_PROXY/HTTP_PROXY (Gemini CLI installs
an undici EnvHttpProxyAgent that honours them and NO_PROXY; PROTOCOLS.md §2.4 (b)) and
NODE_EXTRA_CA_CERTS (§2.4 (c)); loopback stays in NO_PROXY for its IDE bridge (§2.0). Only the
Gemini API and Code Assist hosts are intercepted: play.googleapis.com (usage statistics) and
the Google OAuth hosts are tunnelled untouched.

reverse mode sets GOOGLE_GEMINI_BASE_URL to the proxy (API keys and gateways; loopback http is
allowed, §2.4 (a)); auto chooses it when GOOGLE_GEMINI_BASE_URL is already set, so the user's
gateway stays the upstream, now recorded. Offline, Gemini CLI calls
`POST /v1beta/models/{model}:streamGenerateContent?alt=sse` (PROTOCOLS.md part 3).

The version comes from the User-Agent, `GeminiCLI-tui/0.61.0/gemini-2.5-flash (linux; x64; ...)`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from forge_record.harness_shims.base import Shim


class GeminiCli(Shim):
    name = "gemini-cli"
    executables = ("gemini",)
    model_hosts = ("generativelanguage.googleapis.com", "cloudcode-pa.googleapis.com")
    base_url_var = "GOOGLE_GEMINI_BASE_URL"
    default_base_url = "https://generativelanguage.googleapis.com"
    user_agent_pattern = re.compile(r"GeminiCLI(?:-\w+)?/([\w.+-]+)")  # GeminiCLI-tui/0.61.0/...
    reverse_when = "GOOGLE_GEMINI_BASE_URL is set"
    verified = "Gemini CLI 0.61.0, real binary, forward and reverse"

    def auto_mode(self, environ: Mapping[str, str]) -> str:
        return "reverse" if environ.get(self.base_url_var) else "forward"
