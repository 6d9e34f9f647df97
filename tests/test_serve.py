"""`forge-record serve` as a process: the official SDKs through it against the project's mock,
its security (tokens, admin token, nothing secret in the store), sessions kept apart, the
control API (reward, finish, trajectories cursor) and the SIGTERM drain."""

from __future__ import annotations

import signal
import socket
import sqlite3
import threading
import time
import urllib.error
import urllib.request

import anthropic
import openai
import orjson
import pytest
from serve_gateway import ADMIN, UPSTREAM_KEY, Served

from forge_record.client import GatewayClient, GatewayError
from forge_record.mock import MockUpstream
from forge_record.store import open_store, sealed

pytestmark = pytest.mark.slow  # a gateway process and its writer per test


@pytest.fixture
def mock():
    with MockUpstream() as m:
        yield m


@pytest.fixture
def db(tmp_path):
    return tmp_path / "gateway.db"


@pytest.fixture
def served(tmp_path, db, mock):
    gw = Served(tmp_path / "gw", f"sqlite:///{db}", [mock.url])
    try:
        yield gw
    finally:
        assert gw.stop() == 0, "".join(gw.log)


def claude_client(session) -> anthropic.Anthropic:
    env = session["env"]
    return anthropic.Anthropic(api_key=env["ANTHROPIC_API_KEY"],
                               base_url=env["ANTHROPIC_BASE_URL"], max_retries=0)


def ask(client: anthropic.Anthropic, text: str, stream: bool = False) -> str:
    kwargs = {"model": "claude-test", "max_tokens": 64,
              "messages": [{"role": "user", "content": text}]}
    if stream:
        with client.messages.stream(**kwargs) as s:
            return s.get_final_text()
    return "".join(b.text for b in client.messages.create(**kwargs).content if b.type == "text")


def upstream_key(headers: dict) -> str | None:
    """The key a request carried, wherever its SDK puts it."""
    bearer = headers.get("authorization", "").removeprefix("Bearer ")
    return headers.get("x-api-key") or headers.get("x-goog-api-key") or bearer or None


