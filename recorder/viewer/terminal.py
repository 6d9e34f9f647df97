"""The view model as a terminal transcript (`forge-record show`).

Contract: `render_text(view, color)` yields the transcript line by line (a yielded str may
hold several lines): the header, then each thread with its calls and the messages each one
added, a subagent's thread indented under the call that spawned it, a rule where a
compaction began a new segment, retries folded to one line in place, and side calls folded
to one line each at the end. With `color` False the text holds no escape codes at all;
`forge-record show` asks for colour only when its stdout is a terminal.

The terminal is for scanning, so it shortens harder than the HTML page folds: text to 2,000
characters, thinking to 300, tool calls and results to 400, anything to 12 lines.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Iterator
from typing import Any

import click
import orjson

from forge_record.identity import short
from forge_record.lineage import tokens_in
from forge_record.viewer.model import CallView, MessageView, Part, ThreadView, View

STEP = "    "  # how far a subagent thread is indented under its parent
MAX_LINES = 12


class _Transcript:
    def __init__(self, view: View, color: bool) -> None:
        self.view = view
        self.color = color
        self.threads = {t.id: t for t in view.threads}
        self.calls = {c.seq: c for t in view.threads for c in t.calls}
        self.done: set[str] = set()

    def paint(self, text: str, **style: Any) -> str:
        return click.style(text, **style) if self.color else text

    def lines(self) -> Iterator[str]:
        yield from _header(self.view)
        side = None
        for t in self.view.threads:
            if t.role == "side":
                side = t
            elif t.spawned_by is None:
                yield from self.thread(t, "")
        for t in self.view.threads:  # a subagent whose spawning call was never shown
            if t is not side and t.id not in self.done:
                yield from self.thread(t, "")
        if side is not None:
            yield ""
            yield self.paint(f"side calls ({len(side.calls)})", bold=True)
            for c in side.calls:
                yield "  " + self.folded(c)

    def thread(self, t: ThreadView, indent: str) -> Iterator[str]:
        self.done.add(t.id)
        yield ""
        yield indent + self.paint(_thread_line(t), bold=True, fg="magenta")
        starts = dict(t.segments)
        for c in t.calls:
            if c.seq in starts:
                after = f" after compaction #{starts[c.seq]}" if starts[c.seq] else ""
                yield indent + self.paint(f"── new segment{after} ──", fg="magenta")
            if c.folded:
                yield indent + self.folded(c)
            else:
                yield from self.call(c, indent)
            for child in c.spawns:
                if child in self.threads and child not in self.done:
                    yield from self.thread(self.threads[child], indent + STEP)

    def call(self, c: CallView, indent: str) -> Iterator[str]:
        yield ""
        yield indent + self.paint(_call_line(c), bold=True)
        for m in [*c.messages, MessageView(role="assistant", parts=c.reply)]:
            for part in m.parts:
                yield indent + self.part(m.role, part).replace("\n", "\n" + indent)
        if c.error:
            yield indent + self.paint(f"  error: {c.error}", fg="red")

    def folded(self, c: CallView) -> str:
        what = c.side_kind or c.role
        if c.retry_of is not None:
            what = f"retry of #{c.retry_of}" + (f" ({c.side_kind})" if c.side_kind else "")
        elif c.parent is not None and c.parent in self.calls:
            what += f" of {self.calls[c.parent].thread} up to #{c.parent}"
        said = f" · {c.said[:60]!r}" if c.said else ""
        return f"#{c.seq} {what} · " + _call_line(c).split(" ", 1)[1] + said

    def part(self, role: str, p: Part) -> str:
        who = f"  {role:>9}: "
        match p.kind:
            case "text":
                return who + _indent(_shorten(p.text, 2000))
            case "thinking":
                return who + self.paint("(thinking) " + _shorten(p.text, 300), dim=True)
            case "tool_call":
                return who + self.paint(f"→ {p.name} {_shorten(_compact(p), 400)}", fg="cyan")
            case "tool_result":
                mark = " (error)" if p.error else ""
                shown = _indent(_shorten(p.text, 400))
                return who + self.paint(f"← result{mark}: " + shown, fg="yellow")
            case _:
                return who + _indent(_shorten(p.text, 400))


def render_text(view: View, color: bool = False) -> Iterator[str]:
    return _Transcript(view, color).lines()


def _header(view: View) -> Iterator[str]:
    s, u, summary = view.session, view.usage, view.summary
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s["started_at"]))
    version = f" {s['harness_version']}" if s.get("harness_version") else ""
    yield f"session {s['id']}  {s.get('harness') or '-'}{version}  started {started}"
    where = [f"in {s['cwd']}"] if s.get("cwd") else []
    where.append(_ending(s, summary))
    yield f"  $ {shlex.join(s.get('argv') or [])}   ({', '.join(where)})"
    counts = [plural(u["calls"], "model call"), plural(u["retries"], "retry", "retries"),
              plural(u["side_calls"], "side call")]
    if summary.get("tool_calls") is not None:
        counts.append(plural(summary["tool_calls"], "tool call"))
    counts.append(plural(len(view.threads), "thread"))
    yield "  " + ", ".join(counts)
    yield f"  tokens: {_tokens(u)}; side calls {_tokens(u['side'])}"
    if s.get("tags"):
        yield "  tags: " + ", ".join(f"{k}={v}" for k, v in s["tags"].items())
    if view.engine:
        yield "  engine tokens: " + engine_line(view.engine)
    used = {c.fingerprint for t in view.threads for c in t.calls if c.role != "side"}
    for fp in (f for f in view.fingerprints if f.id in used):
        yield (f"  fingerprint: {fp.harness or '-'} {fp.version or '-'} {fp.model or '-'}"
               f" · system {short(fp.system_hash)} · tools {short(fp.tools_hash)}"
               f" · {plural(len(fp.betas), 'beta')}")


def engine_line(e: dict[str, int]) -> str:
    """The drift alarm: calls merged, prefix breaks, calls flagged."""
    parts = [plural(e["calls"], "call"), f"{e['merged']} merged",
             plural(e["prefix_breaks"], "prefix break")]
    parts += [f"{e[f]} {f}" for f in ("tokens_missing", "tokens_mismatch") if e.get(f)]
    return " · ".join(parts)


def plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def _ending(session: dict, summary: dict) -> str:
    """`exit 0`, or what is known instead: still recording, or the recorder died."""
    if session.get("exit_code") is not None:
        return f"exit {session['exit_code']}"
    status = summary.get("status")
    return {"recording": "still recording", "interrupted": "interrupted, no exit code"}.get(
        status or "", "no exit code")


def _tokens(u: dict) -> str:
    """Tokens in as lineage.usage defines them (every prompt token read), then the parts."""
    parts = [f"{u['input_tokens']:,} uncached"]
    parts += [f"{u[k]:,} {name}" for k, name in (("cache_read_tokens", "cache read"),
                                                 ("cache_write_tokens", "cache write")) if u[k]]
    return f"{tokens_in(u):,} in ({', '.join(parts)}), {u['output_tokens']:,} out"


def _thread_line(t: ThreadView) -> str:
    u = t.usage
    parts = [f"thread {t.id}"]
    if t.spawned_by:
        parts.append(f"spawned by #{t.spawned_by[0]} ({t.spawned_by[1]})")
    elif t.parent_thread:
        parts.append(f"from {t.parent_thread}")
    retries = f", {plural(u['retries'], 'retry', 'retries')}" if u["retries"] else ""
    parts.append(plural(u["calls"], "call") + retries)
    parts.append(f"{tokens_in(u):,} in / {u['output_tokens']:,} out")
    return " · ".join(parts)


def _call_line(c: CallView) -> str:
    took = f"{c.duration:.1f}s" if c.duration is not None else "-"
    u = c.usage
    tokens = f", {u['tokens_in']} in / {u['output'] or 0} out" if u else ""
    flags = f" [{', '.join(c.flags)}]" if c.flags else ""
    kind = "" if c.kind == "model" else f" ({c.kind})"
    http = f" {c.http_status}" if c.http_status is not None else ""
    return f"#{c.seq} {c.model or '?'}{kind} · {c.status}{http} · {took}{tokens}{flags}"


def _compact(p: Part) -> str:
    """A tool call's arguments on one line (the model keeps them pretty for the page)."""
    if p.error:
        return p.text
    try:
        return orjson.dumps(orjson.loads(p.text)).decode()
    except orjson.JSONDecodeError:
        return p.text


def _shorten(text: str, limit: int) -> str:
    text = text.strip()
    lines = text.splitlines()
    if len(lines) > MAX_LINES:
        text = "\n".join(lines[:MAX_LINES]) + f"\n… ({len(lines) - MAX_LINES} more lines)"
    return text if len(text) <= limit else text[:limit] + f"… ({len(text) - limit} more chars)"


def _indent(text: str) -> str:
    return text.replace("\n", "\n" + " " * 13)
