"""Which requests each dialect owns: one table, the same rules for every dialect.

`decoders.base.Dialect` states the rule once (POST, or GET for a WebSocket upgrade; the end of
the path without its query, percent-decoded, trailing slashes dropped, whole segments only);
every dialect's routes are checked against every variant here, so a dialect cannot drift
from the others (as `/v1/messages/` once matched nothing while `/v1/chat/completions/` did).
"""

from __future__ import annotations

import pytest

from forge_record.decoders import DIALECTS, dialect_for, dialect_named
from forge_record.records import Request

# (path, dialect, kind): one of each route of each dialect.
ROUTES = [
    ("/v1/messages", "anthropic.messages", "model"),
    ("/v1/messages/count_tokens", "anthropic.messages", "side"),
    ("/v1/chat/completions", "openai.chat", "model"),
    ("/v1/responses", "openai.responses", "model"),
    ("/v1/completions", "openai.completions", "model"),
    ("/generate", "sglang.generate", "model"),
    ("/v1/responses/compact", "openai.responses", "side"),
    ("/v1beta/models/gemini-2.5-flash:generateContent", "gemini.generate", "model"),
    ("/v1beta/models/gemini-2.5-flash:streamGenerateContent", "gemini.generate", "model"),
    ("/v1beta/tunedModels/mine:generateContent", "gemini.generate", "model"),
    ("/v1beta/models/gemini-2.5-flash:countTokens", "gemini.generate", "side"),
    ("/v1internal:streamGenerateContent", "gemini.code_assist", "model"),
    ("/v1internal:generateContent", "gemini.code_assist", "model"),
    ("/v1internal:countTokens", "gemini.code_assist", "side"),
]


def _encoded_last_char(path: str) -> str:
    return path[:-1] + f"%{ord(path[-1]):02X}"


# Each variant of a route's path that must still be that route.
SAME = {
    "as is": lambda p: p,
    "trailing slash": lambda p: p + "/",
    "trailing slashes": lambda p: p + "//",
    "query": lambda p: p + "?beta=true&alt=sse",
    "slash then query": lambda p: p + "/?beta=true",
    "gateway prefix": lambda p: "/gw/team-a" + p,
    "percent-encoded": _encoded_last_char,
}
# Each variant that must not be any dialect's.
OTHER = {
    "segment glued on": lambda p: p + "x",
    "segment added": lambda p: p + "/x",
    "only in the query": lambda p: "/v1/other?next=" + p,
}


def test_dialect_names_are_unique():
    assert len({d.name for d in DIALECTS}) == len(DIALECTS)


def test_each_route_is_one_dialects():
    for path, name, _ in ROUTES:
        owners = [d.name for d in DIALECTS if d.matches("POST", path)]
        assert owners == [name], path


@pytest.mark.parametrize("variant", SAME)
@pytest.mark.parametrize(("path", "name", "kind"), ROUTES)
def test_the_same_route_whatever_its_spelling(path, name, kind, variant):
    spelled = SAME[variant](path)
    dialect = dialect_for("POST", spelled)
    assert dialect is not None and dialect.name == name, spelled
    assert dialect.kind(spelled) == kind
    assert dialect_for("post", spelled) is dialect  # methods are case-insensitive


@pytest.mark.parametrize("variant", OTHER)
@pytest.mark.parametrize(("path", "name", "kind"), ROUTES)
def test_not_a_route(path, name, kind, variant):
    spelled = OTHER[variant](path)
    assert dialect_for("POST", spelled) is None, spelled


# Real clients' paths: gateways, Azure deployments, Codex's ChatGPT backend, Vertex.
@pytest.mark.parametrize(("path", "name", "kind"), [
    ("/anthropic/v1/messages?beta=true", "anthropic.messages", "model"),
    ("/openai/deployments/gpt/chat/completions?api-version=2024-10-21", "openai.chat", "model"),
    ("/backend-api/codex/responses", "openai.responses", "model"),
    ("/backend-api/codex/responses/compact", "openai.responses", "side"),
    ("/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-pro"
     ":streamGenerateContent?alt=sse", "gemini.generate", "model"),
    ("/gw/v1beta/models/gemini-2.5-flash%3AstreamGenerateContent", "gemini.generate", "model"),
    ("/v1internal:streamGenerateContent?alt=sse", "gemini.code_assist", "model"),
])
def test_clients_paths(path, name, kind):
    dialect = dialect_for("POST", path)
    assert dialect is dialect_named(name) and dialect.kind(path) == kind


@pytest.mark.parametrize("path", [
    "/v1/messages/batches", "/v1/complete", "/v1/models", "/v1/xcompletions",
    "/v1/chat/completions/chatcmpl-123", "/v1/responses/resp_123/cancel",
    "/v1internal:onboardUser", "/log?format=json", "/v1beta/models",
    "/v1/xmessages", "/v2/messages", "/v1/chat/xcompletions", "/xgenerate",
    "/inference/v1/generate", "/v1/xresponses", "/v1/responses/resp_1",
    "/v1/responses/input_tokens",
    "/v1beta/xmodels/g:generateContent", "/v1beta/models/g:xgenerateContent",
    "/v1beta/models/g:embedContent", "/v1beta/models/g", "/v1internal:loadCodeAssist",
    "/xv1internal:generateContent", "/v1beta/models/v1internal:countTokens/x",
])
def test_near_misses_are_no_route(path):
    assert dialect_for("POST", path) is None


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH"])
@pytest.mark.parametrize(("path", "name", "kind"), ROUTES)
def test_only_post_is_a_call(path, name, kind, method):
    assert dialect_for(method, path) is None


@pytest.mark.parametrize("variant", SAME)
def test_websocket_upgrades_route_by_the_same_rules(variant):
    spelled = SAME[variant]("/v1/responses")
    assert dialect_for("GET", spelled, websocket=True) is dialect_named("openai.responses")
    assert dialect_for("POST", spelled, websocket=True) is None  # an upgrade is a GET


@pytest.mark.parametrize(("path", "name", "kind"), ROUTES)
def test_only_responses_has_a_websocket_route(path, name, kind):
    found = dialect_for("GET", path, websocket=True)
    assert (found is not None) == (path == "/v1/responses")


def test_a_code_assist_version_under_a_models_segment_is_a_model_name():
    dialect = dialect_for("POST", "/v1beta/models/v1internal:generateContent")
    assert dialect is not None and dialect.name == "gemini.generate"


def test_gemini_reads_the_model_and_stream_from_a_spelled_url():
    request = Request()
    url = "https://gw.example/g/v1beta/models/gemini-2.5-pro%3AstreamGenerateContent/?alt=sse"
    dialect_named("gemini.generate").from_url(request, url)
    assert (request.model, request.stream) == ("gemini-2.5-pro", True)


def test_dialects_without_url_fields_leave_the_request_alone():
    for dialect in DIALECTS:
        if not dialect.name.startswith("gemini."):
            request = Request(model="m", stream=False)
            dialect.from_url(request, "https://x.test/v1/messages")
            assert (request.model, request.stream) == ("m", False)
