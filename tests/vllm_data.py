"""Real vLLM 0.32.0 answers captured by scripts/capture_vllm.py (tests/data/vllm), and
decoding them as the recorder does."""

from __future__ import annotations

from pathlib import Path

import orjson
from conftest import decode_chunks

from forge_record.decoders.openai_chat import DIALECT

DATA = Path(__file__).parent / "data" / "vllm"
SSE = "text/event-stream"


def body(name: str) -> bytes:
    return next(DATA.glob(f"{name}.[js][so]*")).read_bytes()


def decode(name: str, chunks: list[bytes] | None = None):
    streamed = name.startswith("chat_stream")
    chunks = chunks or [body(name)]
    return decode_chunks(DIALECT, SSE if streamed else "application/json", chunks)


def tokenized(name: str) -> list[int]:
    return orjson.loads((DATA / f"{name}.tokenize.json").read_bytes())["tokens"]
