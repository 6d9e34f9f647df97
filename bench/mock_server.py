"""A fast asyncio mock of the Anthropic Messages stream, for benchmarks only.

Why not forge_record.mock: that is a ThreadingHTTPServer made for tests (a thread per
connection, a flush per chunk); bench/mock_choice.py measures both and docs/BENCHMARKS.md
says why this one is used. This server runs one event loop in a process of its own.

Contract: `POST /v1/messages` (any prefix, any query) answers with a chunked
`text/event-stream` in the Messages API's event order: message_start, a text block of
TEXT deltas, a tool_use block of FRAGMENTS input_json_delta pieces (the first one empty, as
the API sends it), message_delta, message_stop. The shape comes from the request's `model`
field, `bench-TEXT-INTERVAL_US-FRAGMENTS` (e.g. `bench-500-2000-40`): one SSE event per HTTP
chunk; the k-th delta (text or JSON) is written at start + k * INTERVAL_US (0: back to back)
and every other event right after the one before it. Each text delta's text is ` t<ns>`,
the CLOCK_MONOTONIC time in ns at which it was written, so a client on the same machine can
compute every event's delivery latency. Anything else gets a 404.

Run alone: `python bench/mock_server.py` prints `listening <port>` and serves until its
stdin closes (Ctrl-D) or it is killed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import threading
import time

import orjson

_MODEL = re.compile(rb'"model"\s*:\s*"bench-(\d+)-(\d+)-(\d+)"')
_LENGTH = re.compile(rb"(?i)\r\ncontent-length:\s*(\d+)")
_CLOSE = re.compile(rb"(?i)\r\nconnection:\s*close")
_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
         b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n")
_NOT_FOUND = (b"HTTP/1.1 404 Not Found\r\ncontent-type: text/plain\r\ncontent-length: 9\r\n"
              b"\r\nnot found")
_TOOL_INPUT = orjson.dumps({
    "command": "cd /work/project && python -m pytest tests/test_parser.py -x -q --maxfail=1",
    "description": "Run the parser tests and stop at the first failure, to see what broke",
    "timeout": 120000,
}).decode()
_JSON_DELTA = b"input_json_delta"


def _event(name: str, data: dict) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def _fragments(text: str, n: int) -> list[str]:
    """`n` pieces of `text`: an empty one first (as the API sends it), then n-1 even cuts,
    which often fall inside a key."""
    if n <= 1:
        return [text]
    size, extra = divmod(len(text), n - 1)
    pieces, pos = [""], 0
    for i in range(n - 1):
        step = size + (i < extra)
        pieces.append(text[pos:pos + step])
        pos += step
    return pieces


def stream_plan(text_deltas: int, fragments: int, msg_id: str) -> list[bytes | None]:
    """The stream as a list of events; a text delta is None, made when it is sent (its
    text is the send time)."""
    message = {"id": msg_id, "type": "message", "role": "assistant", "model": "claude-bench",
               "content": [], "stop_reason": None, "stop_sequence": None,
               "usage": {"input_tokens": 1200, "cache_creation_input_tokens": 0,
                         "cache_read_input_tokens": 0, "output_tokens": 1}}
    tool = {"type": "tool_use", "id": "toolu_bench" + msg_id[-12:], "name": "Bash", "input": {}}
    plan: list[bytes | None] = [
        _event("message_start", {"type": "message_start", "message": message}),
        _event("content_block_start", {"type": "content_block_start", "index": 0,
                                       "content_block": {"type": "text", "text": ""}}),
        *[None] * text_deltas,
        _event("content_block_stop", {"type": "content_block_stop", "index": 0}),
        _event("content_block_start", {"type": "content_block_start", "index": 1,
                                       "content_block": tool}),
    ]
    for piece in _fragments(_TOOL_INPUT, fragments):
        plan.append(_event("content_block_delta", {
            "type": "content_block_delta", "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": piece}}))
    plan += [
        _event("content_block_stop", {"type": "content_block_stop", "index": 1}),
        _event("message_delta", {"type": "message_delta",
                                 "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                                 "usage": {"output_tokens": text_deltas + fragments}}),
        _event("message_stop", {"type": "message_stop"}),
    ]
    return plan


def _text_event(now_ns: int) -> bytes:
    # Built by hand: it is on the timed path, and the layout is what orjson would write.
    return (b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
            b'"delta":{"type":"text_delta","text":" t%d"}}\n\n' % now_ns)


def _paced(event: bytes | None) -> bool:
    """Deltas come one per interval (the first at once); other events follow at once."""
    return event is None or _JSON_DELTA in event


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def serve(self, counter: list[int]) -> None:
        try:
            while await self._one(counter):
                pass
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            self.writer.close()

    async def _one(self, counter: list[int]) -> bool:
        head = await self.reader.readuntil(b"\r\n\r\n")
        length = _LENGTH.search(head)
        body = await self.reader.readexactly(int(length.group(1))) if length else b""
        shape = _MODEL.search(body)
        if not head.startswith(b"POST ") or shape is None:
            self.writer.write(_NOT_FOUND)
            await self.writer.drain()
            return True
        counter[0] += 1
        text, interval_us, fragments = (int(g) for g in shape.groups())
        await self._stream(stream_plan(text, fragments, f"msg_bench{counter[0]:015d}"),
                           interval_us / 1e6)
        return not _CLOSE.search(head)

    async def _stream(self, plan: list[bytes | None], interval: float) -> None:
        loop = asyncio.get_running_loop()
        write, start, tick = self.writer.write, loop.time(), 0
        write(_HEAD)
        for event in plan:
            if interval and _paced(event):
                # Against a fixed schedule, so a late wake-up does not delay the rest.
                delay = start + tick * interval - loop.time()
                tick += 1
                if delay > 0:
                    await asyncio.sleep(delay)
            data = event if event is not None else _text_event(time.monotonic_ns())
            write(b"%x\r\n%s\r\n" % (len(data), data))
            if interval:
                await self.writer.drain()
        write(b"0\r\n\r\n")
        await self.writer.drain()


async def serve(port: int = 0, ready=None) -> None:
    counter = [0]

    async def on_connect(reader, writer):
        await _Connection(reader, writer).serve(counter)

    server = await asyncio.start_server(on_connect, "127.0.0.1", port, backlog=512)
    if ready is not None:
        ready(server.sockets[0].getsockname()[1])
    async with server:
        await server.serve_forever()


def _exit_on_eof() -> None:
    """The parent closes our stdin to stop us (bench/common.py's Child.stop)."""
    sys.stdin.read()
    os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()

    def ready(port: int) -> None:
        print(f"listening {port}", flush=True)

    threading.Thread(target=_exit_on_eof, daemon=True).start()
    try:
        asyncio.run(serve(args.port, ready))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
