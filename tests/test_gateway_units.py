"""The gateway's pieces without a process: how a call names its session, what is forwarded in
place of its token, upstream stickiness and health, each harness's environment, the control
API's answers to bad input, and `serve`'s refusals to start."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
from concurrent import futures

import pytest
from mitmproxy.http import Headers
from support import make_exchange

from forge_record.commands.serve import DEFAULT_LISTEN, parse_listen
from forge_record.errors import UsageError
from forge_record.gateway import api, keys, service
from forge_record.gateway.env import session_env
from forge_record.gateway.known import KnownSessions
from forge_record.gateway.reservations import Reservations
from forge_record.gateway.service import Gateway
from forge_record.gateway.upstreams import Upstreams
from forge_record.store import gateway as gateway_rows
from forge_record.store import open_store
from forge_record.store.store import StoreUnavailable


def test_a_call_names_its_session_by_path_then_header_then_token():
    h = Headers(x_api_key="frs_t", x_forge_session="hdr")
    by_path = keys.named("/s/abc/v1/messages?beta=true", h)
    assert (by_path.session_id, by_path.how, by_path.path, by_path.token) == (
        "abc", "path", "/v1/messages?beta=true", "frs_t")
    assert keys.named("/v1/messages", h).how == "header"
    only = keys.named("/v1/messages", Headers(authorization="Bearer frs_b"))
    assert (only.session_id, only.how, only.token) == (None, "token", "frs_b")
    assert keys.named("/s/abc", Headers()).path == "/"
    assert keys.named("/v1/x", Headers(authorization="Basic frs_b")).token is None
    assert keys.named("/v1beta/m", Headers([(b"X-Goog-Api-Key", b"g")])).token == "g"
    assert keys.named("/s/../etc", Headers()).how == "path"  # an id, never a filesystem path


def test_the_token_is_replaced_by_the_upstream_key_or_dropped():
    h = Headers([(b"Authorization", b"Bearer frs_x"), (b"X-Forge-Session", b"s"),
                 (b"Host", b"gw")])
    keys.replace_credentials(h, "up-key")
    assert h.fields == ((b"Authorization", b"Bearer up-key"), (b"Host", b"gw"))
    h = Headers([(b"x-api-key", b"frs_x"), (b"x-goog-api-key", b"frs_x")])
    keys.replace_credentials(h, None)
    assert not h.fields


def test_sessions_stick_to_one_upstream_and_skip_unhealthy_ones():
    ups = Upstreams(["http://127.0.0.1:1", "http://127.0.0.1:2/v1", "https://e.example"])
    assert ups.all[1].path == "/v1" and ups.all[2].port == 443
    picks = {sid: ups.pick(sid).url for sid in (f"s{i}" for i in range(60))}
    assert len(set(picks.values())) == 3  # spread
    assert all(ups.pick(sid).url == url for sid, url in picks.items())  # sticky
    ups.all[0].healthy = False
    moved = {sid for sid, url in picks.items() if ups.pick(sid).url != url}
    assert moved == {sid for sid, url in picks.items() if url == ups.all[0].url}
    for u in ups.all:
        u.healthy = False
    assert ups.pick("s1") is None and not ups.any_healthy()
    with pytest.raises(ValueError):
        Upstreams(["ftp://x"])


def test_health_checks_mark_a_closed_port_unhealthy():
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
            ups = Upstreams([f"http://127.0.0.1:{listening.getsockname()[1]}",
                             f"http://127.0.0.1:{closed.getsockname()[1]}"])
            asyncio.run(ups.check())
    assert [u.healthy for u in ups.all] == [True, False]


@pytest.mark.parametrize("harness, expected", [
    ("claude-code", {"ANTHROPIC_BASE_URL": "B", "ANTHROPIC_API_KEY": "T"}),
    ("gemini-cli", {"GOOGLE_GEMINI_BASE_URL": "B", "GEMINI_API_KEY": "T"}),
    ("codex", {"OPENAI_API_KEY": "T", "CODEX_API_KEY": "T"}),
    ("qwen-code", {"OPENAI_BASE_URL": "B", "OPENAI_API_KEY": "T"}),
])
def test_each_harness_gets_exactly_what_it_needs(harness, expected):
    env, args = session_env(harness, "B", "T")
    assert env == expected
    assert args == (['-c', 'openai_base_url="B/v1"'] if harness == "codex" else [])


@pytest.fixture
def gateway(tmp_path):
    store = open_store(f"sqlite:///{tmp_path}/g.db")
    gw = Gateway(store, writer=None, upstreams=Upstreams(["http://127.0.0.1:9"]),
                 admin_token="adm", public_url="http://gw")
    yield gw
    gw.close()
    store.close()


def call(gw, method, path, body=b"", token="adm", query=""):
    return api.handle(gw, method, "/api/v1" + path, query,
                      Headers(authorization=f"Bearer {token}"), body)


def test_the_control_api_refuses_bad_input_with_the_field(gateway):
    assert call(gateway, "GET", "/trajectories", token="nope")[0] == 401
    assert call(gateway, "POST", "/sessions", b"[1]")[1]["error"]["field"] == "body"
    status, body = call(gateway, "POST", "/sessions", b'{"harness": "claude-code", '
                        b'"metadata": {"task_id": {"deep": 1}}}')
    assert (status, body["error"]["field"]) == (422, "metadata.task_id")
    assert call(gateway, "GET", "/sessions")[0] == 405
    assert call(gateway, "GET", "/nothing")[0] == 404
    status, made = call(gateway, "POST", "/sessions", b'{"harness": "claude-code"}')
    assert status == 201 and made["token"].startswith(keys.TOKEN_PREFIX)
    sid = made["id"]
    assert call(gateway, "POST", f"/sessions/{sid}/reward", b'{"reward": NaN}')[0] == 400
    assert call(gateway, "POST", f"/sessions/{sid}/reward",
                b'{"reward": true}')[1]["error"]["field"] == "reward"
    assert call(gateway, "POST", f"/sessions/{sid}/reward",
                b'{"tags": {"a": 1}}')[1]["error"]["field"] == "tags"
    assert call(gateway, "POST", f"/sessions/{sid}/finish",
                b'{"status": "done", "exit_code": "0"}')[1]["error"]["field"] == "exit_code"
    assert call(gateway, "GET", "/trajectories", query="after=-1")[1]["error"]["field"] == "after"
    assert call(gateway, "GET", "/sessions/unknown")[0] == 404
    # the token resolves to its session; another session's path is refused
    assert gateway.resolve(keys.Named(None, "token", "/", made["token"])).session_id == sid
    with pytest.raises(Exception) as e:
        gateway.resolve(keys.Named("other", "path", "/", made["token"]))
    assert e.value.status == 403


def test_serve_listens_on_loopback_unless_told():
    assert parse_listen(DEFAULT_LISTEN)[0] == "127.0.0.1"
    assert parse_listen("[::1]:80") == ("::1", 80)
    for bad in ("8080", "host:", "host:99999"):
        with pytest.raises(UsageError):
            parse_listen(bad)


def test_serve_refuses_to_start_with_one_line(tmp_path):
    token = tmp_path / "t"
    token.write_text("adm")
    cases = [
        (["--admin-token-file", str(token)], "--upstream"),
        (["--admin-token-file", str(tmp_path / "none"), "--upstream", "http://x"], "cannot read"),
        (["--admin-token-file", str(token), "--upstream", "nope://x"], "bad --upstream"),
        (["--admin-token-file", str(token), "--upstream", "http://127.0.0.1:9",
          "--store", "postgresql://u@127.0.0.1:1/none"], "cannot open store"),
    ]
    for args, says in cases:
        proc = subprocess.run([sys.executable, "-m", "forge_record", "serve", *args],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode != 0
        assert len(proc.stderr.strip().splitlines()) == 1 and says in proc.stderr, proc.stderr


def test_a_resolved_session_is_served_from_memory_until_its_ttl(gateway):
    """A call of a session read lately needs no store; a session finished through another
    replica is refused once the row is older than the TTL, one finished here at once."""
    made = [call(gateway, "POST", "/sessions", b'{"harness": "claude-code"}')[1]
            for _ in range(2)]
    named = [keys.Named(None, "token", "/", m["token"]) for m in made]
    assert gateway.cached(named[0]) is None  # never read: the store is asked
    assert gateway.resolve(named[0]).session_id == made[0]["id"]
    assert gateway.cached(named[0]).session_id == made[0]["id"]
    with pytest.raises(Exception) as e:  # another session's path: refused from memory too
        gateway.cached(keys.Named("other", "path", "/", made[0]["token"]))
    assert e.value.status == 403
    # finished through another replica (the row changed in the store, not here)
    with gateway.store.transaction("finish elsewhere") as conn:
        gateway_rows.finish(conn, made[0]["id"], "done", 0)
    assert gateway.cached(named[0]).session_id == made[0]["id"]  # stale, within the TTL
    gateway.known.ttl = 0.0
    assert gateway.cached(named[0]) is None
    with pytest.raises(Exception) as e:
        gateway.resolve(named[0])
    assert e.value.status == 409
    gateway.known.ttl = 60.0
    gateway.resolve(named[1])
    assert call(gateway, "POST", f"/sessions/{made[1]['id']}/finish", b'{"status": "done"}')[0] \
        == 200
    assert gateway.cached(named[1]) is None  # finished here: forgotten at once


def test_known_sessions_are_bounded():
    known = KnownSessions(size=3)
    for n in range(5):
        known.remember(f"d{n}", {"session_id": f"s{n}"})
    assert len(known) == 3 and known.fresh("d0") is None and known.fresh("d4") is not None
    known.forget("s4")
    assert known.fresh("d4") is None and known.any_age("d3") == {"session_id": "s3"}


# --- numbers reserved as calls start (gateway.reservations) ---------------------------------


class Writer:
    """The writer process's part the gateway uses: numbered exchanges are stored at once,
    unnumbered ones only noted (a real writer numbers them as it writes them)."""

    def __init__(self, store) -> None:
        self.store = store
        self.got: list[tuple[int, bool]] = []  # (seq, numbered), in the order handed over
        self.handed = threading.Semaphore(0)

    def submit_exchange(self, session_id, exchange, numbered=True) -> None:
        if numbered:
            self.store.add_exchange(session_id, exchange)
        self.got.append((exchange.seq, numbered))
        self.handed.release()

    def wait(self, n: int) -> list[tuple[int, bool]]:
        for _ in range(n):
            assert self.handed.acquire(timeout=30), self.got
        return self.got


class Unreachable:
    """A store whose writes fail as an unreachable database's do, while `down` is set."""

    def __init__(self, store) -> None:
        self.store = store
        self.down = False

    def transaction(self, doing):
        if self.down:
            raise StoreUnavailable(f"cannot {doing}: the store is down")
        return self.store.transaction(doing)

    def __getattr__(self, name):
        return getattr(self.store, name)


