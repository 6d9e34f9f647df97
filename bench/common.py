"""Shared pieces of the benchmarks: child processes, CPU accounting, statistics, machine notes.

Every child (the mock, each proxy, the load client) is a separate Python process started with
this interpreter, so no two of them share a GIL. A child announces itself with one line on
stdout (`listening <port>`); every wait on a child has a deadline, and `Children` ends the
ones it started (by pid) however the benchmark exits.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import select
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
DUMMY_KEY = "sk-ant-bench-dummy-key"  # never a real key
_CLK_TCK = os.sysconf("SC_CLK_TCK")


class Child:
    """A child process that speaks a line protocol on stdin/stdout."""

    def __init__(self, args: list[str], name: str, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=None, text=True, bufsize=1, cwd=ROOT, env=env,
        )
        self.pid = self.proc.pid

    def read_line(self, timeout: float) -> str:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError(f"{self.name} said nothing within {timeout:.0f}s")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name} exited with code {self.proc.wait()}")
        return line.strip()

    def expect(self, word: str, timeout: float) -> list[str]:
        """Wait for a line starting with `word`; return the words after it."""
        deadline = time.monotonic() + timeout
        while True:
            parts = self.read_line(max(0.1, deadline - time.monotonic())).split()
            if parts and parts[0] == word:
                return parts[1:]

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def cpu_seconds(self) -> float:
        """user + system CPU of the whole process (all threads), from /proc/<pid>/stat."""
        return _stat(self.pid)[1]

    def tree_cpu_seconds(self) -> float:
        """The same for the process and every process it started that is still running
        (forge-record's store writer, the agent it launched)."""
        return tree_cpu_seconds(self.pid)

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()  # EOF is the polite way to ask a child to stop
            except OSError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def _stat(pid: int) -> tuple[int, float]:
    """(parent pid, user + system CPU seconds) of a process, 0 CPU if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0, 0.0
    fields = stat.rsplit(")", 1)[1].split()  # the command name may hold spaces
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _CLK_TCK  # ppid, utime+stime


def tree_cpu_seconds(pid: int) -> float:
    """user + system CPU of a process and of every process it started that still runs."""
    return sum(_stat(p)[1] for p in descendants(pid) | {pid})


def descendants(pid: int) -> set[int]:
    parents = {int(d.name): _stat(int(d.name))[0] for d in Path("/proc").iterdir()
               if d.name.isdigit()}
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier}
        found |= frontier
    return found


class Children:
    """Starts children and stops all of them on exit, newest first."""

    def __init__(self) -> None:
        self._started: list[Child] = []

    def start(self, args: list[str], name: str, env: dict[str, str] | None = None) -> Child:
        child = Child(args, name, env)
        self._started.append(child)
        return child

    def __enter__(self) -> Children:
        return self

    def __exit__(self, *exc: object) -> None:
        for child in reversed(self._started):
            child.stop()


PG_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"  # the local test server


@contextlib.contextmanager
def postgres_database(name: str) -> Iterator[tuple[str, Callable[[], float]]]:
    """A new database `name` on the local Postgres, dropped afterwards: (its URL, a function
    giving the CPU seconds its server processes have used so far, from /proc). A store's
    work on the server (planning and running its statements) is CPU that SQLite spends in
    the writer's own process; a benchmark adds it to be fair to both."""
    import sqlalchemy as sa

    admin = sa.create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        with admin.connect() as conn:
            def server_cpu() -> float:
                pids = conn.scalars(sa.text("SELECT pid FROM pg_stat_activity WHERE datname = "
                                            ":name"), {"name": name})
                return sum(tree_cpu_seconds(pid) for pid in pids)

            yield PG_ADMIN.rsplit("/", 1)[0] + f"/{name}", server_cpu
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@contextlib.contextmanager
def bench_store(directory: str, postgres: bool) -> Iterator[tuple[str, Callable[[], float]]]:
    """A fresh store: (its URL, a function giving the CPU seconds its server has used): a
    SQLite file in `directory` (no server: 0), or a new Postgres database, dropped after."""
    if not postgres:
        yield f"sqlite:///{directory}/store.db", lambda: 0.0
        return
    with postgres_database(f"forge_bench_{os.getpid()}") as made:
        yield made


def start_mock(children: Children) -> tuple[Child, str]:
    mock = children.start([str(BENCH / "mock_server.py")], "mock")
    port = int(mock.expect("listening", 20)[0])
    return mock, f"http://127.0.0.1:{port}"


@dataclass
class Proxy:
    """A proxy under test. bare/buffered: bench/proxy_server.py; forge: `forge-record run`
    itself (through bench/forge_proc.py), launching bench/hold.py as its agent."""
    child: Child
    kind: str
    port: int
    ca: str | None  # the CA certificate to trust (forward mode)
    store: str | None = None  # forge: its store URL
    stored: int = 0  # forge: model calls known to be stored so far
    url: str = ""  # what a client is given: forge's carries the run's secret (hold.py)

    def __post_init__(self) -> None:
        self.url = self.url or f"http://127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float:
        """All of the proxy's processes: forge-record's store writer included."""
        return self.child.tree_cpu_seconds()

    def proxy_cpu_seconds(self) -> float:
        """The process that runs the proxy alone."""
        return self.child.cpu_seconds()

    def drain(self, expected: int, timeout: float = 120.0) -> float:
        """Wait until the store holds `expected` model calls in all; return the seconds
        waited (the writer's lag behind the clients). No-op for the bare proxies."""
        if self.store is None or expected <= self.stored:
            return 0.0
        from forge_record.store import open_store

        start = time.monotonic()
        store = open_store(self.store)
        try:
            while True:
                found = store.list_sessions(1)
                self.stored = found[0]["calls"] if found else 0
                if self.stored >= expected:
                    return time.monotonic() - start
                if time.monotonic() - start > timeout:
                    raise TimeoutError(f"the store holds {self.stored} of {expected} calls")
                time.sleep(0.02)
        finally:
            store.close()


def start_proxy(children: Children, kind: str, mode: str, upstream: str, tmp: Path,
                name: str, extra: tuple[str, ...] = ()) -> Proxy:
    """Start a proxy named `name` (its files go under `tmp`) and wait until it listens.
    `extra`: bench/forge_proc.py experiment arguments (forge only)."""
    if kind != "forge":
        confdir = tmp / f"{name}-ca"
        child = children.start([str(BENCH / "proxy_server.py"), "--kind", kind, "--mode", mode,
                                "--upstream", upstream, "--confdir", str(confdir)], name)
        port = int(child.expect("listening", 60)[0])
        ca = str(confdir / "mitmproxy-ca-cert.pem") if mode == "forward" else None
        return Proxy(child, kind, port, ca)
    store = f"sqlite:///{tmp / name}.db"
    env = {k: v for k, v in os.environ.items()
           if k.upper() not in _ROUTING_VARS and not k.startswith("FORGE_RECORD_")}
    env["FORGE_RECORD_HOME"] = str(tmp / f"{name}-home")
    run = ["run", "--harness", "claude-code", "--mode", mode, "--store", store]
    if mode == "reverse":
        env["ANTHROPIC_BASE_URL"] = upstream
    else:
        run += ["--upstream", f"api.anthropic.com={upstream}"]
    child = children.start([str(BENCH / "forge_proc.py"), *extra, "--", *run, "--",
                            sys.executable, str(BENCH / "hold.py")], name, env=env)
    port, ca, url = child.expect("listening", 60)
    return Proxy(child, kind, int(port), None if ca == "-" else ca, store, url=url)


_ROUTING_VARS = {"ANTHROPIC_BASE_URL", "HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY"}
_NOTHING_STORED = {"--null-sink", "--pickle-only", "--pipe-only"}


def stores(extra: tuple[str, ...] | list[str]) -> bool:
    """Whether forge with these bench/forge_proc.py experiments writes the store (so that
    its CPU is read only once the store holds every exchange)."""
    return not _NOTHING_STORED & set(extra)


def renice(increment: int) -> None:
    """Change this process's priority (children inherit it). On a machine shared with other
    work, a negative value (root only) keeps the scheduler's noise out of the figures."""
    if increment:
        try:
            os.nice(increment)
        except PermissionError:
            print(f"bench: cannot renice by {increment} (not root); running as is",
                  file=sys.stderr)


@contextlib.contextmanager
def realtime(priority: int) -> Iterator[None]:
    """Within the block, run this process (and the children it starts) under SCHED_FIFO at
    `priority`, so other work on the machine cannot delay them (root only). Meant for the
    latency benchmark, whose processes mostly sleep; a CPU-bound process under SCHED_FIFO
    would starve the machine (Linux still leaves others 5% of each second)."""
    if not priority:
        yield
        return
    before = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except PermissionError:
        print("bench: cannot use SCHED_FIFO (not root); running as is", file=sys.stderr)
    try:
        yield
    finally:
        os.sched_setscheduler(0, *before)


# --- statistics ------------------------------------------------------------------------


def median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100), linear between the nearest ranks."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def ratio(value: float, base: float) -> float:
    """value / base, or NaN when the base is too close to zero to divide by."""
    if math.isnan(value) or math.isnan(base) or abs(base) < 1e-9:
        return math.nan
    return value / base


def fmt(value: float, digits: int = 2) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.{digits}f}"


# --- machine notes ---------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine_notes() -> dict[str, str | int]:
    return {
        "nproc": os.cpu_count() or 0,
        "cpu": _cpu_model(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "mitmproxy": _version("mitmproxy"),
        "anthropic": _version("anthropic"),
        "httpx2": _version("httpx2"),
        "forge-record": _version("forge-record"),
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
    }


def machine_markdown(notes: dict[str, str | int]) -> str:
    return (f"Machine: {notes['nproc']} cores ({notes['cpu']}), Linux {notes['kernel']}, "
            f"Python {notes['python']}, mitmproxy {notes['mitmproxy']}, anthropic "
            f"{notes['anthropic']} (httpx2 {notes['httpx2']}); run {notes['date']}.")
