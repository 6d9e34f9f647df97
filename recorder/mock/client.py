"""The demo's agent when no agent CLI is installed: a two-turn Messages API tool loop.

`python -m forge_record.mock.client` asks api.anthropic.com (through HTTPS_PROXY, trusting
SSL_CERT_FILE, as `forge-record run` sets them in forward mode) to run the demo command with
a Bash tool, streamed; runs the Bash call it gets back; sends the result; prints the answer.
It speaks through the official `anthropic` SDK when that is installed (it is not a runtime
dependency of forge-record), else (or with `--urllib`) through urllib with its own SSE
reading, so the demo needs nothing beyond forge-record. Only the mock's own command is run (`echo
forge-record-e2e-output-$((6*7))`); anything else gets "not run" as its result.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Iterator

from forge_record.mock import TOOL_MARKER

API = "https://api.anthropic.com"
MODEL = "claude-sonnet-4-5"
DUMMY_KEY = "sk-ant-demo-dummy-key-not-real"  # the mock takes any key; never a real one
BASH = {"name": "Bash", "description": "Run a shell command and return its output.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}},
                         "required": ["command"]}}
PROMPT = f"Run the {TOOL_MARKER} command"
OWN_COMMAND = f"echo {TOOL_MARKER}-output-$((6*7))"


def main(argv: list[str]) -> int:
    via = "anthropic SDK" if _have_sdk() and "--urllib" not in argv else "urllib"
    print(f"demo agent ({via}): {PROMPT}")
    send = _sdk_turn if via == "anthropic SDK" else _urllib_turn
    messages: list[dict] = [{"role": "user", "content": PROMPT}]
    for _ in range(4):  # the mock answers a tool result with text: two turns
        content = send(messages)
        messages.append({"role": "assistant", "content": content})
        calls = [b for b in content if b["type"] == "tool_use"]
        if not calls:
            print("".join(b.get("text", "") for b in content))
            return 0
        messages.append({"role": "user", "content": [_run_tool(c) for c in calls]})
    return 1


def _run_tool(call: dict) -> dict:
    command = call["input"].get("command", "")
    print(f"  → Bash {command}")
    if call["name"] == "Bash" and command == OWN_COMMAND:
        output = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True,
                                timeout=10).stdout
    else:
        output = "not run: the demo agent runs only the mock's own command"
    return {"type": "tool_result", "tool_use_id": call["id"], "content": output}


def _have_sdk() -> bool:
    try:
        import anthropic  # noqa: F401
    except ImportError:
        return False
    return True


def _sdk_turn(messages: list[dict]) -> list[dict]:
    import anthropic

    client = anthropic.Anthropic(api_key=os.environ.get("ANTHROPIC_API_KEY") or DUMMY_KEY,
                                 base_url=API, max_retries=0)
    with client.messages.stream(model=MODEL, max_tokens=1024, tools=[BASH],
                                messages=messages) as stream:
        final = stream.get_final_message()
    return [block.model_dump(exclude_none=True) for block in final.content]


def _urllib_turn(messages: list[dict]) -> list[dict]:
    body = json.dumps({"model": MODEL, "max_tokens": 1024, "stream": True, "tools": [BASH],
                       "messages": messages}).encode()
    request = urllib.request.Request(f"{API}/v1/messages", data=body, method="POST", headers={
        "content-type": "application/json", "anthropic-version": "2023-06-01",
        "x-api-key": os.environ.get("ANTHROPIC_API_KEY") or DUMMY_KEY})
    # The default opener reads HTTPS_PROXY; the default context reads SSL_CERT_FILE.
    opener = urllib.request.build_opener(
        urllib.request.HTTPSHandler(context=ssl.create_default_context()))
    with opener.open(request, timeout=60) as response:
        return _assemble(_sse_data(response))


def _sse_data(lines) -> Iterator[dict]:
    """The JSON of each SSE event's data (one data line per event, as the API sends)."""
    for raw in lines:
        line = raw.decode().rstrip("\r\n")
        if line.startswith("data:"):
            yield json.loads(line[5:].strip())


def _assemble(events: Iterator[dict]) -> list[dict]:
    """Content blocks from a Messages stream: text deltas joined, tool input JSON parsed
    once its fragments are all there."""
    blocks: dict[int, dict] = {}
    partial: dict[int, str] = {}
    for event in events:
        kind = event.get("type")
        if kind == "content_block_start":
            blocks[event["index"]] = dict(event["content_block"])
            partial[event["index"]] = ""
        elif kind == "content_block_delta":
            delta, i = event["delta"], event["index"]
            if delta["type"] == "text_delta":
                blocks[i]["text"] = blocks[i].get("text", "") + delta["text"]
            elif delta["type"] == "input_json_delta":
                partial[i] += delta["partial_json"]
        elif kind == "content_block_stop" and blocks[event["index"]]["type"] == "tool_use":
            blocks[event["index"]]["input"] = json.loads(partial[event["index"]] or "{}")
        elif kind == "error":
            raise RuntimeError(event["error"].get("message", "error event"))
    return [blocks[i] for i in sorted(blocks)]


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Exception as e:  # noqa: BLE001 - one line for the person watching, not a traceback
        first = next((line.strip() for line in str(e).splitlines() if line.strip()), "")
        print(f"demo agent: {type(e).__name__}: {first[:200]}", file=sys.stderr)
        sys.exit(1)
