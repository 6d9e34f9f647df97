import gzip
import random
import zlib

import brotli
import pytest
import zstandard
from conftest import sse_cases

from forge_record.capture import Capture
from forge_record.content_encoding import TooLarge, decode_body, decoder_for
from forge_record.decoders import dialect_for
from forge_record.finalize import finalize
from forge_record.records import COMPLETE

BODY = ("event: ping\ndata: {\"type\": \"ping\"} ünïcode ✓\n\n" * 200).encode()
ENCODERS = {
    "gzip": lambda b: gzip.compress(b),
    "deflate": zlib.compress,
    "br": brotli.compress,
    "zstd": lambda b: zstandard.ZstdCompressor().compress(b),
    "identity": lambda b: b,
}


@pytest.mark.parametrize("name", ENCODERS)
def test_chunked_decoding_equals_whole(name):
    encoded = ENCODERS[name](BODY)
    assert decode_chunked(decoder_for(name), encoded) == BODY


def decode_chunked(decoder, encoded: bytes, seed: int = 7) -> bytes:
    """`encoded` fed in random pieces of 1-50 bytes (an empty one among them), then flushed."""
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(encoded):
        n = rng.randint(1, 50)
        out.append(decoder.decode(encoded[i : i + n]))
        i += n
    out.append(decoder.decode(b""))
    return b"".join(out) + decoder.flush()


def test_raw_deflate_is_accepted():
    c = zlib.compressobj(wbits=-15)
    assert decode_body("deflate", c.compress(BODY) + c.flush()) == BODY


def test_stacked_encodings_are_undone_in_reverse():
    assert decode_body("gzip, br", brotli.compress(gzip.compress(BODY))) == BODY


def test_unknown_encoding_and_bad_bytes():
    assert decoder_for("compress") is None
    assert decode_body("gzip", b"not gzip at all") is None


def zstd_frames(*parts: bytes) -> bytes:
    return b"".join(zstandard.ZstdCompressor().compress(p) for p in parts)


def test_every_zstd_frame_is_decoded_whole_or_chunked():
    # A streaming encoder may end a frame at each flush: the body is frames back to back.
    half = len(BODY) // 2
    encoded = zstd_frames(BODY[:half], BODY[half:])
    assert decode_body("zstd", encoded) == BODY
    for seed in range(5):
        assert decode_chunked(decoder_for("zstd"), encoded, seed) == BODY


def test_a_zstd_frame_ending_on_a_chunk_boundary_starts_the_next():
    first = zstd_frames(b"hello ")
    decoder = decoder_for("zstd")
    assert decoder.decode(first) == b"hello "
    assert decoder.decode(zstd_frames(b"world", b"!")) + decoder.flush() == b"world!"


def test_stacked_encodings_decode_chunked():
    encoded = brotli.compress(gzip.compress(BODY))
    assert decode_chunked(decoder_for("gzip, br"), encoded) == BODY
    assert decode_chunked(decoder_for("identity, zstd"), zstd_frames(BODY)) == BODY


def test_a_cut_body_keeps_what_arrived():
    # A stream that stopped early is not an error: flush hands on what the decoder holds.
    encoded = gzip.compress(BODY)
    decoder = decoder_for("gzip")
    got = decoder.decode(encoded[: len(encoded) // 2]) + decoder.flush()
    assert got and BODY.startswith(got)


@pytest.mark.parametrize("name", [n for n in ENCODERS if n != "identity"])
def test_output_past_the_limit_raises_too_large(name):
    encoded = ENCODERS[name](b"x" * 100_000)
    decoder = decoder_for(name, max_output=1000)
    with pytest.raises(TooLarge):
        decode_chunked(decoder, encoded)
    decoder = decoder_for(name, max_output=100_000)  # exactly the limit is allowed
    assert decode_chunked(decoder, encoded) == b"x" * 100_000


def test_the_limit_counts_every_zstd_frame():
    decoder = decoder_for("zstd", max_output=1500)
    with pytest.raises(TooLarge):
        decoder.decode(zstd_frames(b"x" * 1000, b"y" * 1000))


def test_a_two_frame_zstd_stream_is_recorded_whole():
    # Through the tee as mitmproxy feeds it: the record is the stream's, not its first frame's.
    stream = sse_cases("anthropic")["tool_use_bash"]
    cut = stream.index(b"\n\n", len(stream) // 2) + 2
    encoded = zstd_frames(stream[:cut], stream[cut:])
    capture = Capture(dialect_for("POST", "/v1/messages"), seq=1, method="POST",
                      url="https://api.anthropic.com/v1/messages", path="/v1/messages",
                      headers=[("content-type", "application/json")], body=b"{}")
    headers = [("content-type", "text/event-stream"), ("content-encoding", "zstd")]
    capture.response_started(200, headers, "text/event-stream", "zstd")
    for i in range(0, len(encoded), 100):
        assert capture.tee(encoded[i:i + 100]) == encoded[i:i + 100]
    exchange = finalize(capture.finish())
    assert exchange.raw_response == stream
    assert exchange.status == COMPLETE, exchange.flags
