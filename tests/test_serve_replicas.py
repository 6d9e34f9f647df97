"""Three `forge-record serve` replicas on one real Postgres, the client alternating between
them (round robin): any replica serves any session, its calls numbered in one sequence, and
they assemble into one ordered trajectory; a replica SIGKILLed mid-rollout costs the
rollout nothing that had finished, and the call it had in flight is marked missing (HTTP
and WebSocket alike)."""

from __future__ import annotations

# ruff: noqa: F811 - pytest fixtures imported from test_store are parameters here
import asyncio
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import anthropic
import openai
import orjson
import pytest
import sqlalchemy as sa
from codex_cli import codex_env  # noqa: F401 - a fixture
from pg_relay import Relay, relayed, wait_for, wait_for_value  # noqa: F401 - fixtures
from serve_gateway import ADMIN, Served
from support import make_exchange, make_session

from forge_record.client import GatewayClient
from forge_record.mock import TOOL_MARKER, MockUpstream
from forge_record.store import gateway as gateway_rows
from forge_record.store import open_store, sealed

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def client_at(replica: Served, session: dict) -> anthropic.Anthropic:
    """The session's client, sent to this replica (same session path, same token)."""
    return anthropic.Anthropic(api_key=session["token"],
                               base_url=f"{replica.url}/s/{session['id']}", max_retries=0)


def turn(client: anthropic.Anthropic, history: list[dict]) -> None:
    """One more turn of the conversation, sent whole and streamed (as a harness does), answer
    kept."""
    history.append({"role": "user", "content": f"turn {len(history) // 2}"})
    with client.messages.stream(model="claude-test", max_tokens=64, messages=history) as stream:
        reply = stream.get_final_message()
    history.append({"role": "assistant", "content": reply.content[0].text})


# A model's answer takes time: a call's number is taken by its replica's writer a few ms after
# it starts, so consecutive calls over replicas keep their order when a call lasts longer
# than that (docs/ROLLOUTS.md, "Not done yet"). The mock answers at once unless paced: under
# load, a call through one replica then ended before its number was taken, and the next call,
# on another replica, took the smaller number (over HTTP and over WebSocket alike).
MODEL_PACE = {"event_delay": 0.01}


def test_replicas_share_one_session(tmp_path, new_database):
    url = new_database()
    with MockUpstream(options=dict(MODEL_PACE)) as mock:
        replicas = [Served(tmp_path / f"r{i}", url, [mock.url]) for i in range(3)]
        try:
            s = replicas[0].client.create_session("claude-code", metadata={"group_id": "g"})
            history: list[dict] = []
            for n in range(9):  # call n goes to replica n % 3
                turn(client_at(replicas[n % 3], s), history)
            # the finish reaches another replica than the create did
            assert replicas[2].client.finish(s["id"], "done", 0)["finish_seq"] == 1
            view = replicas[1].client.session(s["id"])
            assert [c["seq"] for c in view["calls"]] == list(range(1, 10))
            assert all(c["status"] == "complete" for c in view["calls"])
            (item,) = replicas[0].client.trajectories()["items"]
            (line,) = item["trajectories"]
            assert [st["seq"] for st in line["steps"]] == list(range(1, 10))
            assert replicas[1].client.trajectories(after=1)["items"] == []
            engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
            with engine.connect() as conn:
                places = conn.execute(sa.text(
                    "select segment, piece from exchanges order by seq")).all()
            engine.dispose()
            print("segments", places)
            assert len(set(places)) == len(places)  # each replica writes its own segments
        finally:
            for r in replicas:
                assert r.stop() == 0, "".join(r.log)
    # The finish reached one replica's writer; the others sealed their part as they stopped.
    with open_store(url) as store:
        with store.reading("check") as conn:
            found = conn.execute(sa.text("select segment, record, raw_response from exchanges "
                                         "order by segment, piece")).all()
            pieces = conn.execute(sa.text("select count(*) from packs group by group_id")).all()
        assert len(list(store.iter_exchanges(s["id"], raw=True))) == 9
    segments = {seg: [(bytes(r), bytes(w)) for g, r, w in found if g == seg]
                for seg, _, _ in found}
    assert len(segments) == 3 and all(len(rows) == 3 for rows in segments.values())
    for (record, response), *rest in segments.values():
        assert sealed.is_sealed(record) and sealed.is_sealed(response)
        assert rest == [(b"", b"")] * 2
    assert pieces == [(1,)] * 3


