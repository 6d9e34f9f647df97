"""Responses over WebSocket: the pure chaining (`forge_record.chain`), the addon's hooks
driven directly, and the live proxy with the official `openai` SDK's WebSocket client.

A call over the socket names the previous response and sends only its new items; the record
must hold the complete context the model saw, the same messages an HTTP client that sends
everything would have produced.
"""

from __future__ import annotations

import openai
import orjson
import pytest
from mitmproxy.test import taddons, tflow
from support import Socket, create, events_for

from forge_record.addons.proxy import InProcessProxy
from forge_record.addons.recorder import Recorder
from forge_record.addons.websocket import WebSocketRecorder
from forge_record.chain import UNRESOLVED, ResponseChains
from forge_record.decoders.openai_items import parse_responses_request
from forge_record.decoders.openai_responses import response_record
from forge_record.finalize import finalize
from forge_record.mock import TOOL_MARKER, MockUpstream
from forge_record.records import COMPLETE, ERROR, INCOMPLETE, Exchange, request_to_dict
from forge_record.trust import confdir

WS_URL = "wss://api.openai.com/v1/responses"
DEV = {"type": "message", "role": "developer", "content": [{"type": "input_text",
                                                            "text": "You are Codex."}]}
USER = {"type": "message", "role": "user", "content": [{"type": "input_text",
                                                        "text": f"Run the {TOOL_MARKER} one"}]}
CALL = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "exec_command",
        "arguments": '{"cmd":"echo hi"}', "status": "completed"}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "hi\n"}
ANSWER = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
          "content": [{"type": "output_text", "text": "It printed hi.", "annotations": []}]}


# --- the pure chaining -------------------------------------------------------------------


def call(response_id, new_input, output, *, previous=None, url=WS_URL, **fields) -> Exchange:
    """An exchange as finalize leaves it: request and response parsed."""
    body = {"type": "response.create", "model": "gpt-5.4", "input": new_input, **fields}
    if previous:
        body["previous_response_id"] = previous
    response = response_record({"id": response_id, "status": "completed"}, output)
    return Exchange(dialect="openai.responses", url=url,
                    request=parse_responses_request(body), response=response)


def messages(exchange: Exchange) -> list:
    return request_to_dict(exchange.request)["messages"]


def full(*items) -> list:
    """What an HTTP client sending every item would have stored."""
    return request_to_dict(parse_responses_request({"input": list(items)}))["messages"]


def test_a_chain_on_one_socket_is_the_whole_context():
    chains = ResponseChains()
    warm = chains.stitch(call("resp_w", [DEV], [], generate=False))
    first = chains.stitch(call("resp_1", [USER], [CALL], previous="resp_w"))
    second = chains.stitch(call("resp_2", [OUTPUT], [ANSWER], previous="resp_1"))

    assert warm.kind == "side" and first.kind == second.kind == "model"
    assert messages(first) == full(DEV, USER)
    assert messages(second) == full(DEV, USER, CALL, OUTPUT)
    assert [m["role"] for m in messages(second)] == ["developer", "user", "assistant", "tool"]
    assert not (warm.flags or first.flags or second.flags)
    # what was sent stays visible: the id it named
    assert second.request.parameters["previous_response_id"] == "resp_1"


def test_an_unknown_previous_response_is_flagged_and_so_are_its_descendants():
    chains = ResponseChains()
    orphan = chains.stitch(call("resp_2", [OUTPUT], [ANSWER], previous="resp_before_recording"))
    child = chains.stitch(call("resp_3", [USER], [ANSWER], previous="resp_2"))
    assert orphan.flags == [UNRESOLVED] and child.flags == [UNRESOLVED]
    assert messages(orphan) == full(OUTPUT)  # only what was sent: nothing is invented
    assert messages(child) == full(OUTPUT, ANSWER, USER)


def test_a_response_that_could_not_be_decoded_breaks_the_chain():
    chains = ResponseChains()
    lost = call("resp_1", [USER], [CALL])
    lost.response = None  # the decoder failed: its answer is unknown
    chains.stitch(lost)
    after = chains.stitch(call("resp_2", [OUTPUT], [ANSWER], previous="resp_1"))
    assert after.flags == [UNRESOLVED]


def test_http_exchanges_are_neither_chained_nor_remembered():
    chains = ResponseChains()
    http = chains.stitch(call("resp_1", [DEV, USER], [CALL],
                              url="https://api.openai.com/v1/responses"))
    assert len(chains) == 0 and messages(http) == full(DEV, USER)
    ws = chains.stitch(call("resp_2", [OUTPUT], [ANSWER], previous="resp_1"))
    assert ws.flags == [UNRESOLVED]