def raw(url: str, method: str = "GET", headers: dict | None = None, body: bytes | None = None):
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_sdks_through_the_gateway_land_in_their_session(served, mock, db):
    gw: GatewayClient = served.client
    s = gw.create_session("claude-code", metadata={"task_id": "t1", "group_id": "g1",
                                                   "attempt": 0}, tags={"run": "a"})
    assert s["env"]["ANTHROPIC_BASE_URL"] == f"{served.url}/s/{s['id']}"
    assert s["env"]["ANTHROPIC_API_KEY"] == s["token"]
    client = claude_client(s)
    assert ask(client, "hello") == ask(anthropic.Anthropic(
        api_key="sk-ant-dummy", base_url=mock.url, max_retries=0), "hello")
    assert ask(client, "hello again", stream=True)
    # the upstream got the gateway's key, never the session token, and no prefix
    sent = [r for r in mock.requests if r.path.startswith("/v1/messages")]
    assert len(sent) == 3
    assert upstream_key(sent[0].headers) == UPSTREAM_KEY
    assert all(s["token"] not in orjson.dumps(r.headers).decode() for r in sent)
    # OpenAI's SDK through the same gateway, keyed by the token alone
    o = gw.create_session("generic")
    oc = openai.OpenAI(api_key=o["token"], base_url=f"{served.url}/v1", max_retries=0)
    reply = oc.chat.completions.create(model="gpt-test",
                                       messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content
    chunks = list(oc.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": "hi"}], stream=True))
    assert len(chunks) > 1
    assert mock.requests[-1].headers["authorization"] == f"Bearer {UPSTREAM_KEY}"

    assert gw.finish(s["id"], "done", 0)["already_finished"] is False
    assert gw.finish(o["id"], "done", 0)["already_finished"] is False
    claude_view, openai_view = gw.session(s["id"]), gw.session(o["id"])
    assert [c["seq"] for c in claude_view["calls"]] == [1, 2]
    assert claude_view["missing_calls"] == openai_view["missing_calls"] == []
    assert all(c["dialect"] == "anthropic.messages" for c in claude_view["calls"])
    assert claude_view["keyed_by"] == "path" and openai_view["keyed_by"] == "token"
    assert [c["dialect"] for c in openai_view["calls"]] == ["openai.chat"] * 2
    assert claude_view["metadata"] == {"task_id": "t1", "group_id": "g1", "attempt": 0}


def test_security(served, mock, db):
    gw = served.client
    a, b = gw.create_session("claude-code"), gw.create_session("claude-code")
    messages = b'{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}]}'
    url = served.url
    # no token: 401, whatever names the session; never forwarded
    assert raw(f"{url}/s/{a['id']}/v1/messages", "POST", body=messages)[0] == 401
    assert raw(f"{url}/v1/messages", "POST", {"x-forge-session": a["id"]}, messages)[0] == 401
    assert raw(f"{url}/v1/messages", "POST", {"x-api-key": "frs_guess"}, messages)[0] == 401
    # a's token on b's path or header: 403
    assert raw(f"{url}/s/{b['id']}/v1/messages", "POST", {"x-api-key": a["token"]},
               messages)[0] == 403
    assert raw(f"{url}/v1/messages", "POST", {"x-forge-session": b["id"],
                                              "authorization": f"Bearer {a['token']}"},
               messages)[0] == 403
    assert not [r for r in mock.requests if r.path.startswith("/v1/messages")]
    # the control API without (or with a wrong) admin token: 401
    for headers in ({}, {"authorization": f"Bearer {a['token']}"},
                    {"authorization": "Bearer wrong"}):
        status, body = raw(f"{url}/api/v1/sessions", "POST", headers, b'{"harness":"codex"}')
        assert status == 401 and orjson.loads(body)["error"]["status"] == 401
    assert raw(f"{url}/api/v1/trajectories")[0] == 401
    with pytest.raises(GatewayError) as e:
        GatewayClient(url, "not-the-admin-token", retries=0).session(a["id"])
    assert e.value.status == 401
    # a real call, then nothing secret anywhere in the store
    status, _ = raw(f"{url}/s/{a['id']}/v1/messages", "POST",
                    {"x-api-key": a["token"], "content-type": "application/json"}, messages)
    assert status == 200
    gw.finish(a["id"], "done", 0)
    dump = "\n".join(sqlite3.connect(db).iterdump())
    for secret in (a["token"], b["token"], ADMIN, UPSTREAM_KEY):
        assert secret not in dump
    assert "frs_" not in dump


def test_bad_control_requests_name_the_field(served):
    url = served.url
    auth = {"authorization": f"Bearer {ADMIN}"}

    def post(path, body: bytes):
        status, data = raw(f"{url}/api/v1{path}", "POST", auth, body)
        return status, orjson.loads(data)["error"]

    assert post("/sessions", b"{not json")[0] == 400
    status, error = post("/sessions", b'{"harness": "nope"}')
    assert (status, error["field"]) == (422, "harness")
    assert post("/sessions", b'{"harness": "codex", "metadata": []}')[1]["field"] == "metadata"
    s = served.client.create_session("codex")
    assert s["args"] == ["-c", f'openai_base_url="{url}/s/{s["id"]}/v1"']
    assert post(f"/sessions/{s['id']}/reward", b'{"reward": "high"}')[1]["field"] == "reward"
    assert post(f"/sessions/{s['id']}/finish", b'{"status": "ok"}')[1]["field"] == "status"
    assert post("/sessions/nosuchsession/finish", b'{"status": "done"}')[0] == 404
    status, data = raw(f"{url}/api/v1/trajectories?limit=lots", headers=auth)
    assert status == 400 and orjson.loads(data)["error"]["field"] == "limit"
    status, data = raw(f"{url}/api/v1/openapi.json")
    assert status == 200 and "/api/v1/trajectories" in orjson.loads(data)["paths"]


def test_reward_finish_and_the_cursor_give_each_session_once(served):
    gw = served.client
    made = [gw.create_session("claude-code", metadata={"group_id": g}, request_id=f"r{i}")
            for i, g in enumerate(["g1", "g2", "g1"])]
    again = gw.create_session("claude-code", metadata={"group_id": "g1"}, request_id="r0")
    assert (again["id"], again["token"]) == (made[0]["id"], made[0]["token"])
    for s in made:
        ask(claude_client(s), f"task of {s['id']}")
    gw.reward(made[0]["id"], 0.5, tags={"outcome": "pass"})
    gw.reward(made[0]["id"], 1.0)  # merged: the latest reward, the tags kept
    assert gw.finish(made[1]["id"], "discarded", 1)["finish_seq"] == 1
    assert gw.finish(made[0]["id"], "done", 0)["finish_seq"] == 2
    twice = gw.finish(made[0]["id"], "done", 0)
    assert twice["already_finished"] is True and twice["finish_seq"] == 2

    first = gw.trajectories(after=0, limit=1)
    assert [i["session_id"] for i in first["items"]] == [made[1]["id"]]
    assert first["items"][0]["status"] == "discarded" and first["items"][0]["trajectories"] == []
    second = gw.trajectories(after=first["cursor"])
    (item,) = second["items"]
    assert item["session_id"] == made[0]["id"] and item["reward"] == 1.0
    assert item["label"]["tags"] == {"outcome": "pass"}
    (line,) = item["trajectories"]
    assert line["reward"] == 1.0 and len(line["steps"]) == 1
    assert gw.trajectories(after=second["cursor"])["items"] == []
    gw.finish(made[2]["id"], "done", 0)
    assert [i["session_id"] for i in gw.iter_trajectories(after=second["cursor"])] == [
        made[2]["id"]]
    assert [i["session_id"] for i in gw.trajectories(group_id="g1")["items"]] == [
        made[0]["id"], made[2]["id"]]
    with pytest.raises(anthropic.ConflictError):  # a finished session takes no more calls
        ask(claude_client(made[0]), "late")


def test_two_sessions_at_once_stay_apart(served):
    gw = served.client
    sessions = [gw.create_session("claude-code") for _ in range(2)]
    errors = []

    def rollout(s):
        try:
            client = claude_client(s)
            for n in range(4):
                ask(client, f"{s['id']} turn {n}", stream=n % 2 == 1)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=rollout, args=(s,)) for s in sessions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for s in sessions:
        gw.finish(s["id"], "done", 0)
        view = gw.session(s["id"])
        assert [c["seq"] for c in view["calls"]] == [1, 2, 3, 4]
    items = gw.trajectories()["items"]
    for item in items:
        text = orjson.dumps(item["trajectories"]).decode()
        other = next(s["id"] for s in sessions if s["id"] != item["session_id"])
        assert f"{item['session_id']} turn 3" in text and other not in text


def test_health_ready_metrics(tmp_path, db, mock):
    served = Served(tmp_path / "gw", f"sqlite:///{db}", [mock.url], extra=("--log-calls",))
    try:
        check_health_ready_metrics(served)
    finally:
        assert served.stop() == 0
    lines = [orjson.loads(x) for x in served.log if x.startswith("{")]
    assert [(x["dialect"], x["http_status"]) for x in lines] == [("anthropic.messages", 200)]


def check_health_ready_metrics(served):
    assert raw(f"{served.url}/healthz")[0] == 200
    status, body = raw(f"{served.url}/readyz")
    assert status == 200 and orjson.loads(body)["ready"] is True
    s = served.client.create_session("claude-code")
    ask(claude_client(s), "count me")
    raw(f"{served.url}/v1/messages", "POST", body=b"{}")
    status, body = raw(f"{served.url}/metrics")
    text = body.decode()
    assert status == 200
    assert 'forge_record_gateway_calls_total{code="2xx",dialect="anthropic.messages"' in text
    assert 'forge_record_gateway_refused_total{code="401"} 1.0' in text


def test_sigterm_drains_an_open_stream(tmp_path, db):
    with MockUpstream(options={"event_delay": 0.05}) as slow:
        gw = Served(tmp_path / "gw", f"sqlite:///{db}", [slow.url])
        s = gw.client.create_session("claude-code")
        got: dict = {}

        def stream():
            got["text"] = ask(claude_client(s), "a long answer please", stream=True)

        t = threading.Thread(target=stream)
        t.start()
        while not [r for r in slow.requests if r.path.startswith("/v1/messages")]:
            t.join(0.02)
        gw.proc.send_signal(signal.SIGTERM)
        refused = wait_refused(gw.port)
        assert t.is_alive(), "the stream ended before the listener closed"
        assert gw.stop() == 0, "".join(gw.log)
        t.join()
    assert refused, "a new connection was still accepted while draining"
    assert got["text"]
    with open_store(f"sqlite:///{db}") as store:
        assert [ex.status for ex in store.iter_exchanges(s["id"])] == ["complete"]


def test_a_replica_that_stops_seals_the_rollouts_it_holds(tmp_path, db, mock):
    """A rollout not finished here (it may have ended on another replica, or go on there):
    the replica's writer seals its segment and pack group as it closes."""
    gw = Served(tmp_path / "gw", f"sqlite:///{db}", [mock.url])
    s = gw.client.create_session("claude-code")
    for text in ("one", "two", "three"):
        assert ask(claude_client(s), text)
    assert gw.stop() == 0, "".join(gw.log)
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT record, raw_response FROM exchanges WHERE session_id = ? "
                            "ORDER BY segment, piece", (s["id"],)).fetchall()
        packs = conn.execute("SELECT count(*) FROM packs GROUP BY group_id").fetchall()
    assert len(rows) == 3 and all(sealed.is_sealed(part) for part in rows[0])
    assert rows[1:] == [(b"", b"")] * 2
    assert packs == [(1,)]
    with open_store(f"sqlite:///{db}") as store:  # every raw body reads back from the seal
        read = list(store.iter_exchanges(s["id"], raw=True))
    assert [orjson.loads(ex.raw_request)["messages"][0]["content"] for ex in read] == [
        "one", "two", "three"]
    assert all(ex.raw_response.startswith(b"{") and ex.response.content for ex in read)


def wait_refused(port: int, within: float = 10.0) -> bool:
    """Whether new connections to the port are refused within `within` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except (ConnectionRefusedError, ConnectionResetError):
            return True  # a reset: the listener closed with this connection in its backlog
        time.sleep(0.02)
    return False
