"""Run the proxy benchmarks: streaming latency, then throughput; print one Markdown report.

    python bench/run.py            # the full run: under 5 minutes on 2 cores
    python bench/run.py --quick    # a smoke run: under 1 minute, a shorter stream, 1-2 rounds
    python bench/run.py --json results.json [--only latency|throughput]

Each benchmark is also runnable alone (bench/latency.py, bench/throughput.py); this script
only runs them one after the other with a shared time budget, adds the machine notes (with
the load average before and after, since other work on the machine skews every figure) and
prints the sections that docs/BENCHMARKS.md keeps under "Latency" and "Throughput".
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import latency  # noqa: E402
import throughput  # noqa: E402
from common import fmt, machine_markdown, machine_notes, renice  # noqa: E402


def _loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def headline(results: dict) -> list[str]:
    """The ratios README.md quotes: forge-record against bare mitmproxy pass-through."""
    lines = []
    for mode, by_client in results.get("latency", {}).get("ratios", {}).items():
        for client, r in by_client.items():
            figures = ", ".join(f"{name} {fmt(r[key])}×" for name, key in (
                ("+TTFT", "ttft_ms"), ("+total", "total_ms"), ("+event p50", "event_p50_ms"),
                ("+event p99", "event_p99_ms")))
            lines.append(f"latency, {mode}, {client}: {figures}")
    for mode, r in results.get("throughput", {}).get("ratios", {}).items():
        lines.append(f"throughput, {mode}: exchanges/s {fmt(r['rate'])}×, CPU per MB "
                     f"{fmt(r['cpu_s_per_mb'])}×")
    return lines


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", choices=["latency", "throughput"])
    ap.add_argument("--json", type=Path, help="write every figure here")
    ap.add_argument("--nice", type=int, default=0,
                    help="renice the benchmarks and their children, e.g. -10 (root) on a "
                    "machine busy with other work")
    ap.add_argument("--realtime", type=int, default=0, metavar="PRIORITY",
                    help="run the latency benchmark under SCHED_FIFO (root), e.g. 10 on a "
                    "machine busy with other work")
    ap.add_argument("--latency-args", default="", help="extra arguments for bench/latency.py")
    ap.add_argument("--throughput-args", default="",
                    help="extra arguments for bench/throughput.py")
    args = ap.parse_args(argv)
    quick = ["--quick"] if args.quick else []
    renice(args.nice)
    results: dict = {"machine": machine_notes(), "load_before": _loadavg()}
    started = time.monotonic()
    sections = []
    if args.only in (None, "latency"):
        p = latency.parse_args(quick + args.latency_args.split())
        p.pop("json")
        p["realtime"] = p["realtime"] or args.realtime
        results["latency"] = latency.summarize(latency.measure(p))
        sections.append("## Latency\n\n" + latency.markdown(results["latency"]))
    if args.only in (None, "throughput"):
        p = throughput.parse_args(quick + args.throughput_args.split())
        p.pop("json")
        results["throughput"] = throughput.summarize(throughput.measure(p))
        sections.append("## Throughput\n\n" + throughput.markdown(results["throughput"]))
    results["load_after"] = _loadavg()
    results["seconds"] = time.monotonic() - started
    results["headline"] = headline(results)
    command = " ".join(["python bench/run.py", *sys.argv[1:]]) if argv is None else (
        "python bench/run.py " + " ".join(argv))
    print(f"{machine_markdown(results['machine'])} Load average (1, 5, 15 min) before: "
          f"{results['load_before']}, after: {results['load_after']}. `{command}` took "
          f"{results['seconds']:.0f} s.\n")
    print("\n\n".join(sections))
    print("\nHeadline (forge-record / bare pass-through):\n" +
          "\n".join(f"- {line}" for line in results["headline"]))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    return results


if __name__ == "__main__":
    main()
