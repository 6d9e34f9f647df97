"""Throughput: many small streamed exchanges at once, forge-record vs bare mitmproxy pass-through.

    python bench/throughput.py [--quick] [--rounds N] [--exchanges N] [--modes reverse,forward]
                               [--json F]

`concurrency` (20) clients (bench/load_client.py, one process) make `exchanges` (2,000)
small streamed calls in all, through each configuration in turn: direct (for reference),
bare (bench/passthrough.py on all of mitmproxy's stock addons, as mitmdump runs), lean (the
same on the stock addons forge-record keeps) and forge (`forge-record run` with its store on
a temp SQLite file), each proxy a process of its own (bench/proxy_server.py, forge_proc.py).
forge / bare is the target; forge / lean is what recording itself costs. Rounds interleave the
configurations; figures are medians over rounds.

Measured per run: exchanges/s as the clients saw them, and the proxy's CPU seconds (user +
system, all threads, from /proc/<pid>/stat) per MB of SSE delivered: all its processes
(forge-record's store writer process included), and the proxy process alone. forge's CPU is
read only after its writer has stored every exchange of the run (`drain`), so it includes
decoding, request parsing, compression and storage; the time that took past the clients'
end is reported as "writer lag".
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    BENCH,
    Children,
    fmt,
    machine_markdown,
    machine_notes,
    median,
    ratio,
    renice,
    start_mock,
    start_proxy,
    stores,
)

MODEL_HOST = "api.anthropic.com"
FULL = {"rounds": 3, "exchanges": 2000, "concurrency": 20, "model": "bench-20-0-10",
        "modes": ["reverse"], "budget_s": 120, "variants": {}}
QUICK = {"rounds": 1, "exchanges": 300, "concurrency": 20, "model": "bench-20-0-10",
         "modes": ["reverse"], "budget_s": 20, "variants": {}}
_SHORT = {"reverse": "rev", "forward": "fwd"}


def _load(url: str, p: dict, exchanges: int, tls_ca: str | None) -> dict:
    args = [sys.executable, str(BENCH / "load_client.py"), "--url", url,
            "--exchanges", str(exchanges), "--concurrency", str(p["concurrency"]),
            "--model", p["model"]]
    if tls_ca:
        args += ["--tls-host", MODEL_HOST, "--cafile", tls_ca]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["errors"] or result["exchanges"] != exchanges:
        raise RuntimeError(f"load client failed: {result}")
    return result


def _one_run(target: dict, p: dict, exchanges: int) -> dict:
    proxy = target["proxy"]
    cpu0 = proxy.cpu_seconds() if proxy else 0.0
    proxy_cpu0 = proxy.proxy_cpu_seconds() if proxy else 0.0
    load = _load(target["url"], p, exchanges, target["ca"])
    row = {"rate": load["exchanges"] / load["seconds"], "sse_mb": load["sse_bytes"] / 1e6,
           "seconds": load["seconds"]}
    if proxy:
        target["sent"] += load["exchanges"]
        # CPU is read once everything sent is stored, so it includes the writer's work.
        row["writer_lag_s"] = proxy.drain(0 if target["null"] else target["sent"])
        row["cpu_s"] = proxy.cpu_seconds() - cpu0
        row["cpu_s_per_mb"] = row["cpu_s"] / row["sse_mb"]
        row["proxy_cpu_s_per_mb"] = (proxy.proxy_cpu_seconds() - proxy_cpu0) / row["sse_mb"]
    return row


def _start_targets(children: Children, p: dict, mock_url: str, tmp: Path) -> dict:
    mock_port = int(mock_url.rsplit(":", 1)[1])
    targets = {"direct": {"proxy": None, "url": f"http://127.0.0.1:{mock_port}", "ca": None}}
    wanted = [(f"{kind}-{_SHORT[mode]}", kind, mode, ()) for mode in p["modes"]
              for kind in ("bare", "lean", "forge")]
    wanted += [(f"forge-rev-{name}", "forge", "reverse", tuple(extra.split()))
               for name, extra in p["variants"].items()]
    for name, kind, mode, extra in wanted:
        proxy = start_proxy(children, kind, mode, mock_url, tmp, name, extra)
        targets[name] = {"proxy": proxy, "url": proxy.url, "ca": proxy.ca, "sent": 0,
                         "null": not stores(extra)}
    return targets


def measure(p: dict) -> dict:
    runs: dict[str, list[dict]] = {}
    started = time.monotonic()
    # Children stop (and forge-record finishes writing) before their files are removed.
    with tempfile.TemporaryDirectory(prefix="fr-bench-") as tmp, Children() as children:
        _, mock_url = start_mock(children)
        targets = _start_targets(children, p, mock_url, Path(tmp))
        for target in targets.values():  # warm up: connections, caches, the db file
            _one_run(target, p, p["concurrency"] * 5)
        rounds_done, last = 0, 0.0
        while rounds_done < p["rounds"]:
            if rounds_done and time.monotonic() - started + last > p["budget_s"]:
                break
            t0 = time.monotonic()
            order = list(targets)
            shift = rounds_done % len(order)
            for name in order[shift:] + order[:shift]:
                runs.setdefault(name, []).append(_one_run(targets[name], p, p["exchanges"]))
            rounds_done, last = rounds_done + 1, time.monotonic() - t0
    return {"params": {**p, "rounds_done": rounds_done}, "runs": runs}


def summarize(result: dict) -> dict:
    summary = {}
    for name, rounds in result["runs"].items():
        summary[name] = {k: median([r[k] for r in rounds]) for k in rounds[0]}
    ratios = {}
    for mode in result["params"]["modes"]:
        # forge against bare mitmproxy (the target), and against lean: pass-through with the
        # stock addons forge-record keeps, i.e. what recording alone costs.
        for base, row in (("bare", mode), ("lean", f"{mode}, against lean")):
            forge, other = f"forge-{_SHORT[mode]}", f"{base}-{_SHORT[mode]}"
            if forge in summary and other in summary:
                ratios[row] = _ratios(result["runs"][forge], result["runs"][other])
    result["summary"], result["ratios"] = summary, ratios
    return result


def _ratios(runs: list[dict], base_runs: list[dict]) -> dict:
    """Ratios of the medians, and their range round by round."""
    out = {}
    for key in ("rate", "cpu_s_per_mb", "proxy_cpu_s_per_mb"):
        out[key] = ratio(median([r[key] for r in runs]), median([r[key] for r in base_runs]))
        per_round = [ratio(f[key], b[key]) for f, b in zip(runs, base_runs, strict=False)]
        out[f"{key}_range"] = (min(per_round), max(per_round))
    return out


def markdown(result: dict) -> str:
    p, summary = result["params"], result["summary"]
    mb = summary["direct"]["sse_mb"] / p["exchanges"] * 1e6 / 1024
    lines = [
        f"{p['concurrency']} concurrent streaming clients, {p['exchanges']:,} exchanges per run "
        f"(each a ~{mb:.1f} KB SSE stream: {p['model']}), {p['rounds_done']} interleaved "
        "rounds, medians.",
        "",
        "| config | exchanges/s | CPU-s per MB of SSE, all processes | proxy process alone "
        "| CPU-s per run | writer lag (s) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in summary.items():
        nan = float("nan")
        lines.append(f"| {name} | {fmt(r['rate'], 0)} | {fmt(r.get('cpu_s_per_mb', nan))} "
                     f"| {fmt(r.get('proxy_cpu_s_per_mb', nan))} | {fmt(r.get('cpu_s', nan))} "
                     f"| {fmt(r.get('writer_lag_s', nan))} |")
    lines += ["", "Ratios of the medians; in brackets the lowest and highest ratio of one round:",
              "", "| mode | forge / bare exchanges/s (target ≥ 0.95) | forge / bare CPU per MB, "
              "all processes (target ≤ 1.2) | proxy process alone |", "|---|---:|---:|---:|"]
    for mode, r in result["ratios"].items():
        cells = [f"{fmt(r[k])} ({fmt(r[k + '_range'][0])}–{fmt(r[k + '_range'][1])})"
                 for k in ("rate", "cpu_s_per_mb", "proxy_cpu_s_per_mb")]
        lines.append(f"| {mode} | {cells[0]} | {cells[1]} | {cells[2]} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one round of 300 exchanges")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--exchanges", type=int)
    ap.add_argument("--modes", help="reverse,forward (forward: TLS interception)")
    ap.add_argument("--budget", type=float, help="seconds; no new round starts past it")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=ARGS",
                    help="also run forge with these bench/forge_proc.py experiment arguments, "
                    "e.g. si=--switch-interval=0.0005 (repeatable; reverse mode)")
    ap.add_argument("--nice", type=int, default=0,
                    help="renice the benchmark and its children, e.g. -10 on a busy machine")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    p = dict(QUICK if args.quick else FULL)
    for key, value in (("rounds", args.rounds), ("exchanges", args.exchanges),
                       ("budget_s", args.budget)):
        if value is not None:
            p[key] = value
    if args.modes:
        p["modes"] = args.modes.split(",")
    p["variants"] = dict(v.split("=", 1) for v in args.variant)
    p["json"] = args.json
    p["nice"] = args.nice
    return p


def main(argv: list[str] | None = None) -> dict:
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
