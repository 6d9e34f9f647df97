"""A real Codex session over the Responses WebSocket with two user turns, recorded as one
session: `codex exec "<prompt>"`, then `codex exec resume --last "<prompt> again"`, each
with a tool call. The second run opens a new WebSocket, warms it up and sends its calls
chained by `previous_response_id`; the recorder stitches them back into full context
(recorder/chain.py), and lineage must see one thread: every model call continuing the one
before it, the resumed run's first call continuing the first run's last, warm-ups apart.

The fixtures and helpers are tests/test_codex.py's (Codex pinned to its CODEX_VERSION).
"""

from __future__ import annotations

import orjson
import pytest
from codex_cli import CODEX_VERSION, PROMPT, codex_env, forge  # noqa: F401 - the fixture

from forge_record.mock import TOOL_MARKER, MockUpstream

pytestmark = [pytest.mark.slow, pytest.mark.cli]

FLAGS = "--skip-git-repo-check --dangerously-bypass-approvals-and-sandbox -m gpt-5.4"
# `exec resume` takes no --color.
TWO_TURNS = (f'codex exec {FLAGS} --color never "{PROMPT}" && '
             f'codex exec resume --last {FLAGS} "{PROMPT} again"')


def test_two_user_turns_over_websocket_are_one_stitched_thread(codex_env):  # noqa: F811
    with MockUpstream() as mock:
        proc = forge(codex_env, "run", "--harness", "codex", "--upstream",
                     f"api.openai.com={mock.url}", "--", "sh", "-c", TWO_TURNS, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.count(f"{TOOL_MARKER}-output-42") >= 2  # both turns ran the tool
        assert len(mock.websockets) == 2  # one connection per run, no HTTP fallback
        assert not [r for r in mock.requests if r.method == "POST"]
    session = orjson.loads(forge(codex_env, "show", "last", "--json").stdout)
    assert session["harness_version"] == CODEX_VERSION
    exchanges = session["exchanges"]
    model = [e for e in exchanges if e["kind"] == "model"]
    warmups = [e for e in exchanges if e["kind"] == "side"]
    assert len(model) == 4 and len(warmups) == 2
    assert all((e["thread"], e["side_kind"]) == ("side", "warmup") for e in warmups)

    [thread] = [t for t in session["lineage"]["threads"] if t["role"] != "side"]
    assert thread["id"] == "main" and thread["calls"] == [e["seq"] for e in model]
    assert [e["parent"] for e in model] == [None] + [e["seq"] for e in model[:-1]]
    assert all(e["role"] == "main" and e["segment"] == 0 for e in model)
    # the resumed run's calls were sent as new items plus previous_response_id, yet the
    # record holds both user turns, so content matching could chain it to the first run
    last_prompts = [b["text"] for m in model[-1]["request"]["messages"] if m["role"] == "user"
                    for b in m["content"] if b["type"] == "text"]
    assert PROMPT in last_prompts and f"{PROMPT} again" in last_prompts
    assert model[-1]["request"]["parameters"]["previous_response_id"]
    fingerprint = session["lineage"]["fingerprints"][model[0]["fingerprint"]]
    assert (fingerprint["harness"], fingerprint["version"]) == ("codex", CODEX_VERSION)
    assert fingerprint["system_hash"]  # Codex's instructions come as developer messages
    usage = session["lineage"]["usage"]
    assert (usage["calls"], usage["side_calls"]) == (4, 2)
