"""The gateway's pieces without a process: how a call names its session, what is forwarded in
place of its token, upstream stickiness and health, each harness's environment, the control
API's answers to bad input, and `serve`'s refusals to start."""

from __future__ import annotations

import asyncio
import functools
import socket
import subprocess
import sys
import time

import pytest
import sqlalchemy as sa
from mitmproxy.http import Headers
from support import make_exchange, realistic_exchanges

from forge_record.addons.recorder import STARTED
from forge_record.commands.serve import DEFAULT_LISTEN, parse_listen
from forge_record.errors import UsageError
from forge_record.gateway import api, keys, service
from forge_record.gateway.env import session_env
from forge_record.gateway.known import KnownSessions
from forge_record.gateway.reservations import Reservations
from forge_record.gateway.service import Gateway
from forge_record.gateway.upstreams import Upstreams
from forge_record.store import batch as store_batch
from forge_record.store import gateway as gateway_rows
from forge_record.store import open_store
from forge_record.store.items import AddExchange, EndSession, StartCall
from forge_record.store.numbering import CallNumbers
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


def test_a_session_is_served_from_memory_until_its_writer_says_it_finished(gateway):
    """A session created or read here needs no store before its calls are forwarded, however
    old its row (up to STALE). What can change is its end through another replica: numbering
    a call, the writer finds it and says so (`closed`), and the session is refused from
    memory from then on. One finished here is forgotten at once; one gone is read again (and
    refused by the store); a row older than STALE is read before the call."""
    made = [call(gateway, "POST", "/sessions", b'{"harness": "claude-code"}')[1]
            for _ in range(3)]
    named = [keys.Named(None, "token", "/", m["token"]) for m in made]
    first = gateway.cached(named[0])  # created here: no store read, even for its first call
    assert (first.session_id, first.note) == (made[0]["id"], "token")
    assert gateway.cached(named[0]).note is None  # the first call's start carries the note
    with pytest.raises(Exception) as e:  # another session's path: refused from memory too
        gateway.cached(keys.Named("other", "path", "/", made[0]["token"]))
    assert e.value.status == 403
    # finished through another replica (the row changed in the store, not here)
    with gateway.store.transaction("finish elsewhere") as conn:
        gateway_rows.finish(conn, made[0]["id"], "done", 0)
    assert gateway.cached(named[0]).session_id == made[0]["id"]  # not known here yet
    gateway.closed(made[0]["id"], "done")  # the writer numbered a call and found it finished
    with pytest.raises(Exception) as e:
        gateway.cached(named[0])
    assert e.value.status == 409
    assert call(gateway, "POST", f"/sessions/{made[1]['id']}/finish", b'{"status": "done"}')[0] \
        == 200
    assert gateway.cached(named[1]) is None  # finished here: forgotten at once
    gateway.closed(made[2]["id"], "gone")  # deleted: the store is asked again
    assert gateway.cached(named[2]) is None
    gateway.known.stale = 0.0
    assert gateway.cached(named[0]) is None  # too old to use: the store is asked first


def test_a_session_finished_elsewhere_is_refused_once_a_call_of_it_is_numbered(tmp_path):
    """Through the addon and a real writer process: a session finished through another
    replica is forwarded (its row here says open), its call's number is taken in the writer
    with the session's status, and the next call is refused (409) from memory, with no
    store read in the proxy."""
    from mitmproxy.test import tflow

    from forge_record.addons.gateway import GatewayAddon
    from forge_record.gateway.metrics import Metrics
    from forge_record.writer_process import WriterProcess

    url = f"sqlite:///{tmp_path}/w.db"
    store = open_store(url)
    writer = WriterProcess(url, number_calls=True)
    writer.ready()
    gateway = Gateway(store, writer=writer, upstreams=Upstreams(["http://127.0.0.1:9"]),
                      admin_token="adm", public_url="http://gw")
    writer.on_closed = gateway.closed
    try:
        made = call(gateway, "POST", "/sessions", b'{"harness": "claude-code"}')[1]
        with store.transaction("finish elsewhere") as conn:
            gateway_rows.finish(conn, made["id"], "done", 0)
        gateway.resolve = None  # the proxy never reads the store for this session
        addon = GatewayAddon(gateway, None, Metrics(lambda: 0, lambda: 0, lambda: 0))

        def a_call():
            flow = tflow.tflow()
            flow.request.path = "/v1/messages"
            flow.request.headers["x-api-key"] = made["token"]
            return flow

        async def calls():
            first = a_call()
            await addon.requestheaders(first)
            assert first.response is None and first.request.port == 9  # forwarded
            first.metadata[STARTED]()  # the call starts: the writer takes its number
            for _ in range(200):
                second = a_call()
                await addon.requestheaders(second)
                if second.response is not None:
                    return second.response.status_code
                await asyncio.sleep(0.05)

        assert asyncio.run(calls()) == 409
    finally:
        gateway.close()
        writer.close()
        store.close()


