"""The project's mock as an engine (vLLM completions, SGLang), behind the recording proxy
with an engine set: for the fast engine tests."""

from __future__ import annotations

import contextlib
import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from forge_record.addons.proxy import InProcessProxy
from forge_record.addons.recorder import Recorder
from forge_record.finalize import finalize
from forge_record.mock import MockUpstream
from forge_record.trust import confdir


@contextlib.contextmanager
def engine_mock(**options: Any) -> Iterator[MockUpstream]:
    with MockUpstream(options=options) as mock:
        yield mock


@contextlib.contextmanager
def recording_proxy(upstream: str, tmp: Path, engine: str | None, top_logprobs: int = 0
                    ) -> Iterator[tuple[str, list]]:
    """(the proxy's URL, the exchanges it hands on) in reverse mode in front of `upstream`."""
    exchanges: list = []
    addon = Recorder(exchanges.append, record_any_host=True, engine=engine,
                     top_logprobs=top_logprobs)
    proxy = InProcessProxy(addon, mode=f"reverse:{upstream}", confdir=confdir(tmp))
    port = proxy.start()
    try:
        yield f"http://127.0.0.1:{port}", exchanges
    finally:
        proxy.stop()


def arrived(exchanges: list, n: int = 1) -> list:
    """The first `n` exchanges, folded as the writer would."""
    deadline = time.monotonic() + 10
    while len(exchanges) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    return [finalize(e) for e in exchanges]


def post(url: str, body: dict) -> bytes:
    request = urllib.request.Request(url, json.dumps(body).encode(),
                                     {"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        return response.read()


def sse_data(body: bytes) -> list[dict]:
    return [json.loads(line[6:]) for line in body.splitlines() if line.startswith(b"data: {")]
