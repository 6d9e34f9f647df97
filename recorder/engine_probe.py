"""Which engine serves an upstream URL: one probe at start-up, never on the proxy's loop.

SGLang answers `GET /get_model_info` with `{"model_path": ...}` (its version comes from
`GET /get_server_info`); vLLM answers `GET /version` with `{"version": ...}` (and 404 on
SGLang's routes). Anything else (a provider API, a mock, a refused connection, a timeout)
is not an engine. The probes go to the URL's origin, where both engines mount them, and to
its path prefix too when it has one (an engine behind a path-routing gateway).

`resolve` turns `--engine auto|vllm|sglang|none` and the upstreams into the engine to ask for
tokens and what was found, saying once per upstream what it is. `forge-record run` and
`forge-record serve` call it before the proxy starts; `doctor --engine` calls `probe`.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import orjson

ENGINES = ("vllm", "sglang")
CHOICES = ("auto", *ENGINES, "none")
TIMEOUT = 3.0


@dataclass(frozen=True)
class Found:
    """An engine at a URL: its name ("vllm", "sglang"), version and served models."""

    url: str  # where it answered (origin or base path)
    name: str
    version: str | None = None
    models: list[str] = field(default_factory=list)


class NotAnEngine(Exception):
    """Why a URL is not an engine (the last probe's answer), in one line."""


def get_json(url: str, timeout: float = TIMEOUT) -> Any:
    """GET `url` as JSON; an HTTP error, a refused connection or non-JSON raise NotAnEngine."""
    request = urllib.request.Request(url, headers={"accept": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback direct
    try:
        with opener.open(request, timeout=timeout) as response:
            return orjson.loads(response.read())
    except urllib.error.HTTPError as e:
        raise NotAnEngine(f"GET {url}: {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = e.reason if isinstance(e, urllib.error.URLError) else e
        raise NotAnEngine(f"GET {url}: {reason}") from None
    except orjson.JSONDecodeError:
        raise NotAnEngine(f"GET {url}: not JSON") from None


def probe(url: str, timeout: float = TIMEOUT) -> Found:
    """The engine serving `url`; NotAnEngine says why not."""
    why = NotAnEngine(f"{url}: nothing to probe")
    for base in _bases(url):
        try:
            return _probe_one(base, timeout)
        except NotAnEngine as e:
            why = e
            if _unreachable(e):
                break  # the origin is down: the prefix is too
    raise why


def _probe_one(base: str, timeout: float) -> Found:
    try:
        info = get_json(f"{base}/get_model_info", timeout)
    except NotAnEngine as e:
        if "404" not in str(e) and "405" not in str(e):
            raise
        info = None
    if isinstance(info, dict) and "model_path" in info:
        try:
            server = get_json(f"{base}/get_server_info", timeout)
        except NotAnEngine:
            server = {}
        version = server.get("version") if isinstance(server, dict) else None
        return Found(base, "sglang", _text(version), _models(base, timeout))
    answer = get_json(f"{base}/version", timeout)
    if not isinstance(answer, dict) or not isinstance(answer.get("version"), str):
        raise NotAnEngine(f"GET {base}/version: no engine version in the answer")
    return Found(base, "vllm", answer["version"], _models(base, timeout))


def _models(base: str, timeout: float) -> list[str]:
    try:
        data = get_json(f"{base}/v1/models", timeout)
    except NotAnEngine:
        return []
    entries = data.get("data") if isinstance(data, dict) else None
    return [m["id"] for m in entries or () if isinstance(m, dict) and isinstance(m.get("id"), str)]


def served_model(urls: list[str], found: Found | None = None) -> str | None:
    """The model bridged calls ask the engine for: the first one the engine serves (`GET
    /v1/models`), or None (they then keep the agent's model name) when none answers."""
    if found is not None and found.models:
        return found.models[0]
    for url in urls:
        for base in _bases(url):
            if models := _models(base, TIMEOUT):
                return models[0]
    return None


def _bases(url: str) -> list[str]:
    parts = urlsplit(url)
    origin = f"{parts.scheme}://{parts.netloc}"
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):  # an OpenAI base URL: the engine's own routes sit above it
        path = path[:-3]
    return [origin] + ([origin + path] if path else [])


def _text(value: Any) -> str | None:
    return str(value) if value is not None else None


def resolve(choice: str, urls: list[str], say: Callable[[str], None]
            ) -> tuple[str | None, Found | None]:
    """(the engine to ask for tokens, what the probe found) for `--engine choice` in front
    of `urls`. `auto` takes the first upstream that answers as an engine; a named engine is
    asked whatever the probe says (its version is recorded when found). Every upstream is
    probed at once, in threads; each is described once through `say`."""
    if choice == "none" or not urls:
        return (choice if choice in ENGINES else None), None
    with ThreadPoolExecutor(len(urls)) as pool:
        results = list(pool.map(_try, urls))
    found = None
    for url, result in zip(urls, results, strict=True):
        if isinstance(result, Found):
            say(f"upstream {url}: {result.name} {result.version or '(version unknown)'}")
            found = found or result
        elif choice == "auto" and _unreachable(result):
            say(f"upstream {url}: not an engine ({result}); if it is one still starting, "
                "name it with --engine")
        else:
            say(f"upstream {url}: not an engine ({result})")
    if choice == "auto":
        return (found.name, found) if found else (None, None)
    return choice, found if found and found.name == choice else None


def _unreachable(e: NotAnEngine) -> bool:
    return any(word in str(e).lower() for word in ("refused", "timed out"))


def _try(url: str) -> Found | NotAnEngine:
    try:
        return probe(url)
    except NotAnEngine as e:
        return e


def session_tags(engine: str | None, found: Found | None) -> dict[str, str]:
    """The tags a session records about its engine."""
    tags = {"engine": engine} if engine else {}
    if engine and found is not None and found.version:
        tags["engine_version"] = found.version
    return tags
