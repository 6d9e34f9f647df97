"""A `forge-record serve` process for tests: started on a free loopback port, its control API
called with the standard library (forge_record.client), stopped with SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

from forge_record.client import GatewayClient

ADMIN = "admin-token-for-tests-only-0000"
UPSTREAM_KEY = "sk-upstream-dummy-key-never-real-1111"
_LISTENING = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")

started: list[Served] = []  # this test's, whose logs a failure shows (conftest)


class Served:
    def __init__(self, tmp: Path, store: str, upstreams: list[str], *,
                 extra: tuple[str, ...] = (), upstream_key: bool = True,
                 env: dict[str, str] | None = None) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        admin = tmp / "admin-token"
        admin.write_text(ADMIN + "\n")
        argv = [sys.executable, "-m", "forge_record", "serve", "--store", store,
                "--listen", "127.0.0.1:0", "--admin-token-file", str(admin), *extra]
        if upstream_key:
            key = tmp / "upstream-key"
            key.write_text(UPSTREAM_KEY)
            argv += ["--upstream-key-file", str(key)]
        for url in upstreams:
            argv += ["--upstream", url]
        self.proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
        self.log: list[str] = []
        self.url = ""
        started.append(self)
        self.port = self._wait_listening()
        self.url = f"http://127.0.0.1:{self.port}"
        self.client = GatewayClient(self.url, ADMIN)
        self._reader = threading.Thread(target=self._read_rest, daemon=True)
        self._reader.start()

    def _wait_listening(self) -> int:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)
            if match := _LISTENING.search(line):
                return int(match.group(1))
        self.proc.wait()
        raise RuntimeError("serve did not start: " + "".join(self.log))

    def _read_rest(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)

    def stop(self, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._reader.join(5)
        return code

    def __enter__(self) -> Served:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
