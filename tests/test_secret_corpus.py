"""The secret corpus (tests/secret_corpus.py) through the redactor, and through every place a
body ends up: the store (its file and its decompressed bodies), `show`, `show --json`, the
`view` page, every export format, and the spool. Each positive's secret appears in none of
them; each near miss survives."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import secret_corpus
from secret_corpus import CASES, TAGS

from forge_record.exporters import DIRECTORY_FORMATS, FORMATS
from forge_record.mock import MockUpstream
from forge_record.redact.bodies import Redactor
from forge_record.store import compression

FORGE = str(Path(sys.executable).with_name("forge-record"))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.kind)
def test_each_positive_is_redacted_and_each_near_miss_is_kept(case):
    redactor = Redactor(b"k")
    out = redactor.text(f"before\n{case.text}\nafter")
    assert case.secret not in out
    assert f"[REDACTED:{case.kind}:" in out
    assert redactor.may_hold_secrets(case.text)
    assert redactor.bytes(case.text.encode()) == redactor.text(case.text).encode()
    assert redactor.text(case.near) == case.near
    as_json = orjson.dumps({"content": case.text}).decode()  # as a request body holds it
    assert case.secret not in redactor.text(as_json)
    assert orjson.loads(redactor.text(as_json))  # still valid JSON


def test_tag_values_are_redacted():
    tags = Redactor(b"k").tags(TAGS)
    assert tags["outcome"] == "pass"
    assert tags["token"].startswith("[REDACTED:github_token:")
    assert tags["db"] == "postgres://ci:[REDACTED:url_password:" + tags["db"].split(":")[-1]


CLIENT = """
import anthropic, sys
client = anthropic.Anthropic(api_key="sk-ant-dummy-client-key", max_retries=0)
client.messages.create(model="claude-haiku-4-5", max_tokens=50, messages=[
    {"role": "user", "content": "show me the config"},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash",
                                       "input": {"command": "cat config.env"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                   "content": sys.argv[1]}]},
])
"""


def _run(env, mock, *options) -> subprocess.CompletedProcess:
    tags = [arg for k, v in TAGS.items() for arg in ("--tag", f"{k}={v}")]
    return subprocess.run(
        [FORGE, "run", "--harness", "claude-code", "--mode", "reverse", *tags, *options,
         "--upstream", f"api.anthropic.com={mock.url}", "--", sys.executable, "-c", CLIENT,
         secret_corpus.body_text()], env=env, capture_output=True, text=True, timeout=120)


def _forge(env, *args) -> bytes:
    proc = subprocess.run([FORGE, *args], env=env, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _spool_plain(path: Path) -> bytes:
    """A spool file's frames, decompressed."""
    from forge_record.store.spool import MAGIC

    data, out, at = path.read_bytes(), [], len(MAGIC)
    while at < len(data):
        size = int.from_bytes(data[at + 1 : at + 5], "big")
        out.append(compression.decompress(data[at + 9 : at + 9 + size]))
        at += 9 + size
    return b"".join(out)


def _assert_clean(where: str, data: bytes, survivors: bool = True) -> None:
    for secret in secret_corpus.secrets():
        assert secret.encode() not in data, f"{secret!r} in {where}"
    if survivors:
        for token in secret_corpus.survivors():
            assert token.encode() in data, f"near miss {token!r} lost from {where}"


@pytest.mark.slow
def test_the_corpus_reaches_no_output(tmp_path):
    home = tmp_path / "home"
    env = {**os.environ, "FORGE_RECORD_HOME": str(home)}
    with MockUpstream() as mock:
        proc = _run(env, mock)
        assert proc.returncode == 0, proc.stderr
        sent = mock.requests[-1].body
        assert all(s.encode() in sent for s in secret_corpus.secrets()[:-2])  # upstream: real
        # The same run against a Postgres that does not answer: everything goes to the spool.
        spooled = _run(env, mock, "--store", "postgresql+psycopg://postgres@127.0.0.1:9/none")
        assert spooled.returncode == 0, spooled.stderr
    outputs: dict[str, bytes] = {}
    outputs["store file"] = b"".join(p.read_bytes() for p in home.glob("traces.db*"))
    from forge_record.store import open_store

    store = open_store(f"sqlite:///{home / 'traces.db'}")
    try:
        [session] = store.list_sessions()
        [ex] = store.iter_exchanges(session["id"], raw=True)
        outputs["stored raw bodies"] = ex.raw_request + ex.raw_response
        tags = store.get_session(session["id"]).tags
    finally:
        store.close()
    assert tags["outcome"] == "pass" and tags["token"].startswith("[REDACTED:github_token:")
    # A label's tags are redacted like `run --tag`'s.
    outputs["label"] = _forge(env, "label", "last", "--tag", f"token={secret_corpus.TAG_SECRET}",
                              "--tag", "outcome=pass")
    assert b"[REDACTED:github_token:" in outputs["label"]
    outputs["show"] = _forge(env, "show", "last")
    outputs["show --json"] = _forge(env, "show", "last", "--json")
    _forge(env, "view", "last", "-o", str(tmp_path / "page.html"))
    outputs["view"] = (tmp_path / "page.html").read_bytes()
    for fmt in FORMATS:
        if fmt in DIRECTORY_FORMATS:
            import pyarrow.parquet as pq

            _forge(env, "export", "-f", fmt, "-o", str(tmp_path / fmt))
            rows = [r for p in sorted((tmp_path / fmt).rglob("*.parquet"))
                    for r in pq.read_table(p).to_pylist()]
            assert rows, fmt
            outputs[f"export {fmt}"] = orjson.dumps(rows, default=str)
        else:
            outputs[f"export {fmt}"] = _forge(env, "export", "-f", fmt)
    [spool] = list((home / "spool").glob("*.spool"))
    outputs["spool"] = _spool_plain(spool)
    # The near misses are checked where the tool result is carried whole; `show` prints a
    # summary, the store file is compressed, and an export may leave tool results out.
    whole = {"stored raw bodies", "show --json", "spool"}
    for where, data in outputs.items():
        _assert_clean(where, data, survivors=where in whole)
    for where in ("show --json", "view", "export calls"):
        text = outputs[where].decode(errors="replace")
        assert text.count("[REDACTED:") >= len(CASES), where
