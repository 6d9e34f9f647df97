"""One real conversation is one thread, whatever a client re-encodes when it sends the history
back (issue 18.1): tool-call arguments re-serialized by a Python client, the ids Gemini CLI
makes up for calls the Gemini API sent without one, thought text blanked on re-send and
signature parts added or moved. A thread still forks where the history really diverged.

The wire bytes come from the mock (which answers like the real APIs: no Gemini `functionCall`
id) and from clients that resend history the way the real ones do: the official `openai` SDK
with arguments passed through `json.dumps` (litellm, simonw's llm, mini-swe-agent), and
Gemini CLI 0.61's history rules (its own call ids, `skip_thought_signature_validator` on the
first call of the active loop, thought parts emptied).
"""

from __future__ import annotations

import json
import time

import openai
import orjson
import pytest

from forge_record.addons.proxy import InProcessProxy
from forge_record.addons.recorder import Recorder
from forge_record.decoders import dialect_named
from forge_record.finalize import finalize
from forge_record.lineage import analyze
from forge_record.lineage.signals import message_hash
from forge_record.mock import TOOL_MARKER, MockUpstream
from forge_record.mock import gemini as gemini_mock
from forge_record.records import (
    COMPLETE,
    Exchange,
    Message,
    Reasoning,
    Text,
    ToolCall,
    ToolResult,
)
from forge_record.trust import confdir

MODEL = "gemini-2.5-flash"
GEMINI_UA = "GeminiCLI/0.61.0/gemini-2.5-flash (linux; x64)"
SYNTHETIC_SIGNATURE = "skip_thought_signature_validator"  # Gemini CLI's own
SHELL = {"functionDeclarations": [{"name": "run_shell_command", "description": "Run a command",
                                   "parametersJsonSchema": {
                                       "type": "object",
                                       "properties": {"command": {"type": "string"}}}}]}


def placed(lineage) -> dict[int, tuple]:
    return {s: (c.thread, c.role, c.parent) for s, c in lineage.calls.items()}


# --- identity of one message -------------------------------------------------------------


def test_reserialized_arguments_and_ids_are_the_same_turn():
    sent = Message(role="assistant", content=[
        Text(text="Running it."),
        ToolCall(id="run_shell_command", name="run_shell_command",
                 arguments={"command": "ls", "dir": "."},
                 arguments_raw='{"command":"ls","dir":"."}')])
    resent = Message(role="assistant", content=[
        Text(text="Running it."),
        ToolCall(id="run_shell_command-1764612345678-3f2a", name="run_shell_command",
                 arguments={"dir": ".", "command": "ls"},
                 arguments_raw='{"dir": ".", "command": "ls"}')])
    assert message_hash(sent) == message_hash(resent)


def test_a_default_the_harness_fills_in_is_the_same_turn():
    """Claude Code 2.1.197 sends an Edit call back with `"replace_all": false` first, which
    the model did not write (seen with the real CLI: tests/test_claude_code_store.py)."""
    edit = {"file_path": "a.py", "old_string": "x = 1", "new_string": "x = 2"}
    sent = Message(role="assistant", content=[ToolCall(id="t", name="Edit", arguments=edit)])
    resent = Message(role="assistant", content=[
        ToolCall(id="t", name="Edit", arguments={"replace_all": False, **edit})])
    assert message_hash(sent) == message_hash(resent)
    for value in (True, 0, "", "false"):  # a value the model could have chosen still counts
        other = Message(role="assistant", content=[
            ToolCall(id="t", name="Edit", arguments={"replace_all": value, **edit})])
        assert message_hash(sent) != message_hash(other), value


def test_blanked_thoughts_and_signature_parts_are_the_same_turn():
    sent = Message(role="assistant", content=[
        Reasoning(text="The user wants me to act.", signature="c2ln"), Text(text="Done.")])
    resent = Message(role="assistant", content=[
        Reasoning(text=""), Reasoning(signature=SYNTHETIC_SIGNATURE), Text(text="Done.")])
    assert message_hash(sent) == message_hash(resent)


