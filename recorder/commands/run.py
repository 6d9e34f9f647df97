"""`forge-record run [OPTIONS] -- CMD [ARGS...]`: run an agent CLI and record its model calls."""

from __future__ import annotations

import gc
import getpass
import os
import secrets
import shutil
import socket
import sys
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import click

from forge_record import config, engine_probe, harness_shims, launch, trust
from forge_record.commands.common import engine_options, key_value, open_store, store_option
from forge_record.commands.sessions import counted
from forge_record.errors import StoreError, UsageError
from forge_record.harness_shims import Shim
from forge_record.harness_shims.base import LOOPBACK
from forge_record.lineage import session_usage
from forge_record.logs import setup_logging
from forge_record.outcome import Failures, count
from forge_record.paths import home, store_url
from forge_record.records import Session
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
@click.option(
    "--engine", type=click.Choice(["auto", "vllm", "sglang", "none"]),
    help="The model server is this engine: Chat Completions, Completions and SGLang "
    "/generate calls ask it for token ids and logprobs, which are recorded and kept from "
    "the agent. auto: probe the --upstream URLs once at start. Default: none.",
)
@click.option("--top-logprobs", type=click.IntRange(0, 20), default=0, show_default=True,
              help="With --engine: alternatives recorded per sampled token.")
@engine_options
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
def run(store, mode, harness, upstream, engine, top_logprobs, engine_model, engine_params, tag,
        settings, no_redact_bodies, gateway, gateway_token_file, meta, verbose, command) -> None:
    """Run CMD with its model traffic recorded; exit with CMD's exit code."""
    setup_logging(verbose)
    argv = list(command)
    launch.resolve(argv, os.environ)  # a missing command fails before anything starts
    shim = pick_shim(harness, argv)
    if gateway:
        from forge_record.commands import rollout

        token = rollout.admin_token(gateway_token_file, dict(os.environ))
        sys.exit(rollout.run_in_session(gateway, token, shim.name, argv, tag, meta))
    route = plan_route(shim, mode, dict(os.environ), _check_upstreams(upstream), argv)
    found = pick_engine(route, engine, top_logprobs)
    if route.engine:
        route.engine_model = engine_model or engine_probe.served_model(
            engine_urls(route), found)
        route.engine_params = engine_params
    redactor = None if no_redact_bodies else config.redactor(home())
    # Tag values are redacted even with --no-redact-bodies: they are not bodies.
    tags = (redactor or config.redactor(home())).tags(
        {**engine_probe.session_tags(route.engine, found), **tag})
    exit_code = record(
        argv, shim, route, store_url(store),
        tags=tags, settings=settings, verbose=verbose, redactor=redactor,
    )
    sys.exit(exit_code)


@dataclass
class Route:
    mode: str  # "reverse" or "forward"
    mitm_mode: str  # the mitmproxy mode spec
    upstreams: dict[str, str] = field(default_factory=dict)
    model_hosts: set[str] = field(default_factory=set)
    engine: str | None = None  # the model server is this engine: ask it for its token ids
    top_logprobs: int = 0
    engine_model: str | None = None  # the engine's model, for calls the bridge translates
    engine_params: dict = field(default_factory=dict)  # set in every bridged call


def engine_urls(route: Route) -> list[str]:
    """Where the engine may be: the upstreams, and a reverse target on loopback."""
    urls = list(route.upstreams.values())
    target = route.mitm_mode.removeprefix("reverse:")
    if route.mode == "reverse" and urlsplit(target).hostname in LOOPBACK:
        urls.append(target)
    return urls


def pick_engine(route: Route, engine: str | None, top_logprobs: int
                ) -> engine_probe.Found | None:
    """Set the route's engine from `--engine` (none unless told: `run` mostly records
    provider APIs, which a probe would only bother): the upstreams are probed once, before
    the proxy starts; what was found is returned."""
    urls = list(dict.fromkeys(engine_urls(route)))

    def say(line: str) -> None:
        click.echo(f"forge-record: {line}", err=True)

    route.engine, found = engine_probe.resolve(engine or "none", urls, say)
    route.top_logprobs = top_logprobs
    return found


