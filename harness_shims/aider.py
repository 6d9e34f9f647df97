"""aider (`aider`, PyPI aider-chat; configured per its docs, not run here).

aider is Python: litellm's httpx and requests honour HTTPS_PROXY and NO_PROXY (PROTOCOLS.md
§2.7 (b)). Its CA variables replace the trust store instead of adding to it, so forward mode
gives SSL_CERT_FILE (httpx) and REQUESTS_CA_BUNDLE (requests) the full bundle: the system roots
plus the forge-record CA (§2.7 (c)); pointing them at the CA alone would break every other
HTTPS call aider makes (model prices, version check). Never `--no-verify-ssl`.

reverse mode sets OPENAI_API_BASE (what `--openai-api-base` sets, §2.7 (a)); auto chooses it
when OPENAI_API_BASE is already set, which keeps an OpenAI-compatible server on 127.0.0.1
(vLLM, Ollama, LM Studio) recorded: loopback is in NO_PROXY, so forward mode would not see it.
"""

from __future__ import annotations

from collections.abc import Mapping

from forge_record.harness_shims.base import Shim


class Aider(Shim):
    name = "aider"
    executables = ("aider",)
    model_hosts = ("api.openai.com", "api.anthropic.com", "generativelanguage.googleapis.com",
                   "openrouter.ai", "api.deepseek.com")
    base_url_var = "OPENAI_API_BASE"
    default_base_url = "https://api.openai.com/v1"
    reverse_when = "OPENAI_API_BASE is set"
    verified = "configuration only, per aider's docs (not run)"

    def auto_mode(self, environ: Mapping[str, str]) -> str:
        return "reverse" if environ.get(self.base_url_var) else "forward"
