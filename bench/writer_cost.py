"""The store writer process's work per exchange, alone: CPU by stage, no proxy, no sockets.

    python bench/writer_cost.py [--exchanges N] [--batch B] [--profile] [--shape NAME]

Captures the throughput benchmark's exchange (bench/load_client.py's request, the mock's
small stream, one SSE event per chunk through forge_record.capture.Capture, as mitmproxy
hands them over), then does to N copies of it what `forge-record run`'s store writer does,
stage by stage, timing each with time.process_time:
  hand-off   pickling the item into the pipe (the proxy's sender thread) and unpickling it
             (the writer process)
  fold       folding the response (finalize.fold)
  redact     the body redaction: raw bodies, then the folded record (finalize.finalize's
             other steps and the request parse are in `prepare`, which is the whole of it)
  prepare    finalize.finalize + ResponseChains.stitch: everything before the store
  store      Store.write in transactions of B exchanges (a temporary SQLite file)
The sum is what one exchange costs the writer process; bench/throughput.py measures the
same work inside the real process, with everything else around it. `--profile` prints
cProfile's top functions for prepare and store.
"""

from __future__ import annotations

import argparse
import cProfile
import pickle
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from load_client import request_bytes  # noqa: E402
from mock_server import _text_event, stream_plan  # noqa: E402

from forge_record import capture as capturing  # noqa: E402
from forge_record import finalize as finalizing  # noqa: E402
from forge_record.chain import ResponseChains  # noqa: E402
from forge_record.decoders import dialect_for, dialect_named  # noqa: E402
from forge_record.records import Session  # noqa: E402
from forge_record.redact.bodies import Redactor  # noqa: E402
from forge_record.store import open_store  # noqa: E402
from forge_record.store.batch import AddSession  # noqa: E402
from forge_record.store.items import AddExchange
from forge_record.writer_process import frame  # noqa: E402

SHAPES = {"small": "bench-20-0-10", "latency": "bench-500-0-40"}


def captured(seq: int, model: str) -> capturing.Exchange:
    """One exchange as the proxy hands it to the writer: bytes kept, nothing folded."""
    head, _, body = request_bytes("api.anthropic.com", model).partition(b"\r\n\r\n")
    headers = [tuple(line.split(": ", 1)) for line in head.decode().split("\r\n")[1:]]
    dialect = dialect_for("POST", "/v1/messages")
    capture = capturing.Capture(dialect, seq=seq, method="POST",
                                url="https://api.anthropic.com/v1/messages",
                                path="/v1/messages", headers=headers, body=body)
    capture.response_started(200, [("content-type", "text/event-stream; charset=utf-8"),
                                   ("transfer-encoding", "chunked")],
                             "text/event-stream; charset=utf-8", "")
    text, _, fragments = (int(n) for n in model.split("-")[1:])
    for i, event in enumerate(stream_plan(text, fragments, f"msg_bench{seq:020d}")):
        capture.tee(event if event is not None else _text_event(time.monotonic_ns() + i))
    capture.tee(b"")
    return capture.finish()


def measure(n: int, batch: int, model: str, profiler: cProfile.Profile | None) -> dict:
    redactor = Redactor(b"k" * 32)
    chains = ResponseChains()
    exchanges = [captured(seq, model) for seq in range(n)]
    took = dict.fromkeys(("hand-off", "fold", "redact", "prepare", "store"), 0.0)

    # Each stage alone, on copies (the pipe makes a copy too).
    copies = [pickle.loads(frame(AddExchange("s", ex))[4:]).exchange for ex in exchanges]
    t0 = time.process_time()
    for ex in copies:
        finalizing.fold(ex, dialect_named(ex.dialect))
    took["fold"] = time.process_time() - t0
    t0 = time.process_time()
    for ex in copies:
        redactor.bytes(ex.raw_request)
        redactor.bytes(ex.raw_response)
        finalizing._redact_record(ex, redactor)
    took["redact"] = time.process_time() - t0

    # The writer's path, in order.
    with tempfile.TemporaryDirectory(prefix="fr-writer-cost-") as tmp:
        store = open_store(f"sqlite:///{tmp}/bench.db")
        session = Session(id="bench-writer-cost", harness="claude-code", started_at=time.time())
        store.write([AddSession(session, None, time.time())])
        if profiler:
            profiler.enable()
        for start in range(0, n, batch):
            t0 = time.process_time()
            items = [pickle.loads(frame(AddExchange(session.id, ex))[4:])
                     for ex in exchanges[start:start + batch]]
            t1 = time.process_time()
            items = [AddExchange(i.session_id, chains.stitch(
                finalizing.finalize(i.exchange, redactor))) for i in items]
            t2 = time.process_time()
            store.write(items)
            t3 = time.process_time()
            took["hand-off"] += t1 - t0
            took["prepare"] += t2 - t1
            took["store"] += t3 - t2
        if profiler:
            profiler.disable()
        assert all(ex.status == "complete" for ex in store.iter_exchanges(session.id))
        store.close()
    ms = {stage: 1e3 * seconds / n for stage, seconds in took.items()}
    ms["total"] = ms["hand-off"] + ms["prepare"] + ms["store"]
    ms["kb"] = (len(exchanges[0].raw_request) + len(exchanges[0].raw_response)) / 1024
    return ms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exchanges", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=8, help="exchanges per transaction")
    ap.add_argument("--shape", choices=SHAPES, default="small")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    profiler = cProfile.Profile() if args.profile else None
    ms = measure(args.exchanges, args.batch, SHAPES[args.shape], profiler)
    print(f"{args.exchanges} exchanges ({SHAPES[args.shape]}, {ms.pop('kb'):.1f} KB of bodies "
          f"each), transactions of {args.batch}; CPU ms per exchange:")
    print("| " + " | ".join(ms) + " |")
    print("|" + "---:|" * len(ms))
    print("| " + " | ".join(f"{v:.3f}" for v in ms.values()) + " |")
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
