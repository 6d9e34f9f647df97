"""`forge_record.client`: the gateway's control API for trainers (standard library only).

    gw = GatewayClient("http://forge-record:8080", admin_token)
    s = gw.create_session("claude-code", metadata={"task_id": "t1", "group_id": "g7"})
    # run the harness with s["env"] (and s["args"] after the executable, for Codex)
    gw.reward(s["id"], 1.0)
    gw.finish(s["id"], "done", exit_code=0)
    for item in gw.iter_trajectories(after=cursor):   # finished sessions, each once
        ...

Every request that changes state may be retried: a create carries a `request_id` (made here
unless given), so a retry after a lost answer gets the same session back; reward and finish
are idempotent on the server. Connection failures are retried `retries` times; an error the
gateway answered raises GatewayError with its status, message and the field it names.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any


class GatewayError(Exception):
    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(f"{status}: {message}" + (f" (field {field})" if field else ""))
        self.status = status
        self.message = message
        self.field = field


class GatewayClient:
    def __init__(self, base_url: str, admin_token: str, *, timeout: float = 90.0,
                 retries: int = 3) -> None:
        self.base_url = base_url.rstrip("/")
        self._token = admin_token
        self.timeout = timeout
        self.retries = retries

    def create_session(self, harness: str, metadata: dict[str, Any] | None = None,
                       tags: dict[str, str] | None = None,
                       request_id: str | None = None) -> dict[str, Any]:
        """{id, token, base_url, env, args, ...}: run the harness with `env` (and `args`)."""
        body = {"harness": harness, "metadata": metadata or {}, "tags": tags or {},
                "request_id": request_id or uuid.uuid4().hex}
        return self._call("POST", "/sessions", body)

    def reward(self, session_id: str, reward: float | None = None,
               tags: dict[str, str] | None = None, note: str | None = None) -> dict[str, Any]:
        body = {k: v for k, v in (("reward", reward), ("tags", tags), ("note", note))
                if v is not None}
        return self._call("POST", f"/sessions/{_q(session_id)}/reward", body)

    def finish(self, session_id: str, status: str = "done",
               exit_code: int | None = None) -> dict[str, Any]:
        return self._call("POST", f"/sessions/{_q(session_id)}/finish",
                          {"status": status, "exit_code": exit_code})

    def session(self, session_id: str) -> dict[str, Any]:
        return self._call("GET", f"/sessions/{_q(session_id)}")

    def trajectories(self, after: int = 0, limit: int = 50, group_id: str | None = None,
                     wait: int = 0) -> dict[str, Any]:
        """One page: {"items": [...], "cursor": N}; pass `cursor` as `after` next time."""
        query = {"after": after, "limit": limit, "wait": wait}
        if group_id is not None:
            query["group_id"] = group_id
        return self._call("GET", "/trajectories?" + urllib.parse.urlencode(query))

    def iter_trajectories(self, after: int = 0, group_id: str | None = None,
                          wait: int = 0) -> Iterator[dict[str, Any]]:
        """Every finished session after `after`, page by page, until none is left (with
        `wait`, each page long-polls that many seconds first)."""
        while True:
            page = self.trajectories(after, group_id=group_id, wait=wait)
            yield from page["items"]
            if not page["items"]:
                return
            after = page["cursor"]

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base_url + "/api/v1" + path, data=data, method=method,
            headers={"authorization": f"Bearer {self._token}",
                     "content-type": "application/json", "accept": "application/json"})
        for attempt in range(self.retries + 1):
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    return json.loads(response.read() or b"null")
            except urllib.error.HTTPError as e:
                raise _error(e) from None
            except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
                if attempt == self.retries:
                    raise GatewayError(0, f"cannot reach {self.base_url}: "
                                          f"{getattr(e, 'reason', e)}") from None
                time.sleep(0.5 * 2 ** attempt)
        raise AssertionError("unreachable")


def _error(e: urllib.error.HTTPError) -> GatewayError:
    try:
        error = json.loads(e.read()).get("error", {})
    except (ValueError, AttributeError):
        error = {}
    return GatewayError(e.code, error.get("message") or e.reason, error.get("field"))


def _q(session_id: str) -> str:
    return urllib.parse.quote(session_id, safe="")
