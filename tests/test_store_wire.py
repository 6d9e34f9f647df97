"""store.wire: raw requests compressed against their blobs rendered in the wire form.

A rendering is a zstd dictionary that the reader must rebuild byte for byte, so each is
pinned here: if one of these tests fails, frames already stored would no longer decode.
Sessions stored with rendered frames (Anthropic's b"W", Gemini's b"G"), and with the plain
ones stores wrote before, read back byte for byte on SQLite and Postgres.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from functools import partial

import orjson
import pytest
import sqlalchemy as sa
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from support import (
    chat_exchanges,
    gemini_exchanges,
    make_session,
    realistic_exchanges,
    responses_exchanges,
)

from forge_record.decoders.gemini import GENERATE
from forge_record.decoders.openai_chat import DIALECT as CHAT
from forge_record.decoders.openai_responses import DIALECT as RESPONSES
from forge_record.identity import canonical_json
from forge_record.store import content, delta, wire

SYSTEM = canonical_json([{"type": "text", "text": "You are Claude Code."}])
TOOLS = canonical_json([{"name": "Read", "description": "Read a file", "kind": "function",
                         "parameters": {"type": "object", "required": ["file_path"]}}])
PARAMETERS = canonical_json({"max_tokens": 32000, "stream": True})
MESSAGES = [canonical_json(m) for m in (
    {"role": "user", "content": [{"type": "text", "text": "read a.py"}]},
    {"role": "assistant", "content": [
        {"type": "reasoning", "text": "Let me look.", "signature": "c2ln"},
        {"type": "tool_call", "id": "toolu_1", "name": "Read",
         "arguments": {"file_path": "a.py"}, "arguments_raw": '{"file_path":"a.py"}'}]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_call_id": "toolu_1", "content": [
            {"type": "text", "text": "x = 1\n"}]},
        {"type": "tool_result", "tool_call_id": "toolu_2", "is_error": True, "content": [
            {"type": "text", "text": "a"}, {"type": "image", "media_type": "image/png",
                                            "sha256": "00"}]},
        {"type": "tool_call", "id": "t", "name": "n", "arguments": None, "arguments_raw": ""},
        {"type": "server_thing", "b": 2, "a": 1}, "not a block"]},
    ["not a message"],
)]


def test_a_message_renders_as_claude_code_writes_it():
    assert wire.render(b"W", [], MESSAGES[1:2]) == (
        b'{"role":"assistant","content":[{"type":"thinking","thinking":"Let me look.",'
        b'"signature":"c2ln"},{"type":"tool_use","id":"toolu_1","name":"Read",'
        b'"input":{"file_path":"a.py"}}]}')


def test_the_rendering_is_frozen():
    """Frames stored today are compressed against exactly these bytes."""
    keyframe = wire.render(b"W", [SYSTEM, TOOLS, PARAMETERS], MESSAGES)
    assert keyframe.startswith(b'{"messages":[{"role":"user","content":[{"type":"text",')
    assert keyframe.endswith(b'"tools":[{"name":"Read","description":"Read a file",'
                             b'"input_schema":{"required":["file_path"],"type":"object"}}],'
                             b'"max_tokens":32000,"stream":true}')
    assert hashlib.sha256(keyframe).hexdigest() == RENDERED_SHA256
    assert hashlib.sha256(wire.render(b"W", [], MESSAGES)).hexdigest() == APPENDED_SHA256


RENDERED_SHA256 = "6f1dd883a891d8f724166703c200f02e809ce19d486c13de18371b7afcde9f8d"
APPENDED_SHA256 = "11e34bd685e652d103abbeb5a3c6527b251e11392ead318e0ecf9e0e789c4150"


def test_a_rendered_keyframe_against_another_rendering_is_refused():
    body = b'{"messages":[{"role":"user","content":[{"type":"text","text":"read a.py"}]}]}'
    hint = wire.render(b"W", [SYSTEM, TOOLS, PARAMETERS], MESSAGES[:1])
    frame = delta.encode(body, None, hint, mark=b"W")
    assert frame[:2] == b"WK" and delta.decode(frame, None, hint) == body
    with pytest.raises(zstandard.ZstdError):
        delta.decode(frame, None, hint.replace(b"read a.py", b"read b.py"))


def frames(store_url: str, session: str = "s") -> list[bytes]:
    engine = sa.create_engine(store_url)
    try:
        with engine.connect() as conn:
            return conn.scalars(sa.text("SELECT raw_request FROM exchanges "
                                        "WHERE session_id = :s ORDER BY seq"), {"s": session}).all()
    finally:
        engine.dispose()


@pytest.mark.parametrize("rendered", [True, False], ids=["rendered", "plain, as before"])
def test_sessions_read_back_byte_for_byte(store, store_url, monkeypatch, rendered):
    """Anthropic requests are stored rendered; frames stored plain (before store.wire, or of
    another dialect) read back as well, and a session may hold both."""
    sent = realistic_exchanges(40)
    if not rendered:
        monkeypatch.setattr(wire, "MARKS", {})
    store.add_session(make_session("s"))
    for ex in sent[:30]:
        store.add_exchange("s", ex)
    monkeypatch.setattr(wire, "MARKS", {"anthropic.messages": b"W"})
    for ex in sent[30:]:
        store.add_exchange("s", ex)
    marks = [f[:1] for f in frames(store_url)]
    assert marks[30:] == [b"W"] * 10
    assert set(marks[:30]) == ({b"W"} if rendered else {b"K", b"D"})
    assert list(store.iter_exchanges("s", raw=True)) == sent
    for seq in (1, 17, 33, 40):
        assert store.get_exchange("s", seq, raw=True) == sent[seq - 1]


def test_other_dialects_keep_the_plain_hint(store, store_url):
    sent = [dataclasses.replace(ex, dialect="openai.completions") for ex in realistic_exchanges(8)]
    store.add_session(make_session("s"))
    for ex in sent:
        store.add_exchange("s", ex)
    assert {f[:1] for f in frames(store_url)} == {b"K", b"D"}
    assert list(store.iter_exchanges("s", raw=True)) == sent


# --- b"G": Gemini ------------------------------------------------------------------------

# Two turns as Gemini CLI 0.61 writes them (bench/gemini_session.py): a thoughtSignature on
# the parts after the hidden thinking, call ids of the CLI's making, a tool's output as an
# object; then a call as the API itself would write it back, with no id.
GEMINI_BODY = (
    b'{"contents":[{"parts":[{"text":"<session_context>\\nlinux\\n</session_context>"},'
    b'{"text":"Review the store code."}],"role":"user"},'
    b'{"parts":[{"text":"Let me look.","thoughtSignature":"U4wYsH9M="},{"functionCall":'
    b'{"id":"run_shell_command_1796439362840_0","args":{"command":"sed -n \'1,3p\' a.py"},'
    b'"name":"run_shell_command"},"thoughtSignature":"skip_thought_signature_validator"}],'
    b'"role":"model"},{"parts":[{"functionResponse":{"name":"run_shell_command","response":'
    b'{"output":"\\"\\"\\"A docstring.\\"\\"\\"\\n\\nx = {\\"a\\": 1}"},'
    b'"id":"run_shell_command_1796439362840_0"}}],"role":"user"},'
    b'{"parts":[{"functionCall":{"args":{"path":"b.py"},"name":"read_file"}}],"role":"model"},'
    b'{"parts":[{"functionResponse":{"name":"read_file","response":{"content":"y"}}}],'
    b'"role":"user"}],'
    b'"systemInstruction":{"parts":[{"text":"You are a CLI agent."}],"role":"user"},'
    b'"tools":[{"functionDeclarations":[{"name":"read_file","description":"Reads a file.",'
    b'"parametersJsonSchema":{"type":"object","required":["path"]}}]}],'
    b'"generationConfig":{"temperature":1}}')


def blobs_of(body: bytes, dialect=GENERATE) -> tuple[list[bytes], list[bytes]]:
    request = dialect.parse_request(body)
    return ([content.system_blob(request), content.tools_blob(request.tools),
             content.parameters_blob(request.parameters)],
            [content.message_blob(m) for m in request.messages])


def test_gemini_messages_render_as_gemini_cli_writes_them():
    """Every message renders to its body's very bytes, and so does the whole request but
    for the keys the tools blob sorts."""
    parts, messages = blobs_of(GEMINI_BODY)
    contents = b",".join(orjson.dumps(c) for c in orjson.loads(GEMINI_BODY)["contents"])
    assert wire.render(b"G", [], messages) == contents
    assert wire.render(b"G", parts, messages) == GEMINI_BODY.replace(
        b'{"type":"object","required":["path"]}', b'{"required":["path"],"type":"object"}')


GEMINI_MESSAGES = [canonical_json(m) for m in (
    {"role": "assistant", "content": [
        {"type": "reasoning", "text": "Thinking out loud.", "signature": "c2ln"},
        {"type": "reasoning", "text": "More.", "signature": None},
        {"type": "reasoning", "text": "", "signature": "dangling"}]},
    {"role": "tool", "content": [
        {"type": "tool_result", "tool_call_id": "glob#2", "name": "glob", "is_error": True,
         "content": [{"type": "text", "text": '{"error":"no"}'},
                     {"type": "image", "media_type": "image/png", "sha256": "00"}]},
        {"type": "tool_result", "tool_call_id": "x", "content": []},
        {"type": "tool_call", "id": "t", "name": "n", "arguments": None, "arguments_raw": ""},
        {"type": "other", "data": {"executableCode": {"code": "1"}}},
        {"type": "server_thing", "b": 2, "a": 1}, "not a block"]},
    ["not a message"],
)]


def test_the_gemini_rendering_is_frozen():
    """Frames stored today are compressed against exactly these bytes."""
    parts, messages = blobs_of(GEMINI_BODY)
    keyframe = wire.render(b"G", parts, messages + GEMINI_MESSAGES)
    appended = wire.render(b"G", [], GEMINI_MESSAGES)
    assert appended.startswith(b'{"parts":[{"text":"Thinking out loud.","thought":true,'
                               b'"thoughtSignature":"c2ln"},{"text":"More.","thought":true},'
                               b'{"thoughtSignature":"dangling"}],"role":"model"}')
    assert hashlib.sha256(keyframe).hexdigest() == GEMINI_RENDERED_SHA256
    assert hashlib.sha256(appended).hexdigest() == GEMINI_APPENDED_SHA256


GEMINI_RENDERED_SHA256 = "f0030a7e749d90ba635991002f10a619dd9023b7b6745c3ff579fd8bd4a127b4"
GEMINI_APPENDED_SHA256 = "b8dafe9c6f6f653aab27bfa26448bce5c4b59fde1754befff927c53c2415d190"


def test_a_frame_of_a_rendering_this_version_does_not_know_is_refused():
    with pytest.raises(ValueError, match="rendered as b'Z', which this forge-record does not"):
        wire.render(b"Z", [], GEMINI_MESSAGES)


# --- b"C": OpenAI Chat Completions ------------------------------------------------------

# A conversation as Qwen Code 0.24 writes it (bench/qwen_session.py): every content a list of
# text parts, `content: null` beside tool calls; and as the OpenAI SDK's users write it,
# contents as strings.
def chat_body(parts: bool) -> bytes:
    def content(text: str):
        return [{"type": "text", "text": text}] if parts else text

    call = "call_c8a70639eb1167b367a9c378"
    return orjson.dumps({"model": "qwen3-coder-plus", "messages": [
        {"role": "system", "content": content("You are Qwen Code.")},
        {"role": "user", "content": content("Review the store code.")},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": call, "type": "function", "function": {
                "name": "run_shell_command", "arguments": '{"command":"sed -n 1,3p a.py"}'}}]},
        {"role": "tool", "tool_call_id": call,
         "content": content('Output: """A docstring."""\nx = 1')},
        {"role": "assistant", "content": content("Done."), "reasoning_content": "It printed."},
    ], "tools": [{"type": "function", "function": {
        "name": "run_shell_command", "description": "Runs a command.",
        "parameters": {"properties": {}, "type": "object"}}}],
        "max_tokens": 32768, "stream": True})


CHAT_BODY, CHAT_BODY_STRINGS = chat_body(True), chat_body(False)


@pytest.mark.parametrize("body", [CHAT_BODY, CHAT_BODY_STRINGS], ids=["parts", "strings"])
def test_chat_messages_render_as_clients_write_them(body):
    parts, messages = blobs_of(body, CHAT)
    request = orjson.loads(body)
    rendered = wire.render(b"C", [], messages)
    for message in request["messages"][1:]:
        assert orjson.dumps(message) in rendered
    keyframe = wire.render(b"C", parts, messages)
    assert orjson.dumps(request["messages"][0]) in keyframe
    assert b'"tools":' + orjson.dumps(request["tools"]) + b',"max_tokens":32768}' in keyframe


CHAT_MESSAGES = [canonical_json(m) for m in (
    {"role": "assistant", "content": [
        {"type": "reasoning", "text": "Hm.", "signature": None},
        {"type": "text", "text": "Two calls."},
        {"type": "image", "media_type": "image/png", "sha256": "00"},
        {"type": "tool_call", "id": "a", "name": "n", "arguments": {"x": 1}, "arguments_raw": None},
        {"type": "tool_call", "id": "b", "name": "n", "arguments": None, "arguments_raw": "{"}]},
    {"role": "tool", "content": [
        {"type": "tool_result", "tool_call_id": "a", "content": []}, "not a block"]},
    {"role": "user", "content": "not a list"},
    ["not a message"],
)]


def test_the_chat_rendering_is_frozen():
    """Frames stored today are compressed against exactly these bytes."""
    parts, messages = blobs_of(CHAT_BODY, CHAT)
    tools = canonical_json([{"name": "web", "kind": "web_search", "parameters": None},
                            "not a tool"])
    keyframe = wire.render(b"C", [parts[0], tools, parts[2]], messages + CHAT_MESSAGES)
    appended = wire.render(b"C", [], CHAT_MESSAGES)
    assert appended.startswith(b'{"role":"assistant","content":[{"type":"text","text":'
                               b'"Two calls."},{"media_type":"image/png","sha256":"00",'
                               b'"type":"image"}],"reasoning_content":"Hm.","tool_calls":[')
    assert hashlib.sha256(keyframe).hexdigest() == CHAT_RENDERED_SHA256
    assert hashlib.sha256(appended).hexdigest() == CHAT_APPENDED_SHA256


CHAT_RENDERED_SHA256 = "f805824b0a2f151113c8a6f66181e3c63d3da351a87753825b6316d74590ebba"
CHAT_APPENDED_SHA256 = "104201ba11bc856e62a25b3930d35f8a47298d42b0c43a8fcb0969e0442172ca"


# --- b"R": OpenAI Responses --------------------------------------------------------------

# Items as Codex 0.171 resends them over HTTP (bench/codex_session.py --http): ids of the
# API's and its own making, which the record does not keep.
RESPONSES_BODY = orjson.dumps({"input": [
    {"type": "message", "id": "msg_01a24434-9f90", "role": "user",
     "content": [{"type": "input_text", "text": "Review the store code."}]},
    {"type": "message", "status": "completed", "id": "msg_883af043f8a0", "role": "assistant",
     "content": [{"type": "output_text", "text": "Let me look.", "annotations": [],
                  "logprobs": []}]},
    {"type": "function_call", "status": "completed", "id": "fc_c8a70639eb11", "name":
     "exec_command", "arguments": '{"cmd":"sed -n 1,3p a.py"}', "call_id": "call_c8a70639"},
    {"type": "function_call_output", "id": "fco_01a24434-9fe6", "call_id": "call_c8a70639",
     "output": 'Output:\n"""A docstring."""'},
], "tools": [{"type": "function", "name": "exec_command", "description": "Runs a command.",
              "strict": False, "parameters": {"properties": {}, "type": "object"}},
             {"type": "web_search", "external_web_access": True}],
    "store": False})


def test_responses_items_render_as_codex_writes_them_but_for_their_ids():
    parts, messages = blobs_of(RESPONSES_BODY, RESPONSES)
    without_ids = re.sub(rb'"id":"[^"]*"', b'"id":""', RESPONSES_BODY)
    assert wire.render(b"R", parts, messages) == without_ids


RESPONSES_MESSAGES = [canonical_json(m) for m in (
    {"role": "assistant", "content": [
        {"type": "reasoning", "text": "Hm.", "encrypted": "gAAA"},
        {"type": "reasoning", "text": "", "encrypted": None},
        {"type": "tool_call", "id": "call_1", "name": "apply_patch", "arguments": None,
         "arguments_raw": "*** Begin Patch"},
        {"type": "tool_call", "id": "ws_1", "name": "web_search", "arguments": {"q": 1},
         "arguments_raw": '{"q":1}', "server": True},
        {"type": "other", "data": {"type": "compaction", "encrypted_content": "x"}}, 7]},
    {"role": "tool", "content": [
        {"type": "tool_result", "tool_call_id": "call_1", "content": [
            {"type": "text", "text": "a"}, {"type": "image", "sha256": "00"}]}, "not a block"]},
    {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
    ["not a message"],
)]


def test_the_responses_rendering_is_frozen():
    """Frames stored today are compressed against exactly these bytes."""
    parts, messages = blobs_of(RESPONSES_BODY, RESPONSES)
    system = canonical_json([{"type": "text", "text": "Instructions."},
                             {"type": "text", "text": "More."}])
    tools = canonical_json([{"name": "apply_patch", "kind": "custom", "description": "Patch.",
                             "parameters": {"type": "grammar"}}, "not a tool"])
    keyframe = wire.render(b"R", [system, tools, parts[2]], messages + RESPONSES_MESSAGES)
    appended = wire.render(b"R", [], RESPONSES_MESSAGES)
    assert appended.startswith(b'{"type":"reasoning","id":"","summary":[{"type":"summary_text",'
                               b'"text":"Hm."}],"encrypted_content":"gAAA"},')
    assert keyframe.startswith(b'{"instructions":[{"type":"input_text","text":"Instructions."},')
    assert hashlib.sha256(keyframe).hexdigest() == RESPONSES_RENDERED_SHA256
    assert hashlib.sha256(appended).hexdigest() == RESPONSES_APPENDED_SHA256


RESPONSES_RENDERED_SHA256 = "166354dd3704b466c328c2ebcaefc2cc3b18054509ac2a0eac22f0aa93d2ac80"
RESPONSES_APPENDED_SHA256 = "70b97729a964f3662d5366af90f81e9a883aeacf64d0d893d8285ea8bfe98eb3"


# (the session, its rendering's mark, at least how many times smaller its raw requests are
# stored rendered than plain). When written: Gemini 1.2 against 15.2 KB; Chat 1.4 against
# 4.8 (parts) and 4.5 (strings); Responses 5.6 against 9.6, whose items' ids stay literals.
SESSIONS = {
    "gemini": (gemini_exchanges, b"G", 4), "chat, content as parts": (chat_exchanges, b"C", 3),
    "chat, content as strings": (partial(chat_exchanges, parts=False), b"C", 3),
    "responses": (responses_exchanges, b"R", 1.5)}


@pytest.mark.parametrize("shape", SESSIONS)
def test_sessions_of_other_dialects_read_back_byte_for_byte(store, store_url, monkeypatch, shape):
    """Stored rendered, in a fraction of the plain hint's bytes; stores written plain still
    read."""
    made, mark, smaller = SESSIONS[shape]
    sent = made(40)
    stored = {}
    for name, marks in (("rendered", wire.MARKS), ("plain", {})):
        monkeypatch.setattr(wire, "MARKS", marks)
        store.add_session(make_session(name))
        for ex in sent:
            store.add_exchange(name, ex)
        stored[name] = frames(store_url, name)
        assert list(store.iter_exchanges(name, raw=True)) == sent
        for seq in (1, 17, 33, 40):
            assert store.get_exchange(name, seq, raw=True) == sent[seq - 1]
    assert {f[:1] for f in stored["rendered"]} == {mark}
    assert {f[:1] for f in stored["plain"]} == {b"K", b"D"}
    rendered, plain = (sum(map(len, stored[k])) for k in ("rendered", "plain"))
    assert rendered * smaller < plain


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["type", "role", "content", "text", "signature", "id", "name",
                         "tool_call_id", "arguments", "arguments_raw", "kind", "parameters",
                         "data", "description"]), inner, max_size=4),
    max_leaves=12)
BLOCK_TYPES = st.sampled_from(["text", "reasoning", "tool_call", "tool_result", "other",
                               "image", "x"])
BLOCKS = st.lists(st.fixed_dictionaries({"type": BLOCK_TYPES}, optional={
    "text": JSON, "signature": JSON, "id": JSON, "name": JSON, "tool_call_id": JSON,
    "arguments_raw": JSON, "content": JSON, "kind": JSON}) | JSON, max_size=4)
MESSAGE = st.fixed_dictionaries({"role": JSON, "content": BLOCKS}) | JSON


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([b"W", b"G", b"C", b"R"]), st.lists(MESSAGE, max_size=3), JSON, JSON,
       st.dictionaries(st.text(max_size=3), JSON, max_size=2))
def test_any_blob_renders(mark, messages, system, tools, parameters):
    """A rendering never fails a write: blocks and values of any shape render as they are."""
    blobs = [canonical_json(m) for m in messages]
    wire.render(mark, [], blobs)
    wire.render(mark, [canonical_json(system), canonical_json(tools),
                       canonical_json(parameters)], blobs)
