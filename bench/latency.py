"""Streaming latency: what a proxy adds to one long streamed call, forge-record vs bare mitmproxy.

    python bench/latency.py [--quick] [--rounds N] [--configs a,b] [--clients sdk,raw] [--json F]

The stream (bench/mock_server.py): message_start, TEXT text deltas written every INTERVAL
(default 500 every 2 ms), then a tool_use block of FRAGMENTS input_json_delta pieces at the
same pace (default 40), from a loopback asyncio mock in its own process. The request carries
a ~32 KB conversation, as an agent's calls do.

Configurations (each proxy a process of its own, see bench/proxy_server.py): direct;
bare-rev / bare-fwd (mitmproxy passing the stream through, reverse / forward with TLS
interception, all its stock addons loaded); lean-rev / lean-fwd (the same with only the stock
addons forge-record loads); forge-rev / forge-fwd (`forge-record run`, recording);
buffered-rev (mitmproxy's default, which buffers: shows what the `streamed` check catches).
Clients: the anthropic SDK and raw httpx2, both on warm keep-alive connections.

Rounds are interleaved (every configuration and client once per round, the order rotated
each round); each figure is the median over rounds, and an "added" figure is the median of
the per-round differences from `direct` in the same round. Per-event latency is the time
from the mock writing a text delta to the client having it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from clients import CLIENTS, Target, history  # noqa: E402
from common import (  # noqa: E402
    Children,
    fmt,
    machine_markdown,
    machine_notes,
    median,
    percentile,
    ratio,
    realtime,
    renice,
    start_mock,
    start_proxy,
)

PROXIES = {  # configuration -> (proxy kind, routing mode)
    "bare-rev": ("bare", "reverse"), "bare-fwd": ("bare", "forward"),
    "lean-rev": ("lean", "reverse"), "lean-fwd": ("lean", "forward"),
    "forge-rev": ("forge", "reverse"), "forge-fwd": ("forge", "forward"),
    "buffered-rev": ("buffered", "reverse"),
}
ALL_CONFIGS = ["direct", *PROXIES]
PAIRS = {"reverse": ("forge-rev", "bare-rev"), "forward": ("forge-fwd", "bare-fwd")}
FIGURES = ("ttft_ms", "total_ms", "event_p50_ms", "event_p99_ms")
DIAGNOSTICS = ("ttft_b2b_ms", "eom_ms")  # reported, not targets
PROBE_MODEL = "bench-5-2000-5"  # a short stream: TTFT of back-to-back calls
FULL = {"rounds": 6, "ttft_probes": 4, "text": 500, "fragments": 40, "interval_us": 2000,
        "request_kb": 32, "budget_s": 150, "configs": ALL_CONFIGS}
QUICK = {"rounds": 2, "ttft_probes": 2, "text": 150, "fragments": 40, "interval_us": 2000,
         "request_kb": 32, "budget_s": 25,
         "configs": [c for c in ALL_CONFIGS if c != "buffered-rev"]}


def _targets(children: Children, p: dict, mock_url: str, tmp: Path) -> dict:
    targets = {}
    for name in p["configs"]:
        if name == "direct":
            targets[name] = Target(name, mock_url)
            continue
        extra = ()
        if name not in PROXIES:  # forge-rev-NAME: forge with the experiment NAME (--variant)
            extra = tuple(p["variants"][name.removeprefix("forge-rev-")].split())
        kind, mode = PROXIES.get(name, ("forge", "reverse"))
        proxy = start_proxy(children, kind, mode, mock_url, tmp, name, extra)
        url = proxy.url
        targets[name] = (Target(name, url) if mode == "reverse" else
                         Target(name, "https://api.anthropic.com", proxy=url, verify=proxy.ca))
    return targets


def _one_run(client, p: dict, messages: list[dict]) -> dict:
    """The long stream, then `ttft_probes` short ones right after each other: their TTFT
    is what a call made while the recorder still stores the previous one gets."""
    s = client.stream_once(p["model"], messages).summary()
    lags = s.pop("event_lags_ms")
    s["event_p50_ms"], s["event_p99_ms"] = median(lags), percentile(lags, 99)
    s["ttft_b2b_ms"] = median([client.stream_once(PROBE_MODEL, messages).summary()["ttft_ms"]
                               for _ in range(p["ttft_probes"])])
    return s


def measure(p: dict) -> dict:
    """Run the rounds; return every run's figures plus the parameters actually used."""
    p["model"] = f"bench-{p['text']}-{p['interval_us']}-{p['fragments']}"
    messages = history(p["request_kb"])
    runs: dict[str, dict[str, list[dict]]] = {}
    started = time.monotonic()
    # Children stop (and forge-record finishes writing) before their files are removed.
    with (realtime(p.get("realtime", 0)), tempfile.TemporaryDirectory(prefix="fr-bench-") as tmp,
          Children() as children):
        _, mock_url = start_mock(children)
        targets = _targets(children, p, mock_url, Path(tmp))
        clients = {(c, k): CLIENTS[k](t) for c, t in targets.items() for k in p["clients"]}
        for client in clients.values():  # open every connection before timing anything
            client.stream_once("bench-5-0-3", messages)
        rounds_done, last = 0, 0.0
        while rounds_done < p["rounds"]:
            if rounds_done and time.monotonic() - started + last > p["budget_s"]:
                break  # keep the whole run bounded; fewer rounds are reported as such
            t0 = time.monotonic()
            order = list(clients)
            shift = rounds_done % len(order)
            for key in order[shift:] + order[:shift]:
                runs.setdefault(key[0], {}).setdefault(key[1], []).append(
                    _one_run(clients[key], p, messages))
            rounds_done, last = rounds_done + 1, time.monotonic() - t0
        for client in clients.values():
            client.close()
    return {"params": {**p, "rounds_done": rounds_done}, "runs": runs}


