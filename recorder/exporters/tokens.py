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
(per call, from its `x-weight-version` request header; null where none was sent).
docs/EXPORT.md maps them to veRL's and slime's fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import IO, Any

from forge_record.exporters.base import JsonLines, Options, Tally
from forge_record.exporters.units import SessionData, ThreadInfo, threads
from forge_record.records import Exchange, Tokens

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

    def add(self, ex: Exchange, tokens: Tokens, inserted: list[int]) -> None:
        ids = tokens.ids or []
        self.response_ids += inserted + ids
        self.response_mask += [0] * len(inserted) + [1] * len(ids)
        if self.log_probs is not None and tokens.logprobs is not None:
            self.log_probs += [0.0] * len(inserted) + [lp or 0.0 for lp in tokens.logprobs]
        else:
            self.log_probs = None
        self.seqs.append(ex.seq)
        self.weight_versions.append(ex.request_headers.get(WEIGHT_VERSION_HEADER))


def token_rows(kept: list[Exchange], tally: Tally) -> list[Row]:
    """The thread's calls with engine tokens, merged into rows (see the module docstring)."""
    rows: list[Row] = []
    for ex in kept:
        tokens = ex.response.tokens if ex.response else None
        if tokens is None or tokens.prompt_ids is None or tokens.ids is None:
            tally.skipped["calls without engine tokens"] += 1
            continue
        row = rows[-1] if rows else None
        if row is not None and row.extends(tokens.prompt_ids):
            have = len(row.prompt_ids) + len(row.response_ids)
            row.add(ex, tokens, tokens.prompt_ids[have:])
            tally.converted["calls merged into the previous call's row"] += 1
            continue
        if row is not None:
            tally.converted["prefix breaks (a new segment)"] += 1
        rows.append(Row(prompt_ids=list(tokens.prompt_ids)))
        rows[-1].add(ex, tokens, [])
    return rows


class Exporter:
    fingerprints = False  # its lines carry none: lineage need not make them

    def __init__(self, out: IO[bytes], options: Options, tally: Tally) -> None:
        self.lines = JsonLines(out)
        self.options = options
        self.tally = tally

    def write_session(self, data: SessionData) -> None:
        for thread, kept in threads(data, self.options, self.tally):
            for segment, row in enumerate(token_rows(kept, self.tally)):
                self.lines.write(line(data, thread, segment, row))
                self.tally.exported += 1

    def close(self) -> None:
        pass


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
