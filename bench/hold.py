"""The "agent" that `forge-record run` launches in the benchmarks: it only holds the proxy open.

It prints `listening <port> <ca> <url>` (the port of the proxy `forge-record run` gave it, taken
from ANTHROPIC_BASE_URL in reverse mode or HTTPS_PROXY in forward mode; `<ca>` is the CA
certificate to trust in forward mode, `-` in reverse mode; `<url>` that variable whole, with
the run's secret that the proxy asks for: addons/access.py), then waits until its stdin
closes, and exits 0. `forge-record run` then stops the proxy, writes what is queued and
exits: exactly what happens when a real agent exits.
"""

import os
import sys
from urllib.parse import urlsplit

proxy = os.environ.get("HTTPS_PROXY") or os.environ["ANTHROPIC_BASE_URL"]
ca = os.environ.get("NODE_EXTRA_CA_CERTS", "-") if os.environ.get("HTTPS_PROXY") else "-"
print(f"listening {urlsplit(proxy).port} {ca} {proxy}", flush=True)
sys.stdin.read()
