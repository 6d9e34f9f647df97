"""decoders.repeats: a body parsed through a remembered one is exactly the full parse.

Every case runs a sequence of bodies through one `Repeats` and compares each answer with
`orjson.loads`; the generated sessions also compare each dialect's records, and finalize's
redacted bytes and records, with the full path's. Each case also checks that the short path
was taken (or, for bodies that must not take it, that it was not), so it can fail."""

from __future__ import annotations

import json

import orjson
import pytest
from support import bench_module

from forge_record.decoders import anthropic_messages, base, gemini, openai_chat, openai_responses
from forge_record.decoders.repeats import REMEMBER_FROM, Repeats
from forge_record.decoders.repeats import _array_end as _ARRAY_END
from forge_record.decoders.repeats import _laid_out as _LAID_OUT
from forge_record.finalize import finalize
from forge_record.records import Exchange
from forge_record.redact.bodies import Redactor

PAD = "x" * REMEMBER_FROM  # makes a body big enough to be remembered


def anthropic_bodies(n: int = 40) -> list[bytes]:
    return [c.request for c in bench_module("gen_session").calls(n, seed=3)]


def _text(content) -> str:
    if isinstance(content, str):
        return content
    out = []
    for block in content:
        inner = block.get("text") or block.get("thinking") or block.get("content") or ""
        out.append(_text(inner) if isinstance(inner, list) else str(inner))
        if block.get("type") == "tool_use":
            out.append(orjson.dumps(block["input"]).decode())
    return "\n".join(out)


def _dialect_body(kind: str, anthropic: dict, order: str, style: str) -> bytes:
    """An Anthropic body's conversation in another dialect's shape, its growing array placed
    first, in the middle or last, written compactly, spaced, indented or ASCII-escaped."""
    system = _text(anthropic["system"]) + " naïve — 日本 🙂 \"quoted\" \\ back"
    turns = [(m["role"], _text(m["content"])) for m in anthropic["messages"]]
    tools = anthropic["tools"]
    if kind == "chat":
        key, grown = "messages", [{"role": "system", "content": system}] + [
            {"role": r, "content": t} for r, t in turns]
        rest = {"model": "gpt-5", "tools": [{"type": "function", "function": {
            "name": t["name"], "description": t.get("description"),
            "parameters": t.get("input_schema")}} for t in tools], "stream": True}
    elif kind == "responses":
        key, grown = "input", [{"type": "message", "role": r, "content": [{
            "type": "input_text" if r == "user" else "output_text", "text": t}]}
            for r, t in turns]
        rest = {"model": "gpt-5", "instructions": system, "tools": [
            {"type": "function", "name": t["name"], "parameters": t.get("input_schema")}
            for t in tools], "stream": True}
    else:
        key, grown = "contents", [{"role": "model" if r == "assistant" else "user",
                                   "parts": [{"text": t}]} for r, t in turns]
        rest = {"systemInstruction": {"parts": [{"text": system}]}, "tools": [
            {"functionDeclarations": [{"name": t["name"], "parameters": t.get("input_schema")}
                                      for t in tools]}]}
    grown[-1] = {**grown[-1], "cache": {"type": "ephemeral"}}  # a marker that moves
    items = list(rest.items())
    at = {"first": 0, "middle": len(items) // 2, "last": len(items)}[order]
    obj = dict(items[:at] + [(key, grown)] + items[at:])
    if style == "compact":
        return orjson.dumps(obj)
    if style == "spaced":
        return json.dumps(obj, ensure_ascii=False).encode()
    if style == "indented":
        return json.dumps(obj, indent=1, ensure_ascii=False).encode()
    return json.dumps(obj).encode()  # \u escapes for everything outside ASCII


def _same_as_full(bodies: list[bytes], key: str, repeats: Repeats | None = None) -> Repeats:
    repeats = repeats or Repeats()
    for body in bodies:
        assert repeats.loads(body, key) == orjson.loads(body)
    return repeats


def test_claude_code_session_takes_the_short_path_and_parses_the_same():
    bodies = anthropic_bodies()
    repeats = _same_as_full(bodies, "messages")
    big = sum(len(b) >= REMEMBER_FROM for b in bodies)
    assert repeats.extended >= big - 4  # the first of each thread is parsed whole


@pytest.mark.parametrize("kind", ["chat", "responses", "gemini"])
@pytest.mark.parametrize("order", ["first", "middle", "last"])
@pytest.mark.parametrize("style", ["compact", "spaced", "indented", "ascii"])
def test_every_dialects_session_parses_the_same(kind, order, style):
    key = {"chat": "messages", "responses": "input", "gemini": "contents"}[kind]
    bodies = [_dialect_body(kind, orjson.loads(b), order, style) for b in anthropic_bodies(30)]
    repeats = _same_as_full(bodies, key)
    assert repeats.extended > 10


DIALECTS = [(anthropic_messages.DIALECT, None), (openai_chat.DIALECT, "chat"),
            (openai_responses.DIALECT, "responses"), (gemini.GENERATE, "gemini")]


@pytest.mark.parametrize(("dialect", "kind"), DIALECTS, ids=[d.name for d, _ in DIALECTS])
def test_records_are_the_full_paths(monkeypatch, dialect, kind):
    bodies = anthropic_bodies(30)
    if kind is not None:
        bodies = [_dialect_body(kind, orjson.loads(b), "middle", "compact") for b in bodies]
    shared = Repeats()
    monkeypatch.setattr(base, "REPEATS", shared)
    fast = [dialect.parse_request(b) for b in bodies]
    assert shared.extended > 10
    monkeypatch.setattr(base, "REPEATS", Repeats(remembered=0))  # remembers nothing
    monkeypatch.setattr(anthropic_messages, "_RECENT", type(anthropic_messages._RECENT)(maxlen=8))
    assert fast == [dialect.parse_request(b) for b in bodies]


def _body(messages: list, head: str = "", tail: str = "") -> bytes:
    return (f'{{"model":"m",{head}"messages":{json.dumps(messages, ensure_ascii=False)},'
            f'"system":"{PAD}"{tail}}}').encode()


def _msgs(n: int, last: str = "") -> list:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"}
            for i in range(n)] + ([{"role": "user", "content": last}] if last else [])


