"""The bare baseline proxy, in a process of its own (so it never shares a GIL with the client).

    python bench/proxy_server.py --kind bare|lean|buffered --mode reverse|forward \\
        --upstream http://127.0.0.1:PORT --confdir DIR

It runs on the code path forge-record's own proxy runs on: forge_record.addons.proxy.
InProcessProxy (one mitmproxy master with its default addons and the same options, on a
thread), with bench/passthrough.py as the only addon instead of the recorder. bare streams
every response through with all of mitmproxy's stock addons, as mitmdump runs; lean does the
same with only the stock addons forge-record's proxy keeps (see addons/proxy.py), so that
bare - lean is what trimming them saves and lean - forge what recording costs; buffered keeps
mitmproxy's default, which buffers whole responses (to show what the latency benchmark's
`streamed` check catches). Reverse mode proxies to
the upstream; forward mode is a regular proxy that intercepts TLS and sends
api.anthropic.com's requests to the upstream, as `forge-record run --upstream` does.

Prints `listening <port>`, then serves until its stdin closes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from passthrough import PassThrough  # noqa: E402

from forge_record.addons.proxy import InProcessProxy  # noqa: E402

MODEL_HOST = "api.anthropic.com"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kind", choices=["bare", "lean", "buffered"], required=True)
    p.add_argument("--mode", choices=["reverse", "forward"], required=True)
    p.add_argument("--upstream", required=True)
    p.add_argument("--confdir", type=Path, required=True)
    args = p.parse_args()
    stream = args.kind != "buffered"
    if args.mode == "reverse":
        mitm_mode, addon = f"reverse:{args.upstream}", PassThrough(stream=stream)
    else:
        mitm_mode, addon = "regular", PassThrough({MODEL_HOST: args.upstream}, stream=stream)
    args.confdir.mkdir(parents=True, exist_ok=True)
    proxy = InProcessProxy(addon, mode=mitm_mode, confdir=args.confdir,
                           stock_addons=args.kind != "lean")
    print(f"listening {proxy.start()}", flush=True)
    try:
        sys.stdin.read()
    finally:
        proxy.stop()


if __name__ == "__main__":
    main()
