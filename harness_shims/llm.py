"""simonw's llm (`llm` or `python -m llm`, PyPI llm; checked with 0.36).

llm is Python and calls OpenAI models through the official openai SDK (PROTOCOLS.md §2.7 (b)
and (c) hold for it as for aider: httpx honours HTTPS_PROXY and NO_PROXY, and SSL_CERT_FILE
replaces the trust store, so it gets the full bundle). Its default OpenAI models build the
client without a base URL, so the SDK reads OPENAI_BASE_URL: reverse mode points that at the
proxy, and auto chooses reverse when it is already set (a local server stays the upstream,
its path kept; loopback is in NO_PROXY, so forward mode would not see it).

A model in extra-openai-models.yaml with its own `api_base` ignores OPENAI_BASE_URL: record it
in forward mode, naming its host with `--upstream HOST=URL` unless it is a known model host.
Plugins (llm-anthropic, llm-gemini, ...) use their SDKs' hosts, which forward mode intercepts.
llm sends tool-call arguments back re-serialized by `json.dumps`; lineage compares them parsed.
"""

from __future__ import annotations

from collections.abc import Mapping

from forge_record.harness_shims.base import Shim


class Llm(Shim):
    name = "llm"
    executables = ("llm",)
    modules = ("llm",)
    model_hosts = ("api.openai.com", "api.anthropic.com", "generativelanguage.googleapis.com",
                   "openrouter.ai")
    base_url_var = "OPENAI_BASE_URL"
    default_base_url = "https://api.openai.com/v1"
    verified = "llm 0.36 (PyPI), real, a --functions tool call, reverse and forward"

    def auto_mode(self, environ: Mapping[str, str]) -> str:
        return "reverse" if environ.get(self.base_url_var) else "forward"
