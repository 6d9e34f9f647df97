"""File edits in plain text, for clients that edit files from the model's text (aider).

aider's `whole` edit format asks the model for a *file listing*: the file's path alone on a
line, then its entire content in a ``` fence. When the newest user message of a Chat
Completions request carries `forge-record-edit PATH`, this route answers with such a listing
creating PATH, holding EDIT_CONTENT; every other request goes on to the mock's OpenAI script
(`forge_record.mock.openai`). Put `ROUTES` before the default ones:
`MockUpstream(routes=[*edits.ROUTES, *default_routes()])`.
"""

from __future__ import annotations

import re

from forge_record.mock import MockUpstream, Received, Reply
from forge_record.mock import openai as chat

EDIT_MARKER = "forge-record-edit"
EDIT_CONTENT = "created by the forge-record mock\n"
_REQUEST = re.compile(re.escape(EDIT_MARKER) + r" (\S+)")


def listing(path: str) -> str:
    """The reply text: a short explanation, then the whole-file listing of `path`."""
    return f"I will create {path}.\n\n{path}\n```\n{EDIT_CONTENT}```\n"


def _edit_request(request: dict) -> str | None:
    """The path the newest user message asks to create, if it asks."""
    users = [m for m in request.get("messages") or () if m.get("role") == "user"]
    match = _REQUEST.search(chat._text(users[-1].get("content"))) if users else None
    return match.group(1) if match else None


def _chat(mock: MockUpstream, received: Received) -> Reply:
    request = received.json() if received.body else {}
    path = _edit_request(request)
    if path is None:
        return chat._chat(mock, received)
    completion = chat.chat_completion(request, received.body, listing(path), [])
    if not request.get("stream"):
        return Reply.json(completion)
    include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
    return Reply.stream(chat.chat_chunks(completion, include_usage))


ROUTES = [("POST", lambda path: path.endswith("/chat/completions"), _chat)]
