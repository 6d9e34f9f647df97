"""Engine detection: one probe per upstream at start-up (vLLM `/version`, SGLang
`/get_model_info` + `/get_server_info`); anything else is not an engine, said once."""

from __future__ import annotations

import socket

import pytest
from engine_mock import engine_mock

from forge_record import engine_probe
from forge_record.commands.run import Route, pick_engine
from forge_record.mock import sglang, vllm


def test_vllm_is_found_by_its_version():
    with engine_mock(engine="vllm") as mock:
        found = engine_probe.probe(mock.url + "/v1")
    assert (found.name, found.version, found.models) == ("vllm", vllm.VERSION, ["tiny"])


def test_sglang_is_found_by_its_model_info():
    with engine_mock(engine="sglang") as mock:
        found = engine_probe.probe(mock.url)
    assert (found.name, found.version) == ("sglang", sglang.VERSION)


def test_other_servers_are_not_engines():
    with engine_mock() as mock, pytest.raises(engine_probe.NotAnEngine, match="404"):
        engine_probe.probe(mock.url)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(engine_probe.NotAnEngine, match="refused"):
        engine_probe.probe(f"http://127.0.0.1:{port}")


def test_auto_takes_the_engine_and_says_each_upstream_once():
    said: list[str] = []
    with engine_mock(engine="vllm") as engine, engine_mock() as other:
        name, found = engine_probe.resolve("auto", [other.url, engine.url], said.append)
    assert name == "vllm" and found.version == vllm.VERSION
    assert len(said) == 2 and "not an engine" in said[0] and "vllm 0.32.0" in said[1]
    assert engine_probe.session_tags(name, found) == {"engine": "vllm",
                                                      "engine_version": vllm.VERSION}


def test_auto_without_an_engine_asks_for_no_tokens():
    with engine_mock() as other:
        assert engine_probe.resolve("auto", [other.url], lambda _: None) == (None, None)


def test_a_named_engine_is_asked_whatever_the_probe_says():
    with engine_mock() as other:
        assert engine_probe.resolve("vllm", [other.url], lambda _: None) == ("vllm", None)
    assert engine_probe.resolve("sglang", [], lambda _: None) == ("sglang", None)
    assert engine_probe.resolve("none", ["http://x"], lambda _: None) == (None, None)


def test_run_probes_only_when_told(capsys):
    with engine_mock(engine="sglang") as mock:
        route = Route("reverse", "reverse:http://127.0.0.1:1", {"api.openai.com": mock.url})
        assert pick_engine(route, None, 0) is None and route.engine is None
        assert mock.requests == []  # no --engine: the upstream is left alone
        found = pick_engine(route, "auto", 3)
    assert route.engine == "sglang" and route.top_logprobs == 3 and found.name == "sglang"
    assert "sglang 0.5.6" in capsys.readouterr().err
