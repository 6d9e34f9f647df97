"""The OpenAPI 3.1 document of the control API, served at /api/v1/openapi.json."""

from __future__ import annotations

from typing import Any

from forge_record import __version__
from forge_record.gateway.env import KEY_VARS


def _obj(props: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = list(required)
    return out


_STR_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_ERROR = _obj({"error": _obj({"status": {"type": "integer"}, "message": {"type": "string"},
                              "field": {"type": "string"}}, ("status", "message"))})
_MISSING = {"$ref": "#/components/schemas/MissingCalls"}
_MISSING_CALLS = {
    "type": "array", "items": {"type": "integer"},
    "description": "numbers of the session's call sequence that no stored call has, in "
                   "order ([] when none). A call takes its number as it starts, so these "
                   "are calls a replica was carrying when it died (lost), calls still in "
                   "flight (an open session), and calls spooled during a store outage (until "
                   "the spool's replay stores them under that number). Read each time."}
_SESSION_ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> dict[str, Any]:
    names = {400: "malformed request", 401: "no or wrong admin token", 404: "unknown session",
             422: "a field is wrong (named in error.field)"}
    return {str(c): _json({"$ref": "#/components/schemas/Error"}, names[c]) for c in codes}


def document() -> dict[str, Any]:
    created = _obj({"id": {"type": "string"}, "token": {"type": "string"},
                    "base_url": {"type": "string"}, "env": _STR_MAP,
                    "args": {"type": "array", "items": {"type": "string"}},
                    "harness": {"type": "string"}, "metadata": {"type": "object"},
                    "tags": _STR_MAP})
    finished = _obj({"id": {"type": "string"}, "already_finished": {"type": "boolean"},
                     "status": {"type": "string"}, "exit_code": {"type": ["integer", "null"]},
                     "finish_seq": {"type": ["integer", "null"]},
                     "missing_calls": {"type": "integer", "description":
                                       "how many calls were still not stored when the "
                                       "finish had waited (absent when none)"}})
    session = _obj({"id": {"type": "string"}, "status": {"type": "string"},
                    "calls": {"type": "array", "items": {"type": "object"}},
                    "missing_calls": _MISSING,
                    "threads": {"type": "array", "items": {"type": "object"}}})
    trajectory = _obj({"cursor": {"type": "integer"}, "session_id": {"type": "string"},
                       "missing_calls": _MISSING,
                       "trajectories": {"type": "array", "items": {"type": "object"}},
                       "tokens": {"type": "array", "items": {"type": "object"}}})
    return {
        "openapi": "3.1.0",
        "info": {"title": "forge-record gateway control API", "version": __version__},
        "components": {
            "securitySchemes": {"admin": {"type": "http", "scheme": "bearer"}},
            "schemas": {"Error": _ERROR, "MissingCalls": _MISSING_CALLS},
        },
        "security": [{"admin": []}],
        "paths": {
            "/api/v1/sessions": {"post": {
                "summary": "Create a rollout session",
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": _obj({
                        "harness": {"type": "string", "enum": list(KEY_VARS)},
                        "metadata": _obj({"task_id": {}, "group_id": {}, "attempt": {}}),
                        "tags": _STR_MAP,
                        "request_id": {"type": "string",
                                       "description": "same id, same session (idempotent)"},
                    }, ("harness",))}}},
                "responses": {"201": _json(created, "created"),
                              "200": _json(created, "already created with this request_id"),
                              **_errors(400, 401, 422)},
            }},
            "/api/v1/sessions/{id}": {"get": {
                "summary": "The session, its calls and lineage summary",
                "parameters": [_SESSION_ID],
                "responses": {"200": _json(session, "the session"),
                              **_errors(401, 404)},
            }},
            "/api/v1/sessions/{id}/reward": {"post": {
                "summary": "Merge a reward, tags and a note into the session's label",
                "parameters": [_SESSION_ID],
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": _obj({"reward": {"type": "number"}, "tags": _STR_MAP,
                                    "note": {"type": "string"}})}}},
                "responses": {"200": _json({"type": "object"}, "the label after the merge"),
                              **_errors(400, 401, 404, 422)},
            }},
            "/api/v1/sessions/{id}/finish": {"post": {
                "summary": "End the session (idempotent: a second finish changes nothing)",
                "parameters": [_SESSION_ID],
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": _obj({"status": {"type": "string",
                                               "enum": ["done", "discarded"]},
                                    "exit_code": {"type": ["integer", "null"]}},
                                   ("status",))}}},
                "responses": {"200": _json(finished, "finished (or already was)"),
                              **_errors(400, 401, 404, 422)},
            }},
            "/api/v1/trajectories": {"get": {
                "summary": "Finished sessions in finish order, each once per cursor",
                "parameters": [
                    {"name": "after", "in": "query", "schema": {"type": "integer"}},
                    {"name": "limit", "in": "query", "schema": {"type": "integer"}},
                    {"name": "group_id", "in": "query", "schema": {"type": "string"}},
                    {"name": "wait", "in": "query", "schema": {"type": "integer"},
                     "description": "long poll: seconds to wait for one (at most 60)"},
                ],
                "responses": {"200": _json(_obj({"items": {"type": "array", "items": trajectory},
                                                 "cursor": {"type": "integer"}}),
                                           "a page; pass `cursor` as `after` next; each "
                                           "item has its `trajectories` and, for calls "
                                           "an engine answered with its token ids, the "
                                           "`tokens` rows of `export --format tokens`"),
                              **_errors(400, 401)},
            }},
        },
    }
