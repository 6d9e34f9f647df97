"""Shared test helpers. Test modules import them as `from conftest import ...` (pytest puts
tests/ on sys.path; there is deliberately no tests/__init__.py).

- `require`: skip a test whose prerequisite is missing (but fail under CI=true).
- Store fixtures, found by pytest without an import: `store` and `store_url` (each test on
  SQLite and on the real Postgres: one fresh database per test module, emptied before each
  test), `backend`, `pg_admin`, `pg_module_url`, `new_database`. Their helpers and the other
  shared helpers are in tests/support.py.
- Decoder tests: the captured streams under tests/data/sse/<provider>/, the chunkings every
  stream is decoded under, the decoding itself, and an httpx2 client that answers with a
  captured stream so the official SDKs can read the very same bytes.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import orjson
import psycopg
import pytest
import serve_gateway
from engine_server import vllm_url  # noqa: F401 - registered here once: one vLLM a run
from hypothesis import strategies as st
from support import ADMIN_URL, BACKENDS, create_database, empty_postgres, libpq

from forge_record.errors import DecodeError
from forge_record.records import Response, response_from_dict, response_to_dict
from forge_record.store import default_store_url, open_store

SSE_DATA = Path(__file__).parent / "data" / "sse"


def require(condition: bool, reason: str) -> None:
    """Skip the calling test unless `condition` holds, giving `reason`.

    Under CI=true a missing prerequisite (Postgres down, a CLI not installed) fails the test
    instead: CI must not go green by skipping the very tests it exists to run.
    """
    if condition:
        return
    if os.environ.get("CI", "").strip().lower() == "true":
        pytest.fail(f"CI=true, so this cannot be skipped: {reason}", pytrace=False)
    pytest.skip(reason)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """scripts/test runs the suite in several pytest-xdist workers (--dist loadgroup): every
    test of the real engine goes to one of them, so a run still starts one vLLM."""
    for item in items:
        if item.get_closest_marker("engine") or "vllm_url" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("engine"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    """A failed test shows what every `serve` it started wrote to stderr: a replica's
    warnings (a store that did not answer, a call it could not number) are often the cause."""
    report = yield
    if report.failed:
        for n, served in enumerate(serve_gateway.started):
            report.sections.append((f"serve {n} ({served.url}) stderr", "".join(served.log)))
    if call.when == "teardown":
        serve_gateway.started.clear()
    return report


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    """No test touches the user's real data dir or store."""
    monkeypatch.setenv("FORGE_RECORD_HOME", str(tmp_path / "forge-record-home"))
    monkeypatch.delenv("FORGE_RECORD_STORE", raising=False)


# --- decoder tests -----------------------------------------------------------------------

Decoded = tuple[Response, bool]  # what a decoder's finish() gave, and its `complete`


def sse_cases(provider: str) -> dict[str, bytes]:
    """The captured streams tests/data/sse/<provider>/*.sse, by case name, in name order."""
    return {p.stem: p.read_bytes() for p in sorted((SSE_DATA / provider).glob("*.sse"))}


def chunked(body: bytes, cuts: list[int]) -> list[bytes]:
    """`body` cut at each offset in `cuts` (in any order, repeats ignored)."""
    bounds = [0, *sorted(set(cuts)), len(body)]
    return [body[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def chunkings(body: bytes, max_cuts: int = 60) -> Iterator[tuple[str, list[bytes]]]:
    """(label, chunks): `body` one byte at a time, then cut at 1..max_cuts random places 20
    times. Seeded by the body's length, so a failure names a chunking that can be rerun."""
    yield "byte-by-byte", [body[i:i + 1] for i in range(len(body))]
    rng = random.Random(len(body))
    for n in range(20):
        yield f"random-{n}", chunked(body, rng.sample(range(1, len(body)),
                                                      rng.randint(1, max_cuts)))


def decode_chunks(dialect: Any, content_type: str, chunks: list[bytes]) -> Decoded:
    """Feed `chunks` to the dialect's decoder for `content_type`; (Response, complete)."""
    decoder = dialect.response_decoder(content_type)
    for chunk in chunks:
        decoder.feed(chunk)
    return decoder.finish(), decoder.complete


def decode_json_body(dialect: Any, body: bytes) -> Decoded:
    """A whole JSON body, fed in two halves (a body decoder must buffer, not parse a chunk)."""
    half = len(body) // 2
    return decode_chunks(dialect, "application/json", [body[:half], body[half:]])


def assert_every_chunking_agrees(decode: Callable[[list[bytes]], Decoded], body: bytes,
                                 max_cuts: int = 60) -> None:
    """`decode` gives the same (Response, complete) for `body` under every chunking as whole."""
    whole = decode([body])
    for label, chunks in chunkings(body, max_cuts):
        assert decode(chunks) == whole, label


def assert_json_body_breaks_the_protocol(dialect: Any, body: bytes) -> None:
    """The JSON body decoder raises DecodeError at finish and does not call itself complete."""
    decoder = dialect.response_decoder("application/json")
    decoder.feed(body)
    with pytest.raises(DecodeError):
        decoder.finish()
    assert not decoder.complete


def record_round_trip(response: Response) -> Response:
    """`response` through its dict form and JSON, as the store keeps it."""
    return response_from_dict(orjson.loads(orjson.dumps(response_to_dict(response))))


def corrupted(body: bytes, data: Any) -> bytes:
    """`body` with 1 to 12 bytes swapped for JSON/SSE punctuation, then cut, as drawn from
    hypothesis' `data`."""
    damaged = bytearray(body)
    for _ in range(data.draw(st.integers(1, 12))):
        at = data.draw(st.integers(0, len(damaged) - 1))
        damaged[at] = data.draw(st.sampled_from(b'{}[]":,\n\r\x00\xff0a'))
    return bytes(damaged[:data.draw(st.integers(0, len(damaged)))])


def sse_http_client(body: bytes) -> httpx2.Client:
    """An httpx2 client whose every request is answered 200 with `body` as an SSE stream:
    hand it to an official SDK and the SDK reads our captured bytes."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    return httpx2.Client(transport=httpx2.MockTransport(handler))


# --- store fixtures ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def pg_admin():
    conn, problem = None, ""
    try:
        conn = psycopg.connect(libpq(ADMIN_URL), autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as e:
        problem = " ".join(str(e).split())
    require(conn is not None, f"Postgres is not reachable at {ADMIN_URL}: {problem}")
    yield conn
    conn.close()


@pytest.fixture
def new_database(pg_admin):
    """A factory of fresh, empty databases, dropped after the test."""
    made = []

    def make() -> str:
        made.append(create_database(pg_admin))
        return ADMIN_URL.rsplit("/", 1)[0] + "/" + made[-1]

    yield make
    for name in made:
        pg_admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def pg_module_url(pg_admin):
    name = create_database(pg_admin)
    yield ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    pg_admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture
def store_url(backend, request, tmp_path) -> str:
    """An empty store's URL, on each backend."""
    if backend == "sqlite":
        return default_store_url(tmp_path / "home")
    url = request.getfixturevalue("pg_module_url")
    empty_postgres(url)
    return url


@pytest.fixture
def store(store_url):
    with open_store(store_url) as s:
        yield s
