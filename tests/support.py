"""Helpers that several test modules share, imported as `from support import ...` (pytest puts
tests/ on sys.path). Fixtures live in conftest.py, where pytest finds them without an import;
nothing here is a fixture, and no test module imports from another test module.

- Stores: the Postgres admin URL and database helpers behind conftest's `store`, `store_url`,
  `backend`, `pg_admin`, `pg_module_url` and `new_database` fixtures; `BACKENDS` to
  parametrize over; `make_session`, `make_exchange` (every block kind and optional field),
  `realistic_exchanges` (a synthetic Claude Code session through the real decoder), the
  secret-header helpers and the `check_*` round trips each backend must pass.
- The writer process: `captured(seq)`, an exchange as the addon hands it over (raw bodies,
  a request holding the dummy token SECRET, the response not folded yet).
- Proxies: `Arrivals`, the sink a test's recording proxy hands exchanges to; `Socket`, a
  WebSocket flow driven through the WebSocket addon's hooks, with `create` and `events_for`
  (a Responses call's client and server frames).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
from mitmproxy import websocket
from mitmproxy.test import tflow
from mitmproxy.websocket import WebSocketMessage

from forge_record.addons.websocket import WebSocketRecorder
from forge_record.finalize import finalize
from forge_record.mock.openai_ws import frames
from forge_record.records import (
    ERROR,
    Exchange,
    Media,
    Message,
    Other,
    Reasoning,
    Request,
    Response,
    Session,
    Text,
    Tool,
    ToolCall,
    ToolResult,
    Usage,
)
from forge_record.store import Store, open_store

# --- stores ------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
API_KEY = "sk-ant-dummy-SECRET123"
BEARER = "Bearer dummy-TOKEN-456"
RAW_REQUEST = b'{"model":"claude-x","messages":[' + b'{"role":"user","content":"hi"},' * 200 + b"]}"
RAW_RESPONSE = b"event: message_start\ndata: {}\n\n" * 100
ADMIN_URL = os.environ.get(
    "FORGE_RECORD_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
STORE_TABLES = ("sessions", "exchanges", "blobs", "packs", "dictionaries")

def libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def create_database(admin) -> str:
    name = f"forge_record_test_{uuid.uuid4().hex[:12]}"
    admin.execute(f'CREATE DATABASE "{name}"')
    return name


def empty_postgres(url: str) -> None:
    with psycopg.connect(libpq(url), autocommit=True) as conn:
        conn.execute("SET lock_timeout = '10s'")
        present = {t for (t,) in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        tables = [t for t in STORE_TABLES if t in present]
        if tables:
            conn.execute(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE")


POSTGRES = pytest.param("postgres", marks=[pytest.mark.postgres, pytest.mark.slow])
BACKENDS = ["sqlite", POSTGRES]


def make_session(id: str = "0198c0de-aaaa-7000-8000-000000000001", started_at=1_760_000_000.25):
    return Session(
        id=id,
        harness="claude",
        harness_version="2.1.0",
        argv=["claude", "-p", "hi"],
        cwd="/home/u/proj",
        user="u",
        host="box",
        tags={"team": "x", "ünï": "cödé"},
        started_at=started_at,
    )


def make_exchange(seq: int = 0, **overrides) -> Exchange:
    """An exchange that uses every block kind and every optional field."""
    request = Request(
        model="claude-x",
        system=[Text(text="be brief", citations=[{"cited_text": "a"}])],
        tools=[Tool(name="Bash", description="run", parameters={"type": "object"}),
               Tool(name="web_search", kind="web_search_20250305")],
        messages=[
            Message(role="user", content=[
                Text(text="look"),
                Media(type="image", media_type="image/png", sha256="ab" * 32, size=10),
                Media(type="document", media_type="application/pdf", url="https://x/y.pdf"),
            ]),
            Message(role="assistant", content=[
                Reasoning(text="hmm", signature="sig"),
                Reasoning(encrypted="opaque=="),
                ToolCall(id="t1", name="Bash", arguments={"cmd": "ls"},
                         arguments_raw='{"cmd":"ls"}'),
                ToolCall(id="t2", name="Bash", arguments_raw="{bad", parse_error=True),
            ]),
            Message(role="user", content=[
                ToolResult(tool_call_id="t1", content=[Text(text="a.txt")]),
                ToolResult(tool_call_id="t2", is_error=True, name="bash_result", content=[
                    Media(type="image", sha256="cd" * 32)]),
                Other(data={"type": "future_block", "x": [1, 2.5, None]}),
            ]),
        ],
        stream=True,
        parameters={"max_tokens": 1024, "temperature": 0.5, "metadata": {"user_id": "u"}},
    )
    response = Response(
        id="msg_1",
        model="claude-x-20250101",
        content=[
            Reasoning(text="plan", signature="s2"),
            Text(text="done"),
            ToolCall(id="t3", name="Bash", arguments={"cmd": "pwd"}, arguments_raw='{"cmd":"pwd"}'),
            ToolCall(id="t4", name="web_search", arguments={"q": "x"}, server=True),
        ],
        stop_reason="tool_use",
        usage=Usage(input_tokens=10, output_tokens=20, cache_read_tokens=300,
                    cache_write_tokens=4, reasoning_tokens=5, raw={"input_tokens": 10}),
        error={"type": "overloaded_error", "message": "later"},
        extras={"stop_sequence": None, "unknown_events": [{"type": "ping"}]},
    )
    fields = dict(
        seq=seq,
        dialect="anthropic.messages",
        url="https://api.anthropic.com/v1/messages?beta=true",
        upstream_url="http://127.0.0.1:8000/gw/v1/messages?beta=true",
        status=ERROR,
        http_status=200,
        started_at=1_760_000_001.125,
        first_byte_at=1_760_000_001.5,
        ended_at=1_760_000_003.0,
        request=request,
        response=response,
        request_headers={"anthropic-version": "2023-06-01", "content-type": "application/json"},
        response_headers={"request-id": "req_1"},
        flags=["decode_error"],
        raw_request=RAW_REQUEST,
        raw_response=RAW_RESPONSE,
    )
    return Exchange(**(fields | overrides))


def realistic_exchanges(n: int = 60, seed: int = 0, harness: int | None = None) -> list[Exchange]:
    """A synthetic Claude Code session (bench/gen_session.py), decoded by the real decoder;
    sessions with the same `harness` seed share a harness version and a project."""
    gen_session = bench_module("gen_session")
    return exchanges_of(gen_session.calls(n, seed, harness_seed=harness), seed)


def bench_module(name: str) -> Any:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "bench"))


def billed(exchanges: list[Exchange]) -> list[Exchange]:
    """The exchanges as Claude Code sends them to api.anthropic.com: its system prompt starts
    with a billing block whose `cch` changes on every call (raw body and record alike)."""
    from forge_record.decoders import anthropic_messages

    out = []
    for n, ex in enumerate(exchanges):
        body = orjson.loads(ex.raw_request)
        system = body.get("system") or []
        header = (f"x-anthropic-billing-header: cc_version=2.1.197.982; cc_entrypoint=cli; "
                  f"cch={(n * 40503 + 7) % 0xFFFFF:05x};")
        body["system"] = [{"type": "text", "text": header},
                          *([{"type": "text", "text": system}] if isinstance(system, str)
                            else system)]
        raw = orjson.dumps(body)
        out.append(dataclasses.replace(ex, raw_request=raw,
                                       request=anthropic_messages.DIALECT.parse_request(raw)))
    return out


def stamped(exchanges: list[Exchange], clock: bool = True) -> list[Exchange]:
    """The exchanges with parameters that change on every call as Codex's over its WebSocket
    do: a new `previous_response_id` and, nested in `client_metadata`, a millisecond clock;
    a turn id there that changes every 10 calls (raw body and record alike). Without `clock`
    only the turn id changes, as Codex's over HTTP and Qwen Code's do."""
    from forge_record.decoders import anthropic_messages

    out = []
    for n, ex in enumerate(exchanges):
        body = orjson.loads(ex.raw_request)
        body["client_metadata"] = {
            "session_id": "01a24391-5035-7340-9b7e-8cbb2c3c50cb",
            "turn_id": f"01a24391-508a-7f21-bdca-{n // 10:012x}"}
        if clock:
            body["client_metadata"]["x-codex-ws-stream-request-start-ms"] = str(
                1796429926541 + 2713 * n)
        if n and clock:
            body["previous_response_id"] = f"resp_{(n * 2654435761) % 2**128:032x}"
        raw = orjson.dumps(body)
        out.append(dataclasses.replace(ex, raw_request=raw,
                                       request=anthropic_messages.DIALECT.parse_request(raw)))
    return out


def exchanges_of(calls: list, seed: int = 0) -> list[Exchange]:
    """Anthropic Messages calls (bench's gen_session.Call: path, raw request, raw SSE
    response, maybe headers) as the writer gets them, decoded by the real decoder."""
    from forge_record.decoders import anthropic_messages
    from forge_record.redact.headers import redact_headers

    dialect = anthropic_messages.DIALECT
    out = []
    for seq, call in enumerate(calls, 1):
        decoder = dialect.response_decoder("text/event-stream")
        decoder.feed(call.response)
        out.append(Exchange(
            seq=seq, dialect=dialect.name, url="https://api.anthropic.com" + call.path,
            http_status=200, started_at=1_760_000_000.0 + seq, ended_at=1_760_000_000.5 + seq,
            request=dialect.parse_request(call.request), response=decoder.finish(),
            request_headers=redact_headers((call.request_headers or {
                "user-agent": "claude-cli/2.1.197 (external, cli)",
                "anthropic-version": "2023-06-01"}).items()),
            response_headers=redact_headers((call.response_headers or {
                "request-id": f"req_{seed}_{seq}"}).items()),
            raw_request=call.request, raw_response=call.response,
        ))
    return out


GEMINI_URL = ("https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:"
              "streamGenerateContent?alt=sse")
CHAT_URL = "https://dashscope.aliyuncs.com/compatible-mode/v1/chat/completions"


def shell_steps(n: int, seed: int) -> list[tuple[str, str, str]]:
    """(what the model says, the command it runs, the command's output) for `n` calls of a
    session that reads this repository's source a command at a time (quotes and all)."""
    import random

    rng = random.Random(seed)
    sources = sorted((ROOT / "store").glob("*.py"))
    steps = []
    for seq in range(1, n + 1):
        lines = rng.choice(sources).read_text().splitlines()
        start = rng.randrange(len(lines))
        steps.append((f"Call {seq}: let me look.", f"sed -n '{start + 1},{start + 30}p' x.py",
                      "\n".join(lines[start:start + 30])))
    return steps


def gemini_exchanges(n: int = 40, seed: int = 0) -> list[Exchange]:
    """A session shaped as Gemini CLI's over the Gemini API (bench/gemini_session.py recorded
    those shapes from the real CLI): the whole history resent every call; each answer a
    sentence and a run_shell_command call, kept in the history with a thoughtSignature and an
    id of the CLI's making (the API sends none); the command's output sent back as a
    functionResponse object. Answered by the mock's stream, decoded by the real decoder."""
    from forge_record.decoders.gemini import GENERATE
    from forge_record.mock import gemini as mock

    system = {"parts": [{"text": "You are an interactive CLI agent. " * 200}], "role": "user"}
    tools = [{"functionDeclarations": [
        {"name": name, "description": f"{name}: " + "Runs what it is asked to. " * 20,
         "parametersJsonSchema": {"type": "object", "properties": {"command": {
             "type": "string", "description": "The command."}}, "required": ["command"]}}
        for name in ("run_shell_command", "read_file", "glob", "write_file")]}]
    config = {"temperature": 1, "topP": 0.95, "topK": 64,
              "thinkingConfig": {"includeThoughts": True, "thinkingBudget": 8192}}
    contents: list[dict] = [{"parts": [{"text": "<session_context>\nlinux\n</session_context>"},
                                       {"text": "Review the store code, one command at a time."}],
                             "role": "user"}]
    out = []
    for seq, (text, command, output) in enumerate(shell_steps(n, seed), 1):
        answer = {"parts": [{"text": text}, {"functionCall": {
            "name": "run_shell_command", "args": {"command": command}}}], "finishReason": "STOP"}
        body = orjson.dumps({"contents": contents, "systemInstruction": system, "tools": tools,
                             "generationConfig": config})
        request = GENERATE.parse_request(body)
        GENERATE.from_url(request, GEMINI_URL)
        raw_response = b"".join(mock.sse(mock.chunks(
            orjson.loads(body), body, "gemini-2.5-flash", lambda _, a=answer: a)))
        out.append(_decoded(GENERATE, seq, GEMINI_URL, request, body, raw_response))
        call_id = f"run_shell_command_{1796439362840 + 97 * seq}_0"
        contents += [
            {"parts": [{"text": text, "thoughtSignature": f"c2ln{seq}="},
                       {"functionCall": {"id": call_id, "args": {"command": command},
                                         "name": "run_shell_command"},
                        "thoughtSignature": "skip_thought_signature_validator"}],
             "role": "model"},
            {"parts": [{"functionResponse": {"name": "run_shell_command", "response": {
                "output": output}, "id": call_id}}], "role": "user"}]
    return out


def chat_exchanges(n: int = 40, seed: int = 0, parts: bool = True) -> list[Exchange]:
    """A session shaped as Qwen Code's over Chat Completions (bench/qwen_session.py recorded
    those shapes from the real CLI): the whole history resent every call, a text content as a
    list of text parts (`parts`; else as a string, as the OpenAI SDK's users write it); each
    answer a run_shell_command call, its output sent back as a `tool` message. Answered by the
    mock's stream, decoded by the real decoder."""
    from forge_record.decoders.openai_chat import DIALECT
    from forge_record.mock import openai as mock

    def content(text: str) -> Any:
        return [{"type": "text", "text": text}] if parts else text

    tools = [{"type": "function", "function": {
        "name": name, "description": f"{name}: " + "Runs what it is asked to. " * 20,
        "parameters": {"type": "object", "properties": {"command": {
            "type": "string", "description": "The command."}}, "required": ["command"]}}}
        for name in ("run_shell_command", "read_file", "glob", "write_file")]
    messages: list[dict] = [
        {"role": "system", "content": content("You are Qwen Code, a CLI agent. " * 200)},
        {"role": "user", "content": content("Review the store code, one command at a time.")}]
    out = []
    for seq, (text, command, output) in enumerate(shell_steps(n, seed), 1):
        call = {"call_id": f"call_{seq:024x}", "name": "run_shell_command",
                "arguments": orjson.dumps({"command": command}).decode()}
        body = orjson.dumps({"model": "qwen3-coder-plus", "messages": messages,
                             "max_tokens": 32768, "stream": True,
                             "stream_options": {"include_usage": True}, "tools": tools})
        completion = mock.chat_completion(orjson.loads(body), body, text, [call])
        raw_response = b"".join(mock.chat_chunks(completion, True))
        out.append(_decoded(DIALECT, seq, CHAT_URL, DIALECT.parse_request(body), body,
                            raw_response))
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": call["call_id"], "type": "function",
                "function": {"name": call["name"], "arguments": call["arguments"]}}]},
            {"role": "tool", "tool_call_id": call["call_id"], "content": content(output)}]
    return out


