"""`forge-record show SESSION`: one session as a readable transcript, or as JSON."""

from __future__ import annotations

import time

import click
import orjson

from forge_record.commands.common import open_store, store_option
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


@click.command()
@store_option
@click.argument("ref", metavar="SESSION")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def show(store, ref, as_json) -> None:
    """Show SESSION (an id, a unique id prefix, or 'last')."""
    st = open_store(store)
    try:
        session_id = st.resolve_session(ref)
        session = st.get_session(session_id)
        exchanges = list(st.iter_exchanges(session_id))
        summary = st.session_summary(session_id)
    finally:
        st.close()
    if as_json:
        data = session_to_dict(session) | {"summary": summary}
        data["exchanges"] = [exchange_to_dict(e) for e in exchanges]
        click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())
        return
    click.echo(_header(session, summary))
    previous: Exchange | None = None
    for ex in exchanges:
        click.echo()
        click.echo(click.style(_exchange_line(ex), bold=True))
        for message in _new_messages(previous, ex):
            _echo_message(message)
        if ex.response is not None:
            _echo_message(Message(role="assistant", content=ex.response.content))
            if ex.response.error:
                click.echo(click.style(f"  error: {ex.response.error}", fg="red"))
        if ex.kind == "model":
            previous = ex


def _header(session, summary) -> str:
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(session.started_at))
    version = f" {session.harness_version}" if session.harness_version else ""
    lines = [
        f"session {session.id}  {session.harness or '-'}{version}  started {started}",
        f"  $ {' '.join(session.argv)}   (in {session.cwd}, exit {session.exit_code})",
        f"  {summary['calls']} model calls, {summary['side_calls']} side calls, "
        f"{summary['tool_calls']} tool calls; tokens: {summary['input_tokens'] or 0:,} in, "
        f"{summary['output_tokens'] or 0:,} out, {summary['cache_read_tokens'] or 0:,} cache read, "
        f"{summary['cache_write_tokens'] or 0:,} cache write",
    ]
    if session.tags:
        lines.append("  tags: " + ", ".join(f"{k}={v}" for k, v in session.tags.items()))
    return "\n".join(lines)


def _exchange_line(ex: Exchange) -> str:
    model = (ex.response and ex.response.model) or (ex.request and ex.request.model) or "?"
    took = f"{ex.ended_at - ex.started_at:.1f}s" if ex.ended_at else "-"
    usage = ex.response.usage if ex.response else None
    tokens = f", {usage.input_tokens or 0} in / {usage.output_tokens or 0} out" if usage else ""
    flags = f" [{', '.join(ex.flags)}]" if ex.flags else ""
    kind = "" if ex.kind == "model" else f" ({ex.kind})"
    return f"#{ex.seq} {model}{kind} · {ex.status} {ex.http_status} · {took}{tokens}{flags}"


def _new_messages(previous: Exchange | None, ex: Exchange) -> list[Message]:
    """The request's messages that the previous call had not already shown."""
    messages = ex.request.messages if ex.request else []
    if previous is None or previous.request is None:
        return messages
    shown = len(previous.request.messages) + 1  # its messages and its reply
    return messages[shown:] if len(messages) > shown else messages[-1:]


def _echo_message(message: Message) -> None:
    for block in message.content:
        click.echo(_render(message.role, block))


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
            return who + click.style(f"← result{mark}: " + _indent(_shorten(text, 400)), fg="yellow")
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
