"""A synthetic Claude Code session: the wire bytes of N model calls, as an agent loop sends them.

    calls(n=150, seed=0) -> list[Call]     each Call: path, raw request body, raw SSE response

Deterministic for a seed. It mimics what Claude Code 2.1 puts on the wire (captured from the
real CLI against the mock upstream): compact JSON keyed model, messages, system, tools,
metadata, max_tokens, thinking, ..., stream; a ~15 KB system prompt in three text blocks and
~20 KB of tool schemas, both resent unchanged on every call; the whole history resent every
call, growing by an assistant turn (thinking with a signature, text, tool_use) and a user turn
of tool results (file contents with line numbers, test runs, git and grep output, edit
confirmations); one `cache_control` marker that moves to the newest block every call. Files
are re-read after edits, so there is near-duplicate content that block hashes cannot catch.
Two side chains share the session: a sub-agent run (its own system prompt and history,
started by an Agent tool call) and a few small title calls on a small model.

Responses are SSE streams cut the way the API cuts them (text in short deltas, tool input
JSON in fragments, pings), and each response is what the next request's assistant turn
repeats. Text is pseudo-English (Zipf-distributed made-up words) and code is Python-shaped,
so zstd sees about the redundancy it sees on real traffic, not the easy kind.
"""

from __future__ import annotations

import base64
import random
import string
from dataclasses import dataclass, field

import orjson

MODEL = "claude-sonnet-4-5-20250929"
SMALL_MODEL = "claude-haiku-4-5-20251001"
PATH = "/v1/messages?beta=true"
EPHEMERAL = {"type": "ephemeral"}


@dataclass
class Call:
    path: str
    request: bytes
    response: bytes  # SSE
    chain: str  # "main", "agent" or "title": which conversation it continues
    # As sent and answered, where a recording kept them (bench/cli_session.py); else None.
    request_headers: dict[str, str] | None = None
    response_headers: dict[str, str] | None = None


# --- text ------------------------------------------------------------------------------


class Words:
    """Made-up words with a Zipf-like frequency, so prose compresses like prose."""

    def __init__(self, rng: random.Random, size: int = 3000) -> None:
        self.rng = rng
        syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"] + ["th", "sh", "qu"]
        # sorted before shuffling: set order depends on the process's hash seed
        self.words = sorted({"".join(rng.choice(syllables) for _ in range(rng.choice(
            (1, 2, 2, 3, 3, 4)))) for _ in range(size)})
        rng.shuffle(self.words)
        self.weights = [1 / (rank + 1) for rank in range(len(self.words))]

    def sentence(self, lo: int = 6, hi: int = 18) -> str:
        words = self.rng.choices(self.words, self.weights, k=self.rng.randint(lo, hi))
        return " ".join(words).capitalize() + self.rng.choice(".....?:")

    def prose(self, chars: int) -> str:
        out: list[str] = []
        size = 0
        while size < chars:
            out.append(self.sentence())
            size += len(out[-1]) + 1
        return " ".join(out)

    def ident(self) -> str:
        return "_".join(self.rng.choices(self.words[:400], k=self.rng.randint(1, 3)))


def token(rng: random.Random, n: int) -> str:
    return "".join(rng.choices(string.ascii_letters + string.digits, k=n))


# --- the fixed parts: system prompt, tools ----------------------------------------------


def _system(words: Words, kb: int, who: str) -> list[dict]:
    sections = []
    while sum(map(len, sections)) < kb * 1000:
        title = words.sentence(2, 4).rstrip(".?:")
        bullets = "\n".join(f" - {words.sentence()}" for _ in range(words.rng.randint(3, 8)))
        sections.append(f"# {title}\n{words.prose(300)}\n{bullets}\n")
    return [
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197.db3; "
                                 "cc_entrypoint=cli;"},
        {"type": "text", "text": who, "cache_control": EPHEMERAL},
        {"type": "text", "text": "\n".join(sections), "cache_control": EPHEMERAL},
    ]


TOOL_NAMES = ["Agent", "Bash", "Edit", "Glob", "Grep", "NotebookEdit", "Read", "TaskCreate",
              "TaskList", "TaskUpdate", "WebFetch", "WebSearch", "Write", "Skill", "TaskOutput"]


def _tools(words: Words, kb: int) -> list[dict]:
    per_tool = kb * 1000 // len(TOOL_NAMES)
    tools = []
    for name in TOOL_NAMES:
        props = {}
        for _ in range(words.rng.randint(1, 5)):
            props[words.ident()] = {"description": words.sentence(), "type":
                                    words.rng.choice(["string", "number", "boolean"])}
        schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
                  "properties": props, "required": list(props)[:1],
                  "additionalProperties": False}
        used = len(orjson.dumps(schema)) + 60
        tools.append({"name": name, "description": words.prose(max(200, per_tool - used)),
                      "input_schema": schema})
    return tools


