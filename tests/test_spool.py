"""The spool: its file format, who replays which file, and real store outages.

Outages are real: the Postgres store is reached through a TCP relay that this module starts
and stops on a fixed local port, so the store URL first answers, then refuses, then answers
again. Nothing is mocked.
"""


from __future__ import annotations

import dataclasses
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from pg_relay import Relay, relayed, wait_for  # noqa: F401 - fixtures
from support import API_KEY, make_exchange, make_session, realistic_exchanges, with_secret_headers

from forge_record.store import Writer, open_store
from forge_record.store import gateway as gateway_rows
from forge_record.store import spool as spooling
from forge_record.store.engine import make_engine
from forge_record.store.items import AddExchange, AddSession, EndSession, StartCall
from forge_record.store.spool import Spool
from forge_record.store.store import fingerprint


def items():
    return [AddSession(make_session("s"), 123, 4.5), AddExchange("s", make_exchange(1)),
            AddExchange("s", make_exchange(2, raw_response=b"")), EndSession("s", 9.0, 0, "2.1")]


def read_items(path: Path) -> list:
    with open(path, "rb") as f:
        return list(spooling.read(f))


def test_items_read_back_and_a_torn_tail_is_ignored(tmp_path):
    spool = Spool(tmp_path, "fp")
    spool.append(items()[:2])
    spool.append(items()[2:])
    path = spool.path
    assert path.name.startswith("fp-") and path.suffix == ".spool"
    spool.close()
    assert read_items(path) == items()
    data = path.read_bytes()
    path.write_bytes(data[:-5])  # the recorder died inside the last frame
    assert read_items(path) == items()[:3]
    first = len(spooling.MAGIC)
    second = first + 9 + int.from_bytes(data[first + 1 : first + 5], "big")
    assert data[second : second + 1] == b"F"  # damage the second frame's payload:
    path.write_bytes(data[: second + 20] + b"\x00" + data[second + 21 :])
    assert read_items(path) == items()[:1]


def test_serve_s_call_starts_and_named_exchanges_read_back(tmp_path):
    serve = [StartCall("g", "r-1", "path"), StartCall("g", "r-2"),
             AddExchange("g", make_exchange(0), numbered=False, call="r-2")]
    spool = Spool(tmp_path, "fp")
    spool.append(serve)
    path = spool.path
    spool.close()
    assert read_items(path) == serve


def test_an_unnumbered_exchange_is_numbered_when_written_and_once_when_replayed(tmp_path,
                                                                               store):
    """`serve` spools exchanges the store could not number: the flag survives the spool, the
    write gives each its session's next number in order, a replay repeated is harmless."""
    with store.transaction("create") as conn:
        gateway_rows.create(conn, make_session("g"), "frs_token", {})
    late = [AddExchange("g", make_exchange(0, started_at=100.0 + n), numbered=False)
            for n in range(3)]
    spool = Spool(tmp_path, "fp")
    spool.append(late)
    path = spool.path
    spool.close()
    replayed = read_items(path)
    assert [i.numbered for i in replayed] == [False] * 3
    with store.transaction("number one") as conn:  # another replica numbers one meanwhile
        assert gateway_rows.next_seq(conn, "g") == 1
    store.write(replayed, if_absent=True)
    store.write(replayed, if_absent=True)  # the replay, once more after a crash
    stored = list(store.iter_exchanges("g"))
    assert [(ex.seq, ex.started_at) for ex in stored] == [(2, 100.0), (3, 101.0), (4, 102.0)]


def test_unnumbered_exchanges_at_one_start_time_are_told_apart_by_their_url(store):
    """A replayed unnumbered exchange is known by its session, start time and URL; the URL is
    in the record only (revision 0007), and two calls started at the same instant to
    different URLs are both stored, once."""
    with store.transaction("create") as conn:
        gateway_rows.create(conn, make_session("g"), "frs_token", {})
    both = [AddExchange("g", make_exchange(0, started_at=100.0, url=url), numbered=False)
            for url in ("https://api.example/v1/messages", "https://api.example/v1/other")]
    store.write(both, if_absent=True)
    store.write(both, if_absent=True)
    stored = list(store.iter_exchanges("g"))
    assert sorted(ex.url for ex in stored) == sorted(a.exchange.url for a in both)


