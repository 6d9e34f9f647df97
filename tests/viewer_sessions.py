"""Sessions shaped like Claude Code's, built from records, for the viewer tests (test_view_model,
test_view, test_view_terminal): `agent_session` (a main thread with a subagent and a side
call), `hostile_session` (strings that would run if written as markup), the message and
exchange builders, and `store_session` to write one to a store."""

from __future__ import annotations

import json
import time

from forge_record.records import (
    Exchange,
    Message,
    Reasoning,
    Request,
    Response,
    Session,
    Text,
    Tool,
    ToolCall,
    ToolResult,
    Usage,
)
from forge_record.store import open_store

UA = {"user-agent": "claude-cli/2.1.197 (external, cli)", "x-claude-code-session-id": "s-1"}
BILLING = Text(text="x-anthropic-billing-header: cc_version=2.1.197.933; cch=1a2b3;")
SYSTEM = [BILLING, Text(text="You are an interactive agent.")]
TOOLS = [Tool(name="Bash", description="Run a command", parameters={"type": "object"}),
         Tool(name="Agent", description="Start a subagent", parameters={"type": "object"})]
HOSTILE = ("<script>alert(1)</script> and </script><script>alert(2)</script> "
           "<!-- <img src=x onerror=\"window.__pwned=1;alert(3)\"> & \u2028")


# --- building sessions ------------------------------------------------------------------


def user(*texts: str) -> Message:
    return Message(role="user", content=[Text(text=t) for t in texts])


def said(*blocks) -> Message:
    return Message(role="assistant", content=list(blocks))


def bash(call_id: str, command: str) -> ToolCall:
    return ToolCall(id=call_id, name="Bash", arguments={"command": command},
                    arguments_raw=json.dumps({"command": command}))


def result(call_id: str, text: str, error: bool = False) -> Message:
    return Message(role="user", content=[ToolResult(tool_call_id=call_id, is_error=error,
                                                    content=[Text(text=text)])])


def exchange(seq: int, messages: list[Message], reply: Message, *, start: float,
             headers=None, system=SYSTEM, tools=TOOLS, kind="model",
             url="https://api.anthropic.com/v1/messages", model="claude-opus-4-8") -> Exchange:
    return Exchange(
        seq=seq, dialect="anthropic.messages", kind=kind, url=url, http_status=200,
        started_at=start, first_byte_at=start + 0.4, ended_at=start + 1.5,
        request=Request(model=model, system=list(system), tools=list(tools),
                        messages=list(messages), stream=True),
        response=Response(model=model, content=list(reply.content), stop_reason="end_turn",
                          usage=Usage(input_tokens=100 + seq, output_tokens=20)),
        request_headers=UA | (headers or {}),
    )


def agent_session(t0: float = 1_800_000_000.0) -> list[Exchange]:
    """Main thread of three calls (a Bash call and a long result, a subagent spawned and
    answered) and the subagent's own call in between."""
    long_output = "\n".join(f"line {i}" for i in range(40))
    m1 = [user("Fix the tests")]
    r1 = said(Reasoning(text="Run them first.", signature="sig"), Text(text="Running."),
              bash("toolu_1", "pytest -q"))
    m2 = [*m1, r1, result("toolu_1", long_output)]
    r2 = said(ToolCall(id="toolu_2", name="Agent", arguments={"prompt": "Find the bug."},
                       arguments_raw="{}"))
    sub = [user("Find the bug.")]
    sub_reply = said(Text(text="It is in a.py"))
    m3 = [*m2, r2, result("toolu_2", "It is in a.py", "agentId: a42 (use SendMessage)")]
    return [
        exchange(1, m1, r1, start=t0 + 1),
        exchange(2, m2, r2, start=t0 + 3),
        exchange(3, sub, sub_reply, start=t0 + 5, headers={"x-claude-code-agent-id": "a42"},
                 system=[Text(text="You are a subagent.")], tools=TOOLS[:1]),
        exchange(4, m3, said(Text(text="Fixed.")), start=t0 + 8),
        exchange(5, m1, said(), start=t0 + 9, kind="side",
                 url="https://api.anthropic.com/v1/messages/count_tokens"),
    ]


def session_of(exchanges, session_id="5e55104a00000001", **fields) -> Session:
    return Session(id=session_id, harness="claude-code", harness_version="2.1.197",
                   argv=["claude", "-p", "fix"], cwd="/src", started_at=1_800_000_000.0,
                   ended_at=1_800_000_010.0, exit_code=0, **fields)


def store_session(url: str, session: Session, exchanges) -> None:
    with open_store(url) as st:
        st.add_session(session)
        for ex in exchanges:
            st.add_exchange(session.id, ex)
        st.end_session(session.id, session.ended_at or time.time(), 0)


def hostile_session() -> tuple[Session, list[Exchange]]:
    """Recorded strings that would run or break out if they were ever written as markup:
    in a prompt, a tool's arguments and result, a tag, the argv and a subagent's id."""
    m1 = [user(HOSTILE)]
    r1 = said(Text(text=HOSTILE), bash("toolu_x", HOSTILE))
    m2 = [*m1, r1, result("toolu_x", HOSTILE)]
    exchanges = [exchange(1, m1, r1, start=1_800_000_001.0),
                 exchange(2, m2, said(Text(text="done")), start=1_800_000_003.0),
                 exchange(3, [user(HOSTILE)], said(Text(text="sub")), start=1_800_000_004.0,
                          headers={"x-claude-code-agent-id": "<b>x</b>"})]
    session = session_of(exchanges, session_id="4057113e00000001", tags={"note": HOSTILE})
    session.argv = ["claude", "-p", HOSTILE]
    return session, exchanges
