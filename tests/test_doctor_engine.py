"""`forge-record doctor --engine URL`: the engine's version and models, and whether its
logprobs are raw or processed (the top-2 gap at temperature 1 and 2), against the mock's
engines; an unreachable URL is one line and exit status 1, never a traceback."""

from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner
from engine_mock import engine_mock

from forge_record.commands.doctor import doctor
from forge_record.commands.doctor_engine import logprob_mode


def run_doctor(url: str):
    return CliRunner().invoke(doctor, ["--engine", url])


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_raw_logprobs_are_a_warning(engine):
    with engine_mock(engine=engine) as mock:
        result = run_doctor(mock.url)
    assert result.exit_code == 0, result.output
    assert f"ok   engine: {engine} " in result.output
    assert "ok   models: tiny" in result.output
    assert "warn logprob mode: raw: the top-2 logprob gap is 1.0000 at temperature 1 and " \
           "1.0000 at 2" in result.output
    assert "--logprobs-mode processed_logprobs" in result.output


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_processed_logprobs_are_ok(engine):
    with engine_mock(engine=engine, logprobs_mode="processed_logprobs") as mock:
        result = run_doctor(mock.url)
    assert result.exit_code == 0, result.output
    assert "ok   logprob mode: processed: the top-2 logprob gap is 1.0000 at temperature 1 " \
           "and 0.5000 at 2" in result.output
    assert result.output.rstrip().endswith("result: OK")


def test_an_unreachable_url_fails_in_one_line():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = run_doctor(f"http://127.0.0.1:{port}")
    assert result.exit_code == 1 and result.exception is None or \
        isinstance(result.exception, SystemExit)
    assert "FAIL engine: " in result.output and "refused" in result.output
    assert "Traceback" not in result.output


def test_a_server_that_is_no_engine_fails():
    with engine_mock() as mock:
        result = run_doctor(mock.url)
    assert result.exit_code == 1 and "does not answer as vLLM or SGLang" in result.output


def test_the_modes():
    assert logprob_mode(0.4, 0.4)[0] == "raw"
    assert logprob_mode(0.4, 0.2)[0] == "processed"
    assert logprob_mode(0.0, 0.0)[0] == "unknown"
    assert logprob_mode(0.4, 0.1)[0] == "unknown"
