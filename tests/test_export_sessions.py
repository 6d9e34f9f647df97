"""Sessions recorded for the export tests: each dialect driven by its official SDK through the
live recording proxy to the project's mock, written to a SQLite store with the Store API.

Each session is a small agent loop: a first call that asks for a tool (streamed), the tool's
output sent back in a second call that answers in text, plus a side call where the API has
one. The Anthropic session thinks in its last call (thinking + signature), the Gemini one in
both (thoughts + thoughtSignature), the Chat Completions one calls two tools in parallel.
`recorded_store(tmp_root)` records them once per test process; the tests here check the
recordings themselves, so an export test never blames an exporter for a bad fixture.
"""

from __future__ import annotations

import functools
import io
import time
from pathlib import Path

import anthropic
import httpx2
import openai
import orjson
from google import genai
from google.genai import types as genai_types

from forge_record.addons.proxy import InProcessProxy
from forge_record.addons.recorder import Recorder
from forge_record.exporters import Filters, Options, export
from forge_record.finalize import finalize
from forge_record.mock import TOOL_MARKER, MockUpstream
from forge_record.mock import anthropic as mock_anthropic
from forge_record.records import COMPLETE, Reasoning, Session, Text, ToolCall, ToolResult
from forge_record.store import default_store_url, open_store
from forge_record.trust import confdir

PROMPT = f"please run {TOOL_MARKER}"
SYSTEM = "You are a test agent. Use the tools."
TOOL_OUTPUT = f"{TOOL_MARKER}-output-42"
SIGNATURE = "c2lnbmVkLXRoaW5raW5n"
SESSIONS = {  # dialect -> (session id, harness)
    "anthropic.messages": ("a1a1a1a1a1a1a1a1", "claude-code"),
    "openai.chat": ("c2c2c2c2c2c2c2c2", "opencode"),
    "openai.responses": ("e3e3e3e3e3e3e3e3", "codex"),
    "gemini.generate": ("f4f4f4f4f4f4f4f4", "gemini-cli"),
}
ANTHROPIC_TOOLS = [{"name": "Bash", "description": "Run a command", "input_schema": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}]
OPENAI_TOOL = {"name": "exec_command", "description": "Run a shell command",
               "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}},
                              "required": ["cmd"]}}


class Arrivals(list):
    def wait(self, n: int, timeout: float = 10.0) -> list:
        deadline = time.monotonic() + timeout
        while len(self) < n and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(self) >= n, f"{len(self)} of {n} exchanges arrived"
        return [finalize(e) for e in self[:n]]


def thinking_script(request: dict) -> dict:
    """The mock's agent, thinking first when the request turns thinking on."""
    reply = mock_anthropic.agent_script(request)
    if (request.get("thinking") or {}).get("type") == "enabled":
        thought = {"type": "thinking", "thinking": "The tool ran; report it.",
                   "signature": SIGNATURE}
        reply = dict(reply, content=[thought, *reply["content"]])
    return reply


@functools.cache
def recorded_store(tmp_root: Path) -> str:
    """The store URL of the four recorded sessions (recorded once per process and root)."""
    url = default_store_url(tmp_root)
    if (tmp_root / "traces.db").exists():
        return url
    with MockUpstream(options={"anthropic_script": thinking_script}) as mock:
        arrivals = Arrivals()
        proxy = InProcessProxy(Recorder(arrivals.append, record_any_host=True),
                               mode=f"reverse:{mock.url}", confdir=confdir(tmp_root / "ca"))
        base = f"http://127.0.0.1:{proxy.start()}"
        try:
            runs = [(d, drive(d, base, mock)) for d in SESSIONS]
        finally:
            proxy.stop()
        exchanges = arrivals.wait(sum(n for _, n in runs))
    store = open_store(url)
    try:
        taken = 0
        for dialect, n in runs:
            session_id, harness = SESSIONS[dialect]
            mine = sorted(exchanges[taken: taken + n], key=lambda e: e.seq)
            taken += n
            store.add_session(Session(id=session_id, harness=harness, user="tester",
                                      started_at=mine[0].started_at, tags={"suite": "export"},
                                      argv=[harness, "-p", PROMPT]))
            for ex in mine:
                store.add_exchange(session_id, ex)
            store.end_session(session_id, mine[-1].ended_at + 0.5, 0)
    finally:
        store.close()
    return url


