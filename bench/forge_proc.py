"""`forge-record` itself, plus optional experiments, for the benchmarks' forge configurations.

    python bench/forge_proc.py [EXPERIMENT...] -- run --harness claude-code ... -- CMD

Without an experiment this is exactly the `forge-record` console script (forge_record.cli's
main), so the benchmarks measure the recorder as `forge-record run` wires it today, whatever
that wiring becomes. The experiments change one thing, to find out what a cost is due to;
their figures are diagnostics, never the headline:
  --switch-interval S   sys.setswitchinterval(S) (CPython's default is 0.005 s)
  --null-sink           the store writer drops every exchange: capture only
  --writer-thread       the store writer is a thread in the proxy's process (store.Writer)
                        instead of a process of its own, as before forge_record.writer_process
  --pickle-only         each exchange is pickled for the writer process on the event loop,
                        then dropped: what the hand-off costs without the pipe and the child
  --gc-freeze           gc.freeze() once the proxy listens: the cyclic GC then never walks
                        the objects that start-up made (SQLAlchemy, mitmproxy, ...)
  --writer-nice N       the store writer process runs at this niceness (nice -n N)
  --pythonpath DIR      run forge-record from DIR (its writer process too) instead of this
                        checkout: A/B two revisions in one interleaved run. DIR holds a
                        `forge_record` package laid out as installed, e.g. for revision REV:
                          git worktree add /tmp/rev REV && mkdir /tmp/rev-pkg &&
                          ln -s /tmp/rev/recorder /tmp/rev-pkg/forge_record &&
                          for d in store addons harness_shims; do
                            ln -s /tmp/rev/$d /tmp/rev/recorder/$d; done
                        then --variant rev=--pythonpath=/tmp/rev-pkg
  --pipe-only           the writer process reads and unpickles every item, then drops it
                        (bench/pipe_drain.py): the hand-off with its pipe and child, no store
  --burn MS             with --pipe-only: the child also spins MS ms of CPU per item
"""

from __future__ import annotations

import argparse
import sys


def _null_sink() -> None:
    from forge_record.writer_process import WriterProcess

    WriterProcess.submit_exchange = lambda self, *args, **kwargs: None


def _pickle_only() -> None:
    from forge_record.store.items import AddExchange
    from forge_record.writer_process import WriterProcess, frame

    WriterProcess.submit_exchange = lambda self, sid, ex: frame(AddExchange(sid, ex))


def _writer_thread() -> None:
    import functools

    from forge_record import config, writer_process
    from forge_record.chain import ResponseChains
    from forge_record.finalize import finalize
    from forge_record.paths import home
    from forge_record.store import Writer

    def thread_writer(url, *, redact_bodies=True, verbose=0):
        redactor = config.redactor(home()) if redact_bodies else None
        prepare, chains = functools.partial(finalize, redactor=redactor), ResponseChains()
        writer = Writer.open(url, prepare=lambda _sid, ex: chains.stitch(prepare(ex)))
        writer.ready = lambda: None  # opened already
        return writer

    writer_process.WriterProcess = thread_writer


def _pipe_only(burn: float) -> None:
    from pathlib import Path

    from forge_record import writer_process

    drain = str(Path(__file__).resolve().with_name("pipe_drain.py"))
    writer_process.child_command = lambda url, **_: [sys.executable, drain, "--burn", str(burn)]


def _writer_nice(n: int) -> None:
    from forge_record import writer_process

    command = writer_process.child_command
    writer_process.child_command = lambda url, **kw: ["nice", "-n", str(n), *command(url, **kw)]


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
    ap.add_argument("--writer-thread", action="store_true")
    ap.add_argument("--pickle-only", action="store_true")
    ap.add_argument("--gc-freeze", action="store_true")
    ap.add_argument("--pipe-only", action="store_true")
    ap.add_argument("--burn", type=float, default=0.0)
    ap.add_argument("--writer-nice", type=int)
    ap.add_argument("--pythonpath")
    args = ap.parse_args(argv[:split])
    if args.pythonpath:  # before anything imports forge_record
        import os

        sys.path.insert(0, args.pythonpath)
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (args.pythonpath, os.environ.get("PYTHONPATH")) if p)
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)
    if args.null_sink:
        _null_sink()
    if args.writer_thread:
        _writer_thread()
    if args.pickle_only:
        _pickle_only()
    if args.gc_freeze:
        _gc_freeze()
    if args.pipe_only:
        _pipe_only(args.burn)
    if args.writer_nice is not None:
        _writer_nice(args.writer_nice)
    from forge_record.cli import main as forge_record

    sys.argv = ["forge-record", *argv[split + 1:]]
    forge_record()


if __name__ == "__main__":
    main()