def summarize(result: dict) -> dict:
    """Medians over rounds, added figures (paired with direct), and forge/bare ratios."""
    runs, summary = result["runs"], {}
    for config, by_client in runs.items():
        for client, rounds in by_client.items():
            base = runs.get("direct", {}).get(client)
            row = {f: median([r[f] for r in rounds]) for f in FIGURES + DIAGNOSTICS}
            for f in FIGURES + DIAGNOSTICS:
                diffs = [r[f] - b[f] for r, b in zip(rounds, base or [], strict=False)]
                row[f"added_{f}"] = median(diffs) if base else float("nan")
            row["streamed"] = all(r["streamed"] for r in rounds)
            row["events"] = rounds[0]["events"]
            summary.setdefault(config, {})[client] = row
    ratios = {}
    for mode, (forge, bare) in PAIRS.items():
        for client in summary.get(forge, {}):
            if client in summary.get(bare, {}):
                f_row, b_row = summary[forge][client], summary[bare][client]
                row = {f: ratio(f_row[f"added_{f}"], b_row[f"added_{f}"]) for f in FIGURES}
                row["spread"] = _round_ratio_spread(runs, forge, bare, client)
                ratios.setdefault(mode, {})[client] = row
    result["summary"], result["ratios"] = summary, ratios
    return result


def _round_ratio_spread(runs: dict, forge: str, bare: str, client: str) -> dict:
    """The same ratio computed round by round: its quartiles show how far one round's
    noise moves it (on a busy machine, far)."""
    base = runs["direct"][client]
    spread = {}
    for f in FIGURES:
        rounds = zip(runs[forge][client], runs[bare][client], base, strict=False)
        per_round = [ratio(a[f] - d[f], b[f] - d[f]) for a, b, d in rounds]
        per_round = [x for x in per_round if x == x]  # drop NaN
        spread[f] = (percentile(per_round, 25), percentile(per_round, 75))
    return spread