def test_a_previous_response_another_writer_stored_is_looked_up():
    """Behind several replicas: the call before went through another writer, which stored
    it with its whole context; this writer looks it up (per session) and goes on from it."""
    other = ResponseChains()  # the other replica's writer
    other.stitch(call("resp_1", [DEV, USER], [CALL]))
    stored = other.stitch(call("resp_2", [OUTPUT], [ANSWER], previous="resp_1"))
    asked = []

    def lookup(session_id, response_id):
        asked.append((session_id, response_id))
        return stored if response_id == "resp_2" else None

    chains = ResponseChains(lookup)
    third = chains.stitch(call("resp_3", [USER], [ANSWER], previous="resp_2"), "s1")
    fourth = chains.stitch(call("resp_4", [OUTPUT], [ANSWER], previous="resp_3"), "s1")
    assert messages(third) == full(DEV, USER, CALL, OUTPUT, ANSWER, USER)
    assert messages(fourth) == full(DEV, USER, CALL, OUTPUT, ANSWER, USER, ANSWER, OUTPUT)
    assert not (third.flags or fourth.flags)
    assert asked == [("s1", "resp_2")]  # once: from then on the link is in memory
    never = chains.stitch(call("resp_9", [USER], [ANSWER], previous="resp_gone"), "s1")
    assert never.flags == [UNRESOLVED] and messages(never) == full(USER)
    # a stored record that was itself cut off from its chain passes the flag on
    stored.flags.append(UNRESOLVED)
    flagged = ResponseChains(lookup).stitch(call("resp_5", [USER], [ANSWER],
                                                 previous="resp_2"), "s1")
    assert flagged.flags == [UNRESOLVED]


def test_a_malformed_previous_id_is_flagged_not_raised():
    chains = ResponseChains()
    odd = chains.stitch(call("resp_1", [USER], [ANSWER], previous={"not": "an id"}))
    assert odd.flags == [UNRESOLVED] and messages(odd) == full(USER)


# --- the addon, hooks called directly ----------------------------------------------------


@pytest.fixture
def recording():
    """(addon, exchanges as the writer would store them)."""
    arrived: list[Exchange] = []
    addon = WebSocketRecorder(Recorder(arrived.append, model_hosts=["api.openai.com"]))
    with taddons.context(addon):
        yield addon, arrived


def stored(arrived: list[Exchange]) -> list[Exchange]:
    chains = ResponseChains()
    return [chains.stitch(finalize(e)) for e in arrived]


def test_each_response_create_is_one_exchange_with_its_frames_untouched(recording):
    addon, arrived = recording
    sock = Socket(addon)
    sent = [sock.send(create(DEV, generate=False), True)]
    sent += [sock.send(f, False) for f in events_for("resp_w", [])]
    sock.send(b'{"type":"codex.rate_limits","primary":{"used_percent":1}}', False)  # between
    sock.call(create(USER, previous="resp_w"), events_for("resp_1", [CALL]))
    sock.call(create(OUTPUT, previous="resp_1"), events_for("resp_2", [ANSWER]))
    sock.close()

    assert [m.content for m in sent] == [create(DEV, generate=False),
                                         *events_for("resp_w", [])]
    warm, first, second = stored(arrived)
    assert [e.seq for e in (warm, first, second)] == [1, 2, 3]
    assert [e.kind for e in (warm, first, second)] == ["side", "model", "model"]
    assert all(e.status == COMPLETE and e.http_status == 101 and e.url == WS_URL
               for e in (warm, first, second))
    assert first.raw_request == create(USER, previous="resp_w")
    assert first.raw_response == b"".join(f + b"\n" for f in events_for("resp_1", [CALL]))
    assert first.response.content[0].name == "exec_command"
    assert messages(second) == full(DEV, USER, CALL, OUTPUT)
    assert second.request_headers["session-id"] == "sess-1"
    assert "authorization" not in second.request_headers


def test_a_chain_goes_on_across_connections(recording):
    addon, arrived = recording
    one = Socket(addon)
    one.call(create(DEV, USER), events_for("resp_1", [CALL]))
    one.close()
    two = Socket(addon)  # a client names a stored response from a new connection
    two.call(create(OUTPUT, previous="resp_1"), events_for("resp_2", [ANSWER]))
    two.close()
    _, second = stored(arrived)
    assert messages(second) == full(DEV, USER, CALL, OUTPUT) and not second.flags


def test_shares_the_sequence_with_http_calls(recording):
    addon, arrived = recording
    http = tflow.tflow()
    http.request.host, http.request.method = "api.openai.com", "POST"
    http.request.path = "/v1/responses"
    http.request.content = create(USER)
    addon.recorder.request(http)
    sock = Socket(addon)
    sock.call(create(USER), events_for("resp_1", [ANSWER]))
    assert arrived[0].seq == 2  # 1 went to the HTTP call


def test_an_abandoned_call_is_incomplete(recording):
    addon, arrived = recording
    sock = Socket(addon)
    sock.call(create(USER), events_for("resp_1", [ANSWER])[:4])
    sock.call(create(USER, USER), events_for("resp_2", [ANSWER])[:2])
    sock.close(1006)
    superseded, closed = arrived
    assert superseded.status == closed.status == INCOMPLETE
    assert superseded.flags == ["aborted:superseded by a new response.create"]
    assert closed.flags == ["aborted:connection closed (1006)"]
    assert superseded.response.content  # what arrived is kept