def test_known_sessions_are_bounded():
    known = KnownSessions(size=3)
    for n in range(5):
        known.remember(f"d{n}", {"session_id": f"s{n}"})
    assert len(known) == 3 and known.get("d0") is None and known.get("d4") is not None
    known.forget("s4")
    assert known.get("d4") is None and known.any_age("d3") == {"session_id": "s3"}


# --- numbers reserved as calls start (gateway.reservations, store.batch) ---------------------


class Writer:
    """The writer process's part the gateway uses, writing each item into the store at once
    (as the real one does a batch at a time) after its numbering stage (store.numbering), or
    holding them while `held`."""

    def __init__(self, store) -> None:
        self.store = store
        self.numbers = CallNumbers(lambda: store)
        self.items: list = []  # in the order handed over
        self.held = False

    def submit_start(self, session_id, call, named_by=None) -> int:
        return self._submit(StartCall(session_id, call, named_by))

    def submit_exchange(self, session_id, exchange, numbered=True, call=None) -> int:
        return self._submit(AddExchange(session_id, exchange, numbered, call))

    def submit_end(self, session_id, ended_at, exit_code, harness_version=None) -> int:
        return self._submit(EndSession(session_id, ended_at, exit_code, harness_version))

    def _submit(self, item) -> int:
        self.items.append(item)
        if not self.held:
            [numbered] = self.numbers.pass_through([item])
            if numbered is not None:
                self.store.write([numbered])
        return len(self.items)

    def settled(self, position: int) -> bool:
        return not self.held


@pytest.fixture
def numbering(tmp_path):
    store = open_store(f"sqlite:///{tmp_path}/n.db")
    writer = Writer(store)
    gw = Gateway(store, writer=writer, upstreams=Upstreams(["http://127.0.0.1:9"]),
                 admin_token="adm", public_url="http://gw")
    _, session = gw.create("claude-code", {}, {}, None)
    yield gw, session["id"], writer, store
    gw.close()
    store.close()


def a_flow(gw, sid):
    """What GatewayAddon._route puts on a flow: its call-start hook and its sink."""
    reservations = Reservations(functools.partial(gw.start_call, sid))
    return reservations, gw.sink_for(sid, reservations)


def test_a_call_keeps_the_number_reserved_as_it_started(numbering):
    gw, sid, writer, store = numbering
    first, first_sink = a_flow(gw, sid)
    second, second_sink = a_flow(gw, sid)
    first.started()
    second.started()
    second_sink(make_exchange())  # the second call ends first: its number is still 2
    assert [ex.seq for ex in store.iter_exchanges(sid)] == [2]
    assert gw.missing_calls(sid) == [1]  # in flight: numbered, not stored
    first_sink(make_exchange())
    assert sorted(ex.seq for ex in store.iter_exchanges(sid)) == [1, 2]
    assert gw.missing_calls(sid) == []
    calls = [i.call for i in writer.items]
    assert len(set(calls)) == 2 and calls == [calls[0], calls[1], calls[1], calls[0]]


def test_an_extra_record_of_a_call_is_numbered_as_it_is_written(numbering):
    """A bridged call gives two records (the engine's first) for the one call it started."""
    gw, sid, writer, store = numbering
    bridged, bridged_sink = a_flow(gw, sid)
    other, other_sink = a_flow(gw, sid)
    bridged.started()
    other.started()
    third, _ = a_flow(gw, sid)
    third.started()  # and a third call starts on another flow
    bridged_sink(make_exchange(kind="engine"))  # the engine's record takes the reservation
    bridged_sink(make_exchange())  # the agent's, the next number as it is written
    assert len(bridged) == 0 and writer.items[-1].call is None
    other_sink(make_exchange())
    assert [ex.seq for ex in store.iter_exchanges(sid) if ex.kind == "engine"] == [1]
    assert sorted(ex.seq for ex in store.iter_exchanges(sid)) == [1, 2, 4]
    assert gw.missing_calls(sid) == [3]  # the third call has not ended


def test_a_flows_records_reach_the_writer_in_the_order_it_gave_them(numbering):
    gw, sid, writer, _ = numbering
    flow, sink = a_flow(gw, sid)
    flow.started()
    engine, agent = make_exchange(kind="engine"), make_exchange()
    sink(engine)
    sink(agent)
    assert [i.exchange for i in writer.items[1:]] == [engine, agent]


def test_how_a_session_is_named_is_recorded_by_the_writer_from_its_first_call(numbering):
    """Resolving a call only reads the store: its start carries the way the call named its
    session, which the writer records (the first way seen stays)."""
    gw, sid, writer, store = numbering
    token = keys.session_token("adm", sid)
    named = keys.named(f"/s/{sid}/v1/messages", Headers(x_api_key=token))
    resolved = gw.resolve(named)
    assert resolved.note == "path" and gw.describe(sid)["keyed_by"] is None
    flow = Reservations(functools.partial(gw.start_call, sid, resolved.note))
    flow.started()
    assert gw.describe(sid)["keyed_by"] == "path"
    again = gw.resolve(keys.named("/v1/messages", Headers(x_api_key=token)))
    assert again.note is None and again.how == "token"
    store.write([StartCall(sid, "x", named_by="header")])
    assert gw.describe(sid)["keyed_by"] == "path"


