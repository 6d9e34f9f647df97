"""What one exchange says about its place in a session, read from that exchange alone.

Contract: `signals_of(exchange)` is pure and never raises on a well-formed record (a record
whose request did not decode gives empty content signals). It reads the wire headers first
(harness session id, subagent id, retry count) and then the normalized content: a content
hash per message, the hash of the reply as the next request would carry it, the side-call
kind the exchange shows by itself, and the links a request carries to other threads. The
normalized records already drop Anthropic `cache_control` markers, which Claude Code moves
between turns, so message hashes compare what the model saw. Signals observed with Claude
Code 2.1.197 are documented in /work/shared/PROTOCOLS.md part 3; the Codex headers
(`thread-id`, `x-codex-parent-thread-id`, `x-openai-subagent`) come from public client code
and have not been seen live here.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from forge_record.identity import local_hash
from forge_record.records import (
    COMPLETE,
    Block,
    Exchange,
    Message,
    Reasoning,
    Request,
    Text,
    ToolCall,
    ToolResult,
)
from forge_record.shared_ends import shared_prefix

SESSION_HEADERS = ("x-claude-code-session-id", "session-id", "session_id", "goose-session-id")
AGENT_HEADERS = ("x-claude-code-agent-id", "thread-id")  # Codex: thread-id != session-id
PARENT_THREAD_HEADER = "x-codex-parent-thread-id"
CODEX_SUBAGENT_HEADER = "x-openai-subagent"  # "review", "compact", "collab_spawn", ...
RETRY_HEADER = "x-stainless-retry-count"

SUBAGENT_FLAG = "cc_is_subagent=true"  # in Claude Code's first (billing) system block
# The instruction Claude Code appends to the last user message when it compacts.
COMPACTION_MARKERS = ("Your task is to create a detailed summary of the conversation so far",)
# How the first request after a compaction opens (a text block of the first user message).
CONTINUATION_PREFIX = "This session is being continued from a previous conversation"
AGENT_ID = re.compile(r"\bagentId:\s*([A-Za-z0-9_-]+)")
_CCH = re.compile(r"\s*\bcch=[0-9a-fA-F]*;?")
_TITLE = re.compile(r"\btitle\b", re.IGNORECASE)
_SUMMARY = re.compile(r"\bsummar(?:y|ise|ize)\b", re.IGNORECASE)
_USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
Known = tuple[list[Message], tuple[str, ...]]  # messages and their hashes


# Not frozen: a frozen dataclass sets each field through object.__setattr__, which made
# building one 10 µs of the ~170 µs lineage spends per call (2.5 µs now). Nothing changes
# one once made.
@dataclass(slots=True)
class Signals:
    seq: int
    session_key: str | None  # the harness's own session id
    agent_key: str | None  # a subagent's id (Claude Code) or a thread id (Codex)
    parent_agent_key: str | None  # Codex: the thread that spawned this one
    subagent: bool  # the request says it comes from a subagent
    retry_count: int  # x-stainless-retry-count, 0 when absent
    request_hash: str | None  # path + request, without per-request noise (cch)
    side_kind: str | None  # what the exchange shows by itself; None for a conversation call
    continues_compacted: bool  # opens with Claude Code's "session is being continued"
    decoded: bool  # the request parsed into a record (else content signals are empty)
    has_tools: bool
    complete: bool
    messages: tuple[str, ...]  # one content hash per request message
    reply: str | None  # the response as the next request would carry it back
    tool_calls: tuple[tuple[str, str, str | None], ...]  # (id, name, prompt argument)
    agent_links: dict[str, str] = field(default_factory=dict)  # tool_call id -> agent id
    user_texts: tuple[str, ...] = ()  # text blocks of the newest user message
    usage: dict[str, int] = field(default_factory=dict)


def signals_of(ex: Exchange, before: Known | None = None,
               memo: HashMemo | None = None) -> Signals:
    """`before`: an earlier request's messages and their hashes; `memo`: the hashes of the
    messages, system blocks and tools seen so far in the analysis. A client resends the whole
    history every call, and reusing hashes is much cheaper than serializing and hashing it
    all again."""
    memo = {} if memo is None else memo
    headers = {k.lower(): v for k, v in ex.request_headers.items()}
    request = ex.request or Request()
    messages = message_hashes(request.messages, before, memo)
    seen = shared_prefix(messages, before[1] if before else ())
    session_key = _first(headers, SESSION_HEADERS)
    agent_key = _first(headers, AGENT_HEADERS)
    if agent_key == session_key:  # Codex's root thread carries its session id as thread id
        agent_key = None
    codex_label = headers.get(CODEX_SUBAGENT_HEADER, "").strip().lower()
    user_texts = _texts(_last_user(request))
    return Signals(
        seq=ex.seq,
        session_key=session_key,
        agent_key=agent_key,
        parent_agent_key=headers.get(PARENT_THREAD_HEADER) or None,
        subagent=_says_subagent(request) or codex_label not in ("", "compact"),
        retry_count=_int(headers.get(RETRY_HEADER)),
        request_hash=_request_hash(ex, messages, memo),
        side_kind=side_kind_of(ex, codex_label, user_texts),
        continues_compacted=_continues_compacted(request),
        decoded=ex.request is not None,
        has_tools=bool(request.tools),
        complete=ex.status == COMPLETE,
        messages=messages,
        reply=_reply_hash(ex, memo),
        tool_calls=_tool_calls(ex),
        agent_links=_agent_links(request.messages[seen:]),
        user_texts=user_texts,
        usage=_usage(ex),
    )


def stream_key(ex: Exchange) -> tuple[str | None, str | None]:
    """Which conversation stream an exchange's headers put it in (for `before`)."""
    headers = {k.lower(): v for k, v in ex.request_headers.items()}
    return _first(headers, SESSION_HEADERS), _first(headers, AGENT_HEADERS)


