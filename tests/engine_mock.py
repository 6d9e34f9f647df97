"""The project's mock as an engine (vLLM chat and completions, SGLang), behind the recording
proxy with an engine set: for the fast engine and bridge tests."""

from __future__ import annotations

import contextlib
import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from support import Arrivals

from forge_record.addons.proxy import InProcessProxy
from forge_record.addons.recorder import Recorder
from forge_record.addons.websocket import WebSocketRecorder
from forge_record.finalize import finalize
from forge_record.mock import MockUpstream
from forge_record.mock import engine as mock_engine
from forge_record.trust import confdir
from forge_record.writer_process import _preparer


@contextlib.contextmanager
def engine_mock(**options: Any) -> Iterator[MockUpstream]:
    with MockUpstream(options=options) as mock:
        yield mock


@contextlib.contextmanager
def scripted_engine(script: list[dict]) -> Iterator[MockUpstream]:
    """The mock's vLLM chat mode (mock/engine.py) answering `script`, one turn a call."""
    with MockUpstream(routes=list(mock_engine.ROUTES),
                      options={"engine_script": script}) as mock:
        yield mock


@contextlib.contextmanager
def bridging_proxy(host: str, engine_url: str, tmp: Path, top_logprobs: int = 0
                   ) -> Iterator[tuple[int, Arrivals, Recorder]]:
    """(port, exchanges, recorder): a proxy in reverse mode for `host`, WebSockets included,
    bridging its calls to the engine at `engine_url`."""
    exchanges = Arrivals()
    recorder = Recorder(exchanges.append, upstreams={host: engine_url}, record_any_host=True,
                        engine="vllm", engine_model="mock-engine", top_logprobs=top_logprobs)
    proxy = InProcessProxy(WebSocketRecorder(recorder), mode=f"reverse:https://{host}",
                           confdir=confdir(tmp))
    port = proxy.start()
    try:
        yield port, exchanges, recorder
    finally:
        proxy.stop()


def prepared(exchanges: list) -> list:
    """Finalized, stitched and joined as the writer process does it, in queue order."""
    prepare = _preparer(redact_bodies=False)
    return [prepare("session", e) for e in exchanges]


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
