"""Synthetic sessions shaped like what Claude Code 2.1.197 sends (PROTOCOLS.md part 3), built
from records, for the lineage tests (test_lineage, test_lineage_commands): the message and
exchange builders (`user`, `said`, `result`, `call`, `bash`, `spawn`), a main turn that
delegates to a subagent (`M1`..`R2`, `subagent_session`), and `placed` to read where lineage
put each call."""

from __future__ import annotations

from click.testing import CliRunner

from forge_record.cli import cli
from forge_record.records import (
    COMPLETE,
    ERROR,
    Exchange,
    Message,
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

SESSION = "5e55e55e-0000-4000-8000-000000000001"
AGENT = "a0123456789abcdef"
UA = "claude-cli/2.1.197 (external, sdk-cli)"
BASH = Tool(name="Bash", parameters={"type": "object"})
AGENT_TOOL = Tool(name="Agent", parameters={"type": "object"})
MAIN_SYSTEM = [Text(text="x-anthropic-billing-header: cc_version=2.1.197.933; cch=1a2b3;"),
               Text(text="You are an interactive agent.")]
SUB_SYSTEM = [Text(text="x-anthropic-billing-header: cc_version=2.1.197.db3; cch=9f9f9; "
                        "cc_is_subagent=true;"),
              Text(text="You are an agent for Claude Code.")]


# --- building synthetic exchanges ----------------------------------------------------------


def user(*texts: str) -> Message:
    return Message(role="user", content=[Text(text=t) for t in texts])


def said(*blocks) -> Message:
    return Message(role="assistant", content=list(blocks))


def result(call_id: str, *texts: str) -> Message:
    content = [Text(text=t) for t in texts]
    return Message(role="user", content=[ToolResult(tool_call_id=call_id, content=content)])


def call(seq, messages, reply=None, *, tools=(BASH, AGENT_TOOL), system=MAIN_SYSTEM,
         headers=None, status=COMPLETE, usage=(100, 20), kind="model", url="/v1/messages",
         model="claude-opus-4-8", parameters=None) -> Exchange:
    base = {"user-agent": UA, "x-claude-code-session-id": SESSION,
            "x-stainless-retry-count": "0", "anthropic-beta": "claude-code-20250219"}
    response = None
    if reply is not None:
        response = Response(content=list(reply.content), model=model,
                            usage=Usage(input_tokens=usage[0], output_tokens=usage[1]))
    return Exchange(
        seq=seq, dialect="anthropic.messages", kind=kind, status=status,
        url="https://api.anthropic.com" + url,
        request=Request(model=model, system=list(system), tools=list(tools),
                        messages=list(messages), parameters=parameters or {}),
        response=response,
        request_headers=base | (headers or {}),
        http_status=200 if status == COMPLETE else 529,
    )


def bash(call_id="toolu_bash"):
    return ToolCall(id=call_id, name="Bash", arguments={"command": "ls"}, arguments_raw="{}")


def spawn(call_id="toolu_agent", prompt="Find the failing test."):
    return ToolCall(id=call_id, name="Agent", arguments={"description": "x", "prompt": prompt},
                    arguments_raw="{}")


def placed(lineage) -> dict[int, tuple]:
    return {s: (c.thread, c.role, c.parent) for s, c in lineage.calls.items()}


# A main turn that delegates, the subagent's two calls, the parent continuing.
M1 = [user("Fix the tests")]
R1 = said(Text(text="Delegating."), spawn())
S1 = [user("Find the failing test.")]
SR1 = said(bash())
S2 = [*S1, SR1, result("toolu_bash", "test_a.py")]
SR2 = said(Text(text="It is test_a.py"))
M2 = [*M1, R1, result("toolu_agent", "It is test_a.py", f"agentId: {AGENT} (use SendMessage)")]
R2 = said(Text(text="The subagent found test_a.py."))


def subagent_session() -> list[Exchange]:
    sub = {"x-claude-code-agent-id": AGENT}
    return [
        call(1, M1, R1),
        call(2, S1, SR1, system=SUB_SYSTEM, tools=(BASH,), headers=sub),
        call(3, S2, SR2, system=SUB_SYSTEM, tools=(BASH,), headers=sub),
        call(4, M2, R2),
    ]


HAIKU_TITLE = [Text(text="Generate a concise, sentence-case title for this coding session.")]


def record(url: str, session_id: str, exchanges, *, started: float, harness="claude-code",
           version="2.1.197") -> None:
    with open_store(url) as st:
        st.add_session(Session(id=session_id, harness=harness, harness_version=version,
                               argv=["claude"], started_at=started))
        for ex in exchanges:
            st.add_exchange(session_id, ex)
        st.end_session(session_id, started + 1, 0)


def forge(*args) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def busy_session():
    """Title side call, main + subagent, a retried call, count_tokens."""
    title = call(1, [user("<session>Fix the tests</session>")], said(Text(text="Fix tests")),
                 tools=(), system=HAIKU_TITLE, model="claude-haiku-4-5")
    rest = subagent_session()
    for i, e in enumerate(rest):
        e.seq = i + 2
    failed = call(6, [*M2, R2, user("and now?")], None, status=ERROR)
    retry = call(7, [*M2, R2, user("and now?")], said(Text(text="all done")),
                 headers={"x-stainless-retry-count": "1"})
    count = call(8, M1, None, kind="side", url="/v1/messages/count_tokens")
    return [title, *rest, failed, retry, count]