@pytest.fixture
def numbering(tmp_path):
    store = open_store(f"sqlite:///{tmp_path}/n.db")
    flaky = Unreachable(store)
    writer = Writer(store)
    gw = Gateway(flaky, writer=writer, upstreams=Upstreams(["http://127.0.0.1:9"]),
                 admin_token="adm", public_url="http://gw")
    _, session = gw.create("claude-code", {}, {}, None)
    yield gw, session["id"], writer, flaky
    gw.close()
    store.close()


def a_flow(gw, sid):
    """What GatewayAddon._route puts on a flow: its reservations and its sink. Here each
    start waits until its number is given (or refused), so numbers follow the test's order
    (calls that start at the same moment take theirs in any order)."""

    def reserve():
        reserved = gw.reserve(sid)
        if reserved is not None:
            futures.wait([reserved], timeout=30)
        return reserved

    reservations = Reservations(reserve)
    return reservations, gw.sink_for(sid, reservations)


def test_a_call_keeps_the_number_reserved_as_it_started(numbering):
    gw, sid, writer, _ = numbering
    first, first_sink = a_flow(gw, sid)
    second, second_sink = a_flow(gw, sid)
    first.started()
    second.started()
    second_sink(make_exchange())  # the second call ends first: its number is still 2
    assert writer.wait(1) == [(2, True)]
    assert gw.missing_calls(sid) == [1]  # in flight: numbered, not stored
    first_sink(make_exchange())
    assert writer.wait(1) == [(2, True), (1, True)]
    assert gw.missing_calls(sid) == []


