"""`forge-record sessions`: the recorded sessions, newest first, optionally filtered by
start time and tags, and by harness fingerprint.

--since and --tag select on the session rows (tags as `export --tag` matches them: the
session's, and its label's, which win), so they cost nothing per session left out.

Filters (--harness, --version, --model, --system-hash, --tools-hash, --beta) are matched in
Python: a session matches when one of its conversation calls (main, subagent or retry; side
calls such as a small model's title call do not count) has a fingerprint matching every
filter given. Fingerprints are derived from the stored exchanges at read time
(forge_record.lineage); nothing is cached in the store yet, so a filtered listing reads the
exchanges of each session it looks at, newest first, and stops at --limit matches.
Calls, retries, side calls and tokens are counted as lineage counts them
(forge_record.lineage.usage: the one definition `run`, `show`, `view` and the exports use):
a retry is not a call, side calls are apart, "tokens in" is every prompt token read (uncached
+ cache read + cache write). So each listed session's exchanges are read once.
"""

from __future__ import annotations

import fnmatch
import itertools
import time
from dataclasses import asdict

import click
import orjson

from forge_record.commands.common import key_value, open_store, store_option
from forge_record.exporters.select import parse_when
from forge_record.identity import HASH_PREFIX
from forge_record.lineage import analyze, session_usage
from forge_record.lineage.fingerprint import Fingerprint


@click.command()
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.option("--limit", "-n", default=20, show_default=True, type=click.IntRange(min=1))
@click.option("--harness", help="Harness name (claude-code, codex, ...); glob patterns work.")
@click.option("--version", "version", help="Harness version, e.g. 2.1.197; glob patterns work.")
@click.option("--model", help="Model asked for, e.g. 'claude-opus-*'.")
@click.option("--system-hash", help="System prompt hash or a prefix of it (see show --json).")
@click.option("--tools-hash", help="Tool-schema list hash or a prefix of it.")
@click.option("--beta", "betas", multiple=True, help="A beta flag the calls sent; repeatable.")
@click.option("--since", metavar="WHEN", help="Sessions started at or after WHEN "
              "(2026-08-01, an ISO time, an epoch, or an age: 12h, 7d).")
@click.option("--tag", multiple=True, callback=key_value, metavar="K=V",
              help="Only sessions tagged K=V (at run, or by a label). Repeatable.")
def sessions(store, as_json, limit, harness, version, model, system_hash, tools_hash,
             betas, since, tag) -> None:
    """List recorded sessions."""
    wanted = _Filter(harness, version, model, system_hash, tools_hash, betas)
    st = open_store(store)
    try:
        candidates = _candidates(st, parse_when(since) if since else None, tag)
        if wanted.active:
            rows = _filtered(st, candidates, wanted, limit)
        else:
            rows = []
            for row in itertools.islice(candidates, limit):
                summary = st.session_summary(row["id"])
                usage = session_usage(st.iter_exchanges(row["id"]), summary["harness"])
                rows.append(counted(summary, usage))
    finally:
        st.close()
    if as_json:
        click.echo(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())
        return
    if not rows:
        hint = "No session matches." if wanted.active else (
            "No sessions recorded yet. Try: forge-record run -- claude")
        click.echo(hint, err=True)
        return
    click.echo(f"{'SESSION':<16}  {'STARTED':<16}  {'HARNESS':<12}  "
               "CALLS  RETRIES  TOOLS  TOKENS IN/OUT  EXIT/STATUS")
    for r in rows:
        started = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["started_at"]))
        tokens = f"{r['tokens_in']:,}/{r['output_tokens']:,}"
        exit_code = _exit_column(r)
        click.echo(
            f"{r['id']:<16}  {started:<16}  {(r['harness'] or '-'):<12}  "
            f"{r['calls']:>5}  {r['retries']:>7}  {r['tool_calls']:>5}  {tokens:>13}  "
            f"{exit_code:>4}"
        )


def counted(row: dict, usage: dict) -> dict:
    """The session row with the counts of forge_record.lineage.usage in place of the store's
    per-exchange sums (which count a retry as a call and a title call's tokens as spend)."""
    keys = ("calls", "retries", "side_calls", "tokens_in", "input_tokens", "output_tokens",
            "cache_read_tokens", "cache_write_tokens")
    return row | {k: usage[k] for k in keys}


class _Filter:
    def __init__(self, harness, version, model, system_hash, tools_hash, betas) -> None:
        self.globs = {"harness": harness, "version": version, "model": model}
        self.hashes = {"system_hash": system_hash, "tools_hash": tools_hash}
        self.betas = set(betas)
        self.active = any(self.globs.values()) or any(self.hashes.values()) or bool(betas)

    def matches(self, fp: Fingerprint) -> bool:
        for name, pattern in self.globs.items():
            if pattern and not fnmatch.fnmatchcase(getattr(fp, name) or "", pattern):
                return False
        for name, prefix in self.hashes.items():
            value = (getattr(fp, name) or "").removeprefix(HASH_PREFIX)
            if prefix and not (value and value.startswith(prefix.removeprefix(HASH_PREFIX))):
                return False
        return self.betas <= set(fp.betas)


def _candidates(st, since: float | None, tags: dict[str, str]):
    """Selection rows (Store.selection_rows) newest first, of the sessions started since
    `since` whose tags (a label's win) include `tags`."""
    for row in st.selection_rows(since=since, newest_first=True):
        merged = {**row["tags"], **(row["label_tags"] or {})}
        if all(merged.get(k) == v for k, v in tags.items()):
            yield row


def _filtered(st, candidates, wanted: _Filter, limit: int) -> list[dict]:
    """Matching sessions, newest first, each with the fingerprints of its conversation
    calls under "fingerprints"."""
    out = []
    for candidate in candidates:
        row = st.session_summary(candidate["id"])
        lineage = analyze(st.iter_exchanges(row["id"]), row["harness"])
        used = {c.fingerprint for c in lineage.calls.values() if c.role != "side"}
        fingerprints = [f for i, f in lineage.fingerprints.items() if i in used]
        for fp in fingerprints:  # the session row knows the version when headers did not
            fp.version = fp.version or row["harness_version"]
        if any(wanted.matches(fp) for fp in fingerprints):
            row = counted(row, lineage.usage)
            row["fingerprints"] = [asdict(fp) for fp in fingerprints]
            out.append(row)
            if len(out) == limit:
                break
    return out


def _exit_column(row: dict) -> str:
    """The exit code of an ended session; otherwise whether it is still recording or its
    recorder died ("interrupted")."""
    if row.get("exit_code") is not None:
        return str(row["exit_code"])
    return row.get("status") or "-"