def plan_route(shim: Shim, mode: str, environ: dict[str, str], upstreams: dict[str, str],
               argv: list[str] | None = None) -> Route:
    """How `argv` (the agent's command line) is routed; a reverse mode that cannot route all
    of its model traffic is a UsageError naming why."""
    argv = argv or []
    mode = shim.auto_mode(environ) if mode == "auto" else mode
    if mode == "reverse":
        refusal = shim.reverse_refusal(environ, argv)
        if refusal is not None:
            raise UsageError(refusal)
        base = shim.upstream_base(environ, argv)
        assert base is not None  # reverse_refusal says why there is none
        # The CLI is handed the proxy under the base URL's path (Shim.reverse_base), so the
        # proxy only swaps the origin back; an --upstream for that host applies after.
        parts = urlsplit(base)
        return Route("reverse", f"reverse:{parts.scheme}://{parts.netloc}", dict(upstreams))
    hosts = set(shim.model_hosts) | set(upstreams)
    base = shim.upstream_base(environ, argv)  # the user's gateway, a Codex custom provider
    if base is not None:
        hosts.add(urlsplit(base).hostname or "")
    hosts |= {urlsplit(url).hostname or "" for url in shim.base_urls(environ).values()}
    return Route("forward", "regular", upstreams, hosts)


def record(
    argv, shim: Shim, route: Route, url: str, *, tags, settings, verbose, redactor=None
) -> int:
    from forge_record.addons.access import Access
    from forge_record.addons.proxy import InProcessProxy
    from forge_record.addons.recorder import Recorder
    from forge_record.addons.websocket import WebSocketRecorder
    from forge_record.writer_process import SessionSink, WriterProcess

    # The store is opened, and exchanges are folded, redacted and written, in a process of
    # its own (forge_record.writer_process), while this one starts the proxy.
    writer = WriterProcess(url, redact_bodies=redactor is not None, verbose=verbose,
                           tally=True)
    failures = Failures()
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
    sink = SessionSink(writer, session.id, shim.version_from, observe=failures)
    addon = Recorder(
        sink,
        model_hosts=route.model_hosts,
        upstreams=route.upstreams,
        record_any_host=route.mode == "reverse",
        engine=route.engine,
        top_logprobs=route.top_logprobs,
        engine_model=route.engine_model,
        engine_params=route.engine_params,
    )
    conf = trust.confdir(home())
    access = Access()  # this run's secret: the proxy serves the agent it starts, no one else
    proxy = InProcessProxy(
        WebSocketRecorder(addon), mode=route.mitm_mode, confdir=conf, settings=settings,
        verbose=verbose > 1, access=access,
    )
    exit_code = None
    started = False  # a session is stored only once the proxy is up and the store open
    try:
        proxy_url = access.proxy_url(proxy.start(), route.mode)
        writer.ready()  # a store that cannot be opened fails here, before the agent starts
        writer.submit_session(session)
        started = True
        # What start-up made (modules, mitmproxy and its addons) lives as long as the
        # proxy: frozen, the cyclic GC stops walking it in the collections that every
        # exchange's garbage sets off (bench/throughput.py: ~3% of the proxy's throughput).
        gc.collect()
        gc.freeze()
        env = dict(os.environ)
        if route.mode == "reverse":
            env.update(shim.reverse_env(proxy_url, env))
            argv = shim.reverse_argv(argv, proxy_url, os.environ)
        else:
            env.update(shim.forward_env(proxy_url, trust.ca_files(conf), env))
        exit_code = launch.run_child(argv, env)
    finally:
        proxy.stop()
        if started:
            writer.submit_end(session.id, time.time(), exit_code, harness_version=sink.version)
        writer.close()
    _print_summary(url, session.id, writer, failures)
    if not sink.captured:
        _warn_nothing_recorded(argv, shim, route, dict(os.environ))
    return exit_code


def _print_summary(url: str, session_id: str, writer, failures: Failures) -> None:
    if writer.spool_left:  # the store was down: the next run writes the spool
        click.echo(f"forge-record: session {session_id} · the store did not answer; "
                   f"{writer.spool_left} items wait in {writer.spool_file}", err=True)
        return
    try:
        store = open_store(url)
        try:
            s = store.session_summary(session_id)
            # the counts `sessions` and `show` print (forge_record.lineage.usage)
            usage, flags = _usage(store, s, writer.usage.get(session_id))
            s = counted(s, usage)
        finally:
            store.close()
    except StoreError as e:  # the agent's exit code still wins
        click.echo(f"forge-record: session {session_id} · {e}", err=True)
        return
    lost = writer.dropped + writer.failed
    parts = [
        f"session {session_id}",
        count(s["calls"], "model call"),
        *([f"{s['retries']} retr{'y' if s['retries'] == 1 else 'ies'}"] if s["retries"] else []),
        # titles, compaction summaries, count_tokens: not the conversation's, but made
        *([count(s["side_calls"], "side call")] if s["side_calls"] else []),
        count(s["tool_calls"], "tool call"),
        f"{s['tokens_in']:,} in / {s['output_tokens']:,} out tokens",
    ]
    if failures.total:  # say so, or a run that reached no model reads like one that worked
        parts.append(failures.summary())
    if lost:
        parts.append(f"{lost} exchanges NOT stored (see warnings)")
    click.echo("forge-record: " + " · ".join(parts), err=True)
    _warn_tokens(flags)


