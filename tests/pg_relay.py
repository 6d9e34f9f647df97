"""A TCP relay in front of the real Postgres, to make it go away, come back or go silent
while a recorder writes (tests/test_spool.py, tests/test_serve_replicas.py)."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from forge_record.store import open_store


class Relay:
    """A TCP relay on a fixed local port to the Postgres server; stop() refuses and drops
    every connection, start() answers again on the same port, silence() keeps every
    connection open and takes new ones but forwards nothing (a network path that drops
    packets instead of refusing them)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self._listener: socket.socket | None = None
        self._open: list[socket.socket] = []
        self.silent = False

    def silence(self) -> None:
        self.silent = True

    def start(self) -> None:
        self.silent = False
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        if self._listener is not None:
            try:  # close() alone would not wake the accept() in progress: it keeps listening
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()
            self._listener = None
        for sock in self._open:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        self._open = []

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            if self.silent:
                self._open.append(client)
                threading.Thread(target=self._pump, args=(client, None), daemon=True).start()
                continue
            upstream = socket.create_connection(self.target)
            self._open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket | None) -> None:
        try:
            while data := src.recv(65536):
                if dst is not None and not self.silent:
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst) if dst is not None else (src,):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


@pytest.fixture
def relayed(new_database):
    """(store URL through the relay, the relay), the relay started, the store migrated."""
    direct = new_database()
    host_port = direct.split("@", 1)[1].split("/", 1)[0]
    host, port = host_port.rsplit(":", 1)
    relay = Relay((host, int(port)))
    relay.start()
    url = direct.replace(host_port, f"127.0.0.1:{relay.port}")
    open_store(url).close()
    yield url, relay
    relay.stop()


def wait_for(condition, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def wait_for_value(get, expected, what: str, timeout: float = 30) -> None:
    """wait_for(get() == expected), and on timeout say what get() last was."""
    deadline = time.monotonic() + timeout
    while (seen := get()) != expected:
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {seen!r}"
        time.sleep(0.05)