def _answers_as_full(first: bytes, bodies: list[bytes]) -> None:
    """Each of `bodies`, after `first`, parses to what orjson gives, or fails as it does."""
    for body in bodies:
        repeats = Repeats()
        repeats.loads(first, "messages")
        try:
            expected = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            with pytest.raises(orjson.JSONDecodeError) as got:
                repeats.loads(body, "messages")
            assert str(got.value) == str(e)
        else:
            assert repeats.loads(body, "messages") == expected
            assert list(repeats.loads(body, "messages")) == list(expected)  # key order


def test_a_body_that_changes_earlier_bytes_is_parsed_again():
    first = _body(_msgs(20))
    changed = _body([{"role": "user", "content": "rewritten"}, *_msgs(20)[1:], *_msgs(3)])
    repeats = _same_as_full([first, changed], "messages")
    assert repeats.extended == 1  # every element parsed again, the tail shared
    compacted = _body(_msgs(2), head='"note":"compacted",')  # differs before the array
    repeats = _same_as_full([first, compacted], "messages")
    assert repeats.extended == 0


def test_reordered_keys_and_a_changed_tail():
    """A body whose keys moved is parsed whole; one whose members after the array changed
    (one added, or other values of the same length) is extended, those members parsed anew."""
    first = _body(_msgs(10))
    moved = (b'{"system":"' + PAD.encode() + b'","messages":'
             + json.dumps(_msgs(12)).encode() + b',"model":"m"}')
    tail = _body(_msgs(12), tail=',"stream":true')
    same_length = _body(_msgs(12)).replace(b'"x', b'"y')  # the tail's value, not its size
    for second, extended in ((moved, 1), (tail, 2), (same_length, 2)):
        repeats = _same_as_full([first, second, _body(_msgs(14))], "messages")
        assert repeats.extended == extended


def test_a_tail_that_changes_on_every_call_is_laid_out_once_per_thread(monkeypatch):
    """Claude Code, talking to api.anthropic.com, writes its system prompt after the messages
    with a billing block whose `cch` changes on every call. Each such body once failed to
    extend the one before, after finding where its elements start (a tokenizing pass over
    the whole body, on every call)."""
    from forge_record.decoders import repeats as module

    laid = []
    monkeypatch.setattr(module, "_laid_out", lambda *a: laid.append(1) or _LAID_OUT(*a))
    bodies = []
    for n, body in enumerate(anthropic_bodies()):
        data = orjson.loads(body)
        data["system"] = [{"type": "text", "text": f"x-anthropic-billing-header: cch={n:05x};"},
                          {"type": "text", "text": _text(data["system"])}]
        order = ["model", "messages", "system"]
        bodies.append(orjson.dumps({k: data[k] for k in order + [k for k in data
                                                                 if k not in order]}))
    repeats = _same_as_full(bodies, "messages")
    big = sum(len(b) >= REMEMBER_FROM for b in bodies)
    assert repeats.extended >= big - 4
    assert len(laid) <= 4  # once a thread (main, sub-agent, titles)


def _billed(messages: list, billing: str, tools: bytes = b"") -> bytes:
    """Claude Code's shape: after the messages, a billing block that changes on every call,
    then tools and settings that do not."""
    tools = tools or orjson.dumps([{"name": f"t{i}", "input_schema": {"type": "object"}}
                                   for i in range(3)])
    return (b'{"model":"m","messages":' + orjson.dumps(messages)
            + b',"system":[{"type":"text","text":"cch=' + billing.encode()
            + b';"},{"type":"text","text":"' + PAD.encode() + b'"}],"tools":' + tools
            + b',"stream":true}')