def test_spool_files_are_private(tmp_path):
    directory = tmp_path / "spool"
    directory.mkdir(mode=0o755)  # as an older forge-record left it
    directory.chmod(0o755)
    spool = Spool(directory, "fp")
    spool.append(items())
    try:
        assert stat.S_IMODE(spool.path.stat().st_mode) == 0o600
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    finally:
        spool.close()


def test_secrets_never_reach_the_spool(tmp_path):
    spool = Spool(tmp_path, "fp")
    spool.append([AddExchange("s", with_secret_headers(make_exchange(1)))])
    [item] = read_items(spool.path)
    assert item.exchange.request_headers == make_exchange(1).request_headers
    assert API_KEY.encode() not in spool.path.read_bytes()
    spool.close()


SPOOL_AND_DIE = """
import os, sys
from forge_record.store.spool import Spool
from forge_record.store.items import AddExchange
from forge_record.records import Exchange
spool = Spool(sys.argv[1], sys.argv[2])
spool.append([AddExchange("s", Exchange(dialect="d", seq=n, raw_request=b"r%d" % n))
              for n in range(int(sys.argv[3]))])
os._exit(0)  # no close: the lock goes with the process
"""


def spool_and_die(directory: Path, print_: str, n: int) -> None:
    subprocess.run([sys.executable, "-c", SPOOL_AND_DIE, str(directory), print_, str(n)],
                   check=True, timeout=60)


def test_a_live_spool_is_left_alone_an_orphan_is_replayed_once(tmp_path, store):
    live = Spool(tmp_path, "fp")
    live.append(items()[:1])
    spool_and_die(tmp_path, "fp", 3)
    live_path, [orphan] = live.path, [p for p in spooling.orphans(tmp_path, "fp")
                                      if p != live.path]
    store.add_session(make_session("s"))
    written = []

    def write(batch):
        written.extend(batch)
        store.write(batch, if_absent=True)

    assert spooling.replay_file(live_path, write) is None and live_path.exists()
    assert spooling.replay_file(orphan, write) == 3 and not orphan.exists()
    assert spooling.replay_file(orphan, write) is None
    assert sorted(store.seqs("s")) == [0, 1, 2]
    live.close(delete=True)
    assert spooling.orphans(tmp_path, "fp") == []


def test_a_writer_replays_what_an_earlier_run_left(store, store_url, tmp_path):
    store.add_session(make_session("s"))
    spool_and_die(tmp_path / "spool", store.fingerprint, 5)
    spool_and_die(tmp_path / "spool", "another-store", 2)
    writer = Writer(open_store(store_url), spool_dir=tmp_path / "spool")
    writer.close()
    assert writer.replayed == 5
    assert sorted(store.seqs("s")) == [0, 1, 2, 3, 4]
    assert [p.name.split("-")[0] for p in (tmp_path / "spool").iterdir()] == ["another"]


# --- real outages (Postgres through a relay) ---------------------------------------------


@pytest.mark.postgres
@pytest.mark.slow
def test_an_outage_during_a_session_is_spooled_and_replayed(relayed, tmp_path):
    url, relay = relayed
    sent = realistic_exchanges(30)
    writer = Writer.open(url, spool_dir=tmp_path / "spool", retry_every=0.2)
    writer.submit_session(make_session("s"))
    for ex in sent[:10]:
        writer.submit_exchange("s", ex)
    wait_for(lambda: writer.written == 11, "the first exchanges to be written")

    relay.stop()
    for ex in sent[10:20]:
        writer.submit_exchange("s", ex)
    wait_for(lambda: writer.spooled == 10, "the exchanges to be spooled")
    spooled_in = writer.spool_path
    assert spooled_in.exists() and spooled_in.parent == tmp_path / "spool"

    relay.start()
    wait_for(lambda: writer.replayed == 10 and writer.spool_path is None, "the replay")
    assert not spooled_in.exists()
    for ex in sent[20:]:
        writer.submit_exchange("s", ex)
    writer.submit_end("s", 99.0, 0)
    writer.close()
    assert (writer.failed, writer.dropped) == (0, 0)
    with open_store(url) as store:
        assert list(store.iter_exchanges("s", raw=True)) == sent
        assert store.session_summary("s")["status"] == "ended"


