"""Incremental Server-Sent Events framing, as the WHATWG spec defines it.

`SSEDecoder.feed(chunk)` takes response body bytes split anywhere (inside a line, inside a
`\\r\\n` pair, inside a multi-byte UTF-8 character) and returns the events completed so far;
`flush()` ends the stream and returns what is left. Bytes are buffered until a line ends and
each complete line is decoded on its own (UTF-8, bad bytes replaced), so a chunk boundary can
never corrupt text. Lines end only at `\\n`, `\\r` or `\\r\\n`; other Unicode line breaks stay
inside the line, as the spec requires.

Field rules: `:` starts a comment; one space after the colon is dropped; `data` lines are
joined with `\\n`; `event` names the next event (None when absent or empty); `id` and
`retry` are stream state that persists across events (the spec's "last event ID" and
"reconnection time"); a `retry` that is not all ASCII digits is ignored; unknown fields are
ignored; a block with no `data` line dispatches nothing. At EOF the spec drops an event that
no blank line ended, but a recorder keeps what arrived, so `flush()` dispatches it.

The framing is its own layer, `LineFramer`: bytes in, blocks of whole lines out (and
`lines_of` turns a block into its lines). `SSEDecoder` parses what it frames; a dialect whose
stream holds more than SSE (Gemini's raw JSON error lines) frames with it too and hands the
SSE lines to `SSEDecoder.lines` (a block of nothing else to `SSEDecoder.block`), so every
dialect splits lines the same way.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_CR = 0x0D
# The events almost every model API sends: an event line and a data line (Anthropic, OpenAI
# Responses) or a data line alone (Chat Completions, Gemini). A block made of nothing but one
# of these forms is read in one regex pass (`_tiled`); each pattern starts with a literal,
# which `re` searches for fast. Blocks reach it with every line ending made "\n" (`_text`).
_NAMED_EVENT = re.compile(r"event: ([^\n]*)\ndata: ([^\n]*)\n\n")
_DATA_EVENT = re.compile(r"data: ([^\n]*)\n\n")


class ServerSentEvent(NamedTuple):  # a tuple: made several times faster than a dataclass
    event: str | None = None
    data: str = ""
    id: str | None = None
    retry: int | None = None


class LineFramer:
    """Body bytes split anywhere in, blocks of whole lines out: each block ends with a line
    ending (`\\n`, `\\r` or `\\r\\n`), a `\\r\\n` cut between two chunks counts once."""

    def __init__(self) -> None:
        self._partial = bytearray()  # the start of a line whose end has not arrived yet
        self._after_cr = False  # the last chunk ended in \r: a leading \n next is its pair

    def feed(self, chunk: bytes) -> bytes:
        """The lines `chunk` completes (b"" when it completes none)."""
        if not chunk:
            return b""
        if self._after_cr:  # cleared by every chunk: only the very next byte can pair
            self._after_cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        end = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
        if end < 0:
            self._partial += chunk  # amortized O(1): a long line may come a byte at a time
            return b""
        if self._partial:
            self._partial += chunk[: end + 1]
            block = bytes(self._partial)
        else:  # the common case: the chunk starts a line, so nothing is copied twice
            block = chunk if end + 1 == len(chunk) else chunk[: end + 1]
        self._partial = bytearray(chunk[end + 1 :])
        # Only a \r that is the chunk's last byte can pair with the next chunk's first \n; one
        # with the start of a line after it has been paired with nothing already.
        self._after_cr = not self._partial and chunk[end] == _CR
        return block

    def flush(self) -> bytes:
        """End of stream: the unterminated last line, with a line ending (b"" if none)."""
        line = bytes(self._partial)
        self._partial = bytearray()
        self._after_cr = False
        return line + b"\n" if line else b""


def lines_of(block: bytes) -> list[str]:
    """The lines of a block `LineFramer` returned, without their endings."""
    lines = _text(block).split("\n")
    lines.pop()  # the block ends with a line ending: nothing follows it
    return lines


def _text(block: bytes) -> str:
    """`block` decoded, every line ending made "\\n": the same lines, split by one ending.
    Decoding the block at once equals decoding each line alone: a bad or cut UTF-8 sequence
    never spans a line ending (those are ASCII, and no replacement makes one), so it is
    replaced the same."""
    text = block.decode("utf-8", "replace")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


class SSEDecoder:
    def __init__(self) -> None:
        self._framer = LineFramer()
        self._first_line = True
        self._event: str | None = None
        self._data: list[str] = []
        self._id: str | None = None
        self._retry: int | None = None

    @property
    def pending(self) -> bool:
        """Whether data lines wait for the blank line that dispatches their event."""
        return bool(self._data)

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        block = self._framer.feed(chunk)
        return self.block(block) if block else []

    def flush(self) -> list[ServerSentEvent]:
        """End of stream: the unterminated last line counts, and so does an unended event."""
        line = self._framer.flush()
        events = self.block(line) if line else []
        last = self._dispatch()
        if last is not None:
            events.append(last)
        return events

    def block(self, block: bytes) -> list[ServerSentEvent]:
        """Apply `block`, whole lines each ending in \\n, \\r or \\r\\n (as `LineFramer`
        returns them); the events they complete."""
        text = _text(block)
        if not self._data and self._event is None and (events := self._tiled(text)):
            self._first_line = False
            return events
        lines = text.split("\n")
        lines.pop()  # the block ends with a line ending: nothing follows it
        return self.lines(lines)

    def lines(self, lines: list[str]) -> list[ServerSentEvent]:
        """Apply whole lines (without their endings); the events they complete."""
        if self._first_line and lines:
            self._first_line = False
            lines[0] = lines[0].removeprefix("\ufeff")  # the spec strips one leading BOM
        # The common lines are handled here, with the event being built in locals: this loop
        # runs for every line of every stream, and attribute and method lookups add up.
        events: list[ServerSentEvent] = []
        data, event = self._data, self._event
        for line in lines:
            if not line:
                if data:
                    events.append(ServerSentEvent(
                        event, data[0] if len(data) == 1 else "\n".join(data), self._id,
                        self._retry))
                    data = []
                event = None
            elif line[:5] == "data:":
                data.append(line[6:] if line[5:6] == " " else line[5:])
            elif line[:6] == "event:":
                event = (line[7:] if line[6:7] == " " else line[6:]) or None
            elif line[0] != ":":
                self._data, self._event = data, event
                self._field(line)
                data, event = self._data, self._event
        self._data, self._event = data, event
        return events

    def _tiled(self, text: str) -> list[ServerSentEvent] | None:
        """The events of `text` if it is simple events end to end, else None. Matches that
        do not overlap and add up to the text's length leave no gap between them. `text`
        holds no "\\r" (see `_text`), so "[^\\n]" cannot run past a line's end."""
        ident, retry = self._id, self._retry
        if text.startswith("event: "):
            named = _NAMED_EVENT.findall(text)
            if sum(len(name) + len(data) for name, data in named) + 16 * len(named) == len(text):
                return [ServerSentEvent(name or None, data, ident, retry) for name, data in named]
        elif text.startswith("data: "):
            datas = _DATA_EVENT.findall(text)
            if sum(map(len, datas)) + 8 * len(datas) == len(text):
                return [ServerSentEvent(None, data, ident, retry) for data in datas]
        return None

    def _field(self, line: str) -> None:
        name, _, value = line.partition(":")  # no colon: the whole line names the field
        if value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value or None
        elif name == "id":
            if "\0" not in value:
                self._id = value
        elif name == "retry":
            if value.isascii() and value.isdigit():
                self._retry = int(value)

    def _dispatch(self) -> ServerSentEvent | None:
        data, event = self._data, self._event
        self._data, self._event = [], None
        if not data:
            return None
        return ServerSentEvent(event, data[0] if len(data) == 1 else "\n".join(data), self._id,
                               self._retry)
