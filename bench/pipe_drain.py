"""A stand-in for the store writer process (bench/forge_proc.py --pipe-only): it reads and
unpickles every item the recorder sends, as forge_record.writer_process does, and drops it.
What the proxy then pays is the hand-off alone: the sender thread, the pipe and a child
that reads it, without the child's folding, redaction and storage. With `--burn MS` it
also spins on the CPU for MS milliseconds per item: a writer that does no I/O and touches
little memory, to tell what any busy neighbour costs the proxy from what the writer's own
work does."""

from __future__ import annotations

import argparse
import json
import sys
import time

from forge_record.writer_process import GATHER, read_batches


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--burn", type=float, default=0.0, help="CPU ms to spin per item")
    args = ap.parse_args()
    print("ready", flush=True)
    items = 0
    for batch in read_batches(sys.stdin.fileno(), GATHER):
        items += len(batch)
        until = time.thread_time() + len(batch) * args.burn / 1000
        while time.thread_time() < until:
            pass
        print(f"ack {items}", flush=True)  # the proxy may forget them (writer_process)
    print(json.dumps({"written": items}), flush=True)


if __name__ == "__main__":
    main()
