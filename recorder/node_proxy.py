"""Whether a Node program's built-in `fetch` goes through HTTPS_PROXY.

Node's own `fetch` ignores the proxy variables unless NODE_USE_ENV_PROXY=1 (or
`--use-env-proxy`) is set, and it reads that variable only from Node 22.21 in the 22 line and
from Node 24.0 on (Node's cli.md: "NODE_USE_ENV_PROXY=1, added: v24.0.0, v22.21.0"; the
`--use-env-proxy` flag and proxying in `http.request` came later, in 24.5). On an older Node a
program that relies on it talks to its model host directly in forward mode, so nothing is
recorded; programs that install a proxy-aware dispatcher themselves (Gemini CLI, Qwen Code,
pi) and Bun (Claude Code, opencode) are not affected.

`run` and `doctor` use this to say so; nothing here changes a run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping

_VERSION = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")


def fetch_honours_env_proxy(version: tuple[int, int, int]) -> bool:
    """Whether Node `version` reads NODE_USE_ENV_PROXY for its built-in fetch."""
    major, minor = version[:2]
    return major >= 24 or (major == 22 and minor >= 21)


def node_version(environ: Mapping[str, str]) -> tuple[int, int, int] | None:
    """The version of the `node` on PATH, or None when there is none (or it does not answer)."""
    node = shutil.which("node", path=environ.get("PATH"))
    if node is None:
        return None
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=10,
                             stdin=subprocess.DEVNULL, env=dict(environ)).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = _VERSION.match(out.strip())
    return tuple(int(g) for g in match.groups()) if match else None  # type: ignore[return-value]


def is_node_program(executable: str) -> bool:
    """Whether `executable` is node itself or a script whose shebang runs node."""
    if os.path.basename(executable) in ("node", "nodejs"):
        return True
    try:
        with open(executable, "rb") as f:
            first = f.readline(256)
    except OSError:
        return False
    return first.startswith(b"#!") and b"node" in first


def describe(version: tuple[int, int, int]) -> str:
    return "v" + ".".join(map(str, version))
