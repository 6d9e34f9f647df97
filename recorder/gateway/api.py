"""The control API under /api/v1: HTTP JSON, admin bearer token, described by openapi.py.

`handle(gateway, method, path, query, headers, body)` answers one request with (status, JSON
value); it runs in a worker thread, never on the proxy's loop. Every error is JSON,
`{"error": {"status", "message", "field"?}}`: 401 without the admin token, 404 for an unknown
path or session, 405 for a wrong method, 400/422 naming the field that is wrong. Requests
that change state are idempotent: a create with the same `request_id` (body) or
`Idempotency-Key` (header) returns the same session, a reward is a merge (store.labels), a
second finish changes nothing and says so (`already_finished: true`).
"""

from __future__ import annotations

import math
import re
from typing import Any
from urllib.parse import parse_qs

import orjson

from forge_record.gateway import openapi
from forge_record.gateway.env import KEY_VARS
from forge_record.gateway.service import Gateway, Refused

PREFIX = "/api/v1"
MAX_LIMIT = 500
MAX_WAIT = 60.0
_SESSION = re.compile(r"^/sessions/([A-Za-z0-9_.-]{1,128})(?:/(reward|finish))?$")


def handle(gateway: Gateway, method: str, path: str, query: str, headers: Any,
           body: bytes) -> tuple[int, Any]:
    try:
        return _route(gateway, method, path.removeprefix(PREFIX) or "/", query, headers, body)
    except Refused as e:
        return e.status, e.body()


def _route(gw: Gateway, method: str, path: str, query: str, headers: Any,
           body: bytes) -> tuple[int, Any]:
    if path == "/openapi.json":  # the description is public: it holds no data
        _method(method, "GET")
        return 200, openapi.document()
    if not gw.is_admin(headers.get("authorization")):
        raise Refused(401, "the control API needs the admin token (Authorization: Bearer ...)")
    if path == "/sessions":
        _method(method, "POST")
        return _create(gw, _json(body), headers)
    if path == "/trajectories":
        _method(method, "GET")
        return 200, _trajectories(gw, parse_qs(query, keep_blank_values=True))
    match = _SESSION.match(path)
    if match is None:
        raise Refused(404, f"no such endpoint {PREFIX}{path}")
    sid, action = match.groups()
    if action is None:
        _method(method, "GET")
        return 200, gw.describe(sid)
    _method(method, "POST")
    data = _json(body)
    if action == "reward":
        return 200, gw.reward(sid, _reward(data), _tags(data, "tags"), _str(data, "note"))
    status = data.get("status")
    if status not in ("done", "discarded"):
        raise Refused(422, "status must be 'done' or 'discarded'", "status")
    exit_code = data.get("exit_code")
    if exit_code is not None and (not isinstance(exit_code, int) or isinstance(exit_code, bool)):
        raise Refused(422, "exit_code must be an integer or null", "exit_code")
    return 200, gw.finish(sid, status, exit_code)


def _create(gw: Gateway, data: dict[str, Any], headers: Any) -> tuple[int, Any]:
    harness = data.get("harness")
    if not isinstance(harness, str) or harness not in KEY_VARS:
        raise Refused(422, f"harness must be one of {', '.join(KEY_VARS)}", "harness")
    meta = data.get("metadata", {})
    if not isinstance(meta, dict):
        raise Refused(422, "metadata must be an object", "metadata")
    for key, value in meta.items():
        if not isinstance(value, (str, int, float, bool)) and value is not None:
            raise Refused(422, "metadata values must be strings, numbers, booleans or null",
                          f"metadata.{key}")
    request_id = data.get("request_id") or headers.get("idempotency-key")
    if request_id is not None and (not isinstance(request_id, str) or len(request_id) > 200):
        raise Refused(422, "request_id must be a string of at most 200 characters",
                      "request_id")
    created, answer = gw.create(harness, meta, _tags(data, "tags") or {}, request_id)
    return (201 if created else 200), answer


def _trajectories(gw: Gateway, query: dict[str, list[str]]) -> dict[str, Any]:
    after = _int_param(query, "after", 0, 0, None)
    limit = _int_param(query, "limit", 50, 1, MAX_LIMIT)
    wait = _int_param(query, "wait", 0, 0, int(MAX_WAIT))
    group = query.get("group_id", [None])[-1]
    return gw.trajectories(after, limit, group, float(wait))


def _int_param(query: dict[str, list[str]], name: str, default: int, low: int,
               high: int | None) -> int:
    if name not in query:
        return default
    text = query[name][-1]
    try:
        value = int(text)
    except ValueError:
        raise Refused(400, f"{name} must be an integer, got {text!r}", name) from None
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise Refused(400, f"{name} must be {bound}", name)
    return value


def _method(method: str, allowed: str) -> None:
    if method != allowed:
        raise Refused(405, f"use {allowed} here")


def _json(body: bytes) -> dict[str, Any]:
    try:
        data = orjson.loads(body or b"{}")
    except orjson.JSONDecodeError as e:
        raise Refused(400, f"the body is not JSON: {e}", "body") from None
    if not isinstance(data, dict):
        raise Refused(400, "the body must be a JSON object", "body")
    return data


def _reward(data: dict[str, Any]) -> float | None:
    reward = data.get("reward")
    if reward is None:
        return None
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) \
            or not math.isfinite(reward):
        raise Refused(422, "reward must be a finite number", "reward")
    return float(reward)


def _tags(data: dict[str, Any], name: str) -> dict[str, str] | None:
    tags = data.get(name)
    if tags is None:
        return None
    if not isinstance(tags, dict) or not all(isinstance(v, str) for v in tags.values()):
        raise Refused(422, f"{name} must be an object of strings", name)
    return tags


def _str(data: dict[str, Any], name: str) -> str | None:
    value = data.get(name)
    if value is not None and not isinstance(value, str):
        raise Refused(422, f"{name} must be a string", name)
    return value