def test_members_in_the_trailing_bytes_a_body_shares_are_the_old_values(monkeypatch):
    """The tools after a billing block that changes are not parsed again: they are the
    values parsed before, and the array's end is found where a tail as long as before
    starts, without tokenizing the new elements."""
    from forge_record.decoders import repeats as module

    tokenized = []
    monkeypatch.setattr(module, "_array_end",
                        lambda *a: tokenized.append(1) or _ARRAY_END(*a))
    bodies = [_billed(_msgs(n), f"{n:05x}") for n in range(4, 10)]
    repeats, before = Repeats(), None
    for body in bodies:
        data = repeats.loads(body, "messages")
        assert data == orjson.loads(body) and list(data) == list(orjson.loads(body))
        if before is not None:
            assert data["tools"] is before["tools"]
            assert data["system"] == orjson.loads(body)["system"] != before["system"]
        before = data
    assert repeats.extended == len(bodies) - 1
    assert len(tokenized) == 1  # laying out the first body, once


def test_a_tail_whose_length_changed_or_that_is_not_what_it_was():
    first = _billed(_msgs(5), "00000")
    element = {"role": "user", "content": "x ]]]"}
    tools = b'[{"name":"t0","input_schema":{"type":"object"}}]'
    bodies = [
        _billed(_msgs(7), "0000000"),  # a longer billing value: the array ends elsewhere
        _billed(_msgs(7), "00"),
        # three bytes shorter: where a tail as long as before would start is a `]` in a string
        _billed([*_msgs(5), element], "00"),
        _billed(_msgs(6), "00000", tools=tools),  # other tools: parsed anew
        # the tools written twice, the shared ones last (the full parse keeps the last)
        _billed(_msgs(6), "00000").replace(b',"tools":', b',"tools":[1],"tools":'),
        _billed(_msgs(6), "00000").replace(b'"stream":true}', b'"stream":true} x'),
        _billed(_msgs(6), "000").replace(b'}],"tools"', b'}] ,"tools"'),
        _billed(_msgs(6), "00000").replace(b'"}],"tools"', b'"},],"tools"'),
    ]
    guess = len(bodies[2]) - (len(first) - first.rindex(b'],"system"'))
    assert bodies[2][guess:guess + 1] == b"]" and bodies[2].rindex(b'],"system"') > guess
    _answers_as_full(first, bodies)


def test_members_after_the_array_that_are_not_what_the_full_parse_reads():
    first = _body(_msgs(5))
    head = first[: first.index(b'"system"')]
    bodies = [
        head + b'"model":"n"}',  # a key the leading bytes hold, written again
        head + b'"messages":[1]}',  # the array's own key
        first.replace(b'"}', b'",}'),  # a trailing comma
        first.replace(b'"}', b'"} x'),  # bytes after the body
        first.replace(b'"}', b'"'),  # unclosed
        first.replace(b'],"system"', b'] ,\n "system"'),  # not JSON's whitespace
        first.replace(b'],"system"', b'] ,\t "system"'),
        head.rstrip(b",") + b"}",  # nothing after the array
        head.rstrip(b",") + b" \n}\n",
    ]
    _answers_as_full(first, bodies)


def test_non_ascii_escapes_and_brackets_inside_strings():
    tricky = 'naïve 日本 🙂 \\" ] } , [ { \\\\ \u2028 \x01 "quoted"'
    bodies = [_body(_msgs(n, last=tricky * (n % 3))) for n in range(3, 12)]
    ascii_bodies = [json.dumps(orjson.loads(b)).encode() for b in bodies]
    for seq in (bodies, ascii_bodies):
        assert _same_as_full(seq, "messages").extended == len(seq) - 1


def test_elements_that_are_numbers_strings_and_nested_arrays():
    seqs = ([[1], [1, 2], [12, 2, 3], [12, 2, 3, 40]],
            [["a"], ["a", ["b", [1]]], ["a", ["b", [1]], {}]])
    for seq in seqs:
        bodies = [f'{{"messages":{json.dumps(m)},"pad":"{PAD}"}}'.encode() for m in seq]
        _same_as_full(bodies, "messages")


def test_bytes_that_are_not_whole_elements_take_the_full_path():
    first = _body(_msgs(5))
    head = first[: first.index(b'"system"')]
    bad = [
        first.replace(b'"turn 4"}]', b'"turn 4"}, ]'),  # a trailing comma
        first.replace(b'"turn 4"}]', b'"turn 4"},]'),
        first.replace(b'"turn 4"}]', b'"turn 4"}'),  # unclosed
        first.replace(b'"turn 4"}]', b'"turn 4"}],"messages":[1]'),  # closes early, writes again
        first.replace(b'"turn 4"}]', b'"turn 4"},{"x":"\xff"}]'),  # not UTF-8
        head + b'"x":1]}',
    ]
    _answers_as_full(first, bad)


