import gzip
import random
import zlib

import brotli
import pytest
import zstandard

from forge_record.content_encoding import decode_body, decoder_for

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
    decode = decoder_for(name)
    rng = random.Random(7)
    out, i = [], 0
    while i < len(encoded):
        n = rng.randint(1, 50)
        out.append(decode(encoded[i : i + n]))
        i += n
    out.append(decode(b""))
    assert b"".join(out) == BODY


def test_raw_deflate_is_accepted():
    c = zlib.compressobj(wbits=-15)
    assert decode_body("deflate", c.compress(BODY) + c.flush()) == BODY


def test_stacked_encodings_are_undone_in_reverse():
    assert decode_body("gzip, br", brotli.compress(gzip.compress(BODY))) == BODY


def test_unknown_encoding_and_bad_bytes():
    assert decoder_for("compress") is None
    assert decode_body("gzip", b"not gzip at all") is None
