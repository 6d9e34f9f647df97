"""Secrets inside bodies never reach the store; placeholders are typed, stable, JSON-safe."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from secret_corpus import AWS_SECRET, CASES, HEX40

from forge_record.capture import Capture
from forge_record.decoders import dialect_for
from forge_record.finalize import finalize
from forge_record.mock import MockUpstream
from forge_record.records import Response, Text, ToolCall
from forge_record.redact.bodies import Redactor, load_key, strings

SECRETS = {
    "anthropic_key": "sk-ant-api03-" + "A1b2C3d4" * 5,
    "openai_key": "sk-proj-" + "Zz9Yy8Xx" * 5,
    "google_key": "AIza" + "S" * 35,
    "github_token": "ghp_" + "a1B2" * 9,
    "gitlab_token": "glpat-" + "x" * 20,
    "slack_token": "xoxb-1234567890-abcdefghij",
    "aws_access_key": "AKIAIOSFODNN7EXAMPLE",
    "stripe_key": "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlLXZhbHVl",
    "private_key": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n"
                   "-----END OPENSSH PRIVATE KEY-----",
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
    doc = {"cmd": "cat ~/.ssh/id_ed25519 .env",
           "out": "\n".join(SECRETS.values()) + "\nPASSWORD=pw1234"}
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


# --- the prefilter: text that may hold no secret is left alone without the regex passes ----

_PIECES = [*SECRETS.values(), "DB_PASSWORD=hunter22", "api_key: 'abcd1234'", "access_key=",
           "Private_Key :", "secret", "token", "max_tokens: 1000", "task-", "sk-", "gh", "IA",
           "eyJ", "xoxb-", "-----BEGIN ", "İ", "\u212a", "\u00a0", "\u3000", "\x1c", "é",
           "\\n", "\\", '"', "=", " ", "\n", "\0", "a", "Z9_-",
           # the context rules' kinds and their pieces (tests/secret_corpus.py has them whole)
           *(case.text for case in CASES), *(case.near for case in CASES), "sk_live_", "_live_",
           "rk_", "4eC39HqLyjWDarjtT1zdp7dc", "SecretAccessKey", '": "', "AKIAIOSFODNN7EXAMPLE",
           AWS_SECRET, AWS_SECRET.lower(), "[REDACTED:aws_access_key:0123abcd]", ",",
           "private_key_id", HEX40, "://", "user:", "pw@", "@", ":", "/"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_PIECES) | st.text(max_size=6), max_size=12))
def test_the_prefilter_never_passes_over_a_secret(parts):
    redactor = Redactor(b"k")
    text = "".join(parts)
    if not redactor.may_hold_secrets(text):
        assert redactor.text(text) == text
    # Raw bodies are checked as UTF-8 bytes.
    if not redactor.may_hold_secrets(text.encode()):
        assert redactor.bytes(text.encode()) == text.encode()
    # Over pieces joined by NUL (how records are checked) it answers for every piece.
    if not redactor.may_hold_secrets(strings(parts)):
        assert all(redactor.text(p) == p for p in parts)


@pytest.mark.parametrize("text", ["API_\u212aEY=abcd1234", "password\u00a0=\u3000hunter22",
                                  "token\x1c: abcd1234", "secret=h\u00e9llo-w\u00f6rld"])
def test_the_bytes_prefilter_sees_what_str_patterns_match(redactor, text):
    """Unicode whitespace, a Kelvin sign that lower-cases to k, non-ASCII values: the
    prefilter reads bytes, the redaction str, and the first must not miss what the second
    finds."""
    assert redactor.text(text) != text
    assert redactor.may_hold_secrets(text.encode())
    assert redactor.bytes(text.encode()) == redactor.text(text).encode()


@pytest.mark.parametrize("kind", SECRETS)
def test_the_prefilter_finds_each_kind(redactor, kind):
    assert redactor.may_hold_secrets(f"x {SECRETS[kind]} y")
    assert redactor.may_hold_secrets(strings({"a": ["ok", {"b": SECRETS[kind]}]}))


def test_clean_text_and_values_come_back_as_they_are(redactor):
    text = '{"max_tokens":1024,"messages":[{"role":"user","content":"run the task-list tests"}]}'
    assert not redactor.may_hold_secrets(text)
    value = {"content": [{"text": "fine"}], "n": 3}
    assert redactor.value(value) is value
    assert redactor.bytes(text.encode()) == text.encode()


def test_strings_walks_records_and_values_not_keys():
    response = Response(id="msg_1", content=[Text(text="hello"),
                                             ToolCall(id="t1", name="Bash",
                                                      arguments={"password": ["pw", 1]})])
    found = strings(response).split("\0")
    assert {"msg_1", "hello", "t1", "Bash", "pw"} <= set(found)
    assert "password" not in found  # a key: redaction leaves keys alone, so does the check


def test_a_secret_cut_across_stream_events_is_redacted_in_the_record(redactor):
    # The raw body never holds the key whole, so only the folded record can show it.
    key = SECRETS["anthropic_key"]
    events = [b'event: message_start\ndata: {"type":"message_start","message":{"id":"m",'
              b'"type":"message","role":"assistant","model":"x","content":[],'
              b'"usage":{"input_tokens":1,"output_tokens":1}}}\n\n',
              b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
              b'"content_block":{"type":"text","text":""}}\n\n']
    for piece in (key[:2], key[2:9], key[9:]):
        events.append(b'event: content_block_delta\ndata: ' + orjson.dumps(
            {"type": "content_block_delta", "index": 0,
             "delta": {"type": "text_delta", "text": piece}}) + b"\n\n")
    events += [b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
               b'event: message_stop\ndata: {"type":"message_stop"}\n\n']
    capture = Capture(dialect_for("POST", "/v1/messages"), seq=1, method="POST",
                      url="https://api.anthropic.com/v1/messages", path="/v1/messages",
                      headers=[], body=b'{"model":"x","messages":[]}')
    capture.response_started(200, [("content-type", "text/event-stream")], "text/event-stream", "")
    for event in events:
        capture.tee(event)
    ex = finalize(capture.finish(), redactor)
    [text] = ex.response.content
    assert key not in text.text and text.text.startswith("[REDACTED:anthropic_key:")


# --- the prefilter on a body like one it passed: searched only where the two differ --------

_FILLER = "The tests pass; nothing here is secret. " * 500  # past secrets.REMEMBER_FROM


@settings(max_examples=300, deadline=None)
@given(*[st.lists(st.sampled_from(_PIECES) | st.text(max_size=6), max_size=6)] * 4)
def test_a_body_searched_where_it_changed_gets_the_answer_of_a_full_search(head, old, new, tail):
    """An agent's next request: the same bytes around a changed middle."""
    before = (_FILLER + "".join(head + old + tail) + _FILLER).encode()
    after = (_FILLER + "".join(head + new + tail) + _FILLER).encode()
    warm = Redactor(b"k")
    warm.may_hold_secrets(before)
    assert warm.may_hold_secrets(after) == Redactor(b"k").may_hold_secrets(after)


