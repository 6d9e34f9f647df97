"""A real vLLM for the engine tests: scripts/install-engine's venv serving its tiny model.

`vllm_url` starts it once per test run on a free loopback port (about a minute on two busy
cores, bounded) and stops its whole process tree at the end. Without the engine the tests
skip, saying to run scripts/install-engine; under CI=true they fail instead.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".cache" / "engine" / "bin" / "python"
MODEL = ROOT / ".cache" / "engine-model"
START_TIMEOUT = 420.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


@pytest.fixture(scope="session")
def vllm_url(tmp_path_factory):
    from conftest import require  # conftest registers this fixture: import it late

    require(PYTHON.exists() and (MODEL / "config.json").exists(),
            "no engine: run scripts/install-engine (a vLLM venv and its tiny model)")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
           "VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_NO_USAGE_STATS": "1"}
    argv = [str(PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(MODEL),
            "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port),
            # Codex's and Claude Code's prompts (instructions and tools) exceed the model's
            # 2048 positions; its random weights work past them as well (RoPE)
            "--max-model-len", "32768", "--hf-overrides", '{"max_position_embeddings": 32768}',
            "--dtype", "bfloat16", "--enforce-eager",
            "--max-num-seqs", "4", "--max-logprobs", "20", "--enable-auto-tool-choice",
            "--tool-call-parser", "hermes", "--distributed-executor-backend", "uni"]
    with open(log, "wb") as out:
        server = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not _healthy(url):
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"vLLM did not start; its log:\n{log.read_text()[-3000:]}")
            time.sleep(1)
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
