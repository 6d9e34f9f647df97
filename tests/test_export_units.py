"""The units exporters cut from a session, on hand-made sessions whose lineage is given (so
these tests do not depend on how lineage places calls): tool calls and results made
consistent, weights for turns the model did not produce, segments, thread selection,
trajectory contexts across a compaction, and what each chat format does with what it cannot
hold."""

from __future__ import annotations

import orjson
from export_checks import openai_problems

from forge_record.exporters import anthropic as anthropic_export
from forge_record.exporters import openai as openai_export
from forge_record.exporters.base import Options, Tally
from forge_record.exporters.pairing import pair_tool_results
from forge_record.exporters.trajectories import trajectory
from forge_record.exporters.units import (
    CallInfo,
    SessionData,
    ThreadInfo,
    conversations,
    threads,
)
from forge_record.records import (
    COMPLETE,
    INCOMPLETE,
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
)

SHELL = Tool(name="shell", parameters={"type": "object"})


def call(id_: str, cmd: str = "ls") -> ToolCall:
    return ToolCall(id=id_, name="shell", arguments={"cmd": cmd},
                    arguments_raw=orjson.dumps({"cmd": cmd}).decode())


def user(text: str) -> Message:
    return Message(role="user", content=[Text(text=text)])


def said(*blocks) -> Message:
    return Message(role="assistant", content=list(blocks))


def results(*ids: str) -> Message:
    return Message(role="tool", content=[ToolResult(tool_call_id=i, content=[Text(text="out")])
                                         for i in ids])


def exchange(seq, messages, reply, status=COMPLETE, dialect="openai.chat") -> Exchange:
    return Exchange(seq=seq, dialect=dialect, status=status,
                    request=Request(model="m", system=[Text(text="sys")], tools=[SHELL],
                                    messages=messages),
                    response=Response(model="m", content=list(reply)))


def session(exchanges, placement) -> SessionData:
    """`placement`: seq -> (thread id, thread role, segment)."""
    calls, found = {}, {}
    for ex in exchanges:
        thread, role, segment = placement[ex.seq]
        calls[ex.seq] = CallInfo(ex.seq, thread, role, role, segment)
        found.setdefault(thread, ThreadInfo(thread, role)).seqs.append(ex.seq)
    return SessionData(Session(id="s1", harness="h"), None, {e.seq: e for e in exchanges},
                       calls, list(found.values()))


def main_only(*exchanges) -> SessionData:
    return session(exchanges, {e.seq: ("main", "main", 0) for e in exchanges})


# --- pairing -----------------------------------------------------------------------------------


def test_unanswered_calls_and_orphan_results_are_dropped_and_counted():
    tally = Tally()
    messages = [user("go"), said(Text(text="two"), call("a"), call("b")), results("a", "x"),
                said(Text(text="done"), call("c"))]
    paired = pair_tool_results(messages, tally)
    assert paired[1].content == [Text(text="two"), call("a")]  # b was never answered
    assert paired[2].content == [ToolResult(tool_call_id="a", content=[Text(text="out")])]
    assert paired[3].content[-1] == call("c")  # the target keeps its calls
    assert tally.dropped == {"unanswered tool calls": 1, "orphan tool results": 1}


def test_an_assistant_turn_left_empty_goes():
    paired = pair_tool_results([user("go"), said(call("a")), user("never mind"),
                                said(Text(text="ok"))], Tally())
    assert [m.role for m in paired] == ["user", "user", "assistant"]


# --- weights -----------------------------------------------------------------------------------


def test_a_turn_the_model_did_not_produce_has_weight_0():
    first = exchange(1, [user("go")], [call("a")])
    injected = said(Text(text="(the harness wrote this)"))
    second = exchange(2, [user("go"), said(call("a")), results("a"), injected, user("more")],
                      [Text(text="finished")])
    [line] = lines_of(main_only(first, second))
    weights = [m.get("weight") for m in line["messages"] if m["role"] == "assistant"]
    assert weights == [1, 0, 1]
    assert openai_problems(line) == []


def test_a_cut_off_final_call_ends_the_chat_on_the_last_complete_turn():
    first = exchange(1, [user("go")], [call("a")])
    cut = exchange(2, [user("go"), said(call("a")), results("a")], [Text(text="I will")],
                   status=INCOMPLETE)
    [conversation] = conversations(main_only(first, cut), Options(), Tally())
    assert conversation.final.seq == 1  # the complete call, not the cut-off one
    assert conversation.messages[-1] == said(call("a"))


