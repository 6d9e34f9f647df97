"""Engine token ids in the store (store.tokens): packed arrays, prompt ids as what the parent
lacks, exact round trips of whatever the record held, on SQLite and Postgres."""

from __future__ import annotations

import glob
import random
import re

import pytest
import sqlalchemy as sa
from support import make_session, without_raw

from forge_record.records import (
    Exchange,
    Message,
    Request,
    Response,
    Text,
    Tokens,
)
from forge_record.store import segments, tokens
from forge_record.store.reader import segment_manifests


def vllm_logprobs() -> list[float]:
    """Logprob values exactly as vLLM sent them (tests/data/vllm)."""
    values = set()
    for path in glob.glob("tests/data/vllm/*"):
        with open(path) as f:
            values |= {float(v) for v in re.findall(r'"logprob":(-?[0-9.eE+-]+)', f.read())}
    return sorted(values)


@pytest.mark.parametrize("held", [
    Tokens(prompt_ids=[1, 2, 3], ids=[4, 5], logprobs=[-0.5, -1.25],
           top_logprobs=[[["a", -0.5], ["b", -2.0]], [["c", -1.25]]]),
    Tokens(prompt_ids=None, ids=[7], logprobs=None, top_logprobs=None),
    Tokens(prompt_ids=[], ids=[], logprobs=[], top_logprobs=[]),
    Tokens(ids=[1], logprobs=[-0.1]),  # not a float32 value: kept as float64
    Tokens(ids=[1, 2], logprobs=[None, -9999.0]),  # None in the list: kept as JSON
    Tokens(ids=[1, 0], logprobs=[0, -1.5]),  # an int where a float was expected
    Tokens(prompt_ids=[1 << 33, -1], ids=[True, 2]),  # not uint32 ids: kept as JSON
], ids=["full", "no-prompt", "empty", "float64", "none-inside", "int-logprob", "not-uint32"])
def test_a_token_blob_gives_back_exactly_what_the_record_held(held):
    data, keep = tokens.encode(held, None)
    back = tokens.decode(data, None)
    assert back == held and keep == 0
    for a, b in ((back.ids, held.ids), (back.logprobs, held.logprobs)):
        assert [type(v) for v in a or []] == [type(v) for v in b or []]


def test_vllm_logprobs_are_float32_values():
    """What decides float32: every logprob vLLM sent survives the trip, so it packs in 4
    bytes a value."""
    values = vllm_logprobs()
    assert len(values) > 50
    data, _ = tokens.encode(Tokens(ids=list(range(len(values))), logprobs=values), None)
    assert tokens.decode(data, None).logprobs == values
    assert len(data) < 9 * len(values) + 16


def test_prompt_ids_keep_only_what_they_add_to_the_parent():
    parent = Tokens(prompt_ids=[1, 2, 3], ids=[4, 5])
    child = Tokens(prompt_ids=[1, 2, 3, 4, 5, 6, 7], ids=[8])
    data, keep = tokens.encode(child, tokens.full(parent))
    assert keep == 5 and tokens.decode(data, tokens.full(parent)) == child
    diverged = Tokens(prompt_ids=[1, 2, 9], ids=[])
    data, keep = tokens.encode(diverged, tokens.full(parent))
    assert keep == 2 and tokens.decode(data, tokens.full(parent)) == diverged


def rollout(calls: int, seed: int = 0) -> list[Exchange]:
    """An engine rollout: every prompt is the previous prompt and answer plus a new turn;
    once, the history is cut (the prefix rule must not assume append-only)."""
    rng = random.Random(seed)
    logprobs = vllm_logprobs()
    prompt, messages, out = [rng.randrange(150_000) for _ in range(300)], [], []
    for seq in range(1, calls + 1):
        if seq == calls // 2:
            prompt, messages = prompt[:100], messages[:1]
        messages = [*messages, Message(role="user", content=[Text(text=f"turn {seq}")])]
        ids = [rng.randrange(150_000) for _ in range(rng.randint(5, 60))]
        held = Tokens(prompt_ids=list(prompt), ids=ids,
                      logprobs=[rng.choice(logprobs) for _ in ids],
                      top_logprobs=[[[str(i), rng.choice(logprobs)]] for i in ids[:3]])
        out.append(Exchange(seq=seq, dialect="openai-chat", url="http://engine/v1/chat",
                            request=Request(model="tiny", messages=list(messages)),
                            response=Response(model="tiny", content=[Text(text="ok")],
                                              tokens=held),
                            raw_request=b'{"m":%d}' % seq, raw_response=b"{}"))
        messages = [*messages, Message(role="assistant", content=[Text(text="ok")])]
        prompt = prompt + ids + [rng.randrange(150_000) for _ in range(rng.randint(5, 40))]
    return out


def test_a_rollout_reads_back_exactly_and_stores_ids_once(store):
    sent = rollout(80)
    store.add_session(make_session("r"))
    for ex in sent:
        store.add_exchange("r", ex)
    assert list(store.iter_exchanges("r", raw=True)) == sent
    for ex in reversed(sent):  # random access, coldest first
        assert store.get_exchange("r", ex.seq, raw=True) == ex
    held = sum(len(e.response.tokens.prompt_ids) + len(e.response.tokens.ids) for e in sent)
    new, before = 0, []  # ids no earlier call held at the same place
    for e in sent:
        full = tokens.full(e.response.tokens)
        same = [a == b for a, b in zip(full, before, strict=False)]
        new += len(full) - (same.index(False) if False in same else len(same))
        before = full
    with store.reading("measure") as conn:
        packed = conn.scalar(sa.text("SELECT sum(size) FROM packs"))
    assert held > 15 * new  # the prompts repeat: stored whole they would cost 15x more
    # 4 bytes a new id and a logprob, every KEYFRAME_EVERY-th call's whole prompt, the rest
    assert packed < 8 * new + 4 * held // tokens.KEYFRAME_EVERY + 200 * len(sent)


def test_tokens_kept_in_the_manifest_still_read(store, monkeypatch):
    """Rows written before token blobs kept the lists in the manifest."""
    monkeypatch.setattr(segments.SessionEncoder, "_tokens", lambda *a: (None, 0))
    sent = rollout(6)
    store.add_session(make_session("old"))
    for ex in sent:
        store.add_exchange("old", ex)
    monkeypatch.undo()
    with store.reading("read manifests") as conn:
        manifests = segment_manifests(conn, "old", 0)
    assert "prompt_ids" in manifests[1]["response"]["tokens"]  # the old form, as lists
    assert list(store.iter_exchanges("old")) == [without_raw(e) for e in sent]
    assert store.get_exchange("old", 6) == without_raw(sent[5])
