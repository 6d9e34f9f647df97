"""Capture real vLLM responses as test data (tests/data/vllm/), from a running server:

    python scripts/capture_vllm.py http://127.0.0.1:PORT

The server is scripts/install-engine's vLLM serving scripts/tiny_model.py's model as "tiny"
(docs/ENGINES.md has the command). Each case writes NAME.request.json, the response body
as NAME.sse or NAME.json, and for chat cases the engine's /tokenize of the same messages
(NAME.tokenize.json), which the prompt ids must equal.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "vllm"
TOOLS = [{"type": "function", "function": {
    "name": "run_shell", "description": "Run a shell command",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                   "required": ["command"]}}}]
MESSAGES = [{"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "List the files here."}]
TOOL_ROUND = [*MESSAGES,
              {"role": "assistant", "content": None, "tool_calls": [{
                  "id": "call_1", "type": "function",
                  "function": {"name": "run_shell", "arguments": '{"command": "ls"}'}}]},
              {"role": "tool", "tool_call_id": "call_1", "content": "README.md\nsetup.cfg"}]
ASK = {"return_token_ids": True, "logprobs": True, "top_logprobs": 2}
CASES = {
    "chat_stream_text": {"messages": MESSAGES, "stream": True, "max_tokens": 12, **ASK},
    "chat_stream_tool": {"messages": MESSAGES, "tools": TOOLS, "tool_choice": "required",
                         "stream": True, "max_tokens": 40, **ASK},
    "chat_json_text": {"messages": TOOL_ROUND, "tools": TOOLS, "max_tokens": 12, **ASK},
    "chat_json_tool": {"messages": MESSAGES, "tools": TOOLS, "tool_choice": "required",
                       "max_tokens": 40, **ASK},
    "chat_stream_plain": {"messages": MESSAGES, "stream": True, "max_tokens": 8},
}
# The same call with and without the token fields asked for (same seed, so the same samples):
# what the gateway hands an agent that asked for none must be the plain answer.
PAIRS = {
    "pair_stream": {"messages": MESSAGES, "stream": True, "max_tokens": 10},
    "pair_stream_tool": {"messages": MESSAGES, "tools": TOOLS, "tool_choice": "required",
                         "stream": True, "max_tokens": 24},
    "pair_json": {"messages": TOOL_ROUND, "tools": TOOLS, "max_tokens": 10},
}
for _name, _case in PAIRS.items():
    CASES[f"{_name}_asked"] = {**_case, **ASK}
    CASES[f"{_name}_plain"] = _case


def post(base: str, path: str, body: dict) -> bytes:
    request = urllib.request.Request(base + path, json.dumps(body).encode(),
                                     {"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        return response.read()


def main(base: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, case in CASES.items():
        body = {"model": "tiny", "temperature": 1.0, "seed": 7, **case}
        (OUT / f"{name}.request.json").write_text(json.dumps(body, indent=1) + "\n")
        answer = post(base, "/v1/chat/completions", body)
        (OUT / f"{name}.{'sse' if case.get('stream') else 'json'}").write_bytes(answer)
        render = {"model": "tiny", "messages": body["messages"], "add_generation_prompt": True}
        if "tools" in body:
            render["tools"] = body["tools"]
        (OUT / f"{name}.tokenize.json").write_bytes(post(base, "/tokenize", render))
        print(name, len(answer), "bytes")


if __name__ == "__main__":
    main(sys.argv[1].rstrip("/"))
