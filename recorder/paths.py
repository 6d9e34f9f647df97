"""Where forge-record keeps its files: FORGE_RECORD_HOME, else the platform's data dir."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def home() -> Path:
    return Path(os.environ.get("FORGE_RECORD_HOME") or platformdirs.user_data_dir("forge-record"))


def default_store_url() -> str:
    return f"sqlite:///{home() / 'traces.db'}"


def store_url(option: str | None) -> str:
    """The store URL: the --store option, else FORGE_RECORD_STORE, else the default."""
    return option or os.environ.get("FORGE_RECORD_STORE") or default_store_url()