# Local hashes by object identity, for one analysis. Records read from one session share the
# messages, blocks and tools their requests repeat (store.content.Decoded), so with a memo
# each is hashed once, however many requests resend it. A system block or a tool is keyed by
# its id, a message by its role and its blocks' ids: a reply and the next request's copy of
# it are two messages made of the same blocks. The memo keeps what it keys alive, so no other
# object can take one of those ids.
HashMemo = dict[int | tuple, tuple[object, str]]


class RecentMemo(OrderedDict):
    """A HashMemo that keeps its `limit` latest entries, for a fold as long as a session
    (the writer's lineage.tally). An entry keeps its object alive, so a memo that kept them
    all kept every tool list and message a session sent: Claude Code's tool list is parsed
    anew every call (the bytes after its messages change), 0.13 MB a call of a real session.
    What the memo saves is between a call and the next few (a reply, then the request that
    repeats it); a dropped entry is hashed again if it comes back, to the same hash."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def __setitem__(self, key: int | tuple, value: tuple[object, str]) -> None:
        super().__setitem__(key, value)
        if len(self) > self.limit:
            self.popitem(last=False)


def message_hashes(messages: list[Message], before: Known | None = None,
                   memo: HashMemo | None = None) -> tuple[str, ...]:
    """One hash per message: `before`'s hashes for the messages it starts with, then from
    `memo` for a message object already hashed, else hashed now."""
    memo = {} if memo is None else memo
    old_messages, old_hashes = before or ([], ())
    shared = shared_prefix(messages, old_messages)
    return (*old_hashes[:shared], *(_memoized_message(m, memo) for m in messages[shared:]))


def memoized(record: Any, memo: HashMemo, how: Callable[[Any], str]) -> str:
    """how(record), computed once per object in `memo`."""
    found = memo.get(id(record))
    if found is None:
        found = memo[id(record)] = (record, how(record))
    return found[1]


def _memoized_message(message: Message, memo: HashMemo) -> str:
    key = (message.role, *map(id, message.content))
    found = memo.get(key)
    if found is None:
        found = memo[key] = (tuple(message.content), message_hash(message))
    return found[1]


def message_hash(message: Message) -> str:
    """Identity of a message within one analysis (identity.local_hash: never stored): what
    the model saw, not the bytes a client happened to send (`turn_identity`)."""
    return local_hash([message.role, turn_identity(message.content)])


def turn_identity(blocks: list[Block]) -> list[Any]:
    """The blocks as a client resending them would keep them, whatever it re-encodes:

    - text is what it says: adjacent text blocks are one text (a response streamed in many
      parts comes back as one part or as several), empty ones are left out (some clients
      drop them when they resend history), and whitespace at its ends does not count (aider
      strips the model's answer before it sends it back);
    - reasoning is left out, text, signature and encrypted content alike: the harness decides
      what of it goes back (Anthropic clients resend it verbatim, Gemini CLI blanks the thought
      text and moves or makes up `thoughtSignature`s, Codex resends encrypted items), and a
      signature-only part is not a turn of its own;
    - a tool call is its name and parsed arguments (`{"command":"x"}` and `{"command": "x"}`
      are one call: Python clients re-serialize them), without its id and without arguments
      that are false or null: a harness fills in an optional parameter the model left out
      when it resends the call (Claude Code 2.1.197 puts `"replace_all": false` into every
      Edit call it sends back), and that is the call the model made; a tool result is its
      content, name and error flag, without the id it answers. The Gemini API sends no ids
      and Gemini CLI makes up its own when it sends the history back; where an API does send
      them the order of the blocks still pairs calls with results.
    """
    out: list[Any] = []
    for b in blocks:
        if type(b) is Text and not b.citations:
            if b.text:
                if out and type(out[-1]) is str:
                    out[-1] += b.text
                else:
                    out.append(b.text)
        elif isinstance(b, ToolCall):
            args = b.arguments_raw if b.parse_error else _given(b.arguments)
            out.append(("tool_call", b.name, args, b.server))
        elif isinstance(b, ToolResult):
            out.append(("tool_result", b.name, b.is_error, turn_identity(b.content)))
        elif not (isinstance(b, Reasoning) or _empty_text(b)):
            out.append(b)
    return [x.strip() if type(x) is str else x for x in out]


def _given(arguments: Any) -> Any:
    """Tool-call arguments without those a harness may fill in as defaults (see above)."""
    if not isinstance(arguments, dict):
        return arguments
    return {k: v for k, v in arguments.items() if v is not None and v is not False}


def side_kind_of(ex: Exchange, codex_label: str = "",
                 user_texts: tuple[str, ...] | None = None) -> str | None:
    """"count_tokens", "warmup", "compaction", "title", "summary", "engine", "other" when the
    exchange alone shows it is not a turn of the agent's conversation; None otherwise.
    `user_texts`: the newest user message's texts (_texts), when the caller has them already."""
    request = ex.request or Request()
    if ex.kind == "engine":  # a bridged call as the engine saw it: the agent's is the turn
        return "engine"
    if ex.kind != "model":
        path = urlsplit(ex.url).path
        if path.endswith(("/count_tokens", ":countTokens")):  # Anthropic, Gemini
            return "count_tokens"
        if path.endswith("/responses/compact"):  # Codex's remote compaction
            return "compaction"
        return "warmup" if request.parameters.get("generate") is False else "other"
    if user_texts is None:
        user_texts = _texts(_last_user(request))
    if codex_label == "compact" or any(m in t for t in user_texts for m in COMPACTION_MARKERS):
        return "compaction"
    # A naming or summing-up request is one short exchange without tools; a long one without
    # tools is a conversation of a client that uses none (aider).
    if request.tools or len(request.messages) > 2:
        return None
    system = " ".join(_texts_of(request.system))
    if _TITLE.search(system) or _schema_asks_title(request):
        return "title"
    if _SUMMARY.search(system):
        return "summary"
    return None


def _first(headers: dict[str, str], names: tuple[str, ...]) -> str | None:
    return next((headers[n] for n in names if headers.get(n)), None)


def _int(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


def _says_subagent(request: Request) -> bool:
    first = request.system[0] if request.system else None
    return isinstance(first, Text) and SUBAGENT_FLAG in first.text


def _request_hash(ex: Exchange, messages: tuple[str, ...], memo: HashMemo) -> str | None:
    """The request without per-request noise, built on the hashes of its parts: the
    messages' already made, the system blocks' and tools' remembered in `memo`."""
    if ex.request is None:
        return None
    r = ex.request
    system = [memoized(b, memo, _system_block_hash) for b in r.system]
    tools = [memoized(t, memo, local_hash) for t in r.tools]
    return local_hash([urlsplit(ex.url).path, r.model, r.stream, r.parameters, system,
                       tools, messages])


def _system_block_hash(block: Block) -> str:
    return local_hash(_without_cch(block))


def _without_cch(block: Block) -> Block | str:
    """Claude Code puts a per-request `cch=<hex>` in its first system block; a retry of the
    same call differs only there."""
    if isinstance(block, Text) and "cch=" in block.text:
        return _CCH.sub("", block.text)
    return block


def _continues_compacted(request: Request) -> bool:
    first = next((m for m in request.messages if m.role == "user"), None)
    return first is not None and any(
        t.lstrip().startswith(CONTINUATION_PREFIX) for t in _texts(first))


def _schema_asks_title(request: Request) -> bool:
    """Claude Code's title call asks for JSON with one "title" property."""
    fmt = (request.parameters.get("output_config") or {}).get("format") or {}
    props = (fmt.get("schema") or {}).get("properties") if isinstance(fmt, dict) else None
    return isinstance(props, dict) and list(props) == ["title"]


def _reply_hash(ex: Exchange, memo: HashMemo) -> str | None:
    if ex.status != COMPLETE or ex.response is None or not ex.response.content:
        return None
    return _memoized_message(Message(role="assistant", content=ex.response.content), memo)


def _tool_calls(ex: Exchange) -> tuple[tuple[str, str, str | None], ...]:
    content = ex.response.content if ex.response else []
    return tuple((b.id, b.name, _prompt_argument(b)) for b in content if isinstance(b, ToolCall))


def _prompt_argument(call: ToolCall) -> str | None:
    args = call.arguments
    prompt = args.get("prompt") if isinstance(args, dict) else None
    return prompt.strip() if isinstance(prompt, str) else None


def _agent_links(messages: list[Message]) -> dict[str, str]:
    """Claude Code's tool result for a subagent call ends with `agentId: <id>`. Only the
    messages after those shared with the stream's previous request are read: those were
    read then."""
    links = {}
    for message in messages:
        for block in message.content:
            if isinstance(block, ToolResult):
                for text in _texts_of(block.content):
                    # the substring test first: tool results can be whole files
                    if "agentId:" in text and (match := AGENT_ID.search(text)):
                        links[block.tool_call_id] = match.group(1)
    return links


def _last_user(request: Request) -> Message | None:
    return next((m for m in reversed(request.messages) if m.role == "user"), None)


def _texts(message: Message | None) -> tuple[str, ...]:
    return tuple(s.strip() for s in _texts_of(message.content)) if message else ()


def _texts_of(blocks: list[Block]) -> list[str]:
    return [b.text for b in blocks if isinstance(b, Text)]


def _empty_text(block: Block) -> bool:
    return isinstance(block, Text) and not block.text and not block.citations


def _usage(ex: Exchange) -> dict[str, int]:
    usage = ex.response.usage if ex.response else None
    return {f: (getattr(usage, f, None) or 0) for f in _USAGE_FIELDS}
