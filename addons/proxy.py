"""mitmproxy, run in-process on a thread of its own.

`forge-record run` needs the proxy beside the agent it launches, not as a second program:
`InProcessProxy` starts a mitmproxy master with the recorder addon on 127.0.0.1 (port 0 picks
a free one), returns once it listens, and shuts it down on `stop()`. The master's event loop
lives on its own thread, so the main thread stays free to wait on the agent and its signals.

mitmproxy runs every hook through every addon of its chain, and each flow raises several hooks,
each twice (the hook, then `update`): with its ~30 stock addons that walk is a fifth of the
proxy's CPU per small exchange (bench/profile_proxy.py). Most stock addons do nothing unless
an option of theirs is set (map_remote, save_stream_file, scripts, ...), so the proxy loads
only the ones it always needs (NEEDED) and those whose options `--set` sets.
`stock_addons=True` loads all of them, which is how the benchmarks run bare mitmproxy.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path

from mitmproxy import addons as mitm_addons
from mitmproxy import master, options
from mitmproxy.addons import core, disable_h2c, next_layer, proxyserver, tlsconfig, update_alt_svc

from forge_record.addons.access import Access
from forge_record.addons.failures import UpstreamFailures
from forge_record.addons.loopback import LoopbackOnly, is_loopback
from forge_record.errors import ForgeRecordError

# Stock addons that act whatever the options say: option handling, the servers, protocol
# detection, TLS, h2c upgrades refused, reverse-mode Alt-Svc rewritten. Among those left out
# unless `--set` sets an option of theirs: Block, whose job (refusing non-local clients)
# LoopbackOnly does more strictly, and Onboarding (the mitm.it page; forge-record installs
# its CA itself). ProxyAuth is loaded through its option, which `access` sets.
NEEDED = (core.Core, proxyserver.Proxyserver, next_layer.NextLayer, tlsconfig.TlsConfig,
          disable_h2c.DisableH2C, update_alt_svc.UpdateAltSvc)


def stock_addons(settings: dict[str, str], *, all_of_them: bool = False) -> list[object]:
    """mitmproxy's default addons: those in NEEDED, and the others only if `settings` sets one
    of their options (or `all_of_them`)."""
    out = []
    for addon in mitm_addons.default_addons():
        if all_of_them or isinstance(addon, NEEDED) or _options_of(addon) & settings.keys():
            out.append(addon)
    return out


class _OptionNames:
    """A stand-in for mitmproxy's addon Loader that only notes which options an addon adds
    (the stock addons' `load` declares options and commands, nothing else)."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def add_option(self, name: str, *args: object, **kwargs: object) -> None:
        self.names.add(name)

    def add_command(self, *args: object, **kwargs: object) -> None:
        pass


def _options_of(addon: object) -> set[str]:
    loader = _OptionNames()
    if load := getattr(addon, "load", None):
        load(loader)
    return loader.names


class _Ready:
    """Signals the starting thread once mitmproxy's servers are up (or failed)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.addresses: list[tuple] = []

    def running(self) -> None:
        from mitmproxy import ctx

        self.addresses = ctx.master.addons.get("proxyserver").listen_addrs()
        self.event.set()


class _DropCancelledCallbacks(logging.Filter):
    """asyncio on Python 3.12 logs a CancelledError traceback for every client connection
    still open when mitmproxy shuts down ("Exception in callback ...connection_made").
    Those are the agent's idle keep-alive sockets, nothing went wrong: keep them off the
    user's terminal."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else record.__dict__.get("exception")
        return not isinstance(exc, asyncio.CancelledError)


class InProcessProxy:
    def __init__(
        self,
        addon: object,
        *,
        mode: str,
        confdir: Path,
        settings: dict[str, str] | None = None,
        verbose: bool = False,
        stock_addons: bool = False,
        access: Access | None = None,
        listen: tuple[str, int] = ("127.0.0.1", 0),
    ) -> None:
        """`mode` is a mitmproxy mode spec ("regular" or "reverse:https://host"); `settings`
        are extra mitmproxy options given as strings (from `--set`); `stock_addons` keeps
        every default mitmproxy addon, idle or not; `access`: serve only clients that hold
        its secret (addons/access.py; `forge-record run` always gives one). `listen` is
        (host, port); only a loopback host refuses clients from elsewhere (`forge-record
        serve --listen` widens it on purpose: there the session tokens are the gate)."""
        self.listen = listen
        self.addon = addon
        self.mode = mode
        self.confdir = confdir
        # The run's own credentials win over a `--set proxyauth=...`: the agent has those.
        self.access = access
        self.settings = {**(settings or {}), **(access.settings(mode) if access else {})}
        self.verbose = verbose
        self.stock_addons = stock_addons
        self._ready = _Ready()
        self._thread: threading.Thread | None = None
        self._master: master.Master | None = None
        self._startup_error: BaseException | None = None

    def start(self, timeout: float = 15.0) -> int:
        """Start the proxy; return the port it listens on."""
        logging.getLogger("mitmproxy").setLevel(logging.INFO if self.verbose else logging.ERROR)
        for name in ("asyncio", "mitmproxy.master"):
            logger = logging.getLogger(name)  # filters apply per logger, not to children
            if not any(isinstance(f, _DropCancelledCallbacks) for f in logger.filters):
                logger.addFilter(_DropCancelledCallbacks())
        self._thread = threading.Thread(target=self._run, name="forge-record-proxy", daemon=True)
        self._thread.start()
        if not self._ready.event.wait(timeout):
            raise ForgeRecordError(f"the proxy did not start within {timeout:.0f}s")
        if self._startup_error is not None:
            raise ForgeRecordError(f"cannot start the proxy: {self._startup_error}")
        if not self._ready.addresses:
            port = self.settings.get("listen_port", self.listen[1] or "a free port")
            raise ForgeRecordError(f"the proxy could not listen on {self.listen[0]} ({port}); "
                                   "is the port in use?")
        return self._ready.addresses[0][1]

    def stop_listening(self, timeout: float = 10.0) -> None:
        """Close the listening sockets and keep the connections already open: a drain. New
        connections are refused (a balancer sees the replica gone); calls in flight, streams
        and WebSockets included, go on to their end."""
        if self._master is None:
            return
        servers = self._master.addons.get("proxyserver").servers
        done = asyncio.run_coroutine_threadsafe(servers.update([]), self._master.event_loop)
        done.result(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        if self._master is not None:
            self._master.shutdown()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as e:  # noqa: BLE001 - report to the starting thread
            self._startup_error = e
            self._ready.event.set()

    async def _main(self) -> None:
        opts = options.Options()
        m = master.Master(opts, event_loop=asyncio.get_running_loop(), with_termlog=False)
        m.addons.add(*stock_addons(self.settings, all_of_them=self.stock_addons))
        # UpstreamFailures after the recorder: it reads a failed flow's cause first.
        # Access checks come first (ProxyAuth is a stock addon, loaded when its option is set).
        guards = [LoopbackOnly()] if is_loopback(self.listen[0]) else []
        guards += self.access.addons(self.mode) if self.access else []
        m.addons.add(*guards, self.addon, UpstreamFailures(), self._ready)
        try:
            opts.update(
                listen_host=self.listen[0],
                listen_port=self.listen[1],
                mode=[self.mode],
                confdir=str(self.confdir),
                # Connect upstream only when a request needs it: offline hosts and
                # redirected hosts must not be dialled when a client merely opens a tunnel.
                connection_strategy="lazy",
            )
            opts.set(*(f"{k}={v}" for k, v in self.settings.items()))
        except Exception as e:
            raise ForgeRecordError(f"bad proxy option: {e}") from e
        self._master = m
        await m.run()

