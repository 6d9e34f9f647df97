"""One exchange as it is being captured: the state the addon keeps per flow.

The addon feeds this object from mitmproxy's hooks; it never touches mitmproxy itself, so it
can be driven directly in tests. Everything here runs on the proxy's event loop and is kept
to the least that must happen there: the tee hands each chunk on, content-decodes a copy and
keeps it. Folding the response into a record and parsing the request happen later, in the
writer process (`forge_record.finalize`): a model's stream reaches the agent without waiting
on a decoder, and an HTTP call's record only needs its bytes, which are all kept. A WebSocket
call is the exception (`decode_live`): it ends at a terminal event that only its decoder can
see, so it is settled here (`finalize.settle`).

Any exception from a decoder is swallowed and turned into a flag on the exchange: a decoder
fault must never reach the agent's stream, nor cost the exchange its raw bytes.
"""

from __future__ import annotations

import logging
import time

from forge_record import content_encoding
from forge_record.decoders.base import Dialect, ResponseDecoder
from forge_record.finalize import (
    PENDING,
    UPSTREAM_FAILED,
    decoder_failed,
    flag,
    new_decoder,
    settle,
)
from forge_record.records import Exchange
from forge_record.redact.headers import redact_headers
from forge_record.redact.urls import redact_url

log = logging.getLogger("forge_record")

DEFAULT_MAX_BODY = 64 << 20  # per body: far above any model call seen, far below a bomb


class Capture:
    def __init__(
        self,
        dialect: Dialect,
        *,
        seq: int,
        method: str,
        url: str,
        path: str,
        headers: list[tuple[str, str]],
        body: bytes,
        upstream_url: str | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        decode_live: bool = False,
    ) -> None:
        self.dialect = dialect
        self.max_body = max_body
        self.decode_live = decode_live
        self.exchange = Exchange(
            seq=seq,
            dialect=dialect.name,
            kind=dialect.kind(path),
            method=method,
            url=redact_url(url),
            upstream_url=redact_url(upstream_url) if upstream_url is not None else None,
            started_at=time.time(),
            request_headers=redact_headers(headers),
            raw_request=body[:max_body],
        )
        if len(body) > max_body:
            flag(self.exchange, "request_truncated")
        self._decoder: ResponseDecoder | None = None
        self._unencode: content_encoding.ContentDecoder | None = None
        self._chunks: list[bytes] = []
        self._kept = 0
        self.finished = False

    # --- response side (event loop) -----------------------------------------------------

    def response_started(
        self, status: int, headers: list[tuple[str, str]], content_type: str, encoding: str
    ) -> None:
        ex = self.exchange
        ex.http_status = status
        ex.first_byte_at = time.time()
        ex.response_headers = redact_headers(headers)
        self._unencode = content_encoding.decoder_for(encoding, max_output=self.max_body)
        if self._unencode is None:
            flag(ex, f"unknown_content_encoding:{encoding}")
            return
        if self.decode_live:
            self._decoder = new_decoder(self.dialect, content_type, ex)

    def tee(self, chunk: bytes) -> bytes:
        """mitmproxy's stream callable: hand the chunk on unchanged, keep a decoded copy."""
        if chunk and self._unencode is not None:
            try:
                plain = self._unencode.decode(chunk)
            except content_encoding.TooLarge:
                self._stop_keeping("response_truncated")
                return chunk
            except Exception as e:  # noqa: BLE001
                flag(self.exchange, "content_decode_error")
                log.warning("forge-record: cannot decode %s body: %s", self.exchange.url, e)
                self._unencode = None
                self._decoder = None
                return chunk
            self._kept += len(plain)
            if self._kept > self.max_body:
                self._stop_keeping("response_truncated")
                return chunk
            self._chunks.append(plain)
            if self._decoder is not None:
                try:
                    self._decoder.feed(plain)
                except Exception as e:  # noqa: BLE001
                    self._decoder = decoder_failed(self.exchange, e)
        return chunk

    def finish(self, error: str | None = None, *, upstream_failed: bool = False) -> Exchange:
        """End the capture. A live-decoded exchange is settled here; any other is PENDING
        until finalize() folds it. `upstream_failed`: the error came from the upstream side
        (refused, reset, closed before the body's end), flagged so that the exchange is
        settled as an error (no response) or incomplete (a response cut short)."""
        self.finished = True
        ex = self.exchange
        ex.ended_at = time.time()
        ex.raw_response = b"".join(self._chunks)
        self._chunks = []
        if error is not None:
            flag(ex, f"aborted:{error}")
            if upstream_failed:
                flag(ex, UPSTREAM_FAILED)
        if self.decode_live:
            settle(ex, self._decoder)
        else:
            ex.status = PENDING
        return ex

    def _stop_keeping(self, reason: str) -> None:
        """Past the size limit: keep what we have, let the rest through unrecorded."""
        flag(self.exchange, reason)
        log.warning("forge-record: %s body over %d bytes, stored truncated",
                    self.exchange.url, self.max_body)
        self._unencode = None
