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


def main() -> None:
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--switch-interval", type=float)
    ap.add_argument("--null-sink", action="store_true")
    ap.add_argument("--defer-sink", action="store_true")
    ap.add_argument("--linger-ms", type=float)
    args = ap.parse_args(argv[:split])
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)
    if args.null_sink:
        _null_sink()
    if args.defer_sink or args.linger_ms is not None:
        _defer_sink(None if args.linger_ms is None else args.linger_ms / 1000)
    from forge_record.cli import main as forge_record

    sys.argv = ["forge-record", *argv[split + 1:]]
    forge_record()


if __name__ == "__main__":
    main()
