"""`forge-record show SESSION`: one session as a readable thread tree, or as JSON.

Text: the header, then each thread in the order it began: its calls with the messages each
one added, subagent threads indented under the call that spawned them, a rule where a
compaction began a new segment, retries folded to one line in place, and side calls (titles,
token counts, compaction, warm-ups) folded to one line each at the end. JSON: the session,
its summary, `lineage` (forge_record.lineage.to_dict) and the exchanges, each with its
place in the lineage (thread, role, parent, side_kind, retry_of, segment, fingerprint).
"""

from __future__ import annotations

import time

import click
import orjson

from forge_record.commands.common import open_store, store_option
from forge_record.identity import short
from forge_record.lineage import Call, Lineage, Thread, analyze, to_dict
from forge_record.lineage_signals import message_hash
from forge_record.records import (
    Exchange,
    Media,
    Message,
    Reasoning,
    Text,
    ToolCall,
    ToolResult,
    exchange_to_dict,
    session_to_dict,
)

STEP = "    "  # how far a subagent thread is indented under its parent


@click.command()
@store_option
@click.argument("ref", metavar="SESSION")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def show(store, ref, as_json) -> None:
    """Show SESSION (an id, a unique id prefix, or 'last') as a thread tree."""
    st = open_store(store)
    try:
        session_id = st.resolve_session(ref)
        session = st.get_session(session_id)
        exchanges = list(st.iter_exchanges(session_id))
        summary = st.session_summary(session_id)
    finally:
        st.close()
    lineage = analyze(exchanges, session.harness)
    if as_json:
        data = session_to_dict(session) | {"summary": summary, "lineage": to_dict(lineage)}
        data["exchanges"] = [exchange_to_dict(e) | _place(lineage.calls[e.seq]) for e in exchanges]
        click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())
        return
    click.echo(_header(session, summary, lineage))
    _Tree(lineage, {e.seq: e for e in exchanges}).render()


def _place(call: Call) -> dict:
    return {"thread": call.thread, "role": call.role, "parent": call.parent,
            "side_kind": call.side_kind, "retry_of": call.retry_of, "segment": call.segment,
            "fingerprint": call.fingerprint}


class _Tree:
    """Renders threads depth first: a subagent right after the call that spawned it."""

    def __init__(self, lineage: Lineage, exchanges: dict[int, Exchange]) -> None:
        self.lineage = lineage
        self.exchanges = exchanges
        self.children: dict[int, list[Thread]] = {}
        for thread in lineage.threads:
            if thread.spawned_by:
                self.children.setdefault(thread.spawned_by[0], []).append(thread)

    def render(self) -> None:
        side = None
        for thread in self.lineage.threads:
            if thread.role == "side":
                side = thread
            elif not thread.spawned_by:
                self.thread(thread, "")
        if side is not None:
            click.echo()
            click.echo(click.style(f"side calls ({len(side.calls)})", bold=True))
            for seq in side.calls:
                click.echo("  " + self.folded(seq))

    def thread(self, thread: Thread, indent: str) -> None:
        click.echo()
        click.echo(indent + click.style(_thread_line(thread), bold=True, fg="magenta"))
        segment_starts = {first: link for i, (first, link) in enumerate(thread.segments)
                          if i or link}
        for seq in thread.calls:
            if seq in segment_starts:
                link = segment_starts[seq]
                after = f" after compaction #{link}" if link else ""
                click.echo(indent + click.style(f"── new segment{after} ──", fg="magenta"))
            if self.lineage.calls[seq].role in ("retry", "side"):
                click.echo(indent + self.folded(seq))
                continue
            self.call(seq, indent)
            for child in self.children.get(seq, []):
                self.thread(child, indent + STEP)

    def call(self, seq: int, indent: str) -> None:
        ex = self.exchanges[seq]
        click.echo()
        click.echo(indent + click.style(_exchange_line(ex), bold=True))
        parent = self.exchanges.get(self.lineage.calls[seq].parent or -1)
        for message in _new_messages(parent, ex):
            _echo_message(message, indent)
        if ex.response is not None:
            _echo_message(Message(role="assistant", content=ex.response.content), indent)
            if ex.response.error:
                click.echo(indent + click.style(f"  error: {ex.response.error}", fg="red"))

    def folded(self, seq: int) -> str:
        call, ex = self.lineage.calls[seq], self.exchanges[seq]
        what = call.side_kind or call.role
        if call.retry_of is not None:
            what = f"retry of #{call.retry_of}" + (f" ({call.side_kind})" if call.side_kind else "")
        elif call.parent is not None:
            what += f" of {self.lineage.calls[call.parent].thread} up to #{call.parent}"
        text = " ".join(b.text for b in (ex.response.content if ex.response else [])
                        if isinstance(b, Text))
        said = f" · {' '.join(text.split())[:60]!r}" if text.strip() else ""
        return f"#{seq} {what} · " + _exchange_line(ex).split(" ", 1)[1] + said


