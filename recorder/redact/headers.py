"""Credential headers, dropped from every recorded header set."""

from __future__ import annotations

from collections.abc import Iterable

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


def redact_headers(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Headers as a dict, without credentials. Repeated names are joined with ", "."""
    out: dict[str, str] = {}
    for name, value in headers:
        key = name.lower()
        if key in SECRET_HEADERS:
            continue
        out[key] = f"{out[key]}, {value}" if key in out else value
    return out
