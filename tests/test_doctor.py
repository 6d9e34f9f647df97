"""`forge-record doctor`: what it tells about a run, and its offline self-test, for real.

The self-test starts the proxy and a mock API on 127.0.0.1 and sends requests through it in
both modes (and a Node TLS handshake when node is installed); nothing here reaches the network.
"""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from forge_record.commands.doctor import _file_check

FORGE = str(Path(sys.executable).with_name("forge-record"))


def doctor(tmp_path, *args, **environ) -> subprocess.CompletedProcess:
    env = {**os.environ, "FORGE_RECORD_HOME": str(tmp_path / "home"), **environ}
    for var in ("GOOGLE_GEMINI_BASE_URL", "HTTPS_PROXY", "https_proxy"):
        if var not in environ:
            env.pop(var, None)
    return subprocess.run([FORGE, "doctor", *args], env=env, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)


def test_self_test_passes_offline(tmp_path):
    proc = doctor(tmp_path, "--harness", "gemini-cli")
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "harness: gemini-cli" in out and "mode: forward (auto)" in out
    assert "  NODE_EXTRA_CA_CERTS=" in out
    assert "  HTTPS_PROXY=http://forge:<token>@127.0.0.1:<port>" in out
    for line in ("ok   forward mode: reply unchanged: TLS trusted with the Python bundle",
                 "ok   forward mode: recorded: gemini.generate complete",
                 "ok   forward mode: other clients refused: without the run's proxy "
                 "credentials: Tunnel connection failed: 407 Proxy Authentication Required",
                 "ok   reverse mode: other clients refused: without the run's secret path: "
                 "403 Forbidden",
                 "ok   reverse mode: reply unchanged",
                 "ok   reverse mode: recorded: gemini.generate complete",
                 "ok   Python (httpx, requests): SSL_CERT_FILE: "):
        assert line in out, line
    if shutil.which("node"):
        assert "ok   forward mode: Node trust: TLS handshake verified" in out
    assert out.rstrip().endswith("result: OK")


def test_reverse_mode_needs_no_ca(tmp_path):
    proc = doctor(tmp_path, "--no-self-test", "--", "gemini", "-p", "hi",
                  GOOGLE_GEMINI_BASE_URL="https://gw.example/gemini")
    assert "mode: reverse (auto)" in proc.stdout
    assert "  GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:<port>/<token>" in proc.stdout
    assert "-    not needed" in proc.stdout


def test_reverse_mode_shows_codexs_override(tmp_path):
    codex_home = tmp_path / "codex-home"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(
        'model_provider = "gw"\n[model_providers.gw]\nbase_url = "https://gw.example/oa/v1"\n')
    proc = doctor(tmp_path, "--no-self-test", "--harness", "codex", "--mode", "reverse", "--",
                  "codex", "exec", "hi", CODEX_HOME=str(codex_home))
    assert "mode: reverse" in proc.stdout, proc.stderr
    base = "http://127.0.0.1:<port>/<token>/oa/v1"
    assert f"  codex -c 'model_providers.gw.base_url=\"{base}\"' exec hi" in proc.stdout


def test_missing_command_is_a_problem(tmp_path):
    proc = doctor(tmp_path, "--no-self-test", "--", "no-such-agent-xyz")
    assert proc.returncode == 1
    assert "FAIL command no-such-agent-xyz: command not found" in proc.stdout
    assert "harness: generic" in proc.stdout and "GOOSE_CA_CERT_PATH=" in proc.stdout
    assert proc.stdout.rstrip().endswith("result: problems found")


def test_impossible_mode_is_a_one_line_error(tmp_path):
    proc = doctor(tmp_path, "--no-self-test", "--harness", "goose", "--mode", "reverse")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "use --mode forward" in proc.stderr.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    from mitmproxy.certs import CertStore

    from forge_record.trust import ca_files, confdir

    conf = confdir(tmp_path_factory.mktemp("home"))
    CertStore.from_store(conf, "mitmproxy", 2048)
    return ca_files(conf)


def test_trust_checks_can_fail(ca, tmp_path):
    ours = ssl.PEM_cert_to_DER_cert(Path(ca.cert).read_text())
    assert _file_check(ca.bundle, ours, replaces=True)[0]
    assert _file_check(ca.cert, ours, replaces=False)[0]
    ok, why = _file_check(ca.cert, ours, replaces=True)  # the CA alone replacing the store
    assert not ok and "every other host would fail" in why
    system_only = tmp_path / "system.pem"
    system_only.write_text(Path(ca.bundle).read_text().rpartition("-----BEGIN")[0])
    ok, why = _file_check(str(system_only), ours, replaces=True)
    assert not ok and "does not hold the forge-record CA" in why
    assert not _file_check(str(tmp_path / "missing.pem"), ours, replaces=False)[0]


def fake_node(tmp_path, version: str) -> str:
    """A PATH whose `node` answers `--version` with `version`, and a Node script `agent`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    node = bin_dir / "node"
    node.write_text(f"#!/bin/sh\necho {version}\n")
    agent = bin_dir / "agent"
    agent.write_text("#!/usr/bin/env node\nfetch('https://api.openai.com/v1/models')\n")
    for f in (node, agent):
        f.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


@pytest.mark.parametrize(("version", "mark"), [
    ("v20.20.2", "FAIL"), ("v22.20.0", "FAIL"), ("v23.11.0", "FAIL"),
    ("v22.21.0", "ok  "), ("v24.0.0", "ok  "), ("v25.1.0", "ok  ")])
def test_node_fetch_proxy_support_is_checked(tmp_path, version, mark):
    """The generic harness relies on NODE_USE_ENV_PROXY for Node's built-in fetch, which Node
    reads from 22.21 (22.x) and 24.0 on: an older Node running the command fails the check."""
    proc = doctor(tmp_path, "--no-self-test", "--", "agent", PATH=fake_node(tmp_path, version))
    assert f"  {mark} Node {version} built-in fetch: " in proc.stdout, proc.stdout
    assert proc.returncode == (1 if mark == "FAIL" else 0)


def test_old_node_is_a_warning_when_the_command_may_not_use_it(tmp_path):
    proc = doctor(tmp_path, "--no-self-test", "--", "true", PATH=fake_node(tmp_path, "v20.20.2"))
    assert "  warn Node v20.20.2 built-in fetch: ignores HTTPS_PROXY" in proc.stdout
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith("result: OK (1 warning above)")


def test_harnesses_with_their_own_proxy_agent_need_no_node_check(tmp_path):
    proc = doctor(tmp_path, "--no-self-test", "--harness", "pi", "--", "agent",
                  PATH=fake_node(tmp_path, "v20.20.2"))
    assert "built-in fetch" not in proc.stdout and proc.returncode == 0


def test_the_harness_line_says_where_the_harness_came_from(tmp_path):
    """Only a given --harness is "from --harness" (issue 18)."""
    said = {}
    for name, args in (("none", ()), ("unknown", ("--", "no-such-agent-xyz")),
                       ("given", ("--harness", "codex")), ("named", ("--", "gemini", "-p", "x"))):
        out = doctor(tmp_path, "--no-self-test", *args).stdout
        said[name] = next(line for line in out.splitlines() if line.startswith("harness: "))
    assert said["given"] == "harness: codex (from --harness)"
    assert said["named"] == "harness: gemini-cli (from the command name)"
    assert "--harness" not in said["unknown"].replace("no --harness", "")
    assert said["none"] == "harness: generic (the default: no --harness and no command)"
    assert said["unknown"] == "harness: generic (no known CLI in the command)"