def responses_exchanges(n: int = 40, seed: int = 0) -> list[Exchange]:
    """A session shaped as Codex's over HTTP (bench/codex_session.py --http recorded those
    shapes from the real CLI): the whole input resent every call, every item with an id
    (the client's own for its messages and outputs); each answer a sentence and an
    exec_command call, resent as the output items came, the command's output as a
    function_call_output. Answered by the mock's stream, decoded by the real decoder."""
    from forge_record.decoders.openai_responses import DIALECT
    from forge_record.mock import openai as mock

    tools = [{"type": "function", "name": name, "description": f"{name}: " + "Runs it. " * 40,
              "strict": False, "parameters": {"type": "object", "properties": {"cmd": {
                  "type": "string", "description": "The command."}}, "required": ["cmd"]}}
             for name in ("exec_command", "write_stdin", "view_image")]
    items: list[dict] = [
        {"type": "message", "id": "msg_b1dd9805-f4b0-5fc0-b26e-353576167b0b", "role": "developer",
         "content": [{"type": "input_text", "text": "You are a coding agent. " * 200}]},
        {"type": "message", "id": "msg_01a24434-9f90-7f01-a79f-71bb176cb0ec", "role": "user",
         "content": [{"type": "input_text", "text": "Review the store code."}]}]
    out = []
    for seq, (text, command, output) in enumerate(shell_steps(n, seed), 1):
        call = {"call_id": f"call_{seq:024x}", "name": "exec_command",
                "arguments": orjson.dumps({"cmd": command}).decode()}
        body = orjson.dumps({"model": "gpt-5.4", "stream": True, "input": items, "tools": tools,
                             "tool_choice": "auto", "store": False})
        response = mock.response_object(orjson.loads(body), body, text, [call])
        raw_response = b"".join(mock.response_events(response))
        out.append(_decoded(DIALECT, seq, "https://api.openai.com/v1/responses",
                            DIALECT.parse_request(body), body, raw_response))
        message, function_call = response["output"]
        items += [
            {"type": "message", "status": "completed", "id": message["id"], "role": "assistant",
             "content": message["content"]},
            {"type": "function_call", "status": "completed", "id": function_call["id"],
             "name": call["name"], "arguments": call["arguments"], "call_id": call["call_id"]},
            {"type": "function_call_output", "id": f"fco_01a24434-a8fc-7351-8d3a-{seq:012x}",
             "call_id": call["call_id"], "output": output}]
    return out


