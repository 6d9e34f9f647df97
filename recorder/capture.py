"""One exchange as it is being captured: the state the addon keeps per flow.

The addon feeds this object from mitmproxy's hooks; it never touches mitmproxy itself, so it
can be driven directly in tests. Everything here runs on the proxy's event loop and is kept
cheap: the tee content-decodes and folds each chunk, and the request body is only parsed
later, in the writer thread (`finalize`). Any exception from a decoder is swallowed here and
turned into a flag on the exchange: a decoder fault must never reach the agent's stream.
"""

from __future__ import annotations

import logging
import time

from forge_record import encodings
from forge_record.decoders import dialect_named
from forge_record.decoders.base import Dialect, ResponseDecoder
from forge_record.records import (
    COMPLETE,
    ERROR,
    INCOMPLETE,
    Exchange,
    response_from_dict,
    response_to_dict,
)
from forge_record.redact import redact_headers, redact_url
from forge_record.secrets import Redactor

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
        max_body: int = DEFAULT_MAX_BODY,
    ) -> None:
        self.dialect = dialect
        self.max_body = max_body
        self.exchange = Exchange(
            seq=seq,
            dialect=dialect.name,
            kind=dialect.kind(path),
            method=method,
            url=redact_url(url),
            started_at=time.time(),
            request_headers=redact_headers(headers),
            raw_request=body[:max_body],
        )
        if len(body) > max_body:
            self._flag("request_truncated")
        self._decoder: ResponseDecoder | None = None
        self._unencode: encodings.ChunkDecoder | None = None
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
        self._unencode = encodings.decoder_for(encoding, max_output=self.max_body)
        if self._unencode is None:
            self._flag(f"unknown_content_encoding:{encoding}")
            return
        try:
            self._decoder = self.dialect.response_decoder(content_type)
        except Exception as e:  # noqa: BLE001 - a decoder fault must not reach the agent
            self._decoder_failed(e)

    def tee(self, chunk: bytes) -> bytes:
        """mitmproxy's stream callable: hand the chunk on unchanged, keep a decoded copy."""
        if chunk and self._unencode is not None:
            try:
                plain = self._unencode(chunk)
            except encodings.TooLarge:
                self._stop_keeping("response_truncated")
                return chunk
            except Exception as e:  # noqa: BLE001
                self._flag("content_decode_error")
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
                    self._decoder_failed(e)
        return chunk

    def finish(self, error: str | None = None) -> Exchange:
        """End the capture: fold what arrived into the response and set the status."""
        self.finished = True
        ex = self.exchange
        ex.ended_at = time.time()
        ex.raw_response = b"".join(self._chunks)
        self._chunks = []
        if self._decoder is not None:
            try:
                ex.response = self._decoder.finish()
            except Exception as e:  # noqa: BLE001
                self._decoder_failed(e)
        complete = self._decoder is not None and self._decoder.complete
        if error is not None:
            self._flag(f"aborted:{error}")
        if ex.http_status is not None and ex.http_status >= 400 or (
            ex.response is not None and ex.response.error
        ):
            ex.status = ERROR
        elif error is not None or not complete:
            ex.status = INCOMPLETE
        else:
            ex.status = COMPLETE
        return ex

    def _stop_keeping(self, flag: str) -> None:
        """Past the size limit: keep what we have, let the rest through unrecorded."""
        self._flag(flag)
        log.warning("forge-record: %s body over %d bytes, stored truncated",
                    self.exchange.url, self.max_body)
        self._unencode = None

    def _decoder_failed(self, e: Exception) -> None:
        self._decoder = None
        self._flag("decode_error")
        log.warning("forge-record: decoder failed on %s, keeping raw bytes: %r", self.exchange.url, e)

    def _flag(self, flag: str) -> None:
        if flag not in self.exchange.flags:
            self.exchange.flags.append(flag)


def finalize(exchange: Exchange, redactor: Redactor | None = None) -> Exchange:
    """Parse the request body and redact secrets from everything that will be written.
    Runs in the writer thread, off the proxy's event loop."""
    dialect = dialect_named(exchange.dialect)
    if redactor is not None:
        exchange.raw_request = redactor.bytes(exchange.raw_request)
        exchange.raw_response = redactor.bytes(exchange.raw_response)
    if exchange.request is None and exchange.raw_request and dialect is not None:
        try:
            exchange.request = dialect.parse_request(exchange.raw_request)
            from_url = getattr(dialect, "from_url", None)  # Gemini: model, stream are in the URL
            if from_url is not None:
                from_url(exchange.request, exchange.url)
        except Exception as e:  # noqa: BLE001 - keep the raw body, flag the record
            exchange.flags.append("request_decode_error")
            log.warning("forge-record: cannot parse request to %s: %r", exchange.url, e)
    if redactor is not None:
        _redact_record(exchange, redactor)
    return exchange


def _redact_record(exchange: Exchange, redactor: Redactor) -> None:
    # The request was parsed from the redacted body; the response was folded from the
    # live stream, so its strings are redacted here, through its plain-dict form.
    if exchange.response is not None:
        exchange.response = response_from_dict(
            redactor.value(response_to_dict(exchange.response))
        )
    exchange.request_headers = redactor.value(exchange.request_headers)
    exchange.response_headers = redactor.value(exchange.response_headers)
