"""The bare baseline: a mitmproxy addon that only passes responses through as they stream.

`PassThrough` sets `flow.response.stream = True` in `responseheaders` (what every
"don't buffer" mitmproxy setup does) and, in forward mode, sends requests for the given hosts
to the mock, the way forge-record's `--upstream` does, so both proxies do the same routing
work. With `stream=False` it leaves mitmproxy's default, which buffers the whole response.

Loadable by `mitmdump -s bench/passthrough.py` too (reverse mode, streaming): `addons` below.
"""

from __future__ import annotations

from urllib.parse import urlsplit


class PassThrough:
    def __init__(self, upstreams: dict[str, str] | None = None, stream: bool = True) -> None:
        self.upstreams = {h: urlsplit(u) for h, u in (upstreams or {}).items()}
        self.stream = stream

    def request(self, flow) -> None:
        target = self.upstreams.get(flow.request.pretty_host)
        if target is not None:
            flow.request.scheme = target.scheme
            flow.request.host = target.hostname
            flow.request.port = target.port or 80

    def responseheaders(self, flow) -> None:
        if self.stream:
            flow.response.stream = True


addons = [PassThrough()]
