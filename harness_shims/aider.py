"""aider (`aider` or `python -m aider`, PyPI aider-chat; checked with 0.86.2).

aider is Python: litellm's httpx and requests honour HTTPS_PROXY and NO_PROXY (PROTOCOLS.md
§2.7 (b)). Its CA variables replace the trust store instead of adding to it, so forward mode
gives SSL_CERT_FILE (httpx) and REQUESTS_CA_BUNDLE (requests) the full bundle: the system roots
plus the forge-record CA (§2.7 (c)); pointing them at the CA alone would break every other
HTTPS call aider makes (model prices, version check). Never `--no-verify-ssl`.

reverse mode sets OPENAI_API_BASE (what `--openai-api-base` sets, §2.7 (a)); auto chooses it
when OPENAI_API_BASE is already set, which keeps an OpenAI-compatible server on 127.0.0.1
(vLLM, Ollama, LM Studio) recorded: loopback is in NO_PROXY, so forward mode would not see it.
The base URL's path (`/v1`, a gateway's prefix) stays on the upstream.

Checked for real (tests/test_third_party_clients.py): aider 0.86.2 in a venv of its own,
`--edit-format whole`, creating a file from the model's file listing, in both modes. It also
fetches litellm's model price list from raw.githubusercontent.com at start (tunnelled, never
recorded; a seeded ~/.aider/caches file skips it).
"""

from __future__ import annotations

from collections.abc import Mapping

from forge_record.harness_shims.base import Shim


class Aider(Shim):
    name = "aider"
    executables = ("aider",)
    modules = ("aider",)
    model_hosts = ("api.openai.com", "api.anthropic.com", "generativelanguage.googleapis.com",
                   "openrouter.ai", "api.deepseek.com")
    base_url_var = "OPENAI_API_BASE"
    default_base_url = "https://api.openai.com/v1"
    reverse_when = "OPENAI_API_BASE is set"
    verified = "aider 0.86.2 (PyPI aider-chat), real, a whole-file edit, forward and reverse"

    def auto_mode(self, environ: Mapping[str, str]) -> str:
        return "reverse" if environ.get(self.base_url_var) else "forward"
