"""forge_record.lineage on synthetic sessions shaped like what Claude Code 2.1.197 sends
(PROTOCOLS.md part 3): threads by content, subagents by header and their spawner link,
retries, compaction segments, side calls, forks, usage, fingerprints, and canonical hashing.

The last test runs the real anthropic SDK through `forge-record run` against the mock, which
answers 529 once: the SDK retries with `x-stainless-retry-count`, and the stored session must
show one logical call with the retry kept and marked.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from lineage_sessions import (
    AGENT,
    AGENT_TOOL,
    BASH,
    M1,
    M2,
    MAIN_SYSTEM,
    R1,
    R2,
    S1,
    SESSION,
    SR1,
    UA,
    bash,
    call,
    placed,
    result,
    said,
    subagent_session,
    user,
)

from forge_record.decoders import dialect_named
from forge_record.identity import HASH_PREFIX, canonical_json, chain_hash, content_hash
from forge_record.lineage import analyze, to_dict
from forge_record.lineage import signals as lineage_signals
from forge_record.lineage.fingerprint import fingerprint_of
from forge_record.lineage.signals import (
    COMPACTION_MARKERS,
    CONTINUATION_PREFIX,
    message_hash,
    message_hashes,
)
from forge_record.records import (
    ERROR,
    Exchange,
    Message,
    Response,
    Text,
    Usage,
)

# --- threads and subagents -------------------------------------------------------------


def test_a_subagent_is_its_own_thread_linked_to_the_spawning_tool_call():
    lineage = analyze(subagent_session(), "claude-code")
    thread = f"subagent-{AGENT}"
    assert placed(lineage) == {1: ("main", "main", None), 2: (thread, "subagent", None),
                               3: (thread, "subagent", 2), 4: ("main", "main", 1)}
    main, sub = lineage.threads
    assert (main.id, main.calls, main.parent_thread) == ("main", [1, 4], None)
    assert (sub.id, sub.calls, sub.parent_thread) == (thread, [2, 3], "main")
    assert sub.spawned_by == (1, "toolu_agent")
    assert main.segments == [(1, None)] and sub.segments == [(2, None)]


def test_without_agent_id_text_the_subagent_is_linked_by_its_prompt():
    exchanges = subagent_session()
    exchanges[3] = call(4, [*M1, R1, result("toolu_agent", "It is test_a.py")], R2)
    [_, sub] = analyze(exchanges).threads
    assert sub.spawned_by == (1, "toolu_agent") and sub.parent_thread == "main"


def test_subagent_flag_without_header_still_makes_a_subagent_thread():
    exchanges = [replace(e, request_headers={k: v for k, v in e.request_headers.items()
                                             if k != "x-claude-code-agent-id"})
                 for e in subagent_session()]
    lineage = analyze(exchanges)
    assert [c.role for c in lineage.calls.values()] == ["main", "subagent", "subagent", "main"]
    assert lineage.calls[3].parent == 2
    assert lineage.threads[1].spawned_by == (1, "toolu_agent")


def test_each_call_continues_the_call_whose_request_and_reply_it_extends():
    r2 = said(bash("toolu_2"))
    exchanges = [call(1, M1, R1), call(2, M2, r2),
                 call(3, [*M2, r2, result("toolu_2", "ok")], said(Text(text="done")))]
    lineage = analyze(exchanges)
    assert placed(lineage) == {1: ("main", "main", None), 2: ("main", "main", 1),
                               3: ("main", "main", 2)}
    assert [t.id for t in lineage.threads] == ["main"]


def test_calls_from_two_harness_sessions_are_two_roots():
    other = {"x-claude-code-session-id": "another-session"}
    lineage = analyze([call(1, M1, R1), call(2, M1, R1, headers=other), call(3, M2, R2)])
    assert placed(lineage) == {1: ("main", "main", None), 2: ("main-2", "main", None),
                               3: ("main", "main", 1)}


def test_extending_an_earlier_call_after_the_thread_went_on_is_a_fork():
    """A rewind: the third request extends the first call again, not the second."""
    r2 = said(Text(text="first answer"))
    again = [*M1, R1, result("toolu_agent", "something else")]
    lineage = analyze([call(1, M1, R1), call(2, M2, r2), call(3, again, R2)])
    assert placed(lineage)[3] == ("main-2", "main", 1)
    assert lineage.threads[1].parent_thread == "main"


def test_a_history_rewrite_is_a_new_root_that_names_the_thread_it_rewrote():
    rewritten = [M1[0], said(Text(text="edited history")), user("go on")]
    lineage = analyze([call(1, M1, R1), call(2, M2, R2), call(3, rewritten, R2)])
    assert placed(lineage)[3] == ("main-2", "main", None)
    assert lineage.threads[1].parent_thread == "main"


def test_cache_control_moving_between_turns_does_not_break_a_thread():
    """The real decoder drops cache_control, so the same message hashes equal."""
    parse = dialect_named("anthropic.messages").parse_request
    block = {"type": "text", "text": "Fix the tests"}
    first = parse(orjson.dumps({"model": "m", "messages": [
        {"role": "user", "content": [dict(block, cache_control={"type": "ephemeral"})]}]}))
    later = parse(orjson.dumps({"model": "m", "messages": [
        {"role": "user", "content": "Fix the tests"},
        {"role": "assistant", "content": [{"type": "text", "text": "ok",
                                           "cache_control": {"type": "ephemeral"}}]},
        {"role": "user", "content": [block]}]}))
    assert message_hash(first.messages[0]) == message_hash(later.messages[0])
    exchanges = [call(1, first.messages, said(Text(text="ok"))),
                 call(2, later.messages, said(Text(text="done")))]
    assert analyze(exchanges).calls[2].parent == 1


def test_a_call_whose_request_did_not_decode_stays_in_its_thread():
    undecoded = replace(call(2, M2, None, status=ERROR), request=None, flags=["decode_error"])
    lineage = analyze([call(1, M1, R1), undecoded, call(3, M2, R2)], "claude-code")
    assert placed(lineage) == {1: ("main", "main", None), 2: ("main", "main", 1),
                               3: ("main", "main", 1)}
    assert lineage.fingerprints[lineage.calls[2].fingerprint].model is None


# --- retries -----------------------------------------------------------------------------


def test_a_retry_is_one_logical_call_kept_and_marked():
    failed = call(2, M2, None, status=ERROR)
    retried = call(3, M2, R2, headers={"x-stainless-retry-count": "1",
                                       "x-client-request-id": "another"})
    # Claude Code's per-request cch= differs between attempts; it is not the request.
    retried.request.system[0] = Text(text=MAIN_SYSTEM[0].text.replace("1a2b3", "ffff0"))
    after = call(4, [*M2, R2, user("thanks")], said(Text(text="welcome")))
    lineage = analyze([call(1, M1, R1), failed, retried, after])
    c = lineage.calls
    assert (c[3].role, c[3].retry_of, c[3].thread, c[3].parent) == ("retry", 2, "main", 1)
    assert (c[4].thread, c[4].parent) == ("main", 3)  # it extends the answer that came back
    assert lineage.threads[0].calls == [1, 2, 3, 4]
    usage = lineage.usage
    assert (usage["calls"], usage["retries"]) == (3, 1)
    assert usage["input_tokens"] == 300  # the failed attempt reported nothing
    assert usage["retry"]["input_tokens"] == 100


def test_the_same_request_after_an_answer_without_retry_count_is_a_new_call():
    lineage = analyze([call(1, M1, R1), call(2, M1, R1)])
    assert lineage.calls[2].role == "main" and lineage.calls[2].retry_of is None


def test_a_retry_of_a_failed_attempt_needs_no_retry_header():
    lineage = analyze([call(1, M1, None, status=ERROR), call(2, M1, R1)])
    assert (lineage.calls[2].role, lineage.calls[2].retry_of) == ("retry", 1)


# --- compaction --------------------------------------------------------------------------


def test_compaction_starts_a_new_segment_linked_to_the_old_one():
    tip = [*M2]  # the thread's last request; the compaction call repeats it with the
    # instruction appended to the last user message
    instruction = Text(text=f"CRITICAL: Respond with TEXT ONLY.\n\n{COMPACTION_MARKERS[0]}.")
    compacting = [*tip[:-1], Message(role="user", content=[*tip[-1].content, instruction])]
    summary = said(Text(text="<summary>We fixed the tests.</summary>"))
    resumed = [user("<system-reminder>ctx</system-reminder>",
                    f"{CONTINUATION_PREFIX} that ran out of context.\n\nSummary: fixed."),
               user("Now add a test")]
    r5 = said(bash("toolu_5"))
    exchanges = [call(1, M1, R1), call(2, M2, R2), call(3, compacting, summary),
                 call(4, resumed, r5),
                 call(5, [*resumed, r5, result("toolu_5", "ok")], said(Text(text="ok")))]
    lineage = analyze(exchanges, "claude-code")
    c = lineage.calls
    assert (c[3].thread, c[3].role, c[3].side_kind, c[3].parent) == ("side", "side",
                                                                     "compaction", 2)
    assert (c[4].thread, c[4].segment, c[4].parent) == ("main", 1, 2)
    assert (c[5].thread, c[5].segment, c[5].parent) == ("main", 1, 4)
    main = lineage.threads[0]
    assert main.segments == [(1, None), (4, 3)]
    assert main.calls == [1, 2, 4, 5]
    assert lineage.usage["side"]["input_tokens"] == 100  # the summary is spend, kept apart
    assert lineage.usage["input_tokens"] == 400


# --- side calls --------------------------------------------------------------------------


def test_side_calls_are_classified():
    title_params = {"output_config": {"format": {"type": "json_schema", "schema": {
        "type": "object", "properties": {"title": {"type": "string"}}}}}}
    exchanges = [
        call(1, [user("<session>Fix the tests</session>")], said(Text(text='{"title":"x"}')),
             tools=(), model="claude-haiku-4-5", parameters=title_params,
             system=[Text(text="Generate a concise, sentence-case title for this session.")]),
        call(2, M1, R1),
        call(3, M1, None, kind="side", url="/v1/messages/count_tokens", usage=(0, 0)),
        call(4, [user("hello")], said(Text(text="hi")), tools=()),
        call(5, [user("Summarize this coding conversation in under 50 characters.")],
             said(Text(text="Fixing tests")), tools=(),
             system=[Text(text="Write a summary of the conversation.")]),
    ]
    exchanges[2].response = Response(usage=Usage(input_tokens=42))
    lineage = analyze(exchanges, "claude-code")
    kinds = {s: (c.thread, c.role, c.side_kind) for s, c in lineage.calls.items()}
    assert kinds == {1: ("side", "side", "title"), 2: ("main", "main", None),
                     3: ("side", "side", "count_tokens"), 4: ("side", "side", "other"),
                     5: ("side", "side", "summary")}
    side = lineage.threads[-1]
    assert side.id == "side" and side.calls == [1, 3, 4, 5]
    # count_tokens measures a prompt: a side call, but no spend
    assert lineage.usage["side_calls"] == 4 and lineage.usage["side"]["input_tokens"] == 300


def test_a_client_without_tools_is_not_all_side_calls():
    """aider and plain SDK clients send no tools: their calls are the conversation."""
    exchanges = [replace(call(1, M1, R1, tools=()), request_headers={}),
                 replace(call(2, M2, R2, tools=()), request_headers={})]
    lineage = analyze(exchanges, "generic")
    assert placed(lineage) == {1: ("main", "main", None), 2: ("main", "main", 1)}


def test_codex_warmups_and_thread_headers():
    codex = {"user-agent": "codex_exec/0.171.0 (Linux)", "originator": "codex_exec",
             "session-id": "root-thread"}
    child = codex | {"thread-id": "child-thread", "x-codex-parent-thread-id": "root-thread",
                     "x-openai-subagent": "collab_spawn"}
    exchanges = [
        replace(call(1, M1, None, kind="side", parameters={"generate": False}),
                request_headers=codex),
        replace(call(2, M1, R1), request_headers=codex | {"thread-id": "root-thread"}),
        replace(call(3, S1, SR1), request_headers=child),
        replace(call(4, M2, R2, tools=(BASH,)), request_headers=codex | {
            "x-openai-subagent": "compact"}),
    ]
    exchanges.append(replace(call(5, M2, None, kind="side", url="/v1/responses/compact"),
                             request_headers=codex))
    lineage = analyze(exchanges, "codex")
    kinds = {s: (c.thread, c.role, c.side_kind) for s, c in lineage.calls.items()}
    assert kinds == {1: ("side", "side", "warmup"), 2: ("main", "main", None),
                     3: ("subagent-child-thread", "subagent", None),
                     4: ("side", "side", "compaction"), 5: ("side", "side", "compaction")}
    assert lineage.threads[1].parent_thread == "main"
    fp = lineage.fingerprints[lineage.calls[2].fingerprint]
    assert (fp.harness, fp.version) == ("codex", "0.171.0")


# --- fingerprints, output, determinism ---------------------------------------------------


def test_fingerprint_ignores_per_request_noise_and_tool_order():
    a = call(1, M1, R1, headers={"anthropic-beta": "b2,b1"})
    b = call(2, M2, R2, tools=(AGENT_TOOL, BASH), headers={"anthropic-beta": "b1, b2"})
    b.request.system[0] = Text(text="x-anthropic-billing-header: cc_version=2.1.197.f9d; "
                                    "cch=00000;")
    fa, fb = fingerprint_of(a, "claude-code"), fingerprint_of(b, "claude-code")
    assert fa.id == fb.id and fa.betas == ["b1", "b2"]
    assert (fa.harness, fa.version, fa.model) == ("claude-code", "2.1.197", "claude-opus-4-8")
    assert fa.system_hash == content_hash([{"type": "text", "text": MAIN_SYSTEM[1].text}])
    other = call(3, M1, R1, system=[Text(text="You are someone else.")])
    assert fingerprint_of(other).system_hash != fa.system_hash
    no_ua = replace(a, request_headers={})
    assert fingerprint_of(no_ua, "claude-code").harness == "claude-code"
    assert fingerprint_of(call(4, M1, R1, tools=())).tools_hash is None


def test_to_dict_is_json_and_every_exchange_is_placed():
    exchanges = subagent_session()
    data = orjson.loads(orjson.dumps(to_dict(analyze(exchanges, "claude-code"))))
    assert [c["seq"] for c in data["calls"]] == [1, 2, 3, 4]
    assert set(data["calls"][0]) == {"seq", "thread", "parent", "role", "side_kind",
                                     "retry_of", "segment", "fingerprint"}
    assert data["threads"][1]["spawned_by"] == [1, "toolu_agent"]
    assert all(c["fingerprint"] in data["fingerprints"] for c in data["calls"])
    assert data["usage"]["calls"] == 4


def test_analysis_does_not_depend_on_the_order_exchanges_arrive_in():
    exchanges = subagent_session()
    assert to_dict(analyze(exchanges)) == to_dict(analyze(list(reversed(exchanges))))


def test_canonical_hash_is_key_order_free_versioned_and_refuses_dataclasses():
    assert canonical_json({"b": 1, "a": [1, 2]}) == b'{"a":[1,2],"b":1}'
    assert content_hash({"b": 1, "a": 2}) == content_hash({"a": 2, "b": 1})
    assert content_hash({"a": 1}).startswith(HASH_PREFIX) and len(content_hash(1)) == 68
    assert chain_hash(None, "x") != chain_hash("y", "x")
    with pytest.raises(TypeError):
        content_hash({"blocks": [Text(text="a")]})


def test_reused_message_hashes_equal_fresh_ones():
    """Hashes taken over from the stream's previous request only where messages are equal."""
    earlier = [*M2, R2, user("and then?")]
    later = [*M2, said(Text(text="a different answer")), user("and then?"), user("more")]
    reused = message_hashes(later, (earlier, message_hashes(earlier)))
    assert reused == message_hashes(later) == tuple(message_hash(m) for m in later)