def drive(dialect: str, base: str, mock: MockUpstream) -> int:
    """Run one dialect's agent loop; the number of exchanges it made. Calls are sequential,
    so each session's exchanges arrive together and in order."""
    return {"anthropic.messages": _anthropic, "openai.chat": _openai_chat,
            "openai.responses": _openai_responses, "gemini.generate": _gemini}[dialect](base, mock)


def _anthropic(base: str, mock: MockUpstream) -> int:
    client = anthropic.Anthropic(api_key="sk-ant-dummy-key", base_url=base, max_retries=0)
    first = [{"role": "user", "content": PROMPT}]
    with client.messages.stream(model="claude-sonnet-4-5", max_tokens=1000, system=SYSTEM,
                                tools=ANTHROPIC_TOOLS, messages=first) as stream:
        reply = stream.get_final_message()
    client.messages.count_tokens(model="claude-sonnet-4-5", messages=first)
    call = reply.content[1]
    client.messages.create(
        model="claude-sonnet-4-5", max_tokens=2000, system=SYSTEM, tools=ANTHROPIC_TOOLS,
        thinking={"type": "enabled", "budget_tokens": 1024},
        messages=[*first, {"role": "assistant", "content": [b.model_dump() for b in reply.content]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                                "content": TOOL_OUTPUT}]}])
    return 3


