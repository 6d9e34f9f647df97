"""alembic scripts for the store; run them through forge_record.store.migrate."""