def responses_turn(replica: Served, session: dict, text: str, previous: str | None) -> str:
    """One call on a new WebSocket to this replica: only the new input and the previous
    response's id (a stored response, which the API lets any connection name, as the OpenAI
    SDK can; Codex itself sends its whole input on a new socket, see the real-Codex test
    below); the new response's id."""
    client = openai.OpenAI(api_key=session["token"], max_retries=0,
                           base_url=f"{replica.url}/s/{session['id']}/v1")
    with client.responses.connect() as conn:
        return ws_turn(conn, text, previous)


def test_a_responses_chain_across_replicas_is_stitched(tmp_path, new_database):
    url = new_database()
    # paced: unpaced, about 1 run in 60 swapped two calls' numbers (see MODEL_PACE)
    with MockUpstream(options=dict(MODEL_PACE)) as mock:
        replicas = [Served(tmp_path / f"r{i}", url, [mock.url]) for i in range(3)]
        try:
            s = replicas[0].client.create_session("codex")
            previous = None
            for n in range(6):  # call n goes to replica n % 3, each names the one before
                previous = responses_turn(replicas[n % 3], s, f"turn {n}", previous)
            replicas[1].client.finish(s["id"], "done", 0)
            stored = stored_exchanges(url, s["id"])
        finally:
            for r in replicas:
                assert r.stop() == 0, "".join(r.log)
    assert [ex.seq for ex in stored] == list(range(1, 7))
    for n, ex in enumerate(stored):
        assert ex.flags == [], (n, ex.flags)
        said = [(m.role, "".join(b.text or "" for b in m.content)) for m in ex.request.messages]
        # every call holds the whole conversation: each turn, then the answer to it
        assert [r for r, _ in said] == ["user", "assistant"] * n + ["user"], said
        assert [t for r, t in said if r == "user"] == [f"turn {k}" for k in range(n + 1)]


class RoundRobin:
    """A TCP balancer on loopback: each new connection goes to the next replica's port. With
    `cut_answers`, a connection is closed just after it carried a completed Responses answer
    (an uncompressed WebSocket frame), as a balancer's idle timeout or a replica's restart
    would close it."""

    def __init__(self, cut_answers: bool = False) -> None:
        self.ports: list[int] = []
        self.cut_answers = cut_answers
        self.hits: list[int] = []
        self._loop = asyncio.new_event_loop()
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        threading.Thread(target=self._loop.run_forever, daemon=True).start()

    async def _handle(self, reader, writer) -> None:
        port = self.ports[len(self.hits) % len(self.ports)]
        self.hits.append(port)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.gather(_pipe(reader, up_writer, None),
                             _pipe(up_reader, writer, up_writer if self.cut_answers else None))

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._server.close)


async def _pipe(reader, writer, cut) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
            if cut is not None and b'"type":"response.completed"' in data:
                cut.close()
                break
    except OSError:
        pass
    finally:
        writer.close()