def test_only_complete_leaves_out_the_cut_off_call():
    cut = exchange(1, [user("go")], [Text(text="I will")], status=INCOMPLETE)
    tally = Tally()
    assert list(conversations(main_only(cut), Options(only_complete=True), tally)) == []
    assert tally.skipped["not complete"] == 0  # counted as a thread with no call kept
    assert tally.skipped["threads with no call kept"] == 1


# --- segments and threads ----------------------------------------------------------------------


def compacted() -> SessionData:
    a = exchange(1, [user("go")], [call("a")])
    b = exchange(2, [user("go"), said(call("a")), results("a")], [Text(text="long answer")])
    summary = user("This session is being continued: we ran ls.")
    c = exchange(3, [summary], [call("c", "pwd")])
    d = exchange(4, [summary, said(call("c", "pwd")), results("c")], [Text(text="done")])
    sub = exchange(5, [user("subtask")], [Text(text="sub done")])
    return session([a, b, c, d, sub], {1: ("main", "main", 0), 2: ("main", "main", 0),
                                       3: ("main", "main", 1), 4: ("main", "main", 1),
                                       5: ("agent-1", "subagent", 0)})


def test_each_segment_is_a_chat_and_subagents_follow_the_thread_option():
    data = compacted()
    every = list(conversations(data, Options(), Tally()))
    assert [(c.thread.id, c.segment, c.final.seq) for c in every] == [
        ("main", 0, 2), ("main", 1, 4), ("agent-1", 0, 5)]
    tally = Tally()
    main = list(conversations(data, Options(thread="main"), tally))
    assert [c.final.seq for c in main] == [2, 4]
    assert tally.skipped == {"subagent calls (threads)": 1}


def test_a_trajectory_resets_its_context_at_a_new_segment():
    data = compacted()
    [(thread, kept)] = [t for t in threads(data, Options(), Tally()) if t[0].id == "main"]
    steps = trajectory(data, thread, kept)["steps"]
    assert [s["context"]["reset"] for s in steps] == [True, False, True, False]
    assert steps[2]["context"]["messages"][0]["content"][0]["text"].startswith("This session")
    assert steps[0]["observation"][0]["tool_call_id"] == "a"
    assert steps[1]["observation"] == []  # its answer was text: nothing ran
    assert steps[2]["observation"][0]["tool_call_id"] == "c"


def test_a_rewritten_history_resets_the_context():
    a = exchange(1, [user("go")], [call("a")])
    b = exchange(2, [user("go, edited"), said(call("a")), results("a")], [Text(text="ok")])
    data = main_only(a, b)
    [(thread, kept)] = list(threads(data, Options(), Tally()))
    steps = trajectory(data, thread, kept)["steps"]
    assert [s["context"]["reset"] for s in steps] == [True, True]
    assert steps[0]["observation"] == []


# --- what a format cannot hold ------------------------------------------------------------------


def lines_of(data: SessionData, fmt=openai_export, keep=False) -> list[dict]:
    tally = Tally()
    return [fmt.to_line(c, keep, tally) for c in conversations(data, Options(), tally)]


def test_freeform_calls_become_input_objects():
    freeform = Tool(name="apply_patch", kind="custom", parameters={"type": "grammar"})
    patch = ToolCall(id="p1", name="apply_patch", arguments_raw="*** Begin Patch")
    ex = exchange(1, [user("fix it")], [patch])
    ex.request.tools = [freeform]
    tally = Tally()
    [conversation] = conversations(main_only(ex), Options(), tally)
    line = openai_export.to_line(conversation, False, tally)
    assert line["messages"][-1]["tool_calls"][0]["function"]["arguments"] == \
        '{"input":"*** Begin Patch"}'
    assert line["tools"][0]["function"]["parameters"]["properties"] == {"input": {"type": "string"}}
    assert tally.converted == {"freeform tool calls (as {input})": 1,
                               "freeform tools (as {input})": 1}


def test_foreign_reasoning_is_kept_aside_for_anthropic_with_keep_extras():
    ex = exchange(1, [user("q")], [Reasoning(text="hmm"), Text(text="a")])
    [line] = lines_of(main_only(ex), anthropic_export, keep=True)
    reply = line["messages"][-1]
    assert reply["content"] == [{"type": "text", "text": "a"}]
    assert reply["x_extras"] == [{"type": "reasoning", "text": "hmm"}]
    assert line["x_forge"]["dialect"] == "openai.chat"


def test_signed_anthropic_thinking_is_kept_and_redacted_thinking_too():
    ex = exchange(1, [user("q")], [Reasoning(text="t", signature="sig"),
                                   Reasoning(encrypted="opaque"), Text(text="a")],
                  dialect="anthropic.messages")
    [line] = lines_of(main_only(ex), anthropic_export)
    assert line["messages"][-1]["content"][:2] == [
        {"type": "thinking", "thinking": "t", "signature": "sig"},
        {"type": "redacted_thinking", "data": "opaque"}]


