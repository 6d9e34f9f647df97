"""One file per revision, named NNNN_what.py, revision id NNNN (alembic revision --rev-id)."""
