"""The live proxy with the official anthropic SDK as the client and the mock as upstream.

The recorder must be invisible: the SDK gets the same bytes as from a direct call, in reverse
and forward mode, streamed and not, compressed and not; and what reaches the sink is the
decoded exchange.
"""

from __future__ import annotations

import time

import anthropic
import pytest

from forge_record.addons.proxy import InProcessProxy
from forge_record.addons.recorder import Recorder
from forge_record.finalize import finalize
from forge_record.mock import TOOL_MARKER, MockUpstream
from forge_record.records import COMPLETE, ToolCall
from forge_record.trust import ca_files, confdir

PROMPT = f"please run {TOOL_MARKER}"
TOOLS = [{"name": "Bash", "description": "Run a command",
          "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}]


@pytest.fixture(params=[False, True], ids=["plain", "gzip"])
def mock(request):
    with MockUpstream(gzip_responses=request.param) as m:
        yield m


@pytest.fixture(scope="session")
def ca_home(tmp_path_factory):
    """One CA for the whole run: making a key pair costs about a second."""
    return tmp_path_factory.mktemp("ca")


@pytest.fixture(params=["reverse", "forward"])
def recorded(request, mock, ca_home):
    """(client, exchanges): an SDK client whose calls go through a recording proxy."""
    exchanges = Arrivals()
    upstreams = {"api.anthropic.com": mock.url}
    if request.param == "reverse":
        addon = Recorder(exchanges.append, upstreams=upstreams, record_any_host=True)
        proxy = InProcessProxy(addon, mode="reverse:https://api.anthropic.com",
                               confdir=confdir(ca_home))
        port = proxy.start()
        http = anthropic.DefaultHttpxClient()
        base_url = f"http://127.0.0.1:{port}"
    else:
        addon = Recorder(exchanges.append, model_hosts=["api.anthropic.com"], upstreams=upstreams)
        conf = confdir(ca_home)
        proxy = InProcessProxy(addon, mode="regular", confdir=conf)
        port = proxy.start()
        http = anthropic.DefaultHttpxClient(proxy=f"http://127.0.0.1:{port}",
                                            verify=ca_files(conf).cert)
        base_url = "https://api.anthropic.com"
    client = anthropic.Anthropic(api_key="sk-ant-dummy-key", base_url=base_url,
                                 http_client=http, max_retries=0)
    try:
        yield client, exchanges
    finally:
        client.close()
        proxy.stop()


class Arrivals(list):
    """The exchanges the sink got. The client can return a moment before the proxy's
    `response` hook has run, so reading them waits for the expected number."""

    def wait(self, n: int, timeout: float = 5.0) -> list:
        deadline = time.monotonic() + timeout
        while len(self) < n and time.monotonic() < deadline:
            time.sleep(0.01)
        return list(self)


def direct_client(mock) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="sk-ant-dummy-key", base_url=mock.url, max_retries=0)


def raw_bytes(client: anthropic.Anthropic, stream: bool) -> bytes:
    """The response body exactly as the SDK's HTTP layer received it (still encoded)."""
    with client.messages.with_streaming_response.create(
        model="claude-haiku-4-5", max_tokens=100, tools=TOOLS, stream=stream,
        messages=[{"role": "user", "content": PROMPT}],
    ) as response:
        return b"".join(response.http_response.iter_raw())


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_client_gets_the_bytes_of_a_direct_call(recorded, mock, stream):
    client, exchanges = recorded
    assert raw_bytes(client, stream) == raw_bytes(direct_client(mock), stream)
    assert len(exchanges.wait(1)) == 1


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_exchange_is_decoded(recorded, stream):
    client, exchanges = recorded
    if stream:
        with client.messages.stream(model="claude-haiku-4-5", max_tokens=100, tools=TOOLS,
                                    messages=[{"role": "user", "content": PROMPT}]) as s:
            message = s.get_final_message()
    else:
        message = client.messages.create(model="claude-haiku-4-5", max_tokens=100, tools=TOOLS,
                                          messages=[{"role": "user", "content": PROMPT}])
    [ex] = [finalize(e) for e in exchanges.wait(1)]
    assert ex.status == COMPLETE, ex.flags
    assert ex.http_status == 200
    assert ex.url.startswith("https://api.anthropic.com/v1/messages")
    assert ex.request.model == "claude-haiku-4-5"
    assert ex.request.messages[0].content[0].text == PROMPT
    assert ex.response.id == message.id
    [call] = [b for b in ex.response.content if isinstance(b, ToolCall)]
    assert call.name == "Bash" and call.arguments == message.content[1].input
    assert ex.response.stop_reason == "tool_use"
    assert ex.response.usage.output_tokens == message.usage.output_tokens
    assert "x-api-key" not in ex.request_headers
    assert ex.first_byte_at is not None and ex.ended_at >= ex.first_byte_at


def test_count_tokens_is_a_side_call(recorded):
    client, exchanges = recorded
    client.messages.count_tokens(model="claude-haiku-4-5",
                                 messages=[{"role": "user", "content": "hi"}])
    [ex] = exchanges.wait(1)
    assert ex.kind == "side"


def test_other_paths_pass_through_unrecorded(recorded):
    client, exchanges = recorded
    with pytest.raises(anthropic.NotFoundError):
        client.models.list()
    time.sleep(0.2)
    assert exchanges == []
