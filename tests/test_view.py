"""`forge-record view` pages opened in a real headless Chromium (Debian's `chromium`), driven
over the Chrome DevTools Protocol with the `websockets` client.

Sessions of each dialect are recorded through the live proxy with the official SDKs against
the project's mock (tests/test_export_sessions.recorded_store), written by the command, and
opened: no console errors, the thread tree and a tool call visible, a search finds the tool
result; a screenshot of each goes to tests/artifacts/. A session whose recorded strings hold
`<script>` and `</script>` must show them as text with no dialog and no script run. A
synthetic 1,000-call session is measured (file size, time to render, time to search); the
numbers go to tests/artifacts/view-measurements.json and are printed, never asserted.
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import require
from recorded_sessions import SESSIONS, TOOL_OUTPUT, recorded_store
from viewer_sessions import HOSTILE, hostile_session, session_of, store_session

from forge_record.cli import cli
from forge_record.viewer import build_view, render_html
from forge_record.viewer.html import INTERNED, pack, script_safe_json

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).parent / "artifacts"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-port=0", "--remote-allow-origins=*"]

pytestmark = pytest.mark.slow


class Chromium:
    """One headless Chromium and one page in it, driven over CDP (flat sessions on the
    browser's websocket). Every event is kept in `events`; a JavaScript dialog is recorded
    there and dismissed, so a page that calls alert() cannot hang the test."""

    def __init__(self) -> None:
        from websockets.sync.client import connect

        self.profile = tempfile.mkdtemp(prefix="forge-view-chromium-")
        self.proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={self.profile}",
                                      "about:blank"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        port, path = self._devtools_address()
        self.ws = connect(f"ws://127.0.0.1:{port}{path}", max_size=None, open_timeout=30)
        self.ids = itertools.count(1)
        self.events: list[dict] = []
        self.session = None
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget",
                                 {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": 1400, "height": 900, "deviceScaleFactor": 1, "mobile": False})

    def _devtools_address(self) -> tuple[str, str]:
        # Chromium writes the port it picked and the browser target's path to this file.
        found = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if found.exists() and len(lines := found.read_text().split()) >= 2:
                return lines[0], lines[1]
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}")
            time.sleep(0.05)
        raise TimeoutError("chromium did not open its DevTools port")

    def send(self, method: str, params: dict | None = None, timeout: float = 30) -> dict:
        msg_id = next(self.ids)
        message = {"id": msg_id, "method": method, "params": params or {}}
        if self.session:
            message["sessionId"] = self.session
        self.ws.send(json.dumps(message))
        deadline = time.monotonic() + timeout
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def _receive(self, deadline: float) -> dict:
        message = json.loads(self.ws.recv(timeout=max(0.01, deadline - time.monotonic())))
        if "method" in message:
            self.events.append(message)
            if message["method"] == "Page.javascriptDialogOpening":
                self.ws.send(json.dumps({"id": next(self.ids), "sessionId": self.session,
                                         "method": "Page.handleJavaScriptDialog",
                                         "params": {"accept": False}}))
        return message

    def wait_for(self, method: str, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            for event in self.events[seen:]:
                if event["method"] == method:
                    return event
            seen = len(self.events)
            self._receive(deadline)

    def js(self, expression: str):
        result = self.send("Runtime.evaluate", {"expression": expression,
                                                "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            raise AssertionError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(self, path: Path) -> float:
        """Load the page and wait until the viewer has drawn it; seconds it took."""
        started = time.monotonic()
        self.send("Page.navigate", {"url": path.resolve().as_uri()})
        self.wait_for("Page.loadEventFired", timeout=120)
        deadline = time.monotonic() + 60
        while not self.js("document.documentElement.dataset.rendered || ''"):
            assert not self.errors(), self.errors()
            assert time.monotonic() < deadline, "the viewer never finished drawing"
            time.sleep(0.02)
        return time.monotonic() - started

    def type_search(self, text: str) -> str:
        """Type into the search box as a user would; the hit line once the search ran."""
        self.js("document.getElementById('search').focus()")
        self.send("Input.insertText", {"text": text})
        deadline = time.monotonic() + 10
        while not (hits := self.js("document.getElementById('hits').textContent")):
            assert time.monotonic() < deadline, "search never answered"
            time.sleep(0.02)
        return hits

    def screenshot(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = self.send("Page.captureScreenshot", {"format": "png"})["data"]
        path.write_bytes(base64.b64decode(data))

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and log errors (CSP refusals among them)."""
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.exceptionThrown":
                out.append(json.dumps(p["exceptionDetails"])[:500])
            elif e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(json.dumps(p.get("args"))[:500])
            elif e["method"] == "Log.entryAdded" and p["entry"]["level"] == "error":
                out.append(p["entry"]["text"])
        return out

    def dialogs(self) -> list[dict]:
        return [e["params"] for e in self.events if e["method"] == "Page.javascriptDialogOpening"]

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            shutil.rmtree(self.profile, ignore_errors=True)


@pytest.fixture(scope="module")
def chromium():
    require(Path(CHROMIUM).exists(), f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    browser = Chromium()
    try:
        yield browser
    finally:
        browser.close()


@pytest.fixture
def browser(chromium):
    """The shared browser with a clean event list for this test."""
    chromium.events.clear()
    return chromium


def forge(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output.strip()


# What the page shows, read through the DOM: visible means laid out and not hidden.
def visible(selector: str, then: str) -> str:
    return (f"(() => [...document.querySelectorAll({json.dumps(selector)})]"
            f".filter((e) => e.getClientRects().length > 0).map({then}))()")


TREE = visible("#tree a", """(a) => { const r = a.getBoundingClientRect();
    return {id: a.firstChild.textContent, inView: r.top >= 0 && r.bottom <= innerHeight}; }""")
TOOL_CALLS = visible(".part.tool_call .label", "(e) => e.textContent")
RESULT_HITS = visible(".part.tool_result mark", "(m) => m.textContent")
SHOWN_CALLS = visible("article.call", "(a) => a.id")


@pytest.mark.parametrize("dialect", list(SESSIONS))
def test_recorded_session_in_chromium(dialect, browser, tmp_path_factory):
    url = recorded_store(tmp_path_factory.getbasetemp() / "recorded")
    session_id, _ = SESSIONS[dialect]
    page = tmp_path_factory.mktemp("view") / f"{dialect}.html"
    assert forge("view", session_id, "-o", str(page), "--store", url) == str(page)
    browser.open(page)
    assert browser.js("document.title") == f"forge-record · {session_id}"
    tree = browser.js(TREE)
    assert tree and tree[0] == {"id": "main", "inView": True}
    tools = browser.js(TOOL_CALLS)
    assert tools and tools[0].split()[:2] in (
        ["→", "Bash"], ["→", "exec_command"], ["→", "run_shell_command"]), tools
    all_calls = browser.js(SHOWN_CALLS)
    hits = browser.type_search(TOOL_OUTPUT)
    assert browser.js(RESULT_HITS)[:1] == [TOOL_OUTPUT], hits
    shown = browser.js(SHOWN_CALLS)
    assert shown and len(shown) < len(all_calls)  # calls without it are filtered out
    browser.screenshot(ARTIFACTS / f"view-{dialect}.png")
    assert browser.errors() == [] and browser.dialogs() == []


def test_recorded_script_tags_render_as_text(browser, tmp_path):
    url = f"sqlite:///{tmp_path / 'traces.db'}"
    session, exchanges = hostile_session()
    store_session(url, session, exchanges)
    page = tmp_path / "hostile.html"
    forge("view", session.id, "-o", str(page), "--store", url)
    browser.open(page)
    found = browser.js(f"""(() => {{
        const s = {json.dumps(HOSTILE)};
        const shown = [...document.querySelectorAll('.content')].filter((e) => e.textContent === s);
        return {{shown: shown.map((e) => e.closest('.part').className),
                 scripts: document.scripts.length, images: document.images.length,
                 pwned: window.__pwned === 1, title: document.title,
                 argv: [...document.querySelectorAll('#head .meta')].some(
                     (m) => m.textContent.includes(s)),
                 thread: !!document.getElementById('thread-subagent-<b>x</b>'),
                 bold: document.querySelectorAll('#main b').length ===
                       document.querySelectorAll('#main .call-head b, #main summary b').length}};
    }})()""")
    assert sorted(found["shown"]) == sorted(["part text", "part text", "part tool_result",
                                             "part text"])
    assert found["scripts"] == 2 and found["images"] == 0 and not found["pwned"]
    assert found["argv"] and found["thread"] and found["bold"]
    assert browser.type_search("</script>").startswith("3 of 3 calls match")
    browser.js("location.hash = 'q=' + encodeURIComponent('alert(2)')")  # a search link
    deadline = time.monotonic() + 10
    while browser.js("document.getElementById('search').value") != "alert(2)":
        assert time.monotonic() < deadline, "the #q= link did not search"
        time.sleep(0.02)
    assert browser.js("document.getElementById('hits').textContent").startswith("3 of 3")
    assert browser.dialogs() == [] and browser.errors() == []
    browser.screenshot(ARTIFACTS / "view-hostile.png")


# --- a large session, measured ----------------------------------------------------------


def large_session(n: int = 1000):
    """n calls shaped like a long Claude Code run: a main thread and subagents, each call a
    Bash call whose output comes back (every 7th a long one, repeated outputs common), a
    thinking block every 3rd, 40 tools and a 12 kB system prompt."""
    from viewer_sessions import exchange, result, said, user

    from forge_record.records import Reasoning, Text, Tool, ToolCall

    system = [Text(text="You are an interactive agent. " * 400)]
    tools = [Tool(name=f"tool_{i}", description=f"Tool number {i}. " * 20,
                  parameters={"type": "object", "properties": {f"arg{j}": {"type": "string"}
                                                               for j in range(8)}})
             for i in range(40)]
    exchanges, seq, t = [], 0, 1_800_000_000.0
    for thread in range(10):  # ten conversations of n/10 calls: main and nine subagents
        headers = {"x-claude-code-agent-id": f"agent{thread}"} if thread else {}
        history = [user(f"Task {thread}: fix the failing tests in module {thread}.")]
        for turn in range(n // 10):
            seq += 1
            command = f"pytest tests/test_{turn % 25}.py -q"
            blocks = [Text(text=f"Step {turn}: running {command} to see what fails.")]
            if turn % 3 == 0:
                blocks.insert(0, Reasoning(text=f"Thinking about step {turn}. " * 10))
            blocks.append(ToolCall(id=f"toolu_{seq}", name="Bash",
                                   arguments={"command": command}, arguments_raw=""))
            reply = said(*blocks)
            exchanges.append(exchange(seq, history, reply, start=t, headers=headers,
                                      system=system, tools=tools))
            output = (f"{turn % 25} passed" if turn % 7 else
                      "\n".join(f"tests/test_{turn % 25}.py::test_{k} PASSED" for k in range(60)))
            history = [*history, reply, result(f"toolu_{seq}", output)]
            t += 2.0
    return session_of(exchanges, session_id="1a49e00000000001"), exchanges


def test_a_thousand_call_session_opens_and_searches(browser, tmp_path):
    session, exchanges = large_session(1000)
    started = time.perf_counter()
    view = build_view(session, exchanges)
    built = time.perf_counter() - started
    page = render_html(view)
    rendered = time.perf_counter() - started - built
    path = tmp_path / "large.html"
    path.write_text(page, encoding="utf-8")
    opened = browser.open(path)
    assert browser.js("document.querySelectorAll('article.call').length") == 1000
    assert len(browser.js(TREE)) == 10
    drawn_ms = browser.js("performance.getEntriesByName('forge-record-rendered')[0].startTime")
    painted_ms = browser.js("performance.getEntriesByName('first-contentful-paint')[0]?.startTime")
    search_ms = browser.js("""(() => { const box = document.getElementById('search');
        box.value = 'test_17.py::test_59'; const t = performance.now();
        box.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter'}));
        return performance.now() - t; })()""")
    hits = browser.js("document.getElementById('hits').textContent")
    assert hits.startswith("10 of 1000 calls match"), hits  # turn 17 of each conversation
    assert browser.errors() == []
    browser.screenshot(ARTIFACTS / "view-1000-calls.png")
    packed = pack(view)
    measured = {
        "calls": 1000, "html_bytes": len(page.encode()),
        "html_bytes_without_string_table": len(script_safe_json(_unshared(packed))),
        "unique_strings": len(packed["strings"]),
        "build_view_s": round(built, 3), "render_html_s": round(rendered, 3),
        "chromium_open_to_drawn_s": round(opened, 3),
        "chromium_drawn_at_ms": round(drawn_ms),
        "chromium_first_contentful_paint_ms": painted_ms and round(painted_ms),
        "chromium_search_ms": round(search_ms),
    }
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "view-measurements.json").write_text(json.dumps(measured, indent=2))
    print("\nview, 1,000 calls:", json.dumps(measured))


def _unshared(packed: dict):
    """The packed view with every string index replaced by its string (no table)."""
    strings = packed["strings"]

    def walk(value, key=None):
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items() if k != "strings"}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if key in INTERNED and isinstance(value, int):
            return strings[value]
        return value

    return walk(packed)