@pytest.mark.cli
def test_real_codex_whose_socket_is_cut_goes_on_through_other_replicas(tmp_path, new_database,
                                                                        codex_env):  # noqa: F811
    """The real Codex CLI as a rollout behind a round-robin balancer over three replicas,
    its WebSocket closed after every answer: it reconnects (to the next replica) and sends
    its whole input again, with no previous_response_id, so every call is recorded whole
    without any lookup across replicas; the tool's result is in the trajectory."""
    url = new_database()
    balancer = RoundRobin(cut_answers=True)
    # uncompressed frames, so the balancer can see an answer end
    with MockUpstream(options={"openai_ws_deflate": False}) as mock:
        replicas = [Served(tmp_path / f"r{i}", url, [mock.url],
                           extra=("--public-url", balancer.url)) for i in range(3)]
        balancer.ports += [r.port for r in replicas]
        try:
            forge = str(Path(sys.executable).with_name("forge-record"))
            done = subprocess.run(
                [forge, "run", "--gateway", balancer.url, "--", "codex", "exec",
                 "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
                 "--color", "never", "-m", "gpt-5.4", f"Run the {TOOL_MARKER} command"],
                env={**codex_env, "FORGE_RECORD_GATEWAY_TOKEN": ADMIN}, cwd=codex_env["HOME"],
                stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, (done.stderr, [r.log for r in replicas])
            assert f"{TOOL_MARKER}-output-42" in done.stdout  # the tool really ran
            (item,) = replicas[0].client.trajectories()["items"]
            stored = stored_exchanges(url, item["session_id"])
        finally:
            balancer.close()
            for r in replicas:
                assert r.stop() == 0, "".join(r.log)
    assert len(mock.websockets) >= 2 and len(set(balancer.hits)) == 3
    assert item["status"] == "done" and item["missing_calls"] == []
    assert len(stored) >= 2 and all(ex.flags == [] for ex in stored)
    assert all("previous_response_id" not in ex.request.parameters for ex in stored)
    sizes = [len(ex.request.messages) for ex in stored]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]  # each call holds the one before
    assert f"{TOOL_MARKER}-output-42" in orjson.dumps(item["trajectories"]).decode()


def test_a_killed_replica_loses_nothing_finished(tmp_path, new_database):
    url = new_database()
    with MockUpstream() as mock:
        replicas = [Served(tmp_path / f"r{i}", url, [mock.url]) for i in range(3)]
        try:
            s = replicas[0].client.create_session("claude-code")
            history: list[dict] = []
            for n in range(3):
                turn(client_at(replicas[n], s), history)
            replicas[1].proc.kill()  # SIGKILL: its writer process still writes what it has
            replicas[1].proc.wait()
            for n in range(3, 6):
                turn(client_at(replicas[0 if n % 2 else 2], s), history)
            gw = GatewayClient(replicas[2].url, replicas[2].client._token)
            gw.finish(s["id"], "done", 0)
            assert [c["seq"] for c in gw.session(s["id"])["calls"]] == list(range(1, 7))
        finally:
            for r in replicas:
                r.stop()


def test_a_call_in_flight_on_a_killed_replica_is_marked_missing(tmp_path, new_database):
    """SIGKILL a replica while it streams a call (its first event reached the client, the
    mock holds the rest): the rollout goes on through the other two and finishes; every other
    call is stored, and the one cut off is marked by its number in `missing_calls`."""
    url = new_database()
    held = threading.Event()
    with MockUpstream() as mock:
        replicas = [Served(tmp_path / f"r{i}", url, [mock.url]) for i in range(3)]
        try:
            s = replicas[0].client.create_session("claude-code")
            control = replicas[0].client
            history: list[dict] = []
            for n in range(3):
                turn(client_at(replicas[n], s), history)
                stored(url, s["id"], [], n + 1)
            mock.options["hold"] = held
            history.append({"role": "user", "content": "turn 3"})
            with client_at(replicas[1], s).messages.stream(
                    model="claude-test", max_tokens=64, messages=history) as stream:
                events = iter(stream)
                assert next(events).type == "message_start"  # the call is in flight on B
                # its number was handed out as it started (by its writer process, so wait)
                wait_for_value(lambda: gaps(url, s["id"]), ([4], 4), "the in-flight call's number")
                replicas[1].proc.kill()
                replicas[1].proc.wait()
                with pytest.raises(Exception):  # noqa: B017 - cut off, as the library says it
                    for _ in events:
                        pass
            held.set()
            history.pop()  # the harness retries the turn, through another replica
            for n in range(3, 6):
                turn(client_at(replicas[0 if n % 2 else 2], s), history)
                # stored, so the finish counts exactly the one cut off (the writers are
                # niced: under load they may lag the finish's bounded wait)
                stored(url, s["id"], [4], n + 2)
            assert replicas[2].client.finish(s["id"], "done", 0)["missing_calls"] == 1
            view = control.session(s["id"])
            assert [c["seq"] for c in view["calls"]] == [1, 2, 3, 5, 6, 7]
            assert all(c["status"] == "complete" for c in view["calls"])
            assert view["missing_calls"] == [4]
            (item,) = control.trajectories()["items"]
            assert item["missing_calls"] == [4]
            (line,) = item["trajectories"]
            assert [st["seq"] for st in line["steps"]] == [1, 2, 3, 5, 6, 7]
        finally:
            held.set()
            for r in replicas:
                r.stop()