def _decoded(dialect, seq: int, url: str, request: Request, body: bytes,
             raw_response: bytes) -> Exchange:
    decoder = dialect.response_decoder("text/event-stream")
    decoder.feed(raw_response)
    return Exchange(seq=seq, dialect=dialect.name, url=url, http_status=200,
                    started_at=1_760_000_000.0 + seq, ended_at=1_760_000_000.5 + seq,
                    request=request, response=decoder.finish(), raw_request=body,
                    raw_response=raw_response)


def with_secret_headers(ex: Exchange) -> Exchange:
    return dataclasses.replace(
        ex,
        request_headers=ex.request_headers | {"X-Api-Key": API_KEY, "authorization": BEARER,
                                              "Cookie": "c=" + API_KEY},
        response_headers=ex.response_headers | {"Set-Cookie": "s=" + BEARER},
    )


def without_raw(ex: Exchange) -> Exchange:
    return dataclasses.replace(ex, raw_request=b"", raw_response=b"")


def write_session(store: Store, session_id: str, exchanges, started_at: float = 100.0) -> None:
    """A whole session written as the writer writes it: started, every call, ended."""
    from forge_record.store.items import AddSession

    store.write([AddSession(make_session(session_id, started_at=started_at), recorder_pid=None,
                            heartbeat_at=None)])
    for ex in exchanges:
        store.add_exchange(session_id, ex)
    store.end_session(session_id, started_at + 60, 0)


