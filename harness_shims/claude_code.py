"""Claude Code (`claude`, npm @anthropic-ai/claude-code).

auto mode is forward unless ANTHROPIC_BASE_URL is already set. Forward keeps the real host,
so Claude Code behaves exactly as without the recorder: with a non-Anthropic base URL it
switches off MCP tool search and Remote Control (its changelog says so). It trusts the CA
through NODE_EXTRA_CA_CERTS. When the user already points ANTHROPIC_BASE_URL at a gateway,
reverse mode keeps that gateway as the upstream and needs no CA at all.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from forge_record.harness_shims.base import Shim


class ClaudeCode(Shim):
    name = "claude-code"
    executables = ("claude", "claude-code")
    model_hosts = ("api.anthropic.com",)
    base_url_var = "ANTHROPIC_BASE_URL"
    default_base_url = "https://api.anthropic.com"
    user_agent_pattern = re.compile(r"claude-cli/([\w.+-]+)")
    reverse_when = "ANTHROPIC_BASE_URL is set"
    verified = "Claude Code 2.1.197, real binary, forward and reverse, -p and interactive"

    def auto_mode(self, environ: Mapping[str, str]) -> str:
        return "reverse" if environ.get(self.base_url_var) else "forward"
