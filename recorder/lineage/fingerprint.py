"""Harness fingerprint of one exchange: which client, which version, which model, which
system prompt, which tools, which beta flags.

Contract: `fingerprint_of(exchange, harness)` is pure and never raises. Its `id` is the
content hash of the other fields, so two exchanges share an id exactly when they share all
of them. The client is read from the request headers (User-Agent, Codex's `originator` and
`version`, goose's session header); `harness` (the session's shim name) fills in when the
headers do not say. The system prompt is the request's `system`, or, when that is empty,
its leading system/developer messages (Codex sends its instructions that way).
`system_hash` and `tools_hash` are None when the request has no system prompt or no tools.
What changes on every request and is not prompt content is left out of `system_hash`:
Claude Code's first system block is billing metadata (`x-anthropic-billing-header:
cc_version=…; cch=<hex>;`) whose values vary per call.
`tools_hash` hashes the tool list sorted by name: the set of schemas is the fingerprint,
not the order a client happened to send it in.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from forge_record.identity import content_hash
from forge_record.records import Exchange, Request, Text, block_to_dict

BILLING_PREFIX = "x-anthropic-billing-header:"

# (harness, pattern over "user-agent originator"); the first group is the version.
_CLIENTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("claude-code", re.compile(r"\bclaude-cli/(\d[\w.+-]*)")),
    ("codex", re.compile(r"\bcodex_[a-z_]+/(\d[\w.+-]*)")),
    ("codex", re.compile(r"\bcodex_[a-z_]+\b()")),  # originator alone, version header below
    ("gemini-cli", re.compile(r"\bGeminiCLI(?:-\w+)?/(\d[\w.+-]*)")),
    ("qwen-code", re.compile(r"\bQwenCode/(\d[\w.+-]*)")),
    ("opencode", re.compile(r"\bopencode/(\d[\w.+-]*)")),
    ("goose", re.compile(r"\bgoose/(\d[\w.+-]*)")),
    ("aider", re.compile(r"\baider/(\d[\w.+-]*)")),
)
_BETA_HEADERS = ("anthropic-beta", "openai-beta")
_SYSTEM_ROLES = ("system", "developer")
_CANONICAL: dict[bytes, str] = {}  # see _canonical
_CANONICAL_SIZE = 256


@dataclass(kw_only=True)
class Fingerprint:
    id: str
    harness: str | None
    version: str | None
    model: str | None
    system_hash: str | None
    tools_hash: str | None
    betas: list[str] = field(default_factory=list)


def fingerprint_of(ex: Exchange, harness: str | None = None) -> Fingerprint:
    client, version = client_of(ex.request_headers)
    request = ex.request
    parts: dict[str, Any] = {
        "harness": client or harness,
        "version": version,
        "model": (request and request.model) or (ex.response and ex.response.model) or None,
        "system_hash": system_hash(request) if request else None,
        "tools_hash": tools_hash(request) if request else None,
        "betas": betas_of(ex.request_headers),
    }
    return Fingerprint(id=content_hash(parts), **parts)


def client_of(headers: dict[str, str]) -> tuple[str | None, str | None]:
    """(harness, version) as the request headers name them, or (None, None)."""
    h = {k.lower(): v for k, v in headers.items()}
    seen = f"{h.get('user-agent', '')} {h.get('originator', '')}"
    for name, pattern in _CLIENTS:
        if match := pattern.search(seen):
            return name, match.group(1) or h.get("version") or None
    if "goose-session-id" in h:
        return "goose", None
    return None, None


def system_hash(request: Request) -> str | None:
    blocks = [b for b in request.system if not _is_billing(b)]
    if not blocks:  # Codex sends its instructions as leading developer messages
        for message in request.messages:
            if message.role not in _SYSTEM_ROLES:
                break
            blocks += message.content
    return _canonical(blocks, lambda: [block_to_dict(b) for b in blocks]) if blocks else None


def tools_hash(request: Request) -> str | None:
    if not request.tools:
        return None
    tools = request.tools
    return _canonical(tools, lambda: sorted((asdict(t) for t in tools), key=lambda t: t["name"]))


def _canonical(records: list, plain: Callable[[], Any]) -> str:
    """content_hash(plain()), remembered by the records' fast serialization: a session
    resends the same system prompt and tool schemas on every call, and turning them into
    plain dicts costs far more than hashing them."""
    key = orjson.dumps(records)
    found = _CANONICAL.get(key)
    if found is None:
        if len(_CANONICAL) >= _CANONICAL_SIZE:
            _CANONICAL.clear()
        found = _CANONICAL[key] = content_hash(plain())
    return found


def betas_of(headers: dict[str, str]) -> list[str]:
    h = {k.lower(): v for k, v in headers.items()}
    flags = {f.strip() for name in _BETA_HEADERS for f in h.get(name, "").split(",")}
    return sorted(f for f in flags if f)


def _is_billing(block: Any) -> bool:
    return isinstance(block, Text) and block.text.lstrip().startswith(BILLING_PREFIX)