def test_elements_escaping_their_array_are_not_taken_for_its_elements():
    # `{"messages":[a, 1],"":[2], ...}` parses, and so does `{"":[1],"":[2]}`: the bytes in
    # between close the array, so they are not its elements.
    first = f'{{"messages":[{{"a":1}},{{"b":2}}],"pad":"{PAD}"}}'.encode()
    second = f'{{"messages":[{{"a":1}},3],"":[4],"pad":"{PAD}"}}'.encode()
    third = f'{{"messages":[{{"a":1}},3],"messages":[4],"pad":"{PAD}"}}'.encode()
    for body in (second, third):
        repeats = Repeats()
        repeats.loads(first, "messages")
        assert repeats.loads(body, "messages") == orjson.loads(body)


def test_a_key_written_twice_or_escaped_is_not_extended():
    twice = f'{{"messages":[1],"messages":[2,3],"pad":"{PAD}"}}'.encode()
    escaped = f'{{"m\\u0065ssages":[1],"messages":[2,3],"pad":"{PAD}"}}'.encode()
    for body in (twice, escaped):
        repeats = Repeats()
        repeats.loads(body, "messages")
        grown = body.replace(b"3]", b"3,4]")
        assert repeats.loads(grown, "messages") == orjson.loads(grown)
        assert repeats.extended == 0
        assert len(repeats) == 1  # the grown body; the first one, once tried, is dropped


def test_nesting_as_deep_as_orjson_allows_and_one_deeper():
    for depth in (1022, 1023, 1024):
        deep = "[" * depth + "]" * depth
        body = f'{{"messages":[1],"pad":"{PAD}"}}'.encode()
        grown = body.replace(b"[1]", f"[1,{deep}]".encode())
        repeats = Repeats()
        repeats.loads(body, "messages")
        try:
            expected = orjson.loads(grown)
        except orjson.JSONDecodeError:
            with pytest.raises(orjson.JSONDecodeError):
                repeats.loads(grown, "messages")
        else:
            assert repeats.loads(grown, "messages") == expected


def test_memory_is_bounded_by_count_and_bytes():
    repeats = Repeats(remembered=3, max_bytes=4 * REMEMBER_FROM)
    for n in range(1, 12):
        repeats.loads(_body(_msgs(n)), "messages")
        assert len(repeats) <= 3 and repeats.bytes_kept <= 4 * REMEMBER_FROM
    repeats.loads(_body(_msgs(1), tail=f',"big":"{PAD * 5}"'), "messages")  # over the limit
    assert repeats.bytes_kept <= 4 * REMEMBER_FROM


def _exchange(body: bytes) -> Exchange:
    return Exchange(seq=1, dialect=anthropic_messages.DIALECT.name,
                    url="https://api.anthropic.com/v1/messages", http_status=200,
                    started_at=1.0, raw_request=body, status="complete")


def test_finalize_redacts_and_parses_as_the_full_path(monkeypatch):
    """A secret cut at the shared bytes' end: the body before ends inside it, the next
    completes it in the element that is parsed again."""
    key = b"k" * 32
    secret = "sk-ant-api03-" + "A1b2C3d4" * 4
    bodies = [_body(_msgs(n, last=f"see {secret[: 8 + n]}")) for n in range(6, 20)]
    bodies += [_body(_msgs(20, last=f"export API_TOKEN={secret}\\nnext")), *anthropic_bodies(12)]
    shared = Repeats()
    monkeypatch.setattr(base, "REPEATS", shared)
    redactor = Redactor(key)
    fast = [finalize(_exchange(b), redactor) for b in bodies]
    assert shared.extended > 10
    monkeypatch.setattr(base, "REPEATS", Repeats(remembered=0))
    full = [finalize(_exchange(b), Redactor(key)) for b in bodies]
    assert [e.raw_request for e in fast] == [e.raw_request for e in full]
    assert [e.request for e in fast] == [e.request for e in full]
    assert b"[REDACTED:anthropic_key:" in fast[-13].raw_request


def test_bodies_that_extend_none_are_never_laid_out(monkeypatch):
    from forge_record.decoders import repeats as module

    laid = []
    monkeypatch.setattr(module, "_laid_out", lambda *a: laid.append(a) or None)
    repeats = Repeats()
    for n in range(8):  # each differs from the start: a new head every call
        body = _body(_msgs(3), head=f'"n":"{n}{"y" * REMEMBER_FROM}",')
        assert repeats.loads(body, "messages") == orjson.loads(body)
    assert laid == [] and repeats.extended == 0