@pytest.mark.postgres
@pytest.mark.slow
def test_a_store_down_for_a_whole_run_gets_it_at_the_next_run(relayed, tmp_path):
    url, relay = relayed
    relay.stop()
    sent = realistic_exchanges(6)
    first = Writer.open(url, spool_dir=tmp_path / "spool", retry_every=0.2)
    first.submit_session(make_session("s"))
    for ex in sent:
        first.submit_exchange("s", ex)
    first.submit_end("s", 99.0, 3)
    first.close()
    assert (first.written, first.spooled) == (0, 8)
    assert len(list((tmp_path / "spool").glob("*.spool"))) == 1

    relay.start()
    second = Writer.open(url, spool_dir=tmp_path / "spool")
    second.close()
    assert second.replayed == 8
    assert list((tmp_path / "spool").glob("*.spool")) == []
    with open_store(url) as store:
        assert list(store.iter_exchanges("s", raw=True)) == sent
        assert store.get_session("s").exit_code == 3


KILLED_WHILE_DOWN = """
import sys, time
from forge_record.records import Exchange, Session
from forge_record.store import Writer
writer = Writer.open(sys.argv[1], spool_dir=sys.argv[2], retry_every=0.2)
writer.submit_session(Session(id="k"))
for seq in range(1000):
    writer.submit_exchange("k", Exchange(dialect="d", seq=seq, raw_request=b"q%d" % seq))
    print(seq, flush=True)
    time.sleep(0.02)
"""


@pytest.mark.postgres
@pytest.mark.slow
def test_a_recorder_killed_during_an_outage_loses_at_most_one_exchange(relayed, tmp_path):
    url, relay = relayed
    relay.stop()
    child = subprocess.Popen([sys.executable, "-c", KILLED_WHILE_DOWN, url,
                              str(tmp_path / "spool")], stdout=subprocess.PIPE, text=True)
    submitted = -1
    while submitted < 30:
        submitted = int(child.stdout.readline())
    child.send_signal(signal.SIGKILL)
    child.wait(30)
    submitted = max([submitted, *(int(line) for line in child.stdout.read().split())])
    relay.start()
    Writer.open(url, spool_dir=tmp_path / "spool").close()
    with open_store(url) as store:
        stored = sorted(store.seqs("k"))
        assert stored == list(range(len(stored))) and len(stored) >= submitted
        assert store.session_summary("k")["status"] == "interrupted"


def test_fingerprint_names_the_store_without_its_password():
    a = make_engine("postgresql://u:secret-one@127.0.0.1:5432/db")
    b = make_engine("postgresql://u:secret-two@127.0.0.1:5432/db")
    try:
        assert fingerprint(a) != fingerprint(b)
        assert "secret" not in fingerprint(a) and len(fingerprint(a)) == 16
    finally:
        a.dispose()
        b.dispose()


def test_replay_is_idempotent_with_what_reached_the_store(store, tmp_path):
    """An item can reach the store and be spooled too (the commit landed, the answer did
    not): replaying writes it once."""
    store.write(items()[:2])
    spool = Spool(tmp_path, store.fingerprint)
    spool.append(items())
    assert spool.drain(lambda batch: store.write(batch, if_absent=True)) == 4
    assert sorted(store.seqs("s")) == [1, 2]
    assert store.get_session("s").exit_code == 0
    assert dataclasses.replace(store.get_exchange("s", 2, raw=True)) == items()[2].exchange


@pytest.mark.postgres
@pytest.mark.slow
def test_run_with_the_team_store_down_keeps_the_exit_code_and_the_next_run_writes_it(
        relayed, tmp_path):
    import os

    url, relay = relayed
    forge = str(Path(sys.executable).with_name("forge-record"))
    env = {**os.environ, "FORGE_RECORD_HOME": str(tmp_path / "home")}

    def run(code: int) -> subprocess.CompletedProcess:
        return subprocess.run([forge, "run", "--store", url, "--", sys.executable, "-c",
                               f"import sys; sys.exit({code})"], env=env, text=True,
                              capture_output=True, timeout=120)

    relay.stop()
    down = run(3)
    assert down.returncode == 3, down.stderr
    lines = down.stderr.splitlines()  # the command makes no model call: run warns after it
    warning = lines.index("forge-record: warning: the command ran but no model call was recorded")
    assert "the store did not answer; 2 items wait in" in lines[warning - 1]
    assert len(list((tmp_path / "home" / "spool").glob("*.spool"))) == 1
    relay.start()
    up = run(0)
    assert up.returncode == 0, up.stderr
    assert list((tmp_path / "home" / "spool").glob("*.spool")) == []
    with open_store(url) as store:
        assert sorted(s["exit_code"] for s in store.list_sessions()) == [0, 3]
        assert {s["status"] for s in store.list_sessions()} == {"ended"}


