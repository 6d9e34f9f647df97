"""Raw responses cut into framing and text (store.strands) rebuild byte for byte: every
recorded stream of every dialect, unusual and malformed ones, and through the store."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import make_exchange, make_session

from forge_record.store import delta, strands

STREAMS = sorted((Path(__file__).parent / "data" / "sse").glob("*/*"))
DIALECTS = {p.parent.name for p in STREAMS}

# Unusual bodies: each must come back as it was, cut or not.
ODD = {
    "escapes orjson writes differently": b'data: {"delta":{"text":"a\\/b \\u00e9 \\u2028"}}\n\n',
    "a surrogate pair cut across events": (b'data: {"delta":{"text":"\\ud83d"}}\n\n'
                                           b'data: {"delta":{"text":"\\ude00"}}\n\n'),
    "a key inside a value": b'data: {"text":"say \\"text\\":\\"no\\" \\\\"}\n\n',
    "an unterminated value": b'data: {"type":"x","text":"cut here',
    "spaces around the colon": b'data: {"text" : "a b"}\r\n\r\n',
    "no streamed text": b'event: ping\ndata: {"type":"ping"}\n\n',
    "not JSON at all": bytes(range(256)) * 3,
    "invalid UTF-8 in a value": b'data: {"text":"\xff\xfe"}\n\n',
    "control characters": b'data: {"text":"tab\\t nl\\n nul\\u0000"}\n\n',
}


def test_there_is_a_recorded_stream_of_every_dialect():
    assert DIALECTS >= {"anthropic", "openai_chat", "openai_responses", "gemini"}


@pytest.mark.parametrize("path", STREAMS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_recorded_stream_rebuilds(path):
    body = path.read_bytes()
    cut = strands.split(body)
    if cut is not None:
        assert strands.join(*cut) == body
    for hint in (b"", body[: len(body) // 2]):
        frame = delta.encode_response(body, hint, b"record")
        assert delta.decode_response(frame, hint, b"record") == body


@pytest.mark.parametrize("dialect", ["anthropic", "openai_chat", "openai_responses", "gemini"])
def test_each_dialect_s_text_is_cut_out_of_its_framing(dialect):
    cut = [strands.split(p.read_bytes()) for p in STREAMS if p.parent.name == dialect]
    assert any(c is not None and c[3] for c in cut)


@pytest.mark.parametrize("body", ODD.values(), ids=ODD.keys())
def test_unusual_bodies_rebuild(body):
    cut = strands.split(body)
    if cut is not None:
        assert strands.join(*cut) == body
    frame = delta.encode_response(body, b"hint")
    assert delta.decode_response(frame, b"hint") == body


def test_values_unescaped_only_when_escaping_gives_them_back():
    plain = strands.split(b'{"text":"a \\"b\\" \\n"}')
    assert plain[0] == strands.PLAIN and plain[3] == b'a "b" \n'
    kept = strands.split(ODD["escapes orjson writes differently"])
    assert kept[0] == strands.ESCAPED and kept[3] == b"a\\/b \\u00e9 \\u2028"


def test_the_text_compresses_against_the_answer():
    """What the cut is for: a stream's text costs next to nothing when the answer blob it
    repeats is in the prefix."""
    words = " ".join(f"w{i % 97}x{i % 13}" for i in range(400))
    events = b"".join(b'data: {"type":"content_block_delta","delta":{"type":"text_delta","text":"'
                      + words[i:i + 7].encode() + b'"}}\n\n' for i in range(0, len(words), 7))
    answer = b'{"content":[{"text":"' + words.encode() + b'","type":"text"}]}'
    cut = delta.encode_response(events, answer)
    whole = delta.encode(events, None, answer, delta.RESPONSE_LEVEL)
    assert cut[:1] == b"T" and len(cut) < len(whole) / 2
    assert delta.decode_response(cut, answer) == events


def test_streams_of_every_dialect_rebuild_through_the_store(store):
    """Each recorded stream is the raw response of a call in one session (so each is
    compressed against the one before it), read back whole and one by one."""
    store.add_session(make_session("strands"))
    bodies = [p.read_bytes() for p in STREAMS] + list(ODD.values())
    sent = [make_exchange(seq, raw_response=body) for seq, body in enumerate(bodies, 1)]
    for ex in sent:
        store.add_exchange("strands", ex)
    back = {e.seq: e.raw_response for e in store.iter_exchanges("strands", raw=True)}
    assert back == {e.seq: e.raw_response for e in sent}
    for ex in sent:
        assert store.get_exchange("strands", ex.seq, raw=True).raw_response == ex.raw_response


def test_responses_stored_before_strands_still_read(store, monkeypatch):
    """Rows written before this change hold a raw response as a keyframe against the parent
    response and the answer, without the manifest: they still rebuild."""
    def before(body, hint, record=b""):
        return delta.encode(body, None, hint, delta.RESPONSE_LEVEL)

    store.add_session(make_session("before"))
    sent = [make_exchange(seq, raw_response=p.read_bytes()) for seq, p in enumerate(STREAMS, 1)]
    with monkeypatch.context() as m:
        m.setattr(delta, "encode_response", before)
        for ex in sent[:10]:
            store.add_exchange("before", ex)
    for ex in sent[10:]:
        store.add_exchange("before", ex)
    back = {e.seq: e.raw_response for e in store.iter_exchanges("before", raw=True)}
    assert back == {e.seq: e.raw_response for e in sent}
    assert store.get_exchange("before", 3, raw=True).raw_response == sent[2].raw_response
