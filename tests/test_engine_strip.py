"""Engine upstreams: the request asks for token ids, the agent gets the answer it asked for.

Each pair in tests/data/vllm is one call made twice to a real vLLM 0.32.0 with the same seed:
once with `return_token_ids`/`logprobs`/`top_logprobs` (as the recorder asks), once as the
agent sent it. Stripping the first must give the second, byte for byte but for the ids and
timestamps vLLM makes up per call, under every chunking, and without holding back a line.
"""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest
from conftest import chunkings

from forge_record.engine import Asked, Strip, ask_for_tokens

DATA = Path(__file__).parent / "data" / "vllm"
# what vLLM makes up per call: the completion id, its timestamp and tool-call ids
_PER_CALL = re.compile(rb'"(id|created)":("[^"]*"|\d+)')


def same_but_ids(a: bytes, b: bytes) -> bool:
    return _PER_CALL.sub(rb'"\1":0', a) == _PER_CALL.sub(rb'"\1":0', b)


def stripped(body: bytes, asked: Asked, streamed: bool, chunks: list[bytes] | None = None):
    strip = Strip(asked, streamed)
    out = [piece for chunk in chunks or [body] for piece in strip.feed(chunk)]
    return b"".join(out + strip.flush())


@pytest.mark.parametrize("name", ["pair_stream", "pair_stream_tool"])
def test_a_stream_the_agent_asked_no_tokens_for_is_the_plain_answer(name):
    asked = (DATA / f"{name}_asked.sse").read_bytes()
    plain = (DATA / f"{name}_plain.sse").read_bytes()
    assert not same_but_ids(asked, plain)
    for label, chunks in chunkings(asked, 40):
        assert same_but_ids(stripped(asked, Asked(), True, chunks), plain), label


def test_a_whole_answer_the_agent_asked_no_tokens_for_is_the_plain_answer():
    asked = (DATA / "pair_json_asked.json").read_bytes()
    plain = (DATA / "pair_json_plain.json").read_bytes()
    assert not same_but_ids(asked, plain)
    assert same_but_ids(stripped(asked, Asked(), False), plain)


def test_an_agent_that_asked_for_everything_gets_the_engines_bytes():
    for name in ["pair_stream_asked.sse", "pair_stream_tool_asked.sse"]:
        body = (DATA / name).read_bytes()
        assert stripped(body, Asked(token_ids=True, logprobs=True, top_logprobs=2), True) == body


def test_each_line_is_passed_on_when_it_ends():
    body = (DATA / "pair_stream_asked.sse").read_bytes()
    strip = Strip(Asked(token_ids=True, logprobs=True, top_logprobs=2), True)
    for line in body.splitlines(keepends=True):
        assert b"".join(strip.feed(line[:-1])) == b""  # the line has not ended yet
        assert b"".join(strip.feed(line[-1:])) == line
    assert strip.flush() == []


def test_logprobs_asked_without_top_keep_no_top_entries():
    body = (DATA / "pair_stream_asked.sse").read_bytes()
    out = stripped(body, Asked(logprobs=True), True)
    chunks = [orjson.loads(line[6:]) for line in out.splitlines() if line.startswith(b"data: {")]
    entries = [e for c in chunks for ch in c["choices"] for e in (ch["logprobs"] or {}).get(
        "content") or ()]
    assert entries and all(e["top_logprobs"] == [] for e in entries)
    assert all(ch.get("token_ids") is None for c in chunks for ch in c["choices"])


def test_lines_that_are_not_json_chunks_pass_unchanged():
    body = b": keep-alive\n\nevent: ping\ndata: not json\n\ndata: [DONE]\n\n"
    assert stripped(body, Asked(), True) == body


def test_the_request_asks_for_tokens_and_says_what_the_agent_asked():
    body = b'{"model":"tiny","messages":[],"stream":true,"top_logprobs":3,"logprobs":true}'
    new, asked = ask_for_tokens(body, top_logprobs=1)
    assert asked == Asked(token_ids=False, logprobs=True, top_logprobs=3)
    request = orjson.loads(new)
    assert request == {"model": "tiny", "messages": [], "stream": True, "top_logprobs": 3,
                       "logprobs": True, "return_token_ids": True}
    new, asked = ask_for_tokens(b'{"model":"tiny","messages":[]}', top_logprobs=2)
    assert asked == Asked() and orjson.loads(new)["top_logprobs"] == 2
    assert ask_for_tokens(b"not json") is None and ask_for_tokens(b"[1]") is None