def test_a_websocket_turn_in_flight_on_a_killed_replica_is_marked_missing(tmp_path,
                                                                          new_database):
    """The same for Codex's Responses WebSocket: a number per turn, not per connection. The
    killed replica's connection carried a finished turn (stored) and an open one (marked)."""
    url = new_database()
    held = threading.Event()
    with MockUpstream() as mock:
        replicas = [Served(tmp_path / f"r{i}", url, [mock.url]) for i in range(3)]
        try:
            s = replicas[0].client.create_session("codex")
            control = replicas[0].client
            previous = responses_turn(replicas[0], s, "turn 0", None)
            stored(url, s["id"], [], 1)
            client = openai.OpenAI(api_key=s["token"], max_retries=0,
                                   base_url=f"{replicas[1].url}/s/{s['id']}/v1")
            with client.responses.connect() as conn:
                previous = ws_turn(conn, "turn 1", previous)  # done on B: stored as 2
                wait_for_value(lambda: gaps(url, s["id"]), ([], 2), "the first turns")
                mock.options["hold"] = held
                conn.response.create(model="gpt-5.4", store=True, previous_response_id=previous,
                                     input=[{"role": "user", "content": "turn 2"}])
                created = orjson.loads(conn.recv_bytes())
                assert created["type"] == "response.created"  # the turn is in flight on B
                wait_for_value(lambda: gaps(url, s["id"]), ([3], 3), "the in-flight turn's number")
                replicas[1].proc.kill()
                replicas[1].proc.wait()
                with pytest.raises(Exception):  # noqa: B017 - cut off, as the library says it
                    while True:
                        conn.recv_bytes()
            held.set()
            del mock.options["hold"]
            for n, replica in ((2, replicas[2]), (3, replicas[0])):  # retried elsewhere
                previous = responses_turn(replica, s, f"turn {n}", previous)
                stored(url, s["id"], [3], n + 2)
            assert replicas[2].client.finish(s["id"], "done", 0)["missing_calls"] == 1
            view = control.session(s["id"])
            assert [c["seq"] for c in view["calls"]] == [1, 2, 4, 5]
            assert all(c["status"] == "complete" for c in view["calls"])
            assert view["missing_calls"] == [3]
            (item,) = control.trajectories()["items"]
            assert item["missing_calls"] == [3]
        finally:
            held.set()
            for r in replicas:
                r.stop()


def stored(url: str, session_id: str, missing: list[int], calls: int) -> None:
    """Wait for the session's latest call to be stored. The mock is unpaced in the tests that
    hold a call (MODEL_PACE), so a call through one replica can end before its writer takes
    its number; the next call, through another replica, would then take the smaller number
    and the thread fork (docs/ROLLOUTS.md, "Not done yet"). Waiting keeps the order."""
    wait_for_value(lambda: gaps(url, session_id), (missing, calls), f"call {calls} stored")


def gaps(url: str, session_id: str) -> tuple[list[int], int]:
    """The session's missing numbers and how many were handed out, read from the store (the
    control API's describe is not polled while replicas write: it reads whole sessions)."""
    store = open_store(url)
    try:
        with store.reading("gaps") as conn:
            row = gateway_rows.get(conn, session_id) or {"calls": 0}
            return gateway_rows.missing_calls(conn, session_id), row["calls"]
    finally:
        store.close()


def ws_turn(conn, text: str, previous: str | None) -> str:
    """One more turn on an open Responses WebSocket; the new response's id."""
    chained = {"previous_response_id": previous} if previous else {}
    conn.response.create(model="gpt-5.4", store=True, **chained,
                         input=[{"role": "user", "content": text}])
    while True:
        event = orjson.loads(conn.recv_bytes())
        assert event["type"] != "error", event
        if event["type"] == "response.completed":
            return event["response"]["id"]


