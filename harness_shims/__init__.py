"""Harness shims: one module per agent CLI.

`SHIMS` is the list, `shim_named(name)` and `detect(argv)` pick one.
"""

from __future__ import annotations

import os
import re

from forge_record.harness_shims.aider import Aider
from forge_record.harness_shims.base import CaFiles, Shim
from forge_record.harness_shims.claude_code import ClaudeCode
from forge_record.harness_shims.codex import Codex
from forge_record.harness_shims.gemini_cli import GeminiCli
from forge_record.harness_shims.generic import Generic
from forge_record.harness_shims.goose import Goose
from forge_record.harness_shims.llm import Llm
from forge_record.harness_shims.opencode import OpenCode
from forge_record.harness_shims.pi import Pi
from forge_record.harness_shims.qwen_code import QwenCode

SHIMS: tuple[Shim, ...] = (
    ClaudeCode(),
    Codex(),
    GeminiCli(),
    OpenCode(),
    QwenCode(),
    Aider(),
    Llm(),
    Pi(),
    Goose(),
    Generic(),  # last: detect() falls back to it
)

__all__ = ["SHIMS", "CaFiles", "Shim", "detect", "shim_named"]


def shim_named(name: str) -> Shim | None:
    return next((s for s in SHIMS if s.name == name), None)


def detect(argv: list[str]) -> Shim:
    """The shim for a command line, by the executable's name, or for `python [-X ...] -m NAME`
    and `python SCRIPT` by the module or script run; the generic one otherwise."""
    exe = os.path.basename(argv[0]) if argv else ""
    module = _python_target(argv) if _PYTHON.fullmatch(exe) else None
    for shim in SHIMS:
        if exe in shim.executables or (module and module in shim.executables + shim.modules):
            return shim
    return shim_named("generic")  # type: ignore[return-value]


_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
_TAKES_VALUE = ("-W", "-X")  # interpreter options whose value is the next argument


def _python_target(argv: list[str]) -> str | None:
    """What a Python command line runs: the top package of `-m pkg.mod`, or the script's name
    (`python .venv/bin/aider`); None for `-c` and the REPL."""
    args = iter(argv[1:])
    for arg in args:
        if arg == "-m":
            return next(args, "").split(".")[0] or None
        if arg.startswith("-m"):
            return arg[2:].split(".")[0]
        if arg.startswith("-c") or arg == "-":
            return None
        if arg in _TAKES_VALUE:
            next(args, None)
        elif not arg.startswith("-"):
            return os.path.splitext(os.path.basename(arg))[0]
    return None