def test_a_retry_replaces_the_attempt_it_resends():
    a = exchange(1, [user("go")], [Text(text="I wi")], status=INCOMPLETE)
    b = exchange(2, [user("go")], [call("a")])
    c = exchange(3, [user("go"), said(call("a")), results("a")], [Text(text="done")])
    data = main_only(a, b, c)
    [(thread, kept)] = list(threads(data, Options(), Tally()))
    steps = trajectory(data, thread, kept)["steps"]
    assert steps[1]["context"] == {"reset": False, "messages": [], "retry_of": 1}
    assert [s["loss_mask"] for s in steps] == [0, 1, 1]
    assert steps[1]["observation"][0]["tool_call_id"] == "a"
    assert steps[2]["context"] == {"reset": False, "messages": []}


def test_images_go_by_url_or_are_dropped_and_counted():
    from forge_record.records import Media

    web = Media(type="image", media_type="image/png", url="https://example.test/a.png")
    inline = Media(type="image", media_type="image/png", sha256="ab" * 32, size=10)
    ex = exchange(1, [Message(role="user", content=[Text(text="look"), web, inline])],
                  [Text(text="a cat")])
    tally = Tally()
    [conversation] = conversations(main_only(ex), Options(), tally)
    line = openai_export.to_line(conversation, False, tally)
    assert line["messages"][1]["content"] == [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "https://example.test/a.png"}}]
    assert tally.dropped == {"images": 1}
    anthropic_line = anthropic_export.to_line(conversation, False, tally)
    assert anthropic_line["messages"][0]["content"][1] == {
        "type": "image", "source": {"type": "url", "url": "https://example.test/a.png"}}
    assert tally.dropped == {"images": 2}


def test_the_progress_bar_is_for_terminals_only(monkeypatch, capsys):
    from forge_record.commands import export as export_command

    assert export_command._progress_bar() is None  # pytest's stderr is not a terminal

    class Terminal:
        def isatty(self):
            return True

        def write(self, text):
            pass

        def flush(self):
            pass

    monkeypatch.setattr(export_command.sys, "stderr", Terminal())
    bar = export_command._progress_bar()
    assert list(bar(["s1", "s2"])) == ["s1", "s2"]


def test_each_side_call_is_a_chat_of_its_own():
    main = exchange(1, [user("go")], [Text(text="done")])
    title = exchange(2, [user("name this chat")], [Text(text="Going")])
    summary = exchange(3, [user("sum it up")], [Text(text="It went")])
    data = session([main, title, summary], {1: ("main", "main", 0), 2: ("side", "side", 0),
                                            3: ("side", "side", 0)})
    chats = list(conversations(data, Options(include_side_calls=True), Tally()))
    assert [c.final.seq for c in chats] == [1, 2, 3]
    assert list(conversations(data, Options(), Tally()))[0].final.seq == 1


# --- each turn in one line, weights from the segment's own calls (issue 18.2) ----------------


def test_a_turn_copied_in_after_a_compaction_has_weight_0():
    a = exchange(1, [user("go")], [call("a")])
    b = exchange(2, [user("go"), said(call("a")), results("a")], [Text(text="All done.")])
    # Claude Code after /compact: the summary, then the last assistant turn copied in
    summary = user("This session is being continued: we ran ls.")
    c = exchange(3, [summary, said(Text(text="All done.")), user("and now?")],
                 [Text(text="Now nothing.")])
    data = session([a, b, c], {1: ("main", "main", 0), 2: ("main", "main", 0),
                               3: ("main", "main", 1)})
    first, second = lines_of(data)
    assert [m.get("weight") for m in first["messages"] if m["role"] == "assistant"] == [1, 1]
    assert [m.get("weight") for m in second["messages"] if m["role"] == "assistant"] == [0, 1]


def test_a_line_that_opens_a_longer_one_is_not_a_line_of_its_own():
    a = exchange(1, [user("go")], [call("a")])
    b = exchange(2, [user("go"), said(call("a")), results("a")], [Text(text="done")])
    data = session([a, b], {1: ("main", "main", 0), 2: ("main-2", "main", 0)})
    tally = Tally()
    [line] = [c.final.seq for c in conversations(data, Options(), tally)]
    assert line == 2 and tally.skipped == {"conversations contained in a longer one": 1}


