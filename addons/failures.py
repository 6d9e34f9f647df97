"""An upstream that fails reaches the agent as the failure it is, not as a proxy's error page.

When the upstream connection cannot be made (refused, unreachable, TLS refused) or ends
before a response (a reset, a close), mitmproxy answers the agent itself with a `502 Bad
Gateway` HTML page. A direct call sees a connection error instead, and SDKs treat the two
differently: a 502 is an API error that names a status page, a connection error is retried
or reported as "unable to connect". So when a flow errs on the upstream side before any
response arrived, this addon kills it: mitmproxy then closes the agent's connection without a
word, and the agent's HTTP client reports the connection failure (a close where the direct
call saw a reset or a refusal: both are connection errors to every SDK; see
docs/RELIABILITY.md). A failure after the response started needs nothing: the response
already streams through, and the cut reaches the agent as it came.

It runs after the recorder (InProcessProxy's addon order), which has read the cause by then.
"""

from __future__ import annotations

from mitmproxy import http
from mitmproxy.connection import ConnectionState


def upstream_failed(flow: http.HTTPFlow) -> bool:
    """Whether a flow's error came from the upstream side: the agent's connection is still
    open both ways, so it is not the agent that hung up."""
    return flow.error is not None and flow.client_conn.state == ConnectionState.OPEN


class UpstreamFailures:
    def error(self, flow: http.HTTPFlow) -> None:
        if flow.response is None and upstream_failed(flow) and flow.killable:
            flow.kill()  # no 502 page: the agent's connection is closed instead