def test_an_item_the_store_refuses_does_not_block_the_rest_of_a_spool(store, store_url,
                                                                       tmp_path, caplog):
    """An exchange whose session never reached the store (its AddSession failed) is logged
    and counted; everything else in the file is written."""
    store.add_session(make_session("s"))
    spool = Spool(tmp_path / "spool", store.fingerprint)
    spool.append([AddExchange("s", make_exchange(1)), AddExchange("lost", make_exchange(1)),
                  AddExchange("s", make_exchange(2))])
    spool.close()
    writer = Writer(open_store(store_url), spool_dir=tmp_path / "spool")
    writer.close()
    assert (writer.replayed, writer.failed) == (3, 1)
    assert sorted(store.seqs("s")) == [1, 2]
    assert "could not write spooled exchange 1 of session lost" in caplog.text
    assert spooling.orphans(tmp_path / "spool", store.fingerprint) == []


# --- a store that hangs: every operation has a deadline, the spool takes the rest ----------

AGENT = """
import anthropic, sys
client = anthropic.Anthropic(api_key="sk-ant-dummy-key", max_retries=0)
def call():
    client.messages.create(model="claude-haiku-4-5", max_tokens=20,
                           messages=[{"role": "user", "content": "hi"}])
call()
print("first", flush=True)
sys.stdin.readline()  # the test makes the store hang meanwhile
for _ in range(4):
    call()
print("done", flush=True)
"""


def run_agent_while(url: str, home: Path, hang, *, deadline: float | None = None):
    """`forge-record run` an agent that makes one call, waits while `hang()` makes the store
    hang, then makes four more; (the finished process, stderr, calls the agent completed)."""
    import os

    from forge_record.mock import MockUpstream

    forge = str(Path(sys.executable).with_name("forge-record"))
    env = {**os.environ, "FORGE_RECORD_HOME": str(home)}
    if deadline is not None:
        env["FORGE_RECORD_STORE_DEADLINE"] = str(deadline)
    with MockUpstream() as mock:
        proc = subprocess.Popen(
            [forge, "run", "--store", url, "--harness", "claude-code", "--mode", "reverse",
             "--upstream", f"api.anthropic.com={mock.url}", "--", sys.executable, "-c", AGENT],
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        try:
            assert proc.stdout.readline().strip() == "first"
            hang()
            out, err = proc.communicate("go\n", timeout=240)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert out.strip() == "done" and proc.returncode == 0, err
    return proc, err, len(mock.requests)


def replay_and_count(url: str, spool_dir: Path) -> int:
    """Replay what waits in the spool, as the next run would; the exchanges then stored."""
    Writer.open(url, spool_dir=spool_dir).close()
    assert list(spool_dir.glob("*.spool")) == []
    with open_store(url) as store:
        [session] = store.list_sessions()
        assert session["status"] == "ended"
        return len(store.seqs(session["id"]))


@pytest.mark.postgres
@pytest.mark.slow
def test_a_table_lock_held_past_the_agent_s_exit_spools_and_loses_nothing(
        new_database, tmp_path):
    # Before: the writer waited on the lock inside one SQL call and everything behind it
    # was dropped at exit ("still pending after 30s; they are lost").
    import psycopg

    url = new_database()
    open_store(url).close()
    locker = psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://", 1))
    try:
        def lock() -> None:
            locker.execute("LOCK TABLE exchanges IN ACCESS EXCLUSIVE MODE")  # held: no commit

        _, err, completed = run_agent_while(url, tmp_path / "home", lock)
        assert "they are lost" not in err and "NOT stored" not in err
        assert "items wait in" in err.splitlines()[-1]
    finally:
        locker.rollback()
        locker.close()
    assert replay_and_count(url, tmp_path / "home" / "spool") == completed == 5


@pytest.mark.postgres
@pytest.mark.slow
def test_a_relay_that_goes_silent_spools_and_loses_nothing(relayed, tmp_path):
    # Before: a write sent into the silent path never returned; the calls behind it were
    # dropped at exit.
    url, relay = relayed
    _, err, completed = run_agent_while(url, tmp_path / "home", relay.silence, deadline=3)
    assert "they are lost" not in err and "NOT stored" not in err
    assert "items wait in" in err.splitlines()[-1]
    relay.stop()  # the stuck connections end: the server drops what they held
    relay.start()
    assert replay_and_count(url, tmp_path / "home" / "spool") == completed == 5
