"""SSE framing, one edge per test (the WHATWG rules, plus chunk boundaries anywhere)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forge_record.sse import ServerSentEvent, SSEDecoder, _text


def decode(*chunks: bytes) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    events = [e for chunk in chunks for e in decoder.feed(chunk)]
    return events + decoder.flush()


def test_lf_line_endings():
    assert decode(b"event: a\ndata: x\n\n") == [ServerSentEvent(event="a", data="x")]


def test_crlf_line_endings():
    assert decode(b"event: a\r\ndata: x\r\n\r\n") == [ServerSentEvent(event="a", data="x")]


def test_cr_line_endings():
    assert decode(b"event: a\rdata: x\r\r") == [ServerSentEvent(event="a", data="x")]


def test_crlf_split_across_chunks_is_one_line_ending():
    # If the \n after a chunk-final \r were a second line ending, the blank line would
    # dispatch "x" before "y" is read.
    assert decode(b"data: x\r", b"\ndata: y\r", b"\n\r", b"\n") == [
        ServerSentEvent(data="x\ny")
    ]


def test_cr_at_chunk_end_then_other_byte():
    assert decode(b"data: x\r", b"data: y\r\r") == [ServerSentEvent(data="x\ny")]


def test_cr_inside_a_chunk_pairs_with_nothing_in_the_next():
    # The \r ending "x"'s blank line is not the chunk's last byte: the \n starting the next
    # chunk ends the line "data: y", it is not the second half of a \r\n.
    stream = b"data: x\r\rdata: y\n\ndata: z\n\n"
    cut = stream.index(b"\n")
    assert decode(stream[:cut], stream[cut:]) == decode(stream) == [
        ServerSentEvent(data="x"), ServerSentEvent(data="y"), ServerSentEvent(data="z")]


def test_events_come_out_as_soon_as_their_blank_line_arrives():
    decoder = SSEDecoder()
    assert decoder.feed(b"data: one\n") == []
    assert decoder.feed(b"\ndata: tw") == [ServerSentEvent(data="one")]
    assert decoder.feed(b"o\n\n") == [ServerSentEvent(data="two")]
    assert decoder.flush() == []


def test_multibyte_utf8_split_across_chunks():
    body = "data: 世界🌏\n\n".encode()
    cut = body.index("🌏".encode()) + 2  # inside the 4-byte emoji
    assert decode(body[:cut], body[cut:]) == [ServerSentEvent(data="世界🌏")]


def test_invalid_utf8_is_replaced_not_raised():
    assert decode(b"data: a\xffb\n\n") == [ServerSentEvent(data="a\ufffdb")]


def test_unicode_line_separators_do_not_split():
    assert decode("data: a\u2028b\x0bc\x85d\n\n".encode()) == [
        ServerSentEvent(data="a\u2028b\x0bc\x85d")
    ]


def test_comment_lines_are_ignored():
    assert decode(b": keep-alive\ndata: x\n:another\n\n") == [ServerSentEvent(data="x")]


def test_comment_only_block_dispatches_nothing():
    assert decode(b": ping\n\n") == []


def test_multiline_data_joined_with_newline():
    assert decode(b"data: a\ndata: b\ndata:\n\n") == [ServerSentEvent(data="a\nb\n")]


def test_only_one_space_after_colon_is_removed():
    assert decode(b"data:  two spaces\ndata:none\n\n") == [
        ServerSentEvent(data=" two spaces\nnone")
    ]


def test_empty_data_line_still_dispatches():
    assert decode(b"data:\n\n") == [ServerSentEvent(data="")]


def test_event_without_data_is_not_dispatched():
    assert decode(b"event: lonely\n\ndata: x\n\n") == [ServerSentEvent(data="x")]


def test_event_name_does_not_leak_into_next_event():
    assert decode(b"event: a\ndata: 1\n\ndata: 2\n\n") == [
        ServerSentEvent(event="a", data="1"),
        ServerSentEvent(data="2"),
    ]


def test_id_persists_across_events():
    assert decode(b"id: 7\ndata: a\n\ndata: b\n\nid:\ndata: c\n\n") == [
        ServerSentEvent(data="a", id="7"),
        ServerSentEvent(data="b", id="7"),
        ServerSentEvent(data="c", id=""),
    ]


def test_id_with_null_is_ignored():
    assert decode(b"id: 1\n\nid: a\0b\ndata: x\n\n") == [ServerSentEvent(data="x", id="1")]


def test_retry_is_read_and_persists():
    assert decode(b"retry: 3000\ndata: a\n\ndata: b\n\n") == [
        ServerSentEvent(data="a", retry=3000),
        ServerSentEvent(data="b", retry=3000),
    ]


@pytest.mark.parametrize("value", [b"1.5", b"-1", b"soon", b"", b"\xd9\xa3"])
def test_bad_retry_is_ignored(value):
    assert decode(b"retry: " + value + b"\ndata: x\n\n") == [ServerSentEvent(data="x")]


def test_field_without_colon_has_empty_value():
    assert decode(b"data\ndata\n\n") == [ServerSentEvent(data="\n")]


def test_unknown_fields_are_ignored():
    assert decode(b"foo: bar\ndata: x\n\n") == [ServerSentEvent(data="x")]


def test_leading_bom_is_stripped():
    assert decode(b"\xef\xbb\xbfdata: x\n\n") == [ServerSentEvent(data="x")]


def test_flush_dispatches_event_without_trailing_blank_line():
    assert decode(b"event: a\ndata: x\n") == [ServerSentEvent(event="a", data="x")]


def test_flush_reads_unterminated_last_line():
    assert decode(b"data: x\n\ndata: tail") == [
        ServerSentEvent(data="x"),
        ServerSentEvent(data="tail"),
    ]


def test_flush_on_empty_stream():
    assert decode() == []


STREAM = (
    "\ufeff: hello\r\n"
    "retry: 10\n"
    "event: message_start\r"
    "id: 1\r\n"
    'data: {"text": "héllo 世界 🌏"}\n'
    "data: second line\r\n"
    "\r\n"
    "event: x\n"
    "\n"
    "data:\n"
    "\r"
    "data: end"
).encode()


def test_byte_by_byte_equals_whole():
    whole = decode(STREAM)
    assert len(whole) == 3
    assert decode(*(STREAM[i : i + 1] for i in range(len(STREAM)))) == whole


def test_random_splits_equal_whole():
    whole = decode(STREAM)
    rng = random.Random(1033)
    for _ in range(50):
        cuts = sorted(rng.sample(range(1, len(STREAM)), rng.randint(1, 12)))
        bounds = [0, *cuts, len(STREAM)]
        assert decode(*(STREAM[a:b] for a, b in zip(bounds, bounds[1:], strict=False))) == whole


# Whole blocks of simple events are read in one regex pass (SSEDecoder._tiled); fed a byte
# at a time the same stream goes line by line. Both must agree on any mix of lines.
_LINES = ["event: a", "event: ", "event:  two spaces", "event:b", "data: {\"x\": 1}", "data: ",
          "data:", "data:nospace", "data:  two", ": comment", "id: 7", "retry: 5", "", "",
          "data: é世", "event: message_stop", "bogus", "\ufeffdata: bom", "data: a\rb"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_LINES), max_size=14),
       st.sampled_from(["\n", "\r\n", "\r"]), st.booleans())
def test_one_pass_reading_equals_line_by_line(lines, ending, blank_end):
    stream = (ending.join(lines) + ending + (ending if blank_end else "")).encode()
    assert decode(stream) == decode(*(stream[i:i + 1] for i in range(len(stream))))


def test_simple_events_of_either_form_are_read_in_one_pass():
    named = b'event: a\ndata: {"n":1}\n\nevent: \ndata: x\n\n'
    assert SSEDecoder()._tiled(named.decode()) == [ServerSentEvent("a", '{"n":1}'),
                                                  ServerSentEvent(None, "x")]
    assert SSEDecoder()._tiled("data: 1\n\ndata: [DONE]\n\n") == [ServerSentEvent(None, "1"),
                                                                 ServerSentEvent(None, "[DONE]")]
    for other in ("event: a\ndata: 1\n\ndata: 2\n\n", "data: 1\n\n: ping\n\n",
                  "event: a\ndata: 1\ndata: 2\n\n"):
        assert SSEDecoder()._tiled(other) is None, other


def test_other_line_endings_are_made_lf_before_the_one_pass():
    # Gemini ends its lines with \r\n: those blocks take the one pass too, split the same.
    assert _text(b"data: 1\r\n\r\ndata: a\rb\n\r") == "data: 1\n\ndata: a\nb\n\n"
    assert SSEDecoder().block(b"data: 1\r\n\r\n") == [ServerSentEvent(None, "1")]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_LINES), st.sampled_from(["\n", "\r\n", "\r"])),
                max_size=14), st.lists(st.integers(0, 27), max_size=3))
def test_mixed_line_endings_in_any_chunking_equal_whole(lines, cuts):
    # Cuts land where framing bugs live: cut c is before line c // 2's ending (c even) or
    # just after it (c odd).
    stream, places = b"", [0]
    for line, ending in lines:
        stream += line.encode()
        places.append(len(stream))
        stream += ending.encode()
        places.append(len(stream))
    bounds = sorted({0, len(stream), *(places[c + 1] for c in cuts if c + 1 < len(places))})
    chunks = [stream[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    assert decode(*chunks) == decode(stream)
