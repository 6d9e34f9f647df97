"""No stream, however chunked or corrupted, makes the capture raise.

`Capture` is the boundary between the agent's traffic and the decoders: every captured
stream in tests/data/sse, fed to every dialect (so each decoder also meets the others'
streams), in random chunks with random bytes flipped, dropped or inserted, must finish into
an exchange without an exception escaping.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from forge_record.capture import Capture
from forge_record.decoders import DIALECTS, dialect_for
from forge_record.finalize import finalize

STREAMS = sorted((Path(__file__).parent / "data" / "sse").glob("*/*.sse"))
CONTENT_TYPES = ["text/event-stream", "application/json", ""]


def corrupt(data: bytes, edits: list[tuple[int, int, int]]) -> bytes:
    buf = bytearray(data)
    for kind, where, byte in edits:
        if not buf:
            break
        i = where % len(buf)
        if kind == 0:
            buf[i] = byte
        elif kind == 1:
            del buf[i]
        else:
            buf.insert(i, byte)
    return bytes(buf)


def chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:], strict=False)]


@settings(max_examples=300, deadline=None)
@given(
    stream=st.sampled_from(STREAMS),
    dialect=st.sampled_from(DIALECTS),
    content_type=st.sampled_from(CONTENT_TYPES),
    edits=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1 << 20), st.integers(0, 255)),
                   max_size=8),
    cuts=st.lists(st.integers(0, 1 << 20), max_size=30),
    abort=st.booleans(),
)
def test_capture_never_raises(stream, dialect, content_type, edits, cuts, abort):
    data = corrupt(stream.read_bytes(), edits)
    capture = Capture(dialect, seq=1, method="POST", url="https://example.test/x", path="/x",
                      headers=[], body=b'{"model": "m", "messages": []}')
    capture.response_started(200, [("content-type", content_type)], content_type, "")
    for piece in chunks(data, cuts):
        assert capture.tee(piece) is piece  # handed on untouched
    ex = finalize(capture.finish("client disconnected" if abort else None))
    assert ex.raw_response == data
    assert ex.status in ("complete", "incomplete", "error")


def test_a_call_that_got_no_response_is_incomplete_without_a_decoder_fault(caplog):
    capture = Capture(DIALECTS[0], seq=1, method="POST", url="https://example.test/x",
                      path="/x", headers=[], body=b'{"model": "m", "messages": []}')
    ex = finalize(capture.finish("connection refused"))
    assert ex.status == "incomplete" and ex.response is None
    assert ex.flags == ["aborted:connection refused"]
    assert not caplog.records


def test_a_connection_that_ends_after_the_terminal_event_leaves_a_complete_record():
    # An agent that hangs up once it has [DONE], before the transfer's last bytes (gzip's
    # trailer, the final chunk): everything the protocol sends has arrived.
    capture = Capture(dialect_for("POST", "/v1/chat/completions"), seq=1, method="POST",
                      url="https://example.test/v1/chat/completions",
                      path="/v1/chat/completions", headers=[],
                      body=b'{"model": "m", "messages": [], "stream": true}')
    capture.response_started(200, [("content-type", "text/event-stream")],
                             "text/event-stream", "")
    capture.tee(b'data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":'
                b'[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\n'
                b"data: [DONE]\n\n")
    ex = finalize(capture.finish("Client disconnected."))
    assert ex.status == "complete" and ex.flags == ["aborted:Client disconnected."]
    assert ex.response.content[0].text == "hi"
