"""The shared export checks (tests/export_checks.py): every mock-recorded dialect's session
passes them in every format, and each check catches what its consumer refuses, down to one
block deep inside a message."""

from __future__ import annotations

import pytest
from export_checks import anthropic_problems, check_session_exports, otlp_problems
from recorded_sessions import SESSIONS, recorded_store


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    return recorded_store(tmp_path_factory.getbasetemp() / "export-sessions")


@pytest.mark.parametrize("dialect", list(SESSIONS))
def test_every_recorded_dialect_passes_every_consumer(url, dialect):
    lines = check_session_exports(url, SESSIONS[dialect][0])
    assert set(lines) == {"anthropic", "openai", "sharegpt", "otel"}


GOOD = {"system": [{"type": "text", "text": "sys"}], "messages": [
    {"role": "user", "content": "go"},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "sh",
                                       "input": {}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                  "content": [{"type": "text", "text": "ok"}]}]},
    {"role": "assistant", "content": [{"type": "text", "text": "done"}]}]}


def test_the_anthropic_check_reads_every_block():
    assert anthropic_problems(GOOD) == []
    deep = {**GOOD, "messages": [*GOOD["messages"][:2], {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text"}]}]},
        GOOD["messages"][3]]}
    assert anthropic_problems(deep)  # a text block without its text, inside a result
    orphan = {**GOOD, "messages": [GOOD["messages"][0], GOOD["messages"][3],
                                   GOOD["messages"][2], GOOD["messages"][3]]}
    assert any("no tool_use" in p for p in anthropic_problems(orphan))
    tool_turn = {**GOOD, "messages": [{"role": "tool", "content": "x"}, *GOOD["messages"]]}
    assert anthropic_problems(tool_turn)
    # the SDK's SystemMessageParam: Claude Code sends its agent list as a system message
    system_turn = {**GOOD, "messages": [GOOD["messages"][0], {"role": "system", "content": "x"},
                                        *GOOD["messages"][1:]]}
    assert anthropic_problems(system_turn) == []
    two_users = {**GOOD, "messages": [GOOD["messages"][0], *GOOD["messages"]]}
    assert any("alternate" in p for p in anthropic_problems(two_users))


def test_the_otlp_check_wants_every_parent():
    span = {"traceId": "0" * 31 + "1", "spanId": "0" * 15 + "1", "parentSpanId": "0" * 15 + "2",
            "name": "chat m", "kind": 3, "startTimeUnixNano": "1", "endTimeUnixNano": "2"}
    line = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    assert otlp_problems(line) == ["span chat m: parent missing"]
