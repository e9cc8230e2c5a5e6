"""The metrics endpoint against connections that send slowly or never read (issue 22, item 3):
a baseline tree's scheduler and this tree's, one after the other in the same run.

For each tree, one `nvshare-scheduler --metrics-port` (--no-nvml, serial):
- slow requests: ATTACKERS connections each send one byte of a request every 0.5 s (opened again
  when the server closes one) for SLOW_S seconds, while a scraper asks for /metrics every 0.5 s
  (timeout 10 s): how many scrapes got 200, and their latency;
- peers that do not read: CLIENTS protocol clients are registered so that an answer is about 10 MB;
  then ATTACKERS connections (receive buffer 4 KiB) ask for /metrics and never read, for
  NON_READ_S seconds: the scheduler's RSS before, at most during, and 2 s after they close, and
  whether a real scrape in the middle got its answer.

    git worktree add /tmp/base-trust 38fd414
    python3 -m bench.observability.metrics_abuse --baseline /tmp/base-trust

Writes bench/results/metrics-abuse.json and prints a table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from bench.core.common import REPO, say
from bench.core.protoclient import ProtoClient

ATTACKERS = 16
SLOW_S = 20.0
CLIENTS = 4500
NON_READ_S = 8.0
GPU = "GPU-00000000-0000-0000-0000-000000000000"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rss(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _scrape(port: int, timeout: float = 10.0) -> tuple[int | str, float, int]:
    started = time.monotonic()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as r:
            body = r.read()
            return r.status, time.monotonic() - started, len(body)
    except urllib.error.HTTPError as e:
        return e.code, time.monotonic() - started, 0
    except (OSError, urllib.error.URLError) as e:
        return type(e).__name__, time.monotonic() - started, 0


def _slow_sender(port: int, stop: threading.Event) -> None:
    request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * 4000 + b"\r\n\r\n"
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                for i in range(len(request)):
                    s.sendall(request[i:i + 1])
                    if stop.wait(0.5):
                        return
        except OSError:
            stop.wait(0.05)  # closed by the server (408, dropped): open another


def _slow_phase(port: int) -> dict:
    stop = threading.Event()
    threads = [threading.Thread(target=_slow_sender, args=(port, stop), daemon=True)
               for _ in range(ATTACKERS)]
    for t in threads:
        t.start()
    time.sleep(1.0)  # they hold their connections
    results, end = [], time.monotonic() + SLOW_S
    while time.monotonic() < end:
        results.append(_scrape(port))
        time.sleep(0.5)
    stop.set()
    for t in threads:
        t.join(5)
    ok = [r for r in results if r[0] == 200]
    lat = sorted(r[1] * 1000 for r in ok)
    return {"scrapes": len(results), "ok": len(ok),
            "statuses": sorted({str(r[0]) for r in results}),
            "latency_ms_p50": lat[len(lat) // 2] if lat else None,
            "latency_ms_max": lat[-1] if lat else None}


def _non_readers(port: int, pid: int) -> dict:
    status, took, size = _scrape(port, timeout=60)  # warm: one full answer first
    time.sleep(1.0)
    before = _rss(pid)
    peers = []
    for _ in range(ATTACKERS):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", port))
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        peers.append(s)
    peak, real, end = before, None, time.monotonic() + NON_READ_S
    while time.monotonic() < end:
        peak = max(peak, _rss(pid))
        if real is None and time.monotonic() > end - NON_READ_S / 2:
            real = _scrape(port, timeout=30)
        time.sleep(0.2)
    for s in peers:
        s.close()
    time.sleep(2.0)
    return {"answer_bytes": size, "answer_s": round(took, 3), "rss_mb_before": round(before, 1),
            "rss_mb_peak": round(peak, 1), "rss_mb_after": round(_rss(pid), 1),
            "real_scrape": {"status": real[0], "s": round(real[1], 3), "bytes": real[2]}}


def run_tree(tree: Path) -> dict:
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="xpm-") as d:
        sock = Path(d) / "s.sock"
        proc = subprocess.Popen(
            [sys.executable, "-m", "xpushare.scheduler", "--socket", str(sock), "--no-nvml",
             "--mode", "serial", "--tq", "30", "--gpu-memory", "16GiB", "--metrics-port",
             str(port), "--metrics-address", "127.0.0.1", "--max-connections-per-uid", "0"],
            env=dict(os.environ, PYTHONPATH=str(tree / "src")), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        clients = []
        try:
            while not sock.exists():
                time.sleep(0.02)
            say(tree.name, "slow requests")
            slow = _slow_phase(port)
            say(tree.name, f"registering {CLIENTS} clients")
            for _ in range(CLIENTS):
                c = ProtoClient(sock)
                c.attach(GPU)
                clients.append(c)
            say(tree.name, "peers that do not read")
            non_read = _non_readers(port, proc.pid)
        finally:
            for c in clients:
                c.close()
            proc.terminate()
            proc.wait(10)
    commit = subprocess.run(["git", "-C", str(tree), "describe", "--always", "--dirty"],
                            capture_output=True, text=True).stdout.strip()
    return {"tree": str(tree), "commit": commit, "slow": slow, "non_readers": non_read}


def table(base: dict, this: dict) -> str:
    rows = [("slow requests (16 conns, 1 byte / 0.5 s, 20 s): scrapes answered 200",
             lambda r: f"{r['slow']['ok']} of {r['slow']['scrapes']} "
                       f"({', '.join(r['slow']['statuses'])})"),
            ("  their latency p50 / max", lambda r: f"{r['slow']['latency_ms_p50'] or 0:.0f} / "
                                                    f"{r['slow']['latency_ms_max'] or 0:.0f} ms"),
            ("answer size (4500 clients), one scrape alone",
             lambda r: f"{r['non_readers']['answer_bytes'] / 1e6:.1f} MB in "
                       f"{r['non_readers']['answer_s']:.2f} s"),
            ("16 peers that never read it: scheduler RSS before / peak / 2 s after",
             lambda r: f"{r['non_readers']['rss_mb_before']:.0f} / "
                       f"{r['non_readers']['rss_mb_peak']:.0f} / "
                       f"{r['non_readers']['rss_mb_after']:.0f} MB"),
            ("  a real scrape meanwhile", lambda r: f"{r['non_readers']['real_scrape']['status']} "
                                                    f"in {r['non_readers']['real_scrape']['s']:.2f} s")]
    out = [f"| measured | baseline {base['commit']} | this tree {this['commit']} |", "|---|---|---|"]
    out += [f"| {name} | {fmt(base)} | {fmt(this)} |" for name, fmt in rows]
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", type=Path, required=True, help="a worktree of the baseline commit")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "metrics-abuse.json")
    args = p.parse_args()
    started = time.time()
    base, this = run_tree(args.baseline.resolve()), run_tree(REPO)
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores",
              "python": platform.python_version(), "took_s": round(time.time() - started),
              "params": {"attackers": ATTACKERS, "slow_s": SLOW_S, "clients": CLIENTS,
                         "non_read_s": NON_READ_S},
              "baseline": base, "this": this}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(table(base, this))
    return 0


if __name__ == "__main__":
    sys.exit(main())
