"""Real Claude Code sessions, recorded: the CLI from npm works through a scripted task under
`forge-record run`, whose proxy sends api.anthropic.com to forge_record.mock, and every call's
bytes are kept as the mock received and sent them.

    sessions(count, calls=150, window=None) -> list[list[gen_session.Call]]   recorded once,
                                                                              then cached

What is real is every request byte and header, as `run` sees them: Claude Code's own system
prompt, its ~65 KB of tool schemas, metadata, beta headers, cache markers, and the history it
resends, with the output of tools it really ran. Recorded through `run` because the CLI writes
its requests for api.anthropic.com differently: there, and not with ANTHROPIC_BASE_URL set, its
first system block (`x-anthropic-billing-header: ...`) carries a `cch` value that changes on
every call. What is scripted is the answers: each main-loop call gets an assistant turn made as
bench/gen_session.py makes them (thinking with a signature now and then, prose, one tool call),
streamed the way the API cuts streams, with the response headers the API documents (request
id, organization, rate limits); the tool call is a plan's next step, run for real in a fresh
copy of this repository's source at PROJECT_REV: Read part of a file, Bash (grep for an
identifier, git, ls, wc, sed), or Edit a line of a file read before. Halfway, the main loop
hands a task to a sub-agent (Claude Code's Agent tool), which makes AGENT_CALLS calls of its
own with its own system prompt and tools before it reports back. The last call gets a closing
text. The usage each answer reports grows with the request (a quarter of its bytes as cache
reads), and count_tokens answers the same. At 150 calls (~500 KB, ~125,000 tokens) Claude
Code 2.1.197 does not compact. With `window` it compacts as if its model's context were that
many tokens (CLAUDE_CODE_AUTO_COMPACT_WINDOW, 100,000 at least): past ~360 KB at 125,000 it
asks for a summary (a user message of its own, sometimes followed by a system-role reminder),
which the mock writes naming the task, so the calls after it still read as the main loop's;
a 1,000-call session compacts 10 times, every ~95 calls, ~210 KB a request on average.

A recording depends on the CLI's version, the seed, the number of calls and the window; it is
kept in .cache/bench-sessions/ (or $FORGE_BENCH_SESSIONS; the CLI's prompts are not ours to
ship, so none is committed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

# gen_session: bench/ is on sys.path (run from there, or imported by a bench that is)
import gen_session
import orjson
import zstandard
from gen_session import Call, Words

from forge_record.mock import MockUpstream, Received, Reply
from forge_record.mock.anthropic import COMPACT_INSTRUCTION

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("FORGE_BENCH_SESSIONS") or ROOT / ".cache" / "bench-sessions")
PROJECT_REV = "c9cba53"  # the source tree the agent works in: fixed, so recordings repeat
TASK_MARK = "forge-record-bench-task"
AGENT_MARK = "forge-record-bench-subtask"
AGENT_CALLS = 8
FORMAT = 3  # of a recording: a new script makes recordings of its own
FORGE = str(Path(sys.executable).with_name("forge-record"))
EPOCH = 1_796_400_000  # the recorded answers' clock (2026-12-04), so recordings repeat
DUMMY_KEY = "forge-record-bench-dummy-key"  # the mock takes any
SSE_HEADERS = {"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache"}


def claude() -> str | None:
    local = ROOT / ".cache/npm/node_modules/.bin/claude"
    return str(local) if local.exists() else shutil.which("claude")


def sessions(count: int, calls: int = 150, window: int | None = None) -> list[list[Call]]:
    """`count` sessions of one Claude Code version on one project (seeds 0..count-1); with
    `window`, the CLI compacts its conversation as if the model's context were that many
    tokens (CLAUDE_CODE_AUTO_COMPACT_WINDOW, 100,000 at least)."""
    cli = claude()
    if cli is None:
        sys.exit("Claude Code is not installed (scripts/test installs it with npm)")
    version = subprocess.run([cli, "--version"], capture_output=True, text=True,
                             check=True).stdout.split()[0]
    out = []
    for seed in range(count):
        compacted = f"-window{window}" if window else ""
        path = CACHE / f"claude-{version}-v{FORMAT}-seed{seed}-calls{calls}{compacted}.jsonl.zst"
        if not path.exists():
            CACHE.mkdir(parents=True, exist_ok=True)
            lines = b"".join(orjson.dumps({**vars(c), "request": c.request.decode(),
                                           "response": c.response.decode()}) + b"\n"
                             for c in record(cli, seed, calls, window))
            path.write_bytes(zstandard.ZstdCompressor(level=19).compress(lines))
        text = zstandard.ZstdDecompressor().decompress(path.read_bytes())
        out.append([Call(c["path"], c["request"].encode(), c["response"].encode(), c["chain"],
                         c["request_headers"], c["response_headers"])
                    for c in map(orjson.loads, text.splitlines())])
    return out


def checkout(tmp: Path) -> Path:
    """A fresh git checkout of the project at PROJECT_REV in tmp/project."""
    work = tmp / "project"
    work.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", PROJECT_REV, "recorder",
                              "store"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(work)], input=archive, check=True)
    git = ["git", "-c", "user.email=dev@example.com", "-c", "user.name=dev"]
    subprocess.run([*git, "init", "-q"], cwd=work, check=True)
    subprocess.run([*git, "add", "-A"], cwd=work, check=True)
    subprocess.run([*git, "commit", "-qm", "start"], cwd=work, check=True)
    return work


def record(cli: str, seed: int, calls: int, window: int | None = None) -> list[Call]:
    with scripted(cli, seed, calls, window) as (script, run, agent, env, work):
        done = subprocess.run([FORGE, "run", *run, "--", *agent], env=env, cwd=work,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=1800)
        if done.returncode != 0:
            sys.exit(f"Claude Code exited {done.returncode}: {done.stderr[-500:]}")
        return script.recorded


@contextlib.contextmanager
def scripted(cli: str, seed: int, calls: int, window: int | None = None
             ) -> Iterator[tuple[Script, list[str], list[str], dict[str, str], Path]]:
    """One session's set-up: the plan's Script answering from a mock, the options that make
    `forge-record run` send the CLI's calls there, the CLI's command, its environment and
    the fresh checkout it works in."""
    with tempfile.TemporaryDirectory(prefix="forge-bench-cli-") as tmp:
        # A fresh home and checkout per session, as on each member's machine of a team.
        work, home = checkout(Path(tmp)), Path(tmp) / "home"
        home.mkdir()
        script = Script(seed, calls, work)
        with MockUpstream(routes=[("POST", lambda p: p == "/v1/messages", script.reply),
                                  ("POST", lambda p: p == "/v1/messages/count_tokens",
                                   script.count)]) as mock:
            env = {"PATH": f"{Path(cli).parent}{os.pathsep}{os.environ['PATH']}",
                   "HOME": str(home), "TMPDIR": tmp, "ANTHROPIC_API_KEY": DUMMY_KEY,
                   "FORGE_RECORD_HOME": str(Path(tmp) / "forge"),  # its store: not kept
                   "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
                   "DISABLE_ERROR_REPORTING": "1", "DISABLE_AUTOUPDATER": "1",
                   "IS_SANDBOX": "1",  # lets --dangerously-skip-permissions run as root
                   **({"CLAUDE_CODE_AUTO_COMPACT_WINDOW": str(window)} if window else {})}
            task = (f"Review the store code of this project and tidy what you find "
                    f"({TASK_MARK} {seed}).")
            yield (script, ["--upstream", f"api.anthropic.com={mock.url}"],
                   [cli, "-p", task, "--dangerously-skip-permissions"], env, work)


class Script:
    """The mock's answers: a plan of tool calls over the project, one per main-loop call."""

    def __init__(self, seed: int, calls: int, work: Path) -> None:
        # One vocabulary for every session, its own words in each.
        self.words = Words(random.Random(1000))
        self.rng = self.words.rng = random.Random(seed)
        self.calls, self.work = calls, work
        self.files = sorted(str(p) for p in work.rglob("*.py") if p.stat().st_size)
        self.read: list[str] = []
        self.recorded: list[Call] = []
        self.organization = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        self.lock = threading.Lock()

    def reply(self, _mock: MockUpstream, received: Received) -> Reply:
        request = received.json()
        chain = _chain(orjson.dumps(request))  # the body as sent may be content-encoded
        with self.lock:
            content, stop = self.answer(request, chain)
            usage = {"input_tokens": 3, "cache_creation_input_tokens": self.rng.randint(100, 4000),
                     "cache_read_input_tokens": len(received.body) // 4, "output_tokens": 1}
            message = gen_session.message(self.rng, request["model"], content, stop, usage)
            stream = gen_session.sse(message, self.rng)
            headers = self.api_headers(len(received.body))
            # the date the answers' clock says (the mock sends its own Date header)
            date = time.strftime("%a, %d %b %Y %H:%M:%S GMT",
                                 time.gmtime(EPOCH + 7 * len(self.recorded)))
            self.recorded.append(Call(received.path, received.body, stream, chain,
                                      # as the CLI sent them: the proxy named the mock
                                      received.headers | {"host": "api.anthropic.com"},
                                      {**SSE_HEADERS, "date": date, **headers}))
        events = [e + b"\n\n" for e in stream.split(b"\n\n") if e]
        return dataclasses.replace(Reply.stream(events), headers=headers)

    def count(self, _mock: MockUpstream, received: Received) -> Reply:
        """count_tokens, which the CLI asks near its compaction threshold: what the usage
        of an answer to these bytes would say."""
        return Reply.json({"input_tokens": len(received.body) // 4})

    def api_headers(self, size: int) -> dict[str, str]:
        """The headers the API documents on every response: its request id, the
        organization, and where each rate limit stands (spent by this call's tokens)."""
        n, rng = len(self.recorded), self.rng
        now = EPOCH + 7 * n
        reset = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + 60 - now % 60))
        tokens = size // 4
        out = {"request-id": "req_011" + gen_session.token(rng, 21),
               "anthropic-organization-id": self.organization}
        for kind, limit, left in (("requests", 4000, 3999), ("input-tokens", 2_000_000,
                                  2_000_000 - tokens), ("output-tokens", 400_000, 399_000),
                                  ("tokens", 2_400_000, 2_399_000 - tokens)):
            out |= {f"anthropic-ratelimit-{kind}-limit": str(limit),
                    f"anthropic-ratelimit-{kind}-remaining": str(max(0, left)),
                    f"anthropic-ratelimit-{kind}-reset": reset}
        return out | {"cf-ray": f"{rng.getrandbits(64):016x}-SJC", "x-robots-tag": "none"}

    def answer(self, request: dict, chain: str) -> tuple[list[dict], str]:
        # The user's last message: the CLI may put a system-role reminder after it.
        last = next(m["content"] for m in reversed(request["messages"]) if m["role"] == "user")
        said = [last] if isinstance(last, str) else [
            b.get("text", "") for b in last if b.get("type") == "text"]
        # The compaction request ends with a text block of its own that states the task after
        # a preamble; tool output and reminders may quote the instruction (this repository's
        # mock does), and they are tool results or come earlier, tagged.
        if said and COMPACT_INSTRUCTION in said[-1][:1000] and not said[-1].startswith("<"):
            summary = f"<summary>{self.words.prose(3000)} ({TASK_MARK})</summary>"
            return [{"type": "text", "text": summary}], "end_turn"
        made = sum(c.chain == chain for c in self.recorded)
        if chain == "side" or made >= (AGENT_CALLS if chain == "agent" else self.calls) - 1:
            return [{"type": "text", "text": self.words.prose(self.rng.randint(100, 600))}], \
                "end_turn"
        content = []
        if self.rng.random() < 0.4:
            content.append(gen_session.thinking(self.words))
        content.append({"type": "text", "text": self.words.prose(self.rng.randint(30, 300))})
        name, args = self.delegate() if chain == "main" and made == self.calls // 2 else \
            self.step()
        content.append({"type": "tool_use", "id": "toolu_01" + gen_session.token(self.rng, 22),
                        "name": name, "input": args})
        return content, "tool_use"

    def delegate(self) -> tuple[str, dict]:
        return "Agent", {"description": self.words.sentence(2, 4).rstrip(".?:"),
                         "prompt": f"{self.words.prose(200)} ({AGENT_MARK})",
                         "subagent_type": "general-purpose"}

    def step(self) -> tuple[str, dict]:
        """The plan's next tool call."""
        rng = self.rng
        path = rng.choice(self.files)
        lines = Path(path).read_text().splitlines()
        roll = rng.random()
        if roll < 0.45:
            self.read.append(path)
            limit = rng.choice((40, 80, 120))
            return "Read", {"file_path": path, "offset": rng.randint(1, max(1, len(lines) - limit)),
                            "limit": limit}
        if roll < 0.85 or not self.read:
            return "Bash", {"command": self.command(path, lines), "description":
                            self.words.sentence(3, 7).rstrip(".?:")}
        path = rng.choice(self.read)
        text = Path(path).read_text()
        unique = [line for line in text.splitlines() if len(line.strip()) > 20
                  and text.count(line) == 1]
        old = rng.choice(unique) if unique else text.splitlines()[0]
        return "Edit", {"file_path": path, "old_string": old, "new_string": old.rstrip() +
                        "  # " + self.words.sentence(2, 5).lower()}

    def command(self, path: str, lines: list[str]) -> str:
        rng = self.rng
        rel = os.path.relpath(path, self.work)
        idents = [w for line in lines for w in line.replace("(", " ").split()
                  if w.isidentifier() and len(w) > 5] or ["def"]
        start = rng.randint(1, max(1, len(lines) - 30))
        return rng.choice([
            f"grep -rn {rng.choice(idents)} store recorder | head -40",
            f"grep -rn 'def {rng.choice(idents)}' . | head -20",
            f"git log --oneline -5 -- {rel}", "git status --short", "git diff --stat",
            f"ls -la {os.path.dirname(rel) or '.'}", f"wc -l {os.path.dirname(rel) or '.'}/*.py",
            f"sed -n '{start},{start + 30}p' {rel}",
        ])


def _chain(body: bytes) -> str:
    """Which conversation a request continues: the main loop's (its first message names
    the task), the sub-agent's, or a side call's (none was seen)."""
    return ("main" if TASK_MARK.encode() in body else
            "agent" if AGENT_MARK.encode() in body else "side")


if __name__ == "__main__":
    for n, made in enumerate(sessions(int(sys.argv[1]) if sys.argv[1:] else 1)):
        req = sum(len(c.request) for c in made)
        resp = sum(len(c.response) for c in made)
        print(f"seed {n}: {len(made)} calls ({sum(c.chain == 'main' for c in made)} main); "
              f"requests {req / 1e6:.1f} MB, responses {resp / 1e6:.2f} MB; first request "
              f"{len(made[0].request) / 1e3:.0f} KB, last {len(made[-1].request) / 1e3:.0f} KB")
