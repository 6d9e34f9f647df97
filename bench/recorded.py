"""Real CLI sessions recorded through `forge-record run` and kept as the store read them back:
records and raw bodies, which any revision's writer can store again (bench/storage.py). Used
by the benches of CLIs whose stored requests capture builds from more than one request's
bytes (Codex's WebSocket: bench/codex_session.py), or whose raw bodies are all a bench needs
(bench/gemini_session.py, bench/qwen_session.py). Cached in .cache/bench-sessions/ (or
$FORGE_BENCH_SESSIONS).

Each bench gives its CLI the same task (TASK) in a fresh copy of this repository's source,
under `forge-record run` (`run`), and has its mock answer from the same Plan.
"""

from __future__ import annotations

import base64
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import cli_session  # bench/ is on sys.path (run from there, or imported by a bench that is)
import orjson
import sqlalchemy as sa
import zstandard
from gen_session import Words

from forge_record.records import Exchange, exchange_from_dict, exchange_to_dict
from forge_record.store import open_store
from forge_record.store.reader import read_session


def sessions(command: str, label: str, fmt: int, count: int, calls: int,
             record: Callable[[str, int, int], list[Exchange]],
             variant: str = "") -> list[list[Exchange]]:
    """`count` sessions (seeds 0..count-1) of one version of the npm CLI `command` (`label`
    in messages), each `record(path, seed, calls)` once, then cached; `fmt` names the
    bench's recording format (a new script makes recordings of its own), `variant` a way of
    running the CLI that makes other recordings."""
    local = cli_session.ROOT / ".cache/npm/node_modules/.bin" / command
    cli = str(local) if local.exists() else shutil.which(command)
    if cli is None:
        sys.exit(f"{label} is not installed (scripts/test installs it with npm)")
    version = subprocess.run([cli, "--version"], capture_output=True, text=True,
                             check=True).stdout.split()[-1]
    return [cached(f"{command}{variant}-{version}-v{fmt}-seed{seed}-calls{calls}",
                   lambda seed=seed: record(cli, seed, calls))
            for seed in range(count)]


def cached(name: str, record: Callable[[], list[Exchange]]) -> list[Exchange]:
    """The session cached under `name`, recorded first if it is not."""
    path = cli_session.CACHE / f"{name}.jsonl.zst"
    if not path.exists():
        cli_session.CACHE.mkdir(parents=True, exist_ok=True)
        lines = b"".join(orjson.dumps({
            "record": exchange_to_dict(ex),
            "raw_request": base64.b64encode(ex.raw_request).decode(),
            "raw_response": base64.b64encode(ex.raw_response).decode()}) + b"\n"
            for ex in record())
        path.write_bytes(zstandard.ZstdCompressor(level=19).compress(lines))
    text = zstandard.ZstdDecompressor().decompress(path.read_bytes())
    return [exchange_from_dict(d["record"], base64.b64decode(d["raw_request"]),
                               base64.b64decode(d["raw_response"]))
            for d in map(orjson.loads, text.splitlines())]


TASK = "Review the store code of this project, one command at a time ({mark})."


def workspace(tmp: Path, files: dict[str, bytes] | None = None) -> Path:
    """What `run` runs a CLI in, under tmp: a fresh checkout of the project (tmp/project, see
    cli_session.checkout), an empty HOME (tmp/home) and `files` (paths under tmp: the CLI's
    own settings). Returns the checkout."""
    work = cli_session.checkout(tmp)
    (tmp / "home").mkdir()
    for name, data in (files or {}).items():
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / name).write_bytes(data)
    return work


def run(label: str, cli: str, tmp: Path, upstream: str, argv: list[str],
        env: dict[str, str]) -> list[Exchange]:
    """Run `cli argv` through `forge-record run --upstream upstream` in tmp/project (see
    cli_session.checkout), HOME tmp/home and the store in tmp/forge, `env` on top; leave the
    bench with the CLI's last words if it fails. Returns what the store read back."""
    forge_home = tmp / "forge"
    env = {"PATH": f"{Path(cli).parent}{os.pathsep}{os.environ['PATH']}",
           "HOME": str(tmp / "home"), "TMPDIR": str(tmp), "FORGE_RECORD_HOME": str(forge_home),
           **env}
    done = subprocess.run([cli_session.FORGE, "run", "--upstream", upstream, "--", cli, *argv],
                          env=env, cwd=tmp / "project", stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        sys.exit(f"{label} exited {done.returncode}: {done.stderr[-500:]}")
    return stored(forge_home)


def main(sessions: Callable[[int], list[list[Exchange]]]) -> None:
    """`python bench/<cli>_session.py [N]`: record (or load) N sessions and say their size."""
    count = next((int(a) for a in sys.argv[1:] if a.isdigit()), 1)
    for n, made in enumerate(sessions(count)):
        requests = sum(len(e.raw_request) for e in made)
        responses = sum(len(e.raw_response) for e in made)
        print(f"seed {n}: {len(made)} calls; requests {requests / 1e6:.2f} MB, responses "
              f"{responses / 1e6:.2f} MB; "
              f"{len({orjson.dumps(e.request.parameters) for e in made if e.request})} "
              f"distinct parameters")


def stored(forge_home: Path) -> list[Exchange]:
    """Every exchange of the one session a `run` recorded into forge_home's store."""
    with open_store(f"sqlite:///{forge_home / 'traces.db'}") as store, \
            store.reading("recorded") as conn:
        (session_id,) = conn.scalars(sa.text("SELECT id FROM sessions")).all()
        return list(read_session(conn, session_id, raw=True))


class Plan:
    """A scripted mock's answers for these benches: a sentence and a command over the project
    (cli_session's plan: grep, sed, git, ls, wc) a call, then a closing sentence."""

    def __init__(self, seed: int, calls: int, work: Path) -> None:
        self.steps = cli_session.Script(seed, calls, work)  # its files and command plan
        self.rng = self.steps.rng
        self.words = Words(random.Random(1000))
        self.words.rng = self.rng
        self.calls, self.made = calls, 0

    def step(self) -> tuple[str, str | None, str]:
        """(what the model says, the command it runs or None on the last call, 24 hex digits
        for the call's id)."""
        self.made += 1
        if self.made >= self.calls:
            return "Done: " + self.words.sentence(6, 12), None, ""
        path = self.rng.choice(self.steps.files)
        command = self.steps.command(path, Path(path).read_text().splitlines())
        call_id = f"{self.rng.getrandbits(96):024x}"
        return self.words.sentence(4, 10), command, call_id
