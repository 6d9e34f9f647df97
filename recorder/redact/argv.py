"""Secrets on a command line (`--api-key sk-...`) and in free text such as log lines."""

from __future__ import annotations

import re

from forge_record.redact import MASK

# Values that look like provider keys, wherever they appear in argv.
_KEY_PATTERN = re.compile(
    r"(sk-[A-Za-z0-9_-]{8,}|AIza[0-9A-Za-z_-]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|"
    r"xox[abpr]-[A-Za-z0-9-]{10,}|eyJ[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_.-]+)"
)
_SECRET_FLAG = re.compile(r"^--?(?:[\w-]*[-_])?(key|apikey|token|secret|password|passwd)$", re.I)


def mask_argv(argv: list[str]) -> list[str]:
    """argv with values of secret-looking flags and key-shaped strings masked."""
    out: list[str] = []
    mask_next = False
    for arg in argv:
        if mask_next:
            out.append(MASK)
            mask_next = False
            continue
        flag, eq, _ = arg.partition("=")
        if _SECRET_FLAG.match(flag):
            if eq:
                out.append(f"{flag}={MASK}")
            else:
                out.append(arg)
                mask_next = True
            continue
        out.append(_KEY_PATTERN.sub(MASK, arg))
    return out


def mask_text(text: str) -> str:
    """Mask key-shaped strings in free text (log lines, error messages)."""
    return _KEY_PATTERN.sub(MASK, text)