# --- the workspace the agent works in ---------------------------------------------------


class Repo:
    """Python-shaped files that the agent reads, edits and re-reads."""

    def __init__(self, words: Words, files: int = 24) -> None:
        self.words = words
        self.files = {f"src/{words.ident()}.py": self._module() for _ in range(files)}

    def _module(self) -> list[str]:
        w = self.words
        lines = [f'"""{w.sentence()}"""', "", "import os", "import re", ""]
        for _ in range(w.rng.randint(5, 13)):
            args = ", ".join(w.ident() for _ in range(w.rng.randint(0, 3)))
            lines += [f"def {w.ident()}({args}):", f'    """{w.sentence()}"""']
            for _ in range(w.rng.randint(3, 14)):
                lhs, rhs = w.ident(), w.ident()
                lines.append(w.rng.choice([
                    f"    {lhs} = {rhs}({w.ident()})",
                    f"    if {lhs} is None:\n        return {rhs}",
                    f"    {lhs} = [{rhs} for {rhs} in {w.ident()} if {rhs}]",
                    f"    # {w.sentence(4, 10)}",
                    f"    {lhs}.append({rhs}.strip())",
                ]))
            lines += [f"    return {w.ident()}", ""]
        return "\n".join(lines).split("\n")

    def read(self, path: str) -> str:
        return "\n".join(f"{n:>6}\u2192{line}" for n, line in enumerate(self.files[path], 1))

    def edit(self, path: str) -> tuple[str, str]:
        lines = self.files[path]
        i = self.words.rng.randrange(len(lines))
        old = lines[i]
        lines[i] = old + f"  # {self.words.sentence(3, 8)}" if old.strip() else "    pass"
        return old, lines[i]


# --- the session ------------------------------------------------------------------------


@dataclass
class Conversation:
    system: list[dict]
    tools: list[dict]
    model: str = MODEL
    messages: list[dict] = field(default_factory=list)

    def body(self, metadata: dict, max_tokens: int = 32000, thinking: bool = True) -> bytes:
        messages = [dict(m, content=[dict(b) for b in m["content"]]) for m in self.messages]
        messages[-1]["content"][-1]["cache_control"] = EPHEMERAL  # moves every call
        body = {"model": self.model, "messages": messages, "system": self.system,
                "tools": self.tools, "metadata": metadata, "max_tokens": max_tokens}
        if thinking:
            body["thinking"] = {"type": "adaptive"}
            body["context_management"] = {"edits": [{"type": "clear_thinking_20251015",
                                                     "keep": "all"}]}
        body["stream"] = True
        return orjson.dumps(body)


