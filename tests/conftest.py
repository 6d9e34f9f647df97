"""Shared test helpers. Test modules import them as `from conftest import ...` (pytest puts
tests/ on sys.path; there is deliberately no tests/__init__.py)."""

from __future__ import annotations

import os

import pytest


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


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    """No test touches the user's real data dir or store."""
    monkeypatch.setenv("FORGE_RECORD_HOME", str(tmp_path / "forge-record-home"))
    monkeypatch.delenv("FORGE_RECORD_STORE", raising=False)