_GITHUB = "ghp_" + "a1B2" * 9


@pytest.mark.parametrize(("before", "after"), [
    # The match starts in the shared prefix and ends in the changed bytes.
    ("-----BEGIN RSA PRIVATE KEY-----\\nMIIE",
     "-----BEGIN RSA PRIVATE KEY-----\\nMIIE\\n-----END RSA PRIVATE KEY-----"),
    ("token: !", "token: abcd1234"),
    # The needle itself is cut by the edge of the change.
    ("s!", "sk-ant-api03-" + "A1b2C3d4" * 5),
    # The token is in the shared suffix, moved; what precedes it changed into a word break.
    ("x" + _GITHUB, "yy " + _GITHUB),
])
def test_matches_across_the_edges_of_a_change_are_found(before, after):
    warm = Redactor(b"k")
    assert not warm.may_hold_secrets((_FILLER + before + " " + _FILLER).encode())
    assert warm.may_hold_secrets((_FILLER + after + " " + _FILLER).encode())


def test_a_body_passed_after_a_change_remembers_every_needle_it_holds():
    """Three requests: the second changes bytes before a private key's first line, the
    third adds its last line. The second must carry the first line's place over."""
    begin = "-----BEGIN RSA PRIVATE KEY-----\\nMIIE"
    first = _FILLER + "a" + _FILLER + begin + _FILLER
    second = _FILLER + "b, then c" + _FILLER + begin + _FILLER
    third = second + "\\n-----END RSA PRIVATE KEY-----"
    warm = Redactor(b"k")
    assert not warm.may_hold_secrets(first.encode())
    assert not warm.may_hold_secrets(second.encode())
    assert warm.may_hold_secrets(third.encode())