def test_an_extra_record_of_a_call_is_numbered_as_it_ends(numbering):
    """A bridged call gives two records (the engine's first) for the one call it started."""
    gw, sid, writer, _ = numbering
    bridged, bridged_sink = a_flow(gw, sid)
    other, other_sink = a_flow(gw, sid)
    bridged.started()
    other.started()
    third, _ = a_flow(gw, sid)
    third.started()  # and a third call starts on another flow
    engine, agent = make_exchange(kind="engine"), make_exchange()
    bridged_sink(engine)
    assert writer.wait(1) == [(1, True)]  # the engine's record takes the reservation
    bridged_sink(agent)
    assert writer.wait(1) == [(1, True), (4, True)]  # the agent's, the next number at its end
    assert len(bridged) == 0
    other_sink(make_exchange())
    writer.wait(1)
    assert gw.missing_calls(sid) == [3]  # the third call has not ended


def test_a_flows_records_reach_the_writer_in_the_order_it_gave_them(numbering):
    """The engine's record of a bridged call waits for its reservation; the agent's record
    after it must not overtake it (bridge.pairs reads the engine's first)."""
    gw, sid, writer, _ = numbering
    slow = futures.Future()  # a reservation still on its way to the store
    flow = Reservations(lambda: slow)
    sink = gw.sink_for(sid, flow)
    flow.started()
    sink(make_exchange(kind="engine"))
    sink(make_exchange())  # numbered as it ends: it could be handed over first
    assert not writer.handed.acquire(timeout=0.5), writer.got  # both wait for the first
    slow.set_result(7)
    assert writer.wait(2) == [(7, True), (1, True)]


