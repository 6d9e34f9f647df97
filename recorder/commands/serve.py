"""`forge-record serve`: the recorder as a long-running gateway for many rollout sessions.

    forge-record serve --store URL --upstream URL [--upstream URL ...] --admin-token-file F
                       [--listen 127.0.0.1:8080] [--public-url URL] [--upstream-key-file F]
                       [--engine auto|vllm|sglang|none] [--top-logprobs N]
                       [--engine-model NAME] [--engine-param K=V ...]

The same in-process mitmproxy, recording addons and writer process as `forge-record run`, in
reverse mode, with forge_record.addons.gateway in front (docs/ROLLOUTS.md). It listens on
127.0.0.1 unless `--listen` says otherwise. It refuses to start, with one line, when the store
cannot be opened, no upstream is given, or a token file is missing or empty.

`--engine` (default `auto`: the upstreams are probed once at start, forge_record.engine_probe)
makes Chat Completions, Completions and SGLang `/generate` calls ask the engine for its token
ids and logprobs, as `run --engine` does (docs/ENGINES.md); each session is tagged with the
engine's name and version.

SIGTERM (and Ctrl-C) drains: the listener closes (new connections are refused, so a balancer
sends them elsewhere), a new call on a connection kept open gets 503, calls in flight
(streams and WebSockets included) run to their end (at most `--drain-timeout` seconds), the
exchanges are numbered and the writer process writes them all, then it exits 0.
"""

from __future__ import annotations

import gc
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import click

from forge_record import trust
from forge_record.commands.common import engine_options, setup_logging, store_option
from forge_record.errors import UsageError
from forge_record.paths import home, store_url

DEFAULT_LISTEN = "127.0.0.1:8080"
# A Codex call naming a response that went through another replica: how long this replica's
# writer waits for that replica's writer to store it (store.responses) before flagging it.
CHAIN_WAIT = 5.0


@click.command()
@store_option
@click.option("--listen", default=DEFAULT_LISTEN, show_default=True, metavar="HOST:PORT",
              help="Where to listen (port 0: a free one). Loopback unless told otherwise.")
@click.option("--upstream", "upstreams", multiple=True, metavar="URL",
              help="A model server or provider API to forward to. Repeatable: a session's "
              "calls stick to one (hash of its id); unhealthy ones are skipped.")
@click.option("--admin-token-file", type=click.Path(dir_okay=False), required=True,
              help="File holding the control API's bearer token (also the secret session "
              "tokens are derived from).")
@click.option("--upstream-key-file", type=click.Path(dir_okay=False),
              help="File holding the API key to send upstream in place of session tokens "
              "(default: no key is sent).")
@click.option("--public-url", metavar="URL",
              help="How rollouts reach this gateway (e.g. the Kubernetes Service URL); "
              "sessions' base URLs start with it. Default: http://LISTEN.")
@click.option("--drain-timeout", type=float, default=60.0, show_default=True,
              help="On SIGTERM, how long calls in flight may take to end.")
@click.option("--engine", type=click.Choice(["auto", "vllm", "sglang", "none"]), default="auto",
              show_default=True,
              help="The upstreams are this engine: calls ask it for token ids and logprobs, "
              "recorded and kept from the agent. auto: probe the upstreams once at start.")
@click.option("--top-logprobs", type=click.IntRange(0, 20), default=0, show_default=True,
              help="With an engine: alternatives recorded per sampled token.")
@engine_options
@click.option("--log-calls", is_flag=True, help="Write one JSON line per call to stderr.")
@click.option("--no-redact-bodies", is_flag=True, help="Keep secrets found inside bodies.")
@click.option("-v", "--verbose", count=True, help="Log what the gateway does (-vv: more).")
def serve(store, listen, upstreams, admin_token_file, upstream_key_file, public_url,
          drain_timeout, engine, top_logprobs, engine_model, engine_params, log_calls,
          no_redact_bodies, verbose) -> None:
    """Record many rollout sessions as a shared reverse-proxy gateway."""
    setup_logging(verbose)
    host, port = parse_listen(listen)
    if not upstreams:
        raise UsageError("give at least one --upstream URL (a model server or provider API)")
    from forge_record.gateway.upstreams import Upstreams

    try:
        ups = Upstreams(list(upstreams))
    except ValueError as e:
        raise UsageError(str(e)) from None
    admin = read_secret(admin_token_file, "--admin-token-file")
    key = read_secret(upstream_key_file, "--upstream-key-file") if upstream_key_file else None
    run_gateway(store_url(store), ups, host, port, admin_token=admin, upstream_key=key,
                public_url=public_url, drain_timeout=drain_timeout, log_calls=log_calls,
                redact=not no_redact_bodies, verbose=verbose,
                engine=EngineSetting(engine, top_logprobs, engine_model, engine_params))


