"""Where a proxy spends its CPU under the throughput load: py-spy on the proxy process.

    python bench/profile_proxy.py [--kind forge|bare] [--exchanges 2000] [--top 25]
                                  [--model bench-20-0-10] [--raw OUT.txt]

Starts the mock and one proxy (as bench/throughput.py does), attaches `py-spy record`
(pip install py-spy; needs ptrace, e.g. root) to the proxy for one load run, then prints, per
thread, the share of samples in which each function is on the stack (inclusive) and on top
(self), with the matching CPU milliseconds per exchange. Sampling is statistical: shares
under ~1% are noise. Not part of bench/run.py: it is what to run when a target is missed.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Children, start_mock, start_proxy, stores  # noqa: E402
from throughput import _load  # noqa: E402


def _frame_name(frame: str) -> str:
    """py-spy's `func (path/file.py:line)` as `file.py:func`, so lines of one function merge."""
    func, _, where = frame.partition(" (")
    return f"{Path(where.split(':')[0]).name}:{func}" if where else func


def _profile(stacks: Path) -> dict[str, dict]:
    """Per thread: total samples, inclusive and self counts by function."""
    threads: dict[str, dict] = {}
    for line in stacks.read_text().splitlines():
        path, _, count = line.rpartition(" ")
        frames = path.split(";")
        thread = frames[0]
        t = threads.setdefault(thread, {"total": 0, "incl": collections.Counter(),
                                        "self": collections.Counter()})
        names = [_frame_name(f) for f in frames[1:]]
        t["total"] += int(count)
        for name in set(names):
            t["incl"][name] += int(count)
        if names:
            t["self"][names[-1]] += int(count)
    return threads


def _report(threads: dict[str, dict], cpu_ms_per_exchange: float, top: int) -> str:
    grand = sum(t["total"] for t in threads.values()) or 1
    out = []
    for thread, t in sorted(threads.items(), key=lambda kv: -kv[1]["total"]):
        share = t["total"] / grand
        out.append(f"\n## {thread}: {100 * share:.1f}% of samples "
                   f"(~{share * cpu_ms_per_exchange:.3f} ms CPU per exchange)")
        for label, counter in (("inclusive", t["incl"]), ("self", t["self"])):
            out.append(f"  top {label}:")
            for name, n in counter.most_common(top):
                out.append(f"    {100 * n / grand:5.1f}%  {n / grand * cpu_ms_per_exchange:7.3f} ms"
                           f"  {name}")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kind", default="forge", choices=["forge", "bare"])
    ap.add_argument("--mode", default="reverse", choices=["reverse", "forward"])
    ap.add_argument("--exchanges", type=int, default=2000)
    ap.add_argument("--model", default="bench-20-0-10")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--raw", type=Path, help="keep py-spy's collapsed stacks here")
    ap.add_argument("--gil", action="store_true",
                    help="sample only the thread holding the GIL (py-spy --gil): CPU, not waits")
    ap.add_argument("--extra", default="", help="bench/forge_proc.py experiment arguments")
    ap.add_argument("--children", action="store_true",
                    help="also sample the processes the proxy started (the store writer)")
    args = ap.parse_args()
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    p = {"concurrency": 20, "model": args.model}
    # Children stop (and forge-record finishes writing) before their files are removed.
    with tempfile.TemporaryDirectory(prefix="fr-prof-") as tmp, Children() as children:
        _, mock_url = start_mock(children)
        proxy = start_proxy(children, args.kind, args.mode, mock_url, Path(tmp), "profiled",
                            tuple(args.extra.split()))
        port, ca = proxy.port, proxy.ca
        _load(port, p, 100, ca)  # warm up
        stacks = args.raw or Path(tmp) / "stacks.txt"
        spy = subprocess.Popen([py_spy, "record", "--pid", str(proxy.child.pid), "--rate", "200",
                                "--format", "raw", "--threads", "--nonblocking",
                                "--output", str(stacks), *(["--gil"] if args.gil else []),
                                *(["--subprocesses"] if args.children else [])],
                               stdout=subprocess.DEVNULL)
        time.sleep(1.0)  # let py-spy attach
        cpu_of = proxy.cpu_seconds if args.children else proxy.proxy_cpu_seconds
        cpu0 = cpu_of()
        load = _load(port, p, args.exchanges, ca)
        proxy.drain(100 + args.exchanges if stores(args.extra.split()) else 0)
        cpu = cpu_of() - cpu0
        spy.send_signal(2)  # SIGINT: py-spy writes its output and exits
        spy.wait(30)
        per_exchange = 1000 * cpu / load["exchanges"]
        print(f"{args.kind}-{args.mode}: {load['exchanges'] / load['seconds']:.0f} exchanges/s, "
              f"{cpu:.2f} CPU-s, {per_exchange:.3f} ms CPU per exchange")
        print(_report(_profile(stacks), per_exchange, args.top))


if __name__ == "__main__":
    main()
