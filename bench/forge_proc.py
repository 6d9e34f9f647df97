"""`forge-record` itself, plus optional experiments, for the benchmarks' forge configurations.

    python bench/forge_proc.py [EXPERIMENT...] -- run --harness claude-code ... -- CMD

Without an experiment this is exactly the `forge-record` console script (forge_record.cli's
main), so the benchmarks measure the recorder as `forge-record run` wires it today, whatever
that wiring becomes. The experiments change one thing, to find out what a cost is due to;
their figures are diagnostics, never the headline:
  --switch-interval S   sys.setswitchinterval(S) (CPython's default is 0.005 s)
  --null-sink           the store writer drops every exchange: capture and decode only
  --defer-sink          exchanges are queued for the writer one event-loop turn later
  --linger-ms MS        exchanges are queued for the writer MS milliseconds later
  --gc-freeze           gc.freeze() once the proxy listens: the cyclic GC then never walks
                        the objects that start-up made (SQLAlchemy, mitmproxy, ...)
  --fold-after-send     each chunk is decoded on the event loop's next turn, after mitmproxy
                        has sent it on (the capture folds what is pending before finishing)
"""

from __future__ import annotations

import argparse
import asyncio
import sys


def _null_sink() -> None:
    from forge_record.store import Writer

    Writer.submit_exchange = lambda self, *args, **kwargs: None


def _defer_sink(delay: float | None) -> None:
    """Queue each exchange later (None: on the event loop's next turn), from the loop."""
    from forge_record.store import Writer

    submit = Writer.submit_exchange

    def deferred(self, *args, **kwargs):
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return submit(self, *args, **kwargs)
        if delay is None:
            loop.call_soon(lambda: submit(self, *args, **kwargs))
        else:
            loop.call_later(delay, lambda: submit(self, *args, **kwargs))

    Writer.submit_exchange = deferred


def _fold_after_send() -> None:
    from forge_record.addons.recorder import Recorder

    responseheaders = Recorder.responseheaders

    def deferring(self, flow):
        responseheaders(self, flow)
        tee = flow.response.stream
        capture = getattr(tee, "__self__", None)
        if capture is None:
            return  # not recorded: passed through as is
        pending: list[bytes] = []

        def fold() -> None:
            while pending:
                tee(pending.pop(0))

        def stream(chunk: bytes) -> bytes:
            pending.append(chunk)
            if len(pending) == 1:
                asyncio.get_running_loop().call_soon(fold)
            return chunk

        finish = capture.finish
        capture.finish = lambda error=None: (fold(), finish(error))[1]
        flow.response.stream = stream

    Recorder.responseheaders = deferring


def _gc_freeze() -> None:
    import gc

    from forge_record.addons.proxy import InProcessProxy

    start = InProcessProxy.start

    def start_then_freeze(self, *args, **kwargs):
        port = start(self, *args, **kwargs)
        gc.collect()
        gc.freeze()
        return port

    InProcessProxy.start = start_then_freeze


def main() -> None:
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--switch-interval", type=float)
    ap.add_argument("--null-sink", action="store_true")
    ap.add_argument("--defer-sink", action="store_true")
    ap.add_argument("--linger-ms", type=float)
    ap.add_argument("--fold-after-send", action="store_true")
    ap.add_argument("--gc-freeze", action="store_true")
    args = ap.parse_args(argv[:split])
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)
    if args.null_sink:
        _null_sink()
    if args.defer_sink or args.linger_ms is not None:
        _defer_sink(None if args.linger_ms is None else args.linger_ms / 1000)
    if args.fold_after_send:
        _fold_after_send()
    if args.gc_freeze:
        _gc_freeze()
    from forge_record.cli import main as forge_record

    sys.argv = ["forge-record", *argv[split + 1:]]
    forge_record()


if __name__ == "__main__":
    main()
