"""alembic's entry point for our migrations; see forge_record.store.migrate.

Called from code (migrate.upgrade), it gets a connection that is already inside the locked
transaction. Called from the alembic CLI (store/alembic.ini), it builds the engine from
sqlalchemy.url with forge-record's own make_engine, so the SQLite pragmas apply there too.
Deliberately no logging.config.fileConfig: the host app owns logging.
"""

from __future__ import annotations

from alembic import context

from forge_record.store import schema
from forge_record.store.engine import make_engine
from forge_record.store.migrate import VERSION_OPTIONS, locked


def _configure(**kw) -> None:
    context.configure(target_metadata=schema.metadata, **VERSION_OPTIONS, **kw)


def run_offline() -> None:
    url = context.config.get_main_option("sqlalchemy.url")
    _configure(url=url, literal_binds=True, render_as_batch=url.startswith("sqlite"))
    with context.begin_transaction():
        context.run_migrations()


def run_on(connection) -> None:
    # SQLite has almost no ALTER TABLE; batch mode rebuilds the table instead.
    _configure(connection=connection, render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        run_on(connection)
        return
    engine = make_engine(context.config.get_main_option("sqlalchemy.url"))
    try:
        with locked(engine) as conn:
            run_on(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