def test_a_store_outage_keeps_known_sessions_going_and_loses_nothing(tmp_path, relayed):
    url, relay = relayed
    with MockUpstream() as mock, Served(tmp_path / "gw", url, [mock.url]) as gw:
        s = gw.client.create_session("claude-code")
        history: list[dict] = []
        turn(client_at(gw, s), history)
        relay.stop()  # Postgres unreachable: the session goes on, its calls wait for numbers
        for _ in range(3):
            turn(client_at(gw, s), history)
        unknown = GatewayClient(gw.url, gw.client._token, retries=0)
        with pytest.raises(Exception):  # noqa: B017 - the control API needs the store
            unknown.create_session("claude-code")
        relay.start()
        gw.client.finish(s["id"], "done", 0)
        # The calls made during the outage wait in the writer's spool, replayed once it sees
        # the store again (every 2 s); a finish does not wait for that replay (ROLLOUTS.md).
        wait_for(lambda: len(gw.client.session(s["id"])["calls"]) >= 4, "the spool's replay")
        calls = gw.client.session(s["id"])["calls"]
        # All four, in order. A number may be skipped: an UPDATE that committed as the
        # store went away looks failed to the gateway, which numbers that exchange again.
        seqs = [c["seq"] for c in calls]
        assert len(seqs) == 4 and seqs == sorted(set(seqs)), seqs
        assert all(c["status"] == "complete" for c in calls)


def test_a_replica_killed_during_a_store_outage_loses_no_completed_call(tmp_path, relayed):
    """Exchanges that cannot be numbered wait in the writer's spool, not in memory: SIGKILL
    the replica while the store is unreachable, bring the store back, start a replica again:
    every call a client completed is stored, numbered in the order the calls were made."""
    url, relay = relayed
    with MockUpstream() as mock:
        gw = Served(tmp_path / "gw", url, [mock.url])
        try:
            s = gw.client.create_session("claude-code")
            history: list[dict] = []
            turn(client_at(gw, s), history)
            relay.stop()  # Postgres unreachable
            for _ in range(3):
                turn(client_at(gw, s), history)
            # the exchanges are in the writer's hands (its pipe), none left in the gateway
            wait_for(lambda: metric(gw, "forge_record_gateway_writer_unsettled") == 0,
                     "the gateway to hand its exchanges to the writer")
            gw.proc.kill()
            gw.proc.wait()
        finally:
            gw.stop()
        relay.start()
        with Served(tmp_path / "again", url, [mock.url]) as again:
            wait_for(lambda: stored_texts(url, s["id"]) == [f"turn {n}" for n in range(4)],
                     "the spooled calls to be replayed", timeout=90)
            again.client.finish(s["id"], "done", 0)
            calls = again.client.session(s["id"])["calls"]
    assert [c["seq"] for c in calls] == [1, 2, 3, 4]
    assert all(c["status"] == "complete" for c in calls)


def metric(served: Served, name: str) -> float | None:
    with urllib.request.urlopen(f"{served.url}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return None


def stored_exchanges(url: str, session_id: str) -> list:
    """The session's stored calls, in sequence order, read from the store."""
    store = open_store(url)
    try:
        return list(store.iter_exchanges(session_id))
    finally:
        store.close()


def stored_texts(url: str, session_id: str) -> list[str]:
    """The last user turn of each stored call, in sequence order."""
    return [ex.request.messages[-1].content[0].text for ex in stored_exchanges(url, session_id)]


def test_two_writers_of_one_session_never_share_a_segment(new_database):
    """Two stores (two replicas' writers) write the first exchanges of the same sessions at
    the same moment: each must open a segment of its own, or the session reads back broken."""
    url = new_database()
    stores = [open_store(url), open_store(url)]
    sessions = [f"race-{n}" for n in range(12)]
    for sid in sessions:
        stores[0].add_session(make_session(id=sid))
    start = threading.Barrier(2)

    def write(k: int) -> None:
        start.wait()
        for sid in sessions:
            stores[k].add_exchange(sid, make_exchange(seq=k + 1))

    threads = [threading.Thread(target=write, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        for sid in sessions:
            assert [ex.seq for ex in stores[0].iter_exchanges(sid, raw=True)] == [1, 2]
            places = [(ex.seq,) for ex in stores[1].iter_exchanges(sid)]
            assert len(places) == 2
    finally:
        for st in stores:
            st.close()
