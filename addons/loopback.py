"""Refuse clients that are not on this machine.

The proxy sees every key and every file an agent sends, so it listens on 127.0.0.1. If a
user widens that with `--set listen_host=...`, forge-record warns, and this addon still closes
every connection whose peer is not a loopback address.
"""

from __future__ import annotations

import ipaddress
import logging

from mitmproxy import connection, ctx

log = logging.getLogger("forge_record")


def is_loopback(host: str) -> bool:
    try:
        address = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return host == "localhost"
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    return address.is_loopback


class LoopbackOnly:
    def running(self) -> None:
        host = ctx.options.listen_host
        if host and not is_loopback(host):
            log.warning("forge-record: the proxy listens on %s; it still refuses every client "
                        "that is not on this machine", host)

    def client_connected(self, client: connection.Client) -> None:
        if not is_loopback(client.peername[0]):
            client.error = "forge-record accepts loopback clients only"
            log.warning("forge-record: refused a client from %s", client.peername[0])
