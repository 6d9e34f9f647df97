"""Claude Code (`claude`, npm @anthropic-ai/claude-code).

auto mode is forward unless ANTHROPIC_BASE_URL is already set. Forward keeps the real host,
so Claude Code behaves exactly as without the recorder: with a non-Anthropic base URL it
switches off MCP tool search and Remote Control (its changelog says so). It trusts the CA
through NODE_EXTRA_CA_CERTS. When the user already points ANTHROPIC_BASE_URL at a gateway,
reverse mode keeps that gateway as the upstream and needs no CA at all. Reverse mode is
refused when CLAUDE_CODE_USE_BEDROCK, _VERTEX or _FOUNDRY is set: Claude Code then calls that
cloud and ignores ANTHROPIC_BASE_URL.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from forge_record.harness_shims.base import Shim

# With one of these set Claude Code talks to that cloud's endpoint, not ANTHROPIC_BASE_URL.
CLOUD_PROVIDERS = ("CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "CLAUDE_CODE_USE_FOUNDRY")


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

    def reverse_refusal(self, environ: Mapping[str, str], argv: Sequence[str] = ()
                        ) -> str | None:
        cloud = next((v for v in CLOUD_PROVIDERS if _truthy(environ.get(v))), None)
        if cloud is not None:  # Bedrock, Vertex or Foundry: ANTHROPIC_BASE_URL is not read
            return (f"claude-code: {cloud} is set, so ANTHROPIC_BASE_URL is ignored; "
                    "use --mode forward")
        return super().reverse_refusal(environ, argv)


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() not in ("", "0", "false", "no", "off")
