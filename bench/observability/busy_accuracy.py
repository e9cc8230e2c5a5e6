#!/usr/bin/env python3
"""Busy accuracy: the exporter's per-client GPU busy time against the GPU time the client's kernels
take natively, a reference the library cannot see.

First, without the library, bench/observability/busy_workload.py --reference measures how long one kernel of each
kind takes on the GPU alone (2000 queued back to back behind a spin kernel: no launch gaps, no host
in it). Then, for each case (alone: one client; serial: two clients, mode serial, 1 s quantum; auto:
two clients running together) and each workload (burst30, burst8: bursts of memory-bound adds with
sleeps between; saturate: the adds back to back; tiny: launch-bound tiny kernels), processes under
libnvshare.so count the kernels they run. A client's true GPU time is its kernel count times the
reference; the exporter's xpushare_client_gpu_busy_seconds_total is read after the warm-up and after
the work (and the library's last report, about a second later). The goal: every client within 5%
(0.95 to 1.05), and the clients of the GPU never claim more than the wall time (the scheduler logs
`claimed ... more than the wall time` when one does: counted per case).

    python3 -m bench.observability.busy_accuracy [--quick] [--seconds 4] [--cases alone,serial,auto] [--json F]

The workloads need PyTorch: the first of $BUSY_PYTHON, this Python, python3,
/opt/torch/.venv/bin/python3 that imports torch runs them. GPU safety: 768 MiB per process.
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

BENCH = Path(__file__).resolve().parents[1]  # bench/

from bench.core.common import torch_python  # noqa: E402
from bench.core.render import error_of, error_row, f, finish, goal_row, num  # noqa: E402

NAME = "busy_accuracy"
TITLE = "Per-client GPU busy time: exporter vs the kernels' native GPU time"
SHARE, MIN_S, GPU = 40, 60, True
DEFAULT = False  # run it with --only busy_accuracy, or alone
RERUN = "python3 -m bench.observability.busy_accuracy"
GOAL_LOW, GOAL_HIGH = 0.95, 1.05
WORKLOADS = ("burst30", "burst8", "saturate", "tiny")
CASES = {  # name: (scheduler mode, its quantum in s, clients of each workload)
    "alone": ("auto", 30.0, 1),
    "serial": ("serial", 1.0, 2),
    "auto": ("auto", 30.0, 2),
}
METRIC = "xpushare_client_gpu_busy_seconds_total"
OVERCLAIM = "more than the wall time"
SETTLE_S = 2.5  # the library reports busy time at most once a second: wait this long for the last
WORKLOAD = BENCH / "observability" / "busy_workload.py"


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


def judge(true_s: float | None, exporter_s: float | None) -> dict:
    """ratio = exporter / true GPU time, and whether it meets the goal (None when it cannot be told)."""
    if not true_s or exporter_s is None:
        return {"ratio": None, "met": None}
    ratio = exporter_s / true_s
    return {"ratio": ratio, "met": GOAL_LOW <= ratio <= GOAL_HIGH}


def true_seconds(result: dict, reference: dict) -> float | None:
    """A workload's kernels times the native GPU time of one of its kind."""
    per_kernel_ms = num(reference.get(f"{result.get('kind')}_ms"))
    kernels = num(result.get("kernels"))
    return None if per_kernel_ms is None or kernels is None else kernels * per_kernel_ms / 1e3


def overclaims(log: str) -> int:
    return sum(OVERCLAIM in line for line in log.splitlines())