def test_calls_are_placed_alike_without_fingerprints():
    """Exports whose lines name no fingerprint skip making them; nothing else changes."""
    exchanges = subagent_session()
    full, bare = analyze(exchanges, "claude-code"), analyze(exchanges, "claude-code",
                                                            fingerprints=False)
    assert bare.fingerprints == {} and {c.fingerprint for c in bare.calls.values()} == {""}
    for placed_call in full.calls.values():
        placed_call.fingerprint = ""
    assert to_dict(bare) == to_dict(full) | {"fingerprints": {}}


def test_each_message_object_is_hashed_once_however_often_it_is_resent(monkeypatch):
    """Records read from one session share the message objects their requests repeat
    (store.content.Decoded). Lineage hashes each object once, even when a call of the same
    stream with other messages (a title call) comes between two turns, so its work grows
    with the new messages, not with the history."""
    title_system = [Text(text="Generate a concise title for this conversation.")]
    history, exchanges = [user("start")], []
    for turn in range(1, 21):
        reply = said(Text(text=f"step {turn}"))
        exchanges.append(call(2 * turn - 1, history, reply))
        exchanges.append(call(2 * turn, [user(f"title {turn}")], said(Text(text="T")),
                              tools=(), system=title_system))
        history = [*history, reply, user(f"turn {turn}")]
    hashed = []
    real = lineage_signals.message_hash
    monkeypatch.setattr(lineage_signals, "message_hash", lambda m: hashed.append(m) or real(m))
    found = analyze(exchanges)
    objects = {id(m) for ex in exchanges for m in ex.request.messages}
    assert len(hashed) <= len(objects) + len(exchanges)  # and each call's reply once
    assert {c.thread for s, c in found.calls.items() if s % 2} == {"main"}


