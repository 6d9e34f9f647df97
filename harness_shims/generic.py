"""Any other agent CLI: forward mode with every common proxy and CA variable, recording the
model hosts forge-record knows."""

from __future__ import annotations

from forge_record.harness_shims.base import Shim


class Generic(Shim):
    name = "generic"
    model_hosts = (
        "api.anthropic.com",
        "api.openai.com",
        "chatgpt.com",  # Codex with ChatGPT login: chatgpt.com/backend-api/codex/responses
    )