def test_a_reservation_the_store_refused_leaves_the_call_to_the_writer(numbering):
    gw, sid, writer, store = numbering
    flow, sink = a_flow(gw, sid)
    store.down = True
    flow.started()
    sink(make_exchange())
    assert writer.wait(1) == [(0, False)]  # unnumbered: the writer numbers it (store.batch)
    store.down = False
    later, later_sink = a_flow(gw, sid)
    later.started()  # from now on this replica lets the writer number the session's calls,
    later_sink(make_exchange())  # so their order is the order the writer gets them
    assert writer.wait(1) == [(0, False), (0, False)]
    assert gw.missing_calls(sid) == []  # nothing was handed out, so nothing is missing


def test_a_call_that_never_ends_is_missing_and_counted_by_finish(numbering, monkeypatch):
    gw, sid, writer, _ = numbering
    monkeypatch.setattr(service, "FLUSH_WAIT", 0.0)
    done, done_sink = a_flow(gw, sid)
    cut, _ = a_flow(gw, sid)
    done.started()
    cut.started()  # a killed replica's call: started, never handed over
    done_sink(make_exchange())
    writer.wait(1)
    assert gw.missing_calls(sid) == [2]
    assert gw.finish(sid, "done", 0)["missing_calls"] == 1
    assert gw.describe(sid)["missing_calls"] == [2]