def test_a_generated_claude_code_session_through_the_real_decoder():
    """bench/gen_session.py: 150 calls of realistic wire bytes (thinking with signatures,
    cache_control moving every call, a subagent run, small-model calls), parsed and decoded
    by the Anthropic dialect as the recorder does."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    import gen_session

    dialect = dialect_named("anthropic.messages")
    exchanges, chains = [], {}
    for seq, wire in enumerate(gen_session.calls(n=150), 1):
        decoder = dialect.response_decoder("text/event-stream")
        decoder.feed(wire.response)
        headers = {"user-agent": UA, "x-claude-code-session-id": SESSION}
        if wire.chain == "agent":
            headers["x-claude-code-agent-id"] = AGENT
        exchanges.append(Exchange(seq=seq, dialect="anthropic.messages", request_headers=headers,
                                  url="https://api.anthropic.com" + wire.path,
                                  request=dialect.parse_request(wire.request),
                                  response=decoder.finish()))
        chains.setdefault(wire.chain, []).append(seq)
    lineage = analyze(exchanges, "claude-code")
    threads = {t.id: t.calls for t in lineage.threads}
    assert threads == {"main": chains["main"], f"subagent-{AGENT}": chains["agent"],
                       "side": chains["title"]}
    for name in ("main", "agent"):  # each call continues the one before in its chain
        seqs = chains[name]
        assert [lineage.calls[s].parent for s in seqs] == [None, *seqs[:-1]]
    assert {lineage.calls[s].side_kind for s in chains["title"]} == {"summary"}


# --- a real retry: the anthropic SDK through forge-record run ------------------------------

SDK_CLIENT = textwrap.dedent("""
    import anthropic
    client = anthropic.Anthropic(max_retries=2)  # ANTHROPIC_BASE_URL points at the proxy
    for prompt in ("first", "second"):
        message = client.messages.create(model="claude-opus-4-8", max_tokens=50,
                                         messages=[{"role": "user", "content": prompt}])
        print(message.content[0].text)
