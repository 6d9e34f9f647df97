"""The throughput benchmark's load: N concurrent streaming clients on raw asyncio sockets.

    python bench/load_client.py --url URL --exchanges 2000 --concurrency 20 --model bench-20-0-10
        [--tls-host api.anthropic.com --cafile CA]   (forward mode: CONNECT, then TLS)

Each of `concurrency` workers keeps one keep-alive connection and makes streamed Messages
calls until `exchanges` have been made in all; each response (chunked SSE) is read to its
last chunk. Raw sockets keep the client's own cost per exchange small, so the proxy, not the
client, is what limits the rate. Prints one JSON line: exchanges, errors, seconds (first
request to last response), sse_bytes (response bodies, without chunk framing).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import ssl
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import DUMMY_KEY  # noqa: E402


def request_bytes(host: str, model: str, prefix: str = "") -> bytes:
    body = orjson.dumps({
        "model": model, "max_tokens": 1024, "stream": True,
        "system": "You are a coding agent. Keep answers short.",
        "messages": [{"role": "user", "content": "List the files, then run the tests. " * 8}],
    })
    head = (f"POST {prefix}/v1/messages HTTP/1.1\r\nhost: {host}\r\n"
            f"content-type: application/json\r\naccept: text/event-stream\r\n"
            f"x-api-key: {DUMMY_KEY}\r\n"
            f"anthropic-version: 2023-06-01\r\ncontent-length: {len(body)}\r\n\r\n")
    return head.encode() + body


async def _read_chunked(reader: asyncio.StreamReader) -> int:
    size_total = 0
    while True:
        line = await reader.readuntil(b"\r\n")
        size = int(line.split(b";", 1)[0], 16)
        if size == 0:
            await reader.readuntil(b"\r\n")  # the empty trailer section
            return size_total
        await reader.readexactly(size + 2)
        size_total += size


async def _open(args) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    url = urlsplit(args.url)
    reader, writer = await asyncio.open_connection("127.0.0.1", url.port)
    if args.tls_host:
        auth = ""  # forge-record's proxy asks for the run's credentials (addons/access.py)
        if url.username:
            token = base64.b64encode(f"{url.username}:{url.password}".encode()).decode()
            auth = f"proxy-authorization: Basic {token}\r\n"
        writer.write(f"CONNECT {args.tls_host}:443 HTTP/1.1\r\nhost: {args.tls_host}:443\r\n"
                     f"{auth}\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")
        if b" 200" not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(f"CONNECT refused: {head[:60]!r}")
        context = ssl.create_default_context(cafile=args.cafile)
        await writer.start_tls(context, server_hostname=args.tls_host)
    return reader, writer


class _Load:
    def __init__(self, args) -> None:
        self.args = args
        self.left = args.exchanges
        self.done = self.errors = self.sse_bytes = 0
        url = urlsplit(args.url)  # reverse mode: its path is forge-record's secret prefix
        self.request = request_bytes(args.tls_host or url.netloc, args.model,
                                     "" if args.tls_host else url.path.rstrip("/"))

    async def worker(self) -> None:
        reader, writer = await _open(self.args)
        try:
            while self.left > 0:
                self.left -= 1
                writer.write(self.request)
                head = await reader.readuntil(b"\r\n\r\n")
                n = await _read_chunked(reader)
                if not head.startswith(b"HTTP/1.1 200"):
                    self.errors += 1
                self.done += 1
                self.sse_bytes += n
        finally:
            writer.close()

    async def run(self) -> dict:
        start = time.monotonic()
        results = await asyncio.gather(*(self.worker() for _ in range(self.args.concurrency)),
                                       return_exceptions=True)
        seconds = time.monotonic() - start
        failures = [repr(r) for r in results if isinstance(r, BaseException)]
        return {"exchanges": self.done, "errors": self.errors + len(failures),
                "seconds": seconds, "sse_bytes": self.sse_bytes, "failures": failures[:3]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True, help="the proxy or base URL the agent is given")
    ap.add_argument("--exchanges", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=20)
    ap.add_argument("--model", default="bench-20-0-10")
    ap.add_argument("--tls-host")
    ap.add_argument("--cafile")
    args = ap.parse_args()
    print(orjson.dumps(asyncio.run(_Load(args).run())).decode(), flush=True)


if __name__ == "__main__":
    main()
