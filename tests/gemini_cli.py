"""The real Gemini CLI from .cache/npm, in a throw-away HOME with a dummy API key: its path,
its settings, and the `gemini_env` fixture (tests/test_gemini_cli.py, tests/test_serve_cli.py)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import orjson
import pytest
from conftest import require

ROOT = Path(__file__).resolve().parent.parent
DUMMY_KEY = "AIzaSy-dummy-gemini-e2e-key-never-real-00"
SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
}


def find_gemini() -> str | None:
    local = ROOT / ".cache/npm/node_modules/.bin/gemini"
    return str(local) if local.exists() else shutil.which("gemini")


@pytest.fixture
def gemini_env(tmp_path):
    gemini = find_gemini()
    require(gemini is not None, "Gemini CLI is not installed (scripts/test installs it with npm)")
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_bytes(orjson.dumps(SETTINGS))
    (tmp_path / "work").mkdir()
    return {
        "PATH": f"{Path(gemini).parent}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(home),
        "TMPDIR": str(tmp_path),
        "FORGE_RECORD_HOME": str(tmp_path / "forge"),
        "GEMINI_API_KEY": DUMMY_KEY,
        "GEMINI_CLI_NO_RELAUNCH": "true",
    }