def _header(session, summary, lineage: Lineage) -> str:
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(session.started_at))
    version = f" {session.harness_version}" if session.harness_version else ""
    u = lineage.usage
    lines = [
        f"session {session.id}  {session.harness or '-'}{version}  started {started}",
        f"  $ {' '.join(session.argv)}   (in {session.cwd}, exit {session.exit_code})",
        f"  {u['calls']} model calls, {u['retries']} retries, {u['side_calls']} side calls, "
        f"{summary['tool_calls']} tool calls, {len(lineage.threads)} threads",
        f"  tokens: {_tokens(u)}; side calls {_tokens(u['side'])}",
    ]
    if session.tags:
        lines.append("  tags: " + ", ".join(f"{k}={v}" for k, v in session.tags.items()))
    used = {c.fingerprint for c in lineage.calls.values() if c.role != "side"}
    for fp in (f for i, f in lineage.fingerprints.items() if i in used):
        lines.append(f"  fingerprint: {fp.harness or '-'} {fp.version or '-'} {fp.model or '-'}"
                     f" · system {short(fp.system_hash)} · tools {short(fp.tools_hash)}"
                     f" · {len(fp.betas)} betas")
    return "\n".join(lines)


def _tokens(u: dict) -> str:
    return (f"{u['input_tokens']:,} in, {u['output_tokens']:,} out, "
            f"{u['cache_read_tokens']:,} cache read, {u['cache_write_tokens']:,} cache write")


def _thread_line(thread: Thread) -> str:
    u = thread.usage
    parts = [f"thread {thread.id}"]
    if thread.spawned_by:
        parts.append(f"spawned by #{thread.spawned_by[0]} ({thread.spawned_by[1]})")
    elif thread.parent_thread:
        parts.append(f"from {thread.parent_thread}")
    parts.append(f"{u['calls']} calls" + (f", {u['retries']} retries" if u["retries"] else ""))
    parts.append(f"{u['input_tokens']:,} in / {u['output_tokens']:,} out")
    return " · ".join(parts)


def _exchange_line(ex: Exchange) -> str:
    model = (ex.response and ex.response.model) or (ex.request and ex.request.model) or "?"
    took = f"{ex.ended_at - ex.started_at:.1f}s" if ex.ended_at else "-"
    usage = ex.response.usage if ex.response else None
    tokens = f", {usage.input_tokens or 0} in / {usage.output_tokens or 0} out" if usage else ""
    flags = f" [{', '.join(ex.flags)}]" if ex.flags else ""
    kind = "" if ex.kind == "model" else f" ({ex.kind})"
    return f"#{ex.seq} {model}{kind} · {ex.status} {ex.http_status} · {took}{tokens}{flags}"


def _new_messages(parent: Exchange | None, ex: Exchange) -> list[Message]:
    """The request's messages after those it shares with its parent call's request and
    reply (all of them for the first call of a thread)."""
    messages = ex.request.messages if ex.request else []
    if parent is None or parent.request is None:
        return messages
    seen = [message_hash(m) for m in parent.request.messages]
    if parent.response is not None:
        seen.append(message_hash(Message(role="assistant", content=parent.response.content)))
    shared = 0
    while shared < min(len(seen), len(messages)) and message_hash(messages[shared]) == seen[shared]:
        shared += 1
    return messages[shared:] or messages[-1:]


def _echo_message(message: Message, indent: str = "") -> None:
    for block in message.content:
        click.echo(indent + _render(message.role, block).replace("\n", "\n" + indent))


def _render(role: str, block) -> str:
    who = f"  {role:>9}: "
    match block:
        case Text(text=text):
            return who + _indent(_shorten(text, 2000))
        case Reasoning(text=text, encrypted=enc):
            shown = text or ("[encrypted]" if enc else "")
            return who + click.style("(thinking) " + _shorten(shown, 300), dim=True)
        case ToolCall(name=name, arguments=args, arguments_raw=raw):
            shown = orjson.dumps(args).decode() if args is not None else raw
            return who + click.style(f"→ {name} {_shorten(shown, 400)}", fg="cyan")
        case ToolResult(content=content, is_error=err):
            text = "\n".join(b.text for b in content if isinstance(b, Text))
            mark = " (error)" if err else ""
            shown = _indent(_shorten(text, 400))
            return who + click.style(f"← result{mark}: " + shown, fg="yellow")
        case Media(type=kind, media_type=mt, size=size):
            return who + f"[{kind} {mt or ''} {size or '?'} bytes]"
        case _:
            return who + f"[{block.type}]"


def _shorten(text: str, limit: int) -> str:
    text = text.strip()
    lines = text.splitlines()
    if len(lines) > 12:
        text = "\n".join(lines[:12]) + f"\n… ({len(lines) - 12} more lines)"
    return text if len(text) <= limit else text[:limit] + f"… ({len(text) - limit} more chars)"


def _indent(text: str) -> str:
    return text.replace("\n", "\n" + " " * 13)
