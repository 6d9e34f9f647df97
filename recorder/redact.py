"""Keep secrets out of everything forge-record writes.

Credentials travel in headers (Authorization, x-api-key, cookies), in URL query values
(`?key=` for Gemini) and sometimes on the command line (`--api-key sk-...`). Every header,
URL and argv that reaches a record passes through these functions first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

MASK = "***"

SECRET_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "api-key",
        "x-goog-api-key",
        "cookie",
        "set-cookie",
    }
)

_SECRET_QUERY_KEYS = frozenset({"key", "api_key", "apikey", "access_token", "token"})

# Values that look like provider keys, wherever they appear in argv.
_KEY_PATTERN = re.compile(
    r"(sk-[A-Za-z0-9_-]{8,}|AIza[0-9A-Za-z_-]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|"
    r"xox[abpr]-[A-Za-z0-9-]{10,}|eyJ[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_.-]+)"
)
_SECRET_FLAG = re.compile(r"^--?(?:[\w-]*[-_])?(key|apikey|token|secret|password|passwd)$", re.I)


def redact_headers(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Headers as a dict, without credentials. Repeated names are joined with ", "."""
    out: dict[str, str] = {}
    for name, value in headers:
        key = name.lower()
        if key in SECRET_HEADERS:
            continue
        out[key] = f"{out[key]}, {value}" if key in out else value
    return out


def redact_url(url: str) -> str:
    """The URL with credential query values and userinfo masked."""
    if "?" not in url and "@" not in url:  # nothing to mask: most model calls
        return url
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    if not parts.query:
        return urlunsplit(parts._replace(netloc=netloc))
    query = [
        (k, MASK if k.lower() in _SECRET_QUERY_KEYS else v)
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
    ]
    return urlunsplit(parts._replace(netloc=netloc, query=urlencode(query, safe="*")))


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
