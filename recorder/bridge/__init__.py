"""The dialect bridge: an agent that speaks Anthropic Messages, Responses or Gemini, run
against an engine that speaks Chat Completions only (vLLM, SGLang), recorded token-exactly.

`base` states the interface a translator implements, the framing of each dialect's wire form
and the parse of the engine's chat stream; `call` runs one bridged call; one module per
dialect translates. `TRANSLATORS` names the translator of each bridged dialect: a new one is
one line here.
"""

from __future__ import annotations

from forge_record.bridge import anthropic, gemini, responses
from forge_record.bridge.base import Translator, Untranslatable

TRANSLATORS: dict[str, type[Translator]] = {
    anthropic.AnthropicTranslator.dialect: anthropic.AnthropicTranslator,
    responses.ResponsesTranslator.dialect: responses.ResponsesTranslator,
    gemini.GeminiTranslator.dialect: gemini.GeminiTranslator,
}

__all__ = ["TRANSLATORS", "Translator", "Untranslatable"]