def start_session(store: Store, session_id: str, exchanges, started_at: float | None = None
                  ) -> None:
    """A session started by this process and written, not ended: its writer still holds its
    encoder (what is sealed at the end is not yet)."""
    extra = {} if started_at is None else {"started_at": started_at}
    store.add_session(make_session(session_id, **extra))
    for ex in exchanges:
        store.add_exchange(session_id, ex)


def reads_back(store: Store, session_id: str, sent: list[Exchange]) -> None:
    """The session's exchanges read back equal to `sent`, in order and one by one."""
    assert list(store.iter_exchanges(session_id, raw=True)) == sent
    for ex in reversed(sent):  # one by one, coldest cache first
        assert store.get_exchange(session_id, ex.seq, raw=True) == ex


def check_round_trip(store: Store) -> None:
    session, exchange = make_session(), make_exchange()
    store.add_session(session)
    store.add_exchange(session.id, exchange)
    store.end_session(session.id, 1_760_000_100.5, 3)

    assert store.get_session(session.id) == dataclasses.replace(
        session, ended_at=1_760_000_100.5, exit_code=3)
    [with_raw] = store.iter_exchanges(session.id, raw=True)
    assert with_raw == exchange
    [plain] = store.iter_exchanges(session.id)
    assert plain == without_raw(exchange)
    assert store.get_exchange(session.id, 0, raw=True) == exchange