def test_past_the_size_cap_a_call_still_ends_at_its_terminal_event():
    arrived: list[Exchange] = []
    addon = WebSocketRecorder(Recorder(arrived.append, model_hosts=["api.openai.com"],
                                       max_body=1000))  # frames: ~1.9 kB, then ~0.5 kB
    with taddons.context(addon):
        sock = Socket(addon)
        sock.call(create(USER), events_for("resp_1", [ANSWER]))
        sock.call(create(USER, USER), events_for("resp_2", []))
    big, small = arrived
    assert big.flags == ["response_truncated"] and big.status == INCOMPLETE
    assert small.flags == [] and small.status == COMPLETE and small.seq == big.seq + 1


def test_a_wrapped_error_frame_ends_the_call_as_an_error(recording):
    addon, arrived = recording
    sock = Socket(addon)
    error = {"type": "error", "status": 429, "error": {"type": "rate_limit_exceeded",
                                                       "message": "slow down"}}
    sock.call(create(USER), [orjson.dumps(error)])
    [failed] = arrived
    assert failed.status == ERROR and failed.response.error["type"] == "rate_limit_exceeded"


def test_other_hosts_and_paths_are_not_recorded(recording):
    addon, arrived = recording
    Socket(addon, host="example.com").call(create(USER), events_for("resp_1", [ANSWER]))
    Socket(addon, path="/v1/realtime").call(create(USER), events_for("resp_2", [ANSWER]))
    assert arrived == []


@pytest.mark.parametrize("path", ["/v1/responses/", "/v1/responses?client=codex",
                                  "/backend-api/codex/responses"])
def test_upgrades_route_by_the_dialects_rules(recording, path):
    addon, arrived = recording  # the rules themselves: tests/test_routing.py
    Socket(addon, path=path).call(create(USER), events_for("resp_1", [ANSWER]))
    [exchange] = arrived
    assert exchange.dialect == "openai.responses" and exchange.status == COMPLETE


def test_proxy_stop_records_what_is_open(recording):
    addon, arrived = recording
    Socket(addon).call(create(USER), events_for("resp_1", [ANSWER])[:3])
    addon.done()
    assert [e.flags for e in arrived] == [["aborted:proxy stopped"]]


# --- live: the openai SDK's WebSocket client through the proxy ---------------------------


def sdk_call(client: openai.OpenAI, compression, **create_args) -> list[bytes]:
    """One response.create on a new connection; the raw frames the SDK received."""
    options = {"compression": compression}
    with client.responses.connect(websocket_connection_options=options) as conn:
        conn.response.create(model="gpt-5.4", **create_args)
        frames = []
        while True:
            frames.append(conn.recv_bytes())
            if orjson.loads(frames[-1])["type"] in ("response.completed", "error"):
                return frames


@pytest.mark.parametrize("compression", [None, "deflate"])
def test_sdk_over_the_live_proxy(tmp_path, compression):
    arrived: list[Exchange] = []
    first_input = [{"role": "user", "content": f"Run the {TOOL_MARKER} one"}]
    with MockUpstream() as mock:
        direct = openai.OpenAI(api_key="sk-dummy", base_url=f"{mock.url}/v1", max_retries=0)
        expected = sdk_call(direct, compression, input=first_input, store=True)

        recorder = Recorder(arrived.append, upstreams={"api.openai.com": mock.url},
                            record_any_host=True)
        proxy = InProcessProxy(WebSocketRecorder(recorder), confdir=confdir(tmp_path),
                               mode="reverse:https://api.openai.com")
        port = proxy.start()
        try:
            client = openai.OpenAI(api_key="sk-dummy", base_url=f"http://127.0.0.1:{port}/v1",
                                   max_retries=0)
            got = sdk_call(client, compression, input=first_input, store=True)
            first_id = orjson.loads(got[-1])["response"]["id"]
            # a second connection names the first response (stored, so the API knows it)
            sdk_call(client, compression, previous_response_id=first_id,
                     input=[{"role": "user", "content": "and again"}])
        finally:
            proxy.stop()
        sockets = mock.websockets

    assert got == expected  # the agent gets the very frames it gets without the recorder
    assert [c.deflate for c in sockets] == [compression == "deflate"] * 3
    assert not [r for r in mock.requests if r.method == "POST"]
    first, second = stored(arrived)
    assert first.url == second.url == WS_URL  # the host the agent asked for, in reverse mode too
    assert first.status == second.status == COMPLETE and not second.flags
    texts = [b["text"] for m in messages(second) for b in m["content"]]
    assert texts[0] == f"Run the {TOOL_MARKER} one" and texts[-1] == "and again"
    assert [m["role"] for m in messages(second)] == ["user", "assistant", "user"]
