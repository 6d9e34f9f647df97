"""Logging set-up shared by the CLI and the writer process: forge-record's messages, one
line each, on stderr, at WARNING unless -v (INFO) or -vv (DEBUG)."""

from __future__ import annotations

import logging


def setup_logging(verbose: int) -> None:
    level = logging.DEBUG if verbose > 1 else logging.INFO if verbose else logging.WARNING
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("forge_record")
    logger.handlers[:] = [handler]
    logger.setLevel(level)
    logger.propagate = False
    if verbose > 1:  # -vv: mitmproxy's own log too (the proxy sets its level)
        mitm_handler = logging.StreamHandler()
        mitm_handler.setFormatter(logging.Formatter("mitmproxy: %(message)s"))
        mitm = logging.getLogger("mitmproxy")
        mitm.handlers[:] = [mitm_handler]
        mitm.propagate = False
