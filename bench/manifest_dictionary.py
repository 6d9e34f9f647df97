"""Train the zstd dictionary every manifest stream starts from (store/manifests-1.dict).

    .venv/bin/python bench/manifest_dictionary.py OUT [--id N]

A manifest stream's first pieces have nothing earlier in their stream to refer to, and
`serve` starts many streams: a segment for every rollout, and one for every call of a
rollout whose encoder the writer let go (store.batch). Started from a dictionary of what
manifests share (their keys, dialect names, header names, the shape of blob names, usage),
a first piece takes a quarter of its bytes (docs/BENCHMARKS.md).

The samples are the manifests of bench/gen_session.py's Claude Code sessions, several
harness versions, and of engine rollouts with token ids (bench/storage.py's), written
through a throwaway store. A shipped dictionary never changes: frames name it by its id, and
stores hold streams made with it. Train a new one under a new id and file name, and keep the
old file for reading (store.compression.TRAINED).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parent))

import storage  # noqa: E402

from forge_record.store import open_store  # noqa: E402
from forge_record.store.reader import segment_pieces  # noqa: E402

SIZE = 4096


def samples() -> list[bytes]:
    out: list[bytes] = []
    with tempfile.TemporaryDirectory() as tmp, open_store(f"sqlite:///{tmp}/s.db") as store:
        sessions = [storage.exchanges(40, seed, harness=seed % 4)[0] for seed in range(8)]
        sessions += [[dataclasses.replace(ex, dialect="openai.chat")
                      for ex in storage.token_session(40, seed)] for seed in range(2)]
        for n, sent in enumerate(sessions):
            storage.record(store, f"s{n}", sent)
            with store.reading("samples") as conn:
                pieces = segment_pieces(conn, f"s{n}", 0)
            out += [pieces[seq] for seq in sorted(pieces)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--id", type=int, default=0x46520001,
                        help="the id frames name it by (zstd leaves ids from 32768 to private use)")
    args = parser.parse_args()
    trained = zstandard.train_dictionary(SIZE, samples(), dict_id=args.id, level=9)
    args.out.write_bytes(trained.as_bytes())
    print(f"{args.out}: {len(trained.as_bytes())} bytes, id {trained.dict_id()}")


if __name__ == "__main__":
    main()