def test_starts_read_together_are_numbered_in_their_order(numbering):
    gw, sid, _, store = numbering
    numbers = CallNumbers(lambda: store)
    late = AddExchange(sid, make_exchange(), numbered=False, call="b")
    first, second, numbered = numbers.pass_through([StartCall(sid, "a"), StartCall(sid, "b"),
                                                    late])
    assert first is second is None  # nothing left to write: handled (store.Writer.skip)
    store.write([numbered])
    assert [ex.seq for ex in store.iter_exchanges(sid)] == [2] and gw.missing_calls(sid) == [1]


def test_a_start_the_store_refuses_leaves_the_call_to_be_numbered_as_written(numbering):
    """One start of a finished-and-gone session does not cost the others their numbers; a
    call without one is numbered as its exchange is written."""
    gw, sid, _, store = numbering
    numbers = CallNumbers(lambda: store)
    numbers.pass_through([StartCall("no-such-session", "x"), StartCall(sid, "a")])
    [gone] = numbers.pass_through([AddExchange(sid, make_exchange(), numbered=False, call="x")])
    [kept] = numbers.pass_through([AddExchange(sid, make_exchange(), numbered=False, call="a")])
    assert not gone.numbered and (kept.numbered, kept.exchange.seq) == (True, 1)
    store.write([kept, gone])
    assert sorted(ex.seq for ex in store.iter_exchanges(sid)) == [1, 2]


def test_an_unreachable_store_is_not_asked_again_until_the_retry(numbering):
    gw, sid, _, store = numbering
    opened = []

    def unreachable():
        opened.append(1)
        raise StoreUnavailable("the store is down")

    numbers = CallNumbers(unreachable, retry_every=60)
    for n in range(3):
        numbers.pass_through([StartCall(sid, f"c{n}")])
    assert len(opened) == 1  # asked once: the calls after it wait on nothing
    [item] = numbers.pass_through([AddExchange(sid, make_exchange(), numbered=False,
                                               call="c0")])
    assert not item.numbered  # numbered as it is written, once the store answers


def test_a_start_read_back_from_a_spool_numbers_nothing(numbering):
    """Starts reach a write only from a spool (the writer numbers those it reads): too late
    to number anything, so only the way the call named its session is recorded."""
    gw, sid, _, store = numbering
    store.write([StartCall(sid, "a", named_by="token")], if_absent=True)
    assert gw.missing_calls(sid) == [] and gw.describe(sid)["keyed_by"] == "token"


def test_a_call_that_never_ends_is_missing_and_counted_by_finish(numbering, monkeypatch):
    gw, sid, writer, _ = numbering
    monkeypatch.setattr(service, "FLUSH_WAIT", 0.0)
    done, done_sink = a_flow(gw, sid)
    cut, _ = a_flow(gw, sid)
    done.started()
    cut.started()  # a killed replica's call: started, never handed over
    done_sink(make_exchange())
    assert gw.missing_calls(sid) == [2]
    assert gw.finish(sid, "done", 0)["missing_calls"] == 1
    assert gw.describe(sid)["missing_calls"] == [2]


def test_finish_tells_the_writer_which_then_seals_the_session_s_pack_group(numbering,
                                                                        monkeypatch):
    gw, sid, writer, store = numbering
    monkeypatch.setattr(store_batch, "GROW_UNDER", 0)  # a pack row a call, as on Postgres
    for ex in realistic_exchanges(3):
        flow, sink = a_flow(gw, sid)
        flow.started()
        sink(ex)
    with store.reading("check") as conn:
        assert conn.scalar(sa.text("SELECT count(*) FROM packs")) > 1
    ended = gw.finish(sid, "done", 0)
    assert writer.items[-1] == EndSession(sid, ended["finished_at"], 0)
    assert gw.finish(sid, "done", 0)["already_finished"] and writer.items[-1].session_id == sid
    assert len([i for i in writer.items if isinstance(i, EndSession)]) == 1
    with store.reading("check") as conn:
        assert conn.scalar(sa.text("SELECT count(*) FROM packs")) == 1


def test_finish_waits_for_what_the_writer_still_holds(numbering, monkeypatch):
    gw, sid, writer, store = numbering
    monkeypatch.setattr(service, "FLUSH_WAIT", 0.3)
    flow, sink = a_flow(gw, sid)
    writer.held = True  # the writer is behind: nothing of this call is stored yet
    flow.started()
    sink(make_exchange())
    started = time.monotonic()
    gw.finish(sid, "done", 0)
    assert time.monotonic() - started >= 0.3  # it waited, for as long as it may
