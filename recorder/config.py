"""User settings from `<data dir>/config.toml`, all optional:

    # regexes for more secrets to redact from bodies (kind "custom")
    redact_patterns = ["ACME-[0-9]{8}"]
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from forge_record.errors import UsageError
from forge_record.redact.bodies import Redactor, load_key


def load(home: Path) -> dict[str, Any]:
    path = home / "config.toml"
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read {path}: {e}") from e


def redactor(home: Path) -> Redactor:
    patterns = load(home).get("redact_patterns", [])
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise UsageError(f"{home / 'config.toml'}: redact_patterns must be a list of strings")
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as e:
            raise UsageError(f"{home / 'config.toml'}: bad redact pattern {pattern!r}: {e}") from e
    return Redactor(load_key(home), patterns)