def _usage(store, summary: dict, folded: dict | None) -> tuple[dict, dict[str, int]]:
    """The session's usage and its count of exchanges per flag: as the writer process folded
    them while it wrote (lineage.tally), when it folded every exchange the store holds; else
    by reading the session back, which on a long session takes seconds."""
    if folded is not None and folded["exchanges"] == summary["calls"] + summary["side_calls"]:
        return folded["usage"], folded["flags"]
    exchanges = list(store.iter_exchanges(summary["id"]))
    flags: dict[str, int] = {}
    for e in exchanges:
        for flag in e.flags:
            flags[flag] = flags.get(flag, 0) + 1
    return session_usage(exchanges, summary["harness"]), flags


def _warn_tokens(flags: dict[str, int]) -> None:
    """Once per session: calls an engine answered without the token ids it was asked for
    (an engine that ignores `return_token_ids`), or with tokens that disagree."""
    from forge_record.tokens_check import TOKENS_MISMATCH, TOKENS_MISSING

    for flag, what in ((TOKENS_MISSING, "without the token ids asked for (an engine that "
                        "ignores return_token_ids?); recorded at message level only"),
                       (TOKENS_MISMATCH, "with token ids and logprobs that disagree")):
        if n := flags.get(flag, 0):
            click.echo(click.style(f"forge-record: warning: {count(n, 'engine call')} "
                                   f"answered {what} [{flag}]", fg="yellow"), err=True)


def _warn_nothing_recorded(argv: list[str], shim: Shim, route: Route, environ: dict[str, str]
                           ) -> None:
    """The agent ran and not one model call reached the recorder: a run that records nothing
    must not look like a success. Say so, with the likely causes and the doctor line."""
    click.echo(click.style("forge-record: warning: the command ran but no model call was "
                           "recorded", fg="yellow"), err=True)
    for cause in _likely_causes(argv, shim, route, environ):
        click.echo(f"  likely: {cause}", err=True)
    harness = f" --harness {shim.name}" if shim.name != "generic" else ""
    click.echo(f"  check with: forge-record doctor{harness} --mode {route.mode} -- {argv[0]}",
               err=True)


def _likely_causes(argv: list[str], shim: Shim, route: Route, environ: dict[str, str]
                   ) -> list[str]:
    """What most often makes a run record nothing, as found in this run: the specific causes,
    else what the mode can see at all."""
    from forge_record import node_proxy
    from forge_record.harness_shims.generic import BASE_URL_VARS

    causes = []
    read_here = shim.base_urls(environ)
    routed = shim.reverse_env("http://127.0.0.1", environ) if route.mode == "reverse" else {}
    bases = {**{v: environ[v] for v in BASE_URL_VARS if environ.get(v)}, **read_here}
    for var, url in bases.items():
        if urlsplit(url).hostname not in LOOPBACK or var in routed:
            continue
        fix = ("--mode reverse" if var in read_here else
               "--harness generic, which points it at the proxy in reverse mode")
        causes.append(f"{var}={url} is on loopback, which never goes through the proxy "
                      f"in {route.mode} mode: run with {fix}")
    exe = shutil.which(argv[0], path=environ.get("PATH")) or argv[0]
    if route.mode == "forward" and node_proxy.is_node_program(exe):
        version = node_proxy.node_version(environ)
        if version and not node_proxy.fetch_honours_env_proxy(version):
            causes.append(f"{argv[0]} runs on Node {node_proxy.describe(version)}, whose "
                          "built-in fetch ignores HTTPS_PROXY (NODE_USE_ENV_PROXY needs Node "
                          ">= 22.21 or >= 24): use a newer Node, or reverse mode")
    name, detected = os.path.basename(argv[0]), harness_shims.detect(argv)
    if detected.name != shim.name:
        causes.append(f"{name} has a harness of its own, but the {shim.name} harness was "
                      f"used: try --harness {detected.name}")
    elif shim.name == "generic":
        known = ", ".join(s.name for s in harness_shims.SHIMS if s.name != "generic")
        causes.append(f"{name} is not a CLI forge-record knows, so the generic harness was "
                      f"used; if it is one of {known}, pass --harness NAME")
    if causes:
        return causes
    if route.mode == "forward":
        hosts = sorted(h for h in route.model_hosts if h not in LOOPBACK)
        return [f"forward mode intercepts only the model hosts of the {shim.name} harness "
                f"({', '.join(hosts)}): name another with --upstream HOST=URL"]
    if routed:
        return [f"reverse mode sees only the calls that {', '.join(sorted(routed))} sends "
                "to the proxy; a client that takes its base URL elsewhere (a config file, a "
                "login) is not recorded: try --mode forward"]
    return []



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
