"""store.wire: raw requests compressed against their blobs rendered in the wire form.

The rendering is a zstd dictionary that the reader must rebuild byte for byte, so it is
pinned here: if one of these tests fails, frames already stored would no longer decode.
Sessions stored with rendered frames, and with the plain ones stores wrote before, read back
byte for byte on SQLite and Postgres.
"""

from __future__ import annotations

import dataclasses
import hashlib

import pytest
import sqlalchemy as sa
import zstandard
from support import make_session, realistic_exchanges

from forge_record.identity import canonical_json
from forge_record.store import delta, wire

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
    assert wire.render([], MESSAGES[1:2]) == (
        b'{"role":"assistant","content":[{"type":"thinking","thinking":"Let me look.",'
        b'"signature":"c2ln"},{"type":"tool_use","id":"toolu_1","name":"Read",'
        b'"input":{"file_path":"a.py"}}]}')


def test_the_rendering_is_frozen():
    """Frames stored today are compressed against exactly these bytes."""
    keyframe = wire.render([SYSTEM, TOOLS, PARAMETERS], MESSAGES)
    assert keyframe.startswith(b'{"messages":[{"role":"user","content":[{"type":"text",')
    assert keyframe.endswith(b'"tools":[{"name":"Read","description":"Read a file",'
                             b'"input_schema":{"required":["file_path"],"type":"object"}}],'
                             b'"max_tokens":32000,"stream":true}')
    assert hashlib.sha256(keyframe).hexdigest() == RENDERED_SHA256
    assert hashlib.sha256(wire.render([], MESSAGES)).hexdigest() == APPENDED_SHA256


RENDERED_SHA256 = "6f1dd883a891d8f724166703c200f02e809ce19d486c13de18371b7afcde9f8d"
APPENDED_SHA256 = "11e34bd685e652d103abbeb5a3c6527b251e11392ead318e0ecf9e0e789c4150"


def test_a_rendered_keyframe_against_another_rendering_is_refused():
    body = b'{"messages":[{"role":"user","content":[{"type":"text","text":"read a.py"}]}]}'
    hint = wire.render([SYSTEM, TOOLS, PARAMETERS], MESSAGES[:1])
    frame = delta.encode(body, None, hint, rendered=True)
    assert frame[:2] == b"WK" and delta.decode(frame, None, hint) == body
    with pytest.raises(zstandard.ZstdError):
        delta.decode(frame, None, hint.replace(b"read a.py", b"read b.py"))


def frames(store_url: str) -> list[bytes]:
    engine = sa.create_engine(store_url)
    try:
        with engine.connect() as conn:
            return conn.scalars(sa.text("SELECT raw_request FROM exchanges ORDER BY seq")).all()
    finally:
        engine.dispose()


@pytest.mark.parametrize("rendered", [True, False], ids=["rendered", "plain, as before"])
def test_sessions_read_back_byte_for_byte(store, store_url, monkeypatch, rendered):
    """Anthropic requests are stored rendered; frames stored plain (before store.wire, or of
    another dialect) read back as well, and a session may hold both."""
    sent = realistic_exchanges(40)
    if not rendered:
        monkeypatch.setattr(wire, "DIALECTS", frozenset())
    store.add_session(make_session("s"))
    for ex in sent[:30]:
        store.add_exchange("s", ex)
    monkeypatch.setattr(wire, "DIALECTS", frozenset({"anthropic.messages"}))
    for ex in sent[30:]:
        store.add_exchange("s", ex)
    marks = [f[:1] for f in frames(store_url)]
    assert marks[30:] == [b"W"] * 10
    assert set(marks[:30]) == ({b"W"} if rendered else {b"K", b"D"})
    assert list(store.iter_exchanges("s", raw=True)) == sent
    for seq in (1, 17, 33, 40):
        assert store.get_exchange("s", seq, raw=True) == sent[seq - 1]


def test_other_dialects_keep_the_plain_hint(store, store_url):
    sent = [dataclasses.replace(ex, dialect="openai.chat") for ex in realistic_exchanges(8)]
    store.add_session(make_session("s"))
    for ex in sent:
        store.add_exchange("s", ex)
    assert {f[:1] for f in frames(store_url)} == {b"K", b"D"}
    assert list(store.iter_exchanges("s", raw=True)) == sent
