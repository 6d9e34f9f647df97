"""pi (`pi`, npm @mariozechner/pi-coding-agent; checked with 0.73.1).

pi is Node. Its CLI installs undici's EnvHttpProxyAgent as the global dispatcher, so its fetch
honours HTTPS_PROXY and NO_PROXY on any Node it runs on (Node 20 included, where the built-in
fetch alone would not; PROTOCOLS.md §2.0), and Node adds NODE_EXTRA_CA_CERTS to its roots.
auto mode is forward: pi takes base URLs from ~/.pi/agent/models.json only (no environment
variable), which forge-record does not rewrite, so there is no reverse mode. A custom provider
whose `baseUrl` is on another host is recorded when named with `--upstream HOST=URL`; one on
127.0.0.1 is not (loopback stays in NO_PROXY).

With the built-in `openai` provider pi speaks the Responses API to api.openai.com and sends its
system prompt as an `input` item with role `system`.
"""

from __future__ import annotations

from forge_record.harness_shims.base import Shim


class Pi(Shim):
    name = "pi"
    executables = ("pi",)
    model_hosts = ("api.openai.com", "api.anthropic.com", "generativelanguage.googleapis.com",
                   "openrouter.ai", "chatgpt.com", "api.mistral.ai", "api.x.ai", "api.groq.com",
                   "api.cerebras.ai", "api.deepseek.com", "opencode.ai")
    verified = "pi 0.73.1 (npm), real, Responses with a bash tool call, forward"