def test_a_fork_is_a_line_of_its_own_and_trains_only_its_own_turns():
    a = exchange(1, [user("go")], [call("a")])
    b = exchange(2, [user("go"), said(call("a")), results("a")], [Text(text="one")])
    fork = exchange(3, [user("go"), said(call("a")),
                        Message(role="tool", content=[ToolResult(
                            tool_call_id="a", content=[Text(text="other")])])],
                    [Text(text="two")])
    data = session([a, b, fork], {1: ("main", "main", 0), 2: ("main", "main", 0),
                                  3: ("main-2", "main", 0)})
    main, forked = lines_of(data)
    assert [m.get("weight") for m in main["messages"] if m["role"] == "assistant"] == [1, 1]
    assert [m.get("weight") for m in forked["messages"] if m["role"] == "assistant"] == [0, 1]


def test_a_system_input_item_is_the_system_prompt():
    """pi sends its prompt as a Responses `input` item with role system; Codex its
    instructions as developer items."""
    from forge_record.exporters import sharegpt as sharegpt_export
    prompt = Message(role="system", content=[Text(text="You are pi.")])
    ex = Exchange(seq=1, dialect="openai.responses", status=COMPLETE,
                  request=Request(model="m", tools=[SHELL], messages=[prompt, user("go")]),
                  response=Response(model="m", content=[Text(text="ok")]))
    data = main_only(ex)
    [anthropic_line] = lines_of(data, anthropic_export)
    assert anthropic_line["system"] == [{"type": "text", "text": "You are pi."}]
    assert [m["role"] for m in anthropic_line["messages"]] == ["user", "assistant"]
    [share] = lines_of(data, sharegpt_export)
    assert share["system"] == "You are pi."
    assert [t["from"] for t in share["conversations"]] == ["human", "gpt"]


# --- every loss counted (issue 18.6) -------------------------------------------------------------


def failed_tool_session() -> SessionData:
    failed = Message(role="tool", content=[ToolResult(tool_call_id="a", is_error=True,
                                                      content=[Text(text="exit 1")])])
    a = exchange(1, [user("go")], [call("a")])
    b = exchange(2, [user("go"), said(call("a")), failed], [Text(text="It failed.")])
    return main_only(a, b)


def test_a_tool_error_flag_is_counted_where_the_format_cannot_hold_it():
    from forge_record.exporters import sharegpt as sharegpt_export
    for fmt in (openai_export, sharegpt_export):
        tally = Tally()
        exporter_lines = [fmt.to_line(c, False, tally)
                          for c in conversations(failed_tool_session(), Options(), tally)]
        assert len(exporter_lines) == 1 and tally.dropped["tool error flags"] == 1, fmt
        [kept] = lines_of(failed_tool_session(), fmt, keep=True)
        extras = [x for turn in kept.get("messages", kept.get("conversations", []))
                  for x in turn.get("x_extras", ())]
        assert {"type": "tool_result", "is_error": True} in extras, fmt
    [line] = lines_of(failed_tool_session(), anthropic_export)
    assert any(b.get("is_error") for m in line["messages"] for b in m["content"]
               if isinstance(b, dict))


def test_a_developer_turn_inside_the_history_is_counted_as_merged_in_sharegpt():
    from forge_record.exporters import sharegpt as sharegpt_export
    note = Message(role="developer", content=[Text(text="Approval policy changed.")])
    ex = exchange(1, [user("go"), said(Text(text="ok")), note, user("more")],
                  [Text(text="done")])
    tally = Tally()
    [line] = [sharegpt_export.to_line(c, False, tally)
              for c in conversations(main_only(ex), Options(), tally)]
    assert tally.converted["developer turns merged into user turns"] == 1
    assert "Approval policy changed." in line["conversations"][2]["value"]


def test_codex_namespace_tools_export_as_their_functions():
    spawn = {"type": "function", "name": "spawn_agent", "description": "Start an agent",
             "parameters": {"type": "object", "properties": {"message": {"type": "string"}}}}
    wait = {"type": "function", "name": "wait", "parameters": {"type": "object"}}
    namespace = Tool(kind="namespace", name="multi_agent_v1",
                     parameters={"description": "Agents", "tools": [spawn, wait]})
    ex = Exchange(seq=1, dialect="openai.responses", status=COMPLETE,
                  request=Request(model="m", tools=[SHELL, namespace], messages=[user("go")]),
                  response=Response(model="m", content=[Text(text="ok")]))
    tally = Tally()
    [line] = [openai_export.to_line(c, False, tally)
              for c in conversations(main_only(ex), Options(), tally)]
    assert [t["function"]["name"] for t in line["tools"]] == ["shell", "spawn_agent", "wait"]
    assert tally.converted["namespace tools (as their functions)"] == 1
    assert "built-in tools" not in tally.dropped
    assert openai_problems(line) == []
