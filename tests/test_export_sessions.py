"""The sessions the export tests read (recorded by tests/recorded_sessions.py) are what those
tests assume: every dialect recorded a tool loop; thinking and parallel calls are there."""

from __future__ import annotations

from pathlib import Path

from recorded_sessions import SESSIONS, SIGNATURE, TOOL_OUTPUT, recorded_store

from forge_record.records import COMPLETE, Reasoning, Text, ToolCall, ToolResult
from forge_record.store import open_store

# --- the recordings are what the tests assume ------------------------------------------------


def load(tmp_root: Path, dialect: str):
    store = open_store(recorded_store(tmp_root))
    try:
        return list(store.iter_exchanges(SESSIONS[dialect][0]))
    finally:
        store.close()


def test_every_dialect_recorded_a_tool_loop(tmp_path_factory):
    root = tmp_path_factory.getbasetemp() / "export-sessions"
    for dialect in SESSIONS:
        exchanges = load(root, dialect)
        model = [e for e in exchanges if e.kind == "model"]
        assert [e.dialect for e in model] == [dialect] * 2, dialect
        assert all(e.status == COMPLETE for e in exchanges), [e.flags for e in exchanges]
        first, last = model
        assert any(isinstance(b, ToolCall) for b in first.response.content), dialect
        assert any(isinstance(b, ToolResult) for m in last.request.messages for b in m.content)
        assert isinstance(last.response.content[-1], Text), dialect
        assert TOOL_OUTPUT in last.response.content[-1].text


def test_thinking_and_parallel_calls_were_recorded(tmp_path_factory):
    root = tmp_path_factory.getbasetemp() / "export-sessions"
    final = [e for e in load(root, "anthropic.messages") if e.kind == "model"][-1]
    assert final.response.content[0] == Reasoning(text="The tool ran; report it.",
                                                  signature=SIGNATURE)
    first = load(root, "openai.chat")[0]
    assert len([b for b in first.response.content if isinstance(b, ToolCall)]) == 2
    assert [e.kind for e in load(root, "gemini.generate")] == ["model", "side", "model"]
