"""One exchange as it is being captured: the state the addon keeps per flow.

The addon feeds this object from mitmproxy's hooks; it never touches mitmproxy itself, so it
can be driven directly in tests. Everything here runs on the proxy's event loop and is kept
to the least that must happen there: the tee hands each chunk on, content-decodes a copy and
keeps it. Folding the response into a record and parsing the request happen later, in the
writer (`finalize`): a model's stream reaches the agent without waiting on a decoder, and
an HTTP call's record only needs its bytes, which are all kept. A WebSocket call is the
exception (`decode_live`): it ends at a terminal event that only its decoder can see.

Any exception from a decoder is swallowed and turned into a flag on the exchange: a decoder
fault must never reach the agent's stream, nor cost the exchange its raw bytes.
"""

from __future__ import annotations

import logging
import time

from forge_record import content_encoding
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
from forge_record.redact.bodies import Redactor, strings
from forge_record.redact.headers import redact_headers
from forge_record.redact.urls import redact_url

log = logging.getLogger("forge_record")

DEFAULT_MAX_BODY = 64 << 20  # per body: far above any model call seen, far below a bomb
PENDING = "pending"  # an exchange's status until finalize() has folded its response
_NO_DECODER = ("content_decode_error", "unknown_content_encoding:")
UPSTREAM_FAILED = "upstream_failed"  # the cause is in the `aborted:<cause>` flag beside it


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
            _flag(self.exchange, "request_truncated")
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
            _flag(ex, f"unknown_content_encoding:{encoding}")
            return
        if self.decode_live:
            self._decoder = _new_decoder(self.dialect, content_type, ex)

    def tee(self, chunk: bytes) -> bytes:
        """mitmproxy's stream callable: hand the chunk on unchanged, keep a decoded copy."""
        if chunk and self._unencode is not None:
            try:
                plain = self._unencode.decode(chunk)
            except content_encoding.TooLarge:
                self._stop_keeping("response_truncated")
                return chunk
            except Exception as e:  # noqa: BLE001
                _flag(self.exchange, "content_decode_error")
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
                    self._decoder = _decoder_failed(self.exchange, e)
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
            _flag(ex, f"aborted:{error}")
            if upstream_failed:
                _flag(ex, UPSTREAM_FAILED)
        if self.decode_live:
            _settle(ex, self._decoder)
        else:
            ex.status = PENDING
        return ex

    def _stop_keeping(self, flag: str) -> None:
        """Past the size limit: keep what we have, let the rest through unrecorded."""
        _flag(self.exchange, flag)
        log.warning("forge-record: %s body over %d bytes, stored truncated",
                    self.exchange.url, self.max_body)
        self._unencode = None


# --- the writer's side -------------------------------------------------------------------


def finalize(exchange: Exchange, redactor: Redactor | None = None) -> Exchange:
    """Fold the response, parse the request and redact secrets from everything that will be
    written. Runs in the writer, off the proxy's event loop."""
    dialect = dialect_named(exchange.dialect)
    if exchange.status == PENDING:
        fold(exchange, dialect)
    if redactor is not None:
        exchange.raw_request = redactor.bytes(exchange.raw_request)
        exchange.raw_response = redactor.bytes(exchange.raw_response)
    if exchange.request is None and exchange.raw_request and dialect is not None:
        try:
            exchange.request = dialect.parse_request(exchange.raw_request)
            dialect.from_url(exchange.request, exchange.url)  # Gemini: model, stream
        except Exception as e:  # noqa: BLE001 - keep the raw body, flag the record
            exchange.flags.append("request_decode_error")
            log.warning("forge-record: cannot parse request to %s: %r", exchange.url, e)
    if redactor is not None:
        _redact_record(exchange, redactor)
    return exchange


def fold(exchange: Exchange, dialect: Dialect | None) -> None:
    """Decode the kept response body into `exchange.response` and settle its status. The body
    is fed whole: every decoder gives the same record for any chunking of the same bytes."""
    decoder = None
    started = exchange.first_byte_at is not None  # no response at all: nothing to decode
    if started and dialect is not None and not any(f.startswith(_NO_DECODER)
                                                   for f in exchange.flags):
        content_type = exchange.response_headers.get("content-type", "")
        decoder = _new_decoder(dialect, content_type, exchange)
        if decoder is not None and exchange.raw_response:
            try:
                decoder.feed(exchange.raw_response)
            except Exception as e:  # noqa: BLE001
                decoder = _decoder_failed(exchange, e)
    _settle(exchange, decoder)


def _settle(ex: Exchange, decoder: ResponseDecoder | None) -> None:
    """The response record and the status, from the decoder that saw the whole body."""
    if decoder is not None:
        try:
            ex.response = decoder.finish()
        except Exception as e:  # noqa: BLE001
            decoder = _decoder_failed(ex, e)
    # Complete means the protocol's terminal event arrived. A connection that ended after it
    # (an agent that hangs up once it has `[DONE]`, before the last bytes of the transfer)
    # keeps its `aborted:` flag, but the record is whole.
    # An upstream that failed before responding is an error (the agent got none); one that
    # cut its body short (of its Content-Length, before the last chunk) left it incomplete,
    # even when what arrived parses whole.
    complete = decoder is not None and decoder.complete and UPSTREAM_FAILED not in ex.flags
    if ex.http_status is not None and ex.http_status >= 400 or (
        ex.response is not None and ex.response.error
    ) or (ex.http_status is None and UPSTREAM_FAILED in ex.flags):
        ex.status = ERROR
    elif not complete:
        ex.status = INCOMPLETE
    else:
        ex.status = COMPLETE


def _new_decoder(dialect: Dialect, content_type: str, ex: Exchange) -> ResponseDecoder | None:
    try:
        return dialect.response_decoder(content_type)
    except Exception as e:  # noqa: BLE001 - a decoder fault must not reach the agent
        return _decoder_failed(ex, e)


def _decoder_failed(ex: Exchange, e: Exception) -> None:
    """Flag the exchange; the decoder is dropped (returns None to put in its place)."""
    _flag(ex, "decode_error")
    log.warning("forge-record: decoder failed on %s, keeping raw bytes: %r", ex.url, e)
    return None


def _flag(ex: Exchange, flag: str) -> None:
    if flag not in ex.flags:
        ex.flags.append(flag)


def _redact_record(exchange: Exchange, redactor: Redactor) -> None:
    # The request was parsed from the redacted body; the response was folded from the
    # bytes as they came, so its strings are redacted here, through its plain-dict form
    # when any of them may hold a secret (a secret cut across stream events is whole only
    # here, so this cannot go by the raw body).
    if exchange.response is not None and redactor.may_hold_secrets(strings(exchange.response)):
        exchange.response = response_from_dict(
            redactor.value(response_to_dict(exchange.response))
        )
    exchange.request_headers = redactor.value(exchange.request_headers)
    exchange.response_headers = redactor.value(exchange.response_headers)
