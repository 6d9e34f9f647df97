"""Where forge-record keeps its files: FORGE_RECORD_HOME, else the platform's data dir."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def home() -> Path:
    return Path(os.environ.get("FORGE_RECORD_HOME") or platformdirs.user_data_dir("forge-record"))


def default_store_url(folder: str | Path | None = None) -> str:
    """The store used when no --store is given: traces.db in `folder` (~ expanded), else in
    the forge-record home."""
    base = home() if folder is None else Path(folder).expanduser()
    return f"sqlite:///{base / 'traces.db'}"


def store_url(option: str | None) -> str:
    """The store URL: the --store option, else FORGE_RECORD_STORE, else the default."""
    return option or os.environ.get("FORGE_RECORD_STORE") or default_store_url()