def check_secrets_dropped(store: Store) -> None:
    """Write an exchange with secret headers; return nothing, the caller inspects storage."""
    store.add_session(make_session("secrets"))
    sent = with_secret_headers(make_exchange())
    before = dataclasses.replace(sent)
    store.add_exchange("secrets", sent)
    assert sent == before  # the caller's object is not modified
    [stored] = store.iter_exchanges("secrets")
    assert stored.request_headers == make_exchange().request_headers
    assert stored.response_headers == make_exchange().response_headers


def count(store_url: str, table: str) -> int:
    with open_store(store_url) as s, s.reading("count") as conn:
        import sqlalchemy as sa

        return conn.scalar(sa.text(f"SELECT count(*) FROM {table}"))


# --- the writer process -----------------------------------------------------------------

SECRET = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"  # a GitHub-token-shaped dummy
STREAM = (
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":'
    b'"message","role":"assistant","model":"claude-x","content":[],"usage":{"input_tokens":3,'
    b'"output_tokens":1}}}\n\n'
    b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
    b'"content_block":{"type":"text","text":""}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"hello"}}\n\n'
    b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
    b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},'
    b'"usage":{"output_tokens":2}}\n\n'
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)


def captured(seq: int) -> Exchange:
    """An exchange as the addon hands it over: raw bodies, response not folded yet."""
    body = ('{"model":"claude-x","max_tokens":9,"stream":true,"messages":[{"role":"user",'
            f'"content":"my token is {SECRET}"}}]}}').encode()
    return Exchange(dialect="anthropic.messages", seq=seq, url="https://api.anthropic.com/v1/"
                    "messages", status="pending", http_status=200, first_byte_at=1.0,
                    raw_request=body,
                    raw_response=STREAM,
                    response_headers={"content-type": "text/event-stream"})


