"""The view model as one self-contained HTML page (`forge-record view`).

Contract: `render_html(view)` returns a complete page that needs nothing else: its CSS and
JS (page.css, page.js beside this module) are inline, and its Content-Security-Policy
allows only those two, by hash, so the page can fetch nothing and run no other script,
whatever a recording holds. The page never writes recorded text as markup: the view is
embedded as JSON in a `<script type="application/json">` block (with `<`, `>` and `&`
escaped, so no recorded `</script>` or `<!--` can end or bend that block), and page.js
builds the DOM from it with textContent only.

Content is deduplicated as the store deduplicates it: every content string (a part's text,
a tool schema, a description, a call's fingerprint id) is stored once in `strings` and
referenced by index, so a system prompt, a tool result or a retry's repeated messages cost
their bytes once.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import asdict
from functools import cache
from importlib import resources
from typing import Any

import orjson

from forge_record.viewer.model import View

FORMAT = 1  # of the embedded data; page.js checks it
# Keys whose string values go into the string table (page.js reads them through S()); a
# call's fingerprint id is 68 characters that would otherwise repeat on every call.
INTERNED = frozenset({"text", "schema", "description", "said", "fingerprint"})
# The page has no other source of anything: no network, no other script or style.
CSP = ("default-src 'none'; script-src '{script}'; style-src '{style}'; img-src data:; "
       "base-uri 'none'; form-action 'none'")


def render_html(view: View) -> str:
    css, js = _asset("page.css"), _asset("page.js")
    page = _asset("page.html")
    for marker, value in (("@@CSP@@", CSP.format(script=_sha256(js), style=_sha256(css))),
                          ("@@CSS@@", css), ("@@JS@@", js)):
        page = page.replace(marker, value)
    # The data goes in last, so nothing recorded is ever scanned for a marker.
    head, tail = page.split("@@DATA@@")
    return head + script_safe_json(pack(view)) + tail


def pack(view: View) -> dict[str, Any]:
    """The view as plain JSON with content strings moved into a table and empty fields
    dropped (page.js treats a missing field as empty)."""
    strings: list[str] = []
    index: dict[str, int] = {}

    def intern(value: str) -> int:
        found = index.get(value)
        if found is None:
            found = index[value] = len(strings)
            strings.append(value)
        return found

    def walk(value: Any, key: str | None = None) -> Any:
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items() if not _empty(v)}
        if isinstance(value, list | tuple):
            return [walk(v) for v in value]
        if isinstance(value, str) and key in INTERNED:
            return intern(value)
        if isinstance(value, float):  # times: a millisecond is precise enough to look at
            return round(value, 3)
        return value

    data = walk(asdict(view))
    return {"format": FORMAT, "strings": strings, **data}


def _empty(value: Any) -> bool:
    # Identity and type tests: 0 and 0.0 are values, not absence (`0 == False` in Python).
    return value is None or value is False or (isinstance(value, str | list | dict) and not value)


def script_safe_json(value: Any) -> str:
    """JSON that can sit inside a <script> element: `<`, `>` and `&` appear only as
    \\u escapes (valid in JSON strings, the only place they can occur)."""
    raw = orjson.dumps(value)
    for char, escape in ((b"<", b"\\u003c"), (b">", b"\\u003e"), (b"&", b"\\u0026")):
        raw = raw.replace(char, escape)
    return raw.decode()


@cache
def _asset(name: str) -> str:
    return resources.files("forge_record.viewer").joinpath(name).read_text(encoding="utf-8")


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