def test_what_the_model_saw_still_tells_turns_apart():
    base = Message(role="assistant", content=[
        ToolCall(id="a", name="run", arguments={"command": "ls"})])
    for other in (ToolCall(id="a", name="run", arguments={"command": "pwd"}),
                  ToolCall(id="a", name="exec", arguments={"command": "ls"})):
        assert message_hash(base) != message_hash(Message(role="assistant", content=[other]))
    ok = Message(role="user", content=[ToolResult(tool_call_id="a", content=[Text(text="x")])])
    failed = Message(role="user", content=[
        ToolResult(tool_call_id="a", content=[Text(text="x")], is_error=True)])
    assert message_hash(ok) != message_hash(failed)


# --- Gemini CLI over the Gemini API --------------------------------------------------------


def gemini_exchange(seq: int, request: dict) -> Exchange:
    """One streamGenerateContent call answered by the mock, decoded as the recorder does."""
    dialect = dialect_named("gemini.generate")
    body = orjson.dumps(request)
    decoder = dialect.response_decoder("text/event-stream")
    for chunk in gemini_mock.sse(gemini_mock.chunks(request, body, MODEL,
                                                    gemini_mock.agent_script)):
        decoder.feed(chunk)
    return Exchange(
        seq=seq, dialect="gemini.generate", status=COMPLETE, http_status=200,
        url=f"https://generativelanguage.googleapis.com/v1beta/models/{MODEL}"
            ":streamGenerateContent?alt=sse",
        request=dialect.parse_request(body), response=decoder.finish(),
        request_headers={"user-agent": GEMINI_UA})


def as_gemini_cli_resends(parts: list[dict], call_id: str) -> list[dict]:
    """A model turn as Gemini CLI puts it back into the history: thought text emptied, its
    own id on the call, the synthetic signature on the first call of the active loop."""
    out = []
    for part in parts:
        part = dict(part)
        if part.get("thought"):
            part["text"] = ""
        if "functionCall" in part:
            part["functionCall"] = dict(part["functionCall"], id=call_id)
            part.setdefault("thoughtSignature", SYNTHETIC_SIGNATURE)
        out.append(part)
    return out


def model_parts(request: dict) -> list[dict]:
    chunks = gemini_mock.chunks(request, orjson.dumps(request), MODEL, gemini_mock.agent_script)
    return [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]


def test_the_gemini_mock_sends_no_function_call_id():
    request = {"contents": [{"role": "user", "parts": [{"text": f"run {TOOL_MARKER}"}]}],
               "tools": [SHELL]}
    [call] = [p["functionCall"] for p in model_parts(request) if "functionCall" in p]
    assert "id" not in call  # as the real Gemini API


def test_a_gemini_cli_tool_round_trip_is_one_thread():
    config = {"thinkingConfig": {"includeThoughts": True}}
    user = {"role": "user", "parts": [{"text": "<session context>"},
                                      {"text": f"Run the {TOOL_MARKER} command"}]}
    first = {"contents": [user], "tools": [SHELL], "generationConfig": config}
    parts = model_parts(first)
    call_id = "run_shell_command-1764612345678-3f2a1b"
    [call] = [p["functionCall"] for p in parts if "functionCall" in p]
    result = {"role": "user", "parts": [{"functionResponse": {
        "id": call_id, "name": call["name"], "response": {"output": f"{TOOL_MARKER}-output-42"}}}]}
    second = {"contents": [user, {"role": "model", "parts": as_gemini_cli_resends(parts, call_id)},
                           result], "tools": [SHELL], "generationConfig": config}
    later = {"contents": [*second["contents"],
                          {"role": "model", "parts": model_parts(second)},
                          {"role": "user", "parts": [{"text": "thanks"}]}],
             "tools": [SHELL], "generationConfig": config}
    exchanges = [gemini_exchange(1, first), gemini_exchange(2, second), gemini_exchange(3, later)]
    lineage = analyze(exchanges)
    assert placed(lineage) == {1: ("main", "main", None), 2: ("main", "main", 1),
                               3: ("main", "main", 2)}
    assert [t.id for t in lineage.threads] == ["main"]


