"""`forge-record run [OPTIONS] -- CMD [ARGS...]`: run an agent CLI and record its model calls."""

from __future__ import annotations

import gc
import getpass
import os
import secrets
import socket
import sys
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import click

from forge_record import config, harness_shims, launch, trust
from forge_record.commands.common import key_value, open_store, setup_logging, store_option
from forge_record.errors import StoreError, UsageError
from forge_record.harness_shims import Shim
from forge_record.paths import home, store_url
from forge_record.records import Exchange, Session
from forge_record.redact.argv import mask_argv


@click.command(context_settings={"ignore_unknown_options": True})
@store_option
@click.option(
    "--mode",
    type=click.Choice(["auto", "forward", "reverse"]),
    default="auto",
    show_default=True,
    help="reverse: point the CLI's base-URL variable at the proxy; forward: HTTPS_PROXY + "
    "CA trust, intercepting model hosts only; auto: the harness's default.",
)
@click.option("--harness", metavar="NAME", help="Harness shim to use (default: from CMD).")
@click.option(
    "--upstream",
    multiple=True,
    callback=key_value,
    metavar="HOST=URL",
    help="Send traffic for model API HOST to URL instead (a gateway, a local server). "
    "Repeatable.",
)
@click.option("--tag", multiple=True, callback=key_value, metavar="K=V", help="Tag the session.")
@click.option(
    "--set", "settings", multiple=True, callback=key_value, metavar="OPTION=VALUE",
    help="Set a mitmproxy option. Repeatable.",
)
@click.option(
    "--no-redact-bodies", is_flag=True,
    help="Keep secrets found inside bodies (API keys, tokens, private keys, PASSWORD=...). "
    "Headers and URL keys are redacted regardless.",
)
@click.option("--gateway", metavar="URL",
              help="Record at this `forge-record serve` gateway instead of a local proxy: "
              "the session is created there and finished with CMD's exit code.")
@click.option("--gateway-token-file", metavar="FILE",
              help="The gateway's admin token [default: env FORGE_RECORD_GATEWAY_TOKEN].")
@click.option("--meta", multiple=True, callback=key_value, metavar="K=V",
              help="With --gateway: session metadata (task_id, group_id, attempt, ...).")
@click.option("-v", "--verbose", count=True, help="Log what the recorder does (-vv: more).")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(store, mode, harness, upstream, tag, settings, no_redact_bodies, gateway,
        gateway_token_file, meta, verbose, command) -> None:
    """Run CMD with its model traffic recorded; exit with CMD's exit code."""
    setup_logging(verbose)
    argv = list(command)
    launch.resolve(argv, os.environ)  # a missing command fails before anything starts
    shim = pick_shim(harness, argv)
    if gateway:
        from forge_record.gateway import rollout

        token = rollout.admin_token(gateway_token_file, dict(os.environ))
        sys.exit(rollout.run_in_session(gateway, token, shim.name, argv, tag, meta))
    route = plan_route(shim, mode, dict(os.environ), _check_upstreams(upstream))
    redactor = None if no_redact_bodies else config.redactor(home())
    exit_code = record(
        argv, shim, route, store_url(store),
        tags=tag, settings=settings, verbose=verbose, redactor=redactor,
    )
    sys.exit(exit_code)


@dataclass
class Route:
    mode: str  # "reverse" or "forward"
    mitm_mode: str  # the mitmproxy mode spec
    upstreams: dict[str, str] = field(default_factory=dict)
    model_hosts: set[str] = field(default_factory=set)


def plan_route(shim: Shim, mode: str, environ: dict[str, str], upstreams: dict[str, str]) -> Route:
    mode = shim.auto_mode(environ) if mode == "auto" else mode
    if mode == "reverse":
        base = shim.upstream_base(environ)
        if base is None:
            raise UsageError(f"{shim.name} has no base-URL variable; use --mode forward")
        parts = urlsplit(base)
        upstreams = dict(upstreams)
        if parts.path.strip("/") and parts.hostname not in upstreams:
            upstreams[parts.hostname] = base  # keep the gateway's path prefix
        return Route("reverse", f"reverse:{parts.scheme}://{parts.netloc}", upstreams)
    hosts = set(shim.model_hosts) | set(upstreams)
    if shim.base_url_var and environ.get(shim.base_url_var):
        hosts.add(urlsplit(environ[shim.base_url_var]).hostname or "")
    return Route("forward", "regular", upstreams, hosts)


