"""The folder → import-name map: every package ships, no bare folder name is importable."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def packages_on_disk() -> set[str]:
    found = set()
    for name, folder in CONFIG["package-dir"].items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base)
            found.add(".".join([name, *rel.parts]))
    return found


def test_every_package_folder_is_listed():
    assert packages_on_disk() <= set(CONFIG["packages"])


@pytest.mark.parametrize("bare", ["store", "addons", "recorder", "harness_shims"])
def test_bare_folder_names_are_not_importable(bare):
    assert importlib.util.find_spec(bare) is None


@pytest.mark.slow
def test_wheel_ships_every_package_and_migration(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path), str(ROOT)], check=True, cwd=tmp_path)
    [wheel] = tmp_path.glob("forge_record-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for package in packages_on_disk():
        assert f"{package.replace('.', '/')}/__init__.py" in names
    assert "forge_record/store/alembic.ini" in names
    from forge_record.store import compression  # the dictionaries stores' streams name

    for name in compression.TRAINED.values():
        assert f"forge_record/store/{name}" in names
    assert any(n.startswith("forge_record/store/migrations/versions/0001") for n in names)
    assert not any(n.split("/")[0] in ("store", "addons", "recorder", "harness_shims")
                   for n in names)
