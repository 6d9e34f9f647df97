"""What only a shared Postgres store does: schema checks on open, the bare postgresql://
scheme, secrets checked in every column, and connections the server dropped. (Every other
store test runs on Postgres too, through the `store` fixture of test_store.py.)
"""


from __future__ import annotations

import psycopg
import pytest
from support import (
    ADMIN_URL,
    API_KEY,
    BEARER,
    check_round_trip,
    check_secrets_dropped,
    libpq,
    make_exchange,
    make_session,
)

from forge_record.errors import StoreError
from forge_record.store import engine as engines
from forge_record.store import migrate, open_store, store_revision, upgrade_store
from forge_record.store.engine import make_engine
from forge_record.store.store import StoreUnavailable

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture
def pg_url(new_database):
    return new_database()


def test_bare_postgresql_scheme_uses_psycopg3(pg_url):
    with open_store(pg_url.replace("postgresql+psycopg://", "postgresql://")) as store:
        store.add_session(make_session())
        assert store.resolve_session("last") == make_session().id


def test_secret_headers_never_reach_the_database(pg_url):
    with open_store(pg_url) as store:
        check_secrets_dropped(store)
    with psycopg.connect(libpq(pg_url)) as conn:
        tables = [t for (t,) in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        everything = b"".join(
            str(row).encode() for t in tables for row in conn.execute(f'SELECT * FROM "{t}"'))
    assert b"request-id" not in everything  # headers are compressed, not plain
    with open_store(pg_url) as store:
        [stored] = store.iter_exchanges("secrets", raw=True)
    for secret in ("SECRET123", "TOKEN-456", API_KEY, BEARER):
        assert secret.encode() not in everything
        assert secret not in repr(stored)


def test_empty_database_is_migrated_on_first_open(pg_url):
    open_store(pg_url).close()
    engine = make_engine(pg_url)
    try:
        assert migrate.current(engine) == migrate.head()
        assert migrate.drift(engine) == []
    finally:
        engine.dispose()


def test_unmigrated_database_with_tables_needs_db_upgrade(pg_url):
    with psycopg.connect(libpq(pg_url)) as conn:
        conn.execute("CREATE TABLE someone_elses (x int)")
    with pytest.raises(StoreError, match="run `forge-record db upgrade`") as info:
        open_store(pg_url)
    assert "\n" not in str(info.value)
    assert upgrade_store(pg_url) == (None, migrate.head())
    with open_store(pg_url) as store:
        check_round_trip(store)


def test_a_store_at_an_older_revision_is_refused_until_db_upgrade(pg_url):
    engine = make_engine(pg_url)
    try:
        migrate.upgrade(engine, "0001")
    finally:
        engine.dispose()
    assert store_revision(pg_url) == ("0001", migrate.head())
    with pytest.raises(StoreError, match="at schema revision 0001.*run `forge-record db upgrade`"):
        open_store(pg_url)
    assert store_revision(pg_url) == ("0001", migrate.head())  # refusing changed nothing
    upgrade_store(pg_url)
    with open_store(pg_url) as store:
        check_round_trip(store)


def test_missing_database_is_a_one_line_store_error(pg_admin):
    url = ADMIN_URL.rsplit("/", 1)[0] + "/forge_record_test_does_not_exist"
    with pytest.raises(StoreError, match="does not exist") as info:
        open_store(url)
    assert "\n" not in str(info.value)


def test_a_dropped_connection_is_replaced_after_it_sat_idle(pg_url, pg_admin, monkeypatch):
    """A pooled connection idle for more than PING_IDLE is pinged as it is checked out and
    replaced if the server dropped it: the write goes through. One used moments ago is not
    pinged (a round trip a call saved): its statement fails, the store says unavailable (the
    writer spools), and the next write gets a new connection."""
    session = make_session()
    database = pg_url.rsplit("/", 1)[1]

    def server_drops_our_connections() -> None:
        pg_admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                         "WHERE datname = %s", [database])

    with open_store(pg_url) as store:
        store.add_session(session)
        server_drops_our_connections()
        monkeypatch.setattr(engines, "PING_IDLE", 0.0)
        store.add_exchange(session.id, make_exchange(seq=0))
        monkeypatch.setattr(engines, "PING_IDLE", 3600.0)
        server_drops_our_connections()
        with pytest.raises(StoreUnavailable):
            store.add_exchange(session.id, make_exchange(seq=1))
        store.add_exchange(session.id, make_exchange(seq=1))
        assert store.seqs(session.id) == {0, 1}
