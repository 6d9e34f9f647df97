"""The dialect bridge's own cost per event, in process: an engine stream (the mock engine's,
vLLM's fields) fed chunk by chunk through the Anthropic bridge (parse, translate, frame)
against the same stream through `engine.Strip` (the pass-through every engine call already
pays: parse and re-dump each chunk). Reported as microseconds per engine chunk and as the
ratio of the two, measured in the same run.

    .venv/bin/python bench/bridge.py [--tokens N] [--rounds R]
"""

from __future__ import annotations

import argparse
import time

import orjson

from forge_record.bridge.anthropic import AnthropicTranslator
from forge_record.bridge.call import BridgedCall, HttpBridge
from forge_record.engine import Asked, Strip
from forge_record.mock import Received
from forge_record.mock import engine as mock_engine

ASK = {"model": "claude-sonnet-4-5", "max_tokens": 4096, "stream": True,
       "messages": [{"role": "user", "content": "Write."}]}


class _Mock:
    def __init__(self, text: str) -> None:
        self.options = {"engine_script": [{"text": text}]}


def engine_chunks(tokens: int) -> list[bytes]:
    """The mock engine's stream for a text of about `tokens` tokens, one chunk per event."""
    call = BridgedCall.open(AnthropicTranslator, orjson.dumps(ASK), path="/v1/messages",
                            model="tiny", top_logprobs=2)
    text = " ".join(f"word{i % 50}" for i in range(tokens // 2))
    reply = mock_engine._chat(_Mock(text), Received("POST", "/v1/chat/completions", {},
                                                    call.request_body))
    return list(reply.body)


def bridged(chunks: list[bytes]) -> float:
    call = BridgedCall.open(AnthropicTranslator, orjson.dumps(ASK), path="/v1/messages",
                            model="tiny", top_logprobs=2)
    http = HttpBridge(call, "/v1/messages")
    start = time.perf_counter()
    http.start(200, "", "text/event-stream")
    for chunk in chunks:
        http.feed(chunk)
    http.flush()
    return time.perf_counter() - start


def stripped(chunks: list[bytes]) -> float:
    strip = Strip(Asked(), streamed=True)
    start = time.perf_counter()
    for chunk in chunks:
        strip.feed(chunk)
    strip.flush()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    chunks = engine_chunks(args.tokens)
    # interleaved rounds, the median of each: both see the same machine load
    b, s = [], []
    for _ in range(args.rounds):
        b.append(bridged(chunks))
        s.append(stripped(chunks))
    b_med, s_med = sorted(b)[len(b) // 2], sorted(s)[len(s) // 2]
    n = len(chunks)
    print(f"{n} engine chunks; bridge {b_med / n * 1e6:.1f} us/chunk, pass-through (Strip) "
          f"{s_med / n * 1e6:.1f} us/chunk, ratio {b_med / s_med:.2f}")


if __name__ == "__main__":
    main()