class Session:
    def __init__(self, seed: int, system_kb: int, tools_kb: int,
                 harness_seed: int | None = None) -> None:
        # With a harness_seed, what sessions of one harness version in one project share
        # comes from it: vocabulary, repository files, system prompts, tools and CLAUDE.md;
        # what the agent does, and its own words, from `seed`.
        self.rng = random.Random(seed if harness_seed is None else harness_seed)
        self.words = Words(self.rng)
        self.repo = Repo(self.words)
        tools = _tools(self.words, tools_kb)
        self.main = Conversation(_system(self.words, system_kb, "You are Claude Code."), tools)
        self.agent = Conversation(_system(self.words, system_kb // 3, "You are a sub-agent."),
                                  [t for t in tools if t["name"] != "Agent"])
        self.metadata = {"user_id": orjson.dumps({
            "device_id": self.rng.randbytes(32).hex(), "account_uuid": "",
            "session_id": f"{self.rng.randbytes(4).hex()}-{self.rng.randbytes(2).hex()}-4105-"
                          f"b781-{self.rng.randbytes(6).hex()}"}).decode()}
        self.pytest_failures = [self.words.ident() for _ in range(6)]
        self.claude_md = None
        if harness_seed is not None:
            self.claude_md = self.words.prose(1500)
            self.rng = self.words.rng = random.Random(seed)
            self.metadata = {"user_id": orjson.dumps({
                "device_id": self.rng.randbytes(32).hex(), "account_uuid": "",
                "session_id": f"{self.rng.randbytes(16).hex()}"}).decode()}

    # what the agent does each turn, and what the tools print

    def tool_use(self) -> tuple[dict, str]:
        """One tool call and its result text."""
        rng, repo = self.rng, self.repo
        tid = "toolu_01" + token(rng, 22)
        path = rng.choice(list(repo.files))
        kind = rng.choices(["read", "edit", "test", "grep", "git", "ls"], [5, 3, 2, 2, 1, 1])[0]
        if kind == "read":
            return _use(tid, "Read", {"file_path": f"/home/dev/app/{path}"}), repo.read(path)
        if kind == "edit":
            old, new = repo.edit(path)
            snippet = repo.read(path).split("\n")[:12]
            return (_use(tid, "Edit", {"file_path": f"/home/dev/app/{path}", "old_string": old,
                                       "new_string": new}),
                    f"The file /home/dev/app/{path} has been updated. Here's the result of "
                    "running `cat -n` on a snippet of the edited file:\n" + "\n".join(snippet))
        if kind == "test":
            if self.pytest_failures and rng.random() < 0.3:
                self.pytest_failures.pop()
            return (_use(tid, "Bash", {"command": "python -m pytest -x -q 2>&1 | tail -40",
                                       "description": "Run the tests"}), self._pytest())
        if kind == "grep":
            pattern = self.words.ident()
            w = self.words
            hits = [f"src/{w.ident()}.py:{rng.randint(1, 300)}:    {pattern} = "
                    f"{w.ident()}({w.ident()})" for _ in range(rng.randint(3, 25))]
            use = _use(tid, "Grep", {"pattern": pattern, "output_mode": "content"})
            return use, "\n".join(hits)
        if kind == "git":
            changed = rng.sample(list(repo.files), 3)
            return (_use(tid, "Bash", {"command": "git status --short && git diff --stat",
                                       "description": "Show changes"}),
                    "\n".join(f" M {p}" for p in changed) + "\n" + "\n".join(
                        f" {p} | {rng.randint(1, 40)} ++--" for p in changed))
        listing = "\n".join(f"-rw-r--r-- 1 dev dev {rng.randint(200, 9000):>5} Nov 30 12:{i:02d}"
                            f" {p.split('/')[-1]}" for i, p in enumerate(repo.files))
        return _use(tid, "Bash", {"command": "ls -la src", "description": "List files"}), listing

    def _pytest(self) -> str:
        lines = [f"FAILED tests/test_{name}.py::test_{name}_{i} - AssertionError: "
                 f"assert {self.rng.randint(0, 99)} == {self.rng.randint(0, 99)}"
                 for i, name in enumerate(self.pytest_failures)]
        summary = f"{len(self.pytest_failures)} failed, {self.rng.randint(80, 90)} passed"
        return "\n".join([*lines, f"======= {summary} in {self.rng.uniform(1, 9):.2f}s ======="])

    def assistant_turn(self, tools: int) -> tuple[list[dict], list[dict]]:
        """(assistant content, the user's tool_result blocks that answer it)."""
        content: list[dict] = []
        if self.rng.random() < 0.4:
            content.append(thinking(self.words))
        content.append({"type": "text", "text": self.words.prose(self.rng.randint(30, 300))})
        results = []
        for _ in range(tools):
            use, output = self.tool_use()
            content.append(use)
            results.append({"tool_use_id": use["id"], "type": "tool_result", "content": output,
                            "is_error": False})
        return content, results

    def first_user(self, task: str) -> dict:
        reminder = ("<system-reminder>\nAs you answer the user's questions, you can use the "
                    f"following context:\n# claudeMd\n{self.claude_md or self.words.prose(1500)}\n"
                    "</system-reminder>\n")
        return {"role": "user", "content": [{"type": "text", "text": reminder},
                                            {"type": "text", "text": task}]}


def thinking(words: Words) -> dict:
    """A thinking block as the API returns it: prose and an opaque signature."""
    return {"type": "thinking", "thinking": words.prose(words.rng.randint(100, 900)),
            "signature": base64.b64encode(words.rng.randbytes(300)).decode()}


def _use(tid: str, name: str, args: dict) -> dict:
    return {"type": "tool_use", "id": tid, "name": name, "input": args}


def calls(n: int = 150, seed: int = 0, system_kb: int = 15, tools_kb: int = 20,
          harness_seed: int | None = None, compact_kb: int | None = None) -> list[Call]:
    """The wire bytes of an n-call session (main chain, one sub-agent run, title calls).
    Sessions with the same `harness_seed` share a harness version and a project (see
    Session). `compact_kb`: once a main-chain request is past this size, the conversation
    is compacted as Claude Code does it (a new one that starts from a summary), so a long
    session's contexts stay below it."""
    s = Session(seed, system_kb, tools_kb, harness_seed)
    s.main.messages.append(s.first_user(s.words.sentence()))
    agent_at = range(n // 2, n // 2 + max(1, n // 12))  # the sub-agent's calls
    titles_at = {1, n // 3, 2 * n // 3} - set(agent_at)
    out: list[Call] = []
    for i in range(n):
        if i in titles_at:
            out.append(_title_call(s))
        elif i in agent_at:
            if i == agent_at.start:
                s.agent.messages = [s.first_user(s.words.sentence())]
            out.append(_turn(s, s.agent, "agent", tools=1))
        else:
            if compact_kb and out and out[-1].chain == "main" and len(
                    out[-1].request) > compact_kb * 1000:
                s.main.messages = [_summary(s)]
            out.append(_turn(s, s.main, "main", tools=2 if s.rng.random() < 0.15 else 1))
    return out


def _summary(s: Session) -> dict:
    text = ("This session is being continued from a previous conversation that ran out of "
            f"context. The conversation is summarized below:\n{s.words.prose(6000)}")
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def _turn(s: Session, conv: Conversation, chain: str, tools: int) -> Call:
    body = conv.body(s.metadata)
    content, results = s.assistant_turn(tools)
    usage = {"input_tokens": 3, "cache_creation_input_tokens": s.rng.randint(100, 4000),
             "cache_read_input_tokens": len(body) // 4, "output_tokens": 1}
    reply = sse(message(s.rng, conv.model, content, "tool_use", usage), s.rng)
    conv.messages.append({"role": "assistant", "content": content})
    conv.messages.append({"role": "user", "content": results})
    return Call(PATH, body, reply, chain)


def _title_call(s: Session) -> Call:
    conv = Conversation([{"type": "text", "text": "Summarize this coding session in 5 words."}],
                        [], model=SMALL_MODEL,
                        messages=[{"role": "user", "content": [
                            {"type": "text", "text": s.words.prose(400)}]}])
    body = conv.body(s.metadata, max_tokens=512, thinking=False)
    usage = {"input_tokens": len(body) // 4, "output_tokens": 1}
    content = [{"type": "text", "text": s.words.sentence(3, 6)}]
    return Call(PATH, body, sse(message(s.rng, SMALL_MODEL, content, "end_turn", usage), s.rng),
                "title")


def message(rng: random.Random, model: str, content: list[dict], stop: str,
            usage: dict) -> dict:
    return {"id": "msg_01" + token(rng, 22), "type": "message", "role": "assistant",
            "model": model, "content": content, "stop_reason": stop, "stop_sequence": None,
            "usage": usage}


# --- SSE, cut like the API cuts it -------------------------------------------------------


def _event(name: str, data: dict) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def _cuts(rng: random.Random, text: str, lo: int, hi: int) -> list[str]:
    out, i = [], 0
    while i < len(text):
        step = rng.randint(lo, hi)
        out.append(text[i:i + step])
        i += step
    return out


def sse(message: dict, rng: random.Random) -> bytes:
    usage = message["usage"]
    start = dict(message, content=[], stop_reason=None,
                 usage=dict(usage, service_tier="standard"))
    events = [_event("message_start", {"type": "message_start", "message": start})]
    for i, block in enumerate(message["content"]):
        events.append(_block_events(i, block, rng))
        if rng.random() < 0.2:
            events.append(_event("ping", {"type": "ping"}))
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    out_tokens = sum(len(orjson.dumps(b)) for b in message["content"]) // 4
    events.append(_event("message_delta", {"type": "message_delta", "delta": delta,
                                           "usage": dict(usage, output_tokens=out_tokens)}))
    events.append(_event("message_stop", {"type": "message_stop"}))
    return b"".join(events)


def _block_events(i: int, block: dict, rng: random.Random) -> bytes:
    kind = block["type"]

    def delta(d: dict) -> bytes:
        return _event("content_block_delta", {"type": "content_block_delta", "index": i,
                                              "delta": d})

    if kind == "text":
        first = {"type": "text", "text": ""}
        deltas = [delta({"type": "text_delta", "text": t})
                  for t in _cuts(rng, block["text"], 2, 14)]
    elif kind == "thinking":
        first = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [delta({"type": "thinking_delta", "thinking": t})
                  for t in _cuts(rng, block["thinking"], 4, 40)]
        deltas.append(delta({"type": "signature_delta", "signature": block["signature"]}))
    else:
        first = dict(block, input={})
        raw = orjson.dumps(block["input"]).decode()
        deltas = [delta({"type": "input_json_delta", "partial_json": t})
                  for t in ["", *_cuts(rng, raw, 3, 30)]]
    start = _event("content_block_start", {"type": "content_block_start", "index": i,
                                           "content_block": first})
    stop = _event("content_block_stop", {"type": "content_block_stop", "index": i})
    return start + b"".join(deltas) + stop


if __name__ == "__main__":
    made = calls()
    req = sum(len(c.request) for c in made)
    resp = sum(len(c.response) for c in made)
    print(f"{len(made)} calls; requests {req / 1e6:.1f} MB, responses {resp / 1e6:.2f} MB; "
          f"first request {len(made[0].request) / 1e3:.0f} KB, "
          f"last {len(made[-1].request) / 1e3:.0f} KB")
