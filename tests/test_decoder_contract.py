"""The contract every dialect's response decoder keeps (decoders/base.py), tested once for all.

Over every captured stream of every dialect (tests/data/sse/<provider>/) and every JSON body
decoder:
- any chunking folds to what the whole body folds to (deterministic chunkings, then random
  ones from hypothesis, and the same stream with its line endings made CRLF or CR);
- `finish()` after a stream cut anywhere returns what was seen, a Response that serializes;
- garbage never raises from a stream decoder, and only `DecodeError` from a body decoder.

The dialect test files keep what is particular to each dialect (its fold, its SDK).
"""

from __future__ import annotations

import pytest
from conftest import assert_every_chunking_agrees, chunked, corrupted, decode_chunks, sse_cases
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forge_record.decoders import anthropic_messages, openai_chat, openai_responses
from forge_record.decoders.gemini import CODE_ASSIST, GENERATE
from forge_record.errors import DecodeError
from forge_record.records import Response, response_to_dict

SSE = "text/event-stream; charset=utf-8"
DIALECT_OF = {"anthropic": anthropic_messages.DIALECT, "openai_chat": openai_chat.DIALECT,
              "openai_responses": openai_responses.DIALECT, "gemini": GENERATE}
STREAMS = {f"{provider}/{name}": (CODE_ASSIST if name == "code_assist" else dialect, body)
           for provider, dialect in DIALECT_OF.items()
           for name, body in sse_cases(provider).items()}
BODY_DIALECTS = {name: d for name, d in DIALECT_OF.items()} | {"gemini.code_assist": CODE_ASSIST}
WHOLE = {case: decode_chunks(dialect, SSE, [body]) for case, (dialect, body) in STREAMS.items()}
PROPERTY = settings(max_examples=150, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


def test_every_dialect_has_streams():
    assert {case.partition("/")[0] for case in STREAMS} == set(DIALECT_OF)


@pytest.mark.parametrize("case", STREAMS)
def test_every_chunking_gives_the_same_response(case):
    dialect, body = STREAMS[case]
    assert_every_chunking_agrees(lambda chunks: decode_chunks(dialect, SSE, chunks), body)


@pytest.mark.parametrize("ending", [b"\r\n", b"\r"], ids=["crlf", "cr"])
@pytest.mark.parametrize("case", STREAMS)
def test_line_endings_do_not_matter(case, ending):
    dialect, body = STREAMS[case]
    other = body.replace(b"\r\n", b"\n").replace(b"\n", ending)
    assert decode_chunks(dialect, SSE, [other]) == WHOLE[case]


@PROPERTY
@given(st.sampled_from(sorted(STREAMS)), st.lists(st.integers(1, 1 << 14), max_size=40))
def test_any_chunking_gives_the_same_response(case, cuts):
    dialect, body = STREAMS[case]
    assert decode_chunks(dialect, SSE, chunked(body, [c % len(body) for c in cuts])) == \
        WHOLE[case]


@PROPERTY
@given(st.sampled_from(sorted(STREAMS)), st.integers(0, 1 << 14),
       st.lists(st.integers(1, 1 << 14), max_size=10))
def test_finish_after_a_cut_returns_what_was_seen(case, end, cuts):
    dialect, body = STREAMS[case]
    cut = body[: end % len(body)]
    response, _ = decode_chunks(dialect, SSE, [cut])
    assert isinstance(response, Response)
    assert response_to_dict(response) is not None  # and it still serializes
    if cut:  # what was seen does not depend on how it came either
        assert decode_chunks(dialect, SSE, chunked(cut, [c % len(cut) for c in cuts])) == \
            (response, _)


@PROPERTY
@given(st.sampled_from(sorted(STREAMS)), st.data())
def test_a_corrupted_stream_never_raises(case, data):
    dialect, body = STREAMS[case]
    response, _ = decode_chunks(dialect, SSE, [corrupted(body, data)])
    assert response_to_dict(response) is not None


@settings(max_examples=100, deadline=None, database=None)
@given(st.sampled_from(sorted(BODY_DIALECTS)), st.binary(max_size=300))
def test_a_body_decoder_raises_only_decode_error(name, body):
    try:
        decode_chunks(BODY_DIALECTS[name], "application/json", [body])
    except DecodeError:
        pass
