"""`forge-record sessions`: the recorded sessions, newest first, optionally filtered by
start time and tags, and by harness fingerprint.

--since and --tag select on the session rows (tags as `export --tag` matches them: the
session's, and its label's, which win), so they cost nothing per session left out.

Filters (--harness, --version, --model, --system-hash, --tools-hash, --beta) match
fingerprints: a session matches when one of its conversation calls (main, subagent or retry;
side calls such as a small model's title call do not count) has a fingerprint matching every
filter given. Calls, retries, side calls and tokens are counted as lineage counts them
(forge_record.lineage.usage: the one definition `run`, `show`, `view` and the exports use):
a retry is not a call, side calls are apart, "tokens in" is every prompt token read (uncached
+ cache read + cache write). Both come from lineage over the session's exchanges, computed
once and kept on the session row (store.kept): a listing reads session rows, and reads back
only the sessions it looks at that have no valid kept figure yet (older rows, sessions that
grew since), keeping theirs unless they are still being recorded.
"""

from __future__ import annotations

import fnmatch
import time
from dataclasses import asdict

import click
import orjson

from forge_record.commands.common import key_value, open_store, store_option
from forge_record.errors import StoreError
from forge_record.exporters.select import parse_when
from forge_record.identity import HASH_PREFIX
from forge_record.lineage import analyze
from forge_record.lineage.fingerprint import Fingerprint
from forge_record.store import kept
from forge_record.store.summary import status


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
        rows = _listed(st, parse_when(since) if since else None, tag, wanted, limit)
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


def _listed(st, since: float | None, tags: dict[str, str], wanted: _Filter, limit: int
            ) -> list[dict]:
    """Up to `limit` sessions, newest first, started since `since`, tagged `tags` (a label's
    tags win) and, when filters are given, with a conversation call whose fingerprint matches
    them (their fingerprints then under "fingerprints")."""
    out, computed = [], {}
    for row in st.listing(since):
        merged = {**row["tags"], **(row["label_tags"] or {})}
        if any(merged.get(k) != v for k, v in tags.items()):
            continue
        summary = st.session_summary(row["id"])
        held = summary["calls"] + summary["side_calls"]  # every exchange it holds
        figure = kept.valid(row["lineage"], held) or _computed(st, row, computed)
        fingerprints = [Fingerprint(**f) for f in figure["fingerprints"]]
        for fp in fingerprints:  # the session row knows the version when headers did not
            fp.version = fp.version or row["harness_version"]
        if wanted.active and not any(wanted.matches(fp) for fp in fingerprints):
            continue
        listed = counted(summary, figure["usage"])
        if wanted.active:
            listed["fingerprints"] = [asdict(fp) for fp in fingerprints]
        out.append(listed)
        if len(out) == limit:
            break
    try:
        st.keep(kept.LINEAGE, computed)
    except StoreError:  # a cache: the next listing computes them again
        pass
    return out


def _computed(st, row: dict, computed: dict) -> dict:
    """The session's lineage figure, computed from its exchanges; added to `computed` to be
    kept unless a recorder may still add to the session."""
    exchanges = list(st.iter_exchanges(row["id"]))
    lineage = analyze(exchanges, row["harness"])
    used = {c.fingerprint for c in lineage.calls.values() if c.role != "side"}
    figure = {"usage": lineage.usage,
              "fingerprints": [asdict(f) for i, f in lineage.fingerprints.items() if i in used]}
    if status(row) != "recording":
        computed[row["id"]] = (figure, len(exchanges))
    return figure


def _exit_column(row: dict) -> str:
    """The exit code of an ended session; otherwise whether it is still recording or its
    recorder died ("interrupted")."""
    if row.get("exit_code") is not None:
        return str(row["exit_code"])
    return row.get("status") or "-"