@dataclass(frozen=True)
class EngineSetting:
    """`--engine` (auto, vllm, sglang, none), `--top-logprobs`, `--engine-model` and
    `--engine-param`."""

    choice: str = "none"
    top_logprobs: int = 0
    model: str | None = None
    params: dict = field(default_factory=dict)

    def resolve(self, urls: list[str]) -> tuple[str | None, str | None, dict[str, str]]:
        """(the engine the gateway asks for tokens, or None; the model bridged calls ask it
        for; its sessions' tags), after one probe of the upstreams (forge_record.engine_probe)."""
        from forge_record import engine_probe

        name, found = engine_probe.resolve(self.choice, urls, _say)
        model = (self.model or engine_probe.served_model(urls, found)) if name else None
        return name, model, engine_probe.session_tags(name, found)


def _say(line: str) -> None:
    click.echo(f"forge-record serve: {line}", err=True)


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise UsageError(f"--listen wants HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def read_secret(path: str, option: str) -> str:
    try:
        value = Path(path).read_text().strip()
    except OSError as e:
        raise UsageError(f"cannot read {option} {path}: {e.strerror or e}") from None
    if not value:
        raise UsageError(f"{option} {path} is empty")
    return value


def run_gateway(url: str, ups, host: str, port: int, *, admin_token: str,
                upstream_key: str | None, public_url: str | None, drain_timeout: float,
                log_calls: bool = False, redact: bool, verbose: int,
                engine: EngineSetting | None = None) -> None:
    from forge_record.addons.gateway import GatewayAddon
    from forge_record.addons.proxy import InProcessProxy
    from forge_record.addons.recorder import Recorder
    from forge_record.addons.websocket import WebSocketRecorder
    from forge_record.gateway.metrics import Metrics
    from forge_record.gateway.service import Gateway
    from forge_record.store import open_store
    from forge_record.writer_process import WriterProcess

    store = open_store(url)  # an unreachable store: one line, before anything starts
    writer = WriterProcess(url, redact_bodies=redact, verbose=verbose, chain_wait=CHAIN_WAIT,
                           number_calls=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    proxy = None
    gateway = None
    try:
        writer.ready()
        gateway = Gateway(store, writer, ups, admin_token=admin_token,
                          public_url=public_url or "", upstream_key=upstream_key)
        writer.on_closed = gateway.closed  # sessions its numbering finds finished elsewhere
        engine = engine or EngineSetting()
        # once the store is known to answer, before the proxy runs: no call waits on it
        engine_name, engine_model, gateway.engine_tags = engine.resolve(
            [u.url for u in ups.all])
        metrics = Metrics(writer.unsettled, lambda: len(writer._backlog),
                          lambda: writer.failed + writer.dropped)
        # Calls without a session never reach a sink; those with one carry their own.
        recorder = Recorder(_unowned, record_any_host=True, engine=engine_name,
                            top_logprobs=engine.top_logprobs, engine_model=engine_model,
                            engine_params=engine.params)
        addon = GatewayAddon(gateway, WebSocketRecorder(recorder), metrics, log_calls)
        proxy = InProcessProxy(addon, mode=f"reverse:{ups.all[0].url}",
                               confdir=trust.confdir(home()), listen=(host, port),
                               verbose=verbose > 1)
        bound = proxy.start()
        shown = host if host not in ("0.0.0.0", "::") else socket.gethostname()
        gateway.public_url = (public_url or f"http://{shown}:{bound}").rstrip("/")
        gc.collect()
        gc.freeze()
        click.echo(f"forge-record serve: listening on http://{host}:{bound} "
                   f"({len(ups.all)} upstream{'s' if len(ups.all) != 1 else ''}, "
                   f"store {store.url})", err=True)
        stop.wait()
        click.echo("forge-record serve: draining", err=True)
        gateway.draining = True
        proxy.stop_listening()
        deadline = time.monotonic() + drain_timeout
        while addon.inflight > 0 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        if proxy is not None:
            proxy.stop()
        if gateway is not None:
            gateway.close()  # every exchange numbered and in the writer's pipe
        writer.close()
        store.close()
    left = " · ".join(f"{n} {what}" for n, what in (
        (writer.spooled, "spooled"), (writer.dropped + writer.failed, "NOT stored")) if n)
    click.echo("forge-record serve: stopped" + (f" · {left}" if left else ""), err=True)


def _unowned(exchange) -> None:
    """A call that no session owns (refused before forwarding) is not recorded."""
