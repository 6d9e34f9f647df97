"""Secrets inside bodies never reach the store; placeholders are typed, stable, JSON-safe."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from forge_record.mock import MockUpstream
from forge_record.secrets import Redactor, load_key

SECRETS = {
    "anthropic_key": "sk-ant-api03-" + "A1b2C3d4" * 5,
    "openai_key": "sk-proj-" + "Zz9Yy8Xx" * 5,
    "google_key": "AIza" + "S" * 35,
    "github_token": "ghp_" + "a1B2" * 9,
    "gitlab_token": "glpat-" + "x" * 20,
    "slack_token": "xoxb-1234567890-abcdefghij",
    "aws_access_key": "AKIAIOSFODNN7EXAMPLE",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlLXZhbHVl",
    "private_key": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n-----END OPENSSH PRIVATE KEY-----",
}


@pytest.fixture
def redactor():
    return Redactor(b"test-key")


@pytest.mark.parametrize("kind", SECRETS)
def test_each_kind_is_replaced_by_a_typed_placeholder(redactor, kind):
    out = redactor.text(f"before {SECRETS[kind]} after")
    assert SECRETS[kind] not in out
    assert out.startswith("before [REDACTED:" + kind + ":") and out.endswith("] after")


def test_same_secret_same_placeholder_other_key_other_placeholder(redactor):
    a = redactor.text(SECRETS["github_token"])
    assert a == redactor.text(f"{SECRETS['github_token']}")
    assert a != Redactor(b"other-key").text(SECRETS["github_token"])


def test_env_assignments_keep_their_name(redactor):
    out = redactor.text("DB_PASSWORD=hunter22\nAPI_TOKEN: 'abc123xyz'\nmax_tokens: 1000\nX=1")
    assert "hunter22" not in out and "abc123xyz" not in out
    assert out.startswith("DB_PASSWORD=[REDACTED:assignment:")
    assert "API_TOKEN: '[REDACTED:assignment:" in out
    assert "max_tokens: 1000" in out  # numbers are settings, not secrets


def test_json_text_stays_valid_json(redactor):
    doc = {"cmd": "cat ~/.ssh/id_ed25519 .env", "out": "\n".join(SECRETS.values()) + "\nPASSWORD=pw1234"}
    text = orjson.dumps(doc).decode()
    redacted = orjson.loads(redactor.text(text))
    assert redacted["cmd"] == doc["cmd"]
    assert not any(s in redacted["out"] for s in SECRETS.values())
    assert redactor.bytes(text.encode()) == redactor.text(text).encode()


def test_binary_bodies_are_left_alone(redactor):
    blob = b"\xff\xfe" + SECRETS["openai_key"].encode()
    assert redactor.bytes(blob) == blob


def test_user_patterns(redactor):
    assert "ACME" not in Redactor(b"k", ["ACME-[0-9]{8}"]).text("id ACME-12345678 ok")


def test_key_file_is_private_and_stable(tmp_path):
    key = load_key(tmp_path)
    assert load_key(tmp_path) == key and len(key) == 32
    assert (tmp_path / "redaction.key").stat().st_mode & 0o777 == 0o600


CLIENT = """
import anthropic, sys
client = anthropic.Anthropic(api_key="sk-ant-dummy-client-key", max_retries=0)
leak = sys.argv[1]
client.messages.create(model="claude-haiku-4-5", max_tokens=50, messages=[
    {"role": "user", "content": "run it"},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash",
                                       "input": {"command": "cat .env", "token": leak}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                   "content": "GITHUB_TOKEN=" + leak + "\\nDB_PASSWORD=hunter22"}]},
])
"""


@pytest.mark.parametrize("redact", [True, False], ids=["default", "no-redact-bodies"])
def test_secrets_in_bodies_never_reach_the_store(tmp_path, redact):
    env = {**os.environ, "FORGE_RECORD_HOME": str(tmp_path / "home")}
    forge = str(Path(sys.executable).with_name("forge-record"))
    leak = SECRETS["github_token"]
    with MockUpstream() as mock:
        flags = [] if redact else ["--no-redact-bodies"]
        proc = subprocess.run(
            [forge, "run", "--harness", "claude-code", "--mode", "reverse", *flags,
             "--upstream", f"api.anthropic.com={mock.url}", "--", sys.executable, "-c", CLIENT,
             leak], env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert leak.encode() in mock.requests[-1].body  # the upstream got the real request
    db = b"".join(p.read_bytes() for p in (tmp_path / "home").glob("traces.db*"))
    show = subprocess.run([forge, "show", "last", "--json"], env=env, capture_output=True,
                          timeout=60).stdout
    if not redact:
        assert leak.encode() in show
        return
    assert leak.encode() not in db
    assert b"hunter22" not in db
    assert leak.encode() not in show
    session = orjson.loads(show)
    [ex] = session["exchanges"]
    call = ex["request"]["messages"][1]["content"][0]
    assert call["arguments"]["token"].startswith("[REDACTED:github_token:")
    assert orjson.loads(call["arguments_raw"]) == call["arguments"]