# --- a big body that may hold a secret: redacted in pieces, only the new ones anew --------

_JOINS = ['},{"', '}, {"', "}", ",", '{"', '"', "[REDACTED:", "]", "-----BEGIN ", "\\n"]


@settings(max_examples=300, deadline=None)
@given(*[st.lists(st.sampled_from(_PIECES + _JOINS) | st.text(max_size=6), max_size=8)] * 3)
def test_a_body_redacted_in_pieces_reads_as_redacted_whole(head, old, new):
    """Cut between the objects of a JSON list, with secrets, near misses, placeholders and
    cuts anywhere: the pieces, redacted cold or after a body sharing some of them, join into
    what redacting the whole gives."""
    filler = '},{"role":"user","content":"' + _FILLER + '"'
    before = ("{" + "".join(head) + filler + "".join(old) + "}").encode()
    after = ("{" + "".join(head) + filler + "".join(new) + "}").encode()
    whole = Redactor(b"k")._whole(after)
    assert Redactor(b"k").bytes(after) == whole
    warm = Redactor(b"k")
    warm.bytes(before)
    assert warm.bytes(after) == whole


@pytest.mark.parametrize("middle", [
    '[REDACTED:x},{"token=abcd1234',  # a placeholder's look-back reaches across the cut
    '"://a},b:pw@host"',  # a match may span `},` where no `{"` follows: no cut there
    '"://a},{"b:pw@host"', 'password=ab},{"cd1234', 'secret}, {"' + AWS_SECRET,
    # a private key block may span anything: such a body is redacted whole
    '"-----BEGIN RSA PRIVATE KEY-----\\nMIIE"},{"c":"-----END RSA PRIVATE KEY-----"',
])
def test_what_a_cut_could_split_is_redacted_as_whole(middle):
    body = ('{"messages":[{"a":"' + _FILLER + '"},{"b":' + middle + '}]}').encode()
    assert Redactor(b"k").bytes(body) == Redactor(b"k")._whole(body)


@pytest.mark.parametrize("first", [
    "DB_PASSWORD=hunter22\n",
    # code that looks for key blocks quotes their start, but no block can begin there
    'DB_PASSWORD=hunter22\nif b"-----BEGIN " in data:\n',
])
def test_an_agents_next_request_has_only_its_new_pieces_redacted(monkeypatch, first):
    """Code that reads like an assignment (`token = ...`) in the history makes every later
    request a body that may hold a secret; of each, only what the one before lacked is
    redacted again."""
    redacted: list[int] = []
    whole = Redactor._text
    monkeypatch.setattr(Redactor, "_text",
                        lambda self, text: redacted.append(len(text)) or whole(self, text))
    messages = [{"role": "user", "content": first + _FILLER}]
    redactor = Redactor(b"k")
    for turn in range(6):
        body = orjson.dumps({"model": "m", "messages": messages, "stream": True})
        redacted.clear()
        out = redactor.bytes(body)
        anew = sum(redacted)
        assert b"hunter22" not in out and out == Redactor(b"k")._whole(body)
        if turn > 1:  # the first message was the last piece of the first two bodies
            assert anew < len(body) / 10, turn
        messages += [{"role": "assistant", "content": f"turn {turn}"},
                     {"role": "user", "content": f"token = self._tokens.pop(key{turn}, None)"}]


