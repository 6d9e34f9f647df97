"""Harness shims: one module per agent CLI.

`SHIMS` is the list, `shim_named(name)` and `detect(argv)` pick one.
"""

from __future__ import annotations

import os

from forge_record.harness_shims.aider import Aider
from forge_record.harness_shims.base import CaFiles, Shim
from forge_record.harness_shims.claude_code import ClaudeCode
from forge_record.harness_shims.codex import Codex
from forge_record.harness_shims.gemini_cli import GeminiCli
from forge_record.harness_shims.generic import Generic
from forge_record.harness_shims.goose import Goose
from forge_record.harness_shims.opencode import OpenCode
from forge_record.harness_shims.qwen_code import QwenCode

SHIMS: tuple[Shim, ...] = (
    ClaudeCode(),
    Codex(),
    GeminiCli(),
    OpenCode(),
    QwenCode(),
    Aider(),
    Goose(),
    Generic(),  # last: detect() falls back to it
)

__all__ = ["SHIMS", "CaFiles", "Shim", "detect", "shim_named"]


def shim_named(name: str) -> Shim | None:
    return next((s for s in SHIMS if s.name == name), None)


def detect(argv: list[str]) -> Shim:
    """The shim for a command line, by the executable's name; the generic one otherwise."""
    exe = os.path.basename(argv[0]) if argv else ""
    for shim in SHIMS:
        if exe in shim.executables:
            return shim
    return shim_named("generic")  # type: ignore[return-value]
