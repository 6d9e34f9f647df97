"""The store on a real Postgres: the SQLite round trip, secrets and migration checks again.

Each test module run gets fresh databases named forge_record_test_<hex>, created through the
`test` database and dropped (WITH FORCE) afterwards. Set FORGE_RECORD_TEST_PG to point at
another server's maintenance database.
"""

from __future__ import annotations

import os
import uuid

import psycopg
import pytest
from conftest import require
from test_migrations import EXPECTED_COLUMNS, open_in_processes
from test_store import (
    API_KEY,
    BEARER,
    check_round_trip,
    check_secrets_dropped,
    check_summaries,
    make_session,
)

from forge_record.errors import StoreError
from forge_record.store import codec, migrate, open_store, upgrade_store
from forge_record.store.engine import make_engine

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

ADMIN_URL = os.environ.get(
    "FORGE_RECORD_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


@pytest.fixture(scope="module")
def admin():
    conn, problem = None, ""
    try:
        conn = psycopg.connect(_libpq(ADMIN_URL), autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as e:
        problem = " ".join(str(e).split())
    require(conn is not None, f"Postgres is not reachable at {ADMIN_URL}: {problem}")
    yield conn
    conn.close()


@pytest.fixture
def new_database(admin):
    """A factory of fresh, empty databases; returns a forge-record URL for each."""
    made = []

    def make() -> str:
        name = f"forge_record_test_{uuid.uuid4().hex[:12]}"
        admin.execute(f'CREATE DATABASE "{name}"')
        made.append(name)
        return ADMIN_URL.rsplit("/", 1)[0] + "/" + name

    yield make
    for name in made:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_url(new_database):
    return new_database()


def test_round_trip(pg_url):
    with open_store(pg_url) as store:
        check_round_trip(store)


def test_list_sessions_aggregates(pg_url):
    with open_store(pg_url) as store:
        check_summaries(store)


def test_bare_postgresql_scheme_uses_psycopg3(pg_url):
    with open_store(pg_url.replace("postgresql+psycopg://", "postgresql://")) as store:
        store.add_session(make_session())
        assert store.resolve_session("last") == make_session().id


def test_secret_headers_never_reach_the_database(pg_url):
    with open_store(pg_url) as store:
        check_secrets_dropped(store)
    with psycopg.connect(_libpq(pg_url)) as conn:
        rows = conn.execute("SELECT e::text, record FROM exchanges e").fetchall()
    assert rows
    for text, record in rows:
        everything = text + codec.decompress(record).decode()
        for secret in ("SECRET123", "TOKEN-456", API_KEY, BEARER):
            assert secret not in everything


def test_empty_database_is_migrated_on_first_open(pg_url):
    open_store(pg_url).close()
    engine = make_engine(pg_url)
    try:
        assert migrate.current(engine) == migrate.head()
        assert migrate.drift(engine) == []
    finally:
        engine.dispose()
    with psycopg.connect(_libpq(pg_url)) as conn:
        columns = {
            table: [c for (c,) in conn.execute(
                "SELECT column_name FROM information_schema.columns"
                " WHERE table_schema = 'public' AND table_name = %s ORDER BY ordinal_position",
                (table,))]
            for table in EXPECTED_COLUMNS
        }
    assert columns == EXPECTED_COLUMNS


def test_unmigrated_database_with_tables_needs_db_upgrade(pg_url):
    with psycopg.connect(_libpq(pg_url)) as conn:
        conn.execute("CREATE TABLE someone_elses (x int)")
    with pytest.raises(StoreError, match="run `forge-record db upgrade`") as info:
        open_store(pg_url)
    assert "\n" not in str(info.value)
    assert upgrade_store(pg_url) == (None, migrate.head())
    with open_store(pg_url) as store:
        check_round_trip(store)


def test_missing_database_is_a_one_line_store_error(admin):
    url = ADMIN_URL.rsplit("/", 1)[0] + "/forge_record_test_does_not_exist"
    with pytest.raises(StoreError, match="does not exist") as info:
        open_store(url)
    assert "\n" not in str(info.value)



def test_concurrent_first_opens_migrate_once(pg_url):
    """The advisory lock serializes recorders that find the same database empty."""
    assert open_in_processes(pg_url) == [0, 0, 0, 0]
    with open_store(pg_url) as store:
        check_round_trip(store)
