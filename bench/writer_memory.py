"""The store writer process's peak memory on a long session of large requests.

    python bench/writer_memory.py [--exchanges N] [--request-kb K]

Starts a real WriterProcess on a temporary SQLite store and submits N Anthropic exchanges
whose requests each carry K KB of text the writer cannot deduplicate (the default, 2,400
of ~105 KB, is the session that took the writer to 424 MB before its queue, its spiller
and the proxy's hold on unacknowledged frames were bounded), as fast as the proxy can.
Prints the child's peak RSS (VmHWM, polled), where the items went, and how long close()
took. Peak RSS must not grow with N (docs/RELIABILITY.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

STREAM = (
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":'
    b'"message","role":"assistant","model":"claude-x","content":[],"usage":{"input_tokens":3,'
    b'"output_tokens":1}}}\n\n'
    b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
    b'"content_block":{"type":"text","text":""}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"hello"}}\n\n'
    b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
    b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},'
    b'"usage":{"output_tokens":2}}\n\n'
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)


def exchange(seq: int, request_kb: int):
    from forge_record.records import Exchange

    text = os.urandom(request_kb << 9).hex()  # not compressible, not deduplicated
    body = ('{"model":"claude-x","max_tokens":9,"stream":true,"messages":[{"role":"user",'
            f'"content":"{text}"}}]}}').encode()
    return Exchange(dialect="anthropic.messages", seq=seq, url="https://api.anthropic.com/v1/"
                    "messages", status="pending", http_status=200, first_byte_at=1.0,
                    raw_request=body, raw_response=STREAM,
                    response_headers={"content-type": "text/event-stream"})


def peak_rss_mb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM"):
            return int(line.split()[1]) // 1024
    return 0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--exchanges", type=int, default=2400)
    ap.add_argument("--request-kb", type=int, default=100)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="forge-writer-memory-"))
    os.environ["FORGE_RECORD_HOME"] = str(work / "home")
    from forge_record.records import Session
    from forge_record.writer_process import WriterProcess

    writer = WriterProcess(f"sqlite:///{work / 'traces.db'}")
    writer.ready()
    pid, peak = writer._proc.pid, [0]

    def poll() -> None:
        while True:
            try:
                peak[0] = max(peak[0], peak_rss_mb(pid))
            except (OSError, ValueError):
                return
            time.sleep(0.1)

    threading.Thread(target=poll, daemon=True).start()
    writer.submit_session(Session(id="s"))
    for seq in range(args.exchanges):
        writer.submit_exchange("s", exchange(seq, args.request_kb))
    writer.submit_end("s", time.time(), 0)
    started = time.monotonic()
    writer.close()
    took = time.monotonic() - started
    time.sleep(0.3)
    print(f"exchanges={args.exchanges} request_kb={args.request_kb} "
          f"writer_peak_rss_mb={peak[0]} written={writer.written} "
          f"proxy_spooled={writer.spooled} child_overflowed={writer.overflowed} "
          f"replayed={writer.replayed} spool_left={writer.spool_left} close_s={took:.1f}")


if __name__ == "__main__":
    sys.exit(main())