def test_an_agents_next_request_is_cut_only_past_what_it_shares_with_the_one_before(
        monkeypatch):
    """The pieces a body shares with a remembered one from its start are that body's, and
    so are their redactions: only the rest is cut and looked up (a 300 KB request is mostly
    its history)."""
    from forge_record.redact import bodies

    starts: list[int] = []
    cut = bodies._pieces
    monkeypatch.setattr(bodies, "_pieces", lambda data, start=0: starts.append(start) or
                        cut(data, start))
    messages = [{"role": "user", "content": "DB_PASSWORD=hunter22\n" + _FILLER}]
    redactor, before = Redactor(b"k"), b""
    for turn in range(6):
        messages += [{"role": "assistant", "content": f"turn {turn} " + _FILLER},
                     {"role": "user", "content": f"token = self._tokens.pop(key{turn}, None)"}]
        body = orjson.dumps({"model": "m", "messages": messages, "stream": True})
        assert redactor.bytes(body) == Redactor(b"k")._whole(body)
        if turn:  # from the cut before the last message of the body before
            assert starts[-1] >= len(before) - 100, turn
        before = body


def test_an_agents_next_request_redacts_only_its_new_pieces_that_may_hold_a_secret(
        monkeypatch):
    """A body that shares half of itself with one redacted in pieces is not searched whole
    first, and of the pieces it adds only those the prefilter cannot pass are redacted."""
    redacted: list[str] = []
    whole = Redactor._text
    monkeypatch.setattr(Redactor, "_text",
                        lambda self, text: redacted.append(text) or whole(self, text))
    searched: list[int] = []
    scan = Redactor.may_hold_secrets
    monkeypatch.setattr(Redactor, "may_hold_secrets",
                        lambda self, text: searched.append(len(text)) or scan(self, text))
    messages = [{"role": "user", "content": "DB_PASSWORD=hunter22\n" + _FILLER}]
    redactor = Redactor(b"k")
    for turn in range(4):
        messages += [{"role": "assistant", "content": f"turn {turn}: all good"},
                     {"role": "user", "content": f"run the tests again ({turn})"}]
        if turn == 3:
            messages.append({"role": "user", "content": "token = self._tokens.pop(key)"})
        body = orjson.dumps({"model": "m", "messages": messages, "stream": True})
        expected = Redactor(b"k")._whole(body)
        redacted.clear()
        searched.clear()
        assert redactor.bytes(body) == expected
        if turn:
            assert not any(n >= len(body) // 2 for n in searched), turn
            assert [t for t in redacted if "turn" in t] == [], turn
    assert any("self._tokens" in t for t in redacted)  # the new piece that may hold one


def test_a_key_block_in_a_request_that_goes_on_from_one_in_pieces_is_redacted_whole():
    """A private key block may span pieces, so a body with a block's header is redacted
    whole, also where it goes on from a body redacted in pieces."""
    messages = [{"role": "user", "content": "DB_PASSWORD=hunter22\n" + _FILLER}]
    redactor = Redactor(b"k")
    redactor.bytes(orjson.dumps({"messages": messages}))
    messages += [{"role": "user", "content": "-----BEGIN RSA PRIVATE KEY-----\nMIIE"},
                 {"role": "user", "content": "b3BlbnNzaC1rZXk\n-----END RSA PRIVATE KEY-----"}]
    body = orjson.dumps({"messages": messages})
    out = redactor.bytes(body)
    assert out == Redactor(b"k")._whole(body) and b"MIIE" not in out
