"""The README's two commands on a fresh clone: `scripts/install` (forge-record for a user, ending
in the demo) and `scripts/test` (every test dependency, then pytest), and what they say when
Python is too old."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import require

ROOT = Path(__file__).resolve().parent.parent
NPM_BIN = ROOT / ".cache/npm/node_modules/.bin"


def clean_env(tmp_path: Path, path: str) -> dict[str, str]:
    """What a new user's shell has: no venv, no forge-record settings, a HOME of its own."""
    home = tmp_path / "user-home"
    home.mkdir(exist_ok=True)
    keep = ("LANG", "LC_ALL", "TERM", "CI", "FORGE_RECORD_TEST_PG", "PIP_CONFIG_FILE",
            "PYENV_ROOT", "TMPDIR")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    return env | {"PATH": path, "HOME": str(home)}


def test_too_old_a_python_is_one_line_saying_what_to_install(tmp_path):
    """Debian 12's own python3 is 3.11: the install says what it needs and stops, before it
    makes anything."""
    (tmp_path / "scripts").mkdir()
    for name in ("install", "test", "common.sh"):
        shutil.copy2(ROOT / "scripts" / name, tmp_path / "scripts" / name)
    fake = tmp_path / "oldbin"
    fake.mkdir()
    (fake / "python3").write_text("#!/bin/sh\n# Debian 12's python3, as far as the scripts ask\n"
                                  "[ \"$1\" = --version ] && { echo 'Python 3.11.2'; exit 0; }\n"
                                  "exit 1\n")
    (fake / "python3").chmod(0o755)
    for script in ("install", "test"):
        proc = subprocess.run([str(tmp_path / "scripts" / script)], capture_output=True,
                              text=True, timeout=60, env=clean_env(tmp_path, f"{fake}:/bin"))
        assert proc.returncode == 1
        assert proc.stderr.splitlines() == [
            "forge-record needs Python 3.12 or newer (found: Python 3.11.2); install python3.12 "
            "and python3.12-venv (Debian/Ubuntu) or run 'uv python install 3.12', then run this "
            "again, or set PYTHON=/path/to/python3.12"], proc.stderr
        assert not (tmp_path / ".venv").exists()


def fresh_clone(tmp_path: Path) -> Path:
    """The repository's files as a clone has them (tracked and new ones, as they are in the
    work tree), without .venv or caches."""
    clone = tmp_path / "clone"
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, (f.decode() for f in files)):
        source = ROOT / name
        if name.startswith((".cache", ".venv")) or not source.is_file():
            continue
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, clone / name)
    return clone


@pytest.mark.slow
@pytest.mark.cli
def test_the_readme_commands_on_a_fresh_clone(tmp_path):
    """scripts/install, then `forge-record doctor claude`, then scripts/test on a few test
    files. The npm CLIs are the ones already installed here (linked in as .cache, so the test
    does not download 1 GB again; scripts/test finds them at their pinned versions)."""
    require((NPM_BIN / "claude").exists(), "the npm CLIs are not installed (scripts/test)")
    python = shutil.which("python3.12")
    require(python is not None, "no python3.12 on PATH")
    clone = fresh_clone(tmp_path)
    (clone / ".cache").symlink_to(ROOT / ".cache")
    path = f"{Path(python).parent}:/usr/local/bin:/usr/bin:/bin"
    env = clean_env(tmp_path, path) | {"FORGE_RECORD_HOME": str(tmp_path / "forge-home")}

    install = subprocess.run([str(clone / "scripts/install")], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=900)
    assert install.returncode == 0, install.stdout + install.stderr
    bin_dir = clone / ".venv/bin"
    assert f"installed: {bin_dir}/forge-record" in install.stdout
    assert f'export PATH="{bin_dir}:$PATH"' in install.stdout
    assert "forge-record demo: claude-code against the mock model API" in install.stderr
    assert " · 2 model calls · 1 tool call · " in install.stderr
    assert "forge-record show last" in install.stderr
    assert (tmp_path / "forge-home/traces.db").exists()  # the demo recorded into the store

    on_path = env | {"PATH": f"{bin_dir}:{path}"}
    doctor = subprocess.run(["forge-record", "doctor", "--no-self-test", "claude"], env=on_path,
                            capture_output=True, text=True, timeout=120)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert f"ok   command claude: {bin_dir}/claude" in doctor.stdout or \
        "ok   command claude" in doctor.stdout, doctor.stdout

    test = subprocess.run([str(clone / "scripts/test"), "-q", "-p", "no:cacheprovider",
                           "tests/test_sse.py", "tests/test_demo.py", "-k", "not mock"],
                          cwd=clone, env=env, capture_output=True, text=True, timeout=900)
    assert test.returncode == 0, test.stdout[-3000:] + test.stderr[-3000:]
    assert "== npm: " in test.stdout and "all at their pinned versions" in test.stdout
    assert "== postgres: the test database" in test.stdout
    assert " passed" in test.stdout and "skipped" not in test.stdout
    assert (clone / ".venv/bin/pytest").exists()
