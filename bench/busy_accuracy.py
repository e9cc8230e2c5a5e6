#!/usr/bin/env python3
"""Busy accuracy: the exporter's per-client GPU busy time against what the application times itself.

A scheduler with --metrics-port on a free local port; for each workload of bench/busy_workload.py
(saturate: back-to-back matrix products; bursts: the same with host pauses as long as each burst;
tiny: bursts of thousands of tiny kernels), one process under libnvshare.so that times each burst
with CUDA events. After its warm-up the benchmark reads the client's
xpushare_client_gpu_busy_seconds_total from /metrics; once its bursts are done (and the library's
last report is in, at most about a second later), again. The ratio of the difference to the
program's own event total is the accuracy; the goal is within 5% (0.95 to 1.05). One raw scrape and
one `nvsharectl top --once` frame taken while the workloads run are kept in the result.

    python3 bench/busy_accuracy.py [--quick] [--seconds 8] [--together] [--json out.json]

--together runs the workloads at once (mode `off`: all concurrent), instead of one after another.
The workloads need PyTorch: the first of $BUSY_PYTHON, this Python, python3,
/opt/torch/.venv/bin/python3 that imports torch runs them. GPU safety: each allocates under 256 MiB.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

from render import error_of, error_row, f, finish, goal_row, num  # noqa: E402

NAME = "busy_accuracy"
TITLE = "Per-client GPU busy time: exporter vs the application's own CUDA events"
SHARE, MIN_S, GPU = 40, 30, True
DEFAULT = False  # run it with --only busy_accuracy, or alone
RERUN = "python3 bench/busy_accuracy.py"
GOAL_LOW, GOAL_HIGH = 0.95, 1.05
WORKLOADS = ("saturate", "bursts", "tiny")
METRIC = "xpushare_client_gpu_busy_seconds_total"
SETTLE_S = 2.5  # the library reports busy time at most once a second: wait this long for the last
TORCH_PYTHONS = ("/opt/torch/.venv/bin/python3",)
WORKLOAD = BENCH / "busy_workload.py"


# ----------------------------------------------------------------------------- pure parts

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_SAMPLE = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def busy_of(scrape: str, pid: int) -> float | None:
    """The client's busy seconds in a Prometheus text scrape, summed over its GPUs and connections
    (None when the scrape has no series for that pid)."""
    total, found = 0.0, False
    for line in scrape.splitlines():
        m = _SAMPLE.match(line)
        if not m or m["name"] != METRIC:
            continue
        labels = dict(_LABEL.findall(m["labels"]))
        if labels.get("pid") == str(pid):
            total += float(m["value"])
            found = True
    return total if found else None


def judge(events_s: float | None, exporter_s: float | None) -> dict:
    """ratio = exporter / events, and whether it meets the goal (None when it cannot be told)."""
    if not events_s or exporter_s is None:
        return {"ratio": None, "met": None}
    ratio = exporter_s / events_s
    return {"ratio": ratio, "met": GOAL_LOW <= ratio <= GOAL_HIGH}


def torch_python(candidates: list[str] | None = None) -> str:
    """The first candidate Python that imports torch (RuntimeError when none does)."""
    if candidates is None:
        candidates = [os.environ.get("BUSY_PYTHON", ""), sys.executable, "python3", *TORCH_PYTHONS]
    tried = []
    for exe in filter(None, dict.fromkeys(candidates)):
        try:
            r = subprocess.run([exe, "-c", "import torch"], capture_output=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            tried.append(exe)
            continue
        if r.returncode == 0:
            return exe
        tried.append(exe)
    raise RuntimeError(f"no Python that imports torch among {', '.join(tried) or 'none'} "
                       "(set BUSY_PYTHON)")


def plan(quick: bool, seconds: float | None) -> dict:
    return {"seconds": seconds if seconds else (4.0 if quick else 8.0), "workloads": list(WORKLOADS)}


# ----------------------------------------------------------------------------- the measurement

def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


def _wait_file(path: Path, proc: subprocess.Popen, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"the {what} workload exited with {proc.returncode} before {path.name}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the {what} workload did not write {path.name} within {timeout:.0f}s")
        time.sleep(0.05)


def top_frame(sock: Path) -> str:
    r = subprocess.run([sys.executable, "-m", "xpushare.ctl", "--socket", str(sock), "top", "--once",
                        "--width", "120", "--interval", "2"], capture_output=True, text=True,
                       timeout=60, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    return r.stdout if r.returncode == 0 else f"(nvsharectl top failed: {r.stderr.strip()})"


class Workload:
    def __init__(self, pattern: str, python: str, env: dict, seconds: float, tmp: Path,
                 script: Path = WORKLOAD):
        self.pattern = pattern
        self.files = {k: tmp / f"{pattern}.{k}" for k in ("warm", "go", "ready", "done")}
        argv = [python, str(script), "--pattern", pattern, "--seconds",
                str(seconds), *(x for k, p in self.files.items() for x in (f"--{k}", str(p)))]
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self.before = self.after = None
        self.result: dict = {}

    def finish(self) -> str:
        self.files["done"].touch()
        try:
            out, _ = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        return out[-2000:] if out else ""


def measure_group(patterns: list[str], python: str, env: dict, sched, port: int, seconds: float,
                  tmp: Path, keep: dict, script: Path = WORKLOAD) -> dict:
    """Run `patterns` together (processes with `env`: under the library); returns pattern -> row.
    keep: the first scrape and top frame taken go there ("scrape", "top")."""
    work = [Workload(p, python, env, seconds, tmp, script) for p in patterns]
    rows = {}
    try:
        for w in work:
            _wait_file(w.files["warm"], w.proc, 180, w.pattern)
        time.sleep(SETTLE_S)  # the warm-up's busy time is reported
        text = scrape(port)
        for w in work:
            w.before = busy_of(text, w.proc.pid) or 0.0
            w.files["go"].touch()
        if "top" not in keep:
            time.sleep(min(2.0, seconds / 3))
            keep["top"] = top_frame(sched.socket)
        for w in work:
            _wait_file(w.files["ready"], w.proc, 60 + 4 * seconds, w.pattern)
        time.sleep(SETTLE_S)  # the last bursts' busy time is reported
        text = scrape(port)
        keep.setdefault("scrape", text)
        for w in work:
            w.after = busy_of(text, w.proc.pid)
            w.result = json.loads(w.files["ready"].read_text())
    finally:
        tails = {w.pattern: w.finish() for w in work}
    for w in work:
        exporter = None if w.after is None else w.after - w.before
        rows[w.pattern] = {"events_s": w.result.get("events_s"), "exporter_s": exporter,
                           "bursts": w.result.get("bursts"), "per_burst": w.result.get("per_burst"),
                           "wall_s": w.result.get("wall_s"),
                           **judge(w.result.get("events_s"), exporter)}
        if w.proc.returncode:
            rows[w.pattern]["error"] = f"exited with {w.proc.returncode}: {tails[w.pattern]}"
    return rows


def measure(quick: bool = False, seconds: float | None = None, together: bool = False) -> dict:
    from common import harness, require_safe_gpu

    require_safe_gpu()
    p = plan(quick, seconds)
    python = torch_python()
    lib = harness.library_path()
    port = free_port()
    keep: dict = {}
    rows: dict = {}
    with harness.Scheduler(mode="off", extra_args=("--metrics-port", str(port),
                                                   "--metrics-address", "127.0.0.1")) as sched:
        tmp = sched.workdir
        groups = [p["workloads"]] if together else [[w] for w in p["workloads"]]
        env = harness.library_env(lib, sched.socket)
        for group in groups:
            rows.update(measure_group(group, python, env, sched, port, p["seconds"], tmp, keep))
    return {"parameters": {**p, "together": together, "python": python, "scheduler_mode": "off",
                           "goal": [GOAL_LOW, GOAL_HIGH]},
            "workloads": rows, "scrape": keep.get("scrape", ""), "top_frame": keep.get("top", "")}


def run(quick: bool = False, time_left: float | None = None) -> dict:
    result = measure(quick=quick or (time_left is not None and time_left < 90))
    result["rerun"] = RERUN + (" --quick" if quick else "")
    return result


# ----------------------------------------------------------------------------- its report

def goals(section: dict) -> list[str]:
    if error_of(section):
        return [error_row("per-client GPU busy time", error_of(section))]
    rows = []
    for name, row in (section.get("workloads") or {}).items():
        rows.append(goal_row(f"GPU busy time, {name}", f"{f(row.get('exporter_s'), 3)} s (exporter)",
                             f"{f(row.get('events_s'), 3)} s (CUDA events)",
                             f"**{f(num(row.get('ratio')), 3)}x**", f"{GOAL_LOW}–{GOAL_HIGH}x",
                             row.get("met")))
    return rows


def section(s: dict) -> str:
    lines = ["| workload | CUDA events s | exporter s | **ratio** | bursts | within 5% |",
             "|---|---:|---:|---:|---:|---|"]
    for name, row in (s.get("workloads") or {}).items():
        met = row.get("met")
        lines.append(f"| {name} | {f(row.get('events_s'), 3)} | {f(row.get('exporter_s'), 3)} | "
                     f"**{f(num(row.get('ratio')), 3)}** | {row.get('bursts', '?')} | "
                     f"{'yes' if met else ('no' if met is False else '?')} |")
    out = "\n".join(lines) + (
        "\n\nEach workload (bench/busy_workload.py) times its bursts with CUDA events; the exporter's "
        f"`{METRIC}` is read after its warm-up and after its bursts (the library reports about once a "
        "second). saturate: back-to-back matrix products; bursts: the same with a host pause as long "
        "as each burst; tiny: bursts of thousands of tiny kernels.\n")
    if s.get("top_frame"):
        out += "\n`nvsharectl top --once` while the workloads ran:\n\n```\n" + s["top_frame"].rstrip() + "\n```\n"
    if s.get("scrape"):
        busy = "\n".join(ln for ln in s["scrape"].splitlines() if METRIC in ln)
        out += "\nThe busy series of one scrape:\n\n```\n" + busy + "\n```\n"
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="4 s of bursts per workload (default 8)")
    p.add_argument("--seconds", type=float, help="seconds of timed GPU work per workload")
    p.add_argument("--together", action="store_true", help="run the workloads at the same time")
    p.add_argument("--json", type=Path, help="write the result here")
    args = p.parse_args(argv)
    if args.seconds is not None and not 0.5 <= args.seconds <= 120:
        p.error("--seconds must be from 0.5 to 120")
    t0 = time.monotonic()
    result = measure(args.quick, args.seconds, args.together)
    finish(result, t0, RERUN, args.quick, section, args.json)
    return 0 if all(r.get("met") for r in result["workloads"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