""")


@pytest.mark.slow
def test_sdk_retry_after_529_is_one_logical_call(tmp_path):
    from forge_record.mock import MockUpstream

    forge = str(Path(sys.executable).with_name("forge-record"))
    script = tmp_path / "client.py"
    script.write_text(SDK_CLIENT)
    env = {**os.environ, "FORGE_RECORD_HOME": str(tmp_path / "forge"),
           "ANTHROPIC_API_KEY": "sk-ant-dummy-retry-test-0000"}
    with MockUpstream(options={"overload_first": 1}) as mock:
        proc = subprocess.run(
            [forge, "run", "--harness", "claude-code", "--mode", "reverse",
             "--upstream", f"api.anthropic.com={mock.url}", "--", sys.executable, str(script)],
            env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        retry_counts = [r.headers.get("x-stainless-retry-count") for r in mock.requests]
    assert retry_counts == ["0", "1", "0"]  # the SDK really retried the first call once
    shown = subprocess.run([forge, "show", "last", "--json"], env=env, capture_output=True,
                           text=True, timeout=60)
    data = orjson.loads(shown.stdout)
    roles = [(e["seq"], e["http_status"], e["role"], e["retry_of"]) for e in data["exchanges"]]
    assert roles == [(1, 529, "main", None), (2, 200, "retry", 1), (3, 200, "main", None)]
    usage = data["lineage"]["usage"]
    assert (usage["calls"], usage["retries"]) == (2, 1)
    text = subprocess.run([forge, "show", "last"], env=env, capture_output=True, text=True,
                          timeout=60).stdout
    assert "#2 retry of #1" in text