def plan(quick: bool, seconds: float | None, cases: list[str] | None = None) -> dict:
    return {"seconds": seconds if seconds else (2.5 if quick else 4.0),
            "workloads": list(WORKLOADS), "cases": cases or list(CASES)}


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
    r = subprocess.run([sys.executable, "-m", "xpushare.cli.ctl", "--socket", str(sock), "top", "--once",
                        "--width", "120", "--interval", "2"], capture_output=True, text=True,
                       timeout=60, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    return r.stdout if r.returncode == 0 else f"(nvsharectl top failed: {r.stderr.strip()})"


class Workload:
    def __init__(self, name: str, pattern: str, python: str, env: dict, seconds: float, tmp: Path,
                 script: Path = WORKLOAD):
        self.name, self.pattern = name, pattern
        self.files = {k: tmp / f"{name}.{k}" for k in ("warm", "go", "ready", "done")}
        for path in self.files.values():
            path.unlink(missing_ok=True)
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


def measure_group(names: dict[str, str], python: str, env: dict, sched, port: int, seconds: float,
                  tmp: Path, keep: dict, reference: dict, script: Path = WORKLOAD,
                  nvml=None) -> dict:
    """Run the workloads `names` (row name -> pattern) at once, under `env` (the library);
    returns row name -> row, and "wall" -> the busy claimed by them all over the wall time they ran.
    keep: the first scrape and top frame taken go there ("scrape", "top")."""
    work = [Workload(n, p, python, env, seconds, tmp, script) for n, p in names.items()]
    rows: dict = {}
    try:
        for w in work:
            _wait_file(w.files["warm"], w.proc, 180, w.name)
        time.sleep(SETTLE_S)  # the warm-up's busy time is reported
        text = scrape(port)
        for w in work:
            w.before = busy_of(text, w.proc.pid) or 0.0
        t0, real0 = time.monotonic(), time.time()
        for w in work:
            w.files["go"].touch()
        if "top" not in keep:
            time.sleep(min(2.0, seconds / 3))
            keep["top"] = top_frame(sched.socket)
        for w in work:
            _wait_file(w.files["ready"], w.proc, 60 + 4 * seconds, w.name)
        time.sleep(SETTLE_S)  # the last bursts' busy time is reported
        text = scrape(port)
        wall, real1 = time.monotonic() - t0, time.time()
        keep.setdefault("scrape", text)
        for w in work:
            w.after = busy_of(text, w.proc.pid)
            w.result = json.loads(w.files["ready"].read_text())
    finally:
        tails = {w.name: w.finish() for w in work}
    claimed = 0.0
    for w in work:
        exporter = None if w.after is None else w.after - w.before
        claimed += exporter or 0.0
        true_s = true_seconds(w.result, reference)
        nvml_s = nvml.busy(w.proc.pid, real0, real1) if nvml else None
        rows[w.name] = {"pattern": w.pattern, "kernels": w.result.get("kernels"), "true_s": true_s,
                        "exporter_s": exporter, "wall_s": w.result.get("wall_s"),
                        "nvml_s": nvml_s, "nvml_ratio": nvml_s / true_s if nvml_s and true_s else None,
                        **judge(true_s, exporter)}
        if w.proc.returncode:
            rows[w.name]["error"] = f"exited with {w.proc.returncode}: {tails[w.name]}"
    rows["wall"] = {"claimed_s": claimed, "wall_s": wall, "ratio": claimed / wall if wall else None}
    return rows


def native_reference(python: str) -> dict:
    """Per-kernel GPU times (and the bursts' own event brackets), measured without the library."""
    from bench.core.common import harness

    r = subprocess.run([python, str(WORKLOAD), "--reference", "--brackets"], capture_output=True,
                       text=True, env=harness.native_env(), timeout=600)
    if r.returncode:
        raise RuntimeError(f"the native reference failed: {r.stdout[-1000:]}{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def measure(quick: bool = False, seconds: float | None = None,
            cases: list[str] | None = None) -> dict:
    from bench.core.common import harness, require_safe_gpu

    require_safe_gpu()
    p = plan(quick, seconds, cases)
    python = torch_python()
    reference = native_reference(python)
    lib = harness.library_path()
    keep: dict = {}
    results: dict = {}
    try:
        from bench.observability.nvml_process_busy import ProcessBusy

        nvml = ProcessBusy()
        nvml.start()
    except Exception as e:  # noqa: BLE001 - the cross-check is optional
        keep["nvml_error"], nvml = str(e), None
    for case in p["cases"]:
        mode, tq, clients = CASES[case]
        port = free_port()
        debug = ("--debug",) if os.environ.get("BUSY_SCHEDULER_LOG") else ()
        with harness.Scheduler(mode=mode, tq=tq, extra_args=(
                "--metrics-port", str(port), "--metrics-address", "127.0.0.1",
                "--metrics-max-age", "0", *debug)) as sched:
            env = harness.library_env(lib, sched.socket)
            rows: dict = {}
            for pattern in p["workloads"]:
                names = {f"{pattern}#{i}" if clients > 1 else pattern: pattern
                         for i in range(1, clients + 1)}
                group = measure_group(names, python, env, sched, port, p["seconds"],
                                      sched.workdir, keep, reference, nvml=nvml)
                group[pattern + ":wall"] = group.pop("wall")
                rows.update(group)
            rows["overclaims"] = overclaims(sched.log())
            if debug:  # BUSY_SCHEDULER_LOG=DIR: the scheduler's every message, per case
                Path(os.environ["BUSY_SCHEDULER_LOG"], f"{case}.log").write_text(sched.log())
        results[case] = rows
    if nvml:
        nvml.stop()
        keep["nvml_error"] = nvml.error
    return {"parameters": {**p, "python": python, "goal": [GOAL_LOW, GOAL_HIGH]},
            "reference": reference, "cases": results, "scrape": keep.get("scrape", ""),
            "top_frame": keep.get("top", ""), "nvml_error": keep.get("nvml_error")}


def run(quick: bool = False, time_left: float | None = None) -> dict:
    result = measure(quick=quick or (time_left is not None and time_left < 150))
    result["rerun"] = RERUN + (" --quick" if quick else "")
    return result


# ----------------------------------------------------------------------------- its report

def client_rows(section: dict):
    """(case, row name, row) of every client row."""
    for case, rows in (section.get("cases") or {}).items():
        for name, row in rows.items():
            if isinstance(row, dict) and "exporter_s" in row:
                yield case, name, row


def goals(section: dict) -> list[str]:
    if error_of(section):
        return [error_row("per-client GPU busy time", error_of(section))]
    rows = []
    for case, name, row in client_rows(section):
        rows.append(goal_row(f"GPU busy time, {name}, {case}", f"{f(row.get('exporter_s'), 3)} s "
                             "(exporter)", f"{f(row.get('true_s'), 3)} s (kernels x native time)",
                             f"**{f(num(row.get('ratio')), 3)}x**", f"{GOAL_LOW}–{GOAL_HIGH}x",
                             row.get("met")))
    return rows


def section(s: dict) -> str:
    ref = s.get("reference") or {}
    lines = [f"Native GPU time of one kernel: add of 256 MiB {f(num(ref.get('add_ms')), 4)} ms, "
             f"tiny {f(num(ref.get('tiny_ms')), 4)} ms (2000 queued back to back).", ""]
    for name in ("burst30", "burst8"):
        b = ref.get(name) or {}
        if b:
            lines.append(f"- {name} natively, in events around each burst: "
                         f"{f(num(b.get('burst_ms')), 3)} ms a burst, first kernel "
                         f"{f(num(b.get('first_kernel_ms')), 4)} ms, the others "
                         f"{f(num(b.get('other_kernels_ms')), 4)} ms")
    lines += ["", "| case | client | kernels | true GPU s | exporter s | **ratio** | within 5% "
              "| NVML per-process s | NVML ratio |", "|---|---|---:|---:|---:|---:|---|---:|---:|"]
    for case, name, row in client_rows(s):
        met = row.get("met")
        lines.append(f"| {case} | {name} | {row.get('kernels', '?')} | {f(row.get('true_s'), 3)} | "
                     f"{f(row.get('exporter_s'), 3)} | **{f(num(row.get('ratio')), 3)}** | "
                     f"{'yes' if met else ('no' if met is False else '?')} | "
                     f"{f(row.get('nvml_s'), 3)} | {f(row.get('nvml_ratio'), 3)} |")
    lines += ["", "| case | busy claimed / wall time, per workload | `more than the wall time` lines |",
              "|---|---|---:|"]
    for case, rows in (s.get("cases") or {}).items():
        walls = ", ".join(f"{k.split(':')[0]} {f(num(v.get('ratio')), 3)}"
                          for k, v in rows.items() if k.endswith(":wall"))
        lines.append(f"| {case} | {walls} | {rows.get('overclaims', '?')} |")
    out = "\n".join(lines) + "\n"
    if s.get("top_frame"):
        out += "\n`nvsharectl top --once` while the workloads ran:\n\n```\n" + s["top_frame"].rstrip() + "\n```\n"
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="2.5 s of work per workload (default 4)")
    p.add_argument("--seconds", type=float, help="seconds of work per workload")
    p.add_argument("--cases", default=",".join(CASES), help="of " + ", ".join(CASES))
    p.add_argument("--json", type=Path, help="write the result here")
    args = p.parse_args(argv)
    if args.seconds is not None and not 0.5 <= args.seconds <= 120:
        p.error("--seconds must be from 0.5 to 120")
    cases = [c for c in args.cases.split(",") if c]
    if not cases or any(c not in CASES for c in cases):
        p.error(f"--cases: a comma-separated list of {', '.join(CASES)}")
    t0 = time.monotonic()
    result = measure(args.quick, args.seconds, cases)
    finish(result, t0, RERUN, args.quick, section, args.json)
    ok = all(r.get("met") for _, _, r in client_rows(result))
    return 0 if ok and not any(r.get("overclaims") for r in result["cases"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
