"""`tokens`: one JSON line per token segment of a thread, the engine's own ids, for RL trainers.

Only calls whose response holds the engine's tokens (`response.tokens`, recorded from an
engine that returned token ids) take part; re-tokenizing messages would train on tokens the
policy never sampled. Within a thread, calls are merged into rows by the rule every training
gateway uses: a call joins the current row when its prompt ids start with the row's prompt
ids + response ids; the tokens between (tool results, template glue) are appended with loss
mask 0 and logprob 0, then the call's sampled ids with mask 1 and their logprobs. Any other
call (compaction, a tool-schema change, a harness that rewrote history, a re-tokenized
answer) breaks the prefix and starts a new row: a new `segment` of the same thread. The
tally counts merged calls and prefix breaks: many breaks mean the records drift from what
the policy saw.

A line: `session_id`, `thread`, `segment` (0, 1, ... within the thread), `group_id` and
`task_id` (session tags or label tags of those names), `reward` (the session label's),
`seqs` (the calls merged), `prompt_ids`, `response_ids`, `response_mask`,
`rollout_log_probs` (null when a merged call came without logprobs) and `weight_versions`
(per call: its `x-weight-version` request header, else the engine's own (SGLang's
`meta_info.weight_version`), else the session's `weight_version` tag (serve's session
metadata); null where none says).
docs/EXPORT.md maps them to veRL's and slime's fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import IO, Any

from forge_record.exporters.base import JsonLines, Options, Tally
from forge_record.exporters.units import SessionData, ThreadInfo, threads
from forge_record.lineage import Lineage
from forge_record.records import Exchange, Tokens
from forge_record.tokens_check import TOKENS_MISMATCH, TOKENS_MISSING

WEIGHT_VERSION_HEADER = "x-weight-version"


@dataclass
class Row:
    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    log_probs: list[float] | None = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)
    weight_versions: list[str | None] = field(default_factory=list)

    def extends(self, prompt_ids: list[int]) -> bool:
        """Whether a call with these prompt ids continues this row."""
        have = len(self.prompt_ids) + len(self.response_ids)
        return (len(prompt_ids) >= have and prompt_ids[: len(self.prompt_ids)] == self.prompt_ids
                and prompt_ids[len(self.prompt_ids) : have] == self.response_ids)

    def add(self, ex: Exchange, tokens: Tokens, inserted: list[int],
            session_version: str | None = None) -> None:
        ids = tokens.ids or []
        self.response_ids += inserted + ids
        self.response_mask += [0] * len(inserted) + [1] * len(ids)
        if self.log_probs is not None and tokens.logprobs is not None:
            self.log_probs += [0.0] * len(inserted) + [lp or 0.0 for lp in tokens.logprobs]
        else:
            self.log_probs = None
        self.seqs.append(ex.seq)
        self.weight_versions.append(weight_version(ex) or session_version)


def weight_version(ex: Exchange) -> str | None:
    """The weights a call was sampled with, as the trainer or the engine says."""
    engine_own = ex.response.extras.get("weight_version") if ex.response else None
    found = ex.request_headers.get(WEIGHT_VERSION_HEADER) or engine_own
    return str(found) if found is not None else None


def token_rows(kept: list[Exchange], tally: Tally, session_version: str | None = None
               ) -> list[Row]:
    """The thread's calls with engine tokens, merged into rows (see the module docstring)."""
    rows: list[Row] = []
    for ex in kept:
        tokens = ex.response.tokens if ex.response else None
        if TOKENS_MISMATCH in ex.flags:  # kept as the engine sent them
            tally.converted[f"calls flagged {TOKENS_MISMATCH}"] += 1
        if tokens is None or tokens.prompt_ids is None or tokens.ids is None:
            why = f"flagged {TOKENS_MISSING}" if TOKENS_MISSING in ex.flags else \
                "without engine tokens"
            tally.skipped[f"calls {why}"] += 1
            continue
        row = rows[-1] if rows else None
        if row is not None and row.extends(tokens.prompt_ids):
            have = len(row.prompt_ids) + len(row.response_ids)
            row.add(ex, tokens, tokens.prompt_ids[have:], session_version)
            tally.converted[MERGED] += 1
            continue
        if row is not None:
            tally.converted[BROKE] += 1
        rows.append(Row(prompt_ids=list(tokens.prompt_ids)))
        rows[-1].add(ex, tokens, [], session_version)
    return rows


MERGED = "calls merged into the previous call's row"
BROKE = "prefix breaks (a new segment)"


def drift(exchanges: list[Exchange], lineage: Lineage) -> dict[str, int] | None:
    """A session's drift alarm, for `show` and `view`: of its calls with engine tokens, how
    many merged into the previous call's row and how many broke the prefix (first attempts
    of each thread, as the export merges them), and how many were flagged. None when no
    call went to an engine."""
    by_seq = {e.seq: e for e in exchanges}
    flagged = {f: sum(f in e.flags for e in exchanges) for f in (TOKENS_MISSING,
                                                                  TOKENS_MISMATCH)}
    with_tokens = sum(1 for e in exchanges if e.response and e.response.tokens)
    if not with_tokens and not any(flagged.values()):
        return None
    tally = Tally()
    for thread in lineage.threads:
        if thread.id == "side":
            continue
        token_rows([by_seq[s] for s in thread.calls if lineage.calls[s].retry_of is None
                    and s in by_seq], tally)
    return {"calls": with_tokens, "merged": tally.converted[MERGED],
            "prefix_breaks": tally.converted[BROKE], **flagged}


class Exporter:
    fingerprints = False  # its lines carry none: lineage need not make them

    def __init__(self, out: IO[bytes], options: Options, tally: Tally) -> None:
        self.lines = JsonLines(out)
        self.options = options
        self.tally = tally

    def write_session(self, data: SessionData) -> None:
        for thread, kept in threads(data, self.options, self.tally):
            for found in thread_lines(data, thread, kept, self.tally):
                self.lines.write(found)
                self.tally.exported += 1

    def close(self) -> None:
        pass


def thread_lines(data: SessionData, thread: ThreadInfo, kept: list[Exchange], tally: Tally
                 ) -> list[dict[str, Any]]:
    """A thread's lines: one per segment (the export's, and serve's trajectory endpoint's)."""
    rows = token_rows(kept, tally, _tag(data, "weight_version"))
    return [line(data, thread, segment, row) for segment, row in enumerate(rows)]


def line(data: SessionData, thread: ThreadInfo, segment: int, row: Row) -> dict[str, Any]:
    return {
        "session_id": data.session.id,
        "thread": thread.id,
        "segment": segment,
        "group_id": _tag(data, "group_id"),
        "task_id": _tag(data, "task_id"),
        "reward": data.reward,
        "seqs": row.seqs,
        "prompt_ids": row.prompt_ids,
        "response_ids": row.response_ids,
        "response_mask": row.response_mask,
        "rollout_log_probs": row.log_probs,
        "weight_versions": row.weight_versions,
    }


def _tag(data: SessionData, name: str) -> str | None:
    label_tags = (data.label or {}).get("tags") or {}
    return label_tags.get(name) or data.session.tags.get(name)
