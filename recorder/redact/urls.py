"""Credentials in URLs: token query values (`?key=` for Gemini) and userinfo."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from forge_record.redact import MASK

_SECRET_QUERY_KEYS = frozenset({"key", "api_key", "apikey", "access_token", "token"})


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