def test_a_real_divergence_still_forks():
    user = {"role": "user", "parts": [{"text": f"Run the {TOOL_MARKER} command"}]}
    first = {"contents": [user], "tools": [SHELL]}
    parts = model_parts(first)
    answers = []
    for output in ("one", "two"):  # the same call answered twice, differently
        answers.append({"contents": [user, {"role": "model", "parts": parts},
                                     {"role": "user", "parts": [{"functionResponse": {
                                         "name": "run_shell_command",
                                         "response": {"output": output}}}]}],
                        "tools": [SHELL]})
    lineage = analyze([gemini_exchange(1, first), gemini_exchange(2, answers[0]),
                       gemini_exchange(3, answers[1])])
    assert placed(lineage)[2] == ("main", "main", 1)
    assert placed(lineage)[3] == ("main-2", "main", 1)


# --- a Python client that re-serializes arguments --------------------------------------------


class Arrivals(list):
    def wait(self, n: int, timeout: float = 5.0) -> list:
        deadline = time.monotonic() + timeout
        while len(self) < n and time.monotonic() < deadline:
            time.sleep(0.01)
        return list(self)


TOOLS = [{"type": "function", "function": {
    "name": "bash", "description": "Run a shell command",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                   "required": ["command"]}}}]


def reserializing_agent(client: openai.OpenAI, prompt: str) -> str:
    """A tool loop the way litellm and llm write it: the model's arguments are parsed and
    sent back through json.dumps (`{"command": "x"}`, a space after the colon)."""
    messages: list[dict] = [{"role": "user", "content": prompt}]
    for _ in range(4):
        reply = client.chat.completions.create(model="gpt-4o", messages=messages, tools=TOOLS)
        message = reply.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        messages.append({"role": "assistant", "content": message.content, "tool_calls": [
            {"id": c.id, "type": "function", "function": {
                "name": c.function.name,
                "arguments": json.dumps(json.loads(c.function.arguments))}}
            for c in message.tool_calls]})
        for c in message.tool_calls:
            messages.append({"role": "tool", "tool_call_id": c.id,
                             "content": f"{TOOL_MARKER}-output-42"})
    raise AssertionError("the agent did not finish")


def test_a_client_that_reserializes_arguments_stays_in_one_thread(tmp_path):
    exchanges = Arrivals()
    with MockUpstream() as mock:
        addon = Recorder(exchanges.append, upstreams={"api.openai.com": mock.url},
                         record_any_host=True)
        proxy = InProcessProxy(addon, mode="reverse:https://api.openai.com",
                               confdir=confdir(tmp_path))
        port = proxy.start()
        client = openai.OpenAI(api_key="sk-proj-dummy-key-for-tests", max_retries=0,
                               base_url=f"http://127.0.0.1:{port}/v1")
        try:
            answer = reserializing_agent(client, f"please run {TOOL_MARKER}")
        finally:
            client.close()
            proxy.stop()
    assert answer.startswith("The command printed")
    records = sorted((finalize(e) for e in exchanges.wait(2)), key=lambda e: e.seq)
    raw_args = [b.arguments_raw for m in records[1].request.messages for b in m.content
                if isinstance(b, ToolCall)]
    assert raw_args and all('": "' in a for a in raw_args)  # really re-serialized
    lineage = analyze(records)
    assert [t.id for t in lineage.threads] == ["main"]
    assert lineage.calls[records[1].seq].parent == records[0].seq


@pytest.mark.parametrize("blank", [True, False])
def test_anthropic_thinking_resent_or_blanked_continues(blank):
    """Claude Code resends thinking verbatim; a client that blanks it continues the same."""
    from lineage_sessions import bash, call, result, said, user
    thinking = Reasoning(text="I should list files.", signature="sig==")
    r1 = said(thinking, bash())
    resent = said(Reasoning(text="", signature="sig==") if blank else thinking, bash())
    lineage = analyze([call(1, [user("ls please")], r1),
                       call(2, [user("ls please"), resent, result("toolu_bash", "a.py")],
                            said(Text(text="a.py")))])
    assert lineage.calls[2].parent == 1 and lineage.calls[2].thread == "main"