def record(
    argv, shim: Shim, route: Route, url: str, *, tags, settings, verbose, redactor=None
) -> int:
    from forge_record.addons.proxy import InProcessProxy
    from forge_record.addons.recorder import Recorder
    from forge_record.addons.websocket import WebSocketRecorder
    from forge_record.writer_process import WriterProcess

    # The store is opened, and exchanges are folded, redacted and written, in a process of
    # its own (forge_record.writer_process), while this one starts the proxy.
    writer = WriterProcess(url, redact_bodies=redactor is not None, verbose=verbose)
    session = Session(
        id=secrets.token_hex(8),
        harness=shim.name,
        argv=[redactor.text(a) for a in mask_argv(argv)] if redactor else mask_argv(argv),
        cwd=os.getcwd(),
        user=_user(),
        host=socket.gethostname(),
        tags=tags,
        started_at=time.time(),
    )
    writer.submit_session(session)
    seen = _VersionSniffer(shim)

    def sink(exchange: Exchange) -> None:
        seen(exchange)
        writer.submit_exchange(session.id, exchange)

    addon = Recorder(
        sink,
        model_hosts=route.model_hosts,
        upstreams=route.upstreams,
        record_any_host=route.mode == "reverse",
    )
    conf = trust.confdir(home())
    proxy = InProcessProxy(
        WebSocketRecorder(addon), mode=route.mitm_mode, confdir=conf, settings=settings,
        verbose=verbose > 1,
    )
    exit_code = None
    try:
        proxy_url = f"http://127.0.0.1:{proxy.start()}"
        writer.ready()  # a store that cannot be opened fails here, before the agent starts
        # What start-up made (modules, mitmproxy and its addons) lives as long as the
        # proxy: frozen, the cyclic GC stops walking it in the collections that every
        # exchange's garbage sets off (bench/throughput.py: ~3% of the proxy's throughput).
        gc.collect()
        gc.freeze()
        env = dict(os.environ)
        if route.mode == "reverse":
            env.update(shim.reverse_env(proxy_url, env))
            argv = shim.reverse_argv(argv, proxy_url, env)
        else:
            env.update(shim.forward_env(proxy_url, trust.ca_files(conf), env))
        exit_code = launch.run_child(argv, env)
    finally:
        proxy.stop()
        writer.submit_end(session.id, time.time(), exit_code, harness_version=seen.version)
        writer.close()
    _print_summary(url, session.id, writer)
    return exit_code


class _VersionSniffer:
    """Takes the harness version from the first User-Agent that names it."""

    def __init__(self, shim: Shim) -> None:
        self.shim = shim
        self.version: str | None = None

    def __call__(self, exchange: Exchange) -> None:
        if self.version is None:
            self.version = self.shim.version_from(exchange.request_headers.get("user-agent", ""))


def _print_summary(url: str, session_id: str, writer) -> None:
    if writer.spool_left:  # the store was down: the next run writes the spool
        click.echo(f"forge-record: session {session_id} · the store did not answer; "
                   f"{writer.spool_left} items wait in {writer.spool_file}", err=True)
        return
    try:
        store = open_store(url)
        try:
            s = store.session_summary(session_id)
        finally:
            store.close()
    except StoreError as e:  # the agent's exit code still wins
        click.echo(f"forge-record: session {session_id} · {e}", err=True)
        return
    lost = writer.dropped + writer.failed
    parts = [
        f"session {session_id}",
        _count(s["calls"], "model call"),
        _count(s["tool_calls"], "tool call"),
        f"{s['input_tokens'] or 0:,} in / {s['output_tokens'] or 0:,} out tokens",
    ]
    if lost:
        parts.append(f"{lost} exchanges NOT stored (see warnings)")
    click.echo("forge-record: " + " · ".join(parts), err=True)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def pick_shim(name: str | None, argv: list[str]) -> Shim:
    """The shim --harness names, else the one the command looks like (doctor picks alike)."""
    if name is None:
        return harness_shims.detect(argv)
    shim = harness_shims.shim_named(name)
    if shim is None:
        known = ", ".join(s.name for s in harness_shims.SHIMS)
        raise UsageError(f"unknown harness {name!r} (known: {known})")
    return shim


def _check_upstreams(upstreams: dict[str, str]) -> dict[str, str]:
    for host, url in upstreams.items():
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(f"bad --upstream URL for {host}: {url!r} (want http[s]://host[:port])")
    return {h.lower(): u for h, u in upstreams.items()}


def _user() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None