def markdown(result: dict) -> str:
    p, summary = result["params"], result["summary"]
    lines = [
        f"Stream: {p['text']} text deltas every {p['interval_us'] / 1000:g} ms, then a tool_use "
        f"of {p['fragments']} input_json_delta fragments; request ~{p['request_kb']} KB; "
        f"{p['rounds_done']} interleaved rounds; warm keep-alive connections. \"b2b\": TTFT of "
        f"{p['ttft_probes']} short calls made back to back after the long one (median per "
        "round). Times in ms; "
        "\"+\" columns are added over direct (median of per-round differences).",
        "",
        "| config | client | TTFT | +TTFT | +TTFT b2b | total | +total | +event p50 "
        "| +event p99 | end after message_stop | streamed |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for config, by_client in summary.items():
        for client, r in by_client.items():
            lines.append(
                f"| {config} | {client} | {fmt(r['ttft_ms'])} | {fmt(r['added_ttft_ms'])} | "
                f"{fmt(r['added_ttft_b2b_ms'])} | "
                f"{fmt(r['total_ms'], 1)} | {fmt(r['added_total_ms'])} | "
                f"{fmt(r['added_event_p50_ms'], 3)} | {fmt(r['added_event_p99_ms'], 3)} | "
                f"{fmt(r['eom_ms'], 3)} | {'yes' if r['streamed'] else '**no (buffered)**'} |")
    lines += ["", "forge-record's added latency / bare pass-through's (target ≤ 1.1); in brackets "
              "the quartiles of the same ratio taken round by round:", "",
              "| mode | client | +TTFT | +total | +event p50 | +event p99 |",
              "|---|---|---:|---:|---:|---:|"]
    for mode, by_client in result["ratios"].items():
        for client, r in by_client.items():
            cells = [f"{fmt(r[f])} ({fmt(r['spread'][f][0], 1)}–{fmt(r['spread'][f][1], 1)})"
                     for f in FIGURES]
            lines.append(f"| {mode} | {client} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer rounds, a shorter stream")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--text", type=int, help="text deltas per stream")
    ap.add_argument("--configs", help="comma-separated, from: " + ",".join(ALL_CONFIGS))
    ap.add_argument("--clients", default="sdk,raw")
    ap.add_argument("--budget", type=float, help="seconds; no new round starts past it")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=ARGS",
                    help="also run forge-rev-NAME: forge (reverse) with these bench/forge_proc.py "
                    "experiment arguments, e.g. defer=--defer-sink (repeatable)")
    ap.add_argument("--nice", type=int, default=0,
                    help="renice the benchmark and its children, e.g. -10 on a busy machine")
    ap.add_argument("--realtime", type=int, default=0, metavar="PRIORITY",
                    help="run under SCHED_FIFO at PRIORITY (root; e.g. 10 on a busy machine)")
    ap.add_argument("--json", type=Path, help="write the full result here")
    args = ap.parse_args(argv)
    p = dict(QUICK if args.quick else FULL)
    p["clients"] = args.clients.split(",")
    p["configs"] = list(p["configs"])
    for key, value in (("rounds", args.rounds), ("text", args.text), ("budget_s", args.budget)):
        if value is not None:
            p[key] = value
    if args.configs:
        p["configs"] = args.configs.split(",")
    p["variants"] = dict(v.split("=", 1) for v in args.variant)
    p["configs"] = p["configs"] + [f"forge-rev-{n}" for n in p["variants"]]
    if "direct" not in p["configs"]:
        p["configs"].insert(0, "direct")  # every "added" figure is relative to it
    p["json"] = args.json
    p["nice"], p["realtime"] = args.nice, args.realtime
    return p


def main(argv: list[str] | None = None) -> dict:
    import json

    p = parse_args(argv)
    out = p.pop("json")
    renice(p["nice"])
    result = summarize(measure(p))
    result["machine"] = machine_notes()
    print(machine_markdown(result["machine"]) + "\n\n" + markdown(result))
    if out:
        out.write_text(json.dumps(result, indent=1, default=str))
    return result


if __name__ == "__main__":
    main()
