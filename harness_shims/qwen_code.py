"""Qwen Code (`qwen`, npm @qwen-code/qwen-code; checked with 0.24.4).

With an API key Qwen Code speaks OpenAI Chat Completions to OPENAI_BASE_URL (PROTOCOLS.md
§2.6 (a)); without one set, 0.24.4 calls DashScope's compatible mode
(dashscope.aliyuncs.com/compatible-mode/v1), and it also opens *.rum.aliyuncs.com
(telemetry), which is tunnelled untouched. auto mode is reverse when OPENAI_BASE_URL and
OPENAI_API_KEY are both set: the variable then points at the proxy and the user's base URL
(DashScope, a local vLLM, a gateway, its path prefix kept) stays the upstream. That is also
how a model server on 127.0.0.1 gets recorded: loopback is in NO_PROXY, so forward mode would
never see it.

Qwen OAuth ignores OPENAI_BASE_URL: inference goes to the `resource_url` of the stored
credentials (portal.qwen.ai, or DashScope) (§2.6 (d)), so without an API key auto mode is
forward: HTTPS_PROXY (its fetch dispatcher, inherited from Gemini CLI, honours it; §2.6 (b))
and NODE_EXTRA_CA_CERTS (§2.6 (c)). `--mode reverse` without an API key (OPENAI_API_KEY or
`--openai-api-key`) is refused: under OAuth it would record nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from forge_record.harness_shims.base import Shim


class QwenCode(Shim):
    name = "qwen-code"
    executables = ("qwen",)
    model_hosts = ("portal.qwen.ai", "dashscope.aliyuncs.com", "dashscope-intl.aliyuncs.com",
                   "api.openai.com")
    base_url_var = "OPENAI_BASE_URL"
    default_base_url = "https://dashscope.aliyuncs.com/compatible-mode/v1"
    user_agent_pattern = re.compile(r"QwenCode/([\w.+-]+)")
    reverse_when = "OPENAI_BASE_URL and OPENAI_API_KEY are set"
    verified = "Qwen Code 0.24.4, real binary, forward and reverse (API key)"

    def auto_mode(self, environ: Mapping[str, str]) -> str:
        api_key_mode = environ.get(self.base_url_var) and environ.get("OPENAI_API_KEY")
        return "reverse" if api_key_mode else "forward"

    def reverse_refusal(self, environ: Mapping[str, str], argv: Sequence[str] = ()
                        ) -> str | None:
        if not environ.get("OPENAI_API_KEY") and not any(
                a == "--openai-api-key" or a.startswith("--openai-api-key=") for a in argv):
            return ("qwen-code: reverse mode needs OPENAI_API_KEY (Qwen OAuth ignores "
                    "OPENAI_BASE_URL); use --mode forward")
        return super().reverse_refusal(environ, argv)
