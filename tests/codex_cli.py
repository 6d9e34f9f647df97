"""Driving the real Codex CLI through `forge-record run`, for test_codex and test_lineage_codex.

`codex_env` (a fixture: import it into the test module) is an environment with a fresh home
and CODEX_HOME and a dummy API key, for the pinned CODEX_VERSION (the fixture skips on another
one, and fails under CI=true); `forge` runs forge-record in it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import require
from support import bench_module

from forge_record.mock import TOOL_MARKER

CODEX_VERSION = "0.171.0"
ROOT = Path(__file__).resolve().parent.parent
DUMMY_KEY = "sk-proj-dummy-codex-e2e-key-never-real-0000"
FORGE = str(Path(sys.executable).with_name("forge-record"))
PROMPT = f"Run the {TOOL_MARKER} command"
# A model provider of Codex's config.toml, as for a gateway, Azure or a local server: Codex
# then talks HTTP with SSE to its base URL (here still api.openai.com, which run routes).
# The one bench/codex_session.py records its HTTP sessions with.
CUSTOM_PROVIDER = bench_module("codex_session").HTTP_PROVIDER


def find_codex() -> str | None:
    local = ROOT / ".cache/npm/node_modules/.bin/codex"
    return str(local) if local.exists() else shutil.which("codex")


@pytest.fixture
def codex_env(tmp_path):
    codex = find_codex()
    require(codex is not None, "Codex is not installed (scripts/test installs it with npm)")
    version = subprocess.run([codex, "--version"], capture_output=True, text=True,
                             timeout=30).stdout.split()[-1:]
    require(version == [CODEX_VERSION], f"Codex {version} found, these tests pin {CODEX_VERSION}")
    home, codex_home = tmp_path / "home", tmp_path / "codex-home"
    home.mkdir()
    codex_home.mkdir()
    return {
        "PATH": f"{Path(codex).parent}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(home),
        "CODEX_HOME": str(codex_home),
        "TMPDIR": str(tmp_path),
        "FORGE_RECORD_HOME": str(tmp_path / "forge"),
        "OPENAI_API_KEY": DUMMY_KEY,
    }


def forge(env, *args, timeout=180) -> subprocess.CompletedProcess:
    return subprocess.run([FORGE, *args], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=timeout, cwd=env["HOME"])
