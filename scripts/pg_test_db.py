"""Set up the Postgres database the tests use, when a local server allows it.

The tests use FORGE_RECORD_TEST_PG (default postgresql+psycopg://postgres@127.0.0.1:5432/test:
user postgres, no password, as a local trust-auth server gives). This creates that database
if the server answers and it is missing, and says in one line what it found. It never fails
the test run: without a server the Postgres tests skip (and fail under CI=true), saying why.
Run by scripts/test with the venv's Python (psycopg is a test dependency).
"""

from __future__ import annotations

import os

import psycopg
from sqlalchemy.engine import make_url

DEFAULT = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def main() -> None:
    url = make_url(os.environ.get("FORGE_RECORD_TEST_PG") or DEFAULT)
    name = url.database or "test"
    server = dict(host=url.host or "127.0.0.1", port=url.port or 5432, user=url.username,
                  password=url.password, connect_timeout=5)
    where = f"{server['user'] or ''}@{server['host']}:{server['port']}"
    try:
        with psycopg.connect(dbname="postgres", autocommit=True, **server) as conn:
            found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
            if not found:
                conn.execute(f'CREATE DATABASE "{name}"')
        print(f"postgres: database {name!r} at {where} " + ("ready" if found else "created"))
    except psycopg.Error as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"postgres: not set up ({reason}); the Postgres tests will skip (CI=true fails "
              f"them). Start a server on {server['host']}:{server['port']} or set "
              "FORGE_RECORD_TEST_PG=postgresql+psycopg://USER[:PASSWORD]@HOST:PORT/DB")


if __name__ == "__main__":
    main()