# --- proxies -----------------------------------------------------------------------------


class Arrivals(list):
    """The exchanges a recording proxy's sink got. A client can return a moment before the
    proxy's `response` hook has run, so `wait` waits (boundedly) for the number expected."""

    def wait(self, n: int, timeout: float = 10.0) -> list[Exchange]:
        """Every exchange that arrived, as it arrived (not finalized), once at least `n` did:
        fails if fewer came. More than `n` are returned too, so a test can tell."""
        deadline = time.monotonic() + timeout
        while len(self) < n and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(self) >= n, f"{len(self)} of {n} exchanges arrived"
        return list(self)

    def finalized(self, n: int, timeout: float = 10.0) -> list[Exchange]:
        """`wait`, then each exchange folded and parsed as the writer would (`finalize`)."""
        return [finalize(e) for e in self.wait(n, timeout)]


# --- WebSocket, hooks driven directly -----------------------------------------------------


def create(*items, previous=None, **fields) -> bytes:
    event = {"type": "response.create", "model": "gpt-5.4", "input": list(items), **fields}
    if previous:
        event["previous_response_id"] = previous
    return orjson.dumps(event)


def events_for(response_id, output) -> list[bytes]:
    """The server frames of a completed response, cut as the mock cuts them."""
    response = {"id": response_id, "object": "response", "status": "completed",
                "model": "gpt-5.4", "output": output,
                "usage": {"input_tokens": 50, "output_tokens": 5, "total_tokens": 55}}
    return list(frames(response))


class Socket:
    """A WebSocket flow to api.openai.com driven through the addon's hooks."""

    def __init__(self, addon: WebSocketRecorder, host="api.openai.com",
                 path="/v1/responses") -> None:
        self.addon = addon
        self.flow = tflow.twebsocketflow(messages=False)
        req = self.flow.request
        req.scheme, req.host, req.port, req.path = "https", host, 443, path
        req.headers["host"] = host
        req.headers["session-id"] = "sess-1"
        req.headers["authorization"] = "Bearer sk-dummy-never-stored"
        self.flow.websocket.messages = []
        addon.requestheaders(self.flow)
        addon.websocket_start(self.flow)

    def send(self, data: bytes, from_client: bool) -> WebSocketMessage:
        message = WebSocketMessage(websocket.Opcode.TEXT, from_client, data)
        self.flow.websocket.messages.append(message)
        self.addon.websocket_message(self.flow)
        return message

    def call(self, request: bytes, responses: list[bytes]) -> None:
        self.send(request, True)
        for frame in responses:
            self.send(frame, False)

    def close(self, code=1000) -> None:
        self.flow.websocket.close_code = code
        self.addon.websocket_end(self.flow)