def _openai_chat(base: str, mock: MockUpstream) -> int:
    client = openai.OpenAI(api_key="sk-proj-dummy-key", base_url=base + "/v1", max_retries=0)
    tools = [{"type": "function", "function": OPENAI_TOOL}]
    first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}]
    mock.options["openai_parallel_tools"] = True
    stream = client.chat.completions.create(model="gpt-4.1", messages=first, tools=tools,
                                            stream=True, stream_options={"include_usage": True})
    calls: dict[int, dict] = {}
    for chunk in stream:
        for choice in chunk.choices:
            for frag in choice.delta.tool_calls or ():
                c = calls.setdefault(frag.index, {"id": "", "name": "", "arguments": ""})
                c["id"] += frag.id or ""
                c["name"] += (frag.function and frag.function.name) or ""
                c["arguments"] += (frag.function and frag.function.arguments) or ""
    mock.options["openai_parallel_tools"] = False
    said = {"role": "assistant", "content": None, "tool_calls": [
        {"id": c["id"], "type": "function",
         "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls.values()]}
    results = [{"role": "tool", "tool_call_id": c["id"], "content": TOOL_OUTPUT}
               for c in calls.values()]
    client.chat.completions.create(model="gpt-4.1", messages=[*first, said, *results],
                                   tools=tools, parallel_tool_calls=True)
    return 2


def _openai_responses(base: str, mock: MockUpstream) -> int:
    client = openai.OpenAI(api_key="sk-proj-dummy-key", base_url=base + "/v1", max_retries=0)
    tools = [{"type": "function", "strict": False, **OPENAI_TOOL}]
    first = [{"type": "message", "role": "user", "content": PROMPT}]
    with client.responses.stream(model="gpt-5-codex", instructions=SYSTEM, input=first,
                                 tools=tools) as stream:
        reply = stream.get_final_response()
    call = next(i for i in reply.output if i.type == "function_call")
    said = [i.model_dump(exclude_none=True) for i in reply.output]
    client.responses.create(
        model="gpt-5-codex", instructions=SYSTEM, tools=tools,
        input=[*first, *said, {"type": "function_call_output", "call_id": call.call_id,
                               "output": TOOL_OUTPUT}])
    return 2


def _gemini(base: str, mock: MockUpstream) -> int:
    client = genai.Client(api_key="dummy-gemini-key", http_options=genai_types.HttpOptions(
        base_url=base, httpx_client=httpx2.Client()))
    config = genai_types.GenerateContentConfig(
        system_instruction=SYSTEM,
        tools=[genai_types.Tool(function_declarations=[genai_types.FunctionDeclaration(
            name="run_shell_command", description="Run a command",
            parameters_json_schema={"type": "object",
                                    "properties": {"command": {"type": "string"}}})])],
        thinking_config=genai_types.ThinkingConfig(include_thoughts=True),
        automatic_function_calling=genai_types.AutomaticFunctionCallingConfig(disable=True))
    first = genai_types.Content(role="user", parts=[genai_types.Part(text=PROMPT)])
    parts = merged([p for chunk in client.models.generate_content_stream(
        model="gemini-2.5-flash", contents=[first], config=config)
        for p in chunk.candidates[0].content.parts])
    client.models.count_tokens(model="gemini-2.5-flash", contents=[first])
    call = next(p.function_call for p in parts if p.function_call)
    answer = genai_types.Part(function_response=genai_types.FunctionResponse(
        name=call.name, response={"output": TOOL_OUTPUT}))
    client.models.generate_content(model="gemini-2.5-flash", config=config, contents=[
        first, genai_types.Content(role="model", parts=parts),
        genai_types.Content(role="user", parts=[answer])])
    return 3


def merged(parts: list) -> list:
    """Streamed parts as a client keeps them in its history: consecutive text pieces of one
    kind (thought or not) joined, each keeping the first piece's signature."""
    out: list = []
    for p in parts:
        prev = out[-1] if out else None
        if p.text is not None and prev is not None and prev.text is not None \
                and bool(p.thought) == bool(prev.thought) and not p.thought_signature:
            out[-1] = prev.model_copy(update={"text": prev.text + p.text})
        else:
            out.append(p)
    return out


# --- helpers for the export tests ----------------------------------------------------------


def export_lines(url: str, fmt: str, dialect: str | None = None, **options) -> tuple[list, object]:
    """(parsed lines, tally) of exporting the recorded store (one dialect's session, or all)."""
    filters = Filters(sessions=(SESSIONS[dialect][0],) if dialect else ())
    out = io.BytesIO()
    store = open_store(url)
    try:
        tally = export(store, fmt, out, filters, Options(**options))
    finally:
        store.close()
    return [orjson.loads(line) for line in out.getvalue().splitlines()], tally


def first_calls(url: str, dialect: str) -> list[ToolCall]:
    """The tool calls the session's first model call made."""
    store = open_store(url)
    try:
        first = next(store.iter_exchanges(SESSIONS[dialect][0]))
    finally:
        store.close()
    return [b for b in first.response.content if isinstance(b, ToolCall)]


# --- the recordings are what the tests assume ------------------------------------------------


def load(tmp_root: Path, dialect: str):
    store = open_store(recorded_store(tmp_root))
    try:
        return list(store.iter_exchanges(SESSIONS[dialect][0]))
    finally:
        store.close()


def test_every_dialect_recorded_a_tool_loop(tmp_path_factory):
    root = tmp_path_factory.getbasetemp() / "export-sessions"
    for dialect in SESSIONS:
        exchanges = load(root, dialect)
        model = [e for e in exchanges if e.kind == "model"]
        assert [e.dialect for e in model] == [dialect] * 2, dialect
        assert all(e.status == COMPLETE for e in exchanges), [e.flags for e in exchanges]
        first, last = model
        assert any(isinstance(b, ToolCall) for b in first.response.content), dialect
        assert any(isinstance(b, ToolResult) for m in last.request.messages for b in m.content)
        assert isinstance(last.response.content[-1], Text), dialect
        assert TOOL_OUTPUT in last.response.content[-1].text


def test_thinking_and_parallel_calls_were_recorded(tmp_path_factory):
    root = tmp_path_factory.getbasetemp() / "export-sessions"
    final = [e for e in load(root, "anthropic.messages") if e.kind == "model"][-1]
    assert final.response.content[0] == Reasoning(text="The tool ran; report it.",
                                                  signature=SIGNATURE)
    first = load(root, "openai.chat")[0]
    assert len([b for b in first.response.content if isinstance(b, ToolCall)]) == 2
    assert [e.kind for e in load(root, "gemini.generate")] == ["model", "side", "model"]
