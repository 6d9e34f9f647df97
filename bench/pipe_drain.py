"""A stand-in for the store writer process (bench/forge_proc.py --pipe-only): it reads and
unpickles every item the recorder sends, as forge_record.writer_process does, and drops it.
What the proxy then pays is the hand-off alone: the sender thread, the pipe and a child
that reads it, without the child's folding, redaction and storage."""

from __future__ import annotations

import json
import sys

from forge_record.writer_process import read_items


def main() -> None:
    print("ready", flush=True)
    items = sum(1 for _ in read_items(sys.stdin.buffer))
    print(json.dumps({"written": items}), flush=True)


if __name__ == "__main__":
    main()
