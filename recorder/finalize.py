"""The writer's half of an exchange's life: from the bytes the proxy kept to the record.

`finalize` runs in the writer process (store.Writer's `prepare`), off the proxy's event
loop: it folds a PENDING exchange's response through its dialect's decoder, parses the
request, and redacts secrets from everything that will be written. `settle` is also what
capture uses for a WebSocket call, whose decoder ran live.

Any exception from a decoder is swallowed and turned into a flag on the exchange: the raw
bytes are the record of last resort.
"""

from __future__ import annotations

import logging

from forge_record import tokens_check
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

log = logging.getLogger("forge_record")

PENDING = "pending"  # an exchange's status until finalize() has folded its response
UPSTREAM_FAILED = "upstream_failed"  # the cause is in the `aborted:<cause>` flag beside it
_NO_DECODER = ("content_decode_error", "unknown_content_encoding:")

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
    tokens_check.check(exchange)  # an engine's tokens: missing or disagreeing
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
        decoder = new_decoder(dialect, content_type, exchange)
        if decoder is not None and exchange.raw_response:
            try:
                decoder.feed(exchange.raw_response)
            except Exception as e:  # noqa: BLE001
                decoder = decoder_failed(exchange, e)
    settle(exchange, decoder)


def settle(ex: Exchange, decoder: ResponseDecoder | None) -> None:
    """The response record and the status, from the decoder that saw the whole body."""
    if decoder is not None:
        try:
            ex.response = decoder.finish()
        except Exception as e:  # noqa: BLE001
            decoder = decoder_failed(ex, e)
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


def new_decoder(dialect: Dialect, content_type: str, ex: Exchange) -> ResponseDecoder | None:
    try:
        return dialect.response_decoder(content_type)
    except Exception as e:  # noqa: BLE001 - a decoder fault must not reach the agent
        return decoder_failed(ex, e)


def decoder_failed(ex: Exchange, e: Exception) -> None:
    """Flag the exchange; the decoder is dropped (returns None to put in its place)."""
    flag(ex, "decode_error")
    log.warning("forge-record: decoder failed on %s, keeping raw bytes: %r", ex.url, e)
    return None


def flag(ex: Exchange, name: str) -> None:
    if name not in ex.flags:
        ex.flags.append(name)


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
